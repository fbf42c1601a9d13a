//! Simulator configuration.

use std::net::{Ipv4Addr, SocketAddr};
use std::path::PathBuf;
use std::time::Duration;

use serde::{Serialize, Serializer};

use crate::faults::Faults;

/// How the simulator decides when tokens are produced.
#[derive(Clone, Copy, Debug, Default, PartialEq, Serialize)]
#[serde(rename_all = "snake_case", tag = "kind")]
pub enum LatencyMode {
    /// Continuous batching with a step loop: prefill cost per uncached prompt token, decode step
    /// time growing with the batch, queueing when `max_num_seqs` or the KV capacity is reached.
    #[default]
    Model,
    /// Every request gets exactly `ttft` to its first token and `itl` between tokens, whatever the
    /// load (both multiplied by [`SimConfig::time_scale`]).
    Fixed {
        /// Time from receiving the request to its first token.
        #[serde(rename = "ttft_ms", serialize_with = "ser_duration_ms")]
        ttft: Duration,
        /// Time between consecutive tokens.
        #[serde(rename = "itl_ms", serialize_with = "ser_duration_ms")]
        itl: Duration,
    },
    /// No delay at all; every token is still its own SSE event. For client-capacity tests.
    Instant,
}

/// Metric vocabulary served on `/metrics` (and the SGLang `sglext` usage extension).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum Flavor {
    /// vLLM v1 names (`vllm:num_requests_running`, `vllm:kv_cache_usage_perc`, ...).
    #[default]
    Vllm,
    /// SGLang names (`sglang:num_running_reqs`, `sglang:token_usage`, ...).
    Sglang,
}

/// Configuration of a [`SimServer`](crate::SimServer).
///
/// The defaults model an 8B model on one modern GPU. Durations are in milliseconds as named.
#[derive(Clone, Debug, Serialize)]
pub struct SimConfig {
    /// Address to bind; port 0 picks a free port. Default `127.0.0.1:0`.
    pub bind: SocketAddr,
    /// Served model name (used by `/v1/models` and echoed when a request names no model).
    /// Default `"bench-sim"`.
    pub model: String,
    /// Latency mode. Default [`LatencyMode::Model`].
    pub mode: LatencyMode,
    /// Metric vocabulary of `/metrics`. Default [`Flavor::Vllm`].
    pub flavor: Flavor,
    /// Maximum prompt + completion tokens of one request. Default 32768.
    pub max_model_len: u32,
    /// Prefill cost per *uncached* prompt token, in milliseconds. Default 0.1.
    pub prefill_ms_per_token: f64,
    /// Fixed cost of one engine step, in milliseconds. Default 10.0.
    pub decode_step_base_ms: f64,
    /// Cost added to a step per sequence decoding in it, in milliseconds. Default 0.05.
    pub decode_step_ms_per_seq: f64,
    /// Maximum number of running sequences (batch size). Default 256.
    pub max_num_seqs: usize,
    /// Prompt tokens prefilled per step (chunked prefill, like vLLM's
    /// `max_num_batched_tokens`): a longer uncached prompt is prefilled over several steps
    /// while the running sequences keep decoding. Default 8192.
    pub max_num_batched_tokens: u32,
    /// KV cache capacity in tokens (rounded down to whole blocks). Default 262144.
    pub kv_capacity_tokens: u64,
    /// Tokens per KV block (prefix-cache granularity). Default 16.
    pub block_size: u32,
    /// Multiplies every simulated delay; 0.5 runs twice as fast. Default 1.0.
    pub time_scale: f64,
    /// Seed of every random choice (per request: `seed ^ request_number`). Default 0.
    pub seed: u64,
    /// Completion length used when a request gives neither `max_completion_tokens` nor
    /// `max_tokens` (capped to the context left). Default 256.
    pub default_max_tokens: u32,
    /// Reasoning tokens per answer: the first `min(reasoning_tokens, output length)` output
    /// tokens of every answer are reasoning, sent in each endpoint's own shape (chat
    /// `delta.reasoning_content`, a Responses `reasoning` item, an Anthropic `thinking` block;
    /// plain text on `/v1/completions`) and counted in the usage where the API reports them.
    /// They are ordinary output tokens for timing and for the output length. Default 0.
    pub reasoning_tokens: u32,
    /// A Hugging Face `tokenizer.json` (or a directory holding one) used to count prompt tokens;
    /// when absent prompt tokens are counted as `ceil(bytes / 4)`. Default none.
    pub tokenizer: Option<PathBuf>,
    /// When set, one JSON line per finished request is appended to this file. Default none.
    pub request_log: Option<PathBuf>,
    /// The request log also holds each answer's `text` and `reasoning`, as sent (for checking
    /// what a client accumulated against what the server generated). Default false.
    pub log_text: bool,
    /// Serve `/metrics` (in [`SimConfig::flavor`]'s names). When false it answers 404, as a
    /// server without Prometheus metrics does, and `/v1/models` carries no engine's mark:
    /// a client sees an unknown OpenAI-compatible server. Default true.
    pub metrics: bool,
    /// `/metrics` also serves one GPU as a DCGM exporter names it:
    /// `DCGM_FI_DEV_POWER_USAGE` (W) and `DCGM_FI_DEV_TOTAL_ENERGY_CONSUMPTION` (mJ since
    /// start), the power following the engine's load ([`crate::gpu`]). Default false.
    pub gpu_metrics: bool,
    /// Chat completions ignore `max_completion_tokens` and honour only `max_tokens` (a
    /// request with neither, or with `max_completion_tokens` alone, answers
    /// [`SimConfig::default_max_tokens`]), as llama-cpp-python's server does. Default false.
    pub ignore_max_completion_tokens: bool,
    /// Request header whose value is copied into the request log as `session`.
    /// Default `"x-session-id"`.
    pub session_header: String,
    /// When set, every response carries the header `x-worker-id: <id>`. Default none.
    pub worker_id: Option<String>,
    /// Start in hold mode: every generation request waits before its first output token until
    /// `POST /sim/release` (or [`SimServer::release`](crate::SimServer::release)); see
    /// `POST /sim/hold`. Default false.
    pub hold: bool,
    /// Fault injection (HTTP errors, resets, malformed or truncated streams, stalls); see
    /// [`Faults`]. Default: no faults.
    pub faults: Faults,
    /// Serve HTTPS with this identity instead of plain HTTP. Default none.
    #[serde(skip)]
    pub tls: Option<std::sync::Arc<crate::tls::SimTls>>,
}

