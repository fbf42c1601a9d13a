//! `bench plan` and `bench import`.

use std::time::Duration;

use bench_args::{ImportCmd, PlanCmd, plan_error};
use bench_workload::import::{ImportFormat, ImportOptions, ImportToFileError};
use bench_workload::plan::{ProgressFn, build_plan};
use bench_workload::tokenize::TokenizerSpec;

use crate::{CliError, out};

/// Progress lines on stderr for long plans: nothing during the first 2 s, then at most one
/// line every 2 s.
pub fn plan_progress() -> ProgressFn {
    ProgressFn::lines_every(Duration::from_secs(2), |line| eprintln!("planning: {line}"))
}

/// Runs `bench plan`.
pub fn run_plan(args: PlanCmd) -> Result<(), CliError> {
    let mut cfg = args.plan.to_config()?;
    cfg.progress = Some(plan_progress());
    if cfg.tokenizer == TokenizerSpec::Chars {
        eprintln!("warning: no tokenizer: counting ~4 characters per token");
    }
    let plan = build_plan(cfg).map_err(plan_error)?;
    if args.json {
        let text = serde_json::to_string_pretty(&plan.summary)
            .map_err(|e| CliError::Failed(format!("cannot encode the summary: {e}")))?;
        out(&format!("{text}\n"))
    } else {
        out(&plan.summary.text())
    }
}

/// Runs `bench import`.
pub fn run_import(args: ImportCmd) -> Result<(), CliError> {
    let format: ImportFormat = args
        .from
        .parse()
        .map_err(|e| CliError::Usage(format!("--from: {e}")))?;
    let opts = ImportOptions {
        skip_invalid: args.skip_invalid,
        max_line_bytes: args.max_trace_line,
        ..ImportOptions::default()
    };
    let (n, stats) =
        bench_workload::import::import_to_file(format, &args.inputs, &opts, &args.output).map_err(
            |e| match e {
                ImportToFileError::Input(e) => CliError::Usage(e.to_string()),
                ImportToFileError::Target(e) => CliError::Usage(e.to_string()),
                ImportToFileError::Output(e) => CliError::Failed(e.to_string()),
            },
        )?;
    let mut text = format!(
        "bench import: {} sessions, {} turns from {} → {}\n",
        n,
        stats.turns,
        format.name(),
        args.output.display()
    );
    if stats.skipped > 0 {
        text.push_str(&format!("  skipped {} invalid records\n", stats.skipped));
    }
    for note in &stats.notes {
        text.push_str(&format!("  note: {note}\n"));
    }
    out(&text)
}
