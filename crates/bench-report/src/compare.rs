//! Comparing runs (`bench compare`): a candidate against a base, headline metric by headline
//! metric, with a seeded bootstrap confidence interval of each relative change and a verdict.
//!
//! Each side is one or more [`CompareRun`]s (repeats of one configuration: a run's turn records
//! and its `result.json`). [`compare`] refuses two sides made from different plans (see
//! [`plan_diff`]) unless [`CompareOptions::force`] is set, and returns a [`Comparison`]:
//! one [`MetricRow`] per [`Metric`] with the base and candidate values, the relative change,
//! its 95% bootstrap interval, a [`Verdict`] and, with repeats, each side's run-to-run
//! coefficient of variation. [`Comparison::text`] is the console table,
//! [`Comparison::markdown`] the same as a markdown table, and [`Comparison::regressed`] tells
//! whether any metric got significantly worse. Definitions: `docs/report.md`, "Comparing runs".
//!
//! ```no_run
//! use std::path::Path;
//!
//! use bench_report::compare::{CompareOptions, CompareRun, compare};
//!
//! # fn main() -> Result<(), Box<dyn std::error::Error>> {
//! let base = [CompareRun::load(Path::new("runs/base"))?];
//! let candidate = [
//!     CompareRun::load(Path::new("runs/candidate-1"))?,
//!     CompareRun::load(Path::new("runs/candidate-2"))?,
//! ];
//! let cmp = compare(&base, &candidate, &CompareOptions::default())?;
//! print!("{}", cmp.text());
//! if cmp.regressed() {
//!     std::process::exit(1);
//! }
//! # Ok(())
//! # }
//! ```
//!
//! Plain synchronous code; the only randomness is the bootstrap's, from a ChaCha8 generator
//! seeded with [`CompareOptions::seed`], so the same inputs always give the same intervals.

use std::fmt::{self, Write as _};
use std::path::{Path, PathBuf};

use rand::{Rng, SeedableRng};
use rand_chacha::ChaCha8Rng;
use serde::Serialize;
use serde_json::Value;

use bench_rundir::{files, jsonl};

use crate::record::{TurnRecord, TurnStatus};
use crate::result::RunResult;
use crate::slo::Slo;
use crate::stats::percentile;
use crate::validity::Verdict as RunVerdict;

/// Default [`CompareOptions::threshold`]: a change must exceed 5% to be a verdict.
pub const DEFAULT_THRESHOLD: f64 = 0.05;
/// Default [`CompareOptions::resamples`].
pub const DEFAULT_RESAMPLES: u32 = 2000;
/// Default [`CompareOptions::seed`].
pub const DEFAULT_SEED: u64 = 0;
/// The confidence level of every interval: the 2.5th and 97.5th percentiles of the
/// resampled relative changes.
pub const CONFIDENCE: f64 = 0.95;

/// Keys under `spec.plan` that are not part of a plan's identity: `concurrency` only sets the
/// default pool size, whose effect is compared through `plan.sessions`.
const NOT_PLAN_IDENTITY: &[&str] = &["spec.plan.concurrency"];

/// Where a plan's identity lives in a run's `config` (its `run.json`).
const PLAN_IDENTITY: &[&[&str]] = &[&["spec", "plan"], &["plan", "sessions"], &["plan", "turns"]];

/// One run to compare: its turn records (`turns.jsonl`) and its `result.json`.
#[derive(Debug, Clone, PartialEq)]
pub struct CompareRun {
    /// How messages name the run (its directory, typically).
    pub label: String,
    /// Every record of `turns.jsonl`; warmup and superseded ones are skipped.
    pub turns: Vec<TurnRecord>,
    /// The run's result: its `config` (the plan identity), `slo` and measured duration
    /// (`overall.span_s`) are used.
    pub result: RunResult,
    /// What reading the run found that the reader should know (a torn last line set aside);
    /// carried into [`Comparison::notes`].
    pub notes: Vec<String>,
}

impl CompareRun {
    /// A run from its parts.
    pub fn new(label: impl Into<String>, turns: Vec<TurnRecord>, result: RunResult) -> Self {
        Self {
            label: label.into(),
            turns,
            result,
            notes: Vec::new(),
        }
    }

    /// Reads a run directory: its [`files::TURNS`] (through [`jsonl::read`]: a torn last line
    /// is set aside with a note, any other unreadable line is an error) and its
    /// [`files::RESULT`]. The label is the directory as given.
    ///
    /// # Errors
    ///
    /// [`LoadError`]: not a directory, no `result.json` ([`LoadError::MissingResult`]: the run
    /// did not finish, or its result must be recomputed), a file that cannot be read or
    /// parsed.
    pub fn load(dir: &Path) -> Result<Self, LoadError> {
        if !dir.is_dir() {
            return Err(LoadError::NotADirectory(dir.to_owned()));
        }
        let result_path = dir.join(files::RESULT);
        let bytes = std::fs::read(&result_path).map_err(|source| {
            if source.kind() == std::io::ErrorKind::NotFound {
                LoadError::MissingResult(result_path.clone())
            } else {
                LoadError::Io {
                    path: result_path.clone(),
                    source,
                }
            }
        })?;
        let result: RunResult =
            serde_json::from_slice(&bytes).map_err(|source| LoadError::BadResult {
                path: result_path.clone(),
                source,
            })?;
        let turns_path = dir.join(files::TURNS);
        let lines = jsonl::read::<TurnRecord>(&turns_path).map_err(|e| LoadError::Io {
            path: e.path,
            source: e.source,
        })?;
        if let Some(bad) = lines.bad.first() {
            return Err(LoadError::BadLine {
                path: turns_path,
                line: bad.line,
                error: bad.error.clone(),
            });
        }
        let mut run = CompareRun::new(dir.display().to_string(), lines.records, result);
        if let Some(torn) = lines.torn {
            run.notes.push(format!(
                "{}:{}: torn last line set aside ({} bytes)",
                turns_path.display(),
                torn.line,
                torn.bytes
            ));
        }
        Ok(run)
    }
}

