//! The `bench` command line: argument types and the commands they run. `main.rs` only parses,
//! builds the runtime and maps errors to exit codes.
//!
//! Commands: `bench sim` (serve the embedded simulator), `bench probe` (measure one turn),
//! `bench plan` (build and summarize a workload plan), `bench import` (convert traces),
//! `bench run` (replay and measure), `bench journeys` (time API operations).

pub mod backend;
pub mod journeys;
pub mod lifecycle;
pub mod output;
pub mod progress;
pub mod resume;
pub mod run;
pub mod scrape;
pub mod status;
pub mod workload;

use std::io::Write;
use std::net::{IpAddr, SocketAddr};
use std::path::PathBuf;
use std::time::Duration;

use bench_sim::{Flavor, LatencyMode, SimConfig, SimServer};
use bench_transport::{
    ChatMessage, ChatRequest, Client, ClientConfig, ErrorKind, RequestOptions, Role, TurnOutcome,
};
use clap::{Args, Parser, Subcommand, ValueEnum};
use serde::Serialize;

/// Benchmark LLM inference servers and agent platforms under realistic agentic load.
#[derive(Debug, Parser)]
#[command(name = "bench", version, about, long_about = None, propagate_version = true)]
pub struct Cli {
    /// The command to run.
    #[command(subcommand)]
    pub command: Command,
}

/// `bench` subcommands.
#[derive(Debug, Subcommand)]
pub enum Command {
    /// Serve the embedded OpenAI-compatible simulator until Ctrl-C.
    ///
    /// Endpoints: POST /v1/chat/completions, GET /v1/models, GET /health, GET /metrics,
    /// POST /flush_cache, POST /reset_prefix_cache. Latency is simulated by a continuous-batching
    /// step loop (default), a fixed TTFT/ITL (--ttft-ms and --itl-ms), or no delay (--instant).
    Sim(SimArgs),
    /// Send one chat turn and print TTFT, e2e, TPOT, chunk count and token usage.
    ///
    /// Without --base-url the embedded simulator is started in-process on a free loopback port.
    /// Exit codes: 0 ok, 1 the request failed (one line: the error kind and detail), 2 bad usage
    /// or input.
    Probe(ProbeArgs),
    /// Replay a workload against a server (or the embedded simulator) and report its metrics.
    ///
    /// Closed loop (default): exactly --concurrency sessions play at once, turn by turn; a
    /// finished session's slot is refilled at once. Open loop (--rate): sessions start on a
    /// Poisson or constant schedule whatever the server's speed (--concurrency then caps them).
    /// Records go to the run directory (run.json, events.jsonl, turns.jsonl, sessions.jsonl,
    /// scrapes.jsonl, result.json), each turn's record before its session's next turn is sent;
    /// `bench run --resume RUN_DIR` finishes a run that crashed or was stopped. Exit codes: 0
    /// ok, 1 more turns failed than --max-error-rate allows (or the run failed), 2 bad usage or
    /// input.
    Run(Box<run::RunCmd>),
    /// Build a workload plan from a dataset and summarize it: sessions, turns, tokens, peak
    /// context, system prompt, tool waits and an estimate of wall time.
    ///
    /// Exit codes: 0 ok, 2 bad input (one line: `FILE:LINE: what is wrong`) or flags.
    Plan(workload::PlanCmd),
    /// Convert traces (lmcache, mooncake, sharegpt, openai-messages, swe-agent) into the native
    /// session format (.jsonl or .jsonl.zst).
    Import(workload::ImportCmd),
    /// Time user journeys (API operations) with latency or throughput runners; report, gate
    /// and compare with a baseline.
    ///
    /// Packs: `openai` (list_models, chat_completion, stream_ttft, stream_complete, interrupt,
    /// metrics_scrape; the embedded simulator without --base-url) and `agent-sessions` (an
    /// agent server's session API); or your own journeys with --file. Exit codes: 0 ok, 1 a
    /// gate, a regression or a setup failed, 2 bad usage or input.
    Journeys(Box<journeys::JourneysCmd>),
    /// Tell what a run is doing from its run directory: stopped and why, phase, process
    /// (running, gone or unknown), crashed, stalled, progress, tokens and time left.
    ///
    /// Reads events.jsonl, turns.jsonl and sessions.jsonl (a torn last line is ignored and
    /// reported); works on a live run, a finished one or one whose process died. Exit codes: 0
    /// ok, 2 the directory is missing or is not a run directory.
    Status(status::StatusCmd),
}

