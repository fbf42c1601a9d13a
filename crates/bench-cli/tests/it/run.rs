//! `bench run` end to end: the replay against the simulator, the run directory, result.json.

use bench_rundir::{LifecycleEvent, ScrapePhase, StopBy};
use serde_json::Value;

use crate::{
    random_run_args, read_jsonl, run, run_json, serial, signal, sim_metrics as metrics, spawn_sim,
    stop_sim, tempdir,
};

fn p50(v: &Value, k: &str) -> f64 {
    v["summary"][k]["p50"]
        .as_f64()
        .unwrap_or_else(|| panic!("summary.{k}.p50 missing"))
}

#[test]
fn fixed_latency_is_reported_exactly_at_c1_and_c64() {
    let _serial = serial();
    let (sim, url) = spawn_sim(&["--ttft-ms", "50", "--itl-ms", "10"]);
    for (c, n) in [("1", 4), ("64", 64)] {
        // Best of three runs: the machine is shared, and a neighbour's burst must not decide a
        // check of our own accuracy (a consistent error still fails all three).
        let mut seen = Vec::new();
        for attempt in 0..3 {
            let dir = tempdir(&format!("run-fixed-{c}-{attempt}"));
            let v = run_json(&random_run_args(
                8,
                n,
                &dir,
                &[
                    "--base-url",
                    &url,
                    "--max-concurrency",
                    c,
                    "--json",
                    "--output-len",
                    "16",
                    "--input-increment",
                    "64",
                ],
            ));
            assert_eq!(v["summary"]["turns_ok"], 8 * n);
            assert_eq!(v["summary"]["turns_failed"], 0);
            assert_eq!(v["summary"]["sessions_completed"], n);
            // The run directory holds every record.
            for f in [
                "run.json",
                "events.jsonl",
                "turns.jsonl",
                "sessions.jsonl",
                "result.json",
            ] {
                assert!(dir.join(f).is_file(), "{f} missing");
            }
            let turns = std::fs::read_to_string(dir.join("turns.jsonl")).unwrap();
            assert_eq!(turns.lines().count() as u64, 8 * n);
            let events = crate::events(&dir);
            assert!(
                matches!(events.first(), Some(LifecycleEvent::Started(o)) if o.turns_planned == Some(8 * n)),
                "{events:?}"
            );
            assert!(
                matches!(
                    events.last(),
                    Some(LifecycleEvent::Stopped {
                        by: StopBy::Completed,
                        ..
                    })
                ),
                "{events:?}"
            );
            let _ = std::fs::remove_dir_all(&dir);
            let (ttft, tpot) = (p50(&v, "ttft_ms"), p50(&v, "tpot_ms"));
            seen.push((ttft, tpot));
            if (47.5..=52.5).contains(&ttft) && (9.5..=10.5).contains(&tpot) {
                break;
            }
        }
        let &(ttft, tpot) = seen.last().unwrap();
        assert!(
            (47.5..=52.5).contains(&ttft),
            "C={c}: ttft p50 not within 5% of 50 in 3 runs: {seen:?}"
        );
        assert!(
            (9.5..=10.5).contains(&tpot),
            "C={c}: tpot p50 not within 5% of 10 in 3 runs: {seen:?}"
        );
    }
    stop_sim(sim);
}

