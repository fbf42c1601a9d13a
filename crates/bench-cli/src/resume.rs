//! `bench run --resume RUN_DIR`: finish a run that crashed or was stopped, counting every
//! planned session once.
//!
//! Rules (also in `docs/telemetry.md`, "Resume"):
//!
//! - **Configuration**: the arguments recorded in `run.json` (`args`). Only `--header`, `-q`,
//!   `--json` and `--progress-interval` may be given with `--resume`; header values are never
//!   recorded, so a run that sent headers (`header_names`) needs them again.
//! - **Refused** (exit 2, one line): a run whose process still runs, or cannot be checked
//!   (another host); a run that already finished (stopped by `completed` or `exhausted`); a
//!   `--duration` run (it loops its pool: there is no rest of the plan to finish).
//! - **Finished sessions are kept**: a measured `sessions.jsonl` record that is not `truncated`
//!   and whose turns were not cut by an abort (`cancelled`). Every other measured record (a
//!   session with turns but no session record, a truncated one) is marked `"superseded": true`
//!   and its session is played again from its first turn. If the measured phase never began,
//!   the warmup is played again and its earlier records are superseded too; otherwise there is
//!   no warmup.
//! - **Torn lines**: a last line cut by the crash (no newline, not JSON) is dropped and
//!   reported; a whole last line without its newline gets one. Any other unreadable line stops
//!   the resume, naming the file and line.
//! - **One timeline**: the resumed segment's clock starts where the latest record ended
//!   (`RunConfig::time_origin_s`); the run's measured duration is the measured span of the
//!   earlier segments plus this one's.
//! - **Same plan**: the plan is rebuilt from the recorded arguments and must have the recorded
//!   number of sessions and turns (a dataset that changed is refused).

use std::collections::HashSet;
use std::io::{BufRead, Write};
use std::path::{Path, PathBuf};

use bench_report::record::{SessionRecord, TurnRecord};
use bench_telemetry::health::{self, Process};
use clap::Parser;
use serde_json::Value;

use crate::CliError;
use crate::run::RunCmd;

/// Flags that may be given with `--resume` (their `RunCmd` field names).
const ALLOWED_WITH_RESUME: &[&str] = &["quiet", "json", "progress_interval"];

/// A run directory read for resuming, before anything in it is changed.
#[derive(Debug)]
pub struct Resume {
    /// The run directory.
    pub dir: PathBuf,
    /// `run.json` as recorded.
    pub run_json: Value,
    turns: Vec<Value>,
    sessions: Vec<Value>,
    /// Sessions kept (finished in earlier segments).
    pub kept_ids: HashSet<String>,
    /// Whether the warmup is played again (the measured phase never began).
    pub replay_warmup: bool,
    /// Where the resumed clock starts (the latest record's end).
    pub time_origin_s: f64,
    /// Measured wall time of the earlier segments.
    pub prior_measured_s: f64,
    /// Turn records marked superseded by this resume.
    pub superseded_turns: u64,
    /// Session records marked superseded by this resume.
    pub superseded_sessions: u64,
    /// Measured sessions played again from their first turn.
    pub restarted: u64,
    /// What was repaired: torn last lines dropped, missing newlines added.
    pub repairs: Vec<String>,
}

