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
//!
//! The rules in detail:
//!
//! - Graders run on every ok, measured turn, in order (the built-ins of
//!   [`RunSpec::graders`](crate::RunSpec::graders) first, then [`RunOptions::graders`]), as
//!   soon as its answer arrived and before the session's next turn is sent. Failed turns and
//!   warmup turns are not graded: the hooks get them with empty grades.
//! - A grade whose score is not within `[0, 1]` (or is NaN) counts as an error of its grader
//!   (`score out of range`), like an `Err` or a panic: the grader is skipped for that turn, its
//!   summary counts it and keeps the first one, and the run's notices get one
//!   [`Notice::Warning`] naming the grader, the first time only.
//! - A hook that panics is caught too (one warning per hook, naming it by its position);
//!   the run goes on. (The process's panic hook still prints each panic on stderr.)
//! - [`Hooks::on_turn`] sees an ok turn before its record is written to `turns.jsonl`, a
//!   failed one after.
//! - The summaries go into `result.json` under `grades` and into
//!   [`RunReport::grades`](crate::RunReport::grades). A resumed run grades the turns it plays
//!   itself: its summaries cover that last segment only (the answers of earlier segments are
//!   not kept).
//!
//! ```
//! use bench_run::hooks::{Grade, Grader, TurnView};
//!
//! /// Scores answers by how short they are.
//! struct Brevity;
//!
//! impl Grader for Brevity {
//!     fn name(&self) -> &str {
//!         "brevity"
//!     }
//!     fn grade(&self, turn: &TurnView<'_>) -> Result<Option<Grade>, String> {
//!         let Some(answer) = turn.answer else { return Ok(None) };
//!         let words = answer.split_whitespace().count();
//!         Ok(Some(Grade {
//!             score: 1.0 / (1.0 + words as f64 / 100.0),
//!             label: if words <= 100 { "short" } else { "long" }.into(),
//!             notes: None,
//!         }))
//!     }
//! }
//! let options = bench_run::RunOptions {
//!     graders: vec![std::sync::Arc::new(Brevity)],
//!     ..bench_run::RunOptions::default()
//! };
//! # let _ = options;
//! ```

use std::any::Any;
use std::collections::BTreeMap;
use std::panic::{AssertUnwindSafe, catch_unwind};
use std::path::Path;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};

pub use bench_report::grade::{Grade, GraderSummary, NamedGrade};
use bench_rundir::{StopBy, TurnRecord, TurnStatus};
use bench_runner::{Observer, RunEvent};

use crate::graders::GradersSpec;
use crate::{Notice, RunError, RunOptions};

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

/// One grader's counts so far.
#[derive(Default)]
struct Tally {
    graded: u64,
    score_sum: f64,
    labels: BTreeMap<String, u64>,
    errors: u64,
    first_error: Option<String>,
}

/// The observer that runs a run's graders and hooks (added to the engine's observers only
/// when there is at least one of either).
pub(crate) struct Grading {
    graders: Vec<Arc<dyn Grader>>,
    tallies: Vec<Mutex<Tally>>,
    hooks: Vec<Arc<dyn Hooks>>,
    /// Per hook: whether it panicked already (warned once).
    hook_failed: Vec<AtomicBool>,
    notices: Option<Arc<dyn Fn(Notice) + Send + Sync>>,
}

impl std::fmt::Debug for Grading {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Grading")
            .field(
                "graders",
                &self.graders.iter().map(|g| g.name()).collect::<Vec<_>>(),
            )
            .field("hooks", &self.hooks.len())
            .finish_non_exhaustive()
    }
}

/// What a panic said.
pub(crate) fn panic_message(p: &(dyn Any + Send)) -> String {
    match (p.downcast_ref::<&str>(), p.downcast_ref::<String>()) {
        (Some(s), _) => (*s).to_owned(),
        (_, Some(s)) => s.clone(),
        _ => "a panic without a message".into(),
    }
}