/// Metric vocabulary of the simulator's /metrics.
#[derive(Debug, Clone, Copy, ValueEnum)]
pub enum FlavorArg {
    /// vLLM names (`vllm:...`).
    Vllm,
    /// SGLang names (`sglang:...`).
    Sglang,
}

/// Simulator model flags (shared by `bench sim` and the embedded default).
#[derive(Debug, Clone, Args)]
pub struct SimModelArgs {
    /// Fixed mode: every request gets exactly this time to first token (needs --itl-ms).
    #[arg(long, requires = "itl_ms", conflicts_with = "instant")]
    pub ttft_ms: Option<f64>,
    /// Fixed mode: every request gets exactly this gap between tokens (needs --ttft-ms).
    #[arg(long, requires = "ttft_ms", conflicts_with = "instant")]
    pub itl_ms: Option<f64>,
    /// No delay at all; every token is still its own SSE event (client-capacity tests).
    #[arg(long)]
    pub instant: bool,
    /// /metrics vocabulary.
    #[arg(long, value_enum, default_value_t = FlavorArg::Vllm)]
    pub flavor: FlavorArg,
    /// Context window reported by /v1/models and enforced on requests.
    #[arg(long, default_value_t = SimConfig::default().max_model_len)]
    pub max_model_len: u32,
    /// Model mode: prefill cost per uncached prompt token, in ms.
    #[arg(long, default_value_t = SimConfig::default().prefill_ms_per_token)]
    pub prefill_ms_per_token: f64,
    /// Model mode: base duration of one decode step, in ms.
    #[arg(long, default_value_t = SimConfig::default().decode_step_base_ms)]
    pub decode_step_ms: f64,
    /// Model mode: extra step time per running sequence, in ms.
    #[arg(long, default_value_t = SimConfig::default().decode_step_ms_per_seq)]
    pub decode_step_ms_per_seq: f64,
    /// Model mode: sequence slots (continuous-batching width).
    #[arg(long, default_value_t = SimConfig::default().max_num_seqs)]
    pub max_num_seqs: usize,
    /// Model mode: prompt tokens prefilled per step (chunked prefill).
    #[arg(long, default_value_t = SimConfig::default().max_num_batched_tokens)]
    pub max_num_batched_tokens: u32,
    /// KV-cache capacity in tokens (prefix cache and running sequences share it).
    #[arg(long, default_value_t = SimConfig::default().kv_capacity_tokens)]
    pub kv_capacity_tokens: u64,
    /// Prefix-cache block size in tokens.
    #[arg(long, default_value_t = SimConfig::default().block_size)]
    pub block_size: u32,
    /// Multiplies every simulated delay (0.5 = twice as fast).
    #[arg(long, default_value_t = 1.0)]
    pub time_scale: f64,
    /// Seed of every random choice (generated words, early stops).
    #[arg(long, default_value_t = 0)]
    pub seed: u64,
    /// Output cap when a request sets neither max_completion_tokens nor max_tokens.
    #[arg(long, default_value_t = SimConfig::default().default_max_tokens)]
    pub default_max_tokens: u32,
    /// Count prompt tokens with this HF tokenizer.json (or a directory holding one);
    /// otherwise ~4 bytes per token.
    #[arg(long, value_name = "PATH")]
    pub tokenizer: Option<PathBuf>,
}

