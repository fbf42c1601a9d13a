//! Integration tests: a real simulator on loopback, driven by a minimal hyper client.
#![allow(clippy::unwrap_used)]

use std::net::SocketAddr;
use std::time::Duration;

use anyhow::{Context, Result, bail};
use bench_sim::{Flavor, LatencyMode, SimConfig, SimServer};
use bytes::Bytes;
use http::{HeaderMap, Method, Request, StatusCode};
use http_body_util::{BodyExt, Full};
use hyper::client::conn::http1::SendRequest;
use hyper_util::rt::TokioIo;
use serde_json::{Value, json};
use tokio::net::TcpStream;
use tokio::task::JoinHandle;
use tokio::time::Instant;

mod endpoints;
mod faults;
mod hold;

/// One HTTP/1.1 keep-alive connection.
struct Client {
    addr: SocketAddr,
    sender: SendRequest<Full<Bytes>>,
    conn: JoinHandle<()>,
}

struct Reply {
    status: StatusCode,
    headers: HeaderMap,
    body: Bytes,
}

impl Reply {
    fn json(&self) -> Value {
        serde_json::from_slice(&self.body).unwrap()
    }
}

/// A streamed reply: each SSE event with the instant it was complete.
struct Streamed {
    status: StatusCode,
    sent: Instant,
    events: Vec<(Instant, String)>,
}

impl Streamed {
    fn chunks(&self) -> Vec<Value> {
        self.events
            .iter()
            .filter(|(_, e)| e != "[DONE]")
            .map(|(_, e)| serde_json::from_str(e).unwrap())
            .collect()
    }

    /// Instants of the events carrying non-empty content.
    fn content_times(&self) -> Vec<Instant> {
        self.events
            .iter()
            .filter(|(_, e)| e != "[DONE]")
            .filter(|(_, e)| {
                let v: Value = serde_json::from_str(e).unwrap();
                v["choices"][0]["delta"]["content"]
                    .as_str()
                    .is_some_and(|c| !c.is_empty())
            })
            .map(|(t, _)| *t)
            .collect()
    }

    fn content(&self) -> String {
        self.chunks()
            .iter()
            .filter_map(|c| {
                c["choices"][0]["delta"]["content"]
                    .as_str()
                    .map(str::to_owned)
            })
            .collect()
    }

    fn usage(&self) -> Value {
        self.chunks()
            .into_iter()
            .find(|c| c.get("usage").is_some())
            .map(|c| c["usage"].clone())
            .unwrap_or(Value::Null)
    }

    fn ttft_ms(&self) -> f64 {
        ms(self.content_times()[0] - self.sent)
    }

    /// Mean gap between content events after the first.
    fn tpot_ms(&self) -> f64 {
        let t = self.content_times();
        ms(t[t.len() - 1] - t[0]) / (t.len() - 1) as f64
    }
}

fn ms(d: Duration) -> f64 {
    d.as_secs_f64() * 1000.0
}

impl Client {
    async fn connect(addr: SocketAddr) -> Result<Self> {
        let stream = TcpStream::connect(addr).await?;
        stream.set_nodelay(true)?;
        let (sender, conn) = hyper::client::conn::http1::handshake(TokioIo::new(stream)).await?;
        let conn = tokio::spawn(async move {
            let _ = conn.await;
        });
        Ok(Self { addr, sender, conn })
    }

    fn request(&self, method: Method, path: &str, body: Option<&Value>) -> Request<Full<Bytes>> {
        let body = body.map_or_else(Bytes::new, |b| Bytes::from(b.to_string()));
        Request::builder()
            .method(method)
            .uri(path)
            .header("host", self.addr.to_string())
            .header("content-type", "application/json")
            .header("x-session-id", "s-1")
            .body(Full::new(body))
            .unwrap()
    }

    async fn send(&mut self, req: Request<Full<Bytes>>) -> Result<Reply> {
        self.sender.ready().await?;
        let resp = self.sender.send_request(req).await?;
        let (parts, body) = resp.into_parts();
        let body = body.collect().await?.to_bytes();
        Ok(Reply {
            status: parts.status,
            headers: parts.headers,
            body,
        })
    }

    async fn get(&mut self, path: &str) -> Result<Reply> {
        let req = self.request(Method::GET, path, None);
        self.send(req).await
    }

    async fn post(&mut self, path: &str, body: &Value) -> Result<Reply> {
        let req = self.request(Method::POST, path, Some(body));
        self.send(req).await
    }

