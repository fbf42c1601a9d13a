//! [`RunSpec`]: everything that decides a run, validated, and the schema of `run.json`'s
//! `spec` (a resume replays it). Header *values* are never part of it (only their names);
//! they are passed in [`crate::RunOptions`].

use std::path::PathBuf;
use std::time::Duration;

use bench_runner::{Arrival, ArrivalProcess, RunConfig, ToolWaits};
use bench_sim::{LatencyMode, SimConfig};
use bench_telemetry::Backend;
use bench_transport::TlsOptions;
use bench_workload::plan::PlanConfig;
use serde::{Deserialize, Serialize};

pub use bench_report::Judge;
pub use bench_runner::{Limits, RequestShape};

use crate::RunError;
use crate::graders::GradersSpec;

/// A whole run. `RunSpec::default()` replays the bundled sample at C = 8 against the embedded
/// simulator; every field has a default, so `{}` is a valid spec.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct RunSpec {
    /// Where requests go.
    pub target: Target,
    /// The workload: dataset, selection, output pinning, shared system prompt.
    pub plan: PlanConfig,
    /// How sessions are started.
    pub load: Load,
    /// What each request looks like.
    pub request: RequestShape,
    /// Clock limits and response size caps.
    pub limits: Limits,
    /// Retries of failed turns (none by default; then not written to `run.json`).
    #[serde(skip_serializing_if = "bench_runner::Retry::is_off")]
    pub retry: bench_runner::Retry,
    /// Unmeasured sessions first (cut to 3 turns, marked `warmup`).
    pub warmup_sessions: u32,
    /// `/metrics` scraping.
    pub scrape: Scraping,
    /// More Prometheus endpoints scraped beside the server's `/metrics` at the same times
    /// (`--scrape URL`, e.g. a DCGM exporter's `http://gpu-node:9400/metrics`): each summarized
    /// in `result.json` `scrape_targets`, their GPU power and energy in `energy`.
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub scrape_targets: Vec<String>,
    /// The server family: detected, or named.
    pub backend: BackendChoice,
    /// Empty the server's prefix cache before the run (fails when it cannot).
    pub flush_cache: bool,
    /// How the result is judged.
    pub judge: Judge,
    /// Extra files written when the run ends.
    pub exports: Exports,
    /// Built-in graders of every ok turn ([`crate::graders`]; none by default, and then not
    /// written to `run.json`).
    #[serde(skip_serializing_if = "GradersSpec::is_empty")]
    pub graders: GradersSpec,
    /// Which shard this process plays and when it starts (`[placement]`: `shard`,
    /// `start_at`; not written when neither is set).
    #[serde(skip_serializing_if = "crate::placement::Placement::is_unset")]
    pub placement: crate::placement::Placement,
}

pub use crate::placement::START_AT_SLACK;

/// Where requests go.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields, rename_all = "snake_case")]
pub enum Target {
    /// A server at `base_url` (`http://` or `https://`).
    Url {
        /// E.g. `http://127.0.0.1:8000`.
        base_url: String,
        /// Names of the extra headers sent (their values come in [`crate::RunOptions`]).
        #[serde(default)]
        header_names: Vec<String>,
        /// Names of the headers whose values are secrets whatever their names
        /// ([`crate::RunOptions::secret_headers`], `--secret-header`): a resumed run scrubs
        /// them too.
        #[serde(default, skip_serializing_if = "Vec::is_empty")]
        secret_header_names: Vec<String>,
        /// How long to wait for `GET /v1/models` to answer 200 before giving up.
        #[serde(default = "default_ready_timeout", with = "humantime_serde")]
        ready_timeout: Duration,
        /// TLS trust and client certificate for an `https://` base URL (paths only; recorded
        /// in `run.json`, `insecure` included).
        #[serde(default, skip_serializing_if = "TlsOptions::is_default")]
        tls: TlsOptions,
    },
    /// The embedded simulator, started in-process on a free loopback port.
    Embedded(EmbeddedSim),
}

fn default_ready_timeout() -> Duration {
    Duration::from_secs(60)
}

impl Default for Target {
    fn default() -> Self {
        Target::Embedded(EmbeddedSim::default())
    }
}

