//! `sse_parse`: throughput (MB/s) of the SSE parser and of the whole chat-stream consumer on a
//! realistic vLLM-shaped stream (one event per token, usage chunk, `[DONE]`), fed in 16 KiB
//! network reads and one event per read; and of the consumer on equally long Responses and
//! Messages streams shaped as the wire contract says, one event per read.
#![allow(missing_docs, clippy::unwrap_used)]

use std::hint::black_box;
use std::time::Instant;

use bench_transport::sse::{SseItem, SseParser};
use bench_transport::{ChatStreamConsumer, Endpoint};
use criterion::{Criterion, Throughput, criterion_group, criterion_main};

/// A 1,024-token streamed answer shaped like vLLM's output.
fn realistic_stream() -> Vec<u8> {
    let words = WORDS;
    let mut s = String::new();
    let head = r#"{"id":"chatcmpl-b2c1e0f4a9d84e5f8c1d2e3f4a5b6c7d","object":"chat.completion.chunk","created":1767225600,"model":"Qwen/Qwen3-8B","choices":[{"index":0,"delta":"#;
    s.push_str(&format!("data: {head}{{\"role\":\"assistant\",\"content\":\"\"}},\"logprobs\":null,\"finish_reason\":null}}]}}\n\n"));
    for i in 0..1024 {
        let w = serde_json::to_string(words[i % words.len()]).unwrap();
        s.push_str(&format!(
            "data: {head}{{\"content\":{w}}},\"logprobs\":null,\"finish_reason\":null}}]}}\n\n"
        ));
    }
    s.push_str(&format!(
        "data: {head}{{}},\"logprobs\":null,\"finish_reason\":\"length\"}}]}}\n\n"
    ));
    s.push_str("data: {\"id\":\"x\",\"object\":\"chat.completion.chunk\",\"choices\":[],\"usage\":{\"prompt_tokens\":4000,\"total_tokens\":5024,\"completion_tokens\":1024,\"prompt_tokens_details\":{\"cached_tokens\":3968}}}\n\n");
    s.push_str("data: [DONE]\n\n");
    s.into_bytes()
}

const WORDS: [&str; 9] = [
    "the",
    " model",
    " answers",
    " with",
    " tokens",
    ",",
    " \"quoted\"",
    " über",
    "\n",
];

/// A 1,024-token Responses stream (256 reasoning tokens, then the answer) as the contract
/// shapes it: `event:` lines, `sequence_number`s, the usage on `response.completed`.
fn responses_stream() -> Vec<u8> {
    let mut s = String::new();
    let mut n = 0;
    let mut ev = |s: &mut String, kind: &str, rest: &str| {
        s.push_str(&format!(
            "event: {kind}\ndata: {{\"type\":\"{kind}\",{rest}\"sequence_number\":{n}}}\n\n"
        ));
        n += 1;
    };
    let resp = r#""response":{"id":"resp_b2c1e0f4a9d84e5f8c1d2e3f4a5b6c7d","object":"response","status":"in_progress","model":"Qwen/Qwen3-8B","output":[]},"#;
    ev(&mut s, "response.created", resp);
    ev(&mut s, "response.in_progress", resp);
    ev(
        &mut s,
        "response.output_item.added",
        r#""output_index":0,"item":{"type":"reasoning","id":"rs_b2c1e0f4a9d84e5f"},"#,
    );
    for i in 0..1024 {
        let w = serde_json::to_string(WORDS[i % WORDS.len()]).unwrap();
        if i < 256 {
            ev(
                &mut s,
                "response.reasoning_text.delta",
                &format!(
                    r#""item_id":"rs_b2c1e0f4a9d84e5f","output_index":0,"content_index":0,"delta":{w},"#
                ),
            );
        } else {
            if i == 256 {
                ev(
                    &mut s,
                    "response.output_item.added",
                    r#""output_index":1,"item":{"type":"message","id":"msg_b2c1e0f4a9d84e5f","role":"assistant","content":[]},"#,
                );
            }
            ev(
                &mut s,
                "response.output_text.delta",
                &format!(
                    r#""item_id":"msg_b2c1e0f4a9d84e5f","output_index":1,"content_index":0,"delta":{w},"#
                ),
            );
        }
    }
    ev(
        &mut s,
        "response.completed",
        r#""response":{"id":"resp_b2c1e0f4a9d84e5f8c1d2e3f4a5b6c7d","object":"response","status":"completed","model":"Qwen/Qwen3-8B","output":[],"usage":{"input_tokens":4000,"input_tokens_details":{"cached_tokens":3968},"output_tokens":1024,"output_tokens_details":{"reasoning_tokens":256},"total_tokens":5024}},"#,
    );
    s.into_bytes()
}

