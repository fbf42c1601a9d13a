//! Launch stages 5 and 6 of a replay run: [`prepare`] (the server ready and known, the run
//! directory opened, the start recorded) and [`Prepared::spawn`] (the engine played with its
//! observers, then the records, the result and the exports).

use std::path::PathBuf;
use std::sync::Arc;
use std::time::Duration;

use bench_report::export::LineContext;
use bench_rundir::{LifecycleEvent, Opened, TurnStatus, files};
use bench_rundir::{SessionRecord, StopBy, TurnRecord};
use bench_runner::Observer;
use bench_sim::SimServer;
use bench_transport::{Client, ClientConfig};
use bench_workload::plan::Plan;

use crate::{
    BackendChoice, Canceller, Events, HEARTBEAT_EVERY, Identity, Notice, ProgressCounters,
    RunDirWriter, RunError, RunHandle, RunOptions, RunReport, RunSpec, Scraping, Target, cpu,
    default_run_dir, hooks, lifecycle, placement, resume, run_json, scrape, server, stop,
    write_json,
};

/// Everything set up, before the engine starts.
pub(crate) struct Prepared {
    dir: PathBuf,
    plan: Arc<Plan>,
    client: Client,
    scrape_client: Client,
    /// The `--scrape` targets, each with its own client.
    scrape_targets: Vec<scrape::ScrapeTarget>,
    cfg: bench_runner::RunConfig,
    events: Arc<Events>,
    writer: Arc<RunDirWriter>,
    turns_to_play: u64,
    /// `run.json` as written (secrets scrubbed): `result.json`'s `config`.
    config_echo: serde_json::Value,
}

/// The server as found: ready, its model and window, its family, the clocks' offset.
struct Connected {
    client: Client,
    scrape_client: Client,
    cfg: bench_runner::RunConfig,
    max_model_len: Option<u64>,
    backend: bench_telemetry::Backend,
    detected: server::Detected,
    clock: Option<bench_rundir::ClockOffset>,
    output_cap: Option<server::OutputCapCheck>,
}

/// Launch stage 5: the server ready and known, the run directory with `run.json` (a resumed
/// run keeps its own) and `events.jsonl`'s start, the cache flushed if asked.
#[allow(clippy::too_many_arguments)]
pub(crate) async fn prepare(
    spec: &RunSpec,
    options: &RunOptions,
    plan: Plan,
    identity: Identity<'_>,
    base_url: &str,
    ready_timeout: Duration,
    resume: Option<&mut resume::Resume>,
) -> Result<Prepared, RunError> {
    let mut found = connect(spec, options, base_url, ready_timeout).await?;
    let dir = match &resume {
        Some(r) => r.dir.clone(),
        None => options.run_dir.clone().unwrap_or_else(default_run_dir),
    };
    std::fs::create_dir_all(&dir)
        .map_err(|e| RunError::Failed(format!("cannot create {}: {e}", dir.display())))?;
    if spec.flush_cache {
        let path = server::flush_cache(&found.scrape_client, found.backend).await?;
        options.notice(Notice::Info(format!(
            "bench run: prefix cache flushed (POST {path})"
        )));
    }
    // A resumed run keeps its run.json; its records now say what is kept.
    let run_json = match &resume {
        Some(r) => r.run_json.clone(),
        None => {
            let doc = run_json_of(spec, &plan, &identity, &found);
            write_json(&dir.join(files::RUN_JSON), &doc, &options.secrets)?;
            doc
        }
    };
    let events = Arc::new(
        Events::open(&dir)
            .map_err(|e| RunError::Failed(format!("cannot write {e}")))?
            .with_secrets(options.secrets.clone()),
    );
    record_start(
        &events,
        &mut found.cfg,
        &plan,
        &identity,
        &dir,
        options,
        resume,
    )?;
    // What this process plays (a resumed run: the sessions not kept).
    let turns_to_play: u64 = plan.sessions.iter().map(|s| s.turns.len() as u64).sum();
    let writer = Arc::new(
        RunDirWriter::create(&dir)
            .map_err(|e| RunError::Failed(format!("cannot write {e}")))?
            .with_secrets(options.secrets.clone()),
    );
    options.notice(Notice::Info(start_line(
        spec,
        &found,
        &plan,
        turns_to_play,
        &dir,
    )));
    let mut config_echo = serde_json::to_value(&run_json).unwrap_or_default();
    options.secrets.scrub_json(&mut config_echo);
    let scrape_targets = spec
        .scrape_targets
        .iter()
        .map(|url| {
            let (base, path) = crate::spec::scrape_target(url)?;
            let client = Client::new(bench_transport::ClientConfig::new(base))
                .map_err(|e| RunError::Invalid(format!("--scrape {url}: {e}")))?;
            Ok(scrape::ScrapeTarget {
                client,
                path,
                url: url.clone(),
            })
        })
        .collect::<Result<Vec<_>, RunError>>()?;
    Ok(Prepared {
        dir,
        plan: Arc::new(plan),
        client: found.client,
        scrape_client: found.scrape_client,
        scrape_targets,
        cfg: found.cfg,
        events,
        writer,
        turns_to_play,
        config_echo,
    })
}

