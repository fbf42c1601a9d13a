//! The one reader (and the few writers) of a run directory's JSONL files.
//!
//! A process killed mid-write leaves at most its last line torn: bytes without the closing
//! newline that do not parse. [`read`] sets such a line aside as [`Torn`]; any other line that
//! does not parse as the record type is a [`BadLine`], which the caller decides about
//! (`bench status` counts it, a resume refuses it).

use std::io::{BufRead, Seek, Write};
use std::path::{Path, PathBuf};

use serde::Serialize;
use serde::de::DeserializeOwned;

/// A file could not be read or written.
#[derive(Debug, thiserror::Error)]
#[error("{}: {source}", path.display())]
pub struct IoError {
    /// The file.
    pub path: PathBuf,
    /// The cause.
    #[source]
    pub source: std::io::Error,
}

fn io_err(path: &Path) -> impl Fn(std::io::Error) -> IoError + '_ {
    move |source| IoError {
        path: path.to_owned(),
        source,
    }
}

/// A torn last line.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Torn {
    /// Its line number (from 1).
    pub line: usize,
    /// Its length in bytes.
    pub bytes: usize,
}

/// A whole line that is not a record of the expected type.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct BadLine {
    /// Its line number (from 1).
    pub line: usize,
    /// Why it was not read.
    pub error: String,
}

/// What [`read`] found in one file.
#[derive(Debug, Clone, PartialEq)]
pub struct Lines<T> {
    /// The records, in file order.
    pub records: Vec<T>,
    /// A torn last line, set aside.
    pub torn: Option<Torn>,
    /// Whole lines that did not parse.
    pub bad: Vec<BadLine>,
}

impl<T> Default for Lines<T> {
    fn default() -> Self {
        Lines {
            records: Vec::new(),
            torn: None,
            bad: Vec::new(),
        }
    }
}

/// Reads a JSONL file of `T`; a missing file has no lines. Blank lines are skipped.
pub fn read<T: DeserializeOwned>(path: &Path) -> Result<Lines<T>, IoError> {
    let mut out = Lines::default();
    let file = match std::fs::File::open(path) {
        Ok(f) => f,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(out),
        Err(e) => return Err(io_err(path)(e)),
    };
    let mut reader = std::io::BufReader::new(file);
    let mut buf = Vec::new();
    let mut line_no = 0usize;
    loop {
        buf.clear();
        let n = reader.read_until(b'\n', &mut buf).map_err(io_err(path))?;
        if n == 0 {
            break;
        }
        line_no += 1;
        let complete = buf.last() == Some(&b'\n');
        let line = buf.trim_ascii();
        if line.is_empty() {
            continue;
        }
        match serde_json::from_slice::<T>(line) {
            Ok(v) => out.records.push(v),
            // Only the last line can lack its newline.
            Err(_) if !complete => {
                out.torn = Some(Torn {
                    line: line_no,
                    bytes: n,
                })
            }
            Err(e) => out.bad.push(BadLine {
                line: line_no,
                error: e.to_string(),
            }),
        }
    }
    Ok(out)
}

/// Appends one record as a line (one `write` call, so concurrent appenders never interleave
/// within a line).
pub fn append<T: Serialize>(file: &mut std::fs::File, record: &T) -> std::io::Result<()> {
    append_with(file, &mut Vec::new(), record)
}

/// [`append`], building the line in `buf` (cleared first): a writer that keeps one buffer
/// allocates nothing per record.
pub fn append_with<T: Serialize>(
    file: &mut std::fs::File,
    buf: &mut Vec<u8>,
    record: &T,
) -> std::io::Result<()> {
    buf.clear();
    serde_json::to_writer(&mut *buf, record)?;
    buf.push(b'\n');
    file.write_all(buf)
}

/// Opens `path` for appending (created if missing).
pub fn open_append(path: &Path) -> Result<std::fs::File, IoError> {
    std::fs::OpenOptions::new()
        .create(true)
        .append(true)
        .open(path)
        .map_err(io_err(path))
}

/// Replaces `path` with `records`, one per line, through a temporary file, `fsync` and a
/// rename (a crash leaves the old file or the new one, never a mix).
pub fn rewrite<T: Serialize>(path: &Path, records: &[T]) -> Result<(), IoError> {
    let tmp = path.with_extension("jsonl.rewrite-tmp");
    let fail = io_err(&tmp);
    let mut w = std::io::BufWriter::new(std::fs::File::create(&tmp).map_err(&fail)?);
    for r in records {
        serde_json::to_writer(&mut w, r).map_err(|e| fail(e.into()))?;
        w.write_all(b"\n").map_err(&fail)?;
    }
    let f = w.into_inner().map_err(|e| fail(e.into_error()))?;
    f.sync_all().map_err(&fail)?;
    std::fs::rename(&tmp, path).map_err(io_err(path))
}

/// What [`repair_tail`] did.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Repair {
    /// A torn last line was cut off.
    TornDropped(Torn),
    /// A whole last line lacked its newline; one was added.
    NewlineAdded {
        /// Its line number.
        line: usize,
    },
}

