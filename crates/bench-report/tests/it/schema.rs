//! `result.json`: every stable key is present with the right type, and real output validates
//! against the committed JSON Schema (`docs/result.schema.json`).

use bench_report::grade::GraderSummary;
use bench_report::{RunInfo, RunResult, SCHEMA_VERSION, SessionStatus, compute};
use serde_json::Value;

use crate::common::{failed, info10, session, turn};

fn schema() -> Value {
    let path = concat!(env!("CARGO_MANIFEST_DIR"), "/../../docs/result.schema.json");
    serde_json::from_str(&std::fs::read_to_string(path).unwrap()).unwrap()
}

/// A run that exercises every metric (so no key is null for want of data), plus its info.
fn rich() -> RunResult {
    let mut recs = Vec::new();
    for s in 0..4_u32 {
        for t in 0..12_u32 {
            let sent = f64::from(t) * 3.0 + f64::from(s) * 0.5;
            let mut r = turn(&format!("s{s}"), t, sent);
            r.due_s = sent - 0.002;
            r.input_tokens = Some(1000 + 3000 * u64::from(t));
            r.cached_tokens = Some(900 + 2900 * u64::from(t));
            r.cached_host_tokens = Some(100);
            r.recorded_output_tokens = Some(11);
            r.worker = Some(format!("w{}", (s + t / 11) % 2));
            r.active_at_dispatch = if s == 3 && t == 0 { 3 } else { 4 };
            r.ttft_ms = Some(100.0 + f64::from(t));
            if s == 2 {
                // An agent graph: main 0–5, a subagent's 6–8 forked after 5, joined at 9.
                let (agent, depth, after) = match t {
                    0 => ("main", 0, vec![]),
                    6 => ("a", 1, vec![5]),
                    7 | 8 => ("a", 1, vec![t - 1]),
                    9 => ("main", 0, vec![5, 8]),
                    _ => ("main", 0, vec![t - 1]),
                };
                r.node = Some(bench_report::record::NodeInfo {
                    agent: agent.into(),
                    depth,
                    released_by: after.last().copied(),
                    after,
                    released_s: (sent - 1.0).max(0.0),
                    in_flight: 1,
                });
            }
            recs.push(r);
        }
    }
    let mut w = turn("warm", 0, -10.0);
    w.warmup = true;
    recs.push(w);
    recs.push(failed("s9", 0, 1.0, Some("http_status")));
    let sessions = [
        session("s0", SessionStatus::Completed),
        session("s1", SessionStatus::Truncated),
        session("s9", SessionStatus::Failed),
    ];
    let info = RunInfo {
        concurrency: 4,
        duration_s: 40.0,
        judge: bench_report::Judge {
            session_slo: Some("ttft_ms=200,session_s=60".into()),
            cost: Some(bench_report::cost::CostModel {
                usd_per_gpu_hour: 2.0,
                gpus: 8,
            }),
            ..bench_report::Judge::with_slo(Some("ttft_ms=105,tpot_ms=200".parse().unwrap()))
        },
        config: serde_json::json!({"concurrency": 4, "model": "m"}),
        energy: Some(bench_telemetry::GpuEnergy {
            joules: 52_000.0,
            method: bench_telemetry::EnergyMethod::Counter,
            sources: vec!["http://gpu:9400/metrics".into()],
            gpus: Some(8.0),
        }),
        targets: vec![bench_telemetry::TargetSummary {
            target: "http://gpu:9400/metrics".into(),
            summary: bench_telemetry::ServerSummary {
                gpu_power_mean_w: Some(1300.0),
                gpu_energy_j: Some(52_000.0),
                ..Default::default()
            },
        }],
        ..RunInfo::default()
    };
    let r = compute(&recs, &sessions, &info);
    assert!(
        r.cost.is_some() && r.energy.is_some(),
        "the schema sees cost and energy"
    );
    r
}

/// [`rich`] with two graders' summaries, one of which failed.
fn with_grades() -> RunResult {
    let mut r = rich();
    r.grades = vec![
        GraderSummary {
            grader: "slo".into(),
            graded: 48,
            mean_score: Some(0.75),
            labels: [("pass".to_owned(), 36), ("fail".to_owned(), 12)].into(),
            errors: 0,
            first_error: None,
        },
        GraderSummary {
            grader: "mine".into(),
            graded: 0,
            mean_score: None,
            labels: Default::default(),
            errors: 48,
            first_error: Some("panicked: boom".into()),
        },
    ];
    r
}