/// A 1,024-token Messages stream (256 thinking tokens, then the answer) as the contract shapes
/// it.
fn messages_stream() -> Vec<u8> {
    let mut s = String::new();
    let ev = |s: &mut String, kind: &str, rest: &str| {
        s.push_str(&format!(
            "event: {kind}\ndata: {{\"type\":\"{kind}\"{rest}}}\n\n"
        ));
    };
    ev(
        &mut s,
        "message_start",
        r#","message":{"id":"msg_b2c1e0f4a9d84e5f","type":"message","role":"assistant","model":"Qwen/Qwen3-8B","content":[],"stop_reason":null,"stop_sequence":null,"usage":{"input_tokens":32,"cache_creation_input_tokens":0,"cache_read_input_tokens":3968,"output_tokens":1}}"#,
    );
    ev(
        &mut s,
        "content_block_start",
        r#","index":0,"content_block":{"type":"thinking","thinking":""}"#,
    );
    ev(&mut s, "ping", "");
    for i in 0..1024 {
        let w = serde_json::to_string(WORDS[i % WORDS.len()]).unwrap();
        if i < 256 {
            ev(
                &mut s,
                "content_block_delta",
                &format!(r#","index":0,"delta":{{"type":"thinking_delta","thinking":{w}}}"#),
            );
        } else {
            if i == 256 {
                ev(&mut s, "content_block_stop", r#","index":0"#);
                ev(
                    &mut s,
                    "content_block_start",
                    r#","index":1,"content_block":{"type":"text","text":""}"#,
                );
            }
            ev(
                &mut s,
                "content_block_delta",
                &format!(r#","index":1,"delta":{{"type":"text_delta","text":{w}}}"#),
            );
        }
    }
    ev(&mut s, "content_block_stop", r#","index":1"#);
    ev(
        &mut s,
        "message_delta",
        r#","delta":{"stop_reason":"max_tokens","stop_sequence":null},"usage":{"output_tokens":1024}"#,
    );
    ev(&mut s, "message_stop", "");
    s.into_bytes()
}

/// `body` cut after every blank line.
fn events(body: &[u8]) -> Vec<&[u8]> {
    let mut out = Vec::new();
    let mut start = 0;
    for i in 1..body.len() {
        if body[i] == b'\n' && body[i - 1] == b'\n' {
            out.push(&body[start..=i]);
            start = i + 1;
        }
    }
    out
}

fn bench(c: &mut Criterion) {
    let body = realistic_stream();
    let per_event: Vec<&[u8]> = body
        .split_inclusive(|&b| b == b'\n')
        .collect::<Vec<_>>()
        .chunks(2)
        .map(|pair| {
            let start = pair[0].as_ptr() as usize - body.as_ptr() as usize;
            let len: usize = pair.iter().map(|l| l.len()).sum();
            &body[start..start + len]
        })
        .collect();
    let mut g = c.benchmark_group("sse_parse");
    g.throughput(Throughput::Bytes(body.len() as u64));
    g.bench_function("parser_16k_reads", |b| {
        b.iter(|| {
            let mut p = SseParser::new();
            let mut n = 0usize;
            for chunk in body.chunks(16 * 1024) {
                p.feed(chunk, |it| {
                    if let SseItem::Event(e) = it {
                        n += e.data.len();
                    }
                });
            }
            black_box(n)
        })
    });
    g.bench_function("parser_event_per_read", |b| {
        b.iter(|| {
            let mut p = SseParser::new();
            let mut n = 0usize;
            for chunk in &per_event {
                p.feed(chunk, |it| {
                    if let SseItem::Event(e) = it {
                        n += e.data.len();
                    }
                });
            }
            black_box(n)
        })
    });
    g.bench_function("consumer_event_per_read", |b| {
        b.iter(|| {
            let t0 = Instant::now();
            let mut c = ChatStreamConsumer::new(t0, true);
            for chunk in &per_event {
                c.feed(chunk, t0).unwrap();
            }
            black_box(c.finish(t0).unwrap().content.len())
        })
    });
    // A whole non-streamed answer (vLLM's shape, 64 tokens of text, usage with details).
    let whole = format!(
        r#"{{"id":"chatcmpl-ed83869ceb358a76adb2220aa0ccb2b3","object":"chat.completion","created":1796613785,"model":"m","choices":[{{"index":0,"message":{{"role":"assistant","content":"{}","refusal":null,"tool_calls":[],"reasoning_content":null}},"logprobs":null,"finish_reason":"length","stop_reason":null}}],"usage":{{"prompt_tokens":385,"total_tokens":449,"completion_tokens":64,"prompt_tokens_details":{{"cached_tokens":256}}}},"prompt_logprobs":null}}"#,
        " lorem ipsum dolor sit amet".repeat(12)
    );
    g.throughput(Throughput::Bytes(whole.len() as u64));
    g.bench_function("consumer_whole_response", |b| {
        b.iter(|| {
            let t0 = Instant::now();
            let mut c = ChatStreamConsumer::new(t0, false);
            c.feed(whole.as_bytes(), t0).unwrap();
            let out = c.finish(t0).unwrap();
            black_box((out.content.len(), out.usage))
        })
    });
    g.finish();
    for (name, endpoint, body) in [
        ("responses", Endpoint::Responses, responses_stream()),
        ("messages", Endpoint::Messages, messages_stream()),
    ] {
        let pieces = events(&body);
        // The stream is read as meant: 256 reasoning and 768 answer chunks.
        let t0 = Instant::now();
        let mut check = ChatStreamConsumer::with_endpoint(t0, true, endpoint);
        for chunk in &pieces {
            check.feed(chunk, t0).unwrap();
        }
        let out = check.finish(t0).unwrap();
        assert_eq!(
            (out.reasoning_chunks, out.answer_chunks),
            (256, 768),
            "{name}"
        );
        let mut g = c.benchmark_group(format!("sse_parse_{name}"));
        g.throughput(Throughput::Bytes(body.len() as u64));
        g.bench_function("consumer_event_per_read", |b| {
            b.iter(|| {
                let t0 = Instant::now();
                let mut c = ChatStreamConsumer::with_endpoint(t0, true, endpoint);
                for chunk in &pieces {
                    c.feed(chunk, t0).unwrap();
                }
                let out = c.finish(t0).unwrap();
                black_box((out.content.len(), out.answer_chunks))
            })
        });
        g.finish();
    }
}

criterion_group!(benches, bench);
criterion_main!(benches);
