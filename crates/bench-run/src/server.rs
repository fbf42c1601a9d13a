//! The server side of a run: readiness, the model and its window, the server family and its
//! cache-flush endpoint.

use std::time::{Duration, Instant};

use bench_telemetry::Backend;
use bench_transport::Client;
use bytes::Bytes;
use http::Method;
use serde::Serialize;

use crate::RunError;

/// What `GET /v1/models` said.
#[derive(Debug, Clone, PartialEq)]
pub struct Discovered {
    /// The first model listed.
    pub model: Option<String>,
    /// Its window: `max_model_len` (vLLM, SGLang, the simulator) or llama.cpp's per-slot
    /// `meta.n_ctx`.
    pub max_model_len: Option<u64>,
    /// Its `owned_by`.
    pub owned_by: Option<String>,
}

impl Discovered {
    /// Reads a `/v1/models` answer.
    pub fn from_models(models: &serde_json::Value) -> Discovered {
        let first = &models["data"][0];
        Discovered {
            model: first["id"].as_str().map(str::to_owned),
            max_model_len: first["max_model_len"]
                .as_u64()
                .or_else(|| first["meta"]["n_ctx"].as_u64()),
            owned_by: first["owned_by"].as_str().map(str::to_owned),
        }
    }
}

/// Waits up to `timeout` for `GET /v1/models` to answer 200 (polling every 500 ms; a zero
/// timeout tries once) and reads it.
pub async fn wait_ready(client: &Client, timeout: Duration) -> Result<Discovered, RunError> {
    let deadline = Instant::now() + timeout;
    loop {
        let last_err = match client
            .get("/v1/models", Some(Duration::from_secs(10)))
            .await
        {
            Ok(r) if r.status.is_success() => {
                let v: serde_json::Value = serde_json::from_slice(&r.body).map_err(|e| {
                    RunError::Failed(format!("malformed_json: GET /v1/models: {e}"))
                })?;
                return Ok(Discovered::from_models(&v));
            }
            Ok(r) => format!("GET /v1/models answered HTTP {}", r.status.as_u16()),
            Err(e) if e.kind() == bench_transport::ErrorKind::InvalidRequest => {
                return Err(RunError::Invalid(e.to_string()));
            }
            // Waiting does not fix a certificate: every turn would fail the same way.
            Err(e) if e.kind() == bench_transport::ErrorKind::Tls => {
                return Err(RunError::Failed(e.to_string()));
            }
            Err(e) => e.to_string(),
        };
        if Instant::now() >= deadline {
            return Err(RunError::Failed(format!(
                "server not ready after {} s: {last_err}",
                timeout.as_secs_f64()
            )));
        }
        tokio::time::sleep(Duration::from_millis(500)).await;
    }
}

/// What detection found, and from what.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, serde::Deserialize)]
pub struct Detected {
    /// The family.
    pub backend: Backend,
    /// The evidence, e.g. `owned_by "vllm" in /v1/models`.
    pub evidence: String,
}

/// Reads the family from `owned_by`, else from the names on `/metrics`.
pub async fn detect(client: &Client, found: &Discovered) -> Detected {
    let owned_by = found.owned_by.as_deref().unwrap_or("");
    if let Some(b) = Backend::from_owned_by(owned_by) {
        return Detected {
            backend: b,
            evidence: format!("owned_by {owned_by:?} in /v1/models"),
        };
    }
    if let Ok(r) = client.get("/metrics", Some(Duration::from_secs(5))).await {
        if r.status.is_success() {
            if let Some((b, prefix)) = Backend::from_metric_names(&String::from_utf8_lossy(&r.body))
            {
                return Detected {
                    backend: b,
                    evidence: format!("{prefix} names on /metrics"),
                };
            }
        }
    }
    Detected {
        backend: Backend::Unknown,
        evidence: "no vLLM, SGLang or llama.cpp marks in /v1/models or /metrics".into(),
    }
}

/// What the check turns before a run found about the field that pins a chat answer's length
/// (`run.json`'s `output_cap`).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, serde::Deserialize)]
pub struct OutputCapCheck {
    /// The field the run sends.
    pub field: bench_runner::OutputCapField,
    /// Whether a check turn showed that the server honours it.
    pub honoured: bool,
    /// What the check turns got, e.g. `asked 8 tokens with max_completion_tokens and got 97;
    /// with max_tokens, 8`.
    pub evidence: String,
}

impl OutputCapCheck {
    /// The console's notice for it, when there is something to say.
    pub fn notice(&self) -> Option<crate::Notice> {
        use bench_runner::OutputCapField;
        match (self.field, self.honoured) {
            (OutputCapField::MaxTokens, true) => Some(crate::Notice::Warning(format!(
                "bench run: the server ignores max_completion_tokens and honours max_tokens \
                 ({}): the pinned output length is sent as max_tokens (run.json: output_cap)",
                self.evidence
            ))),
            (_, true) => None,
            (_, false) => Some(crate::Notice::Warning(format!(
                "bench run: the output length may not be pinned ({}): the output_length check \
                 will show how far the answers went",
                self.evidence
            ))),
        }
    }
}

