//! Importers: convert third-party traces into native [`TraceSession`]s.
//!
//! Supported formats (see `docs/importers.md` for each one's assumptions):
//!
//! | name              | input                                                                 |
//! |-------------------|-----------------------------------------------------------------------|
//! | `lmcache`         | LMCache agent traces: one LLM call per JSONL line, full prompt text   |
//! | `mooncake`        | Mooncake request traces: lengths and 512-token prefix-block hash ids  |
//! | `sharegpt`        | ShareGPT conversations (JSON array or JSONL)                          |
//! | `openai-messages` | OpenAI chat message arrays (JSON or JSONL)                            |
//! | `swe-agent`       | SWE-agent `.traj` trajectories                                        |
//! | `cc-traces`       | Weka / kv-cache-tester agent traces with subagents: token counts and  |
//! |                   | KV-block hash ids (text is synthesized), forks and joins              |
//! | `otel`            | OpenTelemetry GenAI spans, one trace per file (inference-perf layout) |
//! | `tracelab`        | TraceLab round rows (JSONL), subagent sessions linked to their parent |
//!
//! Inputs may be files or directories (searched recursively for the format's usual extensions);
//! `.zst`- and `.gz`-compressed files are decompressed on the fly. Line-based inputs are streamed.
//!
//! ```no_run
//! use std::path::PathBuf;
//! use bench_workload::import::{import, ImportFormat, ImportOptions};
//!
//! let mut sessions = Vec::new();
//! let stats = import(
//!     ImportFormat::Sharegpt,
//!     &[PathBuf::from("conversations.json")],
//!     &ImportOptions::default(),
//!     &mut |s| {
//!         sessions.push(s);
//!         Ok(())
//!     },
//! )?;
//! println!("{} sessions, {} turns", stats.sessions, stats.turns);
//! # Ok::<(), bench_workload::import::ImportError>(())
//! ```

mod cc_traces;
mod lmcache;
mod mooncake;
mod openai;
mod otel;
mod sharegpt;
mod swe_agent;
mod tracelab;

use std::collections::HashSet;
use std::fmt;
use std::fs::{self, File};
use std::io::{BufRead, Cursor, Read};
use std::path::{Path, PathBuf};
use std::str::FromStr;

use serde_json::{Map, Value};

use crate::format::{Message, TraceSession, TraceTurn};
use crate::load::{self, BOM};

pub use mooncake::block_text as mooncake_block_text;

/// A trace format `bench import` understands.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum ImportFormat {
    /// LMCache agent traces: one LLM call per JSONL line with the full prompt text.
    Lmcache,
    /// Mooncake request traces: token lengths and prefix-block hash ids, no text.
    Mooncake,
    /// ShareGPT conversations (`{"id", "conversations": [{"from", "value"}]}`).
    Sharegpt,
    /// OpenAI chat message arrays (`[{"role", "content"}]`).
    OpenaiMessages,
    /// SWE-agent `.traj` trajectories.
    SweAgent,
    /// Weka / kv-cache-tester (`cc-traces`) agent traces: calls with token counts and KV-block
    /// hash ids, subagents nested in their parent's request list.
    CcTraces,
    /// OpenTelemetry GenAI spans, one trace (session) per file, in the flat layout
    /// inference-perf reads (`{"trace_id", "spans": [...]}`).
    Otel,
    /// TraceLab round rows (JSONL): one LLM round per line, grouped by `session_id`.
    Tracelab,
}

impl ImportFormat {
    /// Every format, in the order they are listed to users.
    pub const ALL: [ImportFormat; 8] = [
        ImportFormat::Lmcache,
        ImportFormat::Mooncake,
        ImportFormat::Sharegpt,
        ImportFormat::OpenaiMessages,
        ImportFormat::SweAgent,
        ImportFormat::CcTraces,
        ImportFormat::Otel,
        ImportFormat::Tracelab,
    ];

    /// The name used on the command line (`lmcache`, `openai-messages`, ...).
    pub fn name(self) -> &'static str {
        match self {
            ImportFormat::Lmcache => "lmcache",
            ImportFormat::Mooncake => "mooncake",
            ImportFormat::Sharegpt => "sharegpt",
            ImportFormat::OpenaiMessages => "openai-messages",
            ImportFormat::SweAgent => "swe-agent",
            ImportFormat::CcTraces => "cc-traces",
            ImportFormat::Otel => "otel",
            ImportFormat::Tracelab => "tracelab",
        }
    }

    /// A one-line description for help texts.
    pub fn description(self) -> &'static str {
        match self {
            ImportFormat::Lmcache => {
                "LMCache agent traces: one LLM call per JSONL line (timestamp, full prompt, output, session_id)"
            }
            ImportFormat::Mooncake => {
                "Mooncake request traces: timestamp, input/output lengths and prefix-block hash ids (text is synthesized)"
            }
            ImportFormat::Sharegpt => {
                "ShareGPT conversations: JSON array (or JSONL) of {id, conversations: [{from, value}]}"
            }
            ImportFormat::OpenaiMessages => {
                "OpenAI chat messages: a JSON array of {role, content}, an array of such arrays, or JSONL of them"
            }
            ImportFormat::SweAgent => {
                "SWE-agent .traj trajectories (the history of the main agent)"
            }
            ImportFormat::CcTraces => {
                "Weka/kv-cache-tester agent traces (cc-traces): calls with token counts and KV-block hash ids, subagents as forks and joins (text is synthesized)"
            }
            ImportFormat::Otel => {
                "OpenTelemetry GenAI spans, one trace per .json file ({trace_id, spans: [...]}): chat spans become turns, invoke_agent spans subagents"
            }
            ImportFormat::Tracelab => {
                "TraceLab round rows (JSONL): rounds grouped by session_id, <session>/subagents/<agent> sessions as subagents (text is synthesized)"
            }
        }
    }

    /// File name endings searched for in a directory input (each also with `.zst`).
    fn extensions(self) -> &'static [&'static str] {
        match self {
            ImportFormat::Lmcache | ImportFormat::Mooncake => &["jsonl"],
            ImportFormat::Sharegpt
            | ImportFormat::OpenaiMessages
            | ImportFormat::CcTraces
            | ImportFormat::Otel => &["json", "jsonl"],
            ImportFormat::SweAgent => &["traj"],
            ImportFormat::Tracelab => &["jsonl"],
        }
    }
}

