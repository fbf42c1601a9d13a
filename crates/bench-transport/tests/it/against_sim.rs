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
    let sim = SimServer::start(SimConfig {
        mode: LatencyMode::Instant,
        ..SimConfig::default()
    })
    .await
    .unwrap();
    let c = client(sim.base_url());
    let mut tasks = Vec::new();
    for i in 0..64u32 {
        let c = c.clone();
        tasks.push(tokio::spawn(async move {
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
