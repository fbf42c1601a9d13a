//! `bench-run`: a whole benchmark run as a library — the one code path behind `bench run`,
//! an embedding program and the control plane.
//!
//! [`start`] takes a [`RunSpec`] (serializable, validated: the schema of `run.json`'s `spec`)
//! and [`RunOptions`] (what is never recorded: header values, observers, where notices go),
//! and does everything a run is: plans the workload, starts the embedded simulator when there
//! is no server, waits for the server to be ready and reads its model and window, detects its
//! family, flushes its cache if asked, creates the run directory (`run.json`, `events.jsonl`,
//! `turns.jsonl`, `sessions.jsonl`, `scrapes.jsonl`, `result.json`; one schema, in
//! [`bench_rundir`]), scrapes `/metrics`, writes heartbeats, replays the plan with
//! [`bench_runner`], classifies the stop and computes the result. [`resume()`] finishes a run
//! that crashed or was stopped, from its directory alone.
//!
//! ```no_run
//! # async fn demo() -> Result<(), bench_run::RunError> {
//! let handle = bench_run::start(bench_run::RunSpec::default(), bench_run::RunOptions::default()).await?;
//! println!("{}", handle.progress().turns_done);
//! let report = handle.wait().await?;
//! println!("{} → {}", report.dir.display(), report.stopped_by);
//! # Ok(()) }
//! ```

pub mod cpu;
pub mod events;
pub mod graders;
mod handle;
pub mod hooks;
pub mod journeys;
pub mod lifecycle;
pub mod merge;
mod options;
pub mod placement;
pub mod probe;
pub mod progress;
pub mod report;
pub mod resume;
pub mod run_json;
pub mod scrape;
pub mod secrets;
pub mod server;
pub mod spec;
pub mod specfile;
pub mod stop;
pub mod sweep;

use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::Duration;

use bench_report::export::LineContext;
use bench_rundir::{LifecycleEvent, Opened, TurnStatus, files};
use bench_runner::Observer;
use bench_sim::SimServer;
pub use bench_transport::TlsOptions;
use bench_transport::{Client, ClientConfig};

/// The one warning line `--insecure` prints (and its runs record `tls.insecure` in `run.json`).
pub const INSECURE_WARNING: &str = "--insecure: the server's TLS certificate is not verified (the connection is encrypted but not authenticated)";
use bench_workload::plan::Plan;
use serde::Serialize;

pub use events::{EventStream, Events, Received, RunDirWriter};
pub use graders::GradersSpec;
pub use handle::{Canceller, Handle, RunHandle, RunReport, gate};
pub use options::{Notice, RunError, RunOptions};
pub use progress::{ProgressCounters, Snapshot};
pub use spec::{
    BackendChoice, DEFAULT_CONCURRENCY, EmbeddedSim, Exports, Judge, Limits, Load, RequestShape,
    RunSpec, Scraping, SimLatency, Target,
};
pub use stop::CancelledBy;

/// How often `events.jsonl` gets a `heartbeat`.
pub const HEARTBEAT_EVERY: Duration = Duration::from_secs(5);

/// Starts a new run of `spec`.
pub async fn start(spec: RunSpec, mut options: RunOptions) -> Result<RunHandle, RunError> {
    options.secrets =
        secrets::run_secrets(&options.headers, &options.secret_headers, &options.secrets);
    let s = options.secrets.clone();
    spec.validate().map_err(|e| e.scrub(&s))?;
    launch(spec, options, None).await.map_err(|e| e.scrub(&s))
}

/// Finishes the run in `dir` that crashed or was stopped, with the spec its `run.json` holds
/// (see [`resume`](mod@resume) for the rules). `options.headers` must name every header the
/// run sent; `options.run_dir` is ignored.
pub async fn resume(dir: &Path, mut options: RunOptions) -> Result<RunHandle, RunError> {
    let s = secrets::run_secrets(&options.headers, &options.secret_headers, &options.secrets);
    let names: Vec<String> = options.headers.iter().map(|(k, _)| k.clone()).collect();
    let r = resume::read(dir, &names).map_err(|e| e.scrub(&s))?;
    // The headers the run recorded as secret are secret in this segment too.
    if let Target::Url {
        secret_header_names,
        ..
    } = &r.run_json.spec.target
    {
        options
            .secret_headers
            .extend(secret_header_names.iter().cloned());
    }
    options.secrets =
        secrets::run_secrets(&options.headers, &options.secret_headers, &options.secrets);
    let s = options.secrets.clone();
    let spec = r.run_json.spec.clone();
    spec.validate().map_err(|e| e.scrub(&s))?;
    launch(spec, options, Some(r))
        .await
        .map_err(|e| e.scrub(&s))
}

