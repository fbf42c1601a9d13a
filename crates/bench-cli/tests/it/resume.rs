//! `bench run --resume`: crash safety under SIGKILL, and what resume refuses.

use std::collections::{HashMap, HashSet};
use std::path::Path;
use std::process::{Child, Stdio};
use std::time::{Duration, Instant};

use bench_rundir::{LifecycleEvent, Phase};
use serde_json::Value;

use crate::{bench, random_run_args, run, run_json, serial, spawn_sim, status_json, tempdir};

const SESSIONS: u64 = 16;
const TURNS: u64 = 5;

/// The records of a JSONL file so far: a missing file is empty, and a line still being written
/// (or cut by a kill) is skipped. (`crate::read_jsonl` is the strict form, for finished runs.)
fn jsonl(path: &Path) -> Vec<Value> {
    std::fs::read_to_string(path)
        .unwrap_or_default()
        .lines()
        .filter_map(|l| serde_json::from_str(l).ok())
        .collect()
}

/// A small xorshift: the kill moments are random, and the seed is printed with any failure.
struct Rng(u64);

impl Rng {
    fn below(&mut self, n: u64) -> u64 {
        self.0 ^= self.0 << 13;
        self.0 ^= self.0 >> 7;
        self.0 ^= self.0 << 17;
        self.0 % n
    }
}

/// `bench run` against `url` (or `--resume dir` when `resume`), records in `dir`.
fn start(url: &str, dir: &Path, resume: bool) -> Child {
    let mut c = bench();
    if resume {
        c.args(["run", "--resume", dir.to_str().unwrap(), "-q"]);
    } else {
        c.args(random_run_args(
            TURNS,
            SESSIONS,
            dir,
            &[
                "--base-url",
                url,
                "--routing-key",
                "x-session-id",
                "--output-len",
                "16",
                "--gap-policy",
                "fixed:40",
                "-c",
                "4",
                "--warmup-sessions",
                "2",
                "--metrics-interval",
                "200ms",
                "-q",
            ],
        ));
    }
    c.stdout(Stdio::null())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap()
}

/// Every request the simulator saw for turn N > 0 of a session has its predecessor's record
/// (turn N − 1 of that session) in turns.jsonl: a record reaches the file before the next
/// turn is sent.
fn check_predecessors(log: &Path, dir: &Path, seed: u64) {
    let records: HashSet<(String, u64)> = jsonl(&dir.join("turns.jsonl"))
        .iter()
        .map(|t| {
            (
                t["session_id"].as_str().unwrap().to_owned(),
                t["turn_index"].as_u64().unwrap(),
            )
        })
        .collect();
    let requests = jsonl(log);
    assert!(!requests.is_empty(), "seed {seed}: no request logged");
    for r in &requests {
        let session = r["session"].as_str().expect("the session header is logged");
        let turn = r["turn_index"].as_u64().unwrap();
        assert!(turn < TURNS, "seed {seed}: {r}");
        if turn > 0 {
            assert!(
                records.contains(&(session.to_owned(), turn - 1)),
                "seed {seed}: the simulator saw turn {turn} of {session} but turns.jsonl has \
                 no record of turn {}",
                turn - 1
            );
        }
    }
}