    /// Sends a streaming request and reads every event; stops after `stop_after` content
    /// events when given (leaving the body unread).
    async fn stream(&mut self, body: &Value, stop_after: Option<usize>) -> Result<Streamed> {
        let req = self.request(Method::POST, "/v1/chat/completions", Some(body));
        self.sender.ready().await?;
        let sent = Instant::now();
        let resp = self.sender.send_request(req).await?;
        let status = resp.status();
        let mut body = resp.into_body();
        let mut pending = Vec::new();
        let mut events = Vec::new();
        let mut content_events = 0;
        while let Some(frame) = body.frame().await {
            let frame = frame?;
            let Ok(data) = frame.into_data() else {
                continue;
            };
            let now = Instant::now();
            pending.extend_from_slice(&data);
            while let Some(pos) = pending.windows(2).position(|w| w == b"\n\n") {
                let event: Vec<u8> = pending.drain(..pos + 2).collect();
                let text = std::str::from_utf8(&event)?.trim_end();
                if text.starts_with(':') {
                    // An SSE comment (a held request's heartbeat).
                    continue;
                }
                let Some(payload) = text.strip_prefix("data: ") else {
                    bail!("event without data prefix: {text:?}");
                };
                if payload.contains("\"content\":\"") && !payload.contains("\"role\"") {
                    content_events += 1;
                }
                events.push((now, payload.to_owned()));
            }
            if stop_after.is_some_and(|n| content_events >= n) {
                return Ok(Streamed {
                    status,
                    sent,
                    events,
                });
            }
        }
        if !pending.is_empty() {
            bail!("trailing bytes without event terminator");
        }
        Ok(Streamed {
            status,
            sent,
            events,
        })
    }
}

fn chat(content: &str, max_tokens: u32, stream: bool, ignore_eos: bool) -> Value {
    json!({
        "model": "bench-sim",
        "messages": [{"role": "user", "content": content}],
        "max_completion_tokens": max_tokens,
        "stream": stream,
        "stream_options": {"include_usage": true},
        "ignore_eos": ignore_eos,
        "temperature": 0.0,
    })
}

/// A fresh, empty JSON-lines file (`bench-sim-{name}-….jsonl`) for a log the simulator writes,
/// removed when the returned handle drops: at the end of the test, even a failed one.
fn temp_jsonl(name: &str) -> tempfile::NamedTempFile {
    tempfile::Builder::new()
        .prefix(&format!("bench-sim-{name}-"))
        .suffix(".jsonl")
        .tempfile()
        .expect("a temporary file")
}

fn instant() -> SimConfig {
    SimConfig {
        mode: LatencyMode::Instant,
        ..SimConfig::default()
    }
}

async fn start(config: SimConfig) -> Result<(SimServer, Client)> {
    let sim = SimServer::start(config).await?;
    let client = Client::connect(sim.local_addr()).await?;
    Ok((sim, client))
}

/// Polls `cond` on the simulator's stats every 2 ms until it holds or `limit` passes.
async fn eventually(
    sim: &SimServer,
    limit: Duration,
    cond: impl Fn(&bench_sim::SimStats) -> bool,
) -> bool {
    let deadline = Instant::now() + limit;
    loop {
        if cond(&sim.stats()) {
            return true;
        }
        if Instant::now() > deadline {
            return false;
        }
        tokio::time::sleep(Duration::from_millis(2)).await;
    }
}

#[tokio::test]
async fn streaming_shape_with_ignore_eos() -> Result<()> {
    let (sim, mut c) = start(instant()).await?;
    let s = c.stream(&chat("hello there", 20, true, true), None).await?;
    assert_eq!(s.status, StatusCode::OK);
    assert_eq!(s.events.last().map(|e| e.1.as_str()), Some("[DONE]"));
    let chunks = s.chunks();
    assert_eq!(chunks[0]["choices"][0]["delta"]["role"], "assistant");
    assert_eq!(chunks[0]["choices"][0]["delta"]["content"], "");
    for ch in &chunks {
        assert_eq!(ch["object"], "chat.completion.chunk");
        assert!(ch["id"].as_str().unwrap().starts_with("chatcmpl-"));
        assert_eq!(ch["model"], "bench-sim");
        assert!(ch["created"].as_u64().unwrap() > 1_600_000_000);
    }
    let content: Vec<&Value> = chunks[1..chunks.len() - 1].iter().collect();
    assert_eq!(content.len(), 20, "one event per token");
    assert_eq!(s.content_times().len(), 20);
    for (i, ch) in content.iter().enumerate() {
        let fin = &ch["choices"][0]["finish_reason"];
        if i == 19 {
            assert_eq!(fin, "length");
        } else {
            assert!(fin.is_null());
        }
    }
    let usage_chunk = chunks.last().unwrap();
    assert_eq!(usage_chunk["choices"], json!([]));
    let u = &usage_chunk["usage"];
    assert_eq!(u["completion_tokens"], 20);
    // "<|user|>\nhello there\n" = 21 bytes = 6 tokens at 4 bytes per token.
    assert_eq!(u["prompt_tokens"], 6);
    assert_eq!(u["total_tokens"], 26);
    assert_eq!(u["prompt_tokens_details"]["cached_tokens"], 0);
    assert!(usage_chunk.get("sglext").is_none());
    assert_eq!(sim.stats().completion_tokens_total, 20);
    sim.shutdown().await;
    Ok(())
}

