//! A journeys suite as a run: the one code path behind `bench journeys` and the control
//! plane's `{"kind": "journeys", ...}` runs.
//!
//! [`start_journeys`] takes a [`JourneysSpec`] (serializable, validated: what `run.json`
//! records as `spec`) and [`JourneysOptions`] (what is never recorded: header values, hooks,
//! the per-run callback), loads the journeys (a built-in pack or a declarative file, then the
//! selection), starts the embedded simulator when there is no server (the `openai` pack only)
//! and runs the suite with [`bench_journeys::run_suite_observed`]. [`JourneysHandle::wait`]
//! returns the [`bench_journeys::Report`] and its verdict ([`JourneysReport::problems`]:
//! setup failures, gate breaches, a cancel).
//!
//! With a run directory ([`JourneysOptions::run_dir`]) the run leaves `run.json` (`"kind":
//! "journeys"`, the spec, `tool_version`, `pid`, `base_url`, `header_names`: header values
//! never), `events.jsonl` (`run.started`, then `run.stopped` with `completed`, `cancelled` or
//! `signal`) and, at the end, `report.json` ([`files::JOURNEYS_REPORT`]). Without one nothing
//! is written (the `bench journeys` default); the events are still kept and broadcast.
//!
//! Hooks: [`Hooks::on_start`] is called always, with the run directory or, without one, an
//! empty path; [`Hooks::on_operation`] once per timed operation (never for warmup ones);
//! [`Hooks::on_end`] after `report.json` is written.
//!
//! ```no_run
//! # async fn demo() -> Result<(), bench_run::RunError> {
//! use bench_run::journeys::{JourneysOptions, JourneysSpec, start_journeys};
//! let spec: JourneysSpec = serde_json::from_str(r#"{"journeys": ["list_models"], "iterations": 5}"#)
//!     .map_err(|e| bench_run::RunError::Invalid(e.to_string()))?;
//! let handle = start_journeys(spec, JourneysOptions::default()).await?;
//! let done = handle.wait().await?;
//! println!("{} problem(s), stopped by {}", done.problems.len(), done.stopped_by);
//! # Ok(()) }
//! ```

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Duration;

use bench_journeys::{Cancel, Env, Gates, Journey, OpEvent, Report, RunRow, SuiteConfig};
use bench_rundir::{LifecycleEvent, Opened, RunKind, StopBy, files};
use bench_sim::SimServer;
use bench_transport::{Client, ClientConfig};
use serde::{Deserialize, Serialize};

use crate::hooks::{Hooks, Operation, RunEnd, RunStart};
use crate::spec::EmbeddedSim;
use crate::{CancelledBy, Canceller, Events, Notice, RunError, lifecycle};

/// The pack run when the spec names neither a pack nor a file.
pub const DEFAULT_PACK: &str = "openai";

/// All the journeys of a pack or file, and the declarative file (none for `openai`).
type Loaded = (
    Vec<Arc<dyn Journey>>,
    Option<bench_journeys::declarative::JourneyFile>,
);

