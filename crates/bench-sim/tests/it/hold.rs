//! Hold mode over real HTTP: `POST /sim/hold` stops requests before their first token,
//! `GET /sim/held` long-polls for them, `POST /sim/release` lets them go; a held client that
//! leaves is logged as aborted; `GET /sim/config`.

use std::path::Path;
use std::time::Duration;

use anyhow::{Context, Result, bail, ensure};
use bench_sim::{LatencyMode, SimConfig, SimServer};
use http::{Method, StatusCode, header};
use http_body_util::BodyExt;
use hyper::body::Incoming;
use serde_json::{Value, json};
use tokio::time::Instant;

use super::{Client, chat, eventually, instant, start, temp_jsonl};

/// Generous: these bound a hang, never a speed.
const PATIENCE: Duration = Duration::from_secs(5);

fn log_lines(path: &Path) -> Vec<Value> {
    std::fs::read_to_string(path)
        .unwrap_or_default()
        .lines()
        .map(|l| serde_json::from_str(l).unwrap())
        .collect()
}

/// A streamed response read frame by frame.
struct Stream {
    body: Incoming,
    /// Bytes read but not yet split into events.
    pending: String,
    /// SSE comments seen (`: held`).
    comments: Vec<String>,
    /// `data:` payloads seen.
    data: Vec<String>,
    ended: bool,
}

impl Stream {
    /// Sends a streamed request on `c` and returns once the status and headers are in.
    async fn open(c: &mut Client, path: &str, body: &Value) -> Result<Self> {
        let req = c.request(Method::POST, path, Some(body));
        c.sender.ready().await?;
        let resp = tokio::time::timeout(PATIENCE, c.sender.send_request(req))
            .await
            .context("no response head")??;
        ensure!(resp.status() == StatusCode::OK, "status {}", resp.status());
        ensure!(resp.headers()[header::CONTENT_TYPE] == "text/event-stream");
        Ok(Self {
            body: resp.into_body(),
            pending: String::new(),
            comments: Vec::new(),
            data: Vec::new(),
            ended: false,
        })
    }

    /// Reads one frame (or the end) and splits what is complete into events.
    async fn read_frame(&mut self) -> Result<()> {
        let frame = tokio::time::timeout(PATIENCE, self.body.frame())
            .await
            .context("no frame in time")?;
        match frame {
            None => self.ended = true,
            Some(f) => {
                if let Ok(d) = f?.into_data() {
                    self.pending.push_str(std::str::from_utf8(&d)?);
                }
            }
        }
        while let Some(pos) = self.pending.find("\n\n") {
            let event: String = self.pending.drain(..pos + 2).collect();
            for line in event.lines().filter(|l| !l.is_empty()) {
                if line.starts_with(':') {
                    self.comments.push(line.to_owned());
                } else if let Some(d) = line.strip_prefix("data: ") {
                    self.data.push(d.to_owned());
                } else if !line.starts_with("event: ") {
                    bail!("unexpected line {line:?}");
                }
            }
        }
        Ok(())
    }

    async fn read_to_end(&mut self) -> Result<()> {
        while !self.ended {
            self.read_frame().await?;
        }
        ensure!(self.pending.is_empty(), "trailing bytes {:?}", self.pending);
        Ok(())
    }

    /// Completion tokens of the chat stream's usage chunk.
    fn chat_completion_tokens(&self) -> Option<u64> {
        self.data
            .iter()
            .filter(|d| *d != "[DONE]")
            .map(|d| serde_json::from_str::<Value>(d).unwrap())
            .find_map(|v| v["usage"]["completion_tokens"].as_u64())
    }

    /// Chat chunks carrying content.
    fn chat_content_events(&self) -> usize {
        self.data
            .iter()
            .filter(|d| *d != "[DONE]")
            .map(|d| serde_json::from_str::<Value>(d).unwrap())
            .filter(|v| {
                v["choices"][0]["delta"]["content"]
                    .as_str()
                    .is_some_and(|c| !c.is_empty())
            })
            .count()
    }
}

async fn held_now(c: &mut Client, query: &str) -> Result<(StatusCode, Value)> {
    let r = tokio::time::timeout(2 * PATIENCE, c.get(&format!("/sim/held{query}")))
        .await
        .context("GET /sim/held hung")??;
    Ok((r.status, r.json()))
}

