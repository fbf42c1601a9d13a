//! The built-in graders, configured by [`GradersSpec`] (the `graders` field of a
//! [`RunSpec`](crate::RunSpec)):
//!
//! - `slo`: does the turn meet the latency bounds? `pass` / `fail` (score 1 / 0), the same
//!   judgement as goodput (`bench_report::Slo::is_met_by`), so its pass share is the run's SLO
//!   attainment over its ok turns.
//! - `output_length`: did the answer reach the pinned output length? `exact`, `within` the
//!   tolerance, `short` or `long`; the score falls linearly to 0 at 100 % off.
//! - `response`: is the answer what you asked for? A regex match (`match` / `mismatch`), JSON
//!   (`json` / `not_json`) or JSON valid against a schema (`valid` / `invalid`). Meant for
//!   `request.content_mode: "model"` runs, but it grades whatever the server answered.
//!
//! ```
//! let spec: bench_run::GradersSpec = serde_json::from_str(
//!     r#"{"slo": {"ttft_ms": 500}, "response": {"regex": "^\\s*\\{"}}"#,
//! ).unwrap();
//! let graders = spec.build().unwrap();
//! let names: Vec<&str> = graders.iter().map(|g| g.name()).collect();
//! assert_eq!(names, ["slo", "response"]);
//! ```

use std::sync::Arc;

use bench_report::Slo;
use serde::{Deserialize, Serialize};

use crate::RunError;
use crate::hooks::{Grade, Grader, TurnView};

/// Which built-in graders a run uses (none by default).
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct GradersSpec {
    /// The `slo` grader.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub slo: Option<SloSpec>,
    /// The `output_length` grader.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub output_length: Option<OutputLengthSpec>,
    /// The `response` grader.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub response: Option<ResponseSpec>,
}

/// Latency bounds of the `slo` grader, ms (at least one).
#[derive(Debug, Clone, Copy, Default, PartialEq, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct SloSpec {
    /// Bound on time to first token.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub ttft_ms: Option<f64>,
    /// Bound on time per output token (a turn with one output token has none: it is judged
    /// on the other bounds).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub tpot_ms: Option<f64>,
    /// Bound on the turn latency (request sent → end of body).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub e2e_ms: Option<f64>,
}

/// The `output_length` grader's settings.
#[derive(Debug, Clone, Copy, PartialEq, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct OutputLengthSpec {
    /// How far off the pinned length still counts as `within`, a fraction of it.
    pub tolerance: f64,
}

impl Default for OutputLengthSpec {
    fn default() -> Self {
        OutputLengthSpec { tolerance: 0.1 }
    }
}

/// What the `response` grader checks (exactly one of the three).
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct ResponseSpec {
    /// The answer matches this regex (Rust `regex` syntax, found anywhere: anchor it with
    /// `^…$` to match the whole answer).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub regex: Option<String>,
    /// `true`: the answer parses as JSON.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub json: Option<bool>,
    /// The answer is JSON valid against this JSON Schema (drafts 4 to 2020-12; no remote
    /// `$ref`).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub json_schema: Option<serde_json::Value>,
}

fn invalid(field: &str, what: impl std::fmt::Display) -> RunError {
    RunError::Invalid(format!("graders.{field}: {what}"))
}

impl GradersSpec {
    /// Whether no grader is configured.
    pub fn is_empty(&self) -> bool {
        self == &GradersSpec::default()
    }

    /// The graders, in the order `slo`, `output_length`, `response`; a bad value is one
    /// line naming its field (`graders.response.regex: …`).
    pub fn build(&self) -> Result<Vec<Arc<dyn Grader>>, RunError> {
        let mut out: Vec<Arc<dyn Grader>> = Vec::new();
        if let Some(s) = &self.slo {
            out.push(Arc::new(SloGrader::new(s)?));
        }
        if let Some(s) = &self.output_length {
            if !(s.tolerance.is_finite() && s.tolerance >= 0.0) {
                return Err(invalid(
                    "output_length.tolerance",
                    format!("must be a non-negative fraction, not {}", s.tolerance),
                ));
            }
            out.push(Arc::new(OutputLengthGrader {
                tolerance: s.tolerance,
            }));
        }
        if let Some(s) = &self.response {
            out.push(Arc::new(ResponseGrader::new(s)?));
        }
        Ok(out)
    }
}

