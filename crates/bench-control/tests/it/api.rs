//! The runs API: start, 409, cancel, result, list after a restart, the token, run ids, body
//! limits, graders, Prometheus.

use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, Instant};

use bench_control::ServeConfig;
use bench_report::RunResult;
use bench_run::hooks::{Grade, Grader, TurnView};
use bench_rundir::{TurnRecord, files, jsonl};

use crate::{LONG, SHORT, Serve, parse_sse, runs_dir};

async fn until_turns(serve: &Serve, id: &str, n: u64) {
    let t0 = Instant::now();
    loop {
        let (_, v) = serve.json("GET", &format!("/api/runs/{id}"), "").await;
        if v["progress"]["turns_done"].as_u64().unwrap_or(0) >= n {
            return;
        }
        assert!(t0.elapsed() < Duration::from_secs(60), "no progress: {v}");
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}

/// `{}` replays the bundled sample against the embedded simulator; a second start while it
/// runs is 409 naming it; cancel lets turns in flight finish and finalizes the partial result,
/// marked cancelled; the stream ends with run.cancelled.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn one_run_at_a_time_and_cancel_finalizes_a_partial_result() {
    let tmp = runs_dir("cancel");
    let dir = tmp.path();
    let serve = Serve::with_dir(dir).await;
    let id = serve.start_run(LONG).await;
    let (s, v) = serve.json("POST", "/api/runs", "{}").await;
    assert_eq!(s, 409, "{v}");
    assert_eq!(v["active"], id.as_str());
    assert!(v["error"].as_str().unwrap().contains(&id), "{v}");
    until_turns(&serve, &id, 4).await;
    let (s, v) = serve
        .json("POST", &format!("/api/runs/{id}/cancel"), "")
        .await;
    assert_eq!(s, 202, "{v}");
    assert_eq!(v["cancel_requested"], true);
    let v = serve.until_ended(&id).await;
    assert_eq!(v["status"], "cancelled", "{v}");
    assert_eq!(v["summary"]["stopped_by"], "cancelled", "{v}");
    // The partial result is written, typed, and covers fewer turns than planned (240).
    let (s, _, body) = serve
        .call("GET", &format!("/api/runs/{id}/result"), &[], "")
        .await;
    assert_eq!(s, 200);
    let result: RunResult = serde_json::from_slice(&body).unwrap();
    let turns = result.summary.turns_ok + result.summary.turns_failed;
    assert!((4..240).contains(&turns), "{turns}");
    // Turns in flight finished: every record ends ok, none cut.
    let records = jsonl::read::<TurnRecord>(&dir.join(&id).join(files::TURNS)).unwrap();
    assert_eq!(records.records.len() as u64, turns);
    assert!(records.records.iter().all(|t| t.error_kind.is_none()));
    let (_, _, body) = serve
        .call("GET", &format!("/api/runs/{id}/events"), &[], "")
        .await;
    let (events, _) = parse_sse(std::str::from_utf8(&body).unwrap());
    let last = events.last().unwrap();
    assert_eq!(last.data["event"], "run.cancelled");
    assert_eq!(last.data["summary"]["turns_total"], turns);
    // Cancelling again is 409; a new run may start.
    let (s, _) = serve
        .json("POST", &format!("/api/runs/{id}/cancel"), "")
        .await;
    assert_eq!(s, 409);
    let next = serve.start_run(SHORT).await;
    assert_eq!(serve.until_ended(&next).await["status"], "completed");
    serve.stop().await;
}