/// The embedded simulator's model (see `bench sim --help`).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct EmbeddedSim {
    /// How latency is simulated.
    pub latency: SimLatency,
    /// Context window of the simulated model.
    pub max_model_len: u32,
    /// KV-cache capacity in tokens.
    pub kv_capacity_tokens: u64,
    /// Sequence slots.
    pub max_num_seqs: usize,
    /// Multiplies every simulated delay.
    pub time_scale: f64,
    /// The first N output tokens of every answer are reasoning (0: none).
    #[serde(skip_serializing_if = "is_zero")]
    pub reasoning_tokens: u32,
}

fn is_zero(n: &u32) -> bool {
    *n == 0
}

impl Default for EmbeddedSim {
    fn default() -> Self {
        let d = SimConfig::default();
        EmbeddedSim {
            latency: SimLatency::Model,
            max_model_len: 131_072,
            kv_capacity_tokens: d.kv_capacity_tokens,
            max_num_seqs: d.max_num_seqs,
            time_scale: 1.0,
            reasoning_tokens: 0,
        }
    }
}

/// How the embedded simulator times its answers.
#[derive(Debug, Clone, Copy, PartialEq, Default, Serialize, Deserialize)]
#[serde(deny_unknown_fields, rename_all = "snake_case", tag = "mode")]
pub enum SimLatency {
    /// A continuous-batching step loop with a prefix cache.
    #[default]
    Model,
    /// Every request gets exactly this TTFT and gap between tokens.
    Fixed {
        /// Time to first token.
        #[serde(with = "humantime_serde")]
        ttft: Duration,
        /// Gap between tokens.
        #[serde(with = "humantime_serde")]
        itl: Duration,
    },
    /// No delay at all.
    Instant,
}

impl EmbeddedSim {
    /// The spec of a simulator configured as `c` (its model's timing and capacity).
    pub fn from_config(c: &SimConfig) -> EmbeddedSim {
        EmbeddedSim {
            latency: match c.mode {
                LatencyMode::Model => SimLatency::Model,
                LatencyMode::Fixed { ttft, itl } => SimLatency::Fixed { ttft, itl },
                LatencyMode::Instant => SimLatency::Instant,
            },
            max_model_len: c.max_model_len,
            kv_capacity_tokens: c.kv_capacity_tokens,
            max_num_seqs: c.max_num_seqs,
            time_scale: c.time_scale,
            reasoning_tokens: c.reasoning_tokens,
        }
    }

    /// The simulator's configuration (on a free loopback port).
    pub fn to_config(&self, model: Option<&str>) -> SimConfig {
        SimConfig {
            bind: std::net::SocketAddr::from(([127, 0, 0, 1], 0)),
            model: model.map_or_else(|| SimConfig::default().model, str::to_owned),
            mode: match self.latency {
                SimLatency::Model => LatencyMode::Model,
                SimLatency::Fixed { ttft, itl } => LatencyMode::Fixed { ttft, itl },
                SimLatency::Instant => LatencyMode::Instant,
            },
            max_model_len: self.max_model_len,
            kv_capacity_tokens: self.kv_capacity_tokens,
            max_num_seqs: self.max_num_seqs,
            time_scale: self.time_scale,
            reasoning_tokens: self.reasoning_tokens,
            ..SimConfig::default()
        }
    }
}

/// How sessions are started.
#[derive(Debug, Clone, Copy, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields, rename_all = "snake_case")]
pub enum Load {
    /// Exactly `concurrency` sessions play at once; a finished session's slot is refilled.
    Closed {
        /// Sessions at once.
        concurrency: u32,
        /// Start the sessions evenly over this time instead of all at once.
        #[serde(default, with = "humantime_serde")]
        ramp_up: Option<Duration>,
    },
    /// Sessions start on a schedule whatever the server's speed.
    Open {
        /// The schedule.
        arrival: Arrival,
        /// The most sessions in flight (`None`: no limit).
        #[serde(default)]
        max_in_flight: Option<u32>,
    },
}

/// `--concurrency` when not given.
pub const DEFAULT_CONCURRENCY: u32 = 8;

