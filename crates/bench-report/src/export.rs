//! Files a run writes outside its run directory: one summary line per run appended to a JSONL
//! file (`bench run --output`, for users coming from agentic-bench's `--output-file`), and the
//! per-turn records as CSV (`bench run --csv`).
//!
//! The summary line is flat (one level of keys, units in the names) so `jq`, pandas or a
//! spreadsheet read it without unnesting. agentic-bench nests its line (`config`, `metrics`,
//! `sessions`, ...); where one of our figures means the same as one of its keys the name is
//! kept (`model`, `steady_frac`, `prefix_cache_ratio`, `routing_stickiness`, `itl_p50_ms` …
//! `itl_max_ms`); elsewhere our names follow `result.json` (agentic-bench's
//! `max_concurrency` is `concurrency`, `output_throughput` is `output_throughput_tok_s`,
//! `completed_sessions` is `sessions_completed`, `tpot_ms` (a mean) is `tpot_mean_ms`).
//!
//! ```no_run
//! # fn main() -> Result<(), bench_report::export::ExportError> {
//! use std::path::{Path, PathBuf};
//! use bench_report::export::{LineContext, append_result_line, result_line, utc_now, write_turns_csv};
//! use bench_report::{RunInfo, compute};
//!
//! let utc = utc_now(); // when the run starts
//! # let (turns, sessions) = (Vec::new(), Vec::new());
//! // ... the run writes `turns` and `sessions` ...
//! let result = compute(&turns, &sessions, &RunInfo::default());
//! let ctx = LineContext {
//!     utc,
//!     run_dir: PathBuf::from("runs/x"),
//!     base_url: "http://127.0.0.1:8000".into(),
//!     model: "m".into(),
//!     concurrency: 8,
//!     rate: None,
//!     duration_s: None,
//!     elapsed_s: 61.2,
//!     stopped_by: bench_rundir::StopBy::Completed,
//!     tag: None,
//! };
//! append_result_line(Path::new("results.jsonl"), &result_line(&result, &ctx))?;
//! write_turns_csv(Path::new("turns.csv"), &turns)?;
//! # Ok(())
//! # }
//! ```

use std::fmt::Write as _;
use std::fs::OpenOptions;
use std::io::Write as _;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU64, Ordering};

use serde_json::{Value, json};

use crate::{CountSource, RunResult, TurnRecord, TurnStatus};

/// [`append_result_line`] or [`write_turns_csv`] could not write its file. Shown on one line as
/// `cannot write PATH: CAUSE` (the cause is also the error's `source`).
#[derive(Debug, thiserror::Error)]
#[error("cannot write {}: {source}", path.display())]
pub struct ExportError {
    /// The file that was being written.
    pub path: PathBuf,
    /// Why it could not be.
    #[source]
    pub source: std::io::Error,
}

impl ExportError {
    fn new(path: &Path, source: std::io::Error) -> Self {
        ExportError {
            path: path.to_owned(),
            source,
        }
    }
}

/// Version of the summary line built by [`result_line`]; bumped on any incompatible change
/// (a key renamed, removed or changing meaning). New keys do not bump it.
pub const LINE_SCHEMA_VERSION: u32 = 1;

/// What the summary line says about the run besides its [`RunResult`].
#[derive(Debug, Clone, PartialEq)]
pub struct LineContext {
    /// When the run started (RFC 3339 UTC, see [`utc_now`]).
    pub utc: String,
    /// The run directory.
    pub run_dir: PathBuf,
    /// The server benchmarked.
    pub base_url: String,
    /// Model name sent.
    pub model: String,
    /// Target concurrency `C`.
    pub concurrency: u32,
    /// Arrival rate of an open-loop run, sessions/s; `None` (JSON `null`) in closed loop.
    pub rate: Option<f64>,
    /// The `--duration` asked for, s; `None` when the pool was played once.
    pub duration_s: Option<f64>,
    /// Wall time the run took, s.
    pub elapsed_s: f64,
    /// Why the run stopped (`completed`, `duration`, `max_duration`, `signal`, ...).
    pub stopped_by: bench_rundir::StopBy,
    /// The run's label (`--tag`, agentic-bench's `config.tag`); `None` (JSON `null`) without one.
    pub tag: Option<String>,
}

