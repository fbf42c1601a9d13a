//! The agent-graph importers (cc-traces, otel, tracelab) against their fork/join fixtures
//! (`fixtures/graphs/<format>/EXPECTED.md`), plus their inference rules and error paths.

use std::path::{Path, PathBuf};

use bench_workload::format::{SubagentContext, TraceSession, TraceTurn};
use bench_workload::graph;
use bench_workload::import::{
    ImportError, ImportFormat, ImportOptions, ImportStats, import, mooncake_block_text,
};
use serde_json::{Value, json};

use crate::fixtures;

fn graphs(rel: &str) -> PathBuf {
    fixtures().join("graphs").join(rel)
}

fn run_with(
    format: ImportFormat,
    inputs: &[PathBuf],
    opts: &ImportOptions,
) -> Result<(Vec<TraceSession>, ImportStats), ImportError> {
    let mut out = Vec::new();
    let stats = import(format, inputs, opts, &mut |s| {
        out.push(s);
        Ok(())
    })?;
    Ok((out, stats))
}

fn run(format: ImportFormat, path: &Path) -> (Vec<TraceSession>, ImportStats) {
    run_with(format, &[path.to_path_buf()], &ImportOptions::default()).unwrap()
}

fn one(format: ImportFormat, path: &Path) -> (TraceSession, ImportStats) {
    let (mut s, stats) = run(format, path);
    assert_eq!(s.len(), 1, "{}", path.display());
    (s.remove(0), stats)
}

fn run_err(format: ImportFormat, path: &Path) -> ImportError {
    match run_with(format, &[path.to_path_buf()], &ImportOptions::default()) {
        Ok((s, _)) => panic!("expected an error, got {} sessions", s.len()),
        Err(e) => e,
    }
}

/// A temporary directory (`tempfile`), removed on drop.
struct Tmp(tempfile::TempDir);

impl Tmp {
    fn new(tag: &str) -> Self {
        Tmp(tempfile::Builder::new()
            .prefix(&format!("bench-graph-import-{tag}-"))
            .tempdir()
            .unwrap())
    }

    fn write(&self, name: &str, text: impl AsRef<[u8]>) -> PathBuf {
        let p = self.0.path().join(name);
        std::fs::write(&p, text).unwrap();
        p
    }
}

fn read_json(path: &Path) -> Value {
    serde_json::from_str(&std::fs::read_to_string(path).unwrap()).unwrap()
}

fn words(s: &str) -> u64 {
    s.split_whitespace().count() as u64
}

fn close(a: Option<f64>, b: f64, what: &str) {
    let a = a.unwrap_or_else(|| panic!("{what}: absent, expected {b}"));
    assert!((a - b).abs() < 1e-6, "{what}: {a}, expected {b}");
}

/// One node of the expected graph: input/output tokens, gap and start (ms).
struct Node(u64, u64, f64, f64);

fn check_turns(who: &str, turns: &[TraceTurn], expect: &[Node]) {
    assert_eq!(turns.len(), expect.len(), "{who}: number of turns");
    for (k, (t, e)) in turns.iter().zip(expect).enumerate() {
        assert_eq!(t.index as usize, k);
        assert_eq!(t.input_tokens, Some(e.0), "{who}:{k} input_tokens");
        assert_eq!(t.output_tokens, Some(e.1), "{who}:{k} output_tokens");
        close(t.pre_gap_ms, e.2, &format!("{who}:{k} pre_gap_ms"));
        close(t.timestamp_ms, e.3, &format!("{who}:{k} timestamp_ms"));
    }
}

