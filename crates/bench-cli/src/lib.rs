//! The `bench` binary's commands: each takes its parsed flags (`bench-args`), runs through the
//! libraries, shows progress, renders the outcome and returns the error that `main.rs` maps to
//! an exit code.
//!
//! Commands: `bench sim` (serve the embedded simulator), `bench probe` (measure one turn),
//! `bench plan` (build and summarize a workload plan), `bench import` (convert traces),
//! `bench run` (replay and measure), `bench sweep` (one run per load level), `bench journeys`
//! (time API operations), `bench status` (read a run directory), `bench merge` (shards into
//! one run), `bench report`, `bench compare` and `bench serve` (the control plane).

mod compare;
mod journeys;
mod merge;
mod progress;
mod report;
mod run;
pub mod secrets;
mod serve;
mod status;
mod sweep;
mod workload;

pub use bench_args::{Cli, CliError, Command, NOT_IN_SPEC, SPEC_KEYS};
pub use compare::run_compare;
pub use journeys::run_journeys;
pub use merge::run_merge;
pub use report::run_report;
pub use run::run_run;
pub use serve::run_serve;
pub use status::run_status;
pub use sweep::run_sweep;
pub use workload::{run_import, run_plan};

use std::io::Write;
use std::net::SocketAddr;
use std::time::Duration;

use bench_args::{ProbeArgs, SimArgs, parse_extra_body, parse_headers, run_error};
use bench_run::probe::ProbeTarget;
use bench_sim::{SimConfig, SimServer};

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
    bench_run::lifecycle::ensure_open_files(None, "bench sim").map_err(run_error)?;
    let mut config = args
        .sim
        .to_config(
            SocketAddr::new(args.host, args.port),
            args.model_name.clone(),
        )
        .map_err(CliError::Usage)?;
    config.request_log = args.request_log.clone();
    config.log_text = args.log_text;
    config.metrics = !args.no_metrics;
    config.gpu_metrics = args.gpu_metrics;
    config.ignore_max_completion_tokens = args.ignore_max_completion_tokens;
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
        args.base_url.as_deref(),
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
    let report = bench_run::probe::probe(&probe).await.map_err(run_error)?;
    if args.json {
        let text = serde_json::to_string_pretty(&report)
            .map_err(|e| CliError::Failed(format!("cannot encode the report: {e}")))?;
        out(&format!("{text}\n"))
    } else {
        out(&report.text())
    }
}
