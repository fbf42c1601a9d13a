//! Fault injection over real TCP: each fault kind at rate 1 as a raw HTTP/1.1 client sees it
//! (status, headers and body shapes, an RST before or after the head, a malformed event, a
//! missing terminal event, a stall, a slow head, a missing usage), the fault log and the request
//! log, the seeded draw (determinism, retries, rates) and the parsing of fault lists.

use std::collections::BTreeMap;
use std::net::SocketAddr;
use std::path::Path;
use std::time::Duration;

use anyhow::{Context, Result, bail, ensure};
use bench_sim::{FaultKind, Faults, LatencyMode, SimConfig, SimServer};
use serde_json::{Value, json};
use tempfile::NamedTempFile;
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpStream;
use tokio::time::Instant;

use super::{chat, instant, temp_jsonl};

const CHAT: &str = "/v1/chat/completions";
const COMPLETIONS: &str = "/v1/completions";
const RESPONSES: &str = "/v1/responses";
const MESSAGES: &str = "/v1/messages";

/// Generous: bounds a hang, never a speed.
const PATIENCE: Duration = Duration::from_secs(5);

fn lines(path: &Path) -> Vec<Value> {
    std::fs::read_to_string(path)
        .unwrap_or_default()
        .lines()
        .map(|l| serde_json::from_str(l).unwrap())
        .collect()
}

/// An instant simulator injecting `spec` (e.g. `"429=1"`), with a request log and a fault log.
struct Setup {
    sim: SimServer,
    request_log: NamedTempFile,
    fault_log: NamedTempFile,
}

impl Setup {
    async fn new(name: &str, spec: &str, tweak: impl FnOnce(&mut SimConfig)) -> Result<Self> {
        let request_log = temp_jsonl(&format!("faults-{name}-requests"));
        let fault_log = temp_jsonl(&format!("faults-{name}-faults"));
        let mut config = SimConfig {
            request_log: Some(request_log.path().to_owned()),
            faults: Faults {
                rates: Faults::parse(spec).map_err(anyhow::Error::msg)?,
                log: Some(fault_log.path().to_owned()),
                ..Faults::default()
            },
            ..instant()
        };
        tweak(&mut config);
        let sim = SimServer::start(config).await?;
        Ok(Self {
            sim,
            request_log,
            fault_log,
        })
    }

    fn addr(&self) -> SocketAddr {
        self.sim.local_addr()
    }

    /// Shuts the simulator down and returns (request log, fault log).
    async fn finish(self) -> (Vec<Value>, Vec<Value>) {
        self.sim.shutdown().await;
        (lines(self.request_log.path()), lines(self.fault_log.path()))
    }
}

/// How a raw exchange ended.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum End {
    /// The server closed the connection (FIN).
    Eof,
    /// The connection was reset (RST).
    Reset,
    /// Still open when the client stopped reading.
    Open,
}

/// Everything a raw HTTP/1.1 client read for one request.
struct Raw {
    bytes: Vec<u8>,
    /// When each read returned, with the total read so far.
    reads: Vec<(Instant, usize)>,
    sent: Instant,
    end: End,
}

impl Raw {
    fn head_len(&self) -> Option<usize> {
        self.bytes
            .windows(4)
            .position(|w| w == b"\r\n\r\n")
            .map(|p| p + 4)
    }

    fn head(&self) -> String {
        let n = self.head_len().unwrap_or(0);
        String::from_utf8_lossy(&self.bytes[..n]).into_owned()
    }

    fn status(&self) -> u16 {
        self.head()
            .split(' ')
            .nth(1)
            .and_then(|s| s.parse().ok())
            .unwrap_or(0)
    }

    fn header(&self, name: &str) -> Option<String> {
        self.head().lines().skip(1).find_map(|l| {
            let (k, v) = l.split_once(':')?;
            k.eq_ignore_ascii_case(name).then(|| v.trim().to_owned())
        })
    }

    /// The body with chunked framing removed, and whether it was complete (the last chunk of a
    /// chunked body, or `content-length` bytes).
    fn body(&self) -> (Vec<u8>, bool) {
        let rest = &self.bytes[self.head_len().unwrap_or(self.bytes.len())..];
        if self.header("transfer-encoding").as_deref() == Some("chunked") {
            let mut out = Vec::new();
            let mut at = 0;
            loop {
                let Some(eol) = rest[at..].windows(2).position(|w| w == b"\r\n") else {
                    return (out, false);
                };
                let size = std::str::from_utf8(&rest[at..at + eol])
                    .ok()
                    .and_then(|s| usize::from_str_radix(s.trim(), 16).ok());
                let Some(size) = size else {
                    return (out, false);
                };
                at += eol + 2;
                if size == 0 {
                    return (out, rest.len() >= at + 2);
                }
                if rest.len() < at + size {
                    out.extend_from_slice(&rest[at..]);
                    return (out, false);
                }
                out.extend_from_slice(&rest[at..at + size]);
                at += size + 2;
            }
        }
        let len = self.header("content-length").and_then(|l| l.parse().ok());
        (rest.to_vec(), len == Some(rest.len()))
    }

