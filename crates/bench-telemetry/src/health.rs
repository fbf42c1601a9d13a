//! Run health (`bench status`): what a run directory says about its run, read by another process,
//! possibly after a crash.
//!
//! [`status`] reads `events.jsonl`, `turns.jsonl`, `sessions.jsonl` and `run.json` and computes a
//! [`Status`]: whether the run stopped and why, its phase, whether its process is running, gone
//! or unknown, whether it crashed or stalled, its progress, its tokens and the time it has left.
//! The clock, the host name and the process table come from a [`System`], so that every case can
//! be built in tests without real processes; [`LocalSystem`] is the real one.
//! [`Status::text`] renders a status as the lines `bench status` prints.
//!
//! Rules (also in `docs/telemetry.md`, "bench status"):
//!
//! - **Stop.** A `run.stopped` event counts only when it comes after the latest `run.started` or
//!   `run.resumed` event in the file (a resumed run's earlier stop does not count).
//! - **Process.** The latest start/resume event carries `pid`, `host` and `process_start_utc`.
//!   On another host (or without a recorded host or pid) the process is `unknown`. On this host:
//!   no such pid (or a zombie) is `gone`; a live pid that started more than [`PID_REUSE_SLACK`]
//!   after the recorded process start (or, without one, after the start event) is a reused pid:
//!   `gone`; otherwise `running`.
//! - **Crashed**: the process is `gone` and no stop counts.
//! - **Phase**: `null` once stopped or crashed; otherwise the latest `phase` event since the
//!   latest start/resume (`warmup`, `measuring`, or whatever the run wrote, e.g. `draining`),
//!   `starting` before the first one, and `draining` once the `--duration` deadline (counted
//!   from the start/resume event) has passed.
//! - **Stalled** (judged only while not stopped or crashed, and only when the run writes
//!   heartbeats): the latest heartbeat says turns are in flight and no turn finished (its
//!   `end_utc`; the start/resume event counts as the first sign of life) for the stall limit, or
//!   the heartbeats themselves stopped for the stall limit.
//! - **Progress**: `turns.jsonl` and `sessions.jsonl` records, warmup ones and ones marked
//!   `superseded` left out, each (session, replay, turn) counted once; planned counts come from
//!   the start/resume event (else `run.json` `plan`).
//! - **Tokens**: summed over `ok` turns, `tokens` over measured ones, `tokens_by_phase` split
//!   into warmup and measuring.
//! - **Time left** (`null` once stopped or crashed, or when unknown): with a duration, the time
//!   to its deadline; otherwise the turns left at the pace of the last [`RECENT_HEARTBEATS`]
//!   heartbeat intervals, less the time since the latest heartbeat; never beyond the
//!   `--max-duration` fuse.
//! - **Torn lines**: an unparseable last line without a newline (a write cut by a crash) is
//!   ignored and counted in `torn_lines`; other unparseable lines are skipped and counted in
//!   `bad_lines`.
//!
//! Plain synchronous code: reads files and `/proc`, no runtime.

use std::collections::HashMap;
use std::path::{Path, PathBuf};
use std::time::Duration;

use bench_rundir::{
    EventLine, Heartbeat, LifecycleEvent, Opened, Phase, RunJsonHead, SessionRecord, StopBy,
    TurnRecord, TurnStatus, files, jsonl,
};
use serde::de::DeserializeOwned;
use serde::{Deserialize, Serialize};
use time::OffsetDateTime;
use time::format_description::well_known::Rfc3339;

mod text;

/// The default stall limit (`--stall-after`).
pub const DEFAULT_STALL_AFTER: Duration = Duration::from_secs(120);

/// How much later than the recorded process start a live pid may have started and still be the
/// run's process (the boot time in `/proc/stat` is whole seconds and may drift).
pub const PID_REUSE_SLACK: Duration = Duration::from_secs(2);

/// How many of the latest heartbeat intervals the pace is taken from.
pub const RECENT_HEARTBEATS: usize = 5;

/// Clock ticks per second of `/proc/<pid>/stat` times (`USER_HZ`, 100 on every Linux ABI).
const USER_HZ: f64 = 100.0;

/// What the process table says about a pid.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Liveness {
    /// A live process with that pid, started at this time.
    Alive {
        /// When it started (UTC).
        started: OffsetDateTime,
    },
    /// No live process has that pid (a zombie counts as none).
    NoSuchProcess,
    /// The process table could not be read.
    Unknown,
}

/// The clock, the host name and the process table a status is computed against.
pub trait System {
    /// The current time.
    fn now(&self) -> OffsetDateTime;
    /// This host's name, `None` when it cannot be read.
    fn hostname(&self) -> Option<String>;
    /// What the process table says about `pid`.
    fn process(&self, pid: u32) -> Liveness;
}

