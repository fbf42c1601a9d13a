//! `bench report`: one run's report in text, JSON, CSV, markdown or HTML.

use std::io::Write;
use std::path::{Path, PathBuf};

use clap::{Args, ValueEnum};

use crate::{CliError, out};

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

/// Runs `bench report`.
pub fn run_report(args: ReportCmd) -> Result<(), CliError> {
    let data = bench_run::report::load(&args.run).map_err(|e| CliError::Usage(e.to_string()))?;
    for note in &data.notes {
        eprintln!("warning: {note}");
    }
    if let Some(why) = &data.recomputed {
        eprintln!("bench report: recomputed the result from the records: {why}");
    }
    let body: Vec<u8> = match args.format {
        ReportFormat::Text => data.result.console().into_bytes(),
        ReportFormat::Json => {
            let mut v = serde_json::to_vec_pretty(&data.result)
                .map_err(|e| CliError::Failed(format!("cannot encode the result: {e}")))?;
            v.push(b'\n');
            v
        }
        ReportFormat::Csv => bench_report::export::turns_csv(&data.turns),
        ReportFormat::Markdown => data.result.markdown(&data.title).into_bytes(),
        ReportFormat::Html => bench_report::html::html(&data).into_bytes(),
    };
    match &args.output {
        None => match std::str::from_utf8(&body) {
            Ok(s) => out(s),
            Err(_) => Err(CliError::Failed("the report is not UTF-8".into())),
        },
        Some(path) => {
            write_whole(path, &body)
                .map_err(|e| CliError::Failed(format!("cannot write {}: {e}", path.display())))?;
            eprintln!("bench report: wrote {}", path.display());
            Ok(())
        }
    }
}

/// Writes `body` to a temporary file beside `path`, then renames it over `path`.
pub(crate) fn write_whole(path: &Path, body: &[u8]) -> std::io::Result<()> {
    let body = crate::secrets::scrub_bytes(body);
    let name = path
        .file_name()
        .ok_or_else(|| std::io::Error::new(std::io::ErrorKind::InvalidInput, "not a file name"))?
        .to_string_lossy()
        .into_owned();
    let tmp = path.with_file_name(format!(".{name}.{}.tmp", std::process::id()));
    let written = (|| {
        let mut f = std::fs::File::create(&tmp)?;
        f.write_all(&body)?;
        f.sync_all()?;
        std::fs::rename(&tmp, path)
    })();
    if written.is_err() {
        let _ = std::fs::remove_file(&tmp);
    }
    written
}
