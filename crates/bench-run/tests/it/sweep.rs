//! A sweep from code: `bench_run::sweep` with `play_point` against the in-process simulator.

use std::time::Duration;

use bench_report::sweep::{SweepAxis, SweepStop, SweepSummary};
use bench_run::sweep::{self, Levels, PointEnd, Search, Sweep};
use bench_run::{EmbeddedSim, RunOptions, RunSpec, Scraping, SimLatency, Target};
use bench_workload::plan::{DatasetSpec, PlanConfig, SyntheticSpec};
use bench_workload::tokenize::TokenizerSpec;

/// 2 turns of 8 tokens per session, 20 ms TTFT and 5 ms between tokens.
fn base() -> RunSpec {
    let synthetic = SyntheticSpec {
        turns: 2,
        output_len: 8,
        ..SyntheticSpec::default()
    };
    let mut plan = PlanConfig::new(DatasetSpec::Random(synthetic));
    plan.tokenizer = TokenizerSpec::Chars;
    RunSpec {
        plan,
        target: Target::Embedded(EmbeddedSim {
            latency: SimLatency::Fixed {
                ttft: Duration::from_millis(20),
                itl: Duration::from_millis(5),
            },
            ..EmbeddedSim::default()
        }),
        scrape: Scraping::Off,
        ..RunSpec::default()
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_embedding_program_sweeps_concurrency_into_a_sweep_directory() {
    let tmp = tempfile::Builder::new()
        .prefix("bench-run-sweep-")
        .tempdir()
        .unwrap();
    let dir = tmp.path();
    let plan = Sweep::new(
        Levels::parse(SweepAxis::Concurrency, "1,3").unwrap(),
        Search::Walk,
    )
    .unwrap();
    let base = base();
    let mut seen = Vec::new();
    let summary = sweep::run(
        &plan,
        serde_json::json!({ "spec": &base }),
        |level, name| {
            let spec = sweep::spec_at(&base, SweepAxis::Concurrency, level);
            let options = RunOptions {
                run_dir: Some(dir.join(&name)),
                ..RunOptions::default()
            };
            async move { sweep::play_point(spec, options, level, &name).await.0 }
        },
        |s: &SweepSummary| {
            seen.push(s.points.len());
            sweep::write_files(dir, s).unwrap();
        },
    )
    .await;
    sweep::write_files(dir, &summary).unwrap();
    assert_eq!(seen, [1, 2]);
    assert_eq!(summary.stop, SweepStop::Completed);
    let names: Vec<&str> = summary.points.iter().map(|p| p.run_dir.as_str()).collect();
    assert_eq!(names, ["c0001", "c0003"]);
    for p in &summary.points {
        // The pool is 2 × the concurrency: 2 turns each.
        assert_eq!(p.turns_ok, 4 * p.level as u64, "{p:?}");
        assert!(
            p.output_tps.unwrap() > 0.0 && p.ttft_p50_ms.unwrap() >= 20.0,
            "{p:?}"
        );
        assert_eq!(p.goodput, None);
        let run: serde_json::Value =
            serde_json::from_slice(&std::fs::read(dir.join(&p.run_dir).join("run.json")).unwrap())
                .unwrap();
        assert_eq!(
            run["spec"]["load"]["closed"]["concurrency"].as_f64(),
            Some(p.level)
        );
    }
    let back: SweepSummary =
        serde_json::from_slice(&std::fs::read(dir.join(sweep::SWEEP_JSON)).unwrap()).unwrap();
    assert_eq!(back, summary);
    assert!(dir.join(sweep::SWEEP_MD).is_file() && dir.join(sweep::SWEEP_HTML).is_file());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_point_whose_run_cannot_start_is_failed() {
    let mut spec = base();
    spec.plan.dataset = DatasetSpec::Path("/nonexistent/sessions.jsonl".into());
    let (end, _, report) = sweep::play_point(spec, RunOptions::default(), 1.0, "c0001").await;
    assert!(report.is_none());
    let PointEnd::Failed {
        point: None,
        reason,
    } = end
    else {
        panic!("{end:?}")
    };
    assert!(reason.starts_with("c0001: "), "{reason}");
}
