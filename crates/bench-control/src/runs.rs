//! Run management: one active run at a time, a bounded in-memory history, and the finished
//! runs found in the runs directory (after a restart too).
//!
//! A run starts through `bench-run` ([`bench_run::start`] for a replay,
//! [`bench_run::journeys::start_journeys`] for a journeys suite) on a task of its own; its
//! lifecycle events, a `progress` event a second and sampled `turn.completed` events go into
//! its [`EventLog`], which ends with `run.completed`, `run.failed` or `run.cancelled`.

use std::collections::VecDeque;
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex, MutexGuard};
use std::time::Duration;

use bench_report::RunResult;
use bench_report::grade::GraderSummary;
use bench_report::sweep::{SweepStop, SweepSummary};
use bench_run::events::{EventStream, Received};
use bench_run::hooks::{Grader, Hooks};
use bench_run::journeys::{JourneysOptions, JourneysSpec};
use bench_run::sweep::{Stopper, SweepObserver, SweepOptions, SweepPlan, SweepSpec};
use bench_run::{Notice, RunOptions, RunSpec, Snapshot};
use bench_rundir::{
    EventLine, LifecycleEvent, RunJsonHead, RunKind, Secrets, StopBy, files, jsonl,
};
use serde::Serialize;
use serde_json::Value;

use crate::ApiError;
use crate::live::Live;
use crate::stream::EventLog;

/// Finished runs kept in memory (older ones are read back from their directories).
pub const RECENT_RUNS: usize = 20;

/// Run directories listed from the runs directory at most (the newest).
pub const LISTED_FROM_DISK: usize = 200;

/// Where a run is in its life.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, serde::Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum RunStatus {
    /// Planning, starting the simulator, waiting for the server.
    Starting,
    /// Playing.
    Running,
    /// Finished (every session played, or its duration reached).
    Completed,
    /// Could not start, or failed.
    Failed,
    /// Cancelled: the partial result is written.
    Cancelled,
    /// A run directory without a recorded stop: it crashed, or another process runs it.
    Unfinished,
}

impl RunStatus {
    /// It will not change any more.
    pub fn is_final(self) -> bool {
        !matches!(self, RunStatus::Starting | RunStatus::Running)
    }

    fn from_stop(by: StopBy) -> RunStatus {
        match by {
            StopBy::Signal | StopBy::Cancelled => RunStatus::Cancelled,
            StopBy::Error | StopBy::Unknown => RunStatus::Failed,
            StopBy::Completed | StopBy::Exhausted | StopBy::Duration | StopBy::MaxDuration => {
                RunStatus::Completed
            }
        }
    }

    fn terminal_event(self) -> &'static str {
        match self {
            RunStatus::Cancelled => "run.cancelled",
            RunStatus::Completed => "run.completed",
            _ => "run.failed",
        }
    }
}

/// A run as the API shows it.
#[derive(Debug, Clone, Serialize)]
pub struct RunView {
    /// Its id (the name of its directory in the runs directory).
    pub id: String,
    /// `replay` or `journeys`.
    pub kind: RunKind,
    /// Where it is.
    pub status: RunStatus,
    /// When it was created (RFC 3339, UTC).
    pub created_utc: Option<String>,
    /// When it ended.
    pub finished_utc: Option<String>,
    /// Its run directory.
    pub dir: String,
    /// Why it failed.
    pub error: Option<String>,
    /// A cancel was asked for.
    pub cancel_requested: bool,
    /// The latest `progress` event (while it runs).
    pub progress: Option<Value>,
    /// The terminal event's summary (once it ended).
    pub summary: Option<Value>,
}

/// How a run ended, as the terminal event and the run object say it.
#[derive(Debug, Clone, Default, Serialize)]
pub struct Summary {
    /// What stopped it.
    pub stopped_by: Option<StopBy>,
    /// In words.
    pub reason: Option<String>,
    /// Measured turns (journeys: timed operations).
    pub turns_total: u64,
    /// Of those, failed.
    pub turns_failed: u64,
    /// Whether it passed its gate (`bench run`'s exit status 0: turns played, errors within
    /// `max_error_rate`, `valid` when `require_valid`); `null` when unknown.
    pub passed: Option<bool>,
    /// Why it did not pass its gate.
    pub failed_because: Option<String>,
    /// Whether its figures can be trusted: `result.json`'s validity verdict (`valid`,
    /// `suspect`, `invalid`); `null` for journeys and runs without one.
    pub validity: Option<bench_report::Verdict>,
    /// The verdict's reason in one line (`valid: all 8 checks passed …`, or the first check
    /// that did not pass).
    pub validity_reason: Option<String>,
    /// Wall time of the measured run, s.
    pub duration_s: Option<f64>,
    /// Output tokens per second over the measured run.
    pub output_tok_s: Option<f64>,
    /// TTFT p50 of measured ok turns, ms.
    pub ttft_p50_ms: Option<f64>,
    /// TTFT p99, ms.
    pub ttft_p99_ms: Option<f64>,
    /// TPOT p50, ms.
    pub tpot_p50_ms: Option<f64>,
    /// End-to-end p50, ms.
    pub e2e_p50_ms: Option<f64>,
    /// Each grader's summary.
    pub grades: Vec<GraderSummary>,
    /// Journeys: per journey, successes, failures and p50 (ms) of the median run.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub journeys: Option<Value>,
    /// Sweeps: how it stopped, the find-max answer and per point its level, run directory,
    /// verdict, goodput and headline figures (`sweep.json`'s).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub sweep: Option<Value>,
}

impl Summary {
    fn before_start() -> Summary {
        Summary {
            stopped_by: Some(StopBy::Cancelled),
            reason: Some(
                "cancelled before it started (while planning or waiting for the server)".into(),
            ),
            ..Summary::default()
        }
    }

