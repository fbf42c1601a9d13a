//! `bench sweep`: one run per load level into a sweep directory, stopping early at
//! saturation, or (`--find-max`) a search for the highest level meeting a goodput target. The
//! levels, the search, the points, the stopper and the sweep directory's files are
//! `bench_run::sweep`, its text `bench_report::sweep`;
//! this is clap, progress, signals and exit codes.

use std::path::PathBuf;
use std::sync::{Arc, Mutex, OnceLock, PoisonError};
use std::time::Duration;

use bench_report::sweep::{SweepAxis, SweepStop, SweepSummary, fmt_level};
use bench_run::sweep::{self, Levels, PointEnd, Search, Stopper, Sweep};
use bench_run::{CancelledBy, Notice, RunError, RunOptions, RunSpec};
use clap::{ArgMatches, Args, Command, FromArgMatches};

use crate::progress::{Mode, Progress};
use crate::run::{Signals, run_error};
use crate::run_args::{ArrivalArg, RunCmd};
use crate::workload::plan_progress;
use crate::{CliError, out};

/// `bench sweep`'s own flags (the `bench run` flags come with them, see [`SweepCmd`]).
#[derive(Debug, Clone, Args)]
pub struct SweepFlags {
    /// Closed loop: one run per concurrency, e.g. 1,2,4,8,16 (whole numbers, strictly
    /// increasing). A point's pool is 2 × its concurrency unless --num-sessions is given.
    #[arg(
        short = 'c',
        long = "concurrency",
        id = "sweep_concurrency",
        value_name = "LIST"
    )]
    pub concurrency: Option<String>,
    /// Open loop: one run per rate, sessions started per second, e.g. 0.5,1,2,4 (strictly
    /// increasing); --arrival sets their spacing, --max-concurrency caps the sessions in
    /// flight.
    #[arg(long, value_name = "LIST")]
    pub rates: Option<String>,
    /// Where the points' run directories (c0008, r0000.50: they sort by level), sweep.json,
    /// sweep.md and sweep.html go; must be new or empty [default: sweeps/<UTC time>-<pid>].
    #[arg(long, value_name = "DIR")]
    pub sweep_dir: Option<PathBuf>,
    /// Instead of every level, search for the highest load whose goodput (share of turns
    /// meeting --slo) reaches --goodput-target: run the lowest and the highest level given,
    /// then bisect between them. Needs --slo.
    #[arg(long)]
    pub find_max: bool,
    /// --find-max: the share of turns that must meet the SLO, 0–1 [default: 0.9].
    #[arg(long, value_name = "SHARE")]
    pub goodput_target: Option<f64>,
    /// --find-max: the search stops when the highest level meeting the target and the lowest
    /// missing it are this close [default: 1 for concurrency; for rates the smallest gap
    /// between the levels given].
    #[arg(long, value_name = "X")]
    pub step: Option<f64>,
}

/// `bench sweep` flags: its own ([`SweepFlags`]) and every `bench run` flag ([`RunCmd`]), with
/// these changes: the run's `--concurrency` is `--max-concurrency` here (the cap of an
/// open-loop point: `--concurrency` is the sweep's list), and `--rate`, `--run-dir`,
/// `--resume` and `--csv` are hidden and refused.
#[derive(Debug, Clone)]
pub struct SweepCmd {
    /// The sweep's own flags.
    pub sweep: SweepFlags,
    /// What every point shares.
    pub run: RunCmd,
}

impl FromArgMatches for SweepCmd {
    fn from_arg_matches(m: &ArgMatches) -> Result<Self, clap::Error> {
        Ok(SweepCmd {
            sweep: SweepFlags::from_arg_matches(m)?,
            run: RunCmd::from_arg_matches(m)?,
        })
    }

    fn update_from_arg_matches(&mut self, m: &ArgMatches) -> Result<(), clap::Error> {
        self.sweep.update_from_arg_matches(m)?;
        self.run.update_from_arg_matches(m)
    }
}

impl Args for SweepCmd {
    fn augment_args(cmd: Command) -> Command {
        adapt(RunCmd::augment_args(SweepFlags::augment_args(cmd)))
    }

    fn augment_args_for_update(cmd: Command) -> Command {
        adapt(RunCmd::augment_args_for_update(
            SweepFlags::augment_args_for_update(cmd),
        ))
    }
}

