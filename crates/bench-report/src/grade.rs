//! Grades: what a grader says about one turn, and the per-grader summary `result.json` holds
//! under `grades`. The graders themselves live in `bench_run::hooks`.

use std::collections::BTreeMap;

use serde::{Deserialize, Serialize};

/// One grader's verdict on one turn.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Grade {
    /// In `[0, 1]` (1 = best).
    pub score: f64,
    /// A short class (`pass`, `fail`, `match`, …): summaries count turns per label.
    pub label: String,
    /// Why, in words (`null` when there is nothing to add).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub notes: Option<String>,
}

/// A [`Grade`] with the name of the grader that gave it.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct NamedGrade {
    /// The grader's name.
    pub grader: String,
    /// Its grade.
    #[serde(flatten)]
    pub grade: Grade,
}

/// What one grader said over a run.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct GraderSummary {
    /// The grader's name.
    pub grader: String,
    /// Turns it graded (failed turns are never graded; a grader may pass on a turn).
    pub graded: u64,
    /// Mean score over the graded turns (`null` when none).
    pub mean_score: Option<f64>,
    /// Graded turns per label.
    pub labels: BTreeMap<String, u64>,
    /// Times it failed (an error or a panic): it was skipped for those turns.
    pub errors: u64,
    /// Its first error, in words.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub first_error: Option<String>,
}