/// Tokens a check turn asks for.
const CHECK_TOKENS: u32 = 8;

/// The most a check turn reads: a server honouring the cap sends a few KiB; one ignoring it
/// is cut here, not read to the end of its window.
const CHECK_BYTES: u64 = 32 << 10;

/// How one check turn ended.
enum Checked {
    /// Stopped at the cap (`finish_reason` `length`, or exactly the cap): the tokens (by
    /// usage, else by chunks).
    Honoured(u64),
    /// Past the cap: the tokens, or none when the answer outgrew [`CHECK_BYTES`].
    Overran(Option<u64>),
    /// The model ended its answer before the cap: it tells nothing about the cap.
    StoppedEarly(u64),
}

impl std::fmt::Display for Checked {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Checked::Honoured(n) | Checked::Overran(Some(n)) => write!(f, "{n}"),
            Checked::Overran(None) => write!(f, "more than {} KiB of answer", CHECK_BYTES >> 10),
            Checked::StoppedEarly(n) => write!(f, "{n} (the model stopped on its own)"),
        }
    }
}

/// Which field pins a chat answer's length on this server: one check turn asking
/// 8 tokens with `max_completion_tokens` (a prompt whose answer is long when
/// unpinned), and when the server overran it, one with `max_tokens`. A turn that ends at the
/// cap (`finish_reason` `length`, or exactly the cap) honoured it; one the model ended earlier
/// on its own (a server ignoring `ignore_eos`) proves nothing. The run's body otherwise
/// (model, `ignore_eos`, streaming, extra body) is the run's own. A check that fails keeps
/// `max_completion_tokens` and says why.
pub async fn check_output_cap(
    mut ccfg: bench_transport::ClientConfig,
    cfg: &bench_runner::RunConfig,
) -> OutputCapCheck {
    use bench_runner::OutputCapField;
    ccfg.limits.max_response_bytes = ccfg.limits.max_response_bytes.min(CHECK_BYTES);
    ccfg.limits.max_json_bytes = ccfg.limits.max_json_bytes.min(CHECK_BYTES as usize);
    ccfg.timeout = ccfg.timeout.min(Duration::from_secs(120));
    let failed = |e: String| OutputCapCheck {
        field: OutputCapField::MaxCompletionTokens,
        honoured: false,
        evidence: format!("the check turn failed: {e}"),
    };
    let client = match Client::new(ccfg) {
        Ok(c) => c,
        Err(e) => return failed(e.to_string()),
    };
    let newer = match check_turn(&client, cfg, false).await {
        Ok(c) => c,
        Err(e) => return failed(e),
    };
    let asked = format!("asked {CHECK_TOKENS} tokens with max_completion_tokens and got {newer}");
    match newer {
        Checked::Honoured(_) => {
            return OutputCapCheck {
                field: OutputCapField::MaxCompletionTokens,
                honoured: true,
                evidence: asked,
            };
        }
        Checked::StoppedEarly(_) => {
            return OutputCapCheck {
                field: OutputCapField::MaxCompletionTokens,
                honoured: false,
                evidence: format!("{asked}: the check cannot tell whether the cap is honoured"),
            };
        }
        Checked::Overran(_) => {}
    }
    match check_turn(&client, cfg, true).await {
        Ok(Checked::Honoured(n)) => OutputCapCheck {
            field: OutputCapField::MaxTokens,
            honoured: true,
            evidence: format!("{asked}; with max_tokens, {n}"),
        },
        // It ignores the newer field for certain: the older one cannot do worse.
        Ok(older @ Checked::StoppedEarly(_)) => OutputCapCheck {
            field: OutputCapField::MaxTokens,
            honoured: false,
            evidence: format!("{asked}; with max_tokens, {older}: sent as max_tokens, unproven"),
        },
        Ok(older) => OutputCapCheck {
            field: OutputCapField::MaxCompletionTokens,
            honoured: false,
            evidence: format!("{asked}; with max_tokens, {older}: it honours neither"),
        },
        Err(e) => OutputCapCheck {
            field: OutputCapField::MaxCompletionTokens,
            honoured: false,
            evidence: format!("{asked}; the check turn with max_tokens failed: {e}"),
        },
    }
}