/// The `bench run` flags as a sweep takes them.
fn adapt(cmd: Command) -> Command {
    cmd.after_help(
        "Every `bench run` flag applies to each point, a run of its own (its own embedded \
         simulator, warmup and cache flush); give --duration so that each point measures as long. \
         -c/--concurrency is the sweep's list: the run's concurrency flag is --max-concurrency \
         here, the in-flight cap of --rates points. --rate, --run-dir, --resume and --csv do not \
         apply. Exit 1 also when the sweep is interrupted or a point fails --max-error-rate or \
         --require-valid. See docs/sweep.md.",
    )
    .mut_arg("concurrency", |a| {
        a.long("max-concurrency")
            .short(None)
            .visible_alias(None)
            .help(
                "With --rates: the most sessions in flight at each point [default: no limit]; \
                 the pool is 2 × this (or 16) unless --num-sessions. Not with --concurrency \
                 LIST, where each point's concurrency is its level",
            )
            .long_help(None)
    })
    .mut_arg("json", |a| {
        a.help("Print sweep.json at the end instead of the table")
            .long_help(None)
    })
    .mut_arg("run_dir", |a| a.hide(true))
    .mut_arg("resume", |a| a.hide(true))
    .mut_arg("rate", |a| a.hide(true))
    .mut_arg("csv", |a| a.hide(true))
    .mut_arg("print_spec", |a| a.hide(true))
}

