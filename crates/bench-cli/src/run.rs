//! `bench run`: plan, replay, report.

use std::io::Write;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::Duration;

use bench_report::{RunInfo, Slo};
use bench_runner::{
    Arrival, ArrivalProcess, CancelToken, ContentMode, RunConfig, RunDirWriter, StopReason,
};
use bench_sim::SimConfig;
use bench_transport::{Client, ClientConfig};
use clap::{Args, ValueEnum};
use http::HeaderName;
use serde::{Deserialize, Serialize};
use serde_json::Value;

use crate::backend::Backend;
use crate::workload::{PlanArgs, plan_error, plan_progress};
use crate::{CliError, SimModelArgs, out};

/// What joins the conversation after each turn.
#[derive(Debug, Clone, Copy, ValueEnum, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum ContentModeArg {
    /// The recorded assistant text (reproducible across engines).
    Trace,
    /// What the server generated.
    Model,
}

/// How open-loop sessions are spaced.
#[derive(Debug, Clone, Copy, ValueEnum, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum ArrivalArg {
    /// Exponential gaps (a Poisson process), seeded by --seed.
    Poisson,
    /// Evenly spaced.
    Constant,
}

/// `bench run` flags. They are recorded in `run.json` (`args`; header values never are) so
/// that `--resume` replays the same plan with the same settings.
#[derive(Debug, Clone, Args, Serialize, Deserialize)]
pub struct RunCmd {
    /// Finish the run in RUN_DIR that crashed or was stopped, with the configuration recorded
    /// in its run.json: finished sessions are kept, partly played ones are played again from
    /// their first turn (their earlier records are marked `superseded`), and result.json counts
    /// each planned session once. Only --header (header values are never recorded), -q,
    /// --json and --progress-interval may be given with it.
    #[arg(long, value_name = "RUN_DIR")]
    #[serde(skip)]
    pub resume: Option<PathBuf>,
    /// Server to benchmark (http:// only). Without it, the embedded simulator is started.
    #[arg(long, env = "BENCH_BASE_URL")]
    pub base_url: Option<String>,
    /// Model name; by default the first model listed by GET /v1/models.
    #[arg(long)]
    pub model: Option<String>,
    /// Server family [default: detected from /v1/models and /metrics]. Decides the cache-flush
    /// endpoint and whether SGLang's cache-hit split is asked for; a mismatch with what is
    /// detected is warned about, and the given value wins.
    #[arg(long, value_enum)]
    pub backend: Option<Backend>,
    /// Open loop: start this many sessions per second, whatever the server's speed (each
    /// session still plays turn by turn). Latency is also reported from when each turn was
    /// due (`ttft_from_due_ms`), and the dispatch lag shows when the client fell behind.
    #[arg(long, value_name = "SESSIONS_PER_S")]
    pub rate: Option<f64>,
    /// Closed loop: start the -c sessions evenly over this time (e.g. 5s) instead of all at
    /// once; turns sent before enough are active fall outside the steady window.
    #[arg(long, value_parser = parse_duration, conflicts_with = "rate")]
    pub ramp_up: Option<Duration>,
    /// Spacing of open-loop session starts.
    #[arg(long, value_enum, default_value_t = ArrivalArg::Poisson, requires = "rate")]
    pub arrival: ArrivalArg,
    /// Play the first N sessions of the pool, cut to 3 turns, before measuring; their records
    /// are marked `warmup` and left out of every metric.
    #[arg(long, default_value_t = 0, value_name = "N")]
    pub warmup_sessions: u32,
    /// Empty the server's prefix cache before the run (vLLM: POST /reset_prefix_cache, which
    /// needs VLLM_SERVER_DEV_MODE=1; SGLang: POST /flush_cache). Fails when it cannot.
    #[arg(long)]
    pub flush_cache: bool,
    /// Run for this long, looping the pool (e.g. 90s, 5m); no new session or turn after it.
    #[arg(long, value_parser = parse_duration)]
    pub duration: Option<Duration>,
    /// Hard fuse on the whole run: requests still in flight are cut.
    #[arg(long, value_parser = parse_duration)]
    pub max_duration: Option<Duration>,
    /// Per-request timeout.
    #[arg(long, value_parser = parse_duration, default_value = "600s")]
    pub turn_timeout: Duration,
    /// Stop a session at its next turn boundary once it has run this long.
    #[arg(long, value_parser = parse_duration)]
    pub session_timeout: Option<Duration>,
    /// The model's window for the context guard [default: `max_model_len` from /v1/models, or
    /// llama.cpp's per-slot `meta.n_ctx`].
    #[arg(long)]
    pub max_model_len: Option<u64>,
    /// Multiply every tool wait by this.
    #[arg(long, default_value_t = 1.0)]
    pub gap_scale: f64,
    /// Do not wait between turns.
    #[arg(long)]
    pub no_gaps: bool,
    /// Do not mark replays of recycled sessions (they may then hit the cache their previous
    /// play warmed).
    #[arg(long)]
    pub no_cache_bust: bool,
    /// Send `max_tokens` instead of `max_completion_tokens`.
    #[arg(long)]
    pub legacy_max_tokens: bool,
    /// Do not send `ignore_eos` (output may stop before the pinned length).
    #[arg(long)]
    pub no_ignore_eos: bool,
    /// What joins the conversation after each turn.
    #[arg(long, value_enum, default_value_t = ContentModeArg::Trace)]
    pub content_mode: ContentModeArg,
    /// Ask for whole JSON responses instead of streams (TTFT is then the whole response time).
    #[arg(long)]
    pub disable_stream: bool,
    /// JSON object merged into every request body last.
    #[arg(long, value_name = "JSON")]
    pub extra_request_body: Option<String>,
    /// Extra request header, `K=V` (repeatable). Only the names are recorded in run.json.
    #[arg(long = "header", value_name = "K=V")]
    #[serde(skip)]
    pub headers: Vec<String>,
    /// Send each session's id in this header (a stable routing key for routers).
    #[arg(long, value_name = "HEADER")]
    pub routing_key: Option<String>,
    /// Response header naming the worker that served a turn (routing stickiness).
    #[arg(long, value_name = "HEADER")]
    pub worker_header: Option<String>,
    /// A turn counts in the steady window when at least ceil(F × C) sessions were active.
    #[arg(long, default_value_t = 0.9)]
    pub steady_frac: f64,
    /// Service-level objectives for goodput, e.g. `ttft_ms=500,tpot_ms=50`.
    #[arg(long)]
    pub slo: Option<String>,
    /// Exit 1 when more than this fraction of turns failed.
    #[arg(long, default_value_t = 0.0)]
    pub max_error_rate: f64,
    /// Run directory (default: `runs/<UTC time>-<pid>`).
    #[arg(long)]
    pub run_dir: Option<PathBuf>,
    /// Print result.json instead of the report.
    #[arg(long)]
    pub json: bool,
    /// Append one JSON line summarizing the run to FILE (one line per run, for scripts and
    /// users migrating from agentic-bench's --output).
    #[arg(long, value_name = "FILE")]
    pub output: Option<PathBuf>,
    /// Write every turn record as a CSV row to FILE.
    #[arg(long, value_name = "FILE")]
    pub csv: Option<PathBuf>,
    /// Scrape the server's /metrics this often (into scrapes.jsonl; summarized as `server` in
    /// result.json). A baseline is taken before the first turn and a final one after the last.
    #[arg(long, value_parser = parse_duration, default_value = "5s")]
    pub metrics_interval: Duration,
    /// Do not scrape /metrics.
    #[arg(long)]
    pub no_metrics: bool,
    /// After the first Ctrl-C or SIGTERM, turns in flight get this long to finish before they
    /// are cut (a second signal cuts them at once).
    #[arg(long, value_parser = parse_duration, default_value = "30s")]
    pub grace: Duration,
    /// Progress display: a bar on a terminal, otherwise a heartbeat line every this often.
    #[arg(long, value_parser = parse_duration, default_value = "5s")]
    pub progress_interval: Duration,
    /// No progress display.
    #[arg(long, short = 'q')]
    pub quiet: bool,
    /// Dataset and selection.
    #[command(flatten)]
    pub plan: PlanArgs,
    /// Embedded simulator (without --base-url).
    #[command(flatten)]
    pub sim: EmbeddedSimArgs,
}

