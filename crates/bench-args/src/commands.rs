//! The flags of `bench compare`, `bench report`, `bench merge`, `bench serve` and `bench
//! status`.

use std::net::SocketAddr;
use std::path::PathBuf;
use std::time::Duration;

use bench_report::Slo;
use bench_report::compare;
use clap::{Args, ValueEnum};

use crate::CliError;

const AFTER_HELP: &str = "\
Each side is one run directory (turns.jsonl and result.json, as `bench run --run-dir` leaves \
them) or several repeats of one configuration separated by commas (`runs/a1,runs/a2`). Only \
measured turns count (warmup and superseded records are skipped); latencies are over the ok \
ones. The metrics: TTFT p50 and p99, TPOT p50, e2e p50, output tok/s (Σ output tokens of the ok \
turns ÷ the measured run's wall time, result.json's overall.span_s) and, when both sides ran \
with --slo (or --slo is given here), goodput (the share of measured turns, failed ones \
included, that are ok and meet the SLO).

The interval: each run's turns are resampled with replacement (within each run when a side \
has repeats, then pooled) --resamples times from a generator seeded with --seed; the 95% CI \
is the 2.5th to 97.5th percentile of the resampled relative changes (candidate − base) ÷ base. \
With repeats, each side's run-to-run coefficient of variation (sd ÷ mean of the per-run \
values) is shown too.

The verdict: a metric is `worse` when its whole CI lies on the worse side of 0 (above for \
latencies, below for throughput and goodput) and its change is beyond --threshold in that \
direction; `better` the same the other way; else `no significant change`. A 95% interval \
excludes 0 by chance about once in 20: the threshold is what keeps noise from being a verdict, \
so a metric whose interval is wider than ±threshold is noted (more turns or repeats needed).

Runs must come from the same plan (run.json's spec.plan, its concurrency aside, and the \
plan's session and turn counts); the first differing key is named. Exit codes: 0 no metric \
worse, 1 a metric worse (after the table), 2 bad usage or input (a missing result.json, \
different plans without --force).";

/// `bench compare` flags.
#[derive(Debug, Clone, Args)]
#[command(after_long_help = AFTER_HELP)]
pub struct CompareCmd {
    /// The base: a run directory, or several repeats of one configuration separated by commas.
    #[arg(value_name = "BASE")]
    pub base: String,
    /// The candidate: a run directory, or several repeats separated by commas.
    #[arg(value_name = "CAND")]
    pub cand: String,
    /// A change must exceed this fraction (0.05 = 5%) in a metric's worse or better direction,
    /// besides its 95% CI excluding 0, to be a verdict.
    #[arg(long, default_value_t = compare::DEFAULT_THRESHOLD)]
    pub threshold: f64,
    /// Also write the comparison as a markdown table to FILE.
    #[arg(long, value_name = "FILE")]
    pub markdown: Option<PathBuf>,
    /// Print the comparison as one JSON object instead of the table.
    #[arg(long)]
    pub json: bool,
    /// Compare runs made from different plans anyway (the difference is noted).
    #[arg(long)]
    pub force: bool,
    /// Bootstrap resamples.
    #[arg(long, value_name = "N", default_value_t = compare::DEFAULT_RESAMPLES)]
    pub resamples: u32,
    /// Seed of the bootstrap's generator (the same seed gives the same intervals).
    #[arg(long, value_name = "N", default_value_t = compare::DEFAULT_SEED)]
    pub seed: u64,
    /// Measure goodput on both sides against this SLO (e.g. `ttft_ms=500,tpot_ms=50`) instead
    /// of the SLO the runs were made with.
    #[arg(long)]
    pub slo: Option<Slo>,
}

impl CompareCmd {
    /// The base's and the candidate's run directories.
    pub fn sides(&self) -> Result<(Vec<PathBuf>, Vec<PathBuf>), CliError> {
        Ok((dirs("BASE", &self.base)?, dirs("CAND", &self.cand)?))
    }
}

