//! Declarative journeys against an in-process HTTP server that mimics a tiny session API.

use std::convert::Infallible;
use std::net::SocketAddr;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use bench_journeys::declarative::{self, JourneyFile};
use bench_journeys::{Cancel, Env, Journey, run_latency, run_throughput};
use bench_transport::{Auth, Client, ClientConfig};
use bytes::Bytes;
use http_body_util::{BodyExt, Full};
use hyper::{Request, Response, StatusCode};
use hyper_util::rt::TokioIo;
use tokio::net::TcpListener;

/// A request as the server saw it.
#[derive(Debug, Clone)]
struct Seen {
    method: String,
    uri: String,
    headers: http::HeaderMap,
    body: Bytes,
}

/// The fake API:
///
/// * `GET /sessions` → `{"data":[{"id":..}...]}`
/// * `POST /sessions` (JSON body) → 201 `{"id":"sN"}`
/// * `GET|DELETE /sessions/{id}` → 200 `{"id":..}`, or 404 for an unknown id
/// * `POST /sessions/{id}/fork` → 201 `{"id":"sN"}` (a new session)
/// * `POST /upload` → 200 `{"ok":true}` (the body is kept in the log)
/// * `GET /text` → 200 `not json`; `GET /fail` → 500; anything else → 404
#[derive(Default)]
struct Api {
    sessions: Mutex<Vec<String>>,
    next: Mutex<u32>,
    log: Mutex<Vec<Seen>>,
}

impl Api {
    fn seen(&self) -> Vec<Seen> {
        self.log.lock().unwrap().clone()
    }
    /// `METHOD uri` of every request so far.
    fn lines(&self) -> Vec<String> {
        self.seen()
            .iter()
            .map(|s| format!("{} {}", s.method, s.uri))
            .collect()
    }
    fn count(&self, line: &str) -> usize {
        self.lines().iter().filter(|l| *l == line).count()
    }
    fn sessions(&self) -> Vec<String> {
        self.sessions.lock().unwrap().clone()
    }
    fn create(&self) -> String {
        let mut n = self.next.lock().unwrap();
        *n += 1;
        let id = format!("s{n}");
        self.sessions.lock().unwrap().push(id.clone());
        id
    }

    fn handle(&self, seen: Seen) -> (StatusCode, String) {
        self.log.lock().unwrap().push(seen.clone());
        let path = seen.uri.split('?').next().unwrap_or_default().to_owned();
        let segs: Vec<&str> = path.trim_matches('/').split('/').collect();
        let exists = |id: &str| self.sessions.lock().unwrap().iter().any(|s| s == id);
        let json_ct = seen
            .headers
            .get("content-type")
            .is_some_and(|v| v == "application/json");
        match (seen.method.as_str(), segs.as_slice()) {
            ("GET", ["sessions"]) => {
                let data: Vec<_> = self
                    .sessions()
                    .iter()
                    .map(|id| serde_json::json!({ "id": id }))
                    .collect();
                (
                    StatusCode::OK,
                    serde_json::json!({ "data": data }).to_string(),
                )
            }
            ("POST", ["sessions"]) => {
                if !json_ct || serde_json::from_slice::<serde_json::Value>(&seen.body).is_err() {
                    return (StatusCode::UNPROCESSABLE_ENTITY, "{}".into());
                }
                let id = self.create();
                (StatusCode::CREATED, format!("{{\"id\":\"{id}\"}}"))
            }
            ("GET", ["sessions", id]) if exists(id) => {
                (StatusCode::OK, format!("{{\"id\":\"{id}\"}}"))
            }
            ("DELETE", ["sessions", id]) if exists(id) => {
                self.sessions.lock().unwrap().retain(|s| s != id);
                (StatusCode::OK, "{\"deleted\":true}".into())
            }
            ("POST", ["sessions", id, "fork"]) if exists(id) => {
                let id = self.create();
                (StatusCode::CREATED, format!("{{\"id\":\"{id}\"}}"))
            }
            ("POST", ["upload"]) => (StatusCode::OK, "{\"ok\":true}".into()),
            ("GET", ["text"]) => (StatusCode::OK, "not json".into()),
            ("GET", ["fail"]) => (
                StatusCode::INTERNAL_SERVER_ERROR,
                "{\"error\":\"boom\"}".into(),
            ),
            _ => (StatusCode::NOT_FOUND, "{\"error\":\"not found\"}".into()),
        }
    }
}

