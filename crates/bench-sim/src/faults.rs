//! Seeded fault injection: HTTP errors, connection resets, malformed and truncated streams,
//! stalls and slow heads, drawn per request from a hash of the seed and the request's identity.
//!
//! [`Faults`] is the configuration ([`SimConfig::faults`](crate::SimConfig::faults)): a rate per
//! [`FaultKind`], a seed, the fault log and the delays. [`Faults::draw`] is the whole decision
//! (a pure function, so a test or a client can predict it); the server keeps the per-session
//! attempt counts that feed it ([`FaultState`]), applies the fault on the wire (`server.rs`)
//! and writes one fault-log line per fault actually injected.

use std::collections::HashMap;
use std::fmt;
use std::io;
use std::path::PathBuf;
use std::pin::Pin;
use std::str::FromStr;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex, PoisonError};
use std::task::{Context, Poll};
use std::time::Duration;

use http::StatusCode;
use serde::{Serialize, Serializer};
use serde_json::json;
use tokio::io::{AsyncRead, AsyncWrite, ReadBuf};
use tokio::net::TcpStream;
use tokio::sync::Notify;

use crate::config::ser_duration_ms;
use crate::reqlog::RequestLog;
use crate::wire::{Api, ApiError};

/// One kind of fault. Its name ([`FaultKind::as_str`]) is what `--fault KIND=RATE`, the fault
/// log and the request log's `fault` field spell.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
#[non_exhaustive]
pub enum FaultKind {
    /// `429`: HTTP 429 with `Retry-After` and OpenAI's rate-limit body.
    RateLimited,
    /// `503`: HTTP 503 with `Retry-After` and an "overloaded" body.
    Unavailable,
    /// `500`: HTTP 500 with a vLLM, SGLang or OpenAI error body.
    InternalError,
    /// `reset-before-headers`: the request is read, then the connection is reset (TCP RST)
    /// before any response byte.
    ResetBeforeHeaders,
    /// `reset-mid-stream`: the head and about half of the answer, then a TCP RST.
    ResetMidStream,
    /// `malformed-chunk`: one SSE event whose data is a JSON chunk cut in half (a whole body
    /// cut in half when not streamed).
    MalformedChunk,
    /// `no-done`: the stream ends cleanly without its terminal event (`[DONE]`,
    /// `response.completed`, `message_stop`).
    NoDone,
    /// `stall`: the head and the first token's events, then nothing for [`Faults::stall`].
    Stall,
    /// `slow-headers`: the head comes [`Faults::slow_headers`] late, then a normal answer.
    SlowHeaders,
    /// `truncated-usage`: the usage is left out (the usage chunk, the usage object).
    TruncatedUsage,
}

impl FaultKind {
    /// Every kind, in the order of their names' list.
    pub const ALL: [FaultKind; 10] = [
        FaultKind::RateLimited,
        FaultKind::Unavailable,
        FaultKind::InternalError,
        FaultKind::ResetBeforeHeaders,
        FaultKind::ResetMidStream,
        FaultKind::MalformedChunk,
        FaultKind::NoDone,
        FaultKind::Stall,
        FaultKind::SlowHeaders,
        FaultKind::TruncatedUsage,
    ];

    /// The stable name: `429`, `503`, `500`, `reset-before-headers`, `reset-mid-stream`,
    /// `malformed-chunk`, `no-done`, `stall`, `slow-headers`, `truncated-usage`.
    pub fn as_str(self) -> &'static str {
        match self {
            FaultKind::RateLimited => "429",
            FaultKind::Unavailable => "503",
            FaultKind::InternalError => "500",
            FaultKind::ResetBeforeHeaders => "reset-before-headers",
            FaultKind::ResetMidStream => "reset-mid-stream",
            FaultKind::MalformedChunk => "malformed-chunk",
            FaultKind::NoDone => "no-done",
            FaultKind::Stall => "stall",
            FaultKind::SlowHeaders => "slow-headers",
            FaultKind::TruncatedUsage => "truncated-usage",
        }
    }

    /// Every name, comma-separated (for error messages and help).
    pub fn names() -> String {
        let names: Vec<&str> = Self::ALL.iter().map(|k| k.as_str()).collect();
        names.join(", ")
    }

    fn index(self) -> usize {
        Self::ALL.iter().position(|k| *k == self).unwrap_or(0)
    }
}

impl fmt::Display for FaultKind {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

impl FromStr for FaultKind {
    type Err = String;