#[test]
fn queueing_shows_at_high_concurrency_and_the_cache_ratio_matches_the_server() {
    let _serial = serial();
    // Small KV pool and few slots: requests queue at C=64.
    let (sim, url) = spawn_sim(&[
        "--kv-capacity-tokens",
        "131072",
        "--max-num-seqs",
        "8",
        "--time-scale",
        "0.2",
    ]);
    let mut ttft = Vec::new();
    let mut last = Value::Null;
    let mut server_ratio = 0.0;
    let mut phases = Vec::new();
    for c in ["1", "64"] {
        let dir = tempdir(&format!("run-queue-{c}"));
        let args = random_run_args(
            3,
            64,
            &dir,
            &[
                "--base-url",
                &url,
                "-c",
                c,
                "--json",
                "--output-len",
                "16",
                "--input-increment",
                "256",
            ],
        );
        let before = metrics(&url);
        last = run_json(&args);
        let after = metrics(&url);
        let d = |k: &str| after[k] - before[k];
        server_ratio = d("vllm:prefix_cache_hits_total") / d("vllm:prefix_cache_queries_total");
        ttft.push(p50(&last, "ttft_ms"));
        phases = bench_rundir::jsonl::read::<bench_telemetry::Scrape>(&dir.join("scrapes.jsonl"))
            .unwrap()
            .records
            .into_iter()
            .map(|s| s.phase)
            .collect();
        let _ = std::fs::remove_dir_all(&dir);
    }
    assert!(
        ttft[1] > 3.0 * ttft[0],
        "TTFT p50 at C=64 ({}) should be well above C=1 ({})",
        ttft[1],
        ttft[0]
    );
    // The client's token-weighted prefix-cache ratio equals the server's own counters, and so
    // does the ratio bench computed from its own /metrics scrapes (baseline → final).
    assert_eq!(last["server"]["backend"], "vllm");
    // A baseline before the first turn, a final one after the last, and the summary counts
    // exactly the scrapes of the measured run.
    assert_eq!(phases.first(), Some(&ScrapePhase::Baseline), "{phases:?}");
    assert_eq!(phases.last(), Some(&ScrapePhase::Final), "{phases:?}");
    let measured = phases.iter().filter(|p| p.is_measured()).count() as u64;
    assert_eq!(
        last["server"]["scrapes"].as_u64(),
        Some(measured),
        "{}",
        last["server"]
    );
    let scraped = last["server"]["prefix_cache_ratio"].as_f64().unwrap();
    assert!(
        (scraped - server_ratio).abs() <= 1e-9,
        "scraped {scraped} vs server {server_ratio}"
    );
    let ratio = last["overall"]["prefix_cache_ratio"].as_f64().unwrap();
    assert!(ratio > 0.1, "client {ratio} vs server {server_ratio}");
    assert!(
        (ratio - server_ratio).abs() <= 0.01 * server_ratio,
        "client {ratio} vs server {server_ratio}"
    );
    stop_sim(sim);
}