async fn serve(api: Arc<Api>) -> SocketAddr {
    let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    tokio::spawn(async move {
        while let Ok((stream, _)) = listener.accept().await {
            let api = api.clone();
            tokio::spawn(async move {
                let svc = hyper::service::service_fn(move |req: Request<hyper::body::Incoming>| {
                    let api = api.clone();
                    async move {
                        let (parts, body) = req.into_parts();
                        let body = body.collect().await.unwrap().to_bytes();
                        let (status, text) = api.handle(Seen {
                            method: parts.method.to_string(),
                            uri: parts.uri.to_string(),
                            headers: parts.headers,
                            body,
                        });
                        let resp = Response::builder()
                            .status(status)
                            .header("content-type", "application/json")
                            .body(Full::new(Bytes::from(text)))
                            .unwrap();
                        Ok::<_, Infallible>(resp)
                    }
                });
                let _ = hyper::server::conn::http1::Builder::new()
                    .serve_connection(TokioIo::new(stream), svc)
                    .await;
            });
        }
    });
    addr
}

async fn setup(toml: &str) -> (Arc<Api>, Env, JourneyFile) {
    let api = Arc::new(Api::default());
    let addr = serve(api.clone()).await;
    let mut cfg = ClientConfig::new(format!("http://{addr}"));
    cfg.auth = Auth::None;
    cfg.timeout = Duration::from_secs(5);
    let env = Env::new(Client::new(cfg).unwrap());
    let file = declarative::parse("test.toml", toml).unwrap();
    (api, env, file)
}

fn journey(file: &JourneyFile, name: &str) -> Arc<dyn Journey> {
    file.journeys()
        .into_iter()
        .find(|j| j.name() == name)
        .unwrap()
}

