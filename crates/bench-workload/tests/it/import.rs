//! Importer tests: every format against its real sample, plus the error paths.

use std::collections::{BTreeMap, HashSet};
use std::io::Read;
use std::path::{Path, PathBuf};

use bench_workload::format::TraceSession;
use bench_workload::import::{
    ImportError, ImportFormat, ImportOptions, ImportStats, import, mooncake_block_text,
};
use serde_json::Value;

use crate::fixtures;

fn traces() -> PathBuf {
    fixtures().join("traces")
}

fn run(
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

fn run_ok(format: ImportFormat, inputs: &[PathBuf]) -> (Vec<TraceSession>, ImportStats) {
    run(format, inputs, &ImportOptions::default()).unwrap()
}

fn run_err(format: ImportFormat, inputs: &[PathBuf], opts: &ImportOptions) -> ImportError {
    match run(format, inputs, opts) {
        Ok((s, _)) => panic!("expected an error, got {} sessions", s.len()),
        Err(e) => e,
    }
}

/// Checks what every import must guarantee.
fn common_checks(sessions: &[TraceSession], stats: &ImportStats) {
    assert_eq!(stats.sessions as usize, sessions.len());
    assert_eq!(
        stats.turns as usize,
        sessions.iter().map(|s| s.turns.len()).sum::<usize>()
    );
    let ids: HashSet<&str> = sessions.iter().map(|s| s.session_id.as_str()).collect();
    assert_eq!(ids.len(), sessions.len(), "session ids must be unique");
    for s in sessions {
        s.check().unwrap();
        assert!(!s.turns.is_empty(), "{}: no turns", s.session_id);
        let mut last_ts = f64::NEG_INFINITY;
        for t in &s.turns {
            if let Some(g) = t.pre_gap_ms {
                assert!(g >= 0.0 && g.is_finite(), "{}: gap {g}", s.session_id);
            }
            if let Some(ts) = t.timestamp_ms {
                assert!(ts >= last_ts, "{}: timestamps go back", s.session_id);
                last_ts = ts;
            }
        }
    }
}

/// A temporary directory (`tempfile`), removed on drop.
struct Tmp(tempfile::TempDir);

impl Tmp {
    fn new(tag: &str) -> Self {
        Tmp(tempfile::Builder::new()
            .prefix(&format!("bench-import-{tag}-"))
            .tempdir()
            .unwrap())
    }

    fn path(&self) -> &Path {
        self.0.path()
    }

    fn write(&self, name: &str, bytes: impl AsRef<[u8]>) -> PathBuf {
        let p = self.path().join(name);
        std::fs::write(&p, bytes).unwrap();
        p
    }
}

fn read_json_lines(path: &Path) -> Vec<Value> {
    std::fs::read_to_string(path)
        .unwrap()
        .lines()
        .filter(|l| !l.trim().is_empty())
        .map(|l| serde_json::from_str(l).unwrap())
        .collect()
}

fn text(v: &Value) -> String {
    v.as_str().unwrap().to_string()
}

// ---------------------------------------------------------------------------------------------
// Format names

#[test]
fn format_names_round_trip() {
    for f in ImportFormat::ALL {
        assert_eq!(f.name().parse::<ImportFormat>().unwrap(), f);
        assert_eq!(f.to_string(), f.name());
        assert!(!f.description().is_empty());
    }
    let err = "csv".parse::<ImportFormat>().unwrap_err().to_string();
    for f in ImportFormat::ALL {
        assert!(err.contains(f.name()), "{err}");
    }
    assert!(err.contains("csv"), "{err}");
}

#[test]
fn error_display_has_file_and_line() {
    let e = ImportError::new("a/b.jsonl", Some(3), "\"x\": missing");
    assert_eq!(e.to_string(), "a/b.jsonl:3: \"x\": missing");
    let e = ImportError::new("a/b.json", None, "bad");
    assert_eq!(e.to_string(), "a/b.json: bad");
}

// ---------------------------------------------------------------------------------------------
// lmcache

#[test]
fn lmcache_sample() {
    let dir = traces().join("lmcache-agent-trace/miniswe");
    let (sessions, stats) = run_ok(ImportFormat::Lmcache, std::slice::from_ref(&dir));
    common_checks(&sessions, &stats);

    // Independent expectation: calls grouped by session_id, sorted by timestamp.
    let mut files: Vec<PathBuf> = std::fs::read_dir(&dir)
        .unwrap()
        .map(|e| e.unwrap().path())
        .filter(|p| p.extension().is_some_and(|e| e == "jsonl"))
        .collect();
    files.sort();
    let mut by_session: BTreeMap<String, Vec<Value>> = BTreeMap::new();
    let mut lines = 0;
    for f in &files {
        for v in read_json_lines(f) {
            lines += 1;
            by_session
                .entry(text(&v["session_id"]))
                .or_default()
                .push(v);
        }
    }
    assert_eq!(sessions.len(), by_session.len());
    assert_eq!(stats.turns, lines);
    let t0 = by_session
        .values()
        .flatten()
        .map(|v| v["timestamp"].as_i64().unwrap())
        .min()
        .unwrap();

    let mut extensions = 0;
    for s in &sessions {
        assert_eq!(
            s.source.as_ref().unwrap().dataset.as_deref(),
            Some("lmcache")
        );
        let mut calls = by_session[&s.session_id].clone();
        calls.sort_by_key(|v| v["timestamp"].as_i64().unwrap());
        assert_eq!(s.turns.len(), calls.len());
        for (k, (t, c)) in s.turns.iter().zip(&calls).enumerate() {
            assert_eq!(t.index as usize, k);
            assert_eq!(t.input_delta.len(), 1);
            assert_eq!(t.input_delta[0].role, "user");
            assert!(t.input_tokens.is_none() && t.output_tokens.is_none());
            let delta = &t.input_delta[0].content;
            let prompt = text(&c["input"]);
            assert_eq!(t.assistant_text, text(&c["output"]));
            let ts = c["timestamp"].as_i64().unwrap();
            assert_eq!(t.timestamp_ms, Some((ts - t0) as f64 / 1000.0));
            if k == 0 {
                assert_eq!(delta, &prompt);
                assert_eq!(t.pre_gap_ms, Some(0.0));
                continue;
            }
            let prev = &calls[k - 1];
            let (pp, po) = (text(&prev["input"]), text(&prev["output"]));
            let prev_ts = prev["timestamp"].as_i64().unwrap();
            assert_eq!(t.pre_gap_ms, Some((ts - prev_ts) as f64 / 1000.0));
            if prompt.starts_with(&format!("{pp}{po}")) {
                assert_eq!(format!("{pp}{po}{delta}"), prompt);
                extensions += 1;
            } else if prompt.starts_with(&pp) {
                // The sample's prompts carry the observations but not the previous output.
                assert_eq!(format!("{pp}{delta}"), prompt);
                extensions += 1;
            } else {
                assert_eq!(delta, &prompt);
            }
        }
    }
    // Every later call of the sample continues the previous prompt.
    assert_eq!(extensions, lines - sessions.len() as u64);
    let notes = stats.notes.join("\n");
    assert!(notes.contains("out of timestamp order"), "{notes}");
    assert!(
        notes.contains("did not contain the previous output"),
        "{notes}"
    );
}

fn lmcache_line(ts: i64, input: &str, output: &str, sid: &str) -> String {
    serde_json::json!({"timestamp": ts, "input": input, "output": output, "session_id": sid})
        .to_string()
}

#[test]
fn lmcache_extension_restart_and_interleaving() {
    let tmp = Tmp::new("lmcache");
    let lines = [
        lmcache_line(1_000_000, "sys: hi", " hello", "a"),
        lmcache_line(1_500_000, "other", "x", "b"),
        // Full extension of prompt + output, with a multibyte char.
        lmcache_line(3_000_000, "sys: hi hello é next", " ok", "a"),
        // History rewritten: not an extension.
        lmcache_line(7_000_000, "sys: summary", " done", "a"),
    ];
    let p = tmp.write("t.jsonl", lines.join("\n") + "\n");
    let (sessions, stats) = run_ok(ImportFormat::Lmcache, &[p]);
    common_checks(&sessions, &stats);
    assert_eq!(sessions.len(), 2);
    let a = &sessions[0];
    assert_eq!(a.session_id, "a");
    assert_eq!(a.turns[1].input_delta[0].content, " é next");
    assert_eq!(a.turns[1].pre_gap_ms, Some(2000.0));
    assert_eq!(a.turns[2].input_delta[0].content, "sys: summary");
    assert_eq!(a.turns[2].timestamp_ms, Some(6000.0));
    assert_eq!(sessions[1].turns[0].timestamp_ms, Some(500.0));
    assert!(
        stats
            .notes
            .iter()
            .any(|n| n.starts_with("1 prompt(s) were not an extension")),
        "{:?}",
        stats.notes
    );
}

// ---------------------------------------------------------------------------------------------
// mooncake

#[test]
fn mooncake_sample() {
    let path = traces().join("mooncake/conversation_trace.head1000.jsonl");
    let (sessions, stats) = run_ok(ImportFormat::Mooncake, std::slice::from_ref(&path));
    common_checks(&sessions, &stats);
    let raw = read_json_lines(&path);
    assert_eq!(sessions.len(), raw.len());
    for (i, (s, r)) in sessions.iter().zip(&raw).enumerate() {
        assert_eq!(s.session_id, format!("mooncake-{}", i + 1));
        assert_eq!(s.turns.len(), 1);
        let t = &s.turns[0];
        assert_eq!(t.input_tokens, r["input_length"].as_u64());
        assert_eq!(t.output_tokens, r["output_length"].as_u64());
        assert_eq!(
            t.timestamp_ms,
            Some(r["timestamp"].as_u64().unwrap() as f64)
        );
        // One word per token.
        let words = t.input_delta[0]
            .content
            .split(' ')
            .filter(|w| !w.is_empty())
            .count();
        assert_eq!(words as u64, r["input_length"].as_u64().unwrap());
    }
    assert!(stats.notes.is_empty(), "{:?}", stats.notes);

    // Requests sharing leading hash ids share byte-identical prefixes of that many blocks.
    let ids = |r: &Value| -> Vec<u64> {
        r["hash_ids"]
            .as_array()
            .unwrap()
            .iter()
            .map(|v| v.as_u64().unwrap())
            .collect()
    };
    let mut checked = 0;
    'outer: for i in 0..raw.len() {
        for j in (i + 1)..raw.len() {
            if checked == 100 {
                break 'outer;
            }
            let (a, b) = (ids(&raw[i]), ids(&raw[j]));
            let shared = a.iter().zip(&b).take_while(|(x, y)| x == y).count();
            // Only blocks that are full in both requests.
            let full = |r: &Value, n: usize| r["input_length"].as_u64().unwrap() / 512 >= n as u64;
            if shared == 0 || !full(&raw[i], shared) || !full(&raw[j], shared) {
                continue;
            }
            let (ta, tb) = (
                &sessions[i].turns[0].input_delta[0].content,
                &sessions[j].turns[0].input_delta[0].content,
            );
            let prefix_words = shared * 512;
            let cut = |t: &str| -> usize {
                t.match_indices(' ')
                    .nth(prefix_words)
                    .map_or(t.len(), |(k, _)| k)
            };
            assert_eq!(&ta[..cut(ta)], &tb[..cut(tb)], "requests {i} and {j}");
            if a.get(shared).is_some() && b.get(shared).is_some() {
                assert_ne!(ta[cut(ta)..].get(..200), tb[cut(tb)..].get(..200));
            }
            checked += 1;
        }
    }
    assert_eq!(checked, 100, "only {checked} pairs checked");
}