/// A journeys suite: which journeys, against what, how many times, and its gates. Every field
/// has a default: `{}` is the `openai` pack against the embedded simulator. Unknown fields
/// are refused, naming them.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct JourneysSpec {
    /// A built-in pack (`openai`, `agent-sessions`); `None` with no `file`: `openai`.
    pub pack: Option<String>,
    /// Journeys from a declarative TOML file instead of a pack.
    pub file: Option<PathBuf>,
    /// Only these journeys, in this order (empty: all).
    pub journeys: Vec<String>,
    /// The server to time; `None`: the embedded simulator (the `openai` pack only).
    pub base_url: Option<String>,
    /// Timed operations per latency run (a journey's own cap may lower it).
    pub iterations: u32,
    /// Untimed operations before timing (their errors are ignored).
    pub warmup: u32,
    /// Operations in flight; above 1, concurrency-safe journeys run as throughput.
    pub concurrency: u32,
    /// Timed operations per throughput run.
    pub requests: u32,
    /// Repetitions of every journey.
    pub runs: u32,
    /// Per-request timeout.
    #[serde(with = "humantime_serde")]
    pub timeout: Duration,
    /// The embedded simulator's model (used only without `base_url`).
    pub sim: EmbeddedSim,
    /// Fail when a journey's mean req/s is below this.
    pub min_rps: Option<f64>,
    /// Fail when a journey's mean p50 is above this many ms.
    pub max_p50_ms: Option<f64>,
    /// Fail when a journey's mean p99 is above this many ms.
    pub max_p99_ms: Option<f64>,
    /// TLS trust and client certificate for an `https://` base URL.
    #[serde(skip_serializing_if = "bench_transport::TlsOptions::is_default")]
    pub tls: bench_transport::TlsOptions,
    /// The API the `openai` pack's generation journeys call (`chat` by default).
    pub endpoint: bench_transport::Endpoint,
    /// Cap on one event-stream line or event a server sends, in bytes (8 MiB): past it the
    /// operation fails as `response_too_large` and the rest is not read.
    pub max_event_bytes: u64,
    /// Cap on one response body, streamed or not, in bytes (64 MiB).
    pub max_response_bytes: u64,
    /// Cap on one answer read whole (a JSON body, a step's response), in bytes (8 MiB).
    pub max_json_bytes: u64,
    /// Values for the `[params]` of a declarative pack or file (e.g. the `agent-turns` pack's
    /// `runner_id` and `llm_url`). Recorded in `run.json` and the report: pass secrets as
    /// `{{env.NAME}}` in the file instead.
    #[serde(skip_serializing_if = "BTreeMap::is_empty")]
    pub params: BTreeMap<String, String>,
    /// Which shard of the suite's (journey, run) pairs this process plays and when it starts
    /// (`[placement]`: `shard`, `start_at`; not written when neither is set).
    #[serde(skip_serializing_if = "crate::placement::Placement::is_unset")]
    pub placement: crate::placement::Placement,
}

impl Default for JourneysSpec {
    fn default() -> Self {
        let s = SuiteConfig::default();
        JourneysSpec {
            pack: None,
            file: None,
            journeys: Vec::new(),
            base_url: None,
            iterations: s.iterations,
            warmup: s.warmup,
            concurrency: s.concurrency,
            requests: s.requests,
            runs: s.runs,
            timeout: Duration::from_secs(30),
            sim: EmbeddedSim::default(),
            min_rps: None,
            max_p50_ms: None,
            max_p99_ms: None,
            tls: bench_transport::TlsOptions::default(),
            endpoint: bench_transport::Endpoint::Chat,
            max_event_bytes: bench_transport::Limits::DEFAULT.max_event_bytes as u64,
            max_response_bytes: bench_transport::Limits::DEFAULT.max_response_bytes,
            max_json_bytes: bench_transport::Limits::DEFAULT.max_json_bytes as u64,
            params: BTreeMap::new(),
            placement: Default::default(),
        }
    }
}

impl JourneysSpec {
    /// The transport's size caps these settings give.
    pub fn response_caps(&self) -> bench_transport::Limits {
        bench_runner::Limits {
            max_event_bytes: self.max_event_bytes,
            max_response_bytes: self.max_response_bytes,
            max_json_bytes: self.max_json_bytes,
            ..bench_runner::Limits::default()
        }
        .response_caps()
    }
}

fn invalid(m: impl Into<String>) -> RunError {
    RunError::Invalid(m.into())
}

impl JourneysSpec {
    /// Where the journeys come from: the file's path or the pack's name.
    pub fn source(&self) -> String {
        match &self.file {
            Some(f) => f.display().to_string(),
            None => self.pack.clone().unwrap_or_else(|| DEFAULT_PACK.into()),
        }
    }

    /// Whether the suite runs against the embedded simulator (the `openai` pack, no
    /// `base_url`).
    pub fn is_embedded(&self) -> bool {
        self.base_url.is_none() && self.is_openai()
    }