    fn json(&self) -> Value {
        serde_json::from_slice(&self.body().0).unwrap()
    }

    /// The SSE events of the body: each as its `event:` name (if any) and `data:` payload.
    fn events(&self) -> Vec<(Option<String>, String)> {
        let (body, _) = self.body();
        let text = String::from_utf8(body).unwrap();
        text.split("\n\n")
            .filter(|e| !e.is_empty())
            .map(|e| {
                let name = e
                    .lines()
                    .find_map(|l| l.strip_prefix("event: "))
                    .map(str::to_owned);
                let data = e
                    .lines()
                    .find_map(|l| l.strip_prefix("data: "))
                    .unwrap_or_default()
                    .to_owned();
                (name, data)
            })
            .collect()
    }

    /// The events whose data is not JSON (`[DONE]` aside).
    fn malformed(&self) -> Vec<String> {
        self.events()
            .into_iter()
            .filter(|(_, d)| d != "[DONE]" && serde_json::from_str::<Value>(d).is_err())
            .map(|(_, d)| d)
            .collect()
    }

    fn data(&self) -> Vec<Value> {
        self.events()
            .into_iter()
            .filter_map(|(_, d)| serde_json::from_str(&d).ok())
            .collect()
    }

    /// Chat chunks carrying content.
    fn content_chunks(&self) -> usize {
        self.data()
            .iter()
            .filter(|v| {
                v["choices"][0]["delta"]["content"]
                    .as_str()
                    .is_some_and(|c| !c.is_empty())
            })
            .count()
    }

    fn has_done(&self) -> bool {
        self.events().iter().any(|(_, d)| d == "[DONE]")
    }

    fn event_names(&self) -> Vec<String> {
        self.events().into_iter().filter_map(|(n, _)| n).collect()
    }

    /// When the response head was complete.
    fn head_at(&self) -> Option<Instant> {
        let n = self.head_len()?;
        self.reads
            .iter()
            .find(|(_, total)| *total >= n)
            .map(|r| r.0)
    }
}

/// Sends one request on a fresh connection (`connection: close`) and reads until the server
/// closes or resets it, or `limit` passes.
async fn raw(
    addr: SocketAddr,
    path: &str,
    body: &Value,
    session: Option<&str>,
    limit: Duration,
) -> Result<Raw> {
    let mut tcp = TcpStream::connect(addr).await?;
    tcp.set_nodelay(true)?;
    raw_on(&mut tcp, path, body, session, limit).await
}

async fn raw_on(
    tcp: &mut (impl tokio::io::AsyncRead + tokio::io::AsyncWrite + Unpin),
    path: &str,
    body: &Value,
    session: Option<&str>,
    limit: Duration,
) -> Result<Raw> {
    let body = body.to_string();
    let mut req = format!(
        "POST {path} HTTP/1.1\r\nhost: sim\r\ncontent-type: application/json\r\n\
         content-length: {}\r\nconnection: close\r\n",
        body.len()
    );
    if let Some(s) = session {
        req.push_str(&format!("x-session-id: {s}\r\n"));
    }
    req.push_str("\r\n");
    req.push_str(&body);
    let sent = Instant::now();
    tcp.write_all(req.as_bytes()).await?;
    let deadline = sent + limit;
    let mut out = Raw {
        bytes: Vec::new(),
        reads: Vec::new(),
        sent,
        end: End::Open,
    };
    let mut buf = vec![0u8; 64 << 10];
    loop {
        match tokio::time::timeout_at(deadline, tcp.read(&mut buf)).await {
            Err(_) => break,
            Ok(Ok(0)) => {
                out.end = End::Eof;
                break;
            }
            Ok(Ok(n)) => {
                out.bytes.extend_from_slice(&buf[..n]);
                out.reads.push((Instant::now(), out.bytes.len()));
            }
            Ok(Err(e)) if e.kind() == std::io::ErrorKind::ConnectionReset => {
                out.end = End::Reset;
                break;
            }
            Ok(Err(e)) => bail!("read failed: {e}"),
        }
    }
    Ok(out)
}

fn chat_stream(max: u32) -> Value {
    chat("tell me a story", max, true, true)
}

fn chat_whole(max: u32) -> Value {
    chat("tell me a story", max, false, true)
}

fn body_for(path: &str, max: u32, stream: bool) -> Value {
    match path {
        CHAT => chat("hello", max, stream, true),
        COMPLETIONS => json!({"prompt": "hello", "max_tokens": max, "stream": stream,
                               "stream_options": {"include_usage": true}, "ignore_eos": true}),
        RESPONSES => json!({"input": "hello", "max_output_tokens": max, "stream": stream,
                             "ignore_eos": true}),
        _ => json!({"messages": [{"role": "user", "content": "hello"}], "max_tokens": max,
                     "stream": stream, "ignore_eos": true}),
    }
}

