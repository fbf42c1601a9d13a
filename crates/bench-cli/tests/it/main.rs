//! End-to-end tests of the `bench` binary: real processes, real loopback HTTP.
#![allow(clippy::unwrap_used, clippy::expect_used, missing_docs)]

mod journeys;
mod probe;
mod resume;
mod run;
mod status;
mod workload;

use std::io::{BufRead, BufReader, Read, Write};
use std::net::{TcpListener, TcpStream};
use std::process::{Child, Command, Output, Stdio};
use std::time::Duration;

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

pub fn run(args: &[&str]) -> Output {
    bench().args(args).output().unwrap()
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
        .find(|w| w.starts_with("http://"))
        .unwrap_or_else(|| panic!("no URL in {line:?}"))
        .to_string();
    (SimChild(child), url)
}

/// A one-thread scripted HTTP server: reads each request, then runs `respond` on the socket.
pub fn scripted_server(respond: fn(&mut TcpStream)) -> String {
    let l = TcpListener::bind("127.0.0.1:0").unwrap();
    let addr = l.local_addr().unwrap();
    std::thread::spawn(move || {
        for s in l.incoming() {
            let Ok(mut s) = s else { continue };
            s.set_read_timeout(Some(Duration::from_secs(5))).unwrap();
            let mut buf = Vec::new();
            let mut tmp = [0u8; 4096];
            // Read the head and the (Content-Length) body.
            while let Ok(n) = s.read(&mut tmp) {
                if n == 0 {
                    break;
                }
                buf.extend_from_slice(&tmp[..n]);
                if let Some(end) = buf.windows(4).position(|w| w == b"\r\n\r\n") {
                    let head = String::from_utf8_lossy(&buf[..end]).to_ascii_lowercase();
                    let len = head
                        .lines()
                        .find_map(|l| l.strip_prefix("content-length:"))
                        .and_then(|v| v.trim().parse::<usize>().ok())
                        .unwrap_or(0);
                    if buf.len() >= end + 4 + len {
                        break;
                    }
                }
            }
            if buf.starts_with(b"GET /v1/models") {
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
