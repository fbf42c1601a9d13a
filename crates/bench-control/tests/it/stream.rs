//! The event stream: history then live with no gap or duplicate, Last-Event-ID, the end.

use std::sync::Arc;
use std::time::Duration;

use bench_control::stream::EventLog;
use futures_util::StreamExt;
use http_body_util::BodyExt;

use crate::{SHORT, Serve, parse_sse, runs_dir};

/// Subscribers that join at random moments while four tasks publish get every event exactly
/// once, in id order, from 1 to the terminal one.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn history_then_live_has_no_gap_and_no_duplicate_under_concurrent_publishing() {
    let log = Arc::new(EventLog::default());
    let per_task = 2_000u64;
    let mut publishers = Vec::new();
    for t in 0..4u64 {
        let log = log.clone();
        publishers.push(tokio::spawn(async move {
            for i in 0..per_task {
                log.push("tick", &serde_json::json!({"task": t, "i": i}));
                if i % 64 == 0 {
                    tokio::task::yield_now().await;
                }
            }
        }));
    }
    let mut subscribers = Vec::new();
    for k in 0..8u64 {
        let log = log.clone();
        subscribers.push(tokio::spawn(async move {
            tokio::time::sleep(Duration::from_micros(k * 700)).await;
            let mut ids = Vec::new();
            let mut s = Box::pin(log.stream(0, Duration::from_secs(30)));
            while let Some(chunk) = s.next().await {
                let text = String::from_utf8(chunk.to_vec()).unwrap();
                let (events, _) = parse_sse(&text);
                ids.extend(events.iter().map(|e| e.id.unwrap()));
            }
            ids
        }));
    }
    for p in publishers {
        p.await.unwrap();
    }
    let last = log
        .push_terminal("run.completed", &serde_json::json!({}))
        .unwrap();
    assert_eq!(last, 4 * per_task + 1);
    for s in subscribers {
        let ids = s.await.unwrap();
        let want: Vec<u64> = (1..=last).collect();
        assert_eq!(ids.len(), want.len(), "every event once");
        assert_eq!(ids, want, "in id order, none missing, none doubled");
    }
}

/// Over HTTP: a subscriber cut mid-run resumes with Last-Event-ID and, with what it had, gets
/// exactly the whole stream; the stream ends after the terminal event; asking after the end
/// is 204.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn last_event_id_resumes_after_that_event_and_the_stream_ends_after_the_terminal_one() {
    let tmp = runs_dir("resume");
    let dir = tmp.path();
    let serve = Serve::with_dir(dir).await;
    let id = serve.start_run(SHORT).await;
    let path = format!("/api/runs/{id}/events");
    // Read a few events, then drop the connection.
    let resp = serve.open("GET", &path, &[], "").await;
    assert_eq!(resp.status(), 200);
    assert_eq!(
        resp.headers()["content-type"].to_str().unwrap(),
        "text/event-stream"
    );
    let mut body = resp.into_body();
    let mut first = String::new();
    while parse_sse(&first).0.len() < 3 {
        let frame = body.frame().await.unwrap().unwrap();
        first.push_str(std::str::from_utf8(frame.data_ref().unwrap()).unwrap());
    }
    drop(body);
    // Only complete events count (a chunk boundary may cut one).
    let (seen, _) = parse_sse(&first[..first.rfind("\n\n").unwrap() + 2]);
    let last_seen = seen.last().unwrap().id.unwrap();
    let (s, _, rest) = serve
        .call(
            "GET",
            &path,
            &[("last-event-id", &last_seen.to_string())],
            "",
        )
        .await;
    assert_eq!(s, 200);
    let (rest, _) = parse_sse(std::str::from_utf8(&rest).unwrap());
    let mut ids: Vec<u64> = seen.iter().map(|e| e.id.unwrap()).collect();
    ids.extend(rest.iter().map(|e| e.id.unwrap()));
    let terminal = rest.last().unwrap();
    assert_eq!(terminal.data["event"], "run.completed", "{}", terminal.data);
    let n = terminal.id.unwrap();
    assert_eq!(ids, (1..=n).collect::<Vec<_>>(), "no gap, no duplicate");
    // The whole stream again, from the start, is the same sequence.
    let (_, _, all) = serve.call("GET", &path, &[], "").await;
    let (all, _) = parse_sse(std::str::from_utf8(&all).unwrap());
    assert_eq!(all.len() as u64, n);
    let kinds: Vec<&str> = all
        .iter()
        .map(|e| e.data["event"].as_str().unwrap())
        .collect();
    assert_eq!(kinds[0], "run.created");
    assert!(kinds.contains(&"run.started"), "{kinds:?}");
    assert!(kinds.contains(&"run.stopped"), "{kinds:?}");
    assert!(kinds.contains(&"turn.completed"), "{kinds:?}");
    let summary = &terminal.data["summary"];
    assert_eq!(summary["turns_total"], 32, "{summary}");
    assert_eq!(summary["passed"], true);
    // After the end: 204, so EventSource stops reconnecting; the query form works too.
    let (s, _, _) = serve
        .call("GET", &path, &[("last-event-id", &n.to_string())], "")
        .await;
    assert_eq!(s, 204);
    let (s, _, b) = serve
        .call("GET", &format!("{path}?last_event_id={}", n - 1), &[], "")
        .await;
    assert_eq!(s, 200);
    let (tail, _) = parse_sse(std::str::from_utf8(&b).unwrap());
    assert_eq!(tail.len(), 1);
    assert_eq!(tail[0].id, Some(n));
    let (s, v) = serve
        .json("GET", &format!("{path}?last_event_id=abc"), "")
        .await;
    assert_eq!(s, 400, "{v}");
    serve.stop().await;
}

