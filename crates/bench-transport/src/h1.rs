//! HTTP/1.1 on one connection, read and written in the caller's own task: a request goes out
//! in one vectored write (its head and the body's shared pieces), the response head is parsed
//! by `httparse`, and the body (`content-length`, chunked, or delimited by the close) is
//! handed out as it arrives, straight from the connection's read buffer.
//!
//! This is the client's whole HTTP layer. It has no connection task, no channel between a
//! request and its connection and no per-request allocation beyond the head: on loopback a
//! turn's HTTP work costs a fraction of what a general-purpose client spends (see
//! `docs/performance.md`, "eighth round").
//!
//! It speaks only what a client of an inference server needs: no pipelining, no upgrades, no
//! `Expect: 100-continue` (an informational answer before the real one is skipped).

use std::pin::Pin;
use std::task::{Context, Poll};

use bytes::{Buf, Bytes, BytesMut};
use http::{HeaderMap, HeaderName, HeaderValue, StatusCode};
use tokio::io::{AsyncRead, AsyncReadExt, AsyncWrite, AsyncWriteExt, ReadBuf};
use tokio::net::TcpStream;

use crate::body::Segments;
use crate::error::{Error, ErrorKind};

/// The most a response head may take (status line and headers).
const MAX_HEAD: usize = 64 << 10;
/// The most headers a response head may carry.
const MAX_HEADERS: usize = 100;
/// The most a chunk-size line (with its extensions) or a trailer section may take.
const MAX_CHUNK_LINE: usize = 4 << 10;
/// How much the read buffer grows by when it is full.
const READ_CHUNK: usize = 16 << 10;

/// What went wrong on a connection.
#[derive(Debug)]
pub(crate) enum H1Error {
    /// The connection ended (a clean end of file) where the response wanted more; says where.
    Closed(&'static str),
    /// The server's bytes are not an HTTP/1.1 response.
    Parse(String),
    /// The socket (or TLS over it) failed.
    Io(std::io::Error),
}

impl std::fmt::Display for H1Error {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            H1Error::Closed(m) => f.write_str(m),
            H1Error::Parse(m) => f.write_str(m),
            H1Error::Io(e) => write!(f, "{e}"),
        }
    }
}

impl std::error::Error for H1Error {
    fn source(&self) -> Option<&(dyn std::error::Error + 'static)> {
        match self {
            H1Error::Io(e) => e.source(),
            _ => None,
        }
    }
}

impl From<std::io::Error> for H1Error {
    fn from(e: std::io::Error) -> Self {
        H1Error::Io(e)
    }
}

impl H1Error {
    /// The server closing the connection (an end of file where HTTP framing or TLS wanted
    /// more), not a reset or a protocol error.
    pub(crate) fn is_closed(&self) -> bool {
        match self {
            H1Error::Closed(_) => true,
            H1Error::Io(e) => e.kind() == std::io::ErrorKind::UnexpectedEof,
            H1Error::Parse(_) => false,
        }
    }

    /// The error a caller sees, `doing` saying what the client was doing.
    pub(crate) fn into_error(self, doing: &str) -> Error {
        if let H1Error::Io(e) = &self
            && let Some(r) = crate::tls::find_rustls_error(e)
        {
            let reason = crate::tls::reason(r);
            return Error::new(ErrorKind::Tls, format!("TLS error while {doing}: {reason}"));
        }
        match self {
            H1Error::Closed(m) => Error::new(
                ErrorKind::Io,
                format!("connection closed by the server while {doing} ({m})"),
            ),
            H1Error::Parse(m) => Error::new(
                ErrorKind::Io,
                format!("invalid HTTP response while {doing}: {m}"),
            ),
            H1Error::Io(e) => {
                let text = e.to_string();
                Error::new(ErrorKind::Io, format!("{doing}: {text}")).with_source(e)
            }
        }
    }
}

/// The socket under a connection: plain TCP or TLS over TCP.
#[derive(Debug)]
pub(crate) enum Transport {
    Plain(TcpStream),
    Tls(Box<tokio_rustls::client::TlsStream<TcpStream>>),
}