/// Why [`CompareRun::load`] could not read a run directory.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum LoadError {
    /// The path is not a directory.
    #[error("{}: not a run directory (no such directory)", .0.display())]
    NotADirectory(PathBuf),
    /// The directory has no `result.json` (this path).
    #[error("{}: missing", .0.display())]
    MissingResult(PathBuf),
    /// A file could not be read.
    #[error("{}: {source}", path.display())]
    Io {
        /// The file.
        path: PathBuf,
        /// The cause.
        #[source]
        source: std::io::Error,
    },
    /// `result.json` is not a run's result.
    #[error("{}: not a run's result: {source}", path.display())]
    BadResult {
        /// The file.
        path: PathBuf,
        /// The cause.
        #[source]
        source: serde_json::Error,
    },
    /// A line of `turns.jsonl` (not the last) is not a turn record.
    #[error("{}:{line}: {error}", path.display())]
    BadLine {
        /// The file.
        path: PathBuf,
        /// Its line number (from 1).
        line: usize,
        /// What is wrong with it.
        error: String,
    },
}

/// How [`compare`] decides.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct CompareOptions {
    /// A relative change must exceed this (a fraction: 0.05 = 5%) in a metric's worse or
    /// better direction, besides its interval excluding 0, to be a verdict.
    pub threshold: f64,
    /// Bootstrap resamples (at least 1).
    pub resamples: u32,
    /// Seed of the bootstrap's generator.
    pub seed: u64,
    /// Compare sides (or runs of one side) made from different plans instead of refusing.
    pub force: bool,
    /// Measure goodput against this SLO on both sides instead of the runs' own `slo`.
    pub slo: Option<Slo>,
}

impl Default for CompareOptions {
    fn default() -> Self {
        Self {
            threshold: DEFAULT_THRESHOLD,
            resamples: DEFAULT_RESAMPLES,
            seed: DEFAULT_SEED,
            force: false,
            slo: None,
        }
    }
}

/// One side of a comparison.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "lowercase")]
pub enum Side {
    /// The reference runs (`BASE`).
    Base,
    /// The runs judged against them (`CAND`).
    Candidate,
}

impl fmt::Display for Side {
    /// `BASE` or `CAND`.
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            Side::Base => "BASE",
            Side::Candidate => "CAND",
        })
    }
}

/// A headline metric.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum Metric {
    /// Median TTFT of the ok measured turns, ms.
    TtftP50Ms,
    /// 99th percentile of TTFT, ms.
    TtftP99Ms,
    /// Median TPOT, ms.
    TpotP50Ms,
    /// Median e2e (request sent → end of body), ms.
    E2eP50Ms,
    /// Σ output tokens of the ok measured turns ÷ the measured time, tok/s.
    OutputThroughputTokS,
    /// Share of the measured turns (failed ones included) that are ok and meet the SLO.
    Goodput,
}

impl Metric {
    /// Every metric, in the order of the table.
    pub const ALL: [Metric; 6] = [
        Metric::TtftP50Ms,
        Metric::TtftP99Ms,
        Metric::TpotP50Ms,
        Metric::E2eP50Ms,
        Metric::OutputThroughputTokS,
        Metric::Goodput,
    ];

    /// The stable key (`ttft_p50_ms`, …), as in JSON.
    pub fn key(self) -> &'static str {
        match self {
            Metric::TtftP50Ms => "ttft_p50_ms",
            Metric::TtftP99Ms => "ttft_p99_ms",
            Metric::TpotP50Ms => "tpot_p50_ms",
            Metric::E2eP50Ms => "e2e_p50_ms",
            Metric::OutputThroughputTokS => "output_throughput_tok_s",
            Metric::Goodput => "goodput",
        }
    }

    /// The name a table shows (`TTFT p50 ms`, …).
    pub fn label(self) -> &'static str {
        match self {
            Metric::TtftP50Ms => "TTFT p50 ms",
            Metric::TtftP99Ms => "TTFT p99 ms",
            Metric::TpotP50Ms => "TPOT p50 ms",
            Metric::E2eP50Ms => "e2e p50 ms",
            Metric::OutputThroughputTokS => "output tok/s",
            Metric::Goodput => "goodput",
        }
    }

    /// Which way is better.
    pub fn direction(self) -> Direction {
        match self {
            Metric::TtftP50Ms | Metric::TtftP99Ms | Metric::TpotP50Ms | Metric::E2eP50Ms => {
                Direction::LowerIsBetter
            }
            Metric::OutputThroughputTokS | Metric::Goodput => Direction::HigherIsBetter,
        }
    }

    fn index(self) -> usize {
        match self {
            Metric::TtftP50Ms => 0,
            Metric::TtftP99Ms => 1,
            Metric::TpotP50Ms => 2,
            Metric::E2eP50Ms => 3,
            Metric::OutputThroughputTokS => 4,
            Metric::Goodput => 5,
        }
    }

    fn show(self, v: Option<f64>) -> String {
        match v {
            Some(v) if v.is_finite() => match self {
                Metric::Goodput => format!("{:.1}%", v * 100.0),
                _ => format!("{v:.1}"),
            },
            _ => "n/a".to_owned(),
        }
    }
}

