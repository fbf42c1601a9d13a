//! `bench-report`: run records and the metrics computed from them (plain synchronous code).
//!
//! - [`record`]: the records a run writes ([`TurnRecord`], [`SessionRecord`]), the shared
//!   contract with the runner.
//! - [`compute`]: records → [`RunResult`], the `result.json` document (steady window, TTFT split,
//!   TPOT, pooled chunk gaps, e2e by turn and input band, throughput, prefix-cache ratio,
//!   output-length fidelity, routing stickiness, goodput, dispatch lag) and per session play
//!   ([`SessionMetrics`]: e2e, model time against tool waits, session goodput).
//! - [`RunResult::console`]: the human report.
//! - [`export`]: files outside the run directory: the one-line JSON summary of a run
//!   (`bench run --output`) and the per-turn CSV (`bench run --csv`).
//! - [`percentile`]: the single percentile method (linear interpolation, NumPy's default).
//!
//! Every definition is written down in `docs/report.md`; the JSON Schema of `result.json` is
//! `docs/result.schema.json`.

pub mod compare;
pub mod cost;
pub mod export;
pub mod grade;
pub mod graph;
pub mod html;
pub mod report;
pub mod sweep;
pub use bench_rundir::record;

mod console;
mod judge;
mod markdown;
mod result;
mod sessions;
mod slo;
mod validity;
/// The statistics every figure uses (`bench-stats`, shared with `bench-telemetry`).
pub use bench_stats as stats;

pub use bench_stats::{ITL_EXACT_LIMIT, PooledDist, percentile};
pub use judge::Judge;
pub use record::{CountSource, SessionRecord, SessionStatus, TurnRecord, TurnStatus};
pub use report::{ReportData, ServerPoint};
pub use result::{
    DEFAULT_STEADY_FRAC, Dist, KeyedP50, LagDist, Metrics, OslFidelity, PerUserRate,
    ReasoningSummary, RunInfo, RunResult, SteadyWindow, Summary, compute, input_band, min_active,
};
pub use sessions::{SessionMetrics, SessionSloMet};
pub use slo::{SessionSlo, Slo, SloParseError};
pub use validity::{Check, CheckStatus, ClientCpu, Validity, Verdict};

/// Version of the `result.json` document ([`RunResult`]); bumped on any incompatible change.
pub const SCHEMA_VERSION: u32 = 1;
