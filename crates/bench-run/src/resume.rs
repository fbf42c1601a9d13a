//! Resuming a run that crashed or was stopped, counting every planned session once.
//!
//! Rules (also in `docs/telemetry.md`, "Resume"):
//!
//! - **Configuration**: the [`crate::RunSpec`] recorded in `run.json`. Header values are never
//!   recorded, so a run that sent headers needs them again (in [`crate::RunOptions`]).
//! - **Refused** (one line): a run whose process still runs, or cannot be checked (another
//!   host); a run that already finished (stopped by `completed` or `exhausted`); a duration
//!   run (it loops its pool: there is no rest of the plan to finish); a directory written
//!   before run specs existed.
//! - **Finished sessions are kept**: a measured session record that is not `truncated` and
//!   whose turns were not cut by an abort (`cancelled`). Every other measured record (a session
//!   with turns but no session record, a truncated one) is marked `superseded` and its session
//!   is played again from its first turn. If the measured phase never began, the warmup is
//!   played again and its earlier records are superseded too; otherwise there is no warmup.
//! - **Torn lines**: a last line cut by the crash is dropped and reported; a whole last line
//!   without its newline gets one. Any other unreadable line stops the resume, naming the file
//!   and line.
//! - **One timeline**: the resumed segment's clock starts where the latest record ended; the
//!   run's measured duration is the measured span of the earlier segments plus this one's.
//! - **Same plan**: the plan is rebuilt from the spec and must have the recorded number of
//!   sessions and turns (a dataset that changed is refused).

use std::collections::HashSet;
use std::path::{Path, PathBuf};
use std::time::Duration;

use bench_rundir::{
    ErrorKind, PlanCounts, Resumed, SessionRecord, SessionStatus, TurnRecord, files, jsonl,
};
use bench_telemetry::health::{self, Process};

use crate::run_json::{self, ReadError, ReplayRunJson};
use crate::{RunError, Target};

/// A run directory read for resuming, and what becomes of its records.
#[derive(Debug)]
pub struct Resume {
    /// The run directory.
    pub dir: PathBuf,
    /// Its `run.json`: the recorded specification and plan size among the rest.
    pub run_json: ReplayRunJson,
    turns: Vec<TurnRecord>,
    sessions: Vec<SessionRecord>,
    /// Sessions kept (finished in earlier segments).
    pub kept_ids: HashSet<String>,
    /// Whether the warmup is played again (the measured phase never began).
    pub replay_warmup: bool,
    /// Where the resumed clock starts (the latest record's end).
    pub time_origin: Duration,
    /// Measured wall time of the earlier segments.
    pub prior_measured: Duration,
    /// Turn records marked superseded by this resume.
    pub superseded_turns: u64,
    /// Session records marked superseded by this resume.
    pub superseded_sessions: u64,
    /// Measured sessions played again from their first turn.
    pub restarted: u64,
    /// What was repaired: torn last lines dropped, missing newlines added.
    pub repairs: Vec<String>,
}

fn refuse(dir: &Path, why: impl std::fmt::Display) -> RunError {
    RunError::Invalid(format!("resume {}: {why}", dir.display()))
}