    fn from_result(r: &RunResult, stopped_by: Option<StopBy>, reason: Option<String>) -> Summary {
        let o = &r.overall;
        Summary {
            stopped_by,
            reason,
            turns_total: r.summary.turns_ok + r.summary.turns_failed,
            turns_failed: r.summary.turns_failed,
            passed: None,
            failed_because: None,
            validity: r.validity.as_ref().map(|v| v.verdict),
            validity_reason: r.validity.as_ref().map(bench_report::Validity::headline),
            duration_s: o.span_s,
            output_tok_s: o.output_throughput_tok_s,
            ttft_p50_ms: o.ttft_ms.p50,
            ttft_p99_ms: o.ttft_ms.p99,
            tpot_p50_ms: o.tpot_ms.p50,
            e2e_p50_ms: o.e2e_ms.p50,
            grades: r.grades.clone(),
            journeys: None,
            sweep: None,
        }
    }

    /// A sweep's summary: turns over every point, the worst point's verdict, the gate as
    /// `bench sweep` judges it (`gate`: `None` when unknown, as from disk).
    fn of_sweep(s: &SweepSummary, gate: Option<Result<(), String>>) -> Summary {
        let worst = s.points.iter().map(|p| p.verdict).max_by_key(|v| match v {
            bench_report::Verdict::Valid => 0,
            bench_report::Verdict::Suspect => 1,
            bench_report::Verdict::Invalid => 2,
        });
        let valid = s
            .points
            .iter()
            .filter(|p| p.verdict == bench_report::Verdict::Valid)
            .count();
        Summary {
            stopped_by: None,
            reason: Some(bench_run::sweep::stop_text(s)),
            turns_total: s.points.iter().map(|p| p.turns_ok + p.turns_failed).sum(),
            turns_failed: s.points.iter().map(|p| p.turns_failed).sum(),
            passed: gate.as_ref().map(Result::is_ok),
            failed_because: gate.and_then(Result::err),
            validity: worst,
            validity_reason: worst.map(|_| format!("{valid} of {} points valid", s.points.len())),
            sweep: serde_json::to_value(serde_json::json!({
                "axis": s.axis,
                "stop": s.stop,
                "find_max": s.find_max,
                "points": s.points,
            }))
            .ok(),
            ..Summary::default()
        }
    }

    fn of_journeys(report: &bench_journeys::Report, by: StopBy, problems: &[String]) -> Summary {
        let mut total = 0;
        let mut failed = 0;
        let mut per = serde_json::Map::new();
        for (name, j) in &report.journeys {
            let ok: u64 = j.runs.iter().map(|r| r.n_success).sum();
            let bad: u64 = j.runs.iter().map(|r| r.n_failures).sum();
            total += ok + bad;
            failed += bad;
            per.insert(
                name.clone(),
                serde_json::json!({"n_success": ok, "n_failures": bad, "avg_p50_ms": j.summary.avg_p50_ms}),
            );
        }
        Summary {
            stopped_by: Some(by),
            reason: None,
            turns_total: total,
            turns_failed: failed,
            passed: Some(problems.is_empty()),
            failed_because: (!problems.is_empty()).then(|| problems.join("; ")),
            journeys: Some(Value::Object(per)),
            ..Summary::default()
        }
    }
}

/// Stops a run from the API.
type CancelFn = Arc<dyn Fn() + Send + Sync>;

#[derive(Default)]
struct EntryState {
    status: Option<RunStatus>,
    finished_utc: Option<String>,
    error: Option<String>,
    summary: Option<Value>,
    cancel: Option<CancelFn>,
    cancel_requested: bool,
}

/// A run this process started.
pub struct RunEntry {
    /// Its id.
    pub id: String,
    /// Replay or journeys.
    pub kind: RunKind,
    /// Its run directory.
    pub dir: PathBuf,
    /// When it was created.
    pub created_utc: String,
    /// Its events.
    pub log: Arc<EventLog>,
    /// Its live figures.
    pub live: Arc<Live>,
    state: Mutex<EntryState>,
    /// Wakes a start still planning or waiting for its server when a cancel comes.
    cancelled: tokio::sync::Notify,
}

impl std::fmt::Debug for RunEntry {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("RunEntry")
            .field("id", &self.id)
            .field("dir", &self.dir)
            .finish_non_exhaustive()
    }
}

impl RunEntry {
    fn state(&self) -> MutexGuard<'_, EntryState> {
        self.state.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// Where it is.
    pub fn status(&self) -> RunStatus {
        self.state().status.unwrap_or(RunStatus::Starting)
    }

    /// The API's view of it.
    pub fn view(&self) -> RunView {
        let s = self.state();
        let status = s.status.unwrap_or(RunStatus::Starting);
        let progress = if status.is_final() {
            None
        } else {
            self.log
                .latest("progress")
                .and_then(|e| serde_json::from_str(&e.json).ok())
        };
        RunView {
            id: self.id.clone(),
            kind: self.kind,
            status,
            created_utc: Some(self.created_utc.clone()),
            finished_utc: s.finished_utc.clone(),
            dir: self.dir.display().to_string(),
            error: s.error.clone(),
            cancel_requested: s.cancel_requested,
            progress,
            summary: s.summary.clone(),
        }
    }

    /// Asks it to stop: no new session or turn, turns in flight finish. `false` when it has
    /// already ended.
    pub fn cancel(&self) -> bool {
        let mut s = self.state();
        if s.status.is_some_and(RunStatus::is_final) {
            return false;
        }
        s.cancel_requested = true;
        self.cancelled.notify_one();
        if let Some(c) = s.cancel.clone() {
            drop(s);
            c();
        }
        true
    }

    /// The engine runs: its events so far go into the log (the receiver, for the rest, is
    /// returned) and `cancel` stops it (at once if a cancel was asked for already).
    fn running(
        &self,
        cancel: CancelFn,
        (history, rx): (Vec<EventLine>, EventStream),
    ) -> EventStream {
        for e in &history {
            push_lifecycle(&self.log, e);
        }
        let mut s = self.state();
        s.status = Some(RunStatus::Running);
        s.cancel = Some(cancel.clone());
        let now = s.cancel_requested;
        drop(s);
        if now {
            cancel();
        }
        rx
    }

    fn cancel_requested(&self) -> bool {
        self.state().cancel_requested
    }

