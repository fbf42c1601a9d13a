//! Sweeps: one run per load level (sessions in flight, or sessions started per second), summed
//! up in a [`SweepSummary`] — the library behind `bench sweep` (docs: `docs/sweep.md`).
//!
//! - [`Levels`]: what is varied and its values, parsed from `1,2,4,8` and checked (positive,
//!   strictly increasing; whole numbers for concurrency).
//! - [`Sweep`]: the levels and how they are visited ([`Search::Walk`] every level in order,
//!   stopping early at saturation, or [`Search::FindMax`], a [`Bisection`] for the highest
//!   level whose goodput meets a target); [`Sweep::dir_name`] names each point's run directory
//!   (`c0008`, `r0000.50`: they sort by level).
//! - [`spec_at`]: a base [`RunSpec`] at one level; [`point_from_result`] and [`PointEnd`]: a
//!   finished run as a [`SweepPoint`].
//! - [`run`]: the loop, given an async closure that runs one point (so the caller decides how a
//!   run is shown and stopped); [`play_point`] is the plain closure body, [`write_files`] the
//!   sweep directory's `sweep.json`, `sweep.md` and `sweep.html`.
//! - [`play()`]: all of it from one [`SweepSpec`] (a run spec with a `sweep` table), as `bench
//!   sweep` and `bench serve` play it ([`play`](mod@play)).
//!
//! ```no_run
//! # async fn demo() -> Result<(), bench_run::RunError> {
//! use bench_run::sweep::{self, Levels, Search, Sweep};
//! use bench_report::sweep::SweepAxis;
//!
//! let sweep = Sweep::new(Levels::parse(SweepAxis::Concurrency, "1,2,4,8")?, Search::Walk)?;
//! let base = bench_run::RunSpec::default();
//! let dir = std::path::PathBuf::from("sweeps/demo");
//! let config = serde_json::json!({ "spec": &base });
//! let summary = sweep::run(
//!     &sweep,
//!     config,
//!     |level, name| {
//!         let spec = sweep::spec_at(&base, SweepAxis::Concurrency, level);
//!         let options = bench_run::RunOptions {
//!             run_dir: Some(dir.join(&name)),
//!             ..Default::default()
//!         };
//!         async move { sweep::play_point(spec, options, level, &name).await.0 }
//!     },
//!     |summary| {
//!         let _ = sweep::write_files(&dir, summary);
//!     },
//! )
//! .await;
//! sweep::write_files(&dir, &summary)?;
//! println!("{:?}", summary.stop);
//! # Ok(()) }
//! ```

use std::future::Future;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Mutex, PoisonError};

use bench_report::sweep::{
    FindMax, SweepAxis, SweepPoint, SweepStop, SweepSummary, fmt_level, saturation,
};
pub use bench_report::sweep::{
    GoodputOf, find_max_text, fmt_opt, markdown, retention, retention_text, stop_text,
};
use bench_report::{CheckStatus, Metrics, RunResult, Verdict};
use bench_rundir::StopBy;

use crate::spec::{Load, RunSpec};
use crate::{CancelledBy, Canceller, RunError, RunOptions, RunReport};

pub mod play;
pub use play::{
    FindMaxPlan, SweepObserver, SweepOptions, SweepOutcome, SweepPlan, SweepSpec, play,
};

/// The summary's file in a sweep directory.
pub const SWEEP_JSON: &str = "sweep.json";
/// The markdown table.
pub const SWEEP_MD: &str = "sweep.md";
/// The HTML page ([`bench_report::html::sweep_html`]).
pub const SWEEP_HTML: &str = "sweep.html";

/// The goodput target of `--find-max` when none is given: 90 % of turns meet the SLO.
pub const DEFAULT_GOODPUT_TARGET: f64 = 0.9;

/// Checks that do not pass when the client, not the server, set the pace: a point that fails
/// or warns on one of them is `client_bound` (closed loop: a late dispatch; open loop: sessions
/// starting behind their schedule; either: the client's own CPU near a core).
pub const CLIENT_CHECKS: &[&str] = &["client_cpu", "dispatch_lag", "schedule_slip"];

/// Levels whose run directories would be named alike, and rates finer than this, are refused:
/// a rate is written with at most this many decimals.
const MAX_DECIMALS: usize = 6;

fn invalid(m: impl Into<String>) -> RunError {
    RunError::Invalid(m.into())
}

/// What a sweep varies and its values: positive, finite, strictly increasing (whole numbers
/// for [`SweepAxis::Concurrency`]).
#[derive(Debug, Clone, PartialEq)]
pub struct Levels {
    axis: SweepAxis,
    values: Vec<f64>,
}

impl Levels {
    /// Parses a comma-separated list (`1,2,4,8`, `0.5,1,2`); spaces around items are allowed.
    /// The error is one line naming the item.
    pub fn parse(axis: SweepAxis, text: &str) -> Result<Levels, RunError> {
        let flag = flag_of(axis);
        let mut values = Vec::new();
        for item in text.split(',') {
            let item = item.trim();
            if item.is_empty() {
                return Err(invalid(format!(
                    "{flag} {text:?}: an empty item (write the levels as 1,2,4,8)"
                )));
            }
            let v = match axis {
                SweepAxis::Concurrency => item.parse::<u32>().map(f64::from).map_err(|_| {
                    invalid(format!(
                        "{flag}: {item:?} is not a whole number of sessions in flight (1 or more)"
                    ))
                })?,
                SweepAxis::Rate => item.parse::<f64>().map_err(|_| {
                    invalid(format!(
                        "{flag}: {item:?} is not a number of sessions per second"
                    ))
                })?,
                SweepAxis::IdleGap => parse_gap(item).ok_or_else(|| {
                    invalid(format!(
                        "{flag}: {item:?} is not an idle gap (write 0s, 500ms, 1.5s, 2m)"
                    ))
                })?,
            };
            values.push(v);
        }
        Levels::new(axis, values)
    }

