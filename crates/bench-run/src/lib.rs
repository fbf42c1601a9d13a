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
pub mod mlflow;
mod options;
pub mod otlp;
pub mod placement;
pub mod probe;
pub mod progress;
mod replay;
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
use std::time::Duration;

use bench_rundir::files;
use bench_sim::SimServer;
pub use bench_transport::TlsOptions;

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
    // A password in the base URL is sent (HTTP Basic) and never recorded or shown.
    if let Target::Url { base_url, .. } = &spec.target {
        options.secrets.add_url_credentials(base_url);
    }
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
    let mut spec = r.run_json.spec.clone();
    // The URL's masked credentials are not sent: the Authorization header given again is.
    if let Target::Url { base_url, .. } = &mut spec.target {
        *base_url = bench_rundir::secrets::without_credentials(base_url);
    }
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
    let prepared = replay::prepare(
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