#[tokio::test]
async fn captures_chain_from_setup_into_measure() {
    let (api, env, file) = setup(
        r#"
        [[journey]]
        name = "get"
        description = "GET a session created in setup"
        setup = [{ method = "POST", path = "/sessions", json = { agent = "a" }, expect = 201, capture = { sid = "id" } }]
        measure = [{ path = "/sessions/{{sid}}", capture = { echoed = "id" } }]
        teardown = [{ method = "DELETE", path = "/sessions/{{sid}}" }]
        "#,
    )
    .await;
    let j = journey(&file, "get");
    assert_eq!(j.description(), "GET a session created in setup");
    let r = run_latency(j.as_ref(), &env, 5, 1, &Cancel::new()).await;
    assert_eq!(r.setup_failure, None);
    assert_eq!(r.n_success(), 5, "{:?}", r.failure_examples);
    assert_eq!(r.n_failures(), 0);
    // The id the server made reached the path of every operation (warmup included), and the
    // teardown deleted it.
    assert_eq!(api.count("GET /sessions/s1"), 6);
    assert_eq!(api.count("DELETE /sessions/s1"), 1);
    assert!(api.sessions().is_empty());
    // The JSON body carried its content type.
    let post = &api.seen()[0];
    assert_eq!(post.headers["content-type"], "application/json");
    assert_eq!(&post.body[..], br#"{"agent":"a"}"#);
}

#[tokio::test]
async fn when_runs_a_step_only_if_its_variable_is_set_or_unset() {
    let (api, env, file) = setup(
        r#"
        [[setup]]
        path = "/sessions"
        capture = { sid = "data[0].id?" }

        [[setup]]
        when = "!sid"
        method = "POST"
        path = "/sessions"
        json = {}
        capture = { sid = "id", created = "id" }

        [[setup]]
        when = "created"
        method = "POST"
        path = "/upload"
        body = "seed {{created}}"

        [[journey]]
        name = "get"
        measure = [{ path = "/sessions/{{sid}}" }]
        "#,
    )
    .await;
    let j = journey(&file, "get");
    // First run: no session yet, so one is created and seeded.
    let r = run_latency(j.as_ref(), &env, 2, 0, &Cancel::new()).await;
    assert_eq!(r.n_success(), 2, "{:?}", r.failure_examples);
    // Second run: the session is found; nothing is created or seeded.
    let r = run_latency(j.as_ref(), &env, 2, 0, &Cancel::new()).await;
    assert_eq!(r.n_success(), 2, "{:?}", r.failure_examples);
    assert_eq!(api.count("POST /sessions"), 1);
    assert_eq!(api.count("POST /upload"), 1);
    assert_eq!(api.count("GET /sessions/s1"), 4);
    let seed = api.seen().into_iter().find(|s| s.uri == "/upload").unwrap();
    assert_eq!(&seed.body[..], b"seed s1");
}

#[tokio::test]
async fn repeat_sets_index() {
    let (api, env, file) = setup(
        r#"
        [[journey]]
        name = "r"
        measure = [{ path = "/text?i={{index}}", repeat = 3 }]
        "#,
    )
    .await;
    let r = run_latency(journey(&file, "r").as_ref(), &env, 2, 0, &Cancel::new()).await;
    assert_eq!(r.n_success(), 2);
    assert_eq!(
        api.lines(),
        ["GET /text?i=0", "GET /text?i=1", "GET /text?i=2"].repeat(2)
    );
}

#[tokio::test]
async fn collected_ids_are_deleted_in_teardown_best_effort() {
    let (api, env, file) = setup(
        r#"
        [[journey]]
        name = "fork"
        concurrency_safe = true
        setup = [{ method = "POST", path = "/sessions", json = {}, capture = { sid = "id" } }]
        measure = [{ method = "POST", path = "/sessions/{{sid}}/fork", expect = 201, collect = { forks = "id" } }]
        teardown = [
          { path = "/fail" },
          { method = "DELETE", path = "/sessions/{{item}}", for_each = "forks" },
          { method = "DELETE", path = "/sessions/{{sid}}" },
        ]
        "#,
    )
    .await;
    let j = journey(&file, "fork");
    assert!(j.concurrency_safe());
    let r = run_throughput(j.as_ref(), &env, 12, 4, 2, &Cancel::new()).await;
    assert_eq!(r.n_success(), 12, "{:?}", r.failure_examples);
    // 1 + 14 forks (warmup included) existed; teardown went on after the failing /fail and
    // deleted them all, then the session itself.
    assert_eq!(api.count("GET /fail"), 1);
    let deletes = api
        .lines()
        .iter()
        .filter(|l| l.starts_with("DELETE "))
        .count();
    assert_eq!(deletes, 15);
    assert!(api.sessions().is_empty(), "{:?}", api.sessions());
}

#[tokio::test]
async fn concurrent_operations_keep_their_captures_apart() {
    let (api, env, file) = setup(
        r#"
        [[journey]]
        name = "create"
        concurrency_safe = true
        measure = [
          { method = "POST", path = "/sessions", json = {}, expect = 201, capture = { id = "id" } },
          { path = "/sessions/{{id}}" },
          { method = "DELETE", path = "/sessions/{{id}}", expect = 200 },
        ]
        "#,
    )
    .await;
    let r = run_throughput(
        journey(&file, "create").as_ref(),
        &env,
        40,
        8,
        0,
        &Cancel::new(),
    )
    .await;
    assert_eq!(r.n_success(), 40, "{:?}", r.failure_examples);
    assert!(api.sessions().is_empty());
    assert_eq!(api.count("POST /sessions"), 40);
}

#[tokio::test]
async fn failures_are_counted_by_reason_and_the_run_goes_on() {
    let (api, env, file) = setup(
        r#"
        [[journey]]
        name = "missing"
        measure = [{ path = "/sessions/nope" }]

        [[journey]]
        name = "wrong_status"
        measure = [{ path = "/text", expect = [201, 202] }]

        [[journey]]
        name = "expected_404"
        measure = [{ path = "/sessions/nope", expect = 404 }]

        [[journey]]
        name = "not_json"
        measure = [{ path = "/text", capture = { x = "id" } }]

        [[journey]]
        name = "no_value"
        measure = [{ path = "/sessions", capture = { x = "data[0].id" } }]

        [[journey]]
        name = "optional_then_used"
        measure = [
          { path = "/sessions", capture = { x = "data[0].id?" } },
          { path = "/sessions/{{x}}" },
        ]

        [[journey]]
        name = "setup_fails"
        setup = [{ path = "/fail" }]
        measure = [{ path = "/text" }]
        "#,
    )
    .await;
    let run = |name: &str| {
        let j = journey(&file, name);
        let env = env.clone();
        async move { run_latency(j.as_ref(), &env, 3, 0, &Cancel::new()).await }
    };

    let r = run("missing").await;
    assert_eq!(r.n_success(), 0);
    assert_eq!(r.failures["HTTP 404"], 3);
    assert!(
        r.failure_examples["HTTP 404"].contains("GET /sessions/nope"),
        "{:?}",
        r.failure_examples
    );
    assert_eq!(api.count("GET /sessions/nope"), 3);

    let r = run("wrong_status").await;
    assert_eq!(r.failures["HTTP 200"], 3);

    let r = run("expected_404").await;
    assert_eq!(r.n_success(), 3);

    let r = run("not_json").await;
    assert_eq!(r.failures["other: capture x: the response is not JSON"], 3);

    let r = run("no_value").await;
    assert_eq!(r.failures["other: capture x: no value at data[0].id"], 3);

    let r = run("optional_then_used").await;
    assert_eq!(r.failures["other: unknown variable {{x}}"], 3);

    let r = run("setup_fails").await;
    let f = r.setup_failure.unwrap();
    assert!(f.starts_with("HTTP 500"), "{f}");
    assert!(f.contains("GET /fail"), "{f}");
    assert_eq!(
        api.count("GET /text"),
        6,
        "the journey was not run after setup failed"
    );
}

#[tokio::test]
async fn connect_errors_are_failures() {
    let file = declarative::parse(
        "t.toml",
        "[[journey]]\nname = \"x\"\nmeasure = [{ path = \"/\" }]\n",
    )
    .unwrap();
    // A port nothing listens on.
    let l = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let addr = l.local_addr().unwrap();
    drop(l);
    let mut cfg = ClientConfig::new(format!("http://{addr}"));
    cfg.auth = Auth::None;
    let env = Env::new(Client::new(cfg).unwrap());
    let r = run_latency(journey(&file, "x").as_ref(), &env, 2, 0, &Cancel::new()).await;
    assert_eq!(r.failures.get("connect"), Some(&2), "{:?}", r.failures);
}

/// Splits a multipart/form-data body on its boundary: (part head, part data).
fn parse_multipart(content_type: &str, body: &[u8]) -> Vec<(String, Vec<u8>)> {
    let boundary = content_type
        .strip_prefix("multipart/form-data; boundary=")
        .unwrap();
    let delim = format!("--{boundary}");
    let find = |hay: &[u8], needle: &[u8]| hay.windows(needle.len()).position(|w| w == needle);
    let mut rest = body.strip_prefix(delim.as_bytes()).unwrap();
    let mut parts = Vec::new();
    while !rest.starts_with(b"--") {
        rest = rest.strip_prefix(b"\r\n").unwrap();
        let end = find(rest, format!("\r\n{delim}").as_bytes()).unwrap();
        let part = &rest[..end];
        let head_end = find(part, b"\r\n\r\n").unwrap();
        parts.push((
            String::from_utf8(part[..head_end].to_vec()).unwrap(),
            part[head_end + 4..].to_vec(),
        ));
        rest = &rest[end + 2 + delim.len()..];
    }
    assert_eq!(rest, b"--\r\n");
    parts
}

#[tokio::test]
async fn multipart_reaches_the_server_intact() {
    use base64::Engine as _;
    // Binary data with CR, LF, dashes and every byte value.
    let mut data: Vec<u8> = (0..=255u8).collect();
    data.extend_from_slice(b"\r\n--\r\n\r\n--x");
    let b64 = base64::engine::general_purpose::STANDARD.encode(&data);
    let toml = format!(
        r#"
        [defaults]
        headers = {{ "content-type" = "application/json", "x-team" = "infra" }}

        [[journey]]
        name = "upload"
        setup = [{{ method = "POST", path = "/sessions", json = {{}}, capture = {{ sid = "id" }} }}]
        measure = [{{ method = "POST", path = "/upload", multipart = [
          {{ name = "bundle", filename = "agent.tar.gz", content_type = "application/gzip", base64 = "{b64}" }},
          {{ name = "note", text = "for {{{{sid}}}}" }},
        ] }}]
        "#
    );
    let (api, env, file) = setup(&toml).await;
    let r = run_latency(
        journey(&file, "upload").as_ref(),
        &env,
        1,
        0,
        &Cancel::new(),
    )
    .await;
    assert_eq!(r.n_success(), 1, "{:?}", r.failure_examples);
    let seen = api.seen().into_iter().find(|s| s.uri == "/upload").unwrap();
    // The multipart content type wins over the default JSON one; other defaults still apply.
    let ct = seen.headers["content-type"].to_str().unwrap();
    assert!(ct.starts_with("multipart/form-data; boundary="), "{ct}");
    assert_eq!(seen.headers["x-team"], "infra");
    let parts = parse_multipart(ct, &seen.body);
    assert_eq!(parts.len(), 2);
    assert_eq!(
        parts[0].0,
        "Content-Disposition: form-data; name=\"bundle\"; filename=\"agent.tar.gz\"\r\nContent-Type: application/gzip"
    );
    assert_eq!(parts[0].1, data);
    assert_eq!(parts[1].0, "Content-Disposition: form-data; name=\"note\"");
    assert_eq!(parts[1].1, b"for s1");
}

#[tokio::test]
async fn headers_merge_defaults_body_type_and_step() {
    let path_var = std::env::var("PATH").unwrap();
    let (api, env, file) = setup(
        r#"
        [defaults]
        headers = { "x-a" = "default", "x-b" = "default", "x-env" = "{{env.PATH}}" }
        timeout_s = 5

        [[journey]]
        name = "h"
        measure = [{ method = "post", path = "/upload", body = "raw", headers = { "x-b" = "step", "content-type" = "text/plain" } }]
        "#,
    )
    .await;
    let r = run_latency(journey(&file, "h").as_ref(), &env, 1, 0, &Cancel::new()).await;
    assert_eq!(r.n_success(), 1, "{:?}", r.failure_examples);
    let s = &api.seen()[0];
    assert_eq!(s.method, "POST");
    assert_eq!(s.headers["x-a"], "default");
    assert_eq!(s.headers["x-b"], "step");
    assert_eq!(s.headers["x-env"], path_var.as_str());
    assert_eq!(s.headers["content-type"], "text/plain");
    assert_eq!(s.headers.get_all("content-type").iter().count(), 1);
    assert_eq!(&s.body[..], b"raw");
}

fn parse_err(toml: &str) -> String {
    declarative::parse("journeys.toml", toml)
        .unwrap_err()
        .to_string()
}

#[test]
fn parse_errors_say_what_and_where() {
    let cases: &[(&str, &[&str])] = &[
        (
            "[[journey]]\nname = \"fork\"\nmeasure = [\n  { pathh = \"/x\" },\n]\n",
            &[
                "journeys.toml: journey \"fork\": measure[0]: unknown field `pathh`",
                "line 4",
            ],
        ),
        (
            "[[journey]]\nname = \"fork\"\n\n[[journey.measure]]\npath = \"/x\"\nmethd = \"GET\"\n",
            &[
                "journey \"fork\": measure[0]: unknown field `methd`",
                "line 6, column 1",
            ],
        ),
        (
            "[[journey]]\nname = \"a\"\ndescription = \"no measure\"\n",
            &["journey \"a\": missing field `measure`"],
        ),
        (
            "[[journey]]\nname = \"a\"\nmeasure = []\n",
            &["journeys.toml: journey \"a\": measure: no steps"],
        ),
        (
            "[[journey]]\nname = \"a\"\nmeasure = [{ path = \"/\" }]\n[[journey]]\nname = \"a\"\nmeasure = [{ path = \"/\" }]\n",
            &["journeys.toml: journey \"a\": duplicate name"],
        ),
        (
            "[[journey]]\nname = \"\"\nmeasure = [{ path = \"/\" }]\n",
            &["journey[0]: name \"\""],
        ),
        (
            "[[journey]]\nname = \"a\"\nmeasure = [{ path = \"/\", method = \"FETCH\" }]\n",
            &["journey \"a\": measure[0]: method \"FETCH\": expected one of GET, POST"],
        ),
        (
            "[[journey]]\nname = \"a\"\nmeasure = [{ path = \"/\", json = {}, body = \"x\" }]\n",
            &[
                "journey \"a\": measure[0]: `json`, `body` and `multipart` are exclusive (found json and body)",
            ],
        ),
        (
            "[[journey]]\nname = \"a\"\nmeasure = [{ path = \"/{{sid}}\" }]\n",
            &["journey \"a\": measure[0]: path: unknown variable {{sid}} (no step captures it)"],
        ),
        (
            "[[journey]]\nname = \"a\"\nmeasure = [{ path = \"/\", when = \"sid\" }]\n",
            &["journey \"a\": measure[0]: when \"sid\": no step captures or collects \"sid\""],
        ),
        (
            "[[journey]]\nname = \"a\"\nmeasure = [{ path = \"/\" }]\nteardown = [{ path = \"/{{item}}\", for_each = \"ids\" }]\n",
            &["journey \"a\": teardown[0]: for_each \"ids\": no step collects \"ids\""],
        ),
        (
            "[[journey]]\nname = \"a\"\nmeasure = [{ path = \"/{{index}}\" }]\n",
            &["measure[0]: path: {{index}} is only set in a step with `repeat`"],
        ),
        (
            "[[journey]]\nname = \"a\"\nmeasure = [{ path = \"/\", expect = 999 }]\n",
            &[
                "journey \"a\": measure[0]: expect: 999 is not an HTTP status",
                "line 3",
            ],
        ),
        (
            "[[journey]]\nname = \"a\"\nkind = \"fast\"\nmeasure = [{ path = \"/\" }]\n",
            &["journey \"a\": kind: unknown variant `fast`"],
        ),
        (
            "[[journey]]\nname = \"a\"\nmeasure = [{ path = \"/\", multipart = [{ name = \"f\", base64 = \"%%%\" }] }]\n",
            &["journey \"a\": measure[0]: multipart[0]: base64:"],
        ),
        (
            "[[setup]]\npath = \"nope\"\n[[journey]]\nname = \"a\"\nmeasure = [{ path = \"/\" }]\n",
            &["journeys.toml: setup[0]: path \"nope\" must start with /"],
        ),
        (
            "[defaults]\ntimeout = 3\n",
            &["journeys.toml: defaults: unknown field `timeout`", "line 2"],
        ),
        (
            "[[journey]]\nname = \"a\"\nmeasure = [{ path = \"/\" }\n",
            &["journeys.toml: line 3"],
        ),
        ("", &["journeys.toml: no [[journey]]"]),
    ];
    for (toml, wants) in cases {
        let e = parse_err(toml);
        for want in *wants {
            assert!(e.contains(want), "{toml}\n=> {e}\nwanted: {want}");
        }
    }
}

#[test]
fn load_reads_a_file() {
    let dir = tempfile::tempdir().unwrap();
    let p = dir.path().join("j.toml");
    std::fs::write(
        &p,
        "[[journey]]\nname = \"a\"\nkind = \"throughput\"\nmax_iterations = 7\nneeds_mock_llm = true\nmeasure = [{ path = \"/\" }]\n",
    )
    .unwrap();
    let f = declarative::load(&p).unwrap();
    let j = journey(&f, "a");
    assert_eq!(j.kind(), bench_journeys::Kind::Throughput);
    assert_eq!(j.max_iterations(), Some(7));
    assert!(j.needs_mock_llm());
    assert!(!j.concurrency_safe());
    let e = declarative::load(dir.path().join("missing.toml")).unwrap_err();
    assert!(e.file.ends_with("missing.toml"), "{e}");
    assert!(e.message.starts_with("cannot read it:"), "{e}");
}

#[test]
fn the_agent_sessions_pack_parses() {
    let journeys = bench_journeys::packs::pack("agent-sessions")
        .unwrap()
        .unwrap();
    let names: Vec<&str> = journeys.iter().map(|j| j.name()).collect();
    assert_eq!(
        names,
        [
            "list_sessions",
            "create_session",
            "get_session",
            "load_conversation_history",
            "search_sessions",
            "fork_session",
            "add_comment",
        ]
    );
}
