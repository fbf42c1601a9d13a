//! Agent graphs end to end: the hand-built fork/join trace replayed by the `bench` binary
//! against a `bench sim` process, checked from the simulator's own request log; a crash
//! (SIGKILL) in the middle of graph plays and `--resume`; bad graphs refused at planning.

use std::collections::HashMap;
use std::path::Path;
use std::process::Stdio;
use std::time::{Duration, Instant};

use serde_json::Value;

use crate::{bench, read_jsonl, run, serial, spawn_sim};

const FIXTURE: &str = concat!(
    env!("CARGO_MANIFEST_DIR"),
    "/../../fixtures/graphs/native/fork_join.jsonl"
);

/// The nodes of the fixture: main 0–4, then two turns each of explore-parser (5, 6),
/// explore-lexer (7, 8) and explore-tests (9, 10). The join is main:2.
const CHILDREN_FIRST: [u64; 3] = [5, 7, 9];
const CHILDREN_LAST: [u64; 3] = [6, 8, 10];
const JOIN: u64 = 2;
const JOIN_GAP_MS: f64 = 300.0;

fn f(v: &Value, k: &str) -> f64 {
    v[k].as_f64().unwrap_or_else(|| panic!("{k} in {v}"))
}

/// The simulator's log line of every record, matched by session and prompt tokens (the
/// fixture's nodes all have distinct prompts).
fn log_by_node(turns: &[Value], log: &[Value]) -> HashMap<(String, u64), Value> {
    let mut by = HashMap::new();
    for t in turns {
        let sid = t["session_id"].as_str().unwrap();
        let hits: Vec<&Value> = log
            .iter()
            .filter(|l| l["session"] == sid && l["prompt_tokens"] == t["input_tokens"])
            .collect();
        assert_eq!(hits.len(), 1, "one log line for {t}");
        by.insert(
            (sid.to_string(), t["turn_index"].as_u64().unwrap()),
            hits[0].clone(),
        );
    }
    by
}

#[test]
fn a_fork_join_trace_plays_in_dependency_order_against_bench_sim() {
    let _serial = serial();
    let dir = tempfile::tempdir().unwrap();
    let log_path = dir.path().join("requests.jsonl");
    let run_dir = dir.path().join("run");
    let (_sim, url) = spawn_sim(&[
        "--ttft-ms",
        "30",
        "--itl-ms",
        "5",
        "--request-log",
        log_path.to_str().unwrap(),
    ]);
    let out = run(&[
        "run",
        "--base-url",
        &url,
        "--dataset",
        FIXTURE,
        "--raw-gaps",
        "--routing-key",
        "x-session-id",
        "--run-dir",
        run_dir.to_str().unwrap(),
        "-q",
        "--json",
    ]);
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let result: Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(result["summary"]["turns_ok"], 11, "{}", result["summary"]);
    let turns = read_jsonl(&run_dir.join("turns.jsonl"));
    assert_eq!(turns.len(), 11);
    let sessions = read_jsonl(&run_dir.join("sessions.jsonl"));
    assert_eq!(sessions.len(), 1);
    assert_eq!(sessions[0]["status"], "completed");
    assert_eq!(sessions[0]["turns_played"], 11);
    let log = read_jsonl(&log_path);
    assert_eq!(log.len(), 11, "one request per node");
    let by = log_by_node(&turns, &log);
    let at = |n: u64| &by[&("fork-join".to_string(), n)];
    // The server's clock: each request's receipt and end.
    let (recv, end) = (|n| f(at(n), "recv_ms"), |n| f(at(n), "end_ms"));
    for c in CHILDREN_FIRST {
        assert!(
            recv(c) >= end(1),
            "child {c} was received before main:1 ended"
        );
    }
    let last_in = CHILDREN_FIRST.map(recv).into_iter().fold(0.0, f64::max);
    let first_out = CHILDREN_FIRST.map(end).into_iter().fold(f64::MAX, f64::min);
    assert!(
        last_in < first_out,
        "the three children were not in flight together"
    );
    let slowest = CHILDREN_LAST.map(end).into_iter().fold(0.0, f64::max);
    assert!(
        recv(JOIN) >= slowest + JOIN_GAP_MS,
        "the join came {} ms after the slowest child, before its {JOIN_GAP_MS} ms gap",
        recv(JOIN) - slowest
    );
    // A fork's children hit their parent's prefix in the simulator's cache: main:1's whole
    // prompt (to the block) was cached for each child's first request.
    let parent_prompt = f(at(1), "prompt_tokens");
    for c in CHILDREN_FIRST {
        assert!(
            f(at(c), "cached_tokens") >= (parent_prompt / 16.0).floor() * 16.0,
            "child {c}: {}",
            at(c)
        );
    }
    // The records say how the graph ran.
    let rec = |n: u64| {
        turns
            .iter()
            .find(|t| t["turn_index"] == n)
            .unwrap_or_else(|| panic!("node {n}"))
    };
    assert_eq!(rec(JOIN)["node"]["after"], serde_json::json!([1, 6, 8, 10]));
    let in_flight: Vec<u64> = CHILDREN_FIRST
        .iter()
        .map(|&c| rec(c)["node"]["in_flight"].as_u64().unwrap())
        .collect();
    assert_eq!(in_flight.iter().max(), Some(&3), "{in_flight:?}");
    assert!(turns.iter().all(|t| t["active_at_dispatch"] == 1));
}