/// The graph of every `fork_join` fixture (EXPECTED.md): main M1 M2 J M4 M5, three subagents
/// forked after M2 (main:1) with two calls each, J (main:2) joining the last call of each.
/// `subs` are the subagents' ids; `join_gap_ms` / `join_start_ms` are J's wait and start,
/// which the formats record differently.
fn check_fork_join(s: &TraceSession, dataset: &str, subs: [&str; 3], join: (f64, f64)) {
    assert_eq!(
        s.source.as_ref().and_then(|s| s.dataset.as_deref()),
        Some(dataset)
    );
    check_turns(
        "main",
        &s.turns,
        &[
            Node(1000, 50, 0.0, 0.0),
            Node(1180, 90, 1000.0, 3000.0),
            Node(1600, 100, join.0, join.1),
            Node(1800, 110, 800.0, 18300.0),
            Node(2000, 150, 1200.0, 21500.0),
        ],
    );
    let joined: Vec<String> = subs.iter().map(|a| format!("{a}:1")).collect();
    for (k, t) in s.turns.iter().enumerate() {
        if k == 2 {
            assert_eq!(
                t.after, joined,
                "the join waits for every subagent's last call"
            );
        } else {
            assert!(t.after.is_empty(), "main:{k} joins nothing: {:?}", t.after);
        }
    }
    assert_eq!(s.subagents.len(), 3);
    let expect = [
        [Node(700, 60, 300.0, 5800.0), Node(900, 120, 700.0, 8500.0)],
        [Node(720, 70, 400.0, 5900.0), Node(950, 130, 600.0, 9500.0)],
        [Node(740, 80, 500.0, 6000.0), Node(980, 140, 400.0, 10200.0)],
    ];
    for ((a, id), e) in s.subagents.iter().zip(subs).zip(&expect) {
        assert_eq!(a.agent_id, id);
        assert_eq!(a.after, "main:1", "{id} forks from M2");
        assert_eq!(a.context, SubagentContext::Fresh, "{id}: a fresh context");
        check_turns(id, &a.turns, e);
        assert!(a.turns.iter().all(|t| t.after.is_empty()));
    }
    s.check().unwrap();
    let g = graph::resolve(s).unwrap();
    assert_eq!(g.order.len(), 11, "11 nodes");
    assert_eq!(g.branches.len(), 4);
    // Nodes: main 0..5, then each subagent's two turns (5, 6), (7, 8), (9, 10).
    assert_eq!(g.deps(2).collect::<Vec<_>>(), vec![1, 6, 8, 10], "J");
    for (first, name) in [(5, subs[0]), (7, subs[1]), (9, subs[2])] {
        assert_eq!(
            g.deps(first).collect::<Vec<_>>(),
            vec![1],
            "{name}:0 forks from M2"
        );
        assert_eq!(
            g.deps(first + 1).collect::<Vec<_>>(),
            vec![first],
            "{name}:1"
        );
        assert_eq!(g.branches[g.branch_of[first as usize] as usize].depth, 1);
    }
    assert_eq!(g.deps(3).collect::<Vec<_>>(), vec![2], "M4 after J only");
    assert_eq!(g.deps(1).collect::<Vec<_>>(), vec![0]);
}

/// A turn's replayed prompt (text tokens) and every node's: the branch's system prompt, the
/// inputs and answers before it, the answers it joins; a subagent starts from its own system
/// prompt (fresh) or the fork node's conversation.
fn replayed_prompts(s: &TraceSession) -> Vec<Vec<u64>> {
    let answer = |node: &str| -> u64 {
        let (agent, turn) = node.rsplit_once(':').unwrap();
        let turn: usize = turn.parse().unwrap();
        let turns = if agent == "main" {
            &s.turns
        } else {
            &s.subagents
                .iter()
                .find(|a| a.agent_id == agent)
                .unwrap()
                .turns
        };
        words(&turns[turn].assistant_text)
    };
    let walk = |start: u64, turns: &[TraceTurn]| -> Vec<u64> {
        let mut ctx = start;
        let mut out = Vec::new();
        for t in turns {
            ctx += t.after.iter().map(|n| answer(n)).sum::<u64>();
            ctx += t.input_delta.iter().map(|m| words(&m.content)).sum::<u64>();
            out.push(ctx);
            ctx += words(&t.assistant_text);
        }
        out
    };
    let mut all = vec![walk(
        words(s.system_prompt.as_deref().unwrap_or("")),
        &s.turns,
    )];
    for a in &s.subagents {
        assert_eq!(
            a.context,
            SubagentContext::Fresh,
            "this helper walks fresh subagents"
        );
        all.push(walk(
            words(a.system_prompt.as_deref().unwrap_or("")),
            &a.turns,
        ));
    }
    all
}

// ---------------------------------------------------------------------------------------------
// cc-traces

