//! `bench run`'s flags and the [`RunSpec`] they describe.

use std::path::PathBuf;
use std::time::Duration;

use bench_run::spec::Sampling;
use bench_run::sweep::SweepPlan;
use bench_run::{
    BackendChoice, EmbeddedSim, Exports, Judge, Limits, Load, RequestShape, RunSpec, Scraping,
    Target,
};
use bench_runner::{Arrival, ArrivalProcess, ContentMode, OutputCapField, ResponseMode, ToolWaits};
use bench_sim::SimConfig;
use bench_telemetry::Backend;
use clap::{ArgAction, Args, ValueEnum};
use serde_json::Value;

use crate::plan::{ABENCH, PlanArgs};
use crate::{CliError, SimModelArgs, run_error};

/// Help heading of the flags that spread a run over several machines.
const SHARDING: &str = "Sharding (several client machines)";

/// A server family for `--backend`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum)]
pub enum BackendArg {
    /// Detect it (the default).
    Auto,
    /// vLLM (`owned_by: "vllm"`, `vllm:` metrics).
    Vllm,
    /// SGLang (`owned_by: "sglang"`, `sglang:` metrics).
    Sglang,
    /// llama.cpp's server (`owned_by: "llamacpp"`, `llamacpp:` metrics).
    Llamacpp,
    /// Any other OpenAI-compatible server.
    Openai,
}

/// What joins the conversation after each turn.
#[derive(Debug, Clone, Copy, ValueEnum)]
pub enum ContentModeArg {
    /// The recorded assistant text (reproducible across engines).
    Trace,
    /// What the server generated.
    Model,
}

/// Where a Responses conversation is kept.
#[derive(Debug, Clone, Copy, ValueEnum)]
pub enum ResponsesStateArg {
    /// Every request resends the conversation.
    Client,
    /// Later turns chain previous_response_id.
    Server,
}

/// How open-loop sessions are spaced.
#[derive(Debug, Clone, Copy, ValueEnum)]
pub enum ArrivalArg {
    /// Exponential gaps (a Poisson process), seeded by --seed.
    Poisson,
    /// Evenly spaced.
    Constant,
    /// Gamma-distributed gaps of shape --burstiness (vLLM's definition; 1 is Poisson).
    Gamma,
    /// Each session starts at its recorded offset (a timed trace: Mooncake, LMCache), times
    /// --time-scale; no --rate.
    Trace,
}

