//! `bench status` over real run directories.

use serde_json::Value;

use crate::{random_run_args, run, run_json, serial, status_json, tempdir};

#[test]
fn a_finished_run_is_stopped_by_completed_and_its_process_gone() {
    let _serial = serial();
    let dir = tempdir("status-finished");
    let run_dir = dir.join("run");
    let out = run(&random_run_args(
        2,
        3,
        &run_dir,
        &["--sim-instant", "-c", "2", "--quiet"],
    ));
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );

    let s = status_json(&run_dir);
    assert_eq!(s["stopped"]["by"], "completed", "{s}");
    assert_eq!(s["process"], "gone", "{s}");
    assert_eq!(s["crashed"], false, "{s}");
    assert_eq!(s["stalled"], false, "{s}");
    assert_eq!(s["phase"], Value::Null, "{s}");
    assert_eq!(s["time_left_s"], Value::Null, "{s}");
    assert_eq!(s["turns_planned"], 6, "{s}");
    assert_eq!(s["turns_done"], s["turns_planned"], "{s}");
    assert_eq!(s["sessions_done"], 3, "{s}");
    assert_eq!(s["sessions_planned"], 3, "{s}");
    assert!(s["tokens"]["input"].as_u64().unwrap() > 0, "{s}");
    assert!(s["tokens"]["output"].as_u64().unwrap() > 0, "{s}");
    assert_eq!(s["torn_lines"], 0, "{s}");

    // The text form says the same in a few lines.
    let out = run(&["status", run_dir.to_str().unwrap()]);
    assert_eq!(out.status.code(), Some(0));
    let text = String::from_utf8_lossy(&out.stdout);
    assert!(text.contains("stopped by completed"), "{text}");
    assert!(text.contains("6/6 (100.0%)"), "{text}");
    let _ = std::fs::remove_dir_all(&dir);
}

#[test]
fn a_missing_run_directory_is_exit_2_naming_it() {
    let dir = tempdir("status-missing");
    let missing = dir.join("nowhere");
    let out = run(&["status", missing.to_str().unwrap()]);
    assert_eq!(out.status.code(), Some(2));
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(stderr.contains(missing.to_str().unwrap()), "{stderr}");
    assert_eq!(stderr.trim().lines().count(), 1, "{stderr}");
    let _ = std::fs::remove_dir_all(&dir);
}

#[test]
fn a_run_whose_sessions_end_early_stops_by_exhausted() {
    let dir = tempdir("status-exhausted");
    let run_dir = dir.join("run");
    // The context guard ends every session before the turn that would not fit the window.
    let result = run_json(&random_run_args(
        6,
        3,
        &run_dir,
        &[
            "--sim-instant",
            "-c",
            "2",
            "--max-model-len",
            "1500",
            "--quiet",
            "--json",
        ],
    ));
    assert_eq!(result["summary"]["sessions_context_guard"], 3, "{result}");
    let s = status_json(&run_dir);
    assert_eq!(s["stopped"]["by"], "exhausted", "{s}");
    assert!(
        s["stopped"]["reason"]
            .as_str()
            .unwrap()
            .contains("3 of 3 sessions ended early"),
        "{s}"
    );
    let _ = std::fs::remove_dir_all(&dir);
}

/// A run directory written before run specs (`fixtures/rundirs/`, by bench 0.1.0).
fn pre_spec(name: &str) -> std::path::PathBuf {
    std::path::Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("../../fixtures/rundirs")
        .join(name)
}

#[test]
fn run_directories_of_the_earlier_format_are_read_and_refused_for_resume_in_one_line() {
    let done = status_json(&pre_spec("pre-spec-completed"));
    assert_eq!(done["stopped"]["by"], "completed");
    assert_eq!(
        (done["sessions_done"].as_u64(), done["turns_done"].as_u64()),
        (Some(3), Some(6))
    );
    assert_eq!(done["tokens"]["output"], 48);
    let cut = status_json(&pre_spec("pre-spec-crashed"));
    assert!(cut["stopped"].is_null());
    assert_eq!(
        (cut["sessions_done"].as_u64(), cut["turns_done"].as_u64()),
        (Some(2), Some(5))
    );
    assert_eq!(cut["torn_lines"], 1);
    assert_eq!(cut["process"], "unknown", "it ran on another host");
    for name in ["pre-spec-completed", "pre-spec-crashed"] {
        let out = run(&["run", "--resume", pre_spec(name).to_str().unwrap()]);
        assert_eq!(out.status.code(), Some(2));
        let e = String::from_utf8_lossy(&out.stderr);
        assert_eq!(e.trim().lines().count(), 1, "{e}");
        assert!(e.contains("written by an older bench"), "{e}");
    }
}
