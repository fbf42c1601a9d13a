//! Loading native session traces: `.jsonl`, `.jsonl.zst`, one-session `.json` files, or a
//! directory of them with an optional `manifest.json` of default knobs.
//!
//! Files are streamed line by line: memory holds one line at a time, not the file.

use std::fs::File;
use std::io::{self, BufRead, BufReader, Read};
use std::path::{Path, PathBuf};

use crate::error::PlanError;
use crate::format::{Manifest, SessionRecord};

/// How to treat bad records.
#[derive(Debug, Clone, Copy, Default)]
pub struct LoadOptions {
    /// Count and skip invalid lines instead of failing on the first.
    pub skip_invalid: bool,
}

/// What a load saw.
#[derive(Debug, Clone, Default)]
#[non_exhaustive]
pub struct LoadReport {
    /// Session files read, in order.
    pub files: Vec<PathBuf>,
    /// `manifest.json` of a dataset directory.
    pub manifest: Option<Manifest>,
    /// Valid sessions handed on.
    pub sessions: u64,
    /// Invalid records skipped (with `skip_invalid`).
    pub skipped: u64,
    /// The first few skipped records' errors (`file:line: what`).
    pub skipped_examples: Vec<String>,
}

fn is_session_file(p: &Path) -> bool {
    let name = p.file_name().and_then(|n| n.to_str()).unwrap_or("");
    name != "manifest.json"
        && (name.ends_with(".jsonl") || name.ends_with(".jsonl.zst") || name.ends_with(".json"))
}

/// The session files of `path` (itself, or the session files of a directory, sorted) and its
/// manifest.
pub fn dataset_files(path: &Path) -> Result<(Vec<PathBuf>, Option<Manifest>), PlanError> {
    let meta = std::fs::metadata(path)
        .map_err(|e| PlanError::input(path, None, format!("cannot read: {e}")))?;
    if meta.is_file() {
        return Ok((vec![path.to_path_buf()], None));
    }
    let mut files = Vec::new();
    let entries = std::fs::read_dir(path)
        .map_err(|e| PlanError::input(path, None, format!("cannot list directory: {e}")))?;
    for entry in entries {
        let entry = entry.map_err(|e| PlanError::input(path, None, e.to_string()))?;
        let p = entry.path();
        if p.is_file() && is_session_file(&p) {
            files.push(p);
        }
    }
    files.sort();
    if files.is_empty() {
        return Err(PlanError::input(
            path,
            None,
            "directory holds no .jsonl, .jsonl.zst or .json session files",
        ));
    }
    let manifest_path = path.join("manifest.json");
    let manifest = if manifest_path.is_file() {
        let bytes = std::fs::read(&manifest_path)
            .map_err(|e| PlanError::input(&manifest_path, None, e.to_string()))?;
        let mut de = serde_json::Deserializer::from_slice(&bytes);
        let m: Manifest = serde_path_to_error::deserialize(&mut de)
            .map_err(|e| PlanError::input(&manifest_path, None, path_error(&e)))?;
        Some(m)
    } else {
        None
    };
    Ok((files, manifest))
}

fn path_error(e: &serde_path_to_error::Error<serde_json::Error>) -> String {
    let path = e.path().to_string();
    let inner = e.inner().to_string();
    if path == "." || path.is_empty() {
        inner
    } else {
        format!("{path}: {inner}")
    }
}

/// Parses one session from JSON bytes, naming the failing field.
pub fn parse_session(bytes: &[u8]) -> Result<SessionRecord, String> {
    let mut de = serde_json::Deserializer::from_slice(bytes);
    let rec: SessionRecord =
        serde_path_to_error::deserialize(&mut de).map_err(|e| path_error(&e))?;
    de.end()
        .map_err(|e| format!("trailing data after the session: {e}"))?;
    rec.check()?;
    Ok(rec)
}

/// Streams every session of `path` (file or directory) into `sink`.
pub fn for_each_session(
    path: &Path,
    opts: LoadOptions,
    sink: &mut dyn FnMut(SessionRecord) -> Result<(), PlanError>,
) -> Result<LoadReport, PlanError> {
    let (files, manifest) = dataset_files(path)?;
    let mut report = LoadReport {
        manifest,
        ..LoadReport::default()
    };
    for file in &files {
        let f = File::open(file)
            .map_err(|e| PlanError::input(file, None, format!("cannot open: {e}")))?;
        read_sessions(file, f, opts, &mut report, sink)?;
    }
    report.files = files;
    if report.sessions == 0 {
        let what = if report.skipped > 0 {
            format!(
                "no valid session ({} invalid records skipped)",
                report.skipped
            )
        } else {
            "no sessions found".to_string()
        };
        return Err(PlanError::input(path, None, what));
    }
    Ok(report)
}