/// `bench run` flags. They become a [`RunSpec`], recorded in `run.json` (header values never
/// are) so that `--resume` replays the same plan with the same settings.
#[derive(Debug, Clone, Args)]
pub struct RunCmd {
    /// Finish the run in RUN_DIR that crashed or was stopped, with the configuration recorded
    /// in its run.json: finished sessions are kept, partly played ones are played again from
    /// their first turn (their earlier records are marked `superseded`), and result.json counts
    /// each planned session once. Only --header (header values are never recorded),
    /// --secret-header, -q, --json, --progress-interval and --no-progress-bar may be given
    /// with it.
    #[arg(long, value_name = "RUN_DIR")]
    pub resume: Option<PathBuf>,
    /// Start from the run spec in FILE (TOML, or JSON when it ends in .json; --print-spec
    /// writes one, examples/specs/ has more; docs/spec.md): flags given beside it override the
    /// settings they name. Relative paths in it are from its folder.
    #[arg(long, value_name = "FILE")]
    pub spec: Option<PathBuf>,
    /// Print the run spec the flags (and --spec) make, as TOML (with --json: as JSON, the body
    /// `bench serve`'s POST /api/runs takes), and exit without running.
    #[arg(long)]
    pub print_spec: bool,
    /// Server to benchmark (http:// or https://). Without it, the embedded simulator is started.
    #[arg(long, env = "BENCH_BASE_URL")]
    pub base_url: Option<String>,
    /// Model name; by default the first model listed by GET /v1/models.
    #[arg(long)]
    pub model: Option<String>,
    /// Server family [default: detected from /v1/models and /metrics]. Decides the cache-flush
    /// endpoint and whether SGLang's cache-hit split is asked for; a mismatch with what is
    /// detected is warned about, and the given value wins.
    #[arg(long, value_enum)]
    pub backend: Option<BackendArg>,
    /// Open loop: start this many sessions per second, whatever the server's speed (each
    /// session still plays turn by turn). Latency is also reported from when each turn was
    /// due (`ttft_from_due_ms`), and the dispatch lag shows when the client fell behind.
    #[arg(long, value_name = "SESSIONS_PER_S")]
    pub rate: Option<f64>,
    /// Closed loop: start the -c sessions evenly over this time (e.g. 5s) instead of all at
    /// once; turns sent before enough are active fall outside the steady window.
    #[arg(long, value_parser = parse_duration, conflicts_with = "rate")]
    pub ramp_up: Option<Duration>,
    /// Spacing of open-loop session starts [default: poisson]. `trace` needs no --rate: the
    /// trace's own timestamps decide.
    #[arg(long, value_enum)]
    pub arrival: Option<ArrivalArg>,
    /// Trace arrivals: multiply every recorded offset (0.5 plays the trace twice as fast).
    #[arg(long, value_name = "F")]
    pub time_scale: Option<f64>,
    /// Gamma arrivals: the shape B; below 1 burstier than Poisson, above 1 more even (the
    /// gaps' coefficient of variation is 1/sqrt(B)).
    #[arg(long, value_name = "B")]
    pub burstiness: Option<f64>,
    /// Play the first N sessions of the pool, cut to 3 turns, before measuring; their records
    /// are marked `warmup` and left out of every metric.
    #[arg(
        long,
        default_value_t = 0,
        value_name = "N",
        visible_alias = "warmup-requests"
    )]
    pub warmup_sessions: u32,
    /// Empty the server's prefix cache before the run (vLLM: POST /reset_prefix_cache, which
    /// needs VLLM_SERVER_DEV_MODE=1; SGLang: POST /flush_cache). Fails when it cannot.
    #[arg(long)]
    pub flush_cache: bool,
    /// Play shard I of N (0-based: 0/4 to 3/4) of the plan, for runs spread over several
    /// machines: every host plans the whole pool from the same flags and --seed, then keeps a
    /// deterministic part of it (each session in exactly one shard, balanced by planned
    /// tokens). -c, --rate, --max-in-flight and --ramp-up are this shard's own: 8 shards at
    /// -c 128 drive 1,024 sessions. Put the shards together with `bench merge`.
    #[arg(long, value_name = "I/N", conflicts_with = "shards", help_heading = SHARDING)]
    pub shard: Option<bench_workload::shard::Shard>,
    /// Play one of N shards, I taken from JOB_COMPLETION_INDEX (set by Kubernetes in each pod
    /// of an Indexed Job; docs/deploy/kubernetes.md).
    #[arg(long, value_name = "N", help_heading = SHARDING)]
    pub shards: Option<u32>,
    /// Plan and check the server, then start the measured run at this UTC time (RFC 3339, e.g.
    /// 2026-12-02T10:00:00Z), so that shards on several hosts start together. Refused when
    /// already more than 5 s past.
    #[arg(long, value_name = "UTC_TIME", value_parser = bench_run::placement::parse_start_at, help_heading = SHARDING)]
    pub start_at: Option<time::OffsetDateTime>,
    /// Run for this long, looping the pool (e.g. 90s, 5m); no new session or turn after it.
    #[arg(long, value_parser = parse_duration_or_zero)]
    pub duration: Option<Duration>,
    /// Hard fuse on the whole run: requests still in flight are cut (0: none).
    #[arg(long, value_parser = parse_duration_or_zero)]
    pub max_duration: Option<Duration>,
    /// Per-request timeout.
    #[arg(long, value_parser = parse_duration_or_zero, default_value = "600s")]
    pub turn_timeout: Duration,
    /// Stop a session at its next turn boundary once it has run this long (0: never).
    #[arg(long, value_parser = parse_duration_or_zero)]
    pub session_timeout: Option<Duration>,
    /// Send a failed turn again up to N times (default 0: a benchmark must not hide errors).
    /// Only HTTP 408/429/500/502/503/504, connection failures, broken connections and streams
    /// cut before their end are retried; every failed attempt stays in the turn's record
    /// (`attempts`, `failed_attempts`) and in result.json's per-attempt error counts.
    #[arg(long, value_name = "N", default_value_t = 0)]
    pub retries: u32,
    /// The wait before the first retry, doubling each time; a server's `Retry-After` (whole
    /// seconds) is honoured instead. Either is capped at --retry-max-wait.
    #[arg(long, value_parser = parse_duration, default_value = "500ms")]
    pub retry_backoff: Duration,
    /// The longest wait between attempts.
    #[arg(long, value_parser = parse_duration, default_value = "30s")]
    pub retry_max_wait: Duration,
    /// Cap on one event-stream line or event a server sends (bytes, or 8MiB, 1GiB...): past it
    /// the turn is a `response_too_large` error and the rest is not read.
    #[arg(long, value_name = "SIZE", value_parser = bench_transport::limits::parse_bytes,
          default_value = "8MiB", help_heading = "Response size caps")]
    pub max_event_bytes: u64,
    /// Cap on one response body, streamed or not (past it: `response_too_large`).
    #[arg(long, value_name = "SIZE", value_parser = bench_transport::limits::parse_bytes,
          default_value = "64MiB", help_heading = "Response size caps")]
    pub max_response_bytes: u64,
    /// Cap on one non-streamed answer read whole: a JSON completion, /v1/models, /metrics
    /// (past it: `response_too_large`).
    #[arg(long, value_name = "SIZE", value_parser = bench_transport::limits::parse_bytes,
          default_value = "8MiB", help_heading = "Response size caps")]
    pub max_json_bytes: u64,
    /// Wait this long for GET /v1/models to answer 200 before the run (0: try once).
    #[arg(long, value_parser = parse_duration_or_zero, default_value = "60s",
          visible_alias = "ready-check-timeout-sec")]
    pub ready_timeout: Duration,
    /// The model's window for the context guard [default: `max_model_len` from /v1/models, or
    /// llama.cpp's per-slot `meta.n_ctx`].
    #[arg(long)]
    pub max_model_len: Option<u64>,
    /// Multiply every tool wait by this.
    #[arg(long, default_value_t = 1.0)]
    pub gap_scale: f64,
    /// Do not wait between turns.
    #[arg(long)]
    pub no_gaps: bool,
    /// Do not mark replays of recycled sessions (they may then hit the cache their previous
    /// play warmed).
    #[arg(long)]
    pub no_cache_bust: bool,
    /// Send `max_tokens` instead of `max_completion_tokens`. Without it a server not known to
    /// honour `max_completion_tokens` (not vLLM, SGLang or llama.cpp) gets one short check
    /// turn first, and `max_tokens` if it ignored the newer field (a notice says so; run.json
    /// records it as `output_cap`).
    #[arg(long)]
    pub legacy_max_tokens: bool,
    /// The API every turn calls: chat (/v1/chat/completions), responses (/v1/responses),
    /// messages (Anthropic /v1/messages; `x-api-key` from ANTHROPIC_API_KEY) or completions
    /// (/v1/completions, the conversation rendered as "User: …" paragraphs). See
    /// docs/metrics.md for what pins the output and where usage comes from in each.
    #[arg(long, default_value = "chat", value_name = "API")]
    pub endpoint: bench_transport::Endpoint,
    /// --endpoint responses: resend the conversation as input items (client), or send only
    /// the new input with previous_response_id (server: the server keeps the conversation, and
    /// what joins it is what the model generated).
    #[arg(long, value_enum, default_value_t = ResponsesStateArg::Client)]
    pub responses_state: ResponsesStateArg,
    /// Do not send `ignore_eos` (output may stop before the pinned length).
    #[arg(long)]
    pub no_ignore_eos: bool,
    /// What joins the conversation after each turn.
    #[arg(long, value_enum, default_value_t = ContentModeArg::Trace)]
    pub content_mode: ContentModeArg,
    /// Ask for whole JSON responses instead of streams (TTFT is then the whole response time).
    #[arg(long)]
    pub disable_stream: bool,
    /// Sampling temperature, sent as `temperature` [default: not sent].
    #[arg(long)]
    pub temperature: Option<f64>,
    /// Sent as `top_p`, when below 1.0.
    #[arg(long)]
    pub top_p: Option<f64>,
    /// Sent as `top_k`.
    #[arg(long, allow_negative_numbers = true)]
    pub top_k: Option<i64>,
    /// Sent as `presence_penalty`.
    #[arg(long, allow_negative_numbers = true)]
    pub presence_penalty: Option<f64>,
    /// JSON object sent as `chat_template_kwargs`, e.g. '{"enable_thinking": false}' (`{}`
    /// sends nothing).
    #[arg(long, value_name = "JSON")]
    pub chat_template_kwargs: Option<String>,
    /// JSON object merged into every request body last (over the sampling flags too).
    #[arg(long, value_name = "JSON")]
    pub extra_request_body: Option<String>,
    /// Extra request header, `K=V` (repeatable). Only the names are recorded in run.json. The
    /// values of Authorization, Proxy-Authorization and headers whose names contain key,
    /// token, secret, auth or cookie are secrets: never written or shown (`***`; see
    /// docs/secrets.md).
    #[arg(long = "header", value_name = "K=V")]
    pub headers: Vec<String>,
    /// Treat the value of header NAME (a --header) as a secret too, whatever its name: it is
    /// replaced by `***` wherever it would be written or shown (repeatable).
    #[arg(long = "secret-header", value_name = "NAME")]
    pub secret_headers: Vec<String>,
    /// Send each session's id in this header (a stable routing key for routers); without a
    /// value, in `X-SMG-Routing-Key` (agentic-bench's).
    #[arg(long, value_name = "HEADER", num_args = 0..=1, default_missing_value = "X-SMG-Routing-Key")]
    pub routing_key: Option<String>,
    /// Response header naming the worker that served a turn (routing stickiness).
    #[arg(long, value_name = "HEADER")]
    pub worker_header: Option<String>,
    /// A turn counts in the steady window when at least ceil(F × C) sessions were active.
    #[arg(long, default_value_t = 0.9)]
    pub steady_frac: f64,
    /// Service-level objectives for goodput, e.g. `ttft_ms=500,tpot_ms=50`.
    #[arg(long)]
    pub slo: Option<String>,
    /// A session-level objective: the per-turn bounds every turn of a session must meet and
    /// a bound on the session's end-to-end time, e.g. `ttft_ms=2000,tpot_ms=50,session_s=600`
    /// (keys ttft_ms, tpot_ms, e2e_ms, session_s). result.json's sessions.session_slo gives the
    /// share of session plays that met it; bench sweep --find-max then searches on it.
    #[arg(long, value_name = "SPEC")]
    pub session_slo: Option<String>,
    /// Exit 1 when more than this fraction of turns failed.
    #[arg(long, default_value_t = 0.0)]
    pub max_error_rate: f64,
    /// Exit 1 unless the run's validity verdict is `valid` (printed first in the report; its
    /// checks and thresholds are in docs/report.md).
    #[arg(long)]
    pub require_valid: bool,
    /// Tokens per KV-cache block of the server, for the warm-cache validity check when the
    /// server's /metrics does not say (vLLM's and the simulator's do; 16 is vLLM's default,
    /// SGLang's page size is usually 1).
    #[arg(long, value_name = "TOKENS", value_parser = clap::value_parser!(u32).range(1..))]
    pub cache_block_size: Option<u32>,
    /// Price of one GPU-hour, USD: result.json `cost` gives $ per million output tokens, per
    /// turn and per session over the measured phase (× --gpus).
    #[arg(long, value_name = "USD")]
    pub cost_per_hour: Option<f64>,
    /// GPUs the deployment holds, for --cost-per-hour [default: 1].
    #[arg(long, value_name = "N", requires = "cost_per_hour", value_parser = clap::value_parser!(u32).range(1..))]
    pub gpus: Option<u32>,
    /// Run directory (default: `runs/<UTC time>-<pid>`).
    #[arg(long)]
    pub run_dir: Option<PathBuf>,
    /// Print result.json instead of the report.
    #[arg(long)]
    pub json: bool,
    /// Append one JSON line summarizing the run to FILE (one line per run, for scripts and
    /// users migrating from agentic-bench's --output-file).
    #[arg(long, value_name = "FILE", visible_alias = "output-file")]
    pub output: Option<PathBuf>,
    /// A label for the run, in run.json, the report and the --output line (`tag`).
    #[arg(long)]
    pub tag: Option<String>,
    /// Write every turn record as a CSV row to FILE.
    #[arg(long, value_name = "FILE")]
    pub csv: Option<PathBuf>,
    /// When the run ends, send every measured turn as an OpenTelemetry span (GenAI semantic
    /// conventions; a span per session play above them) to this OTLP/HTTP endpoint, e.g.
    /// http://127.0.0.1:4318 (posts to /v1/traces). A receiver that is down costs a warning.
    #[arg(long, value_name = "URL")]
    pub otlp_endpoint: Option<String>,
    /// When the run ends, log it to this MLflow tracking server (REST API): the spec as
    /// parameters, the headline figures as metrics, the validity verdict as a tag,
    /// result.json and the HTML report as artifacts. A sweep logs a parent run with a child per
    /// point. A server that is down costs a warning.
    #[arg(long, value_name = "URL")]
    pub mlflow: Option<String>,
    /// The MLflow experiment, created when missing [default: bench].
    #[arg(long, value_name = "NAME", requires = "mlflow")]
    pub mlflow_experiment: Option<String>,
    /// Scrape the server's /metrics this often (into scrapes.jsonl; summarized as `server` in
    /// result.json). A baseline is taken before the first turn and a final one after the last.
    /// 0 is --no-metrics.
    #[arg(long, value_parser = parse_duration_or_zero, default_value = "5s")]
    pub metrics_interval: Duration,
    /// Do not scrape /metrics.
    #[arg(long)]
    pub no_metrics: bool,
    /// Also scrape this Prometheus endpoint at the same times (repeatable), e.g. a DCGM
    /// exporter beside the server: http://gpu-node:9400/metrics. Each is summarized in
    /// result.json `scrape_targets`; DCGM power or energy gives `energy` (J per turn, per
    /// session) and the report's power chart. One that fails is dropped with a warning.
    #[arg(long = "scrape", value_name = "URL")]
    pub scrape_targets: Vec<String>,
    /// After the first Ctrl-C or SIGTERM, turns in flight get this long to finish before they
    /// are cut (a second signal cuts them at once).
    #[arg(long, value_parser = parse_duration, default_value = "30s")]
    pub grace: Duration,
    /// Progress display: a bar on a terminal, otherwise a heartbeat line every this often (0:
    /// none, as -q).
    #[arg(long, value_parser = parse_duration_or_zero, default_value = "5s")]
    pub progress_interval: Duration,
    /// Heartbeat lines instead of the bar, even on a terminal.
    #[arg(long, visible_alias = "disable-tqdm")]
    pub no_progress_bar: bool,
    /// No progress display.
    #[arg(long, short = 'q')]
    pub quiet: bool,
    /// Server host: requests go to http://HOST:PORT (--base-url wins).
    #[arg(long, help_heading = ABENCH)]
    pub host: Option<String>,
    /// Server port (host 127.0.0.1 by default) [default with --host: by --backend: vllm 8000,
    /// sglang and openai 30000, llamacpp 8080].
    #[arg(long, help_heading = ABENCH)]
    pub port: Option<u16>,
    /// No effect (a note says so): every turn and session is in the run directory.
    #[arg(long, help_heading = ABENCH, overrides_with = "no_output_details")]
    pub output_details: bool,
    /// No effect: the --output line is a summary.
    #[arg(long, help_heading = ABENCH, overrides_with = "output_details")]
    pub no_output_details: bool,
    /// No effect (a note says so): every session is in the run directory's sessions.jsonl.
    #[arg(long, help_heading = ABENCH)]
    pub verbose: bool,
    /// The same as --help.
    #[arg(long, action = ArgAction::HelpLong, help_heading = ABENCH)]
    help_advanced: Option<bool>,
    /// Refused, saying where faults are injected instead (`bench sim --fault` takes the same
    /// KIND=RATE form, which a user may try here).
    #[arg(long, hide = true, value_name = "KIND=RATE")]
    pub fault: Vec<String>,
    /// Dataset and selection.
    #[command(flatten)]
    pub plan: PlanArgs,
    /// TLS for an https:// --base-url.
    #[command(flatten)]
    pub tls: crate::TlsArgs,
    /// Embedded simulator (without --base-url).
    #[command(flatten)]
    pub sim: EmbeddedSimArgs,
}