#[test]
fn failing_turns_are_recorded_and_the_exit_code_follows_max_error_rate() {
    let _serial = serial();
    let url = crate::scripted_server(|s| {
        use std::io::Write;
        let _ = write!(
            s,
            "HTTP/1.1 500 Internal Server Error\r\ncontent-length: 4\r\n\r\nboom"
        );
    });
    let dir = tempdir("run-fail");
    let args = random_run_args(
        2,
        2,
        &dir,
        &["--base-url", &url, "--model", "m", "-c", "2", "--json"],
    );
    let out = run(&args);
    assert_eq!(
        out.status.code(),
        Some(1),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let v: Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(v["summary"]["turns_failed"], 4);
    assert_eq!(v["summary"]["errors_by_kind"]["http_status"], 4);
    // Its /metrics answers 500 too: scraping is disabled once, with a warning and an event.
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert_eq!(
        stderr
            .matches("warning: /metrics scraping disabled: GET /metrics answered HTTP 500")
            .count(),
        1,
        "{stderr}"
    );
    let disabled: Vec<String> = crate::events(&dir)
        .into_iter()
        .filter_map(|e| match e {
            LifecycleEvent::ScrapeDisabled { reason } => Some(reason),
            _ => None,
        })
        .collect();
    assert_eq!(disabled, ["GET /metrics answered HTTP 500"]);
    assert!(v["server"].is_null());
    // The same run, tolerant (into a directory of its own: a run never writes into another's).
    let tolerant_dir = tempdir("run-fail-tolerant");
    let tolerant = random_run_args(
        2,
        2,
        &tolerant_dir,
        &[
            "--base-url",
            &url,
            "--model",
            "m",
            "-c",
            "2",
            "--json",
            "--max-error-rate",
            "1",
        ],
    );
    let out = run(&tolerant);
    assert_eq!(out.status.code(), Some(0));
    let _ = std::fs::remove_dir_all(&dir);
    let _ = std::fs::remove_dir_all(&tolerant_dir);
}

#[test]
fn open_loop_on_a_detected_sglang_server_with_flush_and_warmup() {
    let _serial = serial();
    let (sim, url) = spawn_sim(&["--flavor", "sglang", "--ttft-ms", "20", "--itl-ms", "2"]);
    let dir = tempdir("run-open");
    let out = run(&random_run_args(
        4,
        10,
        &dir,
        &[
            "--base-url",
            &url,
            "--rate",
            "20",
            "--arrival",
            "constant",
            "--flush-cache",
            "--warmup-sessions",
            "2",
            "--json",
            "--output-len",
            "8",
        ],
    ));
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(out.status.success(), "{stderr}");
    assert!(
        stderr.contains("prefix cache flushed (POST /flush_cache)"),
        "{stderr}"
    );
    let v: Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(
        v["config"]["backend"], "sglang",
        "detected from sglang: metrics"
    );
    assert_eq!(v["config"]["run"]["return_cached_tokens_details"], true);
    assert_eq!(v["config"]["run"]["arrival"]["rate"], 20.0);
    // Warmup turns are recorded but not measured: 2 sessions × 3 turns.
    assert_eq!(v["summary"]["turns_ok"], 40);
    let turns = read_jsonl(&dir.join("turns.jsonl"));
    assert_eq!(turns.len(), 46);
    assert_eq!(turns.iter().filter(|t| t["warmup"] == true).count(), 6);
    // SGLang reports where cache hits came from.
    assert!(
        turns
            .iter()
            .any(|t| t["cached_device_tokens"].as_u64() > Some(0))
    );
    // Sessions were due every 50 ms, whatever the server did.
    let mut due: Vec<f64> = turns
        .iter()
        .filter(|t| t["warmup"] == false && t["turn_index"] == 0)
        .map(|t| t["due_s"].as_f64().unwrap())
        .collect();
    due.sort_by(f64::total_cmp);
    assert_eq!(due.len(), 10);
    for w in due.windows(2) {
        assert!((w[1] - w[0] - 0.05).abs() < 1e-6, "{due:?}");
    }
    assert!(v["summary"]["ttft_from_due_ms"]["p50"].as_f64().unwrap() >= 20.0);
    assert!(["arrivals", "whole_run"].contains(&v["steady_window"]["rule"].as_str().unwrap()));
    let _ = std::fs::remove_dir_all(&dir);

    // An explicit --backend that disagrees is warned about, and wins.
    let out = run(&random_run_args(
        1,
        1,
        &dir,
        &["--base-url", &url, "--backend", "vllm", "--json"],
    ));
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(out.status.success(), "{stderr}");
    assert!(
        stderr.contains("warning: --backend vllm but the server looks like sglang"),
        "{stderr}"
    );
    let v: Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(v["config"]["backend"], "vllm");
    assert_eq!(v["config"]["run"]["return_cached_tokens_details"], false);
    let _ = std::fs::remove_dir_all(&dir);
    stop_sim(sim);
}

#[test]
fn flush_cache_on_a_plain_openai_server_fails_before_any_turn() {
    let _serial = serial();
    let url = crate::scripted_server(|s| {
        use std::io::Write;
        let body = r#"{"object":"list","data":[{"id":"m","object":"model","owned_by":"me"}]}"#;
        let _ = write!(
            s,
            "HTTP/1.1 200 OK\r\ncontent-type: application/json\r\ncontent-length: {}\r\n\r\n{body}",
            body.len()
        );
    });
    let dir = tempdir("run-flush");
    let out = run(&[
        "run",
        "--base-url",
        &url,
        "--flush-cache",
        "--tokenizer",
        "none",
        "--dataset",
        "random",
        "--run-dir",
        dir.to_str().unwrap(),
    ]);
    assert_eq!(out.status.code(), Some(1));
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(
        stderr
            .contains("error: --flush-cache: no cache-flush endpoint is known for backend openai"),
        "{stderr}"
    );
    assert!(!dir.join("turns.jsonl").exists(), "no turn was sent");
    let _ = std::fs::remove_dir_all(&dir);
}

#[test]
fn bad_rate_is_a_usage_error() {
    let out = run(&["run", "--rate", "0", "--dataset", "random"]);
    assert_eq!(out.status.code(), Some(2));
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(
        stderr.contains("--rate must be a positive number"),
        "{stderr}"
    );
}

/// Each `(args, want)`: `bench run BASE ARGS` exits 2 with `want` in its stderr.
fn assert_usage_errors(base: &[&str], cases: &[(&[&str], &str)]) {
    for (args, want) in cases {
        let mut all = vec!["run"];
        all.extend_from_slice(base);
        all.extend_from_slice(args);
        let out = run(&all);
        assert_eq!(out.status.code(), Some(2), "{args:?}");
        let stderr = String::from_utf8_lossy(&out.stderr);
        assert!(stderr.contains(want), "{args:?}: {stderr}");
    }
}

#[test]
fn bad_burstiness_is_a_usage_error() {
    assert_usage_errors(
        &["--rate", "5", "--dataset", "random"],
        &[
            (
                &["--arrival", "gamma", "--burstiness", "0"][..],
                "burstiness must be a positive number",
            ),
            (
                &["--burstiness", "0.5"][..],
                "--burstiness needs --arrival gamma",
            ),
        ],
    );
}

#[test]
fn bad_arrival_and_endpoint_combinations_are_usage_errors() {
    assert_usage_errors(
        &["--dataset", "random", "--tokenizer", "none"],
        &[
            (
                &["--arrival", "trace", "--rate", "5"][..],
                "--rate does not apply",
            ),
            (
                &["--time-scale", "0.5"][..],
                "--time-scale needs --arrival trace",
            ),
            (&["--arrival", "constant"][..], "--arrival needs --rate"),
            (
                &["--arrival", "trace", "--time-scale", "0"][..],
                "time_scale must be a positive",
            ),
            (
                &["--arrival", "trace"][..],
                "has no recorded time (timestamp_ms)",
            ),
            (
                &["--responses-state", "server"][..],
                "needs the responses endpoint",
            ),
            (
                &["--endpoint", "chats"][..],
                "chat, responses, messages, completions",
            ),
        ],
    );
}

#[test]
fn output_appends_a_line_per_run_and_csv_has_a_row_per_turn() {
    let _serial = serial();
    let dir = tempdir("run-exports");
    let lines = dir.join("results.jsonl");
    let csv = dir.join("turns.csv");
    for c in ["1", "3"] {
        let out = run(&random_run_args(
            2,
            3,
            &dir.join(format!("run-{c}")),
            &[
                "--sim-instant",
                "-c",
                c,
                "--output",
                lines.to_str().unwrap(),
                "--csv",
                csv.to_str().unwrap(),
            ],
        ));
        assert!(
            out.status.success(),
            "{}",
            String::from_utf8_lossy(&out.stderr)
        );
    }
    let runs = read_jsonl(&lines);
    assert_eq!(runs.len(), 2, "one line per run, appended");
    assert_eq!(runs[0]["concurrency"], 1);
    assert_eq!(runs[1]["concurrency"], 3);
    assert_eq!(runs[1]["turns_ok"], 6);
    assert!(runs[1]["ttft_p50_ms"].as_f64().is_some(), "{}", runs[1]);
    // The CSV is the last run's turns: a header and 6 rows.
    let rows = std::fs::read_to_string(&csv).unwrap();
    let mut it = rows.lines();
    assert!(
        it.next()
            .unwrap()
            .starts_with("session_id,replay,turn_index,status")
    );
    assert_eq!(it.count(), 6);
    let _ = std::fs::remove_dir_all(&dir);
}

/// Starts a slow embedded-simulator run (1.2 s turns) in a child process.
fn slow_run(dir: &std::path::Path) -> std::process::Child {
    crate::bench()
        .args(random_run_args(
            3,
            8,
            dir,
            &[
                "--sim-ttft-ms",
                "200",
                "--sim-itl-ms",
                "50",
                "--output-len",
                "20",
                "-c",
                "4",
            ],
        ))
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::piped())
        .spawn()
        .unwrap()
}

