//! The consumer on real captures of every endpoint (`fixtures/endpoint_streams`, provenance in
//! its README), compared with an independent Python reading of the same bytes
//! (`expected.json`, from `make_expected.py`).
#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::path::PathBuf;
use std::time::{Duration, Instant};

use serde_json::Value;

use super::*;

fn dir() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../../fixtures/endpoint_streams")
}

struct Capture {
    name: String,
    endpoint: Endpoint,
    /// The body as served (the file plus `append`).
    bytes: Vec<u8>,
    /// The file as stored.
    verbatim: Vec<u8>,
    exp: Value,
}

fn captures() -> Vec<Capture> {
    let expected: Value =
        serde_json::from_slice(&std::fs::read(dir().join("expected.json")).unwrap()).unwrap();
    let mut out = Vec::new();
    for (name, exp) in expected.as_object().unwrap() {
        let verbatim = std::fs::read(dir().join(name)).unwrap();
        let mut bytes = verbatim.clone();
        bytes.extend_from_slice(exp["append"].as_str().unwrap().as_bytes());
        out.push(Capture {
            name: name.clone(),
            endpoint: exp["endpoint"].as_str().unwrap().parse().unwrap(),
            bytes,
            verbatim,
            exp: exp.clone(),
        });
    }
    out
}

/// Splits a stream after every blank line (`\n\n`), as `make_expected.py` counts blocks.
fn blocks(bytes: &[u8]) -> Vec<&[u8]> {
    let mut out = Vec::new();
    let mut start = 0;
    let mut i = 0;
    while i + 1 < bytes.len() {
        if bytes[i] == b'\n' && bytes[i + 1] == b'\n' {
            out.push(&bytes[start..i + 2]);
            start = i + 2;
            i += 2;
        } else {
            i += 1;
        }
    }
    if start < bytes.len() {
        out.push(&bytes[start..]);
    }
    out
}

fn ms(n: u64) -> Duration {
    Duration::from_millis(n)
}

/// Feeds `pieces`, piece `k` arriving at `k + 1` ms; a stream must end done (its terminal
/// event seen) exactly when it is complete.
fn run(c: &Capture, pieces: &[&[u8]]) -> Result<TurnOutcome, Error> {
    let t0 = Instant::now();
    let streamed = c.exp["streamed"].as_bool().unwrap();
    let mut con = ChatStreamConsumer::with_endpoint(t0, streamed, c.endpoint);
    assert_eq!(con.endpoint(), c.endpoint);
    for (k, p) in pieces.iter().enumerate() {
        con.feed(p, t0 + ms(k as u64 + 1))?;
    }
    let whole = pieces.iter().map(|p| p.len()).sum::<usize>() == c.bytes.len();
    if streamed {
        assert_eq!(con.is_done(), whole, "{}", c.name);
    }
    con.finish(t0 + Duration::from_secs(1))
}

fn check(c: &Capture, out: &TurnOutcome, how: &str) {
    let (n, e) = (&c.name, &c.exp);
    let ctx = format!("{n} ({how})");
    assert_eq!(out.content, e["content"].as_str().unwrap(), "{ctx}");
    assert_eq!(out.reasoning, e["reasoning"].as_str().unwrap(), "{ctx}");
    assert_eq!(
        out.finish_reason.as_deref(),
        e["finish_reason"].as_str(),
        "{ctx}"
    );
    let u = out.usage.expect("usage");
    let eu = &e["usage"];
    assert_eq!(u.prompt_tokens, eu["prompt_tokens"].as_u64(), "{ctx}");
    assert_eq!(
        u.completion_tokens,
        eu["completion_tokens"].as_u64(),
        "{ctx}"
    );
    assert_eq!(u.total_tokens, eu["total_tokens"].as_u64(), "{ctx}");
    assert_eq!(u.cached_tokens, eu["cached_tokens"].as_u64(), "{ctx}");
    assert_eq!(u.reasoning_tokens, eu["reasoning_tokens"].as_u64(), "{ctx}");
    assert_eq!(
        out.chunk_offsets.len() as u64,
        e["output_chunks"].as_u64().unwrap(),
        "{ctx}"
    );
    assert_eq!(
        u64::from(out.reasoning_chunks),
        e["reasoning_chunks"].as_u64().unwrap(),
        "{ctx}"
    );
    assert_eq!(
        u64::from(out.answer_chunks),
        e["answer_chunks"].as_u64().unwrap(),
        "{ctx}"
    );
    assert_eq!(
        u64::from(out.events),
        e["events"].as_u64().unwrap(),
        "{ctx}"
    );
    assert_eq!(out.body_bytes, c.bytes.len() as u64, "{ctx}");
    assert_eq!((out.connect, out.tls), (None, None), "{ctx}");
}

