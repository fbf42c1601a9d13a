//! End-to-end tests of the `bench` binary: real processes, real loopback HTTP.
#![allow(clippy::unwrap_used, clippy::expect_used, missing_docs)]

mod abench;
mod bad_inputs;
mod bounds;
mod compare;
mod embed;
mod energy;
mod faults;
mod graph;
mod journeys;
mod probe;
mod report;
mod resume;
mod run;
mod secrets;
mod serve;
mod shards;
mod spec;
mod status;
mod sweep;
mod tls;
mod workload;

use std::ffi::OsStr;
use std::io::{BufRead, BufReader, Read, Write};
use std::net::{TcpListener, TcpStream};
use std::path::Path;
use std::process::{Child, Command, Output, Stdio};
use std::time::Duration;

use serde_json::Value;

/// Tests of this binary that measure time run one at a time: two cores shared by parallel
/// tests (each starting processes and servers) would otherwise measure each other.
pub fn serial() -> std::sync::MutexGuard<'static, ()> {
    static LOCK: std::sync::Mutex<()> = std::sync::Mutex::new(());
    LOCK.lock()
        .unwrap_or_else(std::sync::PoisonError::into_inner)
}

pub fn bench() -> Command {
    let mut c = Command::new(env!("CARGO_BIN_EXE_bench"));
    c.env_remove("OPENAI_API_KEY")
        .env_remove("API_KEY")
        .env_remove("BENCH_BASE_URL");
    c
}

pub fn run<S: AsRef<OsStr>>(args: &[S]) -> Output {
    bench().args(args).output().unwrap()
}

/// `bench` with `args`, which must succeed; its stdout parsed as JSON.
pub fn run_json<S: AsRef<OsStr>>(args: &[S]) -> Value {
    let out = run(args);
    assert!(
        out.status.success(),
        "exit {:?}: {}",
        out.status,
        String::from_utf8_lossy(&out.stderr)
    );
    serde_json::from_slice(&out.stdout).unwrap()
}

/// The arguments of `bench run` on the synthetic workload (`--tokenizer none --dataset
/// random`): `turns` turns in each of `sessions` sessions, recorded in `run_dir`; `extra` holds
/// what the test varies (the server, the concurrency, `--json`...).
pub fn random_run_args(turns: u64, sessions: u64, run_dir: &Path, extra: &[&str]) -> Vec<String> {
    let turns = turns.to_string();
    let sessions = sessions.to_string();
    let mut args: Vec<String> = [
        "run",
        "--tokenizer",
        "none",
        "--dataset",
        "random",
        "--turns",
        &turns,
        "--num-sessions",
        &sessions,
        "--run-dir",
        run_dir.to_str().unwrap(),
    ]
    .map(String::from)
    .into();
    args.extend(extra.iter().map(|a| a.to_string()));
    args
}

/// The lifecycle events of a run directory, typed (a torn last line is left out).
pub fn events(dir: &Path) -> Vec<bench_rundir::LifecycleEvent> {
    bench_rundir::jsonl::read::<bench_rundir::EventLine>(&dir.join("events.jsonl"))
        .unwrap()
        .records
        .into_iter()
        .map(|e| e.event)
        .collect()
}

