//! What the fuzz targets of `cargo xtask fuzz` share: how an input is cut into chunks, the
//! scratch directory for targets whose API takes a path, and the layout of a run directory
//! packed into one input. `docs/fuzzing.md` describes every target.
//!
//! The seed corpora `cargo xtask fuzz` writes (`xtask/src/fuzz.rs`) follow the layouts here:
//! change one, change the other.

use std::path::{Path, PathBuf};
use std::sync::OnceLock;
use std::time::{Duration, Instant};

use bench_transport::limits::Limits;
use bench_transport::{ChatStreamConsumer, Endpoint, ErrorKind};

/// Header byte asking for the payload to be fed one byte at a time.
pub const BYTEWISE: u8 = 0xFF;
/// Header byte asking for the payload to be fed one byte at a time, with an empty chunk
/// before every byte (a reader may hand over an empty read at any point).
pub const BYTEWISE_EMPTY: u8 = 0xFE;

/// An input cut into chunks by its header.
///
/// The first byte `h` is the header: `0xFF` feeds the payload (everything after it) one byte at
/// a time, `0xFE` the same with an empty chunk before every byte; otherwise `h % 32` bytes
/// follow, each the length of the next chunk (`0` feeds an empty chunk), and the rest of the
/// payload is the last chunk. A seed `[0, payload...]` is the payload whole.
#[derive(Debug, Clone, Copy)]
pub struct Cut<'a> {
    /// The bytes to feed.
    pub payload: &'a [u8],
    lens: &'a [u8],
    /// `Some(with_empty)`: a byte at a time.
    bytewise: Option<bool>,
}

impl<'a> Cut<'a> {
    /// Reads the header; `None` when the input is too short to hold it.
    pub fn parse(data: &'a [u8]) -> Option<Cut<'a>> {
        let (&h, rest) = data.split_first()?;
        if h == BYTEWISE || h == BYTEWISE_EMPTY {
            return Some(Cut {
                payload: rest,
                lens: &[],
                bytewise: Some(h == BYTEWISE_EMPTY),
            });
        }
        let n = usize::from(h % 32);
        if rest.len() < n {
            return None;
        }
        let (lens, payload) = rest.split_at(n);
        Some(Cut {
            payload,
            lens,
            bytewise: None,
        })
    }

    /// The payload's chunks, in order; concatenated they are the payload.
    pub fn chunks(&self) -> Vec<&'a [u8]> {
        match self.bytewise {
            Some(false) => return self.payload.chunks(1).collect(),
            Some(true) => {
                return self.payload.chunks(1).flat_map(|b| [&b[..0], b]).collect();
            }
            None => {}
        }
        let mut out = Vec::with_capacity(self.lens.len() + 1);
        let mut rest = self.payload;
        for &len in self.lens {
            let (a, b) = rest.split_at(usize::from(len).min(rest.len()));
            out.push(a);
            rest = b;
        }
        out.push(rest);
        out
    }
}

/// A directory of this process for the files a target writes: under `$BENCH_FUZZ_TMP` (set by
/// `cargo xtask fuzz` to `target/fuzz-tmp`), else the system's temporary directory. Created
/// on first use; the caller overwrites its files on every input.
pub fn scratch_dir(target: &str) -> &'static Path {
    static DIR: OnceLock<PathBuf> = OnceLock::new();
    DIR.get_or_init(|| {
        let base = std::env::var_os("BENCH_FUZZ_TMP")
            .map(PathBuf::from)
            .unwrap_or_else(std::env::temp_dir);
        let dir = base.join(format!("{target}-{}", std::process::id()));
        std::fs::create_dir_all(&dir).expect("cannot create the fuzz scratch directory");
        dir
    })
}

/// Writes `bytes` to `dir/name`, replacing it.
pub fn write_file(dir: &Path, name: &str, bytes: &[u8]) -> PathBuf {
    let path = dir.join(name);
    std::fs::write(&path, bytes).expect("cannot write a fuzz scratch file");
    path
}

/// Empties `dir` (files only; the targets write no subdirectories except where they remove
/// them themselves).
pub fn clear_dir(dir: &Path) {
    if let Ok(entries) = std::fs::read_dir(dir) {
        for e in entries.flatten() {
            let p = e.path();
            if p.is_dir() {
                let _ = std::fs::remove_dir_all(&p);
            } else {
                let _ = std::fs::remove_file(&p);
            }
        }
    }
}

/// zstd-compresses `bytes` (for targets that read `.zst` files: a header bit picks whether
/// the payload is written compressed, so the decoder's happy path is fuzzed too).
pub fn zstd(bytes: &[u8]) -> Vec<u8> {
    zstd::encode_all(bytes, 1).expect("zstd compression of a buffer cannot fail")
}

/// The separator of the sections of a packed run directory: `0xFF` never occurs in UTF-8, so
/// it never splits a JSON text.
pub const SECTION: u8 = 0xFF;

/// The files of a packed run directory, in section order.
pub const RUNDIR_FILES: [&str; 6] = [
    bench_rundir::files::RUN_JSON,
    bench_rundir::files::EVENTS,
    bench_rundir::files::TURNS,
    bench_rundir::files::SESSIONS,
    bench_rundir::files::SCRAPES,
    bench_rundir::files::RESULT,
];

