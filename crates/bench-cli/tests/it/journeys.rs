//! `bench journeys` end to end: packs, lists, reports, gates, baselines, declarative files.

use serde_json::Value;

use crate::{run, serial, spawn_sim, stop_sim, tempdir};

fn stderr(o: &std::process::Output) -> String {
    String::from_utf8_lossy(&o.stderr).into_owned()
}

const OPENAI: [&str; 6] = [
    "list_models",
    "chat_completion",
    "stream_ttft",
    "stream_complete",
    "interrupt",
    "metrics_scrape",
];

#[test]
fn list_and_unknown_names() {
    let o = run(&["journeys", "--list"]);
    assert!(o.status.success(), "{}", stderr(&o));
    let text = String::from_utf8_lossy(&o.stdout);
    for name in OPENAI {
        assert!(text.contains(name), "{name} missing from {text}");
    }
    assert!(text.contains("concurrency-safe"));
    let o = run(&["journeys", "--pack", "agent-sessions", "--list"]);
    assert!(o.status.success(), "{}", stderr(&o));
    assert_eq!(String::from_utf8_lossy(&o.stdout).lines().count(), 7);

    let o = run(&["journeys", "--journeys", "list_models,nope"]);
    assert_eq!(o.status.code(), Some(2));
    let e = stderr(&o);
    assert!(
        e.contains("unknown journey \"nope\"; known: list_models, chat_completion"),
        "{e}"
    );
    let o = run(&["journeys", "--pack", "nope"]);
    assert_eq!(o.status.code(), Some(2));
    assert!(stderr(&o).contains("unknown pack \"nope\"; known: openai, agent-sessions"));
    // Only the openai pack has an embedded server.
    let o = run(&["journeys", "--pack", "agent-sessions"]);
    assert_eq!(o.status.code(), Some(2));
    assert!(
        stderr(&o).contains("--base-url is required"),
        "{}",
        stderr(&o)
    );
}