#[test]
fn mooncake_partial_and_overlong_requests() {
    let tmp = Tmp::new("mooncake");
    let p = tmp.write(
        "m.jsonl",
        "{\"timestamp\": 5, \"input_length\": 10, \"output_length\": 3, \"hash_ids\": [7, 8]}\n\
         {\"timestamp\": 6, \"input_length\": 4, \"output_length\": 3, \"hash_ids\": [7, 8]}\n\
         {\"timestamp\": 9, \"input_length\": 20, \"output_length\": 1, \"hash_ids\": [7]}\n",
    );
    let opts = ImportOptions {
        mooncake_block_tokens: 8,
        ..ImportOptions::default()
    };
    let (sessions, stats) = run(ImportFormat::Mooncake, &[p], &opts).unwrap();
    common_checks(&sessions, &stats);
    let texts: Vec<&str> = sessions
        .iter()
        .map(|s| s.turns[0].input_delta[0].content.as_str())
        .collect();
    assert_eq!(
        texts[0],
        mooncake_block_text(7, 8) + &mooncake_block_text(8, 2)
    );
    assert_eq!(texts[1], mooncake_block_text(7, 4));
    assert!(texts[2].starts_with(&mooncake_block_text(7, 8)));
    assert_eq!(texts[2].split(' ').count() - 1, 20);
    assert_eq!(stats.notes.len(), 2, "{:?}", stats.notes);
}

