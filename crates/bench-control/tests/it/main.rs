//! `bench serve` end to end over real HTTP on loopback: the runs API, the event stream, cancel,
//! the token, run ids, graders, Prometheus, a restart.

#![allow(clippy::unwrap_used, clippy::expect_used, missing_docs)]

mod api;
mod stream;

use std::net::SocketAddr;
use std::time::{Duration, Instant};

use bytes::Bytes;
use http_body_util::{BodyExt, Full};
use hyper::body::Incoming;

/// A fresh, empty runs directory, removed with the runs the test made in it when dropped (at
/// the end of the test, even a failed one).
pub fn runs_dir(name: &str) -> tempfile::TempDir {
    tempfile::Builder::new()
        .prefix(&format!("bench-control-{name}-"))
        .tempdir()
        .unwrap()
}

/// A running `bench serve` on a free loopback port.
pub struct Serve {
    pub addr: SocketAddr,
    stop: Option<tokio::sync::oneshot::Sender<()>>,
    task: Option<tokio::task::JoinHandle<()>>,
}

impl Serve {
    pub async fn start(cfg: bench_control::ServeConfig) -> Serve {
        let server = bench_control::Server::bind(bench_control::ServeConfig {
            bind: "127.0.0.1:0".parse().unwrap(),
            ..cfg
        })
        .await
        .unwrap();
        let addr = server.local_addr();
        let (tx, rx) = tokio::sync::oneshot::channel::<()>();
        let task = tokio::spawn(server.run(async {
            let _ = rx.await;
        }));
        Serve {
            addr,
            stop: Some(tx),
            task: Some(task),
        }
    }

    pub async fn with_dir(dir: &std::path::Path) -> Serve {
        Serve::start(bench_control::ServeConfig {
            runs_dir: dir.to_owned(),
            ..Default::default()
        })
        .await
    }

    /// Stops it (the active run is cancelled and finalized).
    pub async fn stop(mut self) {
        if let Some(tx) = self.stop.take() {
            let _ = tx.send(());
        }
        if let Some(t) = self.task.take() {
            t.await.unwrap();
        }
    }

    /// One request; the whole answer.
    pub async fn call(
        &self,
        method: &str,
        path: &str,
        headers: &[(&str, &str)],
        body: &str,
    ) -> (u16, http::HeaderMap, Bytes) {
        let resp = self.open(method, path, headers, body).await;
        let status = resp.status().as_u16();
        let h = resp.headers().clone();
        let body = resp.into_body().collect().await.unwrap().to_bytes();
        (status, h, body)
    }

    /// A JSON request; status and JSON answer.
    pub async fn json(&self, method: &str, path: &str, body: &str) -> (u16, serde_json::Value) {
        let (s, _, b) = self.call(method, path, &[], body).await;
        let v = if b.is_empty() {
            serde_json::Value::Null
        } else {
            serde_json::from_slice(&b)
                .unwrap_or_else(|e| panic!("{method} {path}: not JSON ({e}): {b:?}"))
        };
        (s, v)
    }

    /// One request; the response with its body still streaming.
    pub async fn open(
        &self,
        method: &str,
        path: &str,
        headers: &[(&str, &str)],
        body: &str,
    ) -> hyper::Response<Incoming> {
        let stream = tokio::net::TcpStream::connect(self.addr).await.unwrap();
        let (mut send, conn) =
            hyper::client::conn::http1::handshake(hyper_util::rt::TokioIo::new(stream))
                .await
                .unwrap();
        tokio::spawn(conn);
        let mut req = hyper::Request::builder()
            .method(method)
            .uri(path)
            .header("host", self.addr.to_string());
        for (k, v) in headers {
            req = req.header(*k, *v);
        }
        let req = req.body(Full::new(Bytes::from(body.to_owned()))).unwrap();
        send.send_request(req).await.unwrap()
    }

    /// Starts a run; its id.
    pub async fn start_run(&self, spec: &str) -> String {
        let (s, v) = self.json("POST", "/api/runs", spec).await;
        assert_eq!(s, 201, "{v}");
        v["id"].as_str().unwrap().to_owned()
    }

    /// Waits until the run has ended; its view.
    pub async fn until_ended(&self, id: &str) -> serde_json::Value {
        let t0 = Instant::now();
        loop {
            let (s, v) = self.json("GET", &format!("/api/runs/{id}"), "").await;
            assert_eq!(s, 200, "{v}");
            let st = v["status"].as_str().unwrap().to_owned();
            if !matches!(st.as_str(), "starting" | "running") {
                return v;
            }
            assert!(
                t0.elapsed() < Duration::from_secs(120),
                "run {id} never ended"
            );
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
    }
}

/// One SSE event as a client parses it.
#[derive(Debug, Clone)]
pub struct Sse {
    pub id: Option<u64>,
    pub data: serde_json::Value,
}

/// Parses `text/event-stream` text (complete events only) and the comment lines.
pub fn parse_sse(text: &str) -> (Vec<Sse>, usize) {
    let mut out = Vec::new();
    let mut comments = 0;
    for block in text.split("\n\n") {
        let mut id = None;
        let mut data = None;
        for line in block.lines() {
            if let Some(v) = line.strip_prefix("id: ") {
                id = Some(v.parse().unwrap());
            } else if let Some(v) = line.strip_prefix("data: ") {
                data = Some(serde_json::from_str(v).unwrap());
            } else if line.starts_with(':') {
                comments += 1;
            }
        }
        if let Some(data) = data {
            out.push(Sse { id, data });
        }
    }
    (out, comments)
}

/// 8 sessions of 4 turns at C = 2 against the embedded simulator, 30 ms + 7 × 10 ms a turn:
/// about 1.6 s.
pub const SHORT: &str = r#"{
    "plan": {"dataset": {"random": {"turns": 4, "output_len": 8}}, "num_sessions": 8, "tokenizer": "chars"},
    "load": {"closed": {"concurrency": 2}},
    "target": {"embedded": {"latency": {"mode": "fixed", "ttft": "30ms", "itl": "10ms"}}}
}"#;

/// 40 sessions of 6 turns at C = 2, 50 ms + 15 × 20 ms a turn: about 40 s unless cancelled.
pub const LONG: &str = r#"{
    "plan": {"dataset": {"random": {"turns": 6, "output_len": 16}}, "num_sessions": 40, "tokenizer": "chars"},
    "load": {"closed": {"concurrency": 2}},
    "target": {"embedded": {"latency": {"mode": "fixed", "ttft": "50ms", "itl": "20ms"}}}
}"#;
