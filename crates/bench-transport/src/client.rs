//! The HTTP/1.1 client: pooled keep-alive connections, per-request timeouts, auth from the
//! environment, and transparent redials of requests that hit a connection the server had
//! already closed.
//!
//! # Stale pooled connections
//!
//! Servers close kept-alive connections without warning (llama.cpp's server does so after every
//! streamed response while its headers say `keep-alive`). A request written to such a connection
//! fails although the server never saw it. The client re-sends a request on a fresh connection,
//! without costing the caller a turn, when **both** hold:
//!
//! * the connection had already carried an earlier request (it came from the pool), and
//! * not one byte of a response to this request arrived before the connection failed (or not
//!   one byte of the request was written).
//!
//! This is curl's rule for reused connections. Every such re-send is counted
//! ([`Client::redials`], [`TurnOutcome::redials`]). A failure on a fresh connection, or after any
//! response byte arrived, is a real error.
//!
//! # The pool
//!
//! Connections are pooled here, each one read and written by the request using it (the
//! crate's own HTTP/1.1, `h1.rs`: no connection task, no channels). A connection is back in the
//! pool before [`Client::chat`] returns, so `C` workers use `C` connections (hyper-util's
//! legacy client, used before, hands connections back asynchronously: 84 connections for 64
//! concurrent streams of 4 turns each), and the redial rule knows exactly which connections
//! were reused. A pooled connection is checked on its way out: one the server closed while it
//! was idle is dropped, not written to.

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex, PoisonError};
use std::time::{Duration, Instant};

use bytes::Bytes;
use http::header::HOST;
use http::header::{AUTHORIZATION, CONTENT_TYPE, HeaderName, HeaderValue};
use http::{HeaderMap, Method, StatusCode, Uri};

use crate::body::Segments;
use crate::h1::{H1, H1Error, Head, Transport};
use tokio::net::TcpStream;

use crate::error::{Error, ErrorKind};
use crate::limits::{Limits, too_large};
use crate::openai::ChatRequest;
use crate::stream::{ChatStreamConsumer, TurnOutcome};
use crate::tls::TlsOptions;
pub use bench_rundir::Secrets;

/// How to authenticate.
#[derive(Clone, Default, PartialEq, Eq)]
pub enum Auth {
    /// No `Authorization` header.
    #[default]
    None,
    /// `Authorization: Bearer <token>`.
    Bearer(String),
    /// `Authorization: <value>` sent verbatim.
    Raw(String),
}

impl std::fmt::Debug for Auth {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        // Never print a secret.
        match self {
            Auth::None => f.write_str("None"),
            Auth::Bearer(_) => f.write_str("Bearer(<redacted>)"),
            Auth::Raw(_) => f.write_str("Raw(<redacted>)"),
        }
    }
}

impl Auth {
    /// From the environment: `OPENAI_API_KEY` as a bearer token, else `API_KEY` verbatim, else
    /// none. Empty values count as unset.
    pub fn from_env() -> Auth {
        Auth::from_vars(
            std::env::var("OPENAI_API_KEY").ok(),
            std::env::var("API_KEY").ok(),
        )
    }

    /// The same rule over given values (testable without touching the environment).
    pub fn from_vars(openai_api_key: Option<String>, api_key: Option<String>) -> Auth {
        match (openai_api_key, api_key) {
            (Some(k), _) if !k.is_empty() => Auth::Bearer(k),
            (_, Some(k)) if !k.is_empty() => Auth::Raw(k),
            _ => Auth::None,
        }
    }

    /// A short description safe to print ("bearer from OPENAI_API_KEY", ...).
    pub fn describe(&self) -> &'static str {
        match self {
            Auth::None => "none",
            Auth::Bearer(_) => "bearer token",
            Auth::Raw(_) => "raw authorization header",
        }
    }
}

/// Client settings. `Debug` shows the headers' names, never their values.
#[derive(Clone)]
pub struct ClientConfig {
    /// `http://host:port` or `https://host:port`, optionally with a path prefix. A trailing `/v1` (or
    /// `/v1/chat/completions`) is accepted and ignored, so vLLM-style (`http://h:8000`),
    /// OpenAI-SDK-style (`http://h:8000/v1`) and whole-endpoint base URLs work.
    pub base_url: String,
    /// Default whole-request timeout (connect + response + body), per request.
    pub timeout: Duration,
    /// TCP connect timeout.
    pub connect_timeout: Duration,
    /// Extra headers sent on every request.
    pub headers: Vec<(String, String)>,
    /// Authentication.
    pub auth: Auth,
    /// Idle connections kept per host.
    pub max_idle_per_host: usize,
    /// How long an idle pooled connection is kept.
    pub pool_idle_timeout: Duration,
    /// Trust and client certificates for `https://` base URLs (ignored for `http://`).
    pub tls: TlsOptions,
    /// Size caps on responses ([`Limits::DEFAULT`]).
    pub limits: Limits,
    /// Values scrubbed from every error the client returns (default: the API keys of the
    /// environment, [`Secrets::from_env`]). The client adds its own: the `Authorization` value
    /// and those of secret-named `headers` ([`bench_rundir::is_secret_name`]); add the values
    /// of headers named by `--secret-header` here.
    pub secrets: Secrets,
}