fn qwen3() -> tokenizers::Tokenizer {
    let gz = std::fs::read(fixtures().join("tokenizer/qwen3/tokenizer.json.gz")).unwrap();
    let mut json = Vec::new();
    flate2::read::GzDecoder::new(&gz[..])
        .read_to_end(&mut json)
        .unwrap();
    tokenizers::Tokenizer::from_bytes(&json).unwrap()
}

fn count_tokens(tok: &tokenizers::Tokenizer, text: &str) -> usize {
    tok.encode(text, false).unwrap().get_ids().len()
}

#[test]
fn mooncake_blocks_are_exact_in_qwen3_tokens() {
    let tok = qwen3();
    for id in [0u64, 1, 2, 12345, u64::MAX] {
        assert_eq!(
            count_tokens(&tok, &mooncake_block_text(id, 512)),
            512,
            "block {id}"
        );
    }
    // Long enough to use every word many times; words never merge with their neighbours.
    assert_eq!(count_tokens(&tok, &mooncake_block_text(99, 8192)), 8192);
    let joined =
        mooncake_block_text(3, 512) + &mooncake_block_text(4, 512) + &mooncake_block_text(5, 100);
    assert_eq!(count_tokens(&tok, &joined), 1124);
    // Pure function, and a cut block is a prefix of the full block.
    assert_eq!(mooncake_block_text(3, 512), mooncake_block_text(3, 512));
    assert!(mooncake_block_text(3, 512).starts_with(&mooncake_block_text(3, 100)));
    assert_ne!(mooncake_block_text(3, 512), mooncake_block_text(4, 512));

    // Real requests encode to their recorded input_length.
    let path = traces().join("mooncake/synthetic_trace.head300.jsonl");
    let (sessions, _) = run_ok(ImportFormat::Mooncake, &[path]);
    for s in sessions.iter().take(5) {
        let t = &s.turns[0];
        let n = count_tokens(&tok, &t.input_delta[0].content);
        assert_eq!(n as u64, t.input_tokens.unwrap(), "{}", s.session_id);
    }
}