/// Which way a metric is better.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum Direction {
    /// Latencies.
    LowerIsBetter,
    /// Throughput and goodput.
    HigherIsBetter,
}

/// What a metric's change amounts to.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum Verdict {
    /// The interval lies entirely on the worse side of 0 and the change is beyond the
    /// threshold in the worse direction: a regression.
    Worse,
    /// The same in the better direction.
    Better,
    /// Neither.
    NoSignificantChange,
    /// A side has no value (no samples, or a base of 0).
    NotMeasured,
}

impl Verdict {
    /// `worse`, `better`, `no significant change` or `n/a`.
    pub fn as_str(self) -> &'static str {
        match self {
            Verdict::Worse => "worse",
            Verdict::Better => "better",
            Verdict::NoSignificantChange => "no significant change",
            Verdict::NotMeasured => "n/a",
        }
    }
}

/// One metric of a [`Comparison`].
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct MetricRow {
    /// The metric.
    pub metric: Metric,
    /// Which way is better.
    pub direction: Direction,
    /// The base's value (its runs pooled).
    pub base: Option<f64>,
    /// The candidate's value (its runs pooled).
    pub candidate: Option<f64>,
    /// `(candidate − base) ÷ base` (0 when both are 0; `None` when the base is 0 alone).
    pub change: Option<f64>,
    /// Lower end of the 95% bootstrap interval of `change`.
    pub ci_low: Option<f64>,
    /// Upper end of the interval.
    pub ci_high: Option<f64>,
    /// What the change amounts to.
    pub verdict: Verdict,
    /// The base's run-to-run coefficient of variation of the metric (sample standard deviation
    /// ÷ mean of the per-run values); only with two or more base runs.
    pub base_cv: Option<f64>,
    /// The same for the candidate.
    pub candidate_cv: Option<f64>,
}

/// One side as compared.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct SideInfo {
    /// The runs' labels.
    pub runs: Vec<String>,
    /// Measured turns (warmup and superseded records aside), any status.
    pub measured_turns: u64,
    /// Of them, ok turns.
    pub ok_turns: u64,
    /// The time output throughput divides by: Σ over runs of each run's measured time, s.
    pub span_s: Option<f64>,
}

/// The first difference between two runs' plans: a key path of their `config` and its two
/// values (`None`: absent).
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct PlanDiff {
    /// Dotted key path into `config`, e.g. `spec.plan.seed` (array items as `[i]`).
    pub path: String,
    /// The value in the first config (the base's, or the first run of a side).
    pub left: Option<Value>,
    /// The value in the second config.
    pub right: Option<Value>,
}

impl PlanDiff {
    /// `PATH is LEFT in LEFT_NAME and RIGHT in RIGHT_NAME`.
    pub fn describe(&self, left_name: &str, right_name: &str) -> String {
        format!(
            "{} is {} in {left_name} and {} in {right_name}",
            self.path,
            show_json(self.left.as_ref()),
            show_json(self.right.as_ref())
        )
    }
}

fn show_json(v: Option<&Value>) -> String {
    match v {
        None => "absent".to_owned(),
        Some(v) => v.to_string(),
    }
}

/// Why runs cannot be compared.
#[derive(Debug, Clone, PartialEq, thiserror::Error)]
#[non_exhaustive]
pub enum CompareError {
    /// A side has no run.
    #[error("no {0} run given")]
    NoRuns(Side),
    /// A side's runs have no measured turn.
    #[error("{0} has no measured turns")]
    NoTurns(Side),
    /// The base and the candidate were made from different plans.
    #[error("plans differ: {}", .0.describe("BASE", "CAND"))]
    PlansDiffer(Box<PlanDiff>),
    /// Two runs of one side were made from different plans.
    #[error("{side} runs differ in plan: {}", .diff.describe(.first, .other))]
    RunPlansDiffer {
        /// The side.
        side: Side,
        /// Its first run's label.
        first: String,
        /// The label of the run that differs from it.
        other: String,
        /// The difference (left: the first run).
        diff: Box<PlanDiff>,
    },
    /// An option is out of range.
    #[error("{0}")]
    InvalidOptions(String),
}

/// The result of [`compare`].
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct Comparison {
    /// The base side.
    pub base: SideInfo,
    /// The candidate side.
    pub candidate: SideInfo,
    /// Bootstrap resamples drawn.
    pub resamples: u32,
    /// Seed of the bootstrap's generator.
    pub seed: u64,
    /// Confidence level of the intervals ([`CONFIDENCE`]).
    pub confidence: f64,
    /// The threshold a change must exceed to be a verdict (a fraction).
    pub threshold: f64,
    /// The SLO goodput was measured against (`None`: goodput omitted).
    pub slo: Option<Slo>,
    /// The first difference between the two sides' plans, when compared anyway (`force`).
    pub plans_differ: Option<PlanDiff>,
    /// One row per metric, in [`Metric::ALL`]'s order (goodput only with an SLO).
    pub metrics: Vec<MetricRow>,
    /// What the reader should know: omitted metrics, differing plans or SLOs, invalid runs.
    pub notes: Vec<String>,
    regressed: bool,
}