/// `copies` sessions of the fixture, ids `g0`, `g1`, … (distinct texts per copy, so each
/// copy's prompts stay distinct).
fn write_copies(path: &Path, copies: usize) {
    let base: Value = serde_json::from_str(&std::fs::read_to_string(FIXTURE).unwrap()).unwrap();
    let mut out = String::new();
    for i in 0..copies {
        let mut s = base.clone();
        s["session_id"] = Value::from(format!("g{i}"));
        s["system_prompt"] = Value::from(format!(
            "Copy {i}. {}",
            base["system_prompt"].as_str().unwrap()
        ));
        out.push_str(&s.to_string());
        out.push('\n');
    }
    std::fs::write(path, out).unwrap();
}

#[test]
fn sigkill_in_the_middle_of_graphs_and_resume_plays_each_graph_once() {
    let _serial = serial();
    const COPIES: usize = 6;
    const NODES: usize = 11;
    let dir = tempfile::tempdir().unwrap();
    let trace = dir.path().join("graphs.jsonl");
    write_copies(&trace, COPIES);
    let run_dir = dir.path().join("run");
    let (_sim, url) = spawn_sim(&["--ttft-ms", "30", "--itl-ms", "3"]);
    let turns_file = run_dir.join("turns.jsonl");
    let lines = |p: &Path| {
        std::fs::read_to_string(p)
            .unwrap_or_default()
            .lines()
            .filter(|l| serde_json::from_str::<Value>(l).is_ok())
            .count()
    };
    let mut child = bench()
        .args([
            "run",
            "--base-url",
            &url,
            "--dataset",
            trace.to_str().unwrap(),
            "--raw-gaps",
            "-c",
            "2",
            "--num-sessions",
            &COPIES.to_string(),
            "--run-dir",
            run_dir.to_str().unwrap(),
            "-q",
        ])
        .stdout(Stdio::null())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    // Kill once a few nodes are recorded: some graph is then partly played.
    let t0 = Instant::now();
    while lines(&turns_file) < 15 {
        assert!(
            child.try_wait().unwrap().is_none(),
            "finished before the kill"
        );
        assert!(t0.elapsed() < Duration::from_secs(60), "no records");
        std::thread::sleep(Duration::from_millis(5));
    }
    child.kill().unwrap(); // SIGKILL
    child.wait().unwrap();
    let before = read_jsonl_lenient(&turns_file);
    assert!(before.len() < COPIES * NODES, "the kill came after the end");

    let out = run(&["run", "--resume", run_dir.to_str().unwrap(), "-q", "--json"]);
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let result: Value = serde_json::from_slice(&out.stdout).unwrap();
    let sum = &result["summary"];
    assert_eq!(sum["sessions_completed"], COPIES, "{sum}");
    assert_eq!(sum["turns_ok"], COPIES * NODES, "{sum}");
    // Every node of every graph exactly once among the records that count.
    let live = |v: &&Value| v["superseded"] != true && v["warmup"] != true;
    let turns = read_jsonl(&turns_file);
    let mut per: HashMap<(String, u64), u32> = HashMap::new();
    for t in turns.iter().filter(live) {
        *per.entry((
            t["session_id"].as_str().unwrap().to_owned(),
            t["turn_index"].as_u64().unwrap(),
        ))
        .or_default() += 1;
    }
    assert_eq!(per.len(), COPIES * NODES);
    assert!(per.values().all(|&n| n == 1), "{per:?}");
    let sessions = read_jsonl(&run_dir.join("sessions.jsonl"));
    assert_eq!(sessions.iter().filter(live).count(), COPIES);
    // The graph cut by the kill was played again from its start: its earlier records are
    // kept, marked superseded.
    assert!(
        turns.iter().any(|t| t["superseded"] == true),
        "no record superseded"
    );
}