    /// Ends it: the terminal event goes out, then the state changes.
    fn finish(&self, status: RunStatus, summary: Option<Summary>, error: Option<String>) {
        let summary = summary.and_then(|s| serde_json::to_value(s).ok());
        let mut fields = serde_json::Map::new();
        fields.insert("utc".into(), bench_report::export::utc_now().into());
        fields.insert(
            "status".into(),
            serde_json::to_value(status).unwrap_or_default(),
        );
        fields.insert("summary".into(), summary.clone().unwrap_or(Value::Null));
        if let Some(e) = &error {
            fields.insert("error".into(), e.clone().into());
        }
        self.log.push_terminal(status.terminal_event(), &fields);
        let mut s = self.state();
        s.status = Some(status);
        s.finished_utc = Some(bench_report::export::utc_now());
        s.summary = summary;
        s.error = error;
        s.cancel = None;
    }
}

/// What `POST /api/runs` asked for.
pub enum Request {
    /// A replay.
    Replay(Box<RunSpec>),
    /// A journeys suite.
    Journeys(Box<JourneysSpec>),
    /// A sweep: one replay per level.
    Sweep(Box<SweepSpec>),
}

impl std::fmt::Debug for Request {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Request::Replay(_) => f.write_str("Request::Replay"),
            Request::Journeys(_) => f.write_str("Request::Journeys"),
            Request::Sweep(_) => f.write_str("Request::Sweep"),
        }
    }
}

/// What `POST /api/runs` asked for, and what is never stored of it.
#[derive(Debug)]
pub struct Parsed {
    /// The run.
    pub request: Request,
    /// `headers`: request headers for the server under test (only their names are stored).
    pub headers: Vec<(String, String)>,
    /// `secret_headers`: names of headers whose values are secrets whatever their names (as
    /// `--secret-header`; names matching [`bench_rundir::is_secret_name`] always are).
    pub secret_headers: Vec<String>,
}

/// Parses a `POST /api/runs` body: a run spec, `kind`, `headers` (values never stored) and
/// `secret_headers`. An error never echoes a header's value.
pub fn parse_request(body: &[u8]) -> Result<Parsed, ApiError> {
    let bad = |m: String| ApiError::new(400, m);
    let mut value: Value = if body.iter().all(u8::is_ascii_whitespace) {
        Value::Object(serde_json::Map::new())
    } else {
        serde_json::from_slice(body).map_err(|e| bad(format!("the body is not JSON: {e}")))?
    };
    let Some(obj) = value.as_object_mut() else {
        return Err(bad("the run spec must be a JSON object".into()));
    };
    let sweep = obj.remove("sweep");
    let kind = match obj.remove("kind") {
        None if sweep.is_some() => RunKind::Sweep,
        None => RunKind::Replay,
        Some(k) => serde_json::from_value(k.clone()).map_err(|_| {
            bad(format!(
                "kind: {k} is not a run kind (expected \"replay\", \"journeys\" or \"sweep\")"
            ))
        })?,
    };
    if sweep.is_some() != (kind == RunKind::Sweep) {
        return Err(bad(format!(
            "{}: a sweep is a run spec with a sweep table (axis, levels) and kind \"sweep\" \
             (or no kind)",
            if sweep.is_some() { "sweep" } else { "kind" }
        )));
    }
    let headers = match obj.remove("headers") {
        None => Vec::new(),
        Some(Value::Object(h)) => {
            let mut out = Vec::new();
            for (k, v) in h {
                let Value::String(v) = v else {
                    return Err(bad(format!("headers.{k}: the value must be a string")));
                };
                if http::HeaderName::from_bytes(k.as_bytes()).is_err() {
                    return Err(bad(format!("headers: {k:?} is not a valid header name")));
                }
                if http::HeaderValue::from_str(&v).is_err() {
                    // Never echo the value: it may be a secret.
                    return Err(bad(format!(
                        "headers.{k}: the value is not a valid header value"
                    )));
                }
                out.push((k, v));
            }
            out
        }
        Some(_) => {
            return Err(bad(
                "headers: must be an object of header names to values".into()
            ));
        }
    };
    let secret_headers = match obj.remove("secret_headers") {
        None => Vec::new(),
        Some(Value::Array(a)) => {
            let mut out = Vec::new();
            for v in a {
                match v {
                    Value::String(n) if http::HeaderName::from_bytes(n.as_bytes()).is_ok() => {
                        out.push(n);
                    }
                    other => {
                        return Err(bad(format!("secret_headers: {other} is not a header name")));
                    }
                }
            }
            out
        }
        Some(_) => {
            return Err(bad(
                "secret_headers: must be an array of header names".into()
            ));
        }
    };
    // The secrets of this request: no error below may show them.
    let mut secrets = Secrets::from_env();
    secrets.add_headers(&headers, &secret_headers);
    let bad = |m: String| ApiError::new(400, secrets.scrub(&m).into_owned());
    let value = Value::Object(std::mem::take(obj));
    let field = |e: serde_path_to_error::Error<serde_json::Error>| {
        let path = e.path().to_string();
        let inner = e.into_inner();
        if path == "." {
            bad(format!("spec: {inner}"))
        } else {
            bad(format!("spec.{path}: {inner}"))
        }
    };
    let req = match kind {
        RunKind::Replay => {
            let spec: RunSpec = serde_path_to_error::deserialize(value).map_err(field)?;
            spec.validate().map_err(|e| bad(e.to_string()))?;
            Request::Replay(Box::new(spec))
        }
        RunKind::Journeys => {
            let spec: JourneysSpec = serde_path_to_error::deserialize(value).map_err(field)?;
            spec.validate().map_err(|e| bad(e.to_string()))?;
            Request::Journeys(Box::new(spec))
        }
        RunKind::Sweep => {
            let run: RunSpec = serde_path_to_error::deserialize(value).map_err(field)?;
            let table = sweep.unwrap_or_default();
            let sweep: SweepPlan = serde_path_to_error::deserialize(table).map_err(|e| {
                let path = e.path().to_string();
                let inner = e.into_inner();
                if path == "." {
                    bad(format!("spec.sweep: {inner}"))
                } else {
                    bad(format!("spec.sweep.{path}: {inner}"))
                }
            })?;
            let spec = SweepSpec { run, sweep };
            spec.validate().map_err(|e| bad(e.to_string()))?;
            Request::Sweep(Box::new(spec))
        }
    };
    Ok(Parsed {
        request: req,
        headers,
        secret_headers,
    })
}

