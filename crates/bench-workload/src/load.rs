//! Loading native session traces: `.jsonl`, `.jsonl.zst`, one-session `.json` files, or a
//! directory of them with an optional `manifest.json` of default knobs.
//!
//! Files are streamed line by line: memory holds one line at a time, not the file, and one
//! line at most [`LoadOptions::max_line_bytes`] (64 MiB by default): a longer line is an error
//! naming it, read no further than the cap.

use std::collections::HashMap;
use std::fs::File;
use std::io::{self, BufRead, BufReader, Read};
use std::path::{Path, PathBuf};
use std::sync::Arc;

use crate::error::PlanError;
use crate::format::{Manifest, TraceSession};

/// The default cap on one line of a trace, in bytes: 64 MiB (a session of a 1M-token context
/// is about 4 MB of text; 16 times that is a line no real trace holds).
pub const DEFAULT_MAX_LINE_BYTES: u64 = 64 << 20;

/// Token counts above this are refused as implausible (no model's window comes near 100M
/// tokens): a recording whose counts are that large is corrupt.
pub const MAX_PLAUSIBLE_TOKENS: u64 = 100_000_000;

/// How to treat bad records.
#[derive(Debug, Clone, Copy)]
pub struct LoadOptions {
    /// Count and skip invalid lines instead of failing on the first.
    pub skip_invalid: bool,
    /// The longest line read, in bytes (line end not counted): a longer one is an invalid
    /// record, read no further than the cap (memory stays bounded whatever the file holds).
    pub max_line_bytes: u64,
}

impl Default for LoadOptions {
    fn default() -> Self {
        LoadOptions {
            skip_invalid: false,
            max_line_bytes: DEFAULT_MAX_LINE_BYTES,
        }
    }
}

pub use bench_rundir::size::human_bytes;

/// The session ids seen so far in one load, with where each was first seen (duplicates are
/// invalid records: records, resumes and reports key sessions by id).
#[derive(Clone, Default)]
struct SeenIds(HashMap<String, (Arc<Path>, Option<u64>)>);

impl std::fmt::Debug for SeenIds {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{} session ids", self.0.len())
    }
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
    ids: SeenIds,
    /// The file being read, shared by the ids first seen in it.
    current: Option<Arc<Path>>,
}

fn has_session_ext(p: &Path) -> bool {
    let name = p.file_name().and_then(|n| n.to_str()).unwrap_or("");
    name.ends_with(".jsonl") || name.ends_with(".jsonl.zst") || name.ends_with(".json")
}

fn is_session_file(p: &Path) -> bool {
    p.file_name().and_then(|n| n.to_str()) != Some("manifest.json") && has_session_ext(p)
}

/// What `bench import` converts, for the messages of files that are not native traces.
const IMPORT_HINT: &str = "`bench import --from FORMAT` converts lmcache, mooncake, sharegpt, \
                           openai-messages and swe-agent traces";