#[test]
fn the_openai_pack_passes_against_the_simulator_and_gates_and_baselines_work() {
    let _serial = serial();
    let (sim, url) = spawn_sim(&["--ttft-ms", "20", "--itl-ms", "2"]);
    let dir = tempdir("journeys-openai");
    let report = dir.join("report.json");
    let md = dir.join("report.md");
    let base = [
        "journeys",
        "--base-url",
        &url,
        "--iterations",
        "5",
        "--warmup",
        "1",
        "--runs",
        "2",
    ];
    let mut args = base.to_vec();
    args.extend([
        "--output",
        report.to_str().unwrap(),
        "--markdown",
        md.to_str().unwrap(),
    ]);
    let o = run(&args);
    assert!(o.status.success(), "{}", stderr(&o));
    let v: Value = serde_json::from_str(&std::fs::read_to_string(&report).unwrap()).unwrap();
    assert_eq!(v["schema_version"], 1);
    for name in OPENAI {
        let j = &v["journeys"][name];
        assert_eq!(j["runs"].as_array().unwrap().len(), 2, "{name}");
        assert_eq!(j["summary"]["n_success"], 10, "{name}: {j}");
        assert_eq!(j["summary"]["n_failures"], 0, "{name}: {j}");
    }
    // TTFT is the simulator's fixed 20 ms (plus loopback), not the whole stream.
    let ttft = v["journeys"]["stream_ttft"]["summary"]["avg_p50_ms"]
        .as_f64()
        .unwrap();
    let whole = v["journeys"]["stream_complete"]["summary"]["avg_p50_ms"]
        .as_f64()
        .unwrap();
    assert!((20.0..30.0).contains(&ttft), "{ttft}");
    assert!(
        whole > ttft + 20.0,
        "16 tokens at 2 ms each follow the first: {whole} vs {ttft}"
    );
    let text = std::fs::read_to_string(&md).unwrap();
    assert!(text.contains("| `stream_ttft` | latency | 2 |"), "{text}");

    // A gate that cannot hold names the journey and the bound, exit 1.
    let mut gated = base.to_vec();
    gated.extend(["--journeys", "stream_ttft", "--max-p50-ms", "5"]);
    let o = run(&gated);
    assert_eq!(o.status.code(), Some(1));
    assert!(
        stderr(&o).contains("error: stream_ttft: "),
        "{}",
        stderr(&o)
    );
    assert!(
        stderr(&o).contains("ms is above --max-p50-ms 5"),
        "{}",
        stderr(&o)
    );

    // Against itself the baseline passes; against a baseline 10× faster it regresses.
    let mut cmp = base.to_vec();
    cmp.extend([
        "--journeys",
        "stream_ttft,stream_complete",
        "--baseline",
        report.to_str().unwrap(),
        "--threshold",
        "0.5",
    ]);
    let o = run(&cmp);
    assert!(o.status.success(), "{}", stderr(&o));
    let out = String::from_utf8_lossy(&o.stdout);
    assert!(
        out.contains("| `list_models` |") && out.contains("skipped"),
        "{out}"
    );
    // (The comparison reads each run's percentiles and takes their median.)
    let mut fast = v.clone();
    for name in OPENAI {
        for run in fast["journeys"][name]["runs"].as_array_mut().unwrap() {
            for k in ["p50_ms", "p95_ms"] {
                let x = run[k].as_f64().unwrap();
                run[k] = (x / 10.0).into();
            }
        }
    }
    let fast_path = dir.join("fast.json");
    std::fs::write(&fast_path, fast.to_string()).unwrap();
    let last = cmp.len() - 3;
    cmp[last] = fast_path.to_str().unwrap();
    let o = run(&cmp);
    assert_eq!(o.status.code(), Some(1), "{}", stderr(&o));
    assert!(stderr(&o).contains("stream_ttft: p50"), "{}", stderr(&o));
    assert!(String::from_utf8_lossy(&o.stdout).contains("**regressed**"));

    // A file that is not a report is a usage error, before anything is measured.
    cmp[last] = md.to_str().unwrap();
    let o = run(&cmp);
    assert_eq!(o.status.code(), Some(2));
    assert!(
        stderr(&o).contains("not a bench journeys report"),
        "{}",
        stderr(&o)
    );
    let _ = std::fs::remove_dir_all(&dir);
    stop_sim(sim);
}

#[test]
fn a_declarative_file_captures_and_throughput_runs() {
    let _serial = serial();
    let dir = tempdir("journeys-file");
    let file = dir.join("journeys.toml");
    std::fs::write(
        &file,
        r#"
[[journey]]
name = "chat_first_model"
description = "GET /v1/models, then chat with the model it lists"
concurrency_safe = true
setup = [{ path = "/v1/models", capture = { model = "data[0].id" } }]
measure = [
  { method = "POST", path = "/v1/chat/completions", json = { model = "{{model}}", max_completion_tokens = 2, messages = [{ role = "user", content = "hi" }] }, capture = { id = "id" } },
]

[[journey]]
name = "missing"
description = "a path the server does not serve"
measure = [{ path = "/nope" }]
"#,
    )
    .unwrap();
    let (sim, url) = spawn_sim(&["--instant"]);
    let o = run(&[
        "journeys",
        "--file",
        file.to_str().unwrap(),
        "--base-url",
        &url,
        "-c",
        "4",
        "--requests",
        "40",
        "--iterations",
        "7",
        "--json",
    ]);
    // A journey whose every operation failed fails the run (exit 1); the report is complete.
    assert_eq!(o.status.code(), Some(1), "{}", stderr(&o));
    assert!(
        stderr(&o).contains("error: missing run 1: every operation failed (7 HTTP 404)"),
        "{}",
        stderr(&o)
    );
    let v: Value = serde_json::from_slice(&o.stdout).unwrap();
    let chat = &v["journeys"]["chat_first_model"];
    assert_eq!(chat["mode"], "throughput");
    assert_eq!(chat["runs"][0]["concurrency"], 4);
    assert_eq!(chat["summary"]["n_success"], 40);
    // Not concurrency-safe: timed one at a time; its failures are data, not an abort.
    let missing = &v["journeys"]["missing"];
    assert_eq!(missing["mode"], "latency");
    assert_eq!(missing["runs"][0]["failures"]["HTTP 404"], 7);

    // A typo is a usage error naming the file and the key.
    std::fs::write(
        &file,
        "[[journey]]\nname = \"x\"\ndescription = \"\"\nmeasure = [{ pathh = \"/\" }]\n",
    )
    .unwrap();
    let o = run(&[
        "journeys",
        "--file",
        file.to_str().unwrap(),
        "--base-url",
        &url,
    ]);
    assert_eq!(o.status.code(), Some(2));
    let e = stderr(&o);
    assert!(e.contains("journeys.toml") && e.contains("pathh"), "{e}");
    let _ = std::fs::remove_dir_all(&dir);
    stop_sim(sim);
}