/// A run id: 1 to 128 of `[A-Za-z0-9._-]`, not starting with `.` (so no id names a path
/// outside the runs directory).
pub fn valid_id(id: &str) -> bool {
    (1..=128).contains(&id.len())
        && !id.starts_with('.')
        && id
            .bytes()
            .all(|b| b.is_ascii_alphanumeric() || matches!(b, b'.' | b'_' | b'-'))
}

fn new_id() -> String {
    let stamp = time::OffsetDateTime::now_utc()
        .format(&time::macros::format_description!(
            "[year][month][day]T[hour][minute][second]Z"
        ))
        .unwrap_or_else(|_| "run".into());
    format!("{stamp}-{:04x}", rand::random::<u16>())
}

/// What `bench serve` was started with.
#[derive(Clone, Default)]
pub struct ControlConfig {
    /// Where run directories go.
    pub runs_dir: PathBuf,
    /// Called for every run, beside the live figures (your own hooks).
    pub hooks: Vec<Arc<dyn Hooks>>,
    /// Added to every replay's graders (after the spec's own).
    pub graders: Vec<Arc<dyn Grader>>,
    /// Values never to show in a response or an event (the environment's API keys, the token
    /// and each run's secret headers are added by the control plane itself).
    pub secrets: Secrets,
}

impl std::fmt::Debug for ControlConfig {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ControlConfig")
            .field("runs_dir", &self.runs_dir)
            .field("hooks", &self.hooks.len())
            .field("graders", &self.graders.len())
            .field("secrets", &self.secrets)
            .finish()
    }
}

#[derive(Default)]
struct State {
    active: Option<Arc<RunEntry>>,
    recent: VecDeque<Arc<RunEntry>>,
}

/// The runs of one `bench serve`.
pub struct Control {
    cfg: ControlConfig,
    state: Mutex<State>,
    /// Every secret known so far: the configuration's, the environment's and every run's
    /// secret headers' (scrubbed from every response).
    secrets: Mutex<Secrets>,
}

impl std::fmt::Debug for Control {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Control")
            .field("cfg", &self.cfg)
            .finish_non_exhaustive()
    }
}

/// A run found by id.
#[derive(Debug)]
pub enum Found {
    /// Started by this process.
    Live(Arc<RunEntry>),
    /// Read from its run directory.
    Disk(Box<DiskRun>),
}

impl Found {
    /// The API's view.
    pub fn view(&self) -> RunView {
        match self {
            Found::Live(e) => e.view(),
            Found::Disk(d) => d.view.clone(),
        }
    }

    /// Its run directory.
    pub fn dir(&self) -> &Path {
        match self {
            Found::Live(e) => &e.dir,
            Found::Disk(d) => &d.dir,
        }
    }

    /// Its kind.
    pub fn kind(&self) -> RunKind {
        match self {
            Found::Live(e) => e.kind,
            Found::Disk(d) => d.view.kind,
        }
    }

    /// Its event log: the live one, or one rebuilt from `events.jsonl` (ids 1.. in file order,
    /// then the terminal event when a stop is recorded).
    pub fn log(&self) -> Arc<EventLog> {
        match self {
            Found::Live(e) => e.log.clone(),
            Found::Disk(d) => d.log(),
        }
    }
}

/// A run read back from its directory.
#[derive(Debug, Clone)]
pub struct DiskRun {
    /// The view.
    pub view: RunView,
    /// Its directory.
    pub dir: PathBuf,
    events: Vec<EventLine>,
    /// `stream.jsonl`, read when the stream is asked for.
    stream: Option<PathBuf>,
}

/// `run.created` as `stream.jsonl` has it.
#[derive(serde::Deserialize)]
struct CreatedLine {
    utc: Option<String>,
    kind: RunKind,
}

/// A terminal event as `stream.jsonl` has it.
#[derive(serde::Deserialize)]
struct TerminalLine {
    event: String,
    utc: Option<String>,
    status: RunStatus,
    #[serde(default)]
    summary: Option<Value>,
    #[serde(default)]
    error: Option<String>,
}

impl DiskRun {
    /// Reads `dir` (named `id`): the stream `bench serve` saved (`stream.jsonl`), else a
    /// run directory another front end wrote; `None` when it is neither.
    pub fn read(id: &str, dir: &Path) -> Option<DiskRun> {
        DiskRun::from_stream(id, dir).or_else(|| DiskRun::from_files(id, dir))
    }

    fn from_stream(id: &str, dir: &Path) -> Option<DiskRun> {
        let path = dir.join(files::STREAM);
        let (first, last) = first_and_last_lines(&path)?;
        let created: CreatedLine = serde_json::from_str(&first).ok()?;
        // The terminal event is the last line when the run ended (a torn one does not count).
        let end = last
            .and_then(|l| serde_json::from_str::<TerminalLine>(&l).ok())
            .filter(|t| crate::stream::is_terminal(&t.event));
        let view = RunView {
            id: id.to_owned(),
            kind: created.kind,
            status: end.as_ref().map_or(RunStatus::Unfinished, |e| e.status),
            created_utc: created.utc,
            finished_utc: end.as_ref().and_then(|e| e.utc.clone()),
            dir: dir.display().to_string(),
            error: end.as_ref().and_then(|e| e.error.clone()),
            cancel_requested: false,
            progress: None,
            summary: end.and_then(|e| e.summary),
        };
        Some(DiskRun {
            view,
            dir: dir.to_owned(),
            events: Vec::new(),
            stream: Some(path),
        })
    }

