//! A whole sweep from one document: a [`SweepSpec`] (a run spec and its `sweep` table) played
//! by [`play`] into a sweep directory, with the points, files and judgement of `bench sweep`.
//! The CLI, `bench serve` and programs start sweeps through it; how a point is shown is a
//! [`SweepObserver`]'s business, how a sweep is stopped its [`Stopper`]'s.
//!
//! ```no_run
//! # async fn demo() -> Result<(), bench_run::RunError> {
//! use bench_run::sweep::{SweepOptions, SweepPlan, SweepSpec, play};
//! use bench_report::sweep::SweepAxis;
//!
//! let spec = SweepSpec {
//!     run: bench_run::RunSpec::default(),
//!     sweep: SweepPlan { axis: SweepAxis::Concurrency, levels: vec![1.0, 2.0, 4.0], find_max: None },
//! };
//! let outcome = play(spec, SweepOptions::default()).await?;
//! println!("{:?} in {}", outcome.summary.stop, outcome.dir.display());
//! outcome.gate()?; // as `bench sweep`'s exit status
//! # Ok(()) }
//! ```

use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex, PoisonError};

use bench_report::sweep::{GoodputOf, SweepAxis, SweepStop, SweepSummary};
use serde::{Deserialize, Serialize};

use super::{
    DEFAULT_GOODPUT_TARGET, Levels, PointEnd, SWEEP_JSON, Search, Stopper, Sweep, spec_at,
};
use crate::spec::{Load, RunSpec};
use crate::{Notice, RunError, RunHandle, RunOptions, RunReport};

fn invalid(m: impl Into<String>) -> RunError {
    RunError::Invalid(m.into())
}

/// What a sweep varies and how it visits the levels: the `sweep` table of a [`SweepSpec`].
///
/// ```toml
/// [sweep]
/// axis = "concurrency"     # or "rate": sessions started per second
/// levels = [1, 2, 4, 8]
/// [sweep.find_max]         # optional: bisect for the highest level meeting the target
/// goodput_target = 0.9
/// ```
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct SweepPlan {
    /// `concurrency` (closed-loop points, `-c LIST`) or `rate` (open-loop points, `--rates
    /// LIST`).
    pub axis: SweepAxis,
    /// The levels, strictly increasing (whole numbers for concurrency).
    pub levels: Vec<f64>,
    /// Search for the highest level whose goodput meets a target (`--find-max`) instead of
    /// playing every level.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub find_max: Option<FindMaxPlan>,
}

/// `sweep.find_max`: the search's target and resolution.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct FindMaxPlan {
    /// The share of turns that must meet `judge.slo`, or of session plays that must meet
    /// `judge.session_slo` when it is given (`--goodput-target`, default 0.9).
    #[serde(default = "default_goodput_target")]
    pub goodput_target: f64,
    /// The search stops when the bracket is this narrow (`--step`; default 1 for concurrency,
    /// the smallest gap between the given rates).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub step: Option<f64>,
}

fn default_goodput_target() -> f64 {
    DEFAULT_GOODPUT_TARGET
}

/// A sweep as one document: the run every point shares (its load is each point's level) and
/// the `sweep` table. In a file and in `bench serve`'s `POST /api/runs` body it is a run spec
/// with a `sweep` key beside its own.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct SweepSpec {
    /// What every point shares.
    #[serde(flatten)]
    pub run: RunSpec,
    /// What varies.
    pub sweep: SweepPlan,
}