    /// Checks `values` (see [`Levels`]).
    pub fn new(axis: SweepAxis, values: Vec<f64>) -> Result<Levels, RunError> {
        let flag = flag_of(axis);
        if values.is_empty() {
            return Err(invalid(format!("{flag}: give at least one level")));
        }
        if axis == SweepAxis::IdleGap && values.first().is_some_and(|v| *v != 0.0) {
            return Err(invalid(format!(
                "{flag}: the first gap must be 0s, the reference every other gap's cache share \
                 is measured against (e.g. 0s,5s,15s,30s)"
            )));
        }
        for &v in &values {
            if axis == SweepAxis::IdleGap {
                if !v.is_finite() || !(0.0..=MAX_GAP_S).contains(&v) {
                    return Err(invalid(format!(
                        "{flag}: {v} s is not an idle gap within 0 s and {MAX_GAP_S} s"
                    )));
                }
                if decimals(v).is_none_or(|d| d > 3) {
                    return Err(invalid(format!(
                        "{flag}: {v} s is finer than a millisecond"
                    )));
                }
                continue;
            }
            if !v.is_finite() || v <= 0.0 {
                return Err(invalid(format!(
                    "{flag}: {} is not a positive level",
                    fmt_level(v)
                )));
            }
            if axis == SweepAxis::Concurrency && (v.fract() != 0.0 || v > f64::from(u32::MAX)) {
                return Err(invalid(format!(
                    "{flag}: {} is not a whole number of sessions in flight",
                    fmt_level(v)
                )));
            }
            if axis == SweepAxis::Rate && decimals(v).is_none() {
                return Err(invalid(format!(
                    "{flag}: {v} has more than {MAX_DECIMALS} decimals"
                )));
            }
        }
        if let Some(w) = values.windows(2).find(|w| w[1] <= w[0]) {
            return Err(invalid(format!(
                "{flag}: levels must be strictly increasing ({} then {})",
                fmt_level(w[0]),
                fmt_level(w[1])
            )));
        }
        Ok(Levels { axis, values })
    }

    /// What is varied.
    pub fn axis(&self) -> SweepAxis {
        self.axis
    }

    /// The levels, increasing.
    pub fn values(&self) -> &[f64] {
        &self.values
    }

    /// The smallest gap between two consecutive levels (`None` for a single level).
    pub fn smallest_gap(&self) -> Option<f64> {
        self.values
            .windows(2)
            .map(|w| w[1] - w[0])
            .min_by(f64::total_cmp)
    }
}

/// The flag a level list comes from, for messages.
fn flag_of(axis: SweepAxis) -> &'static str {
    match axis {
        SweepAxis::Concurrency => "--concurrency",
        SweepAxis::Rate => "--rates",
        SweepAxis::IdleGap => "--idle-gaps",
    }
}

/// The longest idle gap a sweep takes, s (a day).
const MAX_GAP_S: f64 = 86_400.0;

/// An idle gap as a user writes it: `5s`, `1.5s`, `500ms`, `2m`, or bare seconds (`5`), in
/// seconds.
fn parse_gap(item: &str) -> Option<f64> {
    let (num, scale) = if let Some(n) = item.strip_suffix("ms") {
        (n, 0.001)
    } else if let Some(n) = item.strip_suffix('s') {
        (n, 1.0)
    } else if let Some(n) = item.strip_suffix('m') {
        (n, 60.0)
    } else {
        (item, 1.0)
    };
    let v = num.trim().parse::<f64>().ok()? * scale;
    // Rounded to the microsecond so that 0.1s and 100ms are one level.
    (v.is_finite() && v >= 0.0).then(|| (v * 1e6).round() / 1e6)
}

/// The fewest decimals (0..=[`MAX_DECIMALS`]) that write `v` exactly, if any do.
fn decimals(v: f64) -> Option<usize> {
    (0..=MAX_DECIMALS).find(|&d| {
        let x = v * 10f64.powi(d as i32);
        (x - x.round()).abs() < 1e-9 * x.abs().max(1.0)
    })
}

/// Rounds away the float noise of `lo + k × step`.
fn round_level(v: f64) -> f64 {
    let m = 10f64.powi(MAX_DECIMALS as i32);
    (v * m).round() / m
}

/// How a sweep visits its levels.
#[derive(Debug, Clone, PartialEq)]
pub enum Search {
    /// Every level in increasing order, stopping early when [`saturation`] names a reason.
    Walk,
    /// Bisect for the highest level whose goodput meets `target` ([`Bisection`]).
    FindMax {
        /// Share of turns (or session plays) that must meet the SLO, 0–1
        /// ([`DEFAULT_GOODPUT_TARGET`]).
        target: f64,
        /// Whether `target` is a share of turns meeting `judge.slo` or of session plays
        /// meeting `judge.session_slo`.
        of: GoodputOf,
        /// The search's resolution [default: 1 for concurrency, the smallest gap between the
        /// given rates]; concurrency steps are whole numbers.
        step: Option<f64>,
    },
}

/// A sweep's plan: the levels and how they are visited.
#[derive(Debug, Clone, PartialEq)]
pub struct Sweep {
    levels: Levels,
    search: Search,
    /// `FindMax`: the search's resolution, checked.
    step: Option<f64>,
    /// Decimals of a rate's directory name.
    decimals: usize,
}

impl Sweep {
    /// Checks the search against the levels: `FindMax` needs two levels at least, a target
    /// within 0–1 and a positive step (a whole number for concurrency).
    pub fn new(levels: Levels, search: Search) -> Result<Sweep, RunError> {
        let mut step = None;
        if levels.axis == SweepAxis::IdleGap && matches!(search, Search::FindMax { .. }) {
            return Err(invalid(
                "--find-max searches a load level: an idle-gap sweep (--idle-gaps) plays every \
                 gap at one load",
            ));
        }
        if let Search::FindMax {
            target, step: s, ..
        } = &search
        {
            if !(0.0..=1.0).contains(target) {
                return Err(invalid(format!(
                    "--goodput-target is a share within 0–1 (0.9 for 90%), not {target}"
                )));
            }
            if levels.values.len() < 2 {
                return Err(invalid(
                    "--find-max needs at least two levels: the lowest and the highest bound of \
                     the search",
                ));
            }
            let st = match (levels.axis, *s) {
                (_, Some(x)) if !x.is_finite() || x <= 0.0 => {
                    return Err(invalid(format!("--step must be positive, not {x}")));
                }
                (SweepAxis::Concurrency, Some(x)) if x.fract() != 0.0 => {
                    return Err(invalid(format!(
                        "--step {x}: concurrency levels are whole numbers, so is the step"
                    )));
                }
                (SweepAxis::Rate, Some(x)) if decimals(x).is_none() => {
                    return Err(invalid(format!(
                        "--step {x} has more than {MAX_DECIMALS} decimals"
                    )));
                }
                (_, Some(x)) => x,
                (SweepAxis::Concurrency, None) => 1.0,
                (_, None) => levels.smallest_gap().unwrap_or(1.0),
            };
            step = Some(st);
        }
        let decimals = match levels.axis {
            SweepAxis::Concurrency => 0,
            SweepAxis::IdleGap => levels
                .values
                .iter()
                .filter_map(|&v| decimals(v))
                .max()
                .unwrap_or(0),
            SweepAxis::Rate => levels
                .values
                .iter()
                .chain(step.iter())
                .filter_map(|&v| decimals(v))
                .max()
                .unwrap_or(0)
                .max(2),
        };
        Ok(Sweep {
            levels,
            search,
            step,
            decimals,
        })
    }