/// An instant answer too long for one 32 KiB frame is streamed in frames by its own task (the
/// short ones go out with the response head): every token still arrives once, in order.
#[tokio::test]
async fn a_long_instant_answer_is_streamed_whole() -> Result<()> {
    let (sim, mut c) = start(instant()).await?;
    let s = c
        .stream(&chat("hello there", 1000, true, true), None)
        .await?;
    assert_eq!(s.status, StatusCode::OK);
    assert_eq!(s.events.last().map(|e| e.1.as_str()), Some("[DONE]"));
    let bytes: usize = s.events.iter().map(|e| e.1.len()).sum();
    assert!(bytes > 3 * 32 * 1024, "{bytes} bytes: more than one frame");
    let chunks = s.chunks();
    let content = &chunks[1..chunks.len() - 1];
    assert_eq!(content.len(), 1000, "one event per token");
    assert!(
        content[..999]
            .iter()
            .all(|ch| ch["choices"][0]["finish_reason"].is_null())
    );
    assert_eq!(content[999]["choices"][0]["finish_reason"], "length");
    let ids: std::collections::BTreeSet<&str> =
        chunks.iter().map(|ch| ch["id"].as_str().unwrap()).collect();
    assert_eq!(ids.len(), 1, "one completion");
    assert_eq!(chunks.last().unwrap()["usage"]["completion_tokens"], 1000);
    assert_eq!(sim.stats().completion_tokens_total, 1000);
    assert_eq!(sim.stats().finished_total, 1);
    sim.shutdown().await;
    Ok(())
}

#[tokio::test]
async fn early_stop_is_seeded_and_reproducible() -> Result<()> {
    let run = || async {
        let (sim, mut c) = start(SimConfig {
            seed: 42,
            ..instant()
        })
        .await?;
        let mut out = Vec::new();
        for _ in 0..4 {
            let s = c
                .stream(&chat("tell me a story", 300, true, false), None)
                .await?;
            let chunks = s.chunks();
            let last = &chunks[chunks.len() - 2];
            out.push((
                s.content(),
                s.usage()["completion_tokens"].as_u64().unwrap(),
                last["choices"][0]["finish_reason"]
                    .as_str()
                    .unwrap()
                    .to_owned(),
            ));
        }
        sim.shutdown().await;
        anyhow::Ok(out)
    };
    let a = run().await?;
    let b = run().await?;
    assert_eq!(a, b, "same seed, same outputs");
    assert!(a.iter().any(|(_, n, fin)| *n < 300 && fin == "stop"));
    for (text, n, fin) in &a {
        assert_eq!(text.split_whitespace().count() as u64, *n);
        assert_eq!(fin == "length", *n == 300);
    }
    let (sim, mut c) = start(SimConfig {
        seed: 43,
        ..instant()
    })
    .await?;
    let other = c
        .stream(&chat("tell me a story", 300, true, false), None)
        .await?;
    assert_ne!(other.content(), a[0].0, "another seed, another output");
    sim.shutdown().await;
    Ok(())
}

#[tokio::test]
async fn non_streaming_response() -> Result<()> {
    let (sim, mut c) = start(SimConfig {
        worker_id: Some("w7".to_owned()),
        ..instant()
    })
    .await?;
    let r = c
        .post(
            "/v1/chat/completions",
            &json!({"messages": [{"role": "user", "content": [{"type": "text", "text": "hi"}]}],
                    "max_tokens": 9, "ignore_eos": true}),
        )
        .await?;
    assert_eq!(r.status, StatusCode::OK);
    assert_eq!(r.headers["x-worker-id"], "w7");
    let v = r.json();
    assert_eq!(v["object"], "chat.completion");
    assert_eq!(v["choices"][0]["message"]["role"], "assistant");
    assert_eq!(v["choices"][0]["finish_reason"], "length");
    let text = v["choices"][0]["message"]["content"].as_str().unwrap();
    assert_eq!(text.split_whitespace().count(), 9);
    assert_eq!(v["usage"]["completion_tokens"], 9);
    // No limit given: default_max_tokens applies.
    let r = c
        .post(
            "/v1/chat/completions",
            &json!({"messages": [{"role": "user", "content": "x"}], "ignore_eos": true}),
        )
        .await?;
    assert_eq!(r.json()["usage"]["completion_tokens"], 256);
    sim.shutdown().await;
    Ok(())
}