impl SimModelArgs {
    /// The simulator configuration these flags describe (bound to `bind`).
    pub fn to_config(&self, bind: SocketAddr, model: String) -> Result<SimConfig, String> {
        let mode = match (self.ttft_ms, self.itl_ms, self.instant) {
            (_, _, true) => LatencyMode::Instant,
            (Some(t), Some(i), false) => LatencyMode::Fixed {
                ttft: ms_duration(t, "--ttft-ms")?,
                itl: ms_duration(i, "--itl-ms")?,
            },
            _ => LatencyMode::Model,
        };
        for (v, name) in [
            (self.prefill_ms_per_token, "--prefill-ms-per-token"),
            (self.decode_step_ms, "--decode-step-ms"),
            (self.decode_step_ms_per_seq, "--decode-step-ms-per-seq"),
        ] {
            if !v.is_finite() || v < 0.0 {
                return Err(format!("{name} must be a non-negative number, got {v}"));
            }
        }
        if !self.time_scale.is_finite() || self.time_scale <= 0.0 {
            return Err(format!(
                "--time-scale must be a positive number, got {}",
                self.time_scale
            ));
        }
        if self.block_size == 0
            || self.max_num_seqs == 0
            || self.max_model_len == 0
            || self.max_num_batched_tokens == 0
        {
            return Err("--block-size, --max-num-seqs, --max-num-batched-tokens and --max-model-len must be at least 1".into());
        }
        if self.kv_capacity_tokens < u64::from(self.block_size) {
            return Err(format!(
                "--kv-capacity-tokens ({}) must hold at least one block of --block-size ({})",
                self.kv_capacity_tokens, self.block_size
            ));
        }
        Ok(SimConfig {
            bind,
            model,
            mode,
            flavor: match self.flavor {
                FlavorArg::Vllm => Flavor::Vllm,
                FlavorArg::Sglang => Flavor::Sglang,
            },
            max_model_len: self.max_model_len,
            prefill_ms_per_token: self.prefill_ms_per_token,
            decode_step_base_ms: self.decode_step_ms,
            decode_step_ms_per_seq: self.decode_step_ms_per_seq,
            max_num_seqs: self.max_num_seqs,
            max_num_batched_tokens: self.max_num_batched_tokens,
            kv_capacity_tokens: self.kv_capacity_tokens,
            block_size: self.block_size,
            time_scale: self.time_scale,
            seed: self.seed,
            default_max_tokens: self.default_max_tokens,
            tokenizer: self.tokenizer.clone(),
            ..SimConfig::default()
        })
    }
}

fn ms_duration(ms: f64, flag: &str) -> Result<Duration, String> {
    if !ms.is_finite() || ms < 0.0 {
        return Err(format!(
            "{flag} must be a non-negative number of ms, got {ms}"
        ));
    }
    Ok(Duration::from_secs_f64(ms / 1000.0))
}

/// `bench sim` flags.
#[derive(Debug, Clone, Args)]
pub struct SimArgs {
    /// Model name served (and listed by /v1/models).
    #[arg(long = "model", default_value_t = SimConfig::default().model)]
    pub model_name: String,
    /// Address to listen on.
    #[arg(long, default_value = "127.0.0.1")]
    pub host: IpAddr,
    /// Port to listen on (0 = a free port).
    #[arg(long, default_value_t = 8000)]
    pub port: u16,
    /// Append one JSON line per request to this file.
    #[arg(long, value_name = "FILE")]
    pub request_log: Option<PathBuf>,
    /// Request header whose value is copied into the request log as the session.
    #[arg(long, default_value = "x-session-id")]
    pub session_header: String,
    /// Send `x-worker-id: ID` on every response (for routing-stickiness tests).
    #[arg(long)]
    pub worker_id: Option<String>,
    /// Model flags.
    #[command(flatten)]
    pub sim: SimModelArgs,
}