    /// The levels.
    pub fn levels(&self) -> &Levels {
        &self.levels
    }

    /// How they are visited.
    pub fn search(&self) -> &Search {
        &self.search
    }

    /// What is varied.
    pub fn axis(&self) -> SweepAxis {
        self.levels.axis
    }

    /// The name of a point's run directory in the sweep directory: `c0008` (concurrency),
    /// `r0000.50` (rate, as many decimals as the levels need, two at least) or `g00005s` (idle
    /// gap, seconds, as many decimals as the gaps need), zero-padded so the names sort by level.
    pub fn dir_name(&self, level: f64) -> String {
        let d = self.decimals;
        match self.levels.axis {
            SweepAxis::Concurrency => format!("c{:04}", level.round() as u64),
            SweepAxis::Rate => format!("r{level:0w$.d$}", w = 5 + d),
            SweepAxis::IdleGap => {
                let w = if d == 0 { 5 } else { 6 + d };
                format!("g{level:0w$.d$}s")
            }
        }
    }

    /// The bisection of a `FindMax` sweep (`None` for a walk).
    pub fn bisection(&self) -> Option<Bisection> {
        match (&self.search, self.step) {
            (Search::FindMax { target, of, .. }, Some(step)) => Some(
                Bisection::new(
                    self.levels.values[0],
                    *self.levels.values.last().unwrap_or(&self.levels.values[0]),
                    step,
                    *target,
                )
                .of(*of),
            ),
            _ => None,
        }
    }
}

/// The `--find-max` search: over the grid `lowest, lowest + step, …, highest`, run the
/// lowest level, then the highest, then bisect between the highest level that met the
/// target and the lowest that did not until they are one step apart (or fewer).
///
/// ```
/// use bench_run::sweep::Bisection;
///
/// // Levels 1..=16, step 1; the server holds the target up to 12.
/// let mut b = Bisection::new(1.0, 16.0, 1.0, 0.9);
/// let mut tried = Vec::new();
/// while let Some(level) = b.next() {
///     tried.push(level);
///     b.record(level, Some(if level <= 12.0 { 1.0 } else { 0.5 }));
/// }
/// assert_eq!(tried, [1.0, 16.0, 8.0, 12.0, 14.0, 13.0]);
/// let r = b.result();
/// assert_eq!((r.best, r.first_failing), (Some(12.0), Some(13.0)));
/// ```
#[derive(Debug, Clone, PartialEq)]
pub struct Bisection {
    lo: f64,
    hi: f64,
    step: f64,
    target: f64,
    /// Index of `hi` on the grid.
    n: u64,
    /// The highest index that met the target.
    pass: Option<u64>,
    /// The lowest index that did not.
    fail: Option<u64>,
    /// What the target is a share of.
    of: GoodputOf,
    /// Levels run with the client as the bottleneck.
    client_bound: Vec<f64>,
}

impl Bisection {
    /// A search over `lo..=hi` with resolution `step` for goodput ≥ `target` (a step that is
    /// not positive is taken as the whole range: only the two bounds are run).
    pub fn new(lo: f64, hi: f64, step: f64, target: f64) -> Bisection {
        let step = if step.is_finite() && step > 0.0 {
            step
        } else {
            (hi - lo).max(1.0)
        };
        let span = ((hi - lo) / step).max(0.0);
        // `hi` is the last grid point even when the span is not a whole number of steps.
        let n = (span - 1e-9).ceil().max(0.0) as u64;
        Bisection {
            lo,
            hi,
            step,
            target,
            n,
            pass: None,
            fail: None,
            of: GoodputOf::Turns,
            client_bound: Vec::new(),
        }
    }

    /// The same search with its target a share of `of` (turns by default).
    pub fn of(mut self, of: GoodputOf) -> Bisection {
        self.of = of;
        self
    }

    /// Records a point: its turn or session goodput as the search's target says, a point where
    /// the client was the bottleneck counted as missing the target (it cannot be the answer:
    /// the server may hold more than the client offered) and noted.
    pub fn record_point(&mut self, p: &SweepPoint) {
        let goodput = match self.of {
            GoodputOf::Turns => p.goodput,
            GoodputOf::Sessions => p.session_goodput,
        };
        if p.client_bound {
            self.client_bound.push(p.level);
            self.record(p.level, None);
        } else {
            self.record(p.level, goodput);
        }
    }

    fn level(&self, k: u64) -> f64 {
        if k >= self.n {
            self.hi
        } else {
            round_level(self.lo + k as f64 * self.step)
        }
    }

    fn index(&self, level: f64) -> u64 {
        if level >= self.hi {
            self.n
        } else {
            (((level - self.lo) / self.step).round().max(0.0) as u64).min(self.n)
        }
    }

    /// The next level to run, or `None` when the search is over.
    pub fn next(&self) -> Option<f64> {
        match (self.pass, self.fail) {
            (None, None) => Some(self.level(0)),
            // Even the lowest level missed the target.
            (None, Some(_)) => None,
            (Some(p), None) if p < self.n => Some(self.level(self.n)),
            // The highest level met it.
            (Some(_), None) => None,
            (Some(p), Some(f)) if f > p + 1 => Some(self.level(p + (f - p) / 2)),
            (Some(_), Some(_)) => None,
        }
    }

    /// Records a level's goodput (`None`, not measured, counts as missing the target). The
    /// search assumes goodput does not rise with load: it only ever tries levels between the
    /// highest that met the target and the lowest that did not.
    pub fn record(&mut self, level: f64, goodput: Option<f64>) {
        let k = self.index(level);
        if goodput.is_some_and(|g| g >= self.target) {
            self.pass = Some(self.pass.map_or(k, |p| p.max(k)));
        } else {
            self.fail = Some(self.fail.map_or(k, |f| f.min(k)));
        }
    }