    /// A kind by its name; the error lists the valid names.
    fn from_str(s: &str) -> Result<Self, String> {
        Self::ALL
            .into_iter()
            .find(|k| k.as_str() == s)
            .ok_or_else(|| format!("unknown fault kind {s:?} (valid: {})", Self::names()))
    }
}

impl Serialize for FaultKind {
    fn serialize<S: Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        s.serialize_str(self.as_str())
    }
}

/// Fault injection settings ([`SimConfig::faults`](crate::SimConfig::faults)). The default
/// injects nothing.
///
/// Each generation request the simulator would serve (parsed, within the context) draws at
/// most one fault: `u` in `[0, 1)` from an xxh3 hash of (`seed`, the session header's value,
/// the turn index, how many requests of that session and turn came before), and the kind whose
/// cumulative rate (in the order of `rates`) first exceeds `u`. The same seed and the same
/// requests give the same faults whatever the concurrency; a retried request draws again.
#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct Faults {
    /// Rate of each kind, each in `[0, 1]`, adding up to at most 1, no kind twice (see
    /// [`Faults::parse`]). Default none.
    #[serde(serialize_with = "ser_rates")]
    pub rates: Vec<(FaultKind, f64)>,
    /// Seed of the draws. Default 0.
    pub seed: u64,
    /// When set, one JSON line per injected fault is appended (and flushed) to this file as it
    /// happens. Default none.
    pub log: Option<PathBuf>,
    /// How long a `stall` lasts (the stream then goes on). Default 1 hour.
    #[serde(rename = "stall_ms", serialize_with = "ser_duration_ms")]
    pub stall: Duration,
    /// How late a `slow-headers` head is. Default 2 s.
    #[serde(rename = "slow_headers_ms", serialize_with = "ser_duration_ms")]
    pub slow_headers: Duration,
    /// The `Retry-After` of `429` and `503`, in seconds. Default 1.
    pub retry_after_s: u64,
}

impl Default for Faults {
    fn default() -> Self {
        Self {
            rates: Vec::new(),
            seed: 0,
            log: None,
            stall: Duration::from_secs(3600),
            slow_headers: Duration::from_secs(2),
            retry_after_s: 1,
        }
    }
}

fn ser_rates<S: Serializer>(rates: &[(FaultKind, f64)], s: S) -> Result<S::Ok, S::Error> {
    use serde::ser::SerializeMap as _;
    let mut m = s.serialize_map(Some(rates.len()))?;
    for (k, r) in rates {
        m.serialize_entry(k.as_str(), r)?;
    }
    m.end()
}

/// Sums of rates up to this much above 1 are rounding, not a mistake (`0.1 × 10`).
const SUM_SLACK: f64 = 1e-9;

impl Faults {
    /// Parses `KIND=RATE,KIND=RATE,...` (e.g. `429=0.02,reset-mid-stream=0.01`; spaces around
    /// items are ignored). The error is one line naming the bad item: an unknown kind (listing
    /// the valid ones), a rate that is not a number in `[0, 1]`, a kind given twice, or rates
    /// adding up to more than 1 (e.g. `"teapot=0.1": unknown fault kind "teapot" (valid: 429,
    /// ...)`).
    pub fn parse(spec: &str) -> Result<Vec<(FaultKind, f64)>, String> {
        let mut rates: Vec<(FaultKind, f64)> = Vec::new();
        for item in spec.split(',').map(str::trim) {
            if item.is_empty() {
                return Err(format!("empty item in {spec:?}"));
            }
            let (kind, rate) = item
                .split_once('=')
                .ok_or_else(|| format!("{item:?} is not KIND=RATE"))?;
            let kind: FaultKind = kind.trim().parse().map_err(|e| format!("{item:?}: {e}"))?;
            let rate = rate.trim();
            let rate = rate
                .parse::<f64>()
                .ok()
                .filter(|r| (0.0..=1.0).contains(r))
                .ok_or_else(|| format!("{item:?}: the rate {rate} is not a number in [0, 1]"))?;
            if rates.iter().any(|(k, _)| *k == kind) {
                return Err(format!("{item:?}: {kind} is given twice"));
            }
            rates.push((kind, rate));
        }
        check_sum(&rates)?;
        Ok(rates)
    }

    /// Checks [`Faults::rates`] as [`Faults::parse`] does (for rates set in code).
    pub fn validate(&self) -> Result<(), String> {
        for (i, (kind, rate)) in self.rates.iter().enumerate() {
            if !(0.0..=1.0).contains(rate) {
                return Err(format!(
                    "fault {kind}: the rate {rate} is not a number in [0, 1]"
                ));
            }
            if self.rates[..i].iter().any(|(k, _)| k == kind) {
                return Err(format!("fault {kind} is given twice"));
            }
        }
        check_sum(&self.rates).map_err(|e| format!("fault {e}"))
    }

