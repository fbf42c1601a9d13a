//! The embedding example (`crates/bench-run/examples/run_dir.rs`, compiled in here) leaves a
//! run directory `bench status` reads and `bench run --resume` finishes after a SIGKILL.

use std::io::{BufRead, BufReader};
use std::path::Path;
use std::process::{Command, Stdio};

use crate::{read_jsonl, run, status_json, tempdir};

#[allow(dead_code)]
#[path = "../../../bench-run/examples/run_dir.rs"]
mod run_dir_example;

/// Set in the child process that plays the example (this test binary, re-run).
const CHILD_DIR: &str = "BENCH_EMBED_CHILD_DIR";

/// Not a test of its own: the example's code, run by a child process of the tests below.
#[test]
fn example_child() {
    let Some(dir) = std::env::var_os(CHILD_DIR) else {
        return;
    };
    let rt = tokio::runtime::Runtime::new().unwrap();
    let report = rt.block_on(run_dir_example::run(Path::new(&dir))).unwrap();
    println!("done: {}", report.stopped_by);
}

fn child(dir: &Path) -> std::process::Child {
    Command::new(std::env::current_exe().unwrap())
        .args([
            "--exact",
            "embed::example_child",
            "--nocapture",
            "--test-threads",
            "1",
        ])
        .env(CHILD_DIR, dir)
        .stdout(Stdio::piped())
        .stderr(Stdio::null())
        .spawn()
        .unwrap()
}

fn sessions_once(dir: &Path) {
    let sessions = read_jsonl(&dir.join("sessions.jsonl"));
    let mut live: Vec<&str> = sessions
        .iter()
        .filter(|s| s["superseded"] != true)
        .map(|s| s["session_id"].as_str().unwrap())
        .collect();
    live.sort_unstable();
    let n = live.len();
    live.dedup();
    assert_eq!(
        (n, live.len()),
        (12, 12),
        "every planned session exactly once"
    );
}

#[test]
fn the_example_leaves_a_directory_bench_status_reads_as_completed() {
    let tmp_dir = tempdir("embed-status");
    let dir = tmp_dir.join("run");
    let out = child(&dir).wait_with_output().unwrap();
    assert!(out.status.success());
    let text = String::from_utf8_lossy(&out.stdout);
    assert_eq!(
        text.matches("session ").count(),
        12,
        "its observer saw every session"
    );
    let s = status_json(&dir);
    assert_eq!(s["stopped"]["by"], "completed");
    assert_eq!(s["process"], "gone");
    assert_eq!(
        (s["sessions_done"].as_u64(), s["turns_done"].as_u64()),
        (Some(12), Some(48))
    );
    sessions_once(&dir);
}

#[test]
fn after_a_sigkill_bench_run_resume_finishes_the_example_run_once() {
    let tmp_dir = tempdir("embed-kill");
    let dir = tmp_dir.join("run");
    let mut c = child(&dir);
    // Killed as soon as its observer saw the first session finish: mid-run.
    let mut lines = BufReader::new(c.stdout.take().unwrap()).lines();
    let first = lines.find(|l| l.as_ref().is_ok_and(|l| l.starts_with("session ")));
    assert!(first.is_some(), "the example printed no session");
    c.kill().unwrap();
    c.wait().unwrap();
    let s = status_json(&dir);
    assert_eq!(s["crashed"], true, "{s}");
    assert!(s["sessions_done"].as_u64().unwrap() < 12, "{s}");
    // The spec says `tokenizer: chars`; the resume rebuilds the same plan from it.
    let spec: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(dir.join("run.json")).unwrap()).unwrap();
    assert_eq!(spec["spec"]["plan"]["tokenizer"], "chars");
    let out = run(&["run", "--resume", dir.to_str().unwrap(), "-q", "--json"]);
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let result: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(result["summary"]["sessions_completed"], 12);
    assert_eq!(result["summary"]["turns_ok"], 48);
    assert_eq!(status_json(&dir)["stopped"]["by"], "completed");
    sessions_once(&dir);
}
