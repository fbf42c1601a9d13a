//! What a report of one run is drawn from ([`ReportData`]), and the run directory's server
//! telemetry reduced to the series the report plots ([`ServerPoint`]). Loading a run directory
//! into a [`ReportData`] (recomputing a missing or stale `result.json`) is
//! `bench_run::report::load`; rendering is [`crate::html`] and [`RunResult::console`](crate::RunResult::console).

use serde::{Deserialize, Serialize};

use crate::RunResult;
use crate::record::{SessionRecord, TurnRecord};

/// Everything a report of one run shows.
#[derive(Debug, Clone, PartialEq)]
pub struct ReportData {
    /// A title for the report (the run directory's name, usually).
    pub title: String,
    /// The run's result (read from `result.json`, or recomputed from the records).
    pub result: RunResult,
    /// Every turn record (warmup and superseded records included: renderers skip them).
    pub turns: Vec<TurnRecord>,
    /// Every session record.
    pub sessions: Vec<SessionRecord>,
    /// The server's telemetry over time (empty when the run did not scrape `/metrics`).
    pub server: Vec<ServerPoint>,
    /// The run's configuration (`run.json`) with every secret already replaced by `***`.
    pub config: serde_json::Value,
    /// Why `result` was recomputed (`None` when `result.json` was read as written).
    pub recomputed: Option<String>,
    /// What reading the run directory set aside or could not use, one line each (a torn last
    /// line cut by a crash, a `run.json` spec this version does not read).
    pub notes: Vec<String>,
}

/// One `/metrics` scrape reduced to what the report plots. Every figure is `None` when the
/// server did not report it.
#[derive(Debug, Clone, Copy, Default, PartialEq, Serialize, Deserialize)]
pub struct ServerPoint {
    /// Seconds since the run started (the same clock as the records' `*_s`).
    pub t_s: f64,
    /// Whether the scrape was taken in the measured phase (not the baseline, warmup or after).
    pub measured: bool,
    /// KV-cache usage, 0–1.
    pub kv_usage: Option<f64>,
    /// Requests waiting in the server's queue.
    pub waiting: Option<f64>,
    /// Requests running.
    pub running: Option<f64>,
    /// Prefix-cache hit rate since the previous scrape (0–1): the counters' deltas where the
    /// server has counters, else its own hit-rate gauge.
    pub prefix_hit_rate: Option<f64>,
    /// GPU power at that time, W: DCGM's, summed over the `--scrape` targets that report it
    /// (else the server's own `/metrics`, when it does).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub gpu_power_w: Option<f64>,
}