/// Now, as RFC 3339 UTC (for [`LineContext::utc`]; take it when the run starts).
pub fn utc_now() -> String {
    time::OffsetDateTime::now_utc()
        .format(&time::format_description::well_known::Rfc3339)
        .unwrap_or_default()
}

/// The summary line of one run: the context, the whole-run counts and the headline figures.
///
/// Latency and throughput figures are the steady window's (`summary` in `result.json`);
/// `overall_*` are over every measured ok turn. "Not measured" is `null`.
pub fn result_line(result: &RunResult, ctx: &LineContext) -> Value {
    let s = &result.summary;
    let m = &s.steady;
    let o = &result.overall;
    let w = &result.steady_window;
    let osl = m.osl_fidelity.as_ref();
    // Several small objects merged: one `json!` of ~60 keys exceeds the macro recursion limit.
    let parts = [
        json!({
        "schema_version": LINE_SCHEMA_VERSION,
        "generated_by": result.generated_by,
        "utc": ctx.utc,
        "run_dir": ctx.run_dir.display().to_string(),
        "base_url": ctx.base_url,
        "model": ctx.model,
        "concurrency": ctx.concurrency,
        "rate": ctx.rate,
        "duration_s": ctx.duration_s,
        "elapsed_s": ctx.elapsed_s,
        "stopped_by": ctx.stopped_by,
        "tag": ctx.tag,
        "steady_frac": w.steady_frac,
        "steady_rule": w.rule,
        "slo_ttft_ms": result.slo.and_then(|x| x.ttft_ms),
        "slo_tpot_ms": result.slo.and_then(|x| x.tpot_ms),
        "slo_e2e_ms": result.slo.and_then(|x| x.e2e_ms),
        }),
        json!({
        "turns_ok": s.turns_ok,
        "turns_failed": s.turns_failed,
        "turns_total": w.turns_total,
        "steady_turns": w.turns,
        "steady_span_s": m.span_s,
        "sessions_completed": s.sessions_completed,
        "sessions_truncated": s.sessions_truncated,
        "sessions_context_guard": s.sessions_context_guard,
        "sessions_timeout": s.sessions_timeout,
        "sessions_failed": s.sessions_failed,
        }),
        json!({
        "ttft_p50_ms": m.ttft_ms.p50,
        "ttft_p90_ms": m.ttft_ms.p90,
        "ttft_p99_ms": m.ttft_ms.p99,
        "ttft_mean_ms": m.ttft_ms.mean,
        "ttft_first_turn_p50_ms": m.ttft_first_turn_ms.p50,
        "ttft_later_turns_p50_ms": m.ttft_later_turns_ms.p50,
        "ttft_later_over_first_p50": m.ttft_later_over_first_p50,
        "tpot_p50_ms": m.tpot_ms.p50,
        "tpot_p99_ms": m.tpot_ms.p99,
        "tpot_mean_ms": m.tpot_ms.mean,
        "itl_p50_ms": m.itl_ms.p50,
        "itl_p90_ms": m.itl_ms.p90,
        "itl_p95_ms": m.itl_ms.p95,
        "itl_p99_ms": m.itl_ms.p99,
        "itl_max_ms": m.itl_ms.max,
        "e2e_p50_ms": m.e2e_ms.p50,
        "e2e_p90_ms": m.e2e_ms.p90,
        "e2e_p99_ms": m.e2e_ms.p99,
        "ttft_from_due_p99_ms": m.ttft_from_due_ms.p99,
        "e2e_from_due_p99_ms": m.e2e_from_due_ms.p99,
        }),
        json!({
        "output_throughput_tok_s": m.output_throughput_tok_s,
        "input_throughput_tok_s": m.input_throughput_tok_s,
        "request_throughput_turns_s": m.request_throughput_turns_s,
        "peak_output_tok_s_1s": m.peak_output_tok_s_1s,
        "per_user_output_tok_s_p50": m.per_user_output_tok_s.p50,
        "per_user_output_tok_s_mean": m.per_user_output_tok_s.mean,
        "overall_output_throughput_tok_s": o.output_throughput_tok_s,
        "overall_request_throughput_turns_s": o.request_throughput_turns_s,
        "prefix_cache_ratio": m.prefix_cache_ratio,
        "prefix_cache_host_share": m.prefix_cache_host_share,
        "osl_fidelity_ratio": osl.and_then(|f| f.ratio),
        "osl_within_10pct": osl.map(|f| f.within_10pct),
        "routing_stickiness": m.routing_stickiness,
        "goodput_turns_s": m.goodput_turns_s,
        "slo_attainment": m.slo_attainment,
        "dispatch_lag_p99_ms": m.dispatch_lag_ms.p99,
        }),
    ];
    let mut line = serde_json::Map::new();
    for part in parts {
        if let Value::Object(o) = part {
            line.extend(o);
        }
    }
    Value::Object(line)
}