#[tokio::test]
async fn prefix_cache_hits_and_flush() -> Result<()> {
    let (sim, mut c) = start(instant()).await?;
    // 9 + 990 + 1 = 1000 bytes = 250 tokens; 15 full blocks of 16 tokens (64 bytes).
    let content = "a".repeat(990);
    let body = chat(&content, 4, false, true);
    let first = c.post("/v1/chat/completions", &body).await?.json();
    assert_eq!(first["usage"]["prompt_tokens"], 250);
    assert_eq!(first["usage"]["prompt_tokens_details"]["cached_tokens"], 0);
    let second = c.post("/v1/chat/completions", &body).await?.json();
    assert_eq!(
        second["usage"]["prompt_tokens_details"]["cached_tokens"],
        240
    );
    // A conversation extending the same prefix hits the same blocks.
    let longer = json!({
        "messages": [{"role": "user", "content": content}, {"role": "assistant", "content": "ok"},
                     {"role": "user", "content": "more"}],
        "max_tokens": 2,
    });
    let third = c.post("/v1/chat/completions", &longer).await?.json();
    assert_eq!(
        third["usage"]["prompt_tokens_details"]["cached_tokens"],
        240
    );
    assert_eq!(sim.stats().cached_tokens_total, 480);

    let r = c.post("/flush_cache", &json!({})).await?;
    assert_eq!(r.status, StatusCode::OK);
    let after = c.post("/v1/chat/completions", &body).await?.json();
    assert_eq!(after["usage"]["prompt_tokens_details"]["cached_tokens"], 0);
    let r = c.post("/reset_prefix_cache", &json!({})).await?;
    assert_eq!(r.status, StatusCode::OK);
    let after = c.post("/v1/chat/completions", &body).await?.json();
    assert_eq!(after["usage"]["prompt_tokens_details"]["cached_tokens"], 0);
    assert_eq!(sim.stats().kv_used_blocks, 0);
    sim.shutdown().await;
    Ok(())
}

#[tokio::test]
async fn models_and_errors() -> Result<()> {
    let (sim, mut c) = start(SimConfig {
        max_model_len: 1000,
        model: "sim-8b".to_owned(),
        ..instant()
    })
    .await?;
    let m = c.get("/v1/models").await?;
    assert_eq!(m.status, StatusCode::OK);
    let m = m.json();
    assert_eq!(m["object"], "list");
    assert_eq!(m["data"][0]["id"], "sim-8b");
    assert_eq!(m["data"][0]["max_model_len"], 1000);
    assert_eq!(m["data"][0]["token_counter"], "bytes/4");
    assert_eq!(c.get("/health").await?.status, StatusCode::OK);

    let too_long = chat(&"a".repeat(990), 800, true, true);
    let r = c.post("/v1/chat/completions", &too_long).await?;
    assert_eq!(r.status, StatusCode::BAD_REQUEST);
    let msg = r.json()["error"]["message"].as_str().unwrap().to_owned();
    assert!(
        msg.contains("maximum context length is 1000 tokens")
            && msg
                .contains("you requested 1050 tokens (250 in the messages, 800 in the completion)"),
        "{msg}"
    );
    assert_eq!(r.json()["error"]["code"], 400);

    let req = Request::builder()
        .method(Method::POST)
        .uri("/v1/chat/completions")
        .header("host", "x")
        .body(Full::new(Bytes::from_static(b"{not json")))?;
    let r = c.send(req).await?;
    assert_eq!(r.status, StatusCode::BAD_REQUEST);
    assert!(r.json()["error"]["message"].is_string());
    let r = c
        .post("/v1/chat/completions", &json!({"model": "x"}))
        .await?;
    assert_eq!(r.status, StatusCode::BAD_REQUEST);
    let r = c.get("/nope").await?;
    assert_eq!(r.status, StatusCode::NOT_FOUND);
    assert_eq!(r.json()["error"]["code"], 404);
    let r = c.get("/v1/chat/completions").await?;
    assert_eq!(r.status, StatusCode::METHOD_NOT_ALLOWED);
    // The connection survived every error.
    assert_eq!(c.get("/health").await?.status, StatusCode::OK);
    assert_eq!(sim.stats().errors_total, 3);
    sim.shutdown().await;
    Ok(())
}

/// Parses Prometheus text: every non-comment line is `name{labels} value`.
fn parse_prometheus(text: &str) -> Result<Vec<(String, f64)>> {
    let mut out = Vec::new();
    for line in text.lines() {
        if line.is_empty() {
            continue;
        }
        if let Some(rest) = line.strip_prefix('#') {
            if !(rest.starts_with(" HELP ") || rest.starts_with(" TYPE ")) {
                bail!("bad comment line {line:?}");
            }
            continue;
        }
        let (series, value) = line.rsplit_once(' ').context("no value")?;
        let value: f64 = value
            .parse()
            .with_context(|| format!("bad value in {line:?}"))?;
        let name_end = series.find('{').unwrap_or(series.len());
        if !series[..name_end]
            .chars()
            .all(|ch| ch.is_ascii_alphanumeric() || ch == '_' || ch == ':')
        {
            bail!("bad metric name in {line:?}");
        }
        out.push((series.to_owned(), value));
    }
    Ok(out)
}

