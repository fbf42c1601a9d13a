//! Declarative `stream`/`wait` steps, the clock, parameters, `base` and `tar_gz` parts against
//! an in-process server shaped like an agent server's session stream.

use std::collections::{BTreeMap, HashMap};
use std::io::Read;
use std::net::SocketAddr;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use bench_journeys::declarative::{self, JourneyFile};
use bench_journeys::{Cancel, Env, Journey, RunResult, run_latency};
use bench_transport::{Auth, Client, ClientConfig};
use bytes::Bytes;
use http_body_util::{BodyExt, Full};
use hyper::{Request, Response, StatusCode};
use tokio::sync::mpsc;

use crate::sse_server::{BoxBody, ChanBody};

/// The open streams of each session, with whether they want typed events.
type Streams = HashMap<String, Vec<(mpsc::Sender<Bytes>, bool)>>;

/// When the scripted events of a turn are sent, after the turn is posted.
const FIRST_DELTA_MS: u64 = 60;
const IDLE_MS: u64 = 1500;

/// The fake agent server:
///
/// * `GET /s/{id}/stream` → an event stream: `event: session.heartbeat` at once, then the
///   events of every turn posted to the session. `?end=1`: the stream ends after the
///   heartbeat. `?typed=1`: events carry no `event:` line, only a JSON `type`.
/// * `POST /s/{id}/events` with `{"type": "message"}` → 202; the stream gets three
///   `response.output_text.delta` events from +60 ms, then `session.status` `{"status":
///   "idle", "turn": N}` at +1500 ms. `{"type": "fail"}` → `response.failed`; `{"type":
///   "silent"}` → nothing.
/// * `POST /upload` → 200, the body kept; `GET /ping` → 200 `{"pong": true}`.
#[derive(Default)]
struct Agent {
    streams: Mutex<Streams>,
    turns: Mutex<u32>,
    uploads: Mutex<Vec<(String, Bytes)>>,
    paths: Mutex<Vec<String>>,
}

fn frame(typed: bool, name: &str, data: serde_json::Value) -> Bytes {
    let mut data = data;
    if typed {
        data["type"] = name.into();
        Bytes::from(format!("data: {data}\n\n"))
    } else {
        Bytes::from(format!("event: {name}\ndata: {data}\n\n"))
    }
}

impl Agent {
    fn send_later(
        &self,
        session: &str,
        after_ms: u64,
        name: &'static str,
        data: serde_json::Value,
    ) {
        let targets: Vec<_> = self
            .streams
            .lock()
            .unwrap()
            .get(session)
            .cloned()
            .unwrap_or_default();
        tokio::spawn(async move {
            tokio::time::sleep(Duration::from_millis(after_ms)).await;
            for (tx, typed) in targets {
                let _ = tx.send(frame(typed, name, data.clone())).await;
            }
        });
    }

