//! The `bench` command line: argument types and the commands they run. `main.rs` only parses,
//! builds the runtime and maps errors to exit codes.
//!
//! Commands: `bench sim` (serve the embedded simulator), `bench probe` (measure one turn),
//! `bench plan` (build and summarize a workload plan), `bench import` (convert traces),
//! `bench run` (replay and measure), `bench journeys` (time API operations), `bench status`
//! (read a run directory), `bench serve` (the control plane).

mod compare;
mod journeys;
mod merge;
mod progress;
mod report;
mod run;
mod run_args;
pub mod secrets;
mod serve;
mod status;
mod sweep;
mod tls_args;
mod workload;

pub use compare::run_compare;
pub use journeys::run_journeys;
pub use merge::run_merge;
pub use report::run_report;
pub use run::run_run;
pub use run_args::{NOT_IN_SPEC, SPEC_KEYS};
pub use serve::run_serve;
pub use status::run_status;
pub use sweep::run_sweep;
pub use tls_args::{SimTlsArgs, TlsArgs};
pub use workload::{run_import, run_plan};

use std::io::Write;
use std::net::{IpAddr, SocketAddr};
use std::path::PathBuf;
use std::time::Duration;

use bench_run::probe::ProbeTarget;
use bench_sim::{Flavor, LatencyMode, SimConfig, SimServer};
use clap::{Args, Parser, Subcommand, ValueEnum};

/// Benchmark LLM inference servers and agent platforms under realistic agentic load.
///
/// Replays agent sessions (many turns, growing context, tool waits, prefix-cache reuse) against
/// any OpenAI-compatible server (vLLM, SGLang, llama.cpp, ...) or the embedded simulator, and
/// measures TTFT, TPOT, chunk gaps, throughput, goodput and the server's own /metrics from the
/// bytes as they arrive.
///
/// Start with `bench run` (no server needed: the embedded simulator answers), then `bench run
/// --base-url http://HOST:PORT`. Every run leaves a directory: `bench status DIR` tells what it
/// is doing, `bench run --resume DIR` finishes one that crashed. `bench journeys` times API
/// operations for CI gates. `bench COMMAND --help` explains each command.
#[derive(Debug, Parser)]
#[command(name = "bench", version, propagate_version = true)]
pub struct Cli {
    /// The command to run.
    #[command(subcommand)]
    pub command: Command,
}