impl Default for SimConfig {
    fn default() -> Self {
        Self {
            bind: SocketAddr::from((Ipv4Addr::LOCALHOST, 0)),
            model: "bench-sim".to_owned(),
            mode: LatencyMode::Model,
            flavor: Flavor::Vllm,
            max_model_len: 32768,
            prefill_ms_per_token: 0.1,
            decode_step_base_ms: 10.0,
            decode_step_ms_per_seq: 0.05,
            max_num_seqs: 256,
            max_num_batched_tokens: 8192,
            kv_capacity_tokens: 262_144,
            block_size: 16,
            time_scale: 1.0,
            seed: 0,
            default_max_tokens: 256,
            reasoning_tokens: 0,
            tokenizer: None,
            request_log: None,
            log_text: false,
            gpu_metrics: false,
            metrics: true,
            ignore_max_completion_tokens: false,
            session_header: "x-session-id".to_owned(),
            worker_id: None,
            hold: false,
            faults: Faults::default(),
            tls: None,
        }
    }
}

impl std::fmt::Display for LatencyMode {
    /// `continuous-batching model`, `fixed ttft 50 ms, itl 10 ms` or `instant`.
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            LatencyMode::Model => f.write_str("continuous-batching model"),
            LatencyMode::Fixed { ttft, itl } => write!(
                f,
                "fixed ttft {} ms, itl {} ms",
                ttft.as_secs_f64() * 1e3,
                itl.as_secs_f64() * 1e3
            ),
            LatencyMode::Instant => f.write_str("instant"),
        }
    }
}

impl SimConfig {
    /// Checks the model's numbers; the first problem names the field (`Err((field, what))`,
    /// e.g. `("time_scale", "must be a positive number, got 0")`).
    pub fn validate(&self) -> Result<(), (&'static str, String)> {
        for (v, name) in [
            (self.prefill_ms_per_token, "prefill_ms_per_token"),
            (self.decode_step_base_ms, "decode_step_ms"),
            (self.decode_step_ms_per_seq, "decode_step_ms_per_seq"),
        ] {
            if !v.is_finite() || v < 0.0 {
                return Err((name, format!("must be a non-negative number, got {v}")));
            }
        }
        if !self.time_scale.is_finite() || self.time_scale <= 0.0 {
            let got = self.time_scale;
            return Err((
                "time_scale",
                format!("must be a positive number, got {got}"),
            ));
        }
        for (v, name) in [
            (u64::from(self.block_size), "block_size"),
            (self.max_num_seqs as u64, "max_num_seqs"),
            (u64::from(self.max_model_len), "max_model_len"),
            (
                u64::from(self.max_num_batched_tokens),
                "max_num_batched_tokens",
            ),
        ] {
            if v == 0 {
                return Err((name, "must be at least 1".into()));
            }
        }
        if self.kv_capacity_tokens < u64::from(self.block_size) {
            let (kv, b) = (self.kv_capacity_tokens, self.block_size);
            return Err((
                "kv_capacity_tokens",
                format!("({kv}) must hold at least one block ({b} tokens)"),
            ));
        }
        Ok(())
    }