#[test]
fn sigkill_at_random_moments_loses_no_record_and_resume_plays_each_session_once() {
    let _serial = serial();
    let seed = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap()
        .as_nanos() as u64
        | 1;
    let mut rng = Rng(seed);
    let dir = tempdir("resume-kill");
    let run_dir = dir.join("run");
    let log = dir.join("requests.jsonl");
    let (_sim, url) = spawn_sim(&[
        "--ttft-ms",
        "30",
        "--itl-ms",
        "2",
        "--request-log",
        log.to_str().unwrap(),
    ]);

    let mut kills = 0;
    for round in 0..4 {
        let before = jsonl(&run_dir.join("turns.jsonl")).len();
        let mut child = start(&url, &run_dir, round > 0);
        // Wait for this process's first record, then a random moment more.
        let t0 = Instant::now();
        while jsonl(&run_dir.join("turns.jsonl")).len() <= before {
            if let Some(st) = child.try_wait().unwrap() {
                let out = child.wait_with_output().unwrap();
                panic!(
                    "seed {seed}: round {round} exited {st} before a turn: {}",
                    String::from_utf8_lossy(&out.stderr)
                );
            }
            assert!(
                t0.elapsed() < Duration::from_secs(60),
                "seed {seed}: no turn"
            );
            std::thread::sleep(Duration::from_millis(5));
        }
        std::thread::sleep(Duration::from_millis(rng.below(600)));
        if child.try_wait().unwrap().is_some() {
            break; // it finished first: nothing left to kill
        }
        child.kill().unwrap(); // SIGKILL
        child.wait().unwrap();
        kills += 1;
        std::thread::sleep(Duration::from_millis(200)); // the simulator logs the cut request

        let s = status_json(&run_dir);
        assert_eq!(s["crashed"], true, "seed {seed}: round {round}: {s}");
        assert_eq!(s["process"], "gone", "seed {seed}: {s}");
        assert_eq!(s["stopped"], Value::Null, "seed {seed}: {s}");
        check_predecessors(&log, &run_dir, seed);
    }
    assert!(kills >= 2, "seed {seed}: only {kills} kills landed");

    // The last resume runs to its end.
    let out = bench()
        .args(["run", "--resume", run_dir.to_str().unwrap(), "-q", "--json"])
        .output()
        .unwrap();
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(out.status.success(), "seed {seed}: {stderr}");
    assert!(stderr.contains("bench run: resuming"), "{stderr}");
    let result: Value = serde_json::from_slice(&out.stdout).unwrap();
    check_predecessors(&log, &run_dir, seed);

    // Exactly the planned sessions, each once, each with all its turns once.
    let sum = &result["summary"];
    assert_eq!(sum["sessions_completed"], SESSIONS, "seed {seed}: {sum}");
    assert_eq!(sum["sessions_truncated"], 0, "seed {seed}: {sum}");
    assert_eq!(sum["turns_ok"], SESSIONS * TURNS, "seed {seed}: {sum}");
    let live = |v: &&Value| v["superseded"] != true && v["warmup"] != true;
    let sessions = jsonl(&run_dir.join("sessions.jsonl"));
    let mut ids: Vec<&str> = sessions
        .iter()
        .filter(live)
        .map(|s| s["session_id"].as_str().unwrap())
        .collect();
    ids.sort_unstable();
    ids.dedup();
    assert_eq!(ids.len() as u64, SESSIONS, "seed {seed}");
    assert_eq!(
        sessions.iter().filter(live).count() as u64,
        SESSIONS,
        "seed {seed}"
    );
    let turns = jsonl(&run_dir.join("turns.jsonl"));
    let mut per: HashMap<(String, u64), u32> = HashMap::new();
    for t in turns.iter().filter(live) {
        *per.entry((
            t["session_id"].as_str().unwrap().to_owned(),
            t["turn_index"].as_u64().unwrap(),
        ))
        .or_default() += 1;
    }
    assert_eq!(per.len() as u64, SESSIONS * TURNS, "seed {seed}");
    assert!(per.values().all(|&n| n == 1), "seed {seed}: {per:?}");
    // The kills cut sessions short: their earlier records are kept, marked.
    assert!(
        turns.iter().any(|t| t["superseded"] == true),
        "seed {seed}: no record superseded after {kills} kills"
    );

    // bench status: stopped by completed, all done; one resume per restart.
    let s = status_json(&run_dir);
    assert_eq!(s["stopped"]["by"], "completed", "seed {seed}: {s}");
    assert_eq!(s["crashed"], false, "{s}");
    assert_eq!(s["sessions_done"], SESSIONS, "{s}");
    assert_eq!(s["turns_done"], SESSIONS * TURNS, "{s}");
    assert_eq!(s["turns_planned"], SESSIONS * TURNS, "{s}");
    let events = crate::events(&run_dir);
    let resumed = events
        .iter()
        .filter(|e| matches!(e, LifecycleEvent::Resumed(_)))
        .count();
    assert_eq!(resumed, kills, "seed {seed}");
    // One timeline: every segment's records come after the previous segment's.
    let phases: Vec<Phase> = events
        .iter()
        .filter_map(|e| match e {
            LifecycleEvent::Phase { phase } => Some(*phase),
            _ => None,
        })
        .collect();
    assert!(
        phases.ends_with(&[Phase::Measuring, Phase::Draining]),
        "{phases:?}"
    );

    // Nothing left: a further resume is refused.
    let out = run(&["run", "--resume", run_dir.to_str().unwrap()]);
    assert_eq!(out.status.code(), Some(2));
    let e = String::from_utf8_lossy(&out.stderr);
    assert!(e.contains("already finished (stopped by completed)"), "{e}");
    let _ = std::fs::remove_dir_all(&dir);
}

