//! `bench-rundir`: the one schema of a run directory, written by `bench-run` and read back by
//! `bench-telemetry::health`, `bench-run`'s resume and anyone else, through the same types.
//!
//! A run directory holds:
//!
//! | file | what | type |
//! |---|---|---|
//! | [`files::RUN_JSON`] | the run's specification and environment | [`RunJsonHead`] (the fields readers need) |
//! | [`files::EVENTS`] | the lifecycle, one event per line | [`EventLine`] ([`LifecycleEvent`]) |
//! | [`files::TURNS`] | one record per finished turn | [`TurnRecord`] |
//! | [`files::SESSIONS`] | one record per finished session play | [`SessionRecord`] |
//! | [`files::SCRAPES`] | one `/metrics` scrape per line | `bench_telemetry::Scrape` (its `phase` is a [`ScrapePhase`]) |
//! | [`files::RESULT`] | the computed result | `bench_report::RunResult` |
//! | [`files::STREAM`] | runs started by `bench serve`: the event stream it sent | `bench_control::stream::EventLog` |
//! | [`files::JOURNEYS_REPORT`] | a journeys run's report (its `run.json` says `"kind": "journeys"`) | `bench_journeys::Report` |
//!
//! Every file but `run.json` and `result.json` is append-only JSONL; [`jsonl::read`] reads one
//! back tolerating a torn last line (a crash mid-write). No decision is made anywhere by
//! comparing a string read back from a run directory: values are parsed into these types.
//!
//! ```
//! use bench_rundir::{EventLine, LifecycleEvent, StopBy, files, jsonl};
//! # let tmp = tempfile::tempdir().unwrap();
//! # let dir = tmp.path();
//! # std::fs::write(dir.join(files::EVENTS), "{\"event\":\"run.stopped\",\"utc\":\"2026-01-01T00:00:00Z\",\"by\":\"completed\",\"reason\":\"all 8 planned sessions were played\"}\n{\"event\":\"heart").unwrap();
//! let events = jsonl::read::<EventLine>(&dir.join(files::EVENTS)).unwrap();
//! let stopped = events.records.iter().find_map(|e| match &e.event {
//!     LifecycleEvent::Stopped { by, .. } => Some(*by),
//!     _ => None,
//! });
//! assert_eq!(stopped, Some(StopBy::Completed));
//! assert!(events.torn.is_some(), "a crash cut the last line; it is set aside");
//! ```
//!
//! It also holds [`Secrets`] (in [`secrets`]): the values that must never reach these files
//! or any other output, and the one rule for which names are secret ([`is_secret_name`]).
//!
//! Plain synchronous code: no tokio, no hyper.

pub mod error_kind;
pub mod event;
pub mod json_str;
pub mod jsonl;
pub mod record;
pub mod secrets;
pub mod size;
mod turn_json;

pub use error_kind::ErrorKind;
pub use event::{
    EventLine, Heartbeat, LifecycleEvent, Opened, Phase, Resumed, ScrapePhase, StopBy, Tokens,
};
pub use record::{
    CountSource, FailedAttempt, NodeInfo, SessionRecord, SessionStatus, TurnRecord, TurnStatus,
};
pub use secrets::{Secrets, is_secret_name, redact_url, url_credentials};

/// The names of a run directory's files.
pub mod files {
    /// The run's specification, environment and plan summary (pretty JSON, written once).
    pub const RUN_JSON: &str = "run.json";
    /// Lifecycle events (JSONL, appended).
    pub const EVENTS: &str = "events.jsonl";
    /// Turn records (JSONL, appended).
    pub const TURNS: &str = "turns.jsonl";
    /// Session records (JSONL, appended).
    pub const SESSIONS: &str = "sessions.jsonl";
    /// `/metrics` scrapes (JSONL, appended).
    pub const SCRAPES: &str = "scrapes.jsonl";
    /// The result (pretty JSON, written at the end).
    pub const RESULT: &str = "result.json";
    /// The event stream `bench serve` sent for the run (one JSON object per line, with `id`
    /// and `event`), so it reads the same after a restart. Owned by `bench_control::stream`.
    pub const STREAM: &str = "stream.jsonl";
    /// A journeys run's report (`bench_journeys::Report`), instead of `result.json`.
    pub const JOURNEYS_REPORT: &str = "report.json";
}