// ---------------------------------------------------------------------------------------------
// sharegpt

fn sharegpt_role(from: &str) -> &str {
    match from {
        "human" => "user",
        "gpt" => "assistant",
        other => other,
    }
}

#[test]
fn sharegpt_sample() {
    let path = traces().join("sharegpt/fastchat_dummy_conversation.json");
    let (sessions, stats) = run_ok(ImportFormat::Sharegpt, std::slice::from_ref(&path));
    common_checks(&sessions, &stats);
    let raw: Vec<Value> = serde_json::from_str(&std::fs::read_to_string(&path).unwrap()).unwrap();
    let answered: Vec<&Value> = raw
        .iter()
        .filter(|c| {
            c["conversations"]
                .as_array()
                .unwrap()
                .iter()
                .any(|m| m["from"] == "gpt")
        })
        .collect();
    assert_eq!(sessions.len(), answered.len());
    let gpt_messages = raw
        .iter()
        .flat_map(|c| c["conversations"].as_array().unwrap())
        .filter(|m| m["from"] == "gpt")
        .count();
    assert_eq!(stats.turns as usize, gpt_messages);
    for (s, c) in sessions.iter().zip(&answered) {
        assert_eq!(s.session_id, text(&c["id"]));
        assert_eq!(
            s.source.as_ref().unwrap().dataset.as_deref(),
            Some("sharegpt")
        );
        // Deltas + answers reproduce the conversation (it ends with an answer in the sample).
        let mut rebuilt = Vec::new();
        for t in &s.turns {
            for m in &t.input_delta {
                rebuilt.push((m.role.clone(), m.content.clone()));
            }
            rebuilt.push(("assistant".to_string(), t.assistant_text.clone()));
        }
        let original: Vec<(String, String)> = c["conversations"]
            .as_array()
            .unwrap()
            .iter()
            .map(|m| {
                (
                    sharegpt_role(m["from"].as_str().unwrap()).to_string(),
                    text(&m["value"]),
                )
            })
            .collect();
        assert_eq!(rebuilt, original);
    }
}

