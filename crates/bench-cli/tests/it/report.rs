//! `bench report`: every format from a real run directory, the result recomputed when
//! result.json is missing or stale, and clear refusals.

use serde_json::Value;

use crate::{random_run_args, run, tempdir};

#[test]
fn every_format_renders_and_a_missing_or_stale_result_is_recomputed() {
    let base = tempdir("report");
    let dir = base.join("run");
    let out = run(&random_run_args(
        3,
        6,
        &dir,
        &[
            "--concurrency",
            "3",
            "--sim-ttft-ms",
            "5",
            "--sim-itl-ms",
            "1",
            "-q",
        ],
    ));
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let written: Value =
        serde_json::from_slice(&std::fs::read(dir.join("result.json")).unwrap()).unwrap();
    let d = dir.to_str().unwrap();

    // text: the verdict first, then the table; nothing recomputed.
    let text = run(&["report", d]);
    assert!(text.status.success());
    let stdout = String::from_utf8(text.stdout).unwrap();
    let verdict = written["validity"]["verdict"].as_str().unwrap();
    assert!(stdout.starts_with(&format!("{verdict}: ")), "{stdout}");
    assert!(
        stdout.contains("turns          ok 18  failed 0"),
        "{stdout}"
    );
    assert!(!String::from_utf8_lossy(&text.stderr).contains("recomputed"));

    // json: result.json's content (given the file itself, too).
    let json = run(&[
        "report",
        dir.join("result.json").to_str().unwrap(),
        "--format",
        "json",
    ]);
    let v: Value = serde_json::from_slice(&json.stdout).unwrap();
    assert_eq!(v, written);

    // csv: a header and one row per turn record.
    let csv = run(&["report", d, "--format", "csv"]);
    let csv = String::from_utf8(csv.stdout).unwrap();
    assert!(csv.starts_with("session_id,replay,turn_index,status"));
    assert_eq!(csv.lines().count(), 1 + 18);

    // markdown: the verdict and tables, each figure's window named.
    let md = run(&["report", d, "--format", "markdown"]);
    let md = String::from_utf8(md.stdout).unwrap();
    assert!(md.contains("**Validity: "), "{md}");
    assert!(md.contains("| TTFT | steady |"), "{md}");
    assert!(md.contains("| TTFT | whole run |"), "{md}");

    // html to a file (written whole).
    let html_path = base.join("report.html");
    let html = run(&[
        "report",
        d,
        "--format",
        "html",
        "-o",
        html_path.to_str().unwrap(),
    ]);
    assert!(
        html.status.success(),
        "{}",
        String::from_utf8_lossy(&html.stderr)
    );
    let page = std::fs::read_to_string(&html_path).unwrap();
    assert!(page.starts_with("<!doctype html") || page.starts_with("<!DOCTYPE html"));
    assert!(
        std::fs::read_dir(&base).unwrap().all(|e| !e
            .unwrap()
            .file_name()
            .to_string_lossy()
            .ends_with(".tmp"))
    );

    // Missing result.json: recomputed from the records, with the same figures.
    std::fs::rename(dir.join("result.json"), base.join("kept.json")).unwrap();
    let again = run(&["report", d, "--format", "json"]);
    assert!(again.status.success());
    assert!(
        String::from_utf8_lossy(&again.stderr)
            .contains("recomputed the result from the records: no result.json")
    );
    let r: Value = serde_json::from_slice(&again.stdout).unwrap();
    for key in ["turns_ok", "turns_failed", "sessions_completed"] {
        assert_eq!(r["summary"][key], written["summary"][key], "{key}");
    }
    assert_eq!(
        r["summary"]["ttft_ms"]["p50"],
        written["summary"]["ttft_ms"]["p50"]
    );
    assert!(r["validity"]["verdict"].is_string());

    // Stale result.json (fewer turns than the records): recomputed, and why is said.
    let mut stale = written.clone();
    stale["summary"]["turns_ok"] = Value::from(5);
    std::fs::write(dir.join("result.json"), serde_json::to_vec(&stale).unwrap()).unwrap();
    let again = run(&["report", d, "--format", "json"]);
    assert!(
        String::from_utf8_lossy(&again.stderr)
            .contains("counts 5 measured turns but turns.jsonl holds 18")
    );
    let r: Value = serde_json::from_slice(&again.stdout).unwrap();
    assert_eq!(r["summary"]["turns_ok"], 18);
    std::fs::remove_dir_all(&base).unwrap();
}

#[test]
fn a_path_that_is_not_a_run_directory_is_refused_in_one_line() {
    let base = tempdir("report-bad");
    let out = run(&["report", base.join("nope").to_str().unwrap()]);
    assert_eq!(out.status.code(), Some(2));
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(err.contains("no such run directory"), "{err}");
    assert_eq!(err.trim().lines().count(), 1, "{err}");

    let out = run(&["report", base.to_str().unwrap()]);
    assert_eq!(out.status.code(), Some(2));
    assert!(String::from_utf8_lossy(&out.stderr).contains("not a run directory (no run.json)"));

    std::fs::write(base.join("run.json"), "{not json").unwrap();
    let out = run(&["report", base.to_str().unwrap()]);
    assert_eq!(out.status.code(), Some(2));
    assert!(String::from_utf8_lossy(&out.stderr).contains("run.json"));
    std::fs::remove_dir_all(&base).unwrap();
}

/// Against a real simulator: a run on a cold server passes the warm-cache check; the same run
/// again, on the cache the first one left, fails it; flushing the cache first passes again.
#[test]
fn a_server_warm_before_the_run_is_caught_by_the_warm_cache_check() {
    let _serial = crate::serial();
    let (sim, url) = crate::spawn_sim(&["--time-scale", "0.05"]);
    let base = tempdir("report-warm");
    let play = |name: &str, extra: &[&str]| -> Value {
        let dir = base.join(name);
        let mut flags = vec!["--base-url", &url, "--concurrency", "2", "-q", "--json"];
        flags.extend_from_slice(extra);
        let out = run(&random_run_args(2, 4, &dir, &flags));
        assert!(
            out.status.success(),
            "{}",
            String::from_utf8_lossy(&out.stderr)
        );
        let r: Value = serde_json::from_slice(&out.stdout).unwrap();
        r["validity"]["checks"]
            .as_array()
            .unwrap()
            .iter()
            .find(|c| c["name"] == "warm_cache")
            .unwrap()
            .clone()
    };
    let cold = play("cold", &[]);
    assert_eq!(cold["status"], "pass", "{cold}");
    let warm = play("warm", &[]);
    assert_eq!(warm["status"], "fail", "{warm}");
    assert!(
        warm["explanation"]
            .as_str()
            .unwrap()
            .contains("was warm before the run"),
        "{warm}"
    );
    let flushed = play("flushed", &["--flush-cache"]);
    assert_eq!(flushed["status"], "pass", "{flushed}");
    crate::stop_sim(sim);
    std::fs::remove_dir_all(&base).unwrap();
}