impl std::fmt::Debug for ClientConfig {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ClientConfig")
            .field("base_url", &self.base_url)
            .field("timeout", &self.timeout)
            .field("connect_timeout", &self.connect_timeout)
            .field(
                "header_names",
                &self.headers.iter().map(|(k, _)| k).collect::<Vec<_>>(),
            )
            .field("auth", &self.auth)
            .field("tls", &self.tls)
            .field("limits", &self.limits)
            .field("secrets", &self.secrets)
            .finish_non_exhaustive()
    }
}

impl ClientConfig {
    /// Defaults for `base_url`: 600 s request timeout, 10 s connect timeout, auth from the
    /// environment, no extra headers.
    pub fn new(base_url: impl Into<String>) -> Self {
        ClientConfig {
            base_url: base_url.into(),
            timeout: Duration::from_secs(600),
            connect_timeout: Duration::from_secs(10),
            headers: Vec::new(),
            auth: Auth::from_env(),
            max_idle_per_host: usize::MAX,
            pool_idle_timeout: Duration::from_secs(90),
            tls: TlsOptions::default(),
            limits: Limits::DEFAULT,
            secrets: Secrets::from_env(),
        }
    }
}

/// Per-request options.
#[derive(Debug, Clone, Default)]
pub struct RequestOptions {
    /// Overrides the client's timeout for this request.
    pub timeout: Option<Duration>,
    /// Extra headers for this request only (e.g. a routing key).
    pub headers: Vec<(HeaderName, HeaderValue)>,
    /// A response header to record as the worker that served the turn.
    pub worker_header: Option<HeaderName>,
    /// The API the body is for: decides the path and how the answer is read.
    pub endpoint: crate::Endpoint,
}

/// A response read whole (for small endpoints: `/v1/models`, `/metrics`, ...).
#[derive(Debug, Clone)]
pub struct SimpleResponse {
    /// HTTP status.
    pub status: StatusCode,
    /// Response headers.
    pub headers: HeaderMap,
    /// The body.
    pub body: Bytes,
}

/// A response whose body is read as it arrives ([`Client::request_streaming`]).
pub struct StreamingResponse {
    /// HTTP status.
    pub status: StatusCode,
    /// Response headers.
    pub headers: HeaderMap,
    /// Its body is read from it; dropped with the response (never pooled again).
    conn: Conn,
    /// Body bytes read so far, and the most the client reads ([`Limits::max_response_bytes`]).
    read: u64,
    max: u64,
}

impl std::fmt::Debug for StreamingResponse {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("StreamingResponse")
            .field("status", &self.status)
            .finish_non_exhaustive()
    }
}

impl StreamingResponse {
    /// The next piece of the body as it arrived; `None` once the body ended. A body longer
    /// than the client's [`Limits::max_response_bytes`] ends in a
    /// [`ErrorKind::ResponseTooLarge`] error.
    pub async fn chunk(&mut self) -> Option<Result<Bytes, Error>> {
        if self.read > self.max {
            return None;
        }
        match self.conn.h1.chunk().await {
            Ok(Some(data)) => {
                self.read += data.len() as u64;
                if self.read > self.max {
                    return Some(Err(too_large(
                        "the response body",
                        self.max,
                        "--max-response-bytes",
                        "",
                    )));
                }
                Some(Ok(data))
            }
            Ok(None) => None,
            Err(e) => Some(Err(e.into_error("reading the response stream"))),
        }
    }
}

#[derive(Debug, Default)]
struct ClientStats {
    redials: AtomicU64,
    connections: AtomicU64,
}

/// An idle pooled connection.
struct IdleConn {
    h1: H1,
    since: Instant,
}

/// A connection checked out for one request.
struct Conn {
    h1: H1,
    /// It came from the pool (it carried an earlier request).
    reused: bool,
    /// Opened for this request: its TCP connect and TLS handshake times.
    opened: Option<Opened>,
}

/// How long a new connection took to open.
#[derive(Debug, Clone, Copy)]
struct Opened {
    connect: Duration,
    tls: Option<Duration>,
}

/// Idle keep-alive connections to the client's one server (LIFO: the most recently used
/// connection is the least likely to have been closed by the server).
struct Pool {
    idle: Mutex<Vec<IdleConn>>,
    max_idle: usize,
    idle_timeout: Duration,
}

impl std::fmt::Debug for Pool {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let n = self.idle.lock().map(|v| v.len()).unwrap_or(0);
        f.debug_struct("Pool").field("idle", &n).finish()
    }
}

impl Pool {
    fn take(&self) -> Option<Conn> {
        let mut idle = self.idle.lock().unwrap_or_else(PoisonError::into_inner);
        while let Some(mut c) = idle.pop() {
            if c.since.elapsed() > self.idle_timeout || !c.h1.idle_and_open() {
                continue; // dropped: closes the socket
            }
            return Some(Conn {
                h1: c.h1,
                reused: true,
                opened: None,
            });
        }
        None
    }

