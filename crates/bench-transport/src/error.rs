//! Typed transport errors: a kind a caller can match on, plus detail.

use std::fmt;

/// What went wrong, as a closed set a runner can count per run.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
#[non_exhaustive]
pub enum ErrorKind {
    /// The base URL or a request could not be built (bad URL, unsupported scheme, bad header).
    InvalidRequest,
    /// No connection could be established (refused, unreachable, DNS).
    Connect,
    /// The request did not finish within its timeout.
    Timeout,
    /// The server answered with a non-success HTTP status.
    Status,
    /// The connection failed while sending the request or reading the response
    /// (reset, closed mid-body).
    Io,
    /// The body was not a valid event stream.
    MalformedSse,
    /// A JSON payload could not be parsed.
    MalformedJson,
    /// The event stream ended without `data: [DONE]`.
    Incomplete,
    /// The server reported an error inside a successful (HTTP 200) response.
    Server,
    /// The caller abandoned the request (e.g. a second Ctrl-C).
    Cancelled,
}

impl ErrorKind {
    /// A short, stable, snake_case name (used in records and counters).
    pub fn as_str(self) -> &'static str {
        match self {
            ErrorKind::InvalidRequest => "invalid_request",
            ErrorKind::Connect => "connect",
            ErrorKind::Timeout => "timeout",
            ErrorKind::Status => "http_status",
            ErrorKind::Io => "io",
            ErrorKind::MalformedSse => "malformed_sse",
            ErrorKind::MalformedJson => "malformed_json",
            ErrorKind::Incomplete => "incomplete_stream",
            ErrorKind::Server => "server_error",
            ErrorKind::Cancelled => "cancelled",
        }
    }
}

impl fmt::Display for ErrorKind {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

/// A transport error.
///
/// `Display` gives one line: the kind, then the detail (for HTTP errors the status and the first
/// 200 bytes of the body).
#[derive(Debug, thiserror::Error)]
#[error("{kind}: {detail}")]
pub struct Error {
    kind: ErrorKind,
    detail: String,
    status: Option<http::StatusCode>,
    #[source]
    source: Option<Box<dyn std::error::Error + Send + Sync>>,
}

impl Error {
    /// A new error of `kind` with a human-readable detail.
    pub fn new(kind: ErrorKind, detail: impl Into<String>) -> Self {
        Error {
            kind,
            detail: detail.into(),
            status: None,
            source: None,
        }
    }

    pub(crate) fn with_source(
        mut self,
        source: impl Into<Box<dyn std::error::Error + Send + Sync>>,
    ) -> Self {
        self.source = Some(source.into());
        self
    }

    /// An HTTP status error carrying the first 200 bytes of the body.
    pub fn status_error(status: http::StatusCode, body: &[u8]) -> Self {
        let cut = &body[..body.len().min(200)];
        let text = String::from_utf8_lossy(cut);
        let text = text.replace(['\n', '\r'], " ");
        let mut e = Error::new(
            ErrorKind::Status,
            format!("HTTP {}: {}", status.as_u16(), text.trim()),
        );
        e.status = Some(status);
        e
    }

    /// The kind of failure.
    pub fn kind(&self) -> ErrorKind {
        self.kind
    }

    /// The detail text (without the kind).
    pub fn detail(&self) -> &str {
        &self.detail
    }

    /// True when the request timed out.
    pub fn is_timeout(&self) -> bool {
        self.kind == ErrorKind::Timeout
    }

    /// True when no connection could be made.
    pub fn is_connect(&self) -> bool {
        self.kind == ErrorKind::Connect
    }

    /// The HTTP status for [`ErrorKind::Status`] errors.
    pub fn status(&self) -> Option<http::StatusCode> {
        self.status
    }
}