/// A new run never writes into the directory of another: its records would mix with theirs.
fn refuse_existing_run(dir: &Path) -> Result<(), RunError> {
    if dir.join(files::RUN_JSON).exists() {
        return Err(RunError::Invalid(format!(
            "run directory {} already holds a run (run.json): give a new --run-dir, or finish \
             that run with --resume",
            dir.display()
        )));
    }
    if dir.exists() && !dir.is_dir() {
        return Err(RunError::Invalid(format!(
            "run directory {} is not a directory",
            dir.display()
        )));
    }
    Ok(())
}

/// The files a run writes outside its directory must be writable where they are named: found
/// out before the run, not after it.
fn check_exports(exports: &spec::Exports) -> Result<(), RunError> {
    for (flag, path) in [
        ("--output", &exports.result_line),
        ("--csv", &exports.turns_csv),
    ] {
        let Some(path) = path else { continue };
        if path.is_dir() {
            return Err(RunError::Invalid(format!(
                "{flag} {}: is a directory (name a file)",
                path.display()
            )));
        }
        let parent = path
            .parent()
            .filter(|p| !p.as_os_str().is_empty())
            .unwrap_or(Path::new("."));
        if !parent.is_dir() {
            return Err(RunError::Invalid(format!(
                "{flag} {}: no such directory {}",
                path.display(),
                parent.display()
            )));
        }
    }
    Ok(())
}

fn default_run_dir() -> PathBuf {
    let now = time::OffsetDateTime::now_utc();
    let stamp = now
        .format(&time::macros::format_description!(
            "[year][month][day]T[hour][minute][second]Z"
        ))
        .unwrap_or_else(|_| "run".into());
    PathBuf::from("runs").join(format!("{stamp}-{}", std::process::id()))
}

/// Writes `v` as pretty JSON, every secret in its strings replaced.
fn write_json(path: &Path, v: &impl Serialize, s: &secrets::Secrets) -> Result<(), RunError> {
    let text = secrets::to_pretty_json(v, s)
        .map_err(|e| RunError::Failed(format!("cannot encode {}: {e}", path.display())))?;
    std::fs::write(path, text + "\n")
        .map_err(|e| RunError::Failed(format!("cannot write {}: {e}", path.display())))
}

async fn build_plan(spec: &RunSpec, options: &RunOptions) -> Result<Plan, RunError> {
    let mut pcfg = spec.plan.clone();
    pcfg.progress = options.plan_progress.clone();
    tokio::task::spawn_blocking(move || bench_workload::plan::build_plan(pcfg))
        .await
        .map_err(|e| RunError::Failed(format!("planning failed: {e}")))?
        .map_err(|e| RunError::Invalid(e.to_string()))
}

/// `options.secrets` is the run's whole set ([`secrets::run_secrets`]).
async fn launch(
    mut spec: RunSpec,
    mut options: RunOptions,
    mut resume: Option<resume::Resume>,
) -> Result<RunHandle, RunError> {
    options.notices = secrets::scrubbing_notices(options.notices.take(), &options.secrets);
    check_inputs(&mut spec, &options, resume.is_some())?;
    let grading = hooks::Grading::new(&spec.graders, &options)?;
    let (plan, identity) = plan_run(&mut spec, &options, resume.as_ref()).await?;
    check_limits(&spec, &plan, &options)?;
    let (embedded, base_url, ready_timeout) = start_target(&spec, &options).await?;
    let prepared = prepare(
        &spec,
        &options,
        plan,
        Identity {
            plan_digest: &identity.0,
            shard: identity.1,
        },
        &base_url,
        ready_timeout,
        resume.as_mut(),
    )
    .await;
    let prepared = match prepared {
        Ok(p) => p,
        Err(e) => {
            if let Some(s) = embedded {
                s.shutdown().await;
            }
            return Err(e);
        }
    };
    Ok(prepared.spawn(spec, options, resume, embedded, grading))
}