/// The single fault-log line, checked against the request.
fn one_fault(faults: &[Value], kind: &str, endpoint: &str, stream: bool) {
    assert_eq!(faults.len(), 1, "{faults:#?}");
    let f = &faults[0];
    assert_eq!(f["fault"], kind, "{f}");
    assert_eq!(f["endpoint"], endpoint, "{f}");
    assert_eq!(f["stream"], stream, "{f}");
    assert_eq!(f["session"], "s-1", "{f}");
    assert_eq!(f["turn_index"], 0, "{f}");
    assert!(f["ms"].as_f64().unwrap() >= 0.0, "{f}");
    assert!(f["utc"].as_str().unwrap().ends_with('Z'), "{f}");
}

#[tokio::test]
async fn error_faults_answer_their_status_retry_after_and_body() -> Result<()> {
    for (spec, status) in [("429=1", 429), ("503=1", 503)] {
        let s = Setup::new("errors", spec, |c| c.faults.retry_after_s = 7).await?;
        let r = raw(s.addr(), CHAT, &chat_stream(5), Some("s-1"), PATIENCE).await?;
        assert_eq!(r.status(), status, "{}", r.head());
        assert_eq!(r.header("retry-after").as_deref(), Some("7"));
        assert_eq!(
            r.header("content-type").as_deref(),
            Some("application/json")
        );
        let v = r.json();
        if status == 429 {
            assert_eq!(v["error"]["code"], "rate_limit_exceeded", "{v}");
            assert_eq!(v["error"]["type"], "requests", "{v}");
            assert!(v["error"]["param"].is_null(), "{v}");
            let m = v["error"]["message"].as_str().unwrap();
            assert!(m.starts_with("Rate limit reached"), "{m}");
        } else {
            assert_eq!(v["error"]["code"], 503, "{v}");
            assert!(
                v["error"]["message"]
                    .as_str()
                    .unwrap()
                    .contains("overloaded")
            );
        }
        // The Anthropic endpoint answers in Anthropic's shape.
        let m = raw(
            s.addr(),
            MESSAGES,
            &body_for(MESSAGES, 5, true),
            Some("s-2"),
            PATIENCE,
        )
        .await?;
        assert_eq!(m.status(), status);
        assert_eq!(m.header("retry-after").as_deref(), Some("7"));
        let v = m.json();
        assert_eq!(v["type"], "error", "{v}");
        let want = if status == 429 {
            "rate_limit_error"
        } else {
            "overloaded_error"
        };
        assert_eq!(v["error"]["type"], want, "{v}");
        let (reqs, faults) = s.finish().await;
        assert_eq!(reqs.len(), 2);
        for l in &reqs {
            assert_eq!(l["status"], status, "{l}");
            assert_eq!(l["finish"], "error", "{l}");
            assert_eq!(l["fault"], spec.trim_end_matches("=1"), "{l}");
        }
        assert_eq!(faults.len(), 2);
        one_fault(&faults[..1], spec.trim_end_matches("=1"), CHAT, true);
    }
    Ok(())
}

#[tokio::test]
async fn internal_errors_come_in_vllm_sglang_and_openai_shapes() -> Result<()> {
    let s = Setup::new("500", "500=1", |_| {}).await?;
    let mut shapes = BTreeMap::new();
    for i in 0..30 {
        let session = format!("s-{i}");
        let r = raw(s.addr(), CHAT, &chat_whole(3), Some(&session), PATIENCE).await?;
        assert_eq!(r.status(), 500);
        assert!(r.header("retry-after").is_none());
        let v = r.json();
        let shape = if v["object"] == "error" {
            assert_eq!(v["type"], "InternalServerError", "{v}");
            assert_eq!(v["code"], 500, "{v}");
            assert!(v["param"].is_null(), "{v}");
            "vllm"
        } else if v["error"]["code"] == 500 {
            assert_eq!(v["error"]["type"], "InternalServerError", "{v}");
            "sglang"
        } else {
            assert_eq!(v["error"]["type"], "server_error", "{v}");
            assert!(v["error"]["code"].is_null(), "{v}");
            assert_eq!(
                v["error"]["message"],
                "The server had an error while processing your request. Sorry about that!"
            );
            "openai"
        };
        *shapes.entry(shape).or_insert(0) += 1;
        // The same request on a fresh simulator gets the same body: the choice is seeded.
        if i == 0 {
            let again = Setup::new("500-again", "500=1", |_| {}).await?;
            let r2 = raw(again.addr(), CHAT, &chat_whole(3), Some(&session), PATIENCE).await?;
            assert_eq!(r2.json(), v);
            again.finish().await;
        }
    }
    assert_eq!(shapes.len(), 3, "{shapes:?}");
    let m = raw(
        s.addr(),
        MESSAGES,
        &body_for(MESSAGES, 3, false),
        None,
        PATIENCE,
    )
    .await?;
    assert_eq!(m.status(), 500);
    assert_eq!(
        m.json(),
        json!({"type": "error", "error": {"type": "api_error", "message": "Internal server error"}})
    );
    let (reqs, faults) = s.finish().await;
    assert_eq!((reqs.len(), faults.len()), (31, 31));
    assert!(faults.last().unwrap()["session"].is_null());
    Ok(())
}