/// One check turn, its cap in `max_tokens` when `legacy`.
async fn check_turn(
    client: &Client,
    cfg: &bench_runner::RunConfig,
    legacy: bool,
) -> Result<Checked, String> {
    use bench_transport::{ChatMessage, ChatRequest, Endpoint, RequestOptions, Role};
    let mut req = ChatRequest::new(
        cfg.model.clone(),
        vec![ChatMessage::new(
            Role::User,
            "Write a long essay about the history of the sea, at least 500 words.",
        )],
    );
    req.pin_output(CHECK_TOKENS, legacy);
    if !cfg.request.ignore_eos {
        req.ignore_eos = None;
    }
    if cfg.request.response == bench_runner::ResponseMode::Whole {
        req.stream = false;
        req.stream_options = None;
    }
    req.extra = cfg.request.extra_body.clone();
    let body = req
        .to_endpoint_body(Endpoint::Chat)
        .map_err(|e| e.to_string())?;
    let opts = RequestOptions {
        endpoint: Endpoint::Chat,
        ..RequestOptions::default()
    };
    let outcome = match client.chat_body(body, req.wants_stream(), &opts).await {
        Ok(o) => o,
        Err(e) if e.kind() == bench_transport::ErrorKind::ResponseTooLarge => {
            return Ok(Checked::Overran(None));
        }
        Err(e) => return Err(e.to_string()),
    };
    let tokens = outcome
        .usage
        .as_ref()
        .and_then(|u| u.completion_tokens)
        .unwrap_or(u64::from(outcome.answer_chunks + outcome.reasoning_chunks));
    let cap = u64::from(CHECK_TOKENS);
    Ok(if tokens > cap {
        Checked::Overran(Some(tokens))
    } else if tokens == cap || outcome.finish_reason.as_deref() == Some("length") {
        Checked::Honoured(tokens)
    } else {
        Checked::StoppedEarly(tokens)
    })
}

/// Empties the server's prefix cache; returns the endpoint. An error names the endpoint and
/// what to do.
pub async fn flush_cache(client: &Client, backend: Backend) -> Result<&'static str, RunError> {
    let Some(path) = backend.flush_path() else {
        return Err(RunError::Failed(format!(
            "--flush-cache: no cache-flush endpoint is known for backend {} (drop --flush-cache, \
             or pass --backend vllm|sglang if the server is one)",
            backend.name()
        )));
    };
    let hint = match backend {
        Backend::Vllm => " (vLLM serves it only with VLLM_SERVER_DEV_MODE=1)",
        _ => "",
    };
    match client
        .request(
            Method::POST,
            path,
            Bytes::new(),
            Some(Duration::from_secs(60)),
        )
        .await
    {
        Ok(r) if r.status.is_success() => Ok(path),
        Ok(r) => Err(RunError::Failed(format!(
            "--flush-cache: POST {path} answered HTTP {}{hint}",
            r.status.as_u16()
        ))),
        Err(e) => Err(RunError::Failed(format!(
            "--flush-cache: POST {path}: {e}{hint}"
        ))),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_window_comes_from_max_model_len_or_llama_cpp_n_ctx() {
        let vllm =
            serde_json::json!({"data": [{"id": "m", "owned_by": "vllm", "max_model_len": 4096}]});
        let d = Discovered::from_models(&vllm);
        assert_eq!(d.model.as_deref(), Some("m"));
        assert_eq!(d.max_model_len, Some(4096));
        assert_eq!(d.owned_by.as_deref(), Some("vllm"));
        let llama = serde_json::json!({"data": [{"id": "g", "owned_by": "llamacpp", "meta": {"n_ctx": 2048}}]});
        assert_eq!(Discovered::from_models(&llama).max_model_len, Some(2048));
        assert_eq!(
            Discovered::from_models(&serde_json::json!({"data": []})),
            Discovered {
                model: None,
                max_model_len: None,
                owned_by: None
            }
        );
    }
}

/// This host's clock against the server's, from the HTTP `Date` header of `GET /v1/models`
/// (RFC 9110: whole seconds). `None` when the server sends none or the request fails: the
/// run goes on without it.
pub async fn clock_offset(client: &Client) -> Option<bench_rundir::ClockOffset> {
    let before = std::time::SystemTime::now();
    let t0 = Instant::now();
    let r = client
        .get("/v1/models", Some(Duration::from_secs(10)))
        .await
        .ok()?;
    let rtt = t0.elapsed();
    let date = r.headers.get(http::header::DATE)?.to_str().ok()?;
    let server = httpdate::parse_http_date(date).ok()?;
    Some(offset_from_date(server, before + rtt / 2, rtt))
}

/// The offset from a `Date` of `server` (truncated to its second) read at `local_mid`, the
/// middle of a request that took `rtt`.
fn offset_from_date(
    server: std::time::SystemTime,
    local_mid: std::time::SystemTime,
    rtt: Duration,
) -> bench_rundir::ClockOffset {
    let secs = |t: std::time::SystemTime| {
        t.duration_since(std::time::UNIX_EPOCH)
            .map_or(0.0, |d| d.as_secs_f64())
    };
    bench_rundir::ClockOffset {
        offset_s: secs(server) + 0.5 - secs(local_mid),
        uncertainty_s: 0.5 + rtt.as_secs_f64() / 2.0,
    }
}

#[cfg(test)]
mod clock_tests {
    use super::*;

    #[test]
    fn a_date_header_gives_the_offset_to_within_its_second() {
        let mid = std::time::UNIX_EPOCH + Duration::from_millis(1_000_250);
        // The server's clock 2.5 s ahead: its Date says 1,002 (1,002.75 truncated).
        let server = std::time::UNIX_EPOCH + Duration::from_secs(1_002);
        let o = offset_from_date(server, mid, Duration::from_millis(4));
        assert!((o.offset_s - 2.25).abs() < 1e-9, "{o:?}");
        assert!((o.uncertainty_s - 0.502).abs() < 1e-9);
        assert!((o.offset_s - 2.5).abs() <= o.uncertainty_s);
    }
}
