//! Writing native session traces (`.jsonl`, or `.jsonl.zst` compressed).
//!
//! The output goes to a temporary file beside the target and is renamed into place by
//! [`SessionWriter::finish`]: an import that fails half-way leaves no partial file behind.

use std::fs::File;
use std::io::{BufWriter, Write};
use std::path::{Path, PathBuf};

use crate::error::PlanError;
use crate::format::TraceSession;

enum Sink {
    Plain(BufWriter<File>),
    Zstd(zstd::stream::write::Encoder<'static, BufWriter<File>>),
}

/// Writes sessions one JSON line each.
pub struct SessionWriter {
    sink: Option<Sink>,
    tmp: PathBuf,
    target: PathBuf,
    written: u64,
}

impl std::fmt::Debug for SessionWriter {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("SessionWriter")
            .field("target", &self.target)
            .field("written", &self.written)
            .finish()
    }
}

fn io_err(path: &Path, e: impl std::fmt::Display) -> PlanError {
    PlanError::input(path, None, format!("cannot write: {e}"))
}

impl SessionWriter {
    /// Starts writing `target`; a name ending in `.zst` is zstd-compressed.
    pub fn create(target: &Path) -> Result<SessionWriter, PlanError> {
        let name = target
            .file_name()
            .and_then(|n| n.to_str())
            .ok_or_else(|| PlanError::input(target, None, "not a file name"))?;
        if !(name.ends_with(".jsonl") || name.ends_with(".jsonl.zst")) {
            return Err(PlanError::input(
                target,
                None,
                "the output must end in .jsonl or .jsonl.zst",
            ));
        }
        let tmp = target.with_file_name(format!(".{name}.tmp-{}", std::process::id()));
        let file = File::create(&tmp).map_err(|e| io_err(target, e))?;
        let w = BufWriter::with_capacity(1 << 20, file);
        let sink = if name.ends_with(".zst") {
            Sink::Zstd(zstd::stream::write::Encoder::new(w, 9).map_err(|e| io_err(target, e))?)
        } else {
            Sink::Plain(w)
        };
        Ok(SessionWriter {
            sink: Some(sink),
            tmp,
            target: target.to_path_buf(),
            written: 0,
        })
    }

    /// Appends one session.
    pub fn write(&mut self, s: &TraceSession) -> Result<(), PlanError> {
        let mut line = serde_json::to_vec(s).map_err(|e| io_err(&self.target, e))?;
        line.push(b'\n');
        let r = match self.sink.as_mut() {
            Some(Sink::Plain(w)) => w.write_all(&line),
            Some(Sink::Zstd(w)) => w.write_all(&line),
            None => Ok(()),
        };
        r.map_err(|e| io_err(&self.target, e))?;
        self.written += 1;
        Ok(())
    }

    /// Sessions written so far.
    pub fn written(&self) -> u64 {
        self.written
    }

    /// Flushes, syncs and moves the file into place.
    pub fn finish(mut self) -> Result<u64, PlanError> {
        let file = match self.sink.take() {
            Some(Sink::Plain(w)) => w.into_inner().map_err(|e| io_err(&self.target, e)),
            Some(Sink::Zstd(w)) => w
                .finish()
                .map_err(|e| io_err(&self.target, e))
                .and_then(|w| w.into_inner().map_err(|e| io_err(&self.target, e))),
            None => return Ok(self.written),
        }?;
        file.sync_all().map_err(|e| io_err(&self.target, e))?;
        std::fs::rename(&self.tmp, &self.target).map_err(|e| io_err(&self.target, e))?;
        Ok(self.written)
    }
}

impl Drop for SessionWriter {
    fn drop(&mut self) {
        if self.sink.is_some() {
            // Not finished: leave nothing half-written behind.
            self.sink = None;
            let _ = std::fs::remove_file(&self.tmp);
        }
    }
}
