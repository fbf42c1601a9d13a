//! A journeys suite as a run: its run directory, hooks, cancel and bad specs.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use bench_journeys::Report;
use bench_run::hooks::{Hooks, Operation, RunEnd, RunStart};
use bench_run::journeys::{JourneysOptions, JourneysSpec, start_journeys};
use bench_run::{EmbeddedSim, RunError, SimLatency};
use bench_rundir::{EventLine, LifecycleEvent, RunJsonHead, RunKind, StopBy, files, jsonl};

const SECRET: &str = "s3cr3t-token-value-8d1f";

/// A run directory not yet created, inside a temporary directory removed when the returned
/// guard drops (keep it alive for the test).
fn dir(name: &str) -> (tempfile::TempDir, PathBuf) {
    let tmp = tempfile::Builder::new()
        .prefix(&format!("bench-run-journeys-{name}-"))
        .tempdir()
        .unwrap();
    let d = tmp.path().join("run");
    (tmp, d)
}

fn spec(journeys: &[&str], iterations: u32, runs: u32) -> JourneysSpec {
    JourneysSpec {
        journeys: journeys.iter().map(|s| s.to_string()).collect(),
        iterations,
        warmup: 1,
        runs,
        sim: EmbeddedSim {
            latency: SimLatency::Instant,
            ..EmbeddedSim::default()
        },
        ..JourneysSpec::default()
    }
}

/// Records what a hook sees.
#[derive(Default)]
struct Seen {
    starts: Mutex<Vec<(PathBuf, String)>>,
    ops: Mutex<BTreeMap<(String, u32), (u32, u32)>>,
    total: AtomicU64,
    ends: Mutex<Vec<StopBy>>,
}

impl Hooks for Seen {
    fn on_start(&self, run: &RunStart<'_>) {
        let mut s = self.starts.lock().unwrap();
        s.push((run.dir.to_owned(), run.kind.to_owned()));
    }
    fn on_operation(&self, op: &Operation<'_>) {
        let mut ops = self.ops.lock().unwrap();
        let e = ops.entry((op.journey.to_owned(), op.run)).or_default();
        match (op.latency_ms, op.failure) {
            (Some(ms), None) if ms >= 0.0 => e.0 += 1,
            _ => e.1 += 1,
        }
        self.total.fetch_add(1, Ordering::SeqCst);
    }
    fn on_end(&self, run: &RunEnd<'_>) {
        self.ends.lock().unwrap().push(run.stopped_by);
    }
}

fn events(d: &Path) -> Vec<LifecycleEvent> {
    jsonl::read::<EventLine>(&d.join(files::EVENTS))
        .unwrap()
        .records
        .into_iter()
        .map(|e| e.event)
        .collect()
}

