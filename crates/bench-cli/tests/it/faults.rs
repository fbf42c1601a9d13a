//! Exact reconciliation: `bench run` against `bench sim` injecting every fault kind at 2%. What
//! the client counts as failed must be exactly what the simulator broke, turn by turn: no fault
//! unseen, none counted twice, no turn lost, and every request the simulator received is an
//! attempt some record counts.

use std::collections::BTreeMap;
use std::path::Path;

use serde_json::Value;

use crate::{random_run_args, read_jsonl, run, serial, spawn_sim, stop_sim, tempdir};

const ALL_FAULTS: &str = "429=0.02,503=0.02,500=0.02,reset-before-headers=0.02,\
    reset-mid-stream=0.02,malformed-chunk=0.02,no-done=0.02,stall=0.02,slow-headers=0.02,\
    truncated-usage=0.02";

const SESSIONS: u64 = 150;
const TURNS: u64 = 4;

/// The error kind the client records for a fault, or `None` for faults that leave the turn ok.
fn client_kind(fault: &str) -> Option<&'static str> {
    Some(match fault {
        "429" | "503" | "500" => "http_status",
        "reset-before-headers" | "reset-mid-stream" => "io",
        "malformed-chunk" => "malformed_json",
        "no-done" => "incomplete_stream",
        "stall" => "timeout",
        "slow-headers" | "truncated-usage" => return None,
        other => panic!("unknown fault {other}"),
    })
}

type Key = (String, u64);

fn key(v: &Value) -> Key {
    (
        v["session"]
            .as_str()
            .or_else(|| v["session_id"].as_str())
            .unwrap()
            .to_owned(),
        v["turn_index"].as_u64().unwrap(),
    )
}

/// Runs the faulted simulator and one `bench run` against it; returns the run's exit code,
/// its records, the fault log and the request log.
fn faulted_run(
    root: &Path,
    name: &str,
    extra: &[&str],
) -> (i32, Vec<Value>, Vec<Value>, Vec<Value>, Value) {
    let fault_log = root.join(format!("{name}-faults.jsonl"));
    let request_log = root.join(format!("{name}-requests.jsonl"));
    let (sim, url) = spawn_sim(&[
        "--ttft-ms",
        "5",
        "--itl-ms",
        "1",
        "--fault",
        ALL_FAULTS,
        "--fault-seed",
        "11",
        "--fault-retry-after-s",
        "0",
        "--fault-slow-ms",
        "300",
        "--fault-log",
        fault_log.to_str().unwrap(),
        "--request-log",
        request_log.to_str().unwrap(),
    ]);
    let dir = root.join(name);
    let mut flags = vec![
        "--base-url",
        &url,
        "-c",
        "16",
        "--turn-timeout",
        "2s",
        "--routing-key",
        "x-session-id",
        "--no-metrics",
        "--output-len",
        "16",
    ];
    flags.extend_from_slice(extra);
    let out = run(&random_run_args(TURNS, SESSIONS, &dir, &flags));
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(!stderr.contains("panicked"), "{stderr}");
    stop_sim(sim);
    let result: Value =
        serde_json::from_slice(&std::fs::read(dir.join("result.json")).unwrap()).unwrap();
    (
        out.status.code().unwrap(),
        read_jsonl(&dir.join("turns.jsonl")),
        read_jsonl(&fault_log),
        read_jsonl(&request_log),
        result,
    )
}

/// Checks the records against the logs exactly; returns the per-kind fault counts.
fn reconcile(turns: &[Value], faults: &[Value], requests: &[Value]) -> BTreeMap<String, u64> {
    // Every planned turn has exactly one record.
    assert_eq!(turns.len() as u64, SESSIONS * TURNS);
    let mut by_turn: BTreeMap<Key, &Value> = BTreeMap::new();
    for t in turns {
        assert!(
            by_turn.insert(key(t), t).is_none(),
            "turn recorded twice: {t}"
        );
    }
    // The faults each turn's requests met, in order.
    let mut met: BTreeMap<Key, Vec<String>> = BTreeMap::new();
    let mut counts: BTreeMap<String, u64> = BTreeMap::new();
    for f in faults {
        let kind = f["fault"].as_str().unwrap().to_owned();
        *counts.entry(kind.clone()).or_default() += 1;
        met.entry(key(f)).or_default().push(kind);
    }
    for k in met.keys() {
        assert!(
            by_turn.contains_key(k),
            "a fault on a turn with no record: {k:?}"
        );
    }
    // Every request the simulator received is an attempt a record counts.
    let chat_requests = requests
        .iter()
        .filter(|r| r["endpoint"] == "/v1/chat/completions")
        .count() as u64;
    let attempts: u64 = turns
        .iter()
        .map(|t| t["attempts"].as_u64().unwrap_or(1))
        .sum();
    assert_eq!(
        chat_requests, attempts,
        "requests received != attempts recorded"
    );

    for (k, t) in &by_turn {
        let faults = met.get(k).cloned().unwrap_or_default();
        let expected: Vec<&str> = faults.iter().filter_map(|f| client_kind(f)).collect();
        let mut actual: Vec<String> = t["failed_attempts"]
            .as_array()
            .map(|a| {
                a.iter()
                    .map(|x| x["kind"].as_str().unwrap().to_owned())
                    .collect()
            })
            .unwrap_or_default();
        if t["status"] != "ok" {
            actual.push(t["error_kind"].as_str().unwrap_or("timeout").to_owned());
        }
        assert_eq!(
            actual, expected,
            "turn {k:?}: the client recorded {actual:?} for the faults {faults:?}: {t}"
        );
        // HTTP faults keep their status: in the detail of the turn, or in the attempt.
        let http: Vec<&String> = faults
            .iter()
            .filter(|f| matches!(f.as_str(), "429" | "503" | "500"))
            .collect();
        if let (Some(last), true) = (http.last(), t["status"] != "ok") {
            if faults.last() == Some(last) {
                let err = t["error"].as_str().unwrap();
                assert!(err.contains(&format!("HTTP {last}")), "{k:?}: {err}");
            }
        }
        // The faults that leave a turn ok show in its figures.
        if t["status"] == "ok" {
            if faults.last().map(String::as_str) == Some("slow-headers") {
                let ttft = t["ttft_ms"].as_f64().unwrap();
                assert!(ttft >= 300.0, "{k:?}: slow headers but TTFT {ttft} ms");
            }
            if faults.last().map(String::as_str) == Some("truncated-usage") {
                assert_eq!(t["output_tokens_source"], "client", "{k:?}: {t}");
            }
        }
    }
    counts
}