/// Reads `dir/run.json`'s spec and checks that the run can be resumed with `header_names`
/// given; reads its records and decides what is kept. Changes nothing.
pub fn read(dir: &Path, header_names: &[String]) -> Result<Resume, RunError> {
    let run_json: ReplayRunJson = run_json::read(dir).map_err(|e| match e {
        ReadError::Missing(_) => refuse(dir, "not a run directory (no run.json)"),
        ReadError::Bad { ref path, .. } => {
            // A run.json of an older bench that recorded its arguments, or of none.
            let v = std::fs::read(path)
                .ok()
                .and_then(|b| serde_json::from_slice::<serde_json::Value>(&b).ok());
            match v.as_ref().filter(|v| v.get("spec").is_none()) {
                Some(v) if v.get("args").is_some() => refuse(
                    dir,
                    "its run.json was written by an older bench (recorded arguments, no run \
                     spec) and cannot be resumed by this version; start a new run",
                ),
                Some(_) => refuse(dir, "its run.json holds no run spec; start a new run"),
                None => RunError::Invalid(format!("{e}: it cannot be resumed")),
            }
        }
    })?;
    let spec = &run_json.spec;
    if let Some(d) = spec.limits.duration {
        return Err(refuse(
            dir,
            format!(
                "the run played for a duration ({d:?}), looping its pool, so there is no rest \
                 of the plan to finish; start a new run"
            ),
        ));
    }
    if let Target::Url {
        header_names: recorded,
        ..
    } = &spec.target
    {
        let given: HashSet<String> = header_names
            .iter()
            .map(|n| n.to_ascii_lowercase())
            .collect();
        let missing: Vec<&str> = recorded
            .iter()
            .filter(|n| !given.contains(&n.to_ascii_lowercase()))
            .map(String::as_str)
            .collect();
        if !missing.is_empty() {
            return Err(refuse(
                dir,
                format!(
                    "the run sent header(s) {} whose values are never recorded; pass them \
                     again (--header NAME=VALUE)",
                    missing.join(", ")
                ),
            ));
        }
    }
    // A password in the base URL is recorded as `***`: it must come again, as a header.
    if let Target::Url { base_url, .. } = &spec.target
        && let Some((user, pass)) = bench_rundir::url_credentials(base_url)
        && pass == bench_rundir::secrets::MASK
        && !header_names
            .iter()
            .any(|n| n.eq_ignore_ascii_case("authorization"))
    {
        return Err(refuse(
            dir,
            format!(
                "the run's base URL carried a password, which is never recorded; pass the \
                 credentials again as a header (--header 'Authorization=Basic <base64 of \
                 {user}:PASSWORD>')"
            ),
        ));
    }
    let st = health::status(dir, health::DEFAULT_STALL_AFTER, &health::LocalSystem)
        .map_err(|e| RunError::Invalid(format!("resume: {e}")))?;
    match &st.stopped {
        Some(stop) if stop.by.is_finished() => {
            return Err(refuse(
                dir,
                format!(
                    "the run already finished (stopped by {}); nothing to resume",
                    stop.by
                ),
            ));
        }
        Some(_) => {}
        None => match st.process {
            Process::Gone => {}
            Process::Running => {
                return Err(refuse(
                    dir,
                    format!(
                        "the run is still running (pid {}); stop it first (Ctrl-C or SIGTERM), \
                         then resume",
                        st.pid.map_or_else(|| "?".into(), |p| p.to_string())
                    ),
                ));
            }
            Process::Unknown => {
                return Err(refuse(
                    dir,
                    format!(
                        "cannot tell whether the run still runs (it ran on host {:?}, this is \
                         {:?}); resume it where it ran",
                        st.host.as_deref().unwrap_or("?"),
                        health::hostname().unwrap_or_default()
                    ),
                ));
            }
        },
    }
    let mut repairs = Vec::new();
    let turns = read_records(&dir.join(files::TURNS), &mut repairs)?;
    let sessions = read_records(&dir.join(files::SESSIONS), &mut repairs)?;
    Ok(Resume::decided(
        dir.to_owned(),
        run_json,
        turns,
        sessions,
        repairs,
    ))
}

/// Reads a record file for resuming: a torn last line is dropped and noted in `repairs`; any
/// other unreadable line is an error naming it.
fn read_records<T: serde::de::DeserializeOwned>(
    path: &Path,
    repairs: &mut Vec<String>,
) -> Result<Vec<T>, RunError> {
    let lines = jsonl::read::<T>(path).map_err(|e| RunError::Failed(e.to_string()))?;
    if let Some(bad) = lines.bad.first() {
        return Err(RunError::Invalid(format!(
            "{}:{}: not a record bench can read back ({}); resume cannot tell what was played",
            path.display(),
            bad.line,
            bad.error
        )));
    }
    if let Some(t) = lines.torn {
        repairs.push(jsonl::Repair::TornDropped(t).describe(path));
    }
    Ok(lines.records)
}

impl Resume {
    fn decided(
        dir: PathBuf,
        run_json: ReplayRunJson,
        turns: Vec<TurnRecord>,
        sessions: Vec<SessionRecord>,
        repairs: Vec<String>,
    ) -> Resume {
        let mut r = Resume {
            dir,
            run_json,
            turns,
            sessions,
            kept_ids: HashSet::new(),
            replay_warmup: false,
            time_origin: Duration::ZERO,
            prior_measured: Duration::ZERO,
            superseded_turns: 0,
            superseded_sessions: 0,
            restarted: 0,
            repairs,
        };
        r.decide();
        r
    }