#[tokio::test]
async fn reset_before_headers_reads_the_request_then_sends_rst() -> Result<()> {
    for stream in [true, false] {
        let s = Setup::new("reset-before", "reset-before-headers=1", |_| {}).await?;
        let body = chat("hello", 5, stream, true);
        let r = raw(s.addr(), CHAT, &body, Some("s-1"), PATIENCE).await?;
        assert_eq!(r.end, End::Reset, "stream {stream}: {:?}", r.head());
        assert!(r.bytes.is_empty(), "no response byte: {:?}", r.head());
        // A hyper client sees an error before any head.
        let mut c = super::Client::connect(s.addr()).await?;
        let req = c.request(http::Method::POST, CHAT, Some(&body));
        c.sender.ready().await?;
        assert!(c.sender.send_request(req).await.is_err());
        let (reqs, faults) = s.finish().await;
        assert_eq!(reqs.len(), 2);
        for l in &reqs {
            assert_eq!(l["fault"], "reset-before-headers", "{l}");
            assert_eq!(l["status"], 0, "{l}");
            assert_eq!(l["finish"], "aborted", "{l}");
            assert_eq!(l["completion_tokens"], 0, "{l}");
        }
        assert_eq!(faults.len(), 2);
        one_fault(&faults[..1], "reset-before-headers", CHAT, stream);
    }
    Ok(())
}

#[tokio::test]
async fn reset_mid_stream_sends_the_head_and_half_the_answer_then_rst() -> Result<()> {
    for mode in [
        LatencyMode::Instant,
        LatencyMode::Fixed {
            ttft: Duration::from_millis(5),
            itl: Duration::from_millis(2),
        },
        LatencyMode::Model,
    ] {
        let s = Setup::new("reset-mid", "reset-mid-stream=1", |c| {
            c.mode = mode;
            c.decode_step_base_ms = 2.0;
        })
        .await?;
        let r = raw(s.addr(), CHAT, &chat_stream(20), Some("s-1"), PATIENCE).await?;
        assert_eq!(r.end, End::Reset, "{mode:?}");
        assert_eq!(r.status(), 200);
        assert_eq!(
            r.header("content-type").as_deref(),
            Some("text/event-stream")
        );
        let (_, complete) = r.body();
        assert!(!complete);
        assert_eq!(r.content_chunks(), 10, "{mode:?}: half of 20 tokens");
        assert!(!r.has_done());
        assert!(r.malformed().is_empty());
        let (reqs, faults) = s.finish().await;
        assert_eq!(reqs.len(), 1);
        assert_eq!(reqs[0]["fault"], "reset-mid-stream");
        assert_eq!(reqs[0]["status"], 200);
        assert_eq!(reqs[0]["finish"], "aborted");
        assert_eq!(reqs[0]["completion_tokens"], 10);
        one_fault(&faults, "reset-mid-stream", CHAT, true);
    }
    // One token: it is sent, then the reset comes before the usage chunk and [DONE].
    let s = Setup::new("reset-mid-1", "reset-mid-stream=1", |_| {}).await?;
    let r = raw(s.addr(), CHAT, &chat_stream(1), Some("s-1"), PATIENCE).await?;
    assert_eq!(
        (r.end, r.content_chunks(), r.has_done()),
        (End::Reset, 1, false)
    );
    assert!(r.data().iter().all(|v| v.get("usage").is_none()));
    s.finish().await;
    // Not streamed: the head with the whole body's length, half the body, then the reset.
    let s = Setup::new("reset-mid-whole", "reset-mid-stream=1", |_| {}).await?;
    let r = raw(s.addr(), CHAT, &chat_whole(20), Some("s-1"), PATIENCE).await?;
    assert_eq!(r.end, End::Reset);
    assert_eq!(r.status(), 200);
    let len: usize = r
        .header("content-length")
        .context("content-length")?
        .parse()?;
    let (body, complete) = r.body();
    assert!(!complete);
    assert!(
        !body.is_empty() && body.len() < len,
        "{} of {len}",
        body.len()
    );
    assert!(serde_json::from_slice::<Value>(&body).is_err());
    let (reqs, faults) = s.finish().await;
    assert_eq!(reqs[0]["finish"], "aborted");
    one_fault(&faults, "reset-mid-stream", CHAT, false);
    Ok(())
}