/// `slo`: pass when every bound is met.
struct SloGrader(Slo);

impl SloGrader {
    fn new(s: &SloSpec) -> Result<SloGrader, RunError> {
        for (k, v) in [
            ("ttft_ms", s.ttft_ms),
            ("tpot_ms", s.tpot_ms),
            ("e2e_ms", s.e2e_ms),
        ] {
            if let Some(v) = v.filter(|v| !(v.is_finite() && *v > 0.0)) {
                return Err(invalid(
                    &format!("slo.{k}"),
                    format!("must be a positive number of milliseconds, not {v}"),
                ));
            }
        }
        if s.ttft_ms.is_none() && s.tpot_ms.is_none() && s.e2e_ms.is_none() {
            return Err(invalid(
                "slo",
                "give at least one bound (ttft_ms, tpot_ms, e2e_ms)",
            ));
        }
        Ok(SloGrader(Slo {
            ttft_ms: s.ttft_ms,
            tpot_ms: s.tpot_ms,
            e2e_ms: s.e2e_ms,
        }))
    }
}

impl Grader for SloGrader {
    fn name(&self) -> &str {
        "slo"
    }

    fn grade(&self, turn: &TurnView<'_>) -> Result<Option<Grade>, String> {
        let r = turn.record;
        let pass = self.0.is_met_by(r);
        let mut why = Vec::new();
        if !pass {
            // What goodput counts as a miss: over the bound, or (TTFT, e2e) not measured.
            for (k, bound, value, missing_ok) in [
                ("ttft", self.0.ttft_ms, r.ttft_ms, false),
                ("tpot", self.0.tpot_ms, r.tpot_ms, true),
                ("e2e", self.0.e2e_ms, r.e2e_ms, false),
            ] {
                match (bound, value) {
                    (Some(b), Some(v)) if v.partial_cmp(&b).is_none_or(|o| o.is_gt()) => {
                        why.push(format!("{k} {v:.1} ms > {b} ms"));
                    }
                    (Some(_), None) if !missing_ok => why.push(format!("no {k} measured")),
                    _ => {}
                }
            }
        }
        Ok(Some(Grade {
            score: if pass { 1.0 } else { 0.0 },
            label: if pass { "pass" } else { "fail" }.into(),
            notes: (!why.is_empty()).then(|| why.join(", ")),
        }))
    }
}

/// `output_length`: achieved vs pinned output tokens.
struct OutputLengthGrader {
    tolerance: f64,
}

impl Grader for OutputLengthGrader {
    fn name(&self) -> &str {
        "output_length"
    }

    fn grade(&self, turn: &TurnView<'_>) -> Result<Option<Grade>, String> {
        let r = turn.record;
        let pinned = u64::from(r.max_output_tokens);
        let Some(actual) = r.output_tokens.filter(|_| pinned > 0) else {
            return Ok(None);
        };
        let off = actual.abs_diff(pinned) as f64 / pinned as f64;
        let label = if actual == pinned {
            "exact"
        } else if off <= self.tolerance {
            "within"
        } else if actual < pinned {
            "short"
        } else {
            "long"
        };
        Ok(Some(Grade {
            score: 1.0 - off.min(1.0),
            label: label.into(),
            notes: (actual != pinned).then(|| {
                format!(
                    "{actual} output tokens for {pinned} pinned ({:+.1}%)",
                    (actual as f64 - pinned as f64) / pinned as f64 * 100.0
                )
            }),
        }))
    }
}

/// `response`: the answer's shape.
struct ResponseGrader(Check);

enum Check {
    Regex(regex::Regex),
    Json,
    Schema(Box<jsonschema::Validator>),
}