impl Comparison {
    /// Whether any metric is [`Verdict::Worse`].
    pub fn regressed(&self) -> bool {
        self.regressed
    }

    /// The metrics that are [`Verdict::Worse`].
    pub fn regressions(&self) -> impl Iterator<Item = &MetricRow> {
        self.metrics.iter().filter(|r| r.verdict == Verdict::Worse)
    }

    /// The row of `metric`, when it was compared.
    pub fn row(&self, metric: Metric) -> Option<&MetricRow> {
        self.metrics.iter().find(|r| r.metric == metric)
    }

    fn repeats(&self) -> bool {
        self.base.runs.len() > 1 || self.candidate.runs.len() > 1
    }

    fn header(&self) -> String {
        let side = |s: &SideInfo| {
            format!(
                "{} run{} ({} measured turns)",
                s.runs.len(),
                if s.runs.len() == 1 { "" } else { "s" },
                s.measured_turns
            )
        };
        format!(
            "BASE {} vs CAND {}\n{:.0}% bootstrap intervals of the relative change, {} resamples (seed {}); threshold {}",
            side(&self.base),
            side(&self.candidate),
            self.confidence * 100.0,
            self.resamples,
            self.seed,
            pct_plain(self.threshold)
        )
    }

    fn conclusion(&self) -> String {
        let worse: Vec<&str> = self.regressions().map(|r| r.metric.label()).collect();
        if worse.is_empty() {
            "no significant regression".to_owned()
        } else {
            format!("regression: {} worse", worse.join(", "))
        }
    }

    fn cells(&self, r: &MetricRow) -> Vec<String> {
        let mut cells = vec![
            r.metric.label().to_owned(),
            r.metric.show(r.base),
            r.metric.show(r.candidate),
            pct(r.change),
            match (r.ci_low, r.ci_high) {
                (Some(lo), Some(hi)) => format!("[{}, {}]", pct(Some(lo)), pct(Some(hi))),
                _ => "n/a".to_owned(),
            },
            r.verdict.as_str().to_owned(),
        ];
        if self.repeats() {
            cells.push(pct_cv(r.base_cv));
            cells.push(pct_cv(r.candidate_cv));
        }
        cells
    }

    fn columns(&self) -> Vec<&'static str> {
        let mut c = vec!["metric", "base", "candidate", "change", "95% CI", "verdict"];
        if self.repeats() {
            c.extend(["base CV", "cand CV"]);
        }
        c
    }

    /// The comparison as console text: two lines naming the sides, the resamples and the seed,
    /// the table (metric, base, candidate, change, 95% CI, verdict, and each side's CV with
    /// repeats), the notes and the conclusion.
    pub fn text(&self) -> String {
        let mut out = String::new();
        let _ = writeln!(out, "{}\n", self.header());
        let head: Vec<String> = self.columns().iter().map(|c| (*c).to_owned()).collect();
        let rows: Vec<Vec<String>> = std::iter::once(head)
            .chain(self.metrics.iter().map(|r| self.cells(r)))
            .collect();
        let cols = rows.first().map_or(0, Vec::len);
        let widths: Vec<usize> = (0..cols)
            .map(|i| rows.iter().map(|r| r[i].chars().count()).max().unwrap_or(0))
            .collect();
        for row in &rows {
            let mut line = String::new();
            for (i, cell) in row.iter().enumerate() {
                let pad = widths[i].saturating_sub(cell.chars().count());
                // Numbers (base, candidate, change) right-aligned; names and intervals left.
                if (1..=3).contains(&i) {
                    line.push_str(&" ".repeat(pad));
                    line.push_str(cell);
                } else {
                    line.push_str(cell);
                    line.push_str(&" ".repeat(pad));
                }
                line.push_str("   ");
            }
            let _ = writeln!(out, "{}", line.trim_end());
        }
        for n in &self.notes {
            let _ = writeln!(out, "note: {n}");
        }
        let _ = writeln!(out, "{}", self.conclusion());
        out
    }

    /// The comparison as GitHub-flavoured markdown: the header lines, a table (metric | base |
    /// candidate | change | 95% CI | verdict, plus base CV | cand CV with repeats), the notes
    /// as a list and the conclusion in bold.
    pub fn markdown(&self) -> String {
        let mut md = String::new();
        for line in self.header().lines() {
            let _ = writeln!(md, "{}\n", cell(line));
        }
        let columns = self.columns();
        let _ = writeln!(md, "| {} |", columns.join(" | "));
        let align: Vec<&str> = columns
            .iter()
            .enumerate()
            .map(|(i, _)| if (1..=3).contains(&i) { "---:" } else { "---" })
            .collect();
        let _ = writeln!(md, "|{}|", align.join("|"));
        for r in &self.metrics {
            let mut cells = self.cells(r);
            if r.verdict == Verdict::Worse || r.verdict == Verdict::Better {
                cells[5] = format!("**{}**", cells[5]);
            }
            let cells: Vec<String> = cells.iter().map(|c| cell(c)).collect();
            let _ = writeln!(md, "| {} |", cells.join(" | "));
        }
        if !self.notes.is_empty() {
            md.push('\n');
            for n in &self.notes {
                let _ = writeln!(md, "- {}", cell(n));
            }
        }
        let _ = writeln!(md, "\n**{}**", self.conclusion());
        md
    }
}