/// The session files of `path` (itself, or the session files of a directory, sorted) and its
/// manifest.
pub fn dataset_files(path: &Path) -> Result<(Vec<PathBuf>, Option<Manifest>), PlanError> {
    let meta = std::fs::metadata(path).map_err(|e| {
        let what = if e.kind() == io::ErrorKind::NotFound {
            "cannot read: no such file or directory (a dataset is `sample`, `random`, or a \
             trace file or directory)"
                .to_string()
        } else {
            format!("cannot read: {e}")
        };
        PlanError::input(path, None, what)
    })?;
    if meta.is_file() {
        if !has_session_ext(path) {
            let ext = path
                .file_name()
                .and_then(|n| n.to_str())
                .and_then(|n| n.rsplit_once('.'))
                .map_or_else(|| "no extension".to_string(), |(_, e)| format!(".{e}"));
            return Err(PlanError::input(
                path,
                None,
                format!(
                    "unknown trace format ({ext}): a dataset file is .jsonl, .jsonl.zst or .json \
                     in the native session format; {IMPORT_HINT}"
                ),
            ));
        }
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
pub fn parse_session(bytes: &[u8]) -> Result<TraceSession, String> {
    if bytes.trim_ascii_start().first() != Some(&b'{') {
        return Err(not_a_session(bytes));
    }
    let mut de = serde_json::Deserializer::from_slice(bytes);
    let rec: TraceSession = serde_path_to_error::deserialize(&mut de).map_err(|e| {
        use serde_json::error::Category;
        // Where in the record the syntax broke, when serde could tell.
        let at = e.path().to_string();
        let at = if at == "." || at.contains('?') {
            String::new()
        } else {
            format!(" (in {at})")
        };
        match e.inner().classify() {
            Category::Eof => format!("truncated JSON{at}: {}", e.inner()),
            Category::Syntax => format!("not valid JSON{at}: {}", e.inner()),
            _ if e.path().to_string() == "." && e.inner().to_string().contains("`session_id`") => {
                format!("{} (not a native session record: {IMPORT_HINT})", e.inner())
            }
            _ => path_error(&e),
        }
    })?;
    de.end()
        .map_err(|e| format!("trailing data after the session: {e}"))?;
    rec.check()?;
    Ok(rec)
}

/// Why bytes that do not start with `{` are not a session.
fn not_a_session(bytes: &[u8]) -> String {
    let what = match serde_json::from_slice::<serde_json::Value>(bytes) {
        Ok(serde_json::Value::Array(_)) => "a JSON array",
        Ok(serde_json::Value::String(_)) => "a JSON string",
        Ok(serde_json::Value::Number(_)) => "a JSON number",
        Ok(serde_json::Value::Bool(_)) => "a JSON boolean",
        Ok(serde_json::Value::Null) => "JSON null",
        Ok(serde_json::Value::Object(_)) => "a JSON object",
        Err(e) => return format!("not valid JSON: {e}"),
    };
    format!("{what}, not a session object ({{\"session_id\": …, \"turns\": […]}})")
}

/// Why a line or document is not UTF-8 JSON text, when it is UTF-16 or holds NUL bytes
/// (binary data): `None` for anything else.
fn not_utf8_text(bytes: &[u8]) -> Option<String> {
    if bytes.starts_with(b"\x1F\x8B") {
        return Some(
            "gzip-compressed data: traces are read as .jsonl or .jsonl.zst; gunzip it (or \
             recompress with zstd and name it .jsonl.zst)"
                .into(),
        );
    }
    if bytes.starts_with(b"\x28\xB5\x2F\xFD") {
        return Some("zstd-compressed data in a file not named .zst: name it .jsonl.zst".into());
    }
    if bytes.starts_with(b"\xFF\xFE") || bytes.starts_with(b"\xFE\xFF") {
        return Some(
            "UTF-16 text (it starts with a UTF-16 byte order mark): traces are UTF-8; convert \
             it, e.g. iconv -f UTF-16 -t UTF-8"
                .into(),
        );
    }
    bytes.contains(&0).then(|| {
        "NUL bytes: UTF-16 text or binary data, not UTF-8 JSON (convert UTF-16 with iconv -f \
         UTF-16 -t UTF-8)"
            .into()
    })
}

/// Streams every session of `path` (file or directory) into `sink`.
pub fn for_each_session(
    path: &Path,
    opts: LoadOptions,
    sink: &mut dyn FnMut(TraceSession) -> Result<(), PlanError>,
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
    report.ids = SeenIds::default();
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
    sink: &mut dyn FnMut(TraceSession) -> Result<(), PlanError>,
) -> Result<(), PlanError> {
    let name = file.to_string_lossy();
    report.current = Some(Arc::from(file));
    if name.ends_with(".json") {
        let mut bytes = Vec::new();
        BufReader::new(reader)
            .read_to_end(&mut bytes)
            .map_err(|e| PlanError::input(file, None, format!("cannot read: {e}")))?;
        if let Some(why) = not_utf8_text(&bytes) {
            return Err(PlanError::input(file, None, why));
        }
        if let Err(e) = std::str::from_utf8(&bytes) {
            return Err(PlanError::input(
                file,
                None,
                format!("invalid UTF-8 at byte {}", e.valid_up_to()),
            ));
        }
        let bytes = bytes.strip_prefix(BOM).unwrap_or(&bytes);
        let trimmed = bytes.trim_ascii_start();
        if trimmed.first() == Some(&b'[') {
            let items: Vec<serde_json::Value> = serde_json::from_slice(bytes)
                .map_err(|e| PlanError::input(file, None, e.to_string()))?;
            for (i, v) in items.into_iter().enumerate() {
                let bytes = v.to_string();
                let r = parse_session(bytes.as_bytes()).map_err(|m| format!("[{i}].{m}"));
                deliver(file, None, r, opts, report, sink)?;
            }
            return Ok(());
        }
        let r = parse_session(bytes);
        return deliver(file, None, r, opts, report, sink);
    }
    let zst = name.ends_with(".zst");
    let reader = decoded(reader, zst)
        .map_err(|e| PlanError::input(file, None, format!("not zstd data: {e}")))?;
    read_lines(file, reader, zst, opts, report, sink)
}

fn deliver(
    file: &Path,
    line: Option<u64>,
    r: Result<TraceSession, String>,
    opts: LoadOptions,
    report: &mut LoadReport,
    sink: &mut dyn FnMut(TraceSession) -> Result<(), PlanError>,
) -> Result<(), PlanError> {
    let r = r.and_then(|rec| {
        let here = report.current.clone().unwrap_or_else(|| Arc::from(file));
        match report.ids.0.get(&rec.session_id) {
            Some((first, first_line)) => {
                let at = match (first_line, **first == *file) {
                    (Some(l), true) => format!("line {l}"),
                    (Some(l), false) => format!("{}:{l}", first.display()),
                    (None, _) => first.display().to_string(),
                };
                Err(format!(
                    "session_id {:?} is used twice (first at {at}): session ids must be unique",
                    rec.session_id
                ))
            }
            None => {
                report.ids.0.insert(rec.session_id.clone(), (here, line));
                Ok(rec)
            }
        }
    });
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
    zst: bool,
    opts: LoadOptions,
    report: &mut LoadReport,
    sink: &mut dyn FnMut(TraceSession) -> Result<(), PlanError>,
) -> Result<(), PlanError> {
    let mut lines = Lines::new(reader, true, opts.max_line_bytes);
    loop {
        let (line_no, r) = match lines.next_line() {
            Ok(None) => return Ok(()),
            Ok(Some((line_no, bytes))) => {
                let line = bytes.trim_ascii();
                let r = if let Some(why) = not_utf8_text(line) {
                    Err(why)
                } else {
                    match std::str::from_utf8(line) {
                        Ok(_) => parse_session(line),
                        Err(e) => Err(format!("invalid UTF-8 at byte {}", e.valid_up_to())),
                    }
                };
                (line_no, r)
            }
            Err(LineError::TooLong { line, cap }) => (
                line,
                Err(format!(
                    "longer than the {} cap (--max-trace-line raises it)",
                    human_bytes(cap)
                )),
            ),
            Err(LineError::Io { line, error }) => {
                // The decoder's errors surface as read errors (`Other`, or `UnexpectedEof` for a
                // cut frame): say they are about the compression, not the disk.
                use io::ErrorKind::{InvalidData, Other, UnexpectedEof};
                let what = if zst && matches!(error.kind(), Other | UnexpectedEof | InvalidData) {
                    format!("cannot read: not valid zstd data ({error})")
                } else {
                    format!("cannot read: {error}")
                };
                return Err(PlanError::input(file, Some(line), what));
            }
        };
        deliver(file, Some(line_no), r, opts, report, sink)?;
    }
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

/// Why [`Lines::next_line`] gave no line.
#[derive(Debug)]
pub(crate) enum LineError {
    /// Reading failed at this (1-based) line.
    Io { line: u64, error: io::Error },
    /// This line is longer than `cap` bytes (its line end not counted). Only the first `cap`
    /// bytes and the chunk that passed them were read; the next call skips the rest of it
    /// without keeping it, so a caller that skips invalid records can go on.
    TooLong { line: u64, cap: u64 },
}

/// Streams the lines of a reader that are not blank (ASCII whitespace only), reusing one buffer
/// that never grows past the cap on one line (a file of one endless line is refused after
/// `max_line` bytes, not read into memory).
pub(crate) struct Lines<R> {
    reader: R,
    /// Drop a UTF-8 byte order mark at the start of the first line.
    skip_bom: bool,
    /// The longest line kept, in bytes, its line end not counted.
    max_line: u64,
    line: u64,
    buf: Vec<u8>,
    /// The rest of an over-long line is still to be skipped.
    discarding: bool,
}

/// `reader`'s buffered bytes (empty at the end), retrying interrupted reads; an error names
/// `line`.
fn fill<R: BufRead>(reader: &mut R, line: u64) -> Result<&[u8], LineError> {
    loop {
        match reader.fill_buf() {
            Ok(_) => break,
            Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
            Err(error) => return Err(LineError::Io { line, error }),
        }
    }
    // Filled above: this returns the buffered bytes without reading again.
    reader
        .fill_buf()
        .map_err(|error| LineError::Io { line, error })
}

impl<R: BufRead> Lines<R> {
    pub(crate) fn new(reader: R, skip_bom: bool, max_line: u64) -> Self {
        Lines {
            reader,
            skip_bom,
            max_line,
            line: 0,
            buf: Vec::new(),
            discarding: false,
        }
    }

    /// Skips the rest of an over-long line, up to and including its line end.
    fn skip_rest(&mut self) -> Result<(), LineError> {
        loop {
            let avail = fill(&mut self.reader, self.line)?;
            if avail.is_empty() {
                return Ok(());
            }
            match avail.iter().position(|&b| b == b'\n') {
                Some(i) => {
                    self.reader.consume(i + 1);
                    return Ok(());
                }
                None => {
                    let n = avail.len();
                    self.reader.consume(n);
                }
            }
        }
    }

    /// The next non-blank line. A read error comes with the number of the line it hit.
    pub(crate) fn next_line(&mut self) -> Result<Option<Line<'_>>, LineError> {
        loop {
            if self.discarding {
                self.discarding = false;
                self.skip_rest()?;
            }
            self.buf.clear();
            let mut read_any = false;
            loop {
                let max_line = self.max_line;
                let kept = self.buf.len() as u64;
                let avail = fill(&mut self.reader, self.line + 1)?;
                if avail.is_empty() {
                    break;
                }
                read_any = true;
                let (n, end) = match avail.iter().position(|&b| b == b'\n') {
                    Some(i) => (i + 1, true),
                    None => (avail.len(), false),
                };
                let content = kept + (n - usize::from(end)) as u64;
                if content > max_line {
                    self.reader.consume(n);
                    self.line += 1;
                    self.discarding = !end;
                    self.buf.clear();
                    return Err(LineError::TooLong {
                        line: self.line,
                        cap: max_line,
                    });
                }
                self.buf.extend_from_slice(&avail[..n]);
                self.reader.consume(n);
                if end {
                    break;
                }
            }
            if !read_any {
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

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use super::*;

    fn lines_of(bytes: &[u8], cap: u64) -> Vec<Result<(u64, String), String>> {
        let mut lines = Lines::new(BufReader::with_capacity(7, bytes), true, cap);
        let mut out = Vec::new();
        loop {
            match lines.next_line() {
                Ok(None) => return out,
                Ok(Some((n, b))) => out.push(Ok((n, String::from_utf8_lossy(b).into_owned()))),
                Err(LineError::TooLong { line, cap }) => out.push(Err(format!("{line}>{cap}"))),
                Err(LineError::Io { line, error }) => panic!("{line}: {error}"),
            }
        }
    }

    #[test]
    fn a_line_over_the_cap_is_refused_and_the_next_one_read() {
        let text = b"\xEF\xBB\xBFabc\n\n0123456789\nshort\n0123456789xyz";
        assert_eq!(
            lines_of(text, 10),
            vec![
                Ok((1, "abc\n".into())),
                Ok((3, "0123456789\n".into())),
                Ok((4, "short\n".into())),
                Err("5>10".into()),
            ]
        );
        assert_eq!(
            lines_of(text, 9),
            vec![
                Ok((1, "abc\n".into())),
                Err("3>9".into()),
                Ok((4, "short\n".into())),
                Err("5>9".into()),
            ]
        );
    }

    /// An endless line (no newline, ever) is refused after the cap, with the memory of the cap:
    /// the reader never buffers it whole.
    #[test]
    fn an_endless_line_is_refused_after_the_cap() {
        let endless = BufReader::new(io::repeat(b'x'));
        let mut lines = Lines::new(endless, false, 1 << 20);
        match lines.next_line() {
            Err(LineError::TooLong { line: 1, cap }) => assert_eq!(cap, 1 << 20),
            other => panic!("{other:?}"),
        }
        assert!(lines.buf.capacity() <= (1 << 20) + (64 << 10));
    }

    #[test]
    fn sessions_with_the_same_id_are_refused_naming_both_lines() {
        let good = r#"{"session_id":"a","turns":[{"index":0,"assistant_text":"x"}]}"#;
        let text = format!("{good}\n{}\n{good}\n", good.replace("\"a\"", "\"b\""));
        let mut report = LoadReport::default();
        let e = read_sessions(
            Path::new("t.jsonl"),
            text.as_bytes(),
            LoadOptions::default(),
            &mut report,
            &mut |_| Ok(()),
        )
        .unwrap_err()
        .to_string();
        assert_eq!(
            e,
            "t.jsonl:3: session_id \"a\" is used twice (first at line 1): session ids must be unique"
        );
    }

    #[test]
    fn what_is_not_a_session_says_what_it_is() {
        let e = |s: &[u8]| parse_session(s).unwrap_err();
        assert!(e(b"[1, 2]").starts_with("a JSON array, not a session object"));
        assert!(e(b"nope").starts_with("not valid JSON"));
        assert!(e(br#"{"session_id": "a", "tur"#).starts_with("truncated JSON"));
        assert!(e(br#"{"session_id": "a" "turns": []}"#).starts_with("not valid JSON"));
        assert!(e(br#"{"conversations": []}"#).contains("bench import --from"));
        assert!(
            e(br#"{"session_id": "a", "turns": [{"index": 0, "output_tokens": 1000000000}]}"#)
                .contains("turns[0].output_tokens: 1000000000 is not a plausible token count")
        );
        assert_eq!(
            not_utf8_text(b"\xFF\xFE{\0").map(|m| m.starts_with("UTF-16")),
            Some(true)
        );
        assert_eq!(
            not_utf8_text(b"{\0\"\0").map(|m| m.starts_with("NUL bytes")),
            Some(true)
        );
        assert_eq!(human_bytes(64 << 20), "64 MiB");
    }
}