impl fmt::Display for ImportFormat {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.name())
    }
}

/// An import format name that is not one of [`ImportFormat::ALL`].
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("unknown import format {name:?} (known formats: {})", known_names())]
pub struct UnknownFormat {
    /// The name that was given.
    pub name: String,
}

fn known_names() -> String {
    ImportFormat::ALL.map(ImportFormat::name).join(", ")
}

impl FromStr for ImportFormat {
    type Err = UnknownFormat;

    fn from_str(s: &str) -> Result<Self, Self::Err> {
        let lower = s.trim().to_ascii_lowercase();
        ImportFormat::ALL
            .into_iter()
            .find(|f| f.name() == lower)
            .ok_or_else(|| UnknownFormat {
                name: s.to_string(),
            })
    }
}

/// Knobs of an import.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ImportOptions {
    /// Skip (and count) malformed records instead of failing.
    pub skip_invalid: bool,
    /// Tokens per Mooncake prefix block (the trace's block size; 512 in the FAST'25 release).
    pub mooncake_block_tokens: u32,
    /// The longest line of a JSON Lines input read, in bytes (`bench import --max-trace-line`;
    /// 64 MiB by default): a longer one is a malformed record, read no further than the cap,
    /// so memory stays bounded.
    pub max_line_bytes: u64,
}

impl Default for ImportOptions {
    fn default() -> Self {
        ImportOptions {
            skip_invalid: false,
            mooncake_block_tokens: 512,
            max_line_bytes: load::DEFAULT_MAX_LINE_BYTES,
        }
    }
}

/// What an import produced.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
#[non_exhaustive]
pub struct ImportStats {
    /// Sessions handed to the sink.
    pub sessions: u64,
    /// Turns in those sessions.
    pub turns: u64,
    /// Malformed records (lines, conversations or files) skipped under `skip_invalid`.
    pub skipped: u64,
    /// Facts worth telling the user (each once, with a count), e.g. how many prompts were not an
    /// extension of the previous one.
    pub notes: Vec<String>,
}

/// A failed import: which file, which line (for line-based formats) and what is wrong.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{}{}", location(.file, .line), .message)]
#[non_exhaustive]
pub struct ImportError {
    /// The file being read (empty when the error concerns no file).
    pub file: PathBuf,
    /// 1-based line number, for line-based formats.
    pub line: Option<u64>,
    /// What is wrong, naming the offending field.
    pub message: String,
}

fn location(file: &Path, line: &Option<u64>) -> String {
    if file.as_os_str().is_empty() {
        return String::new();
    }
    match line {
        Some(l) => format!("{}:{l}: ", file.display()),
        None => format!("{}: ", file.display()),
    }
}

impl ImportError {
    /// An error about `file` (and `line`, 1-based, when known). Sinks use this to report their
    /// own failures (e.g. a write error).
    pub fn new(file: impl Into<PathBuf>, line: Option<u64>, message: impl Into<String>) -> Self {
        ImportError {
            file: file.into(),
            line,
            message: message.into(),
        }
    }
}

