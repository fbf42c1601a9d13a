//! `bench compare`: a candidate run against a base, with bootstrap confidence intervals
//! (`bench_report::compare`).

use std::path::{Path, PathBuf};

use bench_report::Slo;
use bench_report::compare::{self, CompareError, CompareOptions, CompareRun, LoadError};
use clap::Args;

use crate::{CliError, out};

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

/// One run directory, or a one-line usage error naming the file. A missing or unreadable
/// result.json is recomputed from the records (as `bench report` does) when the directory has
/// its run.json.
fn load(dir: &Path) -> Result<CompareRun, CliError> {
    let recompute = |path: &Path, what: String| match bench_run::report::load(dir) {
        Ok(data) => {
            for note in &data.notes {
                eprintln!("warning: {note}");
            }
            eprintln!(
                "bench compare: {}: recomputed the result from the records ({what})",
                dir.display()
            );
            Ok(CompareRun::new(
                dir.display().to_string(),
                data.turns,
                data.result,
            ))
        }
        Err(e) => Err(CliError::Usage(format!(
            "{}: {what}, and it cannot be recomputed ({e})",
            path.display()
        ))),
    };
    match CompareRun::load(dir) {
        Ok(run) => Ok(run),
        Err(LoadError::MissingResult(path)) => recompute(&path, "missing".to_string()),
        Err(LoadError::BadResult { path, source }) => {
            recompute(&path, format!("not a run's result ({source})"))
        }
        Err(e) => Err(CliError::Usage(e.to_string())),
    }
}

/// Runs `bench compare`.
pub fn run_compare(args: CompareCmd) -> Result<(), CliError> {
    let base = dirs("BASE", &args.base)?
        .iter()
        .map(|d| load(d))
        .collect::<Result<Vec<_>, _>>()?;
    let cand = dirs("CAND", &args.cand)?
        .iter()
        .map(|d| load(d))
        .collect::<Result<Vec<_>, _>>()?;
    let opts = CompareOptions {
        threshold: args.threshold,
        resamples: args.resamples,
        seed: args.seed,
        force: args.force,
        slo: args.slo,
    };
    let cmp = compare::compare(&base, &cand, &opts).map_err(|e| match e {
        CompareError::PlansDiffer(_) | CompareError::RunPlansDiffer { .. } => {
            CliError::Usage(format!("{e} (--force compares anyway)"))
        }
        CompareError::InvalidOptions(m) => CliError::Usage(format!("bench compare: {m}")),
        e => CliError::Usage(e.to_string()),
    })?;
    if let Some(path) = &args.markdown {
        std::fs::write(path, crate::secrets::scrub(&cmp.markdown()).as_bytes())
            .map_err(|e| CliError::Failed(format!("cannot write {}: {e}", path.display())))?;
    }
    if args.json {
        let text = serde_json::to_string_pretty(&cmp)
            .map_err(|e| CliError::Failed(format!("cannot encode the comparison: {e}")))?;
        out(&format!("{text}\n"))?;
    } else {
        out(&cmp.text())?;
    }
    if cmp.regressed() {
        let worse: Vec<String> = cmp
            .regressions()
            .map(|r| {
                format!(
                    "{} {:+.1}%",
                    r.metric.label(),
                    r.change.unwrap_or(f64::NAN) * 100.0
                )
            })
            .collect();
        // Rounded so that 0.07 reads 7, not 7.000000000000001.
        let threshold = (args.threshold * 100_000.0).round() / 1000.0;
        return Err(CliError::Failed(format!(
            "regression beyond the {threshold}% threshold: {}",
            worse.join(", ")
        )));
    }
    Ok(())
}