/// Reads the recorded arguments of `given.resume` and merges the flags allowed with it.
pub fn load_args(given: &RunCmd) -> Result<(RunCmd, Value), CliError> {
    let dir = given.resume.clone().unwrap_or_default();
    let path = dir.join("run.json");
    let bytes = match std::fs::read(&path) {
        Ok(b) => b,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => {
            return Err(CliError::Usage(format!(
                "--resume {}: not a run directory (no run.json)",
                dir.display()
            )));
        }
        Err(e) => return Err(CliError::Usage(format!("{}: {e}", path.display()))),
    };
    let run_json: Value = serde_json::from_slice(&bytes)
        .map_err(|e| CliError::Usage(format!("{}: not JSON: {e}", path.display())))?;
    let Some(recorded) = run_json.get("args") else {
        return Err(CliError::Usage(format!(
            "{}: no recorded arguments (written before --resume existed); start a new run",
            path.display()
        )));
    };
    let mut args: RunCmd = serde_json::from_value(recorded.clone())
        .map_err(|e| CliError::Usage(format!("{}: args: {e}", path.display())))?;
    check_flags(given)?;
    args.resume = Some(dir.clone());
    args.run_dir = Some(dir.clone());
    args.headers = given.headers.clone();
    args.quiet = given.quiet;
    args.json = given.json;
    args.progress_interval = given.progress_interval;
    if let Some(d) = args.duration {
        return Err(CliError::Usage(format!(
            "--resume {}: the run played for --duration {:?}, looping its pool, so there is no \
             rest of the plan to finish; start a new run",
            dir.display(),
            d
        )));
    }
    // Header values are never recorded: they must come again.
    let given_names: HashSet<String> = crate::parse_headers(&given.headers)?
        .into_iter()
        .map(|(k, _)| k.to_ascii_lowercase())
        .collect();
    let missing: Vec<&str> = run_json["header_names"]
        .as_array()
        .into_iter()
        .flatten()
        .filter_map(Value::as_str)
        .filter(|n| !given_names.contains(&n.to_ascii_lowercase()))
        .collect();
    if !missing.is_empty() {
        return Err(CliError::Usage(format!(
            "--resume {}: the run sent header(s) {} whose values are never recorded; pass them \
             again with --header NAME=VALUE",
            dir.display(),
            missing.join(", ")
        )));
    }
    Ok((args, run_json))
}

/// Refuses any flag but the allowed ones next to `--resume` (the configuration is recorded).
fn check_flags(given: &RunCmd) -> Result<(), CliError> {
    #[derive(Parser)]
    struct Defaults {
        #[command(flatten)]
        run: RunCmd,
    }
    let defaults = Defaults::try_parse_from(["bench"])
        .map_err(|e| CliError::Failed(format!("internal: default flags: {e}")))?
        .run;
    let (Ok(Value::Object(mut g)), Ok(Value::Object(mut d))) =
        (serde_json::to_value(given), serde_json::to_value(&defaults))
    else {
        return Err(CliError::Failed("internal: cannot compare flags".into()));
    };
    for k in ALLOWED_WITH_RESUME {
        g.remove(*k);
        d.remove(*k);
    }
    let mut differing = Vec::new();
    for (k, v) in &g {
        match (v, d.get(k)) {
            // Flattened groups (dataset, embedded simulator): their flags are top-level.
            (Value::Object(inner), Some(Value::Object(dinner))) => {
                for (ik, iv) in inner {
                    if dinner.get(ik) != Some(iv) {
                        differing.push(ik.clone());
                    }
                }
            }
            (v, dv) if dv != Some(v) => differing.push(k.clone()),
            _ => {}
        }
    }
    if differing.is_empty() {
        return Ok(());
    }
    let flags: Vec<String> = differing
        .iter()
        .map(|k| format!("--{}", k.replace('_', "-")))
        .collect();
    Err(CliError::Usage(format!(
        "--resume takes the run's configuration from its run.json; {} cannot be given with it \
         (only --header, -q, --json and --progress-interval can)",
        flags.join(", ")
    )))
}

/// The recorded arguments to store in a new run's `run.json`: paths made absolute (a resume may
/// start elsewhere), header values left out (only `header_names` are recorded).
pub fn recordable(args: &RunCmd) -> Value {
    let mut a = args.clone();
    let abs = |p: &str| -> String {
        std::path::absolute(p).map_or_else(|_| p.to_owned(), |p| p.display().to_string())
    };
    if !matches!(a.plan.dataset.as_str(), "sample" | "random") {
        a.plan.dataset = abs(&a.plan.dataset);
    }
    if !matches!(a.plan.tokenizer.as_str(), "qwen3" | "none") {
        a.plan.tokenizer = abs(&a.plan.tokenizer);
    }
    for p in [&mut a.output, &mut a.csv].into_iter().flatten() {
        if let Ok(x) = std::path::absolute(&*p) {
            *p = x;
        }
    }
    serde_json::to_value(&a).unwrap_or(Value::Null)
}