    /// Where the search stands (its end once [`Bisection::next`] says `None`).
    pub fn result(&self) -> FindMax {
        let mut client_bound = self.client_bound.clone();
        client_bound.sort_by(f64::total_cmp);
        FindMax {
            target: self.target,
            of: self.of,
            best: self.pass.map(|k| self.level(k)),
            first_failing: self.fail.map(|k| self.level(k)),
            step: self.step,
            client_bound,
        }
    }
}

/// `base` at one level: `Concurrency` makes it a closed loop of `level` sessions (the plan's
/// default pool, 2 × the concurrency, follows; a ramp-up is kept); `Rate` an open loop
/// starting `level` sessions per second (the arrival process, its seed and the in-flight cap
/// are kept; a closed base becomes Poisson arrivals seeded by the plan's seed); `IdleGap` keeps
/// the load and makes every later turn wait `level` seconds ([`bench_runner::ToolWaits::Fixed`]).
/// Each point's plays carry a cache-busting tag of their own
/// ([`bench_runner::RequestShape::cache_bust_tag`]).
pub fn spec_at(base: &RunSpec, axis: SweepAxis, level: f64) -> RunSpec {
    let mut spec = base.clone();
    // Every point replays the same plan: its plays are marked so that none hits the cache an
    // earlier point warmed (a shared system prompt stays shared: the mark follows it).
    spec.request.cache_bust_tag = Some(format!("sweep {} {}", axis.as_str(), fmt_level(level)));
    match axis {
        SweepAxis::Concurrency => {
            let c = level.round().clamp(1.0, f64::from(u32::MAX)) as u32;
            let ramp_up = match base.load {
                Load::Closed { ramp_up, .. } => ramp_up,
                Load::Open { .. } => None,
            };
            spec.load = Load::Closed {
                concurrency: c,
                ramp_up,
            };
            spec.plan.concurrency = c;
        }
        SweepAxis::Rate => {
            spec.load = match base.load {
                Load::Open {
                    mut arrival,
                    max_in_flight,
                } => {
                    arrival.rate = level;
                    Load::Open {
                        arrival,
                        max_in_flight,
                    }
                }
                Load::Closed { .. } => Load::Open {
                    arrival: bench_runner::Arrival {
                        rate: level,
                        process: bench_runner::ArrivalProcess::Poisson,
                        seed: base.plan.seed,
                    },
                    max_in_flight: None,
                },
            };
        }
        SweepAxis::IdleGap => {
            spec.request.tool_waits = bench_runner::ToolWaits::Fixed {
                wait: std::time::Duration::from_secs_f64(level.clamp(0.0, MAX_GAP_S)),
            };
        }
    }
    spec
}

/// A finished run as its sweep point, and notes for the user (the steady window was empty,
/// so the figures are the whole run's; the result had no validity verdict).
///
/// The figures are the steady window's (`summary` in `result.json`): output tok/s, TTFT p50
/// and p99, the median per-user output rate; goodput is the steady window's SLO attainment
/// times the share of measured turns that ended ok (a failed turn never meets an SLO).
pub fn point_from_result(
    level: f64,
    run_dir: &str,
    result: &RunResult,
) -> (SweepPoint, Vec<String>) {
    let mut notes = Vec::new();
    let s = &result.summary;
    let m: &Metrics = if s.steady.turns > 0 {
        &s.steady
    } else {
        if result.overall.turns > 0 {
            notes.push(format!(
                "{run_dir}: the steady window is empty: its figures are over the whole run"
            ));
        }
        &result.overall
    };
    let total = s.turns_ok + s.turns_failed;
    let ok_share = if total > 0 {
        s.turns_ok as f64 / total as f64
    } else {
        0.0
    };
    let (verdict, failed_checks) = match &result.validity {
        Some(v) => (
            v.verdict,
            v.checks
                .iter()
                .filter(|c| matches!(c.status, CheckStatus::Warn | CheckStatus::Fail))
                .map(|c| c.name.clone())
                .collect::<Vec<_>>(),
        ),
        None => {
            notes.push(format!(
                "{run_dir}: the result has no validity verdict: marked suspect"
            ));
            (Verdict::Suspect, Vec::new())
        }
    };
    let client_bound = failed_checks
        .iter()
        .any(|c| CLIENT_CHECKS.contains(&c.as_str()));
    let point = SweepPoint {
        level,
        run_dir: run_dir.to_owned(),
        turns_ok: s.turns_ok,
        turns_failed: s.turns_failed,
        output_tps: m.output_throughput_tok_s,
        per_user_tps: m.per_user_output_tok_s.p50,
        ttft_p50_ms: m.ttft_ms.p50,
        ttft_p99_ms: m.ttft_ms.p99,
        goodput: m.slo_attainment.map(|a| a * ok_share),
        session_goodput: result
            .sessions
            .as_ref()
            .and_then(|s| s.session_slo.as_ref())
            .and_then(|s| s.share),
        verdict,
        client_bound,
        failed_checks,
        later_cache_ratio: result.overall.prefix_cache_later_ratio,
        ttft_later_p50_ms: result.overall.ttft_later_turns_ms.p50,
    };
    (point, notes)
}

/// How running one point ended, as [`run`] takes it.
#[derive(Debug, Clone, PartialEq)]
pub enum PointEnd {
    /// The run finished.
    Done(SweepPoint),
    /// The run could not start or finish, or every turn failed: the sweep stops
    /// ([`SweepStop::Failed`]). The point is kept when the run got that far.
    Failed {
        /// The point, when the run produced a result.
        point: Option<SweepPoint>,
        /// One line.
        reason: String,
    },
    /// Stopped by a cancel (Ctrl-C) before its end, or before it started: the sweep stops
    /// ([`SweepStop::Interrupted`]); the point is kept when the run produced a result.
    Interrupted(Option<SweepPoint>),
}

