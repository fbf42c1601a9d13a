//! `bench compare`: a candidate run against a base, with bootstrap confidence intervals.

use std::path::PathBuf;

use clap::Args;

use crate::CliError;

/// `bench compare` flags.
#[derive(Debug, Clone, Args)]
pub struct CompareCmd {
    /// The base run directory.
    pub base: PathBuf,
    /// The candidate run directory.
    pub cand: PathBuf,
}

/// Runs `bench compare`.
pub fn run_compare(_args: CompareCmd) -> Result<(), CliError> {
    Err(CliError::Failed("bench compare: not written yet".into()))
}