    fn from_files(id: &str, dir: &Path) -> Option<DiskRun> {
        let head: RunJsonHead =
            serde_json::from_slice(&std::fs::read(dir.join(files::RUN_JSON)).ok()?).ok()?;
        let events = jsonl::read::<EventLine>(&dir.join(files::EVENTS))
            .map(|l| l.records)
            .unwrap_or_default();
        // A stop counts only after the latest start or resume.
        let last_open = events.iter().rposition(|e| {
            matches!(
                e.event,
                LifecycleEvent::Started(_) | LifecycleEvent::Resumed(_)
            )
        });
        let stop = events
            .iter()
            .enumerate()
            .rev()
            .find_map(|(i, e)| match &e.event {
                LifecycleEvent::Stopped { by, reason } if last_open.is_none_or(|o| i > o) => {
                    Some((*by, reason.clone(), e.utc.clone()))
                }
                _ => None,
            });
        let status = stop.as_ref().map_or(RunStatus::Unfinished, |(by, _, _)| {
            RunStatus::from_stop(*by)
        });
        let summary = stop.as_ref().and_then(|(by, reason, _)| {
            disk_summary(dir, head.kind, *by, reason).and_then(|s| serde_json::to_value(s).ok())
        });
        Some(DiskRun {
            view: RunView {
                id: id.to_owned(),
                kind: head.kind,
                status,
                created_utc: events.first().map(|e| e.utc.clone()),
                finished_utc: stop.map(|s| s.2),
                dir: dir.display().to_string(),
                error: None,
                cancel_requested: false,
                progress: None,
                summary,
            },
            dir: dir.to_owned(),
            events,
            stream: None,
        })
    }

    /// Its events: the saved stream, else `events.jsonl` (ids 1.. in file order) and the
    /// terminal event rebuilt from `result.json` when a stop is recorded.
    pub fn log(&self) -> Arc<EventLog> {
        if let Some(log) = self.stream.as_deref().and_then(EventLog::read_file) {
            return Arc::new(log);
        }
        let log = EventLog::default();
        for e in &self.events {
            push_lifecycle(&log, e);
        }
        if self.view.status != RunStatus::Unfinished {
            let mut fields = serde_json::Map::new();
            fields.insert(
                "utc".into(),
                self.view.finished_utc.clone().unwrap_or_default().into(),
            );
            fields.insert(
                "status".into(),
                serde_json::to_value(self.view.status).unwrap_or_default(),
            );
            fields.insert(
                "summary".into(),
                self.view.summary.clone().unwrap_or(Value::Null),
            );
            log.push_terminal(self.view.status.terminal_event(), &fields);
        } else {
            log.close();
        }
        Arc::new(log)
    }
}

/// The first line of `path` and, when there is another, its last complete line (read from the
/// end: listing runs never reads a whole stream).
fn first_and_last_lines(path: &Path) -> Option<(String, Option<String>)> {
    use std::io::{BufRead, Read, Seek, SeekFrom};
    let mut f = std::fs::File::open(path).ok()?;
    let len = f.metadata().ok()?.len();
    let mut first = String::new();
    std::io::BufReader::new(&mut f)
        .take(1 << 20)
        .read_line(&mut first)
        .ok()?;
    let first_len = first.len() as u64;
    if !first.ends_with('\n') {
        return None;
    }
    if len <= first_len {
        return Some((first, None));
    }
    let tail_len = (len - first_len).min(1 << 20);
    f.seek(SeekFrom::Start(len - tail_len)).ok()?;
    let mut tail = Vec::with_capacity(tail_len as usize);
    f.take(tail_len).read_to_end(&mut tail).ok()?;
    let tail = String::from_utf8_lossy(&tail);
    // Only a line that ends with a newline is complete.
    let last = tail
        .strip_suffix('\n')
        .and_then(|t| t.rsplit('\n').next())
        .map(str::to_owned);
    Some((first, last))
}

fn disk_summary(dir: &Path, kind: RunKind, by: StopBy, reason: &str) -> Option<Summary> {
    match kind {
        RunKind::Replay => {
            let r: RunResult =
                serde_json::from_slice(&std::fs::read(dir.join(files::RESULT)).ok()?).ok()?;
            let mut s = Summary::from_result(&r, Some(by), Some(reason.to_owned()));
            // The gate, as bench run judged it (bench_run::gate).
            let doc = bench_run::run_json::read::<bench_run::run_json::ReplayRunJson>(dir);
            if let Ok(bench_run::run_json::ReplayRunJson { spec, .. }) = doc {
                let j = &spec.judge;
                let v = bench_run::gate(
                    s.turns_total,
                    s.turns_failed,
                    j.max_error_rate,
                    j.require_valid,
                    r.validity.as_ref(),
                )
                .err();
                s.passed = Some(v.is_none());
                s.failed_because = v;
            }
            Some(s)
        }
        RunKind::Journeys => {
            let r = bench_journeys::Report::read(&dir.join(files::JOURNEYS_REPORT)).ok()?;
            let mut problems = r.setup_failures();
            problems.extend(r.all_failed());
            let mut s = Summary::of_journeys(&r, by, &problems);
            s.reason = Some(reason.to_owned());
            Some(s)
        }
        RunKind::Sweep => {
            let bytes = std::fs::read(dir.join(bench_run::sweep::SWEEP_JSON)).ok()?;
            let s: SweepSummary = serde_json::from_slice(&bytes).ok()?;
            Some(Summary::of_sweep(&s, None))
        }
    }
}

/// A lifecycle event into the log, as `events.jsonl` has it (its `event` is the type).
fn push_lifecycle(log: &EventLog, e: &EventLine) {
    if let Ok(Value::Object(mut obj)) = serde_json::to_value(e) {
        let kind = match obj.remove("event") {
            Some(Value::String(k)) => k,
            _ => "other".into(),
        };
        log.push(&kind, &obj);
    }
}

#[derive(Serialize)]
struct ProgressEvent<'a> {
    utc: String,
    elapsed_s: f64,
    warmup: bool,
    turns_done: u64,
    turns_planned: Option<u64>,
    turns_failed: u64,
    sessions_done: u64,
    active: u32,
    concurrency: u32,
    in_flight: i64,
    output_tok_s: Option<f64>,
    ttft_p50_ms: Option<f64>,
    ttft_p99_ms: Option<f64>,
    errors_by_kind: &'a std::collections::BTreeMap<&'static str, u64>,
    fraction: Option<f64>,
    turn_events_skipped: u64,
}

fn push_progress(log: &EventLog, live: &Live, s: &Snapshot) {
    let (p50, p99) = live.ttft_p50_p99();
    let errors = live.errors_by_kind();
    log.push(
        "progress",
        &ProgressEvent {
            utc: bench_report::export::utc_now(),
            elapsed_s: s.elapsed.as_secs_f64(),
            warmup: s.warmup,
            turns_done: s.turns_done,
            turns_planned: s.turns_planned,
            turns_failed: s.turns_failed,
            sessions_done: s.sessions_done,
            active: live.sessions_active().max(0) as u32,
            concurrency: s.concurrency,
            in_flight: live.in_flight(),
            output_tok_s: s.output_tok_s,
            ttft_p50_ms: p50,
            ttft_p99_ms: p99,
            errors_by_kind: &errors,
            fraction: s.fraction(),
            turn_events_skipped: live.turn_events_skipped(),
        },
    );
}