fn metric(samples: &[(String, f64)], prefix: &str) -> f64 {
    samples
        .iter()
        .find(|(s, _)| s.starts_with(prefix))
        .map_or(f64::NAN, |(_, v)| *v)
}

#[tokio::test]
async fn metrics_vllm_counters_move() -> Result<()> {
    let (sim, mut c) = start(instant()).await?;
    let r = c.get("/metrics").await?;
    assert_eq!(r.status, StatusCode::OK);
    assert!(
        r.headers["content-type"]
            .to_str()?
            .starts_with("text/plain; version=0.0.4")
    );
    let before = parse_prometheus(std::str::from_utf8(&r.body)?)?;
    assert_eq!(metric(&before, "vllm:prompt_tokens_total{"), 0.0);
    assert_eq!(metric(&before, "vllm:num_requests_running{"), 0.0);
    assert_eq!(metric(&before, "vllm:cache_config_info{"), 1.0);
    let body = chat(&"b".repeat(990), 5, true, true);
    c.stream(&body, None).await?;
    c.stream(&body, None).await?;
    let after = parse_prometheus(std::str::from_utf8(&c.get("/metrics").await?.body)?)?;
    assert_eq!(metric(&after, "vllm:prompt_tokens_total{"), 500.0);
    assert_eq!(metric(&after, "vllm:generation_tokens_total{"), 10.0);
    assert_eq!(metric(&after, "vllm:prefix_cache_queries_total{"), 500.0);
    assert_eq!(metric(&after, "vllm:prefix_cache_hits_total{"), 240.0);
    assert_eq!(
        metric(
            &after,
            "vllm:request_success_total{model_name=\"bench-sim\",engine=\"0\",finished_reason=\"length\"}"
        ),
        2.0
    );
    assert_eq!(
        metric(&after, "vllm:time_to_first_token_seconds_count{"),
        2.0
    );
    assert_eq!(
        metric(&after, "vllm:e2e_request_latency_seconds_count{"),
        2.0
    );
    let usage = metric(&after, "vllm:kv_cache_usage_perc{");
    assert!((0.0..=1.0).contains(&usage));
    let text = String::from_utf8(c.get("/metrics").await?.body.to_vec())?;
    assert!(text.contains("# TYPE vllm:prompt_tokens_total counter"));
    assert!(text.contains("block_size=\"16\""));
    assert!(text.contains("num_gpu_blocks=\"16384\""));
    sim.shutdown().await;
    Ok(())
}

#[tokio::test]
async fn sglang_flavour() -> Result<()> {
    let (sim, mut c) = start(SimConfig {
        flavor: Flavor::Sglang,
        ..instant()
    })
    .await?;
    let body = chat(&"c".repeat(990), 3, true, true);
    c.stream(&body, None).await?;
    let s = c.stream(&body, None).await?;
    let usage_chunk = s.chunks().into_iter().last().unwrap();
    assert_eq!(
        usage_chunk["sglext"]["cached_tokens_details"]["device"],
        240
    );
    assert_eq!(usage_chunk["sglext"]["cached_tokens_details"]["host"], 0);
    let r = c
        .post(
            "/v1/chat/completions",
            &chat(&"c".repeat(990), 3, false, true),
        )
        .await?;
    assert_eq!(r.json()["sglext"]["cached_tokens_details"]["device"], 240);
    let m = parse_prometheus(std::str::from_utf8(&c.get("/metrics").await?.body)?)?;
    assert_eq!(metric(&m, "sglang:prompt_tokens_total{"), 750.0);
    assert_eq!(metric(&m, "sglang:generation_tokens_total{"), 9.0);
    assert_eq!(metric(&m, "sglang:cached_tokens_total{"), 480.0);
    assert_eq!(metric(&m, "sglang:max_total_num_tokens{"), 262_144.0);
    assert_eq!(metric(&m, "sglang:num_running_reqs{"), 0.0);
    assert!((metric(&m, "sglang:cache_hit_rate{") - 480.0 / 750.0).abs() < 1e-9);
    assert_eq!(metric(&m, "sglang:kv_evictable_tokens{"), 15.0 * 16.0);
    assert_eq!(metric(&m, "sglang:time_to_first_token_seconds_count{"), 3.0);
    sim.shutdown().await;
    Ok(())
}