/// Finished runs stay readable from their directories after a restart: listed, with their
/// summary and result, and their stream is the one sent live (same ids, same events).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn finished_runs_are_read_back_after_a_restart() {
    let tmp = runs_dir("restart");
    let dir = tmp.path();
    let serve = Serve::with_dir(dir).await;
    let id = serve.start_run(SHORT).await;
    let before = serve.until_ended(&id).await;
    assert_eq!(before["status"], "completed");
    let (_, _, live) = serve
        .call("GET", &format!("/api/runs/{id}/events"), &[], "")
        .await;
    serve.stop().await;

    let serve = Serve::with_dir(dir).await;
    let (s, v) = serve.json("GET", "/api/runs", "").await;
    assert_eq!(s, 200);
    assert_eq!(v["active"], serde_json::Value::Null);
    let runs = v["runs"].as_array().unwrap();
    assert_eq!(runs.len(), 1, "{v}");
    assert_eq!(runs[0]["id"], id.as_str());
    assert_eq!(runs[0]["status"], "completed");
    assert_eq!(runs[0]["kind"], "replay");
    assert_eq!(runs[0]["created_utc"], before["created_utc"]);
    assert_eq!(runs[0]["summary"], before["summary"], "the same summary");
    assert_eq!(runs[0]["summary"]["turns_total"], 32);
    let (s, _, body) = serve
        .call("GET", &format!("/api/runs/{id}/result"), &[], "")
        .await;
    assert_eq!(s, 200);
    serde_json::from_slice::<RunResult>(&body).unwrap();
    let (_, _, after) = serve
        .call("GET", &format!("/api/runs/{id}/events"), &[], "")
        .await;
    let (live, _) = parse_sse(std::str::from_utf8(&live).unwrap());
    let (after, _) = parse_sse(std::str::from_utf8(&after).unwrap());
    assert_eq!(after.len(), live.len());
    for (a, b) in live.iter().zip(&after) {
        assert_eq!(
            (a.id, &a.data),
            (b.id, &b.data),
            "the stream sent live, event for event"
        );
    }
    assert!(after.iter().any(|e| e.data["event"] == "progress"));
    // Resuming across the restart: after event N is after event N.
    let n = after.len() as u64;
    let (_, _, tail) = serve
        .call(
            "GET",
            &format!("/api/runs/{id}/events"),
            &[("last-event-id", &(n - 2).to_string())],
            "",
        )
        .await;
    let (tail, _) = parse_sse(std::str::from_utf8(&tail).unwrap());
    assert_eq!(
        tail.iter().map(|e| e.id.unwrap()).collect::<Vec<_>>(),
        [n - 1, n]
    );
    let (s, _) = serve
        .json("GET", "/api/runs/20990101T000000Z-dead", "")
        .await;
    assert_eq!(s, 404);
    serve.stop().await;
}

/// Run directories another front end wrote (`bench run`, an embedding program) are listed
/// too: a finished one with its summary and a stream rebuilt from `events.jsonl`, one without a
/// recorded stop as `unfinished`, its stream ending after its history.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn run_directories_of_other_front_ends_are_listed() {
    let tmp = runs_dir("others");
    let dir = tmp.path();
    let spec: bench_run::RunSpec = serde_json::from_str(SHORT).unwrap();
    let handle = bench_run::start(
        spec,
        bench_run::RunOptions {
            run_dir: Some(dir.join("20260101T000000Z-cli")),
            ..Default::default()
        },
    )
    .await
    .unwrap();
    handle.wait().await.unwrap();
    let crashed = dir.join("20260101T000001Z-crashed");
    std::fs::create_dir_all(&crashed).unwrap();
    std::fs::write(crashed.join(files::RUN_JSON), "{\"pid\": 1}").unwrap();
    std::fs::write(
        crashed.join(files::EVENTS),
        "{\"event\":\"run.started\",\"utc\":\"2026-01-01T00:00:01Z\"}\n{\"event\":\"phase\",\"utc\":\"2026-01-01T00:00:02Z\",\"phase\":\"measuring\"}\n",
    )
    .unwrap();
    std::fs::create_dir_all(dir.join("not-a-run")).unwrap();
    let serve = Serve::with_dir(dir).await;
    let (_, v) = serve.json("GET", "/api/runs", "").await;
    let runs = v["runs"].as_array().unwrap();
    let ids: Vec<&str> = runs.iter().map(|r| r["id"].as_str().unwrap()).collect();
    // Newest first (the crashed one says it started on 1 January).
    assert_eq!(
        ids,
        ["20260101T000000Z-cli", "20260101T000001Z-crashed"],
        "{v}"
    );
    assert_eq!(runs[0]["status"], "completed");
    assert_eq!(runs[0]["summary"]["turns_total"], 32);
    assert_eq!(runs[0]["summary"]["passed"], true);
    assert_eq!(runs[1]["status"], "unfinished");
    assert_eq!(runs[1]["created_utc"], "2026-01-01T00:00:01Z");
    let (_, _, body) = serve
        .call("GET", "/api/runs/20260101T000000Z-cli/events", &[], "")
        .await;
    let (events, _) = parse_sse(std::str::from_utf8(&body).unwrap());
    assert_eq!(events[0].data["event"], "run.started");
    assert_eq!(events.last().unwrap().data["event"], "run.completed");
    let (_, _, body) = serve
        .call("GET", "/api/runs/20260101T000001Z-crashed/events", &[], "")
        .await;
    let (events, _) = parse_sse(std::str::from_utf8(&body).unwrap());
    let kinds: Vec<&str> = events
        .iter()
        .map(|e| e.data["event"].as_str().unwrap())
        .collect();
    assert_eq!(kinds, ["run.started", "phase"], "no made-up terminal event");
    let (s, _) = serve
        .json("POST", "/api/runs/20260101T000001Z-crashed/cancel", "")
        .await;
    assert_eq!(s, 409);
    serve.stop().await;
}