fn read_jsonl_lenient(p: &Path) -> Vec<Value> {
    std::fs::read_to_string(p)
        .unwrap_or_default()
        .lines()
        .filter_map(|l| serde_json::from_str(l).ok())
        .collect()
}

#[test]
fn bad_graphs_are_refused_in_one_line_naming_session_and_node() {
    // Planning processes beside a timing test would slow it: one at a time.
    let _serial = serial();
    let dir = tempfile::tempdir().unwrap();
    let base: Value = serde_json::from_str(&std::fs::read_to_string(FIXTURE).unwrap()).unwrap();
    type Mutate = Box<dyn Fn(&mut Value)>;
    let cases: [(&str, Mutate, &str); 4] = [
        (
            "cycle",
            Box::new(|s| s["turns"][0]["after"] = serde_json::json!(["explore-lexer:0"])),
            "waits on itself (a cycle: ",
        ),
        (
            "dangling",
            Box::new(|s| s["subagents"][1]["after"] = Value::from("main:9")),
            "\"main:9\" is a dangling reference (main has 5 turns)",
        ),
        (
            "other-session",
            Box::new(|s| s["turns"][2]["after"][0] = Value::from("s2/explore-parser:1")),
            "waits on a node of another session (\"s2\")",
        ),
        (
            "unknown-agent",
            Box::new(|s| s["turns"][2]["after"][0] = Value::from("explorer:1")),
            "dangling reference (no agent \"explorer\"",
        ),
    ];
    for (name, mutate, want) in cases {
        let mut s = base.clone();
        mutate(&mut s);
        let p = dir.path().join(format!("{name}.jsonl"));
        std::fs::write(&p, format!("{s}\n")).unwrap();
        let out = run(&["plan", "--dataset", p.to_str().unwrap()]);
        assert_eq!(out.status.code(), Some(2), "{name}");
        let e = String::from_utf8_lossy(&out.stderr);
        assert_eq!(e.trim().lines().count(), 1, "{name}: {e}");
        assert!(e.contains(want), "{name}: {e}");
        assert!(e.contains("session \"fork-join\""), "{name}: {e}");
        assert!(e.contains(&format!("{name}.jsonl:1")), "{name}: {e}");
    }
}

#[test]
fn bench_plan_reports_the_graph_shape() {
    let _serial = serial();
    let v = crate::run_json(&["plan", "--dataset", FIXTURE, "--raw-gaps", "--json"]);
    let g = &v["graph"];
    assert_eq!(g["graph_sessions"], 1, "{v}");
    assert_eq!(g["subagents"], 3);
    assert_eq!(g["fan_out"]["max"], 3.0);
    assert_eq!(g["depth"]["max"], 1.0);
    assert_eq!(g["max_parallel"]["max"], 3.0);
    assert_eq!(v["turns"], 11);
    // The longest path by output tokens: main 0, 1, the heaviest child (tests: 12 + 13),
    // the join and main 3, 4: 12 + 14 + 25 + 16 + 8 + 9.
    assert_eq!(g["critical_path_output_tokens"]["max"], 84.0);
    assert!(f(&g["est_parallel_s"], "max") < f(&g["est_serial_s"], "max"));
}