#[test]
fn cc_traces_fork_join_is_the_expected_graph() {
    let path = graphs("cc_traces/fork_join.json");
    let (s, stats) = one(ImportFormat::CcTraces, &path);
    assert_eq!(s.session_id, "fork_join_0001");
    check_fork_join(
        &s,
        "cc-traces",
        ["agent_001", "agent_002", "agent_003"],
        (1500.0, 15000.0),
    );
    assert_eq!(
        s.source.as_ref().unwrap().model.as_deref(),
        Some("claude-opus-4-5-20251101")
    );
    for a in &s.subagents {
        assert_eq!(a.subagent_type.as_deref(), Some("Explore"));
    }
    // Prompts are exactly `in` tokens of one-token words: the system prompt is the recorded
    // tool + system prefix (512 + 256 main, 256 + 128 subagents), and each replayed prompt
    // (history, answers, joined answers) is the recorded size...
    assert_eq!(words(s.system_prompt.as_deref().unwrap()), 768);
    let sub_system = s.subagents[0].system_prompt.as_deref().unwrap();
    assert_eq!(words(sub_system), 384);
    assert!(
        s.subagents
            .iter()
            .all(|a| a.system_prompt.as_deref() == Some(sub_system))
    );
    assert_ne!(s.system_prompt.as_deref(), Some(sub_system));
    let prompts = replayed_prompts(&s);
    assert_eq!(prompts[0], vec![1000, 1180, 1660, 1800, 2000]);
    assert_eq!(prompts[1], vec![700, 900]);
    assert_eq!(prompts[2], vec![720, 950]);
    assert_eq!(prompts[3], vec![740, 980]);
    // ... except the join: M2's conversation (1180 + 90) and the three answers it joins
    // (120 + 130 + 140) already exceed its 1600 tokens, so it adds nothing of its own (the
    // subagents' results are not repeated in its input), and M4 absorbs the excess.
    assert!(s.turns[2].input_delta.is_empty());
    assert!(
        stats
            .notes
            .iter()
            .any(|n| n.starts_with("1 turn(s) recorded fewer input tokens"))
    );
    for (k, t) in s.turns.iter().enumerate() {
        assert_eq!(
            words(&t.assistant_text),
            t.output_tokens.unwrap(),
            "main:{k} answer"
        );
    }
}

#[test]
fn cc_traces_completion_time_clock_gives_the_same_graph() {
    let (a, stats_a) = one(ImportFormat::CcTraces, &graphs("cc_traces/fork_join.json"));
    let (b, stats_b) = one(
        ImportFormat::CcTraces,
        &graphs("cc_traces/fork_join_completion_t.json"),
    );
    assert_eq!(b.session_id, "fork_join_0002");
    check_fork_join(
        &b,
        "cc-traces",
        ["agent_001", "agent_002", "agent_003"],
        (1500.0, 15000.0),
    );
    let relative = |s: &ImportStats| {
        s.notes
            .iter()
            .any(|n| n.starts_with("3 subagent(s) had a completion-time"))
    };
    assert!(relative(&stats_b), "{:?}", stats_b.notes);
    assert!(!relative(&stats_a), "{:?}", stats_a.notes);
    // Block ids are local to each trace: another trace's equal ids are other text.
    assert_ne!(a.system_prompt, b.system_prompt);
}

