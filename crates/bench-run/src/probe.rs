//! One measured turn (`bench probe`): TTFT, e2e, TPOT, chunks and usage of a single request.

use std::time::Duration;

use bench_runner::{OutputCapField, ResponseMode};
use bench_transport::{
    ChatMessage, ChatRequest, Client, ClientConfig, Endpoint, ErrorKind, RequestOptions, Role,
    TurnOutcome,
};
use serde::Serialize;

use crate::RunError;

/// What to send. `Debug` shows the headers' names, never their values.
#[derive(Clone)]
pub struct Probe {
    /// The server.
    pub target: ProbeTarget,
    /// Model name; by default the first `GET /v1/models` lists.
    pub model: Option<String>,
    /// The user message.
    pub prompt: String,
    /// Output tokens, pinned.
    pub max_tokens: u32,
    /// The field that carries them.
    pub output_cap_field: OutputCapField,
    /// Send `ignore_eos: true`.
    pub ignore_eos: bool,
    /// Streamed or whole.
    pub response: ResponseMode,
    /// Request timeout.
    pub timeout: Duration,
    /// Extra headers (name, value).
    pub headers: Vec<(String, String)>,
    /// Headers whose values are secrets whatever their names (`--secret-header`; see
    /// [`crate::secrets`]): with the environment's API keys and the secret-named headers,
    /// scrubbed from every error.
    pub secret_headers: Vec<String>,
    /// JSON merged into the body last.
    pub extra_body: serde_json::Map<String, serde_json::Value>,
    /// TLS trust and client certificate for an `https://` URL.
    pub tls: bench_transport::TlsOptions,
    /// The API to call.
    pub endpoint: Endpoint,
}

impl std::fmt::Debug for Probe {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Probe")
            .field("target", &self.target)
            .field("model", &self.model)
            .field("max_tokens", &self.max_tokens)
            .field("timeout", &self.timeout)
            .field(
                "header_names",
                &self.headers.iter().map(|(k, _)| k).collect::<Vec<_>>(),
            )
            .field("secret_headers", &self.secret_headers)
            .field("endpoint", &self.endpoint)
            .finish_non_exhaustive()
    }
}

/// Where a probe's turn goes.
#[derive(Debug, Clone)]
pub enum ProbeTarget {
    /// A server at this base URL.
    Url(String),
    /// The embedded simulator with this configuration, started on its address for the one
    /// turn, then stopped.
    Embedded(Box<bench_sim::SimConfig>),
}

fn transport_error(e: bench_transport::Error) -> RunError {
    match e.kind() {
        ErrorKind::InvalidRequest => RunError::Invalid(e.to_string()),
        _ => RunError::Failed(e.to_string()),
    }
}

/// The `bench probe --json` object. Keys are stable; times in ms, `null` when not measured.
#[derive(Debug, Serialize)]
pub struct ProbeReport {
    /// Where the turn went.
    pub base_url: String,
    /// True when the embedded simulator served it.
    pub embedded: bool,
    /// Model name used.
    pub model: String,
    /// Whether the response was streamed.
    pub stream: bool,
    /// The API called.
    pub endpoint: Endpoint,
    /// Time to first output chunk (reasoning or answer).
    pub ttft_ms: Option<f64>,
    /// Time to the first answer chunk (reasoning excluded).
    pub ttfa_ms: Option<f64>,
    /// Output chunks carrying reasoning.
    pub reasoning_chunks: u32,
    /// Output chunks carrying answer text.
    pub answer_chunks: u32,
    /// Reasoning tokens, as the server's usage reports them.
    pub reasoning_tokens: Option<u64>,
    /// Request sent → end of body.
    pub e2e_ms: f64,
    /// `(e2e − ttft) / (completion_tokens − 1)`.
    pub tpot_ms: Option<f64>,
    /// Output-bearing chunks received.
    pub chunks: usize,
    /// Largest gap between consecutive output chunks.
    pub max_chunk_gap_ms: Option<f64>,
    /// Server-reported prompt tokens.
    pub prompt_tokens: Option<u64>,
    /// Server-reported completion tokens.
    pub completion_tokens: Option<u64>,
    /// Server-reported prefix-cache hits.
    pub cached_tokens: Option<u64>,
    /// Finish reason of choice 0.
    pub finish_reason: Option<String>,
    /// Requests re-sent because a pooled connection had been closed.
    pub redials: u32,
    /// TCP connect time of the turn's connection (opened for it: inside TTFT and e2e).
    pub connect_ms: Option<f64>,
    /// TLS handshake time of the turn's connection (`null` over plain HTTP).
    pub tls_ms: Option<f64>,
    /// Characters of generated content.
    pub output_chars: usize,
}