/// The embedded simulator's model, for `bench run` without `--base-url` (see `bench sim --help`).
#[derive(Debug, Clone, Args)]
#[command(next_help_heading = "Embedded simulator (without --base-url)")]
pub struct EmbeddedSimArgs {
    /// Fixed TTFT in ms (with --sim-itl-ms).
    #[arg(long, requires = "sim_itl_ms")]
    pub sim_ttft_ms: Option<f64>,
    /// Fixed gap between tokens in ms (with --sim-ttft-ms).
    #[arg(long, requires = "sim_ttft_ms")]
    pub sim_itl_ms: Option<f64>,
    /// No simulated delay at all.
    #[arg(long)]
    pub sim_instant: bool,
    /// Context window of the simulated model (the bundled sample has sessions up to ~90K
    /// tokens).
    #[arg(long, default_value_t = 131_072)]
    pub sim_max_model_len: u32,
    /// KV-cache capacity in tokens.
    #[arg(long, default_value_t = SimConfig::default().kv_capacity_tokens)]
    pub sim_kv_capacity_tokens: u64,
    /// Sequence slots.
    #[arg(long, default_value_t = SimConfig::default().max_num_seqs)]
    pub sim_max_num_seqs: usize,
    /// Multiply every simulated delay.
    #[arg(long, default_value_t = 1.0)]
    pub sim_time_scale: f64,
    /// The first N output tokens of every answer are reasoning (TTFA then trails TTFT).
    #[arg(long, default_value_t = 0, value_name = "N")]
    pub sim_reasoning_tokens: u32,
}

