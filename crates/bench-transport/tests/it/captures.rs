//! The chat-stream consumer on real captured streams, compared with an independent Python
//! reading of the same bytes (`fixtures/openai_stream/expected.json`, from `make_expected.py`).

use std::time::{Duration, Instant};

use bench_transport::{ChatStreamConsumer, ErrorKind};
use serde_json::Value;

fn captures() -> Vec<(String, Vec<u8>, Value)> {
    let dir = crate::fixtures().join("openai_stream");
    let expected: Value =
        serde_json::from_slice(&std::fs::read(dir.join("expected.json")).unwrap()).unwrap();
    let mut out = Vec::new();
    for (name, exp) in expected.as_object().unwrap() {
        let path = if name.ends_with(".bin") {
            dir.join("openai-python-recordings").join(name)
        } else {
            dir.join(name)
        };
        out.push((name.clone(), std::fs::read(path).unwrap(), exp.clone()));
    }
    out
}

#[test]
fn all_captures_parse_with_expected_text_and_usage() {
    let caps = captures();
    let real = caps.iter().filter(|(n, ..)| n.ends_with(".bin")).count();
    assert_eq!(real, 12, "the 12 real OpenAI captures");
    for (name, bytes, exp) in caps {
        for chunk_size in [usize::MAX, 7, 1] {
            let t0 = Instant::now();
            let mut c = ChatStreamConsumer::new(t0, true);
            // Each network chunk arrives 1 ms after the previous one.
            for (i, piece) in bytes.chunks(chunk_size.min(bytes.len())).enumerate() {
                c.feed(piece, t0 + Duration::from_millis(i as u64 + 1))
                    .unwrap();
            }
            let out = c.finish(t0 + Duration::from_secs(1)).unwrap();
            assert_eq!(out.content, exp["content"].as_str().unwrap(), "{name}");
            assert_eq!(out.reasoning, exp["reasoning"].as_str().unwrap(), "{name}");
            assert_eq!(
                out.finish_reason.as_deref(),
                exp["finish_reason"].as_str(),
                "{name}"
            );
            let u = out.usage.expect("usage chunk");
            let eu = &exp["usage"];
            assert_eq!(u.prompt_tokens, eu["prompt_tokens"].as_u64(), "{name}");
            assert_eq!(
                u.completion_tokens,
                eu["completion_tokens"].as_u64(),
                "{name}"
            );
            assert_eq!(u.total_tokens, eu["total_tokens"].as_u64(), "{name}");
            assert_eq!(u.cached_tokens, eu["cached_tokens"].as_u64(), "{name}");
            assert_eq!(
                out.chunk_offsets.len() as u64,
                exp["output_chunks"].as_u64().unwrap(),
                "{name}"
            );
            // TTFT is the arrival of the first output-bearing chunk, never the role-only one.
            assert_eq!(out.ttft, out.chunk_offsets.first().copied(), "{name}");
            if chunk_size == 1 {
                assert!(
                    out.ttft.unwrap() > Duration::from_millis(1),
                    "{name}: role chunk counted"
                );
            }
        }
    }
}

#[test]
fn sglang_cached_token_details_are_read() {
    let body = concat!(
        "data: {\"choices\":[{\"index\":0,\"delta\":{\"role\":\"assistant\",\"content\":\"\"}}]}\n\n",
        "data: {\"choices\":[{\"index\":0,\"delta\":{\"content\":\"hi\"},\"finish_reason\":\"length\"}]}\n\n",
        "data: {\"choices\":[],\"usage\":{\"prompt_tokens\":100,\"completion_tokens\":1,\"total_tokens\":101,",
        "\"prompt_tokens_details\":{\"cached_tokens\":64}},\"sglext\":{\"cached_tokens_details\":{\"device\":48,\"host\":16}}}\n\n",
        "data: [DONE]\n\n"
    );
    let t0 = Instant::now();
    let mut c = ChatStreamConsumer::new(t0, true);
    c.feed(body.as_bytes(), t0).unwrap();
    let u = c.finish(t0).unwrap().usage.unwrap();
    assert_eq!(u.cached_tokens, Some(64));
    assert_eq!(u.cached_device_tokens, Some(48));
    assert_eq!(u.cached_host_tokens, Some(16));
}

#[test]
fn non_streamed_response() {
    let body = br#"{"id":"x","object":"chat.completion","choices":[{"index":0,"message":{"role":"assistant","content":"Hello there","reasoning_content":"think"},"finish_reason":"length"}],"usage":{"prompt_tokens":5,"completion_tokens":2,"total_tokens":7,"prompt_tokens_details":{"cached_tokens":0}}}"#;
    let t0 = Instant::now();
    let mut c = ChatStreamConsumer::new(t0, false);
    c.feed(&body[..10], t0).unwrap();
    c.feed(&body[10..], t0).unwrap();
    let out = c.finish(t0 + Duration::from_millis(40)).unwrap();
    assert_eq!(out.content, "Hello there");
    assert_eq!(out.reasoning, "think");
    assert_eq!(out.ttft, Some(Duration::from_millis(40)));
    assert_eq!(out.e2e, Duration::from_millis(40));
    assert_eq!(out.completion_tokens(), Some(2));
    assert_eq!(out.usage.unwrap().cached_tokens, Some(0));
}

#[test]
fn truncated_and_bad_streams_are_typed_errors() {
    let t0 = Instant::now();
    // Cut before [DONE].
    let bytes = std::fs::read(
        crate::fixtures().join("openai_stream/llamacpp_smollm2_stream_include_usage.sse"),
    )
    .unwrap();
    let cut = bytes.len() - 20;
    let mut c = ChatStreamConsumer::new(t0, true);
    c.feed(&bytes[..cut], t0).unwrap();
    assert_eq!(c.finish(t0).unwrap_err().kind(), ErrorKind::Incomplete);
    // Not an event stream at all.
    let mut c = ChatStreamConsumer::new(t0, true);
    c.feed(b"<html>\n<body>502 Bad Gateway</body>\n</html>\n", t0)
        .unwrap();
    let e = c.finish(t0).unwrap_err();
    assert_eq!(e.kind(), ErrorKind::MalformedSse);
    assert!(e.to_string().contains("502 Bad Gateway"), "{e}");
    // An event whose data is not JSON.
    let mut c = ChatStreamConsumer::new(t0, true);
    let e = c.feed(b"data: {\"choices\": [\n\n", t0).unwrap_err();
    assert_eq!(e.kind(), ErrorKind::MalformedJson);
    // An error object inside a 200 stream (vLLM does this).
    let mut c = ChatStreamConsumer::new(t0, true);
    let e = c
        .feed(
            b"data: {\"error\":{\"message\":\"out of memory\",\"code\":500}}\n\n",
            t0,
        )
        .unwrap_err();
    assert_eq!(e.kind(), ErrorKind::Server);
    assert!(e.to_string().contains("out of memory"));
}