impl Default for Load {
    fn default() -> Self {
        Load::Closed {
            concurrency: DEFAULT_CONCURRENCY,
            ramp_up: None,
        }
    }
}

impl Load {
    /// The most sessions in flight (`None`: unbounded).
    pub fn in_flight(&self) -> Option<u32> {
        match *self {
            Load::Closed { concurrency, .. } => Some(concurrency),
            Load::Open { max_in_flight, .. } => max_in_flight,
        }
    }

    /// The engine's `concurrency` (open loop: the cap, 0 for none).
    pub fn engine_concurrency(&self) -> u32 {
        self.in_flight().unwrap_or(0)
    }
}

/// Sampling fields as agentic-bench sends them (its `--temperature`, `--top-p`, `--top-k`,
/// `--presence-penalty` and `--chat-template-kwargs`): each only when set, `top_p` only below
/// 1.0, `chat_template_kwargs` only when not empty. [`Sampling::merge_into`] puts them into
/// [`RequestShape::extra_body`], where a run spec records them.
///
/// ```
/// use bench_run::spec::Sampling;
///
/// let mut body = serde_json::Map::new();
/// body.insert("temperature".into(), 0.7.into()); // already there: it wins
/// let s = Sampling { temperature: Some(0.0), top_p: Some(1.0), top_k: Some(-1), ..Sampling::default() };
/// s.merge_into(&mut body).unwrap();
/// assert_eq!(serde_json::Value::Object(body), serde_json::json!({"temperature": 0.7, "top_k": -1}));
/// ```
#[derive(Debug, Clone, Default, PartialEq)]
pub struct Sampling {
    /// `temperature`.
    pub temperature: Option<f64>,
    /// `top_p` (sent only below 1.0).
    pub top_p: Option<f64>,
    /// `top_k`.
    pub top_k: Option<i64>,
    /// `presence_penalty`.
    pub presence_penalty: Option<f64>,
    /// `chat_template_kwargs` (sent only when not empty).
    pub chat_template_kwargs: Option<serde_json::Map<String, serde_json::Value>>,
}

impl Sampling {
    /// Adds these fields to `body` where it has no such key (a key already there wins, so
    /// `--extra-request-body` overrides them). A number that is not finite is refused.
    pub fn merge_into(
        &self,
        body: &mut serde_json::Map<String, serde_json::Value>,
    ) -> Result<(), RunError> {
        let mut put = |k: &str, v: serde_json::Value| {
            body.entry(k).or_insert(v);
        };
        for (k, v) in [
            ("temperature", self.temperature),
            ("top_p", self.top_p.filter(|&p| p < 1.0 || p.is_nan())),
            ("presence_penalty", self.presence_penalty),
        ] {
            match v {
                Some(v) if !v.is_finite() => {
                    return Err(invalid(format!("{k} must be a finite number, not {v}")));
                }
                Some(v) => put(k, v.into()),
                None => {}
            }
        }
        if let Some(k) = self.top_k {
            put("top_k", k.into());
        }
        if let Some(m) = self.chat_template_kwargs.as_ref().filter(|m| !m.is_empty()) {
            put("chat_template_kwargs", serde_json::Value::Object(m.clone()));
        }
        Ok(())
    }
}

/// A `--scrape` URL split into the base URL a client connects to and the path it gets:
/// `http(s)://host:port/path` (path `/metrics` when none is given); credentials are refused
/// (the URL is recorded in `run.json` and the result).
pub fn scrape_target(url: &str) -> Result<(String, String), RunError> {
    let bad = |why: &str| invalid(format!("--scrape {url:?}: {why}"));
    let rest = url
        .strip_prefix("http://")
        .or_else(|| url.strip_prefix("https://"))
        .ok_or_else(|| bad("give an http:// or https:// URL, e.g. http://gpu-node:9400/metrics"))?;
    let (authority, path) = match rest.find('/') {
        Some(i) => (&rest[..i], &rest[i..]),
        None => (rest, "/metrics"),
    };
    if authority.is_empty() {
        return Err(bad("no host"));
    }
    if authority.contains('@') {
        return Err(bad(
            "credentials in the URL (user:pass@) would be recorded with the run: scrape an \
             endpoint that needs none",
        ));
    }
    let scheme = &url[..url.len() - rest.len()];
    Ok((format!("{scheme}{authority}"), path.to_owned()))
}