/// `|` and line breaks cannot appear inside a markdown table cell.
fn cell(s: &str) -> String {
    s.replace('|', "\\|").replace(['\n', '\r'], " ")
}

/// A signed percentage: `+10.0%` (anything that rounds to 0 reads `+0.0%`, never `-0.0%`).
fn pct(v: Option<f64>) -> String {
    match v {
        Some(v) if v.is_finite() => {
            let p = v * 100.0;
            format!("{:+.1}%", if p.abs() < 0.05 { 0.0 } else { p })
        }
        _ => "n/a".to_owned(),
    }
}

fn pct_cv(v: Option<f64>) -> String {
    match v {
        Some(v) if v.is_finite() => format!("{:.1}%", v * 100.0),
        _ => "n/a".to_owned(),
    }
}

fn pct_plain(v: f64) -> String {
    let s = format!("{:.2}", v * 100.0);
    let s = s.trim_end_matches('0').trim_end_matches('.');
    format!("{s}%")
}

/// The first difference between two runs' plans, from their `config` (`run.json` echoed in
/// `result.json`): `spec.plan` (dataset, seed, tokenizer, counts, output policy, …; its
/// `concurrency`, which only sets the default pool size, aside), then `plan.sessions` and
/// `plan.turns` (the plan as built). Keys are walked in the document's order; `null` and an
/// absent key are the same; numbers compare by value. `None` when the plans are the same.
pub fn plan_diff(left: &Value, right: &Value) -> Option<PlanDiff> {
    PLAN_IDENTITY
        .iter()
        .find_map(|path| diff_at(left, right, path, NOT_PLAN_IDENTITY))
}

fn lookup<'a>(v: &'a Value, path: &[&str]) -> Option<&'a Value> {
    path.iter().try_fold(v, |v, k| v.get(k))
}

fn diff_at(left: &Value, right: &Value, path: &[&str], skip: &[&str]) -> Option<PlanDiff> {
    first_diff(
        lookup(left, path),
        lookup(right, path),
        path.join("."),
        skip,
    )
}

fn first_diff(
    left: Option<&Value>,
    right: Option<&Value>,
    path: String,
    skip: &[&str],
) -> Option<PlanDiff> {
    if skip.contains(&path.as_str()) {
        return None;
    }
    let left = left.filter(|v| !v.is_null());
    let right = right.filter(|v| !v.is_null());
    match (left, right) {
        (Some(Value::Object(_)), _) | (_, Some(Value::Object(_)))
            if left.is_none_or(Value::is_object) && right.is_none_or(Value::is_object) =>
        {
            let empty = serde_json::Map::new();
            let a = left.and_then(Value::as_object).unwrap_or(&empty);
            let b = right.and_then(Value::as_object).unwrap_or(&empty);
            a.iter()
                .map(|(k, va)| (k, Some(va), b.get(k)))
                .chain(
                    b.iter()
                        .filter(|(k, _)| !a.contains_key(*k))
                        .map(|(k, vb)| (k, None, Some(vb))),
                )
                .find_map(|(k, va, vb)| first_diff(va, vb, format!("{path}.{k}"), skip))
        }
        (Some(Value::Array(a)), Some(Value::Array(b))) => (0..a.len().max(b.len()))
            .find_map(|i| first_diff(a.get(i), b.get(i), format!("{path}[{i}]"), skip)),
        (l, r) => (!same_leaf(l, r)).then(|| PlanDiff {
            path,
            left: l.cloned(),
            right: r.cloned(),
        }),
    }
}

fn same_leaf(a: Option<&Value>, b: Option<&Value>) -> bool {
    match (a, b) {
        (Some(Value::Number(x)), Some(Value::Number(y))) => {
            if let (Some(x), Some(y)) = (x.as_i64(), y.as_i64()) {
                x == y
            } else if let (Some(x), Some(y)) = (x.as_u64(), y.as_u64()) {
                x == y
            } else {
                x.as_f64() == y.as_f64()
            }
        }
        (a, b) => a == b,
    }
}

/// One run's turns within its side's flattened measured turns.
struct Stratum {
    start: usize,
    len: usize,
    span_s: Option<f64>,
}

/// One side, ready to be resampled: its measured turns flattened across runs.
struct Prepared {
    runs: Vec<Stratum>,
    /// Output tokens of each ok turn reporting them (0 otherwise).
    tokens: Vec<f64>,
    /// Some ok turn reported output tokens.
    has_tokens: bool,
    /// Ok and meeting the SLO.
    met: Vec<bool>,
    /// `(turn, value)` of the ok turns' TTFT, TPOT and e2e, sorted by value.
    by_value: [Vec<(usize, f64)>; 3],
    ok: u64,
}

/// Σ of the runs' spans (`None` when a run has none).
fn total_span(runs: &[Stratum]) -> Option<f64> {
    runs.iter().map(|r| r.span_s).sum::<Option<f64>>()
}