#[test]
fn every_capture_reads_as_the_reference_does_however_it_is_cut() {
    let caps = captures();
    let count = |e: Endpoint| caps.iter().filter(|c| c.endpoint == e).count();
    assert_eq!(
        Endpoint::ALL.map(count),
        [2, 8, 6, 2],
        "chat, responses, messages, completions captures"
    );
    for c in &caps {
        if !c.exp["streamed"].as_bool().unwrap() {
            let (a, b) = c.bytes.split_at(c.bytes.len() / 2);
            let out = run(c, &[a, b]).unwrap();
            check(c, &out, "whole");
            // Non-streamed: first output and first answer are the whole response.
            assert_eq!(out.ttft, Some(out.e2e), "{}", c.name);
            assert_eq!(out.ttfa, Some(out.e2e), "{}", c.name);
            assert!(!out.streamed);
            continue;
        }
        // One block (event) per read: TTFT and TTFA are the arrivals of the blocks the
        // reference names.
        let per_block = blocks(&c.bytes);
        let out = run(c, &per_block).unwrap();
        check(c, &out, "a block per read");
        let at = |key: &str| c.exp[key].as_u64().map(|k| ms(k + 1));
        assert_eq!(out.ttft, at("first_output_block"), "{}", c.name);
        assert_eq!(out.ttfa, at("first_answer_block"), "{}", c.name);
        assert_eq!(out.ttft, out.chunk_offsets.first().copied(), "{}", c.name);
        for size in [c.bytes.len(), 7, 1] {
            let pieces: Vec<&[u8]> = c.bytes.chunks(size).collect();
            check(c, &run(c, &pieces).unwrap(), &format!("{size}-byte reads"));
        }
    }
}

#[test]
fn reasoning_captures_time_thinking_apart_from_the_answer() {
    for c in captures() {
        let Some(first_answer) = c.exp["first_answer_block"].as_u64() else {
            continue;
        };
        if c.exp["reasoning_chunks"].as_u64().unwrap() == 0 || !c.exp["streamed"].as_bool().unwrap()
        {
            continue;
        }
        let out = run(&c, &blocks(&c.bytes)).unwrap();
        let (ttft, ttfa) = (out.ttft.unwrap(), out.ttfa.unwrap());
        assert!(ttfa > ttft, "{}: thinking before the answer", c.name);
        assert_eq!(ttfa, ms(first_answer + 1), "{}", c.name);
        assert!(!out.reasoning.is_empty(), "{}", c.name);
    }
}

#[test]
fn the_captures_cover_the_cases_they_are_kept_for() {
    let text = |name: &str| String::from_utf8(std::fs::read(dir().join(name)).unwrap()).unwrap();
    // Responses through a proxy: no `event:` lines (the `type` decides), a comment, and a
    // `data: [DONE]` after the terminal event, which is counted and ignored.
    let or = text("responses/openrouter_gpt-oss-20b_reasoning_text_stream.sse");
    assert!(!or.contains("\nevent:") && or.starts_with(": "));
    assert!(or.ends_with("data: [DONE]\n\n"));
    // Anthropic pads data with spaces before the closing brace.
    assert!(text("messages/anthropic_claude-sonnet-4_thinking_stream.sse").contains("\"}     }"));
    // llama.cpp puts the usage on the finish chunk of a completion, not on its own chunk.
    let lc = text("completions/llamacpp_completions_stream_include_usage.sse");
    assert!(lc.contains("\"finish_reason\":\"length\"}],") && lc.contains("\"usage\":{"));
    // Tool calls only: output (answer) chunks but no text.
    let caps = captures();
    let fc = caps
        .iter()
        .find(|c| c.name == "responses/openai_gpt-5_reasoning_function_call_stream.sse")
        .unwrap();
    let out = run(fc, &[&fc.bytes]).unwrap();
    assert!(out.content.is_empty() && out.answer_chunks > 0);
    assert_eq!(out.usage.unwrap().reasoning_tokens, Some(448));
}

#[test]
fn sdk_fixtures_as_stored_lack_their_last_blank_line_and_read_as_incomplete() {
    let mut seen = 0;
    for c in captures().iter().filter(|c| c.bytes != c.verbatim) {
        seen += 1;
        assert_eq!(c.endpoint, Endpoint::Messages);
        let e = run(c, &[&c.verbatim]).unwrap_err();
        assert_eq!(e.kind(), ErrorKind::Incomplete, "{}", c.name);
        assert!(e.to_string().contains("before message_stop"), "{e}");
    }
    assert_eq!(seen, 2);
}