/// `/metrics` scraping.
#[derive(Debug, Clone, Copy, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Scraping {
    /// None.
    Off,
    /// A baseline before the first turn, one every interval, a final one after the last.
    Every(#[serde(with = "humantime_serde")] Duration),
}

impl Default for Scraping {
    fn default() -> Self {
        Scraping::Every(Scraping::default_interval())
    }
}

impl Scraping {
    /// Every 5 s (also the `--scrape` targets' interval when the server is not scraped).
    pub fn default_interval() -> Duration {
        Duration::from_secs(5)
    }
}

/// The server family.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum BackendChoice {
    /// From `owned_by` in `/v1/models`, else the metric names on `/metrics`.
    #[default]
    Auto,
    /// This one (a mismatch with what is detected is warned about).
    Named(Backend),
}

/// Extra files written when the run ends.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct Exports {
    /// Append one JSON line summarizing the run to this file.
    pub result_line: Option<PathBuf>,
    /// Write every turn record as a CSV row to this file.
    pub turns_csv: Option<PathBuf>,
    /// A label carried into the result line.
    pub tag: Option<String>,
    /// Send every measured turn as an OpenTelemetry span to this OTLP/HTTP endpoint when the
    /// run ends (`--otlp-endpoint`; [`crate::otlp`]).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub otlp_endpoint: Option<String>,
    /// Log the run to this MLflow tracking server when it ends (`--mlflow`,
    /// `--mlflow-experiment`; [`crate::mlflow`]).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub mlflow: Option<crate::mlflow::MlflowSpec>,
}

fn invalid(m: impl Into<String>) -> RunError {
    RunError::Invalid(m.into())
}

/// xxh3-128 of `spec`'s JSON without the top-level fields `drop` (what differs between the
/// shards of one run), as 32 hex digits.
pub(crate) fn digest_without(spec: &impl Serialize, drop: &[&str]) -> String {
    let mut v = serde_json::to_value(spec).unwrap_or_default();
    if let Some(o) = v.as_object_mut() {
        for k in drop {
            o.remove(*k);
        }
    }
    format!(
        "{:032x}",
        xxhash_rust::xxh3::xxh3_128(v.to_string().as_bytes())
    )
}

impl RunSpec {
    /// A digest of everything that shapes what the run sends and how it is judged: the spec
    /// without which shard it plays, when it starts and where its exports go. The shards of one
    /// run share it; `bench merge` refuses shards whose digests differ. 32 hex digits.
    pub fn config_digest(&self) -> String {
        digest_without(self, &["placement", "exports"])
    }