impl Grading {
    /// The run's graders (`spec`'s built-ins, then `options.graders`) and hooks; `None` when
    /// there are neither. Two graders of one name are refused.
    pub(crate) fn new(
        spec: &GradersSpec,
        options: &RunOptions,
    ) -> Result<Option<Arc<Grading>>, RunError> {
        let mut graders = spec.build()?;
        graders.extend(options.graders.iter().cloned());
        if graders.is_empty() && options.hooks.is_empty() {
            return Ok(None);
        }
        let mut names = std::collections::HashSet::new();
        for g in &graders {
            if !names.insert(g.name()) {
                return Err(RunError::Invalid(format!(
                    "two graders are named {:?} (a grader's name is the key of its summary)",
                    g.name()
                )));
            }
        }
        Ok(Some(Arc::new(Grading {
            tallies: graders.iter().map(|_| Mutex::default()).collect(),
            graders,
            hook_failed: options
                .hooks
                .iter()
                .map(|_| AtomicBool::new(false))
                .collect(),
            hooks: options.hooks.clone(),
            notices: options.notices.clone(),
        })))
    }

    fn warn(&self, line: String) {
        if let Some(f) = &self.notices {
            f(Notice::Warning(line));
        }
    }

    /// Calls `f` on every hook, catching panics (each hook's first is warned about).
    fn each_hook(&self, what: &str, f: impl Fn(&dyn Hooks)) {
        for (i, (h, failed)) in self.hooks.iter().zip(&self.hook_failed).enumerate() {
            if let Err(p) = catch_unwind(AssertUnwindSafe(|| f(&**h))) {
                if !failed.swap(true, Ordering::SeqCst) {
                    self.warn(format!(
                        "hook #{} (of {}) panicked in {what}: {}; the run goes on (its further \
                         panics are not reported)",
                        i + 1,
                        self.hooks.len(),
                        panic_message(&*p)
                    ));
                }
            }
        }
    }

    /// [`Hooks::on_start`] of every hook.
    pub(crate) fn start(&self, run: &RunStart<'_>) {
        self.each_hook("on_start", |h| h.on_start(run));
    }

    /// [`Hooks::on_end`] of every hook.
    pub(crate) fn end(&self, run: &RunEnd<'_>) {
        self.each_hook("on_end", |h| h.on_end(run));
    }

    /// Every grader's summary so far, in the graders' order.
    pub(crate) fn summaries(&self) -> Vec<GraderSummary> {
        self.graders
            .iter()
            .zip(&self.tallies)
            .map(|(g, t)| {
                let t = t.lock().unwrap_or_else(|e| e.into_inner());
                GraderSummary {
                    grader: g.name().to_owned(),
                    graded: t.graded,
                    mean_score: (t.graded > 0).then(|| t.score_sum / t.graded as f64),
                    labels: t.labels.clone(),
                    errors: t.errors,
                    first_error: t.first_error.clone(),
                }
            })
            .collect()
    }

    /// Runs every grader on `view`, counting what each says.
    fn grade(&self, view: &TurnView<'_>) -> Vec<NamedGrade> {
        let mut out = Vec::with_capacity(self.graders.len());
        for (g, tally) in self.graders.iter().zip(&self.tallies) {
            let verdict = match catch_unwind(AssertUnwindSafe(|| g.grade(view))) {
                Ok(Ok(Some(grade))) if !(0.0..=1.0).contains(&grade.score) => Err(format!(
                    "score out of range: {} (a score is within 0..1)",
                    grade.score
                )),
                Ok(v) => v,
                Err(p) => Err(format!("panicked: {}", panic_message(&*p))),
            };
            let mut t = tally.lock().unwrap_or_else(|e| e.into_inner());
            match verdict {
                Ok(None) => {}
                Ok(Some(grade)) => {
                    t.graded += 1;
                    t.score_sum += grade.score;
                    match t.labels.get_mut(&grade.label) {
                        Some(n) => *n += 1,
                        None => {
                            t.labels.insert(grade.label.clone(), 1);
                        }
                    }
                    out.push(NamedGrade {
                        grader: g.name().to_owned(),
                        grade,
                    });
                }
                Err(e) => {
                    t.errors += 1;
                    if t.first_error.is_none() {
                        t.first_error = Some(e.clone());
                        drop(t);
                        self.warn(format!(
                            "grader {:?} failed on turn {} of session {}: {e}; it is skipped \
                             on the turns it fails and result.json counts them (further \
                             failures are not reported)",
                            g.name(),
                            view.record.turn_index,
                            view.record.session_id
                        ));
                    }
                }
            }
        }
        out
    }

