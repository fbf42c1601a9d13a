//! Embedding the engine: plan a synthetic workload, replay it against an in-process simulator
//! with a custom observer that prints each finished turn, and print the metrics.
//!
//! `cargo run -p bench-runner --example embed`

use std::sync::Arc;

use bench_report::{RunInfo, compute};
use bench_runner::{CancelToken, Observer, RunConfig, RunEvent, run};
use bench_sim::{SimConfig, SimServer};
use bench_transport::{Client, ClientConfig};
use bench_workload::plan::{DatasetSpec, GapPolicy, PlanConfig, SyntheticSpec, build_plan};

/// Prints every finished turn.
struct PrintTurns;

impl Observer for PrintTurns {
    fn on_event(&self, event: &RunEvent<'_>) {
        if let RunEvent::TurnFinished(t) = event {
            println!(
                "{} turn {}: {:?}, ttft {:.1} ms, {} output tokens",
                t.session_id,
                t.turn_index,
                t.status,
                t.ttft_ms.unwrap_or(f64::NAN),
                t.output_tokens.unwrap_or(0)
            );
        }
    }
}

#[tokio::main]
async fn main() -> Result<(), Box<dyn std::error::Error>> {
    // 8 synthetic sessions of 4 turns, 200 new tokens per turn, 32 output tokens, short waits.
    let mut plan_cfg = PlanConfig::new(DatasetSpec::Random(SyntheticSpec {
        turns: 4,
        input_increment: 200,
        output_len: 32,
        gap: GapPolicy::Uniform(10.0, 50.0),
    }));
    plan_cfg.num_sessions = Some(8);
    let plan = Arc::new(build_plan(plan_cfg)?);

    // The simulator on a free loopback port, twice as fast as its default model.
    let sim = SimServer::start(SimConfig {
        time_scale: 0.5,
        ..SimConfig::default()
    })
    .await?;
    let client = Client::new(ClientConfig::new(sim.base_url()))?;

    let concurrency = 4;
    let outcome = run(
        plan,
        client,
        RunConfig::new("bench-sim", concurrency),
        vec![Arc::new(PrintTurns)],
        CancelToken::new(),
    )
    .await;
    sim.shutdown().await;

    let info = RunInfo {
        concurrency,
        duration_s: outcome.elapsed.as_secs_f64(),
        ..RunInfo::default()
    };
    let result = compute(&outcome.turns, &outcome.sessions, &info);
    print!("{}", result.console());
    Ok(())
}