#[test]
fn every_injected_fault_is_counted_exactly_once() {
    let _g = serial();
    let root = tempdir("faults");

    // No retries: a failed turn is the fault that broke it. About 16% of turns fail, so the
    // default --max-error-rate (5%) fails the run (exit 1) and a 50% one passes it.
    let (code, turns, faults, requests, result) =
        faulted_run(&root, "strict", &["--max-error-rate", "0.5"]);
    let counts = reconcile(&turns, &faults, &requests);
    let resent: usize = turns
        .iter()
        .map(|t| t["failed_attempts"].as_array().map_or(0, Vec::len))
        .sum();
    eprintln!(
        "faults injected: {counts:?}; {} requests for {} turns ({resent} resent)",
        requests.len(),
        turns.len()
    );
    for kind in ALL_FAULTS.split(',').map(|f| f.split('=').next().unwrap()) {
        let kind = kind.trim();
        assert!(
            counts.get(kind).copied().unwrap_or(0) > 0,
            "no {kind} fault injected in {} turns: {counts:?}",
            turns.len()
        );
    }
    let failed = turns.iter().filter(|t| t["status"] != "ok").count() as u64;
    assert_eq!(result["summary"]["turns_failed"], failed);
    let rate = failed as f64 / turns.len() as f64;
    assert!((0.05..0.5).contains(&rate), "error rate {rate}");
    assert_eq!(
        code, 0,
        "an error rate of {rate} is within --max-error-rate 0.5"
    );
    // The run's per-kind counts are the records' (failed turns plus failed attempts).
    let mut by_kind: BTreeMap<String, u64> = BTreeMap::new();
    for t in turns.iter().filter(|t| t["status"] != "ok") {
        *by_kind
            .entry(t["error_kind"].as_str().unwrap().to_owned())
            .or_default() += 1;
    }
    let summary_kinds: BTreeMap<String, u64> =
        serde_json::from_value(result["summary"]["errors_by_kind"].clone()).unwrap();
    assert_eq!(summary_kinds, by_kind);

    let (code, turns, faults, requests, _) = faulted_run(&root, "default-rate", &[]);
    reconcile(&turns, &faults, &requests);
    assert_eq!(code, 1, "above the default --max-error-rate the run fails");

    // With retries the retryable faults are sent again; every attempt is still reconciled.
    let (_, turns, faults, requests, result) = faulted_run(
        &root,
        "retries",
        &[
            "--retries",
            "3",
            "--retry-backoff",
            "5ms",
            "--max-error-rate",
            "1",
        ],
    );
    reconcile(&turns, &faults, &requests);
    let retried: u64 = turns
        .iter()
        .map(|t| t["failed_attempts"].as_array().map_or(0, Vec::len) as u64)
        .sum();
    assert!(retried > 0);
    let summary_attempts: u64 = result["summary"]["failed_attempts_by_kind"]
        .as_object()
        .unwrap()
        .values()
        .map(|v| v.as_u64().unwrap())
        .sum();
    assert_eq!(summary_attempts, retried);
    // What is left failed is what a retry must not hide (or a fault met four times).
    for t in turns.iter().filter(|t| t["status"] != "ok") {
        let kind = t["error_kind"].as_str().unwrap();
        let attempts = t["attempts"].as_u64().unwrap_or(1);
        assert!(
            matches!(kind, "malformed_json" | "timeout") || attempts == 4,
            "a retryable {kind} failure after {attempts} attempts: {t}"
        );
    }
    std::fs::remove_dir_all(&root).unwrap();
}