    /// Whether any fault can be injected (some rate above 0).
    pub fn is_active(&self) -> bool {
        self.rates.iter().any(|(_, r)| *r > 0.0)
    }

    /// The fault drawn for a request of `session` (the session header's value) and
    /// `turn_index` after `attempt` earlier requests of that session and turn (for a request
    /// without a session: after `attempt` earlier requests without one), or `None`.
    ///
    /// Whether the fault can apply to the request (e.g. `no-done` needs a stream) is decided
    /// by the server afterwards; a fault that cannot apply is not injected.
    pub fn draw(&self, session: Option<&str>, turn_index: u32, attempt: u64) -> Option<FaultKind> {
        self.draw_hashed(session, turn_index, attempt)
            .map(|(k, _)| k)
    }

    /// [`Self::draw`] with the draw's hash (its low bits pick among a kind's variants).
    pub(crate) fn draw_hashed(
        &self,
        session: Option<&str>,
        turn_index: u32,
        attempt: u64,
    ) -> Option<(FaultKind, u64)> {
        let h = self.hash(session, turn_index, attempt);
        // The top 53 bits: uniform in [0, 1).
        #[allow(clippy::cast_precision_loss)]
        let u = (h >> 11) as f64 / (1u64 << 53) as f64;
        let mut cumulative = 0.0;
        for &(kind, rate) in &self.rates {
            cumulative += rate;
            if u < cumulative {
                return Some((kind, h));
            }
        }
        None
    }

    fn hash(&self, session: Option<&str>, turn_index: u32, attempt: u64) -> u64 {
        let s = session.unwrap_or("");
        let mut buf = Vec::with_capacity(48 + s.len());
        buf.extend_from_slice(b"bench-sim fault\0");
        buf.extend_from_slice(&self.seed.to_le_bytes());
        // Length-prefixed, with a tag telling "no session" from an empty one.
        buf.push(u8::from(session.is_some()));
        buf.extend_from_slice(&(s.len() as u64).to_le_bytes());
        buf.extend_from_slice(s.as_bytes());
        buf.extend_from_slice(&turn_index.to_le_bytes());
        buf.extend_from_slice(&attempt.to_le_bytes());
        xxhash_rust::xxh3::xxh3_64(&buf)
    }
}

fn check_sum(rates: &[(FaultKind, f64)]) -> Result<(), String> {
    let sum: f64 = rates.iter().map(|(_, r)| r).sum();
    if sum > 1.0 + SUM_SLACK {
        return Err(format!("rates add up to {sum}, more than 1"));
    }
    Ok(())
}

/// One line of the fault log.
#[derive(Debug, Serialize)]
pub(crate) struct FaultLine<'a> {
    /// When the fault was injected (RFC 3339, UTC).
    pub(crate) utc: &'a str,
    /// When the fault was injected, in ms since server start.
    pub(crate) ms: f64,
    pub(crate) fault: FaultKind,
    /// Value of the session header, if any.
    pub(crate) session: Option<&'a str>,
    pub(crate) turn_index: u32,
    pub(crate) endpoint: &'static str,
    pub(crate) stream: bool,
}

/// The server's fault state: the settings, the attempt counts the draws need, the fault log
/// and the per-kind counts of `/metrics`.
pub(crate) struct FaultState {
    pub(crate) cfg: Faults,
    /// Per session: its latest turn index and how many requests of that turn came so far.
    /// Sessions play their turns in order, so one entry per session is enough.
    attempts: Mutex<HashMap<String, (u32, u64)>>,
    /// Requests without a session so far.
    anonymous: AtomicU64,
    log: Option<RequestLog>,
    injected: [AtomicU64; FaultKind::ALL.len()],
}

impl FaultState {
    /// The state for `cfg`, or `None` when it injects nothing; opens (creates) the fault log
    /// either way.
    pub(crate) fn new(cfg: &Faults) -> io::Result<Option<Self>> {
        let log = match &cfg.log {
            Some(path) => Some(RequestLog::open(path)?),
            None => None,
        };
        if !cfg.is_active() {
            return Ok(None);
        }
        Ok(Some(Self {
            cfg: cfg.clone(),
            attempts: Mutex::new(HashMap::new()),
            anonymous: AtomicU64::new(0),
            log,
            injected: Default::default(),
        }))
    }

