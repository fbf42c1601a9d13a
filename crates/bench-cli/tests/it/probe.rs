//! `bench probe` and `bench sim`: the acceptance checks of the foundation issue.

use std::io::Write;
use std::net::TcpStream;
use std::process::Stdio;
use std::time::{Duration, Instant};

use bench_sim::SimConfig;
use serde_json::Value;

use crate::{bench, run, run_json, scripted_server, serial, spawn_sim};

fn f(v: &Value, k: &str) -> f64 {
    v[k].as_f64()
        .unwrap_or_else(|| panic!("{k} missing in {v}"))
}

#[test]
fn probe_without_server_agrees_with_the_simulator_model() {
    let _serial = serial();
    let v = run_json(&["probe", "--json", "--max-tokens", "32"]);
    for key in [
        "ttft_ms",
        "e2e_ms",
        "tpot_ms",
        "chunks",
        "prompt_tokens",
        "completion_tokens",
        "cached_tokens",
    ] {
        assert!(v.get(key).is_some(), "key {key} missing: {v}");
    }
    assert_eq!(v["embedded"], true);
    assert_eq!(v["completion_tokens"], 32);
    assert_eq!(v["chunks"], 32, "one SSE event per token");
    assert_eq!(
        v["cached_tokens"], 0,
        "a fresh simulator has an empty prefix cache"
    );
    let cfg = SimConfig::default();
    let prompt = v["prompt_tokens"].as_u64().unwrap() as u32;
    let want_ttft = cfg.expected_ttft_ms(prompt, 0);
    let want_tpot = cfg.expected_tpot_ms(1);
    let (ttft, tpot) = (f(&v, "ttft_ms"), f(&v, "tpot_ms"));
    // The model's figure is a floor (it cannot be beaten); HTTP and scheduling add a little.
    assert!(
        ttft >= want_ttft * 0.95 && ttft <= want_ttft * 1.5 + 10.0,
        "ttft {ttft} vs model {want_ttft}"
    );
    assert!(
        tpot >= want_tpot * 0.9 && tpot <= want_tpot * 1.3,
        "tpot {tpot} vs model {want_tpot}"
    );
    let e2e = f(&v, "e2e_ms");
    assert!(
        (e2e - (ttft + 31.0 * tpot)).abs() < 1.0,
        "e2e = ttft + 31 × tpot"
    );
}

#[test]
fn fixed_mode_simulator_probed_twice() {
    let _serial = serial();
    let (mut sim, url) = spawn_sim(&["--ttft-ms", "50", "--itl-ms", "10"]);
    let probes: Vec<Value> = (0..3)
        .map(|_| run_json(&["probe", "--base-url", &url, "--json"]))
        .collect();
    for v in &probes {
        assert_eq!(v["embedded"], false);
        assert_eq!(v["completion_tokens"], 32);
    }
    // Each probe reports its own figures; the median of three keeps a scheduling hiccup of the
    // shared CI machine from deciding the check.
    let median = |k: &str| {
        let mut xs: Vec<f64> = probes.iter().map(|v| f(v, k)).collect();
        xs.sort_by(f64::total_cmp);
        xs[1]
    };
    let (ttft, tpot) = (median("ttft_ms"), median("tpot_ms"));
    assert!(
        (45.0..=55.0).contains(&ttft),
        "ttft {ttft} not within 10% of 50: {probes:?}"
    );
    assert!(
        (9.0..=11.0).contains(&tpot),
        "tpot {tpot} not within 10% of 10: {probes:?}"
    );
    assert_eq!(probes[0]["cached_tokens"], 0);
    assert!(
        probes[1]["cached_tokens"].as_u64().unwrap() > 0,
        "second identical probe hits the prefix cache: {}",
        probes[1]
    );
    // Ctrl-C stops it promptly and cleanly.
    let t = Instant::now();
    let pid = sim.id().to_string();
    assert!(
        std::process::Command::new("kill")
            .args(["-INT", &pid])
            .status()
            .unwrap()
            .success()
    );
    let status = sim.wait().unwrap();
    assert!(status.success(), "sim exit {status:?}");
    assert!(t.elapsed() < Duration::from_secs(5));
}

#[test]
fn non_streamed_probe() {
    let _serial = crate::serial();
    let v = run_json(&["probe", "--json", "--no-stream", "--instant"]);
    assert_eq!(v["stream"], false);
    assert_eq!(v["completion_tokens"], 32);
    assert_eq!(
        v["ttft_ms"], v["e2e_ms"],
        "non-streamed ttft is the whole response"
    );
}

fn assert_fails_with(url: &str, kind: &str) {
    let out = run(&[
        "probe",
        "--base-url",
        url,
        "--model",
        "m",
        "--timeout-s",
        "5",
    ]);
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(1), "stderr: {stderr}");
    assert!(!stderr.contains("panicked"), "{stderr}");
    assert_eq!(stderr.trim_end().lines().count(), 1, "one line: {stderr}");
    assert!(
        stderr.starts_with(&format!("error: {kind}:")),
        "expected kind {kind}: {stderr}"
    );
}