    fn put(&self, conn: Conn) {
        if !conn.h1.reusable() {
            return;
        }
        let mut idle = self.idle.lock().unwrap_or_else(PoisonError::into_inner);
        if idle.len() < self.max_idle {
            idle.push(IdleConn {
                h1: conn.h1,
                since: Instant::now(),
            });
        }
    }
}

/// An HTTP/1.1 client bound to one base URL. Cheap to clone; clones share the pool.
#[derive(Clone, Debug)]
pub struct Client {
    pool: Arc<Pool>,
    /// `host:port` to connect to.
    connect_to: String,
    /// For `https://`: the TLS configuration and the name sent as SNI and verified.
    tls: Option<TlsTarget>,
    scheme_authority: String,
    path_prefix: String,
    /// The four endpoints' request targets, parsed once (a turn clones one).
    endpoint_uris: Arc<[(&'static str, Uri)]>,
    /// Every request's headers: `Host`, then the configured ones.
    request_headers: HeaderMap,
    /// The same headers as they go on the wire (a request without headers of its own copies
    /// these bytes).
    header_lines: HeaderLines,
    timeout: Duration,
    connect_timeout: Duration,
    limits: Limits,
    stats: Arc<ClientStats>,
    /// Scrubbed from every error returned ([`ClientConfig::secrets`] and the client's own).
    secrets: Secrets,
}

/// Header lines as they go on the wire. They hold the credentials in clear, so `Debug` shows
/// only their length.
#[derive(Clone)]
struct HeaderLines(Arc<[u8]>);

impl std::fmt::Debug for HeaderLines {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "<{} bytes of header lines>", self.0.len())
    }
}

/// What an `https://` client needs to open a connection.
#[derive(Debug, Clone)]
struct TlsTarget {
    config: Arc<rustls::ClientConfig>,
    /// Sent as SNI and checked against the server's certificate.
    name: rustls::pki_types::ServerName<'static>,
}

/// Upper bound on redials for one request (each consumes a distinct stale pooled connection).
const MAX_REDIALS: u32 = 32;

impl Client {
    /// Validates the configuration and builds the client. Building needs no runtime; sending
    /// requests needs a tokio runtime with I/O and time enabled.
    pub fn new(config: ClientConfig) -> Result<Client, Error> {
        let base = parse_base_url(&config.base_url)?;
        let authority = base.authority.clone();
        let scheme_authority = format!(
            "{}://{authority}",
            if base.https { "https" } else { "http" }
        );
        let path_prefix = base.path_prefix;
        let host = HeaderValue::from_str(&authority).map_err(|_| {
            Error::new(
                ErrorKind::InvalidRequest,
                format!("invalid host in base URL {:?}", config.base_url),
            )
        })?;
        let connect_to = if authority
            .rsplit_once(':')
            .is_some_and(|(_, p)| !p.is_empty() && p.bytes().all(|b| b.is_ascii_digit()))
        {
            authority.clone()
        } else {
            format!("{authority}:{}", if base.https { 443 } else { 80 })
        };
        let tls = if base.https {
            let host = host_of(&authority);
            let name = rustls::pki_types::ServerName::try_from(host.to_owned()).map_err(|_| {
                Error::new(
                    ErrorKind::InvalidRequest,
                    format!("invalid TLS server name {host:?} in base URL"),
                )
            })?;
            Some(TlsTarget {
                config: config.tls.client_config()?,
                name,
            })
        } else {
            config.tls.validate()?;
            None
        };
        let mut headers = HeaderMap::new();
        headers.insert(HOST, host);
        headers.insert(CONTENT_TYPE, HeaderValue::from_static("application/json"));
        let mut secrets = config.secrets.clone();
        secrets.add_url_credentials(&config.base_url);
        let auth_value = match (&base.credentials, &config.auth) {
            // Credentials in the URL are HTTP Basic auth, as curl and browsers send them; they
            // are more specific than an API key from the environment.
            (Some((user, pass)), _) => {
                use base64::Engine as _;
                let token =
                    base64::engine::general_purpose::STANDARD.encode(format!("{user}:{pass}"));
                Some(format!("Basic {token}"))
            }
            (None, Auth::None) => None,
            (None, Auth::Bearer(k)) => Some(format!("Bearer {k}")),
            (None, Auth::Raw(k)) => Some(k.clone()),
        };
        if let Some(v) = auth_value {
            secrets.add_header(AUTHORIZATION.as_str(), &v);
            let mut v = HeaderValue::from_str(&v).map_err(|_| {
                Error::new(
                    ErrorKind::InvalidRequest,
                    "the API key from the environment is not a valid header value",
                )
            })?;
            v.set_sensitive(true);
            headers.insert(AUTHORIZATION, v);
        }
        for (k, v) in &config.headers {
            let name = HeaderName::from_bytes(k.trim().as_bytes()).map_err(|_| {
                Error::new(
                    ErrorKind::InvalidRequest,
                    format!("invalid header name {k:?}"),
                )
            })?;
            let mut value = HeaderValue::from_str(v.trim()).map_err(|_| {
                Error::new(
                    ErrorKind::InvalidRequest,
                    format!("invalid value for header {k:?}"),
                )
            })?;
            if bench_rundir::is_secret_name(k) {
                secrets.add_header(k, v);
            }
            if secrets.is_secret(v) {
                value.set_sensitive(true);
            }
            headers.append(name, value);
        }
        let endpoint_uris = crate::Endpoint::ALL
            .iter()
            .filter_map(|e| {
                let uri = format!("{path_prefix}{}", e.path()).parse::<Uri>().ok()?;
                Some((e.path(), uri))
            })
            .collect();
        Ok(Client {
            endpoint_uris,
            pool: Arc::new(Pool {
                idle: Mutex::new(Vec::new()),
                max_idle: config.max_idle_per_host,
                idle_timeout: config.pool_idle_timeout,
            }),
            connect_to,
            tls,
            scheme_authority,
            path_prefix,
            header_lines: HeaderLines(crate::h1::header_lines(&headers).into()),
            request_headers: headers,
            timeout: config.timeout,
            limits: config.limits,
            connect_timeout: config.connect_timeout,
            stats: Arc::new(ClientStats::default()),
            secrets,
        })
    }