fn positive(x: Option<f64>) -> Option<f64> {
    x.filter(|x| x.is_finite() && *x > 0.0)
}

impl Prepared {
    fn new(runs: &[CompareRun], slo: Option<&Slo>) -> Self {
        let mut p = Prepared {
            runs: Vec::with_capacity(runs.len()),
            tokens: Vec::new(),
            has_tokens: false,
            met: Vec::new(),
            by_value: [Vec::new(), Vec::new(), Vec::new()],
            ok: 0,
        };
        for run in runs {
            let start = p.tokens.len();
            let measured: Vec<&TurnRecord> = run
                .turns
                .iter()
                .filter(|t| !t.warmup && !t.superseded)
                .collect();
            let first_sent = measured
                .iter()
                .map(|t| t.sent_s)
                .filter(|t| t.is_finite())
                .min_by(f64::total_cmp);
            let last_end = measured
                .iter()
                .map(|t| t.end_s)
                .filter(|t| t.is_finite())
                .max_by(f64::total_cmp);
            let span_s = positive(run.result.overall.span_s)
                .or_else(|| positive(last_end.zip(first_sent).map(|(e, s)| e - s)));
            for t in &measured {
                let i = p.tokens.len();
                let ok = t.status == TurnStatus::Ok;
                let tokens = if ok { t.output_tokens } else { None };
                p.has_tokens |= tokens.is_some();
                p.tokens.push(tokens.map_or(0.0, |n| n as f64));
                p.met.push(ok && slo.is_some_and(|s| s.is_met_by(t)));
                if ok {
                    p.ok += 1;
                    for (k, v) in [t.ttft_ms, t.tpot_ms, t.e2e_ms].into_iter().enumerate() {
                        if let Some(v) = v.filter(|v| v.is_finite()) {
                            p.by_value[k].push((i, v));
                        }
                    }
                }
            }
            p.runs.push(Stratum {
                start,
                len: measured.len(),
                span_s,
            });
        }
        for v in &mut p.by_value {
            v.sort_by(|a, b| a.1.total_cmp(&b.1));
        }
        p
    }

    fn turns(&self) -> usize {
        self.tokens.len()
    }

    /// Resamples each run's turns with replacement (as many as it has): `w[i]` is how many
    /// times turn `i` was drawn.
    fn draw(&self, rng: &mut ChaCha8Rng, w: &mut [u32]) {
        w.fill(0);
        for r in &self.runs {
            for _ in 0..r.len {
                w[r.start + rng.random_range(0..r.len)] += 1;
            }
        }
    }

    /// Every metric over the turns weighted by `w` (a turn drawn k times counts k times),
    /// throughput divided by `span_s`.
    fn estimate(
        &self,
        w: &[u32],
        span_s: Option<f64>,
        goodput: bool,
        buf: &mut Vec<f64>,
    ) -> [Option<f64>; 6] {
        let mut out = [None; 6];
        let mut quantiles = |k: usize, qs: &[(usize, f64)], out: &mut [Option<f64>; 6]| {
            buf.clear();
            for &(i, v) in &self.by_value[k] {
                for _ in 0..w[i] {
                    buf.push(v);
                }
            }
            for &(slot, q) in qs {
                out[slot] = percentile(buf, q);
            }
        };
        quantiles(0, &[(0, 0.5), (1, 0.99)], &mut out);
        quantiles(1, &[(2, 0.5)], &mut out);
        quantiles(2, &[(3, 0.5)], &mut out);
        if self.has_tokens {
            let tokens: f64 = w
                .iter()
                .zip(&self.tokens)
                .map(|(&w, &t)| f64::from(w) * t)
                .sum();
            out[4] = span_s.map(|s| tokens / s);
        }
        if goodput {
            let n: u64 = w.iter().map(|&w| u64::from(w)).sum();
            let met: u64 = w
                .iter()
                .zip(&self.met)
                .filter(|(_, m)| **m)
                .map(|(&w, _)| u64::from(w))
                .sum();
            out[5] = (n > 0).then(|| met as f64 / n as f64);
        }
        out
    }

    /// Each run's own value of every metric.
    fn per_run(&self, goodput: bool, buf: &mut Vec<f64>) -> Vec<[Option<f64>; 6]> {
        let mut w = vec![0u32; self.turns()];
        self.runs
            .iter()
            .map(|r| {
                w.fill(0);
                w[r.start..r.start + r.len].fill(1);
                self.estimate(&w, r.span_s, goodput, buf)
            })
            .collect()
    }
}

/// `(c − b) ÷ b`; 0 when both are 0.
fn relative(b: Option<f64>, c: Option<f64>) -> Option<f64> {
    match (b, c) {
        (Some(b), Some(c)) if b != 0.0 => Some((c - b) / b).filter(|x| x.is_finite()),
        (Some(b), Some(c)) if b == 0.0 && c == 0.0 => Some(0.0),
        _ => None,
    }
}

/// Sample standard deviation ÷ mean of the values (every run must have one; at least two).
fn cv(values: &[Option<f64>]) -> Option<f64> {
    let v: Vec<f64> = values.iter().copied().collect::<Option<Vec<f64>>>()?;
    if v.len() < 2 {
        return None;
    }
    let n = v.len() as f64;
    let mean = v.iter().sum::<f64>() / n;
    if mean == 0.0 {
        return None;
    }
    let var = v.iter().map(|x| (x - mean).powi(2)).sum::<f64>() / (n - 1.0);
    Some(var.sqrt() / mean.abs())
}

