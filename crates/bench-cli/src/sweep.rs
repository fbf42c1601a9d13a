//! `bench sweep`: one run per load level into a sweep directory, stopping early at
//! saturation, or (`--find-max`) a search for the highest level meeting a goodput target. The
//! levels, the search, the points, the stopper and the sweep directory's files are
//! `bench_run::sweep`, its text `bench_report::sweep`;
//! this is clap, progress, signals and exit codes.

use std::sync::{Arc, Mutex, PoisonError};
use std::time::Duration;

use bench_args::{SweepCmd, run_error};
use bench_report::sweep::{SweepStop, SweepSummary, fmt_level};
use bench_run::sweep::{self, Search, Stopper, SweepObserver, SweepOptions};
use bench_run::{CancelledBy, Notice, RunHandle, RunOptions, RunReport};

use crate::progress::{Mode, Progress};
use crate::run::Signals;
use crate::workload::plan_progress;
use crate::{CliError, out};

/// SIGINT and SIGTERM, as `bench run` takes them, for the point that is playing.
fn spawn_signals(
    mut term: Signals,
    stop: Arc<Stopper>,
    grace: Duration,
) -> tokio::task::JoinHandle<()> {
    tokio::spawn(async move {
        term.next().await;
        eprintln!(
            "bench sweep: stopping: no further point starts; the current point's turns in \
             flight get {} s to finish (signal again to cut them now)",
            grace.as_secs_f64()
        );
        stop.stop(CancelledBy::Signal);
        tokio::select! {
            () = term.next() => eprintln!("bench sweep: second signal: cutting turns in flight"),
            () = tokio::time::sleep(grace) => eprintln!("bench sweep: grace period over: cutting turns in flight"),
        }
        stop.abort();
    })
}

/// The progress display of each point, and the table printed as the points end.
struct Shown {
    interval: Duration,
    mode: Mode,
    json: bool,
    /// The bar of the point playing: notices go above it (an eprintln would tear it).
    bar: Arc<Mutex<Option<indicatif::ProgressBar>>>,
    progress: Mutex<Option<Progress>>,
    printed: Mutex<Result<(), CliError>>,
}

fn lock<T>(m: &Mutex<T>) -> std::sync::MutexGuard<'_, T> {
    m.lock().unwrap_or_else(PoisonError::into_inner)
}

impl SweepObserver for Shown {
    fn point_started(&self, _: &str, _: f64, run: &RunHandle) {
        let p = Progress::start(run.progress_counters(), self.interval, self.mode);
        *lock(&self.bar) = p.bar().cloned();
        *lock(&self.progress) = Some(p);
    }

    fn point_ended(&self, _: &str, _: f64, _: Option<&RunReport>) {
        *lock(&self.bar) = None;
        if let Some(p) = lock(&self.progress).take() {
            p.finish();
        }
    }

    fn summary(&self, s: &SweepSummary) {
        let mut printed = lock(&self.printed);
        if self.json || printed.is_err() {
            return;
        }
        let mut text = String::new();
        if s.points.len() == 1 {
            text.push_str(&bench_report::sweep::table_header());
        }
        if let Some(p) = s.points.last() {
            text.push_str(&bench_report::sweep::table_row(s.axis, p));
        }
        *printed = out(&text);
    }
}

/// Runs `bench sweep`.
pub async fn run_sweep(args: SweepCmd, given: &[String]) -> Result<(), CliError> {
    let spec = args.to_spec(given);
    let SweepCmd { sweep: f, run: r } = args;
    let headers = crate::parse_headers(&r.headers)?;
    let base_url = match &spec {
        Ok(s) => match &s.run.target {
            bench_run::Target::Url { base_url, .. } => Some(base_url.as_str()),
            _ => None,
        },
        Err(_) => r.base_url.as_deref(),
    };
    crate::secrets::init(
        &headers,
        &r.secret_headers,
        base_url,
        &bench_run::secrets::Secrets::default(),
    );
    let spec = spec?;
    if r.print_spec && r.json {
        return out(&format!("{}\n", serde_json::json!(spec)));
    }
    if r.print_spec {
        return out(&bench_run::specfile::to_toml(&spec).map_err(run_error)?);
    }
    let plan = spec.plan().map_err(run_error)?;
    let dir = f.sweep_dir.clone().unwrap_or_else(sweep::default_sweep_dir);
    let stop = Arc::new(Stopper::default());
    let sig = spawn_signals(Signals::new(), stop.clone(), r.grace);
    let shown = Arc::new(Shown {
        interval: r.progress_interval,
        mode: crate::run::progress_mode(&r),
        json: r.json,
        bar: Arc::default(),
        progress: Mutex::default(),
        printed: Mutex::new(Ok(())),
    });
    let slot = shown.bar.clone();
    let notices: Arc<dyn Fn(Notice) + Send + Sync> = Arc::new(move |n| {
        let line = match n {
            Notice::Info(m) => m,
            Notice::Warning(m) => format!("warning: {m}"),
        };
        match &*lock(&slot) {
            Some(b) => b.println(line),
            None => eprintln!("{line}"),
        }
    });
    let options = SweepOptions {
        dir: Some(dir.clone()),
        run: RunOptions {
            headers,
            secret_headers: r.secret_headers.clone(),
            plan_progress: Some(plan_progress()),
            notices: Some(notices),
            ..RunOptions::default()
        },
        stop,
        observer: Some(shown.clone()),
    };
    eprintln!(
        "bench sweep: {} of {} → {}",
        match plan.search() {
            Search::Walk => "every level",
            Search::FindMax { .. } => "a search",
        },
        plan.levels()
            .values()
            .iter()
            .map(|&l| fmt_level(l))
            .collect::<Vec<_>>()
            .join(", "),
        dir.display()
    );
    let outcome = sweep::play(spec, options).await;
    sig.abort();
    let outcome = outcome.map_err(run_error)?;
    if let Some(e) = &outcome.write_warning {
        eprintln!("warning: {e}");
    }
    let summary = &outcome.summary;
    if r.json {
        let text = serde_json::to_string_pretty(summary)
            .map_err(|e| CliError::Failed(format!("cannot encode the sweep summary: {e}")))?;
        out(&format!("{text}\n"))?;
    } else {
        std::mem::replace(&mut *lock(&shown.printed), Ok(()))?;
        let mut text = String::new();
        if let Some(fm) = &summary.find_max {
            if summary.stop != SweepStop::Completed {
                text.push_str("the search did not end; so far: ");
            }
            text.push_str(&sweep::find_max_text(fm));
            text.push('\n');
        }
        if let Some(rt) = &summary.retention {
            text.push_str(&sweep::retention_text(rt));
            text.push('\n');
        }
        if !matches!(summary.stop, SweepStop::Failed { .. }) {
            text.push_str(&sweep::stop_text(summary));
            text.push('\n');
        }
        text.push_str(&format!("sweep directory: {}\n", dir.display()));
        out(&text)?;
    }
    outcome.gate().map_err(run_error)
}