    fn turn(&self, view: &TurnView<'_>, grades: &[NamedGrade]) {
        if !self.hooks.is_empty() {
            self.each_hook("on_turn", |h| h.on_turn(view, grades));
        }
    }
}

impl Observer for Grading {
    fn on_event(&self, event: &RunEvent<'_>) {
        match *event {
            RunEvent::Answer { record, answer } => {
                let view = TurnView {
                    record,
                    answer: Some(answer),
                };
                let grades = if record.warmup {
                    Vec::new()
                } else {
                    self.grade(&view)
                };
                self.turn(&view, &grades);
            }
            RunEvent::TurnFinished(record) if record.status != TurnStatus::Ok => {
                self.turn(
                    &TurnView {
                        record,
                        answer: None,
                    },
                    &[],
                );
            }
            _ => {}
        }
    }
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use std::sync::atomic::AtomicU32;

    use super::*;

    fn record(warmup: bool) -> TurnRecord {
        serde_json::from_value(serde_json::json!({
            "session_id": "s", "replay": 0, "turn_index": 0, "status": "ok",
            "max_output_tokens": 4, "active_at_dispatch": 1, "due_s": 0.0, "sent_s": 0.0,
            "end_s": 0.1, "sent_utc": "", "end_utc": "", "chunk_gaps_ms": [], "redials": 0,
            "warmup": warmup
        }))
        .unwrap()
    }

    /// Scores each answer by its length in tenths (so "abcdefghijk" is out of range).
    struct Tenths(AtomicU32);

    impl Grader for Tenths {
        fn name(&self) -> &str {
            "tenths"
        }
        fn grade(&self, t: &TurnView<'_>) -> Result<Option<Grade>, String> {
            self.0.fetch_add(1, Ordering::SeqCst);
            Ok(Some(Grade {
                score: t.answer.map_or(0, str::len) as f64 / 10.0,
                label: "len".into(),
                notes: None,
            }))
        }
    }

    #[derive(Default)]
    struct Grades(Mutex<Vec<Vec<NamedGrade>>>);

    impl Hooks for Grades {
        fn on_turn(&self, _: &TurnView<'_>, grades: &[NamedGrade]) {
            self.0.lock().unwrap().push(grades.to_vec());
        }
    }

    #[test]
    fn out_of_range_scores_are_errors_and_warmup_turns_are_not_graded() {
        let tenths = Arc::new(Tenths(AtomicU32::new(0)));
        let hook = Arc::new(Grades::default());
        let warned = Arc::new(Mutex::new(Vec::new()));
        let w = warned.clone();
        let options = RunOptions {
            graders: vec![tenths.clone()],
            hooks: vec![hook.clone()],
            notices: Some(Arc::new(move |n| w.lock().unwrap().push(n))),
            ..RunOptions::default()
        };
        let g = Grading::new(&GradersSpec::default(), &options)
            .unwrap()
            .unwrap();
        let (measured, warm) = (record(false), record(true));
        for (r, answer) in [
            (&warm, "abc"),
            (&measured, "abcde"),
            (&measured, "abcdefghijk"),
            (&measured, "abcdefghijkl"),
            (&measured, "abc"),
        ] {
            g.on_event(&RunEvent::Answer { record: r, answer });
        }
        assert_eq!(
            tenths.0.load(Ordering::SeqCst),
            4,
            "the warmup turn is not graded"
        );
        let [s] = &g.summaries()[..] else { panic!() };
        assert_eq!((s.graded, s.errors), (2, 2));
        assert!((s.mean_score.unwrap() - 0.4).abs() < 1e-12, "{s:?}");
        assert_eq!(
            s.first_error.as_deref(),
            Some("score out of range: 1.1 (a score is within 0..1)")
        );
        assert_eq!(warned.lock().unwrap().len(), 1);
        let seen: Vec<usize> = hook.0.lock().unwrap().iter().map(Vec::len).collect();
        assert_eq!(
            seen,
            [0, 1, 0, 0, 1],
            "every turn reaches the hooks, graded or not"
        );
    }

    #[test]
    fn nothing_to_run_is_no_observer() {
        assert!(
            Grading::new(&GradersSpec::default(), &RunOptions::default())
                .unwrap()
                .is_none()
        );
    }
}