impl ResponseGrader {
    fn new(s: &ResponseSpec) -> Result<ResponseGrader, RunError> {
        let json = s.json == Some(true);
        let given = usize::from(s.regex.is_some()) + usize::from(json);
        if given + usize::from(s.json_schema.is_some()) != 1 {
            return Err(invalid(
                "response",
                "give exactly one of regex, json (true), json_schema",
            ));
        }
        let check = if let Some(re) = &s.regex {
            Check::Regex(
                regex::Regex::new(re).map_err(|e| invalid("response.regex", regex_error(&e)))?,
            )
        } else if let Some(schema) = &s.json_schema {
            Check::Schema(Box::new(
                jsonschema::validator_for(schema)
                    .map_err(|e| invalid("response.json_schema", e))?,
            ))
        } else {
            Check::Json
        };
        Ok(ResponseGrader(check))
    }
}

/// A regex error in one line: the syntax errors' last line says what is wrong.
fn regex_error(e: &regex::Error) -> String {
    let text = e.to_string();
    match text
        .lines()
        .rev()
        .find_map(|l| l.trim().strip_prefix("error: "))
    {
        Some(what) => what.to_owned(),
        None => text.split_whitespace().collect::<Vec<_>>().join(" "),
    }
}

/// The start of `answer`, quoted, for notes.
fn excerpt(answer: &str) -> String {
    const CHARS: usize = 60;
    match answer.char_indices().nth(CHARS) {
        Some((i, _)) => format!("{:?}…", &answer[..i]),
        None => format!("{answer:?}"),
    }
}

fn verdict(ok: bool, yes: &str, no: &str, notes: Option<String>) -> Grade {
    Grade {
        score: if ok { 1.0 } else { 0.0 },
        label: if ok { yes } else { no }.into(),
        notes,
    }
}

impl Grader for ResponseGrader {
    fn name(&self) -> &str {
        "response"
    }

    fn grade(&self, turn: &TurnView<'_>) -> Result<Option<Grade>, String> {
        let Some(answer) = turn.answer else {
            return Ok(None);
        };
        Ok(Some(match &self.0 {
            Check::Regex(re) => {
                let ok = re.is_match(answer);
                verdict(
                    ok,
                    "match",
                    "mismatch",
                    (!ok).then(|| format!("answer {}", excerpt(answer))),
                )
            }
            Check::Json => match serde_json::from_str::<serde::de::IgnoredAny>(answer) {
                Ok(_) => verdict(true, "json", "not_json", None),
                Err(e) => verdict(false, "json", "not_json", Some(e.to_string())),
            },
            Check::Schema(v) => match serde_json::from_str::<serde_json::Value>(answer) {
                Err(e) => verdict(false, "valid", "invalid", Some(format!("not JSON: {e}"))),
                Ok(doc) => match v.validate(&doc) {
                    Ok(()) => verdict(true, "valid", "invalid", None),
                    Err(e) => {
                        let at = e.instance_path().to_string();
                        let notes = if at.is_empty() {
                            e.to_string()
                        } else {
                            format!("{e} at {at}")
                        };
                        verdict(false, "valid", "invalid", Some(notes))
                    }
                },
            },
        }))
    }
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use super::*;
    use bench_rundir::{TurnRecord, TurnStatus};

    fn record() -> TurnRecord {
        serde_json::from_value(serde_json::json!({
            "session_id": "s", "replay": 0, "turn_index": 0, "status": "ok",
            "ttft_ms": 120.0, "e2e_ms": 900.0, "tpot_ms": 20.0,
            "output_tokens": 40, "max_output_tokens": 40,
            "active_at_dispatch": 1, "due_s": 0.0, "sent_s": 0.0, "end_s": 0.9,
            "sent_utc": "", "end_utc": "", "chunk_gaps_ms": [], "redials": 0, "warmup": false
        }))
        .unwrap()
    }

    fn grade(spec: &str, r: &TurnRecord, answer: Option<&str>) -> Option<Grade> {
        let graders = serde_json::from_str::<GradersSpec>(spec)
            .unwrap()
            .build()
            .unwrap();
        assert_eq!(graders.len(), 1);
        graders[0].grade(&TurnView { record: r, answer }).unwrap()
    }