impl SweepSpec {
    /// The sweep's plan, checked: the levels, the search, and the shared run's load against
    /// the axis (a concurrency sweep plays closed-loop points, so the run's load must be
    /// closed; a rate sweep keeps an open load's arrival process and in-flight cap).
    pub fn plan(&self) -> Result<Sweep, RunError> {
        let s = &self.sweep;
        let levels = Levels::new(s.axis, s.levels.clone())?;
        match (s.axis, &self.run.load) {
            (SweepAxis::Concurrency, Load::Open { .. }) => {
                return Err(invalid(
                    "sweep.axis \"concurrency\" plays closed-loop points: the run's load must be \
                     closed (load.open's rate, arrival and in-flight cap do not apply; sweep \
                     rates with axis \"rate\")",
                ));
            }
            (
                SweepAxis::Rate,
                Load::Closed {
                    ramp_up: Some(_), ..
                },
            ) => {
                return Err(invalid(
                    "load.closed.ramp_up (--ramp-up) starts closed-loop sessions gradually: it \
                     does not go with sweep.axis \"rate\"",
                ));
            }
            (SweepAxis::Rate, Load::Open { arrival, .. })
                if matches!(arrival.process, bench_runner::ArrivalProcess::Trace { .. }) =>
            {
                return Err(invalid(
                    "arrival trace (--arrival trace) starts sessions at their recorded times: \
                     there is no rate to sweep",
                ));
            }
            _ => {}
        }
        let search = match &s.find_max {
            Some(f) => {
                let of = if self.run.judge.session_slo.is_some() {
                    GoodputOf::Sessions
                } else if self.run.judge.slo.is_some() {
                    GoodputOf::Turns
                } else {
                    return Err(invalid(
                        "sweep.find_max (--find-max) needs judge.slo (--slo, e.g. ttft_ms=500: \
                         the share of turns meeting it) or judge.session_slo (--session-slo, \
                         e.g. ttft_ms=2000,session_s=600: the share of sessions)",
                    ));
                };
                Search::FindMax {
                    target: f.goodput_target,
                    of,
                    step: f.step,
                }
            }
            None => Search::Walk,
        };
        Sweep::new(levels, search)
    }

    /// [`SweepSpec::plan`], and the run at the first level checked as `bench run` checks a
    /// spec.
    pub fn validate(&self) -> Result<Sweep, RunError> {
        let plan = self.plan()?;
        spec_at(&self.run, plan.axis(), plan.levels().values()[0]).validate()?;
        Ok(plan)
    }
}

/// Sees a sweep as it goes (called on the sweep's task: keep it quick).
pub trait SweepObserver: Send + Sync {
    /// A point's run started (its progress counters and canceller are the handle's).
    fn point_started(&self, _name: &str, _level: f64, _run: &RunHandle) {}
    /// A point's run ended (`report`: when it got that far).
    fn point_ended(&self, _name: &str, _level: f64, _report: Option<&RunReport>) {}
    /// The summary after each point that produced one (that point is the last of `points`);
    /// `sweep.json` has just been written from it.
    fn summary(&self, _summary: &SweepSummary) {}
}

/// What a sweep needs that is not in its spec.
#[derive(Clone, Default)]
pub struct SweepOptions {
    /// The sweep directory [default: [`super::default_sweep_dir`]]: new or empty.
    pub dir: Option<PathBuf>,
    /// Every point's run options (headers, notices, observers, hooks...); each point's
    /// `run_dir` is `DIR/<point>` ([`Sweep::dir_name`]).
    pub run: RunOptions,
    /// Stops the sweep from outside (a signal, an API call).
    pub stop: Arc<Stopper>,
    /// Sees each point start and end.
    pub observer: Option<Arc<dyn SweepObserver>>,
}

/// How a sweep ended.
#[derive(Debug, Clone)]
pub struct SweepOutcome {
    /// Its directory.
    pub dir: PathBuf,
    /// What `sweep.json` holds.
    pub summary: SweepSummary,
    /// Points whose run did not pass its gate (`max_error_rate`, `require_valid`), as
    /// `c0008: why`.
    pub judged: Vec<String>,
    /// The first point could not start for bad input (a dataset that does not load).
    pub invalid: Option<String>,
    /// Writing `sweep.json` after a point failed (the last write succeeded).
    pub write_warning: Option<String>,
}