const DIST: [&str; 6] = ["p50", "p90", "p95", "p99", "mean", "max"];

fn metrics_keys(m: &Value, block: &str) {
    let num = |k: &str| {
        assert!(m[k].is_number(), "{block}.{k} should be a number: {}", m[k]);
    };
    for k in [
        "ttft_ms",
        "ttft_first_turn_ms",
        "ttft_later_turns_ms",
        "tpot_ms",
        "itl_ms",
        "e2e_ms",
    ] {
        for s in DIST {
            assert!(m[k][s].is_number(), "{block}.{k}.{s}: {}", m[k][s]);
        }
    }
    num("ttft_later_over_first_p50");
    for i in ["0", "1", "2", "3", "4", "5", "6", "7", "8", "9", "10+"] {
        assert!(m["e2e_by_turn_index_ms"][i].is_number(), "{block} turn {i}");
    }
    let bands = m["e2e_by_input_band_ms"].as_object().unwrap();
    for b in ["0-2K", "2-8K", "8-16K", "16-32K", "32K+"] {
        assert!(bands.contains_key(b), "{block} band {b}");
    }
    for k in [
        "output_throughput_tok_s",
        "input_throughput_tok_s",
        "request_throughput_turns_s",
        "peak_output_tok_s_1s",
        "prefix_cache_ratio",
        "prefix_cache_host_share",
        "routing_stickiness",
        "goodput_turns_s",
        "slo_attainment",
    ] {
        num(k);
    }
    for s in ["p50", "mean"] {
        assert!(
            m["per_user_output_tok_s"][s].is_number(),
            "{block} per-user {s}"
        );
    }
    let o = &m["osl_fidelity"];
    for k in ["achieved_mean", "pinned_mean", "recorded_mean", "ratio"] {
        assert!(o[k].is_number(), "{block}.osl_fidelity.{k}");
    }
    assert!(o["within_10pct"].is_boolean());
    for s in ["p50", "p99", "max"] {
        assert!(m["dispatch_lag_ms"][s].is_number(), "{block} lag {s}");
    }
}

#[test]
fn every_stable_key_is_present_with_its_type() {
    let v = serde_json::to_value(rich()).unwrap();
    let g = &v["graph"];
    assert_eq!(g["sessions"], 1, "{g}");
    for c in [
        "dispatch_lag",
        "ttft_uncached",
        "ttft_cached",
        "decode",
        "tool_wait",
        "join_wait",
    ] {
        assert!(g["components"][c]["total_s"].is_number(), "graph {c}");
    }
    assert_eq!(g["ttft_by_depth"].as_array().unwrap().len(), 2);
    assert_eq!(v["schema_version"], serde_json::json!(SCHEMA_VERSION));
    assert_eq!(SCHEMA_VERSION, 1);
    assert!(v["generated_by"].as_str().unwrap().starts_with("bench "));
    assert_eq!(v["config"]["model"], "m");

    let s = &v["summary"];
    for k in [
        "turns_ok",
        "turns_failed",
        "sessions_completed",
        "sessions_truncated",
        "sessions_context_guard",
        "sessions_failed",
    ] {
        assert!(s[k].is_u64(), "summary.{k}: {}", s[k]);
    }
    assert_eq!(s["errors_by_kind"]["http_status"], 1);
    assert_eq!(s["turns_ok"], 48);
    metrics_keys(s, "summary");
    metrics_keys(&v["overall"], "overall");

    let w = &v["steady_window"];
    for k in ["min_active", "turns", "turns_total"] {
        assert!(w[k].is_u64(), "steady_window.{k}");
    }
    for k in ["start_s", "end_s"] {
        assert!(w[k].is_number(), "steady_window.{k}");
    }
    assert_eq!(w["min_active"], 4);
    assert_eq!(w["turns"], 47);
    assert_eq!(w["turns_total"], 49);
    assert_eq!(w["concurrency_histogram"]["3"], 1);
    assert_eq!(w["concurrency_histogram"]["4"], 47);
    assert_eq!(w["concurrency_histogram"]["10"], 1); // the failed turn

    let p = &v["sessions"];
    assert_eq!(p["plays"], 5); // s0..s3 and s9
    assert_eq!(p["completed"], 1);
    for k in ["completion_rate", "model_share", "goodput"] {
        assert!(p[k].is_number(), "sessions.{k}: {}", p[k]);
    }
    assert!(p["slo_met"].is_u64());
    let so = &p["session_slo"];
    assert_eq!(so["slo"], "ttft_ms=200,session_s=60");
    for k in ["judged", "met", "cut"] {
        assert!(so[k].is_u64(), "sessions.session_slo.{k}: {so}");
    }
    assert!(so["share"].is_number(), "{so}");
    for k in [
        "e2e_s",
        "model_s",
        "tool_wait_s",
        "turns",
        "input_tokens",
        "output_tokens",
    ] {
        assert!(p[k]["p50"].is_number(), "sessions.{k}.p50: {}", p[k]);
    }
}

