//! The `bench` command line's flags: the clap definition of every command and its one
//! conversion into the libraries' specs (ripgrep's low-level args → high-level args: a
//! [`RunCmd`] becomes a checked [`bench_run::RunSpec`], a [`SweepCmd`] a
//! [`bench_run::sweep::SweepSpec`], a [`JourneysCmd`] a [`bench_run::journeys::JourneysSpec`],
//! a [`SimModelArgs`] a [`bench_sim::SimConfig`]).
//!
//! This crate declares and converts; it starts nothing (no run, no server, no runtime). The
//! `bench` binary (`bench-cli`) executes what it parses: dispatch, progress, signals,
//! rendering and exit codes. Apart, as uv's `uv-cli` and wasmtime's `wasmtime-cli-flags` are,
//! so that a program can offer `bench run`'s flags in a command line of its own (flatten
//! [`RunCmd`] into its clap struct and call [`RunCmd::to_spec`]) and so that the binary stays
//! wiring as flags are added.
//!
//! ```
//! use clap::Parser;
//!
//! /// A team's own tool, offering `bench run`'s flags under its own name.
//! #[derive(Parser)]
//! struct Gate {
//!     #[command(flatten)]
//!     run: bench_args::RunCmd,
//! }
//!
//! let gate = Gate::try_parse_from(["gate", "-c", "4", "--dataset", "random", "--turns", "3"])?;
//! let spec = gate.run.to_spec()?; // checked, as `bench run` checks it
//! assert!(matches!(spec.load, bench_run::Load::Closed { concurrency: 4, .. }));
//! // `bench_run::start(spec, options)` plays it; a bad flag is a one-line usage error.
//! let bad = Gate::try_parse_from(["gate", "--burstiness", "2"])?;
//! assert_eq!(bad.run.to_spec().unwrap_err().to_string(), "--burstiness needs --arrival gamma");
//! # Ok::<(), Box<dyn std::error::Error>>(())
//! ```

mod commands;
mod journeys;
mod plan;
mod run;
mod sim;
mod sweep;
mod tls;

pub use commands::{CompareCmd, MergeCmd, ReportCmd, ReportFormat, ServeCmd, StatusCmd};
pub use journeys::JourneysCmd;
pub use plan::{
    ABENCH, DEFAULT_CONCURRENCY, ImportCmd, PlanArgs, PlanCmd, ToolMessagesArg, plan_error,
};
pub use run::{
    ArrivalArg, BackendArg, ContentModeArg, EmbeddedSimArgs, NOT_IN_SPEC, ResponsesStateArg,
    RunCmd, SPEC_KEYS, absolute, parse_duration, parse_duration_or_zero,
};
pub use sim::{FlavorArg, ProbeArgs, SimArgs, SimFaultArgs, SimModelArgs};
pub use sweep::{SweepCmd, SweepFlags};
pub use tls::{SimTlsArgs, TlsArgs};