macro_rules! each_transport {
    ($self:expr, $s:ident => $e:expr) => {
        match $self.get_mut() {
            Transport::Plain($s) => {
                let $s = Pin::new($s);
                $e
            }
            Transport::Tls($s) => {
                let $s = Pin::new($s.as_mut());
                $e
            }
        }
    };
}

impl AsyncRead for Transport {
    fn poll_read(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &mut ReadBuf<'_>,
    ) -> Poll<std::io::Result<()>> {
        each_transport!(self, s => s.poll_read(cx, buf))
    }
}

impl AsyncWrite for Transport {
    fn poll_write(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &[u8],
    ) -> Poll<std::io::Result<usize>> {
        each_transport!(self, s => s.poll_write(cx, buf))
    }

    fn poll_write_vectored(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        bufs: &[std::io::IoSlice<'_>],
    ) -> Poll<std::io::Result<usize>> {
        each_transport!(self, s => s.poll_write_vectored(cx, bufs))
    }

    fn is_write_vectored(&self) -> bool {
        match self {
            Transport::Plain(s) => s.is_write_vectored(),
            Transport::Tls(s) => s.is_write_vectored(),
        }
    }

    fn poll_flush(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<std::io::Result<()>> {
        each_transport!(self, s => s.poll_flush(cx))
    }

    fn poll_shutdown(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<std::io::Result<()>> {
        each_transport!(self, s => s.poll_shutdown(cx))
    }
}

/// A response head.
#[derive(Debug)]
pub(crate) struct Head {
    pub status: StatusCode,
    pub headers: HeaderMap,
}

/// Where the body being read stands.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum BodyState {
    /// No response being read.
    Idle,
    /// `content-length`: bytes still to come.
    Length(u64),
    /// Chunked: at a chunk-size line.
    ChunkSize,
    /// Chunked: bytes of the current chunk still to come.
    ChunkData(u64),
    /// Chunked: the CRLF after a chunk's data.
    ChunkEnd,
    /// Chunked: the trailer section after the last chunk.
    Trailers,
    /// Delimited by the connection's close.
    UntilClose,
    /// Read to its end; whether the connection can carry another request.
    Done { reusable: bool },
    /// Failed: the connection is unusable.
    Failed,
}

/// One HTTP/1.1 connection over `IO` (the client's sockets; an in-memory stream for the fuzz
/// target).
#[derive(Debug)]
pub(crate) struct H1<IO = Transport> {
    io: IO,
    buf: BytesMut,
    body: BodyState,
    /// The current response's connection may be kept alive (its version and `connection`).
    keep_alive: bool,
    /// Some byte of a response to the current request arrived.
    got_response: bool,
}

impl<IO: AsyncRead + AsyncWrite + Unpin> H1<IO> {
    pub(crate) fn new(io: IO) -> H1<IO> {
        H1 {
            io,
            buf: BytesMut::with_capacity(READ_CHUNK),
            body: BodyState::Idle,
            keep_alive: false,
            got_response: false,
        }
    }

    /// Some byte of a response to the latest request arrived (the redial rule's question).
    pub(crate) fn got_response(&self) -> bool {
        self.got_response
    }

    /// The response was read to its end and the connection can carry another request.
    pub(crate) fn reusable(&self) -> bool {
        matches!(self.body, BodyState::Done { reusable: true }) && self.buf.is_empty()
    }

    /// An idle connection is still open: nothing arrived on it, not even its close. (Polls the
    /// socket once without waiting; a TLS session's post-handshake messages are taken in.)
    pub(crate) fn idle_and_open(&mut self) -> bool {
        if !self.buf.is_empty() {
            return false;
        }
        let mut cx = Context::from_waker(std::task::Waker::noop());
        let mut one = [0u8; 64];
        let mut rb = ReadBuf::new(&mut one);
        matches!(
            Pin::new(&mut self.io).poll_read(&mut cx, &mut rb),
            Poll::Pending
        )
    }

    /// Writes a request: `head` (its request line and headers, ending in an empty line) and
    /// the body's pieces, in vectored writes. On failure says whether any byte went out.
    pub(crate) async fn write_request(
        &mut self,
        head: &[u8],
        body: &Segments,
    ) -> Result<(), (bool, std::io::Error)> {
        self.body = BodyState::Idle;
        self.got_response = false;
        // The head and the body's pieces, on the stack for a body of a few pieces.
        const ON_STACK: usize = 16;
        let mut few = [std::io::IoSlice::new(&[]); ON_STACK];
        let mut many = Vec::new();
        let mut rest: &mut [std::io::IoSlice<'_>] = if body.pieces() < ON_STACK {
            few[0] = std::io::IoSlice::new(head);
            for (slot, p) in few[1..].iter_mut().zip(body.iter()) {
                *slot = std::io::IoSlice::new(p);
            }
            &mut few[..1 + body.pieces()]
        } else {
            many.reserve_exact(1 + body.pieces());
            many.push(std::io::IoSlice::new(head));
            many.extend(body.iter().map(|p| std::io::IoSlice::new(p)));
            &mut many[..]
        };
        let mut written = false;
        while !rest.is_empty() {
            let n = match self.io.write_vectored(rest).await {
                Ok(0) => {
                    return Err((
                        written,
                        std::io::Error::new(
                            std::io::ErrorKind::WriteZero,
                            "the connection took no more bytes",
                        ),
                    ));
                }
                Ok(n) => n,
                Err(e) => return Err((written, e)),
            };
            written = true;
            std::io::IoSlice::advance_slices(&mut rest, n);
        }
        if let Err(e) = self.io.flush().await {
            return Err((written, e));
        }
        Ok(())
    }

    /// Reads more bytes into the buffer; 0 at the end of the connection.
    async fn fill(&mut self) -> std::io::Result<usize> {
        if self.buf.capacity() - self.buf.len() < READ_CHUNK / 4 {
            self.buf.reserve(READ_CHUNK);
        }
        let n = self.io.read_buf(&mut self.buf).await?;
        if n > 0 {
            self.got_response = true;
        }
        Ok(n)
    }

    /// Reads a response head (skipping informational ones); the body is then read with
    /// [`H1::chunk`]. `head_request`: the request was `HEAD` (the response has no body).
    pub(crate) async fn read_head(&mut self, head_request: bool) -> Result<Head, H1Error> {
        let r = self.read_head_inner(head_request).await;
        if r.is_err() {
            self.body = BodyState::Failed;
        }
        r
    }

    async fn read_head_inner(&mut self, head_request: bool) -> Result<Head, H1Error> {
        loop {
            if let Some(head) = self.parse_head(head_request)? {
                return Ok(head);
            }
            if self.buf.len() > MAX_HEAD {
                return Err(head_too_large());
            }
            if self.fill().await? == 0 {
                return Err(H1Error::Closed(IN_HEAD));
            }
        }
    }

    /// A complete head from the buffer, if one is there (informational heads are dropped).
    fn parse_head(&mut self, head_request: bool) -> Result<Option<Head>, H1Error> {
        loop {
            if self.buf.is_empty() {
                return Ok(None);
            }
            // Left uninitialized: httparse writes the ones it fills.
            let mut headers =
                [const { std::mem::MaybeUninit::<httparse::Header<'_>>::uninit() }; MAX_HEADERS];
            let mut resp = httparse::Response::new(&mut []);
            let parsed = httparse::ParserConfig::default().parse_response_with_uninit_headers(
                &mut resp,
                &self.buf,
                &mut headers,
            );
            let len = match parsed {
                // (Checked on a complete head too: the cap holds however the head arrived.)
                Ok(httparse::Status::Complete(n)) if n > MAX_HEAD => {
                    return Err(head_too_large());
                }
                Ok(httparse::Status::Complete(n)) => n,
                Ok(httparse::Status::Partial) => return Ok(None),
                Err(httparse::Error::Status) => {
                    return Err(H1Error::Parse("invalid HTTP status-code".into()));
                }
                Err(httparse::Error::Version) => {
                    return Err(H1Error::Parse("invalid HTTP version".into()));
                }
                Err(e) => return Err(H1Error::Parse(e.to_string())),
            };
            let code = resp.code.unwrap_or(0);
            let status = StatusCode::from_u16(code)
                .map_err(|_| H1Error::Parse(format!("invalid status code {code}")))?;
            if status.is_informational() && code != 101 {
                self.buf.advance(len);
                continue;
            }
            let mut map = HeaderMap::with_capacity(resp.headers.len());
            let mut keep_alive = resp.version == Some(1);
            let mut length: Option<u64> = None;
            let mut chunked = false;
            let mut transfer_encoding = false;
            for h in resp.headers.iter() {
                let name = HeaderName::from_bytes(h.name.as_bytes())
                    .map_err(|_| H1Error::Parse(format!("invalid header name {:?}", h.name)))?;
                let value = HeaderValue::from_bytes(h.value)
                    .map_err(|_| H1Error::Parse(format!("invalid value of header {}", h.name)))?;
                if name == http::header::CONTENT_LENGTH {
                    let n = std::str::from_utf8(h.value)
                        .ok()
                        .and_then(|s| s.trim().parse::<u64>().ok())
                        .ok_or_else(|| H1Error::Parse("invalid content-length".into()))?;
                    if length.is_some_and(|l| l != n) {
                        return Err(H1Error::Parse("conflicting content-length headers".into()));
                    }
                    length = Some(n);
                } else if name == http::header::TRANSFER_ENCODING {
                    transfer_encoding = true;
                    // Chunked only when it is the last coding.
                    chunked = h
                        .value
                        .rsplit(|&b| b == b',')
                        .next()
                        .is_some_and(|c| c.trim_ascii().eq_ignore_ascii_case(b"chunked"));
                } else if name == http::header::CONNECTION {
                    for token in h.value.split(|&b| b == b',') {
                        let t = token.trim_ascii();
                        if t.eq_ignore_ascii_case(b"close") {
                            keep_alive = false;
                        } else if t.eq_ignore_ascii_case(b"keep-alive") && resp.version == Some(0) {
                            keep_alive = true;
                        }
                    }
                }
                map.append(name, value);
            }
            self.buf.advance(len);
            self.keep_alive = keep_alive;
            self.body = if head_request
                || status == StatusCode::NO_CONTENT
                || status == StatusCode::NOT_MODIFIED
                || code == 101
            {
                BodyState::Done {
                    reusable: keep_alive && code != 101,
                }
            } else if transfer_encoding {
                if chunked {
                    BodyState::ChunkSize
                } else {
                    BodyState::UntilClose
                }
            } else {
                match length {
                    Some(0) => BodyState::Done {
                        reusable: keep_alive,
                    },
                    Some(n) => BodyState::Length(n),
                    None => BodyState::UntilClose,
                }
            };
            return Ok(Some(Head {
                status,
                headers: map,
            }));
        }
    }

    /// The next piece of the body as it arrived; `None` once it ended.
    pub(crate) async fn chunk(&mut self) -> Result<Option<Bytes>, H1Error> {
        let r = self.chunk_inner().await;
        if r.is_err() {
            self.body = BodyState::Failed;
        }
        r
    }

    async fn chunk_inner(&mut self) -> Result<Option<Bytes>, H1Error> {
        loop {
            match self.body {
                BodyState::Done { .. } => return Ok(None),
                BodyState::Idle | BodyState::Failed => {
                    return Err(H1Error::Parse("no response is being read".into()));
                }
                BodyState::Length(rem) => {
                    let (data, left) = self.take(rem, IN_LENGTH).await?;
                    self.body = if left == 0 {
                        BodyState::Done {
                            reusable: self.keep_alive,
                        }
                    } else {
                        BodyState::Length(left)
                    };
                    return Ok(Some(data));
                }
                BodyState::UntilClose => {
                    if self.buf.is_empty() && self.fill().await? == 0 {
                        self.body = BodyState::Done { reusable: false };
                        return Ok(None);
                    }
                    return Ok(Some(self.buf.split().freeze()));
                }
                BodyState::ChunkSize => match httparse::parse_chunk_size(&self.buf) {
                    Ok(httparse::Status::Complete((used, _))) if used > MAX_CHUNK_LINE => {
                        return Err(H1Error::Parse("chunk-size line too long".into()));
                    }
                    Ok(httparse::Status::Complete((used, size))) => {
                        self.buf.advance(used);
                        self.body = if size == 0 {
                            BodyState::Trailers
                        } else {
                            BodyState::ChunkData(size)
                        };
                    }
                    Ok(httparse::Status::Partial) => {
                        if self.buf.len() > MAX_CHUNK_LINE {
                            return Err(H1Error::Parse("chunk-size line too long".into()));
                        }
                        if self.fill().await? == 0 {
                            return Err(H1Error::Closed(IN_CHUNKED));
                        }
                    }
                    Err(_) => return Err(H1Error::Parse("invalid chunk size".into())),
                },
                BodyState::ChunkData(rem) => {
                    let (data, left) = self.take(rem, IN_CHUNKED).await?;
                    self.body = if left == 0 {
                        BodyState::ChunkEnd
                    } else {
                        BodyState::ChunkData(left)
                    };
                    return Ok(Some(data));
                }
                BodyState::ChunkEnd => {
                    if self.buf.len() < 2 {
                        if self.fill().await? == 0 {
                            return Err(H1Error::Closed(IN_CHUNKED));
                        }
                        continue;
                    }
                    if &self.buf[..2] != b"\r\n" {
                        return Err(H1Error::Parse("chunk data not followed by CRLF".into()));
                    }
                    self.buf.advance(2);
                    self.body = BodyState::ChunkSize;
                }
                BodyState::Trailers => match memchr::memmem::find(&self.buf, b"\r\n") {
                    Some(0) => {
                        self.buf.advance(2);
                        self.body = BodyState::Done {
                            reusable: self.keep_alive,
                        };
                        return Ok(None);
                    }
                    Some(i) if i > MAX_CHUNK_LINE => {
                        return Err(H1Error::Parse("trailer line too long".into()));
                    }
                    Some(i) => self.buf.advance(i + 2),
                    None => {
                        if self.buf.len() > MAX_CHUNK_LINE {
                            return Err(H1Error::Parse("trailer line too long".into()));
                        }
                        if self.fill().await? == 0 {
                            return Err(H1Error::Closed(IN_CHUNKED));
                        }
                    }
                },
            }
        }
    }

    /// Up to `rem` bytes of a body of known length (reading more if none is buffered), and how
    /// many are left after them; `closed` names the framing if the connection ends first.
    async fn take(&mut self, rem: u64, closed: &'static str) -> Result<(Bytes, u64), H1Error> {
        if self.buf.is_empty() && self.fill().await? == 0 {
            return Err(H1Error::Closed(closed));
        }
        let n = rem.min(self.buf.len() as u64);
        Ok((self.buf.split_to(n as usize).freeze(), rem - n))
    }

    /// Reads once more (at most `wait`), to learn why a fresh TLS connection failed: a TLS 1.3
    /// server refusing the client's certificate says so in an alert after the handshake,
    /// which the request's write may have run into first.
    pub(crate) async fn tls_alert(&mut self, wait: std::time::Duration) -> Option<H1Error> {
        match tokio::time::timeout(wait, self.fill()).await {
            Ok(Err(e)) if crate::tls::find_rustls_error(&e).is_some() => Some(H1Error::Io(e)),
            _ => None,
        }
    }
}

/// Where a connection closed too early.
const IN_HEAD: &str = "connection closed before message completed";
const IN_LENGTH: &str = "end of file before message length reached";
const IN_CHUNKED: &str = "end of file before the chunked body's last chunk";

fn head_too_large() -> H1Error {
    H1Error::Parse(format!(
        "the response head is larger than {} KiB",
        MAX_HEAD >> 10
    ))
}

/// Writes a request head: the request line, `headers` as given (lowercase names) and the
/// `content-length` of a body that has one, then the empty line.
pub(crate) fn write_head(
    out: &mut Vec<u8>,
    method: &http::Method,
    target: &str,
    fixed: &[u8],
    headers: Option<&HeaderMap>,
    body_len: u64,
) {
    out.extend_from_slice(method.as_str().as_bytes());
    out.push(b' ');
    out.extend_from_slice(target.as_bytes());
    out.extend_from_slice(b" HTTP/1.1\r\n");
    let mut has_length = false;
    match headers {
        Some(map) => {
            for (k, v) in map {
                has_length |= k == http::header::CONTENT_LENGTH;
                out.extend_from_slice(k.as_str().as_bytes());
                out.extend_from_slice(b": ");
                out.extend_from_slice(v.as_bytes());
                out.extend_from_slice(b"\r\n");
            }
        }
        None => out.extend_from_slice(fixed),
    }
    let needs_length = body_len > 0
        || matches!(
            *method,
            http::Method::POST | http::Method::PUT | http::Method::PATCH
        );
    if needs_length && !has_length {
        use std::io::Write as _;
        // Writing into a Vec cannot fail.
        let _ = write!(out, "content-length: {body_len}\r\n");
    }
    out.extend_from_slice(b"\r\n");
}

/// The headers of `map` as they go on the wire (`name: value` lines).
pub(crate) fn header_lines(map: &HeaderMap) -> Vec<u8> {
    let mut out = Vec::new();
    for (k, v) in map {
        out.extend_from_slice(k.as_str().as_bytes());
        out.extend_from_slice(b": ");
        out.extend_from_slice(v.as_bytes());
        out.extend_from_slice(b"\r\n");
    }
    out
}

/// A response fed from memory in reads of the given sizes, for the fuzz target.
pub(crate) struct MemIo {
    chunks: std::collections::VecDeque<Vec<u8>>,
}

impl AsyncRead for MemIo {
    fn poll_read(
        mut self: Pin<&mut Self>,
        _cx: &mut Context<'_>,
        buf: &mut ReadBuf<'_>,
    ) -> Poll<std::io::Result<()>> {
        // An empty read is the end of the stream: empty pieces are skipped.
        while self.chunks.front().is_some_and(Vec::is_empty) {
            self.chunks.pop_front();
        }
        if let Some(front) = self.chunks.front_mut() {
            let n = front.len().min(buf.remaining());
            buf.put_slice(&front[..n]);
            front.drain(..n);
        }
        Poll::Ready(Ok(()))
    }
}

impl AsyncWrite for MemIo {
    fn poll_write(
        self: Pin<&mut Self>,
        _cx: &mut Context<'_>,
        buf: &[u8],
    ) -> Poll<std::io::Result<usize>> {
        Poll::Ready(Ok(buf.len()))
    }

    fn poll_flush(self: Pin<&mut Self>, _cx: &mut Context<'_>) -> Poll<std::io::Result<()>> {
        Poll::Ready(Ok(()))
    }

    fn poll_shutdown(self: Pin<&mut Self>, _cx: &mut Context<'_>) -> Poll<std::io::Result<()>> {
        Poll::Ready(Ok(()))
    }
}

/// Reads one response to a `GET` from `chunks` (reads of those sizes, then the end of the
/// stream): its status, its body and whether the connection could carry another request (the
/// response ended as framed and no byte followed it), or the error's text. Runs without a runtime (memory never makes a read wait).
pub(crate) fn read_from_memory(chunks: &[&[u8]]) -> Result<(u16, Vec<u8>, bool), String> {
    let io = MemIo {
        chunks: chunks.iter().map(|c| c.to_vec()).collect(),
    };
    let mut h1 = H1::new(io);
    let fut = async move {
        h1.write_request(
            b"GET / HTTP/1.1\r\nhost: fuzz\r\n\r\n",
            &Segments::default(),
        )
        .await
        .map_err(|(_, e)| e.to_string())?;
        let head = h1.read_head(false).await.map_err(|e| e.to_string())?;
        let mut body = Vec::new();
        while let Some(b) = h1.chunk().await.map_err(|e| e.to_string())? {
            body.extend_from_slice(&b);
        }
        // Reusable: the response ended as framed and nothing followed it (bytes after it,
        // read yet or not, leave the connection unusable whichever way they arrived).
        let followed = h1.io.chunks.iter().any(|c| !c.is_empty());
        Ok((head.status.as_u16(), body, h1.reusable() && !followed))
    };
    let mut fut = std::pin::pin!(fut);
    let mut cx = Context::from_waker(std::task::Waker::noop());
    match fut.as_mut().poll(&mut cx) {
        Poll::Ready(r) => r,
        Poll::Pending => Err(WAITED.into()),
    }
}

/// What [`read_from_memory`] answers if a read ever waited (it must not).
pub(crate) const WAITED: &str = "the in-memory response made a read wait";

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]
    use super::*;

    async fn pair() -> (H1<Transport>, TcpStream) {
        let l = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let addr = l.local_addr().unwrap();
        let (c, s) = tokio::join!(TcpStream::connect(addr), l.accept());
        (H1::new(Transport::Plain(c.unwrap())), s.unwrap().0)
    }

    async fn body_of(h: &mut H1<Transport>) -> Result<Vec<u8>, H1Error> {
        let mut out = Vec::new();
        while let Some(b) = h.chunk().await? {
            out.extend_from_slice(&b);
        }
        Ok(out)
    }

    #[tokio::test]
    async fn bodies_of_every_framing_in_pieces() {
        let (mut h, mut s) = pair().await;
        let answers: [(&[u8], &[u8], bool); 5] = [
            (b"HTTP/1.1 200 OK\r\ncontent-length: 5\r\n\r\nhello", b"hello", true),
            (
                b"HTTP/1.1 100 Continue\r\n\r\nHTTP/1.1 200 OK\r\ntransfer-encoding: chunked\r\n\r\n3;x=y\r\nhel\r\n2\r\nlo\r\n0\r\nx-t: 1\r\n\r\n",
                b"hello",
                true,
            ),
            (b"HTTP/1.1 204 No Content\r\n\r\n", b"", true),
            (b"HTTP/1.1 200 OK\r\nconnection: close\r\ncontent-length: 2\r\n\r\nok", b"ok", false),
            (b"HTTP/1.0 200 OK\r\n\r\nuntil the end", b"until the end", false),
        ];
        let n = answers.len();
        for (i, (wire, body, reusable)) in answers.into_iter().enumerate() {
            h.write_request(b"GET / HTTP/1.1\r\n\r\n", &Segments::default())
                .await
                .unwrap();
            let mut req = [0u8; 18];
            s.read_exact(&mut req).await.unwrap();
            // One byte at a time: every state must survive a short read.
            let wire = wire.to_vec();
            let last = i + 1 == n;
            let writer = async {
                for b in &wire {
                    s.write_all(std::slice::from_ref(b)).await.unwrap();
                    s.flush().await.unwrap();
                    tokio::task::yield_now().await;
                }
                if last {
                    s.shutdown().await.unwrap();
                }
            };
            let reader = async {
                let head = h.read_head(false).await.unwrap();
                assert!(head.status.is_success());
                body_of(&mut h).await.unwrap()
            };
            let ((), got) = tokio::join!(writer, reader);
            assert_eq!(got, body, "answer {i}");
            assert_eq!(h.reusable(), reusable, "answer {i}");
        }
    }

    #[tokio::test]
    async fn cuts_and_garbage_are_errors() {
        let cases: [(&[u8], &str); 5] = [
            (b"HTTP/1.1 200 OK\r\ncontent-length: 9\r\n\r\nhel", "closed"),
            (
                b"HTTP/1.1 200 OK\r\ntransfer-encoding: chunked\r\n\r\n5\r\nhel",
                "closed",
            ),
            (
                b"HTTP/1.1 200 OK\r\ntransfer-encoding: chunked\r\n\r\nzz\r\n",
                "chunk",
            ),
            (b"\x00\x01garbage\r\n\r\n", "parse"),
            (
                b"HTTP/1.1 200 OK\r\ncontent-length: 1\r\ncontent-length: 2\r\n\r\n",
                "parse",
            ),
        ];
        for (wire, want) in cases {
            let (mut h, mut s) = pair().await;
            s.write_all(wire).await.unwrap();
            s.shutdown().await.unwrap();
            let r = match h.read_head(false).await {
                Ok(_) => body_of(&mut h).await.map(|_| ()),
                Err(e) => Err(e),
            };
            let e = r.unwrap_err();
            match want {
                "closed" => assert!(e.is_closed(), "{e}"),
                "chunk" => assert!(e.to_string().contains("chunk size"), "{e}"),
                _ => assert!(matches!(e, H1Error::Parse(_)), "{e}"),
            }
            assert!(!h.reusable());
        }
        // A head that never ends is cut at its cap.
        let (mut h, mut s) = pair().await;
        let mut wire = b"HTTP/1.1 200 OK\r\n".to_vec();
        for i in 0..4000 {
            wire.extend_from_slice(format!("x-h{i}: {}\r\n", "v".repeat(20)).as_bytes());
        }
        tokio::spawn(async move {
            let _ = s.write_all(&wire).await;
            tokio::time::sleep(std::time::Duration::from_secs(5)).await;
        });
        let e = h.read_head(false).await.unwrap_err();
        assert!(
            e.to_string().contains("larger than") || e.to_string().contains("headers"),
            "{e}"
        );
    }

    #[tokio::test]
    async fn an_idle_connection_knows_its_close() {
        let (mut h, s) = pair().await;
        assert!(h.idle_and_open());
        drop(s);
        tokio::time::sleep(std::time::Duration::from_millis(20)).await;
        assert!(!h.idle_and_open());
    }

    #[test]
    fn read_from_memory_the_same_whole_and_cut() {
        let answers: [&[u8]; 7] = [
            b"HTTP/1.1 200 OK\r\ncontent-length: 5\r\n\r\nhello",
            // Bytes after a complete response (fuzz target http_response, crash-b9abbb63):
            // read whole they sat in the buffer, a byte at a time they were not read yet.
            b"HTTP/1.1 200 OK\r\ncontent-length: 5\r\n\r\nhelloXYZ",
            b"HTTP/1.1 200 OK\r\ntransfer-encoding: chunked\r\n\r\n3;x\r\nhel\r\n2\r\nlo\r\n0\r\nt: 1\r\n\r\n",
            b"HTTP/1.0 200 OK\r\n\r\nhello",
            b"HTTP/1.1 200 OK\r\ncontent-length: 9\r\n\r\nhello",
            b"HTTP/1.1 200 OK\r\ntransfer-encoding: chunked\r\n\r\nzz\r\n",
            b"HTTP/1.1 200",
        ];
        /// Status, body and reusability, or the error's text.
        type Reading<'a> = Result<(u16, &'a [u8], bool), &'a str>;
        let want: [Reading<'_>; 7] = [
            Ok((200, b"hello", true)),
            Ok((200, b"hello", false)),
            Ok((200, b"hello", true)),
            Ok((200, b"hello", false)),
            Err(IN_LENGTH),
            Err("invalid chunk size"),
            Err(IN_HEAD),
        ];
        for (a, w) in answers.iter().zip(want) {
            let whole = read_from_memory(&[a]);
            let bytes: Vec<&[u8]> = a.chunks(1).collect();
            assert_eq!(
                whole,
                read_from_memory(&bytes),
                "{}",
                String::from_utf8_lossy(a)
            );
            assert_eq!(
                whole,
                w.map(|(c, b, r)| (c, b.to_vec(), r)).map_err(str::to_owned)
            );
        }
    }

    #[test]
    fn request_heads() {
        let mut out = Vec::new();
        write_head(
            &mut out,
            &http::Method::POST,
            "/v1/chat/completions",
            b"host: h:1\r\n",
            None,
            12,
        );
        assert_eq!(
            out,
            b"POST /v1/chat/completions HTTP/1.1\r\nhost: h:1\r\ncontent-length: 12\r\n\r\n"
        );
        out.clear();
        write_head(
            &mut out,
            &http::Method::GET,
            "/metrics",
            b"host: h:1\r\n",
            None,
            0,
        );
        assert_eq!(out, b"GET /metrics HTTP/1.1\r\nhost: h:1\r\n\r\n");
    }
}
