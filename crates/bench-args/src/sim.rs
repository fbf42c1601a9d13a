//! `bench sim`'s and `bench probe`'s flags, and the simulator model flags.

use std::net::IpAddr;
use std::net::SocketAddr;
use std::path::PathBuf;
use std::time::Duration;

use bench_sim::{Flavor, LatencyMode, SimConfig};
use clap::{Args, ValueEnum};

use crate::{SimTlsArgs, TlsArgs};

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
    /// The first N output tokens of every answer are reasoning, in each API's own shape
    /// (chat `reasoning_content`, Responses reasoning deltas, Messages thinking blocks).
    #[arg(long, default_value_t = 0, value_name = "N")]
    pub reasoning_tokens: u32,
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
        let c = SimConfig {
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
            reasoning_tokens: self.reasoning_tokens,
            ..SimConfig::default()
        };
        // Each field's flag is its name with dashes.
        c.validate()
            .map_err(|(field, what)| format!("--{} {what}", field.replace('_', "-")))?;
        Ok(c)
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
    /// The request log also holds each answer's `text` and `reasoning` as generated (for
    /// checking what a client accumulated).
    #[arg(long, requires = "request_log")]
    pub log_text: bool,
    /// Be an unknown OpenAI-compatible server: /metrics answers 404 (no engine's names).
    #[arg(long)]
    pub no_metrics: bool,
    /// /metrics also serves one GPU as a DCGM exporter does: DCGM_FI_DEV_POWER_USAGE (W: 70
    /// idle, up to 350 with the batch full) and DCGM_FI_DEV_TOTAL_ENERGY_CONSUMPTION (mJ), for
    /// testing energy figures (bench run --scrape).
    #[arg(long, conflicts_with = "no_metrics")]
    pub gpu_metrics: bool,
    /// Chat completions ignore max_completion_tokens and honour only max_tokens (answering
    /// --default-max-tokens otherwise), as llama-cpp-python's server does.
    #[arg(long)]
    pub ignore_max_completion_tokens: bool,
    /// Request header whose value is copied into the request log as the session.
    #[arg(long, default_value = "x-session-id")]
    pub session_header: String,
    /// Send `x-worker-id: ID` on every response (for routing-stickiness tests).
    #[arg(long)]
    pub worker_id: Option<String>,
    /// Start in hold mode: every generation request waits before its first output token (a
    /// stream gets its headers and a `: held` comment every 100 ms) until POST /sim/release.
    /// POST /sim/hold turns it on again; GET /sim/held?at_least=N waits until N are held.
    #[arg(long)]
    pub hold: bool,
    /// HTTPS.
    #[command(flatten)]
    pub tls: SimTlsArgs,
    /// Model flags.
    #[command(flatten)]
    pub sim: SimModelArgs,
    /// Fault injection (listed last: its help heading applies to the flags after it).
    #[command(flatten)]
    pub faults: SimFaultArgs,
}