/// The real system: the wall clock, [`hostname`] and [`process_liveness`].
///
/// `process_start_utc` may be recorded in whole seconds (truncated): [`PID_REUSE_SLACK`] covers it.
#[derive(Clone, Copy, Debug, Default)]
pub struct LocalSystem;

impl System for LocalSystem {
    fn now(&self) -> OffsetDateTime {
        OffsetDateTime::now_utc()
    }
    fn hostname(&self) -> Option<String> {
        hostname()
    }
    fn process(&self, pid: u32) -> Liveness {
        process_liveness(pid)
    }
}

/// This host's name (`/etc/hostname`, else `$HOSTNAME`, else `/proc/sys/kernel/hostname`, the
/// order `bench run` records its `host` in), `None` when none is set.
pub fn hostname() -> Option<String> {
    let read = |p: &str| std::fs::read_to_string(p).ok();
    read("/etc/hostname")
        .filter(|s| !s.trim().is_empty())
        .or_else(|| std::env::var("HOSTNAME").ok())
        .filter(|s| !s.trim().is_empty())
        .or_else(|| read("/proc/sys/kernel/hostname"))
        .map(|s| s.trim().to_owned())
        .filter(|s| !s.is_empty())
}

/// When the process `pid` started, from `/proc/<pid>/stat` (field 22, clock ticks since boot)
/// and `/proc/stat` `btime`; the value a run should record as its `process_start_utc`
/// (`process_liveness(std::process::id())`).
pub fn process_liveness(pid: u32) -> Liveness {
    let stat = match std::fs::read_to_string(format!("/proc/{pid}/stat")) {
        Ok(s) => s,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => {
            // No `/proc` at all (not Linux) tells nothing.
            return if Path::new("/proc/self/stat").exists() {
                Liveness::NoSuchProcess
            } else {
                Liveness::Unknown
            };
        }
        Err(_) => return Liveness::Unknown,
    };
    let Some((state, ticks)) = parse_pid_stat(&stat) else {
        return Liveness::Unknown;
    };
    if matches!(state, 'Z' | 'X' | 'x') {
        return Liveness::NoSuchProcess;
    }
    let Some(btime) = std::fs::read_to_string("/proc/stat")
        .ok()
        .and_then(|s| parse_btime(&s))
    else {
        return Liveness::Unknown;
    };
    let started = OffsetDateTime::from_unix_timestamp(btime)
        .ok()
        .map(|b| b + Duration::from_secs_f64(ticks as f64 / USER_HZ));
    started.map_or(Liveness::Unknown, |started| Liveness::Alive { started })
}

/// The state (field 3) and start time in ticks (field 22) of a `/proc/<pid>/stat` line. The
/// command name (field 2) is in parentheses and may hold spaces and parentheses itself.
fn parse_pid_stat(stat: &str) -> Option<(char, u64)> {
    let rest = &stat[stat.rfind(')')? + 1..];
    let mut fields = rest.split_whitespace();
    let state = fields.next()?.chars().next()?;
    // Fields 4..=21 come before the start time.
    let ticks = fields.nth(18)?.parse().ok()?;
    Some((state, ticks))
}

/// The boot time (`btime`, Unix seconds) from `/proc/stat`.
fn parse_btime(stat: &str) -> Option<i64> {
    stat.lines()
        .find_map(|l| l.strip_prefix("btime "))
        .and_then(|v| v.trim().parse().ok())
}

/// Why a run stopped, as it recorded it.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct Stop {
    /// What stopped it.
    pub by: StopBy,
    /// A sentence.
    pub reason: String,
}

/// Whether the run's process still runs.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Process {
    /// It runs (on this host).
    Running,
    /// It is gone (no such pid, or the pid now belongs to a later process).
    Gone,
    /// It cannot be told: another host, no recorded pid or host, or an unreadable process table.
    Unknown,
}

impl Process {
    /// `running`, `gone` or `unknown`.
    pub fn as_str(self) -> &'static str {
        match self {
            Process::Running => "running",
            Process::Gone => "gone",
            Process::Unknown => "unknown",
        }
    }
}

/// Token sums of `ok` turns, as the records report them (a missing count adds nothing).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct Tokens {
    /// Prompt tokens.
    pub input: u64,
    /// Output tokens.
    pub output: u64,
    /// Prompt tokens served from the prefix cache.
    pub cached: u64,
}

/// [`Tokens`] by phase.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct PhaseTokens {
    /// Turns of the unmeasured warmup.
    pub warmup: Tokens,
    /// Measured turns.
    pub measuring: Tokens,
}