#[test]
fn round_trips_through_json() {
    let r = rich();
    let text = serde_json::to_string_pretty(&r).unwrap();
    assert!(!text.contains("\"grades\""), "no graders, no key");
    let back: RunResult = serde_json::from_str(&text).unwrap();
    assert_eq!(back, r);
    let r = with_grades();
    let back: RunResult = serde_json::from_str(&serde_json::to_string(&r).unwrap()).unwrap();
    assert_eq!(back.grades, r.grades);
}

#[test]
fn schema_is_valid_draft_2020_12() {
    let s = schema();
    assert_eq!(s["$schema"], "https://json-schema.org/draft/2020-12/schema");
    jsonschema::meta::validate(&s).unwrap();
    assert_eq!(s["properties"]["schema_version"]["const"], SCHEMA_VERSION);
}

#[test]
fn real_output_validates_against_the_schema() {
    let validator = jsonschema::validator_for(&schema()).unwrap();
    // A `server` block as `bench run` fills it (bench_telemetry::summarize of a real scrape
    // series against the simulator).
    let mut scraped = rich();
    scraped.server = serde_json::from_value(serde_json::json!({
        "backend": "vllm", "scrapes": 35, "kv_capacity_tokens": 262144.0,
        "kv_usage_mean": 0.0699, "kv_usage_p99": 0.1278, "evicted_tokens": null,
        "preemptions": 0.0, "queue_depth_p99": 1.0, "running_mean": 7.63,
        "prefix_cache_ratio": 0.7037
    }))
    .unwrap();
    // A `grades` block as `bench_run` fills it.
    let graded = with_grades();
    let cases = [
        rich(),
        scraped,
        graded,
        compute(&[], &[], &info10()),
        compute(&[turn("a", 0, 0.0)], &[], &info10()),
    ];
    for r in cases {
        let v = serde_json::to_value(&r).unwrap();
        let errors: Vec<String> = validator
            .iter_errors(&v)
            .map(|e| format!("{} at {}", e, e.instance_path()))
            .collect();
        assert!(errors.is_empty(), "{errors:#?}");
    }
}

#[test]
fn schema_rejects_broken_documents() {
    let validator = jsonschema::validator_for(&schema()).unwrap();
    let good = serde_json::to_value(rich()).unwrap();
    assert!(validator.is_valid(&good));
    let mut bad = good.clone();
    bad["schema_version"] = serde_json::json!(2);
    assert!(!validator.is_valid(&bad));
    let mut bad = good.clone();
    bad["summary"]
        .as_object_mut()
        .unwrap()
        .remove("ttft_later_over_first_p50");
    assert!(!validator.is_valid(&bad));
    let mut bad = good;
    bad["overall"]["ttft_ms"]["p50"] = serde_json::json!("fast");
    assert!(!validator.is_valid(&bad));
    let mut bad = serde_json::to_value(with_grades()).unwrap();
    assert!(validator.is_valid(&bad));
    bad["grades"][0]["mean_score"] = serde_json::json!(1.5);
    assert!(!validator.is_valid(&bad));
    let mut bad = serde_json::to_value(with_grades()).unwrap();
    bad["grades"][1].as_object_mut().unwrap().remove("errors");
    assert!(!validator.is_valid(&bad));
}