impl Repair {
    /// One line for `path`, e.g. `events.jsonl:2: torn last line (13 bytes) dropped`.
    pub fn describe(&self, path: &Path) -> String {
        match self {
            Repair::TornDropped(t) => format!(
                "{}:{}: torn last line ({} bytes) dropped",
                path.display(),
                t.line,
                t.bytes
            ),
            Repair::NewlineAdded { line } => format!(
                "{}:{line}: newline added after a whole last line",
                path.display()
            ),
        }
    }
}

/// Makes an append-only file end with a whole line: a torn last line is cut off, a whole one
/// without its newline gets one. A missing file needs nothing.
pub fn repair_tail(path: &Path) -> Result<Option<Repair>, IoError> {
    let fail = io_err(path);
    let bytes = match std::fs::read(path) {
        Ok(b) => b,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(None),
        Err(e) => return Err(fail(e)),
    };
    if bytes.is_empty() || bytes.last() == Some(&b'\n') {
        return Ok(None);
    }
    let cut = bytes.iter().rposition(|&b| b == b'\n').map_or(0, |i| i + 1);
    let tail = &bytes[cut..];
    let line = bytes[..cut].iter().filter(|&&b| b == b'\n').count() + 1;
    let mut f = std::fs::OpenOptions::new()
        .write(true)
        .open(path)
        .map_err(&fail)?;
    if serde_json::from_slice::<serde::de::IgnoredAny>(tail.trim_ascii()).is_ok() {
        f.seek(std::io::SeekFrom::End(0)).map_err(&fail)?;
        f.write_all(b"\n").map_err(&fail)?;
        return Ok(Some(Repair::NewlineAdded { line }));
    }
    f.set_len(cut as u64).map_err(&fail)?;
    Ok(Some(Repair::TornDropped(Torn {
        line,
        bytes: tail.len(),
    })))
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use super::*;

    #[derive(Debug, PartialEq, serde::Deserialize, serde::Serialize)]
    struct R {
        id: String,
    }

    /// A fresh directory, removed when dropped (at the end of the test, even a failed one).
    fn dir(name: &str) -> tempfile::TempDir {
        tempfile::Builder::new()
            .prefix(&format!("bench-rundir-{name}-"))
            .tempdir()
            .unwrap()
    }

    #[test]
    fn a_torn_last_line_is_set_aside_and_other_bad_lines_reported() {
        let tmp = dir("read");
        let d = tmp.path();
        let p = d.join("turns.jsonl");
        assert_eq!(read::<R>(&p).unwrap(), Lines::default());
        std::fs::write(&p, "{\"id\":\"a\"}\n\n{\"id\":\"b\",\"tu").unwrap();
        let l = read::<R>(&p).unwrap();
        assert_eq!(l.records, [R { id: "a".into() }]);
        assert_eq!(l.torn, Some(Torn { line: 3, bytes: 13 }));
        assert!(l.bad.is_empty());

        std::fs::write(&p, "{\"id\":\"a\"}\ngarbage\n{\"x\":1}\n{\"id\":\"c\"}").unwrap();
        let l = read::<R>(&p).unwrap();
        assert_eq!(
            l.records.len(),
            2,
            "a whole last line without newline is read"
        );
        assert_eq!(
            l.bad.iter().map(|b| b.line).collect::<Vec<_>>(),
            [2, 3],
            "{:?}",
            l.bad
        );
        assert_eq!(l.torn, None);
    }

    #[test]
    fn repair_cuts_a_torn_tail_or_adds_the_newline() {
        let tmp = dir("repair");
        let d = tmp.path();
        let ev = d.join("events.jsonl");
        std::fs::write(&ev, "{\"event\":\"run.started\"}\n{\"event\":\"hea").unwrap();
        let r = repair_tail(&ev).unwrap().unwrap();
        assert!(
            r.describe(&ev)
                .ends_with("events.jsonl:2: torn last line (13 bytes) dropped"),
            "{}",
            r.describe(&ev)
        );
        assert_eq!(
            std::fs::read_to_string(&ev).unwrap(),
            "{\"event\":\"run.started\"}\n"
        );
        std::fs::write(&ev, "{\"event\":\"run.started\"}").unwrap();
        assert_eq!(
            repair_tail(&ev).unwrap(),
            Some(Repair::NewlineAdded { line: 1 })
        );
        assert_eq!(
            std::fs::read_to_string(&ev).unwrap(),
            "{\"event\":\"run.started\"}\n"
        );
        assert_eq!(repair_tail(&ev).unwrap(), None);
        assert_eq!(repair_tail(&d.join("missing.jsonl")).unwrap(), None);

        let rw = d.join("sessions.jsonl");
        rewrite(&rw, &[R { id: "x".into() }, R { id: "y".into() }]).unwrap();
        assert_eq!(
            std::fs::read_to_string(&rw).unwrap(),
            "{\"id\":\"x\"}\n{\"id\":\"y\"}\n"
        );
    }
}