    fn is_openai(&self) -> bool {
        self.file.is_none() && self.pack.as_deref().is_none_or(|p| p == DEFAULT_PACK)
    }

    /// The journeys of the pack or file, picked by `journeys` in that order. An unreadable or
    /// malformed file, an unknown pack, journey or parameter is [`RunError::Invalid`]; a
    /// parameter without a value is not (see [`JourneysSpec::validate`]).
    pub fn select(&self) -> Result<Vec<Arc<dyn Journey>>, RunError> {
        let (all, _) = self.load()?;
        bench_journeys::select(all, &self.journeys).map_err(RunError::Invalid)
    }

    /// The `[params]` of the declarative pack or file, with the values they get (empty for the
    /// `openai` pack).
    pub fn file_params(&self) -> Result<Vec<bench_journeys::declarative::Param>, RunError> {
        Ok(self
            .load()?
            .1
            .map(|f| f.params().to_vec())
            .unwrap_or_default())
    }

    /// All the journeys, and the declarative file they come from (none for `openai`).
    fn load(&self) -> Result<Loaded, RunError> {
        let parse = |name: &str, text: &str| {
            bench_journeys::declarative::parse_with(name, text, &self.params)
        };
        let file = match (&self.file, &self.pack) {
            (Some(_), Some(_)) => return Err(invalid("pack and file are exclusive: give one")),
            (Some(f), None) => {
                let bytes = std::fs::read(f)
                    .map_err(|e| invalid(format!("{}: cannot read it: {e}", f.display())))?;
                let text = String::from_utf8(bytes).map_err(|e| {
                    let b = e.as_bytes();
                    let what = if b.starts_with(b"\xFF\xFE") || b.starts_with(b"\xFE\xFF") {
                        "UTF-16 text (a UTF-16 byte order mark): a journeys file is UTF-8 \
                         TOML; convert it, e.g. iconv -f UTF-16 -t UTF-8"
                            .to_string()
                    } else {
                        format!(
                            "not UTF-8 text (invalid byte at offset {}): a journeys file is \
                             UTF-8 TOML",
                            e.utf8_error().valid_up_to()
                        )
                    };
                    invalid(format!("{}: {what}", f.display()))
                })?;
                parse(&f.display().to_string(), &text).map_err(|e| invalid(e.to_string()))?
            }
            (None, pack) => {
                let name = pack.as_deref().unwrap_or(DEFAULT_PACK);
                if name == DEFAULT_PACK {
                    if let Some(k) = self.params.keys().next() {
                        return Err(invalid(format!(
                            "unknown parameter {k:?}: the {name} pack takes no parameters"
                        )));
                    }
                    return Ok((bench_journeys::packs::openai::journeys(), None));
                }
                match bench_journeys::packs::file(name) {
                    Some((file_name, text)) => parse(file_name, text).map_err(|e| {
                        // An unknown parameter is the caller's mistake; anything else is ours.
                        if e.message.starts_with("unknown parameter") {
                            invalid(format!("the {name} pack: {}", e.message))
                        } else {
                            RunError::Failed(format!("the {name} pack: {e}"))
                        }
                    })?,
                    None => {
                        return Err(invalid(format!(
                            "unknown pack {name:?}; known: {}",
                            bench_journeys::packs::NAMES.join(", ")
                        )));
                    }
                }
            }
        };
        Ok((file.journeys(), Some(file)))
    }

    /// Checks every value; the first problem is one line naming the field.
    pub fn validate(&self) -> Result<(), RunError> {
        self.check().map(|_| ())
    }

