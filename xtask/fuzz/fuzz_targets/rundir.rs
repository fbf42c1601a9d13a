//! `rundir`: the run-directory readers of `bench-rundir` and `bench status`
//! (`bench_telemetry::health::status`) on a directory unpacked from arbitrary bytes (see
//! `bench_fuzz::write_rundir`: sections for run.json, events.jsonl, turns.jsonl,
//! sessions.jsonl, scrapes.jsonl, result.json). Never panics (errors and bad lines are fine);
//! after `jsonl::repair_tail` a file reads without a torn line.
#![no_main]

use std::path::Path;
use std::time::Duration;

use bench_fuzz::{scratch_dir, write_rundir};
use bench_rundir::{EventLine, RunJsonHead, SessionRecord, TurnRecord, files, jsonl};
use bench_telemetry::Scrape;
use bench_telemetry::health::{DEFAULT_STALL_AFTER, Liveness, System, status};
use libfuzzer_sys::fuzz_target;
use time::OffsetDateTime;

/// A fixed clock and host; even pids are alive (started a minute ago), odd ones gone.
struct Fake;

fn now() -> OffsetDateTime {
    OffsetDateTime::from_unix_timestamp(1_796_000_000).expect("a valid timestamp")
}

impl System for Fake {
    fn now(&self) -> OffsetDateTime {
        now()
    }
    fn hostname(&self) -> Option<String> {
        Some("fixture-host".to_owned())
    }
    fn process(&self, pid: u32) -> Liveness {
        if pid.is_multiple_of(2) {
            Liveness::Alive {
                started: now() - Duration::from_secs(60),
            }
        } else {
            Liveness::NoSuchProcess
        }
    }
}

fn read_json<T: serde::de::DeserializeOwned>(path: &Path) {
    if let Ok(bytes) = std::fs::read(path) {
        let _ = serde_json::from_slice::<T>(&bytes);
    }
}

fuzz_target!(|data: &[u8]| {
    let dir = scratch_dir("rundir").join("run");
    std::fs::create_dir_all(&dir).expect("cannot create the run directory");
    write_rundir(&dir, data);
    read_json::<RunJsonHead>(&dir.join(files::RUN_JSON));
    read_json::<bench_report::RunResult>(&dir.join(files::RESULT));
    let _ = jsonl::read::<EventLine>(&dir.join(files::EVENTS));
    let _ = jsonl::read::<TurnRecord>(&dir.join(files::TURNS));
    let _ = jsonl::read::<SessionRecord>(&dir.join(files::SESSIONS));
    let _ = jsonl::read::<Scrape>(&dir.join(files::SCRAPES));
    if let Ok(st) = status(&dir, DEFAULT_STALL_AFTER, &Fake) {
        let _ = st.text(DEFAULT_STALL_AFTER);
        let _ = serde_json::to_string(&st);
    }
    for name in [files::EVENTS, files::TURNS, files::SESSIONS, files::SCRAPES] {
        let path = dir.join(name);
        if let Ok(Some(_)) = jsonl::repair_tail(&path) {
            let again = jsonl::read::<serde::de::IgnoredAny>(&path).expect("readable");
            assert_eq!(
                again.torn, None,
                "{name} still has a torn line after repair_tail"
            );
        }
    }
});