    /// Predicted time to first token, in milliseconds, on an otherwise idle server, for a prompt
    /// of `prompt_tokens` of which `cached_tokens` hit the prefix cache (scaled by `time_scale`).
    ///
    /// `Model`: `(decode_step_base_ms × steps + prefill_ms_per_token × uncached) × time_scale`
    /// where `steps = max(1, ceil(uncached / max_num_batched_tokens))` (chunked prefill);
    /// `Fixed`: `ttft × time_scale`; `Instant`: 0.
    pub fn expected_ttft_ms(&self, prompt_tokens: u32, cached_tokens: u32) -> f64 {
        match self.mode {
            LatencyMode::Model => {
                let uncached_tokens = prompt_tokens.saturating_sub(cached_tokens);
                let steps = uncached_tokens
                    .div_ceil(self.max_num_batched_tokens.max(1))
                    .max(1);
                let uncached = f64::from(uncached_tokens);
                (self.decode_step_base_ms * f64::from(steps) + self.prefill_ms_per_token * uncached)
                    * self.scale()
            }
            LatencyMode::Fixed { ttft, .. } => ttft.as_secs_f64() * 1000.0 * self.scale(),
            LatencyMode::Instant => 0.0,
        }
    }

    /// Predicted time per output token after the first, in milliseconds, when `running_seqs`
    /// sequences decode together and nothing else arrives (scaled by `time_scale`).
    ///
    /// `Model`: `(decode_step_base_ms + decode_step_ms_per_seq × running_seqs) × time_scale`;
    /// `Fixed`: `itl × time_scale`; `Instant`: 0.
    pub fn expected_tpot_ms(&self, running_seqs: usize) -> f64 {
        match self.mode {
            LatencyMode::Model => {
                #[allow(clippy::cast_precision_loss)]
                let seqs = running_seqs as f64;
                (self.decode_step_base_ms + self.decode_step_ms_per_seq * seqs) * self.scale()
            }
            LatencyMode::Fixed { itl, .. } => itl.as_secs_f64() * 1000.0 * self.scale(),
            LatencyMode::Instant => 0.0,
        }
    }

    /// Number of KV blocks: `kv_capacity_tokens / block_size`, at least 1.
    pub fn kv_total_blocks(&self) -> u64 {
        (self.kv_capacity_tokens / u64::from(self.block_size.max(1))).max(1)
    }

    /// `time_scale`, with negative or non-finite values treated as 0 and 1 respectively.
    pub(crate) fn scale(&self) -> f64 {
        if !self.time_scale.is_finite() {
            1.0
        } else {
            self.time_scale.max(0.0)
        }
    }

    /// A simulated delay of `ms` milliseconds, scaled by `time_scale`.
    pub(crate) fn scaled(&self, ms: f64) -> Duration {
        let ms = ms * self.scale();
        if ms.is_finite() && ms > 0.0 {
            Duration::from_secs_f64(ms / 1000.0)
        } else {
            Duration::ZERO
        }
    }
}

pub(crate) fn ser_duration_ms<S: Serializer>(d: &Duration, s: S) -> Result<S::Ok, S::Error> {
    s.serialize_f64(d.as_secs_f64() * 1000.0)
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use super::*;

    #[test]
    fn expected_values_follow_the_model() {
        let c = SimConfig {
            time_scale: 0.5,
            ..SimConfig::default()
        };
        assert!((c.expected_ttft_ms(1000, 200) - (10.0 + 80.0) * 0.5).abs() < 1e-9);
        assert!((c.expected_tpot_ms(1) - 10.05 * 0.5).abs() < 1e-9);
        assert_eq!(c.kv_total_blocks(), 16384);
        let f = SimConfig {
            mode: LatencyMode::Fixed {
                ttft: Duration::from_millis(100),
                itl: Duration::from_millis(20),
            },
            ..SimConfig::default()
        };
        assert!((f.expected_ttft_ms(5, 0) - 100.0).abs() < 1e-9);
        assert!((f.expected_tpot_ms(8) - 20.0).abs() < 1e-9);
    }

    #[test]
    fn config_serializes() {
        let v = serde_json::to_value(SimConfig::default()).unwrap_or_default();
        assert_eq!(v["mode"]["kind"], "model");
        assert_eq!(v["flavor"], "vllm");
        assert_eq!(v["block_size"], 16);
        assert_eq!(v["hold"], false);
        assert_eq!(v["faults"]["rates"], serde_json::json!({}));
        assert_eq!(v["faults"]["stall_ms"], 3_600_000.0);
        assert!(v.get("tls").is_none());
    }
}
