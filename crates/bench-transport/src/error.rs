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
    retry_after: Option<std::time::Duration>,
    resent: u32,
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
            retry_after: None,
            resent: 0,
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

    /// An HTTP status error carrying the first 200 bytes of the body, never cut inside a word
    /// ([`bench_rundir::secrets::cut`]: a key the server echoed is whole, for
    /// [`Error::scrub`], or left out).
    pub fn status_error(status: http::StatusCode, body: &[u8]) -> Self {
        let head = &body[..body.len().min(256)];
        let text = String::from_utf8_lossy(head);
        let text = bench_rundir::secrets::cut(&text, 200).replace(['\n', '\r'], " ");
        let mut e = Error::new(
            ErrorKind::Status,
            format!("HTTP {}: {}", status.as_u16(), text.trim()),
        );
        e.status = Some(status);
        e
    }

    /// The same error with every secret in its detail replaced by `***`.
    pub fn scrub(mut self, secrets: &bench_rundir::Secrets) -> Self {
        secrets.scrub_string(&mut self.detail);
        self
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

    /// The wait a status error's `Retry-After` header asked for (whole seconds; an HTTP date
    /// is not read).
    pub fn retry_after(&self) -> Option<std::time::Duration> {
        self.retry_after
    }

    /// The same error with the wait its response's `Retry-After` header asked for.
    pub fn with_retry_after(mut self, wait: Option<std::time::Duration>) -> Self {
        self.retry_after = wait;
        self
    }

    /// How many times the request was written on a reused keep-alive connection that then
    /// closed without any response, and sent again on a new connection before this error
    /// (the server may have received each: they are failed attempts).
    pub fn resent(&self) -> u32 {
        self.resent
    }

    /// The same error, noting `n` earlier resends ([`Error::resent`]).
    pub fn with_resent(mut self, n: u32) -> Self {
        self.resent = n;
        self
    }
}
