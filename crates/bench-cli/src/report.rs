//! `bench report`: one run's report in text, JSON, CSV, markdown or HTML.

use std::io::Write;
use std::path::Path;

use bench_args::{ReportCmd, ReportFormat};

use crate::{CliError, out};

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