#[test]
fn failing_servers_exit_1_with_one_line_naming_the_kind() {
    let _serial = crate::serial();
    let url = scripted_server(|s| {
        let body = "{\"error\":{\"message\":\"internal\"}}";
        let _ = write!(
            s,
            "HTTP/1.1 500 Internal Server Error\r\ncontent-length: {}\r\n\r\n{body}",
            body.len()
        );
    });
    assert_fails_with(&url, "http_status");

    let url = scripted_server(|s| {
        let ev = "data: {\"choices\":[{\"index\":0,\"delta\":{\"content\":\"Hel\"}}]}\n\n";
        let _ = write!(
            s,
            "HTTP/1.1 200 OK\r\ncontent-type: text/event-stream\r\ntransfer-encoding: chunked\r\n\r\n{:x}\r\n{ev}\r\n",
            ev.len()
        );
        let _ = s.flush();
        std::thread::sleep(Duration::from_millis(20));
        reset(s);
        // dropped by the caller: RST
    });
    assert_fails_with(&url, "io");

    let url = scripted_server(|s| {
        let _ = s.write_all(b"\x13\x37 this is not HTTP\r\n\r\n");
    });
    assert_fails_with(&url, "io");

    let url = scripted_server(|s| {
        let body = "{\"choices\": [ garbage";
        let _ = write!(
            s,
            "HTTP/1.1 200 OK\r\ncontent-type: text/event-stream\r\ncontent-length: {}\r\n\r\n",
            body.len() + 8
        );
        let _ = write!(s, "data: {body}\n\n");
    });
    assert_fails_with(&url, "malformed_json");

    let url = scripted_server(|s| {
        let body = "data: {\"choices\":[{\"index\":0,\"delta\":{\"content\":\"a\"}}]}\n\n";
        let _ = write!(
            s,
            "HTTP/1.1 200 OK\r\ncontent-type: text/event-stream\r\ncontent-length: {}\r\n\r\n{body}",
            body.len()
        );
    });
    assert_fails_with(&url, "incomplete_stream");
}

/// Aborts the connection with a TCP reset (SO_LINGER 0), as a crashing server would.
fn reset(s: &mut TcpStream) {
    let _ = socket2::SockRef::from(&*s).set_linger(Some(Duration::ZERO));
}

#[test]
fn bad_input_exits_2() {
    let _serial = crate::serial();
    for args in [
        vec!["probe", "--base-url", "ftp://127.0.0.1:1/v1"],
        vec![
            "probe",
            "--base-url",
            "https://127.0.0.1:1",
            "--client-key",
            "k.pem",
        ],
        vec!["probe", "--base-url", "localhost:8000"],
        vec!["probe", "--header", "novalue"],
        vec!["probe", "--extra-request-body", "{not json"],
        vec!["probe", "--extra-request-body", "[1]"],
        vec!["probe", "--max-tokens", "0"],
        vec!["probe", "--no-such-flag"],
        vec!["sim", "--time-scale", "0"],
        vec!["sim", "--ttft-ms", "50"],
    ] {
        let out = run(&args);
        let stderr = String::from_utf8_lossy(&out.stderr);
        assert_eq!(out.status.code(), Some(2), "{args:?}: {stderr}");
        assert!(!stderr.contains("panicked"), "{args:?}: {stderr}");
    }
}

#[test]
fn connection_refused_exits_1() {
    let _serial = crate::serial();
    let l = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let url = format!("http://{}", l.local_addr().unwrap());
    drop(l);
    let out = run(&["probe", "--base-url", &url, "--model", "m"]);
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(1), "{stderr}");
    assert!(stderr.starts_with("error: connect:"), "{stderr}");
}

#[test]
fn closed_stdout_is_not_an_error() {
    let _serial = crate::serial();
    let mut child = bench()
        .args(["probe", "--json", "--instant"])
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    drop(child.stdout.take());
    let out = child.wait_with_output().unwrap();
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
}

/// Every endpoint against the embedded simulator reasoning first: the same token counts, the
/// reasoning/answer split, and TTFA after TTFT by the reasoning tokens' time.
#[test]
fn every_endpoint_measures_reasoning_then_the_answer() {
    let _serial = serial();
    for endpoint in ["chat", "responses", "messages", "completions"] {
        let v = run_json(&[
            "probe",
            "--json",
            "--endpoint",
            endpoint,
            "--ttft-ms",
            "20",
            "--itl-ms",
            "5",
            "--reasoning-tokens",
            "4",
            "--max-tokens",
            "10",
        ]);
        assert_eq!(v["endpoint"], endpoint);
        assert_eq!(v["completion_tokens"], 10, "{endpoint}: {v}");
        assert_eq!(v["chunks"], 10, "{endpoint}: {v}");
        assert_eq!(v["finish_reason"], "length", "{endpoint}: {v}");
        let (ttft, ttfa) = (f(&v, "ttft_ms"), v["ttfa_ms"].as_f64());
        if endpoint == "completions" {
            // No reasoning shape: everything is answer text.
            assert_eq!(v["reasoning_chunks"], 0, "{v}");
            assert_eq!(ttfa, Some(ttft));
        } else {
            assert_eq!(v["reasoning_chunks"], 4, "{endpoint}: {v}");
            assert_eq!(v["answer_chunks"], 6, "{endpoint}: {v}");
            // The simulator sends each token at its due time, never before it (late ones
            // catch up): the first reasoning token is due at 20 ms, the first answer token
            // after four reasoning tokens 5 ms apart, at 40 ms. A TTFA taken at the first
            // reasoning token would be ~20 ms; a loaded machine can only make both later.
            let ttfa = ttfa.unwrap();
            assert!(ttft >= 19.5, "{endpoint}: ttft {ttft} before its due time");
            assert!(
                ttfa >= 39.5,
                "{endpoint}: ttfa {ttfa} before the first answer token was due (ttft {ttft})"
            );
        }
        if endpoint == "chat" || endpoint == "responses" {
            assert_eq!(v["reasoning_tokens"], 4, "{endpoint}: {v}");
        }
    }
}