#[tokio::test]
async fn request_log_lines() -> Result<()> {
    let log = temp_jsonl("log");
    let path = log.path().to_path_buf();
    let (sim, mut c) = start(SimConfig {
        request_log: Some(path.clone()),
        max_model_len: 100,
        ..instant()
    })
    .await?;
    let convo = json!({
        "messages": [{"role": "user", "content": "q1"}, {"role": "assistant", "content": "a1"},
                     {"role": "user", "content": "q2"}],
        "max_tokens": 3, "ignore_eos": true, "stream": true,
    });
    c.stream(&convo, None).await?;
    let r = c
        .post("/v1/chat/completions", &chat("x", 500, false, true))
        .await?;
    assert_eq!(r.status, StatusCode::BAD_REQUEST);
    sim.shutdown().await;
    let text = std::fs::read_to_string(&path)?;
    let lines: Vec<Value> = text
        .lines()
        .map(serde_json::from_str)
        .collect::<Result<_, _>>()?;
    assert_eq!(lines.len(), 2);
    let ok = &lines[0];
    assert_eq!(ok["session"], "s-1");
    assert_eq!(ok["turn_index"], 1);
    assert_eq!(ok["completion_tokens"], 3);
    assert_eq!(ok["status"], 200);
    assert_eq!(ok["stream"], true);
    assert_eq!(ok["finish"], "length");
    assert!(ok["prompt_tokens"].as_u64().unwrap() > 0);
    assert_eq!(ok["cached_tokens"], 0);
    assert!(ok["recv_ms"].as_f64().unwrap() >= 0.0);
    let recv_utc = ok["recv_utc"].as_str().unwrap();
    assert!(
        recv_utc.len() >= 20 && recv_utc.as_bytes()[10] == b'T' && recv_utc.ends_with('Z'),
        "{recv_utc}"
    );
    let err = &lines[1];
    assert_eq!(err["status"], 400);
    assert_eq!(err["finish"], "error");
    assert_eq!(err["stream"], false);
    assert!(
        err.get("ttft_ms").is_none(),
        "a rejected request made no token: {err}"
    );
    Ok(())
}

/// The request log's `ttft_ms` is the server's own time to first token: at least the
/// configured latency, and no more than what a client on the same machine measures (which adds
/// its send and receive path); the gap between the two is what the client and the loopback add.
#[tokio::test]
async fn request_log_ttft_is_the_servers_time_to_first_token() -> Result<()> {
    let log = temp_jsonl("ttft");
    let path = log.path().to_path_buf();
    let (sim, mut c) = start(SimConfig {
        request_log: Some(path.clone()),
        mode: LatencyMode::Fixed {
            ttft: Duration::from_millis(40),
            itl: Duration::from_millis(5),
        },
        ..SimConfig::default()
    })
    .await?;
    let mut client_ttfts = Vec::new();
    for _ in 0..3 {
        client_ttfts.push(c.stream(&chat("hi", 3, true, true), None).await?.ttft_ms());
    }
    sim.shutdown().await;
    let text = std::fs::read_to_string(&path)?;
    let server: Vec<f64> = text
        .lines()
        .map(|l| {
            let v: Value = serde_json::from_str(l)?;
            v["ttft_ms"]
                .as_f64()
                .ok_or_else(|| anyhow::anyhow!("no ttft_ms in {l}"))
        })
        .collect::<Result<_>>()?;
    assert_eq!(server.len(), 3, "{text}");
    for (s, c) in server.iter().zip(&client_ttfts) {
        assert!(*s >= 40.0, "server ttft {s} ms under the configured 40 ms");
        assert!(s <= c, "server ttft {s} ms over the client's {c} ms");
    }
    Ok(())
}

#[tokio::test]
async fn fixed_mode_timing() -> Result<()> {
    let ttft = Duration::from_millis(100);
    let itl = Duration::from_millis(20);
    let (sim, mut c) = start(SimConfig {
        mode: LatencyMode::Fixed { ttft, itl },
        ..SimConfig::default()
    })
    .await?;
    let s = c.stream(&chat("hi", 6, true, true), None).await?;
    let measured_ttft = s.ttft_ms();
    let measured_itl = s.tpot_ms();
    assert!(
        (100.0..150.0).contains(&measured_ttft),
        "ttft {measured_ttft} ms for configured 100 ms"
    );
    assert!(
        (19.0..45.0).contains(&measured_itl),
        "itl {measured_itl} ms for configured 20 ms"
    );
    assert_eq!(s.content_times().len(), 6);
    // Load does not change fixed delays: 4 concurrent requests each take ~100 ms to the first token.
    let addr = sim.local_addr();
    let tasks: Vec<_> = (0..4)
        .map(|_| {
            tokio::spawn(async move {
                let mut c = Client::connect(addr).await?;
                c.stream(&chat("hi", 3, true, true), None).await
            })
        })
        .collect();
    for t in tasks {
        let s = t.await??;
        assert!(
            (100.0..200.0).contains(&s.ttft_ms()),
            "ttft {}",
            s.ttft_ms()
        );
    }
    sim.shutdown().await;
    Ok(())
}