fn stopped_by(events: &[LifecycleEvent]) -> Option<StopBy> {
    match events.last() {
        Some(LifecycleEvent::Stopped { by, .. }) => Some(*by),
        _ => None,
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_journeys_run_leaves_its_directory_and_never_a_header_value() {
    let (_tmp, d) = dir("openai");
    let seen = Arc::new(Seen::default());
    let rows = Arc::new(Mutex::new(Vec::new()));
    let r2 = rows.clone();
    let options = JourneysOptions {
        run_dir: Some(d.clone()),
        headers: vec![("x-api-key".into(), SECRET.into())],
        hooks: vec![seen.clone()],
        on_run: Some(Arc::new(move |name, row| {
            r2.lock().unwrap().push((name.to_owned(), row.run));
        })),
        ..JourneysOptions::default()
    };
    let handle = start_journeys(spec(&["list_models", "chat_completion"], 3, 2), options)
        .await
        .unwrap();
    assert_eq!(handle.dir(), Some(d.as_path()));
    let (history, _) = handle.events_with_history();
    assert!(
        matches!(history.first().map(|e| &e.event), Some(LifecycleEvent::Started(o)) if o.pid == Some(std::process::id())),
        "{history:?}"
    );
    let done = handle.wait().await.unwrap();
    assert!(done.passed(), "{:?}", done.problems);
    assert_eq!(done.stopped_by, StopBy::Completed);
    assert_eq!(done.dir.as_deref(), Some(d.as_path()));

    // run.json: a journeys run, its spec, the header's name and never its value.
    let text = std::fs::read_to_string(d.join(files::RUN_JSON)).unwrap();
    let head: RunJsonHead = serde_json::from_str(&text).unwrap();
    assert_eq!(head.kind, RunKind::Journeys);
    assert_eq!(head.pid, Some(std::process::id()));
    let v: serde_json::Value = serde_json::from_str(&text).unwrap();
    let back: JourneysSpec = serde_json::from_value(v["spec"].clone()).unwrap();
    assert_eq!(back, spec(&["list_models", "chat_completion"], 3, 2));
    assert_eq!(v["header_names"], serde_json::json!(["x-api-key"]));
    assert!(
        v["base_url"]
            .as_str()
            .unwrap()
            .starts_with("http://127.0.0.1:")
    );
    for entry in std::fs::read_dir(&d).unwrap() {
        let path = entry.unwrap().path();
        let bytes = std::fs::read(&path).unwrap();
        assert!(
            !String::from_utf8_lossy(&bytes).contains(SECRET),
            "{} holds the header value",
            path.display()
        );
    }

    // events.jsonl: started, then stopped (completed), read back typed.
    let ev = events(&d);
    assert!(
        matches!(ev.first(), Some(LifecycleEvent::Started(_))),
        "{ev:?}"
    );
    assert_eq!(stopped_by(&ev), Some(StopBy::Completed), "{ev:?}");

    // report.json: the report the handle returned.
    let report = Report::read(&d.join(files::JOURNEYS_REPORT)).unwrap();
    assert_eq!(report, done.report);
    for name in ["list_models", "chat_completion"] {
        let j = &report.journeys[name];
        assert_eq!(j.runs.len(), 2, "{name}");
        assert_eq!(j.summary.n_success, 6, "{name}: {j:?}");
    }
    assert_eq!(report.config["embedded_simulator"], true);

    // The hook saw iterations × runs timed operations per journey (warmup ones never), the
    // start and the end; on_run saw every run.
    let ops = seen.ops.lock().unwrap().clone();
    let want: BTreeMap<(String, u32), (u32, u32)> = ["list_models", "chat_completion"]
        .iter()
        .flat_map(|n| [((n.to_string(), 1), (3, 0)), ((n.to_string(), 2), (3, 0))])
        .collect();
    assert_eq!(ops, want);
    assert_eq!(
        *seen.starts.lock().unwrap(),
        [(d.clone(), "journeys".to_owned())]
    );
    assert_eq!(*seen.ends.lock().unwrap(), [StopBy::Completed]);
    assert_eq!(
        *rows.lock().unwrap(),
        [
            ("list_models".to_owned(), 1),
            ("list_models".to_owned(), 2),
            ("chat_completion".to_owned(), 1),
            ("chat_completion".to_owned(), 2)
        ]
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn cancel_lets_operations_in_flight_finish_and_the_report_covers_what_ran() {
    let (_tmp, d) = dir("cancel");
    let seen = Arc::new(Seen::default());
    let options = JourneysOptions {
        run_dir: Some(d.clone()),
        hooks: vec![seen.clone()],
        ..JourneysOptions::default()
    };
    let handle = start_journeys(
        spec(&["list_models", "metrics_scrape"], 1_000_000, 3),
        options,
    )
    .await
    .unwrap();
    let t0 = Instant::now();
    while seen.total.load(Ordering::SeqCst) < 5 {
        assert!(t0.elapsed() < Duration::from_secs(60), "no operation");
        tokio::time::sleep(Duration::from_millis(5)).await;
    }
    handle.cancel();
    let done = tokio::time::timeout(Duration::from_secs(60), handle.wait())
        .await
        .expect("the cancel stops the suite")
        .unwrap();
    assert_eq!(done.stopped_by, StopBy::Cancelled);
    assert!(!done.passed());
    assert!(
        done.problems
            .iter()
            .any(|p| p == "cancelled: the report covers what ran"),
        "{:?}",
        done.problems
    );
    // Only the first run of the first journey started; it stopped early, its samples kept.
    let report = Report::read(&d.join(files::JOURNEYS_REPORT)).unwrap();
    assert_eq!(report, done.report);
    assert_eq!(report.journeys.len(), 1, "{:?}", report.journeys.keys());
    let runs = &report.journeys["list_models"].runs;
    assert_eq!(runs.len(), 1);
    assert!(runs[0].cancelled);
    assert!(runs[0].n_success >= 5 && runs[0].n_success < 1_000_000);
    assert_eq!(
        runs[0].n_success,
        seen.total.load(Ordering::SeqCst),
        "every timed operation was reported once"
    );
    assert_eq!(stopped_by(&events(&d)), Some(StopBy::Cancelled));
    assert_eq!(*seen.ends.lock().unwrap(), [StopBy::Cancelled]);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn without_a_run_directory_nothing_is_written_and_events_are_still_sent() {
    let seen = Arc::new(Seen::default());
    let options = JourneysOptions {
        hooks: vec![seen.clone()],
        ..JourneysOptions::default()
    };
    let handle = start_journeys(spec(&["list_models"], 2, 1), options)
        .await
        .unwrap();
    assert_eq!(handle.dir(), None);
    let (history, mut rx) = handle.events_with_history();
    let done = handle.wait().await.unwrap();
    assert!(done.passed(), "{:?}", done.problems);
    assert_eq!(done.dir, None);
    let mut all: Vec<LifecycleEvent> = history.into_iter().map(|e| e.event).collect();
    while let Some(bench_run::Received::Event(e)) = rx.try_recv() {
        all.push(e.event);
    }
    assert!(
        matches!(all.first(), Some(LifecycleEvent::Started(_))),
        "{all:?}"
    );
    assert_eq!(stopped_by(&all), Some(StopBy::Completed), "{all:?}");
    // Hooks still hear of the start, with an empty path for the run directory.
    assert_eq!(
        *seen.starts.lock().unwrap(),
        [(PathBuf::new(), "journeys".to_owned())]
    );
}

#[tokio::test]
async fn a_bad_spec_is_refused_naming_the_field_and_writes_nothing() {
    let cases = [
        (
            JourneysSpec {
                pack: Some("nope".into()),
                ..JourneysSpec::default()
            },
            "unknown pack \"nope\"; known: openai, agent-sessions",
        ),
        (
            spec(&["list_models", "nope"], 1, 1),
            "unknown journey \"nope\"; known: list_models",
        ),
        (spec(&["list_models"], 1, 0), "runs must be at least 1"),
        (
            JourneysSpec {
                pack: Some("agent-sessions".into()),
                ..JourneysSpec::default()
            },
            "agent-sessions: base_url is required",
        ),
    ];
    for (i, (s, want)) in cases.into_iter().enumerate() {
        let (_tmp, d) = dir(&format!("bad-{i}"));
        let options = JourneysOptions {
            run_dir: Some(d.clone()),
            ..JourneysOptions::default()
        };
        match start_journeys(s, options).await {
            Err(RunError::Invalid(m)) => assert!(m.starts_with(want), "{m}"),
            Err(e) => panic!("{e:?}"),
            Ok(h) => panic!("started: {:?}", h.dir()),
        }
        assert!(!d.exists(), "{} was created", d.display());
    }
}

struct PanickingHook;
impl Hooks for PanickingHook {
    fn on_operation(&self, _: &Operation<'_>) {
        panic!("this hook is broken");
    }
}

#[tokio::test]
async fn a_hook_that_panics_is_reported_once_and_never_fails_the_run() {
    let seen = Arc::new(Seen::default());
    let warnings = Arc::new(Mutex::new(Vec::new()));
    let w = warnings.clone();
    let options = JourneysOptions {
        hooks: vec![Arc::new(PanickingHook), seen.clone()],
        notices: Some(Arc::new(move |n| {
            if let bench_run::Notice::Warning(m) = n {
                w.lock().unwrap().push(m);
            }
        })),
        ..JourneysOptions::default()
    };
    let handle = start_journeys(spec(&["list_models"], 4, 1), options)
        .await
        .unwrap();
    let done = handle.wait().await.unwrap();
    assert!(done.passed(), "{:?}", done.problems);
    assert_eq!(done.stopped_by, StopBy::Completed);
    let warnings = warnings.lock().unwrap();
    assert_eq!(warnings.len(), 1, "{warnings:?}");
    assert!(warnings[0].contains("this hook is broken"), "{warnings:?}");
    // The other hook still saw every operation and the end.
    assert_eq!(seen.total.load(Ordering::SeqCst), 4);
    assert_eq!(*seen.ends.lock().unwrap(), [StopBy::Completed]);
}