/// With a token, every API route, the stream and /metrics answer 401 without it; the
/// dashboard's files need none; a public address needs a token.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_token_guards_every_api_route_the_stream_and_metrics() {
    let tmp = runs_dir("token");
    let dir = tmp.path();
    let serve = Serve::start(ServeConfig {
        runs_dir: dir.to_path_buf(),
        token: Some("s3cret-token".into()),
        ..Default::default()
    })
    .await;
    for (m, p) in [
        ("GET", "/api/runs"),
        ("POST", "/api/runs"),
        ("GET", "/api/runs/x"),
        ("GET", "/api/runs/x/events"),
        ("GET", "/api/runs/x/result"),
        ("POST", "/api/runs/x/cancel"),
        ("GET", "/metrics"),
    ] {
        let (s, _, b) = serve.call(m, p, &[], "{}").await;
        assert_eq!(s, 401, "{m} {p}");
        let v: serde_json::Value = serde_json::from_slice(&b).unwrap();
        assert!(v["error"].as_str().unwrap().contains("token"), "{v}");
        let (s, _, _) = serve
            .call(m, p, &[("authorization", "Bearer wrong-token!")], "{}")
            .await;
        assert_eq!(s, 401, "{m} {p} with a wrong token");
    }
    let auth = [("authorization", "Bearer s3cret-token")];
    let (s, _, _) = serve.call("GET", "/api/runs", &auth, "").await;
    assert_eq!(s, 200);
    let (s, _, _) = serve
        .call("GET", "/api/runs?access_token=s3cret-token", &[], "")
        .await;
    assert_eq!(s, 200, "EventSource's query form");
    let (s, _, _) = serve.call("GET", "/metrics", &auth, "").await;
    assert_eq!(s, 200);
    for p in ["/", "/assets/app.js", "/assets/style.css", "/healthz"] {
        let (s, _, _) = serve.call("GET", p, &[], "").await;
        assert_eq!(s, 200, "{p}");
    }
    serve.stop().await;
    let public = bench_control::Server::bind(ServeConfig {
        bind: "0.0.0.0:0".parse().unwrap(),
        runs_dir: dir.to_path_buf(),
        ..Default::default()
    })
    .await;
    let err = public.unwrap_err().to_string();
    assert!(err.contains("--token"), "{err}");
}