/// What a run is doing now (`bench status --json`; the keys are stable).
#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct Status {
    /// The run directory.
    pub run_dir: PathBuf,
    /// Why the run stopped; `None` while it has not (since its latest start or resume).
    pub stopped: Option<Stop>,
    /// `starting`, `warmup`, `measuring` or `draining`; `None` once stopped or crashed.
    pub phase: Option<String>,
    /// Whether the run's process still runs.
    pub process: Process,
    /// The process is gone and no stop counts.
    pub crashed: bool,
    /// Turns in flight and none finished for the stall limit, or heartbeats stopped for it.
    pub stalled: bool,
    /// Measured session plays finished.
    pub sessions_done: u64,
    /// Sessions in the plan.
    pub sessions_planned: Option<u64>,
    /// Measured turns finished (ok or not).
    pub turns_done: u64,
    /// Turns in the plan.
    pub turns_planned: Option<u64>,
    /// Estimated seconds left; `None` when unknown, stopped or crashed.
    pub time_left_s: Option<f64>,
    /// Tokens of measured `ok` turns.
    pub tokens: Tokens,
    /// Tokens of `ok` turns by phase.
    pub tokens_by_phase: PhaseTokens,
    /// Turns in flight at the latest heartbeat since the latest start or resume.
    pub in_flight: Option<u64>,
    /// When the latest turn (any phase, any status) finished.
    pub last_turn_utc: Option<String>,
    /// When the latest start or resume was recorded.
    pub opened_utc: Option<String>,
    /// How many times the run was resumed.
    pub resumes: u64,
    /// The pid of the process that started or resumed the run last.
    pub pid: Option<u32>,
    /// The host it ran on.
    pub host: Option<String>,
    /// Torn last lines ignored (one per JSONL file at most).
    pub torn_lines: u64,
    /// Other unreadable lines skipped.
    pub bad_lines: u64,
}

/// Why a run directory could not be read.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum HealthError {
    /// The directory does not exist.
    #[error("{}: no such run directory", path.display())]
    NotFound {
        /// The path given.
        path: PathBuf,
    },
    /// The directory holds neither `run.json` nor `events.jsonl`.
    #[error("{}: not a run directory (no run.json or events.jsonl)", path.display())]
    NotARunDir {
        /// The path given.
        path: PathBuf,
    },
    /// A file could not be read.
    #[error("{}: {source}", path.display())]
    Io {
        /// The file.
        path: PathBuf,
        /// The error.
        #[source]
        source: std::io::Error,
    },
}

/// Reads one JSONL file of the run directory.
fn read_jsonl<T: DeserializeOwned>(dir: &Path, name: &str) -> Result<jsonl::Lines<T>, HealthError> {
    jsonl::read(&dir.join(name)).map_err(|e| HealthError::Io {
        path: e.path,
        source: e.source,
    })
}

/// Reads the run directory `dir` and computes its [`Status`] against `sys`, with the stall limit
/// `stall_after`.
pub fn status(dir: &Path, stall_after: Duration, sys: &dyn System) -> Result<Status, HealthError> {
    match std::fs::metadata(dir) {
        Ok(m) if m.is_dir() => {}
        Ok(_) => {
            return Err(HealthError::NotARunDir {
                path: dir.to_owned(),
            });
        }
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => {
            return Err(HealthError::NotFound {
                path: dir.to_owned(),
            });
        }
        Err(source) => {
            return Err(HealthError::Io {
                path: dir.to_owned(),
                source,
            });
        }
    }
    let run_json_path = dir.join(files::RUN_JSON);
    let run_json: Option<RunJsonHead> = match std::fs::read(&run_json_path) {
        Ok(b) => serde_json::from_slice(&b).ok(),
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => None,
        Err(source) => {
            return Err(HealthError::Io {
                path: run_json_path,
                source,
            });
        }
    };
    if !run_json_path.exists() && !dir.join(files::EVENTS).exists() {
        return Err(HealthError::NotARunDir {
            path: dir.to_owned(),
        });
    }
    let events = read_jsonl::<EventLine>(dir, files::EVENTS)?;
    let turns = read_jsonl::<TurnRecord>(dir, files::TURNS)?;
    let sessions = read_jsonl::<SessionRecord>(dir, files::SESSIONS)?;
    // scrapes.jsonl is read only for its torn line.
    let scrapes = read_jsonl::<serde::de::IgnoredAny>(dir, files::SCRAPES)?;
    let torn = [
        events.torn.is_some(),
        turns.torn.is_some(),
        sessions.torn.is_some(),
        scrapes.torn.is_some(),
    ]
    .into_iter()
    .filter(|&t| t)
    .count() as u64;
    let bad = (events.bad.len() + turns.bad.len() + sessions.bad.len() + scrapes.bad.len()) as u64;
    let mut s = evaluate(
        &events.records,
        &turns.records,
        &sessions.records,
        run_json.as_ref(),
        stall_after,
        sys,
    );
    s.run_dir = dir.to_owned();
    s.torn_lines = torn;
    s.bad_lines = bad;
    Ok(s)
}

fn parse_utc(s: &str) -> Option<OffsetDateTime> {
    OffsetDateTime::parse(s, &Rfc3339).ok()
}