/// Appends `line` to `path` as one JSON line (the file is created if missing). The line and
/// its newline go out in a single `write_all` on a file opened for append, so runs appending
/// to the same file at once do not interleave their lines.
///
/// # Errors
///
/// [`ExportError`] when the line cannot be encoded or the file cannot be opened or written.
pub fn append_result_line(path: &Path, line: &Value) -> Result<(), ExportError> {
    let fail = |e| ExportError::new(path, e);
    let mut bytes = serde_json::to_vec(line).map_err(|e| fail(std::io::Error::from(e)))?;
    bytes.push(b'\n');
    let mut file = OpenOptions::new()
        .create(true)
        .append(true)
        .open(path)
        .map_err(fail)?;
    file.write_all(&bytes).map_err(fail)
}

/// Columns of [`write_turns_csv`], in order.
pub const TURNS_CSV_COLUMNS: [&str; 32] = [
    "session_id",
    "replay",
    "turn_index",
    "status",
    "error_kind",
    "ttft_ms",
    "e2e_ms",
    "tpot_ms",
    "input_tokens",
    "input_tokens_source",
    "output_tokens",
    "output_tokens_source",
    "cached_tokens",
    "max_output_tokens",
    "recorded_output_tokens",
    "active_at_dispatch",
    "due_s",
    "sent_s",
    "first_token_s",
    "end_s",
    "sent_utc",
    "end_utc",
    "worker",
    "redials",
    "ttfa_ms",
    "reasoning_chunks",
    "answer_chunks",
    "reasoning_tokens",
    "connect_ms",
    "tls_ms",
    "warmup",
    "error",
];

/// Tells temporary files of concurrent calls in one process apart.
static TMP_SEQ: AtomicU64 = AtomicU64::new(0);

/// Writes one CSV row per turn under a header ([`TURNS_CSV_COLUMNS`]). `None` is an empty
/// cell (so is a non-finite time); `status` and the count sources are the JSON words (`ok`,
/// `server`, ...); `warmup` is `true`/`false`. The file is written to a temporary file beside
/// `path` and renamed over it, so a failure never leaves half a file.
///
/// # Errors
///
/// [`ExportError`] when `path` has no file name or the file cannot be written or renamed into
/// place.
pub fn write_turns_csv(path: &Path, turns: &[TurnRecord]) -> Result<(), ExportError> {
    let fail = |e| ExportError::new(path, e);
    let name = path
        .file_name()
        .ok_or_else(|| {
            fail(std::io::Error::new(
                std::io::ErrorKind::InvalidInput,
                "not a file name",
            ))
        })?
        .to_string_lossy();
    let tmp = path.with_file_name(format!(
        ".{name}.{}-{}.tmp",
        std::process::id(),
        TMP_SEQ.fetch_add(1, Ordering::Relaxed)
    ));
    let written = write_csv_file(&tmp, turns).and_then(|()| std::fs::rename(&tmp, path));
    if let Err(e) = written {
        let _ = std::fs::remove_file(&tmp);
        return Err(fail(e));
    }
    Ok(())
}