fn verdict(
    direction: Direction,
    change: Option<f64>,
    ci: Option<(f64, f64)>,
    threshold: f64,
) -> Verdict {
    let Some(change) = change else {
        return Verdict::NotMeasured;
    };
    let Some((lo, hi)) = ci else {
        return Verdict::NoSignificantChange;
    };
    // In "worse" units: positive is worse.
    let (change, lo, hi) = match direction {
        Direction::LowerIsBetter => (change, lo, hi),
        Direction::HigherIsBetter => (-change, -hi, -lo),
    };
    if lo > 0.0 && change > threshold {
        Verdict::Worse
    } else if hi < 0.0 && change < -threshold {
        Verdict::Better
    } else {
        Verdict::NoSignificantChange
    }
}

/// Which SLO goodput is measured against, with notes; `None` omits goodput.
fn choose_slo(
    base: &[CompareRun],
    candidate: &[CompareRun],
    over: Option<Slo>,
    notes: &mut Vec<String>,
) -> Option<Slo> {
    if let Some(slo) = over {
        return Some(slo);
    }
    let missing: Vec<String> = [(Side::Base, base), (Side::Candidate, candidate)]
        .iter()
        .filter(|(_, runs)| runs.iter().any(|r| r.result.slo.is_none()))
        .map(|(side, _)| side.to_string())
        .collect();
    if !missing.is_empty() {
        notes.push(format!(
            "goodput omitted: {} ran without an SLO (`bench run --slo`; or give one to compare against)",
            missing.join(" and ")
        ));
        return None;
    }
    let slo = base[0].result.slo;
    if let Some(s) = slo {
        if let Some(other) = base
            .iter()
            .chain(candidate)
            .find(|r| r.result.slo != slo)
            .and_then(|r| r.result.slo.map(|o| (r.label.as_str(), o)))
        {
            notes.push(format!(
                "{} ran with SLO {}, {} with {}: goodput is measured against {s} on both sides",
                base[0].label, s, other.0, other.1
            ));
        }
    }
    slo
}