#[test]
fn sharegpt_roles_system_trailing_and_unanswered() {
    let tmp = Tmp::new("sharegpt");
    let p = tmp.write(
        "c.jsonl",
        r#"{"id": "a", "conversations": [{"from": "system", "value": "be nice"}, {"from": "human", "value": "hi"}, {"from": "Tool", "value": "t"}, {"from": "chatgpt", "value": "hello"}, {"from": "human", "value": "unanswered"}]}
{"id": "b", "conversations": [{"from": "human", "value": "no answer"}]}
{"conversations": [{"from": "user", "value": "q"}, {"from": "bard", "value": "r"}]}
"#,
    );
    let (sessions, stats) = run_ok(ImportFormat::Sharegpt, &[p]);
    common_checks(&sessions, &stats);
    assert_eq!(sessions.len(), 2);
    let a = &sessions[0];
    assert_eq!(a.system_prompt.as_deref(), Some("be nice"));
    assert_eq!(a.turns.len(), 1);
    let roles: Vec<&str> = a.turns[0]
        .input_delta
        .iter()
        .map(|m| m.role.as_str())
        .collect();
    assert_eq!(roles, ["user", "tool"]);
    assert_eq!(sessions[1].session_id, "c-2");
    let notes = stats.notes.join("\n");
    assert!(
        notes.contains("1 conversation(s) had no assistant answer"),
        "{notes}"
    );
    assert!(
        notes.contains("1 conversation(s) ended with message(s)"),
        "{notes}"
    );
}

#[test]
fn sharegpt_directory_and_duplicate_ids() {
    let dir = traces().join("sharegpt");
    let file = dir.join("fastchat_dummy_conversation.json");
    let (sessions, stats) = run_ok(ImportFormat::Sharegpt, &[dir, file]);
    common_checks(&sessions, &stats);
    assert_eq!(sessions.len(), 1000);
    assert!(sessions.iter().any(|s| s.session_id == "identity_0#2"));
    assert!(
        stats
            .notes
            .iter()
            .any(|n| n.contains("duplicate session id"))
    );
}

#[test]
fn sharegpt_bad_field_names_path() {
    let tmp = Tmp::new("sharegpt-bad");
    let p = tmp.write(
        "c.json",
        r#"[{"id": "a", "conversations": [{"from": "human", "value": "hi"}, {"from": "gpt", "value": 3}]}]"#,
    );
    let e = run_err(
        ImportFormat::Sharegpt,
        std::slice::from_ref(&p),
        &ImportOptions::default(),
    );
    let msg = e.to_string();
    assert!(msg.contains("[0]") && msg.contains("[1].value"), "{msg}");
    assert!(msg.contains("expected a string"), "{msg}");

    // Invalid JSON in a whole-file format names the line.
    let p = tmp.write("d.json", "[\n{\"id\": 1,\n \"conversations\": [}\n]");
    let e = run_err(ImportFormat::Sharegpt, &[p], &ImportOptions::default());
    assert_eq!(e.line, Some(3), "{e}");
}

// ---------------------------------------------------------------------------------------------
// openai-messages

type Msg = (String, String);

fn rebuild(s: &TraceSession) -> Vec<Msg> {
    let mut out = Vec::new();
    if let Some(sp) = &s.system_prompt {
        out.push(("system".to_string(), sp.clone()));
    }
    for t in &s.turns {
        for m in &t.input_delta {
            out.push((m.role.clone(), m.content.clone()));
        }
        out.push(("assistant".to_string(), t.assistant_text.clone()));
    }
    out
}

/// The messages up to the last assistant message.
fn answered_prefix(msgs: &[Value]) -> Vec<Msg> {
    let last = msgs.iter().rposition(|m| m["role"] == "assistant").unwrap();
    msgs[..=last]
        .iter()
        .map(|m| (text(&m["role"]), text(&m["content"])))
        .collect()
}

#[test]
fn openai_messages_sample() {
    let path = traces().join("mini-swe-agent/local.traj.json");
    let (sessions, stats) = run_ok(ImportFormat::OpenaiMessages, std::slice::from_ref(&path));
    common_checks(&sessions, &stats);
    let raw: Vec<Value> = serde_json::from_str(&std::fs::read_to_string(&path).unwrap()).unwrap();
    assert_eq!(sessions.len(), 1);
    let s = &sessions[0];
    assert_eq!(s.session_id, "local.traj-0");
    let assistants = raw.iter().filter(|m| m["role"] == "assistant").count();
    assert_eq!(s.turns.len(), assistants);
    assert_eq!(s.system_prompt.as_deref(), raw[0]["content"].as_str());
    assert_eq!(rebuild(s), answered_prefix(&raw));
    // The sample ends with an (empty) user message after the last answer.
    assert!(
        stats
            .notes
            .iter()
            .any(|n| n.contains("trailing messages were dropped"))
    );
}

