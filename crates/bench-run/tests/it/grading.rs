//! Graders and hooks end to end: built-in and custom graders against the embedded simulator,
//! what `result.json` says about them, what hooks see, and that a broken grader or hook never
//! fails the run.

use std::collections::{BTreeMap, HashMap};
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use bench_report::RunResult;
use bench_run::hooks::{Grade, Grader, Hooks, NamedGrade, RunEnd, RunStart, TurnView};
use bench_run::{EmbeddedSim, GradersSpec, Load, Notice, RunOptions, RunSpec, SimLatency, Target};
use bench_rundir::{StopBy, TurnRecord, TurnStatus, files, jsonl};
use bench_runner::ContentMode;
use bench_workload::plan::{DatasetSpec, PlanConfig, SyntheticSpec};
use bench_workload::tokenize::TokenizerSpec;

/// 6 sessions of 3 turns at C = 3, each turn 5 ms + 7 × 1 ms.
fn spec(graders: &str) -> RunSpec {
    let synthetic = SyntheticSpec {
        turns: 3,
        input_increment: 64,
        output_len: 8,
        ..SyntheticSpec::default()
    };
    let mut plan = PlanConfig::new(DatasetSpec::Random(synthetic));
    plan.num_sessions = Some(6);
    plan.tokenizer = TokenizerSpec::Chars;
    RunSpec {
        plan,
        load: Load::Closed {
            concurrency: 3,
            ramp_up: None,
        },
        target: Target::Embedded(EmbeddedSim {
            latency: SimLatency::Fixed {
                ttft: Duration::from_millis(5),
                itl: Duration::from_millis(1),
            },
            ..EmbeddedSim::default()
        }),
        scrape: bench_run::Scraping::Off,
        graders: serde_json::from_str::<GradersSpec>(graders).unwrap(),
        ..RunSpec::default()
    }
}

const TURNS: u64 = 18;

/// A run directory not yet created, inside a temporary directory removed when the returned
/// guard drops (keep it alive for the test).
fn dir(name: &str) -> (tempfile::TempDir, PathBuf) {
    let tmp = tempfile::Builder::new()
        .prefix(&format!("bench-run-grading-{name}-"))
        .tempdir()
        .unwrap();
    let d = tmp.path().join("run");
    (tmp, d)
}

/// Panics on every turn.
struct Panicky;

impl Grader for Panicky {
    fn name(&self) -> &str {
        "panicky"
    }
    fn grade(&self, _: &TurnView<'_>) -> Result<Option<Grade>, String> {
        panic!("boom")
    }
}

/// Fails on every second turn of a session, says `half` on the others.
struct Flaky;

impl Grader for Flaky {
    fn name(&self) -> &str {
        "flaky"
    }
    fn grade(&self, t: &TurnView<'_>) -> Result<Option<Grade>, String> {
        if t.record.turn_index == 1 {
            return Err("no verdict on turn 1".into());
        }
        Ok(Some(Grade {
            score: 0.5,
            label: "half".into(),
            notes: None,
        }))
    }
}

/// Gives a score that is no score.
struct Wild;

impl Grader for Wild {
    fn name(&self) -> &str {
        "wild"
    }
    fn grade(&self, _: &TurnView<'_>) -> Result<Option<Grade>, String> {
        Ok(Some(Grade {
            score: f64::NAN,
            label: "?".into(),
            notes: None,
        }))
    }
}

/// One `on_turn` call as a hook saw it.
#[derive(Debug, Clone)]
struct Seen {
    status: TurnStatus,
    answer: Option<String>,
    grades: Vec<NamedGrade>,
}

/// Counts what it is called with.
#[derive(Default)]
struct Counting {
    starts: Mutex<Vec<(PathBuf, String)>>,
    turns: Mutex<HashMap<(String, u32, u32), Vec<Seen>>>,
    ends: Mutex<Vec<(StopBy, Vec<bench_report::grade::GraderSummary>)>>,
}