#[test]
fn the_native_graph_format_and_agentic_sessions_validate_against_the_session_schema() {
    let _serial = serial();
    let path = concat!(
        env!("CARGO_MANIFEST_DIR"),
        "/../../docs/session.schema.json"
    );
    let schema: Value = serde_json::from_str(&std::fs::read_to_string(path).unwrap()).unwrap();
    let v = jsonschema::validator_for(&schema).unwrap();
    let fixture: Value = serde_json::from_str(&std::fs::read_to_string(FIXTURE).unwrap()).unwrap();
    assert!(
        v.is_valid(&fixture),
        "{:?}",
        v.iter_errors(&fixture)
            .map(|e| e.to_string())
            .collect::<Vec<_>>()
    );
    let spec = bench_workload::agentic::AgenticSpec {
        turns: 12,
        input: 40,
        spawns: 3.0,
        depth: 2,
        nest: 0.5,
        ..Default::default()
    };
    for s in bench_workload::agentic::sessions(&spec, 5, 1, 30_000.0) {
        let j = serde_json::to_value(&s).unwrap();
        assert!(
            v.is_valid(&j),
            "{:?}",
            v.iter_errors(&j).map(|e| e.to_string()).collect::<Vec<_>>()
        );
    }
    // What the schema refuses: a subagent named main, a reference that is no AGENT:TURN.
    let mut bad = fixture.clone();
    bad["subagents"][0]["agent_id"] = Value::from("main");
    assert!(!v.is_valid(&bad));
    let mut bad = fixture;
    bad["turns"][2]["after"][0] = Value::from("explore-parser");
    assert!(!v.is_valid(&bad));
}

#[test]
fn dataset_agentic_is_seeded_and_plays_end_to_end_on_the_embedded_simulator() {
    let _serial = serial();
    let knobs = "turns=5,input=60,output=12,spawns=2,fan_out=2:1,subagent_turns=2-2,tool_wait_ms=10,tool_wait_sigma=0.3";
    let plan = |seed: &str| {
        crate::run_json(&[
            "plan",
            "--dataset",
            "agentic",
            "--agentic",
            knobs,
            "--num-sessions",
            "6",
            "--seed",
            seed,
            "--json",
        ])
    };
    let (a, b, c) = (plan("1"), plan("1"), plan("2"));
    assert_eq!(a, b, "the same seed plans the same");
    assert_ne!(
        a["input_tokens"], c["input_tokens"],
        "another seed, other sessions"
    );
    assert!(a["graph"]["graph_sessions"].as_u64().unwrap() >= 1, "{a}");
    assert_eq!(a["graph"]["fan_out"]["max"], 2.0);
    // Bad knobs are refused naming themselves.
    let out = run(&["plan", "--dataset", "agentic", "--agentic", "fan_out=2"]);
    assert_eq!(out.status.code(), Some(2));
    assert!(String::from_utf8_lossy(&out.stderr).contains("--agentic: fan_out"));

    let dir = tempfile::tempdir().unwrap();
    let run_dir = dir.path().join("run");
    let out = run(&[
        "run",
        "--dataset",
        "agentic",
        "--agentic",
        knobs,
        "--num-sessions",
        "6",
        "--seed",
        "1",
        "-c",
        "3",
        "--run-dir",
        run_dir.to_str().unwrap(),
        "-q",
        "--json",
    ]);
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let r: Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(r["summary"]["turns_failed"], 0, "{}", r["summary"]);
    assert_eq!(
        r["summary"]["turns_ok"], a["turns"],
        "every planned node played once"
    );
    assert_eq!(r["graph"]["sessions"], a["graph"]["graph_sessions"]);
    assert!(
        r["graph"]["max_in_flight"]["max"].as_u64().unwrap() >= 2,
        "{}",
        r["graph"]
    );
}

