//! Typed transport errors: a kind a caller can match on, plus detail.

pub use bench_rundir::ErrorKind;

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
