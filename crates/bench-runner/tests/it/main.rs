//! The engine against the embedded simulator and scripted servers, over real loopback HTTP.
#![allow(clippy::unwrap_used, clippy::expect_used, missing_docs)]

mod graph;
mod paused;

use std::sync::{Arc, Mutex};
use std::time::Duration;

use bench_rundir::record::{SessionStatus, TurnRecord, TurnStatus};
use bench_runner::{CancelToken, Observer, RunConfig, RunEvent, StopReason, run};
use bench_sim::{LatencyMode, SimConfig, SimServer};
use bench_transport::{Auth, Client, ClientConfig};
use bench_workload::plan::{DatasetSpec, GapPolicy, Plan, PlanConfig, SyntheticSpec, build_plan};
use bench_workload::tokenize::TokenizerSpec;

fn synthetic(sessions: u32, turns: u32, gap: GapPolicy) -> Arc<Plan> {
    let mut pc = PlanConfig::new(DatasetSpec::Random(SyntheticSpec {
        turns,
        input_increment: 64,
        output_len: 8,
        gap,
    }));
    pc.tokenizer = TokenizerSpec::Chars;
    pc.num_sessions = Some(sessions);
    Arc::new(build_plan(pc).unwrap())
}

async fn sim(mode: LatencyMode) -> SimServer {
    SimServer::start(SimConfig {
        mode,
        ..SimConfig::default()
    })
    .await
    .unwrap()
}

fn client(url: &str) -> Client {
    let mut c = ClientConfig::new(url);
    c.auth = Auth::None;
    Client::new(c).unwrap()
}

fn fixed(ttft_ms: u64, itl_ms: u64) -> LatencyMode {
    LatencyMode::Fixed {
        ttft: Duration::from_millis(ttft_ms),
        itl: Duration::from_millis(itl_ms),
    }
}

/// Collects turn records as they are emitted.
#[derive(Default)]
struct Collect(Mutex<Vec<TurnRecord>>);

