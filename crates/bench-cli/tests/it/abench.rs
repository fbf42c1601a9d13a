//! agentic-bench 0.2.0 command lines (`abench run ...`) given to `bench` (docs/agentic-bench.md).

use std::io::{BufRead, BufReader, Read, Write};
use std::net::{TcpListener, TcpStream};
use std::path::Path;
use std::sync::{Arc, Mutex};

use serde_json::{Value, json};

use crate::{bench, read_jsonl, run, run_json, serial, spawn_sim, tempdir};

/// Reads one HTTP/1.1 request (head and Content-Length body) from `r`; `None` at EOF.
fn read_request(r: &mut BufReader<TcpStream>) -> Option<(String, Vec<u8>)> {
    let mut head = String::new();
    loop {
        let mut line = String::new();
        if r.read_line(&mut line).ok()? == 0 {
            return None;
        }
        head.push_str(&line);
        if line == "\r\n" {
            break;
        }
    }
    let len = head
        .lines()
        .find_map(|l| {
            l.to_ascii_lowercase()
                .strip_prefix("content-length:")
                .map(str::to_owned)
        })
        .and_then(|v| v.trim().parse::<usize>().ok())
        .unwrap_or(0);
    let mut body = vec![0; len];
    r.read_exact(&mut body).ok()?;
    Some((head, body))
}

/// A proxy in front of `upstream` (a `bench sim`) that keeps every request body it forwards.
/// Each request goes upstream on its own connection, asked to close after the response, so the
/// response can be copied back until EOF.
fn recording_proxy(upstream: &str) -> (String, Arc<Mutex<Vec<String>>>) {
    let upstream = upstream.trim_start_matches("http://").to_owned();
    let l = TcpListener::bind("127.0.0.1:0").unwrap();
    let addr = l.local_addr().unwrap();
    let bodies = Arc::new(Mutex::new(Vec::new()));
    let kept = Arc::clone(&bodies);
    std::thread::spawn(move || {
        for client in l.incoming() {
            let Ok(client) = client else { continue };
            let (upstream, kept) = (upstream.clone(), Arc::clone(&kept));
            std::thread::spawn(move || {
                let mut out = client.try_clone().unwrap();
                let mut r = BufReader::new(client);
                while let Some((head, body)) = read_request(&mut r) {
                    if head.starts_with("POST ") {
                        kept.lock()
                            .unwrap()
                            .push(String::from_utf8(body.clone()).unwrap());
                    }
                    let (line, rest) = head.split_once("\r\n").unwrap();
                    let mut up = TcpStream::connect(&upstream).unwrap();
                    write!(up, "{line}\r\nconnection: close\r\n{rest}").unwrap();
                    up.write_all(&body).unwrap();
                    if std::io::copy(&mut up, &mut out).is_err() {
                        return;
                    }
                }
            });
        }
    });
    (format!("http://{addr}"), bodies)
}

/// `bench ARGS` must fail with exit 2 and exactly one line on stderr, containing `want`.
fn refused(args: &[&str], home: &Path, want: &str) {
    let out = bench().args(args).env("HOME", home).output().unwrap();
    let err = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(2), "{args:?}: {err}");
    assert_eq!(err.lines().count(), 1, "{args:?}: not one line: {err}");
    assert!(
        err.starts_with("error: ") && err.contains(want),
        "{args:?}: {err}"
    );
}

#[test]
fn system_prompt_len_is_system_prompt_tokens_for_plan() {
    let v = run_json(&["plan", "--system-prompt-len", "2000", "--json"]);
    assert_eq!(v["system_prompt_tokens"], 2000, "{v}");
    assert_eq!(v["system_prompt"]["actual_tokens"], 2000, "{v}");
}