fn turns_started(dir: &std::path::Path) -> bool {
    crate::events(dir).contains(&LifecycleEvent::Phase {
        phase: bench_rundir::Phase::Measuring,
    })
}

#[test]
fn a_signal_stops_dispatching_and_lets_turns_in_flight_finish_a_second_cuts_them() {
    let _serial = serial();
    for twice in [false, true] {
        let dir = tempdir(if twice { "run-sig2" } else { "run-sig1" });
        let child = slow_run(&dir);
        while !turns_started(&dir) {
            std::thread::sleep(std::time::Duration::from_millis(20));
        }
        std::thread::sleep(std::time::Duration::from_millis(500)); // turns are in flight
        signal(&child, "-TERM");
        if twice {
            std::thread::sleep(std::time::Duration::from_millis(100));
            signal(&child, "-TERM");
        }
        let out = child.wait_with_output().unwrap();
        let stderr = String::from_utf8_lossy(&out.stderr);
        let events = crate::events(&dir);
        let stopped = events.iter().find_map(|e| match e {
            LifecycleEvent::Stopped { by, .. } => Some(*by),
            _ => None,
        });
        assert_eq!(stopped, Some(StopBy::Signal), "{events:?}");
        let result: Value =
            serde_json::from_str(&std::fs::read_to_string(dir.join("result.json")).unwrap())
                .unwrap();
        let turns = read_jsonl(&dir.join("turns.jsonl"));
        // Fewer than the 24 planned turns were played.
        assert!(turns.len() < 24, "{}", turns.len());
        let cut = turns
            .iter()
            .filter(|t| t["error_kind"] == "cancelled")
            .count();
        if twice {
            // The 4 turns in flight were cut and recorded; the exit code says turns failed.
            assert_eq!(cut, 4, "{stderr}");
            assert_eq!(result["summary"]["errors_by_kind"]["cancelled"], 4);
            assert_eq!(out.status.code(), Some(1), "{stderr}");
        } else {
            // The 4 turns in flight finished ok within the grace period.
            assert_eq!(cut, 0, "{stderr}");
            assert!(turns.iter().all(|t| t["status"] == "ok"));
            assert_eq!(
                result["summary"]["turns_ok"].as_u64().unwrap() as usize,
                turns.len()
            );
            assert!(out.status.success(), "{stderr}");
        }
        assert!(stderr.contains("bench run: stopping"), "{stderr}");
        let _ = std::fs::remove_dir_all(&dir);
    }
}