#[tokio::test]
async fn model_mode_batching_slows_decode() -> Result<()> {
    let cfg = SimConfig {
        decode_step_base_ms: 5.0,
        decode_step_ms_per_seq: 5.0,
        prefill_ms_per_token: 0.1,
        ..SimConfig::default()
    };
    let expected_tpot_1 = cfg.expected_tpot_ms(1);
    let expected_ttft = cfg.expected_ttft_ms(6, 0);
    let (sim, mut c) = start(cfg).await?;
    let solo = c.stream(&chat("hello there", 20, true, true), None).await?;
    let tpot_1 = solo.tpot_ms();
    assert!(
        tpot_1 >= expected_tpot_1 * 0.8 && tpot_1 < expected_tpot_1 * 2.0,
        "tpot {tpot_1} ms, model says {expected_tpot_1} ms"
    );
    assert!(
        solo.ttft_ms() >= expected_ttft * 0.8 && solo.ttft_ms() < expected_ttft + 50.0,
        "ttft {} ms, model says {expected_ttft} ms",
        solo.ttft_ms()
    );
    let addr = sim.local_addr();
    let tasks: Vec<_> = (0..8)
        .map(|i| {
            tokio::spawn(async move {
                let mut c = Client::connect(addr).await?;
                c.stream(&chat(&format!("prompt {i}"), 20, true, true), None)
                    .await
            })
        })
        .collect();
    let mut tpots = Vec::new();
    for t in tasks {
        tpots.push(t.await??.tpot_ms());
    }
    let mean_8 = tpots.iter().sum::<f64>() / tpots.len() as f64;
    eprintln!(
        "model mode: ttft {:.1} ms (model {expected_ttft:.1}), tpot alone {tpot_1:.2} ms \
         (model {expected_tpot_1:.2}), tpot with 8 {mean_8:.2} ms",
        solo.ttft_ms()
    );
    // Model: 10 ms alone, 45 ms with 8 decoding together.
    assert!(
        mean_8 > 2.0 * tpot_1,
        "tpot with 8 concurrent {mean_8} ms vs alone {tpot_1} ms"
    );
    sim.shutdown().await;
    Ok(())
}

#[tokio::test]
async fn small_kv_capacity_queues_requests() -> Result<()> {
    // 8 blocks of 16 tokens; each request needs ceil((6 + 60) / 16) = 5 blocks: one at a time.
    let (sim, _c) = start(SimConfig {
        kv_capacity_tokens: 128,
        decode_step_base_ms: 2.0,
        ..SimConfig::default()
    })
    .await?;
    let addr = sim.local_addr();
    let tasks: Vec<_> = (0..3)
        .map(|i| {
            tokio::spawn(async move {
                let mut c = Client::connect(addr).await?;
                c.stream(&chat(&format!("hello {i:05}"), 60, true, true), None)
                    .await
            })
        })
        .collect();
    let saw_waiting = eventually(&sim, Duration::from_secs(2), |s| s.waiting > 0).await;
    assert!(saw_waiting, "requests should queue behind the KV capacity");
    assert!(sim.stats().running <= 1);
    let mut ttfts = Vec::new();
    for t in tasks {
        let s = t.await??;
        assert_eq!(s.content_times().len(), 60);
        ttfts.push(s.ttft_ms());
    }
    ttfts.sort_by(f64::total_cmp);
    eprintln!("kv-limited ttfts: {ttfts:?}");
    // The last admitted waited for two whole generations (~2 × 60 steps of 2 ms).
    assert!(ttfts[2] > 150.0, "ttfts {ttfts:?}");
    let st = sim.stats();
    assert_eq!((st.running, st.waiting, st.kv_used_blocks), (0, 0, 0));
    sim.shutdown().await;
    Ok(())
}

#[tokio::test]
async fn client_disconnect_frees_the_slot() -> Result<()> {
    let (sim, mut c) = start(SimConfig {
        decode_step_base_ms: 2.0,
        ..SimConfig::default()
    })
    .await?;
    let s = c
        .stream(&chat("a long story", 10_000, true, true), Some(3))
        .await?;
    assert_eq!(s.status, StatusCode::OK);
    assert_eq!(sim.stats().running, 1);
    assert!(sim.stats().kv_used_blocks > 0);
    // Drop the connection mid-stream.
    c.conn.abort();
    drop(c);
    let freed = eventually(&sim, Duration::from_secs(3), |s| {
        s.running == 0 && s.kv_used_blocks == 0 && s.aborted_total == 1
    })
    .await;
    assert!(freed, "stats after disconnect: {:?}", sim.stats());
    assert!(sim.stats().completion_tokens_total < 10_000);
    sim.shutdown().await;
    Ok(())
}