#[tokio::test]
async fn held_stream_has_headers_but_no_token_until_release() -> Result<()> {
    let tmp = temp_jsonl("hold-release");
    let log = tmp.path().to_path_buf();
    let (sim, mut ctl) = start(SimConfig {
        request_log: Some(log.clone()),
        decode_step_base_ms: 2.0,
        ..SimConfig::default()
    })
    .await?;
    let r = ctl.post("/sim/hold", &json!({})).await?;
    assert_eq!(r.status, StatusCode::OK);
    assert_eq!(r.json(), json!({"hold": true, "held": 0}));

    let mut c = Client::connect(sim.local_addr()).await?;
    let mut s = Stream::open(&mut c, "/v1/chat/completions", &chat("hi", 5, true, true)).await?;
    let (status, held) = held_now(&mut ctl, "?at_least=1").await?;
    assert_eq!(status, StatusCode::OK, "{held}");
    assert_eq!(held["hold"], true);
    assert_eq!(held["held"], 1);
    assert_eq!(held["held_total"], 1);
    let req = &held["requests"][0];
    assert_eq!(req["endpoint"], "/v1/chat/completions");
    assert_eq!(req["session"], "s-1");
    assert!(req["held_ms"].as_f64().unwrap() >= 0.0, "{held}");
    assert_eq!(sim.held(), 1);
    // A held request holds no batch slot and no KV blocks.
    let st = sim.stats();
    assert_eq!((st.running, st.waiting, st.kv_used_blocks), (0, 0, 0));

    // While held, only heartbeat comments arrive.
    while s.comments.len() < 2 {
        s.read_frame().await?;
        assert!(!s.ended, "a held stream ended");
    }
    assert!(s.data.is_empty(), "a held stream sent data: {:?}", s.data);
    assert!(s.comments.iter().all(|c| c == ": held"), "{:?}", s.comments);

    let r = ctl.post("/sim/release", &json!({})).await?;
    assert_eq!(r.status, StatusCode::OK);
    assert_eq!(r.json(), json!({"hold": false, "released": 1}));
    s.read_to_end().await?;
    assert_eq!(s.chat_content_events(), 5);
    assert_eq!(s.chat_completion_tokens(), Some(5));
    assert_eq!(s.data.last().map(String::as_str), Some("[DONE]"));

    let (status, held) = held_now(&mut ctl, "").await?;
    assert_eq!(status, StatusCode::OK);
    assert_eq!(held["hold"], false);
    assert_eq!(held["held"], 0);
    assert_eq!(held["held_total"], 1);
    assert_eq!(held["requests"], json!([]));

    // After the release a request is not held: its log line has no `held_ms`.
    let r = c
        .post("/v1/chat/completions", &chat("again", 3, false, true))
        .await?;
    assert_eq!(r.status, StatusCode::OK);
    assert_eq!(r.json()["usage"]["completion_tokens"], 3);
    sim.shutdown().await;
    let lines = log_lines(&log);
    assert_eq!(lines.len(), 2, "{lines:?}");
    assert_eq!(lines[0]["finish"], "length");
    assert_eq!(lines[0]["completion_tokens"], 5);
    assert_eq!(lines[0]["session"], "s-1");
    assert!(lines[0]["held_ms"].as_f64().unwrap() > 0.0, "{}", lines[0]);
    assert!(lines[1].get("held_ms").is_none(), "{}", lines[1]);
    Ok(())
}

#[tokio::test]
async fn a_client_that_leaves_a_held_stream_is_logged_aborted() -> Result<()> {
    let tmp = temp_jsonl("hold-abort");
    let log = tmp.path().to_path_buf();
    let (sim, mut ctl) = start(SimConfig {
        request_log: Some(log.clone()),
        hold: true,
        ..SimConfig::default()
    })
    .await?;
    let mut c = Client::connect(sim.local_addr()).await?;
    let s = Stream::open(&mut c, "/v1/chat/completions", &chat("bye", 50, true, true)).await?;
    let (status, held) = held_now(&mut ctl, "?at_least=1").await?;
    assert_eq!(status, StatusCode::OK, "{held}");
    drop(s);
    c.conn.abort();
    drop(c);

    // The server notices (an EOF read, or at the latest a failed heartbeat write); the deadline
    // only bounds a hang.
    let deadline = Instant::now() + PATIENCE;
    let line = loop {
        if let Some(l) = log_lines(&log).pop() {
            break l;
        }
        ensure!(
            Instant::now() < deadline,
            "no log line for the abandoned request"
        );
        tokio::time::sleep(Duration::from_millis(10)).await;
    };
    assert_eq!(line["finish"], "aborted", "{line}");
    assert_eq!(line["completion_tokens"], 0, "{line}");
    assert!(line["held_ms"].as_f64().unwrap() > 0.0, "{line}");
    let (status, held) = held_now(&mut ctl, "?at_most=0").await?;
    assert_eq!(status, StatusCode::OK, "{held}");
    assert_eq!(held["held"], 0);
    assert_eq!(held["held_total"], 1);
    assert_eq!(held["hold"], true, "hold mode stays on");
    assert_eq!(sim.stats().aborted_total, 1);
    sim.shutdown().await;
    Ok(())
}