#[tokio::test]
async fn malformed_chunk_is_one_cut_event_then_the_stream_goes_on() -> Result<()> {
    let s = Setup::new("malformed", "malformed-chunk=1", |_| {}).await?;
    let r = raw(s.addr(), CHAT, &chat_stream(20), Some("s-1"), PATIENCE).await?;
    assert_eq!((r.status(), r.end), (200, End::Eof));
    assert!(r.body().1, "the body ends cleanly");
    let bad = r.malformed();
    assert_eq!(bad.len(), 1, "{bad:?}");
    assert!(
        bad[0].starts_with("{\"id\":\"chatcmpl-"),
        "a chunk cut in half: {bad:?}"
    );
    // Every token still comes, then the usage and [DONE].
    assert_eq!(r.content_chunks(), 20);
    assert!(r.has_done());
    assert!(
        r.data()
            .iter()
            .any(|v| v["usage"]["completion_tokens"] == 20)
    );
    // The other streamed endpoints: one cut event each, and their terminal event.
    for (path, terminal) in [
        (COMPLETIONS, None),
        (RESPONSES, Some("response.incomplete")),
        (MESSAGES, Some("message_stop")),
    ] {
        let r = raw(
            s.addr(),
            path,
            &body_for(path, 8, true),
            Some("s-1"),
            PATIENCE,
        )
        .await?;
        assert_eq!(r.malformed().len(), 1, "{path}");
        match terminal {
            Some(t) => assert_eq!(r.event_names().last().map(String::as_str), Some(t)),
            None => assert!(r.has_done(), "{path}"),
        }
    }
    // Not streamed: the JSON body cut in half, as a complete HTTP message.
    let r = raw(s.addr(), CHAT, &chat_whole(20), Some("s-1"), PATIENCE).await?;
    let (body, complete) = r.body();
    assert_eq!(r.status(), 200);
    assert!(complete);
    assert!(body.starts_with(b"{\"") && serde_json::from_slice::<Value>(&body).is_err());
    let (reqs, faults) = s.finish().await;
    assert_eq!((reqs.len(), faults.len()), (5, 5));
    assert!(
        reqs.iter()
            .all(|l| l["fault"] == "malformed-chunk" && l["status"] == 200)
    );
    assert!(reqs.iter().all(|l| l["finish"] == "length"));
    Ok(())
}

#[tokio::test]
async fn no_done_ends_the_stream_cleanly_without_its_terminal_event() -> Result<()> {
    let s = Setup::new("no-done", "no-done=1", |_| {}).await?;
    let r = raw(s.addr(), CHAT, &chat_stream(5), Some("s-1"), PATIENCE).await?;
    assert_eq!((r.status(), r.end), (200, End::Eof));
    assert!(r.body().1, "the chunked body is terminated");
    assert!(!r.has_done());
    assert_eq!(r.content_chunks(), 5);
    assert!(
        r.data()
            .iter()
            .any(|v| v["usage"]["completion_tokens"] == 5)
    );
    let r = raw(
        s.addr(),
        RESPONSES,
        &body_for(RESPONSES, 5, true),
        Some("s-1"),
        PATIENCE,
    )
    .await?;
    let names = r.event_names();
    assert!(r.body().1);
    assert_eq!(
        names.last().map(String::as_str),
        Some("response.output_item.done")
    );
    assert!(
        !names
            .iter()
            .any(|n| n == "response.incomplete" || n == "response.completed")
    );
    let r = raw(
        s.addr(),
        MESSAGES,
        &body_for(MESSAGES, 5, true),
        Some("s-1"),
        PATIENCE,
    )
    .await?;
    let names = r.event_names();
    assert_eq!(names.last().map(String::as_str), Some("message_delta"));
    // Not streamed: nothing to leave out, so no fault.
    let r = raw(s.addr(), CHAT, &chat_whole(5), Some("s-1"), PATIENCE).await?;
    assert_eq!(r.json()["usage"]["completion_tokens"], 5);
    let (reqs, faults) = s.finish().await;
    assert_eq!(faults.len(), 3, "{faults:#?}");
    assert!(
        faults
            .iter()
            .all(|f| f["fault"] == "no-done" && f["stream"] == true)
    );
    assert_eq!(reqs.len(), 4);
    assert!(reqs[..3].iter().all(|l| l["fault"] == "no-done"));
    assert!(reqs[3].get("fault").is_none(), "{}", reqs[3]);
    Ok(())
}

