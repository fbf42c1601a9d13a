//! Observers: runners emit a closed set of events; observers (progress, the run-directory
//! writer, a caller's own code) never reach into the engine.

use std::fs::File;
use std::io::Write;
use std::path::{Path, PathBuf};
use std::sync::Mutex;

use bench_report::record::{SessionRecord, TurnRecord};

use crate::engine::StopReason;

/// What happened.
#[derive(Debug)]
#[non_exhaustive]
pub enum RunEvent<'a> {
    /// The run began.
    Started {
        /// Workers.
        concurrency: u32,
        /// Sessions in the pool.
        sessions: usize,
    },
    /// A phase began: the warmup (only with `warmup_sessions`), then the measured run, then
    /// its drain (at most once each).
    Phase(Phase),
    /// A session play began (before its first turn or tool wait).
    SessionStarted {
        /// Session id.
        session_id: &'a str,
        /// Which play of the session.
        replay: u32,
        /// Part of the warmup.
        warmup: bool,
    },
    /// A turn's request is about to be sent.
    TurnSent {
        /// Session id.
        session_id: &'a str,
        /// Its index in the session.
        turn_index: u32,
    },
    /// A turn finished (ok or not). Delivered before the session's next turn is sent.
    TurnFinished(&'a TurnRecord),
    /// A session play ended.
    SessionFinished(&'a SessionRecord),
    /// The run stopped.
    Stopped {
        /// Why.
        by: StopReason,
    },
}

/// The phases of a run.
#[derive(Debug, Clone, Copy, PartialEq, Eq, serde::Serialize)]
#[serde(rename_all = "snake_case")]
pub enum Phase {
    /// Unmeasured warmup sessions.
    Warmup,
    /// The measured run.
    Measuring,
    /// The measured run stopped starting sessions or turns (the pool is used up, the
    /// duration passed, or the run was cancelled); turns in flight finish.
    Draining,
}

/// Receives run events. Called on the engine's tasks: keep it quick.
pub trait Observer: Send + Sync {
    /// One event.
    fn on_event(&self, event: &RunEvent<'_>);
}

/// Writes `turns.jsonl` and `sessions.jsonl` in a run directory, one line per record, each
/// handed to the OS (unbuffered write) before the engine goes on.
#[derive(Debug)]
pub struct RunDirWriter {
    turns: Mutex<File>,
    sessions: Mutex<File>,
    dir: PathBuf,
    errors: Mutex<Vec<String>>,
}

impl RunDirWriter {
    /// Creates (or appends to) the record files in `dir`.
    pub fn create(dir: &Path) -> std::io::Result<RunDirWriter> {
        std::fs::create_dir_all(dir)?;
        let open = |name: &str| {
            std::fs::OpenOptions::new()
                .create(true)
                .append(true)
                .open(dir.join(name))
        };
        Ok(RunDirWriter {
            turns: Mutex::new(open("turns.jsonl")?),
            sessions: Mutex::new(open("sessions.jsonl")?),
            dir: dir.to_path_buf(),
            errors: Mutex::new(Vec::new()),
        })
    }

    /// Write failures so far (records that could not be written).
    pub fn errors(&self) -> Vec<String> {
        self.errors.lock().map(|e| e.clone()).unwrap_or_default()
    }

    fn write(&self, file: &Mutex<File>, name: &str, value: &impl serde::Serialize) {
        let mut line = match serde_json::to_vec(value) {
            Ok(l) => l,
            Err(e) => return self.fail(format!("{name}: {e}")),
        };
        line.push(b'\n');
        let r = match file.lock() {
            Ok(mut f) => f.write_all(&line),
            Err(_) => Ok(()),
        };
        if let Err(e) = r {
            self.fail(format!("{}: {e}", self.dir.join(name).display()));
        }
    }

    fn fail(&self, msg: String) {
        if let Ok(mut e) = self.errors.lock() {
            e.push(msg);
        }
    }
}

impl Observer for RunDirWriter {
    fn on_event(&self, event: &RunEvent<'_>) {
        match event {
            RunEvent::TurnFinished(t) => self.write(&self.turns, "turns.jsonl", t),
            RunEvent::SessionFinished(s) => self.write(&self.sessions, "sessions.jsonl", s),
            _ => {}
        }
    }
}