    /// Counts the request and draws its fault (with the draw's hash).
    pub(crate) fn decide(
        &self,
        session: Option<&str>,
        turn_index: u32,
    ) -> Option<(FaultKind, u64)> {
        let attempt = match session {
            None => self.anonymous.fetch_add(1, Ordering::Relaxed),
            Some(s) => {
                let mut m = self.attempts.lock().unwrap_or_else(PoisonError::into_inner);
                let entry = match m.get_mut(s) {
                    Some(e) => e,
                    None => m.entry(s.to_owned()).or_insert((turn_index, 0)),
                };
                if entry.0 != turn_index {
                    *entry = (turn_index, 0);
                }
                entry.1 += 1;
                entry.1 - 1
            }
        };
        self.cfg.draw_hashed(session, turn_index, attempt)
    }

    /// Records an injected fault: its count and its fault-log line.
    pub(crate) fn injected(&self, line: &FaultLine<'_>) {
        self.injected[line.fault.index()].fetch_add(1, Ordering::Relaxed);
        if let Some(log) = &self.log {
            log.write(line);
        }
    }

    /// Injected faults per configured kind, for `/metrics`.
    pub(crate) fn counts(&self) -> Vec<(FaultKind, u64)> {
        self.cfg
            .rates
            .iter()
            .map(|(k, _)| (*k, self.injected[k.index()].load(Ordering::Relaxed)))
            .collect()
    }
}

/// Whether `kind` can be injected into a request: `no-done` needs a stream, `truncated-usage`
/// a response that reports usage (a chat or completions stream reports it only with
/// `stream_options.include_usage`).
pub(crate) fn applies(kind: FaultKind, api: Api, stream: bool, include_usage: bool) -> bool {
    match kind {
        FaultKind::NoDone => stream,
        FaultKind::TruncatedUsage => {
            !stream || include_usage || matches!(api, Api::Responses | Api::Messages)
        }
        _ => true,
    }
}

/// An error fault's reply: status, `Retry-After` (seconds) and body, in the endpoint's own
/// shape. `h` (the draw's hash) picks a `500`'s body among vLLM's, SGLang's and OpenAI's.
pub(crate) fn error_reply(
    kind: FaultKind,
    api: Api,
    model: &str,
    retry_after_s: u64,
    h: u64,
) -> (StatusCode, Option<u64>, Vec<u8>) {
    let anthropic = api == Api::Messages;
    let body = match kind {
        FaultKind::RateLimited if anthropic => json!({"type": "error", "error": {
            "type": "rate_limit_error",
            "message": "Number of request tokens has exceeded your per-minute rate limit. \
                        Please try again later.",
        }}),
        FaultKind::RateLimited => json!({"error": {
            "message": format!(
                "Rate limit reached for {model} in organization org-bench-sim on requests per \
                 min (RPM): Limit 60, Used 60, Requested 1. Please try again in \
                 {retry_after_s}s."
            ),
            "type": "requests",
            "param": null,
            "code": "rate_limit_exceeded",
        }}),
        FaultKind::Unavailable => {
            let e = ApiError::new(
                StatusCode::SERVICE_UNAVAILABLE,
                if anthropic {
                    "Overloaded"
                } else {
                    "The server is overloaded or not ready yet."
                },
            );
            return (e.status, Some(retry_after_s), api.error_body(&e));
        }
        _ if anthropic => json!({"type": "error", "error": {
            "type": "api_error", "message": "Internal server error",
        }}),
        _ => match h % 3 {
            // vLLM's `ErrorResponse` (before 0.10: flat, `object: "error"`), as it answers
            // when the engine died.
            0 => json!({
                "object": "error",
                "message": "EngineCore encountered an issue. See stack trace (above) for the \
                            root cause.",
                "type": "InternalServerError",
                "param": null,
                "code": 500,
            }),
            // SGLang's `ErrorResponse` in its OpenAI envelope (also vLLM's since 0.10), as
            // `OpenAIServingBase.handle_request` answers an exception.
            1 => json!({"error": {
                "message": "Internal server error: CUDA error: an illegal memory access was \
                            encountered",
                "type": "InternalServerError",
                "param": null,
                "code": 500,
            }}),
            // OpenAI's.
            _ => json!({"error": {
                "message": "The server had an error while processing your request. Sorry \
                            about that!",
                "type": "server_error",
                "param": null,
                "code": null,
            }}),
        },
    };
    let (status, retry) = match kind {
        FaultKind::RateLimited => (StatusCode::TOO_MANY_REQUESTS, Some(retry_after_s)),
        _ => (StatusCode::INTERNAL_SERVER_ERROR, None),
    };
    (status, retry, body.to_string().into_bytes())
}

