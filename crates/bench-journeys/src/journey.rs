//! The journey abstraction: a named, timed user-facing operation with optional setup and
//! teardown.

use std::any::Any;
use std::future::Future;
use std::pin::Pin;
use std::time::Duration;

use bench_transport::{Client, ErrorKind};
use serde::{Deserialize, Serialize};

/// A boxed, sendable future (journeys are trait objects in a registry).
pub type BoxFuture<'a, T> = Pin<Box<dyn Future<Output = T> + Send + 'a>>;

/// Whatever `setup` hands to `measure` and `teardown` (an id, a list to clean up, nothing).
/// Shared by concurrent operations: use interior mutability for anything `measure` changes.
pub type Ctx = Box<dyn Any + Send + Sync>;

/// How a journey is meant to be timed.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Kind {
    /// Time each operation, one at a time.
    Latency,
    /// A fixed number of operations under concurrency.
    Throughput,
}

impl Kind {
    /// `latency` or `throughput`.
    pub fn as_str(self) -> &'static str {
        match self {
            Kind::Latency => "latency",
            Kind::Throughput => "throughput",
        }
    }
}

/// Why an operation failed: a data point, never an abort. `reason` is one of `HTTP <status>`,
/// `timeout`, `connect` or `other: <what>` (the report groups failures by it).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Failure {
    /// The grouping key.
    pub reason: String,
    /// What exactly happened (for logs; not grouped).
    pub detail: String,
}

impl Failure {
    /// An `other: <what>` failure.
    pub fn other(what: impl Into<String>) -> Failure {
        let what = what.into();
        Failure {
            reason: format!("other: {what}"),
            detail: what,
        }
    }

    /// An `HTTP <status>` failure.
    pub fn status(status: u16, detail: impl Into<String>) -> Failure {
        Failure {
            reason: format!("HTTP {status}"),
            detail: detail.into(),
        }
    }
}

impl std::fmt::Display for Failure {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        if self.detail.is_empty() || self.reason.ends_with(&self.detail) {
            f.write_str(&self.reason)
        } else {
            write!(f, "{}: {}", self.reason, self.detail)
        }
    }
}

impl From<bench_transport::Error> for Failure {
    fn from(e: bench_transport::Error) -> Failure {
        let reason = match (e.kind(), e.status()) {
            (_, Some(s)) => format!("HTTP {}", s.as_u16()),
            (ErrorKind::Timeout, _) => "timeout".to_owned(),
            (ErrorKind::Connect, _) => "connect".to_owned(),
            (k, _) => format!("other: {}", k.as_str()),
        };
        // The reason names the kind: the detail is the error's own, not its kind again.
        Failure {
            reason,
            detail: e.detail().to_owned(),
        }
    }
}

/// What the journeys talk to: an HTTP client on the server under test.
#[derive(Debug, Clone)]
pub struct Env {
    /// The client (keep-alive pool, auth and headers configured).
    pub client: Client,
    /// The API the generation journeys call (chat completions by default).
    pub endpoint: bench_transport::Endpoint,
}

impl Env {
    /// An environment around `client`, calling chat completions.
    pub fn new(client: Client) -> Env {
        Env {
            client,
            endpoint: bench_transport::Endpoint::Chat,
        }
    }

    /// The same, calling `endpoint` instead.
    pub fn with_endpoint(mut self, endpoint: bench_transport::Endpoint) -> Env {
        self.endpoint = endpoint;
        self
    }

    /// Request options for one generation call of [`Env::endpoint`] (its path, parser and
    /// headers: Anthropic's version and `ANTHROPIC_API_KEY`).
    pub fn generation_options(&self) -> Result<bench_transport::RequestOptions, Failure> {
        let headers = bench_transport::bodies::endpoint_headers(
            self.endpoint,
            std::env::var("ANTHROPIC_API_KEY").ok(),
        )?;
        Ok(bench_transport::RequestOptions {
            endpoint: self.endpoint,
            headers,
            ..bench_transport::RequestOptions::default()
        })
    }
}

/// One benchmarkable user journey. Implement it for your own operation and hand it to
/// [`crate::run_latency`] / [`crate::run_throughput`] (see `examples/custom.rs`).
pub trait Journey: Send + Sync {
    /// Stable identifier (CLI and report key).
    fn name(&self) -> &str;

    /// One line for `--list`.
    fn description(&self) -> &str;

    /// How it is meant to be timed. A latency journey that is [`Journey::concurrency_safe`] may
    /// still be run as throughput.
    fn kind(&self) -> Kind {
        Kind::Latency
    }

    /// Whether many `measure` calls may run at once against one setup.
    fn concurrency_safe(&self) -> bool {
        false
    }

    /// Whether it needs a mock LLM behind the server (a full agent turn).
    fn needs_mock_llm(&self) -> bool {
        false
    }

    /// Whether it needs the agent server's runner (a process that executes turns and holds the
    /// agent's workspace): a full turn, or a file read from the workspace.
    fn needs_runner(&self) -> bool {
        false
    }

    /// Values its setup found that belong in the report beside the figures (e.g. the reply
    /// length the LLM was configured with), as `(name, value)`. Called once after setup.
    fn notes(&self, _ctx: &Ctx) -> Vec<(String, String)> {
        Vec::new()
    }

    /// Upper bound on timed operations per run: clamps `--iterations` down, never up.
    fn max_iterations(&self) -> Option<u32> {
        None
    }

    /// Runs once before timing; its value reaches every `measure` and the `teardown`.
    fn setup<'a>(&'a self, _env: &'a Env) -> BoxFuture<'a, Result<Ctx, Failure>> {
        Box::pin(async { Ok(Box::new(()) as Ctx) })
    }

    /// Exactly one timed operation. `Ok(None)`: the runner's clock around the call is the
    /// sample; `Ok(Some(d))`: the operation timed itself (e.g. time to the first delta).
    fn measure<'a>(
        &'a self,
        env: &'a Env,
        ctx: &'a Ctx,
    ) -> BoxFuture<'a, Result<Option<Duration>, Failure>>;

    /// Runs once after timing, always (after failures and cancellation too). Best effort.
    fn teardown<'a>(&'a self, _env: &'a Env, _ctx: Ctx) -> BoxFuture<'a, ()> {
        Box::pin(async {})
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_transport_error_names_its_kind_once() {
        let e = bench_transport::Error::new(
            ErrorKind::ResponseTooLarge,
            "the JSON body passed --max-json-bytes 64",
        );
        assert_eq!(
            Failure::from(e).to_string(),
            "other: response_too_large: the JSON body passed --max-json-bytes 64"
        );
        let e = bench_transport::Error::new(ErrorKind::Timeout, "no answer in 5 s");
        assert_eq!(Failure::from(e).to_string(), "timeout: no answer in 5 s");
    }
}