impl EmbeddedSimArgs {
    /// The same model as `bench sim`'s flags describe it (the rest at their defaults).
    pub fn to_model_args(&self) -> SimModelArgs {
        let d = SimConfig::default();
        SimModelArgs {
            ttft_ms: self.sim_ttft_ms,
            itl_ms: self.sim_itl_ms,
            instant: self.sim_instant,
            flavor: crate::FlavorArg::Vllm,
            max_model_len: self.sim_max_model_len,
            prefill_ms_per_token: d.prefill_ms_per_token,
            decode_step_ms: d.decode_step_base_ms,
            decode_step_ms_per_seq: d.decode_step_ms_per_seq,
            max_num_seqs: self.sim_max_num_seqs,
            max_num_batched_tokens: d.max_num_batched_tokens,
            kv_capacity_tokens: self.sim_kv_capacity_tokens,
            block_size: d.block_size,
            time_scale: self.sim_time_scale,
            seed: 0,
            default_max_tokens: d.default_max_tokens,
            tokenizer: None,
            reasoning_tokens: self.sim_reasoning_tokens,
        }
    }
}

/// Parses `90s`, `5m`, `1h`, `250ms` or plain seconds; refuses 0.
pub fn parse_duration(s: &str) -> Result<Duration, String> {
    match parse_duration_or_zero(s)? {
        d if d.is_zero() => Err(format!("{:?}: a duration must be positive", s.trim())),
        d => Ok(d),
    }
}