/// The per-turn CSV ([`write_turns_csv`]'s content) in memory, e.g. for stdout.
pub fn turns_csv(turns: &[TurnRecord]) -> Vec<u8> {
    let mut w = csv::Writer::from_writer(Vec::new());
    let mut buf = String::new();
    // Writing to a Vec cannot fail.
    let _ = w.write_record(TURNS_CSV_COLUMNS);
    for t in turns {
        let _ = write_row(&mut w, &mut buf, t);
    }
    w.into_inner().unwrap_or_default()
}

/// Writes the CSV to a new file at `tmp` and syncs it.
fn write_csv_file(tmp: &Path, turns: &[TurnRecord]) -> std::io::Result<()> {
    let file = OpenOptions::new().write(true).create_new(true).open(tmp)?;
    let mut w = csv::Writer::from_writer(std::io::BufWriter::new(file));
    w.write_record(TURNS_CSV_COLUMNS)?;
    let mut buf = String::new();
    for t in turns {
        write_row(&mut w, &mut buf, t)?;
    }
    w.flush()?;
    let file = w
        .into_inner()
        .map_err(|e| std::io::Error::other(e.to_string()))?
        .into_inner()
        .map_err(|e| e.into_error())?;
    file.sync_all()
}

/// One row, field by field (numbers are formatted into `buf`, reused across fields).
fn write_row<W: std::io::Write>(
    w: &mut csv::Writer<W>,
    buf: &mut String,
    t: &TurnRecord,
) -> csv::Result<()> {
    let mut num = |w: &mut csv::Writer<W>, v: Option<&dyn std::fmt::Display>| {
        buf.clear();
        if let Some(v) = v {
            // Writing to a String cannot fail.
            let _ = write!(buf, "{v}");
        }
        w.write_field(buf.as_bytes())
    };
    // Times: an empty cell for a non-finite value.
    fn time(v: &f64) -> Option<&dyn std::fmt::Display> {
        v.is_finite().then_some(v as _)
    }
    fn opt_time(v: &Option<f64>) -> Option<&dyn std::fmt::Display> {
        v.as_ref().and_then(time)
    }
    fn opt_count(v: &Option<u64>) -> Option<&dyn std::fmt::Display> {
        v.as_ref().map(|v| v as _)
    }

    w.write_field(&t.session_id)?;
    num(w, Some(&t.replay))?;
    num(w, Some(&t.turn_index))?;
    w.write_field(status_word(t.status))?;
    w.write_field(t.error_kind.map_or("", |k| k.as_str()))?;
    num(w, opt_time(&t.ttft_ms))?;
    num(w, opt_time(&t.e2e_ms))?;
    num(w, opt_time(&t.tpot_ms))?;
    num(w, opt_count(&t.input_tokens))?;
    w.write_field(source_word(t.input_tokens_source))?;
    num(w, opt_count(&t.output_tokens))?;
    w.write_field(source_word(t.output_tokens_source))?;
    num(w, opt_count(&t.cached_tokens))?;
    num(w, Some(&t.max_output_tokens))?;
    num(w, opt_count(&t.recorded_output_tokens))?;
    num(w, Some(&t.active_at_dispatch))?;
    num(w, time(&t.due_s))?;
    num(w, time(&t.sent_s))?;
    num(w, opt_time(&t.first_token_s))?;
    num(w, time(&t.end_s))?;
    w.write_field(&t.sent_utc)?;
    w.write_field(&t.end_utc)?;
    w.write_field(t.worker.as_deref().unwrap_or(""))?;
    num(w, Some(&t.redials))?;
    num(w, opt_time(&t.ttfa_ms))?;
    num(w, t.reasoning_chunks.as_ref().map(|v| v as _))?;
    num(w, t.answer_chunks.as_ref().map(|v| v as _))?;
    num(w, opt_count(&t.reasoning_tokens))?;
    num(w, opt_time(&t.connect_ms))?;
    num(w, opt_time(&t.tls_ms))?;
    w.write_field(if t.warmup { "true" } else { "false" })?;
    w.write_field(t.error.as_deref().unwrap_or(""))?;
    w.write_record(std::iter::empty::<&[u8]>())
}