#[test]
fn resume_refuses_a_running_run_and_other_flags_and_asks_for_headers_again() {
    let _serial = serial();
    let dir = tempdir("resume-refuse");
    let run_dir = dir.join("run");
    let (_sim, url) = spawn_sim(&["--ttft-ms", "100", "--itl-ms", "20"]);
    let mut child = bench()
        .args(random_run_args(
            3,
            8,
            &run_dir,
            &[
                "--base-url",
                &url,
                "--header",
                "X-Api-Key=sk-secret-123",
                "--output-len",
                "10",
                "-c",
                "2",
                "-q",
            ],
        ))
        .stdout(Stdio::null())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let t0 = Instant::now();
    while jsonl(&run_dir.join("turns.jsonl")).is_empty() {
        assert!(t0.elapsed() < Duration::from_secs(60));
        std::thread::sleep(Duration::from_millis(10));
    }
    let dir_s = run_dir.to_str().unwrap();
    let refused = |args: &[&str], needle: &str| {
        let out = run(args);
        let e = String::from_utf8_lossy(&out.stderr);
        assert_eq!(out.status.code(), Some(2), "{args:?}: {e}");
        assert!(e.contains(needle), "{args:?}: {e}");
        assert_eq!(e.trim().lines().count(), 1, "{e}");
    };
    // While it runs.
    refused(
        &[
            "run",
            "--resume",
            dir_s,
            "--header",
            "X-Api-Key=sk-secret-123",
        ],
        "still running",
    );
    // The secret never reached the run directory.
    for f in ["run.json", "events.jsonl", "turns.jsonl"] {
        let text = std::fs::read_to_string(run_dir.join(f)).unwrap_or_default();
        assert!(!text.contains("sk-secret-123"), "{f}");
    }
    child.kill().unwrap();
    child.wait().unwrap();
    // Configuration flags are recorded, not given again.
    refused(
        &["run", "--resume", dir_s, "-c", "3", "--turns", "4"],
        "--concurrency, --turns cannot be given with it (only --header, --secret-header, -q, \
         --json, --progress-interval, --no-progress-bar can)",
    );
    // The header's value was never recorded: it must come again.
    refused(&["run", "--resume", dir_s], "X-Api-Key");
    refused(
        &["run", "--resume", dir.join("nowhere").to_str().unwrap()],
        "not a run directory",
    );
    let result = run_json(&[
        "run",
        "--resume",
        dir_s,
        "--header",
        "X-Api-Key=sk-secret-123",
        "-q",
        "--json",
    ]);
    assert_eq!(result["summary"]["sessions_completed"], 8);
    assert_eq!(result["summary"]["turns_ok"], 24);
    let _ = std::fs::remove_dir_all(&dir);
}