/// [`parse_duration`], taking 0 too (what it means is the flag's to say).
pub fn parse_duration_or_zero(s: &str) -> Result<Duration, String> {
    let s = s.trim();
    let (num, mult) = if let Some(n) = s.strip_suffix("ms") {
        (n, 0.001)
    } else if let Some(n) = s.strip_suffix('s') {
        (n, 1.0)
    } else if let Some(n) = s.strip_suffix('m') {
        (n, 60.0)
    } else if let Some(n) = s.strip_suffix('h') {
        (n, 3600.0)
    } else {
        (s, 1.0)
    };
    let v: f64 = num
        .trim()
        .parse()
        .map_err(|_| format!("{s:?} is not a duration (e.g. 90s, 5m, 250ms)"))?;
    if !v.is_finite() || v < 0.0 {
        return Err(format!("{s:?}: a duration must not be negative"));
    }
    Ok(Duration::from_secs_f64(v * mult))
}

/// `p` made absolute (a resumed run may start elsewhere).
pub fn absolute(p: &std::path::Path) -> PathBuf {
    std::path::absolute(p).unwrap_or_else(|_| p.to_owned())
}

/// Where each flag's value goes in a [`RunSpec`] (JSON pointers, see
/// [`bench_run::specfile::overlay`]): what a flag given beside `--spec` overrides. Flags that
/// are not part of a spec are in [`NOT_IN_SPEC`]; a test checks that every flag is in one.
pub const SPEC_KEYS: &[(&str, &[&str])] = &[
    ("base_url", &["/target/url/base_url"]),
    ("host", &["/target/url/base_url"]),
    ("port", &["/target/url/base_url"]),
    ("ready_timeout", &["/target/url/ready_timeout"]),
    ("ca_cert", &["/target/url/tls/ca_cert"]),
    ("insecure", &["/target/url/tls/insecure"]),
    ("client_cert", &["/target/url/tls/client_cert"]),
    ("client_key", &["/target/url/tls/client_key"]),
    ("sim_ttft_ms", &["/target/embedded/latency"]),
    ("sim_itl_ms", &["/target/embedded/latency"]),
    ("sim_instant", &["/target/embedded/latency"]),
    ("sim_max_model_len", &["/target/embedded/max_model_len"]),
    (
        "sim_kv_capacity_tokens",
        &["/target/embedded/kv_capacity_tokens"],
    ),
    ("sim_max_num_seqs", &["/target/embedded/max_num_seqs"]),
    ("sim_time_scale", &["/target/embedded/time_scale"]),
    (
        "sim_reasoning_tokens",
        &["/target/embedded/reasoning_tokens"],
    ),
    ("dataset", &["/plan/dataset"]),
    ("agentic", &["/plan/dataset"]),
    ("dataset_name", &["/plan/dataset"]),
    ("dataset_path", &["/plan/dataset"]),
    ("turns", &["/plan/dataset/random/turns"]),
    ("input_increment", &["/plan/dataset/random/input_increment"]),
    ("output_len", &["/plan/dataset/random/output_len"]),
    ("gap_policy", &["/plan/dataset/random/gap"]),
    ("tokenizer", &["/plan/tokenizer"]),
    ("min_turns", &["/plan/min_turns"]),
    ("max_turns", &["/plan/max_turns"]),
    ("min_context", &["/plan/min_context"]),
    ("max_context", &["/plan/max_context"]),
    ("num_sessions", &["/plan/num_sessions"]),
    (
        "concurrency",
        &[
            "/plan/concurrency",
            "/load/closed/concurrency",
            "/load/open/max_in_flight",
        ],
    ),
    ("seed", &["/plan/seed", "/load/open/arrival/seed"]),
    ("output_policy", &["/plan/output"]),
    ("system_prompt_tokens", &["/plan/system_prompt_tokens"]),
    ("gap_cap_ms", &["/plan/gap_cap_ms", "/request/tool_waits"]),
    ("raw_gaps", &["/plan/raw_gaps"]),
    ("skip_invalid", &["/plan/skip_invalid"]),
    ("max_trace_line", &["/plan/max_trace_line_bytes"]),
    ("tool_messages", &["/plan/tool_messages"]),
    ("rate", &["/load/open/arrival/rate"]),
    ("arrival", &["/load/open/arrival/process"]),
    (
        "time_scale",
        &["/load/open/arrival/process/trace/time_scale"],
    ),
    (
        "burstiness",
        &["/load/open/arrival/process/gamma/burstiness"],
    ),
    ("ramp_up", &["/load/closed/ramp_up"]),
    ("model", &["/request/model"]),
    ("max_model_len", &["/request/max_model_len"]),
    ("legacy_max_tokens", &["/request/output_cap_field"]),
    ("no_ignore_eos", &["/request/ignore_eos"]),
    ("disable_stream", &["/request/response"]),
    ("content_mode", &["/request/content_mode"]),
    ("no_cache_bust", &["/request/cache_bust"]),
    ("no_gaps", &["/request/tool_waits"]),
    ("gap_scale", &["/request/tool_waits"]),
    ("extra_request_body", &["/request/extra_body"]),
    ("temperature", &["/request/extra_body/temperature"]),
    ("top_p", &["/request/extra_body/top_p"]),
    ("top_k", &["/request/extra_body/top_k"]),
    (
        "presence_penalty",
        &["/request/extra_body/presence_penalty"],
    ),
    (
        "chat_template_kwargs",
        &["/request/extra_body/chat_template_kwargs"],
    ),
    ("routing_key", &["/request/routing_header"]),
    ("worker_header", &["/request/worker_header"]),
    ("endpoint", &["/request/endpoint"]),
    ("responses_state", &["/request/responses_state"]),
    ("duration", &["/limits/duration"]),
    ("max_duration", &["/limits/max_duration"]),
    ("turn_timeout", &["/limits/turn_timeout"]),
    ("session_timeout", &["/limits/session_timeout"]),
    ("max_event_bytes", &["/limits/max_event_bytes"]),
    ("max_response_bytes", &["/limits/max_response_bytes"]),
    ("max_json_bytes", &["/limits/max_json_bytes"]),
    ("retries", &["/retry/max"]),
    ("retry_backoff", &["/retry/backoff"]),
    ("retry_max_wait", &["/retry/max_wait"]),
    ("warmup_sessions", &["/warmup_sessions"]),
    ("scrape_targets", &["/scrape_targets"]),
    ("cost_per_hour", &["/judge/cost"]),
    ("gpus", &["/judge/cost"]),
    ("metrics_interval", &["/scrape"]),
    ("no_metrics", &["/scrape"]),
    ("backend", &["/backend"]),
    ("flush_cache", &["/flush_cache"]),
    ("steady_frac", &["/judge/steady_frac"]),
    ("max_error_rate", &["/judge/max_error_rate"]),
    ("slo", &["/judge/slo"]),
    ("session_slo", &["/judge/session_slo"]),
    ("require_valid", &["/judge/require_valid"]),
    ("cache_block_size", &["/judge/cache_block_size"]),
    ("output", &["/exports/result_line"]),
    ("csv", &["/exports/turns_csv"]),
    ("otlp_endpoint", &["/exports/otlp_endpoint"]),
    ("mlflow", &["/exports/mlflow"]),
    ("mlflow_experiment", &["/exports/mlflow"]),
    ("tag", &["/exports/tag"]),
    ("shard", &["/placement/shard"]),
    ("shards", &["/placement/shard"]),
    ("start_at", &["/placement/start_at"]),
];