fn ms(d: Duration) -> f64 {
    (d.as_secs_f64() * 1e6).round() / 1e3
}

impl ProbeReport {
    /// The report of one turn.
    pub fn new(
        base_url: String,
        embedded: bool,
        model: String,
        endpoint: Endpoint,
        o: &TurnOutcome,
    ) -> Self {
        let u = o.usage.unwrap_or_default();
        ProbeReport {
            base_url,
            embedded,
            model,
            stream: o.streamed,
            endpoint,
            ttft_ms: o.ttft.map(ms),
            ttfa_ms: o.ttfa.map(ms),
            reasoning_chunks: o.reasoning_chunks,
            answer_chunks: o.answer_chunks,
            reasoning_tokens: u.reasoning_tokens,
            e2e_ms: ms(o.e2e),
            tpot_ms: o.tpot().map(ms),
            chunks: o.chunk_offsets.len(),
            max_chunk_gap_ms: o.chunk_gaps().max().map(ms),
            prompt_tokens: u.prompt_tokens,
            completion_tokens: u.completion_tokens,
            cached_tokens: u.cached_tokens,
            finish_reason: o.finish_reason.clone(),
            redials: o.redials,
            connect_ms: o.connect.map(ms),
            tls_ms: o.tls.map(ms),
            output_chars: o.content.chars().count(),
        }
    }

    /// The human-readable report.
    pub fn text(&self) -> String {
        let f = |v: Option<f64>| v.map_or("n/a".to_string(), |v| format!("{v:.1} ms"));
        let n = |v: Option<u64>| v.map_or("n/a".to_string(), |v| v.to_string());
        format!(
            "bench probe → {} (model {}{})\n  ttft     {}\n  e2e      {:.1} ms\n  tpot     {}\n  chunks   {} (max gap {})\n  tokens   prompt {} · completion {} · cached {}\n  finish   {}\n",
            self.base_url,
            self.model,
            if self.embedded {
                ", embedded simulator"
            } else {
                ""
            },
            f(self.ttft_ms),
            self.e2e_ms,
            f(self.tpot_ms),
            self.chunks,
            f(self.max_chunk_gap_ms),
            n(self.prompt_tokens),
            n(self.completion_tokens),
            n(self.cached_tokens),
            self.finish_reason.as_deref().unwrap_or("n/a"),
        ) + &self.reasoning_line()
            + &self.connection_line()
    }

    /// `  ttfa     12.0 ms (5 reasoning chunks first, 5 reasoning tokens)` when the model
    /// reasoned.
    fn reasoning_line(&self) -> String {
        if self.reasoning_chunks == 0 {
            return String::new();
        }
        format!(
            "  ttfa     {} ({} reasoning chunks first, {} reasoning tokens)\n",
            self.ttfa_ms
                .map_or("n/a".to_string(), |v| format!("{v:.1} ms")),
            self.reasoning_chunks,
            self.reasoning_tokens
                .map_or("n/a".to_string(), |v| v.to_string())
        )
    }

