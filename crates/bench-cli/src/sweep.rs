//! `bench sweep`: one run per load level, to saturation.

use clap::Args;

use crate::CliError;

/// `bench sweep` flags.
#[derive(Debug, Clone, Args)]
pub struct SweepCmd {
    /// Concurrency levels, comma-separated.
    #[arg(long, value_delimiter = ',')]
    pub concurrency: Vec<u32>,
}

/// Runs `bench sweep`.
pub async fn run_sweep(_args: SweepCmd) -> Result<(), CliError> {
    Err(CliError::Failed("bench sweep: not written yet".into()))
}