/// `bench probe` flags.
#[derive(Debug, Clone, Args)]
pub struct ProbeArgs {
    /// Server to probe (http:// only). Without it, the embedded simulator is started.
    #[arg(long, env = "BENCH_BASE_URL")]
    pub base_url: Option<String>,
    /// Model name; by default the first model listed by GET /v1/models.
    #[arg(long)]
    pub model: Option<String>,
    /// The user message.
    #[arg(
        long,
        default_value = "You are benchmarking an inference server. Write a short story about a lighthouse keeper who counts ships."
    )]
    pub prompt: String,
    /// Output tokens, pinned with max_completion_tokens and ignore_eos.
    #[arg(long, default_value_t = 32)]
    pub max_tokens: u32,
    /// Send `max_tokens` instead of `max_completion_tokens` (older servers).
    #[arg(long)]
    pub legacy_max_tokens: bool,
    /// Do not send ignore_eos (the server may stop before --max-tokens).
    #[arg(long)]
    pub no_ignore_eos: bool,
    /// Ask for a whole JSON response instead of a stream.
    #[arg(long)]
    pub no_stream: bool,
    /// Request timeout in seconds.
    #[arg(long, default_value_t = 120.0)]
    pub timeout_s: f64,
    /// Extra request header, `K=V` (repeatable).
    #[arg(long = "header", value_name = "K=V")]
    pub headers: Vec<String>,
    /// JSON object merged into the request body last (overrides any field; null removes one).
    #[arg(long, value_name = "JSON")]
    pub extra_request_body: Option<String>,
    /// Print one JSON object instead of text.
    #[arg(long)]
    pub json: bool,
    /// Model flags of the embedded simulator (used only without --base-url).
    #[command(flatten)]
    pub sim: SimModelArgs,
}

/// A command failure, mapped to an exit code by `main`.
#[derive(Debug)]
pub enum CliError {
    /// Bad usage or input (exit 2).
    Usage(String),
    /// The request or run failed (exit 1).
    Failed(String),
    /// Writing to stdout failed because the reader went away (exit 0).
    BrokenPipe,
}

impl CliError {
    /// The process exit code for this failure.
    pub fn exit_code(&self) -> i32 {
        match self {
            CliError::Usage(_) => 2,
            CliError::Failed(_) => 1,
            CliError::BrokenPipe => 0,
        }
    }
}

impl std::fmt::Display for CliError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            CliError::Usage(m) | CliError::Failed(m) => f.write_str(m),
            CliError::BrokenPipe => f.write_str("broken pipe"),
        }
    }
}

pub(crate) fn out(text: &str) -> Result<(), CliError> {
    let mut stdout = std::io::stdout().lock();
    match stdout
        .write_all(text.as_bytes())
        .and_then(|()| stdout.flush())
    {
        Ok(()) => Ok(()),
        Err(e) if e.kind() == std::io::ErrorKind::BrokenPipe => Err(CliError::BrokenPipe),
        Err(e) => Err(CliError::Failed(format!("cannot write to stdout: {e}"))),
    }
}

fn transport_error(e: bench_transport::Error) -> CliError {
    match e.kind() {
        ErrorKind::InvalidRequest => CliError::Usage(e.to_string()),
        _ => CliError::Failed(e.to_string()),
    }
}