/// A sweep's points into its event log, and the progress counters of the point playing.
struct SweepFeed {
    log: Arc<EventLog>,
    current: Mutex<Option<Arc<bench_run::ProgressCounters>>>,
}

impl SweepObserver for SweepFeed {
    fn point_started(&self, name: &str, level: f64, run: &bench_run::RunHandle) {
        *self.current.lock().unwrap_or_else(|e| e.into_inner()) = Some(run.progress_counters());
        self.log.push(
            "sweep.point_started",
            &serde_json::json!({"utc": bench_report::export::utc_now(), "point": name, "level": level}),
        );
    }

    fn point_ended(&self, _: &str, _: f64, _: Option<&bench_run::RunReport>) {
        *self.current.lock().unwrap_or_else(|e| e.into_inner()) = None;
    }

    fn summary(&self, s: &SweepSummary) {
        if let Some(p) = s.points.last() {
            self.log.push(
                "sweep.point",
                &serde_json::json!({"utc": bench_report::export::utc_now(), "points_done": s.points.len(), "point": p}),
            );
        }
    }
}

impl Control {
    /// A control plane keeping its runs under `cfg.runs_dir`.
    pub fn new(cfg: ControlConfig) -> Arc<Control> {
        let mut secrets = Secrets::from_env();
        secrets.extend(&cfg.secrets);
        Arc::new(Control {
            cfg,
            state: Mutex::default(),
            secrets: Mutex::new(secrets),
        })
    }

    /// Every secret known so far (the environment's, the configuration's, those of every run
    /// started): what no response may show.
    pub fn secrets(&self) -> Secrets {
        self.secrets
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .clone()
    }

    /// Where runs go.
    pub fn runs_dir(&self) -> &Path {
        &self.cfg.runs_dir
    }

    fn state(&self) -> MutexGuard<'_, State> {
        self.state.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// The active run, if any.
    pub fn active(&self) -> Option<Arc<RunEntry>> {
        self.state().active.clone()
    }

    /// The active run, else the latest one this process started.
    pub fn current(&self) -> Option<Arc<RunEntry>> {
        let s = self.state();
        s.active.clone().or_else(|| s.recent.front().cloned())
    }

    /// Starts a run from a `POST /api/runs` body: 201 material, or 400 (bad spec) / 409
    /// (another run is active).
    pub fn start(self: &Arc<Self>, body: &[u8]) -> Result<Arc<RunEntry>, ApiError> {
        let Parsed {
            request: req,
            headers,
            secret_headers,
        } = parse_request(body)?;
        // This run's secrets: scrubbed from its events, and from every response from now on.
        let mut run_secrets = self.secrets();
        run_secrets.add_headers(&headers, &secret_headers);
        self.secrets
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .extend(&run_secrets);
        let kind = match &req {
            Request::Replay(_) => RunKind::Replay,
            Request::Journeys(_) => RunKind::Journeys,
            Request::Sweep(_) => RunKind::Sweep,
        };
        let entry = {
            let mut s = self.state();
            if let Some(a) = &s.active {
                return Err(ApiError::new(
                    409,
                    format!(
                        "run {} is active (one run at a time): cancel it (POST /api/runs/{}/cancel) or wait for it to end",
                        a.id, a.id
                    ),
                )
                .with_active(&a.id));
            }
            let mut id = new_id();
            while self.cfg.runs_dir.join(&id).exists() {
                id = new_id();
            }
            let dir = self.cfg.runs_dir.join(&id);
            let log = std::fs::create_dir_all(&dir)
                .and_then(|()| EventLog::with_file(&dir.join(files::STREAM)))
                .map(|l| l.with_secrets(run_secrets.clone()))
                .map_err(|e| {
                    ApiError::new(
                        500,
                        format!("cannot create the run directory {}: {e}", dir.display()),
                    )
                })?;
            let log = Arc::new(log);
            let entry = Arc::new(RunEntry {
                dir,
                live: Arc::new(Live::new(&id, kind.as_str(), log.clone())),
                id,
                kind,
                created_utc: bench_report::export::utc_now(),
                log,
                state: Mutex::default(),
                cancelled: tokio::sync::Notify::new(),
            });
            s.active = Some(entry.clone());
            entry
        };
        let spec = match &req {
            Request::Replay(s) => serde_json::to_value(s),
            Request::Journeys(s) => serde_json::to_value(s),
            Request::Sweep(s) => serde_json::to_value(s),
        }
        .unwrap_or_default();
        entry.log.push(
            "run.created",
            &serde_json::json!({
                "utc": entry.created_utc,
                "run_id": entry.id,
                "kind": kind,
                "spec": spec,
                "header_names": headers.iter().map(|(k, _)| k).collect::<Vec<_>>(),
                "secret_header_names": secret_headers,
            }),
        );
        let me = self.clone();
        let e = entry.clone();
        tokio::spawn(async move {
            match req {
                Request::Replay(spec) => {
                    me.drive_replay(&e, *spec, headers, secret_headers).await;
                }
                Request::Journeys(spec) => {
                    me.drive_journeys(&e, *spec, headers, secret_headers).await;
                }
                Request::Sweep(spec) => {
                    me.drive_sweep(&e, *spec, headers, secret_headers).await;
                }
            }
            me.retire(&e);
        });
        Ok(entry)
    }

    fn retire(&self, entry: &Arc<RunEntry>) {
        let mut s = self.state();
        if s.active.as_ref().is_some_and(|a| Arc::ptr_eq(a, entry)) {
            s.active = None;
        }
        s.recent.push_front(entry.clone());
        s.recent.truncate(RECENT_RUNS);
    }