fn status_word(s: TurnStatus) -> &'static str {
    match s {
        TurnStatus::Ok => "ok",
        TurnStatus::Error => "error",
        TurnStatus::Timeout => "timeout",
    }
}

fn source_word(s: Option<CountSource>) -> &'static str {
    match s {
        Some(CountSource::Server) => "server",
        Some(CountSource::Client) => "client",
        None => "",
    }
}

#[cfg(test)]
#[allow(clippy::unwrap_used, clippy::expect_used)]
mod tests {
    use super::*;
    use crate::{RunInfo, SessionRecord, SessionStatus, compute};
    use bench_rundir::ErrorKind;

    /// A fresh directory under the system temp dir, removed on drop.
    fn temp_dir(name: &str) -> tempfile::TempDir {
        tempfile::Builder::new()
            .prefix(&format!("bench-report-export-{name}-"))
            .tempdir()
            .expect("temp dir")
    }

    fn turn(index: u32) -> TurnRecord {
        TurnRecord {
            replay: 2,
            ttft_ms: Some(120.5),
            e2e_ms: Some(900.25),
            tpot_ms: Some(12.0),
            chunk_gaps_ms: vec![10.0, 14.0],
            input_tokens: Some(2048),
            input_tokens_source: Some(CountSource::Server),
            output_tokens: Some(64),
            output_tokens_source: Some(CountSource::Client),
            cached_tokens: Some(1024),
            max_output_tokens: 64,
            recorded_output_tokens: Some(60),
            active_at_dispatch: 4,
            due_s: 1.0,
            sent_s: 1.001,
            first_token_s: Some(1.1215),
            end_s: 1.90125,
            sent_utc: "2025-01-02T03:04:05.123Z".into(),
            end_utc: "2025-01-02T03:04:06.023Z".into(),
            worker: Some("w0".into()),
            redials: 1,
            ttfa_ms: Some(250.5),
            reasoning_chunks: Some(8),
            answer_chunks: Some(56),
            reasoning_tokens: Some(8),
            connect_ms: Some(0.25),
            tls_ms: Some(3.5),
            ..TurnRecord::example("s-1", index)
        }
    }

    fn failed(index: u32) -> TurnRecord {
        TurnRecord {
            status: TurnStatus::Error,
            error_kind: Some(ErrorKind::Status),
            error: Some("HTTP 500: \"boom\", then\nmore, text".into()),
            ttft_ms: None,
            e2e_ms: Some(5.0),
            tpot_ms: None,
            chunk_gaps_ms: Vec::new(),
            input_tokens: None,
            input_tokens_source: None,
            output_tokens: None,
            output_tokens_source: None,
            cached_tokens: None,
            recorded_output_tokens: None,
            first_token_s: None,
            worker: None,
            redials: 0,
            warmup: true,
            ttfa_ms: None,
            reasoning_chunks: None,
            answer_chunks: None,
            reasoning_tokens: None,
            connect_ms: None,
            tls_ms: None,
            est_input_tokens: None,
            prefix_shared_tokens: None,
            ..turn(index)
        }
    }

    fn ctx() -> LineContext {
        LineContext {
            utc: "2025-01-02T03:04:00Z".into(),
            run_dir: PathBuf::from("runs/x"),
            base_url: "http://127.0.0.1:8000".into(),
            model: "m".into(),
            concurrency: 4,
            rate: None,
            duration_s: Some(90.0),
            elapsed_s: 91.5,
            stopped_by: bench_rundir::StopBy::Duration,
            tag: Some("baseline".into()),
        }
    }

    fn result() -> RunResult {
        let turns = vec![turn(0), turn(1), failed(2)];
        let sessions = vec![SessionRecord {
            session_id: "s-1".into(),
            replay: 2,
            status: SessionStatus::Completed,
            turns_played: 3,
            turns_planned: 3,
            output_tokens: 128,
            busy_s: 1.8,
            marker: None,
            warmup: false,
            start_s: 0.0,
            end_s: 2.0,
            superseded: false,
        }];
        let info = RunInfo {
            concurrency: 4,
            duration_s: 91.5,
            ..RunInfo::default()
        };
        compute(&turns, &sessions, &info)
    }

