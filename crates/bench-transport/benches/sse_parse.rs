//! `sse_parse`: throughput (MB/s) of the SSE parser and of the whole chat-stream consumer on a
//! realistic vLLM-shaped stream (one event per token, usage chunk, `[DONE]`), fed in 16 KiB
//! network reads and one event per read.
#![allow(missing_docs, clippy::unwrap_used)]

use std::hint::black_box;
use std::time::Instant;

use bench_transport::ChatStreamConsumer;
use bench_transport::sse::{SseItem, SseParser};
use criterion::{Criterion, Throughput, criterion_group, criterion_main};

/// A 1,024-token streamed answer shaped like vLLM's output.
fn realistic_stream() -> Vec<u8> {
    let words = [
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
    g.finish();
}

criterion_group!(benches, bench);
criterion_main!(benches);