/// Unpacks `data` into the run directory `dir` (emptied first): its sections, separated by
/// [`SECTION`], are the files of [`RUNDIR_FILES`] in order; an empty or missing section is an
/// absent file, and sections beyond the sixth are ignored.
pub fn write_rundir(dir: &Path, data: &[u8]) {
    clear_dir(dir);
    for (name, section) in RUNDIR_FILES.iter().zip(data.split(|&b| b == SECTION)) {
        if !section.is_empty() {
            write_file(dir, name, section);
        }
    }
}

/// What a consumer read from a response, without its timings (which depend on how the bytes
/// were cut): the invariant of the `stream_*` targets is that this is the same however the
/// body is cut.
pub type Reading = Result<String, ErrorKind>;

/// Small size caps, so that the fuzzer reaches every one of them.
pub const SMALL_LIMITS: Limits = Limits {
    max_event_bytes: 96,
    max_response_bytes: 4096,
    max_json_bytes: 1024,
};

/// Feeds `chunks` to a consumer of `endpoint` (`streamed` or a whole JSON body, with `limits`),
/// one microsecond apart, then finishes it — also after `feed` failed, which must not panic
/// either.
pub fn consume(
    endpoint: Endpoint,
    streamed: bool,
    limits: Option<Limits>,
    chunks: &[&[u8]],
) -> Reading {
    let sent = Instant::now();
    let mut consumer = ChatStreamConsumer::with_endpoint(sent, streamed, endpoint);
    if let Some(l) = limits {
        consumer = consumer.with_limits(l);
    }
    let mut at = sent;
    let mut failed = None;
    for chunk in chunks {
        at += Duration::from_micros(1);
        if let Err(e) = consumer.feed(chunk, at) {
            failed = Some(e.kind());
            break;
        }
    }
    let _ = (consumer.is_done(), consumer.chunks(), consumer.endpoint());
    let outcome = consumer.finish(at + Duration::from_micros(1));
    if let Some(kind) = failed {
        return Err(kind);
    }
    let o = outcome.map_err(|e| e.kind())?;
    // Exercise the derived figures too.
    let _ = (o.tpot(), o.chunk_gaps().count(), o.completion_tokens());
    Ok(format!(
        "content={:?} reasoning={:?} usage={:?} finish={:?} streamed={} events={} bytes={} \
         output_chunks={} reasoning_chunks={} answer_chunks={} response_id={:?} ttft={} ttfa={}",
        o.content,
        o.reasoning,
        o.usage,
        o.finish_reason,
        o.streamed,
        o.events,
        o.body_bytes,
        o.chunk_offsets.len(),
        o.reasoning_chunks,
        o.answer_chunks,
        o.response_id,
        o.ttft.is_some(),
        o.ttfa.is_some(),
    ))
}

/// The body of every `stream_*` target: byte 0 is a flag byte (bit 0 set: a non-streamed JSON
/// body; bit 1 set: the [`SMALL_LIMITS`] instead of the default caps), then a [`Cut`].
/// Whatever the bytes, nothing panics, and the reading of the body fed whole equals its
/// reading fed in the cut's chunks. (Under caps only success must agree, and what it read:
/// which error comes first may depend on where a cap is passed.)
pub fn stream_target(endpoint: Endpoint, data: &[u8]) {
    let Some((&flags, rest)) = data.split_first() else {
        return;
    };
    let streamed = flags & 1 == 0;
    let limits = (flags & 2 != 0).then_some(SMALL_LIMITS);
    let Some(cut) = Cut::parse(rest) else {
        return;
    };
    let whole = consume(endpoint, streamed, limits, &[cut.payload]);
    let split = consume(endpoint, streamed, limits, &cut.chunks());
    if limits.is_none() || whole.is_ok() || split.is_ok() {
        assert_eq!(
            whole, split,
            "{endpoint} (streamed: {streamed}, limits: {limits:?}) read differently when cut"
        );
    }
}

/// The body of every `import_*` target: byte 0 is a header (bit 0: skip invalid records;
/// bit 1: the target zstd-compresses the payload and adds `.zst` to the name; bits 2-3: which
/// of `names` the file is called, as importers go by the name; bits 4-5: Mooncake's block
/// size, one of 512, 1, 16, 3 tokens), the rest the file. Never panics (errors are fine), and
/// every session the importer hands on is what `bench import` would write and `bench plan`
/// can read back: it passes `check` and its JSON line parses with `load::parse_session`.
pub fn import_target(format: bench_workload::import::ImportFormat, names: &[&str], data: &[u8]) {
    use bench_workload::import::{ImportOptions, import};
    let Some((&h, payload)) = data.split_first() else {
        return;
    };
    let opts = ImportOptions {
        skip_invalid: h & 1 != 0,
        mooncake_block_tokens: [512, 1, 16, 3][usize::from((h >> 4) & 3)],
        ..ImportOptions::default()
    };
    let mut name = names[usize::from((h >> 2) & 3) % names.len()].to_owned();
    let dir = scratch_dir(format.name());
    clear_dir(dir);
    let path = if h & 2 != 0 {
        name.push_str(".zst");
        write_file(dir, &name, &zstd(payload))
    } else {
        write_file(dir, &name, payload)
    };
    let _ = import(format, &[path], &opts, &mut |s| {
        if let Err(e) = s.check() {
            panic!("the importer handed on an invalid session ({e}): {s:?}");
        }
        let line = serde_json::to_vec(&s).expect("a session always serializes");
        if let Err(e) = bench_workload::load::parse_session(&line) {
            panic!(
                "an imported session does not load back ({e}): {}",
                String::from_utf8_lossy(&line)
            );
        }
        Ok(())
    });
}
