//! The HTTP server: accept loop, routing, the generation pipeline shared by the four
//! generation endpoints (see `wire.rs`), and the other endpoints.

use std::convert::Infallible;
use std::net::SocketAddr;
use std::sync::Arc;
use std::sync::atomic::Ordering;
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use bytes::{Bytes, BytesMut};
use http::{HeaderValue, Method, Request, Response, StatusCode, header};
use http_body_util::{BodyExt, Limited};
use hyper::body::Incoming;
use hyper::server::conn::http1;
use hyper::service::service_fn;
use hyper_util::rt::TokioIo;
use rand::{Rng, SeedableRng};
use rand_chacha::ChaCha8Rng;
use serde::Serialize;
use time::OffsetDateTime;
use time::format_description::well_known::Rfc3339;
use tokio::net::TcpListener;
use tokio::sync::{Notify, mpsc, watch};
use tokio::task::{JoinHandle, JoinSet};
use tokio::time::Instant;

use crate::body::SimBody;
use crate::cache::Alloc;
use crate::config::{LatencyMode, SimConfig};
use crate::engine::{EngineEvent, Job, Shared, State, run_engine, wait_shutdown};
use crate::error::SimError;
use crate::faults::{self, ConnReset, FaultKind, FaultLine, FaultState, ResettableStream};
use crate::hold::{self, HeldQuery, Hold, Ticket};
use crate::metrics;
use crate::openai::{Usage, error_json};
use crate::reqlog::{LogLine, RequestLog};
use crate::store::Draft;
use crate::tokens::{Counted, TokenCounter, WORDS};
use crate::wire::{Answer, Api, ApiError, Output, Wire};

/// How long connections may take to finish their responses at shutdown before they are closed.
const SHUTDOWN_GRACE: Duration = Duration::from_secs(2);
/// Largest request body accepted.
const MAX_BODY_BYTES: usize = 64 << 20;
/// A streamed response sends a frame once this many bytes are ready (instant mode).
const FRAME_BYTES: usize = 32 << 10;

/// A snapshot of the simulator's counters and gauges (see [`SimServer::stats`]).
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize)]
#[non_exhaustive]
pub struct SimStats {
    /// Generation requests received on any of the four endpoints (including rejected ones).
    pub requests_total: u64,
    /// Requests running (admitted, generating).
    pub running: u64,
    /// Requests waiting for admission (`Model` mode only).
    pub waiting: u64,
    /// Prompt tokens of admitted requests.
    pub prompt_tokens_total: u64,
    /// Prompt tokens served from the prefix cache.
    pub cached_tokens_total: u64,
    /// Completion tokens generated (including those of aborted requests).
    pub completion_tokens_total: u64,
    /// Requests that finished normally (`stop` or `length`).
    pub finished_total: u64,
    /// Requests aborted (client gone or server shutting down).
    pub aborted_total: u64,
    /// Requests rejected with an error status.
    pub errors_total: u64,
    /// KV blocks held by running requests.
    pub kv_used_blocks: u64,
    /// KV blocks holding evictable cached prefixes.
    pub kv_cached_blocks: u64,
    /// KV blocks neither held nor cached.
    pub kv_free_blocks: u64,
    /// KV blocks in the pool.
    pub kv_total_blocks: u64,
    /// Cached blocks evicted to make room, since start.
    pub evicted_blocks_total: u64,
}

/// A running simulator; see the [crate docs](crate).
#[derive(Debug)]
pub struct SimServer {
    addr: SocketAddr,
    shared: Arc<Shared>,
    shutdown_tx: watch::Sender<bool>,
    accept: JoinHandle<()>,
    engine: Option<JoinHandle<()>>,
}

impl std::fmt::Debug for Shared {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Shared")
            .field("config", &self.config)
            .finish_non_exhaustive()
    }
}

impl SimServer {
    /// Binds `config.bind` and starts serving (and, in [`LatencyMode::Model`], the engine).
    ///
    /// Must be called within a tokio runtime with the time and I/O drivers enabled.
    pub async fn start(config: SimConfig) -> Result<SimServer, SimError> {
        if config.block_size == 0 {
            return Err(SimError::Config("block_size must be at least 1".to_owned()));
        }
        if config.max_model_len == 0 {
            return Err(SimError::Config(
                "max_model_len must be at least 1".to_owned(),
            ));
        }
        let worker_id = match &config.worker_id {
            Some(id) => Some(HeaderValue::from_str(id).map_err(|_| {
                SimError::Config(format!("worker id {id:?} is not a valid header value"))
            })?),
            None => None,
        };
        let acceptor = match &config.tls {
            Some(tls) => Some(tls.acceptor()?),
            None => None,
        };
        let counter = TokenCounter::load(config.tokenizer.as_deref())?;
        let log = match &config.request_log {
            Some(path) => Some(
                RequestLog::open(path).map_err(|source| SimError::RequestLog {
                    path: path.clone(),
                    source,
                })?,
            ),
            None => None,
        };
        config.faults.validate().map_err(SimError::Config)?;
        let faults = FaultState::new(&config.faults).map_err(|source| SimError::FaultLog {
            path: config.faults.log.clone().unwrap_or_default(),
            source,
        })?;
        let listener = listen(config.bind).map_err(|source| SimError::Bind {
            addr: config.bind,
            source,
        })?;
        let addr = listener.local_addr().map_err(|source| SimError::Bind {
            addr: config.bind,
            source,
        })?;
        let start_unix_s = unix_now_s();
        let models_json = Bytes::from(
            serde_json::json!({
                "object": "list",
                "data": [{
                    "id": config.model,
                    "object": "model",
                    "created": start_unix_s,
                    "owned_by": "bench-sim",
                    "root": config.model,
                    "max_model_len": config.max_model_len,
                    "token_counter": counter.describe(),
                }],
            })
            .to_string(),
        );
        let (shutdown_tx, shutdown_rx) = watch::channel(false);
        let config_hold = config.hold;
        let shared = Arc::new(Shared {
            state: std::sync::Mutex::new(State::new(&config)),
            config,
            start: Instant::now(),
            counter,
            log,
            worker_id,
            models_json,
            work: Notify::new(),
            idle: Notify::new(),
            next_request: std::sync::atomic::AtomicU64::new(0),
            shutdown: shutdown_rx,
            hold: Arc::new(Hold::new(config_hold)),
            faults,
        });
        let engine = matches!(shared.config.mode, LatencyMode::Model)
            .then(|| tokio::spawn(run_engine(Arc::clone(&shared))));
        if shared.config.gpu_metrics {
            // Integrates the GPU's energy as the load changes; ends with the server.
            let weak = Arc::downgrade(&shared);
            tokio::spawn(async move {
                let mut tick = tokio::time::interval(crate::gpu::TICK);
                loop {
                    tick.tick().await;
                    let Some(shared) = weak.upgrade() else { break };
                    if *shared.shutdown.borrow() {
                        break;
                    }
                    shared.lock().advance_gpu(std::time::Instant::now());
                }
            });
        }
        let accept = tokio::spawn(accept_loop(listener, Arc::clone(&shared), acceptor));
        tracing::debug!(%addr, "simulator listening");
        Ok(SimServer {
            addr,
            shared,
            shutdown_tx,
            accept,
            engine,
        })
    }