    async fn handle(self: Arc<Self>, req: Request<hyper::body::Incoming>) -> Response<BoxBody> {
        let (parts, body) = req.into_parts();
        let body = body.collect().await.unwrap().to_bytes();
        let uri = parts.uri.to_string();
        self.paths.lock().unwrap().push(uri.clone());
        let (path, query) = uri.split_once('?').unwrap_or((&uri, ""));
        let segs: Vec<&str> = path.trim_matches('/').split('/').collect();
        let full = |status: StatusCode, text: String| {
            Response::builder()
                .status(status)
                .header("content-type", "application/json")
                .body(Full::new(Bytes::from(text)).boxed())
                .unwrap()
        };
        match (parts.method.as_str(), segs.as_slice()) {
            ("GET", ["s", id, "stream"]) => {
                let (tx, rx) = mpsc::channel(64);
                let typed = query.contains("typed=1");
                tx.send(frame(typed, "session.heartbeat", serde_json::json!({})))
                    .await
                    .unwrap();
                if query.contains("end=1") {
                    drop(tx);
                } else {
                    self.streams
                        .lock()
                        .unwrap()
                        .entry((*id).to_owned())
                        .or_default()
                        .push((tx, typed));
                }
                Response::builder()
                    .header("content-type", "text/event-stream")
                    .body(ChanBody(rx).boxed())
                    .unwrap()
            }
            ("POST", ["s", id, "events"]) => {
                let v: serde_json::Value = serde_json::from_slice(&body).unwrap_or_default();
                match v["type"].as_str() {
                    Some("message") => {
                        let n = {
                            let mut t = self.turns.lock().unwrap();
                            *t += 1;
                            *t
                        };
                        for i in 0..3u64 {
                            self.send_later(
                                id,
                                FIRST_DELTA_MS + 10 * i,
                                "response.output_text.delta",
                                serde_json::json!({"delta": format!("word{i} ")}),
                            );
                        }
                        self.send_later(
                            id,
                            IDLE_MS,
                            "session.status",
                            serde_json::json!({"status": "idle", "turn": n}),
                        );
                    }
                    Some("fail") => self.send_later(
                        id,
                        20,
                        "response.failed",
                        serde_json::json!({"error": {"message": "the model is unavailable"}}),
                    ),
                    _ => {}
                }
                full(StatusCode::ACCEPTED, "{\"queued\":true}".into())
            }
            ("POST", ["upload"]) => {
                let ct = parts
                    .headers
                    .get("content-type")
                    .map(|v| v.to_str().unwrap().to_owned())
                    .unwrap_or_default();
                self.uploads.lock().unwrap().push((ct, body));
                full(StatusCode::OK, "{\"ok\":true}".into())
            }
            ("GET", ["ping"]) => full(StatusCode::OK, "{\"pong\":true}".into()),
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

fn env_for(addr: SocketAddr) -> Env {
    let mut cfg = ClientConfig::new(format!("http://{addr}"));
    cfg.auth = Auth::None;
    cfg.timeout = Duration::from_secs(5);
    Env::new(Client::new(cfg).unwrap())
}

async fn start(toml: &str, params: &[(&str, &str)]) -> (Arc<Agent>, Env, JourneyFile) {
    let agent = Arc::new(Agent::default());
    let addr = serve(agent.clone()).await;
    let params: BTreeMap<String, String> = params
        .iter()
        .map(|(k, v)| ((*k).to_owned(), (*v).to_owned()))
        .collect();
    let file = declarative::parse_with("turns.toml", toml, &params).unwrap();
    (agent, env_for(addr), file)
}

async fn run(file: &JourneyFile, env: &Env, name: &str, n: u32) -> RunResult {
    let j: Arc<dyn Journey> = file
        .journeys()
        .into_iter()
        .find(|j| j.name() == name)
        .unwrap();
    run_latency(j.as_ref(), env, n, 0, &Cancel::new()).await
}

const TURNS: &str = r#"
[[journey]]
name = "first_delta"
measure = [
  { path = "/s/a/stream", stream = "events", until = { event = "session.heartbeat" } },
  { method = "POST", path = "/s/a/events", json = { type = "message" }, expect = 202, clock = "start" },
  { wait = "events", until = { event = "response.output_text.delta" }, fail_on = [{ event = "response.failed" }], clock = "stop" },
  { wait = "events", until = { event = "session.status", data = { status = "idle" } }, capture = { turn = "turn" } },
]

[[journey]]
name = "whole_turn"
measure = [
  { path = "/s/b/stream?typed=1", stream = "events", until = { event = "session.heartbeat" } },
  { method = "POST", path = "/s/b/events", json = { type = "message" } },
  { wait = "events", until = { data = { type = "session.status", status = "idle" } } },
]

[[journey]]
name = "failed_turn"
measure = [
  { path = "/s/c/stream", stream = "events", until = { event = "session.heartbeat" } },
  { method = "POST", path = "/s/c/events", json = { type = "fail" } },
  { wait = "events", until = { event = "session.status" }, fail_on = [{ event = "response.failed" }] },
]

[[journey]]
name = "silent_turn"
measure = [
  { path = "/s/d/stream", stream = "events", until = { event = "session.heartbeat" } },
  { method = "POST", path = "/s/d/events", json = { type = "silent" } },
  { wait = "events", until = { event = "session.status" }, timeout_s = 0.3 },
]

[[journey]]
name = "ended_stream"
measure = [
  { path = "/s/e/stream?end=1", stream = "events", until = { event = "session.heartbeat" } },
  { wait = "events", until = { event = "session.status" } },
]

[[journey]]
name = "no_stream"
measure = [
  { path = "/nowhere", stream = "events" },
]
"#;

#[tokio::test]
async fn the_clock_stops_at_the_first_named_event() {
    let (agent, env, file) = start(TURNS, &[]).await;
    let r = run(&file, &env, "first_delta", 2).await;
    assert_eq!(r.n_failures(), 0, "{:?}", r.failure_examples);
    assert_eq!(r.latencies_ms.len(), 2);
    for &ms in &r.latencies_ms {
        // From the post to the first delta (sent 60 ms after the post), not to the idle status
        // that follows 1.5 s after it: the operation itself lasted until idle.
        assert!(ms >= FIRST_DELTA_MS as f64, "{ms} ms");
        assert!(ms < (IDLE_MS - 500) as f64, "{ms} ms: stopped at idle?");
    }
    assert_eq!(*agent.turns.lock().unwrap(), 2);
    assert!(
        r.wall_s >= 2.0 * IDLE_MS as f64 / 1000.0,
        "each op waited for idle"
    );
}

#[tokio::test]
async fn without_a_clock_the_whole_operation_is_timed_and_typed_events_match() {
    let (_agent, env, file) = start(TURNS, &[]).await;
    let r = run(&file, &env, "whole_turn", 1).await;
    assert_eq!(r.n_failures(), 0, "{:?}", r.failure_examples);
    assert!(r.latencies_ms[0] >= IDLE_MS as f64, "{:?}", r.latencies_ms);
}

#[tokio::test]
async fn a_failure_event_fails_the_operation() {
    let (_agent, env, file) = start(TURNS, &[]).await;
    let r = run(&file, &env, "failed_turn", 2).await;
    assert_eq!(r.n_success(), 0);
    let reason = "other: response.failed on stream events";
    assert_eq!(r.failures.get(reason), Some(&2), "{:?}", r.failures);
    assert!(
        r.failure_examples[reason].contains("the model is unavailable"),
        "{:?}",
        r.failure_examples
    );
}

#[tokio::test]
async fn an_event_that_never_comes_is_a_timeout_failure() {
    let (_agent, env, file) = start(TURNS, &[]).await;
    let r = run(&file, &env, "silent_turn", 1).await;
    assert_eq!(r.failures.get("timeout"), Some(&1), "{:?}", r.failures);
    assert!(
        r.failure_examples["timeout"].contains("no session.status on stream events"),
        "{:?}",
        r.failure_examples
    );
}

#[tokio::test]
async fn a_stream_that_ends_or_never_opens_fails() {
    let (_agent, env, file) = start(TURNS, &[]).await;
    let r = run(&file, &env, "ended_stream", 1).await;
    assert_eq!(
        r.failures
            .get("other: stream events ended before session.status"),
        Some(&1),
        "{:?}",
        r.failures
    );
    let r = run(&file, &env, "no_stream", 1).await;
    assert_eq!(r.failures.get("HTTP 404"), Some(&1), "{:?}", r.failures);
    assert!(r.failure_examples["HTTP 404"].contains("not found"));
}

const PARAMS: &str = r#"
[params]
session = { description = "the session to use" }
other = { description = "host:port of another server" }
greeting = { default = "hello", description = "what to say" }
reply_tokens = { default = 16 }

[[setup]]
base = "http://{{other}}"
path = "/ping"
capture = { pong = "pong" }

[[journey]]
name = "upload"
report = ["reply_tokens", "pong"]
measure = [
  { method = "POST", path = "/upload", multipart = [
    { name = "bundle", filename = "agent.tar.gz", content_type = "application/gzip", tar_gz = { "config.yaml" = "name: {{session}}\ngreeting: {{greeting}}\n" } },
  ] },
]
"#;

#[tokio::test]
async fn params_base_and_tar_gz_parts() {
    let other = Arc::new(Agent::default());
    let other_addr = serve(other.clone()).await;
    let addr_s = other_addr.to_string();
    let (agent, env, file) = start(PARAMS, &[("session", "s-42"), ("other", &addr_s)]).await;
    assert!(file.missing_params().is_none());
    let r = run(&file, &env, "upload", 1).await;
    assert_eq!(
        r.n_failures(),
        0,
        "{:?} {:?}",
        r.setup_failure,
        r.failure_examples
    );
    // The setup's request went to the other server, not to the journey's.
    assert_eq!(other.paths.lock().unwrap().as_slice(), ["/ping"]);
    assert_eq!(
        r.notes,
        BTreeMap::from([
            ("pong".to_owned(), "true".to_owned()),
            ("reply_tokens".to_owned(), "16".to_owned())
        ])
    );
    let uploads = agent.uploads.lock().unwrap().clone();
    assert_eq!(uploads.len(), 1);
    let (ct, body) = &uploads[0];
    let boundary = ct.split("boundary=").nth(1).unwrap();
    let text = body.as_ref();
    let start = text.windows(4).position(|w| w == b"\r\n\r\n").unwrap() + 4;
    let end = text
        .windows(boundary.len() + 4)
        .rposition(|w| w == format!("\r\n--{boundary}").as_bytes())
        .unwrap();
    let gz = &text[start..end];
    let mut tar_bytes = Vec::new();
    flate2::read::GzDecoder::new(gz)
        .read_to_end(&mut tar_bytes)
        .unwrap();
    let mut archive = tar::Archive::new(&tar_bytes[..]);
    let mut files = Vec::new();
    for e in archive.entries().unwrap() {
        let mut e = e.unwrap();
        let name = e.path().unwrap().display().to_string();
        let mut s = String::new();
        e.read_to_string(&mut s).unwrap();
        files.push((name, s));
    }
    assert_eq!(
        files,
        [(
            "config.yaml".to_owned(),
            "name: s-42\ngreeting: hello\n".to_owned()
        )]
    );
}

#[tokio::test]
async fn a_missing_parameter_is_named() {
    let (_agent, env, file) = start(PARAMS, &[("other", "127.0.0.1:1")]).await;
    let msg = file.missing_params().unwrap();
    assert!(
        msg.contains("session (--param session=VALUE: the session to use)"),
        "{msg}"
    );
    let r = run(&file, &env, "upload", 1).await;
    assert_eq!(
        r.setup_failure.as_deref(),
        Some("other: parameter session is not set (pass --param session=VALUE)")
    );
}

fn parse_err(toml: &str, params: &[(&str, &str)]) -> String {
    let params: BTreeMap<String, String> = params
        .iter()
        .map(|(k, v)| ((*k).to_owned(), (*v).to_owned()))
        .collect();
    declarative::parse_with("bad.toml", toml, &params)
        .unwrap_err()
        .to_string()
}

#[test]
fn stream_steps_are_checked_when_parsed() {
    let one = |measure: &str| format!("[[journey]]\nname = \"j\"\nmeasure = [{measure}]\n");
    for (toml, want) in [
        (
            one(r#"{ wait = "events", until = { event = "x" } }"#),
            "wait \"events\": no earlier step opens a stream named \"events\"",
        ),
        (
            one(r#"{ path = "/s", stream = "e" }, { wait = "e", path = "/x", until = { event = "x" } }"#),
            "a `wait` step sends nothing: remove path",
        ),
        (
            one(r#"{ path = "/s", stream = "e" }, { wait = "e" }"#),
            "a `wait` step needs `until`",
        ),
        (
            one(r#"{ path = "/s", until = { event = "x" } }"#),
            "`until` and `fail_on` belong to `stream` and `wait` steps",
        ),
        (
            one(r#"{ path = "/s", stream = "e", until = {} }"#),
            "until: give `event`, `data` or both",
        ),
        (
            one(r#"{ path = "/a", clock = "stop" }, { path = "/b", clock = "start" }"#),
            "the clock stops (step 0) before it starts (step 1)",
        ),
        (
            one(r#"{ path = "/a", clock = "start" }, { path = "/b", clock = "start" }"#),
            "clock = \"start\" on steps [0, 1]: give it once",
        ),
        (
            "[[journey]]\nname = \"j\"\nsetup = [{ path = \"/a\", clock = \"start\" }]\nmeasure = [{ path = \"/b\" }]\n".to_owned(),
            "setup[0]: `clock` belongs to measure steps",
        ),
        (
            one(r#"{ path = "/a", base = "ftp://x" }"#),
            "base \"ftp://x\": give an http:// or https:// URL",
        ),
        (
            one(r#"{ path = "/a", clock = "later" }"#),
            "unknown variant `later`",
        ),
        (
            "[params]\nsid = {}\n[[journey]]\nname = \"j\"\nmeasure = [{ path = \"/a\", capture = { sid = \"id\" } }]\n".to_owned(),
            "\"sid\" is a parameter: a step cannot capture or collect it",
        ),
        (
            "[[journey]]\nname = \"j\"\nreport = [\"nope\"]\nmeasure = [{ path = \"/a\" }]\n".to_owned(),
            "report: \"nope\" is neither a parameter nor captured by a step",
        ),
    ] {
        let e = parse_err(&toml, &[]);
        assert!(e.contains(want), "{toml}\n→ {e}\nwant: {want}");
    }
    // A stream opened by the file's setup is open in each journey's setup.
    let ok = "[[setup]]\npath = \"/s\"\nstream = \"e\"\n[[journey]]\nname = \"j\"\nsetup = [{ wait = \"e\", until = { event = \"x\" } }]\nmeasure = [{ path = \"/a\" }]\n";
    declarative::parse("ok.toml", ok).unwrap();
    let e = parse_err(one(r#"{ path = "/a" }"#).as_str(), &[("x", "1")]);
    assert!(
        e.contains("unknown parameter \"x\": the file declares no [params]"),
        "{e}"
    );
}

#[test]
fn the_agent_turns_pack_parses_and_names_its_parameters() {
    let text = bench_journeys::packs::AGENT_TURNS_TOML;
    let f = declarative::parse("agent-turns.toml", text).unwrap();
    let names: Vec<String> = f.journeys().iter().map(|j| j.name().to_owned()).collect();
    assert_eq!(
        names,
        [
            "session_cold_start",
            "warm_turn",
            "time_to_first_token",
            "interrupt",
            "read_runner_file"
        ]
    );
    for j in f.journeys() {
        assert!(j.needs_runner(), "{}", j.name());
        assert!(!j.concurrency_safe(), "{}", j.name());
        let cap = if j.name() == "read_runner_file" {
            50
        } else {
            5
        };
        assert_eq!(j.max_iterations(), Some(cap), "{}", j.name());
        assert_eq!(j.needs_mock_llm(), j.name() != "read_runner_file");
    }
    let missing = f.missing_params().unwrap();
    assert!(
        missing.contains("runner_id (--param runner_id=VALUE"),
        "{missing}"
    );
    assert!(
        missing.contains("llm_url (--param llm_url=VALUE"),
        "{missing}"
    );
    let given = BTreeMap::from([
        ("runner_id".to_owned(), "r".to_owned()),
        ("llm_url".to_owned(), "http://127.0.0.1:1".to_owned()),
    ]);
    let f = declarative::parse_with("agent-turns.toml", text, &given).unwrap();
    assert!(f.missing_params().is_none());
    let e = declarative::parse_with(
        "agent-turns.toml",
        text,
        &BTreeMap::from([("runner".to_owned(), "r".to_owned())]),
    )
    .unwrap_err();
    assert!(
        e.to_string().contains("unknown parameter \"runner\""),
        "{e}"
    );
}