impl SweepOutcome {
    /// `bench sweep`'s exit status: `Ok` when the sweep completed (or stopped at saturation)
    /// and every point passed its gate; `Invalid` when no point ran for bad input; otherwise
    /// `Failed` saying why (a point failed, the sweep was interrupted, points failed their
    /// gate).
    pub fn gate(&self) -> Result<(), RunError> {
        let s = &self.summary;
        match &s.stop {
            SweepStop::Failed { reason } => match &self.invalid {
                Some(m) if s.points.is_empty() => Err(RunError::Invalid(m.clone())),
                _ => Err(RunError::Failed(format!("a point failed: {reason}"))),
            },
            SweepStop::Interrupted | SweepStop::Running => Err(RunError::Failed(format!(
                "the sweep was interrupted after {} point(s); {} has them",
                s.points.len(),
                self.dir.join(SWEEP_JSON).display()
            ))),
            SweepStop::Completed | SweepStop::Saturated { .. } if self.judged.is_empty() => Ok(()),
            SweepStop::Completed | SweepStop::Saturated { .. } => Err(RunError::Failed(format!(
                "{} point(s) failed their judgement: {}",
                self.judged.len(),
                self.judged.join("; ")
            ))),
        }
    }
}

/// A directory a sweep may use: missing or empty (but for a control plane's event stream,
/// [`bench_rundir::files::STREAM`]).
fn check_dir(dir: &Path) -> Result<(), RunError> {
    let Ok(entries) = std::fs::read_dir(dir) else {
        return Ok(());
    };
    for e in entries.flatten() {
        if e.file_name() != bench_rundir::files::STREAM {
            return Err(invalid(format!(
                "--sweep-dir {}: not empty: a sweep needs a new (or empty) directory (it holds \
                 {})",
                dir.display(),
                e.file_name().to_string_lossy()
            )));
        }
    }
    Ok(())
}

/// The points of one sweep, as [`super::run`] asks for them.
struct Points<'a> {
    base: &'a RunSpec,
    axis: SweepAxis,
    dir: &'a Path,
    options: &'a SweepOptions,
    judged: Mutex<Vec<String>>,
    invalid: Mutex<Option<String>>,
}