/// `--endpoint`: the generation journeys call that API (the simulator's request log names the
/// path of every request) and read its stream.
#[test]
fn the_generation_journeys_call_the_endpoint_asked_for() {
    let _serial = serial();
    let dir = tempdir("journeys-endpoint");
    let log = dir.join("requests.jsonl");
    let (sim, url) = spawn_sim(&["--instant", "--request-log", log.to_str().unwrap()]);
    for endpoint in ["responses", "messages", "completions"] {
        let out = run(&[
            "journeys",
            "--base-url",
            &url,
            "--endpoint",
            endpoint,
            "--journeys",
            "chat_completion,stream_ttft,interrupt",
            "--iterations",
            "3",
            "--warmup",
            "0",
            "--json",
        ]);
        assert!(out.status.success(), "{endpoint}: {}", stderr(&out));
        let v: Value = serde_json::from_slice(&out.stdout).unwrap();
        for (name, j) in v["journeys"].as_object().unwrap() {
            assert_eq!(j["summary"]["n_success"], 3, "{endpoint} {name}: {j}");
            assert_eq!(j["summary"]["n_failures"], 0, "{endpoint} {name}: {j}");
        }
    }
    stop_sim(sim);
    let paths: Vec<String> = crate::read_jsonl(&log)
        .iter()
        .map(|l| l["endpoint"].as_str().unwrap().to_owned())
        .collect();
    for p in ["/v1/responses", "/v1/messages", "/v1/completions"] {
        // chat_completion 3 + stream_ttft 3 + interrupt 3 × 2 requests, after setup.
        assert_eq!(
            paths.iter().filter(|x| *x == p).count(),
            12,
            "{p}: {paths:?}"
        );
    }
    assert!(
        !paths.iter().any(|p| p == "/v1/chat/completions"),
        "{paths:?}"
    );
    std::fs::remove_dir_all(dir).unwrap();
}

#[test]
fn a_journey_whose_every_operation_failed_fails_the_run() {
    let _serial = serial();
    let (sim, url) = spawn_sim(&["--instant"]);
    let dir = tempdir("journeys-all-failed");
    let file = dir.join("j.toml");
    std::fs::write(
        &file,
        "[[journey]]\nname = \"missing\"\nmeasure = [{ path = \"/nope\" }]\n\n\
         [[journey]]\nname = \"models\"\nmeasure = [{ path = \"/v1/models\" }]\n",
    )
    .unwrap();
    let o = run(&[
        "journeys",
        "--file",
        file.to_str().unwrap(),
        "--base-url",
        &url,
        "--iterations",
        "3",
        "--warmup",
        "0",
    ]);
    assert_eq!(o.status.code(), Some(1), "{}", stderr(&o));
    let e = stderr(&o);
    assert!(
        e.contains("error: missing run 1: every operation failed (3 HTTP 404)"),
        "{e}"
    );
    assert!(!e.contains("error: models"), "{e}");
    stop_sim(sim);
    let _ = std::fs::remove_dir_all(&dir);
}