/// A new run's `run.json`: its spec and everything found and decided before its first turn.
fn run_json_of(
    spec: &RunSpec,
    plan: &Plan,
    identity: &Identity<'_>,
    found: &Connected,
) -> run_json::ReplayRunJson {
    let cfg = &found.cfg;
    run_json::ReplayRunJson {
        spec: spec.clone(),
        tool_version: env!("CARGO_PKG_VERSION").into(),
        pid: Some(std::process::id()),
        base_url: found.client.base_url(),
        model: cfg.model.clone(),
        max_model_len: found.max_model_len,
        backend: found.backend,
        backend_detected: found.detected.clone(),
        auth: bench_transport::Auth::from_env().describe().into(),
        plan: plan.summary.clone(),
        run: cfg.clone(),
        plan_digest: identity.plan_digest.to_owned(),
        config_digest: spec.config_digest(),
        shard: identity.shard,
        clock: found.clock,
        output_cap: found.output_cap.clone(),
        merged: None,
    }
}

/// The server ready, its model and window read, its family detected (a `--backend` that
/// disagrees is warned about and kept), and for shards the clock offset; the run's
/// [`bench_runner::RunConfig`] from them.
async fn connect(
    spec: &RunSpec,
    options: &RunOptions,
    base_url: &str,
    ready_timeout: Duration,
) -> Result<Connected, RunError> {
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
    let client = Client::new(ccfg.clone()).map_err(|e| RunError::Invalid(e.to_string()))?;
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
    let output_cap = if needs_output_cap_check(spec, backend) {
        let check = server::check_output_cap(ccfg, &cfg).await;
        if let Some(n) = check.notice() {
            options.notice(n);
        }
        cfg.request.output_cap_field = check.field;
        Some(check)
    } else {
        None
    };
    Ok(Connected {
        client,
        scrape_client,
        cfg,
        max_model_len,
        backend,
        detected,
        clock,
        output_cap,
    })
}

/// A chat run that left the output cap's field to bench, against a server not known to honour
/// `max_completion_tokens` (vLLM, SGLang, llama.cpp and the embedded simulator do).
fn needs_output_cap_check(spec: &RunSpec, backend: bench_telemetry::Backend) -> bool {
    use bench_telemetry::Backend;
    spec.request.output_cap_field == bench_runner::OutputCapField::Auto
        && spec.request.endpoint == bench_transport::Endpoint::Chat
        && !spec.is_embedded()
        && !matches!(backend, Backend::Vllm | Backend::Sglang | Backend::Llamacpp)
}