/// Run ids that look like paths are refused before any file is touched; bad specs and bodies
/// get one-line JSON errors naming the problem; header values never come back.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn bad_ids_specs_and_bodies_are_refused_clearly() {
    let tmp = runs_dir("bad-input");
    let dir = tmp.path();
    let serve = Serve::with_dir(dir).await;
    for p in [
        "/api/runs/..",
        "/api/runs/..%2F..%2Fetc%2Fpasswd",
        "/api/runs/.hidden/result",
        "/api/runs/a%00b/events",
    ] {
        let (s, v) = serve.json("GET", p, "").await;
        assert_eq!(s, 400, "{p}: {v}");
        assert!(v["error"].as_str().unwrap().contains("not a run id"), "{v}");
    }
    let (s, v) = serve.json("POST", "/api/runs", "[1]").await;
    assert_eq!(
        (s, v["error"].as_str().unwrap()),
        (400, "the run spec must be a JSON object")
    );
    let (s, v) = serve.json("POST", "/api/runs", "{\"lod\": 3}").await;
    assert_eq!(s, 400);
    let msg = v["error"].as_str().unwrap();
    assert!(msg.starts_with("spec"), "{msg}");
    assert!(msg.contains("unknown field `lod`"), "{msg}");
    let (s, v) = serve
        .json(
            "POST",
            "/api/runs",
            "{\"load\": {\"closed\": {\"concurrency\": \"x\"}}}",
        )
        .await;
    assert_eq!(s, 400);
    let msg = v["error"].as_str().unwrap();
    assert!(msg.starts_with("spec.load.closed.concurrency:"), "{msg}");
    for (body, want) in [
        (
            r#"{"kind": "sweeps"}"#,
            "kind: \"sweeps\" is not a run kind",
        ),
        (
            r#"{"kind": "sweep"}"#,
            "kind: a sweep is a run spec with a sweep table",
        ),
        (
            r#"{"kind": "replay", "sweep": {}}"#,
            "sweep: a sweep is a run spec with a sweep table",
        ),
        (
            r#"{"sweep": {"axis": "load", "levels": [1]}}"#,
            "spec.sweep.axis: unknown variant `load`",
        ),
        (
            r#"{"sweep": {"axis": "concurrency", "levels": [2, 1]}}"#,
            "--concurrency: levels must be strictly increasing",
        ),
        (
            r#"{"sweep": {"axis": "concurrency", "levels": [1, 2], "find_max": {}}}"#,
            "sweep.find_max (--find-max) needs judge.slo",
        ),
    ] {
        let (s, v) = serve.json("POST", "/api/runs", body).await;
        assert_eq!(s, 400, "{body}: {v}");
        let msg = v["error"].as_str().unwrap();
        assert!(msg.starts_with(want), "{body}: {msg}");
    }
    let (s, v) = serve.json("POST", "/api/runs", "{not json").await;
    assert_eq!(s, 400);
    assert!(v["error"].as_str().unwrap().contains("not JSON"), "{v}");
    // A declared body over the limit is refused at once, before any of it is sent (sending
    // it whole raced the server's close: the client could fail writing before it read the
    // answer).
    let head = refused_head(serve.addr, "Content-Length: 2097152\r\n").await;
    assert!(head.starts_with("HTTP/1.1 413"), "{head}");
    assert!(head.contains("larger than 1048576 bytes"), "{head}");
    // A body of undeclared length is cut off at the limit.
    let head = refused_head(serve.addr, "Transfer-Encoding: chunked\r\n").await;
    assert!(head.starts_with("HTTP/1.1 413"), "{head}");
    let (s, _) = serve.json("DELETE", "/api/runs", "").await;
    assert_eq!(s, 405);
    let (s, _) = serve.json("GET", "/api/nothing", "").await;
    assert_eq!(s, 404);
    // A header value is a secret: neither the run object, the stream, nor the run directory
    // has it.
    let spec = SHORT.replacen(
        '{',
        "{\"headers\": {\"x-api-key\": \"sk-very-secret-42\"},",
        1,
    );
    let id = serve.start_run(&spec).await;
    serve.until_ended(&id).await;
    let (_, _, a) = serve.call("GET", &format!("/api/runs/{id}"), &[], "").await;
    let (_, _, b) = serve
        .call("GET", &format!("/api/runs/{id}/events"), &[], "")
        .await;
    let (_, _, c) = serve.call("GET", "/api/runs", &[], "").await;
    for body in [a, b.clone(), c] {
        assert!(!String::from_utf8_lossy(&body).contains("sk-very-secret-42"));
    }
    assert!(
        String::from_utf8_lossy(&b).contains("x-api-key"),
        "the name is kept"
    );
    for f in std::fs::read_dir(dir.join(&id)).unwrap() {
        let text = std::fs::read(f.unwrap().path()).unwrap();
        assert!(!String::from_utf8_lossy(&text).contains("sk-very-secret-42"));
    }
    serve.stop().await;
}

struct Panics;
impl Grader for Panics {
    fn name(&self) -> &str {
        "panics"
    }
    fn grade(&self, _: &TurnView<'_>) -> Result<Option<Grade>, String> {
        panic!("this grader is broken")
    }
}