    fn error(spec: &str) -> String {
        match serde_json::from_str::<GradersSpec>(spec).unwrap().build() {
            Err(e) => e.to_string(),
            Ok(_) => panic!("{spec} should be refused"),
        }
    }

    #[test]
    fn slo_fails_a_turn_over_a_bound_and_names_it() {
        let spec = r#"{"slo": {"ttft_ms": 100, "tpot_ms": 50}}"#;
        let g = grade(spec, &record(), None).unwrap();
        assert_eq!(
            g,
            Grade {
                score: 0.0,
                label: "fail".into(),
                notes: Some("ttft 120.0 ms > 100 ms".into())
            }
        );
        let mut r = record();
        r.ttft_ms = Some(812.34);
        r.e2e_ms = Some(2000.0);
        let g = grade(r#"{"slo": {"ttft_ms": 500, "e2e_ms": 1500}}"#, &r, None).unwrap();
        assert_eq!(
            g.notes.as_deref(),
            Some("ttft 812.3 ms > 500 ms, e2e 2000.0 ms > 1500 ms")
        );
        // A value equal to its bound meets it.
        let g = grade(r#"{"slo": {"ttft_ms": 120}}"#, &record(), None).unwrap();
        assert_eq!((g.label.as_str(), g.score, g.notes), ("pass", 1.0, None));
    }

    #[test]
    fn slo_judges_a_turn_without_tpot_on_the_other_bounds_as_goodput_does() {
        let mut r = record();
        r.tpot_ms = None; // one output token: no decode phase
        let g = grade(r#"{"slo": {"ttft_ms": 500, "tpot_ms": 1}}"#, &r, None).unwrap();
        assert_eq!(g.label, "pass");
        let g = grade(r#"{"slo": {"ttft_ms": 50, "tpot_ms": 1}}"#, &r, None).unwrap();
        assert_eq!(g.notes.as_deref(), Some("ttft 120.0 ms > 50 ms"));
        // No TTFT is a miss of a TTFT bound, as goodput counts it.
        r.ttft_ms = None;
        let g = grade(r#"{"slo": {"ttft_ms": 500}}"#, &r, None).unwrap();
        assert_eq!(
            (g.label.as_str(), g.notes.as_deref()),
            ("fail", Some("no ttft measured"))
        );
        let slo: Slo = "ttft_ms=500".parse().unwrap();
        assert!(!slo.is_met_by(&r));
    }

    #[test]
    fn output_length_labels_exact_within_short_and_long() {
        let spec = r#"{"output_length": {}}"#;
        let mut r = record();
        r.max_output_tokens = 100;
        let mut at = |n: u64| {
            r.output_tokens = Some(n);
            let g = grade(spec, &r, None).unwrap();
            (g.label, (g.score * 1000.0).round() / 1000.0, g.notes)
        };
        assert_eq!(at(100), ("exact".into(), 1.0, None));
        assert_eq!(
            at(110),
            (
                "within".into(),
                0.9,
                Some("110 output tokens for 100 pinned (+10.0%)".into())
            )
        );
        assert_eq!(at(95).0, "within");
        assert_eq!(at(60), ("short".into(), 0.6, at(60).2));
        assert_eq!(at(350).0, "long");
        assert_eq!(at(350).1, 0.0);
        let tight = r#"{"output_length": {"tolerance": 0.01}}"#;
        r.output_tokens = Some(95);
        assert_eq!(grade(tight, &r, None).unwrap().label, "short");
    }

    #[test]
    fn output_length_passes_on_turns_it_cannot_judge() {
        let spec = r#"{"output_length": {"tolerance": 0.2}}"#;
        let mut r = record();
        r.output_tokens = None;
        assert_eq!(grade(spec, &r, None), None);
        r.output_tokens = Some(3);
        r.max_output_tokens = 0;
        assert_eq!(grade(spec, &r, None), None);
    }

    #[test]
    fn response_regex_json_and_schema() {
        let r = record();
        let re = r#"{"response": {"regex": "^\\s*\\d+\\s*$"}}"#;
        assert_eq!(grade(re, &r, Some(" 42\n")).unwrap().label, "match");
        let g = grade(re, &r, Some("forty-two")).unwrap();
        assert_eq!(
            (g.label.as_str(), g.score, g.notes.as_deref()),
            ("mismatch", 0.0, Some("answer \"forty-two\""))
        );

        let json = r#"{"response": {"json": true}}"#;
        let g = grade(json, &r, Some(r#" {"a": [1, 2]} "#)).unwrap();
        assert_eq!((g.label.as_str(), g.score), ("json", 1.0));
        let g = grade(json, &r, Some(" lorem ipsum")).unwrap();
        assert_eq!(g.label, "not_json");
        assert!(g.notes.unwrap().contains("expected"));

        let schema = r#"{"response": {"json_schema": {"type": "object", "required": ["n"],
            "properties": {"n": {"type": "integer"}}}}}"#;
        assert_eq!(
            grade(schema, &r, Some(r#"{"n": 3}"#)).unwrap().label,
            "valid"
        );
        let g = grade(schema, &r, Some(r#"{"n": "three"}"#)).unwrap();
        assert_eq!((g.label.as_str(), g.score), ("invalid", 0.0));
        let notes = g.notes.unwrap();
        assert!(
            notes.contains("\"three\"") && notes.ends_with("at /n"),
            "{notes}"
        );
        let g = grade(schema, &r, Some("{}")).unwrap();
        assert!(g.notes.unwrap().contains("\"n\""));
        let g = grade(schema, &r, Some("nope")).unwrap();
        assert!(g.notes.unwrap().starts_with("not JSON: "));
        // A failed turn has no answer: nothing to grade.
        let mut failed = record();
        failed.status = TurnStatus::Error;
        assert_eq!(grade(json, &failed, None), None);
    }

    #[test]
    fn bad_settings_are_one_line_naming_the_field() {
        assert_eq!(
            error(r#"{"slo": {"ttft_ms": 0}}"#),
            "graders.slo.ttft_ms: must be a positive number of milliseconds, not 0"
        );
        assert_eq!(
            error(r#"{"slo": {"e2e_ms": -5}}"#),
            "graders.slo.e2e_ms: must be a positive number of milliseconds, not -5"
        );
        assert!(error(r#"{"slo": {}}"#).starts_with("graders.slo: "));
        assert!(
            error(r#"{"output_length": {"tolerance": -0.1}}"#)
                .starts_with("graders.output_length.tolerance: ")
        );
        assert_eq!(
            error(r#"{"response": {"regex": "(a"}}"#),
            "graders.response.regex: unclosed group"
        );
        let e = error(r#"{"response": {"json_schema": {"type": "objekt"}}}"#);
        assert!(e.starts_with("graders.response.json_schema: "), "{e}");
        assert!(!e.contains('\n'), "{e}");
        assert!(error(r#"{"response": {}}"#).starts_with("graders.response: "));
        assert!(
            error(r#"{"response": {"json": true, "regex": "x"}}"#)
                .starts_with("graders.response: give exactly one")
        );
        let e = serde_json::from_str::<GradersSpec>(r#"{"slo": {"ttft": 5}}"#).unwrap_err();
        assert!(e.to_string().contains("unknown field `ttft`"), "{e}");
    }

    #[test]
    fn an_empty_spec_builds_no_grader_and_round_trips() {
        let s: GradersSpec = serde_json::from_str("{}").unwrap();
        assert!(s.is_empty() && s.build().unwrap().is_empty());
        let s: GradersSpec =
            serde_json::from_str(r#"{"output_length": {}, "response": {"json": true}}"#).unwrap();
        assert!(!s.is_empty());
        assert_eq!(
            serde_json::to_value(&s).unwrap(),
            serde_json::json!({"output_length": {"tolerance": 0.1}, "response": {"json": true}})
        );
    }
}
