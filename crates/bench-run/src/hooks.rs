//! Hooks and graders: code of yours that watches a run.
//!
//! A [`Hooks`] is called when the run starts, after every finished turn (or, in a journeys
//! run, every timed operation) and when it ends. A [`Grader`] scores one ok turn
//! ([`Grader::grade`] → a [`Grade`] in `[0, 1]` with a label and notes); the run collects each
//! grader's [`GraderSummary`] into `result.json` under `grades`, and hands every turn's
//! grades to the hooks (the control plane streams them). Failed turns are never graded. A
//! grader that returns an error or panics is skipped for that turn and counted in its summary
//! (its first error is kept and reported once); it never fails the run. Both are called on the
//! engine's tasks: keep them quick.

use std::path::Path;

pub use bench_report::grade::{Grade, GraderSummary, NamedGrade};
use bench_rundir::{StopBy, TurnRecord};

/// One finished turn as hooks and graders see it.
#[derive(Debug, Clone, Copy)]
pub struct TurnView<'a> {
    /// Its record (the line `turns.jsonl` gets).
    pub record: &'a TurnRecord,
    /// The text the server answered (ok turns; `None` for failed ones).
    pub answer: Option<&'a str>,
}

/// Scores ok turns.
pub trait Grader: Send + Sync {
    /// Its name (unique in a run: the key of its summary).
    fn name(&self) -> &str;
    /// A grade for `turn`, `Ok(None)` to pass on it (not counted as graded), `Err` when the
    /// grader itself failed.
    fn grade(&self, turn: &TurnView<'_>) -> Result<Option<Grade>, String>;
}

/// What a run is, for [`Hooks::on_start`].
#[derive(Debug, Clone, Copy)]
pub struct RunStart<'a> {
    /// The run directory.
    pub dir: &'a Path,
    /// `replay` or `journeys`.
    pub kind: &'a str,
}

/// One timed journey operation, for [`Hooks::on_operation`].
#[derive(Debug, Clone, Copy)]
pub struct Operation<'a> {
    /// The journey's name.
    pub journey: &'a str,
    /// Which run of the journey (from 1).
    pub run: u32,
    /// Its latency when it succeeded, ms.
    pub latency_ms: Option<f64>,
    /// Its failure reason (`HTTP 404`, `timeout`, …) when it failed.
    pub failure: Option<&'a str>,
}

/// How a run ended, for [`Hooks::on_end`].
#[derive(Debug, Clone, Copy)]
pub struct RunEnd<'a> {
    /// The run directory.
    pub dir: &'a Path,
    /// What stopped it.
    pub stopped_by: StopBy,
    /// In words.
    pub reason: &'a str,
    /// Each grader's summary (empty without graders).
    pub grades: &'a [GraderSummary],
}

/// Called at the start, per finished turn or journey operation, and at the end of a run.
/// Every method has an empty default.
pub trait Hooks: Send + Sync {
    /// The run directory exists and the engine is about to start.
    fn on_start(&self, _run: &RunStart<'_>) {}
    /// A turn finished; `grades` are the graders' verdicts on it (empty for failed turns).
    fn on_turn(&self, _turn: &TurnView<'_>, _grades: &[NamedGrade]) {}
    /// A timed journey operation finished.
    fn on_operation(&self, _op: &Operation<'_>) {}
    /// The run ended and its result is written.
    fn on_end(&self, _run: &RunEnd<'_>) {}
}