fn format_utc(t: OffsetDateTime) -> Option<String> {
    t.format(&Rfc3339).ok()
}

fn seconds(d: time::Duration) -> f64 {
    d.as_seconds_f64()
}

/// The status from the parsed files.
fn evaluate(
    events: &[EventLine],
    turns: &[TurnRecord],
    sessions: &[SessionRecord],
    run_json: Option<&RunJsonHead>,
    stall_after: Duration,
    sys: &dyn System,
) -> Status {
    let now = sys.now();
    let open_at = events.iter().rposition(|e| {
        matches!(
            e.event,
            LifecycleEvent::Started(_) | LifecycleEvent::Resumed(_)
        )
    });
    let open: Option<&Opened> = open_at.and_then(|i| match &events[i].event {
        LifecycleEvent::Started(o) => Some(o),
        LifecycleEvent::Resumed(r) => Some(&r.opened),
        _ => None,
    });
    let current = &events[open_at.map_or(0, |i| i + 1)..];
    let opened = open_at.and_then(|i| parse_utc(&events[i].utc));
    let stopped = current.iter().rev().find_map(|e| match &e.event {
        LifecycleEvent::Stopped { by, reason } => Some(Stop {
            by: *by,
            reason: reason.clone(),
        }),
        _ => None,
    });
    let plan = run_json.and_then(|r| r.plan);
    let pid = open
        .and_then(|o| o.pid)
        .or_else(|| run_json.and_then(|r| r.pid));
    let host = open.and_then(|o| o.host.clone()).filter(|h| !h.is_empty());

    // The process.
    let process = match (open, pid, &host) {
        (Some(o), Some(pid), Some(host)) if sys.hostname().as_deref() == Some(host.as_str()) => {
            match sys.process(pid) {
                Liveness::NoSuchProcess => Process::Gone,
                Liveness::Unknown => Process::Unknown,
                Liveness::Alive { started } => {
                    let recorded = o
                        .process_start_utc
                        .as_deref()
                        .and_then(parse_utc)
                        .or(opened);
                    match recorded {
                        Some(r) if started > r + PID_REUSE_SLACK => Process::Gone,
                        _ => Process::Running,
                    }
                }
            }
        }
        _ => Process::Unknown,
    };
    let crashed = open.is_some() && stopped.is_none() && process == Process::Gone;
    let active = open.is_some() && stopped.is_none() && !crashed;

    // Records: each (session, replay, turn) once, the latest record winning.
    let mut latest: HashMap<(&str, u32, u32, bool), &TurnRecord> = HashMap::new();
    for t in turns.iter().filter(|t| !t.superseded) {
        latest.insert((&t.session_id, t.replay, t.turn_index, t.warmup), t);
    }
    let mut tokens = PhaseTokens::default();
    let mut turns_done = 0;
    for t in latest.values() {
        if !t.warmup {
            turns_done += 1;
        }
        if t.status == TurnStatus::Ok {
            let sum = if t.warmup {
                &mut tokens.warmup
            } else {
                &mut tokens.measuring
            };
            // Saturating: a corrupt record may hold any count.
            sum.input = sum.input.saturating_add(t.input_tokens.unwrap_or(0));
            sum.output = sum.output.saturating_add(t.output_tokens.unwrap_or(0));
            sum.cached = sum.cached.saturating_add(t.cached_tokens.unwrap_or(0));
        }
    }
    let last_turn = turns.iter().filter_map(|t| parse_utc(&t.end_utc)).max();
    let sessions_done = sessions
        .iter()
        .filter(|s| !s.warmup && !s.superseded)
        .map(|s| (s.session_id.as_str(), s.replay))
        .collect::<std::collections::HashSet<_>>()
        .len() as u64;
    let turns_planned = open.and_then(|o| o.turns_planned).or(plan.map(|p| p.turns));
    let sessions_planned = open
        .and_then(|o| o.sessions_planned)
        .or(plan.map(|p| p.sessions));

    // Deadlines, counted from the latest start or resume.
    let deadline = |secs: Option<f64>| Some(opened? + Duration::try_from_secs_f64(secs?).ok()?);
    let duration_deadline = deadline(open.and_then(|o| o.duration_s));
    let fuse = deadline(open.and_then(|o| o.max_duration_s));

    let phase = active.then(|| {
        let written = current.iter().rev().find_map(|e| match e.event {
            LifecycleEvent::Phase { phase } => Some(phase),
            _ => None,
        });
        match (written, duration_deadline) {
            (Some(Phase::Warmup | Phase::Measuring) | None, Some(d)) if now > d => {
                Phase::Draining.as_str().to_owned()
            }
            (Some(p), _) => p.as_str().to_owned(),
            (None, _) => "starting".to_owned(),
        }
    });

    // Heartbeats since the latest start or resume, with their times.
    let beats: Vec<(OffsetDateTime, &Heartbeat)> = current
        .iter()
        .filter_map(|e| match &e.event {
            LifecycleEvent::Heartbeat(h) => Some((parse_utc(&e.utc)?, h)),
            _ => None,
        })
        .collect();
    let in_flight = beats.last().map(|(_, b)| b.in_flight);
    let limit = time::Duration::try_from(stall_after).unwrap_or(time::Duration::MAX);
    let stalled = active
        && beats.last().is_some_and(|(at, _)| {
            let life = [opened, last_turn].into_iter().flatten().max();
            let stuck = in_flight.unwrap_or(0) > 0 && life.is_some_and(|l| now - l > limit);
            stuck || now - *at > limit
        });

    let time_left_s = if active {
        let left = |d: OffsetDateTime| seconds(d - now).max(0.0);
        let estimate = match duration_deadline {
            Some(d) => Some(left(d)),
            None => pace_left(&beats, turns_planned, turns_done, now),
        };
        match (estimate, fuse) {
            (Some(e), Some(f)) => Some(e.min(left(f))),
            (e, _) => e,
        }
    } else {
        None
    };

    Status {
        run_dir: PathBuf::new(),
        stopped,
        phase,
        process,
        crashed,
        stalled,
        sessions_done,
        sessions_planned,
        turns_done,
        turns_planned,
        time_left_s,
        tokens: tokens.measuring,
        tokens_by_phase: tokens,
        in_flight,
        last_turn_utc: last_turn.and_then(format_utc),
        opened_utc: opened.and_then(format_utc),
        resumes: events
            .iter()
            .filter(|e| matches!(e.event, LifecycleEvent::Resumed(_)))
            .count() as u64,
        pid,
        host,
        torn_lines: 0,
        bad_lines: 0,
    }
}

