//! The `agent-sessions` pack against a live Omnigent server (ignored: it needs one).
//!
//! ```sh
//! target/it/omnigent-venv/bin/python xtask/scripts/omnigent_server.py --dir /tmp/og  # READY URL
//! BENCH_OMNIGENT_URL=http://127.0.0.1:PORT \
//!     cargo test -p bench-journeys --test it omnigent -- --ignored --nocapture
//! ```

use std::time::Duration;

use bench_journeys::{Cancel, Env, run_latency, run_throughput};
use bench_transport::{Auth, Client, ClientConfig};

fn p50(v: &[f64]) -> f64 {
    let mut v = v.to_vec();
    v.sort_by(f64::total_cmp);
    if v.is_empty() {
        return f64::NAN;
    }
    let m = v.len() / 2;
    if v.len() % 2 == 0 {
        (v[m - 1] + v[m]) / 2.0
    } else {
        v[m]
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[ignore = "needs a live Omnigent server: set BENCH_OMNIGENT_URL"]
async fn agent_sessions_pack_against_omnigent() {
    let url = std::env::var("BENCH_OMNIGENT_URL").expect("BENCH_OMNIGENT_URL");
    let iterations: u32 = std::env::var("BENCH_OMNIGENT_ITERATIONS")
        .ok()
        .and_then(|s| s.parse().ok())
        .unwrap_or(30);
    let mut cfg = ClientConfig::new(url);
    cfg.auth = Auth::None;
    cfg.timeout = Duration::from_secs(30);
    let env = Env::new(Client::new(cfg).unwrap());
    let journeys = bench_journeys::packs::pack("agent-sessions")
        .unwrap()
        .unwrap();
    let cancel = Cancel::new();
    println!("journey                      mode        n   fail  p50 ms");
    for j in &journeys {
        let r = run_latency(j.as_ref(), &env, iterations, 3, &cancel).await;
        println!(
            "{:28} latency   {:4} {:5} {:7.1}",
            j.name(),
            r.n_success(),
            r.n_failures(),
            p50(&r.latencies_ms)
        );
        assert_eq!(r.setup_failure, None, "{}", j.name());
        assert_eq!(r.n_failures(), 0, "{}: {:?}", j.name(), r.failure_examples);
        let r = run_throughput(j.as_ref(), &env, iterations, 4, 2, &cancel).await;
        println!(
            "{:28} C=4       {:4} {:5} {:7.1}  ({:.0} ops/s)",
            j.name(),
            r.n_success(),
            r.n_failures(),
            p50(&r.latencies_ms),
            r.n_success() as f64 / r.wall_s
        );
        assert_eq!(r.n_failures(), 0, "{}: {:?}", j.name(), r.failure_examples);
    }
    // Nothing piles up: the forks, comments and created sessions were deleted.
    let r = env
        .client
        .get("/v1/sessions?limit=100", None)
        .await
        .unwrap();
    let v: serde_json::Value = serde_json::from_slice(&r.body).unwrap();
    let sessions = v["data"].as_array().unwrap();
    println!("sessions left: {}", sessions.len());
    for s in sessions {
        println!(
            "  {} {:?} comments={}",
            s["id"], s["title"], s["comments_count"]
        );
    }
}