    fn notices(log: &Arc<EventLog>) -> Arc<dyn Fn(Notice) + Send + Sync> {
        let log = log.clone();
        Arc::new(move |n: Notice| {
            let (level, message) = match n {
                Notice::Info(m) => ("info", m),
                Notice::Warning(m) => ("warning", m),
            };
            log.push(
                "notice",
                &serde_json::json!({"utc": bench_report::export::utc_now(), "level": level, "message": message}),
            );
        })
    }

    /// The options of a replay this control plane plays into `entry`: its directory, the
    /// request's headers, the configured secrets, graders and hooks, the entry's live figures
    /// and event log.
    fn run_options(
        &self,
        entry: &RunEntry,
        headers: Vec<(String, String)>,
        secret_headers: Vec<String>,
    ) -> RunOptions {
        let mut hooks: Vec<Arc<dyn Hooks>> = vec![entry.live.clone()];
        hooks.extend(self.cfg.hooks.iter().cloned());
        RunOptions {
            run_dir: Some(entry.dir.clone()),
            headers,
            secret_headers,
            secrets: self.cfg.secrets.clone(),
            observers: vec![entry.live.clone()],
            notices: Some(Self::notices(&entry.log)),
            hooks,
            graders: self.cfg.graders.clone(),
            ..RunOptions::default()
        }
    }

    async fn drive_replay(
        &self,
        entry: &RunEntry,
        spec: RunSpec,
        headers: Vec<(String, String)>,
        secret_headers: Vec<String>,
    ) {
        let options = self.run_options(entry, headers, secret_headers);
        let Some(handle) = started(entry, bench_run::start(spec, options)).await else {
            return;
        };
        let canceller = handle.canceller();
        let rx = entry.running(
            Arc::new(move || canceller.cancel(bench_run::CancelledBy::Caller)),
            handle.events_with_history(),
        );
        let counters = handle.progress_counters();
        let log = entry.log.clone();
        let live = entry.live.clone();
        let tick = move || push_progress(&log, &live, &counters.snapshot_now());
        let result = follow(&entry.log, rx, handle.wait(), tick).await;
        match result {
            Ok(report) => {
                let status = RunStatus::from_stop(report.stopped_by);
                let mut s = Summary::from_result(
                    &report.result,
                    Some(report.stopped_by),
                    Some(report.reason.clone()),
                );
                let v = report.gate().err();
                s.passed = Some(v.is_none());
                s.failed_because = v;
                entry.finish(status, Some(s), None);
            }
            Err(e) => entry.finish(RunStatus::Failed, None, Some(e.to_string())),
        }
    }

    async fn drive_journeys(
        &self,
        entry: &RunEntry,
        spec: JourneysSpec,
        headers: Vec<(String, String)>,
        secret_headers: Vec<String>,
    ) {
        let mut hooks: Vec<Arc<dyn Hooks>> = vec![entry.live.clone()];
        hooks.extend(self.cfg.hooks.iter().cloned());
        let log = entry.log.clone();
        let on_run = move |name: &str, row: &bench_journeys::RunRow| {
            log.push(
                "journey.run",
                &serde_json::json!({
                    "utc": bench_report::export::utc_now(),
                    "journey": name,
                    "run": row.run,
                    "n_success": row.n_success,
                    "n_failures": row.n_failures,
                    "p50_ms": row.p50_ms,
                    "p99_ms": row.p99_ms,
                    "setup_failure": row.setup_failure,
                }),
            );
        };
        let options = JourneysOptions {
            run_dir: Some(entry.dir.clone()),
            headers,
            secret_headers,
            secrets: self.cfg.secrets.clone(),
            hooks,
            on_run: Some(Arc::new(on_run)),
            notices: Some(Self::notices(&entry.log)),
        };
        let start = bench_run::journeys::start_journeys(spec, options);
        let Some(handle) = started(entry, start).await else {
            return;
        };
        let cancel = handle.canceller();
        let rx = entry.running(
            Arc::new(move || cancel.cancel(bench_run::CancelledBy::Caller)),
            handle.events_with_history(),
        );
        let result = follow(&entry.log, rx, handle.wait(), || {}).await;
        match result {
            Ok(r) => {
                let status = if entry.cancel_requested() {
                    RunStatus::Cancelled
                } else {
                    RunStatus::from_stop(r.stopped_by)
                };
                let s = Summary::of_journeys(&r.report, r.stopped_by, &r.problems);
                entry.finish(status, Some(s), None);
            }
            Err(e) => entry.finish(RunStatus::Failed, None, Some(e.to_string())),
        }
    }

    /// Plays a sweep into the entry's directory (a point's run directory in it per level):
    /// a `sweep.point` event as each point ends, `progress` events of the point playing; a
    /// cancel starts no further point and lets the current one's turns finish.
    async fn drive_sweep(
        &self,
        entry: &RunEntry,
        spec: SweepSpec,
        headers: Vec<(String, String)>,
        secret_headers: Vec<String>,
    ) {
        let stop = Arc::new(Stopper::default());
        let feed = Arc::new(SweepFeed {
            log: entry.log.clone(),
            current: Mutex::default(),
        });
        let options = SweepOptions {
            dir: Some(entry.dir.clone()),
            // Each point's run directory is DIR/<point>, not the entry's.
            run: RunOptions {
                run_dir: None,
                ..self.run_options(entry, headers, secret_headers)
            },
            stop: stop.clone(),
            observer: Some(feed.clone()),
        };
        let cancel = stop.clone();
        entry.running(
            Arc::new(move || cancel.stop(bench_run::CancelledBy::Caller)),
            (Vec::new(), EventStream::ended()),
        );
        let log = entry.log.clone();
        let live = entry.live.clone();
        let tick = move || {
            let counters = feed
                .current
                .lock()
                .unwrap_or_else(|e| e.into_inner())
                .clone();
            if let Some(c) = counters {
                push_progress(&log, &live, &c.snapshot_now());
            }
        };
        let result = follow(
            &entry.log,
            EventStream::ended(),
            bench_run::sweep::play(spec, options),
            tick,
        )
        .await;
        match result {
            Ok(o) => {
                let status = match o.summary.stop {
                    SweepStop::Completed | SweepStop::Saturated { .. } => RunStatus::Completed,
                    SweepStop::Interrupted => RunStatus::Cancelled,
                    SweepStop::Failed { .. } | SweepStop::Running => RunStatus::Failed,
                };
                let gate = o.gate().map_err(|e| e.to_string());
                let error = match (&o.summary.stop, &gate) {
                    (SweepStop::Failed { .. }, Err(e)) => Some(e.clone()),
                    _ => None,
                };
                entry.finish(
                    status,
                    Some(Summary::of_sweep(&o.summary, Some(gate))),
                    error,
                );
            }
            Err(e) => entry.finish(RunStatus::Failed, None, Some(e.to_string())),
        }
    }

