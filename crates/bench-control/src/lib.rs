//! `bench-control`: the live control plane behind `bench serve`.
//!
//! A [`Server`] listens on HTTP (hyper) and runs benchmarks in the background, one at a time,
//! only through `bench-run`: `POST /api/runs` takes a JSON run spec (`{}` replays the bundled
//! sample against the embedded simulator; `{"kind": "journeys", …}` runs a journeys suite).
//! Every run's events ([`stream::EventLog`]: its lifecycle as `events.jsonl` holds it, a
//! `progress` event a second, sampled `turn.completed` events with their grades, and a terminal
//! `run.completed` / `run.failed` / `run.cancelled` with the summary) stream over server-sent
//! events with ids, the whole history first, resumable with `Last-Event-ID`. `/metrics` gives
//! the active run to Prometheus ([`live::Live`]); `/` is a dashboard. Finished runs are read
//! back from their run directories ([`runs::Control`]). The API is documented in
//! `docs/serve.md`.
//!
//! ```no_run
//! # async fn demo() -> Result<(), bench_control::ServeError> {
//! let server = bench_control::Server::bind(bench_control::ServeConfig {
//!     bind: "127.0.0.1:0".parse().unwrap(),
//!     ..Default::default()
//! })
//! .await?;
//! println!("listening on http://{}", server.local_addr());
//! server.run(async { let _ = tokio::signal::ctrl_c().await; }).await;
//! # Ok(()) }
//! ```

pub mod http;
pub mod live;
pub mod runs;
pub mod stream;

use std::net::SocketAddr;
use std::path::PathBuf;
use std::sync::Arc;
use std::time::Duration;

pub use runs::{Control, ControlConfig, RunStatus, RunView, Summary};

/// The default `--bind`.
pub const DEFAULT_BIND: &str = "127.0.0.1:8765";

/// An API error: a status and a one-line message (the body is `{"error": message}`).
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{message}")]
pub struct ApiError {
    /// The HTTP status.
    pub status: u16,
    /// What went wrong.
    pub message: String,
    /// The active run (a 409).
    pub active: Option<String>,
}

impl ApiError {
    /// An error with `status`.
    pub fn new(status: u16, message: String) -> ApiError {
        ApiError {
            status,
            message,
            active: None,
        }
    }

    fn with_active(mut self, id: &str) -> ApiError {
        self.active = Some(id.to_owned());
        self
    }
}

/// Why `bench serve` could not start.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum ServeError {
    /// A configuration that is refused (e.g. a public address without a token).
    #[error("{0}")]
    Invalid(String),
    /// The address could not be bound.
    #[error("cannot listen on {addr}: {source}")]
    Bind {
        /// The address.
        addr: SocketAddr,
        /// Why.
        #[source]
        source: std::io::Error,
    },
}

/// What `bench serve` is started with.
#[derive(Clone)]
pub struct ServeConfig {
    /// Where to listen ([`DEFAULT_BIND`]).
    pub bind: SocketAddr,
    /// Required on every API route and `/metrics`; mandatory for a non-loopback `bind`.
    pub token: Option<String>,
    /// Where run directories go (`runs`).
    pub runs_dir: PathBuf,
    /// Your own hooks (called for every run) and graders (added to every replay).
    pub control: ControlConfig,
    /// Silence before a keepalive comment on a stream ([`stream::KEEPALIVE`]).
    pub keepalive: Duration,
}

impl Default for ServeConfig {
    fn default() -> Self {
        ServeConfig {
            bind: SocketAddr::from(([127, 0, 0, 1], 8765)),
            token: None,
            runs_dir: PathBuf::from("runs"),
            control: ControlConfig::default(),
            keepalive: stream::KEEPALIVE,
        }
    }
}

impl std::fmt::Debug for ServeConfig {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ServeConfig")
            .field("bind", &self.bind)
            .field("token", &self.token.as_ref().map(|_| "<set>"))
            .field("runs_dir", &self.runs_dir)
            .finish_non_exhaustive()
    }
}

/// A bound control plane.
#[derive(Debug)]
pub struct Server {
    listener: tokio::net::TcpListener,
    addr: SocketAddr,
    control: Arc<Control>,
    token: Option<String>,
    keepalive: Duration,
}

impl Server {
    /// Checks `cfg` and binds its address.
    pub async fn bind(cfg: ServeConfig) -> Result<Server, ServeError> {
        if cfg.token.as_deref() == Some("") {
            return Err(ServeError::Invalid("--token must not be empty".into()));
        }
        if !cfg.bind.ip().is_loopback() && cfg.token.is_none() {
            return Err(ServeError::Invalid(format!(
                "--bind {} is not a loopback address: give --token (or BENCH_SERVE_TOKEN) so \
                 only you can start runs",
                cfg.bind
            )));
        }
        let listener = tokio::net::TcpListener::bind(cfg.bind)
            .await
            .map_err(|source| ServeError::Bind {
                addr: cfg.bind,
                source,
            })?;
        let addr = listener.local_addr().map_err(|source| ServeError::Bind {
            addr: cfg.bind,
            source,
        })?;
        let mut control_cfg = cfg.control;
        control_cfg.runs_dir = cfg.runs_dir;
        if let Some(t) = &cfg.token {
            control_cfg.secrets.add(t);
        }
        Ok(Server {
            listener,
            addr,
            control: Control::new(control_cfg),
            token: cfg.token,
            keepalive: cfg.keepalive,
        })
    }

    /// The address it listens on (the port, with `:0`).
    pub fn local_addr(&self) -> SocketAddr {
        self.addr
    }

    /// Its runs.
    pub fn control(&self) -> Arc<Control> {
        self.control.clone()
    }

    /// Serves until `shutdown` resolves; then cancels the active run and waits until its
    /// partial result is written.
    pub async fn run(self, shutdown: impl std::future::Future<Output = ()>) {
        let app = Arc::new(http::App {
            control: self.control.clone(),
            token: self.token,
            keepalive: self.keepalive,
        });
        http::accept(self.listener, app, shutdown).await;
        self.control.shutdown().await;
    }
}