/// Launch stage 1, before anything is planned: a new run's directory is not a run's already,
/// the export files can be written, `--start-at` is not past; a new run records the names of
/// its headers (never their values).
fn check_inputs(spec: &mut RunSpec, options: &RunOptions, resuming: bool) -> Result<(), RunError> {
    if !resuming {
        if let Some(dir) = &options.run_dir {
            refuse_existing_run(dir)?;
        }
    }
    check_exports(&spec.exports)?;
    if resuming {
        return Ok(());
    }
    spec.placement.check(time::OffsetDateTime::now_utc())?;
    if let Target::Url {
        header_names,
        secret_header_names,
        ..
    } = &mut spec.target
    {
        *header_names = options.headers.iter().map(|(k, _)| k.clone()).collect();
        *secret_header_names = options.secret_headers.clone();
    }
    Ok(())
}

/// Launch stage 2: the plan, its digest (of the whole plan), this shard's part of it, a trace
/// arrival's rate, and for a resume the sessions still to play.
async fn plan_run(
    spec: &mut RunSpec,
    options: &RunOptions,
    resume: Option<&resume::Resume>,
) -> Result<(Plan, (String, Option<bench_workload::shard::ShardInfo>)), RunError> {
    let mut plan = build_plan(spec, options).await?;
    let plan_digest = bench_workload::shard::plan_digest(&plan);
    let shard = spec
        .placement
        .shard
        .map(|s| bench_workload::shard::keep_shard(&mut plan, s));
    if let (Some(s), Some(info)) = (spec.placement.shard, shard) {
        if info.sessions == 0 {
            return Err(RunError::Invalid(format!(
                "--shard {s}: this shard has no session (the plan has {} for {} shards): use \
                 fewer shards or a larger pool (--num-sessions)",
                plan.summary.sessions, s.count
            )));
        }
    }
    if let Load::Open { arrival, .. } = &mut spec.load {
        if let bench_runner::ArrivalProcess::Trace { time_scale } = arrival.process {
            let rate = trace_rate(&plan, time_scale)?;
            if arrival.rate <= 0.0 {
                arrival.rate = rate;
            }
        }
    }
    if let Some(r) = resume {
        // The same plan, less the sessions already finished.
        r.check_plan(plan.summary.sessions, plan.summary.turns)?;
        plan.sessions.retain(|s| !r.kept_ids.contains(&*s.id));
    }
    Ok((plan, (plan_digest, shard)))
}

/// Launch stage 3: the process's descriptor and port limits fit the sessions in flight.
///
/// A session in a request holds a connection: a descriptor (two with the embedded simulator,
/// which holds the other end) and a local port. A run whose sessions are all in a request
/// together must fit both; one with tool waits between requests holds far fewer than it has
/// sessions, and is warned instead.
fn check_limits(spec: &RunSpec, plan: &Plan, options: &RunOptions) -> Result<(), RunError> {
    let all_at_once = match spec.load {
        Load::Closed { ramp_up, .. } => {
            ramp_up.is_none_or(|r| r.is_zero()) || plan.summary.total_tool_wait_s <= 0.0
        }
        Load::Open { .. } => false,
    };
    let fds_per_session = if spec.is_embedded() { 2 } else { 1 };
    let in_flight = spec.load.in_flight();
    let what = format!(
        "a run with {} sessions in flight",
        in_flight.map_or_else(|| "unbounded".into(), |c| c.to_string())
    );
    let need = in_flight.map(|c| u64::from(c) * fds_per_session + 256);
    if all_at_once {
        lifecycle::ensure_open_files(need, &what)?;
    } else if let Err(RunError::Invalid(e)) = lifecycle::ensure_open_files(need, &what) {
        options.notice(Notice::Warning(format!(
            "{e}; with tool waits only the sessions in a request hold a connection, but a \
             burst of more requests at once than the limit allows will fail to connect"
        )));
    }
    let target = match &spec.target {
        Target::Url { base_url, .. } => host_port(base_url).to_owned(),
        Target::Embedded(_) => "the embedded simulator".to_owned(),
    };
    if let Some(w) = lifecycle::check_ephemeral_ports(in_flight, all_at_once, &target)? {
        options.notice(Notice::Warning(w));
    }
    Ok(())
}