/// The `bench run` flags that are not settings of the run (how it is shown, where its
/// directory goes, header values, no-ops kept for agentic-bench).
pub const NOT_IN_SPEC: &[&str] = &[
    "resume",
    "spec",
    "print_spec",
    "headers",
    "secret_headers",
    "run_dir",
    "json",
    "grace",
    "progress_interval",
    "no_progress_bar",
    "quiet",
    "output_details",
    "no_output_details",
    "verbose",
    "help_advanced",
    "fault",
];

impl RunCmd {
    /// The run these flags describe, over `--spec`'s when given (`given`: the ids of the
    /// flags given on the command line, which override the file): checked, paths made
    /// absolute (a resume may start elsewhere), header values left out.
    pub fn to_spec_given(&self, given: &[String]) -> Result<RunSpec, CliError> {
        match self.to_spec_and_sweep(given)? {
            (spec, None) => Ok(spec),
            (_, Some(_)) => Err(CliError::Usage(format!(
                "--spec {}: a sweep spec (it has a sweep table): play it with bench sweep --spec",
                self.spec
                    .as_deref()
                    .unwrap_or_else(|| "".as_ref())
                    .display()
            ))),
        }
    }

    /// [`RunCmd::to_spec_given`], and the `sweep` table of `--spec`'s file if it has one.
    pub fn to_spec_and_sweep(
        &self,
        given: &[String],
    ) -> Result<(RunSpec, Option<SweepPlan>), CliError> {
        let Some(path) = &self.spec else {
            return Ok((self.to_spec()?, None));
        };
        let (file, sweep) = bench_run::specfile::read_run_or_sweep(path).map_err(run_error)?;
        let is = |ids: &[&str]| ids.iter().any(|id| given.iter().any(|g| g == id));
        // The flags that choose a target or a load take the file's, so that the flags given
        // beside it land in the same shape.
        let mut cmd = self.clone();
        if let Target::Url { base_url, .. } = &file.target
            && !is(&["base_url", "host", "port"])
        {
            cmd.base_url = Some(base_url.clone());
        }
        if let Load::Open { arrival, .. } = &file.load
            && !is(&["rate", "arrival", "ramp_up"])
        {
            cmd.arrival = Some(match arrival.process {
                ArrivalProcess::Poisson => ArrivalArg::Poisson,
                ArrivalProcess::Constant => ArrivalArg::Constant,
                ArrivalProcess::Gamma { burstiness } => {
                    cmd.burstiness = cmd.burstiness.or(Some(burstiness));
                    ArrivalArg::Gamma
                }
                ArrivalProcess::Trace { time_scale } => {
                    cmd.time_scale = cmd.time_scale.or(Some(time_scale));
                    ArrivalArg::Trace
                }
            });
            cmd.rate =
                (!matches!(arrival.process, ArrivalProcess::Trace { .. })).then_some(arrival.rate);
        }
        let flags = cmd.to_spec()?;
        let pointers: Vec<&str> = SPEC_KEYS
            .iter()
            .filter(|(id, _)| is(&[id]))
            .flat_map(|(_, p)| p.iter().copied())
            .collect();
        let spec = bench_run::specfile::overlay(&file, &flags, &pointers).map_err(run_error)?;
        spec.validate().map_err(run_error)?;
        Ok((spec, sweep))
    }