    /// [`JourneysSpec::validate`], returning the selected journeys.
    fn check(&self) -> Result<Vec<Arc<dyn Journey>>, RunError> {
        let (all, file) = self.load()?;
        if let Some(m) = file.as_ref().and_then(|f| f.missing_params()) {
            return Err(invalid(format!("{}: {m}", self.source())));
        }
        let journeys = bench_journeys::select(all, &self.journeys).map_err(RunError::Invalid)?;
        for (field, v) in [
            ("runs", self.runs),
            ("iterations", self.iterations),
            ("requests", self.requests),
            ("concurrency", self.concurrency),
        ] {
            if v == 0 {
                return Err(invalid(format!("{field} must be at least 1")));
            }
        }
        if self.timeout.is_zero() {
            return Err(invalid("timeout must be positive"));
        }
        for (cap, name) in [
            (self.max_event_bytes, "max_event_bytes"),
            (self.max_response_bytes, "max_response_bytes"),
            (self.max_json_bytes, "max_json_bytes"),
        ] {
            if cap == 0 {
                return Err(invalid(format!("{name} must be at least 1 byte")));
            }
        }
        match &self.base_url {
            Some(u) => {
                let mut c = ClientConfig::new(u.as_str());
                c.tls = self.tls.clone();
                Client::new(c).map_err(|e| invalid(format!("base_url: {e}")))?;
            }
            None if !self.is_openai() => {
                return Err(invalid(format!(
                    "{}: base_url is required (only the openai pack has an embedded simulator)",
                    self.source()
                )));
            }
            None => self
                .sim
                .to_config(None)
                .validate()
                .map_err(|(field, what)| invalid(format!("sim {field} {what}")))?,
        }
        Ok(journeys)
    }

    /// The runners' settings.
    pub fn suite_config(&self) -> SuiteConfig {
        SuiteConfig {
            iterations: self.iterations,
            warmup: self.warmup,
            concurrency: self.concurrency.max(1),
            requests: self.requests,
            runs: self.runs,
            shard: self.placement.shard.map(|s| (s.index, s.count)),
        }
    }

    /// A digest of the spec without its shard and start time: the shards of one journeys
    /// run share it (`bench merge` checks).
    pub fn config_digest(&self) -> String {
        crate::spec::digest_without(self, &["placement"])
    }

    /// The gates.
    pub fn gates(&self) -> Gates {
        Gates {
            min_rps: self.min_rps,
            max_p50_ms: self.max_p50_ms,
            max_p99_ms: self.max_p99_ms,
        }
    }
}

/// Called after each run of a journey with its name and summary row.
pub type OnRun = Arc<dyn Fn(&str, &RunRow) + Send + Sync>;

/// What a journeys run needs that is never recorded in its directory.
#[derive(Clone, Default)]
pub struct JourneysOptions {
    /// The run directory; `None`: nothing is written.
    pub run_dir: Option<PathBuf>,
    /// Extra request headers (name, value); only the names are recorded.
    pub headers: Vec<(String, String)>,
    /// Headers whose values are secrets whatever their names (`--secret-header`; see
    /// [`crate::secrets`]).
    pub secret_headers: Vec<String>,
    /// Further values never to write or show (the environment's API keys, the secret
    /// headers' values and a declarative file's secrets are added by the run itself).
    pub secrets: crate::secrets::Secrets,
    /// Called at the start, per timed operation and at the end ([`crate::hooks`]).
    pub hooks: Vec<Arc<dyn Hooks>>,
    /// Called after each run of a journey (on the suite's task: keep it quick).
    pub on_run: Option<OnRun>,
    /// Where notices go (default: nowhere): the line saying what runs against what.
    pub notices: Option<Arc<dyn Fn(Notice) + Send + Sync>>,
}

impl std::fmt::Debug for JourneysOptions {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("JourneysOptions")
            .field("run_dir", &self.run_dir)
            .field(
                "header_names",
                &self.headers.iter().map(|(k, _)| k).collect::<Vec<_>>(),
            )
            .field("secret_headers", &self.secret_headers)
            .field("hooks", &self.hooks.len())
            .field("on_run", &self.on_run.is_some())
            .finish_non_exhaustive()
    }
}

/// A journeys run in progress.
pub type JourneysHandle = crate::handle::Handle<JourneysReport>;