/// Seconds for the turns left at the pace of the recent heartbeats, less the time since the
/// latest one; `None` without two heartbeats, progress between them, or a plan size.
fn pace_left(
    beats: &[(OffsetDateTime, &Heartbeat)],
    planned: Option<u64>,
    done: u64,
    now: OffsetDateTime,
) -> Option<f64> {
    let recent = &beats[beats.len().saturating_sub(RECENT_HEARTBEATS + 1)..];
    let (first, last) = (recent.first()?, recent.last()?);
    let span = seconds(last.0 - first.0);
    let progress = last.1.turns_done as f64 - first.1.turns_done as f64;
    if span <= 0.0 || progress <= 0.0 {
        return None;
    }
    let left = planned?.saturating_sub(done) as f64;
    Some((left * span / progress - seconds(now - last.0)).max(0.0))
}

#[cfg(test)]
#[allow(clippy::unwrap_used, clippy::expect_used)]
mod tests {
    use super::*;
    use serde_json::{Value, json};
    use std::io::Write;

    /// 2025-01-01T00:00:00Z plus `s` seconds.
    fn at(s: f64) -> OffsetDateTime {
        OffsetDateTime::from_unix_timestamp(1_735_689_600).unwrap() + time::Duration::seconds_f64(s)
    }

    fn ts(s: f64) -> String {
        format_utc(at(s)).unwrap()
    }

    /// A constructed system: a fixed clock, a host and a process table.
    struct Fake {
        now: f64,
        host: &'static str,
        procs: HashMap<u32, f64>,
    }

    impl Fake {
        fn new(now: f64) -> Self {
            Fake {
                now,
                host: "box",
                procs: HashMap::new(),
            }
        }
        fn with(mut self, pid: u32, started: f64) -> Self {
            self.procs.insert(pid, started);
            self
        }
    }

    impl System for Fake {
        fn now(&self) -> OffsetDateTime {
            at(self.now)
        }
        fn hostname(&self) -> Option<String> {
            Some(self.host.to_owned())
        }
        fn process(&self, pid: u32) -> Liveness {
            self.procs
                .get(&pid)
                .map_or(Liveness::NoSuchProcess, |s| Liveness::Alive {
                    started: at(*s),
                })
        }
    }

    /// A run directory under the system temp dir, removed on drop.
    struct Dir(tempfile::TempDir);

    impl Dir {
        fn new(name: &str) -> Dir {
            let d = tempfile::Builder::new()
                .prefix(&format!("bench-health-{name}-"))
                .tempdir()
                .unwrap();
            std::fs::write(d.path().join("run.json"), "{}\n").unwrap();
            Dir(d)
        }
        fn path(&self) -> &Path {
            self.0.path()
        }
        fn append(&self, file: &str, lines: &[Value]) -> &Self {
            let mut f = std::fs::OpenOptions::new()
                .create(true)
                .append(true)
                .open(self.path().join(file))
                .unwrap();
            for l in lines {
                writeln!(f, "{l}").unwrap();
            }
            self
        }
        fn append_raw(&self, file: &str, text: &str) -> &Self {
            let mut f = std::fs::OpenOptions::new()
                .create(true)
                .append(true)
                .open(self.path().join(file))
                .unwrap();
            f.write_all(text.as_bytes()).unwrap();
            self
        }
        fn status(&self, sys: &Fake) -> Status {
            status(self.path(), DEFAULT_STALL_AFTER, sys).unwrap()
        }
    }

