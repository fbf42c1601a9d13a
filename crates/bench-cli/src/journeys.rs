//! `bench journeys`: time user journeys (built-in packs or a declarative file), report, gate.

use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::Duration;

use bench_journeys::{
    Cancel, Comparison, Env, Gates, Journey, Report, SuiteConfig, mode_of, packs, run_suite, select,
};
use bench_transport::{Client, ClientConfig};
use clap::Args;

use crate::run_args::{EmbeddedSimArgs, parse_duration};
use crate::{CliError, out};

/// `bench journeys` flags.
#[derive(Debug, Clone, Args)]
pub struct JourneysCmd {
    /// Built-in pack: `openai` (any OpenAI-compatible server; the embedded simulator by
    /// default) or `agent-sessions` (an agent server's session API, e.g. Omnigent) [default:
    /// openai].
    #[arg(long, conflicts_with = "file")]
    pub pack: Option<String>,
    /// Journeys from a declarative TOML file instead of a pack (see docs/journeys.md).
    #[arg(long, value_name = "FILE")]
    pub file: Option<PathBuf>,
    /// Only these journeys, in this order (comma-separated).
    #[arg(long, value_delimiter = ',', value_name = "NAMES")]
    pub journeys: Vec<String>,
    /// List the journeys (name, kind, flags, description) and exit.
    #[arg(long)]
    pub list: bool,
    /// Server to time (http:// only). Without it the `openai` pack starts the embedded
    /// simulator; other journeys need it.
    #[arg(long, env = "BENCH_BASE_URL")]
    pub base_url: Option<String>,
    /// Timed operations per latency run (a journey's own cap may lower it).
    #[arg(long, default_value_t = 50)]
    pub iterations: u32,
    /// Untimed operations before timing (their errors are ignored).
    #[arg(long, default_value_t = 5)]
    pub warmup: u32,
    /// Operations in flight. Above 1, concurrency-safe journeys run as throughput.
    #[arg(short = 'c', long, default_value_t = 1)]
    pub concurrency: u32,
    /// Timed operations per throughput run.
    #[arg(long, default_value_t = 200)]
    pub requests: u32,
    /// Repeat every journey this many times (per-run rows plus a summary).
    #[arg(long, default_value_t = 1)]
    pub runs: u32,
    /// Per-request timeout.
    #[arg(long, value_parser = parse_duration, default_value = "30s")]
    pub timeout: Duration,
    /// Extra request header, `K=V` (repeatable).
    #[arg(long = "header", value_name = "K=V")]
    pub headers: Vec<String>,
    /// Write the versioned JSON report to FILE.
    #[arg(long, value_name = "FILE")]
    pub output: Option<PathBuf>,
    /// Write a markdown summary (for PR comments) to FILE.
    #[arg(long, value_name = "FILE")]
    pub markdown: Option<PathBuf>,
    /// Print the JSON report instead of the table.
    #[arg(long)]
    pub json: bool,
    /// Fail (exit 1) when a journey's mean req/s is below this.
    #[arg(long)]
    pub min_rps: Option<f64>,
    /// Fail (exit 1) when a journey's mean p50 is above this many ms.
    #[arg(long)]
    pub max_p50_ms: Option<f64>,
    /// Fail (exit 1) when a journey's mean p99 is above this many ms.
    #[arg(long)]
    pub max_p99_ms: Option<f64>,
    /// Compare with a previous `--output` report: a p50 or p95 regression beyond --threshold
    /// fails (exit 1); new and skipped journeys are reported, not failed. Both sides use the
    /// median over runs, so one disturbed run of three does not fail the gate.
    #[arg(long, value_name = "FILE")]
    pub baseline: Option<PathBuf>,
    /// Allowed relative regression against --baseline (0.2 = 20 %).
    #[arg(long, default_value_t = 0.2)]
    pub threshold: f64,
    /// Increases smaller than this many ms are never regressions (timer noise on
    /// sub-millisecond operations).
    #[arg(long, default_value_t = 0.0)]
    pub min_delta_ms: f64,
    /// Embedded simulator (openai pack without --base-url).
    #[command(flatten)]
    pub sim: EmbeddedSimArgs,
}

fn load_journeys(args: &JourneysCmd) -> Result<(String, Vec<Arc<dyn Journey>>), CliError> {
    if let Some(f) = &args.file {
        let text = std::fs::read_to_string(f)
            .map_err(|e| CliError::Usage(format!("--file {}: {e}", f.display())))?;
        let file = bench_journeys::declarative::parse(&f.display().to_string(), &text)
            .map_err(|e| CliError::Usage(e.to_string()))?;
        return Ok((f.display().to_string(), file.journeys()));
    }
    let name = args.pack.clone().unwrap_or_else(|| "openai".into());
    match packs::pack(&name) {
        Some(Ok(j)) => Ok((name, j)),
        Some(Err(e)) => Err(CliError::Failed(format!("the {name} pack: {e}"))),
        None => Err(CliError::Usage(format!(
            "unknown pack {name:?}; known: {}",
            packs::NAMES.join(", ")
        ))),
    }
}

fn write_file(path: &Path, text: &str) -> Result<(), CliError> {
    std::fs::write(path, text)
        .map_err(|e| CliError::Failed(format!("cannot write {}: {e}", path.display())))
}