/// SIGINT and SIGTERM, as `bench run` takes them, for the point that is playing.
fn spawn_signals(stop: Arc<Stopper>, grace: Duration) -> tokio::task::JoinHandle<()> {
    tokio::spawn(async move {
        let mut term = Signals::new();
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

/// What every point's run needs from the command line.
struct Points {
    base: RunSpec,
    axis: SweepAxis,
    dir: PathBuf,
    headers: Vec<(String, String)>,
    secret_headers: Vec<String>,
    interval: Duration,
    mode: Mode,
    stop: Arc<Stopper>,
    /// Points whose run failed its --max-error-rate or --require-valid judgement.
    judged: Mutex<Vec<String>>,
    /// The first point could not start for bad input (exit 2, as `bench run`).
    invalid: Mutex<Option<String>>,
}

impl Points {
    /// Plays one point, with the progress display and signals of `bench run`.
    async fn play(&self, level: f64, name: String) -> PointEnd {
        if self.stop.stopping() {
            return PointEnd::Interrupted(None);
        }
        let spec = sweep::spec_at(&self.base, self.axis, level);
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
            run_dir: Some(self.dir.join(&name)),
            headers: self.headers.clone(),
            secret_headers: self.secret_headers.clone(),
            plan_progress: Some(plan_progress()),
            notices: Some(notices),
            ..RunOptions::default()
        };
        let handle = match bench_run::start(spec, options).await {
            Ok(h) => h,
            Err(e) => {
                if let RunError::Invalid(m) = &e {
                    let mut first = self.invalid.lock().unwrap_or_else(PoisonError::into_inner);
                    first.get_or_insert_with(|| m.clone());
                }
                return PointEnd::from_report(level, &name, Err(&e)).0;
            }
        };
        self.stop.set(handle.canceller());
        let progress = Progress::start(handle.progress_counters(), self.interval, self.mode);
        if let Some(b) = progress.bar() {
            let _ = bar.set(b.clone());
        }
        let report = handle.wait().await;
        progress.finish();
        self.stop.clear();
        let (end, notes) = PointEnd::from_report(level, &name, report.as_ref());
        for n in notes {
            eprintln!("note: {n}");
        }
        if let Ok(r) = &report {
            for w in &r.warnings {
                eprintln!("warning: {name}: {w}");
            }
            if let (PointEnd::Done(_), Err(why)) = (&end, r.gate()) {
                self.judged
                    .lock()
                    .unwrap_or_else(PoisonError::into_inner)
                    .push(format!("{name}: {why}"));
            }
        }
        end
    }
}

fn usage<T>(m: impl Into<String>) -> Result<T, CliError> {
    Err(CliError::Usage(m.into()))
}

/// Runs `bench sweep`.
pub async fn run_sweep(args: SweepCmd, given: &[String]) -> Result<(), CliError> {
    let SweepCmd {
        sweep: f,
        run: mut r,
    } = args;
    if r.resume.is_some() {
        return usage(
            "--resume does not apply to a sweep: each point is a new run in the sweep directory \
             (bench run --resume DIR/c0008 finishes one point on its own)",
        );
    }
    if r.run_dir.is_some() {
        return usage(
            "--run-dir does not apply to a sweep: each point's run directory is in --sweep-dir \
             (DIR/c0008, DIR/r0001.00, ...)",
        );
    }
    if r.print_spec {
        return usage("--print-spec prints a run's spec: give it to bench run");
    }
    if r.rate.is_some() {
        return usage("--rate is a single rate: a sweep takes --rates LIST (e.g. 0.5,1,2)");
    }
    if r.csv.is_some() {
        return usage(
            "--csv does not apply to a sweep: every point's turns are in its run directory \
             (turns.jsonl)",
        );
    }
    let (axis, list) = match (&f.concurrency, &f.rates) {
        (Some(c), None) => (SweepAxis::Concurrency, c),
        (None, Some(rates)) => (SweepAxis::Rate, rates),
        (None, None) => {
            return usage(
                "bench sweep needs --concurrency LIST (e.g. 1,2,4,8) or --rates LIST (e.g. \
                 0.5,1,2)",
            );
        }
        (Some(_), Some(_)) => return usage("give --concurrency LIST or --rates LIST, not both"),
    };
    let levels = Levels::parse(axis, list).map_err(run_error)?;
    match axis {
        SweepAxis::Concurrency => {
            if r.plan.concurrency.is_some() {
                return usage(
                    "--max-concurrency caps the sessions in flight of open-loop points \
                     (--rates); with --concurrency LIST each point's concurrency is its level",
                );
            }
            if r.arrival.is_some() {
                return usage(
                    "--arrival spaces open-loop session starts: it goes with --rates, not \
                     --concurrency",
                );
            }
        }
        SweepAxis::Rate => {
            if r.ramp_up.is_some() {
                return usage(
                    "--ramp-up starts closed-loop sessions gradually: it goes with --concurrency \
                     LIST, not --rates",
                );
            }
            if matches!(r.arrival, Some(ArrivalArg::Trace)) {
                return usage(
                    "--arrival trace starts sessions at their recorded times: there is no rate \
                     to sweep",
                );
            }
        }
    }
    let search = if f.find_max {
        if r.slo.is_none() {
            return usage(
                "--find-max needs --slo (e.g. --slo ttft_ms=500): goodput is the share of turns \
                 meeting it",
            );
        }
        Search::FindMax {
            target: f.goodput_target.unwrap_or(sweep::DEFAULT_GOODPUT_TARGET),
            step: f.step,
        }
    } else {
        if f.goodput_target.is_some() || f.step.is_some() {
            return usage("--goodput-target and --step go with --find-max");
        }
        Search::Walk
    };
    let plan = Sweep::new(levels, search).map_err(run_error)?;
    // The spec every point shares, checked once as `bench run` checks it, at the first level.
    let first = plan.levels().values()[0];
    let mut given = given.to_vec();
    match axis {
        SweepAxis::Concurrency => r.plan.concurrency = Some(first as u32),
        SweepAxis::Rate => r.rate = Some(first),
    }
    given.push(match axis {
        SweepAxis::Concurrency => "concurrency".into(),
        SweepAxis::Rate => "rate".into(),
    });
    let headers = crate::parse_headers(&r.headers)?;
    crate::secrets::init(
        &headers,
        &r.secret_headers,
        &bench_run::secrets::Secrets::default(),
    );
    let base = r.to_spec_given(&given)?;

    let dir = f.sweep_dir.clone().unwrap_or_else(sweep::default_sweep_dir);
    if std::fs::read_dir(&dir).is_ok_and(|mut d| d.next().is_some()) {
        return usage(format!(
            "--sweep-dir {}: not empty: a sweep needs a new (or empty) directory",
            dir.display()
        ));
    }
    std::fs::create_dir_all(&dir)
        .map_err(|e| CliError::Failed(format!("cannot create {}: {e}", dir.display())))?;
    let config = serde_json::json!({
        "levels": plan.levels().values(),
        "header_names": headers.iter().map(|(k, _)| k).collect::<Vec<_>>(),
        "spec": serde_json::to_value(&base).unwrap_or_default(),
    });

    let stop = Arc::new(Stopper::default());
    let sig = spawn_signals(stop.clone(), r.grace);
    let points = Points {
        base,
        axis,
        dir: dir.clone(),
        headers,
        secret_headers: r.secret_headers.clone(),
        interval: r.progress_interval,
        mode: r.progress_mode(),
        stop,
        judged: Mutex::default(),
        invalid: Mutex::default(),
    };
    let json = r.json;
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
    let mut write_error = None;
    let mut printed = Ok(());
    let summary = sweep::run(
        &plan,
        config,
        |level, name| points.play(level, name),
        |s: &SweepSummary| {
            if let Err(e) = sweep::write_files_with(&dir, s, crate::secrets::get()) {
                write_error.get_or_insert(e.to_string());
            }
            if !json && printed.is_ok() {
                let mut text = String::new();
                if s.points.len() == 1 {
                    text.push_str(&bench_report::sweep::table_header());
                }
                if let Some(p) = s.points.last() {
                    text.push_str(&bench_report::sweep::table_row(p));
                }
                printed = out(&text);
            }
        },
    )
    .await;
    sig.abort();
    if let Some(e) = write_error {
        eprintln!("warning: {e}");
    }
    sweep::write_files_with(&dir, &summary, crate::secrets::get()).map_err(run_error)?;
    if json {
        let text = serde_json::to_string_pretty(&summary)
            .map_err(|e| CliError::Failed(format!("cannot encode the sweep summary: {e}")))?;
        out(&format!("{text}\n"))?;
    } else {
        printed?;
        let mut text = String::new();
        if let Some(fm) = &summary.find_max {
            if summary.stop != SweepStop::Completed {
                text.push_str("the search did not end; so far: ");
            }
            text.push_str(&sweep::find_max_text(fm));
            text.push('\n');
        }
        if !matches!(summary.stop, SweepStop::Failed { .. }) {
            text.push_str(&sweep::stop_text(&summary));
            text.push('\n');
        }
        text.push_str(&format!("sweep directory: {}\n", dir.display()));
        out(&text)?;
    }
    match summary.stop {
        SweepStop::Failed { reason } => {
            let invalid = points
                .invalid
                .lock()
                .unwrap_or_else(PoisonError::into_inner)
                .take();
            match invalid {
                // Bad input the spec could not tell (a dataset that does not load).
                Some(m) if summary.points.is_empty() => Err(CliError::Usage(m)),
                _ => Err(CliError::Failed(format!("a point failed: {reason}"))),
            }
        }
        SweepStop::Interrupted | SweepStop::Running => Err(CliError::Failed(format!(
            "the sweep was interrupted after {} point(s); {} has them",
            summary.points.len(),
            dir.join(sweep::SWEEP_JSON).display()
        ))),
        SweepStop::Completed | SweepStop::Saturated { .. } => {
            let judged = points
                .judged
                .into_inner()
                .unwrap_or_else(PoisonError::into_inner);
            if judged.is_empty() {
                Ok(())
            } else {
                Err(CliError::Failed(format!(
                    "{} point(s) failed their judgement: {}",
                    judged.len(),
                    judged.join("; ")
                )))
            }
        }
    }
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use super::*;
    use clap::Parser;

    #[derive(Debug, Parser)]
    struct T {
        #[command(flatten)]
        sweep: SweepCmd,
    }

    #[test]
    fn the_run_flags_come_along_and_the_concurrency_is_the_list() {
        let t = T::try_parse_from([
            "t",
            "-c",
            "1,2,4",
            "--slo",
            "ttft_ms=100",
            "--duration",
            "5s",
            "--sim-max-num-seqs",
            "4",
        ])
        .unwrap();
        assert_eq!(t.sweep.sweep.concurrency.as_deref(), Some("1,2,4"));
        assert_eq!(t.sweep.run.slo.as_deref(), Some("ttft_ms=100"));
        assert_eq!(t.sweep.run.sim.sim_max_num_seqs, 4);
        assert_eq!(t.sweep.run.plan.concurrency, None);
        let t = T::try_parse_from(["t", "--rates", "1,2", "--max-concurrency", "16"]).unwrap();
        assert_eq!(t.sweep.run.plan.concurrency, Some(16));
        assert_eq!(t.sweep.sweep.rates.as_deref(), Some("1,2"));
    }
}