    /// The run these flags describe: checked, paths made absolute (a resume may start
    /// elsewhere), header values left out.
    pub fn to_spec(&self) -> Result<RunSpec, CliError> {
        let usage = |m: &str| Err(CliError::Usage(m.into()));
        if !self.fault.is_empty() {
            return usage(
                "--fault: bench run does not break its own requests (its turns would then \
                 measure the client, not the server): inject faults at the server with bench \
                 sim --fault KIND=RATE (429, 503, resets, stalls, cut streams...) or on the \
                 network with tc netem (docs/reliability.md); a client that cancels mid-stream \
                 is the interrupt journey of bench journeys",
            );
        }
        if self.burstiness.is_some() && !matches!(self.arrival, Some(ArrivalArg::Gamma)) {
            return usage("--burstiness needs --arrival gamma");
        }
        let trace = matches!(self.arrival, Some(ArrivalArg::Trace));
        if self.time_scale.is_some() && !trace {
            return usage("--time-scale needs --arrival trace");
        }
        if trace && self.rate.is_some() {
            return usage(
                "--arrival trace starts sessions at their recorded times: --rate does not apply \
                 (use --time-scale to play the trace faster or slower)",
            );
        }
        if self.arrival.is_some() && !trace && self.rate.is_none() {
            return usage("--arrival needs --rate (or --arrival trace)");
        }
        if self.duration.is_some_and(|d| d.is_zero()) {
            return usage(
                "--duration 0 (agentic-bench: loop the pool with no deadline) is refused: give a \
                 positive duration, or leave it out to play the pool once",
            );
        }
        if self.turn_timeout.is_zero() {
            return usage(
                "--turn-timeout 0 (agentic-bench: no timeout) is refused: bench needs a finite \
                 per-request timeout, e.g. 4h",
            );
        }
        if self.output_details {
            eprintln!(
                "note: --output-details has no effect: every turn and session is recorded in the run directory (turns.jsonl, sessions.jsonl)"
            );
        }
        if self.verbose {
            eprintln!(
                "note: --verbose has no effect: every finished session is recorded in the run directory's sessions.jsonl"
            );
        }
        if let Some(r) = self.rate {
            if !r.is_finite() || r <= 0.0 {
                return Err(CliError::Usage(format!(
                    "--rate must be a positive number of sessions per second, not {r}"
                )));
            }
        }
        if !self.gap_scale.is_finite() || self.gap_scale < 0.0 {
            return usage("--gap-scale must be a non-negative number");
        }
        let mut plan = self.plan.to_config()?;
        if let bench_workload::plan::DatasetSpec::Path(p) = &mut plan.dataset {
            *p = absolute(p);
        }
        if let bench_workload::tokenize::TokenizerSpec::Path(p) = &mut plan.tokenizer {
            *p = absolute(p);
        }
        let target = match self.base_url()? {
            Some(base_url) => Target::Url {
                base_url,
                header_names: Vec::new(),
                secret_header_names: Vec::new(),
                ready_timeout: self.ready_timeout,
                tls: self.tls.options(),
            },
            None => {
                let any = std::net::SocketAddr::from(([127, 0, 0, 1], 0));
                let c = self.sim.to_model_args().to_config(any, String::new());
                Target::Embedded(EmbeddedSim::from_config(&c.map_err(CliError::Usage)?))
            }
        };
        // Trace arrivals: the rate is the trace's, set once the plan is built.
        let load = match self.rate.or(trace.then_some(0.0)) {
            Some(rate) => Load::Open {
                arrival: Arrival {
                    rate,
                    process: match self.arrival.unwrap_or(ArrivalArg::Poisson) {
                        ArrivalArg::Poisson => ArrivalProcess::Poisson,
                        ArrivalArg::Constant => ArrivalProcess::Constant,
                        ArrivalArg::Gamma => ArrivalProcess::Gamma {
                            burstiness: self.burstiness.unwrap_or(1.0),
                        },
                        ArrivalArg::Trace => ArrivalProcess::Trace {
                            time_scale: self.time_scale.unwrap_or(1.0),
                        },
                    },
                    seed: self.plan.seed,
                },
                max_in_flight: self.plan.concurrency.filter(|&c| c > 0),
            },
            None => Load::Closed {
                concurrency: self.plan.concurrency(),
                ramp_up: self.ramp_up,
            },
        };
        let request = RequestShape {
            model: self.model.clone(),
            max_model_len: self.max_model_len,
            output_cap_field: if self.legacy_max_tokens {
                OutputCapField::MaxTokens
            } else {
                OutputCapField::Auto
            },
            ignore_eos: !self.no_ignore_eos,
            response: if self.disable_stream {
                ResponseMode::Whole
            } else {
                ResponseMode::Stream
            },
            content_mode: match self.content_mode {
                ContentModeArg::Trace => ContentMode::Trace,
                ContentModeArg::Model => ContentMode::Model,
            },
            cache_bust: !self.no_cache_bust,
            cache_bust_tag: None,
            tool_waits: if self.no_gaps {
                ToolWaits::Skip
            } else {
                ToolWaits::Honour {
                    scale: self.gap_scale,
                    cap: Duration::from_secs_f64(self.plan.gap_cap_ms.max(0.0) / 1000.0),
                }
            },
            extra_body: {
                let mut body = crate::parse_extra_body(self.extra_request_body.as_deref())?;
                let sampling = Sampling {
                    temperature: self.temperature,
                    top_p: self.top_p,
                    top_k: self.top_k,
                    presence_penalty: self.presence_penalty,
                    chat_template_kwargs: self.chat_template_kwargs()?,
                };
                sampling.merge_into(&mut body).map_err(run_error)?;
                body
            },
            routing_header: self.routing_key.clone(),
            worker_header: self.worker_header.clone(),
            endpoint: self.endpoint,
            responses_state: match self.responses_state {
                ResponsesStateArg::Client => bench_runner::ResponsesState::Client,
                ResponsesStateArg::Server => bench_runner::ResponsesState::Server,
            },
        };
        let placement = bench_run::placement::Placement::from_flags(
            self.shard,
            self.shards,
            std::env::var("JOB_COMPLETION_INDEX").ok().as_deref(),
            self.start_at,
        )
        .map_err(run_error)?;
        let spec = RunSpec {
            placement,
            graders: Default::default(),
            target,
            plan,
            load,
            request,
            limits: Limits {
                duration: self.duration,
                max_duration: self.max_duration.filter(|d| !d.is_zero()),
                turn_timeout: self.turn_timeout,
                session_timeout: self.session_timeout.filter(|d| !d.is_zero()),
                max_event_bytes: self.max_event_bytes,
                max_response_bytes: self.max_response_bytes,
                max_json_bytes: self.max_json_bytes,
            },
            retry: bench_runner::Retry {
                max: self.retries,
                backoff: self.retry_backoff,
                max_wait: self.retry_max_wait,
            },
            warmup_sessions: self.warmup_sessions,
            scrape_targets: self.scrape_targets.clone(),
            scrape: if self.no_metrics || self.metrics_interval.is_zero() {
                Scraping::Off
            } else {
                Scraping::Every(self.metrics_interval)
            },
            backend: match self.backend {
                None | Some(BackendArg::Auto) => BackendChoice::Auto,
                Some(BackendArg::Vllm) => BackendChoice::Named(Backend::Vllm),
                Some(BackendArg::Sglang) => BackendChoice::Named(Backend::Sglang),
                Some(BackendArg::Llamacpp) => BackendChoice::Named(Backend::Llamacpp),
                Some(BackendArg::Openai) => BackendChoice::Named(Backend::Unknown),
            },
            flush_cache: self.flush_cache,
            judge: Judge {
                steady_frac: self.steady_frac,
                max_error_rate: self.max_error_rate,
                slo: self.slo.clone(),
                session_slo: self.session_slo.clone(),
                require_valid: self.require_valid,
                cache_block_size: self.cache_block_size,
                cost: self.cost_per_hour.map(|usd| bench_report::cost::CostModel {
                    usd_per_gpu_hour: usd,
                    gpus: self.gpus.unwrap_or(1),
                }),
            },
            exports: Exports {
                result_line: self.output.as_deref().map(absolute),
                turns_csv: self.csv.as_deref().map(absolute),
                tag: self.tag.clone(),
                otlp_endpoint: self.otlp_endpoint.clone(),
                mlflow: self
                    .mlflow
                    .as_ref()
                    .map(|url| bench_run::mlflow::MlflowSpec {
                        url: url.clone(),
                        experiment: self
                            .mlflow_experiment
                            .clone()
                            .unwrap_or_else(|| "bench".to_owned()),
                        parent_run_id: None,
                    }),
            },
        };
        spec.validate().map_err(run_error)?;
        Ok(spec)
    }