    /// The base URL requests go to (`scheme://authority` plus any path prefix).
    pub fn base_url(&self) -> String {
        format!("{}{}", self.scheme_authority, self.path_prefix)
    }

    /// The size caps on this client's responses.
    pub fn limits(&self) -> Limits {
        self.limits
    }

    /// The values scrubbed from this client's errors: for callers that report parts of a
    /// response body themselves.
    pub fn secrets(&self) -> &Secrets {
        &self.secrets
    }

    /// Requests re-sent because their pooled connection was already closed.
    pub fn redials(&self) -> u64 {
        self.stats.redials.load(Ordering::Relaxed)
    }

    /// TCP connections opened so far.
    pub fn connections_opened(&self) -> u64 {
        self.stats.connections.load(Ordering::Relaxed)
    }

    fn path(&self, path: &str) -> Result<Uri, Error> {
        if let Some((_, uri)) = self.endpoint_uris.iter().find(|(p, _)| *p == path) {
            return Ok(uri.clone());
        }
        let s = format!("{}{}", self.path_prefix, path);
        s.parse::<Uri>()
            .map_err(|e| Error::new(ErrorKind::InvalidRequest, format!("bad path {s}: {e}")))
    }

    /// The request's head: its request line, the client's headers (replaced by `extra` of
    /// the same name) and the body's length.
    fn request_head(
        &self,
        method: &Method,
        uri: &Uri,
        body: &Segments,
        extra: &[(HeaderName, HeaderValue)],
    ) -> Vec<u8> {
        let target = uri.path_and_query().map_or("/", |p| p.as_str());
        let mut head = Vec::with_capacity(self.header_lines.0.len() + target.len() + 64);
        if extra.is_empty() {
            crate::h1::write_head(
                &mut head,
                method,
                target,
                &self.header_lines.0,
                None,
                body.len(),
            );
        } else {
            let mut h = self.request_headers.clone();
            for (k, v) in extra {
                h.insert(k, v.clone());
            }
            crate::h1::write_head(&mut head, method, target, &[], Some(&h), body.len());
        }
        head
    }

    /// Opens a new connection.
    async fn dial(&self) -> Result<Conn, Error> {
        let started = Instant::now();
        let stream =
            match tokio::time::timeout(self.connect_timeout, TcpStream::connect(&self.connect_to))
                .await
            {
                Ok(Ok(s)) => s,
                Ok(Err(e)) => {
                    return Err(Error::new(
                        ErrorKind::Connect,
                        format!("cannot connect to {}: {e}", self.connect_to),
                    )
                    .with_source(e));
                }
                Err(_) => {
                    return Err(Error::new(
                        ErrorKind::Timeout,
                        format!(
                            "connect to {} timed out after {:?}",
                            self.connect_to, self.connect_timeout
                        ),
                    ));
                }
            };
        let _ = stream.set_nodelay(true);
        let connect = started.elapsed();
        let (io, tls) = match &self.tls {
            None => (Transport::Plain(stream), None),
            Some(target) => {
                let t = Instant::now();
                let connector = tokio_rustls::TlsConnector::from(target.config.clone());
                let handshake = connector.connect(target.name.clone(), stream);
                match tokio::time::timeout(self.connect_timeout, handshake).await {
                    Ok(Ok(s)) => (Transport::Tls(Box::new(s)), Some(t.elapsed())),
                    Ok(Err(e)) => return Err(self.tls_error(&e, e.to_string())),
                    Err(_) => {
                        return Err(Error::new(
                            ErrorKind::Timeout,
                            format!(
                                "TLS handshake with {} timed out after {:?}",
                                self.connect_to, self.connect_timeout
                            ),
                        ));
                    }
                }
            }
        };
        self.stats.connections.fetch_add(1, Ordering::Relaxed);
        Ok(Conn {
            h1: H1::new(io),
            reused: false,
            opened: Some(Opened { connect, tls }),
        })
    }