    /// Finds a run: this process's, else its directory. 400 for an invalid id, 404 when none.
    pub fn find(&self, id: &str) -> Result<Found, ApiError> {
        if !valid_id(id) {
            return Err(ApiError::new(
                400,
                format!(
                    "{id:?} is not a run id (letters, digits, '.', '_', '-'; not starting with '.')"
                ),
            ));
        }
        {
            let s = self.state();
            if let Some(e) = s.active.iter().chain(s.recent.iter()).find(|e| e.id == id) {
                return Ok(Found::Live(e.clone()));
            }
        }
        DiskRun::read(id, &self.cfg.runs_dir.join(id))
            .map(|d| Found::Disk(Box::new(d)))
            .ok_or_else(|| ApiError::new(404, format!("no run {id}")))
    }

    /// Every run: the active one, the recent ones, then those in the runs directory, newest
    /// first.
    pub fn list(&self) -> Vec<RunView> {
        let live: Vec<Arc<RunEntry>> = {
            let s = self.state();
            s.active.iter().chain(s.recent.iter()).cloned().collect()
        };
        let mut out: Vec<RunView> = live.iter().map(|e| e.view()).collect();
        let mut names: Vec<String> = std::fs::read_dir(&self.cfg.runs_dir)
            .map(|d| {
                d.filter_map(Result::ok)
                    .filter_map(|e| e.file_name().into_string().ok())
                    .filter(|n| valid_id(n) && !live.iter().any(|e| &e.id == n))
                    .collect()
            })
            .unwrap_or_default();
        names.sort_unstable_by(|a, b| b.cmp(a));
        for n in names.into_iter().take(LISTED_FROM_DISK) {
            if let Some(d) = DiskRun::read(&n, &self.cfg.runs_dir.join(&n)) {
                out.push(d.view);
            }
        }
        out.sort_by(|a, b| b.created_utc.cmp(&a.created_utc));
        out
    }

    /// Cancels the active run (for a shutdown) and waits until it has ended.
    pub async fn shutdown(&self) {
        let Some(a) = self.active() else { return };
        a.cancel();
        while !a.log.is_closed() {
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
    }
}

/// The handle `start` gives, unless the start fails (the run ends `failed`) or a cancel comes
/// while it plans or waits for its server (it ends `cancelled` there).
async fn started<H>(
    entry: &RunEntry,
    start: impl std::future::Future<Output = Result<H, bench_run::RunError>>,
) -> Option<H> {
    tokio::select! {
        r = start => match r {
            Ok(h) => Some(h),
            Err(e) => {
                entry.finish(RunStatus::Failed, None, Some(e.to_string()));
                None
            }
        },
        () = entry.cancelled.notified() => {
            entry.finish(RunStatus::Cancelled, Some(Summary::before_start()), None);
            None
        }
    }
}

/// Forwards lifecycle events and ticks progress until the run ends; then the rest of the
/// events. Returns the run's outcome.
async fn follow<T>(
    log: &EventLog,
    mut rx: EventStream,
    wait: impl std::future::Future<Output = T>,
    tick: impl Fn(),
) -> T {
    tokio::pin!(wait);
    let mut every = tokio::time::interval(Duration::from_secs(1));
    every.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Skip);
    every.tick().await;
    let mut open = true;
    let out = loop {
        tokio::select! {
            r = &mut wait => break r,
            ev = rx.recv(), if open => match ev {
                Received::Event(e) => push_lifecycle(log, &e),
                Received::Missed(n) => {
                    log.push("notice", &serde_json::json!({
                        "utc": bench_report::export::utc_now(),
                        "level": "warning",
                        "message": format!("{n} lifecycle events were missed (they are in events.jsonl)"),
                    }));
                }
                Received::Ended => open = false,
            },
            _ = every.tick() => tick(),
        }
    };
    // The run has ended: what it emitted last (its stop) is in the channel already.
    loop {
        match rx.try_recv() {
            Some(Received::Event(e)) => push_lifecycle(log, &e),
            Some(Received::Missed(_)) => continue,
            Some(Received::Ended) | None => break,
        }
    }
    tick();
    out
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use super::*;

    #[test]
    fn a_saved_stream_is_listed_from_its_first_and_last_lines_and_a_torn_end_is_unfinished() {
        let tmp = tempfile::tempdir().unwrap();
        let dir = tmp.path();
        let created =
            r#"{"id":1,"event":"run.created","utc":"2026-01-01T00:00:00Z","kind":"replay"}"#;
        let turn =
            r#"{"id":2,"event":"turn.completed","utc":"2026-01-01T00:00:01Z","status":"ok"}"#;
        let end = r#"{"id":3,"event":"run.cancelled","utc":"2026-01-01T00:00:02Z","status":"cancelled","summary":{"turns_total":1}}"#;
        let path = dir.join(files::STREAM);
        std::fs::write(&path, format!("{created}\n{turn}\n{end}\n")).unwrap();
        let run = DiskRun::read("r", dir).unwrap();
        assert_eq!(run.view.status, RunStatus::Cancelled);
        assert_eq!(
            run.view.finished_utc.as_deref(),
            Some("2026-01-01T00:00:02Z")
        );
        assert_eq!(run.view.summary.as_ref().unwrap()["turns_total"], 1);
        assert_eq!(run.log().last_id(), 3);
        // A crash cut the terminal line: the run is unfinished, the turn line does not pass
        // for an end, and the stream has the two complete events.
        std::fs::write(&path, format!("{created}\n{turn}\n{}", &end[..40])).unwrap();
        let run = DiskRun::read("r", dir).unwrap();
        assert_eq!(run.view.status, RunStatus::Unfinished);
        assert_eq!(run.log().last_id(), 2);
        assert!(run.log().terminal().is_none());
    }
}