/// The directories of one side: `a,b,c` (empty pieces are an error).
fn dirs(side: &str, list: &str) -> Result<Vec<PathBuf>, CliError> {
    let dirs: Vec<PathBuf> = list.split(',').map(PathBuf::from).collect();
    if dirs.iter().any(|d| d.as_os_str().is_empty()) {
        return Err(CliError::Usage(format!(
            "{side} `{list}`: expected a run directory or a comma-separated list of them"
        )));
    }
    Ok(dirs)
}

/// What `bench report` writes.
#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum)]
pub enum ReportFormat {
    /// The console report `bench run` prints (the validity verdict first).
    Text,
    /// The result document (`result.json`'s content, recomputed when stale).
    Json,
    /// One row per turn record (the columns of `bench run --csv`).
    Csv,
    /// The verdict, its checks and the headline figures as markdown tables.
    Markdown,
    /// One self-contained HTML page (no network asset) with SVG charts: TTFT and e2e CDFs,
    /// TTFT by turn and against input length, throughput and active sessions over time, the
    /// server's KV usage, queue and prefix-cache hit rate over time, a session timeline.
    Html,
}

/// `bench report` flags.
#[derive(Debug, Clone, Args)]
pub struct ReportCmd {
    /// The run directory (as written by `bench run --run-dir`), or its result.json.
    pub run: PathBuf,
    /// The format.
    #[arg(long, value_enum, default_value = "text")]
    pub format: ReportFormat,
    /// Write to this file instead of stdout (written whole, then renamed into place: a failure
    /// never leaves half a file).
    #[arg(short = 'o', long = "output", value_name = "FILE")]
    pub output: Option<PathBuf>,
}

/// `bench merge` flags.
#[derive(Debug, Clone, Args)]
pub struct MergeCmd {
    /// The shards' run directories (`bench run --shard I/N --run-dir DIR`), in any order.
    #[arg(required = true, value_name = "SHARD_DIR")]
    pub dirs: Vec<PathBuf>,
    /// The merged run directory to write (must not exist, or be empty).
    #[arg(short, long, value_name = "DIR")]
    pub output: PathBuf,
    /// Merge even when shards are missing or did not finish; the result's validity then fails
    /// its `shards` check, naming them.
    #[arg(long)]
    pub partial: bool,
    /// Print the merged result.json (a journeys run: report.json) instead of a summary line.
    #[arg(long)]
    pub json: bool,
}

/// `bench serve` flags.
#[derive(Debug, Clone, Args)]
pub struct ServeCmd {
    /// Where to listen. `:0` picks a free port (the line on stderr says which). A
    /// non-loopback address needs --token.
    #[arg(long, default_value = bench_control::DEFAULT_BIND)]
    pub bind: SocketAddr,
    /// Required as `Authorization: Bearer TOKEN` on every API route and /metrics
    /// (`?access_token=` for EventSource). Prefer the environment variable: a flag shows in `ps`.
    #[arg(long, env = "BENCH_SERVE_TOKEN", hide_env_values = true)]
    pub token: Option<String>,
    /// Where run directories go (`DIR/<id>`); finished runs found there are listed after a
    /// restart.
    #[arg(long, value_name = "DIR", default_value = "runs")]
    pub runs_dir: PathBuf,
}

/// `bench status` flags.
#[derive(Debug, Clone, Args)]
pub struct StatusCmd {
    /// The run directory (as written by `bench run --run-dir`).
    pub run_dir: PathBuf,
    /// Print one JSON object (stable keys) instead of text.
    #[arg(long)]
    pub json: bool,
    /// A run with turns in flight and no turn finished for this long (or no heartbeat for this
    /// long) is reported as stalled (e.g. 90s, 5m).
    #[arg(long, value_parser = crate::run::parse_duration, default_value = "120s")]
    pub stall_after: Duration,
}