impl Observer for Collect {
    fn on_event(&self, e: &RunEvent<'_>) {
        if let RunEvent::TurnFinished(t) = e {
            self.0.lock().unwrap().push((*t).clone());
        }
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn every_session_once_with_exactly_c_active() {
    let s = sim(fixed(5, 1)).await;
    let plan = synthetic(9, 3, GapPolicy::Zero);
    let collect = Arc::new(Collect::default());
    let out = run(
        plan,
        client(&s.base_url()),
        RunConfig::new("bench-sim", 3),
        vec![collect.clone()],
        CancelToken::new(),
    )
    .await;
    assert_eq!(out.stopped_by, StopReason::Exhausted);
    assert_eq!(out.turns.len(), 27);
    assert_eq!(out.sessions.len(), 9);
    assert!(
        out.sessions
            .iter()
            .all(|s| s.status == SessionStatus::Completed)
    );
    assert!(
        out.turns.iter().all(|t| t.status == TurnStatus::Ok),
        "{:?}",
        out.turns[0]
    );
    assert!(out.turns.iter().all(|t| t.active_at_dispatch <= 3));
    // While the pool lasts (the first 6 of 9 sessions are replaced at once), 3 are active.
    let full = out
        .turns
        .iter()
        .filter(|t| t.active_at_dispatch == 3)
        .count();
    assert!(full >= 18, "only {full} turns saw 3 active sessions");
    // Observers saw every record, and usage came from the server.
    assert_eq!(collect.0.lock().unwrap().len(), 27);
    assert!(out.turns.iter().all(|t| t.output_tokens == Some(8)));
    // Within a session, turns run strictly one after another.
    for s in ["random-0", "random-5"] {
        let mut ts: Vec<&TurnRecord> = out.turns.iter().filter(|t| t.session_id == s).collect();
        ts.sort_by_key(|t| t.turn_index);
        for w in ts.windows(2) {
            assert!(
                w[1].sent_s >= w[0].end_s,
                "turn sent before the previous ended"
            );
        }
    }
    s.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn duration_loops_the_pool_truncates_and_busts_the_cache() {
    let s = sim(fixed(20, 2)).await;
    let plan = synthetic(2, 50, GapPolicy::Zero);
    let mut cfg = RunConfig::new("bench-sim", 2);
    cfg.limits.duration = Some(Duration::from_millis(600));
    let out = run(plan, client(&s.base_url()), cfg, vec![], CancelToken::new()).await;
    assert_eq!(out.stopped_by, StopReason::Duration);
    // 50-turn sessions of ~34 ms turns cannot finish in 600 ms: cut at a turn boundary.
    assert!(
        out.sessions
            .iter()
            .all(|s| s.status == SessionStatus::Truncated)
    );
    assert!(
        out.turns.iter().all(|t| t.sent_s <= 0.6 + 0.05),
        "no turn sent after the deadline"
    );
    assert!(out.elapsed < Duration::from_millis(900));
    s.shutdown().await;

    // Short sessions: the pool loops, and every replay carries its own marker.
    let s = sim(LatencyMode::Instant).await;
    let plan = synthetic(2, 2, GapPolicy::Zero);
    let mut cfg = RunConfig::new("bench-sim", 2);
    cfg.limits.duration = Some(Duration::from_millis(300));
    let out = run(plan, client(&s.base_url()), cfg, vec![], CancelToken::new()).await;
    let replays: Vec<_> = out.sessions.iter().filter(|s| s.replay > 0).collect();
    assert!(!replays.is_empty());
    assert!(
        out.sessions
            .iter()
            .filter(|s| s.replay == 0)
            .all(|s| s.marker.is_none())
    );
    let markers: std::collections::HashSet<_> =
        replays.iter().map(|s| s.marker.clone().unwrap()).collect();
    assert_eq!(markers.len(), replays.len(), "unique markers");
    s.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_fuse_cuts_requests_in_flight() {
    let s = sim(fixed(2000, 1)).await;
    let plan = synthetic(2, 3, GapPolicy::Zero);
    let mut cfg = RunConfig::new("bench-sim", 2);
    cfg.limits.max_duration = Some(Duration::from_millis(300));
    let out = run(plan, client(&s.base_url()), cfg, vec![], CancelToken::new()).await;
    assert_eq!(out.stopped_by, StopReason::MaxDuration);
    assert!(
        out.elapsed < Duration::from_millis(1500),
        "{:?}",
        out.elapsed
    );
    assert!(!out.turns.is_empty());
    assert!(out.turns.iter().all(|t| t.status == TurnStatus::Timeout));
    assert!(
        out.turns
            .iter()
            .all(|t| t.error_kind == Some(bench_transport::ErrorKind::Timeout))
    );
    s.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn turn_timeout_and_context_guard() {
    let s = sim(fixed(500, 1)).await;
    let plan = synthetic(1, 2, GapPolicy::Zero);
    let mut cfg = RunConfig::new("bench-sim", 1);
    cfg.limits.turn_timeout = Duration::from_millis(100);
    let out = run(
        plan.clone(),
        client(&s.base_url()),
        cfg,
        vec![],
        CancelToken::new(),
    )
    .await;
    assert_eq!(
        out.turns.len(),
        2,
        "a timed-out turn does not end the session"
    );
    assert!(out.turns.iter().all(|t| t.status == TurnStatus::Timeout));
    s.shutdown().await;

    let s = sim(LatencyMode::Instant).await;
    let mut cfg = RunConfig::new("bench-sim", 1);
    // Room for the first turn only.
    let t0 = &plan.sessions[0].turns[0];
    cfg.max_model_len = Some(t0.est_prompt_tokens + u64::from(t0.max_output_tokens));
    let out = run(plan, client(&s.base_url()), cfg, vec![], CancelToken::new()).await;
    assert_eq!(out.turns.len(), 1);
    assert_eq!(out.sessions[0].status, SessionStatus::ContextGuard);
    s.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn tool_waits_are_honoured_and_excluded_from_latency() {
    let s = sim(fixed(5, 1)).await;
    let plan = synthetic(1, 3, GapPolicy::Fixed(300.0));
    let out = run(
        plan.clone(),
        client(&s.base_url()),
        RunConfig::new("bench-sim", 1),
        vec![],
        CancelToken::new(),
    )
    .await;
    assert!(
        out.elapsed >= Duration::from_millis(600),
        "two 300 ms waits: {:?}",
        out.elapsed
    );
    assert!(
        out.turns.iter().all(|t| t.e2e_ms.unwrap() < 250.0),
        "waits are not latency"
    );
    assert!(out.sessions[0].busy_s < 0.5);
    let mut cfg = RunConfig::new("bench-sim", 1);
    cfg.request.tool_waits = bench_runner::ToolWaits::Skip;
    let out = run(plan, client(&s.base_url()), cfg, vec![], CancelToken::new()).await;
    assert!(
        out.elapsed < Duration::from_millis(500),
        "--no-gaps: {:?}",
        out.elapsed
    );
    s.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn failures_are_recorded_and_the_run_completes() {
    use tokio::io::{AsyncReadExt, AsyncWriteExt};
    let l = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = l.local_addr().unwrap();
    tokio::spawn(async move {
        while let Ok((mut c, _)) = l.accept().await {
            tokio::spawn(async move {
                let mut buf = vec![0u8; 65536];
                loop {
                    let Ok(n) = c.read(&mut buf).await else {
                        return;
                    };
                    if n == 0 {
                        return;
                    }
                    let body = "{\"error\":{\"message\":\"overloaded\"}}";
                    let resp = format!(
                        "HTTP/1.1 503 Service Unavailable\r\ncontent-length: {}\r\n\r\n{body}",
                        body.len()
                    );
                    if c.write_all(resp.as_bytes()).await.is_err() {
                        return;
                    }
                }
            });
        }
    });
    let plan = synthetic(3, 2, GapPolicy::Zero);
    let out = run(
        plan,
        client(&format!("http://{addr}")),
        RunConfig::new("m", 2),
        vec![],
        CancelToken::new(),
    )
    .await;
    assert_eq!(out.turns.len(), 6);
    assert!(out.turns.iter().all(|t| t.status == TurnStatus::Error
        && t.error_kind == Some(bench_transport::ErrorKind::Status)));
    assert!(
        out.sessions
            .iter()
            .all(|s| s.status == SessionStatus::Failed)
    );
    let first = serde_json::to_value(&out.turns[0]).unwrap();
    for k in [
        "session_id",
        "turn_index",
        "status",
        "error_kind",
        "ttft_ms",
        "e2e_ms",
        "input_tokens",
        "output_tokens",
        "cached_tokens",
    ] {
        assert!(first.get(k).is_some(), "stable key {k} missing");
    }
    assert_eq!(first["error_kind"], "http_status");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn cancel_stops_between_turns() {
    let s = sim(fixed(30, 1)).await;
    let plan = synthetic(4, 20, GapPolicy::Zero);
    let cancel = CancelToken::new();
    let c2 = cancel.clone();
    tokio::spawn(async move {
        tokio::time::sleep(Duration::from_millis(200)).await;
        c2.cancel();
    });
    let out = run(
        plan,
        client(&s.base_url()),
        RunConfig::new("bench-sim", 2),
        vec![],
        cancel,
    )
    .await;
    assert_eq!(out.stopped_by, StopReason::Cancelled);
    assert!(out.turns.len() < 80);
    assert!(
        out.turns.iter().all(|t| t.status == TurnStatus::Ok),
        "turns in flight finish"
    );
    s.shutdown().await;
}

/// Over HTTPS: each worker's first turn records its connection's connect and handshake times
/// (later turns reuse it); against a certificate the client refuses (here an expired one, with
/// a trusted CA), every turn played is recorded as failed with the `tls` kind.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn over_tls_handshakes_are_recorded_and_tls_failures_are_per_turn() {
    let dir = tempfile::tempdir().unwrap();
    let ca = bench_sim::SelfSignedCa::new().unwrap();
    let ca_file = dir.path().join("ca.pem");
    std::fs::write(&ca_file, ca.cert_pem()).unwrap();
    let tls_client = |url: &str| {
        let mut c = ClientConfig::new(url);
        c.auth = Auth::None;
        c.tls.ca_cert = Some(ca_file.clone());
        Client::new(c).unwrap()
    };
    let start = |tls: bench_sim::SimTls| {
        SimServer::start(SimConfig {
            mode: LatencyMode::Instant,
            tls: Some(Arc::new(tls)),
            ..SimConfig::default()
        })
    };

    let good = start(ca.loopback_server().unwrap()).await.unwrap();
    let c = tls_client(&good.base_url());
    let out = run(
        synthetic(4, 3, GapPolicy::Zero),
        c.clone(),
        RunConfig::new("bench-sim", 2),
        vec![],
        CancelToken::new(),
    )
    .await;
    assert_eq!(out.turns.len(), 12);
    assert!(out.turns.iter().all(|t| t.status == TurnStatus::Ok));
    let handshakes: Vec<&TurnRecord> = out.turns.iter().filter(|t| t.tls_ms.is_some()).collect();
    // Exactly one per connection opened (at most one per worker; on an instant server a
    // worker may find the other's connection idle in the pool).
    assert_eq!(handshakes.len() as u64, c.connections_opened());
    assert!((1..=2).contains(&handshakes.len()));
    assert!(
        handshakes
            .iter()
            .all(|t| t.connect_ms.is_some() && t.turn_index == 0)
    );
    good.shutdown().await;

    let expired = start(ca.expired_server(&["127.0.0.1"]).unwrap())
        .await
        .unwrap();
    let out = run(
        synthetic(3, 2, GapPolicy::Zero),
        tls_client(&expired.base_url()),
        RunConfig::new("bench-sim", 1),
        vec![],
        CancelToken::new(),
    )
    .await;
    // Every turn played is recorded, each a `tls` failure.
    assert_eq!(out.turns.len(), 6);
    for t in &out.turns {
        assert_eq!(t.status, TurnStatus::Error, "{t:?}");
        assert_eq!(t.error_kind, Some(bench_transport::ErrorKind::Tls));
        assert!(t.error.as_deref().unwrap().contains("expired"), "{t:?}");
    }
    expired.shutdown().await;
}

/// Every endpoint replays the same sessions against the simulator: every turn ok, the prefix
/// cache hit on later turns, the same cache ratio whatever the API; and Responses with the
/// server keeping the conversation (`previous_response_id`) sees exactly the prompts of the
/// client resending what the model generated.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn every_endpoint_replays_and_server_state_matches_client_state() {
    use bench_runner::{ContentMode, ResponsesState};
    use bench_transport::Endpoint;
    async fn play(
        endpoint: Endpoint,
        state: ResponsesState,
        content: ContentMode,
    ) -> Vec<TurnRecord> {
        let s = sim(LatencyMode::Instant).await;
        let mut cfg = RunConfig::new("bench-sim", 1);
        cfg.request.endpoint = endpoint;
        cfg.request.responses_state = state;
        cfg.request.content_mode = content;
        let out = run(
            synthetic(2, 3, GapPolicy::Zero),
            client(&s.base_url()),
            cfg,
            vec![],
            CancelToken::new(),
        )
        .await;
        s.shutdown().await;
        let mut t = out.turns;
        t.sort_by(|a, b| (&a.session_id, a.turn_index).cmp(&(&b.session_id, b.turn_index)));
        t
    }
    let mut ratios = Vec::new();
    for e in Endpoint::ALL {
        let t = play(e, ResponsesState::Client, ContentMode::Trace).await;
        assert_eq!(t.len(), 6, "{e}");
        assert!(
            t.iter().all(|r| r.status == TurnStatus::Ok),
            "{e}: {:?}",
            t[0]
        );
        assert!(t.iter().all(|r| r.output_tokens == Some(8)), "{e}");
        for r in t.iter().filter(|r| r.turn_index > 0) {
            assert!(r.cached_tokens.unwrap() > 0, "{e}: {r:?}");
        }
        let cached: u64 = t.iter().filter_map(|r| r.cached_tokens).sum();
        let input: u64 = t.iter().filter_map(|r| r.input_tokens).sum();
        ratios.push((e, cached as f64 / input as f64));
    }
    // Chat, Responses and Messages send the same conversation: the same cache behaviour.
    assert_eq!(ratios[0].1, ratios[1].1, "{ratios:?}");
    assert_eq!(ratios[0].1, ratios[2].1, "{ratios:?}");

    let server = play(
        Endpoint::Responses,
        ResponsesState::Server,
        ContentMode::Trace,
    )
    .await;
    let client = play(
        Endpoint::Responses,
        ResponsesState::Client,
        ContentMode::Model,
    )
    .await;
    assert!(server.iter().all(|r| r.status == TurnStatus::Ok));
    let key = |t: &[TurnRecord]| -> Vec<(u32, Option<u64>, Option<u64>)> {
        t.iter()
            .map(|r| (r.turn_index, r.input_tokens, r.cached_tokens))
            .collect()
    };
    assert_eq!(key(&server), key(&client));
}