impl Hooks for Counting {
    fn on_start(&self, run: &RunStart<'_>) {
        let mut s = self.starts.lock().unwrap();
        s.push((run.dir.to_owned(), run.kind.to_owned()));
    }
    fn on_turn(&self, turn: &TurnView<'_>, grades: &[NamedGrade]) {
        let r = turn.record;
        let key = (r.session_id.clone(), r.replay, r.turn_index);
        self.turns
            .lock()
            .unwrap()
            .entry(key)
            .or_default()
            .push(Seen {
                status: r.status,
                answer: turn.answer.map(str::to_owned),
                grades: grades.to_vec(),
            });
    }
    fn on_end(&self, run: &RunEnd<'_>) {
        self.ends
            .lock()
            .unwrap()
            .push((run.stopped_by, run.grades.to_vec()));
    }
}

/// Panics in every call.
struct PanickyHook;

impl Hooks for PanickyHook {
    fn on_start(&self, _: &RunStart<'_>) {
        panic!("hook start")
    }
    fn on_turn(&self, _: &TurnView<'_>, _: &[NamedGrade]) {
        panic!("hook turn")
    }
}

type Notices = Arc<Mutex<Vec<Notice>>>;

fn options(
    d: &Path,
    graders: Vec<Arc<dyn Grader>>,
    hooks: Vec<Arc<dyn Hooks>>,
) -> (RunOptions, Notices) {
    let notices: Notices = Arc::default();
    let n = notices.clone();
    let options = RunOptions {
        run_dir: Some(d.to_owned()),
        graders,
        hooks,
        notices: Some(Arc::new(move |line| n.lock().unwrap().push(line))),
        ..RunOptions::default()
    };
    (options, notices)
}

fn warnings(notices: &Notices) -> Vec<String> {
    notices
        .lock()
        .unwrap()
        .iter()
        .filter_map(|n| match n {
            Notice::Warning(w) => Some(w.clone()),
            Notice::Info(_) => None,
        })
        .collect()
}