/// Why [`import_to_file`] failed.
#[derive(Debug, thiserror::Error)]
pub enum ImportToFileError {
    /// An input was bad, or the output's name (exit 2 in `bench import`).
    #[error(transparent)]
    Input(#[from] ImportError),
    /// The output cannot be created (its name or its directory).
    #[error(transparent)]
    Target(crate::PlanError),
    /// The output could not be written.
    #[error(transparent)]
    Output(#[from] crate::PlanError),
}

/// [`import`] into a native trace file (`.jsonl`, or `.jsonl.zst` compressed), written
/// atomically; returns the sessions written and the import's statistics.
pub fn import_to_file(
    format: ImportFormat,
    inputs: &[PathBuf],
    opts: &ImportOptions,
    output: &std::path::Path,
) -> Result<(u64, ImportStats), ImportToFileError> {
    let mut writer =
        crate::write::SessionWriter::create(output).map_err(ImportToFileError::Target)?;
    let mut write_err = None;
    let stats = import(format, inputs, opts, &mut |s| {
        writer.write(&s).map_err(|e| {
            let msg = e.to_string();
            write_err = Some(e);
            ImportError::new(output.to_owned(), None, msg)
        })
    });
    if let Some(e) = write_err {
        return Err(e.into());
    }
    let stats = stats?;
    Ok((writer.finish()?, stats))
}

/// Imports `inputs` (files or directories) in `format`, handing each session to `sink` in input
/// order. Every session passes [`TraceSession::check`] first.
pub fn import(
    format: ImportFormat,
    inputs: &[PathBuf],
    opts: &ImportOptions,
    sink: &mut dyn FnMut(TraceSession) -> Result<(), ImportError>,
) -> Result<ImportStats, ImportError> {
    if inputs.is_empty() {
        return Err(ImportError::new(
            PathBuf::new(),
            None,
            "no input files given",
        ));
    }
    if opts.mooncake_block_tokens == 0 && format == ImportFormat::Mooncake {
        return Err(ImportError::new(
            PathBuf::new(),
            None,
            "mooncake_block_tokens must be positive",
        ));
    }
    let mut groups = Vec::with_capacity(inputs.len());
    for input in inputs {
        groups.push((input.clone(), expand_input(format, input)?));
    }
    let multi_file = groups.iter().map(|(_, files)| files.len()).sum::<usize>() > 1;
    let mut ctx = Ctx {
        opts,
        sink,
        stats: ImportStats::default(),
        notes: Notes::default(),
        ids: HashSet::new(),
        usable: 0,
        multi_file,
    };
    match format {
        ImportFormat::Lmcache => lmcache::import(&mut ctx, &groups)?,
        ImportFormat::Tracelab => tracelab::import(&mut ctx, &groups)?,
        _ => {
            for (input, files) in &groups {
                let before = ctx.usable;
                for file in files {
                    match format {
                        ImportFormat::Mooncake => mooncake::import_file(&mut ctx, file)?,
                        ImportFormat::Sharegpt => sharegpt::import_file(&mut ctx, file)?,
                        ImportFormat::OpenaiMessages => openai::import_file(&mut ctx, file)?,
                        ImportFormat::SweAgent => swe_agent::import_file(&mut ctx, file)?,
                        ImportFormat::CcTraces => cc_traces::import_file(&mut ctx, file)?,
                        ImportFormat::Otel => otel::import_file(&mut ctx, file)?,
                        ImportFormat::Lmcache | ImportFormat::Tracelab => {}
                    }
                }
                if ctx.usable == before {
                    return Err(no_sessions(input));
                }
            }
        }
    }
    let mut stats = ctx.stats;
    stats.notes = ctx.notes.render();
    Ok(stats)
}

pub(crate) fn no_sessions(input: &Path) -> ImportError {
    ImportError::new(input, None, "no sessions found in this input")
}

// ---------------------------------------------------------------------------------------------
// Shared state

/// Facts collected during an import, rendered into [`ImportStats::notes`].
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum NoteKind {
    LmcacheRestart,
    LmcacheOutputMissing,
    LmcacheUnsorted,
    TrailingDropped,
    NoAnswer,
    PartsDropped,
    DuplicateIds,
    MooncakeExtraBlocks,
    MooncakeFiller,
    GraphInputShort,
    SubagentNoFork,
    SubagentEmpty,
    SubagentBackground,
    CcRelativeClock,
    CcExtraBlocks,
    OtelNoMessages,
    OtelUnlinked,
    OtelRewritten,
    OtelDuplicates,
    TracelabOrphan,
    TracelabUnmatched,
    TracelabUntimed,
}

impl NoteKind {
    fn render(self, n: u64) -> String {
        match self {
            NoteKind::LmcacheRestart => format!(
                "{n} prompt(s) were not an extension of the previous prompt + output; their turns restart the conversation (the whole prompt is the turn's input)"
            ),
            NoteKind::LmcacheOutputMissing => format!(
                "{n} prompt(s) extended the previous prompt but did not contain the previous output verbatim; their input is the text after the previous prompt (the output is replayed as the assistant message)"
            ),
            NoteKind::LmcacheUnsorted => {
                format!(
                    "{n} session(s) had calls out of timestamp order in the file; they were sorted by timestamp"
                )
            }
            NoteKind::TrailingDropped => format!(
                "{n} conversation(s) ended with message(s) that got no assistant answer; those trailing messages were dropped"
            ),
            NoteKind::NoAnswer => {
                format!("{n} conversation(s) had no assistant answer and were skipped")
            }
            NoteKind::PartsDropped => {
                format!("{n} non-text content part(s) (images, audio, ...) were dropped")
            }
            NoteKind::DuplicateIds => {
                format!("{n} duplicate session id(s) were made unique with a \"#N\" suffix")
            }
            NoteKind::MooncakeExtraBlocks => format!(
                "{n} request(s) listed more hash_ids than input_length needs; the extra blocks were ignored"
            ),
            NoteKind::MooncakeFiller => format!(
                "{n} request(s) had an input_length beyond their hash_ids' blocks; the excess was filled with text unique to the request"
            ),
            NoteKind::GraphInputShort => format!(
                "{n} turn(s) recorded fewer input tokens than their replayed context already holds (previous prompt + answer + joined answers); they add no new input, so their replayed prompt is larger than recorded"
            ),
            NoteKind::SubagentNoFork => {
                format!("{n} subagent(s) had no earlier call to fork from and were dropped")
            }
            NoteKind::SubagentEmpty => {
                format!("{n} subagent(s) made no calls and were dropped")
            }
            NoteKind::SubagentBackground => format!(
                "{n} subagent(s) ran in the background (status \"async_launched\"): no later call waits for them"
            ),
            NoteKind::CcRelativeClock => format!(
                "{n} subagent(s) had a completion-time \"t\" and call times relative to their own start (the kv-cache-tester layout); their calls were moved onto the conversation clock"
            ),
            NoteKind::CcExtraBlocks => format!(
                "{n} call(s) listed more hash_ids than their \"in\" tokens fill; the extra blocks were ignored"
            ),
            NoteKind::OtelNoMessages => format!(
                "{n} chat span(s) had no gen_ai.input.messages and were not taken as LLM calls"
            ),
            NoteKind::OtelUnlinked => format!(
                "{n} LLM call(s) started before any earlier call had finished and had no link to one; they were dropped"
            ),
            NoteKind::OtelRewritten => format!(
                "{n} LLM call(s) did not repeat their predecessor's conversation; their input is the messages after the common prefix"
            ),
            NoteKind::OtelDuplicates => {
                format!("{n} duplicate span(s) (same times and attributes as another) were dropped")
            }
            NoteKind::TracelabOrphan => format!(
                "{n} subagent session(s) (<session>/subagents/...) could not be linked to a main session (none in the input, or no timing events to place them by); each was imported as a session of its own"
            ),
            NoteKind::TracelabUnmatched => format!(
                "{n} subagent session(s) lay inside no spawn call (Agent/Task) of their main session; each forks from the latest round that had ended before it, and nothing joins it"
            ),
            NoteKind::TracelabUntimed => format!(
                "{n} round(s) had no usable timing events; their wait is the previous round's longest tool latency (0 after a fork or a join)"
            ),
        }
    }
}

#[derive(Debug, Default)]
pub(crate) struct Notes {
    counts: Vec<(NoteKind, u64)>,
    other: Vec<String>,
    other_dropped: u64,
}

const MAX_OTHER_NOTES: usize = 8;

impl Notes {
    fn add(&mut self, kind: NoteKind, n: u64) {
        if n == 0 {
            return;
        }
        match self.counts.iter_mut().find(|(k, _)| *k == kind) {
            Some((_, c)) => *c += n,
            None => self.counts.push((kind, n)),
        }
    }

    fn add_other(&mut self, note: String) {
        if self.other.contains(&note) {
            return;
        }
        if self.other.len() < MAX_OTHER_NOTES {
            self.other.push(note);
        } else {
            self.other_dropped += 1;
        }
    }

    fn render(self) -> Vec<String> {
        let mut out: Vec<String> = self.counts.iter().map(|(k, n)| k.render(*n)).collect();
        out.extend(self.other);
        if self.other_dropped > 0 {
            out.push(format!("... and {} more note(s)", self.other_dropped));
        }
        out
    }
}

/// The state one import threads through the format modules.
pub(crate) struct Ctx<'a> {
    opts: &'a ImportOptions,
    sink: &'a mut dyn FnMut(TraceSession) -> Result<(), ImportError>,
    stats: ImportStats,
    notes: Notes,
    ids: HashSet<String>,
    /// Usable records seen so far (to detect inputs that yield nothing).
    usable: u64,
    /// More than one file takes part in this import.
    multi_file: bool,
}

impl Ctx<'_> {
    pub(crate) fn opts(&self) -> &ImportOptions {
        self.opts
    }

