//! `bench-runner`: the closed-loop agentic replay engine.
//!
//! Exactly `C` workers each hold one planned session and play it turn by turn (turn N+1 is
//! sent only after turn N finished and its tool wait passed); a finished session's slot is
//! refilled at once from the pool. Every finished turn becomes a
//! [`bench_rundir::record::TurnRecord`] handed to the [`Observer`]s before the session goes on.
//!
//! A complete program — plan a synthetic workload, replay it against an in-process simulator
//! with an observer that prints each turn, print the metrics — is `examples/embed.rs`
//! (`cargo run -p bench-runner --example embed`). The core of it:
//!
//! ```
//! # fn main() -> Result<(), Box<dyn std::error::Error>> {
//! # let rt = tokio::runtime::Builder::new_multi_thread().enable_all().build()?;
//! # rt.block_on(async {
//! use std::sync::Arc;
//! use bench_runner::{CancelToken, RunConfig, run};
//! use bench_workload::plan::{build_plan, DatasetSpec, PlanConfig, SyntheticSpec};
//! use bench_workload::tokenize::TokenizerSpec;
//!
//! // A synthetic workload: 4 sessions of 3 turns.
//! let mut pc = PlanConfig::new(DatasetSpec::Random(SyntheticSpec { turns: 3, ..Default::default() }));
//! pc.tokenizer = TokenizerSpec::Chars;
//! pc.num_sessions = Some(4);
//! let plan = Arc::new(build_plan(pc)?);
//! // Against the embedded simulator, answering instantly.
//! let sim = bench_sim::SimServer::start(bench_sim::SimConfig {
//!     mode: bench_sim::LatencyMode::Instant, ..Default::default() }).await?;
//! let client = bench_transport::Client::new(bench_transport::ClientConfig::new(sim.base_url()))?;
//! let out = run(plan, client, RunConfig::new("bench-sim", 2), vec![], CancelToken::new()).await;
//! assert_eq!(out.turns.len(), 12);
//! assert!(out.turns.iter().all(|t| t.status == bench_rundir::record::TurnStatus::Ok));
//! sim.shutdown().await;
//! # Ok::<(), Box<dyn std::error::Error>>(()) })
//! # }
//! ```

pub mod config;
pub mod conv;
pub mod engine;
pub mod observer;
mod prefix;

pub use config::{
    Arrival, ArrivalProcess, ContentMode, Limits, OutputCapField, RequestShape, ResponseMode,
    ResponsesState, Retry, RunConfig, System, ToolWaits,
};
pub use conv::{Conversation, Render};
pub use engine::{CancelToken, RunOutcome, StopReason, Transport, WARMUP_TURNS, run};
pub use observer::{Observer, Phase, RunEvent};
