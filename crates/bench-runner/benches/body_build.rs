//! `body_build`: the replay engine's per-turn request-body work on large contexts, done exactly
//! as `play_session` does it (the conversation is one growing `String` of comma-separated message
//! objects, each appended from its precomputed JSON with `write_json`; the body is
//! `RunConfig::body` over it). Throughput is bytes of JSON produced.
//!
//! Cases (synthetic plans, `chars/4` token counter):
//! - `ctx32k`: 20 turns of +1,300 user / 150 assistant words, prompts growing to ~32K tokens;
//! - `sys8k_ctx32k`: the same turns with an 8K-token shared system prompt, 15 turns (~32K).
//!
//! Benchmarks:
//! - `append_turn/<case>`: the last turn's `input_delta` + its assistant answer appended to the
//!   conversation so far (whose capacity is what the engine's string has at that point);
//! - `body/<case>`: `RunConfig::body` for the last turn's conversation;
//! - `session/<case>`: a whole session's client work (system prompt, every append, every body),
//!   bytes = Σ body bytes sent.
#![allow(missing_docs, clippy::unwrap_used)]

use std::hint::black_box;
use std::time::Duration;

use bench_runner::{Conversation, RunConfig};
use bench_workload::plan::{
    DatasetSpec, PlanConfig, PlannedSession, PlannedTurn, SyntheticSpec, build_plan,
};
use bench_workload::tokenize::TokenizerSpec;
use criterion::{BatchSize, Criterion, Throughput, criterion_group, criterion_main};

/// One planned session of `turns` turns, with an optional shared system prompt.
fn session(turns: u32, system_prompt_tokens: Option<u32>) -> PlannedSession {
    let mut pc = PlanConfig::new(DatasetSpec::Random(SyntheticSpec {
        turns,
        input_increment: 1_300,
        output_len: 150,
        ..Default::default()
    }));
    pc.tokenizer = TokenizerSpec::Chars;
    pc.num_sessions = Some(1);
    pc.concurrency = 1;
    pc.system_prompt_tokens = system_prompt_tokens;
    let plan = build_plan(pc).unwrap();
    plan.sessions.into_iter().next().unwrap()
}

/// Appends a turn's new messages, as the engine does before sending it.
fn append_delta(messages: &mut String, turn: &PlannedTurn) {
    for m in &turn.input_delta {
        if !messages.is_empty() {
            messages.push(',');
        }
        m.write_json(messages);
    }
}

/// Appends a turn's answer (trace content mode), as the engine does after it.
fn append_answer(messages: &mut String, turn: &PlannedTurn) {
    if !messages.is_empty() {
        messages.push(',');
    }
    turn.assistant.write_json(messages);
}

/// The engine's starting conversation: the system message, if any (no cache-bust marker: a
/// first, measured play).
fn start(sess: &PlannedSession) -> String {
    let mut messages = String::new();
    if let Some(sys) = &sess.system {
        sys.write_json(&mut messages);
    }
    messages
}

/// Every turn's client work: append the delta, build the body, append the answer. Returns
/// Σ body bytes.
fn play(cfg: &RunConfig, sess: &PlannedSession) -> usize {
    let mut messages = start(sess);
    let mut sent = 0;
    for turn in &sess.turns {
        append_delta(&mut messages, turn);
        let body = cfg.body(&messages, turn.max_output_tokens);
        sent += body.len();
        black_box(body);
        append_answer(&mut messages, turn);
    }
    sent
}

/// The engine's path since the conversation became pieces: the same turns through a
/// [`Conversation`] and [`RunConfig::body_segments`] (long texts shared, never copied).
fn play_segments(cfg: &RunConfig, sess: &PlannedSession) -> u64 {
    let mut conv = Conversation::with_capacity(0);
    let head = match sess.system.as_deref() {
        Some(h) => bench_runner::System::Shared(h),
        None => bench_runner::System::None,
    };
    let mut sent = 0;
    for turn in &sess.turns {
        for m in &turn.input_delta {
            conv.comma();
            conv.push_msg(m);
        }
        let body = cfg.body_segments(head, &conv, turn.max_output_tokens, None, None);
        sent += body.len();
        black_box(body);
        conv.comma();
        conv.push_msg(&turn.assistant);
    }
    sent
}

fn bench(c: &mut Criterion) {
    let cfg = RunConfig::new("Qwen/Qwen3-8B", 64);
    let cases = [
        ("ctx32k", session(20, None)),
        ("sys8k_ctx32k", session(15, Some(8_192))),
    ];
    let mut g = c.benchmark_group("body_build");
    g.warm_up_time(Duration::from_secs(1));
    g.measurement_time(Duration::from_secs(3));
    for (name, sess) in &cases {
        let (last, before) = sess.turns.split_last().unwrap();
        // The conversation before the last turn, built as the engine builds it (so its capacity
        // is the engine's: the same sequence of pushes).
        let mut prefix = start(sess);
        for turn in before {
            append_delta(&mut prefix, turn);
            append_answer(&mut prefix, turn);
        }
        let prefix_cap = prefix.capacity();
        let mut at_last = prefix.clone();
        append_delta(&mut at_last, last);
        let body = cfg.body(&at_last, last.max_output_tokens);
        let mut after = at_last.clone();
        append_answer(&mut after, last);
        let appended = after.len() - prefix.len();
        let sent = play(&cfg, sess);
        eprintln!(
            "{name}: {} turns, system {} tokens, last turn est_prompt_tokens {}, \
             last body {} B, last append {} B (realloc: {}), session bodies Σ {} B",
            sess.turns.len(),
            sess.system.as_ref().map_or(0, |s| s.tokens),
            last.est_prompt_tokens,
            body.len(),
            appended,
            prefix.len() + appended > prefix_cap,
            sent,
        );
        serde_json::from_str::<serde_json::Value>(&body).unwrap();

        g.throughput(Throughput::Bytes(appended as u64));
        g.bench_function(format!("append_turn/{name}"), |b| {
            b.iter_batched(
                || {
                    let mut s = String::with_capacity(prefix_cap);
                    s.push_str(&prefix);
                    s
                },
                |mut s| {
                    append_delta(&mut s, last);
                    append_answer(&mut s, last);
                    s
                },
                BatchSize::LargeInput,
            )
        });

        g.throughput(Throughput::Bytes(body.len() as u64));
        g.bench_function(format!("body/{name}"), |b| {
            b.iter(|| cfg.body(black_box(&at_last), black_box(last.max_output_tokens)))
        });

        g.throughput(Throughput::Bytes(sent as u64));
        g.bench_function(format!("session/{name}"), |b| {
            b.iter(|| play(&cfg, black_box(sess)))
        });

        let seg_sent = play_segments(&cfg, sess);
        assert_eq!(
            seg_sent, sent as u64,
            "the pieces add up to the same bodies"
        );
        g.throughput(Throughput::Bytes(seg_sent));
        g.bench_function(format!("session_segments/{name}"), |b| {
            b.iter(|| play_segments(&cfg, black_box(sess)))
        });
    }
    g.finish();
}

criterion_group!(benches, bench);
criterion_main!(benches);