    /// A handshake failure as one line: the host and a reason a user can act on.
    fn tls_error(&self, e: &std::io::Error, fallback: String) -> Error {
        let reason = crate::tls::find_rustls_error(e)
            .map(crate::tls::reason)
            .unwrap_or(fallback);
        Error::new(
            ErrorKind::Tls,
            format!("TLS handshake with {} failed: {reason}", self.connect_to),
        )
    }

    async fn checkout(&self) -> Result<Conn, Error> {
        match self.pool.take() {
            Some(c) => Ok(c),
            // Boxed: dialing (the connect and the TLS handshake) happens once per connection,
            // and inline it made every turn's request future that much larger, copied from one
            // await to the next on every turn.
            None => Box::pin(self.dial()).await,
        }
    }

    /// Hands a connection whose response was read to the end back to the pool (one that
    /// cannot carry another request is closed instead).
    fn checkin(&self, conn: Conn) {
        self.pool.put(conn);
    }

    /// Sends a request, redialing stale pooled connections; returns the response head and the
    /// connection it came on (its body is read from it; checked in once read).
    async fn send(
        &self,
        method: Method,
        path: &str,
        body: Segments,
        extra: &[(HeaderName, HeaderValue)],
    ) -> Result<(Head, Conn, Redials), Error> {
        let uri = self.path(path)?;
        let head = self.request_head(&method, &uri, &body, extra);
        let head_request = method == Method::HEAD;
        let mut redials = 0u32;
        let mut resent = 0u32;
        loop {
            let mut conn = self.checkout().await?;
            let (unsent, err, doing) = match conn.h1.write_request(&head, &body).await {
                Err((written, e)) => (!written, H1Error::Io(e), "sending the request"),
                Ok(()) => match conn.h1.read_head(head_request).await {
                    Ok(h) => return Ok((h, conn, Redials { redials, resent })),
                    Err(e) => (false, e, "reading the response head"),
                },
            };
            // A TLS 1.3 server refusing the client's certificate says why in an alert after
            // the handshake; the request's write may have run into the closed socket first.
            if self.tls.is_some()
                && conn.opened.is_some()
                && crate::tls::find_rustls_error(&err).is_none()
                && let Some(alert) = conn.h1.tls_alert(Duration::from_millis(250)).await
            {
                return Err(alert.into_error(doing).with_resent(resent));
            }
            // The redial rule (module docs): a reused connection, and the request never
            // written or not one byte of a response back.
            let stale = conn.reused && (unsent || !conn.h1.got_response());
            if redials < MAX_REDIALS && stale && crate::tls::find_rustls_error(&err).is_none() {
                redials += 1;
                resent += u32::from(!unsent);
                self.stats.redials.fetch_add(1, Ordering::Relaxed);
                tracing::debug!("pooled connection was closed by the server; redialing");
                continue;
            }
            return Err(err.into_error(doing).with_resent(resent));
        }
    }

    /// Sends a request and reads the whole body.
    pub async fn request(
        &self,
        method: Method,
        path: &str,
        body: Bytes,
        timeout: Option<Duration>,
    ) -> Result<SimpleResponse, Error> {
        self.request_with(method, path, &[], body, timeout).await
    }

    /// Sends a request with extra headers for this request only and reads the whole body.
    /// `headers` replace the client's headers of the same name (e.g. its default
    /// `content-type: application/json`, for a multipart body).
    pub async fn request_with(
        &self,
        method: Method,
        path: &str,
        headers: &[(HeaderName, HeaderValue)],
        body: Bytes,
        timeout: Option<Duration>,
    ) -> Result<SimpleResponse, Error> {
        let timeout = timeout.unwrap_or(self.timeout);
        let fut = async {
            let (head, mut conn, _) = self.send(method, path, body.into(), headers).await?;
            let max = self.limits.max_json_bytes;
            let mut buf = Vec::new();
            while let Some(d) = conn
                .h1
                .chunk()
                .await
                .map_err(|e| e.into_error("reading the response body"))?
            {
                if buf.len() + d.len() > max {
                    // Dropping the connection closes it: the rest is never read.
                    return Err(too_large(
                        &format!("the response to {path}"),
                        max as u64,
                        "--max-json-bytes",
                        "",
                    ));
                }
                buf.extend_from_slice(&d);
            }
            let body = Bytes::from(buf);
            self.checkin(conn);
            Ok(SimpleResponse {
                status: head.status,
                headers: head.headers,
                body,
            })
        };
        tokio::time::timeout(timeout, fut)
            .await
            .unwrap_or_else(|_| {
                Err(Error::new(
                    ErrorKind::Timeout,
                    format!("no complete response to {path} within {timeout:?}"),
                ))
            })
    }

