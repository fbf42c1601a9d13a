//! `bench-journeys`: user journeys — named, timed operations against an HTTP API — with a
//! latency runner (N sequential operations), a throughput runner (R operations, at most C in
//! flight), statistics over repeated runs, a versioned JSON report, markdown for PR comments,
//! CI gates and a baseline comparison.
//!
//! Journeys come from built-in packs ([`packs`]), from declarative TOML files
//! ([`declarative`]), or from your own code: implement [`Journey`] and hand it to
//! [`run_latency`] / [`run_throughput`] (a whole program: `examples/custom.rs`). The runners
//! are plain `async` and name no runtime; the HTTP journeys (the packs and declarative files)
//! need tokio: `bench_transport::Client`, and a task per open event stream.

pub mod declarative;
pub mod journey;
pub mod packs;
pub mod report;
pub mod runner;
pub mod suite;

pub use journey::{BoxFuture, Ctx, Env, Failure, Journey, Kind};
pub use report::{Comparison, Gates, JourneyReport, Report, RunRow, Summary, Verdict};
pub use runner::{Cancel, RunResult, clamp_iterations, run_latency, run_throughput};
pub use suite::{OpEvent, SuiteConfig, mode_of, run_suite, run_suite_observed, select};