impl Points<'_> {
    fn notice(&self, n: Notice) {
        if let Some(f) = &self.options.run.notices {
            f(n);
        }
    }

    async fn play(&self, level: f64, name: String) -> PointEnd {
        let o = self.options;
        if o.stop.stopping() {
            return PointEnd::Interrupted(None);
        }
        let spec = spec_at(self.base, self.axis, level);
        let mut run = o.run.clone();
        run.run_dir = Some(self.dir.join(&name));
        let handle = match crate::start(spec, run).await {
            Ok(h) => h,
            Err(e) => {
                if let RunError::Invalid(m) = &e {
                    let mut first = self.invalid.lock().unwrap_or_else(PoisonError::into_inner);
                    first.get_or_insert_with(|| m.clone());
                }
                if let Some(obs) = &o.observer {
                    obs.point_ended(&name, level, None);
                }
                return PointEnd::from_report(level, &name, Err(&e)).0;
            }
        };
        o.stop.set(handle.canceller());
        if let Some(obs) = &o.observer {
            obs.point_started(&name, level, &handle);
        }
        let report = handle.wait().await;
        o.stop.clear();
        if let Some(obs) = &o.observer {
            obs.point_ended(&name, level, report.as_ref().ok());
        }
        let (end, notes) = PointEnd::from_report(level, &name, report.as_ref());
        for n in notes {
            self.notice(Notice::Info(format!("note: {n}")));
        }
        if let Ok(r) = &report {
            for w in &r.warnings {
                self.notice(Notice::Warning(format!("{name}: {w}")));
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

/// Plays a sweep: checks the spec ([`SweepSpec::validate`]), creates the sweep directory,
/// plays each point the search picks into `DIR/<point>`, writes `sweep.json`, `sweep.md` and
/// `sweep.html` after every point and at the end (every secret of the run options scrubbed),
/// and returns how it ended. `Err` only when it could not start (bad spec, directory) or the
/// final files could not be written; a point that fails ends the sweep with
/// [`SweepStop::Failed`] in the outcome.
pub async fn play(mut spec: SweepSpec, options: SweepOptions) -> Result<SweepOutcome, RunError> {
    let plan = spec.validate()?;
    let dir = options.dir.clone().unwrap_or_else(super::default_sweep_dir);
    check_dir(&dir)?;
    std::fs::create_dir_all(&dir)
        .map_err(|e| RunError::Failed(format!("cannot create {}: {e}", dir.display())))?;
    let o = &options.run;
    let secrets = crate::secrets::run_secrets(&o.headers, &o.secret_headers, &o.secrets);
    let config = serde_json::json!({
        "levels": plan.levels().values(),
        "header_names": o.headers.iter().map(|(k, _)| k).collect::<Vec<_>>(),
        "sweep": spec.sweep,
        "spec": serde_json::to_value(&spec.run).unwrap_or_default(),
    });
    // --mlflow: a parent run, each point's run its child.
    let parent = match &spec.run.exports.mlflow {
        Some(m) => {
            let name = dir
                .file_name()
                .map(|n| n.to_string_lossy().into_owned())
                .unwrap_or_default();
            let tags = [
                ("bench.version", env!("CARGO_PKG_VERSION").to_owned()),
                ("bench.sweep_dir", dir.display().to_string()),
                ("bench.sweep.axis", plan.axis().as_str().to_owned()),
            ];
            match crate::mlflow::MlflowRun::start(m, &name, &tags).await {
                Ok(run) => Some((m.clone(), run)),
                Err(e) => {
                    if let Some(f) = &options.run.notices {
                        f(Notice::Warning(format!("mlflow: sweep not logged: {e}")));
                    }
                    None
                }
            }
        }
        None => None,
    };
    if let (Some((_, run)), Some(m)) = (&parent, spec.run.exports.mlflow.as_mut()) {
        m.parent_run_id = Some(run.run_id.clone());
    }
    let points = Points {
        base: &spec.run,
        axis: plan.axis(),
        dir: &dir,
        options: &options,
        judged: Mutex::default(),
        invalid: Mutex::default(),
    };
    let mut write_warning = None;
    let summary = super::run(
        &plan,
        config,
        |level, name| points.play(level, name),
        |s: &SweepSummary| {
            if let Err(e) = super::write_files_with(&dir, s, &secrets) {
                write_warning.get_or_insert(e.to_string());
            }
            if let Some(obs) = &options.observer {
                obs.summary(s);
            }
        },
    )
    .await;
    super::write_files_with(&dir, &summary, &secrets)?;
    if let Some((m, run)) = &parent {
        let scrubbed = secrets.scrub_value(summary.clone());
        let notice = match log_parent(run, &dir, &scrubbed).await {
            Ok(()) => Notice::Info(format!(
                "mlflow: sweep logged as run {} in {:?}",
                run.run_id, m.experiment
            )),
            Err(e) => Notice::Warning(format!("mlflow: sweep not logged: {e}")),
        };
        if let Some(f) = &options.run.notices {
            f(notice);
        }
    }
    let judged = points
        .judged
        .into_inner()
        .unwrap_or_else(PoisonError::into_inner);
    let invalid = points
        .invalid
        .into_inner()
        .unwrap_or_else(PoisonError::into_inner);
    Ok(SweepOutcome {
        dir,
        summary,
        judged,
        invalid,
        write_warning,
    })
}

/// The sweep's parent run: its configuration as parameters, the search's or the retention
/// curve's answer as metrics, `sweep.json` and `sweep.html` as artifacts.
async fn log_parent(
    run: &crate::mlflow::MlflowRun,
    dir: &Path,
    s: &SweepSummary,
) -> Result<(), String> {
    let params = crate::mlflow::params_of(&s.config);
    let mut metrics = vec![("points".to_owned(), s.points.len() as f64)];
    if let Some(b) = s.find_max.as_ref().and_then(|f| f.best) {
        metrics.push(("find_max_best".to_owned(), b));
    }
    if let Some(h) = s.retention.as_ref().and_then(|r| r.half_life_s) {
        metrics.push(("cache_half_life_s".to_owned(), h));
    }
    let stop = [("bench.sweep.stop", super::stop_text(s))];
    run.log(&params, &metrics, &stop).await?;
    for name in [super::SWEEP_JSON, super::SWEEP_HTML] {
        let bytes = std::fs::read(dir.join(name)).map_err(|e| format!("{name}: {e}"))?;
        run.artifact(name, bytes).await?;
    }
    run.finish(!matches!(s.stop, SweepStop::Failed { .. }))
        .await
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use super::*;

    fn spec(text: &str) -> Result<SweepSpec, RunError> {
        let (run, sweep) = crate::specfile::parse_run_or_sweep("s.toml", text)?;
        Ok(SweepSpec {
            run,
            sweep: sweep.unwrap(),
        })
    }

    #[test]
    fn a_sweep_spec_is_a_run_spec_with_a_sweep_table() {
        let s = spec(
            "[plan]\nnum_sessions = 4\n[judge]\nslo = \"ttft_ms=500\"\n[sweep]\naxis = \
             \"concurrency\"\nlevels = [1, 2, 4]\n[sweep.find_max]\n",
        )
        .unwrap();
        assert_eq!(s.run.plan.num_sessions, Some(4));
        assert_eq!(s.sweep.levels, vec![1.0, 2.0, 4.0]);
        assert_eq!(s.sweep.find_max.as_ref().unwrap().goodput_target, 0.9);
        let plan = s.validate().unwrap();
        assert!(matches!(plan.search(), Search::FindMax { .. }));
        // Written and read back, the same document.
        let text = crate::specfile::to_toml(&s).unwrap();
        assert_eq!(spec(&text).unwrap(), s, "{text}");
    }

    #[test]
    fn bad_sweep_specs_name_what_is_wrong() {
        let e = spec("[sweep]\naxis = \"concurrency\"\nlevels = [1, 2]\nstep = 1\n").unwrap_err();
        assert!(e.to_string().contains("sweep.step: line 4"), "{e}");
        assert!(e.to_string().contains("step"), "{e}");
        let e =
            spec("[plan]\nnum_sesions = 3\n[sweep]\naxis = \"rate\"\nlevels = [1]\n").unwrap_err();
        assert!(
            e.to_string()
                .contains("plan.num_sesions: line 2: unknown field"),
            "{e}"
        );
        let cases = [
            (
                "[sweep]\naxis = \"concurrency\"\nlevels = [2, 1]\n",
                "strictly increasing",
            ),
            (
                "[sweep]\naxis = \"concurrency\"\nlevels = [1, 2]\n[sweep.find_max]\n",
                "needs judge.slo",
            ),
            (
                "[load.open.arrival]\nrate = 1.0\nprocess = \"poisson\"\nseed = 1\n[sweep]\naxis = \"concurrency\"\nlevels = [1]\n",
                "load must be closed",
            ),
            (
                "[load.closed]\nconcurrency = 2\nramp_up = \"5s\"\n[sweep]\naxis = \"rate\"\nlevels = [1]\n",
                "ramp_up",
            ),
        ];
        for (text, want) in cases {
            let e = spec(text).unwrap().validate().unwrap_err();
            assert!(e.to_string().contains(want), "{text}: {e}");
        }
    }

    #[test]
    fn a_used_directory_is_refused() {
        let d = tempfile::tempdir().unwrap();
        check_dir(d.path()).unwrap();
        std::fs::write(d.path().join(bench_rundir::files::STREAM), "").unwrap();
        check_dir(d.path()).unwrap();
        std::fs::create_dir(d.path().join("c0001")).unwrap();
        let e = check_dir(d.path()).unwrap_err();
        assert!(e.to_string().contains("c0001"), "{e}");
    }
}
