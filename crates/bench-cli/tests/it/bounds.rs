//! Hostile servers: one endless event-stream line, an endless stream of valid chunks, an endless
//! JSON body. Each must end as a recorded `response_too_large` turn with the client's memory
//! flat (peak RSS within 10% of a run against a well-behaved server), never as a client that
//! buffers until it dies.

use std::io::{Read, Write};
use std::net::TcpListener;
use std::path::Path;
use std::process::Stdio;
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, Instant};

use crate::{bench, read_jsonl, read_request, serial, tempdir};

/// What the fake server sends for a chat request.
#[derive(Clone, Copy, Debug, PartialEq)]
enum Answer {
    /// A short, valid stream.
    Normal,
    /// `data: ` and then 4 GiB of one line.
    HugeLine,
    /// Valid chunks, forever.
    Endless,
    /// A non-streamed JSON answer that never ends.
    EndlessJson,
}

const GIB: u64 = 1 << 30;

/// Serves `answer` to every chat request (one connection at a time, closed after each
/// answer); `sent` counts the body bytes it managed to write.
fn server(answer: Answer, sent: Arc<AtomicU64>) -> String {
    let l = TcpListener::bind("127.0.0.1:0").unwrap();
    let addr = l.local_addr().unwrap();
    std::thread::spawn(move || {
        for s in l.incoming() {
            let Ok(mut s) = s else { continue };
            s.set_read_timeout(Some(Duration::from_secs(5))).unwrap();
            let Some(head) = read_request(&mut s) else {
                continue;
            };
            let line = head.lines().next().unwrap_or_default().to_owned();
            if line.starts_with("GET /v1/models") {
                let body = r#"{"object":"list","data":[{"id":"m","object":"model"}]}"#;
                let _ = write!(
                    s,
                    "HTTP/1.1 200 OK\r\ncontent-type: application/json\r\ncontent-length: {}\r\nconnection: close\r\n\r\n{body}",
                    body.len()
                );
                continue;
            }
            if !line.starts_with("POST") {
                let _ = write!(
                    s,
                    "HTTP/1.1 404 Not Found\r\ncontent-length: 0\r\nconnection: close\r\n\r\n"
                );
                continue;
            }
            let ctype = if answer == Answer::EndlessJson {
                "application/json"
            } else {
                "text/event-stream"
            };
            // No length and no chunking: the body runs until the connection closes.
            let _ = write!(
                s,
                "HTTP/1.1 200 OK\r\ncontent-type: {ctype}\r\nconnection: close\r\n\r\n"
            );
            let chunk = r#"data: {"id":"c","object":"chat.completion.chunk","choices":[{"index":0,"delta":{"content":"tok"},"finish_reason":null}]}"#;
            let mut write = |bytes: &[u8]| -> bool {
                if s.write_all(bytes).is_err() {
                    return false;
                }
                sent.fetch_add(bytes.len() as u64, Ordering::Relaxed);
                true
            };
            match answer {
                Answer::Normal => {
                    let mut body = String::new();
                    for _ in 0..8 {
                        body.push_str(chunk);
                        body.push_str("\n\n");
                    }
                    body.push_str(
                        "data: {\"id\":\"c\",\"object\":\"chat.completion.chunk\",\"choices\":[],\"usage\":{\"prompt_tokens\":10,\"completion_tokens\":8,\"total_tokens\":18}}\n\ndata: [DONE]\n\n",
                    );
                    write(body.as_bytes());
                }
                Answer::HugeLine => {
                    let block = vec![b'x'; 1 << 20];
                    if write(b"data: ") {
                        let mut n = 0u64;
                        while n < 4 * GIB && write(&block) {
                            n += block.len() as u64;
                        }
                        write(b"\n\n");
                    }
                }
                Answer::Endless => {
                    let mut block = String::new();
                    while block.len() < 64 << 10 {
                        block.push_str(chunk);
                        block.push_str("\n\n");
                    }
                    while write(block.as_bytes()) {}
                }
                Answer::EndlessJson => {
                    let block = vec![b' '; 1 << 20];
                    if write(b"{\"id\":\"c\",\"choices\":[") {
                        while write(&block) {}
                    }
                }
            }
        }
    });
    format!("http://{addr}")
}