impl JourneysHandle {
    /// The run directory (`None`: nothing is written).
    pub fn dir(&self) -> Option<&Path> {
        (!self.dir.as_os_str().is_empty()).then_some(self.dir.as_path())
    }
}

/// How a journeys run ended.
#[derive(Debug, Clone)]
pub struct JourneysReport {
    /// The run directory (`None`: nothing was written).
    pub dir: Option<PathBuf>,
    /// The report (`report.json`).
    pub report: Report,
    /// Why it did not pass, one line each: setup failures, runs whose every operation failed,
    /// gate breaches, then a cancel (`cancelled: the report covers what ran`). Empty: passed.
    pub problems: Vec<String>,
    /// `completed`, `cancelled` or `signal`.
    pub stopped_by: StopBy,
}

impl JourneysReport {
    /// No setup failed, every gate held and the suite was not cancelled.
    pub fn passed(&self) -> bool {
        self.problems.is_empty()
    }
}

fn write_json(
    path: &Path,
    v: &impl Serialize,
    secrets: &crate::secrets::Secrets,
) -> Result<(), RunError> {
    let text = crate::secrets::to_pretty_json(v, secrets)
        .map_err(|e| RunError::Failed(format!("cannot encode {}: {e}", path.display())))?;
    std::fs::write(path, text + "\n")
        .map_err(|e| RunError::Failed(format!("cannot write {}: {e}", path.display())))
}

/// Starts the journeys suite `spec` (validated first: a bad spec writes nothing).
pub async fn start_journeys(
    spec: JourneysSpec,
    mut options: JourneysOptions,
) -> Result<JourneysHandle, RunError> {
    let mut secrets =
        crate::secrets::run_secrets(&options.headers, &options.secret_headers, &options.secrets);
    if let Ok((_, Some(file))) = spec.load() {
        secrets.extend(file.secrets());
    }
    if let Some(url) = &spec.base_url {
        secrets.add_url_credentials(url);
    }
    options.secrets = secrets.clone();
    options.notices = crate::secrets::scrubbing_notices(options.notices.take(), &secrets);
    start_checked(spec, options)
        .await
        .map_err(|e| e.scrub(&secrets))
}

/// [`start_journeys`], `options.secrets` complete.
async fn start_checked(
    spec: JourneysSpec,
    options: JourneysOptions,
) -> Result<JourneysHandle, RunError> {
    let journeys = spec.check()?;
    spec.placement.check(time::OffsetDateTime::now_utc())?;
    let cfg = spec.suite_config();
    // One descriptor per operation in flight (two with the embedded simulator) and slack.
    lifecycle::ensure_open_files(
        Some(u64::from(cfg.concurrency) * 2 + 256),
        &format!(
            "a journeys run with {} operations in flight",
            cfg.concurrency
        ),
    )?;
    let embedded = match &spec.base_url {
        Some(_) => None,
        None => Some(
            SimServer::start(spec.sim.to_config(None))
                .await
                .map_err(|e| invalid(e.to_string()))?,
        ),
    };
    match prepare(&spec, &options, &journeys, embedded.as_ref()) {
        Ok((env, events)) => Ok(spawn(spec, options, journeys, env, events, embedded)),
        Err(e) => {
            if let Some(s) = embedded {
                s.shutdown().await;
            }
            Err(e)
        }
    }
}