/// The first half of `bytes`, cut at a UTF-8 character boundary.
pub(crate) fn first_half(bytes: &[u8]) -> &[u8] {
    let mut at = bytes.len() / 2;
    while at > 0 && bytes.get(at).is_some_and(|b| b & 0xC0 == 0x80) {
        at -= 1;
    }
    &bytes[..at]
}

/// A malformed copy of one SSE event (`[event: T\n]data: {json}\n\n`): the same lines with the
/// JSON cut in half, so the data is never valid JSON (an object without its closing brace).
pub(crate) fn malformed_event(event: &[u8]) -> Vec<u8> {
    const DATA: &[u8] = b"data: ";
    let start = event
        .windows(DATA.len())
        .position(|w| w == DATA)
        .map_or(0, |p| p + DATA.len());
    let end = event.len().saturating_sub(2).max(start);
    let mut out = Vec::with_capacity(end + 2);
    out.extend_from_slice(&event[..start]);
    out.extend_from_slice(first_half(&event[start..end]));
    out.extend_from_slice(b"\n\n");
    out
}

/// A connection's reset switch: a fault that resets the connection pulls it; the connection's
/// task then drops the socket with `SO_LINGER` 0, so the kernel sends RST instead of FIN.
#[derive(Debug, Default)]
pub(crate) struct ConnReset {
    pulled: AtomicBool,
    notify: Notify,
}

impl ConnReset {
    /// Asks the connection's task to reset the connection.
    pub(crate) fn pull(&self) {
        self.pulled.store(true, Ordering::Release);
        self.notify.notify_one();
    }

    /// Resolves once [`Self::pull`] was called.
    pub(crate) async fn pulled(&self) {
        loop {
            if self.pulled.load(Ordering::Acquire) {
                return;
            }
            self.notify.notified().await;
        }
    }

    fn is_pulled(&self) -> bool {
        self.pulled.load(Ordering::Acquire)
    }
}

/// A TCP stream that is closed with RST (`SO_LINGER` 0) when dropped after its [`ConnReset`]
/// was pulled, and with the usual FIN otherwise.
pub(crate) struct ResettableStream {
    tcp: TcpStream,
    reset: Arc<ConnReset>,
}

impl ResettableStream {
    pub(crate) fn new(tcp: TcpStream, reset: Arc<ConnReset>) -> Self {
        Self { tcp, reset }
    }
}

impl Drop for ResettableStream {
    fn drop(&mut self) {
        if self.reset.is_pulled() {
            if let Err(e) = self.tcp.set_zero_linger() {
                tracing::debug!(error = %e, "cannot set SO_LINGER 0: the reset is a plain close");
            }
        }
    }
}

impl AsyncRead for ResettableStream {
    fn poll_read(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &mut ReadBuf<'_>,
    ) -> Poll<io::Result<()>> {
        Pin::new(&mut self.get_mut().tcp).poll_read(cx, buf)
    }
}

impl AsyncWrite for ResettableStream {
    fn poll_write(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &[u8],
    ) -> Poll<io::Result<usize>> {
        Pin::new(&mut self.get_mut().tcp).poll_write(cx, buf)
    }

    fn poll_write_vectored(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        bufs: &[io::IoSlice<'_>],
    ) -> Poll<io::Result<usize>> {
        Pin::new(&mut self.get_mut().tcp).poll_write_vectored(cx, bufs)
    }

    fn is_write_vectored(&self) -> bool {
        self.tcp.is_write_vectored()
    }

    fn poll_flush(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        Pin::new(&mut self.get_mut().tcp).poll_flush(cx)
    }

    fn poll_shutdown(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        Pin::new(&mut self.get_mut().tcp).poll_shutdown(cx)
    }
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use super::*;

    #[test]
    fn names_round_trip() {
        for k in FaultKind::ALL {
            assert_eq!(k.as_str().parse::<FaultKind>().unwrap(), k);
            assert_eq!(
                k.index(),
                FaultKind::ALL.iter().position(|x| *x == k).unwrap()
            );
        }
    }

    #[test]
    fn malformed_events_keep_their_lines_and_break_the_json() {
        let ev = b"event: x\ndata: {\"type\":\"x\",\"delta\":\"h\xc3\xa9llo w\"}\n\n";
        let bad = malformed_event(ev);
        let text = std::str::from_utf8(&bad).unwrap();
        assert!(text.starts_with("event: x\ndata: {\"type\""), "{text}");
        assert!(text.ends_with("\n\n"));
        let data = text.lines().nth(1).unwrap().strip_prefix("data: ").unwrap();
        assert!(serde_json::from_str::<serde_json::Value>(data).is_err());
        assert_eq!(first_half("aé".as_bytes()), b"a");
    }
}
