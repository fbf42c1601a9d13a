//! The closed set of turn failures, as records store them (`error_kind`).

use std::fmt;

use serde::{Deserialize, Serialize};

/// What went wrong, as a closed set a runner can count per run. The transport produces it
/// (`bench_transport::ErrorKind` is this type) and records store it under the names of
/// [`ErrorKind::as_str`].
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize, Deserialize)]
#[non_exhaustive]
pub enum ErrorKind {
    /// The base URL or a request could not be built (bad URL, unsupported scheme, bad header).
    #[serde(rename = "invalid_request")]
    InvalidRequest,
    /// No connection could be established (refused, unreachable, DNS).
    #[serde(rename = "connect")]
    Connect,
    /// The request did not finish within its timeout.
    #[serde(rename = "timeout")]
    Timeout,
    /// The server answered with a non-success HTTP status.
    #[serde(rename = "http_status")]
    Status,
    /// The TLS handshake failed or the TLS session broke (unknown CA, name mismatch, expired
    /// certificate, a client certificate the server wants or refuses).
    #[serde(rename = "tls")]
    Tls,
    /// The connection failed while sending the request or reading the response
    /// (reset, closed mid-body).
    #[serde(rename = "io")]
    Io,
    /// The body was not a valid event stream.
    #[serde(rename = "malformed_sse")]
    MalformedSse,
    /// A JSON payload could not be parsed.
    #[serde(rename = "malformed_json")]
    MalformedJson,
    /// The event stream ended without `data: [DONE]`.
    #[serde(rename = "incomplete_stream")]
    Incomplete,
    /// The server reported an error inside a successful (HTTP 200) response.
    #[serde(rename = "server_error")]
    Server,
    /// The caller abandoned the request (e.g. a second Ctrl-C).
    #[serde(rename = "cancelled")]
    Cancelled,
    /// The response exceeded one of the client's size caps (one event-stream line or event,
    /// the whole body, a non-streamed JSON answer): the detail names the cap and the flag that
    /// raises it. The rest of the response is not read, so memory stays bounded.
    #[serde(rename = "response_too_large")]
    ResponseTooLarge,
    /// Agent graphs: a node it waits on (the node its subagent forked from, or a join) failed,
    /// so it was not sent. Its parallel siblings are not affected.
    #[serde(rename = "dependency_failed")]
    DependencyFailed,
}

impl ErrorKind {
    /// Every kind, in declaration order.
    pub const ALL: [ErrorKind; 13] = [
        ErrorKind::InvalidRequest,
        ErrorKind::Connect,
        ErrorKind::Timeout,
        ErrorKind::Status,
        ErrorKind::Tls,
        ErrorKind::Io,
        ErrorKind::MalformedSse,
        ErrorKind::MalformedJson,
        ErrorKind::Incomplete,
        ErrorKind::Server,
        ErrorKind::Cancelled,
        ErrorKind::ResponseTooLarge,
        ErrorKind::DependencyFailed,
    ];

    /// A short, stable, snake_case name (used in records and counters).
    pub fn as_str(self) -> &'static str {
        match self {
            ErrorKind::InvalidRequest => "invalid_request",
            ErrorKind::Connect => "connect",
            ErrorKind::Timeout => "timeout",
            ErrorKind::Status => "http_status",
            ErrorKind::Tls => "tls",
            ErrorKind::Io => "io",
            ErrorKind::MalformedSse => "malformed_sse",
            ErrorKind::MalformedJson => "malformed_json",
            ErrorKind::Incomplete => "incomplete_stream",
            ErrorKind::Server => "server_error",
            ErrorKind::Cancelled => "cancelled",
            ErrorKind::ResponseTooLarge => "response_too_large",
            ErrorKind::DependencyFailed => "dependency_failed",
        }
    }
}

impl fmt::Display for ErrorKind {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use super::*;

    #[test]
    fn on_disk_names_are_the_stable_names() {
        for k in ErrorKind::ALL {
            let json = serde_json::to_string(&k).unwrap();
            assert_eq!(json, format!("\"{}\"", k.as_str()));
            assert_eq!(serde_json::from_str::<ErrorKind>(&json).unwrap(), k);
        }
    }
}
