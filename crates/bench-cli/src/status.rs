//! `bench status`: what a run directory says about its run (see `bench_telemetry::health`).

use std::path::PathBuf;
use std::time::Duration;

use bench_telemetry::health::{self, LocalSystem};
use clap::Args;

use crate::{CliError, out};

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
    #[arg(long, value_parser = crate::run_args::parse_duration, default_value = "120s")]
    pub stall_after: Duration,
}

/// Runs `bench status`.
pub fn run_status(args: StatusCmd) -> Result<(), CliError> {
    let status = health::status(&args.run_dir, args.stall_after, &LocalSystem)
        .map_err(|e| CliError::Usage(e.to_string()))?;
    if args.json {
        let text = serde_json::to_string_pretty(&status)
            .map_err(|e| CliError::Failed(format!("cannot encode the status: {e}")))?;
        out(&format!("{text}\n"))
    } else {
        out(&status.text(args.stall_after))
    }
}