/// The client, and the run directory with `run.json` and `run.started` when there is one.
fn prepare(
    spec: &JourneysSpec,
    options: &JourneysOptions,
    journeys: &[Arc<dyn Journey>],
    embedded: Option<&SimServer>,
) -> Result<(Env, Arc<Events>), RunError> {
    let base_url = match (embedded, &spec.base_url) {
        (Some(s), _) => s.base_url(),
        (None, Some(u)) => u.clone(),
        (None, None) => return Err(RunError::Failed("no server to time".into())),
    };
    let mut ccfg = ClientConfig::new(base_url);
    ccfg.headers = options.headers.clone();
    ccfg.secrets = options.secrets.clone();
    ccfg.timeout = spec.timeout;
    ccfg.limits = spec.response_caps();
    if embedded.is_none() {
        ccfg.tls = spec.tls.clone();
        if let (true, Some(f)) = (spec.tls.insecure, &options.notices) {
            f(Notice::Warning(crate::INSECURE_WARNING.into()));
        }
    }
    let client = Client::new(ccfg).map_err(|e| invalid(e.to_string()))?;
    let events = match &options.run_dir {
        Some(dir) => {
            std::fs::create_dir_all(dir)
                .map_err(|e| RunError::Failed(format!("cannot create {}: {e}", dir.display())))?;
            write_json(
                &dir.join(files::RUN_JSON),
                &crate::run_json::JourneysRunJson {
                    kind: RunKind::Journeys,
                    spec: spec.clone(),
                    tool_version: env!("CARGO_PKG_VERSION").into(),
                    pid: Some(std::process::id()),
                    base_url: client.base_url(),
                    header_names: options.headers.iter().map(|(k, _)| k.clone()).collect(),
                    plan_digest: journeys_digest(journeys, spec.runs),
                    config_digest: spec.config_digest(),
                    shard: spec.placement.shard.map(|s| {
                        let n = u64::from(bench_journeys::suite::plays_in_shard(
                            journeys.len(),
                            spec.runs,
                            Some((s.index, s.count)),
                        ));
                        bench_workload::shard::ShardInfo {
                            index: s.index,
                            count: s.count,
                            sessions: n,
                            turns: n,
                            planned_tokens: 0,
                        }
                    }),
                    merged: None,
                },
                &options.secrets,
            )?;
            Events::open(dir).map_err(|e| RunError::Failed(format!("cannot write {e}")))?
        }
        None => Events::in_memory(),
    }
    .with_secrets(options.secrets.clone());
    let pid = std::process::id();
    events.emit(LifecycleEvent::Started(Opened {
        pid: Some(pid),
        host: Some(lifecycle::host()),
        process_start_utc: lifecycle::process_start_utc(pid),
        ..Opened::default()
    }));
    Ok((
        Env::new(client).with_endpoint(spec.endpoint),
        Arc::new(events),
    ))
}

/// The journeys in suite order and their run count: what a journeys run's shards partition.
fn journeys_digest(journeys: &[Arc<dyn Journey>], runs: u32) -> String {
    let mut h = xxhash_rust::xxh3::Xxh3::new();
    h.update(&runs.to_le_bytes());
    for j in journeys {
        h.update(&(j.name().len() as u64).to_le_bytes());
        h.update(j.name().as_bytes());
    }
    format!("{:032x}", h.digest128())
}