    /// The bound address.
    pub fn local_addr(&self) -> SocketAddr {
        self.addr
    }

    /// `http://IP:PORT` of the bound address (`https://` when serving TLS).
    pub fn base_url(&self) -> String {
        let scheme = if self.shared.config.tls.is_some() {
            "https"
        } else {
            "http"
        };
        format!("{scheme}://{}", self.addr)
    }

    /// The configuration the server runs with.
    pub fn config(&self) -> &SimConfig {
        &self.shared.config
    }

    /// A snapshot of counters and gauges.
    pub fn stats(&self) -> SimStats {
        let st = self.shared.lock();
        let g = st.gauges();
        let c = &st.counters;
        SimStats {
            requests_total: c.requests_total,
            running: g.running,
            waiting: g.waiting,
            prompt_tokens_total: c.prompt_tokens_total,
            cached_tokens_total: c.cached_tokens_total,
            completion_tokens_total: c.completion_tokens_total,
            finished_total: c.finished_stop + c.finished_length,
            aborted_total: c.aborted_total,
            errors_total: c.errors_total,
            kv_used_blocks: g.used_blocks,
            kv_cached_blocks: g.evictable_blocks,
            kv_free_blocks: g.free_blocks,
            kv_total_blocks: g.total_blocks,
            evicted_blocks_total: g.evicted_blocks_total,
        }
    }

    /// Turns hold mode on (as `POST /sim/hold` does): every generation request that arrives, or
    /// whose turn for a batch slot comes, from now on waits before its first output token until
    /// [`Self::release`].
    pub fn hold(&self) {
        self.shared.hold.hold();
    }

    /// Turns hold mode off and lets every held request go on (as `POST /sim/release` does);
    /// returns the number released.
    pub fn release(&self) -> usize {
        self.shared.hold.release()
    }

    /// The number of requests held now.
    pub fn held(&self) -> usize {
        self.shared.hold.held()
    }

    /// Stops accepting, ends in-flight streams (their requests count as aborted), closes every
    /// connection (idle keep-alive ones at once, busy ones after at most a short grace period),
    /// stops the engine and returns once every request-log line is written.
    pub async fn shutdown(self) {
        let _ = self.shutdown_tx.send(true);
        if let Some(engine) = self.engine {
            let _ = engine.await;
        }
        let _ = self.accept.await;
        let deadline = Instant::now() + SHUTDOWN_GRACE;
        loop {
            let idle = self.shared.idle.notified();
            tokio::pin!(idle);
            idle.as_mut().enable();
            if self.shared.lock().inflight == 0 {
                break;
            }
            if tokio::time::timeout_at(deadline, idle).await.is_err() {
                tracing::warn!("simulator shut down with requests still in flight");
                break;
            }
        }
    }
}

fn unix_now_s() -> u64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map_or(0, |d| d.as_secs())
}

/// Listens on `addr` with a deep accept queue (the kernel caps it at `net.core.somaxconn`):
/// thousands of clients connecting at once must not overflow it into SYN retries, which a
/// client would see as a one-second stall.
fn listen(addr: std::net::SocketAddr) -> std::io::Result<TcpListener> {
    let sock = if addr.is_ipv4() {
        tokio::net::TcpSocket::new_v4()?
    } else {
        tokio::net::TcpSocket::new_v6()?
    };
    sock.set_reuseaddr(true)?;
    sock.bind(addr)?;
    sock.listen(65_535)
}

async fn accept_loop(
    listener: TcpListener,
    shared: Arc<Shared>,
    tls: Option<tokio_rustls::TlsAcceptor>,
) {
    let mut shutdown = shared.shutdown.clone();
    let mut conns = JoinSet::new();
    loop {
        tokio::select! {
            accepted = listener.accept() => match accepted {
                Ok((stream, _)) => {
                    let _ = stream.set_nodelay(true);
                    let reset = Arc::new(ConnReset::default());
                    let stream = ResettableStream::new(stream, Arc::clone(&reset));
                    let shared = Arc::clone(&shared);
                    match &tls {
                        None => {
                            conns.spawn(serve_connection(stream, shared, reset));
                        }
                        Some(acceptor) => {
                            conns.spawn(serve_tls(acceptor.clone(), stream, shared, reset));
                        }
                    }
                }
                Err(e) => {
                    // E.g. too many open files: back off instead of spinning.
                    tracing::warn!(error = %e, "accept failed");
                    tokio::time::sleep(Duration::from_millis(10)).await;
                }
            },
            Some(_) = conns.join_next(), if !conns.is_empty() => {}
            () = wait_shutdown(&mut shutdown) => break,
        }
    }
    drop(listener);
    let drain = async { while conns.join_next().await.is_some() {} };
    if tokio::time::timeout(SHUTDOWN_GRACE, drain).await.is_err() {
        conns.abort_all();
        while conns.join_next().await.is_some() {}
    }
}

/// The TLS handshake (in the connection's own task, never the accept loop's), then HTTP.
async fn serve_tls(
    acceptor: tokio_rustls::TlsAcceptor,
    stream: ResettableStream,
    shared: Arc<Shared>,
    reset: Arc<ConnReset>,
) {
    match tokio::time::timeout(TLS_HANDSHAKE_TIMEOUT, acceptor.accept(stream)).await {
        Ok(Ok(tls)) => serve_connection(tls, shared, reset).await,
        Ok(Err(e)) => tracing::debug!(error = %e, "TLS handshake failed"),
        Err(_) => tracing::debug!("TLS handshake timed out"),
    }
}