/// `events.jsonl`'s `started`, or for a resume its `resumed` (the kept records applied, the
/// warmup and time origin carried over, what was repaired told).
fn record_start(
    events: &Events,
    cfg: &mut bench_runner::RunConfig,
    plan: &Plan,
    identity: &Identity<'_>,
    dir: &std::path::Path,
    options: &RunOptions,
    resume: Option<&mut resume::Resume>,
) -> Result<(), RunError> {
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
    let Some(r) = resume else {
        events.emit(LifecycleEvent::Started(opened));
        return Ok(());
    };
    r.apply()?;
    if !r.replay_warmup {
        cfg.warmup_sessions = 0;
    }
    cfg.time_origin = r.time_origin;
    for line in &r.repairs {
        options.notice(Notice::Warning(line.clone()));
    }
    options.notice(Notice::Info(format!(
        "bench run: resuming {}: {} sessions kept, {} played again from their first turn ({} \
         turn records superseded){}",
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
    Ok(())
}

/// The console's line as the run starts: what is played, at what load, against what, where.
fn start_line(
    spec: &RunSpec,
    found: &Connected,
    plan: &Plan,
    turns_to_play: u64,
    dir: &std::path::Path,
) -> String {
    let (cfg, backend, client) = (&found.cfg, found.backend, &found.client);
    let load = match (cfg.arrival, cfg.concurrency) {
        (Some(a), 0) => format!("{} sessions/s ({:?})", a.rate, a.process),
        (Some(a), c) => format!(
            "{} sessions/s ({:?}, at most {c} at once)",
            a.rate, a.process
        ),
        (None, c) => format!("C={c}"),
    };
    format!(
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
    )
}

/// What a run gathers beside the engine while it plays: heartbeats, `/metrics` scrapes, the
/// client's CPU.
struct Watch {
    heartbeat: tokio::task::JoinHandle<()>,
    scraper: Option<scrape::Scraper>,
    cpu: Arc<cpu::CpuMeter>,
}

/// What the run's end needs besides its records.
struct Ending<'a> {
    spec: &'a RunSpec,
    options: &'a RunOptions,
    cfg: &'a bench_runner::RunConfig,
    dir: &'a std::path::Path,
    start_utc: String,
    base_url: String,
    elapsed_s: f64,
    grading: Option<&'a hooks::Grading>,
}

impl Prepared {
    /// Launch stage 6: the run as a task (the `--start-at` wait, the engine with its
    /// observers, then the result), with the handle that watches and stops it.
    pub(crate) fn spawn(
        self,
        spec: RunSpec,
        options: RunOptions,
        resume: Option<resume::Resume>,
        embedded: Option<SimServer>,
        grading: Option<Arc<hooks::Grading>>,
    ) -> RunHandle {
        let limits = &self.cfg.limits;
        let progress = Arc::new(ProgressCounters::new(
            limits.duration.is_none().then_some(self.turns_to_play),
            self.cfg.concurrency,
            [limits.duration, limits.max_duration]
                .into_iter()
                .flatten()
                .min(),
        ));
        let canceller = Canceller::default();
        let (dir, events, secrets) = (
            self.dir.clone(),
            self.events.clone(),
            options.secrets.clone(),
        );
        let task = tokio::spawn(self.play(
            spec,
            options,
            resume,
            embedded,
            grading,
            progress.clone(),
            canceller.clone(),
        ));
        RunHandle {
            dir,
            events,
            progress: Some(progress),
            canceller,
            task,
            secrets,
        }
    }

    /// The run's task: the `--start-at` wait, the engine with its observers, the stop
    /// classified, the result computed and written with the exports.
    #[allow(clippy::too_many_arguments)]
    async fn play(
        self,
        spec: RunSpec,
        options: RunOptions,
        resume: Option<resume::Resume>,
        embedded: Option<SimServer>,
        grading: Option<Arc<hooks::Grading>>,
        progress: Arc<ProgressCounters>,
        c: Canceller,
    ) -> Result<RunReport, RunError> {
        // The handle exists during the wait for `--start-at`, so a signal (or the caller) can
        // cancel it: the run then stops before its first turn, recorded as cancelled. A
        // resumed run ignores `start_at` (its shards are long past it).
        if resume.is_none() {
            let notice = |n| options.notice(n);
            spec.placement.wait("bench run", &c.token, notice).await;
        }
        let base_url = self.client.base_url().to_owned();
        let start_utc = bench_report::export::utc_now();
        let (watch, mut observers) = self.watch(&spec, &options, progress).await;
        observers.extend(options.observers.iter().cloned());
        if let Some(g) = &grading {
            g.start(&hooks::RunStart {
                dir: &self.dir,
                kind: bench_rundir::RunKind::Replay.as_str(),
            });
            observers.push(g.clone());
        }
        let cfg = self.cfg;
        let mut outcome = bench_runner::run(
            self.plan,
            self.client,
            cfg.clone(),
            observers,
            c.token.clone(),
        )
        .await;
        // The session records still waiting reach the OS before the run is reported.
        self.writer.flush();
        let (client_cpu, scrapes) = watch.finish(embedded.is_some()).await;
        if let Some(s) = embedded {
            s.shutdown().await;
        }
        let (turns, sessions) = records(resume.as_ref(), &mut outcome, &options);
        let elapsed_s = resume
            .as_ref()
            .map_or(Duration::ZERO, |r| r.prior_measured)
            .saturating_add(outcome.elapsed)
            .as_secs_f64();
        let (by, reason) = stop::classify(&outcome, &cfg, &sessions, c.by());
        self.events.emit(LifecycleEvent::Stopped {
            by,
            reason: reason.clone(),
        });
        // A resumed run's CPU covers this segment only: no saturation figure for it.
        let client_cpu = client_cpu.filter(|_| resume.is_none());
        let info = run_info(
            &spec,
            &cfg,
            elapsed_s,
            self.config_echo,
            &scrapes,
            client_cpu,
        );
        let mut result = bench_report::compute(&turns, &sessions, &info);
        result.grades = grading.as_ref().map(|g| g.summaries()).unwrap_or_default();
        let end = Ending {
            spec: &spec,
            options: &options,
            cfg: &cfg,
            dir: &self.dir,
            start_utc,
            base_url,
            elapsed_s,
            grading: grading.as_deref(),
        };
        end.write(&result, &turns, by, &reason)?;
        if let Some(endpoint) = &spec.exports.otlp_endpoint {
            let at = (self.dir.as_path(), end.base_url.clone());
            export_spans(endpoint, at, &cfg, &turns, &sessions, &options).await;
        }
        if let Some(m) = &spec.exports.mlflow {
            let notice = match log_mlflow(m, &self.dir, &result).await {
                Ok(id) => Notice::Info(format!("mlflow: logged as run {id} in {:?}", m.experiment)),
                Err(e) => Notice::Warning(format!("mlflow: run not logged: {e}")),
            };
            options.notice(notice);
        }
        let failures = outcome.task_failures;
        Ok(run_report(
            self.dir,
            result,
            by,
            reason,
            &turns,
            failures,
            &self.writer,
            &spec,
            &options,
        ))
    }

    /// Heartbeats, the scraper (unless off) and the CPU meter started; the observers that
    /// record the run (the run directory, the progress counters, `events.jsonl`, the scrape phase, the heartbeat's
    /// beat, the CPU meter).
    async fn watch(
        &self,
        spec: &RunSpec,
        options: &RunOptions,
        progress: Arc<ProgressCounters>,
    ) -> (Watch, Vec<Arc<dyn Observer>>) {
        let beat = Arc::new(lifecycle::Beat::default());
        let ev = self.events.clone();
        let heartbeat = lifecycle::spawn_heartbeat(beat.clone(), HEARTBEAT_EVERY, move |h| {
            ev.emit(LifecycleEvent::Heartbeat(h))
        });
        let phase = Arc::new(scrape::PhaseTracker::default());
        let (server, interval) = match spec.scrape {
            Scraping::Off => (None, Scraping::default_interval()),
            Scraping::Every(interval) => (Some(self.scrape_client.clone()), interval),
        };
        let scraper = if server.is_some() || !self.scrape_targets.is_empty() {
            let ev = self.events.clone();
            let opts = options.clone();
            let disabled = move |reason: &str| {
                opts.notice(Notice::Warning(if reason.starts_with("--scrape ") {
                    format!("scrape target disabled: {reason}")
                } else {
                    format!("/metrics scraping disabled: {reason}")
                }));
                ev.emit(LifecycleEvent::ScrapeDisabled {
                    reason: reason.to_owned(),
                });
            };
            let s = scrape::Scraper::start_with(
                server,
                self.scrape_targets.clone(),
                interval,
                self.cfg.time_origin,
                &self.dir,
                phase.clone(),
                disabled,
            )
            .await;
            Some(s)
        } else {
            None
        };
        let cpu = Arc::new(cpu::CpuMeter::new());
        let observers: Vec<Arc<dyn Observer>> = vec![
            self.writer.clone(),
            progress,
            self.events.clone(),
            phase,
            beat,
            cpu.clone(),
        ];
        (
            Watch {
                heartbeat,
                scraper,
                cpu,
            },
            observers,
        )
    }
}

impl Watch {
    /// The CPU meter read, the last scrape taken, the heartbeat stopped.
    async fn finish(
        self,
        embedded: bool,
    ) -> (
        Option<bench_report::ClientCpu>,
        Vec<bench_telemetry::Scrape>,
    ) {
        let client_cpu = self.cpu.finish(embedded);
        let scrapes = match self.scraper {
            Some(s) => s.finish().await,
            None => Vec::new(),
        };
        self.heartbeat.abort();
        (client_cpu, scrapes)
    }
}

/// What the result is computed with besides the records.
fn run_info(
    spec: &RunSpec,
    cfg: &bench_runner::RunConfig,
    duration_s: f64,
    config: serde_json::Value,
    scrapes: &[bench_telemetry::Scrape],
    client: Option<bench_report::ClientCpu>,
) -> bench_report::RunInfo {
    bench_report::RunInfo {
        concurrency: cfg.concurrency,
        judge: spec.judge.clone(),
        duration_s,
        config,
        open_loop: cfg.arrival.is_some(),
        client,
        ..bench_report::RunInfo::default()
    }
    .with_scrapes(scrapes)
}

/// What [`RunHandle::wait`] returns, every string scrubbed of secrets.
#[allow(clippy::too_many_arguments)]
fn run_report(
    dir: PathBuf,
    result: bench_report::RunResult,
    by: StopBy,
    reason: String,
    turns: &[TurnRecord],
    task_failures: Vec<String>,
    writer: &RunDirWriter,
    spec: &RunSpec,
    options: &RunOptions,
) -> RunReport {
    let scrub = |v: Vec<String>| -> Vec<String> {
        v.iter()
            .map(|l| options.secrets.scrub(l).into_owned())
            .collect()
    };
    RunReport {
        dir,
        grades: result.grades.clone(),
        result: options.secrets.scrub_value(result),
        stopped_by: by,
        reason: options.secrets.scrub(&reason).into_owned(),
        turns_total: turns.len() as u64,
        turns_failed: turns.iter().filter(|t| t.status != TurnStatus::Ok).count() as u64,
        task_failures: scrub(task_failures),
        warnings: scrub(writer.errors()),
        max_error_rate: spec.judge.max_error_rate,
        require_valid: spec.judge.require_valid,
    }
}

/// The run's records: those an earlier segment kept, then this process's, turns in the order
/// they ended, any secret scrubbed (the client scrubbed its errors already; this catches any
/// other source).
fn records(
    resume: Option<&resume::Resume>,
    outcome: &mut bench_runner::RunOutcome,
    options: &RunOptions,
) -> (Vec<TurnRecord>, Vec<SessionRecord>) {
    let (mut turns, mut sessions) = match resume {
        Some(r) => r.kept_records(),
        None => (Vec::new(), Vec::new()),
    };
    turns.append(&mut outcome.turns);
    turns.sort_by(|a, b| a.end_s.total_cmp(&b.end_s));
    for t in turns.iter_mut().filter(|t| t.leaks(&options.secrets)) {
        t.scrub(&options.secrets);
    }
    sessions.append(&mut outcome.sessions);
    (turns, sessions)
}

/// `--mlflow`: the run logged (its spec as parameters, the headline figures, the verdict,
/// `result.json` and the HTML report); the MLflow run's id.
async fn log_mlflow(
    m: &crate::mlflow::MlflowSpec,
    dir: &std::path::Path,
    result: &bench_report::RunResult,
) -> Result<String, String> {
    let name = dir
        .file_name()
        .map(|n| n.to_string_lossy().into_owned())
        .unwrap_or_default();
    let verdict = result
        .validity
        .as_ref()
        .map_or("unknown", |v| v.verdict.as_str())
        .to_owned();
    let tags = [
        ("bench.version", env!("CARGO_PKG_VERSION").to_owned()),
        ("bench.run_dir", dir.display().to_string()),
        ("bench.verdict", verdict),
    ];
    let run = crate::mlflow::MlflowRun::start(m, &name, &tags).await?;
    let spec = match result.config.get("spec") {
        Some(s) => s,
        None => &result.config,
    };
    let params = crate::mlflow::params_of(spec);
    run.log(&params, &crate::mlflow::metrics_of(result), &[])
        .await?;
    let json = std::fs::read(dir.join(files::RESULT)).map_err(|e| e.to_string())?;
    run.artifact("result.json", json).await?;
    let html = crate::report::load(dir)
        .map(|d| bench_report::html::html(&d))
        .map_err(|e| e.to_string())?;
    run.artifact("report.html", html.into_bytes()).await?;
    run.finish(result.summary.turns_ok > 0).await?;
    Ok(run.run_id)
}

/// `--otlp-endpoint`: the run's spans sent, and one line said either way (a failure is a
/// warning: the run's own files are already written).
async fn export_spans(
    endpoint: &str,
    (dir, base_url): (&std::path::Path, String),
    cfg: &bench_runner::RunConfig,
    turns: &[TurnRecord],
    sessions: &[bench_report::record::SessionRecord],
    options: &RunOptions,
) {
    let run = dir
        .file_name()
        .map(|n| n.to_string_lossy().into_owned())
        .unwrap_or_default();
    let id = crate::otlp::RunIdentity {
        run: &run,
        model: &cfg.model,
        endpoint: cfg.request.endpoint,
        base_url: &base_url,
    };
    let spans = crate::otlp::spans(turns, sessions, &id);
    let notice = match crate::otlp::export(endpoint, &spans, &id).await {
        Ok(e) => Notice::Info(format!(
            "otlp: {} spans sent to {endpoint} in {} requests",
            e.spans, e.requests
        )),
        Err(e) => Notice::Warning(format!("otlp: spans not exported: {e}")),
    };
    options.notice(notice);
}

impl Ending<'_> {
    /// `result.json`, the graders' end, the result line and the turns CSV when asked.
    fn write(
        &self,
        result: &bench_report::RunResult,
        turns: &[TurnRecord],
        by: StopBy,
        reason: &str,
    ) -> Result<(), RunError> {
        let (spec, options, cfg) = (self.spec, self.options, self.cfg);
        write_json(&self.dir.join(files::RESULT), result, &options.secrets)?;
        if let Some(g) = self.grading {
            g.end(&hooks::RunEnd {
                dir: self.dir,
                stopped_by: by,
                reason,
                grades: &result.grades,
            });
        }
        let fail = |e: bench_report::export::ExportError| RunError::Failed(e.to_string());
        if let Some(path) = &spec.exports.result_line {
            let ctx = LineContext {
                utc: self.start_utc.clone(),
                run_dir: self.dir.to_path_buf(),
                base_url: self.base_url.clone(),
                model: cfg.model.clone(),
                concurrency: cfg.concurrency,
                rate: cfg.arrival.map(|a| a.rate),
                duration_s: cfg.limits.duration.map(|d| d.as_secs_f64()),
                elapsed_s: self.elapsed_s,
                stopped_by: by,
                tag: spec.exports.tag.clone(),
            };
            let mut line = bench_report::export::result_line(result, &ctx);
            options.secrets.scrub_json(&mut line);
            bench_report::export::append_result_line(path, &line).map_err(fail)?;
        }
        if let Some(path) = &spec.exports.turns_csv {
            bench_report::export::write_turns_csv(path, turns).map_err(fail)?;
        }
        Ok(())
    }
}