    /// Which records stay, which are superseded; the clock origin and prior duration.
    fn decide(&mut self) {
        let measured_began = self.turns.iter().any(|t| !t.superseded && !t.warmup);
        // Sessions whose play an abort cut: their turns say `cancelled`.
        let cut: HashSet<String> = self
            .turns
            .iter()
            .filter(|t| !t.superseded && !t.warmup && t.error_kind == Some(ErrorKind::Cancelled))
            .map(|t| t.session_id.clone())
            .collect();
        let mut kept = HashSet::new();
        for s in self.sessions.iter_mut().filter(|s| !s.superseded) {
            if s.warmup {
                if !measured_began {
                    s.superseded = true;
                    self.superseded_sessions += 1;
                }
                continue;
            }
            let finished = s.status != SessionStatus::Truncated && !cut.contains(&s.session_id);
            // A second finished record of a kept session (never expected) is superseded too.
            if finished && kept.insert(s.session_id.clone()) {
                continue;
            }
            s.superseded = true;
            self.superseded_sessions += 1;
        }
        let mut restarted = HashSet::new();
        for t in self.turns.iter_mut().filter(|t| !t.superseded) {
            if (t.warmup && !measured_began) || (!t.warmup && !kept.contains(&t.session_id)) {
                if !t.warmup {
                    restarted.insert(t.session_id.clone());
                }
                t.superseded = true;
                self.superseded_turns += 1;
            }
        }
        // Truncated sessions with no turn of their own are restarted too.
        for s in &self.sessions {
            if s.superseded && !s.warmup && !kept.contains(&s.session_id) {
                restarted.insert(s.session_id.clone());
            }
        }
        self.restarted = restarted.len() as u64;
        self.kept_ids = kept;
        self.replay_warmup = !measured_began;
        let origin = self
            .turns
            .iter()
            .map(|t| t.end_s)
            .chain(self.sessions.iter().map(|s| s.end_s))
            .fold(0.0, f64::max);
        self.time_origin = Duration::try_from_secs_f64(origin).unwrap_or_default();
        let measured = self.turns.iter().filter(|t| !t.warmup);
        let first = measured.clone().map(|t| t.sent_s).reduce(f64::min);
        let last = measured.map(|t| t.end_s).reduce(f64::max);
        self.prior_measured = match (first, last) {
            (Some(a), Some(b)) if b > a => Duration::from_secs_f64(b - a),
            _ => Duration::ZERO,
        };
    }

    /// Checks the rebuilt plan against the one recorded.
    pub fn check_plan(&self, sessions: u64, turns: u64) -> Result<(), RunError> {
        let PlanCounts {
            sessions: rs,
            turns: rt,
        } = PlanCounts {
            sessions: self.run_json.plan.sessions,
            turns: self.run_json.plan.turns,
        };
        if rs != sessions || rt != turns {
            return Err(refuse(
                &self.dir,
                format!(
                    "the plan rebuilt from run.json has {sessions} sessions and {turns} turns, \
                     the run planned {rs} and {rt}: the dataset changed; start a new run"
                ),
            ));
        }
        Ok(())
    }

    /// Writes the decisions: `turns.jsonl` and `sessions.jsonl` rewritten (atomically) with
    /// their superseded records marked; torn last lines of `events.jsonl` and `scrapes.jsonl`
    /// cut off.
    pub fn apply(&mut self) -> Result<(), RunError> {
        let fail = |e: jsonl::IoError| RunError::Failed(e.to_string());
        jsonl::rewrite(&self.dir.join(files::TURNS), &self.turns).map_err(fail)?;
        jsonl::rewrite(&self.dir.join(files::SESSIONS), &self.sessions).map_err(fail)?;
        for name in [files::EVENTS, files::SCRAPES] {
            let path = self.dir.join(name);
            if let Some(r) = jsonl::repair_tail(&path).map_err(fail)? {
                self.repairs.push(r.describe(&path));
            }
        }
        Ok(())
    }

    /// The records kept from earlier segments (warmup ones included when the warmup is not
    /// played again).
    pub fn kept_records(&self) -> (Vec<TurnRecord>, Vec<SessionRecord>) {
        (
            self.turns
                .iter()
                .filter(|t| !t.superseded)
                .cloned()
                .collect(),
            self.sessions
                .iter()
                .filter(|s| !s.superseded)
                .cloned()
                .collect(),
        )
    }

    /// The `run.resumed` event for `opened`.
    pub fn event(&self, opened: bench_rundir::Opened) -> Resumed {
        Resumed {
            opened,
            sessions_kept: self.kept_ids.len() as u64,
            sessions_restarted: self.restarted,
            turns_superseded: self.superseded_turns,
            sessions_superseded: self.superseded_sessions,
            warmup_replayed: self.replay_warmup,
            time_origin_s: self.time_origin.as_secs_f64(),
            repairs: self.repairs.clone(),
        }
    }
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use super::*;
    use bench_rundir::{TurnStatus, record::CountSource};

    fn resume(turns: Vec<TurnRecord>, sessions: Vec<SessionRecord>) -> Resume {
        Resume::decided(
            PathBuf::new(),
            ReplayRunJson::default(),
            turns,
            sessions,
            Vec::new(),
        )
    }

