#![allow(clippy::field_reassign_with_default)] // the spec is built field by field on purpose
//! Embedding `bench-run`: plan a synthetic workload, replay it against the in-process
//! simulator with an observer of our own, and leave a run directory that `bench status` reads
//! and `bench run --resume` finishes. `cargo run -p bench-run --example run_dir -- DIR`
use std::{path::Path, sync::Arc, time::Duration};

use bench_run::{EmbeddedSim, Load, RunError, RunOptions, RunReport, RunSpec, SimLatency, Target};
use bench_runner::{Observer, RunEvent};
use bench_workload::{plan::*, tokenize::TokenizerSpec};

/// Our own observer: one stdout line per finished session play.
struct PrintSessions;

impl Observer for PrintSessions {
    fn on_event(&self, e: &RunEvent<'_>) {
        if let RunEvent::SessionFinished(s) = e {
            println!("session {} finished: {:?}", s.session_id, s.status);
        }
    }
}

/// Plays 12 synthetic sessions of 4 turns, 4 at a time (about 2.4 s), into `dir`.
pub async fn run(dir: &Path) -> Result<RunReport, RunError> {
    let mut synthetic = SyntheticSpec::default();
    (synthetic.turns, synthetic.output_len) = (4, 16);
    let mut spec = RunSpec::default();
    spec.plan = PlanConfig::new(DatasetSpec::Random(synthetic));
    spec.plan.num_sessions = Some(12);
    spec.plan.tokenizer = TokenizerSpec::Chars;
    spec.load = Load::Closed {
        concurrency: 4,
        ramp_up: None,
    };
    let (ttft, itl) = (Duration::from_millis(50), Duration::from_millis(10));
    let mut sim = EmbeddedSim::default();
    sim.latency = SimLatency::Fixed { ttft, itl };
    spec.target = Target::Embedded(sim);
    let mut options = RunOptions::default();
    options.run_dir = Some(dir.to_owned());
    options.observers.push(Arc::new(PrintSessions));
    bench_run::start(spec, options).await?.wait().await
}

#[tokio::main]
async fn main() -> Result<(), RunError> {
    let dir = std::env::args()
        .nth(1)
        .unwrap_or_else(|| "runs/example".into());
    let report = run(Path::new(&dir)).await?;
    println!(
        "{dir}: stopped by {} ({} turns)",
        report.stopped_by, report.turns_total
    );
    Ok(())
}