impl PointEnd {
    /// A run's outcome as a point's end: a [`RunError`] or a run in which no turn ended ok is
    /// `Failed`, a run stopped by a signal or a cancel is `Interrupted`; the notes are
    /// [`point_from_result`]'s.
    pub fn from_report(
        level: f64,
        run_dir: &str,
        report: Result<&RunReport, &RunError>,
    ) -> (PointEnd, Vec<String>) {
        let report = match report {
            Ok(r) => r,
            Err(e) => {
                return (
                    PointEnd::Failed {
                        point: None,
                        reason: format!("{run_dir}: {e}"),
                    },
                    Vec::new(),
                );
            }
        };
        let (point, notes) = point_from_result(level, run_dir, &report.result);
        let end = if matches!(report.stopped_by, StopBy::Signal | StopBy::Cancelled) {
            PointEnd::Interrupted(Some(point))
        } else if report.turns_total == 0 || point.turns_ok == 0 {
            let errors: Vec<String> = report
                .result
                .summary
                .errors_by_kind
                .iter()
                .map(|(k, n)| format!("{n} {k}"))
                .collect();
            let reason = if report.turns_total == 0 {
                format!("{run_dir}: no turn was played ({})", report.reason)
            } else {
                format!(
                    "{run_dir}: every turn failed ({} of {}{})",
                    point.turns_failed,
                    point.turns_failed + point.turns_ok,
                    if errors.is_empty() {
                        String::new()
                    } else {
                        format!(": {}", errors.join(", "))
                    }
                )
            };
            PointEnd::Failed {
                point: Some(point),
                reason,
            }
        } else {
            PointEnd::Done(point)
        };
        (end, notes)
    }
}

/// Runs one point with [`crate::start`] and waits for it: its end and notes
/// ([`PointEnd::from_report`]) and the report, if the run got that far (for its
/// [`RunReport::gate`]).
pub async fn play_point(
    spec: RunSpec,
    options: RunOptions,
    level: f64,
    run_dir: &str,
) -> (PointEnd, Vec<String>, Option<RunReport>) {
    let report = match crate::start(spec, options).await {
        Ok(h) => h.wait().await,
        Err(e) => Err(e),
    };
    let (end, notes) = PointEnd::from_report(level, run_dir, report.as_ref());
    (end, notes, report.ok())
}

/// Runs a sweep: asks `run_point(level, dir_name)` for each level the [`Search`] picks, in
/// turn, and returns the summary. `after_point` sees the summary after every point that
/// produced one (the point just run is the last of `points`), to show it and to write
/// `sweep.json` as it grows: until the end its `stop` is `running` (which a sweep whose
/// process died also says).
///
/// A walk stops early when [`saturation`] names a reason ([`SweepStop::Saturated`]); a
/// `FindMax` sweep records its [`FindMax`] and lists its points by level. A point that fails
/// stops the sweep as [`SweepStop::Failed`], an interrupted one as
/// [`SweepStop::Interrupted`].
pub async fn run<F, Fut>(
    sweep: &Sweep,
    config: serde_json::Value,
    mut run_point: F,
    mut after_point: impl FnMut(&SweepSummary),
) -> SweepSummary
where
    F: FnMut(f64, String) -> Fut,
    Fut: Future<Output = PointEnd>,
{
    let mut bisection = sweep.bisection();
    let mut summary = SweepSummary {
        generated_by: format!("bench {}", env!("CARGO_PKG_VERSION")),
        axis: sweep.axis(),
        points: Vec::new(),
        stop: SweepStop::Running,
        find_max: bisection.as_ref().map(Bisection::result),
        retention: None,
        config,
    };
    let mut walk = sweep.levels.values.iter().copied();
    let stop = loop {
        let next = match &bisection {
            Some(b) => b.next(),
            None => walk.next(),
        };
        let Some(level) = next else {
            break SweepStop::Completed;
        };
        let end = run_point(level, sweep.dir_name(level)).await;
        let (ran, stop) = match end {
            PointEnd::Done(p) => {
                if let Some(b) = &mut bisection {
                    b.record_point(&p);
                }
                summary.points.push(p);
                let stop = match &bisection {
                    Some(b) => {
                        summary.find_max = Some(b.result());
                        None
                    }
                    // Every gap is played at one load: saturation is not a reason to stop.
                    None if sweep.axis() == SweepAxis::IdleGap => None,
                    None => {
                        saturation(&summary.points).map(|reason| SweepStop::Saturated { reason })
                    }
                };
                (true, stop)
            }
            PointEnd::Failed { point, reason } => {
                let ran = point.is_some();
                summary.points.extend(point);
                (ran, Some(SweepStop::Failed { reason }))
            }
            PointEnd::Interrupted(point) => {
                let ran = point.is_some();
                summary.points.extend(point);
                (ran, Some(SweepStop::Interrupted))
            }
        };
        if ran {
            if sweep.axis() == SweepAxis::IdleGap {
                summary.retention = retention(&summary.points);
            }
            after_point(&summary);
        }
        if let Some(stop) = stop {
            break stop;
        }
    };
    summary.stop = stop;
    if bisection.is_some() {
        summary.points.sort_by(|a, b| a.level.total_cmp(&b.level));
    }
    summary
}

/// What stops a sweep from outside (signals, an API): [`Stopper::stop`] lets the point now
/// playing finish its turns in flight and starts no other; [`Stopper::abort`] cuts them.
#[derive(Default)]
pub struct Stopper {
    stopping: AtomicBool,
    aborting: AtomicBool,
    current: Mutex<Option<Canceller>>,
}

impl Stopper {
    fn current(&self) -> std::sync::MutexGuard<'_, Option<Canceller>> {
        self.current.lock().unwrap_or_else(PoisonError::into_inner)
    }

    /// The point now playing can be stopped through `c` (at once, if the sweep is stopping).
    pub fn set(&self, c: Canceller) {
        if self.stopping.load(Ordering::SeqCst) {
            c.cancel(CancelledBy::Signal);
        }
        if self.aborting.load(Ordering::SeqCst) {
            c.abort();
        }
        *self.current() = Some(c);
    }

    /// No point is playing.
    pub fn clear(&self) {
        *self.current() = None;
    }

    /// [`Stopper::stop`] was called: start no further point.
    pub fn stopping(&self) -> bool {
        self.stopping.load(Ordering::SeqCst)
    }

    /// Starts no further point; the current one stops as a cancelled run does (`by`).
    pub fn stop(&self, by: CancelledBy) {
        self.stopping.store(true, Ordering::SeqCst);
        if let Some(c) = &*self.current() {
            c.cancel(by);
        }
    }

    /// Cuts the current point's turns in flight, and any later point's at once.
    pub fn abort(&self) {
        self.aborting.store(true, Ordering::SeqCst);
        if let Some(c) = &*self.current() {
            c.abort();
        }
    }
}

/// `sweeps/<UTC time>-<pid>` (as a run's default directory is `runs/<UTC time>-<pid>`).
pub fn default_sweep_dir() -> PathBuf {
    let now = time::OffsetDateTime::now_utc();
    let stamp = now
        .format(&time::macros::format_description!(
            "[year][month][day]T[hour][minute][second]Z"
        ))
        .unwrap_or_else(|_| "sweep".into());
    PathBuf::from("sweeps").join(format!("{stamp}-{}", std::process::id()))
}