    pub(crate) fn multi_file(&self) -> bool {
        self.multi_file
    }

    pub(crate) fn note(&mut self, kind: NoteKind, n: u64) {
        self.notes.add(kind, n);
    }

    pub(crate) fn mark_usable(&mut self) {
        self.usable += 1;
    }

    /// A malformed record: counted and skipped under `skip_invalid`, an error otherwise.
    pub(crate) fn invalid(&mut self, err: ImportError) -> Result<(), ImportError> {
        if self.opts.skip_invalid {
            self.stats.skipped += 1;
            self.notes.add_other(format!("skipped: {err}"));
            Ok(())
        } else {
            Err(err)
        }
    }

    /// Checks `session`, makes its id unique and hands it to the sink. A session failing
    /// [`TraceSession::check`] is treated as a malformed record of `file`/`line`.
    pub(crate) fn emit(
        &mut self,
        file: &Path,
        line: Option<u64>,
        mut session: TraceSession,
    ) -> Result<(), ImportError> {
        if let Err(e) = session.check() {
            return self.invalid(ImportError::new(file, line, e));
        }
        if self.ids.contains(&session.session_id) {
            let base = session.session_id.clone();
            let mut k = 2u64;
            while self.ids.contains(&format!("{base}#{k}")) {
                k += 1;
            }
            session.session_id = format!("{base}#{k}");
            self.notes.add(NoteKind::DuplicateIds, 1);
        }
        self.ids.insert(session.session_id.clone());
        self.usable += 1;
        self.stats.sessions += 1;
        self.stats.turns += session.turns.len() as u64;
        (self.sink)(session)
    }
}

// ---------------------------------------------------------------------------------------------
// Inputs

/// The files of one input: the input itself, or a directory's matching files sorted by path.
fn expand_input(format: ImportFormat, input: &Path) -> Result<Vec<PathBuf>, ImportError> {
    let meta = fs::metadata(input)
        .map_err(|e| ImportError::new(input, None, format!("cannot open: {e}")))?;
    if !meta.is_dir() {
        return Ok(vec![input.to_path_buf()]);
    }
    let mut files = Vec::new();
    walk(input, format.extensions(), &mut files)?;
    files.sort();
    if files.is_empty() {
        let exts: Vec<String> = format
            .extensions()
            .iter()
            .map(|e| format!("*.{e}[.zst|.gz]"))
            .collect();
        return Err(ImportError::new(
            input,
            None,
            format!(
                "no {} files ({}) found in this directory",
                format.name(),
                exts.join(", ")
            ),
        ));
    }
    Ok(files)
}

fn walk(dir: &Path, exts: &[&str], out: &mut Vec<PathBuf>) -> Result<(), ImportError> {
    let entries =
        fs::read_dir(dir).map_err(|e| ImportError::new(dir, None, format!("cannot list: {e}")))?;
    for entry in entries {
        let entry = entry.map_err(|e| ImportError::new(dir, None, format!("cannot list: {e}")))?;
        let path = entry.path();
        let ft = entry
            .file_type()
            .map_err(|e| ImportError::new(&path, None, format!("cannot stat: {e}")))?;
        if ft.is_dir() {
            walk(&path, exts, out)?;
            continue;
        }
        // Symlinks to files count; symlinks to directories are not followed.
        let is_file = ft.is_file() || (ft.is_symlink() && path.is_file());
        if is_file && exts.iter().any(|e| has_extension(&path, e)) {
            out.push(path);
        }
    }
    Ok(())
}