fn spawn(
    spec: JourneysSpec,
    options: JourneysOptions,
    journeys: Vec<Arc<dyn Journey>>,
    env: Env,
    events: Arc<Events>,
    embedded: Option<SimServer>,
) -> JourneysHandle {
    let canceller = Canceller::default();
    let dir = options.run_dir.clone().unwrap_or_default();
    let handle_secrets = options.secrets.clone();
    let source = spec.source();
    if let Some(f) = &options.notices {
        f(Notice::Info(format!(
            "bench journeys: {} journey(s) from {source} against {}{} ({} run(s))",
            journeys.len(),
            env.client.base_url(),
            if embedded.is_some() {
                " (embedded simulator)"
            } else {
                ""
            },
            spec.runs
        )));
    }
    let (c, ev) = (canceller.clone(), events.clone());
    let task = tokio::spawn(async move {
        let cfg = spec.suite_config();
        let dir_path = options.run_dir.clone().unwrap_or_default();
        let kind = RunKind::Journeys.as_str();
        // A hook that panics is reported once and never fails the run (as in a replay).
        let warned = AtomicBool::new(false);
        let guard = |what: &str, f: &dyn Fn()| {
            if let Err(p) = std::panic::catch_unwind(std::panic::AssertUnwindSafe(f)) {
                if !warned.swap(true, Ordering::SeqCst) {
                    if let Some(n) = &options.notices {
                        n(Notice::Warning(format!(
                            "a hook panicked in {what}: {}; the run goes on (further panics are \
                             not reported)",
                            crate::hooks::panic_message(&*p)
                        )));
                    }
                }
            }
        };
        for h in &options.hooks {
            guard("on_start", &|| {
                h.on_start(&RunStart {
                    dir: &dir_path,
                    kind,
                })
            });
        }
        let hooks = &options.hooks;
        let secrets = &options.secrets;
        let on_op = |op: &OpEvent<'_>| {
            let failure = op.failure_reason().map(|r| secrets.scrub(r));
            let o = Operation {
                journey: op.journey,
                run: op.run,
                latency_ms: op.latency_ms(),
                failure: failure.as_deref(),
            };
            for h in hooks {
                guard("on_operation", &|| h.on_operation(&o));
            }
        };
        let on_run = |name: &str, row: &RunRow| {
            if let Some(f) = &options.on_run {
                f(name, &secrets.scrub_value(row.clone()));
            }
        };
        // `--start-at`: wait for it, a cancel ending the wait.
        let notice = |n| {
            if let Some(f) = &options.notices {
                f(n);
            }
        };
        spec.placement
            .wait("bench journeys", &c.token, notice)
            .await;
        // The suite's own cancel, set by the run's.
        let cancel = Cancel::new();
        let bridge = tokio::spawn({
            let (token, cancel) = (c.token.clone(), cancel.clone());
            async move {
                token.cancelled().await;
                cancel.cancel();
            }
        });
        if c.token.is_cancelled() {
            cancel.cancel();
        }
        let results =
            bench_journeys::run_suite_observed(&journeys, &env, &cfg, &cancel, on_run, &on_op)
                .await;
        bridge.abort();
        if let Some(s) = embedded {
            s.shutdown().await;
        }
        // Every journey ran every run to its last operation, or the cancel cut the suite.
        let played: u32 = results.values().map(|j| j.runs.len() as u32).sum();
        let planned = bench_journeys::suite::plays_in_shard(journeys.len(), cfg.runs, cfg.shard);
        let cut = played < planned || results.values().flat_map(|j| &j.runs).any(|r| r.cancelled);
        let modes: serde_json::Map<String, serde_json::Value> = journeys
            .iter()
            .map(|j| {
                let mode = bench_journeys::mode_of(j.as_ref(), &cfg);
                (j.name().to_owned(), mode.as_str().into())
            })
            .collect();
        let config = serde_json::json!({
            "source": source,
            "base_url": env.client.base_url(),
            "embedded_simulator": spec.is_embedded(),
            "iterations": cfg.iterations,
            "warmup": cfg.warmup,
            "concurrency": cfg.concurrency,
            "requests": cfg.requests,
            "runs": cfg.runs,
            "timeout_s": spec.timeout.as_secs_f64(),
            "modes": modes,
        });
        let git_sha = tokio::task::spawn_blocking(bench_journeys::suite::git_sha)
            .await
            .unwrap_or_default();
        let report = secrets.scrub_value(bench_journeys::suite::report(
            results,
            config,
            git_sha,
            bench_journeys::suite::host_info(&lifecycle::host()),
        ));
        let mut problems = report.setup_failures();
        problems.extend(report.all_failed());
        problems.extend(spec.gates().check(&report));
        let (stopped_by, reason) = if cut {
            let by = match c.by() {
                CancelledBy::Signal => StopBy::Signal,
                CancelledBy::Caller => StopBy::Cancelled,
            };
            problems.push(match by {
                StopBy::Signal => "cancelled (signal): the report covers what ran".to_owned(),
                _ => "cancelled: the report covers what ran".to_owned(),
            });
            (
                by,
                format!("cancelled after {played} of {planned} journey runs"),
            )
        } else {
            (
                StopBy::Completed,
                format!("all {planned} journey runs were played"),
            )
        };
        let problems: Vec<String> = problems
            .iter()
            .map(|p| secrets.scrub(p).into_owned())
            .collect();
        if let Some(d) = &options.run_dir {
            write_json(&d.join(files::JOURNEYS_REPORT), &report, secrets)?;
        }
        ev.emit(LifecycleEvent::Stopped {
            by: stopped_by,
            reason: reason.clone(),
        });
        for h in &options.hooks {
            guard("on_end", &|| {
                h.on_end(&RunEnd {
                    dir: &dir_path,
                    stopped_by,
                    reason: &reason,
                    grades: &[],
                })
            });
        }
        Ok(JourneysReport {
            dir: options.run_dir.clone(),
            report,
            problems,
            stopped_by,
        })
    });
    JourneysHandle {
        dir,
        events,
        progress: None,
        canceller,
        task,
        secrets: handle_secrets,
    }
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use super::*;

    #[test]
    fn an_empty_object_is_the_openai_pack_against_the_simulator() {
        let s: JourneysSpec = serde_json::from_str("{}").unwrap();
        assert_eq!(s, JourneysSpec::default());
        s.validate().unwrap();
        assert!(s.is_embedded());
        assert_eq!(s.source(), "openai");
        assert_eq!(s.suite_config(), SuiteConfig::default());
        assert_eq!(s.timeout, Duration::from_secs(30));
        let s: JourneysSpec =
            serde_json::from_str(r#"{"timeout": "2m", "journeys": ["stream_ttft"], "runs": 3}"#)
                .unwrap();
        assert_eq!(s.timeout, Duration::from_secs(120));
        assert_eq!(s.select().unwrap().len(), 1);
        let back: JourneysSpec = serde_json::from_value(serde_json::to_value(&s).unwrap()).unwrap();
        assert_eq!(back, s);
        let e = serde_json::from_str::<JourneysSpec>(r#"{"iteration": 3}"#).unwrap_err();
        assert!(e.to_string().contains("unknown field `iteration`"), "{e}");
    }

    #[test]
    fn bad_values_are_one_line_naming_the_field() {
        let bad = |s: JourneysSpec| match s.validate() {
            Err(RunError::Invalid(m)) => m,
            other => panic!("{other:?}"),
        };
        let m = bad(JourneysSpec {
            pack: Some("agent-sessions".into()),
            ..JourneysSpec::default()
        });
        assert_eq!(
            m,
            "agent-sessions: base_url is required (only the openai pack has an embedded simulator)"
        );
        let m = bad(JourneysSpec {
            pack: Some("openai".into()),
            file: Some("x.toml".into()),
            ..JourneysSpec::default()
        });
        assert!(m.contains("pack and file"), "{m}");
        let m = bad(JourneysSpec {
            concurrency: 0,
            ..JourneysSpec::default()
        });
        assert_eq!(m, "concurrency must be at least 1");
        let m = bad(JourneysSpec {
            timeout: Duration::ZERO,
            ..JourneysSpec::default()
        });
        assert_eq!(m, "timeout must be positive");
        let m = bad(JourneysSpec {
            base_url: Some("ftp://example.invalid".into()),
            ..JourneysSpec::default()
        });
        assert!(m.starts_with("base_url: "), "{m}");
        let m = bad(JourneysSpec {
            base_url: Some("https://example.invalid".into()),
            tls: bench_transport::TlsOptions {
                ca_cert: Some("/nonexistent/ca.pem".into()),
                ..bench_transport::TlsOptions::default()
            },
            ..JourneysSpec::default()
        });
        assert!(m.contains("--ca-cert /nonexistent/ca.pem"), "{m}");
        let m = bad(JourneysSpec {
            file: Some("/nonexistent/journeys.toml".into()),
            base_url: Some("http://127.0.0.1:9".into()),
            ..JourneysSpec::default()
        });
        assert!(
            m.starts_with("/nonexistent/journeys.toml: cannot read it: "),
            "{m}"
        );
    }
}
