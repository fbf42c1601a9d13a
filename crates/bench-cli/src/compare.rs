//! `bench compare`: a candidate run against a base, with bootstrap confidence intervals
//! (`bench_report::compare`).

use std::path::Path;

use bench_args::CompareCmd;
use bench_report::compare::{self, CompareError, CompareOptions, CompareRun, LoadError};

use crate::{CliError, out};

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
    let (base, cand) = args.sides()?;
    let base = base
        .iter()
        .map(|d| load(d))
        .collect::<Result<Vec<_>, _>>()?;
    let cand = cand
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