/// The file name without a trailing `.zst` or `.gz`.
fn base_name(path: &Path) -> String {
    let name = path
        .file_name()
        .map(|n| n.to_string_lossy().into_owned())
        .unwrap_or_default();
    match name
        .strip_suffix(".zst")
        .or_else(|| name.strip_suffix(".gz"))
    {
        Some(b) => b.to_string(),
        None => name,
    }
}

/// Whether the file name (ignoring `.zst`) ends with `.ext`.
fn has_extension(path: &Path, ext: &str) -> bool {
    base_name(path)
        .to_ascii_lowercase()
        .ends_with(&format!(".{ext}"))
}

/// Whether the file is JSON Lines (`.jsonl`, optionally `.zst`).
pub(crate) fn is_jsonl(path: &Path) -> bool {
    has_extension(path, "jsonl")
}

/// The file name without `.zst` and without its last extension: `local.traj.json` →
/// `local.traj`, `foo.jsonl.zst` → `foo`.
pub(crate) fn file_stem(path: &Path) -> String {
    let base = base_name(path);
    match base.rfind('.') {
        Some(i) if i > 0 => base[..i].to_string(),
        _ => base,
    }
}

fn is_zst(path: &Path) -> bool {
    path.extension()
        .is_some_and(|e| e.eq_ignore_ascii_case("zst"))
}

fn is_gz(path: &Path) -> bool {
    path.extension()
        .is_some_and(|e| e.eq_ignore_ascii_case("gz"))
}

/// Opens a file, decompressing `.zst` and `.gz` (e.g. TraceLab's `.jsonl.gz` release)
/// transparently.
pub(crate) fn open(path: &Path) -> Result<Box<dyn BufRead>, ImportError> {
    let file =
        File::open(path).map_err(|e| ImportError::new(path, None, format!("cannot open: {e}")))?;
    if is_gz(path) {
        return Ok(Box::new(std::io::BufReader::new(
            flate2::read::MultiGzDecoder::new(file),
        )));
    }
    load::decoded(file, is_zst(path))
        .map_err(|e| ImportError::new(path, None, format!("cannot start zstd decoding: {e}")))
}

/// Reads a whole (decompressed) file.
pub(crate) fn read_all(path: &Path) -> Result<Vec<u8>, ImportError> {
    let mut reader = open(path)?;
    let mut bytes = Vec::new();
    reader
        .read_to_end(&mut bytes)
        .map_err(|e| ImportError::new(path, None, format!("read error: {e}")))?;
    Ok(bytes)
}

/// The outcome of handling one record: `Ok(Err(message))` is a malformed record (skippable),
/// `Err` is fatal (I/O, sink).
pub(crate) type RecordResult = Result<Result<(), String>, ImportError>;

/// Parses each non-blank line of `reader` as JSON and hands it to `f` with its 1-based number
/// (a byte order mark at the start is ignored). Malformed lines (invalid UTF-8, invalid JSON, or
/// `f` reporting a field error) are skipped under `skip_invalid`.
pub(crate) fn for_each_json_line(
    ctx: &mut Ctx<'_>,
    path: &Path,
    reader: Box<dyn BufRead>,
    f: &mut dyn FnMut(&mut Ctx<'_>, u64, Value) -> RecordResult,
) -> Result<(), ImportError> {
    let mut lines = load::Lines::new(reader, true, ctx.opts().max_line_bytes);
    loop {
        let (line, bytes) = match lines.next_line() {
            Ok(Some(l)) => l,
            Ok(None) => break,
            Err(load::LineError::TooLong { line, cap }) => {
                let msg = format!("line longer than the {} cap", load::human_bytes(cap));
                ctx.invalid(ImportError::new(path, Some(line), msg))?;
                continue;
            }
            Err(load::LineError::Io { line, error }) => {
                return Err(ImportError::new(
                    path,
                    Some(line),
                    format!("read error: {error}"),
                ));
            }
        };
        let value = match std::str::from_utf8(bytes) {
            Ok(text) => serde_json::from_str(text).map_err(|e| json_error(&e)),
            Err(e) => Err(format!(
                "invalid UTF-8 (byte {} of the line)",
                e.valid_up_to() + 1
            )),
        };
        let outcome = match value {
            Ok(value) => f(ctx, line, value)?,
            Err(msg) => Err(msg),
        };
        if let Err(msg) = outcome {
            ctx.invalid(ImportError::new(path, Some(line), msg))?;
        }
    }
    Ok(())
}

/// Imports JSON Lines of chat-shaped records: `per_record` turns each line's value (with the
/// default id `STEM-N`, N counting the lines that are valid JSON from 0) into a session and the
/// number of its trailing messages without an answer, or a field error.
pub(crate) fn import_lines(
    ctx: &mut Ctx<'_>,
    path: &Path,
    reader: Box<dyn BufRead>,
    stem: &str,
    per_record: impl Fn(&mut Ctx<'_>, &Value, String) -> Result<(TraceSession, usize), String>,
) -> Result<(), ImportError> {
    let mut index = 0usize;
    for_each_json_line(ctx, path, reader, &mut |ctx, line, value| {
        let default_id = format!("{stem}-{index}");
        index += 1;
        match per_record(ctx, &value, default_id) {
            Ok((session, trailing)) => {
                emit_conversation(ctx, path, Some(line), session, trailing)?;
                Ok(Ok(()))
            }
            Err(m) => Ok(Err(m)),
        }
    })
}

/// A JSON document read whole, or why it is unusable.
pub(crate) enum Document {
    /// The parsed value.
    Json(Value),
    /// The file turned out to hold several JSON values, one per line.
    Lines(Vec<u8>),
    /// Invalid UTF-8 or invalid JSON, with the line when known.
    Invalid(ImportError),
    /// Nothing but whitespace.
    Empty,
}

/// Reads and parses a whole JSON file. A `.json` file holding several values (JSON Lines
/// content) is reported as [`Document::Lines`].
pub(crate) fn read_document(path: &Path) -> Result<Document, ImportError> {
    let mut bytes = read_all(path)?;
    if bytes.starts_with(BOM) {
        bytes.drain(..BOM.len());
    }
    if let Err(e) = std::str::from_utf8(&bytes) {
        let at = e.valid_up_to();
        let line = bytes[..at].iter().filter(|&&b| b == b'\n').count() as u64 + 1;
        return Ok(Document::Invalid(ImportError::new(
            path,
            Some(line),
            "invalid UTF-8",
        )));
    }
    if bytes.iter().all(u8::is_ascii_whitespace) {
        return Ok(Document::Empty);
    }
    match serde_json::from_slice::<Value>(&bytes) {
        Ok(v) => Ok(Document::Json(v)),
        Err(e) if e.to_string().starts_with("trailing characters") && e.line() > 1 => {
            Ok(Document::Lines(bytes))
        }
        Err(e) => Ok(Document::Invalid(ImportError::new(
            path,
            Some(e.line() as u64),
            json_error(&e),
        ))),
    }
}

/// Wraps a [`Document::Lines`] buffer as a reader.
pub(crate) fn cursor(bytes: Vec<u8>) -> Box<dyn BufRead> {
    Box::new(Cursor::new(bytes))
}

/// `invalid JSON: <what> (column N)`, without serde_json's own position suffix.
fn json_error(e: &serde_json::Error) -> String {
    let full = e.to_string();
    let suffix = format!(" at line {} column {}", e.line(), e.column());
    let what = full.strip_suffix(&suffix).unwrap_or(&full);
    format!("invalid JSON: {what} (column {})", e.column())
}

// ---------------------------------------------------------------------------------------------
// Field access with errors that name the field

/// A short description of a JSON value for error messages: `a string ("x")`.
pub(crate) fn describe(v: &Value) -> String {
    let mut shown = v.to_string();
    if shown.len() > 40 {
        let mut cut = 37;
        while !shown.is_char_boundary(cut) {
            cut -= 1;
        }
        shown.truncate(cut);
        shown.push_str("...");
    }
    let kind = match v {
        Value::Null => return "null".to_string(),
        Value::Bool(_) => "a boolean",
        Value::Number(_) => "a number",
        Value::String(_) => "a string",
        Value::Array(_) => return "an array".to_string(),
        Value::Object(_) => return "an object".to_string(),
    };
    format!("{kind} ({shown})")
}

pub(crate) fn as_object<'v>(v: &'v Value, what: &str) -> Result<&'v Map<String, Value>, String> {
    v.as_object()
        .ok_or_else(|| format!("{what}: expected an object, found {}", describe(v)))
}