/// A client that opens a connection and never completes the handshake is dropped after this.
const TLS_HANDSHAKE_TIMEOUT: Duration = Duration::from_secs(10);

/// Serves HTTP/1.1 on one connection until it ends, the server shuts down or a fault pulls
/// `reset`: then the connection (and the request in flight) is dropped at once, and the
/// [`ResettableStream`] under `stream` closes the socket with RST.
async fn serve_connection<S>(stream: S, shared: Arc<Shared>, reset: Arc<ConnReset>)
where
    S: tokio::io::AsyncRead + tokio::io::AsyncWrite + Unpin + Send + 'static,
{
    let mut shutdown = shared.shutdown.clone();
    let conn_reset = Arc::clone(&reset);
    let svc = service_fn(move |req| {
        let shared = Arc::clone(&shared);
        let reset = Arc::clone(&conn_reset);
        async move { Ok::<_, Infallible>(handle(shared, req, reset).await) }
    });
    let conn = http1::Builder::new()
        .keep_alive(true)
        .serve_connection(TokioIo::new(stream), svc);
    tokio::pin!(conn);
    tokio::select! {
        biased;
        () = reset.pulled() => return poll_once(conn).await,
        res = conn.as_mut() => {
            if let Err(e) = res {
                tracing::debug!(error = %e, "connection ended with an error");
            }
            return;
        }
        () = wait_shutdown(&mut shutdown) => {}
    }
    conn.as_mut().graceful_shutdown();
    tokio::select! {
        biased;
        () = reset.pulled() => poll_once(conn).await,
        _ = conn.as_mut() => {}
    }
}

/// Polls `f` once. Before a reset drops the connection: hyper writes out what it has taken
/// from the response body (a fault that resets after some bytes waits until hyper took them
/// all, and sends no more), so those bytes reach the client before the RST.
async fn poll_once<F: Future>(mut f: std::pin::Pin<&mut F>) {
    std::future::poll_fn(|cx| {
        let _ = f.as_mut().poll(cx);
        std::task::Poll::Ready(())
    })
    .await;
}

/// Every served path (other methods on them answer `405`, other paths `404`).
const ENDPOINTS: [&str; 13] = [
    "/v1/chat/completions",
    "/v1/completions",
    "/v1/responses",
    "/v1/messages",
    "/v1/models",
    "/health",
    "/metrics",
    "/flush_cache",
    "/reset_prefix_cache",
    "/sim/hold",
    "/sim/release",
    "/sim/held",
    "/sim/config",
];

/// The paths besides the generation endpoints that answer only `POST` (the others of
/// [`ENDPOINTS`] answer only `GET`).
const POST_PATHS: [&str; 4] = [
    "/flush_cache",
    "/reset_prefix_cache",
    "/sim/hold",
    "/sim/release",
];

async fn handle(
    shared: Arc<Shared>,
    req: Request<Incoming>,
    reset: Arc<ConnReset>,
) -> Response<SimBody> {
    let mut resp = match Api::from_path(req.uri().path()) {
        Some(api) if req.method() == Method::POST => {
            generate(Arc::clone(&shared), req, api, reset).await
        }
        _ if req.method() == Method::GET && req.uri().path() == "/sim/held" => {
            held(&shared, &req).await
        }
        _ => route(&shared, &req),
    };
    if let Some(id) = &shared.worker_id {
        resp.headers_mut().insert("x-worker-id", id.clone());
    }
    resp
}