    fn open(kind: &str, t: f64, pid: u32, host: &str) -> Value {
        json!({
            "event": kind, "utc": ts(t), "pid": pid, "host": host,
            "process_start_utc": ts(t - 1.0), "sessions_planned": 4, "turns_planned": 8,
            "concurrency": 2, "rate": null, "duration_s": null, "max_duration_s": null,
        })
    }

    fn phase(t: f64, p: &str) -> Value {
        json!({"event": "phase", "utc": ts(t), "phase": p})
    }

    fn beat(t: f64, turns_done: u64, in_flight: u64) -> Value {
        json!({
            "event": "heartbeat", "utc": ts(t), "elapsed_s": t, "turns_done": turns_done,
            "in_flight": in_flight, "active_sessions": 2,
            "tokens": {"input": 0, "output": 0, "cached": 0},
        })
    }

    fn stop(t: f64, by: &str) -> Value {
        json!({"event": "run.stopped", "utc": ts(t), "by": by, "reason": format!("{by} reason")})
    }

    /// `fields` over a whole record of the run directory's schema.
    fn record(mut whole: Value, fields: Value) -> Value {
        if let (Some(w), Value::Object(f)) = (whole.as_object_mut(), fields) {
            w.extend(f);
        }
        whole
    }

    fn turn(session: &str, index: u32, end: f64, warmup: bool) -> Value {
        let whole = json!({
            "session_id": "", "replay": 0, "turn_index": 0, "status": "ok", "error_kind": null,
            "error": null, "ttft_ms": 1.0, "e2e_ms": 2.0, "tpot_ms": null, "chunk_gaps_ms": [],
            "input_tokens": null, "input_tokens_source": null, "output_tokens": null,
            "output_tokens_source": null, "cached_tokens": null, "cached_device_tokens": null,
            "cached_host_tokens": null, "max_output_tokens": 10, "recorded_output_tokens": null,
            "active_at_dispatch": 1, "due_s": 0.0, "sent_s": 0.0, "first_token_s": null,
            "end_s": end, "sent_utc": "", "end_utc": "", "worker": null, "redials": 0,
            "warmup": false,
        });
        record(
            whole,
            json!({
                "session_id": session, "replay": 0, "turn_index": index, "status": "ok",
                "input_tokens": 100, "output_tokens": 10, "cached_tokens": 50,
                "end_utc": ts(end), "warmup": warmup,
            }),
        )
    }

    fn session(id: &str, warmup: bool) -> Value {
        let whole = json!({
            "session_id": "", "replay": 0, "status": "completed", "turns_played": 2,
            "turns_planned": 2, "output_tokens": 20, "busy_s": 1.0, "marker": null,
            "warmup": false,
        });
        record(
            whole,
            json!({"session_id": id, "replay": 0, "status": "completed", "warmup": warmup}),
        )
    }

    /// A run with a warmup turn, then 4 measured turns (2 sessions) up to t = 40, heartbeats
    /// every 10 s, opened at t = 0 by pid 42 on `box`.
    fn running_dir(name: &str) -> Dir {
        let d = Dir::new(name);
        d.append(
            "events.jsonl",
            &[
                open("run.started", 0.0, 42, "box"),
                phase(0.5, "warmup"),
                phase(5.0, "measuring"),
                beat(10.0, 1, 2),
                beat(20.0, 2, 2),
                beat(30.0, 3, 2),
                beat(40.0, 4, 2),
            ],
        )
        .append(
            "turns.jsonl",
            &[
                turn("w", 0, 4.0, true),
                turn("a", 0, 9.0, false),
                turn("a", 1, 19.0, false),
                turn("b", 0, 29.0, false),
                turn("b", 1, 39.0, false),
            ],
        )
        .append(
            "sessions.jsonl",
            &[session("w", true), session("a", false), session("b", false)],
        );
        d
    }

    #[test]
    fn absurd_token_counts_saturate() {
        // A corrupt turns.jsonl may hold any u64: two counts near u64::MAX overflowed the token
        // sums (a panic with overflow checks). Found reading the code for the `rundir` fuzz
        // target (`xtask/fuzz`), which panicked on such a run directory.
        let d = Dir::new("absurd-tokens");
        let huge = |s: &str| {
            record(
                turn(s, 0, 1.0, false),
                json!({"input_tokens": u64::MAX, "output_tokens": u64::MAX}),
            )
        };
        d.append("turns.jsonl", &[huge("a"), huge("b")]);
        let s = d.status(&Fake::new(45.0));
        assert_eq!((s.tokens.input, s.tokens.output), (u64::MAX, u64::MAX));
        assert_eq!(s.tokens.cached, 100);
    }