#[test]
fn openai_messages_forms_parts_and_tool_calls() {
    let tmp = Tmp::new("openai");
    let many = tmp.write(
        "many.json",
        r#"[[{"role": "user", "content": "a"}, {"role": "assistant", "content": "b"}],
            [{"role": "user", "content": [{"type": "text", "text": "x"}, {"type": "image_url", "image_url": {"url": "u"}}, {"type": "text", "text": "y"}]},
             {"role": "assistant", "content": null, "tool_calls": [{"id": "c1", "type": "function", "function": {"name": "ls", "arguments": "{}"}}]},
             {"role": "tool", "content": "out", "tool_call_id": "c1"},
             {"role": "assistant", "content": "done"}]]"#,
    );
    let lines = tmp.write(
        "lines.jsonl",
        "[{\"role\": \"system\", \"content\": \"s\"}, {\"role\": \"user\", \"content\": \"q\"}, {\"role\": \"assistant\", \"content\": \"r\"}]\n\
         {\"id\": \"named\", \"tools\": [{\"type\": \"function\", \"function\": {\"name\": \"ls\"}}], \"messages\": [{\"role\": \"user\", \"content\": \"q2\"}, {\"role\": \"assistant\", \"content\": \"r2\"}]}\n",
    );
    let (sessions, stats) = run_ok(ImportFormat::OpenaiMessages, &[many, lines]);
    common_checks(&sessions, &stats);
    let ids: Vec<&str> = sessions.iter().map(|s| s.session_id.as_str()).collect();
    assert_eq!(ids, ["many-0", "many-1", "lines-0", "named"]);
    let s = &sessions[1];
    assert_eq!(s.turns[0].input_delta[0].content, "xy");
    assert_eq!(s.turns[0].assistant_text, "");
    let calls = s.turns[0].tool_calls.as_ref().unwrap();
    assert_eq!(calls[0]["function"]["name"], "ls");
    assert_eq!(s.turns[1].input_delta[0].role, "tool");
    // Kept for --tool-messages faithful: the result's call id and the session's tools.
    assert_eq!(
        s.turns[1].input_delta[0].tool_call_id.as_deref(),
        Some("c1")
    );
    assert_eq!(
        sessions[3].tools.as_ref().unwrap()[0]["function"]["name"],
        "ls"
    );
    assert_eq!(sessions[1].tools, None);
    assert_eq!(s.turns[1].assistant_text, "done");
    assert_eq!(sessions[2].system_prompt.as_deref(), Some("s"));
    assert!(
        stats
            .notes
            .iter()
            .any(|n| n.starts_with("1 non-text content part"))
    );
}

// ---------------------------------------------------------------------------------------------
// swe-agent

#[test]
fn swe_agent_sample() {
    let path = traces().join("swe-agent/swe-agent__test-repo-i1.traj");
    let (sessions, stats) = run_ok(ImportFormat::SweAgent, &[traces().join("swe-agent")]);
    common_checks(&sessions, &stats);
    let raw: Value = serde_json::from_str(&std::fs::read_to_string(&path).unwrap()).unwrap();
    let history = raw["history"].as_array().unwrap();
    assert_eq!(sessions.len(), 1);
    let s = &sessions[0];
    assert_eq!(s.session_id, "swe-agent__test-repo-i1");
    let src = s.source.as_ref().unwrap();
    assert_eq!(src.agent.as_deref(), Some("swe-agent"));
    assert_eq!(src.model, None, "the sample names no model");
    let assistants = history.iter().filter(|m| m["role"] == "assistant").count();
    assert_eq!(s.turns.len(), assistants);
    assert_eq!(
        s.turns.len() as u64,
        raw["info"]["model_stats"]["api_calls"].as_u64().unwrap()
    );
    assert!(
        s.turns
            .iter()
            .all(|t| t.input_tokens.is_none() && t.output_tokens.is_none())
    );
    assert_eq!(s.system_prompt.as_deref(), history[0]["content"].as_str());
    assert_eq!(rebuild(s), answered_prefix(history));
}