/// The simulator's `SHUTDOWN_GRACE` (private): how long `shutdown` waits for busy connections
/// before cutting them. An idle keep-alive connection must not make it wait that long.
const SHUTDOWN_GRACE: Duration = Duration::from_secs(2);

#[tokio::test]
async fn shutdown_is_prompt_with_idle_keep_alive_connection() -> Result<()> {
    let (sim, mut c) = start(SimConfig::default()).await?;
    assert_eq!(c.get("/health").await?.status, StatusCode::OK);
    let started = Instant::now();
    // The timeout only turns a hang into a failure; it is far above any real duration.
    tokio::time::timeout(5 * SHUTDOWN_GRACE, sim.shutdown())
        .await
        .context("shutdown hung on an idle keep-alive connection")?;
    let took = started.elapsed();
    // Waiting out the grace period takes at least SHUTDOWN_GRACE, however loaded the machine;
    // closing the idle connection at once takes milliseconds. This bound tells them apart
    // without bounding the prompt case tightly.
    assert!(
        took < SHUTDOWN_GRACE,
        "shutdown took {took:?}: it waited out the {SHUTDOWN_GRACE:?} grace period for an \
         idle connection"
    );
    // The server closed the idle connection (the client did nothing to end it).
    tokio::time::timeout(5 * SHUTDOWN_GRACE, c.conn)
        .await
        .context("connection still open after shutdown")??;
    Ok(())
}

#[tokio::test]
async fn shutdown_ends_streams_in_flight() -> Result<()> {
    let (sim, mut c) = start(SimConfig::default()).await?;
    let reader =
        tokio::spawn(async move { c.stream(&chat("long", 10_000, true, true), None).await });
    assert!(
        eventually(&sim, Duration::from_secs(2), |s| s.completion_tokens_total
            > 0
            || s.running == 1)
        .await
    );
    tokio::time::timeout(Duration::from_secs(3), sim.shutdown())
        .await
        .context("shutdown hung with a stream in flight")?;
    // The stream ends cleanly (the body's sender is dropped, the chunked body terminated), but
    // truncated: no finish reason, no usage chunk, no [DONE]. A hang or an error fails.
    let s = tokio::time::timeout(Duration::from_secs(3), reader)
        .await
        .context("the stream in flight did not end at shutdown")?
        .context("the reader task panicked")?
        .context("the stream in flight ended with an error instead of cleanly")?;
    assert_eq!(s.status, StatusCode::OK);
    assert!(
        !s.events.iter().any(|e| e.1 == "[DONE]"),
        "a stream cut by shutdown must not end with [DONE]"
    );
    let chunks = s.chunks();
    assert!(
        chunks
            .iter()
            .all(|ch| ch["choices"][0]["finish_reason"].is_null() && ch.get("usage").is_none()),
        "a stream cut by shutdown must not look finished: {chunks:?}"
    );
    assert!(s.content().split_whitespace().count() < 10_000);
    Ok(())
}

#[tokio::test]
async fn bind_error_is_reported() -> Result<()> {
    let sim = SimServer::start(SimConfig::default()).await?;
    let err = SimServer::start(SimConfig {
        bind: sim.local_addr(),
        ..SimConfig::default()
    })
    .await
    .unwrap_err();
    assert!(matches!(err, bench_sim::SimError::Bind { .. }), "{err}");
    assert!(err.to_string().starts_with("cannot bind"));
    sim.shutdown().await;
    Ok(())
}

#[tokio::test]
async fn disconnect_while_queued_leaves_the_queue() -> Result<()> {
    // 8 blocks; each request needs ceil((6 + 100) / 16) = 7: the second one must wait.
    let (sim, mut first) = start(SimConfig {
        kv_capacity_tokens: 128,
        decode_step_base_ms: 2.0,
        ..SimConfig::default()
    })
    .await?;
    let runner = tokio::spawn(async move {
        first
            .stream(&chat("hello 00001", 100, true, true), None)
            .await
    });
    assert!(eventually(&sim, Duration::from_secs(2), |s| s.running == 1).await);
    let mut second = Client::connect(sim.local_addr()).await?;
    let req = second.request(
        Method::POST,
        "/v1/chat/completions",
        Some(&chat("hello 00002", 100, true, true)),
    );
    second.sender.ready().await?;
    let resp = second.sender.send_request(req).await?;
    assert_eq!(resp.status(), StatusCode::OK);
    assert_eq!(sim.stats().waiting, 1);
    drop(resp);
    second.conn.abort();
    drop(second);
    let gone = eventually(&sim, Duration::from_secs(2), |s| {
        s.waiting == 0 && s.aborted_total == 1
    })
    .await;
    assert!(gone, "stats: {:?}", sim.stats());
    assert_eq!(sim.stats().running, 1, "the first request keeps running");
    let s = runner.await??;
    assert_eq!(s.content_times().len(), 100);
    sim.shutdown().await;
    Ok(())
}