    #[test]
    fn running() {
        let d = running_dir("running");
        let s = d.status(&Fake::new(45.0).with(42, -1.0));
        assert_eq!(s.process, Process::Running);
        assert_eq!(s.stopped, None);
        assert!(!s.crashed && !s.stalled);
        assert_eq!(s.phase.as_deref(), Some("measuring"));
        assert_eq!((s.turns_done, s.turns_planned), (4, Some(8)));
        assert_eq!((s.sessions_done, s.sessions_planned), (2, Some(4)));
        assert_eq!(s.in_flight, Some(2));
        assert_eq!(
            s.tokens,
            Tokens {
                input: 400,
                output: 40,
                cached: 200
            }
        );
        assert_eq!(s.tokens_by_phase.warmup.input, 100);
        // 4 turns left at 1 turn per 10 s, 5 s since the latest heartbeat.
        let left = s.time_left_s.unwrap();
        assert!((left - 35.0).abs() < 1e-6, "{left}");
        assert_eq!(s.torn_lines, 0);
        let v = serde_json::to_value(&s).unwrap();
        for key in [
            "stopped",
            "phase",
            "process",
            "crashed",
            "stalled",
            "sessions_done",
            "sessions_planned",
            "turns_done",
            "turns_planned",
            "time_left_s",
            "tokens",
            "tokens_by_phase",
            "torn_lines",
        ] {
            assert!(v.get(key).is_some(), "{key} missing");
        }
        assert_eq!(v["process"], "running");
        assert_eq!(v["tokens"]["cached"], 200);
    }

    #[test]
    fn stopped_by_completed_and_by_signal() {
        for (by, typed) in [("completed", StopBy::Completed), ("signal", StopBy::Signal)] {
            let d = running_dir(&format!("stopped-{by}"));
            d.append("events.jsonl", &[stop(41.0, by)]);
            let s = d.status(&Fake::new(100.0));
            assert_eq!(
                s.stopped,
                Some(Stop {
                    by: typed,
                    reason: format!("{by} reason")
                })
            );
            assert_eq!(s.process, Process::Gone);
            assert!(!s.crashed && !s.stalled);
            assert_eq!(s.phase, None);
            assert_eq!(s.time_left_s, None);
            let v = serde_json::to_value(&s).unwrap();
            assert_eq!(v["stopped"]["by"], by);
        }
    }

    #[test]
    fn crashed_when_the_process_is_gone_without_a_stop() {
        let d = running_dir("crashed");
        let s = d.status(&Fake::new(45.0));
        assert_eq!(s.process, Process::Gone);
        assert!(s.crashed);
        assert_eq!(s.stopped, None);
        assert_eq!(s.phase, None);
        assert_eq!(s.time_left_s, None);
        assert!(!s.stalled);
    }

    #[test]
    fn stalled_when_turns_are_in_flight_and_none_finished() {
        let d = running_dir("stalled");
        // Heartbeats go on, saying 2 in flight, but no turn finished since t = 39.
        d.append(
            "events.jsonl",
            &[beat(100.0, 4, 2), beat(150.0, 4, 2), beat(170.0, 4, 2)],
        );
        let sys = Fake::new(175.0).with(42, -1.0);
        let s = d.status(&sys);
        assert!(s.stalled);
        assert_eq!(s.process, Process::Running);
        assert!(!s.crashed);
        // Within the limit it is not.
        assert!(
            !status(d.path(), Duration::from_secs(200), &sys)
                .unwrap()
                .stalled
        );
        // Nothing in flight (all sessions in tool waits): not stalled.
        d.append("events.jsonl", &[beat(174.0, 4, 0)]);
        assert!(!d.status(&sys).stalled);
        // Heartbeats that stopped for the limit: stalled.
        let s = d.status(&Fake::new(400.0).with(42, -1.0));
        assert!(s.stalled);
    }

    #[test]
    fn a_stop_before_the_latest_resume_does_not_count() {
        let d = running_dir("resumed");
        d.append(
            "events.jsonl",
            &[
                stop(41.0, "signal"),
                open("run.resumed", 60.0, 77, "box"),
                phase(61.0, "measuring"),
            ],
        );
        let s = d.status(&Fake::new(65.0).with(77, 59.0));
        assert_eq!(s.stopped, None);
        assert_eq!(s.process, Process::Running);
        assert_eq!(s.pid, Some(77));
        assert!(!s.crashed);
        assert_eq!(s.resumes, 1);
        assert_eq!(s.phase.as_deref(), Some("measuring"));
        // Heartbeats before the resume are not this process's: no pace, no in-flight count.
        assert_eq!(s.in_flight, None);
        assert_eq!(s.time_left_s, None);
        // The resumed process gone without a stop: crashed, whatever the first open recorded.
        assert!(d.status(&Fake::new(65.0).with(42, -1.0)).crashed);
    }