#[test]
fn swe_agent_other_agents_and_model() {
    let tmp = Tmp::new("swe");
    let p = tmp.write(
        "x.traj",
        r#"{"replay_config": "{\"agent\": {\"model\": {\"name\": \"gpt-4o\"}}}",
            "history": [{"role": "system", "content": "sys", "agent": "main"},
                        {"role": "user", "content": "task", "agent": "main"},
                        {"role": "user", "content": "sub", "agent": "helper"},
                        {"role": "assistant", "content": "sub answer", "agent": "helper"},
                        {"role": "assistant", "content": [{"type": "text", "text": "act"}], "agent": "main"}]}"#,
    );
    let (sessions, stats) = run_ok(ImportFormat::SweAgent, &[p]);
    common_checks(&sessions, &stats);
    let s = &sessions[0];
    assert_eq!(s.source.as_ref().unwrap().model.as_deref(), Some("gpt-4o"));
    assert_eq!(s.turns.len(), 1);
    assert_eq!(s.turns[0].assistant_text, "act");
    assert_eq!(s.turns[0].input_delta[0].content, "task");
}

// ---------------------------------------------------------------------------------------------
// Errors and options

#[test]
fn empty_input_is_an_error() {
    let tmp = Tmp::new("empty");
    for (format, name) in [
        (ImportFormat::Lmcache, "e.jsonl"),
        (ImportFormat::Mooncake, "e.jsonl"),
        (ImportFormat::Sharegpt, "e.json"),
        (ImportFormat::OpenaiMessages, "e.jsonl"),
        (ImportFormat::SweAgent, "e.traj"),
    ] {
        let p = tmp.write(name, "\n");
        let e = run_err(format, &[p], &ImportOptions::default());
        assert!(e.to_string().contains("no sessions"), "{format}: {e}");
    }
    // A directory without matching files.
    let sub = tmp.path().join("sub");
    std::fs::create_dir_all(&sub).unwrap();
    let e = run_err(ImportFormat::SweAgent, &[sub], &ImportOptions::default());
    assert!(e.to_string().contains("no swe-agent files"), "{e}");
}

fn mooncake_line(ts: &str) -> String {
    format!("{{\"timestamp\": {ts}, \"input_length\": 3, \"output_length\": 1, \"hash_ids\": [1]}}")
}

#[test]
fn malformed_lines_name_file_line_and_field() {
    let tmp = Tmp::new("malformed");
    let good = mooncake_line("1");
    let p = tmp.write("m.jsonl", format!("{good}\n{{\"timestamp\": 2,\n{good}\n"));
    let e = run_err(
        ImportFormat::Mooncake,
        std::slice::from_ref(&p),
        &ImportOptions::default(),
    );
    assert_eq!(e.file, p);
    assert_eq!(e.line, Some(2));
    assert!(
        e.to_string()
            .starts_with(&format!("{}:2: invalid JSON", p.display())),
        "{e}"
    );

    let p = tmp.write("t.jsonl", format!("{good}\n\n{}\n", mooncake_line("\"x\"")));
    let e = run_err(
        ImportFormat::Mooncake,
        std::slice::from_ref(&p),
        &ImportOptions::default(),
    );
    assert_eq!(e.line, Some(3));
    assert!(e.message.starts_with("\"timestamp\": expected"), "{e}");

    let l = lmcache_line(1, "a", "b", "s").replace("\"timestamp\":1", "\"timestamp\":\"x\"");
    let p = tmp.write("l.jsonl", format!("{l}\n"));
    let e = run_err(ImportFormat::Lmcache, &[p], &ImportOptions::default());
    assert_eq!(e.line, Some(1));
    assert!(
        e.message.starts_with("\"timestamp\": expected an integer"),
        "{e}"
    );

    let l = lmcache_line(1, "a", "b", "s").replace(",\"session_id\":\"s\"", "");
    let p = tmp.write("n.jsonl", format!("{l}\n"));
    let e = run_err(ImportFormat::Lmcache, &[p], &ImportOptions::default());
    assert!(e.message.contains("\"session_id\": missing"), "{e}");
}