#[test]
fn cc_traces_equal_block_ids_give_equal_text() {
    // Global scope: block ids name the same text across traces (and as Mooncake's blocks).
    let mut v = read_json(&graphs("cc_traces/fork_join.json"));
    v["hash_id_scope"] = json!("global");
    let tmp = Tmp::new("cc-global");
    let p = tmp.write("global.json", v.to_string());
    let (s, _) = one(ImportFormat::CcTraces, &p);
    let blocks = |ids: std::ops::RangeInclusive<u64>| -> String {
        ids.map(|id| mooncake_block_text(id, 64)).collect()
    };
    assert_eq!(s.system_prompt.as_deref(), Some(blocks(1..=12).as_str()));
    assert_eq!(
        s.subagents[1].system_prompt.as_deref(),
        Some(blocks(101..=106).as_str())
    );
    // The replayed M2 prompt (system, M1's input and answer, M2's input) is its blocks 1-18,
    // then the first tokens of the blocks the next call adds: what the server's prefix
    // cache saw.
    let m = &s.turns;
    let replay: String = [
        s.system_prompt.clone().unwrap(),
        m[0].input_delta[0].content.clone(),
        m[0].assistant_text.clone(),
        m[1].input_delta[0].content.clone(),
    ]
    .concat();
    let all = blocks(1..=19);
    let cut = all
        .match_indices(' ')
        .nth(1180)
        .map_or(all.len(), |(i, _)| i);
    let want = &all[..cut];
    assert_eq!(words(&replay), 1180);
    assert_eq!(replay, want);
    // A subagent's second prompt repeats its first and its answer.
    let a = &s.subagents[0].turns;
    let first: String = [
        s.subagents[0].system_prompt.clone().unwrap(),
        a[0].input_delta[0].content.clone(),
        a[0].assistant_text.clone(),
    ]
    .concat();
    let mut ids: Vec<u64> = (101..=106).collect();
    ids.extend(111..=118);
    let blocks_s1: String = ids.iter().map(|&id| mooncake_block_text(id, 64)).collect();
    assert!(
        blocks_s1.starts_with(&first),
        "S1b's blocks start with S1a's conversation"
    );
}

fn call(t: f64, input: u64, output: u64, ids: std::ops::Range<u64>, api: f64) -> Value {
    json!({"t": t, "type": "n", "in": input, "out": output,
           "hash_ids": ids.collect::<Vec<_>>(), "api_time": api})
}

#[test]
fn cc_traces_nesting_background_fork_context_and_orphans() {
    let trace = json!({
        "id": "nest", "block_size": 4, "hash_id_scope": "local",
        "requests": [
            // A subagent before any call has nothing to fork from: dropped.
            {"t": 0.0, "type": "subagent", "agent_id": "early", "duration_ms": 100,
             "status": "completed", "requests": [call(0.0, 8, 1, 100..102, 0.1)]},
            call(0.0, 8, 2, 0..2, 1.0),
            {"t": 1.5, "type": "subagent", "agent_id": "outer", "duration_ms": 6000,
             "status": "completed", "requests": [
                call(1.5, 12, 2, 200..203, 1.0),
                {"t": 3.0, "type": "subagent", "agent_id": "inner", "duration_ms": 1000,
                 "status": "completed", "requests": [call(3.0, 8, 4, 300..302, 1.0)]},
                call(4.5, 20, 3, 200..205, 1.0)
            ]},
            // Forks with the parent's whole prefix: its conversation, not a fresh one.
            {"t": 1.2, "type": "subagent", "agent_id": "bg", "duration_ms": null,
             "status": "async_launched", "requests": [call(1.2, 16, 1, 0..4, 0.5)]},
            call(8.0, 24, 2, 0..6, 1.0)
        ]
    });
    let tmp = Tmp::new("cc-nest");
    let p = tmp.write("nest.json", trace.to_string());
    let (s, stats) = one(ImportFormat::CcTraces, &p);
    let ids: Vec<&str> = s.subagents.iter().map(|a| a.agent_id.as_str()).collect();
    assert_eq!(ids, ["outer", "inner", "bg"]);
    let [outer, inner, bg] = &s.subagents[..] else {
        unreachable!()
    };
    assert_eq!(
        (outer.after.as_str(), outer.context),
        ("main:0", SubagentContext::Fresh)
    );
    assert_eq!(
        inner.after, "outer:0",
        "nested: forks from its parent's call"
    );
    assert_eq!(
        outer.turns[1].after,
        ["inner:0"],
        "the parent's next call joins it"
    );
    assert_eq!(
        (bg.after.as_str(), bg.context),
        ("main:0", SubagentContext::Fork)
    );
    // The fork context holds main:0's prompt (8) and answer (2): 6 tokens are new.
    assert_eq!(words(&bg.turns[0].input_delta[0].content), 6);
    // main:1 joins the completed subagent, not the background one.
    assert_eq!(s.turns[1].after, ["outer:1"]);
    close(
        s.turns[1].pre_gap_ms,
        8000.0 - 5500.0,
        "main:1 gap after outer:1",
    );
    close(
        inner.turns[0].pre_gap_ms,
        500.0,
        "inner:0 gap after outer:0",
    );
    close(
        outer.turns[1].pre_gap_ms,
        500.0,
        "outer:1 gap after inner:0",
    );
    for note in [
        "1 subagent(s) had no earlier call",
        "1 subagent(s) ran in the background",
    ] {
        assert!(
            stats.notes.iter().any(|n| n.starts_with(note)),
            "{note}: {:?}",
            stats.notes
        );
    }
    assert_eq!(graph::resolve(&s).unwrap().order.len(), 2 + 2 + 1 + 1);
}