/// Runs `bench journeys`.
pub async fn run_journeys(args: JourneysCmd) -> Result<(), CliError> {
    let (source, all) = load_journeys(&args)?;
    let journeys = select(all, &args.journeys).map_err(CliError::Usage)?;
    if args.list {
        return out(&bench_journeys::suite::listing(&journeys));
    }
    if args.runs == 0 || args.iterations == 0 || args.requests == 0 {
        return Err(CliError::Usage(
            "--runs, --iterations and --requests must be at least 1".into(),
        ));
    }
    if !(args.threshold.is_finite() && args.threshold >= 0.0) {
        return Err(CliError::Usage(
            "--threshold must be a non-negative number".into(),
        ));
    }
    // Read the baseline first: a bad file fails before minutes of measuring.
    let baseline = match &args.baseline {
        Some(p) => Some(Report::read(p).map_err(|e| CliError::Usage(format!("--baseline {e}")))?),
        None => None,
    };
    let is_openai = args.file.is_none() && args.pack.as_deref().is_none_or(|p| p == "openai");
    if args.base_url.is_none() && !is_openai {
        return Err(CliError::Usage(format!(
            "{source}: --base-url is required (only the openai pack has an embedded server)"
        )));
    }
    let headers = crate::parse_headers(&args.headers)?;
    let (embedded, base_url) =
        crate::server_or_embedded(args.base_url.as_deref(), &args.sim.to_model_args(), None)
            .await?;
    let result = measure(
        &args,
        &source,
        &journeys,
        &base_url,
        headers,
        embedded.is_some(),
        baseline,
    )
    .await;
    if let Some(s) = embedded {
        s.shutdown().await;
    }
    result
}

#[allow(clippy::too_many_arguments)]
async fn measure(
    args: &JourneysCmd,
    source: &str,
    journeys: &[Arc<dyn Journey>],
    base_url: &str,
    headers: Vec<(String, String)>,
    embedded: bool,
    baseline: Option<Report>,
) -> Result<(), CliError> {
    let mut ccfg = ClientConfig::new(base_url);
    ccfg.headers = headers;
    ccfg.timeout = args.timeout;
    let client = Client::new(ccfg).map_err(|e| CliError::Usage(e.to_string()))?;
    let env = Env::new(client);
    let cfg = SuiteConfig {
        iterations: args.iterations,
        warmup: args.warmup,
        concurrency: args.concurrency.max(1),
        requests: args.requests,
        runs: args.runs,
    };
    let cancel = Cancel::new();
    let c2 = cancel.clone();
    let sig = tokio::spawn(async move {
        if tokio::signal::ctrl_c().await.is_ok() {
            eprintln!("bench journeys: stopping: operations in flight finish, teardown runs");
            c2.cancel();
        }
    });
    eprintln!(
        "bench journeys: {} journey(s) from {source} against {}{} ({} run(s))",
        journeys.len(),
        env.client.base_url(),
        if embedded {
            " (embedded simulator)"
        } else {
            ""
        },
        cfg.runs
    );
    let total = cfg.runs;
    let results = run_suite(journeys, &env, &cfg, &cancel, |name, row| {
        let detail = match &row.setup_failure {
            Some(f) => format!("setup failed: {f}"),
            None => format!(
                "{} ok, {} failed, p50 {} ms",
                row.n_success,
                row.n_failures,
                row.p50_ms.map_or("—".into(), |v| format!("{v:.2}"))
            ),
        };
        eprintln!("bench journeys: {name} run {}/{total}: {detail}", row.run);
    })
    .await;
    sig.abort();
    let modes: serde_json::Map<String, serde_json::Value> = journeys
        .iter()
        .map(|j| {
            (
                j.name().to_owned(),
                mode_of(j.as_ref(), &cfg).as_str().into(),
            )
        })
        .collect();
    let report = bench_journeys::suite::report(
        results,
        serde_json::json!({
            "source": source,
            "base_url": env.client.base_url(),
            "embedded_simulator": embedded,
            "iterations": cfg.iterations,
            "warmup": cfg.warmup,
            "concurrency": cfg.concurrency,
            "requests": cfg.requests,
            "runs": cfg.runs,
            "timeout_s": args.timeout.as_secs_f64(),
            "modes": modes,
        }),
        bench_journeys::suite::git_sha(),
        bench_journeys::suite::host_info(&bench_run::lifecycle::host()),
    );
    let cmp = baseline
        .as_ref()
        .map(|b| Comparison::new(&report, b, args.threshold, args.min_delta_ms));
    if let Some(p) = &args.output {
        let text = serde_json::to_string_pretty(&report)
            .map_err(|e| CliError::Failed(format!("cannot encode the report: {e}")))?;
        write_file(p, &(text + "\n"))?;
    }
    if let Some(p) = &args.markdown {
        write_file(p, &report.markdown(cmp.as_ref()))?;
    }
    if args.json {
        let text = serde_json::to_string_pretty(&report)
            .map_err(|e| CliError::Failed(format!("cannot encode the report: {e}")))?;
        out(&format!("{text}\n"))?;
    } else {
        out(&report.console())?;
        if let Some(c) = &cmp {
            out(&report.markdown(Some(c)))?;
        }
    }
    // Verdicts: setup failures, gates, regressions.
    let mut problems = report.setup_failures();
    let gates = Gates {
        min_rps: args.min_rps,
        max_p50_ms: args.max_p50_ms,
        max_p99_ms: args.max_p99_ms,
    };
    problems.extend(gates.check(&report));
    if let Some(c) = &cmp {
        problems.extend(c.regressions());
    }
    if cancel.is_cancelled() {
        problems.push("cancelled (Ctrl-C): the report covers what ran".into());
    }
    if problems.is_empty() {
        return Ok(());
    }
    for p in &problems[..problems.len() - 1] {
        eprintln!("error: {p}");
    }
    Err(CliError::Failed(problems[problems.len() - 1].clone()))
}