/// The embedded simulator's model, for `bench run` without `--base-url` (see `bench sim --help`).
#[derive(Debug, Clone, Args, Serialize, Deserialize)]
#[command(next_help_heading = "Embedded simulator (without --base-url)")]
pub struct EmbeddedSimArgs {
    /// Fixed TTFT in ms (with --sim-itl-ms).
    #[arg(long, requires = "sim_itl_ms")]
    pub sim_ttft_ms: Option<f64>,
    /// Fixed gap between tokens in ms (with --sim-ttft-ms).
    #[arg(long, requires = "sim_ttft_ms")]
    pub sim_itl_ms: Option<f64>,
    /// No simulated delay at all.
    #[arg(long)]
    pub sim_instant: bool,
    /// Context window of the simulated model (the bundled sample has sessions up to ~90K
    /// tokens).
    #[arg(long, default_value_t = 131_072)]
    pub sim_max_model_len: u32,
    /// KV-cache capacity in tokens.
    #[arg(long, default_value_t = SimConfig::default().kv_capacity_tokens)]
    pub sim_kv_capacity_tokens: u64,
    /// Sequence slots.
    #[arg(long, default_value_t = SimConfig::default().max_num_seqs)]
    pub sim_max_num_seqs: usize,
    /// Multiply every simulated delay.
    #[arg(long, default_value_t = 1.0)]
    pub sim_time_scale: f64,
}