    /// Sends a request and returns as soon as the response head arrives, with its body still
    /// to read ([`StreamingResponse::chunk`]): for a server-sent event stream that lasts as
    /// long as the caller wants. `head_timeout` bounds the wait for the head only (default: the
    /// client's timeout); the body has no deadline of its own. Dropping the response closes its
    /// connection (it never goes back to the pool).
    pub async fn request_streaming(
        &self,
        method: Method,
        path: &str,
        headers: &[(HeaderName, HeaderValue)],
        body: Bytes,
        head_timeout: Option<Duration>,
    ) -> Result<StreamingResponse, Error> {
        let timeout = head_timeout.unwrap_or(self.timeout);
        match tokio::time::timeout(timeout, self.send(method, path, body.into(), headers)).await {
            Ok(r) => {
                let (head, conn, _) = r?;
                Ok(StreamingResponse {
                    status: head.status,
                    headers: head.headers,
                    conn,
                    read: 0,
                    max: self.limits.max_response_bytes,
                })
            }
            Err(_) => Err(Error::new(
                ErrorKind::Timeout,
                format!("no response head for {path} within {timeout:?}"),
            )),
        }
    }

    /// `GET path`, whole body.
    pub async fn get(
        &self,
        path: &str,
        timeout: Option<Duration>,
    ) -> Result<SimpleResponse, Error> {
        self.request(Method::GET, path, Bytes::new(), timeout).await
    }

    /// Sends one chat turn and measures it. `POST {base}/v1/chat/completions`.
    pub async fn chat(
        &self,
        request: &ChatRequest,
        opts: &RequestOptions,
    ) -> Result<TurnOutcome, Error> {
        let body = request.to_body()?;
        self.chat_body(body, request.wants_stream(), opts).await
    }

    /// Streams a chat turn only until its first output chunk, then drops the response and
    /// its connection, as a user interrupting a generation would. Returns the time from sending
    /// to that chunk. `body` must ask for a stream.
    pub async fn chat_interrupt(
        &self,
        body: Bytes,
        opts: &RequestOptions,
    ) -> Result<Duration, Error> {
        let timeout = opts.timeout.unwrap_or(self.timeout);
        let sent = Instant::now();
        let fut = async {
            let (head, mut conn, _) = self
                .send(
                    Method::POST,
                    opts.endpoint.path(),
                    body.into(),
                    &opts.headers,
                )
                .await?;
            if !head.status.is_success() {
                return Err(Error::status_error(head.status, b""));
            }
            let mut consumer = ChatStreamConsumer::with_endpoint(sent, true, opts.endpoint)
                .with_limits(self.limits);
            while let Some(data) = conn
                .h1
                .chunk()
                .await
                .map_err(|e| e.into_error("reading the response stream"))?
            {
                let at = Instant::now();
                consumer.feed(&data, at)?;
                if consumer.chunks() > 0 {
                    // Dropping the connection closes the socket.
                    drop(conn);
                    return Ok(at.duration_since(sent));
                }
            }
            Err(Error::new(
                ErrorKind::Incomplete,
                "the stream ended before any output",
            ))
        };
        match tokio::time::timeout(timeout, fut).await {
            // A server may echo the key or a header in its error: never pass it on.
            Ok(r) => r.map_err(|e| e.scrub(&self.secrets)),
            Err(_) => Err(Error::new(
                ErrorKind::Timeout,
                format!("no output within {timeout:?}"),
            )),
        }
    }

    /// Sends a pre-serialized chat-completions body. `stream` says whether the body asks for a
    /// stream (a server that answers `application/json` anyway is handled too).
    pub async fn chat_body(
        &self,
        body: Bytes,
        stream: bool,
        opts: &RequestOptions,
    ) -> Result<TurnOutcome, Error> {
        self.chat_segments(body.into(), stream, opts).await
    }

    /// [`Client::chat_body`] with a body of pieces sent as they are (vectored writes): a long
    /// conversation held as shared pieces is never joined into one buffer.
    pub async fn chat_segments(
        &self,
        body: Segments,
        stream: bool,
        opts: &RequestOptions,
    ) -> Result<TurnOutcome, Error> {
        let timeout = opts.timeout.unwrap_or(self.timeout);
        let sent = Instant::now();
        let deadline = tokio::time::Instant::from_std(sent + timeout);
        let mut progress = Progress::default();
        let fut = self.chat_inner(body, stream, opts, sent, &mut progress);
        match tokio::time::timeout_at(deadline, fut).await {
            Ok(Ok(o)) => Ok(o),
            // A server may echo the key or a header in its error: never pass it on (only
            // errors pay for the scan).
            Ok(Err(e)) => Err(e.scrub(&self.secrets).with_resent(progress.resent)),
            Err(_) => Err(Error::new(
                ErrorKind::Timeout,
                format!(
                    "turn not finished within {timeout:?} ({} output chunks, {} body bytes received)",
                    progress.chunks, progress.bytes
                ),
            )
            .with_resent(progress.resent)),
        }
    }