/// Every request but a generation.
fn route(shared: &Shared, req: &Request<Incoming>) -> Response<SimBody> {
    match (req.method(), req.uri().path()) {
        (&Method::GET, "/v1/models") => respond(
            StatusCode::OK,
            "application/json",
            SimBody::full(shared.models_json.clone()),
        ),
        (&Method::GET, "/health") => respond(StatusCode::OK, "text/plain", SimBody::empty()),
        (&Method::GET, "/metrics") if !shared.config.metrics => respond(
            StatusCode::NOT_FOUND,
            "application/json",
            SimBody::full(r#"{"detail":"Not Found"}"#),
        ),
        (&Method::GET, "/metrics") => {
            let mut text = {
                let mut st = shared.lock();
                let mut text = metrics::render(
                    shared.config.flavor,
                    &shared.config.model,
                    &st.counters,
                    &st.gauges(),
                );
                st.advance_gpu(std::time::Instant::now());
                if let Some(g) = &st.gpu {
                    g.render(&mut text);
                }
                text
            };
            if let Some(f) = &shared.faults {
                metrics::render_faults(&mut text, &shared.config.model, &f.counts());
            }
            respond(
                StatusCode::OK,
                "text/plain; version=0.0.4; charset=utf-8",
                SimBody::full(text),
            )
        }
        (&Method::POST, "/flush_cache" | "/reset_prefix_cache") => {
            let n = shared.lock().blocks.flush();
            tracing::debug!(blocks = n, "prefix cache flushed");
            respond(
                StatusCode::OK,
                "text/plain",
                SimBody::full("Cache flushed.\n"),
            )
        }
        (&Method::POST, "/sim/hold") => {
            let held = shared.hold.hold();
            json_ok(serde_json::json!({"hold": true, "held": held}))
        }
        (&Method::POST, "/sim/release") => {
            let released = shared.hold.release();
            json_ok(serde_json::json!({"hold": false, "released": released}))
        }
        (&Method::GET, "/sim/config") => match serde_json::to_value(&shared.config) {
            Ok(body) => json_ok(body),
            Err(e) => error_response(
                StatusCode::INTERNAL_SERVER_ERROR,
                "InternalServerError",
                &format!("cannot serialize the configuration: {e}"),
            ),
        },
        (_, path) if ENDPOINTS.contains(&path) => {
            let status = StatusCode::METHOD_NOT_ALLOWED;
            let message = format!("method {} not allowed on {path}", req.method());
            let api = Api::from_path(path);
            let mut r = match api {
                Some(api) => api_error_response(api, &ApiError::new(status, message)),
                None => error_response(status, "MethodNotAllowed", &message),
            };
            let post = api.is_some() || POST_PATHS.contains(&path);
            let allow = if post { "POST" } else { "GET" };
            r.headers_mut()
                .insert(header::ALLOW, HeaderValue::from_static(allow));
            r
        }
        (_, path) => error_response(
            StatusCode::NOT_FOUND,
            "NotFoundError",
            &format!("no route for {path}"),
        ),
    }
}

/// `GET /sim/held`: long-polls until the number held satisfies the query's bounds.
async fn held(shared: &Shared, req: &Request<Incoming>) -> Response<SimBody> {
    let q = match HeldQuery::parse(req.uri().query()) {
        Ok(q) => q,
        Err(e) => return error_response(StatusCode::BAD_REQUEST, "BadRequestError", &e),
    };
    let (status, body) = shared.hold.wait(&q, shared.shutdown.clone()).await;
    respond(status, "application/json", SimBody::full(body))
}

fn json_ok(body: serde_json::Value) -> Response<SimBody> {
    respond(
        StatusCode::OK,
        "application/json",
        SimBody::full(body.to_string()),
    )
}

fn respond(status: StatusCode, content_type: &'static str, body: SimBody) -> Response<SimBody> {
    let mut r = Response::new(body);
    *r.status_mut() = status;
    r.headers_mut()
        .insert(header::CONTENT_TYPE, HeaderValue::from_static(content_type));
    r
}

fn error_response(status: StatusCode, kind: &str, message: &str) -> Response<SimBody> {
    respond(
        status,
        "application/json",
        SimBody::full(error_json(status.as_u16(), kind, message)),
    )
}

/// An error in `api`'s own shape.
fn api_error_response(api: Api, e: &ApiError) -> Response<SimBody> {
    respond(
        e.status,
        "application/json",
        SimBody::full(api.error_body(e)),
    )
}

/// Tracks one generation request from parsing to its log line; dropping it without [`Self::finish`]
/// set records the request as aborted. Also releases the blocks of `Fixed`/`Instant` requests.
struct RequestGuard {
    shared: Arc<Shared>,
    recv: Instant,
    recv_utc: OffsetDateTime,
    session: Option<String>,
    /// The endpoint's path, for the request log.
    endpoint: &'static str,
    stream: bool,
    turn_index: u32,
    usage: Usage,
    status: u16,
    /// `stop`/`length` when completed, `error` when rejected, `None` while running (aborted).
    finish: Option<&'static str>,
    /// Blocks held outside the engine (`Fixed`/`Instant` modes).
    alloc: Option<Alloc>,
    /// Receipt → first token (`None` until one is made).
    first_token_after: Option<Duration>,
    /// Time spent held by `/sim/hold` so far (`None`: never held).
    held: Option<Duration>,
    /// Start of the hold the request is in now.
    held_since: Option<Instant>,
    /// The fault injected, once it is.
    fault: Option<FaultKind>,
    /// The answer's reasoning and text, for the request log (`SimConfig::log_text`).
    answer: Option<(String, String)>,
}

impl RequestGuard {
    fn new(shared: Arc<Shared>, recv: Instant, session: Option<String>, api: Api) -> Self {
        {
            let mut st = shared.lock();
            st.inflight += 1;
            st.counters.requests_total += 1;
        }
        Self {
            shared,
            recv,
            recv_utc: OffsetDateTime::now_utc(),
            session,
            endpoint: api.path(),
            stream: false,
            turn_index: 0,
            usage: Usage::default(),
            status: 200,
            finish: None,
            alloc: None,
            first_token_after: None,
            held: None,
            held_since: None,
            fault: None,
            answer: None,
        }
    }

    /// Records that `kind` is being injected into this request: its fault-log line now, its
    /// request-log line's `fault` when the request ends.
    fn inject(&mut self, kind: FaultKind) {
        self.fault = Some(kind);
        if let Some(f) = &self.shared.faults {
            let utc = OffsetDateTime::now_utc()
                .format(&Rfc3339)
                .unwrap_or_default();
            f.injected(&FaultLine {
                utc: &utc,
                ms: hold::round_ms(Instant::now().saturating_duration_since(self.shared.start)),
                fault: kind,
                session: self.session.as_deref(),
                turn_index: self.turn_index,
                endpoint: self.endpoint,
                stream: self.stream,
            });
        }
    }

    /// Adds the hold the request is in (if any) to its held time.
    fn end_hold(&mut self) {
        if let Some(since) = self.held_since.take() {
            let d = since.elapsed();
            self.held = Some(self.held.map_or(d, |h| h + d));
        }
    }

    /// Refuses the request with `e`, in `api`'s error shape.
    fn reject(mut self, api: Api, e: &ApiError) -> Response<SimBody> {
        self.status = e.status.as_u16();
        self.finish = Some("error");
        api_error_response(api, e)
    }

    fn first_token(&mut self) {
        if self.first_token_after.is_none() {
            let ttft = self.recv.elapsed();
            self.first_token_after = Some(ttft);
            self.shared
                .lock()
                .counters
                .ttft_s
                .observe(ttft.as_secs_f64());
        }
    }
}

impl Drop for RequestGuard {
    fn drop(&mut self) {
        self.end_hold();
        let e2e_s = self.recv.elapsed().as_secs_f64();
        let finish = self.finish.unwrap_or("aborted");
        {
            let mut st = self.shared.lock();
            if let Some(alloc) = self.alloc.take() {
                st.blocks.release(alloc);
                st.direct_running = st.direct_running.saturating_sub(1);
            }
            let c = &mut st.counters;
            c.completion_tokens_total += u64::from(self.usage.completion_tokens);
            match finish {
                "stop" => c.finished_stop += 1,
                "length" => c.finished_length += 1,
                "error" => c.errors_total += 1,
                _ => c.aborted_total += 1,
            }
            if matches!(finish, "stop" | "length") {
                c.e2e_s.observe(e2e_s);
            }
        }
        if let Some(log) = &self.shared.log {
            let recv_utc = self.recv_utc.format(&Rfc3339).unwrap_or_default();
            log.write(&LogLine {
                recv_utc: &recv_utc,
                recv_ms: hold::round_ms(self.recv.saturating_duration_since(self.shared.start)),
                end_ms: hold::round_ms(Instant::now().saturating_duration_since(self.shared.start)),
                endpoint: self.endpoint,
                session: self.session.as_deref(),
                turn_index: self.turn_index,
                prompt_tokens: self.usage.prompt_tokens,
                cached_tokens: self.usage.cached_tokens,
                completion_tokens: self.usage.completion_tokens,
                ttft_ms: self.first_token_after.map(hold::round_ms),
                status: self.status,
                stream: self.stream,
                finish,
                held_ms: self.held.map(hold::round_ms),
                fault: self.fault,
                reasoning: self.answer.as_ref().map(|(r, _)| r.as_str()),
                text: self.answer.as_ref().map(|(_, t)| t.as_str()),
            });
        }
        let mut st = self.shared.lock();
        st.inflight = st.inflight.saturating_sub(1);
        if st.inflight == 0 {
            self.shared.idle.notify_waiters();
        }
    }
}

/// How a request's tokens start: held first, or at once.
enum Begin {
    /// Held by `/sim/hold`: its source starts when it is released.
    Held(Ticket, Start),
    /// Its source has started.
    Ready(Source),
}

/// What a request's token source is made from (see [`Generator::start`]).
struct Start {
    keys: Vec<u64>,
    prompt_tokens: u32,
    need_blocks: u64,
}

/// Where a request's tokens come from.
enum Source {
    /// The step loop.
    Engine(mpsc::UnboundedReceiver<EngineEvent>),
    /// Own timer: token `i` (0-based) is due at `first_at + i × itl`.
    Fixed { first_at: Instant, itl: Duration },
    /// All at once.
    Instant,
}

/// The pipeline of every generation endpoint: parse (per API), render and count the prompt, key
/// its prefix blocks, check the context, pick the output length, admit, then produce the tokens
/// on the mode's schedule and write them in the API's shape.
async fn generate(
    shared: Arc<Shared>,
    req: Request<Incoming>,
    api: Api,
    reset: Arc<ConnReset>,
) -> Response<SimBody> {
    let recv = Instant::now();
    let cfg = &shared.config;
    let session = req
        .headers()
        .get(cfg.session_header.as_str())
        .and_then(|v| v.to_str().ok())
        .map(str::to_owned);
    let body = Limited::new(req.into_body(), MAX_BODY_BYTES)
        .collect()
        .await;
    let mut guard = RequestGuard::new(Arc::clone(&shared), recv, session, api);
    let body = match body {
        Ok(b) => b.to_bytes(),
        Err(e) => {
            let e = ApiError::bad_request(format!("cannot read request body: {e}"));
            return guard.reject(api, &e);
        }
    };
    let parsed = match api.parse(&body, |id| shared.lock().responses.get(id)) {
        Ok(p) => p,
        Err(r) => {
            guard.stream = r.stream;
            guard.turn_index = r.turn_index;
            return guard.reject(api, &r.error);
        }
    };
    drop(body);
    guard.stream = parsed.stream;
    guard.turn_index = parsed.turn_index;
    let text = parsed.prompt;
    let counted = if shared.counter.is_tokenizer() {
        let sh = Arc::clone(&shared);
        let bs = cfg.block_size;
        tokio::task::spawn_blocking(move || sh.counter.count(&text, bs))
            .await
            .unwrap_or_else(|e| Err(e.to_string()))
    } else {
        shared.counter.count(&text, cfg.block_size)
    };
    let Counted {
        tokens: prompt_tokens,
        keys,
    } = match counted {
        Ok(c) => c,
        Err(e) => {
            let e = ApiError::bad_request(format!("cannot tokenize prompt: {e}"));
            return guard.reject(api, &e);
        }
    };
    guard.usage.prompt_tokens = prompt_tokens;
    let room = cfg.max_model_len.saturating_sub(prompt_tokens);
    let limit = if cfg.ignore_max_completion_tokens {
        parsed.max_tokens_only
    } else {
        parsed.max_out
    };
    let max_out = limit.unwrap_or_else(|| cfg.default_max_tokens.min(room).max(1));
    let requested = u64::from(prompt_tokens) + u64::from(max_out);
    if requested > u64::from(cfg.max_model_len) {
        let e = ApiError::bad_request(format!(
            "This model's maximum context length is {} tokens. However, you requested \
             {requested} tokens ({prompt_tokens} in the {}, {max_out} in the \
             completion). Please reduce the length of the {} or completion.",
            cfg.max_model_len,
            api.prompt_noun(),
            api.prompt_noun(),
        ));
        return guard.reject(api, &e);
    }

    // Every request the simulator would serve draws its fault here; those answered without
    // generating (errors, a reset before the head) end here.
    let fault = shared.faults.as_ref().and_then(|f| {
        let (kind, h) = f.decide(guard.session.as_deref(), parsed.turn_index)?;
        faults::applies(kind, api, parsed.stream, parsed.include_usage).then_some((f, kind, h))
    });
    let fault = match fault {
        None => None,
        Some((f, kind, h)) => {
            let model = parsed.model.as_deref().unwrap_or(&cfg.model);
            match apply_early_fault(&mut guard, api, model, f, kind, h, &reset).await {
                Some(response) => return response,
                None => Some(kind),
            }
        }
    };

    let req_no = shared.next_request.fetch_add(1, Ordering::Relaxed);
    let mut rng = ChaCha8Rng::seed_from_u64(cfg.seed ^ req_no);
    let (out_len, finish) = if parsed.ignore_eos {
        (max_out, "length")
    } else {
        let stop_at = rng.random_range(1..=max_out);
        if stop_at < max_out {
            (stop_at, "stop")
        } else {
            (max_out, "length")
        }
    };
    let id_hex = format!("{:016x}{:016x}", rng.random::<u64>(), rng.random::<u64>());
    let start = Start {
        keys,
        prompt_tokens,
        need_blocks: requested.div_ceil(u64::from(cfg.block_size)),
    };
    let model = parsed.model.as_deref().unwrap_or(&cfg.model);
    let stream = parsed.stream;
    let reasoning_len = if api.has_reasoning_shape() {
        cfg.reasoning_tokens.min(out_len)
    } else {
        0
    };
    let wire = api.wire(&Answer {
        id_hex: &id_hex,
        created: unix_now_s(),
        model,
        flavor: cfg.flavor,
        reasoning: reasoning_len > 0,
        answer: out_len > reasoning_len,
        include_usage: parsed.include_usage,
        omit_usage: fault == Some(FaultKind::TruncatedUsage),
        omit_terminal: fault == Some(FaultKind::NoDone),
    });
    let store = parsed
        .store
        .and_then(|d| wire.response_id().map(|id| (id.to_owned(), d)));
    let mut generator = Generator {
        collect: !stream || wire.collects_text() || cfg.log_text,
        wire,
        guard,
        rng,
        out_len,
        reasoning_len,
        finish,
        sse: stream,
        buf: BytesMut::new(),
        reasoning_text: String::new(),
        text: String::new(),
        tx: None,
        shutdown: shared.shutdown.clone(),
        store,
        fault,
        conn: reset,
        act_after: 0,
        action_due: false,
        malformed_at: None,
        pending_log: None,
    };
    if stream {
        match fault {
            Some(FaultKind::Stall) => generator.act_after = 1,
            Some(FaultKind::ResetMidStream) => generator.act_after = (out_len / 2).max(1),
            Some(FaultKind::MalformedChunk) => generator.malformed_at = Some(out_len / 2),
            _ => {}
        }
    }
    // The hold is decided here, after every check (a request that is refused is never held)
    // and before the request takes a batch slot, KV blocks or a timer.
    let begin = match generator.enter_hold() {
        Some(ticket) => Begin::Held(ticket, start),
        None => Begin::Ready(generator.start(start, recv)),
    };
    if stream {
        generator.buf.reserve(FRAME_BYTES + 1024);
        if matches!(begin, Begin::Ready(Source::Instant)) && generator.fill(FRAME_BYTES) {
            // The whole answer fits in one frame: send it with the head, without a task or a
            // channel (one write instead of two; the simulator's cheapest path).
            generator.complete();
            if let Some(kind) = generator.pending_log.take() {
                generator.guard.inject(kind);
            }
            let body = generator.buf.split().freeze();
            let mut r = respond(
                StatusCode::OK,
                "text/event-stream",
                SimBody::Once(Some(body)),
            );
            r.headers_mut()
                .insert(header::CACHE_CONTROL, HeaderValue::from_static("no-cache"));
            return r;
        }
        let (tx, rx) = mpsc::channel(8);
        generator.tx = Some(tx);
        tokio::spawn(async move {
            generator.run(begin).await;
        });
        let mut r = respond(StatusCode::OK, "text/event-stream", SimBody::Channel(rx));
        r.headers_mut()
            .insert(header::CACHE_CONTROL, HeaderValue::from_static("no-cache"));
        r
    } else {
        if !generator.run(begin).await {
            let e = ApiError::new(StatusCode::SERVICE_UNAVAILABLE, "the request was aborted");
            generator.guard.status = e.status.as_u16();
            return api_error_response(api, &e);
        }
        let out = Output {
            reasoning: &generator.reasoning_text,
            text: &generator.text,
        };
        let mut body = generator.wire.body(generator.guard.usage, finish, out);
        match fault {
            Some(FaultKind::ResetMidStream) => return generator.reset_mid_body(body),
            Some(kind @ FaultKind::MalformedChunk) => {
                generator.guard.inject(kind);
                let half = faults::first_half(&body).len();
                body.truncate(half);
            }
            Some(kind @ FaultKind::TruncatedUsage) => generator.guard.inject(kind),
            _ => {}
        }
        respond(StatusCode::OK, "application/json", SimBody::full(body))
    }
}

/// The faults that act before generation: an error reply, a reset before the head (both
/// returned as the response, which for the reset is never sent) or a delay (`slow-headers`,
/// and `stall` on a request that is not streamed: its head waits); `None` to go on.
async fn apply_early_fault(
    guard: &mut RequestGuard,
    api: Api,
    model: &str,
    f: &FaultState,
    kind: FaultKind,
    h: u64,
    reset: &ConnReset,
) -> Option<Response<SimBody>> {
    let delay = match kind {
        FaultKind::RateLimited | FaultKind::Unavailable | FaultKind::InternalError => {
            let (status, retry_after, body) =
                faults::error_reply(kind, api, model, f.cfg.retry_after_s, h);
            guard.inject(kind);
            guard.status = status.as_u16();
            guard.finish = Some("error");
            let mut r = respond(status, "application/json", SimBody::full(body));
            if let Some(s) = retry_after {
                r.headers_mut()
                    .insert(header::RETRY_AFTER, HeaderValue::from(s));
            }
            return Some(r);
        }
        FaultKind::ResetBeforeHeaders => {
            guard.status = 0;
            guard.inject(kind);
            reset.pull();
            // The connection's task drops the connection, and this request with it (its guard
            // writes the log line), as soon as it sees the pull.
            return Some(std::future::pending().await);
        }
        FaultKind::SlowHeaders => f.cfg.slow_headers,
        FaultKind::Stall if !guard.stream => f.cfg.stall,
        _ => return None,
    };
    guard.inject(kind);
    let mut shutdown = guard.shared.shutdown.clone();
    tokio::select! {
        () = tokio::time::sleep(delay) => {}
        () = wait_shutdown(&mut shutdown) => {}
    }
    None
}

/// Produces one request's tokens and writes them as SSE events (or collects the text).
struct Generator {
    wire: Wire,
    guard: RequestGuard,
    rng: ChaCha8Rng,
    out_len: u32,
    /// Leading output tokens that are reasoning: `min(reasoning_tokens, out_len)`, or 0 where
    /// the API has no reasoning shape.
    reasoning_len: u32,
    finish: &'static str,
    /// Streaming: tokens become SSE events in `buf`.
    sse: bool,
    /// The produced text is collected (non-streaming, or a format whose closing events repeat
    /// it).
    collect: bool,
    /// Pending SSE bytes (streaming).
    buf: BytesMut,
    /// Collected reasoning text.
    reasoning_text: String,
    /// Collected answer text.
    text: String,
    /// Body channel (streaming).
    tx: Option<mpsc::Sender<Bytes>>,
    shutdown: watch::Receiver<bool>,
    /// Responses API: the id and draft to remember once the answer is complete.
    store: Option<(String, Draft)>,
    /// The fault drawn for the request (applied in the stream: `stall`, `reset-mid-stream`,
    /// `malformed-chunk`; the others act elsewhere).
    fault: Option<FaultKind>,
    /// The request's connection (`reset-mid-stream` resets it).
    conn: Arc<ConnReset>,
    /// Streaming: the fault's action (stall, reset) comes once this many tokens are produced
    /// and sent (0: never).
    act_after: u32,
    /// The action is due at the next flush.
    action_due: bool,
    /// Streaming, `malformed-chunk`: the 0-based token whose event is preceded by a copy cut
    /// in half.
    malformed_at: Option<u32>,
    /// A fault written into `buf`, logged once the bytes are handed to the connection.
    pending_log: Option<FaultKind>,
}

impl Generator {
    fn done(&self) -> bool {
        self.guard.usage.completion_tokens >= self.out_len
    }

    fn token(&mut self) {
        let n = self.guard.usage.completion_tokens;
        if n == 0 {
            self.guard.first_token();
            if self.sse {
                self.wire.begin(&mut self.buf, self.guard.usage);
            }
        }
        let word = WORDS[self.rng.random_range(0..WORDS.len())];
        self.guard.usage.completion_tokens += 1;
        let reasoning = n < self.reasoning_len;
        if reasoning {
            self.guard.usage.reasoning_tokens += 1;
        }
        if self.sse {
            if n == self.reasoning_len && n > 0 {
                self.wire.answer_begins(&mut self.buf, &self.reasoning_text);
            }
            let fin = self.done().then_some(self.finish);
            if self.malformed_at == Some(n) {
                let start = self.buf.len();
                self.wire.token(&mut self.buf, word, reasoning, fin);
                let event = self.buf.split_off(start);
                self.buf.extend_from_slice(&faults::malformed_event(&event));
                self.buf.extend_from_slice(&event);
                self.pending_log = Some(FaultKind::MalformedChunk);
            } else {
                self.wire.token(&mut self.buf, word, reasoning, fin);
            }
            if self.act_after == n + 1 {
                self.action_due = true;
            }
        }
        if self.collect {
            if reasoning {
                self.reasoning_text.push_str(word);
            } else {
                self.text.push_str(word);
            }
        }
    }

    /// One engine event; a job handed back to be held is returned.
    fn on_event(&mut self, ev: EngineEvent) -> Option<Box<Job>> {
        match ev {
            EngineEvent::First { cached_tokens } => {
                self.guard.usage.cached_tokens = cached_tokens;
                self.token();
            }
            EngineEvent::Token => self.token(),
            EngineEvent::Held(job) => return Some(job),
        }
        None
    }

    /// Starts the request's token source: queues it for the engine (`Model`) or takes its KV
    /// blocks and sets its first token `ttft` after `from` (`Fixed`) or at once (`Instant`).
    fn start(&mut self, start: Start, from: Instant) -> Source {
        let shared = Arc::clone(&self.guard.shared);
        let cfg = &shared.config;
        match cfg.mode {
            LatencyMode::Model => {
                let (events, rx) = mpsc::unbounded_channel();
                shared.lock().waiting.push_back(Job {
                    keys: start.keys,
                    prompt_tokens: start.prompt_tokens,
                    need_blocks: start.need_blocks,
                    out_len: self.out_len,
                    events,
                });
                shared.work.notify_one();
                Source::Engine(rx)
            }
            mode => {
                let mut st = shared.lock();
                let admitted = st.admit(&start.keys, start.prompt_tokens, start.need_blocks, true);
                if let Some((alloc, cached)) = admitted {
                    self.guard.alloc = Some(alloc);
                    self.guard.usage.cached_tokens = cached;
                    st.direct_running += 1;
                }
                match mode {
                    LatencyMode::Fixed { ttft, itl } => Source::Fixed {
                        first_at: from + ttft.mul_f64(cfg.scale()),
                        itl: itl.mul_f64(cfg.scale()),
                    },
                    _ => Source::Instant,
                }
            }
        }
    }

    /// Holds the request if hold mode is on.
    fn enter_hold(&mut self) -> Option<Ticket> {
        let g = &mut self.guard;
        let ticket = g.shared.hold.enter(g.endpoint, g.session.as_deref())?;
        g.held_since = Some(ticket.since);
        Some(ticket)
    }

    /// Waits for the release of a held request; `false` when it was aborted meanwhile (client
    /// gone, server shutting down). A streamed request writes an SSE comment every
    /// [`hold::HEARTBEAT`] meanwhile, so that a client that went away is noticed even when hyper
    /// is not reading the socket (it may only see a closed socket when it writes to it).
    async fn wait_held(&mut self, ticket: Ticket) -> bool {
        let mut shutdown = self.shutdown.clone();
        let tx = self.tx.clone();
        let first_beat = Instant::now() + hold::HEARTBEAT;
        let mut beat = tokio::time::interval_at(first_beat, hold::HEARTBEAT);
        beat.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
        let ok = {
            let released = ticket.released();
            tokio::pin!(released);
            loop {
                tokio::select! {
                    biased;
                    r = &mut released => break r,
                    () = wait_shutdown(&mut shutdown) => break false,
                    () = closed(tx.as_ref()) => break false,
                    _ = beat.tick(), if tx.is_some() => {
                        let comment = Bytes::from_static(hold::HEARTBEAT_COMMENT);
                        if let Some(Err(mpsc::error::TrySendError::Closed(_))) =
                            tx.as_ref().map(|tx| tx.try_send(comment))
                        {
                            break false;
                        }
                    }
                }
            }
        };
        self.guard.end_hold();
        drop(ticket);
        ok
    }

    /// A job the engine handed back because hold mode is on: held until released (unless the
    /// hold ended meanwhile), then queued again.
    async fn hold_again(&mut self, job: Job) -> bool {
        if let Some(ticket) = self.enter_hold() {
            if !self.wait_held(ticket).await {
                return false;
            }
        }
        let shared = &self.guard.shared;
        shared.lock().waiting.push_back(job);
        shared.work.notify_one();
        true
    }

    /// Produces tokens at once until done (`true`) or `limit` bytes are pending or a fault's
    /// action is due (`false`).
    fn fill(&mut self, limit: usize) -> bool {
        while !self.done() {
            if self.buf.len() >= limit || self.action_due {
                return false;
            }
            self.token();
        }
        !self.action_due
    }

    /// After the last token: the closing events (streaming) and, for the Responses API, the
    /// stored response (before the client can read the terminal event). The request counts as
    /// finished from here, even if the last write then fails.
    fn complete(&mut self) {
        if self.sse {
            let out = Output {
                reasoning: &self.reasoning_text,
                text: &self.text,
            };
            self.wire
                .end(&mut self.buf, self.guard.usage, self.finish, out);
        }
        self.guard.finish = Some(self.finish);
        if self.guard.shared.config.log_text {
            self.guard.answer = Some((self.reasoning_text.clone(), self.text.clone()));
        }
        if self.sse {
            self.pending_log = self.pending_log.or(match self.fault {
                Some(k @ (FaultKind::NoDone | FaultKind::TruncatedUsage)) => Some(k),
                _ => None,
            });
        }
        if let Some((id, draft)) = self.store.take() {
            let stored = Arc::new(draft.finish(&self.text));
            let forgotten = self.guard.shared.lock().responses.insert(id, stored);
            // Freed outside the lock.
            drop(forgotten);
        }
    }

    /// Sends the pending bytes as one frame, then acts out a fault that is due; `false` when
    /// the client or the server is gone, or the fault ended the request.
    async fn flush(&mut self) -> bool {
        let Some(tx) = &self.tx else {
            return true;
        };
        if !self.buf.is_empty() {
            let frame = self.buf.split().freeze();
            let sent = tokio::select! {
                sent = tx.send(frame) => sent.is_ok(),
                () = wait_shutdown(&mut self.shutdown) => false,
            };
            if !sent {
                return false;
            }
        }
        if let Some(kind) = self.pending_log.take() {
            self.guard.inject(kind);
        }
        if self.action_due {
            self.action_due = false;
            return self.act().await;
        }
        true
    }

    /// A streamed request's fault action, after the bytes before it were sent: `stall` waits
    /// (`false` if the client or the server goes meanwhile), `reset-mid-stream` resets the
    /// connection once the bytes sent are written (`false`: the request ends there).
    async fn act(&mut self) -> bool {
        let tx = self.tx.clone();
        let mut shutdown = self.shutdown.clone();
        match self.fault {
            Some(kind @ FaultKind::Stall) => {
                let stall = self
                    .guard
                    .shared
                    .faults
                    .as_ref()
                    .map_or(Duration::ZERO, |f| f.cfg.stall);
                self.guard.inject(kind);
                tokio::select! {
                    () = tokio::time::sleep(stall) => true,
                    () = closed(tx.as_ref()) => false,
                    () = wait_shutdown(&mut shutdown) => false,
                }
            }
            Some(kind @ FaultKind::ResetMidStream) => {
                if let Some(tx) = &tx {
                    // Every slot free: hyper took every frame sent.
                    let drained = tokio::select! {
                        r = tx.reserve_many(tx.max_capacity()) => r.is_ok(),
                        () = wait_shutdown(&mut shutdown) => false,
                    };
                    if !drained {
                        return false;
                    }
                }
                self.guard.inject(kind);
                self.conn.pull();
                hold_until_reset(tx.as_ref()).await;
                false
            }
            _ => true,
        }
    }

    /// `reset-mid-stream` on a request that is not streamed: the head (with the whole body's
    /// `content-length`) and the first half of the body, then a reset. The request is logged
    /// as aborted.
    fn reset_mid_body(self, body: Vec<u8>) -> Response<SimBody> {
        let mut guard = self.guard;
        guard.finish = None;
        let conn = self.conn;
        let mut shutdown = self.shutdown;
        let len = body.len();
        let half = faults::first_half(&body).len();
        let half = Bytes::from(body).slice(..half);
        let (tx, rx) = mpsc::channel(1);
        tokio::spawn(async move {
            let sent = tokio::select! {
                // Sent, then the slot free again: hyper took the bytes.
                r = async { tx.send(half).await.ok()?; tx.reserve().await.ok() } => r.is_some(),
                () = wait_shutdown(&mut shutdown) => false,
            };
            if sent {
                guard.inject(FaultKind::ResetMidStream);
                conn.pull();
                hold_until_reset(Some(&tx)).await;
            }
            drop(guard);
        });
        let mut r = respond(StatusCode::OK, "application/json", SimBody::Channel(rx));
        r.headers_mut()
            .insert(header::CONTENT_LENGTH, HeaderValue::from(len));
        r
    }

    /// Runs to completion (after the hold, if held); `false` when aborted (client gone, server
    /// shutting down).
    async fn run(&mut self, begin: Begin) -> bool {
        let source = match begin {
            Begin::Ready(source) => source,
            Begin::Held(ticket, start) => {
                if !self.wait_held(ticket).await {
                    return false;
                }
                // Its timing starts now, as if it had just arrived.
                self.start(start, Instant::now())
            }
        };
        let tx = self.tx.clone();
        let closed = async move { closed(tx.as_ref()).await };
        tokio::pin!(closed);
        match source {
            Source::Engine(mut rx) => {
                while !self.done() {
                    let ev = tokio::select! {
                        biased;
                        ev = rx.recv() => ev,
                        () = &mut closed => None,
                    };
                    let Some(ev) = ev else {
                        return false;
                    };
                    let mut handed_back = self.on_event(ev);
                    while handed_back.is_none() && !self.done() && !self.action_due {
                        match rx.try_recv() {
                            Ok(ev) => handed_back = self.on_event(ev),
                            Err(_) => break,
                        }
                    }
                    if let Some(job) = handed_back {
                        if !self.hold_again(*job).await {
                            return false;
                        }
                        continue;
                    }
                    if (!self.done() || self.action_due) && !self.flush().await {
                        return false;
                    }
                }
            }
            Source::Fixed { first_at, itl } => {
                let mut shutdown = self.shutdown.clone();
                while !self.done() {
                    let due = first_at + itl * self.guard.usage.completion_tokens;
                    tokio::select! {
                        () = crate::timer::sleep_until(due) => {}
                        () = &mut closed => return false,
                        () = wait_shutdown(&mut shutdown) => return false,
                    }
                    self.token();
                    // Tokens already due go out in the same write (with `--itl-ms 0`, the
                    // whole answer at once; a server behind its schedule does the same).
                    while !self.done()
                        && !self.action_due
                        && first_at + itl * self.guard.usage.completion_tokens
                            <= tokio::time::Instant::now()
                    {
                        self.token();
                    }
                    if (!self.done() || self.action_due) && !self.flush().await {
                        return false;
                    }
                }
            }
            Source::Instant => {
                while !self.fill(FRAME_BYTES) {
                    if !self.flush().await {
                        return false;
                    }
                }
            }
        }
        self.complete();
        // All tokens were produced: the request counts as finished even if this last write fails.
        self.flush().await;
        true
    }
}

/// After a reset was pulled: keeps the body open until the connection is dropped (at most a
/// second), so that hyper cannot end the response normally first.
async fn hold_until_reset(tx: Option<&mpsc::Sender<Bytes>>) {
    let _ = tokio::time::timeout(Duration::from_secs(1), closed(tx)).await;
}

/// Resolves when the body channel's receiver is gone (the client left); never without one.
async fn closed(tx: Option<&mpsc::Sender<Bytes>>) {
    match tx {
        Some(tx) => tx.closed().await,
        None => std::future::pending().await,
    }
}