/// Launch stage 4: the server, its URL and how long to wait for it to be ready; the embedded
/// simulator is started here.
async fn start_target(
    spec: &RunSpec,
    options: &RunOptions,
) -> Result<(Option<SimServer>, String, Duration), RunError> {
    Ok(match &spec.target {
        Target::Url {
            base_url,
            ready_timeout,
            tls,
            ..
        } => {
            if tls.insecure {
                options.notice(Notice::Warning(INSECURE_WARNING.into()));
            }
            (None, base_url.clone(), *ready_timeout)
        }
        Target::Embedded(sim) => {
            let server = SimServer::start(sim.to_config(spec.request.model.as_deref()))
                .await
                .map_err(|e| RunError::Invalid(e.to_string()))?;
            let url = server.base_url();
            (Some(server), url, Duration::from_secs(60))
        }
    })
}

/// What names the run's plan and part of it, for `run.json`.
struct Identity<'a> {
    plan_digest: &'a str,
    shard: Option<bench_workload::shard::ShardInfo>,
}

/// `host:port` of a base URL (no scheme, credentials or path).
fn host_port(url: &str) -> &str {
    let rest = url.split_once("://").map_or(url, |(_, r)| r);
    let authority = rest.split('/').next().unwrap_or(rest);
    authority.rsplit_once('@').map_or(authority, |(_, h)| h)
}

/// Trace arrivals: every session needs a recorded start; the trace's mean session rate, as
/// played (`time_scale` applied).
fn trace_rate(plan: &Plan, time_scale: f64) -> Result<f64, RunError> {
    let mut starts = Vec::with_capacity(plan.sessions.len());
    for s in &plan.sessions {
        match s.turns.iter().find_map(|t| t.timestamp_ms) {
            Some(ts) => starts.push(ts),
            None => {
                return Err(RunError::Invalid(format!(
                    "--arrival trace: session {} has no recorded time (timestamp_ms); timed \
                     traces come from `bench import mooncake` or `bench import lmcache`",
                    s.id
                )));
            }
        }
    }
    let (lo, hi) = starts
        .iter()
        .fold((f64::INFINITY, f64::NEG_INFINITY), |(lo, hi), &t| {
            (lo.min(t), hi.max(t))
        });
    let span_s = (hi - lo) / 1000.0 * time_scale;
    let n = starts.len() as f64;
    Ok(if n > 1.0 && span_s > 0.0 {
        (n - 1.0) / span_s
    } else {
        n.max(1.0)
    })
}

/// Everything set up, before the engine starts.
struct Prepared {
    dir: PathBuf,
    plan: Arc<Plan>,
    client: Client,
    scrape_client: Client,
    cfg: bench_runner::RunConfig,
    events: Arc<Events>,
    writer: Arc<RunDirWriter>,
    turns_to_play: u64,
    /// `run.json` as written (secrets scrubbed): `result.json`'s `config`.
    config_echo: serde_json::Value,
}

