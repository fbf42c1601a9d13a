//! The floor under an HTTP/1.1 client on this machine: `C` keep-alive connections, each in
//! its own task, sending one fixed `POST /v1/chat/completions` and reading a
//! `content-length` answer, `N` requests in all. No HTTP library (the head is parsed with
//! `httparse`), no connection task, no channels, no records: what the kernel and tokio cost
//! per request, to size what an HTTP client and our own per-turn work add on top
//! (`docs/performance.md`, seventh round).
//!
//! ```text
//! bench sim --instant --port 18099 &
//! cargo run --release -p bench-transport --example h1_floor -- 20000 64 body.json 127.0.0.1:18099
//! ```
//!
//! `body.json` is a non-streamed chat request (`"stream": false`): a streamed answer has no
//! `content-length` and is refused.

use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};

use anyhow::{Context, bail};
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpStream;

/// Sends `req` and reads one answer into `buf` (its head and `content-length` body).
async fn exchange(s: &mut TcpStream, req: &[u8], buf: &mut Vec<u8>) -> anyhow::Result<()> {
    s.write_all(req).await?;
    buf.clear();
    loop {
        buf.reserve(4096);
        if s.read_buf(buf).await? == 0 {
            bail!("the server closed the connection before a whole answer");
        }
        let mut headers = [httparse::EMPTY_HEADER; 32];
        let mut head = httparse::Response::new(&mut headers);
        if let httparse::Status::Complete(len) = head.parse(buf)? {
            if head.code != Some(200) {
                bail!("HTTP {:?}", head.code);
            }
            let body: usize = head
                .headers
                .iter()
                .find(|h| h.name.eq_ignore_ascii_case("content-length"))
                .context("an answer without content-length (a streamed request?)")
                .and_then(|h| Ok(std::str::from_utf8(h.value)?.trim().parse()?))?;
            while buf.len() < len + body {
                buf.reserve(4096);
                if s.read_buf(buf).await? == 0 {
                    bail!("the server closed the connection inside an answer");
                }
            }
            return Ok(());
        }
    }
}

fn main() -> anyhow::Result<()> {
    let args: Vec<String> = std::env::args().skip(1).collect();
    let [n, c, body, addr] = args.as_slice() else {
        bail!("usage: h1_floor REQUESTS CONNECTIONS BODY.json HOST:PORT");
    };
    let n: u64 = n.parse().context("REQUESTS")?;
    let c: u64 = c.parse().context("CONNECTIONS")?;
    let body = std::fs::read(body).with_context(|| format!("reading {body}"))?;
    let mut req = format!(
        "POST /v1/chat/completions HTTP/1.1\r\nhost: {addr}\r\ncontent-type: application/json\r\ncontent-length: {}\r\n\r\n",
        body.len()
    )
    .into_bytes();
    req.extend_from_slice(&body);
    let req = Arc::new(req);
    let rt = tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()?;
    rt.block_on(async {
        let left = Arc::new(AtomicU64::new(n));
        let started = std::time::Instant::now();
        let mut tasks = Vec::new();
        for _ in 0..c {
            let (left, req, addr) = (left.clone(), req.clone(), addr.clone());
            tasks.push(tokio::spawn(async move {
                let mut s = TcpStream::connect(&addr).await?;
                s.set_nodelay(true)?;
                let mut buf = Vec::with_capacity(4096);
                let mut done = 0u64;
                while left
                    .fetch_update(Ordering::AcqRel, Ordering::Acquire, |x| x.checked_sub(1))
                    .is_ok()
                {
                    exchange(&mut s, &req, &mut buf).await?;
                    done += 1;
                }
                anyhow::Ok(done)
            }));
        }
        let mut done = 0;
        for t in tasks {
            done += t.await??;
        }
        let secs = started.elapsed().as_secs_f64();
        println!(
            "{done} requests in {secs:.3} s: {:.0}/s",
            done as f64 / secs
        );
        Ok(())
    })
}