pub(crate) fn required<'v>(obj: &'v Map<String, Value>, key: &str) -> Result<&'v Value, String> {
    obj.get(key).ok_or_else(|| format!("\"{key}\": missing"))
}

pub(crate) fn u64_field(obj: &Map<String, Value>, key: &str) -> Result<u64, String> {
    let v = required(obj, key)?;
    v.as_u64().ok_or_else(|| {
        format!(
            "\"{key}\": expected a non-negative integer, found {}",
            describe(v)
        )
    })
}

pub(crate) fn i64_field(obj: &Map<String, Value>, key: &str) -> Result<i64, String> {
    let v = required(obj, key)?;
    v.as_i64()
        .ok_or_else(|| format!("\"{key}\": expected an integer, found {}", describe(v)))
}

/// Takes a string field out of `obj`.
pub(crate) fn take_string(obj: &mut Map<String, Value>, key: &str) -> Result<String, String> {
    match obj.get_mut(key) {
        None => Err(format!("\"{key}\": missing")),
        Some(Value::String(s)) => Ok(std::mem::take(s)),
        Some(v) => Err(format!(
            "\"{key}\": expected a string, found {}",
            describe(v)
        )),
    }
}

/// A string or integer id as a string.
pub(crate) fn id_string(v: &Value, key: &str) -> Result<String, String> {
    match v {
        Value::String(s) if !s.is_empty() => Ok(s.clone()),
        Value::Number(n) if n.is_i64() || n.is_u64() => Ok(n.to_string()),
        _ => Err(format!(
            "\"{key}\": expected a non-empty string or an integer, found {}",
            describe(v)
        )),
    }
}

// ---------------------------------------------------------------------------------------------
// Chat messages → turns (sharegpt, openai-messages, swe-agent)

/// One message read from a chat-shaped trace.
#[derive(Debug, Clone)]
pub(crate) struct ChatMessage {
    /// The role, already normalised (`user`, `assistant`, `system`, or as given).
    pub(crate) role: String,
    pub(crate) content: String,
    /// Tool calls of an assistant message.
    pub(crate) tool_calls: Option<Value>,
    /// A tool result's `tool_call_id`.
    pub(crate) tool_call_id: Option<String>,
}

/// A conversation cut into turns.
pub(crate) struct Turns {
    pub(crate) system_prompt: Option<String>,
    pub(crate) turns: Vec<TraceTurn>,
    /// Messages after the last assistant answer (dropped).
    pub(crate) trailing: usize,
}