/// `bench status DIR --json`, which must exit 0; its report.
pub fn status_json(run_dir: &Path) -> Value {
    let out = run(&["status", run_dir.to_str().unwrap(), "--json"]);
    assert_eq!(
        out.status.code(),
        Some(0),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    serde_json::from_slice(&out.stdout).unwrap()
}

/// Every line of a JSONL file, parsed (the file must exist and every line be JSON).
pub fn read_jsonl(path: &Path) -> Vec<Value> {
    std::fs::read_to_string(path)
        .unwrap()
        .lines()
        .map(|l| serde_json::from_str(l).unwrap())
        .collect()
}

/// A fresh, empty directory for one test (`bench-cli-NAME-…` under the system's temp
/// directory), removed when the test ends, failed or not.
pub fn tempdir(name: &str) -> TestDir {
    TestDir(
        tempfile::Builder::new()
            .prefix(&format!("bench-cli-{name}-"))
            .tempdir()
            .unwrap(),
    )
}

/// [`tempdir`]'s directory: a [`Path`] while it lives.
pub struct TestDir(tempfile::TempDir);

impl std::ops::Deref for TestDir {
    type Target = Path;
    fn deref(&self) -> &Path {
        self.0.path()
    }
}

impl AsRef<Path> for TestDir {
    fn as_ref(&self) -> &Path {
        self.0.path()
    }
}

impl AsRef<OsStr> for TestDir {
    fn as_ref(&self) -> &OsStr {
        self.0.path().as_os_str()
    }
}

/// Sends `signal` (as `kill` spells it: `-INT`, `-TERM`) to `child`.
pub fn signal(child: &Child, signal: &str) {
    let _ = Command::new("kill")
        .args([signal, &child.id().to_string()])
        .status();
}

/// Stops a `bench sim` child as Ctrl-C would (SIGINT), and waits for it.
pub fn stop_sim(mut sim: SimChild) {
    signal(&sim, "-INT");
    let _ = sim.wait();
}

/// `bench sim` as a child process; returns it and its base URL.
/// A `bench sim` child that is killed when dropped (a failing test does not leak it).
pub struct SimChild(Child);

impl std::ops::Deref for SimChild {
    type Target = Child;
    fn deref(&self) -> &Child {
        &self.0
    }
}

impl std::ops::DerefMut for SimChild {
    fn deref_mut(&mut self) -> &mut Child {
        &mut self.0
    }
}

impl Drop for SimChild {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

pub fn spawn_sim(args: &[&str]) -> (SimChild, String) {
    let mut child = bench()
        .arg("sim")
        .args(["--port", "0"])
        .args(args)
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let mut line = String::new();
    BufReader::new(child.stdout.take().unwrap())
        .read_line(&mut line)
        .unwrap();
    let url = line
        .split_whitespace()
        .find(|w| w.starts_with("http://") || w.starts_with("https://"))
        .unwrap_or_else(|| panic!("no URL in {line:?}"))
        .to_string();
    (SimChild(child), url)
}

/// The simulator's counters from GET /metrics (unlabelled sums per metric name).
pub fn sim_metrics(url: &str) -> std::collections::HashMap<String, f64> {
    use std::io::{Read, Write};
    let addr = url.trim_start_matches("http://").trim_end_matches("/v1");
    let mut s = std::net::TcpStream::connect(addr).unwrap();
    write!(s, "GET /metrics HTTP/1.0\r\nHost: {addr}\r\n\r\n").unwrap();
    let mut text = String::new();
    s.read_to_string(&mut text).unwrap();
    let mut out = std::collections::HashMap::new();
    for line in text.lines().filter(|l| !l.starts_with('#')) {
        let Some((name_labels, value)) = line.rsplit_once(' ') else {
            continue;
        };
        let name = name_labels.split('{').next().unwrap().to_string();
        if let Ok(v) = value.parse::<f64>() {
            *out.entry(name).or_insert(0.0) += v;
        }
    }
    out
}

/// Reads one request (head and content-length body) from `s`; its head, or `None` at EOF.
pub fn read_request(s: &mut TcpStream) -> Option<String> {
    let mut buf = Vec::new();
    let mut tmp = [0u8; 8192];
    loop {
        let n = s.read(&mut tmp).ok()?;
        if n == 0 {
            return None;
        }
        buf.extend_from_slice(&tmp[..n]);
        if let Some(end) = buf.windows(4).position(|w| w == b"\r\n\r\n") {
            let head = String::from_utf8_lossy(&buf[..end]).into_owned();
            let len = head
                .to_ascii_lowercase()
                .lines()
                .find_map(|l| {
                    l.strip_prefix("content-length:")
                        .map(|v| v.trim().to_owned())
                })
                .and_then(|v| v.parse::<usize>().ok())
                .unwrap_or(0);
            while buf.len() < end + 4 + len {
                let n = s.read(&mut tmp).ok()?;
                if n == 0 {
                    return None;
                }
                buf.extend_from_slice(&tmp[..n]);
            }
            return Some(head);
        }
    }
}

/// A one-thread scripted HTTP server: reads each request, then runs `respond` on the socket.
pub fn scripted_server(respond: fn(&mut TcpStream)) -> String {
    let l = TcpListener::bind("127.0.0.1:0").unwrap();
    let addr = l.local_addr().unwrap();
    std::thread::spawn(move || {
        for s in l.incoming() {
            let Ok(mut s) = s else { continue };
            s.set_read_timeout(Some(Duration::from_secs(5))).unwrap();
            let head = read_request(&mut s).unwrap_or_default();
            if head.starts_with("GET /v1/models") {
                let body = r#"{"object":"list","data":[{"id":"m","object":"model"}]}"#;
                let _ = write!(
                    s,
                    "HTTP/1.1 200 OK\r\ncontent-type: application/json\r\ncontent-length: {}\r\nconnection: close\r\n\r\n{body}",
                    body.len()
                );
                continue;
            }
            respond(&mut s);
        }
    });
    format!("http://{addr}")
}