/// Reads sessions from `reader`, named `file` in errors; `.zst` names are decompressed and
/// `.json` names hold one session (or an array of sessions).
pub fn read_sessions(
    file: &Path,
    reader: impl Read,
    opts: LoadOptions,
    report: &mut LoadReport,
    sink: &mut dyn FnMut(SessionRecord) -> Result<(), PlanError>,
) -> Result<(), PlanError> {
    let name = file.to_string_lossy();
    if name.ends_with(".json") {
        let mut bytes = Vec::new();
        BufReader::new(reader)
            .read_to_end(&mut bytes)
            .map_err(|e| PlanError::input(file, None, format!("cannot read: {e}")))?;
        if std::str::from_utf8(&bytes).is_err() {
            return Err(PlanError::input(file, None, "invalid UTF-8"));
        }
        let trimmed = bytes.trim_ascii_start();
        if trimmed.first() == Some(&b'[') {
            let items: Vec<serde_json::Value> = serde_json::from_slice(&bytes)
                .map_err(|e| PlanError::input(file, None, e.to_string()))?;
            for (i, v) in items.into_iter().enumerate() {
                let bytes = v.to_string();
                let r = parse_session(bytes.as_bytes()).map_err(|m| format!("[{i}].{m}"));
                deliver(file, None, r, opts, report, sink)?;
            }
            return Ok(());
        }
        let r = parse_session(&bytes);
        return deliver(file, None, r, opts, report, sink);
    }
    let reader = decoded(reader, name.ends_with(".zst"))
        .map_err(|e| PlanError::input(file, None, format!("not zstd data: {e}")))?;
    read_lines(file, reader, opts, report, sink)
}

fn deliver(
    file: &Path,
    line: Option<u64>,
    r: Result<SessionRecord, String>,
    opts: LoadOptions,
    report: &mut LoadReport,
    sink: &mut dyn FnMut(SessionRecord) -> Result<(), PlanError>,
) -> Result<(), PlanError> {
    match r {
        Ok(rec) => {
            report.sessions += 1;
            sink(rec)
        }
        Err(msg) => {
            let err = PlanError::input(file, line, msg);
            if opts.skip_invalid {
                report.skipped += 1;
                if report.skipped_examples.len() < 5 {
                    report.skipped_examples.push(err.to_string());
                }
                Ok(())
            } else {
                Err(err)
            }
        }
    }
}

fn read_lines(
    file: &Path,
    reader: impl BufRead,
    opts: LoadOptions,
    report: &mut LoadReport,
    sink: &mut dyn FnMut(SessionRecord) -> Result<(), PlanError>,
) -> Result<(), PlanError> {
    let mut lines = Lines::new(reader, false);
    while let Some((line_no, bytes)) = lines
        .next_line()
        .map_err(|(n, e)| PlanError::input(file, Some(n), format!("cannot read: {e}")))?
    {
        let line = bytes.trim_ascii();
        let r = match std::str::from_utf8(line) {
            Ok(_) => parse_session(line),
            Err(e) => Err(format!("invalid UTF-8 at byte {}", e.valid_up_to())),
        };
        deliver(file, Some(line_no), r, opts, report, sink)?;
    }
    Ok(())
}

// ---------------------------------------------------------------------------------------------
// Readers shared with the importers (`crate::import`), which word their errors their own way

/// Read buffer size of [`decoded`].
const BUF_SIZE: usize = 1 << 16;

/// A UTF-8 byte order mark.
pub(crate) const BOM: &[u8] = b"\xEF\xBB\xBF";

/// `reader` buffered, and zstd-decompressed on the fly when `zst`. Fails only when the zstd
/// decoder cannot start; corrupt data surfaces as a read error.
pub(crate) fn decoded<'a>(reader: impl Read + 'a, zst: bool) -> io::Result<Box<dyn BufRead + 'a>> {
    Ok(if zst {
        let dec = zstd::stream::read::Decoder::new(reader)?;
        Box::new(BufReader::with_capacity(BUF_SIZE, dec))
    } else {
        Box::new(BufReader::with_capacity(BUF_SIZE, reader))
    })
}

/// A non-blank line: its 1-based number and its bytes (with the line end).
pub(crate) type Line<'b> = (u64, &'b [u8]);

/// Streams the lines of a reader that are not blank (ASCII whitespace only), reusing one buffer.
pub(crate) struct Lines<R> {
    reader: R,
    /// Drop a UTF-8 byte order mark at the start of the first line.
    skip_bom: bool,
    line: u64,
    buf: Vec<u8>,
}

impl<R: BufRead> Lines<R> {
    pub(crate) fn new(reader: R, skip_bom: bool) -> Self {
        Lines {
            reader,
            skip_bom,
            line: 0,
            buf: Vec::new(),
        }
    }

    /// The next non-blank line. A read error comes with the number of the line it hit.
    pub(crate) fn next_line(&mut self) -> Result<Option<Line<'_>>, (u64, io::Error)> {
        loop {
            self.buf.clear();
            let n = self
                .reader
                .read_until(b'\n', &mut self.buf)
                .map_err(|e| (self.line + 1, e))?;
            if n == 0 {
                return Ok(None);
            }
            self.line += 1;
            if self.skip_bom && self.line == 1 && self.buf.starts_with(BOM) {
                self.buf.drain(..BOM.len());
            }
            if !self.buf.iter().all(u8::is_ascii_whitespace) {
                return Ok(Some((self.line, &self.buf)));
            }
        }
    }
}