#[test]
fn cc_traces_malformed_input_names_file_and_field() {
    let tmp = Tmp::new("cc-bad");
    let mut v = read_json(&graphs("cc_traces/fork_join.json"));
    v["requests"][2]["requests"][0]["in"] = json!("x");
    let p = tmp.write("bad.json", v.to_string());
    let e = run_err(ImportFormat::CcTraces, &p);
    assert_eq!(e.file, p);
    assert_eq!(e.line, None);
    assert_eq!(
        e.to_string(),
        format!(
            "{}: \"requests\"[2].requests[0].in: expected a non-negative integer, found a string (\"x\")",
            p.display()
        )
    );
    // JSONL (the Hugging Face form): the line; skip_invalid keeps the good traces.
    let good = read_json(&graphs("cc_traces/fork_join.json"));
    let mut bad = good.clone();
    bad["requests"][0]["type"] = json!("q");
    let p = tmp.write("traces.jsonl", format!("{good}\n{bad}\n"));
    let e = run_err(ImportFormat::CcTraces, &p);
    assert_eq!(e.line, Some(2));
    assert!(
        e.message.starts_with(
            "\"requests\"[0].type: expected \"n\", \"s\" or \"subagent\", found \"q\""
        ),
        "{e}"
    );
    let opts = ImportOptions {
        skip_invalid: true,
        ..ImportOptions::default()
    };
    let (s, stats) = run_with(ImportFormat::CcTraces, &[p], &opts).unwrap();
    assert_eq!((s.len(), stats.skipped), (1, 1));
    let mut v = good.clone();
    v["requests"][3].as_object_mut().unwrap().remove("agent_id");
    let p = tmp.write("noid.json", v.to_string());
    let e = run_err(ImportFormat::CcTraces, &p);
    assert!(
        e.message.starts_with("\"requests\"[3].agent_id: missing"),
        "{e}"
    );
}

// ---------------------------------------------------------------------------------------------
// otel

#[test]
fn otel_fork_join_is_the_expected_graph() {
    let (s, stats) = one(ImportFormat::Otel, &graphs("otel/fork_join.json"));
    assert_eq!(s.session_id, "4f1c0a7e9b2d4c6e8f0a1b2c3d4e5f60");
    check_fork_join(
        &s,
        "otel",
        ["agent_001", "agent_002", "agent_003"],
        (1500.0, 15000.0),
    );
    assert!(stats.notes.is_empty(), "{:?}", stats.notes);
    assert_eq!(s.system_prompt.as_deref(), Some("You are a coding agent."));
    assert_eq!(
        s.turns[0].input_delta[0].content,
        "test_parse fails; find the cause and fix it."
    );
    // M2's input is the Read result; J's input is only what the joins bring (the subagents'
    // answers are not repeated as tool messages).
    let m2 = &s.turns[1].input_delta;
    assert_eq!(m2.len(), 1);
    assert_eq!(
        (m2[0].role.as_str(), m2[0].tool_call_id.as_deref()),
        ("tool", Some("call_m1"))
    );
    assert!(
        s.turns[2].input_delta.is_empty(),
        "{:?}",
        s.turns[2].input_delta
    );
    assert_eq!(
        s.turns[3].input_delta[0].tool_call_id.as_deref(),
        Some("call_j")
    );
    let calls = s.turns[1].tool_calls.as_ref().unwrap().as_array().unwrap();
    let ids: Vec<&str> = calls.iter().map(|c| c["id"].as_str().unwrap()).collect();
    assert_eq!(ids, ["call_m2_1", "call_m2_2", "call_m2_3"]);
    for (a, prompt) in s.subagents.iter().zip([
        "Find where parse_date is defined.",
        "List tests that call parse_date.",
        "Check the changelog for date format changes.",
    ]) {
        assert_eq!(
            a.system_prompt.as_deref(),
            Some("You are an Explore subagent. Report findings briefly.")
        );
        assert_eq!(a.subagent_type.as_deref(), Some("Explore"));
        assert_eq!(a.turns[0].input_delta[0].content, prompt);
    }
    // The joined answers are the subagents' final texts.
    assert_eq!(
        s.subagents[2].turns[1].assistant_text,
        "v2.1 switched to ISO 8601 dates."
    );
    // S2a's two parallel tool results are S2b's input.
    let s2b = &s.subagents[1].turns[1].input_delta;
    assert_eq!(s2b.len(), 2);
}