    /// The server: --base-url, else http://HOST:PORT from --host/--port (agentic-bench's), else
    /// none (the embedded simulator).
    fn base_url(&self) -> Result<Option<String>, CliError> {
        if self.base_url.is_some() || (self.host.is_none() && self.port.is_none()) {
            return Ok(self.base_url.clone());
        }
        let port = self.port.or(match self.backend {
            Some(BackendArg::Vllm) => Some(8000),
            Some(BackendArg::Sglang | BackendArg::Openai) => Some(30000),
            Some(BackendArg::Llamacpp) => Some(8080),
            None | Some(BackendArg::Auto) => None,
        });
        let Some(port) = port else {
            return Err(CliError::Usage(
                "--host needs --port, a named --backend or --base-url: bench does not probe \
                 ports 30000 and 8000 as agentic-bench does"
                    .into(),
            ));
        };
        let host = self.host.as_deref().unwrap_or("127.0.0.1");
        Ok(Some(if host.contains(':') && !host.starts_with('[') {
            format!("http://[{host}]:{port}")
        } else {
            format!("http://{host}:{port}")
        }))
    }

    /// `--chat-template-kwargs`, parsed.
    fn chat_template_kwargs(&self) -> Result<Option<serde_json::Map<String, Value>>, CliError> {
        let Some(text) = &self.chat_template_kwargs else {
            return Ok(None);
        };
        match serde_json::from_str::<Value>(text) {
            Ok(Value::Object(m)) => Ok(Some(m)),
            Ok(_) => Err(CliError::Usage(
                r#"--chat-template-kwargs must be a JSON object, e.g. '{"enable_thinking": false}'"#
                    .into(),
            )),
            Err(e) => Err(CliError::Usage(format!(
                "--chat-template-kwargs is not valid JSON: {e}"
            ))),
        }
    }
}