/// `bench` subcommands.
///
/// Commands with numeric flags take negative numbers as values (`-c -3` is refused by the
/// flag's own check, naming it, not read as a flag `-3`).
#[derive(Debug, Subcommand)]
pub enum Command {
    /// Serve the embedded OpenAI-compatible simulator until Ctrl-C.
    ///
    /// Endpoints: POST /v1/chat/completions, POST /v1/completions, POST /v1/responses, POST
    /// /v1/messages, GET /v1/models, GET /health, GET /metrics, POST /flush_cache, POST
    /// /reset_prefix_cache; for tests POST /sim/hold, POST /sim/release, GET /sim/held and GET
    /// /sim/config (see --hold). Latency is simulated by a continuous-batching step loop
    /// (default), a fixed TTFT/ITL (--ttft-ms and --itl-ms), or no delay (--instant).
    #[command(allow_negative_numbers = true)]
    Sim(SimArgs),
    /// Send one chat turn and print TTFT, e2e, TPOT, chunk count and token usage.
    ///
    /// Without --base-url the embedded simulator is started in-process on a free loopback port.
    /// Exit codes: 0 ok, 1 the request failed (one line: the error kind and detail), 2 bad usage
    /// or input.
    #[command(allow_negative_numbers = true)]
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
    #[command(allow_negative_numbers = true)]
    Run(Box<run_args::RunCmd>),
    /// Build a workload plan from a dataset and summarize it: sessions, turns, tokens, peak
    /// context, system prompt, tool waits and an estimate of wall time.
    ///
    /// Exit codes: 0 ok, 2 bad input (one line: `FILE:LINE: what is wrong`) or flags.
    #[command(allow_negative_numbers = true)]
    Plan(workload::PlanCmd),
    /// Convert traces (lmcache, mooncake, sharegpt, openai-messages, swe-agent, and the agent
    /// graphs of cc-traces, otel, tracelab) into the native session format (.jsonl or
    /// .jsonl.zst).
    Import(workload::ImportCmd),
    /// Time user journeys (API operations) with latency or throughput runners; report, gate
    /// and compare with a baseline.
    ///
    /// Packs: `openai` (list_models, chat_completion, stream_ttft, stream_complete, interrupt,
    /// metrics_scrape; the embedded simulator without --base-url) and `agent-sessions` (an
    /// agent server's session API); or your own journeys with --file. Exit codes: 0 ok, 1 a
    /// gate, a regression or a setup failed, 2 bad usage or input.
    #[command(allow_negative_numbers = true)]
    Journeys(Box<journeys::JourneysCmd>),
    /// Tell what a run is doing from its run directory: stopped and why, phase, process
    /// (running, gone or unknown), crashed, stalled, progress, tokens and time left.
    ///
    /// Reads events.jsonl, turns.jsonl and sessions.jsonl (a torn last line is ignored and
    /// reported); works on a live run, a finished one or one whose process died. Exit codes: 0
    /// ok, 2 the directory is missing or is not a run directory.
    Status(status::StatusCmd),
    /// Merge the run directories of a sharded run (`bench run --shard I/N`) into one run
    /// directory, exactly: records on one timeline, every figure recomputed from their union.
    ///
    /// Refuses, naming the problem, shards of different plans or configurations, missing or
    /// duplicate shard indices and unfinished shards (--partial merges them anyway and marks
    /// the result). The merged directory works with `bench status`, `bench report` and `bench
    /// compare`. See docs/deploy/kubernetes.md. Exit codes: 0 merged, 2 refused or bad usage.
    Merge(merge::MergeCmd),
    /// Serve the control plane: a runs API, live event streams, Prometheus and a dashboard.
    ///
    /// POST /api/runs starts a run from a JSON spec (`{}`: the default run), one at a time; GET
    /// /api/runs/ID/events streams its events (SSE, resumable with Last-Event-ID); /metrics is
    /// Prometheus text; / is the dashboard. Loopback only without --token. See docs/serve.md.
    Serve(serve::ServeCmd),
    /// Report one run (its directory or result.json) as text, JSON, CSV, markdown or a
    /// self-contained HTML page with charts.
    ///
    /// Recomputes the result from the run's records when result.json is missing or older than
    /// them. Exit codes: 0 ok, 2 the run directory cannot be read.
    Report(report::ReportCmd),
    /// Compare a candidate run with a base run: per headline metric the change with a
    /// bootstrap confidence interval and a verdict.
    ///
    /// Exit codes: 0 no significant regression, 1 a significant regression beyond
    /// --threshold, 2 bad usage or input (runs of different plans without --force).
    #[command(allow_negative_numbers = true)]
    Compare(Box<compare::CompareCmd>),
    /// Run one replay per load level (--concurrency 1,2,4,... or --rates 0.5,1,2,...) into a
    /// sweep directory and summarize them, stopping early at saturation.
    ///
    /// Exit codes: 0 ok, 1 a point failed, the sweep was interrupted, or a point failed
    /// --max-error-rate or --require-valid, 2 bad usage or input.
    #[command(allow_negative_numbers = true)]
    Sweep(Box<sweep::SweepCmd>),
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

/// Writes `text` to stdout, every secret of the process replaced by `***`
/// ([`secrets::scrub`]).
pub(crate) fn out(text: &str) -> Result<(), CliError> {
    let text = secrets::scrub(text);
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

/// Runs `bench sim` until Ctrl-C (or SIGTERM).
pub async fn run_sim(args: SimArgs) -> Result<(), CliError> {
    // Every client connection is a descriptor: allow as many as the hard limit does.
    bench_run::lifecycle::ensure_open_files(None, "bench sim").map_err(run::run_error)?;
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
    config.hold = args.hold;
    config.faults = args.faults.to_faults().map_err(CliError::Usage)?;
    config.tls = args.tls.identity()?;
    // Taken over before the address is printed: a SIGTERM right after it stops the simulator
    // cleanly.
    let mut signals = run::Signals::new();
    let server = SimServer::start(config)
        .await
        .map_err(|e| CliError::Usage(e.to_string()))?;
    let c = server.config();
    out(&format!(
        "bench sim listening on {} (model {}, {}); Ctrl-C to stop\n",
        server.base_url(),
        c.model,
        c.mode
    ))?;
    signals.next().await;
    eprintln!("bench sim: shutting down");
    server.shutdown().await;
    Ok(())
}

/// `--header K=V` values, validated.
pub(crate) fn parse_headers(headers: &[String]) -> Result<Vec<(String, String)>, CliError> {
    headers
        .iter()
        .map(|h| {
            bench_run::spec::parse_header(h).map_err(|e| CliError::Usage(format!("--header {e}")))
        })
        .collect()
}

/// `--extra-request-body`: a JSON object, or nothing.
pub(crate) fn parse_extra_body(
    body: Option<&str>,
) -> Result<serde_json::Map<String, serde_json::Value>, CliError> {
    body.map_or(Ok(serde_json::Map::new()), |b| {
        bench_run::spec::parse_json_object(b)
            .map_err(|e| CliError::Usage(format!("--extra-request-body {e}")))
    })
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
    secrets::init(
        &headers,
        &args.secret_headers,
        &bench_run::secrets::Secrets::default(),
    );
    let extra = parse_extra_body(args.extra_request_body.as_deref())?;
    let target = match &args.base_url {
        Some(u) => ProbeTarget::Url(u.clone()),
        None => ProbeTarget::Embedded(Box::new(
            args.sim
                .to_config(
                    SocketAddr::from(([127, 0, 0, 1], 0)),
                    args.model
                        .clone()
                        .unwrap_or_else(|| SimConfig::default().model),
                )
                .map_err(CliError::Usage)?,
        )),
    };
    let probe = bench_run::probe::Probe {
        target,
        model: args.model.clone(),
        prompt: args.prompt.clone(),
        max_tokens: args.max_tokens,
        output_cap_field: if args.legacy_max_tokens {
            bench_runner::OutputCapField::MaxTokens
        } else {
            bench_runner::OutputCapField::MaxCompletionTokens
        },
        ignore_eos: !args.no_ignore_eos,
        response: if args.no_stream {
            bench_runner::ResponseMode::Whole
        } else {
            bench_runner::ResponseMode::Stream
        },
        timeout: Duration::from_secs_f64(args.timeout_s),
        headers,
        secret_headers: args.secret_headers.clone(),
        extra_body: extra,
        tls: args.tls.options(),
        endpoint: args.endpoint,
    };
    if args.tls.insecure && args.base_url.is_some() {
        eprintln!("warning: {}", bench_run::INSECURE_WARNING);
    }
    let report = bench_run::probe::probe(&probe)
        .await
        .map_err(run::run_error)?;
    if args.json {
        let text = serde_json::to_string_pretty(&report)
            .map_err(|e| CliError::Failed(format!("cannot encode the report: {e}")))?;
        out(&format!("{text}\n"))
    } else {
        out(&report.text())
    }
}