fn chat(id: &str, start: f64, end: f64, input: Value, output: &str) -> Value {
    let t = |s: f64| format!("2026-11-30T09:00:{:06.3}Z", s);
    json!({"span_id": id, "parent_span_id": null, "name": "chat m", "start_time": t(start),
           "end_time": t(end), "attributes": {
               "gen_ai.operation.name": "chat", "gen_ai.usage.input_tokens": 10,
               "gen_ai.usage.output_tokens": 2, "gen_ai.input.messages": input,
               "gen_ai.output.messages": [{"role": "assistant", "parts": [{"type": "text", "content": output}]}]}})
}

fn msg(role: &str, text: &str) -> Value {
    json!({"role": role, "parts": [{"type": "text", "content": text}]})
}

#[test]
fn otel_overlapping_calls_with_a_common_predecessor_are_parallel_branches() {
    // No agent spans: A, then B and C in flight together (both continue A's conversation),
    // then D reading both answers.
    let a_in = vec![msg("system", "sys"), msg("user", "go")];
    let mut b_in = a_in.clone();
    b_in.extend([msg("assistant", "a"), msg("user", "part b")]);
    let mut c_in = a_in.clone();
    c_in.extend([msg("assistant", "a"), msg("user", "part c")]);
    let mut d_in = b_in.clone();
    d_in.extend([
        msg("assistant", "b"),
        msg("assistant", "c"),
        msg("user", "merge"),
    ]);
    let doc = json!({"session_id": "par", "spans": [
        chat("a", 0.0, 1.0, Value::Array(a_in), "a"),
        chat("b", 1.5, 3.0, Value::Array(b_in), "b"),
        chat("c", 1.6, 4.0, Value::Array(c_in), "c"),
        chat("d", 4.5, 5.0, Value::Array(d_in), "d"),
    ]});
    let tmp = Tmp::new("otel-par");
    let p = tmp.write("par.json", doc.to_string());
    let (s, _) = one(ImportFormat::Otel, &p);
    assert_eq!(s.turns.len(), 3, "A, B, D");
    assert_eq!(s.subagents.len(), 1, "C runs beside B");
    let c = &s.subagents[0];
    assert_eq!(
        (c.after.as_str(), c.context),
        ("main:0", SubagentContext::Fork)
    );
    assert_eq!(c.turns[0].input_delta[0].content, "part c");
    assert_eq!(s.turns[2].after, [format!("{}:0", c.agent_id)]);
    // D's input drops C's answer (the join brings it).
    let d: Vec<&str> = s.turns[2]
        .input_delta
        .iter()
        .map(|m| m.content.as_str())
        .collect();
    assert_eq!(d, ["merge"]);
    close(s.turns[1].pre_gap_ms, 500.0, "B after A");
    close(c.turns[0].pre_gap_ms, 600.0, "C after A");
    close(s.turns[2].pre_gap_ms, 500.0, "D after the later of B and C");
    graph::resolve(&s).unwrap();
}