/// Compares `candidate` against `base`, each one or more runs (repeats) of one configuration.
///
/// Only measured turns are used (warmup and superseded records skipped); latencies over the ok
/// ones. Per metric: the sides' pooled values, the relative change, its bootstrap interval
/// (each run's measured turns resampled with replacement `resamples` times, stratified by run,
/// then pooled; the 2.5th and 97.5th percentiles of the resampled changes) and the
/// [`Verdict`]. Output throughput is Σ output tokens of the ok measured turns ÷ Σ of the runs'
/// measured time (`result.overall.span_s`: the measured run's wall time; a run without it:
/// the first measured turn's `sent_s` → the last one's `end_s`); resampled, the tokens change
/// and the time does not.
///
/// # Errors
///
/// [`CompareError::PlansDiffer`] / [`CompareError::RunPlansDiffer`] when plans differ (see
/// [`plan_diff`]) without `force`; [`CompareError::NoRuns`], [`CompareError::NoTurns`],
/// [`CompareError::InvalidOptions`].
pub fn compare(
    base: &[CompareRun],
    candidate: &[CompareRun],
    opts: &CompareOptions,
) -> Result<Comparison, CompareError> {
    if !(opts.threshold.is_finite() && opts.threshold >= 0.0) {
        return Err(CompareError::InvalidOptions(format!(
            "the threshold must be a fraction ≥ 0 (0.05 = 5%), got {}",
            opts.threshold
        )));
    }
    if opts.resamples == 0 {
        return Err(CompareError::InvalidOptions(
            "at least one bootstrap resample is needed".to_owned(),
        ));
    }
    let (Some(b0), Some(c0)) = (base.first(), candidate.first()) else {
        return Err(CompareError::NoRuns(if base.is_empty() {
            Side::Base
        } else {
            Side::Candidate
        }));
    };
    let mut notes: Vec<String> = base
        .iter()
        .chain(candidate)
        .flat_map(|r| r.notes.iter().cloned())
        .collect();

    for (side, runs) in [(Side::Base, base), (Side::Candidate, candidate)] {
        for r in &runs[1..] {
            if let Some(diff) = plan_diff(&runs[0].result.config, &r.result.config) {
                let err = CompareError::RunPlansDiffer {
                    side,
                    first: runs[0].label.clone(),
                    other: r.label.clone(),
                    diff: Box::new(diff),
                };
                if !opts.force {
                    return Err(err);
                }
                notes.push(format!("{err} (compared anyway)"));
            }
        }
    }
    let plans_differ = plan_diff(&b0.result.config, &c0.result.config);
    if let Some(diff) = &plans_differ {
        let err = CompareError::PlansDiffer(Box::new(diff.clone()));
        if !opts.force {
            return Err(err);
        }
        notes.push(format!("{err} (compared anyway)"));
    }
    let unplanned: Vec<&str> = base
        .iter()
        .chain(candidate)
        .filter(|r| lookup(&r.result.config, &["spec", "plan"]).is_none())
        .map(|r| r.label.as_str())
        .collect();
    if !unplanned.is_empty() {
        notes.push(format!(
            "plan identity not checked for {}: no plan recorded in its result (config.spec.plan)",
            unplanned.join(", ")
        ));
    }
    if let Some(d) = diff_at(&b0.result.config, &c0.result.config, &["spec", "load"], &[]) {
        notes.push(format!("load differs: {}", d.describe("BASE", "CAND")));
    }
    for r in base.iter().chain(candidate) {
        if let Some(v) = r
            .result
            .validity
            .as_ref()
            .filter(|v| v.verdict == RunVerdict::Invalid)
        {
            let failed: Vec<&str> = v
                .checks
                .iter()
                .filter(|c| c.status == crate::validity::CheckStatus::Fail)
                .map(|c| c.name.as_str())
                .collect();
            notes.push(format!(
                "{} is invalid (failed: {}): its figures may not describe the server",
                r.label,
                failed.join(", ")
            ));
        }
    }

    let slo = choose_slo(base, candidate, opts.slo, &mut notes);
    let goodput = slo.is_some();
    let b = Prepared::new(base, slo.as_ref());
    let c = Prepared::new(candidate, slo.as_ref());
    if b.turns() == 0 {
        return Err(CompareError::NoTurns(Side::Base));
    }
    if c.turns() == 0 {
        return Err(CompareError::NoTurns(Side::Candidate));
    }
    let (b_span, c_span) = (total_span(&b.runs), total_span(&c.runs));
    for (side, span) in [(Side::Base, b_span), (Side::Candidate, c_span)] {
        if span.is_none() {
            notes.push(format!(
                "output throughput not measured: a {side} run has no measured time"
            ));
        }
    }

    let mut buf = Vec::new();
    let point_b = b.estimate(&vec![1; b.turns()], b_span, goodput, &mut buf);
    let point_c = c.estimate(&vec![1; c.turns()], c_span, goodput, &mut buf);
    let cv_of = |p: &Prepared, buf: &mut Vec<f64>| -> Option<Vec<[Option<f64>; 6]>> {
        (p.runs.len() > 1).then(|| p.per_run(goodput, buf))
    };
    let runs_b = cv_of(&b, &mut buf);
    let runs_c = cv_of(&c, &mut buf);

    let mut rng = ChaCha8Rng::seed_from_u64(opts.seed);
    let mut wb = vec![0u32; b.turns()];
    let mut wc = vec![0u32; c.turns()];
    let mut changes: [Vec<f64>; 6] = Default::default();
    for v in &mut changes {
        v.reserve(opts.resamples as usize);
    }
    for _ in 0..opts.resamples {
        b.draw(&mut rng, &mut wb);
        c.draw(&mut rng, &mut wc);
        let eb = b.estimate(&wb, b_span, goodput, &mut buf);
        let ec = c.estimate(&wc, c_span, goodput, &mut buf);
        for (k, v) in changes.iter_mut().enumerate() {
            if let Some(x) = relative(eb[k], ec[k]) {
                v.push(x);
            }
        }
    }

    let tail = (1.0 - CONFIDENCE) / 2.0;
    let mut metrics = Vec::new();
    let mut wide = Vec::new();
    for m in Metric::ALL {
        if m == Metric::Goodput && !goodput {
            continue;
        }
        let k = m.index();
        let v = &mut changes[k];
        v.sort_by(f64::total_cmp);
        let ci = percentile(v, tail).zip(percentile(v, 1.0 - tail));
        let change = relative(point_b[k], point_c[k]);
        if change.is_some() && v.len() < opts.resamples as usize {
            notes.push(format!(
                "{}: {} of {} resamples had no value and are left out of its interval",
                m.label(),
                opts.resamples as usize - v.len(),
                opts.resamples
            ));
        }
        if ci.is_some_and(|(lo, hi)| (hi - lo) / 2.0 > opts.threshold) {
            wide.push(m.label());
        }
        let side_cv = |runs: &Option<Vec<[Option<f64>; 6]>>| {
            runs.as_ref()
                .and_then(|r| cv(&r.iter().map(|x| x[k]).collect::<Vec<_>>()))
        };
        metrics.push(MetricRow {
            metric: m,
            direction: m.direction(),
            base: point_b[k],
            candidate: point_c[k],
            change,
            ci_low: ci.map(|c| c.0),
            ci_high: ci.map(|c| c.1),
            verdict: verdict(m.direction(), change, ci, opts.threshold),
            base_cv: side_cv(&runs_b),
            candidate_cv: side_cv(&runs_c),
        });
    }
    if !wide.is_empty() {
        notes.push(format!(
            "intervals wider than ±{} (too few turns or repeats to tell a change of that size from noise): {}",
            pct_plain(opts.threshold),
            wide.join(", ")
        ));
    }
    let regressed = metrics.iter().any(|r| r.verdict == Verdict::Worse);
    let side_info = |runs: &[CompareRun], p: &Prepared, span: Option<f64>| SideInfo {
        runs: runs.iter().map(|r| r.label.clone()).collect(),
        measured_turns: p.turns() as u64,
        ok_turns: p.ok,
        span_s: span,
    };
    Ok(Comparison {
        base: side_info(base, &b, b_span),
        candidate: side_info(candidate, &c, c_span),
        resamples: opts.resamples,
        seed: opts.seed,
        confidence: CONFIDENCE,
        threshold: opts.threshold,
        slo,
        plans_differ,
        metrics,
        notes,
        regressed,
    })
}