struct Counts(AtomicU64);
impl Grader for Counts {
    fn name(&self) -> &str {
        "counts"
    }
    fn grade(&self, t: &TurnView<'_>) -> Result<Option<Grade>, String> {
        self.0.fetch_add(1, Ordering::Relaxed);
        Ok(Some(Grade {
            score: 1.0,
            label: "seen".into(),
            notes: Some(format!("turn {}", t.record.turn_index)),
        }))
    }
}

/// A grader that panics is reported and skipped; it never fails the run; the other graders'
/// grades reach result.json, the stream and the summary. /metrics is Prometheus text with the
/// run's counters and histograms.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_panicking_grader_never_fails_the_run_and_grades_reach_result_stream_and_metrics() {
    let tmp = runs_dir("graders");
    let dir = tmp.path();
    let counts = Arc::new(Counts(AtomicU64::new(0)));
    let control = bench_control::ControlConfig {
        graders: vec![Arc::new(Panics), counts.clone()],
        ..Default::default()
    };
    let serve = Serve::start(ServeConfig {
        runs_dir: dir.to_path_buf(),
        control,
        ..Default::default()
    })
    .await;
    let spec = SHORT.replacen('{', "{\"graders\": {\"slo\": {\"ttft_ms\": 10000}},", 1);
    let id = serve.start_run(&spec).await;
    let v = serve.until_ended(&id).await;
    assert_eq!(v["status"], "completed", "{v}");
    assert_eq!(v["summary"]["passed"], true, "{v}");
    assert_eq!(counts.0.load(Ordering::Relaxed), 32);
    let grades = v["summary"]["grades"].as_array().unwrap();
    let by = |n: &str| grades.iter().find(|g| g["grader"] == n).unwrap().clone();
    assert_eq!(by("slo")["graded"], 32);
    assert_eq!(by("slo")["labels"]["pass"], 32);
    assert_eq!(by("counts")["graded"], 32);
    assert_eq!(by("panics")["graded"], 0);
    assert_eq!(by("panics")["errors"], 32);
    assert!(
        by("panics")["first_error"]
            .as_str()
            .unwrap()
            .contains("broken")
    );
    let result: RunResult =
        serde_json::from_slice(&std::fs::read(dir.join(&id).join(files::RESULT)).unwrap()).unwrap();
    assert_eq!(result.grades.len(), 3);
    let (_, _, body) = serve
        .call("GET", &format!("/api/runs/{id}/events"), &[], "")
        .await;
    let (events, _) = parse_sse(std::str::from_utf8(&body).unwrap());
    let turn = events
        .iter()
        .find(|e| e.data["event"] == "turn.completed")
        .unwrap();
    let g: Vec<&str> = turn.data["grades"]
        .as_array()
        .unwrap()
        .iter()
        .map(|g| g["grader"].as_str().unwrap())
        .collect();
    assert_eq!(g, ["slo", "counts"], "the panicking grader is skipped");
    let warned = events
        .iter()
        .filter(|e| {
            e.data["event"] == "notice" && e.data["message"].as_str().unwrap().contains("panics")
        })
        .count();
    assert_eq!(warned, 1, "reported once");
    // Prometheus text for the (latest) run.
    let (s, h, body) = serve.call("GET", "/metrics", &[], "").await;
    assert_eq!(s, 200);
    assert!(
        h["content-type"]
            .to_str()
            .unwrap()
            .contains("openmetrics-text")
    );
    let text = String::from_utf8(body.to_vec()).unwrap();
    let lines = text.lines().map(|l| Ok(l.to_owned()));
    let scrape = prometheus_parse::Scrape::parse(lines).unwrap();
    let value = |name: &str| {
        scrape
            .samples
            .iter()
            .find(|s| s.metric == name)
            .map(|s| s.value.clone())
    };
    assert!(
        matches!(
            value("bench_turns_total"),
            Some(prometheus_parse::Value::Counter(v) | prometheus_parse::Value::Untyped(v)) if v == 32.0
        ),
        "{text}"
    );
    assert!(text.contains("bench_ttft_milliseconds_bucket"), "{text}");
    assert!(text.contains(&format!("run_id=\"{id}\"")), "{text}");
    assert!(text.contains("bench_turns_in_flight 0"), "{text}");
    assert!(text.contains("bench_sessions_active 0"), "{text}");
    serve.stop().await;
}