#[test]
fn graphs_shard_and_merge_with_every_node_once() {
    let _serial = serial();
    const COPIES: usize = 6;
    let dir = tempfile::tempdir().unwrap();
    let trace = dir.path().join("graphs.jsonl");
    write_copies(&trace, COPIES);
    let (_sim, url) = spawn_sim(&["--ttft-ms", "5", "--itl-ms", "1"]);
    let mut dirs = Vec::new();
    for i in 0..2 {
        let d = dir.path().join(format!("shard-{i}"));
        let shard = format!("{i}/2");
        let out = run(&[
            "run",
            "--base-url",
            &url,
            "--dataset",
            trace.to_str().unwrap(),
            "--raw-gaps",
            "--no-gaps",
            "--num-sessions",
            "6",
            "-c",
            "3",
            "--shard",
            &shard,
            "--run-dir",
            d.to_str().unwrap(),
            "-q",
        ]);
        assert!(
            out.status.success(),
            "{}",
            String::from_utf8_lossy(&out.stderr)
        );
        dirs.push(d);
    }
    let merged = dir.path().join("merged");
    let out = run(&[
        "merge",
        dirs[0].to_str().unwrap(),
        dirs[1].to_str().unwrap(),
        "-o",
        merged.to_str().unwrap(),
    ]);
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let turns = read_jsonl(&merged.join("turns.jsonl"));
    let mut per: HashMap<(String, u64), u32> = HashMap::new();
    for t in &turns {
        *per.entry((
            t["session_id"].as_str().unwrap().to_owned(),
            t["turn_index"].as_u64().unwrap(),
        ))
        .or_default() += 1;
        assert!(t["node"].is_object(), "graph records keep their node");
    }
    assert_eq!(per.len(), COPIES * 11);
    assert!(per.values().all(|&n| n == 1));
    let result: Value =
        serde_json::from_slice(&std::fs::read(merged.join("result.json")).unwrap()).unwrap();
    assert_eq!(result["graph"]["sessions"], COPIES, "{}", result["graph"]);
}

#[test]
fn every_graph_importer_yields_a_trace_bench_run_plays_end_to_end() {
    let _serial = serial();
    let fixtures = concat!(env!("CARGO_MANIFEST_DIR"), "/../../fixtures/graphs");
    let dir = tempfile::tempdir().unwrap();
    for (format, file) in [
        ("cc-traces", "cc_traces/fork_join.json"),
        ("otel", "otel/fork_join.json"),
        ("tracelab", "tracelab/fork_join.jsonl"),
    ] {
        let out_file = dir.path().join(format!("{format}.jsonl"));
        let input = format!("{fixtures}/{file}");
        let o = run(&[
            "import",
            "--from",
            format,
            &input,
            "-o",
            out_file.to_str().unwrap(),
        ]);
        assert!(
            o.status.success(),
            "{format}: {}",
            String::from_utf8_lossy(&o.stderr)
        );
        let plan = crate::run_json(&["plan", "--dataset", out_file.to_str().unwrap(), "--json"]);
        assert_eq!(plan["turns"], 11, "{format}: {plan}");
        assert_eq!(plan["graph"]["subagents"], 3, "{format}");
        assert_eq!(plan["graph"]["max_parallel"]["max"], 3.0, "{format}");
        let run_dir = dir.path().join(format!("run-{format}"));
        let o = run(&[
            "run",
            "--dataset",
            out_file.to_str().unwrap(),
            "--no-gaps",
            "--output-policy",
            "fixed:4",
            "--run-dir",
            run_dir.to_str().unwrap(),
            "-q",
            "--json",
        ]);
        assert!(
            o.status.success(),
            "{format}: {}",
            String::from_utf8_lossy(&o.stderr)
        );
        let r: Value = serde_json::from_slice(&o.stdout).unwrap();
        assert_eq!(r["summary"]["turns_ok"], 11, "{format}: {}", r["summary"]);
        assert_eq!(r["graph"]["sessions"], 1, "{format}");
        assert_eq!(
            r["graph"]["max_in_flight"]["max"], 3,
            "{format}: {}",
            r["graph"]
        );
    }
}