    #[test]
    fn on_another_host_the_process_is_unknown() {
        let d = Dir::new("other-host");
        d.append(
            "events.jsonl",
            &[open("run.started", 0.0, 42, "elsewhere"), beat(10.0, 1, 1)],
        );
        // No process 42 here: that says nothing about the other host.
        let s = d.status(&Fake::new(20.0));
        assert_eq!(s.process, Process::Unknown);
        assert!(!s.crashed);
        assert_eq!(s.host.as_deref(), Some("elsewhere"));
        assert_eq!(s.phase.as_deref(), Some("starting"));
    }

    #[test]
    fn a_reused_pid_is_gone() {
        let d = running_dir("pid-reused");
        // Pid 42 is alive, but started at t = 30, long after the run's process (t = -1).
        let s = d.status(&Fake::new(45.0).with(42, 30.0));
        assert_eq!(s.process, Process::Gone);
        assert!(s.crashed);
        // Within the slack it is the same process.
        let s = d.status(&Fake::new(45.0).with(42, 0.5));
        assert_eq!(s.process, Process::Running);
    }

    #[test]
    fn torn_last_lines_are_ignored_and_counted() {
        let d = running_dir("torn");
        d.append_raw("events.jsonl", r#"{"event":"run.stopped","utc":"2025-"#)
            .append_raw("turns.jsonl", r#"{"session_id":"c","turn_"#)
            .append_raw("sessions.jsonl", r#"{"session_id""#);
        let s = d.status(&Fake::new(45.0).with(42, -1.0));
        assert_eq!(s.torn_lines, 3);
        assert_eq!(s.bad_lines, 0);
        assert_eq!(s.stopped, None);
        assert_eq!(s.turns_done, 4);
        assert_eq!(s.sessions_done, 2);
        assert_eq!(s.process, Process::Running);
    }

    #[test]
    fn duplicate_and_superseded_records_count_once() {
        let d = running_dir("dupes");
        let mut old = turn("b", 1, 39.0, false);
        old["superseded"] = json!(true);
        d.append("turns.jsonl", &[turn("b", 1, 42.0, false), old]);
        let s = d.status(&Fake::new(45.0).with(42, -1.0));
        assert_eq!(s.turns_done, 4);
        assert_eq!(s.tokens.input, 400);
    }

    #[test]
    fn duration_runs_drain_and_count_down_to_their_deadline() {
        let d = Dir::new("duration");
        let mut o = open("run.started", 0.0, 42, "box");
        o["duration_s"] = json!(60.0);
        o["max_duration_s"] = json!(50.0);
        d.append("events.jsonl", &[o, phase(1.0, "measuring")]);
        let sys = Fake::new(20.0).with(42, -1.0);
        let s = d.status(&sys);
        assert_eq!(s.phase.as_deref(), Some("measuring"));
        // The fuse comes first.
        assert_eq!(s.time_left_s, Some(30.0));
        let s = d.status(&Fake::new(70.0).with(42, -1.0));
        assert_eq!(s.phase.as_deref(), Some("draining"));
        assert_eq!(s.time_left_s, Some(0.0));
    }

    #[test]
    fn missing_and_non_run_directories_are_errors() {
        let sys = Fake::new(0.0);
        let tmp = tempfile::tempdir().unwrap();
        let missing = tmp.path().join("surely-missing");
        assert!(matches!(
            status(&missing, DEFAULT_STALL_AFTER, &sys),
            Err(HealthError::NotFound { .. })
        ));
        let d = Dir::new("empty");
        std::fs::remove_file(d.path().join("run.json")).unwrap();
        let e = status(d.path(), DEFAULT_STALL_AFTER, &sys).unwrap_err();
        assert!(matches!(e, HealthError::NotARunDir { .. }));
        assert!(e.to_string().contains("bench-health-empty"));
    }

    #[test]
    fn proc_stat_parsing() {
        let line = "1234 (a (weird) name) S 1 2 3 4 5 6 7 8 9 10 11 12 13 14 15 16 17 18 98765 \
                    20 21\n";
        assert_eq!(parse_pid_stat(line), Some(('S', 98765)));
        assert_eq!(
            parse_btime("cpu 1 2\nbtime 1700000000\n"),
            Some(1_700_000_000)
        );
        // This very process is alive and started before now.
        if Path::new("/proc/self/stat").exists() {
            match process_liveness(std::process::id()) {
                Liveness::Alive { started } => {
                    assert!(started <= OffsetDateTime::now_utc() + PID_REUSE_SLACK);
                }
                other => panic!("{other:?}"),
            }
            assert!(hostname().is_some());
        }
    }
}