    async fn chat_inner(
        &self,
        body: Segments,
        stream: bool,
        opts: &RequestOptions,
        sent: Instant,
        progress: &mut Progress,
    ) -> Result<TurnOutcome, Error> {
        let (parts, mut conn, redials) = self
            .send(Method::POST, opts.endpoint.path(), body, &opts.headers)
            .await?;
        progress.resent = redials.resent;
        if !parts.status.is_success() {
            // Read the error body (up to 64 KiB) so the connection stays usable; only its first
            // 200 bytes are reported.
            let mut buf = Vec::new();
            let mut complete = true;
            loop {
                match conn.h1.chunk().await {
                    Ok(Some(d)) => {
                        buf.extend_from_slice(&d);
                        if buf.len() >= 64 << 10 {
                            complete = false;
                            break;
                        }
                    }
                    Ok(None) => break,
                    Err(_) => {
                        complete = false;
                        break;
                    }
                }
            }
            if complete {
                self.checkin(conn);
            }
            let retry_after = parts
                .headers
                .get(http::header::RETRY_AFTER)
                .and_then(|v| v.to_str().ok())
                .and_then(|v| v.trim().parse::<u64>().ok())
                .map(Duration::from_secs);
            return Err(Error::status_error(parts.status, &buf).with_retry_after(retry_after));
        }
        // (Compared without case and without a lowercased copy: this runs every turn.)
        let content_type = parts.headers.get(CONTENT_TYPE).map(|v| v.as_bytes());
        let is_sse = content_type.map(|v| {
            v.get(..17)
                .is_some_and(|p| p.eq_ignore_ascii_case(b"text/event-stream"))
        });
        let is_json = content_type.map(|v| v.windows(4).any(|w| w.eq_ignore_ascii_case(b"json")));
        // Trust the content type when it is explicit; otherwise go by what was asked for.
        let streamed = match (is_sse, is_json) {
            (Some(true), _) => true,
            (_, Some(true)) => false,
            _ => stream,
        };
        let worker = opts.worker_header.as_ref().and_then(|h| {
            parts
                .headers
                .get(h)
                .and_then(|v| v.to_str().ok())
                .map(str::to_owned)
        });
        let mut consumer = ChatStreamConsumer::with_endpoint(sent, streamed, opts.endpoint)
            .with_limits(self.limits);
        // Whether the body ended as HTTP framing says (the connection can carry the next
        // request) or the connection went after a complete stream.
        let mut reusable = true;
        // Why a stream cut before its terminator ended (the connection's own words).
        let mut cut: Option<String> = None;
        loop {
            let frame = conn.h1.chunk().await;
            let at = Instant::now();
            let data = match frame {
                Ok(Some(data)) => data,
                Ok(None) => break,
                // A stream that ended with its API's terminator is complete however the
                // connection then goes: closed without a TLS close_notify, without the last
                // chunk of the chunked encoding, or reset (curl and Python's http.client accept
                // these too).
                Err(_) if consumer.is_done() => {
                    reusable = false;
                    break;
                }
                // A stream closed (not reset) before its terminator: `finish` names what is
                // missing (incomplete_stream).
                Err(e) if streamed && e.is_closed() => {
                    reusable = false;
                    let mut why = e.to_string();
                    let mut src = std::error::Error::source(&e);
                    while let Some(s) = src {
                        why = format!("{why}: {s}");
                        src = s.source();
                    }
                    cut = Some(why);
                    break;
                }
                Err(e) => {
                    let mut err = e.into_error("reading the response stream");
                    if progress.bytes > 0 {
                        err = Error::new(
                            err.kind(),
                            format!(
                                "{} after {} body bytes and {} output chunks",
                                err.detail(),
                                progress.bytes,
                                progress.chunks
                            ),
                        );
                    }
                    return Err(err);
                }
            };
            progress.bytes += data.len() as u64;
            consumer.feed(&data, at)?;
            progress.chunks = consumer.chunks();
        }
        let end = Instant::now();
        let opened = conn.opened;
        // The body was read to its end: the connection can carry the next request. (On any
        // error above it is dropped instead, which closes it.)
        if reusable {
            self.checkin(conn);
        } else {
            drop(conn);
        }
        let mut outcome = consumer.finish(end).map_err(|e| match &cut {
            Some(why) if e.kind() == ErrorKind::Incomplete => {
                Error::new(e.kind(), format!("{} ({why})", e.detail()))
            }
            _ => e,
        })?;
        outcome.redials = redials.redials;
        outcome.resent = redials.resent;
        outcome.connect = opened.map(|o| o.connect);
        outcome.tls = opened.and_then(|o| o.tls);
        outcome.worker = worker;
        Ok(outcome)
    }
}

/// How a request's sending went on stale pooled connections.
#[derive(Debug, Clone, Copy, Default)]
struct Redials {
    /// Times it was sent again on a new connection.
    redials: u32,
    /// Of those, the times the request had been written first (the server may have got it).
    resent: u32,
}