/// Runs `bench sim` until Ctrl-C (or SIGTERM).
pub async fn run_sim(args: SimArgs) -> Result<(), CliError> {
    // Every client connection is a descriptor: allow as many as the hard limit does.
    lifecycle::ensure_open_files(None, "bench sim")?;
    let mut config = args
        .sim
        .to_config(
            SocketAddr::new(args.host, args.port),
            args.model_name.clone(),
        )
        .map_err(CliError::Usage)?;
    config.request_log = args.request_log.clone();
    config.session_header = args.session_header.clone();
    config.worker_id = args.worker_id.clone();
    let server = SimServer::start(config)
        .await
        .map_err(|e| CliError::Usage(e.to_string()))?;
    let c = server.config();
    let mode = match c.mode {
        LatencyMode::Model => "continuous-batching model".to_string(),
        LatencyMode::Fixed { ttft, itl } => format!(
            "fixed ttft {} ms, itl {} ms",
            ttft.as_secs_f64() * 1e3,
            itl.as_secs_f64() * 1e3
        ),
        LatencyMode::Instant => "instant".to_string(),
    };
    out(&format!(
        "bench sim listening on {} (model {}, {mode}); Ctrl-C to stop\n",
        server.base_url(),
        c.model
    ))?;
    wait_for_shutdown_signal().await;
    eprintln!("bench sim: shutting down");
    server.shutdown().await;
    Ok(())
}

async fn wait_for_shutdown_signal() {
    #[cfg(unix)]
    {
        use tokio::signal::unix::{SignalKind, signal};
        match signal(SignalKind::terminate()) {
            Ok(mut term) => {
                tokio::select! {
                    _ = tokio::signal::ctrl_c() => {}
                    _ = term.recv() => {}
                }
            }
            Err(_) => {
                let _ = tokio::signal::ctrl_c().await;
            }
        }
    }
    #[cfg(not(unix))]
    {
        let _ = tokio::signal::ctrl_c().await;
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
    /// Time to first output chunk.
    pub ttft_ms: Option<f64>,
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
    /// Characters of generated content.
    pub output_chars: usize,
}

fn ms(d: Duration) -> f64 {
    (d.as_secs_f64() * 1e6).round() / 1e3
}

impl ProbeReport {
    fn new(base_url: String, embedded: bool, model: String, o: &TurnOutcome) -> Self {
        let u = o.usage.unwrap_or_default();
        ProbeReport {
            base_url,
            embedded,
            model,
            stream: o.streamed,
            ttft_ms: o.ttft.map(ms),
            e2e_ms: ms(o.e2e),
            tpot_ms: o.tpot().map(ms),
            chunks: o.chunk_offsets.len(),
            max_chunk_gap_ms: o.chunk_gaps().max().map(ms),
            prompt_tokens: u.prompt_tokens,
            completion_tokens: u.completion_tokens,
            cached_tokens: u.cached_tokens,
            finish_reason: o.finish_reason.clone(),
            redials: o.redials,
            output_chars: o.content.chars().count(),
        }
    }

    fn text(&self) -> String {
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
        )
    }
}

/// `--header K=V` values, validated.
pub(crate) fn parse_headers(headers: &[String]) -> Result<Vec<(String, String)>, CliError> {
    headers
        .iter()
        .map(|h| match h.split_once('=') {
            Some((k, v)) if !k.trim().is_empty() => Ok((k.trim().to_string(), v.to_string())),
            _ => Err(CliError::Usage(format!(
                "--header {h:?}: expected NAME=VALUE"
            ))),
        })
        .collect()
}

/// `--extra-request-body`: a JSON object, or nothing.
pub(crate) fn parse_extra_body(
    body: Option<&str>,
) -> Result<serde_json::Map<String, serde_json::Value>, CliError> {
    match body.map(serde_json::from_str::<serde_json::Value>) {
        None => Ok(serde_json::Map::new()),
        Some(Ok(serde_json::Value::Object(m))) => Ok(m),
        Some(Ok(_)) => Err(CliError::Usage(
            "--extra-request-body must be a JSON object".into(),
        )),
        Some(Err(e)) => Err(CliError::Usage(format!(
            "--extra-request-body is not valid JSON: {e}"
        ))),
    }
}