/// `bench run` under a shell that first sets the open-files limits.
fn run_with_nofile(limits: &str, args: &[String]) -> std::process::Output {
    let bin = env!("CARGO_BIN_EXE_bench");
    let quoted: Vec<String> = args.iter().map(|a| format!("'{a}'")).collect();
    std::process::Command::new("sh")
        .arg("-c")
        .arg(format!("{limits} && exec '{bin}' {}", quoted.join(" ")))
        .env_remove("BENCH_BASE_URL")
        .output()
        .unwrap()
}

#[test]
fn the_open_files_limit_is_raised_for_the_sessions_in_flight_or_the_error_says_how() {
    let dir = tempdir("run-nofile");
    let args = |run_dir: &std::path::Path, c: &str| {
        random_run_args(1, 300, run_dir, &["--sim-instant", "-q", "-c", c])
    };
    // A soft limit of 256 under a higher hard one: raised, and 300 sessions play at once.
    let out = run_with_nofile(
        "ulimit -Sn 256 && ulimit -Hn 4096",
        &args(&dir.join("raised"), "300"),
    );
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    // A hard limit too low: exit 2 before any turn, one line saying what is needed.
    let low = dir.join("low");
    let out = run_with_nofile("ulimit -Sn 512 && ulimit -Hn 512", &args(&low, "1000"));
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(2), "{stderr}");
    assert_eq!(stderr.trim().lines().count(), 1, "{stderr}");
    assert!(
        stderr.contains("needs about 2256 open files, but the limit is 512 (hard limit 512)"),
        "{stderr}"
    );
    assert!(!low.join("turns.jsonl").exists());
    let _ = std::fs::remove_dir_all(&dir);
}

/// `--tool-messages faithful` end to end: an OpenAI-messages trace with tool calls, imported,
/// replayed against the simulator with its calls, results and tools as recorded; refused with
/// an API that has no chat tool calls.
#[test]
fn faithful_tool_messages_replay_an_imported_agent_trace() {
    let _serial = serial();
    let dir = tempdir("run-faithful");
    let trace = dir.join("agent.jsonl");
    let session = serde_json::json!({
        "id": "agent-1",
        "tools": [{"type": "function", "function": {"name": "read_file",
            "parameters": {"type": "object", "properties": {"path": {"type": "string"}}}}}],
        "messages": [
            {"role": "system", "content": "You are a coding agent."},
            {"role": "user", "content": "Fix the bug in a.rs"},
            {"role": "assistant", "content": null, "tool_calls": [{"id": "call_1", "type": "function",
                "function": {"name": "read_file", "arguments": "{\"path\":\"a.rs\"}"}}]},
            {"role": "tool", "tool_call_id": "call_1", "content": "fn main() { let x = 1 }"},
            {"role": "assistant", "content": "A semicolon is missing; here is the fix."},
        ],
    });
    std::fs::write(&trace, format!("{session}\n")).unwrap();
    let imported = dir.join("native.jsonl");
    let out = run(&[
        "import",
        "--from",
        "openai-messages",
        "--output",
        imported.to_str().unwrap(),
        trace.to_str().unwrap(),
    ]);
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let run_dir = dir.join("run");
    let v = run_json(&[
        "run",
        "--tokenizer",
        "none",
        "--dataset",
        imported.to_str().unwrap(),
        "--tool-messages",
        "faithful",
        "--sim-instant",
        "--run-dir",
        run_dir.to_str().unwrap(),
        "--json",
        "-q",
    ]);
    assert_eq!(v["summary"]["turns_ok"], 2, "{v}");
    assert_eq!(v["summary"]["turns_failed"], 0, "{v}");
    let spec: serde_json::Value =
        serde_json::from_slice(&std::fs::read(run_dir.join("run.json")).unwrap()).unwrap();
    assert_eq!(spec["spec"]["plan"]["tool_messages"], "faithful");

    let out = run(&[
        "run",
        "--dataset",
        imported.to_str().unwrap(),
        "--tool-messages",
        "faithful",
        "--endpoint",
        "messages",
    ]);
    assert_eq!(out.status.code(), Some(2));
    assert!(String::from_utf8_lossy(&out.stderr).contains("needs the chat endpoint"));
    std::fs::remove_dir_all(dir).unwrap();
}