/// Each assistant message closes a turn whose input is the non-assistant messages before it; a
/// leading system message becomes the system prompt.
pub(crate) fn build_turns(messages: Vec<ChatMessage>) -> Turns {
    let mut iter = messages.into_iter().peekable();
    let system_prompt = match iter.peek() {
        Some(m) if m.role == "system" => iter.next().map(|m| m.content),
        _ => None,
    };
    let mut turns = Vec::new();
    let mut pending: Vec<Message> = Vec::new();
    for m in iter {
        if m.role == "assistant" {
            let mut turn =
                TraceTurn::new(turns.len() as u32, std::mem::take(&mut pending), m.content);
            turn.tool_calls = m.tool_calls.filter(|v| !v.is_null());
            turns.push(turn);
        } else {
            pending.push(Message {
                role: m.role,
                content: m.content,
                tool_call_id: m.tool_call_id,
            });
        }
    }
    Turns {
        system_prompt,
        turns,
        trailing: pending.len(),
    }
}

/// The text of an OpenAI-style `content`: a string, `null`/absent (""), or an array of parts
/// whose `text` parts are concatenated. Returns the text and the number of non-text parts
/// dropped.
pub(crate) fn content_text(v: Option<&Value>, what: &str) -> Result<(String, u64), String> {
    match v {
        None | Some(Value::Null) => Ok((String::new(), 0)),
        Some(Value::String(s)) => Ok((s.clone(), 0)),
        Some(Value::Array(parts)) => {
            let mut text = String::new();
            let mut dropped = 0;
            for (i, part) in parts.iter().enumerate() {
                match part {
                    Value::String(s) => text.push_str(s),
                    Value::Object(o) => {
                        let kind = o.get("type").and_then(Value::as_str);
                        match (kind, o.get("text")) {
                            (Some("text") | None, Some(Value::String(s))) => text.push_str(s),
                            (Some("text"), Some(t)) => {
                                return Err(format!(
                                    "{what}[{i}].text: expected a string, found {}",
                                    describe(t)
                                ));
                            }
                            _ => dropped += 1,
                        }
                    }
                    other => {
                        return Err(format!(
                            "{what}[{i}]: expected a string or an object, found {}",
                            describe(other)
                        ));
                    }
                }
            }
            Ok((text, dropped))
        }
        Some(other) => Err(format!(
            "{what}: expected a string, an array of parts or null, found {}",
            describe(other)
        )),
    }
}

/// Notes what was dropped from a conversation cut into turns and hands it to the sink; a
/// conversation without any assistant answer is skipped (with a note, not as an error).
pub(crate) fn emit_conversation(
    ctx: &mut Ctx<'_>,
    file: &Path,
    line: Option<u64>,
    session: TraceSession,
    trailing: usize,
) -> Result<(), ImportError> {
    if session.turns.is_empty() {
        ctx.note(NoteKind::NoAnswer, 1);
        return Ok(());
    }
    if trailing > 0 {
        ctx.note(NoteKind::TrailingDropped, 1);
    }
    ctx.emit(file, line, session)
}

// ---------------------------------------------------------------------------------------------
// Agent-graph traces (cc-traces, otel, tracelab): paths into a document, times, gaps

/// `PARENT.KEY` for error messages: a top-level key is quoted (`"requests"`), a nested one is
/// not (`"requests"[2].in`) unless it holds a dot or a space (`attributes."gen_ai.x"`).
pub(crate) fn at_key(parent: &str, key: &str) -> String {
    if parent.is_empty() {
        return format!("\"{key}\"");
    }
    if key.contains(['.', ' ']) || key.is_empty() {
        format!("{parent}.\"{key}\"")
    } else {
        format!("{parent}.{key}")
    }
}

/// An optional non-negative integer field (`null` counts as absent). Integral floats
/// (`1000.0`) are accepted, as JSON writers in other languages produce them.
pub(crate) fn opt_u64_at(
    obj: &Map<String, Value>,
    parent: &str,
    key: &str,
) -> Result<Option<u64>, String> {
    match obj.get(key) {
        None | Some(Value::Null) => Ok(None),
        Some(v) => match v.as_u64().or_else(|| {
            v.as_f64()
                .filter(|f| f.fract() == 0.0 && *f >= 0.0 && *f < 9.0e15)
                .map(|f| f as u64)
        }) {
            Some(n) => Ok(Some(n)),
            None => Err(format!(
                "{}: expected a non-negative integer, found {}",
                at_key(parent, key),
                describe(v)
            )),
        },
    }
}

/// A required non-negative integer field.
pub(crate) fn req_u64_at(obj: &Map<String, Value>, parent: &str, key: &str) -> Result<u64, String> {
    opt_u64_at(obj, parent, key)?.ok_or_else(|| format!("{}: missing", at_key(parent, key)))
}

/// An optional finite number field (`null` counts as absent).
pub(crate) fn opt_f64_at(
    obj: &Map<String, Value>,
    parent: &str,
    key: &str,
) -> Result<Option<f64>, String> {
    match obj.get(key) {
        None | Some(Value::Null) => Ok(None),
        Some(v) => match v.as_f64().filter(|f| f.is_finite()) {
            Some(f) => Ok(Some(f)),
            None => Err(format!(
                "{}: expected a number, found {}",
                at_key(parent, key),
                describe(v)
            )),
        },
    }
}

/// An optional string field (`null` counts as absent).
pub(crate) fn opt_str_at<'v>(
    obj: &'v Map<String, Value>,
    parent: &str,
    key: &str,
) -> Result<Option<&'v str>, String> {
    match obj.get(key) {
        None | Some(Value::Null) => Ok(None),
        Some(Value::String(s)) => Ok(Some(s)),
        Some(v) => Err(format!(
            "{}: expected a string, found {}",
            at_key(parent, key),
            describe(v)
        )),
    }
}

/// An optional array field (`null` counts as absent).
pub(crate) fn opt_array_at<'v>(
    obj: &'v Map<String, Value>,
    parent: &str,
    key: &str,
) -> Result<Option<&'v Vec<Value>>, String> {
    match obj.get(key) {
        None | Some(Value::Null) => Ok(None),
        Some(Value::Array(a)) => Ok(Some(a)),
        Some(v) => Err(format!(
            "{}: expected an array, found {}",
            at_key(parent, key),
            describe(v)
        )),
    }
}

