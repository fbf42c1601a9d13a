//! A run in progress ([`Handle`]: [`RunHandle`], [`crate::journeys::JourneysHandle`]; [`Canceller`]), how it ended ([`RunReport`]) and its
//! gate ([`gate`]: `bench run`'s exit status).

use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};

use bench_report::RunResult;
use bench_rundir::{EventLine, StopBy};
use bench_runner::CancelToken;

use crate::{CancelledBy, Events, ProgressCounters, RunError, Snapshot, secrets};

/// A run in progress: a replay ([`RunHandle`]) or a journeys suite
/// ([`crate::journeys::JourneysHandle`]), `R` what [`Handle::wait`] returns.
#[derive(Debug)]
pub struct Handle<R> {
    /// The run directory (empty: a journeys run that writes nothing).
    pub(crate) dir: PathBuf,
    pub(crate) events: Arc<Events>,
    /// A replay's live counters (a journeys run has none).
    pub(crate) progress: Option<Arc<ProgressCounters>>,
    pub(crate) canceller: Canceller,
    pub(crate) task: tokio::task::JoinHandle<Result<R, RunError>>,
    pub(crate) secrets: secrets::Secrets,
}

/// A replay in progress.
pub type RunHandle = Handle<RunReport>;

/// Stops a run from anywhere (clonable, `Send`): a replay or a journeys suite.
#[derive(Debug, Clone, Default)]
pub struct Canceller {
    pub(crate) token: CancelToken,
    pub(crate) by_signal: Arc<AtomicBool>,
}

impl Canceller {
    /// Stops starting work: no new session or turn (a journeys suite: no new operation or
    /// run); what is in flight finishes.
    pub fn cancel(&self, by: CancelledBy) {
        if by == CancelledBy::Signal {
            self.by_signal.store(true, Ordering::SeqCst);
        }
        self.token.cancel();
    }

    /// Cuts a replay's turns in flight too (their records say `cancelled`). A journeys
    /// suite's operations are not cut: as [`Canceller::cancel`] by the caller.
    pub fn abort(&self) {
        self.token.cancel();
        self.token.abort();
    }

    pub(crate) fn by(&self) -> CancelledBy {
        if self.by_signal.load(Ordering::SeqCst) {
            CancelledBy::Signal
        } else {
            CancelledBy::Caller
        }
    }
}

impl<R> Handle<R> {
    /// The lifecycle events from now on (the same typed events `events.jsonl` holds; the
    /// file has the earlier ones). A receiver that falls [`crate::events::EVENT_BUFFER`] behind is
    /// told it lagged.
    pub fn events(&self) -> crate::EventStream {
        self.events.subscribe()
    }

    /// Every event of this run's process so far (`run.started` or `run.resumed` first), and a
    /// receiver of the ones after: nothing missing between the two, nothing in both.
    pub fn events_with_history(&self) -> (Vec<EventLine>, crate::EventStream) {
        self.events.subscribe_with_history()
    }

    /// Stops starting work (no new session or turn; a journeys suite: no new operation or
    /// run); what is in flight finishes (a journeys suite's teardown runs); the run is
    /// finalized and marked `cancelled`, its result covering what ran.
    pub fn cancel(&self) {
        self.canceller.cancel(CancelledBy::Caller);
    }

    /// A handle to cancel or abort from elsewhere (a signal handler).
    pub fn canceller(&self) -> Canceller {
        self.canceller.clone()
    }

    /// Waits for the end: the result is written and the report returned.
    pub async fn wait(self) -> Result<R, RunError> {
        let secrets = self.secrets;
        self.task
            .await
            .map_err(|e| RunError::Failed(format!("the run task failed: {e}")))?
            .map_err(|e| e.scrub(&secrets))
    }
}

impl RunHandle {
    /// The run directory.
    pub fn dir(&self) -> &Path {
        &self.dir
    }

    /// The counters now (turns, sessions, active, failures, output tok/s so far, ETA).
    pub fn progress(&self) -> Snapshot {
        self.progress_counters().snapshot_now()
    }

    /// The live counters, for a display that samples them on its own clock.
    pub fn progress_counters(&self) -> Arc<ProgressCounters> {
        self.progress
            .clone()
            .unwrap_or_else(|| Arc::new(ProgressCounters::new(None, 0, None)))
    }

    /// Cuts the turns in flight too.
    pub fn abort(&self) {
        self.canceller.abort();
    }
}

/// How a run ended.
#[derive(Debug, Clone)]
pub struct RunReport {
    /// The run directory.
    pub dir: PathBuf,
    /// `result.json`.
    pub result: RunResult,
    /// What stopped it.
    pub stopped_by: StopBy,
    /// In words.
    pub reason: String,
    /// Measured and warmup turn records of the run (every segment's, superseded ones left out).
    pub turns_total: u64,
    /// Of those, the ones not ok.
    pub turns_failed: u64,
    /// Replay tasks that failed (a bug; their sessions were cut).
    pub task_failures: Vec<String>,
    /// Records that could not be written, and similar.
    pub warnings: Vec<String>,
    /// The spec's failure threshold.
    pub max_error_rate: f64,
    /// The spec asks for a `valid` verdict ([`crate::spec::Judge::require_valid`]).
    pub require_valid: bool,
    /// Each grader's summary, as `result.json` has them (empty without graders; see [`crate::hooks`]).
    pub grades: Vec<bench_report::grade::GraderSummary>,
}

impl RunReport {
    /// `Ok` when the run passes its gate: no failed replay task, and [`gate`]; else one line
    /// saying why. (The run's *validity*, whether its figures can be trusted, is
    /// `result.validity`; the gate asks for `valid` only with `require_valid`.)
    pub fn gate(&self) -> Result<(), String> {
        if !self.task_failures.is_empty() {
            return Err(format!(
                "{} replay task(s) failed (a bug; their sessions were cut, every record made \
                 before is kept): {}",
                self.task_failures.len(),
                self.task_failures.join("; ")
            ));
        }
        gate(
            self.turns_total,
            self.turns_failed,
            self.max_error_rate,
            self.require_valid,
            self.result.validity.as_ref(),
        )
    }
}

/// A finished run's gate (`bench run`'s exit status, `bench serve`'s `passed`), from what a
/// run directory keeps as well as from a live run: at least one turn, no more failed turns
/// than `max_error_rate` allows and, with `require_valid`, a `valid` verdict.
pub fn gate(
    turns_total: u64,
    turns_failed: u64,
    max_error_rate: f64,
    require_valid: bool,
    validity: Option<&bench_report::Validity>,
) -> Result<(), String> {
    if turns_total == 0 {
        return Err("no turn was played".into());
    }
    let rate = turns_failed as f64 / turns_total as f64;
    if rate > max_error_rate {
        return Err(format!(
            "{turns_failed} of {turns_total} turns failed ({:.1}%), above --max-error-rate \
             {max_error_rate}",
            rate * 100.0,
        ));
    }
    if require_valid
        && let Some(v) = validity
        && v.verdict != bench_report::Verdict::Valid
    {
        let why: Vec<String> = v
            .checks
            .iter()
            .filter(|c| {
                matches!(
                    c.status,
                    bench_report::CheckStatus::Warn | bench_report::CheckStatus::Fail
                )
            })
            .map(|c| c.name.clone())
            .collect();
        return Err(format!(
            "the run is {} ({}), and --require-valid asks for valid",
            v.verdict.as_str(),
            why.join(", ")
        ));
    }
    Ok(())
}