    /// Checks every value; the first problem is one line naming the field.
    pub fn validate(&self) -> Result<(), RunError> {
        let j = &self.judge;
        if !(0.0..=1.0).contains(&j.steady_frac) {
            return Err(invalid(format!(
                "steady_frac (--steady-frac) must be within 0..1, not {}",
                j.steady_frac
            )));
        }
        if !(0.0..=1.0).contains(&j.max_error_rate) {
            return Err(invalid(format!(
                "max_error_rate (--max-error-rate) must be within 0..1, not {}",
                j.max_error_rate
            )));
        }
        if self.request.max_model_len == Some(0) {
            return Err(invalid(
                "max_model_len (--max-model-len) must be at least 1 (leave it out to take the \
                 server's)",
            ));
        }
        if let Some(s) = &j.slo {
            s.parse::<bench_report::Slo>()
                .map_err(|e| invalid(format!("slo: {e}")))?;
        }
        if let Some(s) = &j.session_slo {
            s.parse::<bench_report::SessionSlo>()
                .map_err(|e| invalid(format!("session_slo (--session-slo): {e}")))?;
        }
        if let Some(c) = &j.cost {
            c.validate()
                .map_err(|e| invalid(format!("judge.cost: {e}")))?;
        }
        for t in &self.scrape_targets {
            scrape_target(t)?;
        }
        if let Some(e) = &self.exports.otlp_endpoint {
            crate::otlp::target(e).map_err(invalid)?;
        }
        if let Some(m) = &self.exports.mlflow {
            m.validate().map_err(invalid)?;
        }
        match self.load {
            Load::Closed { concurrency: 0, .. } => {
                return Err(invalid("concurrency must be at least 1"));
            }
            Load::Open {
                arrival,
                max_in_flight,
            } => {
                let trace = matches!(arrival.process, ArrivalProcess::Trace { .. });
                if !trace && (!arrival.rate.is_finite() || arrival.rate <= 0.0) {
                    return Err(invalid(format!(
                        "rate must be a positive number of sessions per second, not {}",
                        arrival.rate
                    )));
                }
                if max_in_flight == Some(0) {
                    return Err(invalid("max_in_flight must be at least 1 (or unset)"));
                }
                if let ArrivalProcess::Gamma { burstiness } = arrival.process {
                    if !burstiness.is_finite() || burstiness <= 0.0 {
                        return Err(invalid(format!(
                            "burstiness must be a positive number (1 is Poisson), not {burstiness}"
                        )));
                    }
                }
                if let ArrivalProcess::Trace { time_scale } = arrival.process {
                    if !time_scale.is_finite() || time_scale <= 0.0 {
                        return Err(invalid(format!(
                            "time_scale must be a positive number (1 plays the trace as recorded), not {time_scale}"
                        )));
                    }
                    if self.limits.duration.is_some() {
                        return Err(invalid(
                            "trace arrivals play the trace once: a duration cannot loop it",
                        ));
                    }
                }
            }
            Load::Closed { .. } => {}
        }
        if let ToolWaits::Honour { scale, .. } = self.request.tool_waits {
            if !scale.is_finite() || scale < 0.0 {
                return Err(invalid("tool wait scale must be a non-negative number"));
            }
        }
        for (h, what) in [
            (&self.request.routing_header, "routing header"),
            (&self.request.worker_header, "worker header"),
        ] {
            if let Some(h) = h {
                http::HeaderName::from_bytes(h.trim().as_bytes())
                    .map_err(|_| invalid(format!("{what}: {h:?} is not a valid header name")))?;
            }
        }
        if self.limits.turn_timeout.is_zero() {
            return Err(invalid("turn_timeout must be positive"));
        }
        // A base URL that cannot be used is said before planning, not after it.
        if let Target::Url { base_url, tls, .. } = &self.target {
            let mut c = bench_transport::ClientConfig::new(base_url.as_str());
            c.tls = tls.clone();
            bench_transport::Client::new(c).map_err(|e| invalid(e.to_string()))?;
        }
        for (cap, name) in [
            (self.limits.max_event_bytes, "max_event_bytes"),
            (self.limits.max_response_bytes, "max_response_bytes"),
            (self.limits.max_json_bytes, "max_json_bytes"),
        ] {
            if cap == 0 {
                return Err(invalid(format!("{name} must be at least 1 byte")));
            }
        }
        if self.retry.max > 0 && self.retry.backoff.is_zero() {
            return Err(invalid(
                "retry backoff must be positive when retries are on",
            ));
        }
        if let Target::Embedded(sim) = &self.target {
            sim.to_config(None)
                .validate()
                .map_err(|(field, what)| invalid(format!("simulator {field} {what}")))?;
        }
        self.plan.validate().map_err(|e| invalid(e.to_string()))?;
        self.graders.build()?;
        bench_transport::bodies::endpoint_headers(
            self.request.endpoint,
            std::env::var("ANTHROPIC_API_KEY").ok(),
        )
        .map_err(|e| invalid(e.detail().to_owned()))?;
        if self.plan.tool_messages == bench_workload::plan::ToolMessages::Faithful
            && self.request.endpoint != bench_transport::Endpoint::Chat
        {
            return Err(invalid(
                "tool_messages faithful sends chat tool calls: it needs the chat endpoint",
            ));
        }
        if self.request.responses_state == bench_runner::ResponsesState::Server
            && self.request.endpoint != bench_transport::Endpoint::Responses
        {
            return Err(invalid(
                "responses_state server needs the responses endpoint (--endpoint responses)",
            ));
        }
        Ok(())
    }