/// The names of the `--header` flags (their values are secrets).
pub fn header_names(headers: &[(String, String)]) -> Vec<String> {
    headers.iter().map(|(k, _)| k.clone()).collect()
}

/// Reads `dir` for resuming: checks that its run is not running and not finished, reads its
/// records and decides what is kept. Changes nothing.
pub fn read(dir: &Path, run_json: Value) -> Result<Resume, CliError> {
    let st = health::status(dir, health::DEFAULT_STALL_AFTER, &health::LocalSystem)
        .map_err(|e| CliError::Usage(format!("--resume: {e}")))?;
    match &st.stopped {
        Some(stop) if matches!(stop.by.as_str(), "completed" | "exhausted") => {
            return Err(CliError::Usage(format!(
                "--resume {}: the run already finished (stopped by {}); nothing to resume",
                dir.display(),
                stop.by
            )));
        }
        Some(_) => {}
        None => match st.process {
            Process::Gone => {}
            Process::Running => {
                return Err(CliError::Usage(format!(
                    "--resume {}: the run is still running (pid {}); stop it first (Ctrl-C or \
                     SIGTERM), then resume",
                    dir.display(),
                    st.pid.map_or_else(|| "?".into(), |p| p.to_string())
                )));
            }
            Process::Unknown => {
                return Err(CliError::Usage(format!(
                    "--resume {}: cannot tell whether the run still runs (it ran on host {:?}, \
                     this is {:?}); resume it where it ran",
                    dir.display(),
                    st.host.as_deref().unwrap_or("?"),
                    health::hostname().unwrap_or_default()
                )));
            }
        },
    }
    let mut repairs = Vec::new();
    let turns = read_records(&dir.join("turns.jsonl"), &mut repairs)?;
    let sessions = read_records(&dir.join("sessions.jsonl"), &mut repairs)?;
    Ok(Resume::decided(
        dir.to_owned(),
        run_json,
        turns,
        sessions,
        repairs,
    ))
}

fn flag(v: &Value, k: &str) -> bool {
    v[k].as_bool().unwrap_or(false)
}

fn id(v: &Value) -> &str {
    v["session_id"].as_str().unwrap_or("")
}