#[test]
fn otel_malformed_input_names_file_and_field() {
    let tmp = Tmp::new("otel-bad");
    let mut v = read_json(&graphs("otel/fork_join.json"));
    v["spans"][3]["start_time"] = json!("yesterday");
    let p = tmp.write("bad.json", v.to_string());
    let e = run_err(ImportFormat::Otel, &p);
    assert_eq!((e.file.as_path(), e.line), (p.as_path(), None));
    assert!(
        e.message
            .starts_with("\"spans\"[3].start_time: expected an ISO-8601 time"),
        "{e}"
    );
    let mut v = read_json(&graphs("otel/fork_join.json"));
    v["spans"][1]["attributes"]["gen_ai.usage.input_tokens"] = json!(-3);
    let p = tmp.write("tokens.json", v.to_string());
    let e = run_err(ImportFormat::Otel, &p);
    assert!(
        e.to_string().starts_with(&format!(
            "{}: \"spans\"[1].attributes.\"gen_ai.usage.input_tokens\": expected a non-negative integer",
            p.display()
        )),
        "{e}"
    );
    let p = tmp.write("otlp.json", r#"{"resourceSpans": []}"#);
    assert!(
        run_err(ImportFormat::Otel, &p)
            .message
            .contains("OTLP/JSON")
    );
    // One session per line: the line is named.
    let good = read_json(&graphs("otel/fork_join.json"));
    let p = tmp.write("rows.jsonl", format!("{good}\n{{\"trace_id\": \"x\"}}\n"));
    let e = run_err(ImportFormat::Otel, &p);
    assert_eq!(e.line, Some(2));
    assert_eq!(e.message, "\"spans\": missing");
}

// ---------------------------------------------------------------------------------------------
// tracelab

#[test]
fn tracelab_fork_join_is_the_expected_graph() {
    let (s, stats) = one(ImportFormat::Tracelab, &graphs("tracelab/fork_join.jsonl"));
    assert_eq!(s.session_id, "claude:5f0c2a8e-7d41-4b9e-a3c6-1e2f3a4b5c6d");
    // J's observable start is its last Agent result (13.6 s), 0.1 s after S3b's last output.
    check_fork_join(
        &s,
        "tracelab",
        ["agent-a1", "agent-a2", "agent-a3"],
        (100.0, 13600.0),
    );
    let cached: Vec<Option<u64>> = s.turns.iter().map(|t| t.cached_tokens).collect();
    assert_eq!(cached, [768, 1000, 1180, 1600, 1800].map(Some));
    // The system prompts are as long as the cache reads of the first rounds (768 main; 384
    // for the subagents, shared by all three, as S2a and S3a read it from the cache).
    assert_eq!(words(s.system_prompt.as_deref().unwrap()), 768);
    let sub = s.subagents[0].system_prompt.as_deref().unwrap();
    assert_eq!(words(sub), 384);
    assert!(
        s.subagents
            .iter()
            .all(|a| a.system_prompt.as_deref() == Some(sub))
    );
    let prompts = replayed_prompts(&s);
    assert_eq!(prompts[0], vec![1000, 1180, 1660, 1800, 2000]);
    assert_eq!(prompts[2], vec![720, 950]);
    assert!(s.turns[2].input_delta.is_empty());
    assert!(
        stats
            .notes
            .iter()
            .any(|n| n.starts_with("1 turn(s) recorded fewer")),
        "{:?}",
        stats.notes
    );
    assert_eq!(s.source.as_ref().unwrap().agent.as_deref(), Some("claude"));
}

fn row(session: &str, index: u64, events: Value, tools: Value) -> String {
    json!({"session_id": session, "round_index": index, "model": "m",
           "input_tokens_total": 100 * (index + 1), "prefix_tokens": 0,
           "output_tokens": 10, "timing_events": events, "tools": tools})
    .to_string()
}

#[test]
fn tracelab_parallel_tool_waits_are_the_longest_and_orphans_stay_sessions() {
    let t = |s: f64| format!("2026-11-30T09:00:{:06.3}Z", s);
    let tool = |id: &str, from: f64, to: f64| {
        json!({"tool_name": "Grep", "tool_call_id": id, "emitted_at": t(from),
               "result_at": t(to), "tool_wall_latency_ms": (to - from) * 1000.0})
    };
    let rows = [
        row(
            "s",
            0,
            json!([{"event_type": "user_message", "timestamp": t(0.0)},
                   {"event_type": "tool_call", "timestamp": t(1.0)}]),
            json!([tool("x", 1.0, 1.6), tool("y", 1.0, 1.4)]),
        ),
        // No timing events: the wait is the longer of the two parallel calls, not the sum.
        row("s", 1, json!([]), json!([])),
        row(
            "lost/subagents/agent-z",
            0,
            json!([{"event_type": "user_message", "timestamp": t(3.0)}]),
            json!([]),
        ),
    ];
    let tmp = Tmp::new("tl-par");
    let p = tmp.write("rows.jsonl", rows.join("\n"));
    let (s, stats) = run(ImportFormat::Tracelab, &p);
    assert_eq!(
        s.len(),
        2,
        "the subagent without its main session is a session of its own"
    );
    close(s[0].turns[1].pre_gap_ms, 600.0, "max(600, 400)");
    assert_eq!(s[0].turns[1].timestamp_ms, None);
    assert_eq!(s[1].session_id, "lost/subagents/agent-z");
    for note in ["1 round(s) had no usable timing", "1 subagent session(s)"] {
        assert!(
            stats.notes.iter().any(|n| n.starts_with(note)),
            "{note}: {:?}",
            stats.notes
        );
    }
}

#[test]
fn tracelab_malformed_rows_name_file_line_and_field() {
    let tmp = Tmp::new("tl-bad");
    let text = std::fs::read_to_string(graphs("tracelab/fork_join.jsonl")).unwrap();
    let mut lines: Vec<String> = text.lines().map(str::to_string).collect();
    let mut bad: Value = serde_json::from_str(&lines[1]).unwrap();
    bad["tools"][0]["emitted_at"] = json!("noon");
    lines[1] = bad.to_string();
    let mut missing: Value = serde_json::from_str(&lines[3]).unwrap();
    missing
        .as_object_mut()
        .unwrap()
        .remove("input_tokens_total");
    lines[3] = missing.to_string();
    let p = tmp.write("bad.jsonl", lines.join("\n"));
    let e = run_err(ImportFormat::Tracelab, &p);
    assert_eq!((e.file.as_path(), e.line), (p.as_path(), Some(2)));
    assert!(
        e.to_string().starts_with(&format!(
            "{}:2: \"tools\"[0].emitted_at: expected an ISO-8601 time",
            p.display()
        )),
        "{e}"
    );
    let opts = ImportOptions {
        skip_invalid: true,
        ..ImportOptions::default()
    };
    let (s, stats) = run_with(ImportFormat::Tracelab, &[p], &opts).unwrap();
    assert_eq!(stats.skipped, 2);
    assert!(
        stats
            .notes
            .iter()
            .any(|n| n.contains(":4: \"input_tokens_total\": missing")),
        "{:?}",
        stats.notes
    );
    assert_eq!(s.len(), 1);
    assert_eq!(
        s[0].turns.len(),
        3,
        "the main session without its two bad rounds"
    );
}

#[test]
fn graph_formats_are_listed() {
    for (f, name) in [
        (ImportFormat::CcTraces, "cc-traces"),
        (ImportFormat::Otel, "otel"),
        (ImportFormat::Tracelab, "tracelab"),
    ] {
        assert_eq!(f.name(), name);
        assert_eq!(name.parse::<ImportFormat>().unwrap(), f);
        assert!(ImportFormat::ALL.contains(&f));
    }
    assert_eq!(ImportFormat::ALL.len(), 8);
    // A directory input finds the format's files.
    let (s, _) = run(ImportFormat::CcTraces, &graphs("cc_traces"));
    assert_eq!(s.len(), 2);
}

#[test]
fn tracelab_reads_the_gzip_release_form() {
    use std::io::Write;
    let tmp = Tmp::new("tl-gz");
    let text = std::fs::read(graphs("tracelab/fork_join.jsonl")).unwrap();
    let mut enc = flate2::write::GzEncoder::new(Vec::new(), flate2::Compression::fast());
    enc.write_all(&text).unwrap();
    tmp.write("syfi_coding_trace.jsonl.gz", enc.finish().unwrap());
    // A directory finds `*.jsonl.gz` and reads it decompressed.
    let (s, _) = run(ImportFormat::Tracelab, tmp.0.path());
    assert_eq!(s.len(), 1);
    check_fork_join(
        &s[0],
        "tracelab",
        ["agent-a1", "agent-a2", "agent-a3"],
        (100.0, 13600.0),
    );
}