/// The fields of `run.json` that readers of a run directory need; the rest (the run
/// specification) is `bench_run::RunSpec`'s business.
#[derive(Debug, Clone, Default, PartialEq, serde::Serialize, serde::Deserialize)]
pub struct RunJsonHead {
    /// What kind of run it is (absent in replay runs: `replay`).
    #[serde(default)]
    pub kind: RunKind,
    /// The process that wrote it.
    #[serde(default)]
    pub pid: Option<u32>,
    /// The plan's size (the whole plan's, in a shard).
    #[serde(default)]
    pub plan: Option<PlanCounts>,
    /// The bench that wrote it.
    #[serde(default)]
    pub tool_version: Option<String>,
    /// The whole plan's digest (absent before sharding existed).
    #[serde(default)]
    pub plan_digest: Option<String>,
    /// The run's configuration digest: the spec without its shard, start time and exports.
    #[serde(default)]
    pub config_digest: Option<String>,
    /// The shard of the plan this run played (`--shard I/N`).
    #[serde(default)]
    pub shard: Option<ShardInfo>,
    /// This host's clock against the server's (shards).
    #[serde(default)]
    pub clock: Option<ClockOffset>,
    /// The shards a merged run was made of (`bench merge`).
    #[serde(default)]
    pub merged: Option<Merged>,
}

/// What one shard of a plan played, as its `run.json` records it.
#[derive(Debug, Clone, Copy, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub struct ShardInfo {
    /// 0-based index.
    pub index: u32,
    /// Shards in all.
    pub count: u32,
    /// Sessions this shard plays.
    pub sessions: u64,
    /// Their turns.
    pub turns: u64,
    /// Their planned tokens (what the partition balances).
    pub planned_tokens: u64,
}

/// A host's clock against the server's, estimated from the server's HTTP `Date` header.
#[derive(Debug, Clone, Copy, PartialEq, serde::Serialize, serde::Deserialize)]
pub struct ClockOffset {
    /// The server's clock minus this host's, s (the header's whole second taken at its middle,
    /// against the middle of the request).
    pub offset_s: f64,
    /// The estimate is within ± this: half a second (the header's resolution) plus half the
    /// request's round trip.
    pub uncertainty_s: f64,
}

/// How a merged run directory was made (`bench merge`).
#[derive(Debug, Clone, PartialEq, serde::Serialize, serde::Deserialize)]
pub struct Merged {
    /// Shards in the plan.
    pub count: u32,
    /// Some shards are missing or did not finish (`--partial`).
    pub partial: bool,
    /// The shard indices not merged (missing).
    #[serde(default)]
    pub missing: Vec<u32>,
    /// Each shard merged, by index.
    pub shards: Vec<MergedShard>,
}

/// One shard of a merged run.
#[derive(Debug, Clone, PartialEq, serde::Serialize, serde::Deserialize)]
pub struct MergedShard {
    /// 0-based index.
    pub index: u32,
    /// Its run directory, as given to `bench merge`.
    pub dir: String,
    /// The host it ran on, when recorded.
    pub host: Option<String>,
    /// When its measured run started (UTC, RFC 3339): its records' times were shifted by its
    /// distance from the earliest shard's start.
    pub start_utc: Option<String>,
    /// What its times were shifted by, s.
    pub shift_s: f64,
    /// Its clock against the server's, when recorded.
    pub clock: Option<ClockOffset>,
    /// Its concurrency (or in-flight cap).
    pub concurrency: u32,
    /// Whether it ran to its end (`run.stopped` and `result.json`).
    pub finished: bool,
    /// Its turn and session records.
    pub turns: u64,
    /// Its session records.
    pub sessions: u64,
}

/// What a run directory holds.
#[derive(
    Debug, Clone, Copy, Default, PartialEq, Eq, Hash, serde::Serialize, serde::Deserialize,
)]
#[serde(rename_all = "lowercase")]
pub enum RunKind {
    /// A replay of a plan (`bench run`): `turns.jsonl`, `result.json`.
    #[default]
    Replay,
    /// A journeys suite (`bench journeys`): `report.json`.
    Journeys,
    /// A sweep (`bench sweep`): `sweep.json`, and a replay's run directory per point.
    Sweep,
}

impl RunKind {
    /// `replay`, `journeys` or `sweep`.
    pub fn as_str(self) -> &'static str {
        match self {
            RunKind::Replay => "replay",
            RunKind::Journeys => "journeys",
            RunKind::Sweep => "sweep",
        }
    }
}

/// A plan's size, as `run.json` records it.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub struct PlanCounts {
    /// Sessions planned.
    #[serde(default)]
    pub sessions: u64,
    /// Turns planned.
    #[serde(default)]
    pub turns: u64,
}