impl EmbeddedSimArgs {
    pub(crate) fn to_model_args(&self) -> SimModelArgs {
        let d = SimConfig::default();
        SimModelArgs {
            ttft_ms: self.sim_ttft_ms,
            itl_ms: self.sim_itl_ms,
            instant: self.sim_instant,
            flavor: crate::FlavorArg::Vllm,
            max_model_len: self.sim_max_model_len,
            prefill_ms_per_token: d.prefill_ms_per_token,
            decode_step_ms: d.decode_step_base_ms,
            decode_step_ms_per_seq: d.decode_step_ms_per_seq,
            max_num_seqs: self.sim_max_num_seqs,
            max_num_batched_tokens: d.max_num_batched_tokens,
            kv_capacity_tokens: self.sim_kv_capacity_tokens,
            block_size: d.block_size,
            time_scale: self.sim_time_scale,
            seed: 0,
            default_max_tokens: d.default_max_tokens,
            tokenizer: None,
        }
    }
}

/// Parses `90s`, `5m`, `1h`, `250ms` or plain seconds.
pub fn parse_duration(s: &str) -> Result<Duration, String> {
    let s = s.trim();
    let (num, mult) = if let Some(n) = s.strip_suffix("ms") {
        (n, 0.001)
    } else if let Some(n) = s.strip_suffix('s') {
        (n, 1.0)
    } else if let Some(n) = s.strip_suffix('m') {
        (n, 60.0)
    } else if let Some(n) = s.strip_suffix('h') {
        (n, 3600.0)
    } else {
        (s, 1.0)
    };
    let v: f64 = num
        .trim()
        .parse()
        .map_err(|_| format!("{s:?} is not a duration (e.g. 90s, 5m, 250ms)"))?;
    if !v.is_finite() || v <= 0.0 {
        return Err(format!("{s:?}: a duration must be positive"));
    }
    Ok(Duration::from_secs_f64(v * mult))
}