/// A journeys suite runs through the same API and streams `journey.run` events.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_journeys_suite_runs_through_the_api() {
    let tmp = runs_dir("journeys");
    let dir = tmp.path();
    let serve = Serve::with_dir(dir).await;
    let id = serve
        .start_run(
            r#"{"kind": "journeys", "journeys": ["list_models"], "iterations": 5, "warmup": 1}"#,
        )
        .await;
    let v = serve.until_ended(&id).await;
    assert_eq!(v["status"], "completed", "{v}");
    assert_eq!(v["kind"], "journeys");
    assert_eq!(v["summary"]["turns_total"], 5, "{v}");
    assert_eq!(v["summary"]["passed"], true, "{v}");
    let (s, _, body) = serve
        .call("GET", &format!("/api/runs/{id}/result"), &[], "")
        .await;
    assert_eq!(s, 200);
    let report: serde_json::Value = serde_json::from_slice(&body).unwrap();
    assert!(report["journeys"]["list_models"].is_object(), "{report}");
    let (_, _, body) = serve
        .call("GET", &format!("/api/runs/{id}/events"), &[], "")
        .await;
    let (events, _) = parse_sse(std::str::from_utf8(&body).unwrap());
    assert!(events.iter().any(|e| e.data["event"] == "journey.run"));
    assert_eq!(events.last().unwrap().data["event"], "run.completed");
    serve.stop().await;
}

/// A cancel while a run still waits for its server ends it at once, cancelled.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_cancel_while_waiting_for_the_server_ends_the_run_at_once() {
    let tmp = runs_dir("cancel-starting");
    let dir = tmp.path();
    let serve = Serve::with_dir(dir).await;
    let spec = r#"{"target": {"url": {"base_url": "http://127.0.0.1:9", "ready_timeout": "10m"}}}"#;
    let id = serve.start_run(spec).await;
    tokio::time::sleep(Duration::from_millis(300)).await;
    let (_, v) = serve.json("GET", &format!("/api/runs/{id}"), "").await;
    assert_eq!(v["status"], "starting", "{v}");
    let t0 = Instant::now();
    let (s, _) = serve
        .json("POST", &format!("/api/runs/{id}/cancel"), "")
        .await;
    assert_eq!(s, 202);
    let v = serve.until_ended(&id).await;
    assert!(t0.elapsed() < Duration::from_secs(10), "not at once");
    assert_eq!(v["status"], "cancelled", "{v}");
    assert_eq!(v["summary"]["stopped_by"], "cancelled", "{v}");
    let next = serve.start_run(SHORT).await;
    assert_eq!(serve.until_ended(&next).await["status"], "completed");
    serve.stop().await;
}

/// `POST /api/runs` over a raw connection with `framing` (a `Content-Length` or chunked
/// header): the head, then, for a chunked body, 1 MiB chunks until the server answers or
/// closes; what the server sent back.
async fn refused_head(addr: std::net::SocketAddr, framing: &str) -> String {
    use tokio::io::{AsyncReadExt, AsyncWriteExt};
    let mut s = tokio::net::TcpStream::connect(addr).await.unwrap();
    let head = format!("POST /api/runs HTTP/1.1\r\nHost: {addr}\r\n{framing}\r\n");
    s.write_all(head.as_bytes()).await.unwrap();
    let (mut rd, mut wr) = s.into_split();
    if framing.starts_with("Transfer-Encoding") {
        tokio::spawn(async move {
            let chunk = format!("100000\r\n{}\r\n", "x".repeat(1 << 20));
            // Until the server stops reading (it answers and closes at the limit).
            for _ in 0..4 {
                if wr.write_all(chunk.as_bytes()).await.is_err() {
                    break;
                }
            }
        });
    }
    let mut got = Vec::new();
    let mut buf = [0u8; 4096];
    let read = async {
        // Until the JSON error body is in (or the server closes).
        while !got.ends_with(b"}") {
            match rd.read(&mut buf).await {
                Ok(0) | Err(_) => break,
                Ok(n) => got.extend_from_slice(&buf[..n]),
            }
        }
    };
    tokio::time::timeout(Duration::from_secs(30), read)
        .await
        .expect("the server answered within 30 s");
    String::from_utf8_lossy(&got).into_owned()
}

