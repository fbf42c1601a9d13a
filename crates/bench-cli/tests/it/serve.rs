//! `bench serve` as a user starts it: the address line, the refusal of a public address
//! without a token, Ctrl-C finalizing the active run.

use std::io::{BufRead, BufReader, Read, Write};
use std::process::Stdio;
use std::time::{Duration, Instant};

use bench_rundir::{EventLine, LifecycleEvent, StopBy, files, jsonl};

use crate::{bench, signal, tempdir};

/// One HTTP/1.1 request with `Connection: close`; the status and body.
fn http(addr: &str, method: &str, path: &str, body: &str) -> (u16, String) {
    let mut s = std::net::TcpStream::connect(addr).unwrap();
    write!(
        s,
        "{method} {path} HTTP/1.1\r\nHost: {addr}\r\nContent-Length: {}\r\nConnection: close\r\n\r\n{body}",
        body.len()
    )
    .unwrap();
    let mut text = String::new();
    s.read_to_string(&mut text).unwrap();
    let status = text[9..12].parse().unwrap();
    let body = text
        .split_once("\r\n\r\n")
        .map(|x| x.1)
        .unwrap_or("")
        .to_owned();
    (status, body)
}

#[test]
fn a_public_address_without_a_token_is_refused() {
    let out = bench()
        .args(["serve", "--bind", "0.0.0.0:0"])
        .env_remove("BENCH_SERVE_TOKEN")
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(2));
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(
        err.contains("not a loopback address") && err.contains("--token"),
        "{err}"
    );
}

#[test]
fn sigterm_cancels_the_active_run_and_writes_its_partial_result() {
    let dir = tempdir("serve");
    let mut child = bench()
        .args(["serve", "--bind", "127.0.0.1:0", "--runs-dir"])
        .arg(&dir)
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let mut err = BufReader::new(child.stderr.take().unwrap());
    let mut line = String::new();
    err.read_line(&mut line).unwrap();
    let addr = line
        .split("http://")
        .nth(1)
        .and_then(|r| r.split_whitespace().next())
        .unwrap_or_else(|| panic!("no address in {line:?}"))
        .to_owned();
    let spec = r#"{"plan": {"dataset": {"random": {"turns": 6, "output_len": 16}}, "num_sessions": 40, "tokenizer": "chars"},
        "target": {"embedded": {"latency": {"mode": "fixed", "ttft": "50ms", "itl": "20ms"}}},
        "load": {"closed": {"concurrency": 2}}}"#;
    let (status, body) = http(&addr, "POST", "/api/runs", spec);
    assert_eq!(status, 201, "{body}");
    let v: serde_json::Value = serde_json::from_str(&body).unwrap();
    let id = v["id"].as_str().unwrap().to_owned();
    // Wait for a few turns, then stop it as a container runtime would (Ctrl-C does the same).
    let t0 = Instant::now();
    loop {
        let (_, body) = http(&addr, "GET", &format!("/api/runs/{id}"), "");
        let v: serde_json::Value = serde_json::from_str(&body).unwrap();
        if v["progress"]["turns_done"].as_u64().unwrap_or(0) >= 2 {
            break;
        }
        assert!(t0.elapsed() < Duration::from_secs(60), "no progress: {v}");
        std::thread::sleep(Duration::from_millis(50));
    }
    signal(&child, "-TERM");
    let status = child.wait().unwrap();
    let mut rest = String::new();
    err.read_to_string(&mut rest).unwrap();
    assert!(status.success(), "{rest}");
    assert!(rest.contains("stopping"), "{rest}");
    let run = dir.join(&id);
    assert!(
        run.join(files::RESULT).is_file(),
        "the partial result is written"
    );
    let events = jsonl::read::<EventLine>(&run.join(files::EVENTS)).unwrap();
    assert!(events.records.iter().any(|e| matches!(
        e.event,
        LifecycleEvent::Stopped {
            by: StopBy::Cancelled,
            ..
        }
    )));
    let _ = std::fs::remove_dir_all(&dir);
}
