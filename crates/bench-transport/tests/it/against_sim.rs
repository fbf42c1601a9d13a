//! The client against the embedded simulator: many concurrent streams over pooled connections.

use std::time::Duration;

use bench_sim::{LatencyMode, SimConfig, SimServer};
use bench_transport::{Auth, ChatMessage, ChatRequest, Client, ClientConfig, RequestOptions, Role};

fn client(url: String) -> Client {
    let mut cfg = ClientConfig::new(url);
    cfg.auth = Auth::None;
    Client::new(cfg).unwrap()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn concurrent_streams_complete_with_exact_token_counts() {
    // Every answer takes 50 ms and the 64 streams start together: all 64 are in flight at
    // once, so the pool must open exactly one connection for each (with instant answers a
    // stream could finish before the last one started, and lend it its connection).
    let sim = SimServer::start(SimConfig {
        mode: LatencyMode::Fixed {
            ttft: Duration::from_millis(50),
            itl: Duration::ZERO,
        },
        ..SimConfig::default()
    })
    .await
    .unwrap();
    let c = client(sim.base_url());
    let start = std::sync::Arc::new(tokio::sync::Barrier::new(64));
    let mut tasks = Vec::new();
    for i in 0..64u32 {
        let c = c.clone();
        let start = start.clone();
        tasks.push(tokio::spawn(async move {
            start.wait().await;
            let mut req = ChatRequest::new(
                "bench-sim",
                vec![ChatMessage::new(Role::User, format!("request {i}"))],
            );
            let n = 16 + i % 48;
            req.pin_output(n, false);
            let mut total = 0;
            for _ in 0..4 {
                let out = c.chat(&req, &RequestOptions::default()).await.unwrap();
                assert_eq!(out.completion_tokens(), Some(u64::from(n)));
                assert_eq!(out.chunk_offsets.len(), n as usize, "one event per token");
                assert_eq!(out.finish_reason.as_deref(), Some("length"));
                total += 1;
            }
            total
        }));
    }
    let mut done = 0;
    for t in tasks {
        done += t.await.unwrap();
    }
    assert_eq!(done, 256);
    assert_eq!(c.redials(), 0);
    assert_eq!(
        c.connections_opened(),
        64,
        "closed-loop keep-alive: one connection per concurrent stream"
    );
    sim.shutdown().await;
}

#[tokio::test]
async fn prefix_cache_hits_are_reported_in_usage() {
    let sim = SimServer::start(SimConfig {
        mode: LatencyMode::Fixed {
            ttft: Duration::from_millis(5),
            itl: Duration::from_millis(1),
        },
        ..SimConfig::default()
    })
    .await
    .unwrap();
    let c = client(format!("{}/v1", sim.base_url()));
    let mut req = ChatRequest::new(
        "bench-sim",
        vec![ChatMessage::new(Role::User, "x".repeat(4096))],
    );
    req.pin_output(4, true);
    let first = c.chat(&req, &RequestOptions::default()).await.unwrap();
    let second = c.chat(&req, &RequestOptions::default()).await.unwrap();
    let (u1, u2) = (first.usage.unwrap(), second.usage.unwrap());
    assert_eq!(u1.cached_tokens, Some(0));
    assert_eq!(u1.prompt_tokens, u2.prompt_tokens);
    let cached = u2.cached_tokens.unwrap();
    let prompt = u2.prompt_tokens.unwrap();
    assert!(
        cached > 0 && cached <= prompt,
        "cached {cached} of {prompt}"
    );
    assert_eq!(c.connections_opened(), 1);
    // Against a 404 path of the same server: a typed status error.
    let e = c.get("/nope", None).await.unwrap();
    assert_eq!(e.status.as_u16(), 404);
    sim.shutdown().await;
}

/// The simulator and the client's parsers follow the same wire contract: every endpoint,
/// streamed and not, with reasoning, reads back as the simulator sent it. (The bodies are read
/// whole here; timing is covered by the consumer's own tests.)
#[tokio::test]
async fn every_endpoint_of_the_simulator_reads_back_with_its_reasoning() {
    use bench_transport::{ChatStreamConsumer, Endpoint};
    use std::time::Instant;

    let sim = SimServer::start(SimConfig {
        mode: LatencyMode::Instant,
        reasoning_tokens: 3,
        ..SimConfig::default()
    })
    .await
    .unwrap();
    let c = client(sim.base_url());
    for endpoint in Endpoint::ALL {
        for stream in [true, false] {
            let body = match endpoint {
                Endpoint::Chat => {
                    serde_json::json!({"model":"bench-sim","messages":[{"role":"user","content":"hello"}],
                    "stream":stream,"stream_options":{"include_usage":true},"max_completion_tokens":8,"ignore_eos":true})
                }
                Endpoint::Completions => serde_json::json!({"model":"bench-sim","prompt":"hello",
                    "stream":stream,"stream_options":{"include_usage":true},"max_tokens":8,"ignore_eos":true}),
                Endpoint::Responses => serde_json::json!({"model":"bench-sim","input":"hello",
                    "stream":stream,"max_output_tokens":8,"ignore_eos":true}),
                Endpoint::Messages => serde_json::json!({"model":"bench-sim","max_tokens":8,
                    "messages":[{"role":"user","content":"hello"}],"stream":stream,"ignore_eos":true}),
            };
            let ctx = format!("{endpoint} stream={stream}");
            let t0 = Instant::now();
            let r = c
                .request(
                    http::Method::POST,
                    endpoint.path(),
                    body.to_string().into(),
                    None,
                )
                .await
                .unwrap();
            assert!(r.status.is_success(), "{ctx}: {}", r.status);
            let mut con = ChatStreamConsumer::with_endpoint(t0, stream, endpoint);
            con.feed(&r.body, Instant::now()).unwrap();
            assert_eq!(con.is_done(), stream, "{ctx}");
            let out = con.finish(Instant::now()).unwrap();
            let u = out.usage.unwrap();
            assert_eq!(u.completion_tokens, Some(8), "{ctx}");
            assert_eq!(out.finish_reason.as_deref(), Some("length"), "{ctx}");
            assert!(!out.content.is_empty(), "{ctx}");
            // Completions has no reasoning shape: the reasoning tokens are plain text there.
            let plain = endpoint == Endpoint::Completions;
            assert_eq!(out.reasoning.is_empty(), plain, "{ctx}");
            let reports = matches!(endpoint, Endpoint::Chat | Endpoint::Responses);
            assert_eq!(u.reasoning_tokens, reports.then_some(3), "{ctx}");
            if stream {
                let (r, a) = if plain { (0, 8) } else { (3, 5) };
                assert_eq!((out.reasoning_chunks, out.answer_chunks), (r, a), "{ctx}");
            } else {
                assert_eq!(out.answer_chunks, 1, "{ctx}");
                assert_eq!(out.reasoning_chunks, u32::from(!plain), "{ctx}");
            }
        }
    }
    sim.shutdown().await;
}