/// A stream with nothing to say sends a keepalive comment (here every 200 ms).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_idle_stream_gets_keepalive_comments() {
    let tmp = runs_dir("keepalive");
    let dir = tmp.path();
    let serve = Serve::start(bench_control::ServeConfig {
        runs_dir: dir.to_path_buf(),
        keepalive: Duration::from_millis(200),
        ..Default::default()
    })
    .await;
    // A run whose server never answers: it stays starting, waiting for readiness.
    let spec = r#"{"target": {"url": {"base_url": "http://127.0.0.1:9", "ready_timeout": "3s"}}}"#;
    let id = serve.start_run(spec).await;
    let resp = serve
        .open("GET", &format!("/api/runs/{id}/events"), &[], "")
        .await;
    let mut body = resp.into_body();
    let mut text = String::new();
    let t0 = std::time::Instant::now();
    while parse_sse(&text).1 == 0 {
        assert!(
            t0.elapsed() < Duration::from_secs(10),
            "no keepalive: {text}"
        );
        let frame = body.frame().await.unwrap().unwrap();
        text.push_str(std::str::from_utf8(frame.data_ref().unwrap()).unwrap());
    }
    assert!(text.contains(": keepalive\n\n"), "{text}");
    drop(body);
    // It fails (nothing listens on port 9) with run.failed naming the reason.
    let v = serve.until_ended(&id).await;
    assert_eq!(v["status"], "failed", "{v}");
    assert!(!v["error"].as_str().unwrap().is_empty());
    serve.stop().await;
}

/// A subscriber that reads nothing does not hold the run up: the run ends on time while one
/// stream is open and never read.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_subscriber_that_never_reads_does_not_slow_the_run() {
    let tmp = runs_dir("slow-sub");
    let dir = tmp.path();
    let serve = Serve::with_dir(dir).await;
    let id = serve.start_run(SHORT).await;
    let stuck = serve
        .open("GET", &format!("/api/runs/{id}/events"), &[], "")
        .await;
    let v = serve.until_ended(&id).await;
    assert_eq!(v["status"], "completed", "{v}");
    drop(stuck);
    serve.stop().await;
}

/// A subscriber that stops reading while the run goes on holds nothing up (pushes never wait
/// for it, the log stays within its cap); when it reads again it is told what it missed and
/// resumes from the oldest event kept, in order, to the end.
#[tokio::test]
async fn a_subscriber_that_falls_behind_the_kept_history_is_told_and_resumes() {
    let log = Arc::new(EventLog::with_cap(1_000));
    log.push("e", &serde_json::json!({"n": 0}));
    let mut s = Box::pin(log.clone().stream(0, Duration::from_secs(30)));
    let first = String::from_utf8(s.next().await.unwrap().to_vec()).unwrap();
    assert_eq!(parse_sse(&first).0.len(), 1);
    // It reads nothing while 5,000 more events arrive.
    for n in 1..=5_000 {
        log.push("e", &serde_json::json!({"n": n}));
    }
    log.push_terminal("run.completed", &serde_json::json!({}));
    let mut text = String::new();
    while let Some(chunk) = s.next().await {
        text.push_str(std::str::from_utf8(&chunk).unwrap());
    }
    let (events, _) = parse_sse(&text);
    let lagged = &events[0];
    assert_eq!(lagged.id, None, "the notice is not a run event");
    assert_eq!(lagged.data["event"], "stream.lagged");
    assert_eq!(lagged.data["missed_from"], 2);
    assert_eq!(lagged.data["missed_to"], 5_002 - 1_000);
    let ids: Vec<u64> = events[1..].iter().map(|e| e.id.unwrap()).collect();
    assert_eq!(ids, (5_002 - 999..=5_002).collect::<Vec<_>>());
}