    pub(crate) fn turn(sid: &str, i: u32, sent: f64, end: f64) -> TurnRecord {
        TurnRecord {
            ttft_ms: Some(1.0),
            e2e_ms: Some(2.0),
            tpot_ms: None,
            chunk_gaps_ms: Vec::new(),
            input_tokens: Some(10),
            input_tokens_source: Some(CountSource::Server),
            output_tokens: Some(2),
            output_tokens_source: Some(CountSource::Server),
            max_output_tokens: 2,
            due_s: sent,
            sent_s: sent,
            first_token_s: None,
            end_s: end,
            sent_utc: String::new(),
            end_utc: String::new(),
            ..TurnRecord::example(sid, i)
        }
    }

    fn sess(sid: &str, status: SessionStatus, end: f64) -> SessionRecord {
        SessionRecord {
            session_id: sid.into(),
            replay: 0,
            status,
            turns_played: 1,
            turns_planned: 2,
            output_tokens: 2,
            busy_s: 1.0,
            marker: None,
            warmup: false,
            start_s: 0.0,
            end_s: end,
            superseded: false,
        }
    }

    #[test]
    fn finished_sessions_are_kept_and_partial_ones_superseded() {
        let mut cut = turn("c", 0, 2.0, 3.0);
        cut.status = TurnStatus::Error;
        cut.error_kind = Some(ErrorKind::Cancelled);
        let r = resume(
            vec![
                turn("a", 0, 1.0, 2.0),
                turn("a", 1, 2.0, 3.0),
                turn("b", 0, 1.5, 2.5), // no session record: partial
                cut,                    // its session "failed", but an abort cut it
                turn("d", 0, 1.0, 4.0),
            ],
            vec![
                sess("a", SessionStatus::Completed, 3.0),
                sess("c", SessionStatus::Failed, 3.0),
                sess("d", SessionStatus::Truncated, 4.5),
                sess("e", SessionStatus::ContextGuard, 1.2), // no turn at all: finished
            ],
        );
        assert_eq!(
            r.kept_ids,
            ["a", "e"].iter().map(|s| s.to_string()).collect()
        );
        assert_eq!(r.superseded_turns, 3);
        assert_eq!(r.superseded_sessions, 2);
        assert_eq!(r.restarted, 3); // b, c, d
        assert!(!r.replay_warmup);
        assert_eq!(r.time_origin, Duration::from_secs_f64(4.5));
        assert_eq!(r.prior_measured, Duration::from_secs(3)); // 1.0 .. 4.0
        let marked: Vec<bool> = r.turns.iter().map(|t| t.superseded).collect();
        assert_eq!(marked, [false, false, true, true, true]);
        let (kt, ks) = r.kept_records();
        assert_eq!(kt.len(), 2);
        assert_eq!(ks.len(), 2);
    }

    #[test]
    fn a_crash_in_the_warmup_replays_it_and_supersedes_its_records() {
        let mut w = turn("w", 0, 0.0, 1.0);
        w.warmup = true;
        let mut ws = sess("w", SessionStatus::Completed, 1.0);
        ws.warmup = true;
        let r = resume(vec![w], vec![ws]);
        assert!(r.replay_warmup);
        assert_eq!((r.superseded_turns, r.superseded_sessions), (1, 1));
        assert_eq!(r.restarted, 0);
        assert_eq!(r.prior_measured, Duration::ZERO);
    }

    #[test]
    fn records_superseded_before_stay_so_and_count_for_the_timeline_only() {
        let mut old = turn("a", 0, 0.5, 1.0);
        old.superseded = true;
        let r = resume(
            vec![old, turn("a", 0, 2.0, 3.0)],
            vec![sess("a", SessionStatus::Completed, 3.0)],
        );
        assert_eq!(r.superseded_turns, 0);
        assert_eq!(r.prior_measured, Duration::from_secs_f64(2.5));
        assert!(r.kept_ids.contains("a"));
    }

    #[test]
    fn a_torn_record_is_dropped_and_a_bad_one_refused() {
        let tmp = tempfile::Builder::new()
            .prefix("bench-run-resume-")
            .tempdir()
            .unwrap();
        let d = tmp.path();
        let p = d.join(files::TURNS);
        let whole = serde_json::to_string(&turn("a", 0, 0.0, 1.0)).unwrap();
        std::fs::write(&p, format!("{whole}\n{{\"session_id\":\"b\",\"tu")).unwrap();
        let mut repairs = Vec::new();
        let v: Vec<TurnRecord> = read_records(&p, &mut repairs).unwrap();
        assert_eq!(v.len(), 1);
        assert!(
            repairs[0].ends_with("turns.jsonl:2: torn last line (21 bytes) dropped"),
            "{repairs:?}"
        );
        std::fs::write(&p, format!("{whole}\ngarbage\n")).unwrap();
        let e = read_records::<TurnRecord>(&p, &mut repairs)
            .unwrap_err()
            .to_string();
        assert!(
            e.contains("turns.jsonl:2: not a record bench can read back"),
            "{e}"
        );
    }
}