#[test]
fn invalid_utf8_names_the_line() {
    let tmp = Tmp::new("utf8");
    let mut bytes = format!("{}\n", mooncake_line("1")).into_bytes();
    bytes.extend_from_slice(b"{\"timestamp\": 2, \"x\": \"\xff\"}\n");
    let p = tmp.write("u.jsonl", &bytes);
    let e = run_err(ImportFormat::Mooncake, &[p], &ImportOptions::default());
    assert_eq!(e.line, Some(2));
    assert!(e.message.contains("invalid UTF-8"), "{e}");

    // Whole-file formats too.
    let p = tmp.write("u.json", b"[\n{\"id\": \"\xfe\"}]");
    let e = run_err(ImportFormat::Sharegpt, &[p], &ImportOptions::default());
    assert_eq!(e.line, Some(2));
    assert!(e.message.contains("invalid UTF-8"), "{e}");
}

#[test]
fn skip_invalid_counts_and_continues() {
    let tmp = Tmp::new("skip");
    let mut bytes = Vec::new();
    bytes.extend_from_slice(format!("{}\n", mooncake_line("1")).as_bytes());
    bytes.extend_from_slice(b"not json\n");
    bytes.extend_from_slice(format!("{}\n", mooncake_line("\"x\"")).as_bytes());
    bytes.extend_from_slice(b"{\"bad\": \"\xff\"}\n");
    bytes.extend_from_slice(format!("{}\n", mooncake_line("4")).as_bytes());
    let p = tmp.write("s.jsonl", &bytes);
    let opts = ImportOptions {
        skip_invalid: true,
        ..ImportOptions::default()
    };
    let (sessions, stats) = run(ImportFormat::Mooncake, std::slice::from_ref(&p), &opts).unwrap();
    common_checks(&sessions, &stats);
    assert_eq!(sessions.len(), 2);
    assert_eq!(stats.skipped, 3);
    let ids: Vec<&str> = sessions.iter().map(|s| s.session_id.as_str()).collect();
    assert_eq!(ids, ["mooncake-1", "mooncake-5"]);
    // Without the option, the first bad line stops the import.
    let e = run_err(ImportFormat::Mooncake, &[p], &ImportOptions::default());
    assert_eq!(e.line, Some(2));

    // Whole-file formats skip records.
    let p = tmp.write(
        "c.json",
        r#"[{"id": "a", "conversations": 3}, {"id": "b", "conversations": [{"from": "human", "value": "q"}, {"from": "gpt", "value": "a"}]}]"#,
    );
    let (sessions, stats) = run(ImportFormat::Sharegpt, &[p], &opts).unwrap();
    assert_eq!(sessions.len(), 1);
    assert_eq!(stats.skipped, 1);
}

#[test]
fn sink_errors_stop_the_import() {
    let path = traces().join("mooncake/synthetic_trace.head300.jsonl");
    let mut n = 0;
    let r = import(
        ImportFormat::Mooncake,
        &[path],
        &ImportOptions::default(),
        &mut |_| {
            n += 1;
            if n == 3 {
                Err(ImportError::new("out.jsonl", None, "disk full"))
            } else {
                Ok(())
            }
        },
    );
    assert_eq!(r.unwrap_err().to_string(), "out.jsonl: disk full");
    assert_eq!(n, 3);
}

#[test]
fn zstd_inputs_are_read_transparently() {
    let tmp = Tmp::new("zst");
    let src = traces().join("lmcache-agent-trace/miniswe/189f0222310bd8eee310f204e91b9c84.jsonl");
    let plain = std::fs::read(&src).unwrap();
    let zst = tmp.write("trace.jsonl.zst", zstd::encode_all(&plain[..], 3).unwrap());
    let (a, _) = run_ok(ImportFormat::Lmcache, &[src]);
    let (b, _) = run_ok(ImportFormat::Lmcache, &[zst]);
    assert_eq!(a, b);
    // Found in a directory too, and whole-file formats decompress as well.
    let traj = std::fs::read(traces().join("swe-agent/swe-agent__test-repo-i1.traj")).unwrap();
    tmp.write("t.traj.zst", zstd::encode_all(&traj[..], 3).unwrap());
    let (s, _) = run_ok(ImportFormat::SweAgent, &[tmp.path().to_path_buf()]);
    assert_eq!(s[0].session_id, "t");
    let (s, _) = run_ok(ImportFormat::Lmcache, &[tmp.path().to_path_buf()]);
    assert_eq!(s.len(), 1);
}