    /// `  connect  0.1 ms · tls 2.4 ms` for a turn that opened its connection.
    fn connection_line(&self) -> String {
        match (self.connect_ms, self.tls_ms) {
            (Some(c), Some(t)) => format!("  connect  {c:.1} ms · tls handshake {t:.1} ms\n"),
            (Some(c), None) => format!("  connect  {c:.1} ms\n"),
            _ => String::new(),
        }
    }
}

/// Sends `p`'s one turn and reports it.
pub async fn probe(p: &Probe) -> Result<ProbeReport, RunError> {
    let mut secrets =
        crate::secrets::run_secrets(&p.headers, &p.secret_headers, &Default::default());
    if let ProbeTarget::Url(url) = &p.target {
        secrets.add_url_credentials(url);
    }
    let r = match &p.target {
        ProbeTarget::Url(url) => probe_at(p, url, false, &secrets).await,
        ProbeTarget::Embedded(sim) => {
            let server = bench_sim::SimServer::start((**sim).clone())
                .await
                .map_err(|e| RunError::Invalid(e.to_string()))?;
            let r = probe_at(p, &server.base_url(), true, &secrets).await;
            server.shutdown().await;
            r
        }
    };
    r.map_err(|e| e.scrub(&secrets))
}

async fn probe_at(
    p: &Probe,
    base_url: &str,
    embedded: bool,
    secrets: &crate::secrets::Secrets,
) -> Result<ProbeReport, RunError> {
    let mut cfg = ClientConfig::new(base_url);
    cfg.timeout = p.timeout;
    cfg.headers = p.headers.clone();
    cfg.secrets = secrets.clone();
    if !embedded {
        cfg.tls = p.tls.clone();
    }
    // The model is listed on a connection of its own: the measured turn opens a fresh one,
    // as a user's first request does, and reports its connect and TLS times.
    let client = Client::new(cfg.clone()).map_err(transport_error)?;
    let model = match &p.model {
        Some(m) => m.clone(),
        None => first_model(&Client::new(cfg).map_err(transport_error)?).await?,
    };
    let mut req = ChatRequest::new(
        model.clone(),
        vec![ChatMessage::new(Role::User, p.prompt.clone())],
    );
    req.pin_output(
        p.max_tokens,
        p.output_cap_field == OutputCapField::MaxTokens,
    );
    if !p.ignore_eos {
        req.ignore_eos = None;
    }
    if p.response == ResponseMode::Whole {
        req.stream = false;
        req.stream_options = None;
    }
    req.extra = p.extra_body.clone();
    let opts = RequestOptions {
        endpoint: p.endpoint,
        headers: bench_transport::bodies::endpoint_headers(
            p.endpoint,
            std::env::var("ANTHROPIC_API_KEY").ok(),
        )
        .map_err(transport_error)?,
        ..RequestOptions::default()
    };
    let body = req.to_endpoint_body(p.endpoint).map_err(transport_error)?;
    let outcome = client
        .chat_body(body, req.wants_stream(), &opts)
        .await
        .map_err(transport_error)?;
    Ok(ProbeReport::new(
        client.base_url(),
        embedded,
        model,
        p.endpoint,
        &outcome,
    ))
}

/// The first model id listed by `GET /v1/models`.
async fn first_model(client: &Client) -> Result<String, RunError> {
    let resp = client
        .get("/v1/models", Some(Duration::from_secs(30)))
        .await
        .map_err(|e| RunError::Failed(format!("cannot list models (pass --model): {e}")))?;
    if !resp.status.is_success() {
        return Err(RunError::Failed(format!(
            "GET /v1/models answered HTTP {} (pass --model)",
            resp.status.as_u16()
        )));
    }
    let v: serde_json::Value = serde_json::from_slice(&resp.body).map_err(|e| {
        RunError::Failed(format!(
            "malformed_json: GET /v1/models: {e} (pass --model)"
        ))
    })?;
    v["data"][0]["id"]
        .as_str()
        .map(str::to_owned)
        .ok_or_else(|| RunError::Failed("GET /v1/models listed no model (pass --model)".into()))
}
