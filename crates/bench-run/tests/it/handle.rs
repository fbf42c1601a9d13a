//! The run API end to end: events, progress, cancel, abort.

use std::path::PathBuf;
use std::time::{Duration, Instant};

use bench_run::{EmbeddedSim, Load, RunOptions, RunSpec, SimLatency, Target};
use bench_rundir::{ErrorKind, EventLine, LifecycleEvent, StopBy, TurnRecord, files, jsonl};
use bench_workload::plan::{DatasetSpec, PlanConfig, SyntheticSpec};
use bench_workload::tokenize::TokenizerSpec;

/// 8 sessions of 6 turns at C = 4, each turn 50 ms + 15 × 20 ms = 350 ms.
fn spec() -> RunSpec {
    let synthetic = SyntheticSpec {
        turns: 6,
        output_len: 16,
        ..SyntheticSpec::default()
    };
    let mut plan = PlanConfig::new(DatasetSpec::Random(synthetic));
    plan.num_sessions = Some(8);
    plan.tokenizer = TokenizerSpec::Chars;
    RunSpec {
        plan,
        load: Load::Closed {
            concurrency: 4,
            ramp_up: None,
        },
        target: Target::Embedded(EmbeddedSim {
            latency: SimLatency::Fixed {
                ttft: Duration::from_millis(50),
                itl: Duration::from_millis(20),
            },
            ..EmbeddedSim::default()
        }),
        ..RunSpec::default()
    }
}

/// A run directory not yet created, inside a temporary directory removed when the returned
/// guard drops (keep it alive for the test).
fn dir(name: &str) -> (tempfile::TempDir, PathBuf) {
    let tmp = tempfile::Builder::new()
        .prefix(&format!("bench-run-handle-{name}-"))
        .tempdir()
        .unwrap();
    let d = tmp.path().join("run");
    (tmp, d)
}

fn options(dir: &std::path::Path) -> RunOptions {
    RunOptions {
        run_dir: Some(dir.to_owned()),
        ..RunOptions::default()
    }
}

async fn until_turns(handle: &bench_run::RunHandle, n: u64) {
    let t0 = Instant::now();
    while handle.progress().turns_done < n {
        assert!(t0.elapsed() < Duration::from_secs(60), "no progress");
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn cancel_lets_turns_in_flight_finish_and_marks_the_run_cancelled() {
    let (_tmp, d) = dir("cancel");
    let handle = bench_run::start(spec(), options(&d)).await.unwrap();
    assert_eq!(handle.dir(), d);
    let mut events = handle.events();
    let (history, _) = handle.events_with_history();
    assert!(
        matches!(history.first().map(|e| &e.event), Some(LifecycleEvent::Started(o)) if o.turns_planned == Some(48)),
        "{history:?}"
    );
    until_turns(&handle, 4).await;
    handle.cancel();
    let report = handle.wait().await.unwrap();
    assert_eq!(report.stopped_by, StopBy::Cancelled, "{}", report.reason);
    assert!(
        report.turns_total >= 4 && report.turns_total < 48,
        "{}",
        report.turns_total
    );
    // Turns in flight finished: none was cut.
    let turns = jsonl::read::<TurnRecord>(&d.join(files::TURNS))
        .unwrap()
        .records;
    assert_eq!(turns.len() as u64, report.turns_total);
    assert_eq!(report.turns_failed, 0, "a cancel cuts no turn");
    assert!(report.gate().is_ok());
    // The subscriber saw the same typed stop as the file holds.
    let mut seen = Vec::new();
    while let Some(bench_run::Received::Event(e)) = events.try_recv() {
        seen.push(e.event);
    }
    let stop = LifecycleEvent::Stopped {
        by: StopBy::Cancelled,
        reason: report.reason.clone(),
    };
    assert_eq!(seen.last(), Some(&stop), "{seen:?}");
    let file = jsonl::read::<EventLine>(&d.join(files::EVENTS))
        .unwrap()
        .records;
    assert!(matches!(file[0].event, LifecycleEvent::Started(_)));
    assert_eq!(file.last().map(|e| &e.event), Some(&stop));
    assert!(d.join(files::RESULT).is_file());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn abort_cuts_turns_in_flight_and_records_them_cancelled() {
    let (_tmp, d) = dir("abort");
    let handle = bench_run::start(spec(), options(&d)).await.unwrap();
    until_turns(&handle, 4).await;
    // Right after a turn ends its session's next one is in flight: wait into it.
    tokio::time::sleep(Duration::from_millis(100)).await;
    handle.abort();
    let report = handle.wait().await.unwrap();
    let turns = jsonl::read::<TurnRecord>(&d.join(files::TURNS))
        .unwrap()
        .records;
    let cut = turns
        .iter()
        .filter(|t| t.error_kind == Some(ErrorKind::Cancelled))
        .count();
    assert!(cut >= 1, "no turn was cut: {turns:?}");
    assert_eq!(report.turns_failed as usize, cut);
    assert!(report.gate().is_err(), "cut turns count as failed");
}

#[tokio::test]
async fn a_bad_spec_is_refused_before_anything_is_written() {
    let (_tmp, d) = dir("bad");
    let mut s = spec();
    s.judge.steady_frac = 2.0;
    let e = bench_run::start(s, options(&d)).await.unwrap_err();
    assert_eq!(
        e,
        bench_run::RunError::Invalid(
            "steady_frac (--steady-frac) must be within 0..1, not 2".into()
        )
    );
    assert!(!d.exists());
}
