//! The request log: one JSON line per finished request (and the writer of the fault log).

use std::fs::{File, OpenOptions};
use std::io::{BufWriter, Write};
use std::path::Path;
use std::sync::Mutex;

use serde::Serialize;

use crate::faults::FaultKind;

/// One line of the request log.
#[derive(Debug, Serialize)]
pub(crate) struct LogLine<'a> {
    /// When the request was received (RFC 3339, UTC).
    pub(crate) recv_utc: &'a str,
    /// When the request was received, in ms since server start.
    pub(crate) recv_ms: f64,
    /// When the request ended (its last byte written, or it was cut), in ms since server
    /// start: requests whose `recv_ms`..`end_ms` overlap were in flight together.
    pub(crate) end_ms: f64,
    /// The endpoint's path (`/v1/chat/completions`, `/v1/responses`, `/v1/messages`,
    /// `/v1/completions`).
    pub(crate) endpoint: &'static str,
    /// Value of the session header, if any.
    pub(crate) session: Option<&'a str>,
    /// Number of assistant messages in the request (plus the turns of a continued stored
    /// response).
    pub(crate) turn_index: u32,
    pub(crate) prompt_tokens: u32,
    pub(crate) cached_tokens: u32,
    pub(crate) completion_tokens: u32,
    /// Receipt → the first token's bytes made, in ms (absent when no token was): the server's
    /// own time to first token, against which a client's measured TTFT shows what the client
    /// and the network added.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub(crate) ttft_ms: Option<f64>,
    /// HTTP status code (0: the connection was reset before a response head was sent).
    pub(crate) status: u16,
    pub(crate) stream: bool,
    /// `length`, `stop`, `aborted` or `error`.
    pub(crate) finish: &'a str,
    /// Time spent held by `/sim/hold`, in ms (absent when never held).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub(crate) held_ms: Option<f64>,
    /// The fault injected into the request (absent when none was).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub(crate) fault: Option<FaultKind>,
    /// The answer's reasoning as generated (`SimConfig::log_text` only).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub(crate) reasoning: Option<&'a str>,
    /// The answer's text as generated (`SimConfig::log_text` only).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub(crate) text: Option<&'a str>,
}

/// Appends JSON lines to a file; each line is flushed as it is written so none is lost at
/// shutdown. Writes the request log and the fault log.
pub(crate) struct RequestLog {
    out: Mutex<BufWriter<File>>,
}

impl RequestLog {
    pub(crate) fn open(path: &Path) -> std::io::Result<Self> {
        let file = OpenOptions::new().create(true).append(true).open(path)?;
        Ok(Self {
            out: Mutex::new(BufWriter::new(file)),
        })
    }

    /// Writes and flushes one line; failures are reported through `tracing`, never fatal.
    pub(crate) fn write(&self, line: &impl Serialize) {
        let mut buf = match serde_json::to_vec(line) {
            Ok(b) => b,
            Err(e) => {
                tracing::warn!(error = %e, "cannot serialize a log line");
                return;
            }
        };
        buf.push(b'\n');
        let mut out = self
            .out
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner);
        if let Err(e) = out.write_all(&buf).and_then(|()| out.flush()) {
            tracing::warn!(error = %e, "cannot write a log line");
        }
    }
}