#[tokio::test]
async fn held_query_timeout_errors_and_config() -> Result<()> {
    let (sim, mut c) = start(instant()).await?;
    let (status, held) = held_now(&mut c, "?at_least=1&timeout_ms=200").await?;
    assert_eq!(status, StatusCode::REQUEST_TIMEOUT);
    assert_eq!(
        held,
        json!({"hold": false, "held": 0, "held_total": 0, "requests": []})
    );
    for bad in [
        "?at_least=x",
        "?wait=1",
        "?timeout_ms=-5",
        "?at_least=2&at_most=1",
    ] {
        let (status, body) = held_now(&mut c, bad).await?;
        assert_eq!(status, StatusCode::BAD_REQUEST, "{bad}: {body}");
        let msg = body["error"]["message"].as_str().unwrap();
        assert!(!msg.is_empty() && !msg.contains('\n'), "{bad}: {msg}");
    }
    // No bounds: answered at once.
    let (status, held) = held_now(&mut c, "?timeout_ms=600000").await?;
    assert_eq!(status, StatusCode::OK);
    assert_eq!(held["held"], 0);

    let r = c.get("/sim/config").await?;
    assert_eq!(r.status, StatusCode::OK);
    let cfg = r.json();
    assert_eq!(cfg["default_max_tokens"], 256);
    assert_eq!(cfg["model"], "bench-sim");
    assert_eq!(cfg["mode"]["kind"], "instant");
    assert_eq!(cfg["hold"], false);

    for (method, path, allow) in [
        (Method::GET, "/sim/hold", "POST"),
        (Method::GET, "/sim/release", "POST"),
        (Method::POST, "/sim/held", "GET"),
        (Method::DELETE, "/sim/config", "GET"),
    ] {
        let req = c.request(method.clone(), path, None);
        let r = c.send(req).await?;
        assert_eq!(r.status, StatusCode::METHOD_NOT_ALLOWED, "{method} {path}");
        assert_eq!(r.headers[header::ALLOW], allow, "{method} {path}");
    }
    assert_eq!(c.get("/sim/nothing").await?.status, StatusCode::NOT_FOUND);
    sim.shutdown().await;
    Ok(())
}

/// Hold in the fixed and instant modes, streamed and not, on two endpoints.
#[tokio::test]
async fn hold_works_in_fixed_and_instant_modes() -> Result<()> {
    let fixed = LatencyMode::Fixed {
        ttft: Duration::from_millis(20),
        itl: Duration::from_millis(1),
    };
    for mode in [fixed, LatencyMode::Instant] {
        let tmp = temp_jsonl(if mode == LatencyMode::Instant {
            "hold-instant"
        } else {
            "hold-fixed"
        });
        let log = tmp.path().to_path_buf();
        let (sim, mut ctl) = start(SimConfig {
            mode,
            hold: true,
            request_log: Some(log.clone()),
            ..SimConfig::default()
        })
        .await?;
        let mut a = Client::connect(sim.local_addr()).await?;
        let mut streamed = Stream::open(&mut a, "/v1/chat/completions", &chat("x", 4, true, true))
            .await
            .with_context(|| format!("{mode}"))?;
        let mut b = Client::connect(sim.local_addr()).await?;
        let whole = tokio::spawn(async move {
            let body = json!({"prompt": "p", "max_tokens": 6, "ignore_eos": true});
            b.post("/v1/completions", &body).await
        });
        let (status, held) = held_now(&mut ctl, "?at_least=2").await?;
        assert_eq!(status, StatusCode::OK, "{mode}: {held}");
        let mut endpoints: Vec<&str> = held["requests"]
            .as_array()
            .unwrap()
            .iter()
            .map(|r| r["endpoint"].as_str().unwrap())
            .collect();
        endpoints.sort_unstable();
        assert_eq!(endpoints, ["/v1/chat/completions", "/v1/completions"]);
        assert!(!whole.is_finished(), "{mode}: a held request answered");
        assert_eq!(sim.stats().running, 0, "{mode}");

        assert_eq!(sim.release(), 2, "{mode}");
        streamed.read_to_end().await?;
        assert_eq!(streamed.chat_content_events(), 4, "{mode}");
        let r = tokio::time::timeout(PATIENCE, whole).await???;
        assert_eq!(r.status, StatusCode::OK, "{mode}");
        assert_eq!(r.json()["usage"]["completion_tokens"], 6, "{mode}");

        // Not held any more: a new request runs at once, whole.
        let s = a.stream(&chat("y", 3, true, true), None).await?;
        assert_eq!(s.content_times().len(), 3, "{mode}");
        assert_eq!(sim.held(), 0);
        sim.shutdown().await;
        let lines = log_lines(&log);
        assert_eq!(lines.len(), 3, "{mode}: {lines:?}");
        assert!(
            lines[..2].iter().all(|l| l["held_ms"].as_f64().is_some()
                && matches!(l["finish"].as_str(), Some("length")))
        );
        assert!(lines[2].get("held_ms").is_none(), "{mode}: {}", lines[2]);
    }
    Ok(())
}