#[test]
fn the_agent_turns_pack_lists_its_parameters_and_refuses_to_run_without_them() {
    let o = run(&["journeys", "--pack", "agent-turns", "--list"]);
    assert!(o.status.success(), "{}", stderr(&o));
    let text = String::from_utf8_lossy(&o.stdout);
    for name in [
        "session_cold_start",
        "warm_turn",
        "time_to_first_token",
        "interrupt",
        "read_runner_file",
        "needs-runner",
        "parameters (--param NAME=VALUE):",
        "runner_id       required",
        "llm_model       default bench-sim",
    ] {
        assert!(text.contains(name), "{name} missing from {text}");
    }
    let o = run(&[
        "journeys",
        "--pack",
        "agent-turns",
        "--base-url",
        "http://127.0.0.1:1",
        "--param",
        "runner_id=r",
    ]);
    assert_eq!(o.status.code(), Some(2));
    let e = stderr(&o);
    assert!(
        e.contains("agent-turns: parameters not set: llm_url (--param llm_url=VALUE"),
        "{e}"
    );
    assert_eq!(e.lines().count(), 1, "{e}");
}

#[test]
fn response_size_caps_are_flags_and_a_spec_keeps_them() {
    // The errors of the transport's caps name --max-json-bytes and --max-response-bytes: both
    // exist on bench journeys, and a response past one fails its operation, naming it.
    let o = run(&[
        "journeys",
        "--journeys",
        "list_models",
        "--iterations",
        "3",
        "--warmup",
        "0",
        "--max-json-bytes",
        "64",
        "--json",
    ]);
    assert_eq!(o.status.code(), Some(1), "{}", stderr(&o));
    let report: Value = serde_json::from_slice(&o.stdout).unwrap();
    let row = &report["journeys"]["list_models"]["runs"][0];
    assert_eq!(row["n_success"], 0, "{row}");
    assert_eq!(row["n_failures"], 3, "{row}");
    assert!(
        row.to_string().contains("response_too_large"),
        "the failures are not response_too_large: {row}"
    );
    // A stream past --max-response-bytes is cut the same way; the default caps pass.
    let o = run(&[
        "journeys",
        "--journeys",
        "stream_complete",
        "--iterations",
        "2",
        "--warmup",
        "0",
        "--max-response-bytes",
        "300",
    ]);
    assert_eq!(o.status.code(), Some(1), "{}", stderr(&o));
    assert!(
        stderr(&o).contains("every operation failed"),
        "{}",
        stderr(&o)
    );
    let o = run(&[
        "journeys",
        "--journeys",
        "list_models,stream_complete",
        "--iterations",
        "2",
        "--warmup",
        "0",
    ]);
    assert!(o.status.success(), "{}", stderr(&o));
    // The caps are spec keys: --print-spec writes them, 0 is refused naming the key.
    let o = run(&["journeys", "--max-json-bytes", "1KiB", "--print-spec"]);
    assert!(o.status.success(), "{}", stderr(&o));
    let spec = String::from_utf8_lossy(&o.stdout);
    assert!(spec.contains("max_json_bytes = 1024"), "{spec}");
    // A spec file's 0 is refused naming its key (the flags refuse 0 themselves).
    let d = tempdir("journeys-caps");
    let spec_file = d.join("s.toml");
    std::fs::write(&spec_file, "max_event_bytes = 0\n").unwrap();
    let o = run(&["journeys", "--spec", spec_file.to_str().unwrap()]);
    assert_eq!(o.status.code(), Some(2));
    assert!(
        stderr(&o).contains("max_event_bytes must be at least 1 byte"),
        "{}",
        stderr(&o)
    );
}