#[test]
fn an_agentic_bench_command_line_runs_with_its_meaning() {
    let _serial = serial();
    let dir = tempdir("abench-run");
    let log = dir.join("requests.jsonl");
    let out_file = dir.join("out.jsonl");
    let run_dir = dir.join("run");
    let (_sim, sim_url) = spawn_sim(&[
        "--instant",
        "--request-log",
        log.to_str().unwrap(),
        "--session-header",
        "x-smg-routing-key",
    ]);
    let (proxy, bodies) = recording_proxy(&sim_url);
    // agentic-bench accepts the whole endpoint as its base URL.
    let base_url = format!("{proxy}/v1/chat/completions");
    #[rustfmt::skip]
    let args = [
        "run", "--base-url", &base_url, "--dataset-name", "random", "--num-sessions", "2",
        "--turns", "2", "--max-concurrency", "2", "--output-file", out_file.to_str().unwrap(),
        "--tag", "t", "--temperature", "0", "--top-p", "0.9", "--top-k", "-1",
        "--presence-penalty", "0.5", "--chat-template-kwargs", r#"{"enable_thinking":false}"#,
        "--disable-tqdm", "--warmup-requests", "0", "--tokenizer", "none", "--routing-key",
        "--ready-check-timeout-sec", "5", "--output-details", "--no-gaps",
        "--run-dir", run_dir.to_str().unwrap(),
    ];
    let out = run(&args);
    let stdout = String::from_utf8_lossy(&out.stdout);
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(out.status.success(), "{stderr}");
    assert!(
        stderr.contains("note: --output-details has no effect"),
        "{stderr}"
    );
    assert!(
        stdout.contains("tag t"),
        "the report names the tag: {stdout}"
    );

    // Every request carries the sampling fields as agentic-bench sends them.
    let bodies = bodies.lock().unwrap().clone();
    assert_eq!(bodies.len(), 4, "2 sessions × 2 turns");
    for b in &bodies {
        assert!(b.contains(r#""temperature":0.0"#), "{b}");
        let v: Value = serde_json::from_str(b).unwrap();
        assert_eq!(v["temperature"], json!(0.0));
        assert_eq!(v["top_p"], json!(0.9));
        assert_eq!(v["top_k"], json!(-1));
        assert_eq!(v["presence_penalty"], json!(0.5));
        assert_eq!(v["chat_template_kwargs"], json!({"enable_thinking": false}));
    }
    // --routing-key without a value: agentic-bench's header, one key per session.
    let reqs = read_jsonl(&log);
    assert_eq!(reqs.len(), 4);
    let keys: std::collections::BTreeSet<&str> = reqs
        .iter()
        .map(|r| r["session"].as_str().unwrap())
        .collect();
    assert_eq!(keys.len(), 2, "{reqs:?}");

    let lines = read_jsonl(&out_file);
    assert_eq!(lines.len(), 1);
    assert_eq!(lines[0]["tag"], "t");
    assert_eq!(lines[0]["turns_ok"], 4);
    let run_json: Value =
        serde_json::from_slice(&std::fs::read(run_dir.join("run.json")).unwrap()).unwrap();
    let spec = &run_json["spec"];
    assert_eq!(spec["exports"]["tag"], "t");
    assert_eq!(spec["target"]["url"]["ready_timeout"], "5s");
    std::fs::remove_dir_all(&dir).unwrap();
}

#[test]
fn host_and_port_name_the_server() {
    let _serial = serial();
    let dir = tempdir("abench-host");
    let (_sim, url) = spawn_sim(&["--instant"]);
    let port = url.rsplit(':').next().unwrap().trim_end_matches('/');
    #[rustfmt::skip]
    let v = run_json(&[
        "run", "--host", "127.0.0.1", "--port", port, "--dataset-name", "random", "--turns", "1",
        "--num-sessions", "1", "--tokenizer", "none", "--json", "-q",
        "--run-dir", dir.join("run").to_str().unwrap(),
    ]);
    assert_eq!(v["summary"]["turns_ok"], 1);
    assert_eq!(v["config"]["base_url"], format!("http://127.0.0.1:{port}"));
    std::fs::remove_dir_all(&dir).unwrap();
}

#[test]
fn an_agentic_bench_tier_is_read_with_its_manifest() {
    let home = tempdir("abench-home");
    let tier = home.join("abench_data/deepswe/mixed");
    std::fs::create_dir_all(&tier).unwrap();
    // Two sessions, ~25 and ~2,500 tokens (4 characters a token without a tokenizer).
    let session = |id: &str, words: usize| {
        json!({"session_id": id, "source": {"dataset": "deepswe", "agent": "a"},
               "system_prompt": "", "turns": [{"index": 0,
               "input_delta": [{"role": "user", "content": "word ".repeat(words)}],
               "assistant_text": "ok", "output_tokens": 2, "pre_gap_ms": 0.0}]})
        .to_string()
    };
    let data = format!("{}\n{}\n", session("small", 20), session("big", 2000));
    std::fs::write(tier.join("data.jsonl"), data).unwrap();
    let manifest = json!({"dataset": "deepswe", "tier": "mixed", "version": "v1.1",
        "n_sessions": 2, "band": [1000, 100_000], "system_prompt_len": 64,
        "files": [{"path": "data.jsonl", "size_bytes": 1, "sha256": "x"}]});
    std::fs::write(tier.join("manifest.json"), manifest.to_string()).unwrap();
    let plan = |extra: &[&str]| {
        let out = bench()
            .args(["plan", "--tokenizer", "none", "--json"])
            .args(extra)
            .env("HOME", &home)
            .output()
            .unwrap();
        assert!(
            out.status.success(),
            "{}",
            String::from_utf8_lossy(&out.stderr)
        );
        serde_json::from_slice::<Value>(&out.stdout).unwrap()
    };
    // agentic-bench's default dataset name, from ~/abench_data: the band keeps the big session.
    let v = plan(&["--dataset-name", "deepswe/mixed"]);
    assert_eq!(v["sessions"], 1, "{v}");
    assert_eq!(v["system_prompt_tokens"], 64, "{v}");
    // The same tier by path (a root of tiers, and the tier itself); flags win over it.
    let v = plan(&["--dataset-path", home.join("abench_data").to_str().unwrap()]);
    assert_eq!(
        (v["sessions"].as_u64(), v["system_prompt_tokens"].as_u64()),
        (Some(1), Some(64))
    );
    let v = plan(&[
        "--dataset-path",
        tier.to_str().unwrap(),
        "--min-context",
        "1",
    ]);
    assert_eq!(v["sessions"], 2, "{v}");
    std::fs::remove_dir_all(&home).unwrap();
}

#[test]
fn flags_that_cannot_be_honoured_are_refused_in_one_line() {
    let home = tempdir("abench-refused");
    let cases: &[(&[&str], &str)] = &[
        (&["run", "--duration", "0"], "--duration 0"),
        (
            &["run", "--turn-timeout", "0"],
            "finite per-request timeout",
        ),
        (&["run", "--host", "h"], "--host needs --port"),
        (
            &["run", "--chat-template-kwargs", "[1]"],
            "must be a JSON object",
        ),
        (&["run", "--chat-template-kwargs", "{"], "is not valid JSON"),
        (
            &["run", "--temperature", "NaN"],
            "temperature must be a finite number",
        ),
        (
            &["run", "--dataset-name", "random", "--dataset-path", "x"],
            "drop --dataset-path",
        ),
        (
            &["run", "--dataset-name", "lmcache/full"],
            "python3 -m abench data lmcache/full",
        ),
        (
            &["plan", "--dataset-name", "deepswe"],
            "python3 -m abench data deepswe/mixed",
        ),
    ];
    for (args, want) in cases {
        refused(args, &home, want);
    }
    std::fs::remove_dir_all(&home).unwrap();
}