    #[test]
    fn result_line_is_flat_and_complete() {
        let r = result();
        let v = result_line(&r, &ctx());
        let o = v.as_object().expect("an object");
        assert!(
            o.values().all(|x| !x.is_object() && !x.is_array()),
            "not flat: {v}"
        );
        assert_eq!(v["schema_version"], LINE_SCHEMA_VERSION);
        assert_eq!(v["rate"], Value::Null);
        assert_eq!(v["concurrency"], 4);
        assert_eq!(v["model"], "m");
        assert_eq!(v["stopped_by"], "duration");
        assert_eq!(v["tag"], "baseline");
        assert_eq!(v["run_dir"], "runs/x");
        assert_eq!(v["duration_s"], 90.0);
        assert_eq!(v["turns_ok"], r.summary.turns_ok);
        assert_eq!(v["turns_failed"], r.summary.turns_failed);
        assert_eq!(v["sessions_completed"], 1);
        assert_eq!(v["ttft_p50_ms"], json!(r.summary.steady.ttft_ms.p50));
        assert_eq!(v["itl_p99_ms"], json!(r.summary.steady.itl_ms.p99));
        assert_eq!(
            v["output_throughput_tok_s"],
            json!(r.summary.steady.output_throughput_tok_s)
        );
        assert_eq!(v["prefix_cache_ratio"], json!(0.5));
        // No SLO: goodput is not measured.
        assert_eq!(v["goodput_turns_s"], Value::Null);
        assert_eq!(v["slo_ttft_ms"], Value::Null);
    }

    #[test]
    fn append_twice_gives_two_lines() {
        let d = temp_dir("append");
        let path = d.path().join("results.jsonl");
        let v = result_line(&result(), &ctx());
        append_result_line(&path, &v).expect("first");
        let mut c2 = ctx();
        c2.concurrency = 8;
        c2.stopped_by = bench_rundir::StopBy::Completed;
        append_result_line(&path, &result_line(&result(), &c2)).expect("second");
        let text = std::fs::read_to_string(&path).expect("read");
        assert!(text.ends_with('\n'));
        let lines: Vec<Value> = text
            .lines()
            .map(|l| serde_json::from_str(l).expect("a JSON line"))
            .collect();
        assert_eq!(lines.len(), 2);
        // The same keys (serde_json's default float parsing may differ from the written
        // shortest representation in the last digit, so values are compared selectively).
        let keys = |x: &Value| x.as_object().map(|o| o.keys().cloned().collect::<Vec<_>>());
        assert_eq!(keys(&lines[0]), keys(&v));
        assert_eq!(lines[0]["concurrency"], 4);
        assert_eq!(lines[0]["turns_ok"], 2);
        assert_eq!(lines[0]["utc"], "2025-01-02T03:04:00Z");
        assert_eq!(lines[1]["concurrency"], 8);
        assert_eq!(lines[1]["stopped_by"], "completed");
    }

    #[test]
    fn append_error_names_the_file() {
        let d = temp_dir("append-err");
        let path = d.path().join("missing-dir").join("results.jsonl");
        let e = append_result_line(&path, &json!({})).expect_err("no such dir");
        assert_eq!(e.path, path);
        assert_eq!(e.source.kind(), std::io::ErrorKind::NotFound);
        let shown = e.to_string();
        assert!(
            shown.starts_with(&format!("cannot write {}: ", path.display())),
            "{shown}"
        );
        assert!(!shown.contains('\n'), "{shown}");
    }