/// Writes `sweep.json` (atomically: a reader never sees half of it), `sweep.md` and
/// `sweep.html` into `dir`.
pub fn write_files(dir: &Path, summary: &SweepSummary) -> Result<(), RunError> {
    write_files_with(dir, summary, &crate::secrets::Secrets::from_env())
}

/// [`write_files`], every secret of `secrets` replaced by `***` in all three (a point's
/// failure, the shared configuration).
pub fn write_files_with(
    dir: &Path,
    summary: &SweepSummary,
    secrets: &crate::secrets::Secrets,
) -> Result<(), RunError> {
    let fail = |path: &Path, e: std::io::Error| {
        RunError::Failed(format!("cannot write {}: {e}", path.display()))
    };
    let scrubbed;
    let summary = if secrets.is_empty() {
        summary
    } else {
        scrubbed = secrets.scrub_value(summary.clone());
        &scrubbed
    };
    let json = serde_json::to_string_pretty(summary)
        .map_err(|e| RunError::Failed(format!("cannot encode the sweep summary: {e}")))?;
    let path = dir.join(SWEEP_JSON);
    let tmp = dir.join(format!("{SWEEP_JSON}.tmp"));
    std::fs::write(&tmp, json + "\n").map_err(|e| fail(&tmp, e))?;
    std::fs::rename(&tmp, &path).map_err(|e| fail(&path, e))?;
    let path = dir.join(SWEEP_MD);
    std::fs::write(&path, secrets.scrub(&markdown(summary)).as_bytes())
        .map_err(|e| fail(&path, e))?;
    let path = dir.join(SWEEP_HTML);
    let html = bench_report::html::sweep_html(summary);
    std::fs::write(&path, secrets.scrub(&html).as_bytes()).map_err(|e| fail(&path, e))
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use super::*;

    fn levels(axis: SweepAxis, text: &str) -> Result<Vec<f64>, String> {
        Levels::parse(axis, text)
            .map(|l| l.values().to_vec())
            .map_err(|e| e.to_string())
    }

    #[test]
    fn level_lists_parse_and_bad_ones_are_refused_in_one_line() {
        use SweepAxis::{Concurrency as C, Rate as R};
        assert_eq!(levels(C, "1,2, 4 ,8").unwrap(), [1.0, 2.0, 4.0, 8.0]);
        assert_eq!(levels(R, "0.5,1,2.25").unwrap(), [0.5, 1.0, 2.25]);
        assert_eq!(levels(C, "3").unwrap(), [3.0]);
        for (axis, text, want) in [
            (
                C,
                "1,2,2,4",
                "--concurrency: levels must be strictly increasing (2 then 2)",
            ),
            (
                C,
                "4,2",
                "--concurrency: levels must be strictly increasing (4 then 2)",
            ),
            (
                C,
                "1,,2",
                "--concurrency \"1,,2\": an empty item (write the levels as 1,2,4,8)",
            ),
            (
                C,
                "",
                "--concurrency \"\": an empty item (write the levels as 1,2,4,8)",
            ),
            (C, "0,1", "--concurrency: 0 is not a positive level"),
            (
                C,
                "1,2.5",
                "--concurrency: \"2.5\" is not a whole number of sessions in flight (1 or more)",
            ),
            (
                C,
                "-1",
                "--concurrency: \"-1\" is not a whole number of sessions in flight (1 or more)",
            ),
            (
                R,
                "0.5,x",
                "--rates: \"x\" is not a number of sessions per second",
            ),
            (R, "0,1", "--rates: 0 is not a positive level"),
            (R, "1,inf", "--rates: inf is not a positive level"),
            (
                R,
                "2,1",
                "--rates: levels must be strictly increasing (2 then 1)",
            ),
            (
                R,
                "0.0000001",
                "--rates: 0.0000001 has more than 6 decimals",
            ),
        ] {
            let e = levels(axis, text).unwrap_err();
            assert_eq!(e, want, "{text:?}");
            assert!(!e.contains('\n'));
        }
    }

    #[test]
    fn run_directories_are_named_so_they_sort_by_level() {
        let s = Sweep::new(
            Levels::parse(SweepAxis::Concurrency, "1,8,64,512").unwrap(),
            Search::Walk,
        )
        .unwrap();
        let names: Vec<String> = s.levels().values().iter().map(|&l| s.dir_name(l)).collect();
        assert_eq!(names, ["c0001", "c0008", "c0064", "c0512"]);
        let s = Sweep::new(
            Levels::parse(SweepAxis::Rate, "0.5,1,2,16").unwrap(),
            Search::Walk,
        )
        .unwrap();
        let names: Vec<String> = s.levels().values().iter().map(|&l| s.dir_name(l)).collect();
        assert_eq!(names, ["r0000.50", "r0001.00", "r0002.00", "r0016.00"]);
        let mut sorted = names.clone();
        sorted.sort();
        assert_eq!(sorted, names);
        // Finer levels get the decimals they need.
        let s = Sweep::new(
            Levels::parse(SweepAxis::Rate, "0.125,0.25").unwrap(),
            Search::Walk,
        )
        .unwrap();
        assert_eq!(s.dir_name(0.125), "r0000.125");
    }

    /// Every level the search tries, for a server that holds the target up to `capacity`.
    fn search(lo: f64, hi: f64, step: f64, capacity: f64) -> (Vec<f64>, FindMax) {
        let mut b = Bisection::new(lo, hi, step, 0.9);
        let mut tried = Vec::new();
        while let Some(l) = b.next() {
            assert!(!tried.contains(&l), "{l} tried twice: {tried:?}");
            assert!(tried.len() < 64, "{tried:?}");
            tried.push(l);
            b.record(l, Some(if l <= capacity { 0.95 } else { 0.3 }));
        }
        (tried, b.result())
    }

    #[test]
    fn bisection_finds_the_capacity_within_one_step() {
        for cap in 1..16 {
            let (tried, r) = search(1.0, 16.0, 1.0, f64::from(cap));
            assert_eq!(r.best, Some(f64::from(cap)), "{tried:?}");
            assert_eq!(r.first_failing, Some(f64::from(cap + 1)), "{tried:?}");
            assert_eq!(&tried[..2], [1.0, 16.0]);
            assert!(tried.len() <= 6, "{cap}: {tried:?}");
        }
        // Above the range: the highest level met it; below: even the lowest missed it.
        let (tried, r) = search(1.0, 16.0, 1.0, 40.0);
        assert_eq!(
            (tried, r.best, r.first_failing),
            (vec![1.0, 16.0], Some(16.0), None)
        );
        let (tried, r) = search(2.0, 16.0, 1.0, 1.0);
        assert_eq!(
            (tried, r.best, r.first_failing),
            (vec![2.0], None, Some(2.0))
        );
        // Rates: the bracket ends within the step.
        let (tried, r) = search(0.5, 8.0, 0.5, 3.3);
        assert_eq!(
            (r.best, r.first_failing),
            (Some(3.0), Some(3.5)),
            "{tried:?}"
        );
        assert!(tried.iter().all(|l| (l * 2.0).fract() == 0.0), "{tried:?}");
        // A range that is not a whole number of steps still ends at its highest level.
        let (tried, r) = search(1.0, 10.0, 4.0, 6.0);
        assert_eq!(&tried[..2], [1.0, 10.0]);
        assert_eq!(
            (r.best, r.first_failing),
            (Some(5.0), Some(9.0)),
            "{tried:?}"
        );
        // Goodput not measured counts as missing the target.
        let mut b = Bisection::new(1.0, 4.0, 1.0, 0.9);
        b.record(1.0, None);
        assert_eq!(b.next(), None);
        assert_eq!(b.result().best, None);
    }

    #[test]
    fn a_find_max_sweep_is_checked() {
        let l = |t: &str| Levels::parse(SweepAxis::Concurrency, t).unwrap();
        let fm = |target, step| Search::FindMax {
            target,
            of: GoodputOf::Turns,
            step,
        };
        let e = |r: Result<Sweep, RunError>| r.unwrap_err().to_string();
        assert!(
            e(Sweep::new(l("4"), fm(0.9, None)))
                .starts_with("--find-max needs at least two levels")
        );
        assert_eq!(
            e(Sweep::new(l("1,4"), fm(90.0, None))),
            "--goodput-target is a share within 0–1 (0.9 for 90%), not 90"
        );
        assert_eq!(
            e(Sweep::new(l("1,4"), fm(0.9, Some(0.5)))),
            "--step 0.5: concurrency levels are whole numbers, so is the step"
        );
        assert_eq!(
            e(Sweep::new(l("1,4"), fm(0.9, Some(0.0)))),
            "--step must be positive, not 0"
        );
        let s = Sweep::new(
            Levels::parse(SweepAxis::Rate, "0.5,1,3").unwrap(),
            fm(0.9, None),
        )
        .unwrap();
        assert_eq!(s.bisection().unwrap().result().step, 0.5);
    }

    fn point(level: f64, tps: f64, ttft: f64, goodput: Option<f64>) -> SweepPoint {
        SweepPoint {
            level,
            run_dir: format!("c{level}"),
            turns_ok: 10,
            turns_failed: 0,
            output_tps: Some(tps),
            per_user_tps: Some(tps / level),
            ttft_p50_ms: Some(ttft),
            ttft_p99_ms: Some(ttft * 2.0),
            goodput,
            session_goodput: None,
            verdict: Verdict::Valid,
            client_bound: false,
            failed_checks: Vec::new(),
            later_cache_ratio: None,
            ttft_later_p50_ms: None,
        }
    }

    #[test]
    fn idle_gap_sweeps_play_every_gap_and_name_the_half_life() {
        use SweepAxis::IdleGap as G;
        assert_eq!(
            levels(G, "0s,500ms,1.5s, 2m,300").unwrap(),
            [0.0, 0.5, 1.5, 120.0, 300.0]
        );
        for (text, want) in [
            (
                "5s,10s",
                "--idle-gaps: the first gap must be 0s, the reference every other gap's cache \
                 share is measured against (e.g. 0s,5s,15s,30s)",
            ),
            (
                "0s,5x",
                "--idle-gaps: \"5x\" is not an idle gap (write 0s, 500ms, 1.5s, 2m)",
            ),
            (
                "0s,-1s",
                "--idle-gaps: \"-1s\" is not an idle gap (write 0s, 500ms, 1.5s, 2m)",
            ),
            (
                "0,5s,5000ms",
                "--idle-gaps: levels must be strictly increasing (5 then 5)",
            ),
            (
                "0,0.0001s",
                "--idle-gaps: 0.0001 s is finer than a millisecond",
            ),
            (
                "0,2d",
                "--idle-gaps: \"2d\" is not an idle gap (write 0s, 500ms, 1.5s, 2m)",
            ),
        ] {
            assert_eq!(levels(G, text).unwrap_err(), want, "{text:?}");
        }
        let fm = Search::FindMax {
            target: 0.9,
            of: GoodputOf::Turns,
            step: None,
        };
        let e = Sweep::new(Levels::parse(G, "0,5").unwrap(), fm).unwrap_err();
        assert!(
            e.to_string().contains("--find-max searches a load level"),
            "{e}"
        );

        let s = Sweep::new(Levels::parse(G, "0s,0.5s,2s,30s").unwrap(), Search::Walk).unwrap();
        let base = RunSpec::default();
        let at = spec_at(&base, G, 2.0);
        assert_eq!(
            at.request.tool_waits,
            bench_runner::ToolWaits::Fixed {
                wait: std::time::Duration::from_secs(2)
            }
        );
        assert_eq!(at.load, base.load, "the load is the base's at every gap");
        let mut seen = Vec::new();
        let summary = block_on(run(
            &s,
            serde_json::Value::Null,
            |gap, name| {
                seen.push(name);
                // Throughput flat while TTFT grows (saturation would stop a load sweep).
                let mut p = point(gap.max(1.0), 100.0, 10.0 * (1.0 + gap), None);
                p.level = gap;
                p.later_cache_ratio = Some(if gap < 1.0 { 0.8 } else { 0.2 });
                p.ttft_later_p50_ms = Some(10.0 * (1.0 + gap));
                async move { PointEnd::Done(p) }
            },
            |sum| assert!(sum.retention.is_some()),
        ));
        assert_eq!(seen, ["g00000.0s", "g00000.5s", "g00002.0s", "g00030.0s"]);
        assert_eq!(summary.stop, SweepStop::Completed, "every gap is played");
        let r = summary.retention.unwrap();
        // Kept 1 at 0.5 s, 0.25 at 2 s: half gone at 0.5 + 0.5/0.75 × 1.5 = 1.5 s.
        assert!((r.half_life_s.unwrap() - 1.5).abs() < 1e-9);
        assert_eq!(r.gaps[3].ttft_vs_reference, Some(31.0));
        let whole = Sweep::new(Levels::parse(G, "0,5,15").unwrap(), Search::Walk).unwrap();
        assert_eq!(whole.dir_name(5.0), "g00005s");
    }

    fn block_on<F: Future>(f: F) -> F::Output {
        tokio::runtime::Builder::new_current_thread()
            .build()
            .unwrap()
            .block_on(f)
    }

    #[test]
    fn a_walk_stops_early_at_saturation_and_says_why() {
        let s = Sweep::new(
            Levels::parse(SweepAxis::Concurrency, "1,2,4,8,16").unwrap(),
            Search::Walk,
        )
        .unwrap();
        let mut seen = Vec::new();
        let summary = block_on(run(
            &s,
            serde_json::Value::Null,
            |level, name| {
                // Throughput flat from 4 on while TTFT doubles.
                let tps = 100.0 * level.min(4.0);
                let ttft = if level <= 4.0 { 10.0 } else { 10.0 * level };
                seen.push(name);
                async move { PointEnd::Done(point(level, tps, ttft, None)) }
            },
            |sum| assert_eq!(sum.stop, SweepStop::Running),
        ));
        assert_eq!(seen, ["c0001", "c0002", "c0004", "c0008"]);
        assert_eq!(summary.points.len(), 4);
        let SweepStop::Saturated { reason } = &summary.stop else {
            panic!("{:?}", summary.stop)
        };
        assert!(reason.starts_with("saturated at 8:"), "{reason}");
    }

    #[test]
    fn a_failed_or_interrupted_point_stops_the_sweep() {
        let s = Sweep::new(
            Levels::parse(SweepAxis::Rate, "1,2,4").unwrap(),
            Search::Walk,
        )
        .unwrap();
        let summary = block_on(run(
            &s,
            serde_json::Value::Null,
            |level, name| async move {
                if level < 2.0 {
                    PointEnd::Done(point(level, 100.0 * level, 10.0, None))
                } else {
                    PointEnd::Failed {
                        point: None,
                        reason: format!("{name}: connection refused"),
                    }
                }
            },
            |_| {},
        ));
        assert_eq!(summary.points.len(), 1);
        assert_eq!(
            summary.stop,
            SweepStop::Failed {
                reason: "r0002.00: connection refused".into()
            }
        );
        let summary = block_on(run(
            &s,
            serde_json::Value::Null,
            |level, _| async move { PointEnd::Interrupted(Some(point(level, 1.0, 1.0, None))) },
            |sum| assert_eq!(sum.points.len(), 1),
        ));
        assert_eq!(
            (summary.points.len(), summary.stop),
            (1, SweepStop::Interrupted)
        );
    }

    #[test]
    fn find_max_lists_its_points_by_level() {
        let s = Sweep::new(
            Levels::parse(SweepAxis::Concurrency, "1,16").unwrap(),
            Search::FindMax {
                target: 0.9,
                of: GoodputOf::Turns,
                step: None,
            },
        )
        .unwrap();
        let mut order = Vec::new();
        let summary = block_on(run(
            &s,
            serde_json::Value::Null,
            |level, _| {
                order.push(level);
                let g = if level <= 12.0 { 1.0 } else { 0.2 };
                async move { PointEnd::Done(point(level, level, 1.0, Some(g))) }
            },
            |_| {},
        ));
        assert_eq!(order, [1.0, 16.0, 8.0, 12.0, 14.0, 13.0]);
        let levels: Vec<f64> = summary.points.iter().map(|p| p.level).collect();
        assert_eq!(levels, [1.0, 8.0, 12.0, 13.0, 14.0, 16.0]);
        assert_eq!(summary.stop, SweepStop::Completed);
        let f = summary.find_max.unwrap();
        assert_eq!(
            (f.best, f.first_failing, f.step),
            (Some(12.0), Some(13.0), 1.0)
        );
        assert_eq!(
            find_max_text(&f),
            "highest load meeting goodput ≥ 90%: 12 (13 did not)"
        );
    }

    #[test]
    fn agents_at_slo_search_on_sessions_and_never_answer_with_a_client_bound_point() {
        let s = Sweep::new(
            Levels::parse(SweepAxis::Concurrency, "1,16").unwrap(),
            Search::FindMax {
                target: 0.9,
                of: GoodputOf::Sessions,
                step: None,
            },
        )
        .unwrap();
        // Every turn meets the turn SLO; sessions meet theirs up to 12; from 11 on the client
        // is the bottleneck.
        let summary = block_on(run(
            &s,
            serde_json::Value::Null,
            |level, _| async move {
                let mut p = point(level, level, 1.0, Some(1.0));
                p.session_goodput = Some(if level <= 12.0 { 0.95 } else { 0.5 });
                p.client_bound = level >= 11.0;
                PointEnd::Done(p)
            },
            |_| {},
        ));
        let f = summary.find_max.unwrap();
        assert_eq!(f.of, GoodputOf::Sessions);
        assert_eq!((f.best, f.first_failing), (Some(10.0), Some(11.0)));
        assert_eq!(f.client_bound, [11.0, 12.0, 16.0]);
        assert_eq!(
            find_max_text(&f),
            "highest load meeting ≥ 90% of sessions within the session SLO: 10 (11 did not); \
             at 11, 12, 16 the client was the bottleneck, so the server's own limit may be higher"
        );
    }

    #[test]
    fn spec_at_sets_the_load_of_each_point() {
        let base = RunSpec::default();
        let s = spec_at(&base, SweepAxis::Concurrency, 16.0);
        assert_eq!(
            s.load,
            Load::Closed {
                concurrency: 16,
                ramp_up: None
            }
        );
        assert_eq!(s.plan.concurrency, 16);
        s.validate().unwrap();
        let s = spec_at(&base, SweepAxis::Rate, 2.5);
        let Load::Open {
            arrival,
            max_in_flight,
        } = s.load
        else {
            panic!("{:?}", s.load)
        };
        assert_eq!((arrival.rate, max_in_flight), (2.5, None));
        s.validate().unwrap();
        let again = spec_at(&s, SweepAxis::Rate, 5.0);
        let Load::Open { arrival: a, .. } = again.load else {
            panic!()
        };
        assert_eq!(
            (a.rate, a.process, a.seed),
            (5.0, arrival.process, arrival.seed)
        );
    }
}