/// One single-turn run against `url`; returns the turn record, the exit code, the process's
/// peak RSS in KiB (as result.json records it: getrusage of the process itself) and the time.
fn one_turn(url: &str, dir: &Path, extra: &[&str]) -> (serde_json::Value, i32, u64, Duration) {
    let mut flags = vec![
        "--base-url",
        url,
        "--no-metrics",
        "--turn-timeout",
        "60s",
        "--output-len",
        "8",
        "-q",
    ];
    flags.extend_from_slice(extra);
    // The defaults a user runs with (the embedded tokenizer): only the workload is synthetic.
    let mut args: Vec<String> = [
        "run",
        "--dataset",
        "random",
        "--turns",
        "1",
        "--num-sessions",
        "1",
        "--run-dir",
        dir.to_str().unwrap(),
    ]
    .map(String::from)
    .into();
    args.extend(flags.iter().map(|f| f.to_string()));
    let t0 = Instant::now();
    let mut child = bench()
        .args(&args)
        .stdout(Stdio::null())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let status = loop {
        if let Some(st) = child.try_wait().unwrap() {
            break st;
        }
        assert!(
            t0.elapsed() < Duration::from_secs(120),
            "bench run against a hostile server did not finish"
        );
        std::thread::sleep(Duration::from_millis(5));
    };
    let mut err = String::new();
    child
        .stderr
        .take()
        .unwrap()
        .read_to_string(&mut err)
        .unwrap();
    assert!(!err.contains("panicked"), "{err}");
    let turns = read_jsonl(&dir.join("turns.jsonl"));
    assert_eq!(turns.len(), 1, "{err}");
    let result: serde_json::Value =
        serde_json::from_slice(&std::fs::read(dir.join("result.json")).unwrap()).unwrap();
    let peak = result["client"]["peak_rss_bytes"]
        .as_u64()
        .unwrap_or_else(|| panic!("no client.peak_rss_bytes in {result}"))
        >> 10;
    (
        turns[0].clone(),
        status.code().unwrap_or(-1),
        peak,
        t0.elapsed(),
    )
}

#[test]
fn hostile_servers_end_as_recorded_errors_with_flat_memory() {
    let _g = serial();
    let root = tempdir("bounds");
    // The well-behaved reference, twice (the larger peak is the baseline).
    let mut base_peak = 0;
    for i in 0..2 {
        let url = server(Answer::Normal, Arc::default());
        let (turn, code, peak, _) = one_turn(&url, &root.join(format!("normal{i}")), &[]);
        assert_eq!(turn["status"], "ok", "{turn}");
        assert_eq!(code, 0);
        base_peak = base_peak.max(peak);
    }
    assert!(base_peak > 0);

    // (the hostile answer, the cap that stops it, its default in bytes)
    let cases = [
        (Answer::HugeLine, "--max-event-bytes", "8 MiB", 8u64 << 20),
        (Answer::Endless, "--max-response-bytes", "64 MiB", 64 << 20),
        (Answer::EndlessJson, "--max-json-bytes", "8 MiB", 8 << 20),
    ];
    for (answer, flag, cap, cap_bytes) in cases {
        let sent = Arc::new(AtomicU64::new(0));
        let url = server(answer, sent.clone());
        let dir = root.join(format!("{answer:?}"));
        let (turn, code, peak, took) = one_turn(&url, &dir, &[]);
        assert_eq!(turn["status"], "error", "{answer:?}: {turn}");
        assert_eq!(
            turn["error_kind"], "response_too_large",
            "{answer:?}: {turn}"
        );
        let msg = turn["error"].as_str().unwrap();
        assert!(
            msg.contains(flag) && msg.contains(cap),
            "{answer:?}: the error names the cap and its flag: {msg}"
        );
        // A failed run: exit 1 (its error rate is above the default --max-error-rate).
        assert_eq!(code, 1, "{answer:?}");
        let ratio = peak as f64 / base_peak as f64;
        eprintln!(
            "{answer:?}: peak RSS {peak} KiB against {base_peak} KiB ({ratio:.3}x), server \
             wrote {} MiB, {took:?}",
            sent.load(Ordering::Relaxed) >> 20
        );
        // Flat: what the client holds is bounded by the cap, however much the server sends
        // (a 4 GiB line, an endless stream): a buffer grown by doubling to the cap plus the
        // copy it is parsed from stay under three times it; a stream consumed event by event
        // keeps only per-chunk bookkeeping, far below its 64 MiB body cap. The normal run's
        // peak (~16 MB since synthetic plans no longer load the tokenizer) is the floor.
        let allowed = (3 * cap_bytes).min(48 << 20) + (8 << 20);
        let limit = base_peak + (allowed >> 10);
        assert!(
            peak <= limit,
            "{answer:?}: peak RSS {peak} KiB is more than {} MiB above the normal run's \
             {base_peak} KiB (the {cap} cap)",
            allowed >> 20
        );
        if answer == Answer::HugeLine {
            // The client stopped reading long before the 4 GiB line ended.
            assert!(sent.load(Ordering::Relaxed) < GIB, "{answer:?}");
        }
    }
    std::fs::remove_dir_all(&root).unwrap();
}

#[test]
fn a_raised_cap_lets_a_long_line_through() {
    // The same 4 GiB line with the cap raised past what is sent first: the error then comes
    // from the next cap (the whole body), which proves the flag reaches the transport.
    let _g = serial();
    let root = tempdir("bounds-raised");
    let url = server(Answer::HugeLine, Arc::default());
    let (turn, _, _, _) = one_turn(
        &url,
        &root.join("run"),
        &[
            "--max-event-bytes",
            "64MiB",
            "--max-response-bytes",
            "16MiB",
        ],
    );
    assert_eq!(turn["error_kind"], "response_too_large", "{turn}");
    let msg = turn["error"].as_str().unwrap();
    assert!(
        msg.contains("--max-response-bytes") && msg.contains("16 MiB"),
        "{msg}"
    );
    std::fs::remove_dir_all(&root).unwrap();
}