fn result_json(d: &Path) -> RunResult {
    serde_json::from_slice(&std::fs::read(d.join(files::RESULT)).unwrap()).unwrap()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn graders_and_hooks_see_every_turn_and_broken_ones_never_fail_the_run() {
    let (_tmp, d) = dir("mixed");
    let mut spec = spec(r#"{"slo": {"ttft_ms": 10000, "tpot_ms": 10000}}"#);
    spec.judge.slo = Some("ttft_ms=10000,tpot_ms=10000".into());
    let counting = Arc::new(Counting::default());
    let (opts, notices) = options(
        &d,
        vec![Arc::new(Panicky), Arc::new(Flaky), Arc::new(Wild)],
        vec![counting.clone(), Arc::new(PanickyHook)],
    );
    let report = bench_run::start(spec, opts)
        .await
        .unwrap()
        .wait()
        .await
        .unwrap();
    report.gate().unwrap();
    assert_eq!(report.stopped_by, StopBy::Completed, "{}", report.reason);
    assert_eq!((report.turns_total, report.turns_failed), (TURNS, 0));

    // result.json: one summary per grader, built-ins first.
    let result = result_json(&d);
    assert_eq!(result.grades, report.grades);
    let by: BTreeMap<&str, _> = result
        .grades
        .iter()
        .map(|g| (g.grader.as_str(), g))
        .collect();
    assert_eq!(
        result
            .grades
            .iter()
            .map(|g| g.grader.as_str())
            .collect::<Vec<_>>(),
        ["slo", "panicky", "flaky", "wild"]
    );
    let slo = by["slo"];
    assert_eq!(slo.graded, TURNS);
    assert_eq!(slo.labels, BTreeMap::from([("pass".to_owned(), TURNS)]));
    assert_eq!((slo.mean_score, slo.errors), (Some(1.0), 0));
    // Its pass share is the goodput's SLO attainment.
    assert_eq!(result.overall.slo_attainment, Some(1.0));

    let panicky = by["panicky"];
    assert_eq!((panicky.graded, panicky.errors), (0, TURNS));
    assert_eq!(panicky.mean_score, None);
    assert_eq!(panicky.first_error.as_deref(), Some("panicked: boom"));

    let flaky = by["flaky"];
    assert_eq!((flaky.graded, flaky.errors), (TURNS / 3 * 2, TURNS / 3));
    assert_eq!(
        flaky.labels,
        BTreeMap::from([("half".to_owned(), TURNS / 3 * 2)])
    );
    assert_eq!(flaky.mean_score, Some(0.5));
    assert_eq!(flaky.first_error.as_deref(), Some("no verdict on turn 1"));

    let wild = by["wild"];
    assert_eq!((wild.graded, wild.errors), (0, TURNS));
    assert!(
        wild.first_error
            .as_deref()
            .unwrap()
            .starts_with("score out of range: NaN"),
        "{wild:?}"
    );

    // One warning per broken grader and per broken hook, naming it.
    let w = warnings(&notices);
    for name in ["\"panicky\"", "\"flaky\"", "\"wild\""] {
        let n = w
            .iter()
            .filter(|l| l.contains(&format!("grader {name}")))
            .count();
        assert_eq!(n, 1, "{name}: {w:#?}");
    }
    let hook = w
        .iter()
        .filter(|l| l.starts_with("hook #2"))
        .collect::<Vec<_>>();
    assert_eq!(hook.len(), 1, "{w:#?}");
    assert!(
        hook[0].contains("on_start") && hook[0].contains("hook start"),
        "{hook:?}"
    );
    assert_eq!(w.len(), 4, "{w:#?}");

    // The hook saw the start, every turn once (with its answer and grades), and the end.
    assert_eq!(
        *counting.starts.lock().unwrap(),
        [(d.clone(), "replay".to_owned())]
    );
    let turns = counting.turns.lock().unwrap();
    let records = jsonl::read::<TurnRecord>(&d.join(files::TURNS))
        .unwrap()
        .records;
    assert_eq!(records.len() as u64, TURNS);
    assert_eq!(turns.len() as u64, TURNS);
    for r in &records {
        let seen = &turns[&(r.session_id.clone(), r.replay, r.turn_index)];
        assert_eq!(seen.len(), 1, "{r:?}: {seen:?}");
        let s = &seen[0];
        assert_eq!(s.status, TurnStatus::Ok);
        assert!(!s.answer.as_deref().unwrap().is_empty());
        let names: Vec<&str> = s.grades.iter().map(|g| g.grader.as_str()).collect();
        let expect: &[&str] = if r.turn_index == 1 {
            &["slo"]
        } else {
            &["slo", "flaky"]
        };
        assert_eq!(names, expect, "{r:?}");
        assert_eq!(s.grades[0].grade.label, "pass");
    }
    let ends = counting.ends.lock().unwrap();
    assert_eq!(ends.len(), 1);
    assert_eq!(ends[0], (StopBy::Completed, result.grades.clone()));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn failed_turns_reach_the_hooks_without_an_answer_and_are_never_graded() {
    let (_tmp, d) = dir("failed");
    let mut spec = spec(r#"{"slo": {"e2e_ms": 10000}, "output_length": {}}"#);
    // The simulator refuses every prompt (over its window); the client's context guard is
    // told the window is large, so the requests are sent and fail.
    if let Target::Embedded(sim) = &mut spec.target {
        sim.max_model_len = 16;
    }
    spec.request.max_model_len = Some(1_000_000);
    spec.judge.max_error_rate = 1.0;
    let counting = Arc::new(Counting::default());
    let (opts, notices) = options(&d, vec![Arc::new(Panicky)], vec![counting.clone()]);
    let report = bench_run::start(spec, opts)
        .await
        .unwrap()
        .wait()
        .await
        .unwrap();
    assert_eq!((report.turns_total, report.turns_failed), (TURNS, TURNS));
    let result = result_json(&d);
    assert_eq!(result.grades.len(), 3);
    for g in &result.grades {
        assert_eq!((g.graded, g.errors, g.mean_score), (0, 0, None), "{g:?}");
    }
    assert!(warnings(&notices).is_empty(), "{:?}", warnings(&notices));
    let turns = counting.turns.lock().unwrap();
    assert_eq!(turns.len() as u64, TURNS);
    for seen in turns.values() {
        assert_eq!(seen.len(), 1);
        assert_ne!(seen[0].status, TurnStatus::Ok);
        assert_eq!(seen[0].answer, None);
        assert!(seen[0].grades.is_empty());
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_model_content_run_grades_what_the_simulator_answered() {
    let (_tmp, d) = dir("model");
    let mut spec = spec(r#"{"response": {"json": true}, "output_length": {"tolerance": 0.1}}"#);
    spec.request.content_mode = ContentMode::Model;
    let counting = Arc::new(Counting::default());
    let (opts, _) = options(&d, Vec::new(), vec![counting.clone()]);
    let report = bench_run::start(spec, opts)
        .await
        .unwrap()
        .wait()
        .await
        .unwrap();
    report.gate().unwrap();
    assert_eq!(report.turns_total, TURNS);

    // The simulator answers lorem-ipsum words, never JSON, and (with `ignore_eos`) exactly the
    // pinned length.
    let result = result_json(&d);
    let [length, response] = &result.grades[..] else {
        panic!("{:?}", result.grades)
    };
    assert_eq!(length.grader, "output_length");
    assert_eq!(length.labels, BTreeMap::from([("exact".to_owned(), TURNS)]));
    assert_eq!(length.mean_score, Some(1.0));
    assert_eq!(response.grader, "response");
    assert_eq!(response.graded, TURNS);
    assert_eq!(
        response.labels,
        BTreeMap::from([("not_json".to_owned(), TURNS)])
    );
    assert_eq!((response.mean_score, response.errors), (Some(0.0), 0));

    let turns = counting.turns.lock().unwrap();
    assert_eq!(turns.len() as u64, TURNS);
    for seen in turns.values() {
        let answer = seen[0].answer.as_deref().unwrap();
        // 8 words of the simulator's vocabulary, each with its leading space.
        let words: Vec<&str> = answer.split(' ').skip(1).collect();
        assert_eq!(words.len(), 8, "{answer:?}");
        assert!(
            words
                .iter()
                .all(|w| !w.is_empty() && w.chars().all(|c| c.is_ascii_lowercase())),
            "{answer:?}"
        );
        let response = seen[0]
            .grades
            .iter()
            .find(|g| g.grader == "response")
            .unwrap();
        assert_eq!(response.grade.label, "not_json");
        assert!(response.grade.notes.is_some());
    }
}

#[tokio::test]
async fn two_graders_of_one_name_are_refused_before_the_run_starts() {
    let (_tmp, d) = dir("dup");
    struct Slo;
    impl Grader for Slo {
        fn name(&self) -> &str {
            "slo"
        }
        fn grade(&self, _: &TurnView<'_>) -> Result<Option<Grade>, String> {
            Ok(None)
        }
    }
    let (opts, _) = options(&d, vec![Arc::new(Slo)], Vec::new());
    let e = bench_run::start(spec(r#"{"slo": {"ttft_ms": 1}}"#), opts)
        .await
        .unwrap_err();
    assert!(matches!(e, bench_run::RunError::Invalid(_)), "{e:?}");
    assert!(
        e.to_string().contains("two graders are named \"slo\""),
        "{e}"
    );
    assert!(!d.exists(), "no run directory for a refused run");
}