impl Resume {
    /// The records read, and what becomes of them.
    fn decided(
        dir: PathBuf,
        run_json: Value,
        turns: Vec<Value>,
        sessions: Vec<Value>,
        repairs: Vec<String>,
    ) -> Resume {
        let mut r = Resume {
            dir,
            run_json,
            turns,
            sessions,
            kept_ids: HashSet::new(),
            replay_warmup: false,
            time_origin_s: 0.0,
            prior_measured_s: 0.0,
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
        let live = |v: &Value| !flag(v, "superseded");
        let measured_began = self.turns.iter().any(|t| live(t) && !flag(t, "warmup"));
        // Sessions whose play an abort cut: their turns say `cancelled`.
        let cut: HashSet<&str> = self
            .turns
            .iter()
            .filter(|t| live(t) && !flag(t, "warmup") && t["error_kind"] == "cancelled")
            .map(id)
            .collect();
        let mut kept = HashSet::new();
        for s in self.sessions.iter_mut().filter(|s| live(s)) {
            if flag(s, "warmup") {
                if !measured_began {
                    s["superseded"] = Value::Bool(true);
                    self.superseded_sessions += 1;
                }
                continue;
            }
            let sid = id(s).to_owned();
            let finished = s["status"] != "truncated" && !cut.contains(sid.as_str());
            // A second finished record of a kept session (never expected) is superseded too.
            if finished && kept.insert(sid) {
                continue;
            }
            s["superseded"] = Value::Bool(true);
            self.superseded_sessions += 1;
        }
        let mut restarted = HashSet::new();
        for t in self.turns.iter_mut().filter(|t| live(t)) {
            let warm = flag(t, "warmup");
            if (warm && !measured_began) || (!warm && !kept.contains(id(t))) {
                if !warm {
                    restarted.insert(id(t).to_owned());
                }
                t["superseded"] = Value::Bool(true);
                self.superseded_turns += 1;
            }
        }
        // Truncated sessions with no turn of their own are restarted too.
        for s in &self.sessions {
            if flag(s, "superseded") && !flag(s, "warmup") && !kept.contains(id(s)) {
                restarted.insert(id(s).to_owned());
            }
        }
        self.restarted = restarted.len() as u64;
        self.kept_ids = kept;
        self.replay_warmup = !measured_began;
        let f = |v: &Value, k: &str| v[k].as_f64();
        self.time_origin_s = self
            .turns
            .iter()
            .chain(&self.sessions)
            .filter_map(|v| f(v, "end_s"))
            .fold(0.0, f64::max);
        let measured = self.turns.iter().filter(|t| !flag(t, "warmup"));
        let first = measured
            .clone()
            .filter_map(|t| f(t, "sent_s"))
            .reduce(f64::min);
        let last = measured.filter_map(|t| f(t, "end_s")).reduce(f64::max);
        self.prior_measured_s = match (first, last) {
            (Some(a), Some(b)) if b > a => b - a,
            _ => 0.0,
        };
    }

    /// Checks the rebuilt plan against the one recorded.
    pub fn check_plan(&self, sessions: u64, turns: u64) -> Result<(), CliError> {
        let p = &self.run_json["plan"];
        let (rs, rt) = (p["sessions"].as_u64(), p["turns"].as_u64());
        if rs != Some(sessions) || rt != Some(turns) {
            return Err(CliError::Usage(format!(
                "--resume {}: the plan rebuilt from run.json has {sessions} sessions and {turns} \
                 turns, the run planned {} and {}: the dataset changed; start a new run",
                self.dir.display(),
                rs.map_or_else(|| "?".into(), |n| n.to_string()),
                rt.map_or_else(|| "?".into(), |n| n.to_string()),
            )));
        }
        Ok(())
    }

    /// Writes the decisions: `turns.jsonl` and `sessions.jsonl` rewritten (atomically) with
    /// their superseded records marked; torn last lines of `events.jsonl` and `scrapes.jsonl`
    /// cut off.
    pub fn apply(&mut self) -> Result<(), CliError> {
        rewrite(&self.dir.join("turns.jsonl"), &self.turns)?;
        rewrite(&self.dir.join("sessions.jsonl"), &self.sessions)?;
        for name in ["events.jsonl", "scrapes.jsonl"] {
            if let Some(r) = repair_tail(&self.dir.join(name))? {
                self.repairs.push(r);
            }
        }
        Ok(())
    }

    /// The records kept from earlier segments (warmup ones included when the warmup is not
    /// played again).
    pub fn kept_records(&self) -> Result<(Vec<TurnRecord>, Vec<SessionRecord>), CliError> {
        let live = |v: &&Value| !flag(v, "superseded");
        let bad = |name: &str, e: serde_json::Error| {
            CliError::Usage(format!(
                "{}: a record bench cannot read back: {e}",
                self.dir.join(name).display()
            ))
        };
        let turns = self
            .turns
            .iter()
            .filter(live)
            .map(|v| serde_json::from_value(v.clone()).map_err(|e| bad("turns.jsonl", e)))
            .collect::<Result<_, _>>()?;
        let sessions = self
            .sessions
            .iter()
            .filter(live)
            .map(|v| serde_json::from_value(v.clone()).map_err(|e| bad("sessions.jsonl", e)))
            .collect::<Result<_, _>>()?;
        Ok((turns, sessions))
    }

    /// The `run.resumed` event's own fields.
    pub fn event_fields(&self) -> Value {
        serde_json::json!({
            "sessions_kept": self.kept_ids.len(),
            "sessions_restarted": self.restarted,
            "turns_superseded": self.superseded_turns,
            "sessions_superseded": self.superseded_sessions,
            "warmup_replayed": self.replay_warmup,
            "time_origin_s": self.time_origin_s,
            "repairs": self.repairs,
        })
    }
}

/// Reads a JSONL file of records (a missing file is empty). A torn last line is dropped and
/// noted in `repairs`; any other unreadable line is an error naming it.
fn read_records(path: &Path, repairs: &mut Vec<String>) -> Result<Vec<Value>, CliError> {
    let file = match std::fs::File::open(path) {
        Ok(f) => f,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(Vec::new()),
        Err(e) => return Err(CliError::Failed(format!("{}: {e}", path.display()))),
    };
    let mut reader = std::io::BufReader::new(file);
    let mut out = Vec::new();
    let mut buf = Vec::new();
    let mut line_no = 0usize;
    loop {
        buf.clear();
        let n = reader
            .read_until(b'\n', &mut buf)
            .map_err(|e| CliError::Failed(format!("{}: {e}", path.display())))?;
        if n == 0 {
            break;
        }
        line_no += 1;
        let complete = buf.last() == Some(&b'\n');
        let line = buf.trim_ascii();
        if line.is_empty() {
            continue;
        }
        match serde_json::from_slice::<Value>(line) {
            Ok(v) if v.is_object() => out.push(v),
            _ if !complete => repairs.push(format!(
                "{}:{line_no}: torn last line ({n} bytes) dropped",
                path.display()
            )),
            _ => {
                return Err(CliError::Usage(format!(
                    "{}:{line_no}: not a JSON record; resume cannot tell what was played",
                    path.display()
                )));
            }
        }
    }
    Ok(out)
}

/// Replaces `path` with `records`, one per line, through a temporary file and a rename.
fn rewrite(path: &Path, records: &[Value]) -> Result<(), CliError> {
    let fail = |e: std::io::Error| CliError::Failed(format!("{}: {e}", path.display()));
    let tmp = path.with_extension("jsonl.resume-tmp");
    let mut w = std::io::BufWriter::new(std::fs::File::create(&tmp).map_err(fail)?);
    for r in records {
        serde_json::to_writer(&mut w, r)
            .map_err(|e| CliError::Failed(format!("{}: {e}", tmp.display())))?;
        w.write_all(b"\n").map_err(fail)?;
    }
    let f = w.into_inner().map_err(|e| fail(e.into_error()))?;
    f.sync_all().map_err(fail)?;
    std::fs::rename(&tmp, path).map_err(fail)
}

/// Makes an append-only file end with a whole line: a torn last line is cut off, a whole one
/// without its newline gets one. Returns what was done.
fn repair_tail(path: &Path) -> Result<Option<String>, CliError> {
    let fail = |e: std::io::Error| CliError::Failed(format!("{}: {e}", path.display()));
    let bytes = match std::fs::read(path) {
        Ok(b) => b,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(None),
        Err(e) => return Err(fail(e)),
    };
    if bytes.is_empty() || bytes.last() == Some(&b'\n') {
        return Ok(None);
    }
    let cut = bytes.iter().rposition(|&b| b == b'\n').map_or(0, |i| i + 1);
    let tail = &bytes[cut..];
    let line_no = bytes[..cut].iter().filter(|&&b| b == b'\n').count() + 1;
    let mut f = std::fs::OpenOptions::new()
        .write(true)
        .open(path)
        .map_err(fail)?;
    if serde_json::from_slice::<Value>(tail.trim_ascii()).is_ok() {
        use std::io::Seek;
        f.seek(std::io::SeekFrom::End(0)).map_err(fail)?;
        f.write_all(b"\n").map_err(fail)?;
        return Ok(Some(format!(
            "{}:{line_no}: newline added after a whole last line",
            path.display()
        )));
    }
    f.set_len(cut as u64).map_err(fail)?;
    Ok(Some(format!(
        "{}:{line_no}: torn last line ({} bytes) dropped",
        path.display(),
        tail.len()
    )))
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use super::*;
    use serde_json::json;

    fn resume(turns: Vec<Value>, sessions: Vec<Value>) -> Resume {
        Resume::decided(PathBuf::new(), json!({}), turns, sessions, Vec::new())
    }

    fn turn(sid: &str, i: u32, sent: f64, end: f64) -> Value {
        json!({"session_id": sid, "turn_index": i, "status": "ok", "sent_s": sent, "end_s": end,
               "warmup": false})
    }

    fn sess(sid: &str, status: &str, end: f64) -> Value {
        json!({"session_id": sid, "status": status, "end_s": end, "warmup": false})
    }

    #[test]
    fn finished_sessions_are_kept_and_partial_ones_superseded() {
        let mut cut = turn("c", 0, 2.0, 3.0);
        cut["status"] = json!("error");
        cut["error_kind"] = json!("cancelled");
        let r = resume(
            vec![
                turn("a", 0, 1.0, 2.0),
                turn("a", 1, 2.0, 3.0),
                turn("b", 0, 1.5, 2.5), // no session record: partial
                cut,                    // its session "failed", but an abort cut it
                turn("d", 0, 1.0, 4.0),
            ],
            vec![
                sess("a", "completed", 3.0),
                sess("c", "failed", 3.0),
                sess("d", "truncated", 4.5),
                sess("e", "context_guard", 1.2), // no turn at all: finished
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
        assert_eq!(r.time_origin_s, 4.5);
        assert_eq!(r.prior_measured_s, 3.0); // 1.0 .. 4.0
        let marked: Vec<bool> = r.turns.iter().map(|t| flag(t, "superseded")).collect();
        assert_eq!(marked, [false, false, true, true, true]);
    }

    #[test]
    fn a_crash_in_the_warmup_replays_it_and_supersedes_its_records() {
        let mut w = turn("w", 0, 0.0, 1.0);
        w["warmup"] = json!(true);
        let mut ws = sess("w", "completed", 1.0);
        ws["warmup"] = json!(true);
        let r = resume(vec![w], vec![ws]);
        assert!(r.replay_warmup);
        assert_eq!((r.superseded_turns, r.superseded_sessions), (1, 1));
        assert_eq!(r.restarted, 0);
        assert_eq!(r.prior_measured_s, 0.0);
    }

    #[test]
    fn records_superseded_before_stay_so_and_count_for_the_timeline_only() {
        let mut old = turn("a", 0, 0.5, 1.0);
        old["superseded"] = json!(true);
        let r = resume(
            vec![old, turn("a", 0, 2.0, 3.0)],
            vec![sess("a", "completed", 3.0)],
        );
        assert_eq!(r.superseded_turns, 0);
        assert_eq!(r.prior_measured_s, 2.5);
        assert!(r.kept_ids.contains("a"));
    }

    #[test]
    fn torn_lines_are_dropped_and_other_bad_lines_refused() {
        let d = std::env::temp_dir().join(format!("bench-resume-unit-{}", std::process::id()));
        std::fs::create_dir_all(&d).unwrap();
        let p = d.join("turns.jsonl");
        std::fs::write(&p, "{\"session_id\":\"a\"}\n{\"session_id\":\"b\",\"tu").unwrap();
        let mut repairs = Vec::new();
        let v = read_records(&p, &mut repairs).unwrap();
        assert_eq!(v.len(), 1);
        assert_eq!(repairs.len(), 1);
        assert!(
            repairs[0].contains("turns.jsonl:2: torn last line"),
            "{repairs:?}"
        );

        std::fs::write(&p, "{\"session_id\":\"a\"}\ngarbage\n{}\n").unwrap();
        let e = read_records(&p, &mut repairs).unwrap_err().to_string();
        assert!(e.contains("turns.jsonl:2: not a JSON record"), "{e}");

        let ev = d.join("events.jsonl");
        std::fs::write(&ev, "{\"event\":\"run.started\"}\n{\"event\":\"hea").unwrap();
        let r = repair_tail(&ev).unwrap().unwrap();
        assert!(
            r.contains("events.jsonl:2: torn last line (13 bytes)"),
            "{r}"
        );
        assert_eq!(
            std::fs::read_to_string(&ev).unwrap(),
            "{\"event\":\"run.started\"}\n"
        );
        std::fs::write(&ev, "{\"event\":\"run.started\"}").unwrap();
        assert!(repair_tail(&ev).unwrap().unwrap().contains("newline added"));
        assert_eq!(
            std::fs::read_to_string(&ev).unwrap(),
            "{\"event\":\"run.started\"}\n"
        );
        assert_eq!(repair_tail(&ev).unwrap(), None);
        let _ = std::fs::remove_dir_all(&d);
    }
}