/// An optional ISO-8601 time field, as nanoseconds since the Unix epoch.
pub(crate) fn opt_time_at(
    obj: &Map<String, Value>,
    parent: &str,
    key: &str,
) -> Result<Option<i64>, String> {
    match opt_str_at(obj, parent, key)? {
        None => Ok(None),
        Some(s) => parse_time_ns(s).map(Some).ok_or_else(|| {
            format!(
                "{}: expected an ISO-8601 time (2026-11-30T09:00:03.000Z), found {}",
                at_key(parent, key),
                describe(&Value::String(s.to_string()))
            )
        }),
    }
}

/// An ISO-8601 / RFC 3339 date-time (`2026-11-30T09:00:03.000000Z`, `...+02:00`, a space for
/// the `T`, up to nanosecond fractions; no zone means UTC) as nanoseconds since the Unix epoch.
pub(crate) fn parse_time_ns(s: &str) -> Option<i64> {
    let b = s.trim().as_bytes();
    let num = |r: &[u8]| -> Option<i64> {
        if r.is_empty() || !r.iter().all(u8::is_ascii_digit) {
            return None;
        }
        r.iter().try_fold(0i64, |n, d| {
            n.checked_mul(10)?.checked_add(i64::from(d - b'0'))
        })
    };
    if b.len() < 19
        || b[4] != b'-'
        || b[7] != b'-'
        || !matches!(b[10], b'T' | b't' | b' ')
        || b[13] != b':'
        || b[16] != b':'
    {
        return None;
    }
    let (year, month, day) = (num(&b[0..4])?, num(&b[5..7])?, num(&b[8..10])?);
    let (hour, minute, second) = (num(&b[11..13])?, num(&b[14..16])?, num(&b[17..19])?);
    let leap = (year % 4 == 0 && year % 100 != 0) || year % 400 == 0;
    let days_in_month = match month {
        1 | 3 | 5 | 7 | 8 | 10 | 12 => 31,
        4 | 6 | 9 | 11 => 30,
        2 if leap => 29,
        2 => 28,
        _ => return None,
    };
    if day < 1 || day > days_in_month || hour > 23 || minute > 59 || second > 60 {
        return None;
    }
    let mut i = 19;
    let mut frac_ns = 0i64;
    if i < b.len() && matches!(b[i], b'.' | b',') {
        let start = i + 1;
        i = start;
        while i < b.len() && b[i].is_ascii_digit() {
            i += 1;
        }
        if i == start {
            return None;
        }
        for k in 0..9 {
            let d = b
                .get(start + k)
                .filter(|_| start + k < i)
                .map_or(0, |d| d - b'0');
            frac_ns = frac_ns * 10 + i64::from(d);
        }
    }
    let offset_s = match &b[i..] {
        [] | [b'Z' | b'z'] => 0,
        [sign @ (b'+' | b'-'), rest @ ..] => {
            let (h, m) = match rest {
                [h1, h2] => (num(&[*h1, *h2])?, 0),
                [h1, h2, b':', m1, m2] | [h1, h2, m1, m2] => (num(&[*h1, *h2])?, num(&[*m1, *m2])?),
                _ => return None,
            };
            if h > 23 || m > 59 {
                return None;
            }
            let o = h * 3600 + m * 60;
            if *sign == b'-' { -o } else { o }
        }
        _ => return None,
    };
    // Days from 1970-01-01 in the proleptic Gregorian calendar (H. Hinnant's days_from_civil).
    let y = if month <= 2 { year - 1 } else { year };
    let era = y.div_euclid(400);
    let yoe = y - era * 400;
    let mp = (month + 9) % 12;
    let doy = (153 * mp + 2) / 5 + day - 1;
    let doe = yoe * 365 + yoe / 4 - yoe / 100 + doy;
    let days = era * 146_097 + doe - 719_468;
    let secs = days * 86_400 + hour * 3600 + minute * 60 + second - offset_s;
    secs.checked_mul(1_000_000_000)?.checked_add(frac_ns)
}

/// Milliseconds from `from_ns` to `to_ns`, never negative.
pub(crate) fn gap_ms(from_ns: i64, to_ns: i64) -> f64 {
    (to_ns.saturating_sub(from_ns)).max(0) as f64 / 1e6
}

/// The token count a turn adds beyond what its replayed context already holds: the recorded
/// prompt minus the context (previous prompt and answer, or the fork node's) minus the joined
/// answers. Counts a note when the recorded prompt is smaller (the turn then adds nothing).
pub(crate) fn new_input_tokens(ctx: &mut Ctx<'_>, recorded: u64, context: u64) -> u64 {
    if recorded < context {
        ctx.note(NoteKind::GraphInputShort, 1);
    }
    recorded.saturating_sub(context)
}

/// A subagent id the native format accepts (no `:` or `/`, not `main`, not empty), unique
/// among `taken` (a `.2`, `.3`, ... suffix otherwise); the result is added to `taken`.
pub(crate) fn agent_id(raw: &str, taken: &mut HashSet<String>) -> String {
    let mut base: String = raw
        .trim()
        .chars()
        .map(|c| if c == ':' || c == '/' { '_' } else { c })
        .collect();
    if base.is_empty() {
        base = "agent".to_string();
    }
    let mut id = base.clone();
    let mut k = 2;
    while taken.contains(&id) || id == crate::format::MAIN_AGENT {
        id = format!("{base}.{k}");
        k += 1;
    }
    taken.insert(id.clone());
    id
}