#[test]
fn the_validity_verdict_is_recorded_and_require_valid_sets_the_exit_code() {
    let _serial = serial();
    let (sim, url) = spawn_sim(&["--ttft-ms", "5", "--itl-ms", "1"]);
    let dir = tempdir("run-validity");
    // 2 sessions × 3 turns: far fewer steady turns than a p99 needs, so the run is suspect.
    let args = random_run_args(
        3,
        2,
        &dir,
        &["--base-url", &url, "-c", "2", "--json", "--output-len", "8"],
    );
    let v = run_json(&args);
    assert_ne!(v["validity"]["verdict"], "valid", "{}", v["validity"]);
    let checks = v["validity"]["checks"].as_array().unwrap();
    let steady = checks
        .iter()
        .find(|c| c["name"] == "steady_window")
        .unwrap();
    assert_ne!(steady["status"], "pass", "{steady}");
    assert!(steady["value"].as_f64().unwrap() <= 6.0, "{steady}");
    // Against a separate server the client's own CPU is measured and judged.
    assert_eq!(v["client"]["includes_server"], false);
    assert!(
        v["client"]["cpu_s"].as_f64().unwrap() > 0.0,
        "{}",
        v["client"]
    );
    let cpu = checks.iter().find(|c| c["name"] == "client_cpu").unwrap();
    assert_ne!(cpu["status"], "skipped", "{cpu}");
    // The sessions block counts both plays.
    assert_eq!(v["sessions"]["plays"], 2);
    assert_eq!(v["sessions"]["completed"], 2);

    // The same run with --require-valid, into a directory of its own.
    let strict_dir = tempdir("run-validity-strict");
    let strict = random_run_args(
        3,
        2,
        &strict_dir,
        &[
            "--base-url",
            &url,
            "-c",
            "2",
            "--json",
            "--output-len",
            "8",
            "--require-valid",
        ],
    );
    let out = run(&strict);
    assert_eq!(out.status.code(), Some(1));
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(
        stderr.contains("and --require-valid asks for valid") && stderr.contains("steady_window"),
        "{stderr}"
    );
    stop_sim(sim);
    let _ = std::fs::remove_dir_all(&dir);
    let _ = std::fs::remove_dir_all(&strict_dir);
}

/// A clean run against the simulator (a separate process, so the client's CPU is judged):
/// every check passes or says why it does not apply, and the verdict is `valid`.
#[test]
fn a_clean_run_against_the_simulator_is_valid() {
    let _serial = serial();
    let (sim, url) = spawn_sim(&["--time-scale", "0.05"]);
    let dir = tempdir("run-valid");
    let v = run_json(&random_run_args(
        8,
        40,
        &dir,
        &["--base-url", &url, "-c", "8", "--json", "--output-len", "8"],
    ));
    let checks = v["validity"]["checks"].as_array().unwrap();
    for c in checks {
        let want = if c["name"] == "schedule_slip" {
            "skipped"
        } else {
            "pass"
        };
        assert_eq!(c["status"], want, "{c}");
    }
    assert_eq!(v["validity"]["verdict"], "valid", "{}", v["validity"]);
    // The theoretical reuse is reported beside the achieved one.
    assert!(
        v["overall"]["prefix_cache_possible_ratio"]
            .as_f64()
            .unwrap()
            > 0.5,
        "{}",
        v["overall"]
    );
    stop_sim(sim);
    let _ = std::fs::remove_dir_all(&dir);
}