/// The server to talk to: `base_url`, or the embedded simulator described by `sim` on a free
/// loopback port (returned, for the caller to shut down).
pub(crate) async fn server_or_embedded(
    base_url: Option<&str>,
    sim: &SimModelArgs,
    model: Option<&str>,
) -> Result<(Option<SimServer>, String), CliError> {
    if let Some(u) = base_url {
        return Ok((None, u.to_string()));
    }
    let cfg = sim
        .to_config(
            SocketAddr::from(([127, 0, 0, 1], 0)),
            model.map_or_else(|| SimConfig::default().model, str::to_owned),
        )
        .map_err(CliError::Usage)?;
    let server = SimServer::start(cfg)
        .await
        .map_err(|e| CliError::Usage(e.to_string()))?;
    let url = server.base_url();
    Ok((Some(server), url))
}

/// Runs `bench probe`.
pub async fn run_probe(args: ProbeArgs) -> Result<(), CliError> {
    if !args.timeout_s.is_finite() || args.timeout_s <= 0.0 {
        return Err(CliError::Usage(format!(
            "--timeout-s must be a positive number, got {}",
            args.timeout_s
        )));
    }
    if args.max_tokens == 0 {
        return Err(CliError::Usage("--max-tokens must be at least 1".into()));
    }
    let headers = parse_headers(&args.headers)?;
    let extra = parse_extra_body(args.extra_request_body.as_deref())?;
    let (embedded, base_url) =
        server_or_embedded(args.base_url.as_deref(), &args.sim, args.model.as_deref()).await?;
    let result = probe_once(&args, &base_url, headers, extra, embedded.is_some()).await;
    if let Some(s) = embedded {
        s.shutdown().await;
    }
    let report = result?;
    if args.json {
        let text = serde_json::to_string_pretty(&report)
            .map_err(|e| CliError::Failed(format!("cannot encode the report: {e}")))?;
        out(&format!("{text}\n"))
    } else {
        out(&report.text())
    }
}

async fn probe_once(
    args: &ProbeArgs,
    base_url: &str,
    headers: Vec<(String, String)>,
    extra: serde_json::Map<String, serde_json::Value>,
    embedded: bool,
) -> Result<ProbeReport, CliError> {
    let mut cfg = ClientConfig::new(base_url);
    cfg.timeout = Duration::from_secs_f64(args.timeout_s);
    cfg.headers = headers;
    let client = Client::new(cfg).map_err(transport_error)?;
    let model = match &args.model {
        Some(m) => m.clone(),
        None => first_model(&client).await?,
    };
    let mut req = ChatRequest::new(
        model.clone(),
        vec![ChatMessage::new(Role::User, args.prompt.clone())],
    );
    req.pin_output(args.max_tokens, args.legacy_max_tokens);
    if args.no_ignore_eos {
        req.ignore_eos = None;
    }
    if args.no_stream {
        req.stream = false;
        req.stream_options = None;
    }
    req.extra = extra;
    let outcome = client
        .chat(&req, &RequestOptions::default())
        .await
        .map_err(transport_error)?;
    Ok(ProbeReport::new(
        client.base_url(),
        embedded,
        model,
        &outcome,
    ))
}

/// The first model id listed by `GET /v1/models`.
async fn first_model(client: &Client) -> Result<String, CliError> {
    let resp = client
        .get("/v1/models", Some(Duration::from_secs(30)))
        .await
        .map_err(|e| CliError::Failed(format!("cannot list models (pass --model): {e}")))?;
    if !resp.status.is_success() {
        return Err(CliError::Failed(format!(
            "GET /v1/models answered HTTP {} (pass --model)",
            resp.status.as_u16()
        )));
    }
    let v: serde_json::Value = serde_json::from_slice(&resp.body).map_err(|e| {
        CliError::Failed(format!(
            "malformed_json: GET /v1/models: {e} (pass --model)"
        ))
    })?;
    v["data"][0]["id"]
        .as_str()
        .map(str::to_owned)
        .ok_or_else(|| CliError::Failed("GET /v1/models listed no model (pass --model)".into()))
}
