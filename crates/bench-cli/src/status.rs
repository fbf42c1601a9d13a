//! `bench status`: what a run directory says about its run (see `bench_telemetry::health`).

use bench_args::StatusCmd;
use bench_telemetry::health::{self, LocalSystem};

use crate::{CliError, out};

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