/// `bench sim` fault-injection flags.
#[derive(Debug, Clone, Args)]
#[command(next_help_heading = "Fault injection")]
pub struct SimFaultArgs {
    /// Inject faults at these rates, KIND=RATE[,KIND=RATE...] (repeatable; rates in [0, 1],
    /// adding up to at most 1). See --help for the kinds.
    ///
    /// Each generation request gets at most one fault, drawn from a hash of --fault-seed, its
    /// session header (--session-header), its turn index and how many requests of that turn
    /// came before (a retry draws again): the same requests get the same faults at any
    /// concurrency. Kinds:
    ///   429                   HTTP 429, Retry-After, OpenAI's rate-limit body
    ///   503                   HTTP 503, Retry-After, an "overloaded" body
    ///   500                   HTTP 500 with a vLLM, SGLang or OpenAI error body
    ///   reset-before-headers  read the request, then reset the connection (TCP RST) without a
    ///                         byte of response
    ///   reset-mid-stream      the head and about half the answer, then a reset (not streamed:
    ///                         half the body)
    ///   malformed-chunk       one SSE event whose JSON is cut in half, then the rest of the
    ///                         stream (not streamed: the body cut in half)
    ///   no-done               the whole stream without its end (`[DONE]`, `response.completed`,
    ///                         `message_stop`; streams only)
    ///   stall                 the head and the first chunk, then nothing for --fault-stall-ms
    ///                         (not streamed: no head for that long)
    ///   slow-headers          the head --fault-slow-ms late, then a normal answer
    ///   truncated-usage       the usage left out (chunk or object)
    #[arg(long = "fault", value_name = "KIND=RATE,...", verbatim_doc_comment)]
    pub fault: Vec<String>,
    /// Seed of the fault draws.
    #[arg(long, default_value_t = 0, value_name = "N")]
    pub fault_seed: u64,
    /// Append one JSON line per injected fault to this file (fault, session, turn_index,
    /// endpoint, stream, utc, ms).
    #[arg(long, value_name = "FILE")]
    pub fault_log: Option<PathBuf>,
    /// How long a `stall` lasts, in ms (the stream then goes on).
    #[arg(long, default_value_t = 3_600_000.0, value_name = "MS")]
    pub fault_stall_ms: f64,
    /// How late a `slow-headers` head is, in ms.
    #[arg(long, default_value_t = 2000.0, value_name = "MS")]
    pub fault_slow_ms: f64,
    /// Retry-After of the `429` and `503` faults, in seconds.
    #[arg(long, default_value_t = 1, value_name = "S")]
    pub fault_retry_after_s: u64,
}

fn fault_ms(ms: f64, flag: &str) -> Result<Duration, String> {
    (ms >= 0.0)
        .then(|| Duration::try_from_secs_f64(ms / 1000.0).ok())
        .flatten()
        .ok_or_else(|| format!("{flag} must be a non-negative number of ms, got {ms}"))
}

impl SimFaultArgs {
    /// The fault settings these flags describe; a bad value is a one-line error naming its
    /// flag.
    pub fn to_faults(&self) -> Result<bench_sim::Faults, String> {
        let rates = if self.fault.is_empty() {
            Vec::new()
        } else {
            bench_sim::Faults::parse(&self.fault.join(",")).map_err(|e| format!("--fault {e}"))?
        };
        Ok(bench_sim::Faults {
            rates,
            seed: self.fault_seed,
            log: self.fault_log.clone(),
            stall: fault_ms(self.fault_stall_ms, "--fault-stall-ms")?,
            slow_headers: fault_ms(self.fault_slow_ms, "--fault-slow-ms")?,
            retry_after_s: self.fault_retry_after_s,
        })
    }
}

/// `bench probe` flags.
#[derive(Debug, Clone, Args)]
pub struct ProbeArgs {
    /// Server to probe (http:// or https://). Without it, the embedded simulator is started.
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
    /// Extra request header, `K=V` (repeatable). The values of Authorization,
    /// Proxy-Authorization and headers whose names contain key, token, secret, auth or cookie
    /// are secrets: never shown (`***`; see docs/secrets.md).
    #[arg(long = "header", value_name = "K=V")]
    pub headers: Vec<String>,
    /// Treat the value of header NAME (a --header) as a secret too, whatever its name
    /// (repeatable).
    #[arg(long = "secret-header", value_name = "NAME")]
    pub secret_headers: Vec<String>,
    /// JSON object merged into the request body last (overrides any field; null removes one).
    #[arg(long, value_name = "JSON")]
    pub extra_request_body: Option<String>,
    /// Print one JSON object instead of text.
    #[arg(long)]
    pub json: bool,
    /// The API to call: chat (/v1/chat/completions), responses (/v1/responses), messages
    /// (Anthropic /v1/messages: `x-api-key` from ANTHROPIC_API_KEY) or completions
    /// (/v1/completions, the prompt rendered as "User: …" lines).
    #[arg(long, default_value = "chat", value_name = "API")]
    pub endpoint: bench_transport::Endpoint,
    /// TLS for an https:// --base-url.
    #[command(flatten)]
    pub tls: TlsArgs,
    /// Model flags of the embedded simulator (used only without --base-url).
    #[command(flatten)]
    pub sim: SimModelArgs,
}