use clap::{Parser, Subcommand};

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
    Run(Box<RunCmd>),
    /// Build a workload plan from a dataset and summarize it: sessions, turns, tokens, peak
    /// context, system prompt, tool waits and an estimate of wall time.
    ///
    /// Exit codes: 0 ok, 2 bad input (one line: `FILE:LINE: what is wrong`) or flags.
    #[command(allow_negative_numbers = true)]
    Plan(PlanCmd),
    /// Convert traces (lmcache, mooncake, sharegpt, openai-messages, swe-agent, and the agent
    /// graphs of cc-traces, otel, tracelab) into the native session format (.jsonl or
    /// .jsonl.zst).
    Import(ImportCmd),
    /// Time user journeys (API operations) with latency or throughput runners; report, gate
    /// and compare with a baseline.
    ///
    /// Packs: `openai` (list_models, chat_completion, stream_ttft, stream_complete, interrupt,
    /// metrics_scrape; the embedded simulator without --base-url) and `agent-sessions` (an
    /// agent server's session API); or your own journeys with --file. Exit codes: 0 ok, 1 a
    /// gate, a regression or a setup failed, 2 bad usage or input.
    #[command(allow_negative_numbers = true)]
    Journeys(Box<JourneysCmd>),
    /// Tell what a run is doing from its run directory: stopped and why, phase, process
    /// (running, gone or unknown), crashed, stalled, progress, tokens and time left.
    ///
    /// Reads events.jsonl, turns.jsonl and sessions.jsonl (a torn last line is ignored and
    /// reported); works on a live run, a finished one or one whose process died. Exit codes: 0
    /// ok, 2 the directory is missing or is not a run directory.
    Status(StatusCmd),
    /// Merge the run directories of a sharded run (`bench run --shard I/N`) into one run
    /// directory, exactly: records on one timeline, every figure recomputed from their union.
    ///
    /// Refuses, naming the problem, shards of different plans or configurations, missing or
    /// duplicate shard indices and unfinished shards (--partial merges them anyway and marks
    /// the result). The merged directory works with `bench status`, `bench report` and `bench
    /// compare`. See docs/deploy/kubernetes.md. Exit codes: 0 merged, 2 refused or bad usage.
    Merge(MergeCmd),
    /// Serve the control plane: a runs API, live event streams, Prometheus and a dashboard.
    ///
    /// POST /api/runs starts a run from a JSON spec (`{}`: the default run), one at a time; GET
    /// /api/runs/ID/events streams its events (SSE, resumable with Last-Event-ID); /metrics is
    /// Prometheus text; / is the dashboard. Loopback only without --token. See docs/serve.md.
    Serve(ServeCmd),
    /// Report one run (its directory or result.json) as text, JSON, CSV, markdown or a
    /// self-contained HTML page with charts.
    ///
    /// Recomputes the result from the run's records when result.json is missing or older than
    /// them. Exit codes: 0 ok, 2 the run directory cannot be read.
    Report(ReportCmd),
    /// Compare a candidate run with a base run: per headline metric the change with a
    /// bootstrap confidence interval and a verdict.
    ///
    /// Exit codes: 0 no significant regression, 1 a significant regression beyond
    /// --threshold, 2 bad usage or input (runs of different plans without --force).
    #[command(allow_negative_numbers = true)]
    Compare(Box<CompareCmd>),
    /// Run one replay per load level (--concurrency 1,2,4,... or --rates 0.5,1,2,...) into a
    /// sweep directory and summarize them, stopping early at saturation.
    ///
    /// Exit codes: 0 ok, 1 a point failed, the sweep was interrupted, or a point failed
    /// --max-error-rate or --require-valid, 2 bad usage or input.
    #[command(allow_negative_numbers = true)]
    Sweep(Box<SweepCmd>),
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

impl std::error::Error for CliError {}

impl std::fmt::Display for CliError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            CliError::Usage(m) | CliError::Failed(m) => f.write_str(m),
            CliError::BrokenPipe => f.write_str("broken pipe"),
        }
    }
}

/// Maps a [`bench_run::RunError`] to its exit code: invalid input or flags → usage (2), the
/// rest → failed (1).
pub fn run_error(e: bench_run::RunError) -> CliError {
    match e {
        bench_run::RunError::Invalid(m) => CliError::Usage(m),
        other => CliError::Failed(other.to_string()),
    }
}

/// `--header K=V` values, validated.
pub fn parse_headers(headers: &[String]) -> Result<Vec<(String, String)>, CliError> {
    headers
        .iter()
        .map(|h| {
            bench_run::spec::parse_header(h).map_err(|e| CliError::Usage(format!("--header {e}")))
        })
        .collect()
}

/// `--extra-request-body`: a JSON object, or nothing.
pub fn parse_extra_body(
    body: Option<&str>,
) -> Result<serde_json::Map<String, serde_json::Value>, CliError> {
    body.map_or(Ok(serde_json::Map::new()), |b| {
        bench_run::spec::parse_json_object(b)
            .map_err(|e| CliError::Usage(format!("--extra-request-body {e}")))
    })
}