    /// Whether requests go to the embedded simulator.
    pub fn is_embedded(&self) -> bool {
        matches!(self.target, Target::Embedded(_))
    }

    /// The engine's settings for `model` (discovered) with the window `max_model_len`.
    pub fn run_config(
        &self,
        model: String,
        max_model_len: Option<u64>,
        backend: Backend,
    ) -> RunConfig {
        let r = &self.request;
        let mut cfg = RunConfig::new(model, self.load.engine_concurrency());
        match self.load {
            Load::Closed { ramp_up, .. } => cfg.ramp_up = ramp_up,
            Load::Open { arrival, .. } => cfg.arrival = Some(arrival),
        }
        cfg.warmup_sessions = self.warmup_sessions;
        cfg.return_cached_tokens_details = backend == Backend::Sglang;
        cfg.limits = self.limits;
        cfg.retry = self.retry;
        cfg.max_model_len = max_model_len;
        cfg.request = r.clone();
        // The key is read here, never recorded (run.json holds the spec, not the headers).
        cfg.endpoint_headers = bench_transport::bodies::endpoint_headers(
            r.endpoint,
            std::env::var("ANTHROPIC_API_KEY").ok(),
        )
        .unwrap_or_default();
        let name = |h: &Option<String>| {
            h.as_deref()
                .and_then(|h| http::HeaderName::from_bytes(h.trim().as_bytes()).ok())
        };
        cfg.routing_header = name(&r.routing_header);
        cfg.worker_header = name(&r.worker_header);
        cfg
    }
}

/// A `NAME=VALUE` header; the error says what is expected.
pub fn parse_header(h: &str) -> Result<(String, String), String> {
    match h.split_once('=') {
        Some((k, v)) if !k.trim().is_empty() => Ok((k.trim().to_string(), v.to_string())),
        // Never echo the argument: it may hold a secret. Only a name before `:` is shown.
        _ => match h.split_once(':') {
            Some((k, _)) if http::HeaderName::from_bytes(k.trim().as_bytes()).is_ok() => Err(
                format!("\"{}: …\": expected NAME=VALUE, not NAME: VALUE", k.trim()),
            ),
            _ => {
                Err("expected NAME=VALUE (the argument is not shown: it may hold a secret)".into())
            }
        },
    }
}

