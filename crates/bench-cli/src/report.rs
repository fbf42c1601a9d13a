//! `bench report`: one run's report in text, JSON, CSV, markdown or HTML.

use std::path::PathBuf;

use clap::Args;

use crate::CliError;

/// `bench report` flags.
#[derive(Debug, Clone, Args)]
pub struct ReportCmd {
    /// The run directory, or its result.json.
    pub run: PathBuf,
}

/// Runs `bench report`.
pub fn run_report(_args: ReportCmd) -> Result<(), CliError> {
    Err(CliError::Failed("bench report: not written yet".into()))
}