/// In the model mode a request still waiting for a batch slot when hold turns on is held too
/// (it leaves the queue), while one already running goes on.
#[tokio::test]
async fn model_mode_holds_a_request_waiting_for_a_slot() -> Result<()> {
    let (sim, mut ctl) = start(SimConfig {
        max_num_seqs: 1,
        decode_step_base_ms: 10.0,
        ..SimConfig::default()
    })
    .await?;
    let mut a = Client::connect(sim.local_addr()).await?;
    let mut first =
        Stream::open(&mut a, "/v1/chat/completions", &chat("one", 40, true, true)).await?;
    assert!(eventually(&sim, PATIENCE, |s| s.running == 1).await);
    let mut b = Client::connect(sim.local_addr()).await?;
    let mut second =
        Stream::open(&mut b, "/v1/chat/completions", &chat("two", 3, true, true)).await?;
    assert_eq!(sim.stats().waiting, 1);
    sim.hold();
    let (status, held) = held_now(&mut ctl, "?at_least=1").await?;
    assert_eq!(status, StatusCode::OK, "{held}");
    assert_eq!(held["held"], 1);
    assert_eq!(sim.stats().waiting, 0, "the held request left the queue");
    first.read_to_end().await?;
    assert_eq!(
        first.chat_content_events(),
        40,
        "the running request was not held"
    );
    assert!(second.data.is_empty());
    assert_eq!(sim.release(), 1);
    second.read_to_end().await?;
    assert_eq!(second.chat_content_events(), 3);
    assert!(second.data.iter().all(|d| !d.is_empty()));
    sim.shutdown().await;
    Ok(())
}

/// A `SimServer` whose held request is cut by shutdown: the long-poll and the request end.
#[tokio::test]
async fn shutdown_ends_held_requests_and_long_polls() -> Result<()> {
    let sim = SimServer::start(SimConfig {
        hold: true,
        ..instant()
    })
    .await?;
    let mut a = Client::connect(sim.local_addr()).await?;
    let whole = tokio::spawn(async move {
        a.post("/v1/chat/completions", &chat("z", 2, false, true))
            .await
    });
    let mut ctl = Client::connect(sim.local_addr()).await?;
    let (status, _) = held_now(&mut ctl, "?at_least=1").await?;
    assert_eq!(status, StatusCode::OK);
    let poll =
        tokio::spawn(async move { held_now(&mut ctl, "?at_least=5&timeout_ms=600000").await });
    tokio::time::timeout(PATIENCE, sim.shutdown())
        .await
        .context("shutdown hung on a held request")?;
    let r = tokio::time::timeout(PATIENCE, whole).await??;
    // The held request was aborted (503) or its connection closed; either way it ended.
    if let Ok(r) = r {
        assert_eq!(r.status, StatusCode::SERVICE_UNAVAILABLE);
    }
    let p = tokio::time::timeout(PATIENCE, poll).await??;
    if let Ok((status, _)) = p {
        assert_eq!(status, StatusCode::SERVICE_UNAVAILABLE);
    }
    Ok(())
}