/// A sweep runs through the same API: a run spec with a `sweep` table plays one point per
/// level into the run's directory, streams `sweep.point` events, ends with the sweep's
/// summary (every point's verdict, the gate), serves `sweep.json` as its result and is
/// listed as a sweep after a restart. A cancel starts no further point. The first is an
/// agents-at-SLO search (a session SLO every session meets: both bounds run, 2 is the answer).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_sweep_runs_through_the_api() {
    let tmp = runs_dir("sweep");
    let dir = tmp.path();
    let serve = Serve::with_dir(dir).await;
    let spec = SHORT.replacen(
        '{',
        r#"{"sweep": {"axis": "concurrency", "levels": [1, 2], "find_max": {}},
            "judge": {"session_slo": "ttft_ms=5000,session_s=600"},"#,
        1,
    );
    let id = serve.start_run(&spec).await;
    let v = serve.until_ended(&id).await;
    assert_eq!(v["status"], "completed", "{v}");
    assert_eq!(v["kind"], "sweep");
    let summary = &v["summary"];
    assert_eq!(summary["passed"], true, "{v}");
    // Each point plays the pool of 8 sessions of 4 turns.
    assert_eq!(summary["turns_total"], 64, "{v}");
    let points = summary["sweep"]["points"].as_array().unwrap();
    let levels: Vec<f64> = points
        .iter()
        .map(|p| p["level"].as_f64().unwrap())
        .collect();
    assert_eq!(levels, [1.0, 2.0], "{v}");
    assert_eq!(summary["sweep"]["stop"]["by"], "completed", "{v}");
    let f = &summary["sweep"]["find_max"];
    assert_eq!(
        (f["of"].as_str(), f["best"].as_f64()),
        (Some("sessions"), Some(2.0)),
        "{f}"
    );
    for p in points {
        assert_eq!(p["session_goodput"], 1.0, "{p}");
    }
    for p in points {
        let run = dir.join(&id).join(p["run_dir"].as_str().unwrap());
        let r: RunResult =
            serde_json::from_slice(&std::fs::read(run.join(files::RESULT)).unwrap()).unwrap();
        assert_eq!(r.summary.turns_ok, 32);
    }
    let (s, _, body) = serve
        .call("GET", &format!("/api/runs/{id}/result"), &[], "")
        .await;
    assert_eq!(s, 200);
    let sweep: bench_report::sweep::SweepSummary = serde_json::from_slice(&body).unwrap();
    assert_eq!(sweep.points.len(), 2);
    let (_, _, body) = serve
        .call("GET", &format!("/api/runs/{id}/events"), &[], "")
        .await;
    let (events, _) = parse_sse(std::str::from_utf8(&body).unwrap());
    let done: Vec<u64> = events
        .iter()
        .filter(|e| e.data["event"] == "sweep.point")
        .map(|e| e.data["points_done"].as_u64().unwrap())
        .collect();
    assert_eq!(done, [1, 2]);
    assert_eq!(events.last().unwrap().data["event"], "run.completed");

    // A cancel while the first of three points plays: it finishes its turns in flight, no
    // other point starts, the sweep ends cancelled.
    let spec = LONG.replacen(
        '{',
        r#"{"sweep": {"axis": "concurrency", "levels": [1, 2, 4]},"#,
        1,
    );
    let cancelled = serve.start_run(&spec).await;
    until_turns(&serve, &cancelled, 2).await;
    let (s, _) = serve
        .json("POST", &format!("/api/runs/{cancelled}/cancel"), "")
        .await;
    assert_eq!(s, 202);
    let c = serve.until_ended(&cancelled).await;
    assert_eq!(c["status"], "cancelled", "{c}");
    assert_eq!(c["summary"]["passed"], false, "{c}");
    assert!(!dir.join(&cancelled).join("c0002").exists());
    serve.stop().await;

    let serve = Serve::with_dir(dir).await;
    let (_, list) = serve.json("GET", "/api/runs", "").await;
    let listed = list["runs"]
        .as_array()
        .unwrap()
        .iter()
        .find(|r| r["id"] == id.as_str())
        .unwrap()
        .clone();
    assert_eq!(listed["kind"], "sweep");
    assert_eq!(listed["summary"], v["summary"], "the same summary");
    serve.stop().await;
}