fn header_name(s: &str, flag: &str) -> Result<HeaderName, CliError> {
    HeaderName::from_bytes(s.trim().as_bytes())
        .map_err(|_| CliError::Usage(format!("{flag}: {s:?} is not a valid header name")))
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

fn write_json(path: &Path, v: &impl serde::Serialize) -> Result<(), CliError> {
    let text = serde_json::to_string_pretty(v)
        .map_err(|e| CliError::Failed(format!("cannot encode {}: {e}", path.display())))?;
    std::fs::write(path, text + "\n")
        .map_err(|e| CliError::Failed(format!("cannot write {}: {e}", path.display())))
}

/// Appends lifecycle events to `events.jsonl`.
struct Events(std::sync::Mutex<std::fs::File>);

impl Events {
    fn emit(&self, kind: &str, fields: serde_json::Value) {
        let mut v = serde_json::json!({
            "event": kind,
            "utc": time::OffsetDateTime::now_utc()
                .format(&time::format_description::well_known::Rfc3339)
                .unwrap_or_default(),
        });
        if let (Some(o), Some(f)) = (v.as_object_mut(), fields.as_object()) {
            for (k, x) in f {
                o.insert(k.clone(), x.clone());
            }
        }
        if let Ok(mut f) = self.0.lock() {
            let _ = writeln!(f, "{v}");
        }
    }
}

impl bench_runner::Observer for Events {
    fn on_event(&self, e: &bench_runner::RunEvent<'_>) {
        if let bench_runner::RunEvent::Phase(p) = e {
            self.emit("phase", serde_json::json!({ "phase": p }));
        }
    }
}

/// How often `events.jsonl` gets a `heartbeat`.
const HEARTBEAT_EVERY: Duration = Duration::from_secs(5);

/// Runs `bench run` (or, with `--resume`, finishes an earlier one).
pub async fn run_run(args: RunCmd) -> Result<(), CliError> {
    let (args, mut resume) = match &args.resume {
        Some(dir) => {
            let (merged, run_json) = crate::resume::load_args(&args)?;
            let r = crate::resume::read(dir, run_json)?;
            (merged, Some(r))
        }
        None => (args, None),
    };
    if !(0.0..=1.0).contains(&args.steady_frac) {
        return Err(CliError::Usage("--steady-frac must be within 0..1".into()));
    }
    if !(0.0..=1.0).contains(&args.max_error_rate) {
        return Err(CliError::Usage(
            "--max-error-rate must be within 0..1".into(),
        ));
    }
    if let Some(r) = args.rate {
        if !r.is_finite() || r <= 0.0 {
            return Err(CliError::Usage(format!(
                "--rate must be a positive number of sessions per second, not {r}"
            )));
        }
    }
    if !args.gap_scale.is_finite() || args.gap_scale < 0.0 {
        return Err(CliError::Usage(
            "--gap-scale must be a non-negative number".into(),
        ));
    }
    let slo: Option<Slo> = match &args.slo {
        Some(s) => Some(
            s.parse()
                .map_err(|e| CliError::Usage(format!("--slo: {e}")))?,
        ),
        None => None,
    };
    // One descriptor per session in flight (two with the embedded simulator, which holds the
    // other end), plus the run directory's files and some slack. Open loop without a cap:
    // as many as the hard limit allows.
    let fds_per_session = if args.base_url.is_none() { 2 } else { 1 };
    let in_flight = match args.rate {
        Some(_) => args.plan.concurrency.filter(|&c| c > 0),
        None => Some(args.plan.concurrency()),
    };
    crate::lifecycle::ensure_open_files(
        in_flight.map(|c| u64::from(c) * fds_per_session + 256),
        &format!(
            "bench run with {} sessions in flight",
            in_flight.map_or_else(|| "unbounded".into(), |c| c.to_string())
        ),
    )?;
    let extra_body = crate::parse_extra_body(args.extra_request_body.as_deref())?;
    let headers = crate::parse_headers(&args.headers)?;
    let mut pcfg = args.plan.to_config()?;
    pcfg.progress = Some(plan_progress());
    let mut plan = tokio::task::spawn_blocking(move || bench_workload::plan::build_plan(pcfg))
        .await
        .map_err(|e| CliError::Failed(format!("planning failed: {e}")))?
        .map_err(plan_error)?;
    if let Some(r) = &resume {
        // The same plan, less the sessions already finished.
        r.check_plan(plan.summary.sessions, plan.summary.turns)?;
        plan.sessions.retain(|s| !r.kept_ids.contains(&*s.id));
    }
    let plan = Arc::new(plan);

    // The server: given, or the embedded simulator.
    let (embedded, base_url) = crate::server_or_embedded(
        args.base_url.as_deref(),
        &args.sim.to_model_args(),
        args.model.as_deref(),
    )
    .await?;
    let result = replay(
        &args,
        plan,
        &base_url,
        headers,
        extra_body,
        slo,
        embedded.is_some(),
        resume.as_mut(),
    )
    .await;
    if let Some(s) = embedded {
        s.shutdown().await;
    }
    result
}

#[allow(clippy::too_many_arguments)]
async fn replay(
    args: &RunCmd,
    plan: Arc<bench_workload::plan::Plan>,
    base_url: &str,
    headers: Vec<(String, String)>,
    extra_body: serde_json::Map<String, serde_json::Value>,
    slo: Option<Slo>,
    embedded: bool,
    mut resume: Option<&mut crate::resume::Resume>,
) -> Result<(), CliError> {
    let header_names = crate::resume::header_names(&headers);
    let mut ccfg = ClientConfig::new(base_url);
    ccfg.headers = headers;
    ccfg.timeout = args.turn_timeout;
    // Scrapes use their own connection, never one of the workers'.
    let scrape_client = Client::new(ccfg.clone()).map_err(|e| CliError::Usage(e.to_string()))?;
    let client = Client::new(ccfg).map_err(|e| CliError::Usage(e.to_string()))?;
    // Readiness: /v1/models answers (model name and window).
    let models = wait_ready(&client).await?;
    let model = match &args.model {
        Some(m) => m.clone(),
        None => models["data"][0]["id"]
            .as_str()
            .map(str::to_owned)
            .ok_or_else(|| {
                CliError::Failed("GET /v1/models listed no model (pass --model)".into())
            })?,
    };
    let max_model_len = args
        .max_model_len
        .or_else(|| models["data"][0]["max_model_len"].as_u64())
        // llama.cpp: the per-slot window.
        .or_else(|| models["data"][0]["meta"]["n_ctx"].as_u64());
    let detected = crate::backend::detect(&client, &models).await;
    let backend = match args.backend {
        Some(b) => {
            if b != detected.backend {
                eprintln!(
                    "warning: --backend {} but the server looks like {} ({}); using {}",
                    b.name(),
                    detected.backend.name(),
                    detected.evidence,
                    b.name()
                );
            }
            b
        }
        None => detected.backend,
    };

    // Open loop: no worker count, a cap only when --concurrency is given.
    let concurrency = match args.rate {
        Some(_) => args.plan.concurrency.unwrap_or(0),
        None => args.plan.concurrency(),
    };
    let mut cfg = RunConfig::new(model, concurrency);
    cfg.arrival = args.rate.map(|rate| Arrival {
        rate,
        process: match args.arrival {
            ArrivalArg::Poisson => ArrivalProcess::Poisson,
            ArrivalArg::Constant => ArrivalProcess::Constant,
        },
        seed: args.plan.seed,
    });
    cfg.warmup_sessions = args.warmup_sessions;
    cfg.ramp_up = args.ramp_up;
    cfg.return_cached_tokens_details = backend == Backend::Sglang;
    cfg.duration = args.duration;
    cfg.max_duration = args.max_duration;
    cfg.turn_timeout = args.turn_timeout;
    cfg.session_timeout = args.session_timeout;
    cfg.max_model_len = max_model_len;
    cfg.gap_scale = args.gap_scale;
    cfg.no_gaps = args.no_gaps;
    cfg.gap_cap_ms = args.plan.gap_cap_ms;
    cfg.cache_bust = !args.no_cache_bust;
    cfg.legacy_max_tokens = args.legacy_max_tokens;
    cfg.ignore_eos = !args.no_ignore_eos;
    cfg.content_mode = match args.content_mode {
        ContentModeArg::Trace => ContentMode::Trace,
        ContentModeArg::Model => ContentMode::Model,
    };
    cfg.stream = !args.disable_stream;
    cfg.extra_body = extra_body;
    cfg.routing_header = match &args.routing_key {
        Some(h) => Some(header_name(h, "--routing-key")?),
        None => None,
    };
    cfg.worker_header = match &args.worker_header {
        Some(h) => Some(header_name(h, "--worker-header")?),
        None => None,
    };

    // The run directory.
    let dir = args.run_dir.clone().unwrap_or_else(default_run_dir);
    std::fs::create_dir_all(&dir)
        .map_err(|e| CliError::Failed(format!("cannot create {}: {e}", dir.display())))?;
    if args.flush_cache {
        let path = crate::backend::flush_cache(&client, backend).await?;
        eprintln!("bench run: prefix cache flushed (POST {path})");
    }
    let config_json = match resume.as_deref_mut() {
        // A resumed run keeps its run.json; its records now say what is kept.
        Some(r) => {
            r.apply()?;
            if !r.replay_warmup {
                cfg.warmup_sessions = 0;
            }
            cfg.time_origin_s = r.time_origin_s;
            for line in &r.repairs {
                eprintln!("warning: {line}");
            }
            eprintln!(
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
            );
            r.run_json.clone()
        }
        None => {
            let c = serde_json::json!({
                "base_url": client.base_url(),
                "embedded_simulator": embedded,
                "backend": backend,
                "backend_detected": detected,
                "flush_cache": args.flush_cache,
                "run": cfg,
                "plan": plan.summary,
                "tool_version": env!("CARGO_PKG_VERSION"),
                "pid": std::process::id(),
                "auth": bench_transport::Auth::from_env().describe(),
                "args": crate::resume::recordable(args),
                "header_names": header_names,
            });
            write_json(&dir.join("run.json"), &c)?;
            c
        }
    };
    let events_file = std::fs::OpenOptions::new()
        .create(true)
        .append(true)
        .open(dir.join("events.jsonl"))
        .map_err(|e| CliError::Failed(format!("cannot write {}: {e}", dir.display())))?;
    let events = Arc::new(Events(std::sync::Mutex::new(events_file)));
    let mut opened = serde_json::json!({
        "pid": std::process::id(),
        "host": crate::lifecycle::host(),
        "process_start_utc": crate::lifecycle::process_start_utc(std::process::id()),
        "sessions_planned": plan.summary.sessions,
        "turns_planned": plan.summary.turns,
        "concurrency": cfg.concurrency,
        "rate": cfg.arrival.map(|a| a.rate),
        "warmup_sessions": cfg.warmup_sessions,
        "duration_s": cfg.duration.map(|d| d.as_secs_f64()),
        "max_duration_s": cfg.max_duration.map(|d| d.as_secs_f64()),
    });
    match resume.as_deref() {
        Some(r) => {
            if let (Some(o), Value::Object(extra)) = (opened.as_object_mut(), r.event_fields()) {
                o.extend(extra);
            }
            events.emit("run.resumed", opened);
        }
        None => events.emit("run.started", opened),
    }
    // What this process plays (a resumed run: the sessions not kept).
    let turns_to_play: u64 = plan.sessions.iter().map(|s| s.turns.len() as u64).sum();
    let writer = Arc::new(
        RunDirWriter::create(&dir)
            .map_err(|e| CliError::Failed(format!("cannot write {}: {e}", dir.display())))?,
    );
    let load = match (cfg.arrival, cfg.concurrency) {
        (Some(a), 0) => format!("{} sessions/s ({:?})", a.rate, a.process),
        (Some(a), c) => format!(
            "{} sessions/s ({:?}, at most {c} at once)",
            a.rate, a.process
        ),
        (None, c) => format!("C={c}"),
    };
    eprintln!(
        "bench run: {} sessions ({} turns) at {load} against {} [{}]{} → {}",
        plan.sessions.len(),
        turns_to_play,
        client.base_url(),
        backend.name(),
        if embedded {
            " (embedded simulator)"
        } else {
            ""
        },
        dir.display()
    );
    let cancel = CancelToken::new();
    let sig = crate::lifecycle::spawn_signals(cancel.clone(), args.grace);
    let beat = Arc::new(crate::lifecycle::Beat::default());
    let ev = events.clone();
    let heartbeat = crate::lifecycle::spawn_heartbeat(beat.clone(), HEARTBEAT_EVERY, move |f| {
        ev.emit("heartbeat", f)
    });
    let concurrency = cfg.concurrency;
    let base_url = client.base_url().to_owned();
    let start_utc = crate::output::utc_now();
    let progress = Arc::new(crate::progress::Progress::start(
        cfg.duration.is_none().then_some(turns_to_play),
        concurrency,
        [cfg.duration, cfg.max_duration].into_iter().flatten().min(),
        args.progress_interval,
        if args.quiet {
            crate::progress::Mode::Off
        } else {
            crate::progress::Mode::auto()
        },
    ));
    let phase = Arc::new(crate::scrape::PhaseTracker::default());
    let scraper = if args.no_metrics {
        None
    } else {
        let ev = events.clone();
        Some(
            crate::scrape::Scraper::start(
                scrape_client,
                args.metrics_interval,
                cfg.time_origin_s,
                &dir,
                phase.clone(),
                move |reason| {
                    eprintln!("warning: /metrics scraping disabled: {reason}");
                    ev.emit("scrape.disabled", serde_json::json!({ "reason": reason }));
                },
            )
            .await,
        )
    };
    let mut outcome = bench_runner::run(
        plan,
        client,
        cfg.clone(),
        vec![
            writer.clone(),
            progress.clone(),
            events.clone(),
            phase,
            beat,
        ],
        cancel,
    )
    .await;
    progress.finish();
    let scrapes = match scraper {
        Some(s) => s.finish().await,
        None => Vec::new(),
    };
    sig.abort();
    heartbeat.abort();
    // The run's records: those an earlier segment kept, then this process's.
    let (mut turns, mut sessions) = match resume.as_deref() {
        Some(r) => r.kept_records()?,
        None => (Vec::new(), Vec::new()),
    };
    turns.append(&mut outcome.turns);
    turns.sort_by(|a, b| a.end_s.total_cmp(&b.end_s));
    sessions.append(&mut outcome.sessions);
    let elapsed_s =
        resume.as_deref().map_or(0.0, |r| r.prior_measured_s) + outcome.elapsed.as_secs_f64();
    let (by, reason) = stop_reason(&outcome, &cfg, &sessions);
    events.emit(
        "run.stopped",
        serde_json::json!({"by": by, "reason": reason}),
    );
    let info = RunInfo {
        concurrency,
        steady_frac: args.steady_frac,
        duration_s: elapsed_s,
        slo,
        config: config_json,
        open_loop: args.rate.is_some(),
    };
    let mut result = bench_report::compute(&turns, &sessions, &info);
    if scrapes
        .iter()
        .any(|s| matches!(s.phase.as_str(), "measuring" | "draining" | "final"))
    {
        result.server =
            serde_json::to_value(bench_telemetry::summarize(&scrapes)).unwrap_or_default();
    }
    write_json(&dir.join("result.json"), &result)?;
    if let Some(path) = &args.output {
        let ctx = crate::output::LineContext {
            utc: start_utc,
            run_dir: dir.clone(),
            base_url,
            model: cfg.model.clone(),
            concurrency,
            rate: args.rate,
            duration_s: args.duration.map(|d| d.as_secs_f64()),
            elapsed_s,
            stopped_by: by.to_string(),
        };
        crate::output::append_result_line(path, &crate::output::result_line(&result, &ctx))?;
    }
    if let Some(path) = &args.csv {
        crate::output::write_turns_csv(path, &turns)?;
    }
    for e in writer.errors() {
        eprintln!("warning: {e}");
    }
    if args.json {
        let text = serde_json::to_string_pretty(&result)
            .map_err(|e| CliError::Failed(format!("cannot encode the result: {e}")))?;
        out(&format!("{text}\n"))?;
    } else {
        out(&result.console())?;
        out(&format!("run directory: {}\n", dir.display()))?;
    }
    if !outcome.task_failures.is_empty() {
        return Err(CliError::Failed(format!(
            "{} replay task(s) failed (a bug; their sessions were cut, every record made \
             before is kept): {}",
            outcome.task_failures.len(),
            outcome.task_failures.join("; ")
        )));
    }
    let total = turns.len();
    let failed = turns
        .iter()
        .filter(|t| t.status != bench_report::record::TurnStatus::Ok)
        .count();
    if total == 0 {
        return Err(CliError::Failed("no turn was played".into()));
    }
    let rate = failed as f64 / total as f64;
    if rate > args.max_error_rate {
        return Err(CliError::Failed(format!(
            "{failed} of {total} turns failed ({:.1}%), above --max-error-rate {}",
            rate * 100.0,
            args.max_error_rate
        )));
    }
    Ok(())
}

/// `run.stopped`'s `by` and `reason`. `completed`: the pool was played and every measured
/// session reached its last turn (failed turns included); `exhausted`: the pool was played but
/// some sessions ended early (context guard or session timeout); `error`: a replay task failed.
fn stop_reason(
    outcome: &bench_runner::RunOutcome,
    cfg: &bench_runner::RunConfig,
    sessions: &[bench_report::record::SessionRecord],
) -> (&'static str, String) {
    use bench_report::record::SessionStatus;
    if let Some(first) = outcome.task_failures.first() {
        return (
            "error",
            format!(
                "{} replay task(s) failed: {first}",
                outcome.task_failures.len()
            ),
        );
    }
    match outcome.stopped_by {
        StopReason::Exhausted => {
            let measured = sessions.iter().filter(|s| !s.warmup);
            let early = measured
                .clone()
                .filter(|s| {
                    matches!(
                        s.status,
                        SessionStatus::ContextGuard | SessionStatus::Timeout
                    )
                })
                .count();
            let n = measured.count();
            if early == 0 {
                ("completed", format!("all {n} planned sessions were played"))
            } else {
                (
                    "exhausted",
                    format!(
                        "the pool was played; {early} of {n} sessions ended early (context \
                         guard or session timeout)"
                    ),
                )
            }
        }
        StopReason::Duration => (
            "duration",
            format!(
                "--duration {:?} passed; sessions in flight stopped at a turn boundary",
                cfg.duration.unwrap_or_default()
            ),
        ),
        StopReason::MaxDuration => (
            "max_duration",
            format!(
                "the --max-duration fuse ({:?}) blew; turns in flight were cut",
                cfg.max_duration.unwrap_or_default()
            ),
        ),
        StopReason::Cancelled => (
            "signal",
            "SIGINT or SIGTERM: no new turn was sent; turns in flight finished or were cut \
             after the grace period"
                .to_owned(),
        ),
    }
}

/// Waits (up to 60 s) for `GET /v1/models` to answer 200; returns its JSON.
async fn wait_ready(client: &Client) -> Result<serde_json::Value, CliError> {
    let deadline = std::time::Instant::now() + Duration::from_secs(60);
    let mut last_err;
    loop {
        match client
            .get("/v1/models", Some(Duration::from_secs(10)))
            .await
        {
            Ok(r) if r.status.is_success() => {
                return serde_json::from_slice(&r.body)
                    .map_err(|e| CliError::Failed(format!("malformed_json: GET /v1/models: {e}")));
            }
            Ok(r) => last_err = format!("GET /v1/models answered HTTP {}", r.status.as_u16()),
            Err(e) => {
                if e.kind() == bench_transport::ErrorKind::InvalidRequest {
                    return Err(CliError::Usage(e.to_string()));
                }
                last_err = e.to_string();
            }
        }
        if std::time::Instant::now() >= deadline {
            return Err(CliError::Failed(format!(
                "server not ready after 60 s: {last_err}"
            )));
        }
        tokio::time::sleep(Duration::from_millis(500)).await;
    }
}