#[allow(clippy::too_many_arguments)]
async fn prepare(
    spec: &RunSpec,
    options: &RunOptions,
    plan: Plan,
    identity: Identity<'_>,
    base_url: &str,
    ready_timeout: Duration,
    resume: Option<&mut resume::Resume>,
) -> Result<Prepared, RunError> {
    let mut ccfg = ClientConfig::new(base_url);
    ccfg.headers = options.headers.clone();
    ccfg.secrets = options.secrets.clone();
    ccfg.timeout = spec.limits.turn_timeout;
    ccfg.limits = spec.limits.response_caps();
    if let Target::Url { tls, .. } = &spec.target {
        ccfg.tls = tls.clone();
    }
    // Readiness, detection, the cache flush and scrapes use connections of their own, never
    // the workers': each worker's first turn opens its connection (and pays its TLS
    // handshake) as a user's first request would.
    let scrape_client = Client::new(ccfg.clone()).map_err(|e| RunError::Invalid(e.to_string()))?;
    let client = Client::new(ccfg).map_err(|e| RunError::Invalid(e.to_string()))?;
    let found = server::wait_ready(&scrape_client, ready_timeout).await?;
    let model = match (&spec.request.model, &found.model) {
        (Some(m), _) | (None, Some(m)) => m.clone(),
        (None, None) => {
            return Err(RunError::Failed(
                "GET /v1/models listed no model (pass --model)".into(),
            ));
        }
    };
    let max_model_len = spec.request.max_model_len.or(found.max_model_len);
    let detected = server::detect(&scrape_client, &found).await;
    // Shards on several hosts: how this host's clock stands against the server's.
    let clock = if spec.placement != placement::Placement::default() {
        server::clock_offset(&scrape_client).await
    } else {
        None
    };
    let backend = match spec.backend {
        BackendChoice::Named(b) => {
            if b != detected.backend {
                options.notice(Notice::Warning(format!(
                    "--backend {} but the server looks like {} ({}); using {}",
                    b.name(),
                    detected.backend.name(),
                    detected.evidence,
                    b.name()
                )));
            }
            b
        }
        BackendChoice::Auto => detected.backend,
    };
    let mut cfg = spec.run_config(model, max_model_len, backend);

    let dir = match &resume {
        Some(r) => r.dir.clone(),
        None => options.run_dir.clone().unwrap_or_else(default_run_dir),
    };
    std::fs::create_dir_all(&dir)
        .map_err(|e| RunError::Failed(format!("cannot create {}: {e}", dir.display())))?;
    if spec.flush_cache {
        let path = server::flush_cache(&scrape_client, backend).await?;
        options.notice(Notice::Info(format!(
            "bench run: prefix cache flushed (POST {path})"
        )));
    }
    // A resumed run keeps its run.json; its records now say what is kept.
    let run_json = match &resume {
        Some(r) => r.run_json.clone(),
        None => {
            let doc = run_json::ReplayRunJson {
                spec: spec.clone(),
                tool_version: env!("CARGO_PKG_VERSION").into(),
                pid: Some(std::process::id()),
                base_url: client.base_url(),
                model: cfg.model.clone(),
                max_model_len,
                backend,
                backend_detected: detected,
                auth: bench_transport::Auth::from_env().describe().into(),
                plan: plan.summary.clone(),
                run: cfg.clone(),
                plan_digest: identity.plan_digest.to_owned(),
                config_digest: spec.config_digest(),
                shard: identity.shard,
                clock,
                merged: None,
            };
            write_json(&dir.join(files::RUN_JSON), &doc, &options.secrets)?;
            doc
        }
    };
    let events = Arc::new(
        Events::open(&dir)
            .map_err(|e| RunError::Failed(format!("cannot write {e}")))?
            .with_secrets(options.secrets.clone()),
    );
    let pid = std::process::id();
    let opened = Opened {
        pid: Some(pid),
        host: Some(lifecycle::host()),
        process_start_utc: lifecycle::process_start_utc(pid),
        // A shard plans its part of the plan.
        sessions_planned: Some(identity.shard.map_or(plan.summary.sessions, |s| s.sessions)),
        turns_planned: Some(identity.shard.map_or(plan.summary.turns, |s| s.turns)),
        concurrency: Some(cfg.concurrency),
        rate: cfg.arrival.map(|a| a.rate),
        warmup_sessions: Some(cfg.warmup_sessions),
        duration_s: cfg.limits.duration.map(|d| d.as_secs_f64()),
        max_duration_s: cfg.limits.max_duration.map(|d| d.as_secs_f64()),
    };
    match resume {
        Some(r) => {
            r.apply()?;
            if !r.replay_warmup {
                cfg.warmup_sessions = 0;
            }
            cfg.time_origin = r.time_origin;
            for line in &r.repairs {
                options.notice(Notice::Warning(line.clone()));
            }
            options.notice(Notice::Info(format!(
                "bench run: resuming {}: {} sessions kept, {} played again from their first \
                 turn ({} turn records superseded){}",
                dir.display(),
                r.kept_ids.len(),
                r.restarted,
                r.superseded_turns,
                if r.replay_warmup {
                    "; the warmup is played again"
                } else {
                    ""
                }
            )));
            events.emit(LifecycleEvent::Resumed(r.event(opened)));
        }
        None => events.emit(LifecycleEvent::Started(opened)),
    }
    // What this process plays (a resumed run: the sessions not kept).
    let turns_to_play: u64 = plan.sessions.iter().map(|s| s.turns.len() as u64).sum();
    let writer = Arc::new(
        RunDirWriter::create(&dir)
            .map_err(|e| RunError::Failed(format!("cannot write {e}")))?
            .with_secrets(options.secrets.clone()),
    );
    let load = match (cfg.arrival, cfg.concurrency) {
        (Some(a), 0) => format!("{} sessions/s ({:?})", a.rate, a.process),
        (Some(a), c) => format!(
            "{} sessions/s ({:?}, at most {c} at once)",
            a.rate, a.process
        ),
        (None, c) => format!("C={c}"),
    };
    options.notice(Notice::Info(format!(
        "bench run: {} sessions ({} turns) at {load} against {} [{}]{} → {}",
        plan.sessions.len(),
        turns_to_play,
        client.base_url(),
        backend.name(),
        if spec.is_embedded() {
            " (embedded simulator)"
        } else {
            ""
        },
        dir.display()
    )));
    Ok(Prepared {
        dir,
        plan: Arc::new(plan),
        client,
        scrape_client,
        cfg,
        events,
        writer,
        turns_to_play,
        config_echo: {
            let mut v = serde_json::to_value(&run_json).unwrap_or_default();
            options.secrets.scrub_json(&mut v);
            v
        },
    })
}