/// What a turn's response brought so far (for the detail of an error that cuts it).
#[derive(Debug, Default)]
struct Progress {
    chunks: usize,
    bytes: u64,
    resent: u32,
}

/// A parsed base URL.
#[derive(Debug, PartialEq, Eq)]
struct BaseUrl {
    https: bool,
    /// `host[:port]` as written (without the credentials).
    authority: String,
    /// `user` and `password` of a `user:password@` before the host, percent-decoded.
    credentials: Option<(String, String)>,
    /// A path prefix before our routes (`""` when none).
    path_prefix: String,
}

/// The host of `host[:port]` (IPv6 brackets removed), for SNI and certificate checks.
fn host_of(authority: &str) -> &str {
    if let Some(rest) = authority.strip_prefix('[') {
        return rest.split_once(']').map_or(rest, |(h, _)| h);
    }
    authority.rsplit_once(':').map_or(authority, |(h, _)| h)
}

fn parse_base_url(base: &str) -> Result<BaseUrl, Error> {
    // Messages name the URL with its password masked (no secret is known yet).
    let shown = bench_rundir::redact_url(base.trim());
    let shown = shown.as_ref();
    let base = base.trim();
    let uri: Uri = base.parse().map_err(|e| {
        Error::new(
            ErrorKind::InvalidRequest,
            format!("invalid base URL {shown:?}: {e}"),
        )
    })?;
    let https = match uri.scheme_str() {
        Some("http") => false,
        Some("https") => true,
        Some(other) => {
            return Err(Error::new(
                ErrorKind::InvalidRequest,
                format!(
                    "unsupported scheme {other}:// in base URL {shown:?}: use http:// or https://"
                ),
            ));
        }
        None => {
            return Err(Error::new(
                ErrorKind::InvalidRequest,
                format!("base URL {shown:?} needs a scheme, e.g. http://127.0.0.1:8000"),
            ));
        }
    };
    let Some(authority) = uri.authority() else {
        return Err(Error::new(
            ErrorKind::InvalidRequest,
            format!("base URL {shown:?} has no host"),
        ));
    };
    // A trailing `/v1` or `/v1/chat/completions` (agentic-bench's URLs) names our own routes.
    let path = uri.path().trim_end_matches('/');
    let path = path
        .strip_suffix("/v1/chat/completions")
        .or_else(|| path.strip_suffix("/v1"))
        .unwrap_or(path)
        .to_string();
    // `user:password@host`: the credentials go in an Authorization header, not the Host.
    let (credentials, authority) = match authority.as_str().rsplit_once('@') {
        Some((userinfo, host)) => {
            let (user, pass) = userinfo.split_once(':').unwrap_or((userinfo, ""));
            let decode = |s: &str| bench_rundir::secrets::percent_decode(s).unwrap_or(s.into());
            (Some((decode(user), decode(pass))), host.to_string())
        }
        None => (None, authority.to_string()),
    };
    Ok(BaseUrl {
        https,
        credentials,
        authority,
        path_prefix: path,
    })
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]
    use super::*;

    #[test]
    fn base_urls() {
        let b = |https: bool, a: &str, p: &str| BaseUrl {
            https,
            credentials: None,
            authority: a.into(),
            path_prefix: p.into(),
        };
        assert_eq!(
            parse_base_url("http://127.0.0.1:8000").unwrap(),
            b(false, "127.0.0.1:8000", "")
        );
        assert_eq!(
            parse_base_url("http://h:1/v1/").unwrap(),
            b(false, "h:1", "")
        );
        assert_eq!(
            parse_base_url("http://h:1/proxy/v1").unwrap(),
            b(false, "h:1", "/proxy")
        );
        assert_eq!(
            parse_base_url("http://h:1/proxy/v1/chat/completions").unwrap(),
            b(false, "h:1", "/proxy")
        );
        assert_eq!(
            parse_base_url("http://h:1/chat/completions").unwrap(),
            b(false, "h:1", "/chat/completions")
        );
        assert_eq!(
            parse_base_url("https://api.openai.com/v1").unwrap(),
            b(true, "api.openai.com", "")
        );
        let e = parse_base_url("ftp://h/").unwrap_err();
        assert_eq!(e.kind(), ErrorKind::InvalidRequest);
        assert!(e.to_string().contains("http:// or https://"), "{e}");
        assert!(parse_base_url("localhost:8000").is_err());
        assert_eq!(host_of("h:443"), "h");
        assert_eq!(host_of("h"), "h");
        assert_eq!(host_of("[::1]:8443"), "::1");
    }

    #[test]
    fn auth_rule() {
        assert_eq!(
            Auth::from_vars(Some("a".into()), Some("b".into())),
            Auth::Bearer("a".into())
        );
        assert_eq!(
            Auth::from_vars(Some(String::new()), Some("b".into())),
            Auth::Raw("b".into())
        );
        assert_eq!(Auth::from_vars(None, None), Auth::None);
        assert!(!format!("{:?}", Auth::Bearer("sk-secret".into())).contains("secret"));
    }
}