#[tokio::test]
async fn stall_sends_the_first_chunk_then_nothing_and_a_client_leaving_frees_it() -> Result<()> {
    let s = Setup::new("stall", "stall=1", |c| {
        c.faults.stall = Duration::from_secs(60);
        c.mode = LatencyMode::Fixed {
            ttft: Duration::from_millis(5),
            itl: Duration::from_millis(1),
        };
    })
    .await?;
    let mut tcp = TcpStream::connect(s.addr()).await?;
    let window = Duration::from_millis(400);
    let r = raw_on(&mut tcp, CHAT, &chat_stream(50), Some("s-1"), window).await?;
    assert_eq!((r.status(), r.end), (200, End::Open));
    // The first token's events (role chunk and first content chunk), then nothing.
    assert_eq!(r.content_chunks(), 1);
    let last = r.reads.last().context("no read")?.0;
    assert!(
        last - r.sent < window / 2,
        "bytes kept coming: last read {:?} after sending",
        last - r.sent
    );
    assert_eq!(s.sim.stats().running, 1);
    // The client leaves: the request ends as aborted, its line written.
    drop(tcp);
    let deadline = Instant::now() + PATIENCE;
    while lines(s.request_log.path()).is_empty() {
        ensure!(
            Instant::now() < deadline,
            "no request-log line after the client left"
        );
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    let reqs = lines(s.request_log.path());
    assert_eq!(reqs[0]["fault"], "stall");
    assert_eq!(reqs[0]["finish"], "aborted");
    assert_eq!(reqs[0]["status"], 200);
    assert_eq!(s.sim.stats().running, 0);
    // Not streamed: the head does not come.
    let mut tcp = TcpStream::connect(s.addr()).await?;
    let r = raw_on(&mut tcp, CHAT, &chat_whole(5), Some("s-1"), window).await?;
    assert!(r.bytes.is_empty(), "{:?}", r.head());
    drop(tcp);
    let deadline = Instant::now() + PATIENCE;
    while lines(s.request_log.path()).len() < 2 {
        ensure!(
            Instant::now() < deadline,
            "no line for the non-streamed stall"
        );
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    let (reqs, faults) = s.finish().await;
    assert_eq!(reqs[1]["fault"], "stall");
    assert_eq!(reqs[1]["finish"], "aborted");
    assert_eq!(faults.len(), 2);
    one_fault(&faults[..1], "stall", CHAT, true);
    Ok(())
}

#[tokio::test]
async fn a_short_stall_resumes_the_stream() -> Result<()> {
    let stall = Duration::from_millis(300);
    let s = Setup::new("stall-short", "stall=1", |c| c.faults.stall = stall).await?;
    let r = raw(s.addr(), CHAT, &chat_stream(30), Some("s-1"), PATIENCE).await?;
    assert_eq!(r.end, End::Eof);
    assert_eq!(r.content_chunks(), 30);
    assert!(r.has_done());
    let first = r.reads[0].0;
    let last = r.reads.last().unwrap().0;
    assert!(last - first >= stall, "{:?}", last - first);
    let (reqs, _) = s.finish().await;
    assert_eq!(reqs[0]["finish"], "length");
    assert_eq!(reqs[0]["fault"], "stall");
    Ok(())
}

#[tokio::test]
async fn slow_headers_delay_the_head_then_answer_normally() -> Result<()> {
    let slow = Duration::from_millis(300);
    let s = Setup::new("slow", "slow-headers=1", |c| c.faults.slow_headers = slow).await?;
    for body in [chat_stream(5), chat_whole(5)] {
        let r = raw(s.addr(), CHAT, &body, Some("s-1"), PATIENCE).await?;
        assert_eq!((r.status(), r.end), (200, End::Eof));
        let head_after = r.head_at().context("no head")? - r.sent;
        assert!(head_after >= slow, "head after {head_after:?}");
        assert!(r.body().1);
    }
    let (reqs, faults) = s.finish().await;
    assert_eq!(faults.len(), 2);
    assert!(
        reqs.iter()
            .all(|l| l["fault"] == "slow-headers" && l["finish"] == "length")
    );
    Ok(())
}

#[tokio::test]
async fn truncated_usage_leaves_the_usage_out() -> Result<()> {
    let s = Setup::new("usage", "truncated-usage=1", |_| {}).await?;
    // Streamed chat with include_usage: no usage chunk, [DONE] still.
    let r = raw(s.addr(), CHAT, &chat_stream(5), Some("s-1"), PATIENCE).await?;
    assert_eq!(r.content_chunks(), 5);
    assert!(r.has_done());
    assert!(r.data().iter().all(|v| v.get("usage").is_none()));
    // Not streamed: no usage object.
    let r = raw(s.addr(), CHAT, &chat_whole(5), Some("s-1"), PATIENCE).await?;
    let v = r.json();
    assert_eq!(v["object"], "chat.completion");
    assert!(v.get("usage").is_none(), "{v}");
    // Responses and Messages streams: the terminal events carry no usage.
    let r = raw(
        s.addr(),
        RESPONSES,
        &body_for(RESPONSES, 5, true),
        Some("s-1"),
        PATIENCE,
    )
    .await?;
    let done = r.data().into_iter().last().context("no event")?;
    assert_eq!(done["type"], "response.incomplete");
    assert!(done["response"].get("usage").is_none(), "{done}");
    let r = raw(
        s.addr(),
        MESSAGES,
        &body_for(MESSAGES, 5, true),
        Some("s-1"),
        PATIENCE,
    )
    .await?;
    assert_eq!(
        r.event_names().last().map(String::as_str),
        Some("message_stop")
    );
    assert!(
        r.data()
            .iter()
            .all(|v| v.get("usage").is_none() && v["message"].get("usage").is_none())
    );
    // A chat stream that asked for no usage has none to leave out: no fault.
    let no_usage = json!({"messages": [{"role": "user", "content": "x"}], "max_tokens": 3,
                          "stream": true, "ignore_eos": true});
    let r = raw(s.addr(), CHAT, &no_usage, Some("s-1"), PATIENCE).await?;
    assert!(r.has_done());
    let (reqs, faults) = s.finish().await;
    assert_eq!(faults.len(), 4, "{faults:#?}");
    assert_eq!(reqs.len(), 5);
    assert!(reqs[4].get("fault").is_none());
    Ok(())
}

/// Sends `n` turns of distinct sessions (concurrently when `concurrent`) and returns each
/// session's fault as the fault log records it.
async fn fault_map(seed: u64, n: usize, concurrent: bool) -> Result<BTreeMap<String, String>> {
    let s = Setup::new(
        "determinism",
        "429=0.2,500=0.1,reset-before-headers=0.1",
        |c| {
            c.faults.seed = seed;
        },
    )
    .await?;
    let addr = s.addr();
    let send = move |i: usize| async move {
        let session = format!("s-{i}");
        raw(addr, CHAT, &chat_whole(2), Some(&session), PATIENCE).await
    };
    if concurrent {
        let tasks: Vec<_> = (0..n).rev().map(|i| tokio::spawn(send(i))).collect();
        for t in tasks {
            t.await??;
        }
    } else {
        for i in 0..n {
            send(i).await?;
        }
    }
    let (reqs, faults) = s.finish().await;
    ensure!(reqs.len() == n, "{} request-log lines", reqs.len());
    ensure!(
        reqs.iter().filter(|l| l.get("fault").is_some()).count() == faults.len(),
        "the request log and the fault log disagree"
    );
    Ok(faults
        .iter()
        .map(|f| {
            (
                f["session"].as_str().unwrap().to_owned(),
                f["fault"].as_str().unwrap().to_owned(),
            )
        })
        .collect())
}

#[tokio::test]
async fn the_same_seed_injects_the_same_faults_whatever_the_concurrency() -> Result<()> {
    let a = fault_map(7, 60, false).await?;
    let b = fault_map(7, 60, true).await?;
    assert_eq!(a, b);
    assert!(
        (10..=40).contains(&a.len()),
        "{} of 60 faulted at 40%",
        a.len()
    );
    let c = fault_map(8, 60, false).await?;
    assert_ne!(a, c, "another seed draws other faults");
    // The draw is the public function.
    let faults = Faults {
        rates: Faults::parse("429=0.2,500=0.1,reset-before-headers=0.1").unwrap(),
        seed: 7,
        ..Faults::default()
    };
    for (session, kind) in &a {
        assert_eq!(
            faults.draw(Some(session), 0, 0).map(FaultKind::as_str),
            Some(kind.as_str())
        );
    }
    Ok(())
}

#[tokio::test]
async fn a_retried_request_draws_again() -> Result<()> {
    let statuses = |seed| async move {
        let s = Setup::new("retry", "429=0.5", |c| c.faults.seed = seed).await?;
        let mut out = Vec::new();
        for _ in 0..24 {
            let r = raw(s.addr(), CHAT, &chat_whole(2), Some("s-1"), PATIENCE).await?;
            out.push(r.status());
        }
        s.finish().await;
        anyhow::Ok(out)
    };
    let a = statuses(3).await?;
    assert!(a.contains(&200) && a.contains(&429), "{a:?}");
    assert_eq!(
        a,
        statuses(3).await?,
        "retries draw the same sequence again"
    );
    // A later turn of the session starts its own count.
    let faults = Faults {
        rates: vec![(FaultKind::RateLimited, 0.5)],
        seed: 3,
        ..Faults::default()
    };
    let predicted: Vec<u16> = (0..24)
        .map(|attempt| match faults.draw(Some("s-1"), 0, attempt) {
            Some(_) => 429,
            None => 200,
        })
        .collect();
    assert_eq!(a, predicted);
    Ok(())
}

#[test]
fn rates_land_within_binomial_bounds() {
    let faults = Faults {
        rates: Faults::parse("429=0.02,reset-mid-stream=0.05,stall=0.01").unwrap(),
        seed: 11,
        ..Faults::default()
    };
    let n = 10_000u64;
    let mut counts: BTreeMap<FaultKind, u64> = BTreeMap::new();
    for i in 0..n {
        let session = format!("session-{i}");
        if let Some(k) = faults.draw(Some(&session), (i % 7) as u32, 0) {
            *counts.entry(k).or_default() += 1;
        }
    }
    for (kind, rate) in &faults.rates {
        let got = counts.get(kind).copied().unwrap_or(0) as f64;
        let mean = n as f64 * rate;
        let sd = (n as f64 * rate * (1.0 - rate)).sqrt();
        // 5 standard deviations: a correct draw fails this about once in 3 million runs.
        assert!(
            (got - mean).abs() < 5.0 * sd,
            "{kind}: {got} draws of {n} at rate {rate} (expected {mean} ± {sd:.1})"
        );
    }
    assert_eq!(counts.len(), 3);
    // Rate 0 never, rate 1 always.
    let never = Faults {
        rates: vec![(FaultKind::Stall, 0.0), (FaultKind::NoDone, 1.0)],
        ..Faults::default()
    };
    assert!((0..1000).all(|a| never.draw(None, 0, a) == Some(FaultKind::NoDone)));
}

#[test]
fn fault_lists_parse_or_name_the_bad_item() {
    assert_eq!(
        Faults::parse(" 429=0.02, reset-mid-stream=0.01").unwrap(),
        vec![
            (FaultKind::RateLimited, 0.02),
            (FaultKind::ResetMidStream, 0.01)
        ]
    );
    for k in FaultKind::ALL {
        let spec = format!("{}=0.1", k.as_str());
        assert_eq!(Faults::parse(&spec).unwrap(), vec![(k, 0.1)]);
    }
    let err = |spec: &str| Faults::parse(spec).unwrap_err();
    let e = err("429=0.1,teapot=0.1");
    assert!(
        e.contains("\"teapot=0.1\"") && e.contains("unknown fault kind"),
        "{e}"
    );
    assert!(e.contains("429, 503, 500, reset-before-headers"), "{e}");
    assert!(e.contains("truncated-usage"), "{e}");
    let e = err("429=lots");
    assert!(
        e.contains("\"429=lots\"") && e.contains("not a number in [0, 1]"),
        "{e}"
    );
    let e = err("stall=1.5");
    assert!(e.contains("\"stall=1.5\"") && e.contains("[0, 1]"), "{e}");
    assert!(err("stall=-0.1").contains("[0, 1]"));
    assert!(err("stall=NaN").contains("[0, 1]"));
    let e = err("429=0.6,500=0.6");
    assert!(
        e.contains("add up to 1.2") && e.contains("more than 1"),
        "{e}"
    );
    let e = err("429=0.1,429=0.2");
    assert!(e.contains("\"429=0.2\"") && e.contains("twice"), "{e}");
    assert!(err("429").contains("KIND=RATE"));
    assert!(err("429=0.1,").contains("empty item"));
    for e in [err("x=1"), err("429=2"), err("429=0.7,503=0.7")] {
        assert!(!e.contains('\n') && !e.ends_with('.'), "{e}");
    }
    // Ten kinds at 0.1 each add up to 1 (rounding aside).
    let all: Vec<String> = FaultKind::ALL
        .iter()
        .map(|k| format!("{}=0.1", k.as_str()))
        .collect();
    assert_eq!(Faults::parse(&all.join(",")).unwrap().len(), 10);
}

#[tokio::test]
async fn bad_rates_set_in_code_refuse_to_start_and_faults_show_in_config_and_metrics() -> Result<()>
{
    let bad = SimServer::start(SimConfig {
        faults: Faults {
            rates: vec![(FaultKind::Stall, 0.7), (FaultKind::NoDone, 0.7)],
            ..Faults::default()
        },
        ..instant()
    })
    .await;
    let e = bad.err().context("rates above 1 must be refused")?;
    assert!(e.to_string().contains("more than 1"), "{e}");
    let s = Setup::new("metrics", "429=1,stall=0", |_| {}).await?;
    for _ in 0..3 {
        raw(s.addr(), CHAT, &chat_whole(2), None, PATIENCE).await?;
    }
    let mut c = super::Client::connect(s.addr()).await?;
    let text = String::from_utf8(c.get("/metrics").await?.body.to_vec())?;
    assert!(
        text.contains("sim_faults_total{model_name=\"bench-sim\",kind=\"429\"} 3.0"),
        "{text}"
    );
    assert!(text.contains("sim_faults_total{model_name=\"bench-sim\",kind=\"stall\"} 0.0"));
    let config = c.get("/sim/config").await?.json();
    assert_eq!(config["faults"]["rates"], json!({"429": 1.0, "stall": 0.0}));
    assert_eq!(config["faults"]["retry_after_s"], 1);
    assert_eq!(config["faults"]["slow_headers_ms"], 2000.0);
    drop(c);
    let (reqs, faults) = s.finish().await;
    assert_eq!((reqs.len(), faults.len()), (3, 3));
    Ok(())
}

#[tokio::test]
async fn resets_are_rsts_under_tls_too() -> Result<()> {
    use rustls::pki_types::pem::PemObject as _;
    use rustls::pki_types::{CertificateDer, ServerName};
    use std::sync::Arc;
    let ca = bench_sim::SelfSignedCa::new()?;
    let identity = Arc::new(ca.loopback_server()?);
    let mut roots = rustls::RootCertStore::empty();
    roots.add(CertificateDer::from_pem_slice(ca.cert_pem().as_bytes())?)?;
    let client = rustls::ClientConfig::builder_with_provider(Arc::new(
        rustls::crypto::ring::default_provider(),
    ))
    .with_safe_default_protocol_versions()?
    .with_root_certificates(roots)
    .with_no_client_auth();
    let connector = tokio_rustls::TlsConnector::from(Arc::new(client));
    for (spec, body) in [
        ("reset-before-headers=1", chat_whole(5)),
        ("reset-mid-stream=1", chat_stream(20)),
    ] {
        let s = Setup::new("tls", spec, |c| c.tls = Some(Arc::clone(&identity))).await?;
        let tcp = TcpStream::connect(s.addr()).await?;
        let mut tls = connector
            .connect(ServerName::try_from("localhost")?, tcp)
            .await?;
        let r = raw_on(&mut tls, CHAT, &body, Some("s-1"), PATIENCE).await?;
        assert_eq!(r.end, End::Reset, "{spec}: {:?}", r.head());
        if spec.starts_with("reset-mid") {
            assert_eq!((r.status(), r.content_chunks()), (200, 10));
        } else {
            assert!(r.bytes.is_empty());
        }
        let (reqs, faults) = s.finish().await;
        assert_eq!((reqs.len(), faults.len()), (1, 1), "{spec}");
    }
    Ok(())
}