impl Prepared {
    fn spawn(
        self,
        spec: RunSpec,
        options: RunOptions,
        resume: Option<resume::Resume>,
        embedded: Option<SimServer>,
        grading: Option<Arc<hooks::Grading>>,
    ) -> RunHandle {
        let cfg = self.cfg;
        let progress = Arc::new(ProgressCounters::new(
            cfg.limits.duration.is_none().then_some(self.turns_to_play),
            cfg.concurrency,
            [cfg.limits.duration, cfg.limits.max_duration]
                .into_iter()
                .flatten()
                .min(),
        ));
        let canceller = Canceller::default();
        let handle_events = self.events.clone();
        let dir = self.dir.clone();
        let (events, writer, plan, client, scrape_client) = (
            self.events,
            self.writer,
            self.plan,
            self.client,
            self.scrape_client,
        );
        let config_echo = self.config_echo;
        let prog = progress.clone();
        let c = canceller.clone();
        let handle_secrets = options.secrets.clone();
        // A resumed run ignores `start_at` (its shards are long past it).
        let placement = spec.placement;
        let task = tokio::spawn(async move {
            // The handle exists during the wait for `--start-at`, so a signal (or the caller)
            // can cancel it: the run then stops before its first turn, recorded as cancelled.
            if resume.is_none() {
                let notice = |n| options.notice(n);
                placement.wait("bench run", &c.token, notice).await;
            }
            let base_url = client.base_url().to_owned();
            let start_utc = bench_report::export::utc_now();
            let beat = Arc::new(lifecycle::Beat::default());
            let ev = events.clone();
            let heartbeat = lifecycle::spawn_heartbeat(beat.clone(), HEARTBEAT_EVERY, move |h| {
                ev.emit(LifecycleEvent::Heartbeat(h))
            });
            let phase = Arc::new(scrape::PhaseTracker::default());
            let scraper = match spec.scrape {
                Scraping::Off => None,
                Scraping::Every(interval) => {
                    let ev = events.clone();
                    let opts = options.clone();
                    Some(
                        scrape::Scraper::start(
                            scrape_client,
                            interval,
                            cfg.time_origin,
                            &dir,
                            phase.clone(),
                            move |reason| {
                                opts.notice(Notice::Warning(format!(
                                    "/metrics scraping disabled: {reason}"
                                )));
                                ev.emit(LifecycleEvent::ScrapeDisabled {
                                    reason: reason.to_owned(),
                                });
                            },
                        )
                        .await,
                    )
                }
            };
            let cpu = Arc::new(cpu::CpuMeter::new());
            let mut observers: Vec<Arc<dyn Observer>> = vec![
                writer.clone(),
                prog,
                events.clone(),
                phase,
                beat,
                cpu.clone(),
            ];
            observers.extend(options.observers.iter().cloned());
            if let Some(g) = &grading {
                g.start(&hooks::RunStart {
                    dir: &dir,
                    kind: bench_rundir::RunKind::Replay.as_str(),
                });
                observers.push(g.clone());
            }
            let mut outcome =
                bench_runner::run(plan, client, cfg.clone(), observers, c.token.clone()).await;
            let client_cpu = cpu.finish(embedded.is_some());
            let scrapes = match scraper {
                Some(s) => s.finish().await,
                None => Vec::new(),
            };
            heartbeat.abort();
            if let Some(s) = embedded {
                s.shutdown().await;
            }
            // The run's records: those an earlier segment kept, then this process's.
            let (mut turns, mut sessions) = match &resume {
                Some(r) => r.kept_records(),
                None => (Vec::new(), Vec::new()),
            };
            turns.append(&mut outcome.turns);
            turns.sort_by(|a, b| a.end_s.total_cmp(&b.end_s));
            // The client scrubbed its errors already; this catches any other source.
            for t in turns.iter_mut().filter(|t| t.leaks(&options.secrets)) {
                t.scrub(&options.secrets);
            }
            sessions.append(&mut outcome.sessions);
            let elapsed_s = resume
                .as_ref()
                .map_or(Duration::ZERO, |r| r.prior_measured)
                .saturating_add(outcome.elapsed)
                .as_secs_f64();
            let (by, reason) = stop::classify(&outcome, &cfg, &sessions, c.by());
            events.emit(LifecycleEvent::Stopped {
                by,
                reason: reason.clone(),
            });
            let info = bench_report::RunInfo {
                concurrency: cfg.concurrency,
                judge: spec.judge.clone(),
                duration_s: elapsed_s,
                config: config_echo,
                open_loop: cfg.arrival.is_some(),
                server: scrapes
                    .iter()
                    .any(|s| s.phase.is_measured())
                    .then(|| bench_telemetry::summarize(&scrapes)),
                // A resumed run's CPU covers this segment only: no saturation figure for it.
                client: client_cpu.filter(|_| resume.is_none()),
                checks: Vec::new(),
            };
            let mut result = bench_report::compute(&turns, &sessions, &info);
            result.grades = grading.as_ref().map(|g| g.summaries()).unwrap_or_default();
            write_json(&dir.join(files::RESULT), &result, &options.secrets)?;
            if let Some(g) = &grading {
                g.end(&hooks::RunEnd {
                    dir: &dir,
                    stopped_by: by,
                    reason: &reason,
                    grades: &result.grades,
                });
            }
            let fail = |e: bench_report::export::ExportError| RunError::Failed(e.to_string());
            if let Some(path) = &spec.exports.result_line {
                let ctx = LineContext {
                    utc: start_utc,
                    run_dir: dir.clone(),
                    base_url,
                    model: cfg.model.clone(),
                    concurrency: cfg.concurrency,
                    rate: cfg.arrival.map(|a| a.rate),
                    duration_s: cfg.limits.duration.map(|d| d.as_secs_f64()),
                    elapsed_s,
                    stopped_by: by,
                    tag: spec.exports.tag.clone(),
                };
                let mut line = bench_report::export::result_line(&result, &ctx);
                options.secrets.scrub_json(&mut line);
                bench_report::export::append_result_line(path, &line).map_err(fail)?;
            }
            if let Some(path) = &spec.exports.turns_csv {
                bench_report::export::write_turns_csv(path, &turns).map_err(fail)?;
            }
            let turns_failed = turns.iter().filter(|t| t.status != TurnStatus::Ok).count();
            let scrub = |v: Vec<String>| -> Vec<String> {
                v.iter()
                    .map(|l| options.secrets.scrub(l).into_owned())
                    .collect()
            };
            Ok(RunReport {
                dir,
                grades: result.grades.clone(),
                result: options.secrets.scrub_value(result),
                stopped_by: by,
                reason: options.secrets.scrub(&reason).into_owned(),
                turns_total: turns.len() as u64,
                turns_failed: turns_failed as u64,
                task_failures: scrub(outcome.task_failures),
                warnings: scrub(writer.errors()),
                max_error_rate: spec.judge.max_error_rate,
                require_valid: spec.judge.require_valid,
            })
        });
        RunHandle {
            dir: self.dir,
            events: handle_events,
            progress: Some(progress),
            canceller,
            task,
            secrets: handle_secrets,
        }
    }
}