/// A JSON object (for `extra_body`); the error says why not.
pub fn parse_json_object(text: &str) -> Result<serde_json::Map<String, serde_json::Value>, String> {
    match serde_json::from_str::<serde_json::Value>(text) {
        Ok(serde_json::Value::Object(m)) => Ok(m),
        Ok(_) => Err("must be a JSON object".into()),
        Err(e) => Err(format!("is not valid JSON: {e}")),
    }
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use super::*;

    #[test]
    fn an_empty_object_is_the_default_run() {
        let s: RunSpec = serde_json::from_str("{}").unwrap();
        assert_eq!(s, RunSpec::default());
        s.validate().unwrap();
        assert!(s.is_embedded());
        assert_eq!(s.load.in_flight(), Some(8));
    }

    #[test]
    fn a_spec_round_trips_and_durations_read_as_text() {
        let s: RunSpec = serde_json::from_str(
            r#"{"target": {"url": {"base_url": "http://127.0.0.1:9", "header_names": ["x-key"]}},
                "load": {"open": {"arrival": {"rate": 2.5, "process": "constant", "seed": 3}}},
                "limits": {"duration": "90s", "turn_timeout": "2m"},
                "plan": {"tokenizer": "chars", "dataset": {"random": {"turns": 3}}},
                "request": {"tool_waits": {"mode": "skip"}, "output_cap_field": "max_tokens"}}"#,
        )
        .unwrap();
        s.validate().unwrap();
        assert_eq!(s.limits.duration, Some(Duration::from_secs(90)));
        assert_eq!(s.limits.turn_timeout, Duration::from_secs(120));
        assert_eq!(s.load.in_flight(), None);
        let back: RunSpec = serde_json::from_value(serde_json::to_value(&s).unwrap()).unwrap();
        assert_eq!(back, s);
        assert_eq!(
            back.plan.tokenizer,
            bench_workload::tokenize::TokenizerSpec::Chars
        );
    }

    #[test]
    fn the_shapes_docs_run_api_shows_parse() {
        let s: RunSpec = serde_json::from_str(
            r#"{"target": {"embedded": {"latency": {"mode": "fixed", "ttft": "50ms", "itl": "10ms"}}},
                "scrape": {"every": "2s"}, "backend": {"named": "vllm"},
                "load": {"closed": {"concurrency": 3, "ramp_up": "5s"}},
                "judge": {"slo": "ttft_ms=500"}, "exports": {"tag": "nightly"}}"#,
        )
        .unwrap();
        s.validate().unwrap();
        let Target::Embedded(sim) = &s.target else {
            panic!("{:?}", s.target)
        };
        assert_eq!(
            sim.latency,
            SimLatency::Fixed {
                ttft: Duration::from_millis(50),
                itl: Duration::from_millis(10)
            }
        );
        assert_eq!(s.scrape, Scraping::Every(Duration::from_secs(2)));
        assert_eq!(s.backend, BackendChoice::Named(Backend::Vllm));
        assert_eq!(s.load.in_flight(), Some(3));
        let off: RunSpec = serde_json::from_str(r#"{"scrape": "off", "backend": "auto"}"#).unwrap();
        assert_eq!(
            (off.scrape, off.backend),
            (Scraping::Off, BackendChoice::Auto)
        );
    }

    #[test]
    fn bad_values_are_one_line_naming_the_field() {
        let e = serde_json::from_str::<RunSpec>(r#"{"lod": {}}"#).unwrap_err();
        assert!(e.to_string().contains("unknown field `lod`"), "{e}");
        let s = RunSpec {
            load: Load::Closed {
                concurrency: 0,
                ramp_up: None,
            },
            ..RunSpec::default()
        };
        assert_eq!(
            s.validate().unwrap_err().to_string(),
            "concurrency must be at least 1"
        );
        let mut s = RunSpec::default();
        s.judge.slo = Some("ttft=fast".into());
        assert!(s.validate().unwrap_err().to_string().starts_with("slo: "));
        let s: RunSpec =
            serde_json::from_str(r#"{"graders": {"response": {"regex": "[z-a]"}}}"#).unwrap();
        let e = s.validate().unwrap_err().to_string();
        assert!(e.starts_with("graders.response.regex: "), "{e}");
        let s: RunSpec = serde_json::from_str(r#"{"graders": {"slo": {"tpot_ms": -1}}}"#).unwrap();
        assert!(matches!(s.validate(), Err(RunError::Invalid(_))));
    }

    #[test]
    fn graders_are_recorded_only_when_given() {
        let v = serde_json::to_value(RunSpec::default()).unwrap();
        assert!(v.get("graders").is_none(), "{v}");
        let s: RunSpec = serde_json::from_str(
            r#"{"graders": {"slo": {"ttft_ms": 500}, "output_length": {"tolerance": 0.05},
                "response": {"json_schema": {"type": "object"}}}}"#,
        )
        .unwrap();
        s.validate().unwrap();
        let v = serde_json::to_value(&s).unwrap();
        assert_eq!(
            v["graders"],
            serde_json::json!({"slo": {"ttft_ms": 500.0}, "output_length": {"tolerance": 0.05},
                "response": {"json_schema": {"type": "object"}}})
        );
        assert_eq!(serde_json::from_value::<RunSpec>(v).unwrap(), s);
        // The example docs/run-api.md shows.
        let s: RunSpec = serde_json::from_str(
            r#"{"request": {"content_mode": "model"},
                "graders": {
                  "slo": {"ttft_ms": 500, "tpot_ms": 50},
                  "output_length": {"tolerance": 0.1},
                  "response": {"json_schema": {"type": "object", "required": ["answer"]}}}}"#,
        )
        .unwrap();
        s.validate().unwrap();
        assert_eq!(s.graders.build().unwrap().len(), 3);
    }
}
