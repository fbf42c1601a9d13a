//! `bench run`: flags → [`bench_run::RunSpec`], the run, the report, the exit code.

use std::sync::{Arc, OnceLock};
use std::time::Duration;

use bench_run::{CancelledBy, Canceller, Notice, RunHandle, RunOptions};

use bench_args::{RunCmd, run_error};

use crate::progress::{Mode, Progress};
use crate::workload::plan_progress;
use crate::{CliError, out};

/// The flags that may be given with `--resume` (clap id, flag): the one list (`--help` says
/// it in `--resume`'s text).
const ALLOWED_WITH_RESUME: &[(&str, &str)] = &[
    ("resume", "--resume"),
    ("headers", "--header"),
    ("secret_headers", "--secret-header"),
    ("quiet", "-q"),
    ("json", "--json"),
    ("progress_interval", "--progress-interval"),
    ("no_progress_bar", "--no-progress-bar"),
];

/// Runs `bench run` (or, with `--resume`, finishes an earlier one). `given` are the ids of
/// the flags given on the command line.
pub async fn run_run(args: RunCmd, given: &[String]) -> Result<(), CliError> {
    let headers = bench_args::parse_headers(&args.headers)?;
    crate::secrets::init(
        &headers,
        &args.secret_headers,
        args.base_url.as_deref(),
        &bench_run::secrets::Secrets::default(),
    );
    // Notices go above the progress bar once there is one (an eprintln would tear it).
    let bar: Arc<OnceLock<indicatif::ProgressBar>> = Arc::default();
    let slot = bar.clone();
    let notices: Arc<dyn Fn(Notice) + Send + Sync> = Arc::new(move |n| {
        let line = match n {
            Notice::Info(m) => m,
            Notice::Warning(m) => format!("warning: {m}"),
        };
        match slot.get() {
            Some(b) => b.println(line),
            None => eprintln!("{line}"),
        }
    });
    let options = RunOptions {
        run_dir: args.run_dir.clone(),
        headers,
        secret_headers: args.secret_headers.clone(),
        observers: Vec::new(),
        plan_progress: Some(plan_progress()),
        notices: Some(notices),
        ..RunOptions::default()
    };
    // Taken over before the run starts, so that a signal during its --start-at wait stops it.
    let signals = Signals::new();
    let handle = match &args.resume {
        Some(dir) => {
            let extra: Vec<String> = given
                .iter()
                .filter(|id| !ALLOWED_WITH_RESUME.iter().any(|(a, _)| a == id))
                .map(|id| format!("--{}", id.replace('_', "-")))
                .collect();
            if !extra.is_empty() {
                let allowed: Vec<&str> = ALLOWED_WITH_RESUME[1..].iter().map(|(_, f)| *f).collect();
                return Err(CliError::Usage(format!(
                    "--resume takes the run's configuration from its run.json; {} cannot be \
                     given with it (only {} can)",
                    extra.join(", "),
                    allowed.join(", ")
                )));
            }
            bench_run::resume(dir, options).await
        }
        None => {
            let spec = args.to_spec_given(given)?;
            if args.print_spec && args.json {
                return out(&format!("{}\n", serde_json::json!(spec)));
            }
            if args.print_spec {
                return out(&bench_run::specfile::to_toml(&spec).map_err(run_error)?);
            }
            bench_run::start(spec, options).await
        }
    }
    .map_err(run_error)?;
    play(handle, &args, &bar, signals).await
}

/// Shows progress and handles signals while the run plays; prints the report.
async fn play(
    handle: RunHandle,
    args: &RunCmd,
    bar: &OnceLock<indicatif::ProgressBar>,
    signals: Signals,
) -> Result<(), CliError> {
    let sig = spawn_signals(signals, handle.canceller(), args.grace);
    let progress = Progress::start(
        handle.progress_counters(),
        args.progress_interval,
        progress_mode(args),
    );
    if let Some(b) = progress.bar() {
        let _ = bar.set(b.clone());
    }
    let report = handle.wait().await;
    progress.finish();
    sig.abort();
    let report = report.map_err(run_error)?;
    for w in &report.warnings {
        eprintln!("warning: {w}");
    }
    if args.json {
        let text = serde_json::to_string_pretty(&report.result)
            .map_err(|e| CliError::Failed(format!("cannot encode the result: {e}")))?;
        out(&format!("{text}\n"))?;
    } else {
        out(&report.result.console())?;
        out(&format!("run directory: {}\n", report.dir.display()))?;
    }
    report.gate().map_err(CliError::Failed)
}

/// SIGINT (Ctrl-C) and SIGTERM, one at a time. Both are taken over when this is made, not
/// when it is first awaited: made before a run starts, a signal sent while the run waits for
/// `--start-at` stops it instead of killing the process.
pub(crate) struct Signals {
    int: Option<tokio::signal::unix::Signal>,
    term: Option<tokio::signal::unix::Signal>,
}

impl Signals {
    /// Listens for both (each where it can be listened for).
    pub(crate) fn new() -> Self {
        use tokio::signal::unix::{SignalKind, signal};
        Signals {
            int: signal(SignalKind::interrupt()).ok(),
            term: signal(SignalKind::terminate()).ok(),
        }
    }

    /// Waits for the next of either.
    pub(crate) async fn next(&mut self) {
        async fn recv(s: &mut Option<tokio::signal::unix::Signal>) {
            match s {
                Some(s) => {
                    s.recv().await;
                }
                None => std::future::pending().await,
            }
        }
        tokio::select! {
            () = recv(&mut self.int) => {}
            () = recv(&mut self.term) => {}
        }
    }
}

/// Handles SIGINT and SIGTERM: the first cancels (no new turn; turns in flight finish) and
/// starts the `grace` period; a second signal, or the end of the grace period, aborts (turns
/// in flight are cut and recorded as `cancelled`).
pub(crate) fn spawn_signals(
    mut term: Signals,
    cancel: Canceller,
    grace: Duration,
) -> tokio::task::JoinHandle<()> {
    tokio::spawn(async move {
        term.next().await;
        eprintln!(
            "bench run: stopping: no new turn starts; turns in flight get {} s to finish \
             (signal again to cut them now)",
            grace.as_secs_f64()
        );
        cancel.cancel(CancelledBy::Signal);
        tokio::select! {
            () = term.next() => eprintln!("bench run: second signal: cutting turns in flight"),
            () = tokio::time::sleep(grace) => eprintln!("bench run: grace period over: cutting turns in flight"),
        }
        cancel.abort();
    })
}

/// How progress is shown: nothing with -q or `--progress-interval 0`, heartbeat lines with
/// --no-progress-bar, else a bar on a terminal and lines otherwise.
pub(crate) fn progress_mode(args: &RunCmd) -> Mode {
    if args.quiet || args.progress_interval.is_zero() {
        Mode::Off
    } else if args.no_progress_bar {
        Mode::Lines
    } else {
        Mode::auto()
    }
}