    #[test]
    fn csv_round_trip() {
        let d = temp_dir("csv");
        let path = d.path().join("turns.csv");
        // An existing file is replaced whole.
        std::fs::write(&path, "old,content\n1,2\n3,4\n5,6\n").expect("seed");
        let turns = vec![turn(0), failed(1)];
        write_turns_csv(&path, &turns).expect("write");

        let mut r = csv::Reader::from_path(&path).expect("open");
        let header: Vec<String> = r
            .headers()
            .expect("header")
            .iter()
            .map(str::to_owned)
            .collect();
        assert_eq!(header, TURNS_CSV_COLUMNS);
        let rows: Vec<csv::StringRecord> = r.records().map(|x| x.expect("row")).collect();
        assert_eq!(rows.len(), 2);
        let col = |row: &csv::StringRecord, name: &str| {
            let i = TURNS_CSV_COLUMNS
                .iter()
                .position(|c| *c == name)
                .expect("a column");
            row.get(i).expect("a cell").to_owned()
        };

        let ok = &rows[0];
        assert_eq!(ok.len(), TURNS_CSV_COLUMNS.len());
        assert_eq!(col(ok, "session_id"), "s-1");
        assert_eq!(col(ok, "replay"), "2");
        assert_eq!(col(ok, "turn_index"), "0");
        assert_eq!(col(ok, "status"), "ok");
        assert_eq!(col(ok, "error_kind"), "");
        assert_eq!(col(ok, "ttft_ms"), "120.5");
        assert_eq!(col(ok, "e2e_ms"), "900.25");
        assert_eq!(col(ok, "input_tokens_source"), "server");
        assert_eq!(col(ok, "output_tokens_source"), "client");
        assert_eq!(col(ok, "first_token_s"), "1.1215");
        assert_eq!(col(ok, "end_s"), "1.90125");
        assert_eq!(col(ok, "sent_utc"), "2025-01-02T03:04:05.123Z");
        assert_eq!(col(ok, "worker"), "w0");
        assert_eq!(col(ok, "redials"), "1");
        assert_eq!(col(ok, "ttfa_ms"), "250.5");
        assert_eq!(col(ok, "reasoning_chunks"), "8");
        assert_eq!(col(ok, "answer_chunks"), "56");
        assert_eq!(col(ok, "reasoning_tokens"), "8");
        assert_eq!(col(ok, "connect_ms"), "0.25");
        assert_eq!(col(ok, "tls_ms"), "3.5");
        assert_eq!(col(ok, "warmup"), "false");
        assert_eq!(col(ok, "error"), "");
        let parsed: f64 = col(ok, "sent_s").parse().expect("a number");
        assert_eq!(parsed, 1.001);

        let bad = &rows[1];
        assert_eq!(col(bad, "status"), "error");
        assert_eq!(col(bad, "error_kind"), "http_status");
        assert_eq!(col(bad, "error"), "HTTP 500: \"boom\", then\nmore, text");
        for empty in [
            "ttft_ms",
            "tpot_ms",
            "input_tokens",
            "input_tokens_source",
            "output_tokens",
            "output_tokens_source",
            "cached_tokens",
            "recorded_output_tokens",
            "first_token_s",
            "worker",
            "ttfa_ms",
            "reasoning_tokens",
            "tls_ms",
        ] {
            assert_eq!(col(bad, empty), "", "{empty}");
        }
        assert_eq!(col(bad, "warmup"), "true");

        // Nothing left beside it.
        let names: Vec<String> = std::fs::read_dir(d.path())
            .expect("list")
            .map(|e| e.expect("entry").file_name().to_string_lossy().into_owned())
            .collect();
        assert_eq!(names, ["turns.csv"]);
    }

    #[test]
    fn csv_failure_leaves_nothing() {
        let d = temp_dir("csv-err");
        let path = d.path().join("missing-dir").join("turns.csv");
        let e = write_turns_csv(&path, &[turn(0)]).expect_err("no such dir");
        assert!(e.to_string().starts_with("cannot write "), "{e}");
        // The target is a directory: the rename fails and the temporary file is removed.
        let target = d.path().join("a-dir");
        std::fs::create_dir(&target).expect("dir");
        std::fs::write(target.join("keep"), "x").expect("file");
        assert!(write_turns_csv(&target, &[turn(0)]).is_err());
        let names: Vec<String> = std::fs::read_dir(d.path())
            .expect("list")
            .map(|e| e.expect("entry").file_name().to_string_lossy().into_owned())
            .collect();
        assert_eq!(names, ["a-dir"]);
    }
}
