//! The interrupt journey of the `agent-turns` pack, end to end and hermetic: a fake agent server
//! whose turns make real streamed chat requests to the simulator (`bench-sim`), which holds them
//! (`POST /sim/hold`), so every timed interrupt cancels an LLM call that was certainly running.

use std::collections::{BTreeMap, HashMap};
use std::net::SocketAddr;
use std::path::Path;
use std::sync::atomic::{AtomicU32, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use bench_journeys::declarative::{self, JourneyFile};
use bench_journeys::{Cancel, Env, Journey, RunResult, run_latency};
use bench_sim::{LatencyMode, SimConfig, SimServer};
use bench_transport::{Auth, Client, ClientConfig};
use bytes::Bytes;
use http::{HeaderName, HeaderValue, Method};
use http_body_util::{BodyExt, Full};
use hyper::{Request, Response, StatusCode};
use tempfile::NamedTempFile;
use tokio::sync::mpsc;
use tokio::task::JoinHandle;

use crate::sse_server::{BoxBody, ChanBody};

/// Generous: the test runs on loaded machines. Nothing waits this long when all is well.
const TIMEOUT: Duration = Duration::from_secs(60);

/// One session of the fake agent server.
#[derive(Default)]
struct Session {
    /// The open event streams.
    streams: Vec<mpsc::Sender<Bytes>>,
    /// The turn in progress: its number and the task running its LLM call.
    turn: Option<(u32, JoinHandle<()>)>,
}

/// The fake agent server, its LLM the simulator:
///
/// * `POST /s` → 201 `{"id": "sN"}`; `DELETE /s/{id}` → 204 (a turn in progress is dropped).
/// * `GET /s/{id}/stream` → an event stream (`event:` lines): `session.heartbeat` at once, then
///   the session's events.
/// * `POST /s/{id}/events` `{"type": "message", "data": {"content": [{"text": ...}]}}` → 202;
///   emits `session.status` `running` and starts a turn: a streamed `POST
///   {llm}/v1/chat/completions` read to its end, then `response.completed` (or
///   `response.failed`) and `session.status` `idle`.
/// * `{"type": "interrupt"}` → 202 once the turn in progress (if any) is cancelled: its task is
///   aborted and awaited, which drops the LLM response and closes its connection; then
///   `session.interrupted` `{"cancelled": bool}` and `session.status` `idle`.
struct Agent {
    llm: Client,
    sessions: Mutex<HashMap<String, Session>>,
    next_session: AtomicU32,
    next_turn: AtomicU32,
    /// Turns started (each makes one LLM call), LLM calls read to their end, LLM calls
    /// cancelled by an interrupt, interrupts received.
    llm_started: AtomicU32,
    llm_completed: AtomicU32,
    llm_cancelled: AtomicU32,
    interrupts: AtomicU32,
}

fn frame(name: &str, data: &serde_json::Value) -> Bytes {
    Bytes::from(format!("event: {name}\ndata: {data}\n\n"))
}

impl Agent {
    fn new(llm_url: &str) -> Agent {
        let mut cfg = ClientConfig::new(llm_url);
        cfg.auth = Auth::None;
        cfg.timeout = TIMEOUT;
        Agent {
            llm: Client::new(cfg).unwrap(),
            sessions: Mutex::default(),
            next_session: AtomicU32::new(0),
            next_turn: AtomicU32::new(0),
            llm_started: AtomicU32::new(0),
            llm_completed: AtomicU32::new(0),
            llm_cancelled: AtomicU32::new(0),
            interrupts: AtomicU32::new(0),
        }
    }

    /// Sends an event to every open stream of the session, in order (never blocks: a stream
    /// that is gone or not read is dropped).
    fn emit(
        &self,
        sessions: &mut HashMap<String, Session>,
        id: &str,
        name: &str,
        data: &serde_json::Value,
    ) {
        let s = sessions.entry(id.to_owned()).or_default();
        let f = frame(name, data);
        s.streams.retain(|tx| tx.try_send(f.clone()).is_ok());
    }

    /// One streamed chat request to the LLM, read to its end; the number of body chunks.
    async fn call_llm(&self, id: &str, text: &str) -> Result<usize, String> {
        let body = serde_json::json!({
            "model": "bench-sim",
            "messages": [{"role": "user", "content": text}],
            "max_tokens": 8,
            "stream": true,
        });
        let headers = [(
            HeaderName::from_static("x-session-id"),
            HeaderValue::try_from(id).unwrap(),
        )];
        let mut resp = self
            .llm
            .request_streaming(
                Method::POST,
                "/v1/chat/completions",
                &headers,
                Bytes::from(body.to_string()),
                None,
            )
            .await
            .map_err(|e| e.to_string())?;
        if resp.status != StatusCode::OK {
            return Err(format!("LLM answered {}", resp.status));
        }
        let mut chunks = 0;
        let mut text = Vec::new();
        while let Some(c) = resp.chunk().await {
            let c = c.map_err(|e| e.to_string())?;
            text.extend_from_slice(&c);
            chunks += 1;
        }
        if !text.ends_with(b"data: [DONE]\n\n") {
            return Err("the LLM stream ended without [DONE]".into());
        }
        Ok(chunks)
    }

    async fn turn(self: Arc<Self>, id: String, n: u32, text: String) {
        let outcome = self.call_llm(&id, &text).await;
        let mut sessions = self.sessions.lock().unwrap();
        match outcome {
            Ok(chunks) => {
                self.llm_completed.fetch_add(1, Ordering::SeqCst);
                let data = serde_json::json!({"turn": n, "chunks": chunks});
                self.emit(&mut sessions, &id, "response.completed", &data);
            }
            Err(e) => {
                let data = serde_json::json!({"turn": n, "error": {"message": e}});
                self.emit(&mut sessions, &id, "response.failed", &data);
            }
        }
        let s = sessions.entry(id.clone()).or_default();
        if s.turn.as_ref().is_some_and(|(m, _)| *m == n) {
            s.turn = None;
        }
        let data = serde_json::json!({"status": "idle", "turn": n});
        self.emit(&mut sessions, &id, "session.status", &data);
    }

    async fn handle(self: Arc<Self>, req: Request<hyper::body::Incoming>) -> Response<BoxBody> {
        let (parts, body) = req.into_parts();
        let body = body.collect().await.unwrap().to_bytes();
        let path = parts.uri.path().to_owned();
        let segs: Vec<&str> = path.trim_matches('/').split('/').collect();
        let full = |status: StatusCode, text: String| {
            Response::builder()
                .status(status)
                .header("content-type", "application/json")
                .body(Full::new(Bytes::from(text)).boxed())
                .unwrap()
        };
        match (parts.method.as_str(), segs.as_slice()) {
            ("POST", ["s"]) => {
                let n = self.next_session.fetch_add(1, Ordering::SeqCst) + 1;
                let id = format!("s{n}");
                self.sessions
                    .lock()
                    .unwrap()
                    .insert(id.clone(), Session::default());
                full(
                    StatusCode::CREATED,
                    serde_json::json!({"id": id}).to_string(),
                )
            }
            ("DELETE", ["s", id]) => {
                let turn = self
                    .sessions
                    .lock()
                    .unwrap()
                    .remove(*id)
                    .and_then(|s| s.turn);
                if let Some((_, task)) = turn {
                    task.abort();
                }
                Response::builder()
                    .status(StatusCode::NO_CONTENT)
                    .body(Full::new(Bytes::new()).boxed())
                    .unwrap()
            }
            ("GET", ["s", id, "stream"]) => {
                let (tx, rx) = mpsc::channel(64);
                tx.try_send(frame("session.heartbeat", &serde_json::json!({})))
                    .unwrap();
                self.sessions
                    .lock()
                    .unwrap()
                    .entry((*id).to_owned())
                    .or_default()
                    .streams
                    .push(tx);
                Response::builder()
                    .header("content-type", "text/event-stream")
                    .body(ChanBody(rx).boxed())
                    .unwrap()
            }
            ("POST", ["s", id, "events"]) => {
                let v: serde_json::Value = serde_json::from_slice(&body).unwrap_or_default();
                match v["type"].as_str() {
                    Some("message") => {
                        let text = v["data"]["content"][0]["text"]
                            .as_str()
                            .unwrap_or("hello")
                            .to_owned();
                        let n = self.next_turn.fetch_add(1, Ordering::SeqCst) + 1;
                        self.llm_started.fetch_add(1, Ordering::SeqCst);
                        let mut sessions = self.sessions.lock().unwrap();
                        let data = serde_json::json!({"status": "running", "turn": n});
                        self.emit(&mut sessions, id, "session.status", &data);
                        // Spawned under the lock: the turn cannot end (and look for itself)
                        // before it is recorded.
                        let task = tokio::spawn(self.clone().turn((*id).to_owned(), n, text));
                        let s = sessions.entry((*id).to_owned()).or_default();
                        if let Some((_, old)) = s.turn.replace((n, task)) {
                            old.abort();
                        }
                    }
                    Some("interrupt") => {
                        self.interrupts.fetch_add(1, Ordering::SeqCst);
                        let turn = self
                            .sessions
                            .lock()
                            .unwrap()
                            .get_mut(*id)
                            .and_then(|s| s.turn.take());
                        let cancelled = match turn {
                            Some((_, task)) => {
                                task.abort();
                                // Resolves once the task's future (and with it the LLM
                                // response and its connection) is dropped.
                                let cancelled = task.await.is_err_and(|e| e.is_cancelled());
                                if cancelled {
                                    self.llm_cancelled.fetch_add(1, Ordering::SeqCst);
                                }
                                cancelled
                            }
                            None => false,
                        };
                        let mut sessions = self.sessions.lock().unwrap();
                        let data = serde_json::json!({"cancelled": cancelled});
                        self.emit(&mut sessions, id, "session.interrupted", &data);
                        let data = serde_json::json!({"status": "idle"});
                        self.emit(&mut sessions, id, "session.status", &data);
                    }
                    _ => return full(StatusCode::BAD_REQUEST, "{\"error\":\"type\"}".into()),
                }
                full(StatusCode::ACCEPTED, "{\"queued\":true}".into())
            }
            _ => full(StatusCode::NOT_FOUND, "{\"error\":\"not found\"}".into()),
        }
    }
}

async fn serve(agent: Arc<Agent>) -> SocketAddr {
    crate::sse_server::serve(move |req| {
        let agent = agent.clone();
        async move { agent.handle(req).await }
    })
    .await
}

/// A fresh file for the simulator's request log, removed when the test ends (even a failed
/// one).
fn temp_log(tag: &str) -> NamedTempFile {
    tempfile::Builder::new()
        .prefix(&format!("bench-journeys-interrupt-{tag}-"))
        .suffix(".jsonl")
        .tempfile()
        .unwrap()
}

fn read_log(path: &Path) -> Vec<serde_json::Value> {
    std::fs::read_to_string(path)
        .unwrap_or_default()
        .lines()
        .map(|l| serde_json::from_str(l).unwrap())
        .collect()
}

fn held_lines(log: &[serde_json::Value]) -> Vec<&serde_json::Value> {
    log.iter().filter(|l| l.get("held_ms").is_some()).collect()
}

struct Stack {
    sim: SimServer,
    log: NamedTempFile,
    agent: Arc<Agent>,
    env: Env,
    file: JourneyFile,
}

/// The simulator (fixed, short LLM times, so an unheld turn ends quickly), the agent server
/// calling it, and the journeys file with `llm_url` pointing at it.
async fn start(toml: &str, tag: &str, params: &[(&str, &str)]) -> Stack {
    let log = temp_log(tag);
    let sim = SimServer::start(SimConfig {
        request_log: Some(log.path().to_owned()),
        mode: LatencyMode::Fixed {
            ttft: Duration::from_millis(20),
            itl: Duration::from_millis(2),
        },
        ..Default::default()
    })
    .await
    .unwrap();
    let agent = Arc::new(Agent::new(&sim.base_url()));
    let addr = serve(agent.clone()).await;
    let mut cfg = ClientConfig::new(format!("http://{addr}"));
    cfg.auth = Auth::None;
    cfg.timeout = TIMEOUT;
    let env = Env::new(Client::new(cfg).unwrap());
    let mut given = BTreeMap::from([("llm_url".to_owned(), sim.base_url())]);
    for (k, v) in params {
        given.insert((*k).to_owned(), (*v).to_owned());
    }
    let file = declarative::parse_with("interrupt.toml", toml, &given).unwrap();
    assert!(file.missing_params().is_none());
    Stack {
        sim,
        log,
        agent,
        env,
        file,
    }
}

async fn run(file: &JourneyFile, env: &Env, n: u32, warmup: u32) -> RunResult {
    let j: Arc<dyn Journey> = file
        .journeys()
        .into_iter()
        .find(|j| j.name() == "interrupt")
        .unwrap();
    run_latency(j.as_ref(), env, n, warmup, &Cancel::new()).await
}

/// The steps of the pack's `interrupt` journey against the fake agent server (`/s` for
/// `/v1/sessions`, no runner to bind). `#HOLD` is replaced by the hold step; left alone it is a
/// comment, for the control without it.
const INTERRUPT: &str = r#"
[params]
llm_url = { description = "root URL of the simulator" }
prompt = { default = "Say hello." }
held_wait_ms = { default = 30000, description = "how long the measure waits for the LLM request to be held" }

[defaults]
timeout_s = 60

[[journey]]
name = "interrupt"
setup = [
  { method = "POST", path = "/s", expect = 201, capture = { session_id = "id" } },
  { path = "/s/{{session_id}}/stream", stream = "events", until = { event = "session.heartbeat" } },
  { method = "POST", path = "/s/{{session_id}}/events", json = { type = "message", data = { role = "user", content = [{ type = "input_text", text = "{{prompt}}" }] } }, expect = 202 },
  { wait = "events", until = { event = "session.status", data = { status = "running" } }, fail_on = [{ event = "response.failed" }] },
  { wait = "events", until = { event = "session.status", data = { status = "idle" } }, fail_on = [{ event = "response.failed" }, { event = "session.status", data = { status = "failed" } }] },
  #HOLD
]
measure = [
  { path = "/s/{{session_id}}/stream", stream = "events", until = { event = "session.heartbeat" } },
  { method = "POST", path = "/s/{{session_id}}/events", json = { type = "message", data = { role = "user", content = [{ type = "input_text", text = "{{prompt}}" }] } }, expect = 202 },
  { base = "{{llm_url}}", path = "/sim/held?at_least=1&timeout_ms={{held_wait_ms}}", expect = 200 },
  { method = "POST", path = "/s/{{session_id}}/events", json = { type = "interrupt" }, expect = 202, clock = "start" },
  { wait = "events", until = { event = "session.interrupted" }, fail_on = [{ event = "response.failed" }], clock = "stop" },
  { wait = "events", until = { event = "session.status", data = { status = "idle" } } },
  { base = "{{llm_url}}", path = "/sim/held?at_most=0&timeout_ms=10000", expect = 200 },
]
teardown = [
  { base = "{{llm_url}}", method = "POST", path = "/sim/release" },
  { method = "DELETE", path = "/s/{{session_id}}" },
]
"#;

const HOLD_STEP: &str =
    r#"{ base = "{{llm_url}}", method = "POST", path = "/sim/hold", expect = 200 },"#;

fn with_hold() -> String {
    INTERRUPT.replace("#HOLD", HOLD_STEP)
}

/// `GET /sim/held` with no bounds: the hold state now.
async fn held_now(sim: &SimServer) -> serde_json::Value {
    let mut cfg = ClientConfig::new(sim.base_url());
    cfg.auth = Auth::None;
    cfg.timeout = TIMEOUT;
    let r = Client::new(cfg)
        .unwrap()
        .get("/sim/held", None)
        .await
        .unwrap();
    assert_eq!(r.status, StatusCode::OK);
    serde_json::from_slice(&r.body).unwrap()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn each_interrupt_cancels_an_llm_call_held_in_flight() {
    let Stack {
        sim,
        log,
        agent,
        env,
        file,
    } = start(&with_hold(), "held", &[]).await;
    let r = run(&file, &env, 3, 1).await;
    assert_eq!(r.setup_failure, None);
    assert_eq!(r.n_failures(), 0, "{:?}", r.failure_examples);
    assert_eq!(r.n_success(), 3);
    for &ms in &r.latencies_ms {
        assert!(ms.is_finite() && ms > 0.0, "{:?}", r.latencies_ms);
    }

    // The setup turn ran to its end; each of the 4 operations (warmup + 3) interrupted a turn
    // whose LLM call was in flight and cancelled it.
    assert_eq!(agent.llm_started.load(Ordering::SeqCst), 5);
    assert_eq!(agent.llm_completed.load(Ordering::SeqCst), 1);
    assert_eq!(agent.interrupts.load(Ordering::SeqCst), 4);
    assert_eq!(agent.llm_cancelled.load(Ordering::SeqCst), 4);

    // The teardown released the hold; 4 requests were ever held, none is now.
    let h = held_now(&sim).await;
    assert_eq!(h["hold"], false, "{h}");
    assert_eq!(h["held"], 0, "{h}");
    assert_eq!(h["held_total"], 4, "{h}");

    // Before the shutdown (which would abort any request still held): the 4 held requests are
    // already logged as aborted, so it was the agent that cancelled them. The line is written
    // just after a request leaves the held set, so wait for it a little.
    let deadline = std::time::Instant::now() + TIMEOUT;
    while held_lines(&read_log(log.path())).len() < 4 && std::time::Instant::now() < deadline {
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    let before = read_log(log.path());
    let held_before = held_lines(&before);
    assert_eq!(held_before.len(), 4, "{before:#?}");
    assert!(
        held_before.iter().all(|l| l["finish"] == "aborted"),
        "{before:#?}"
    );

    sim.shutdown().await;
    let lines = read_log(log.path());
    // The setup's turn plus the 4 interrupted ones: the shutdown added none.
    assert_eq!(lines.len(), 5, "{lines:#?}");
    let held = held_lines(&lines);
    assert_eq!(held.len(), 4, "{lines:#?}");
    for l in &held {
        assert_eq!(l["finish"], "aborted", "{l}");
        assert!(l["held_ms"].as_f64().unwrap() > 0.0, "{l}");
        assert_eq!(l["endpoint"], "/v1/chat/completions", "{l}");
        assert_eq!(l["stream"], true, "{l}");
        assert_eq!(l["session"], "s1", "{l}");
        assert_eq!(l["completion_tokens"], 0, "{l}");
    }
    // The one request that finished normally is the setup's, never held.
    let normal: Vec<_> = lines
        .iter()
        .filter(|l| l["finish"] == "stop" || l["finish"] == "length")
        .collect();
    assert_eq!(normal.len(), 1, "{lines:#?}");
    assert!(normal[0].get("held_ms").is_none(), "{lines:#?}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn without_the_hold_no_llm_call_is_seen_in_flight_and_the_operation_fails() {
    let Stack {
        sim,
        log,
        agent,
        env,
        file,
    } = start(INTERRUPT, "unheld", &[("held_wait_ms", "300")]).await;
    let r = run(&file, &env, 2, 0).await;
    assert_eq!(r.setup_failure, None);
    assert_eq!(r.n_success(), 0, "{:?}", r.latencies_ms);
    assert_eq!(r.failures.get("HTTP 408"), Some(&2), "{:?}", r.failures);
    let detail = &r.failure_examples["HTTP 408"];
    assert!(
        detail.contains("/sim/held?at_least=1&timeout_ms=300") && detail.contains("\"hold\":false"),
        "{detail}"
    );
    // The operations ended at the check, before any interrupt was sent.
    assert_eq!(agent.interrupts.load(Ordering::SeqCst), 0);
    assert_eq!(agent.llm_started.load(Ordering::SeqCst), 3);

    sim.shutdown().await;
    let lines = read_log(log.path());
    assert_eq!(lines.len(), 3, "{lines:#?}");
    assert!(held_lines(&lines).is_empty(), "{lines:#?}");
}
