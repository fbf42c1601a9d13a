//! A run directory read back for a report ([`load`]): its records, its server telemetry and its
//! result — read from `result.json`, or recomputed from the records when that file is missing,
//! unreadable or older than them.

use std::path::{Path, PathBuf};

use bench_report::{ReportData, RunInfo, RunResult, ServerPoint};
use bench_rundir::{RunJsonHead, RunKind, SessionRecord, TurnRecord, files, jsonl};
use bench_telemetry::Scrape;

use crate::run_json::ReplayRunJson;
use crate::spec::Load;

/// Why a run directory cannot be reported. One line, naming the path.
#[derive(Debug, thiserror::Error)]
#[error("{path}: {what}")]
pub struct LoadError {
    /// The file or directory at fault.
    pub path: PathBuf,
    /// What is wrong with it.
    pub what: String,
}

fn err(path: &Path, what: impl std::fmt::Display) -> LoadError {
    LoadError {
        path: path.to_path_buf(),
        what: what.to_string(),
    }
}

/// The run directory a path names: the directory itself, or the one holding a `result.json`
/// (or any other file of it) given instead.
pub fn run_dir_of(path: &Path) -> PathBuf {
    if path.is_file() {
        path.parent()
            .filter(|p| !p.as_os_str().is_empty())
            .map_or_else(|| PathBuf::from("."), Path::to_path_buf)
    } else {
        path.to_path_buf()
    }
}

/// Reads a replay run directory (or its `result.json`) for a report.
///
/// `result.json` is used as written unless it is missing, does not parse, or disagrees with
/// the records (their measured turn count differs from its `turns_ok + turns_failed`, as after
/// a resume that crashed before writing it); then the result is recomputed with the run's own
/// judging settings from `run.json`, and [`ReportData::recomputed`] says why. A recomputed
/// result keeps the client CPU figure of the stale one only when the turn counts agree (never,
/// in practice): it cannot be measured afterwards, so the client-saturation check then says it
/// was not measured.
///
/// # Errors
///
/// [`LoadError`] when the path is not a run directory, is a journeys run (its report is
/// `report.json`: `bench journeys` renders it), a file of it cannot be read, or a whole line of
/// `turns.jsonl` or `sessions.jsonl` is not a record (a torn last line, cut by a crash, is set
/// aside instead and said in [`ReportData::notes`], as is an unreadable scrape).
pub fn load(path: &Path) -> Result<ReportData, LoadError> {
    let dir = run_dir_of(path);
    if !dir.is_dir() {
        return Err(err(&dir, "no such run directory"));
    }
    let run_json_path = dir.join(files::RUN_JSON);
    let run_json: serde_json::Value = match std::fs::read(&run_json_path) {
        Ok(b) => serde_json::from_slice(&b).map_err(|e| err(&run_json_path, e))?,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => {
            return Err(err(&dir, "not a run directory (no run.json)"));
        }
        Err(e) => return Err(err(&run_json_path, e)),
    };
    if !run_json.is_object() {
        return Err(err(
            &run_json_path,
            "not a run's run.json (a JSON object with the run's spec)",
        ));
    }
    let head: RunJsonHead =
        serde_json::from_value(run_json.clone()).map_err(|e| err(&run_json_path, e))?;
    if head.kind == RunKind::Journeys {
        return Err(err(
            &dir,
            "a journeys run: its report is report.json (bench journeys prints and compares it)",
        ));
    }
    let doc = serde_json::from_value::<ReplayRunJson>(run_json.clone());
    let mut notes = Vec::new();
    let turns_path = dir.join(files::TURNS);
    let turns = read_jsonl::<TurnRecord>(&turns_path, Strict::Yes, &mut notes)?;
    let sessions =
        read_jsonl::<SessionRecord>(&dir.join(files::SESSIONS), Strict::Yes, &mut notes)?;
    let scrapes = read_jsonl::<Scrape>(&dir.join(files::SCRAPES), Strict::No, &mut notes)?;

    let result_path = dir.join(files::RESULT);
    let written: Result<RunResult, String> = match std::fs::read(&result_path) {
        Ok(b) => {
            serde_json::from_slice(&b).map_err(|e| format!("result.json does not parse ({e})"))
        }
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => Err("no result.json".to_string()),
        Err(e) => Err(format!("result.json cannot be read ({e})")),
    };
    let measured = turns.iter().filter(|t| !t.warmup && !t.superseded).count() as u64;
    let (result, recomputed) = match written {
        Ok(r) if r.summary.turns_ok + r.summary.turns_failed == measured => (r, None),
        Ok(r) => {
            let why = format!(
                "result.json counts {} measured turns but turns.jsonl holds {measured}",
                r.summary.turns_ok + r.summary.turns_failed
            );
            // The client's CPU is not in the records: the stale result's stands.
            let client = r.client;
            (
                recompute(
                    doc.as_ref().ok(),
                    run_json.clone(),
                    &turns,
                    &sessions,
                    &scrapes,
                    client,
                ),
                Some(why),
            )
        }
        Err(why) => (
            recompute(
                doc.as_ref().ok(),
                run_json.clone(),
                &turns,
                &sessions,
                &scrapes,
                None,
            ),
            Some(why),
        ),
    };
    if recomputed.is_some() {
        if let Err(e) = &doc {
            let by = run_json
                .get("tool_version")
                .and_then(|v| v.as_str())
                .map_or_else(String::new, |v| format!(" (written by bench {v})"));
            notes.push(format!(
                "{}: not a run.json this bench reads{by}: {e}; the result was recomputed \
                 with the default judging settings",
                run_json_path.display()
            ));
        }
    }
    let title = std::fs::canonicalize(&dir)
        .ok()
        .and_then(|d| d.file_name().map(|n| n.to_string_lossy().into_owned()))
        .unwrap_or_else(|| dir.display().to_string());
    Ok(ReportData {
        title,
        result,
        turns,
        sessions,
        server: server_points(&scrapes),
        config: redact(run_json),
        recomputed,
        notes,
    })
}

/// Whether a whole line that is not a record stops the load ([`Strict::Yes`]: records) or is
/// left out with a note ([`Strict::No`]: telemetry).
#[derive(Clone, Copy, PartialEq, Eq)]
pub(crate) enum Strict {
    Yes,
    No,
}

pub(crate) fn read_jsonl<T: serde::de::DeserializeOwned>(
    path: &Path,
    strict: Strict,
    notes: &mut Vec<String>,
) -> Result<Vec<T>, LoadError> {
    if !path.exists() {
        return Ok(Vec::new());
    }
    // The error names the file itself.
    let lines = jsonl::read::<T>(path).map_err(|e| LoadError {
        path: e.path,
        what: e.source.to_string(),
    })?;
    if let Some(t) = lines.torn {
        notes.push(format!(
            "{}:{}: torn last line set aside ({} bytes, cut by a crash)",
            path.display(),
            t.line,
            t.bytes
        ));
    }
    if let Some(bad) = lines.bad.first() {
        let what = format!("not a record bench can read ({})", bad.error);
        if strict == Strict::Yes {
            return Err(LoadError {
                path: PathBuf::from(format!("{}:{}", path.display(), bad.line)),
                what,
            });
        }
        notes.push(format!(
            "{}:{}: {what}; {} such line(s) left out",
            path.display(),
            bad.line,
            lines.bad.len()
        ));
    }
    Ok(lines.records)
}

/// The result as `bench run` would have written it, from the records and the run's `run.json`
/// (`None`: one this bench does not read, judged by the defaults; `config`: the file as
/// written, echoed as `result.json`'s `config`; `client`: the client's CPU, when known; a
/// merged run's `shards` check is added): one [`bench_report::compute`], validity assessed
/// once.
pub fn recompute(
    run: Option<&ReplayRunJson>,
    config: serde_json::Value,
    turns: &[TurnRecord],
    sessions: &[SessionRecord],
    scrapes: &[Scrape],
    client: Option<bench_report::ClientCpu>,
) -> RunResult {
    let judge = run.map(|r| r.spec.judge.clone()).unwrap_or_default();
    let (concurrency, open_loop) = run.map_or((1, false), |r| {
        (r.concurrency(), matches!(r.spec.load, Load::Open { .. }))
    });
    let kept: Vec<TurnRecord> = turns.iter().filter(|t| !t.superseded).cloned().collect();
    let kept_sessions: Vec<SessionRecord> =
        sessions.iter().filter(|s| !s.superseded).cloned().collect();
    let measured = kept.iter().filter(|t| !t.warmup);
    let first = measured.clone().map(|t| t.sent_s).reduce(f64::min);
    let last = measured.map(|t| t.end_s).reduce(f64::max);
    let info = RunInfo {
        concurrency,
        judge,
        duration_s: match (first, last) {
            (Some(a), Some(b)) if b > a => b - a,
            _ => 0.0,
        },
        config,
        open_loop,
        client,
        checks: run
            .and_then(|r| r.merged.as_ref())
            .map(shards_check)
            .into_iter()
            .collect(),
        ..RunInfo::default()
    }
    .with_scrapes(scrapes);
    bench_report::compute(&kept, &kept_sessions, &info)
}

/// Whether a merged run holds every shard, each run to its end.
fn shards_check(m: &bench_rundir::Merged) -> bench_report::Check {
    use bench_report::{Check, CheckStatus};
    let unfinished: Vec<String> = m
        .shards
        .iter()
        .filter(|s| !s.finished)
        .map(|s| s.index.to_string())
        .collect();
    let bad = m.missing.len() + unfinished.len();
    let mut what = vec![format!("{} of {} shards merged", m.shards.len(), m.count)];
    if !m.missing.is_empty() {
        what.push(format!(
            "missing {}",
            m.missing
                .iter()
                .map(u32::to_string)
                .collect::<Vec<_>>()
                .join(", ")
        ));
    }
    if !unfinished.is_empty() {
        what.push(format!("unfinished {}", unfinished.join(", ")));
    }
    Check {
        name: "shards".into(),
        status: if bad == 0 {
            CheckStatus::Pass
        } else {
            CheckStatus::Fail
        },
        value: Some(bad as f64),
        threshold: "shards missing or unfinished: fail ≥ 1".into(),
        explanation: if bad == 0 {
            format!("{}, each run to its end", what.join("; "))
        } else {
            format!(
                "{}: a partial merge (--partial) covers only part of the plan's sessions",
                what.join("; ")
            )
        },
    }
}

/// The scrapes as the report plots them, one point per scrape time: the server's own figures
/// with a per-interval prefix-cache hit rate from the counters' deltas (else the server's own
/// gauge), and the GPU power of the `--scrape` targets taken at the same time (else the
/// server's, when its `/metrics` reports DCGM power).
pub fn server_points(scrapes: &[Scrape]) -> Vec<ServerPoint> {
    let targets_have_power = scrapes
        .iter()
        .any(|s| s.target.is_some() && s.snapshot.gpu_power_w.is_some());
    let mut prev: Option<(f64, f64)> = None;
    let mut out: Vec<ServerPoint> = Vec::new();
    // Every source is scraped at one tick and recorded with that tick's time, one after another.
    for group in scrapes.chunk_by(|a, b| a.t_s == b.t_s) {
        let own = group.iter().find(|s| s.target.is_none());
        let power: Vec<f64> = group
            .iter()
            .filter(|s| s.target.is_some() == targets_have_power)
            .filter_map(|s| s.snapshot.gpu_power_w)
            .collect();
        let mut point = ServerPoint {
            t_s: group[0].t_s,
            measured: group[0].phase.is_measured(),
            gpu_power_w: (!power.is_empty()).then(|| power.iter().sum()),
            ..ServerPoint::default()
        };
        if let Some(s) = own {
            let snap = &s.snapshot;
            let counters = snap.prefix_cache_queries.zip(snap.prefix_cache_hits);
            point.prefix_hit_rate = match (prev, counters) {
                (Some((q0, h0)), Some((q1, h1))) if q1 > q0 && h1 >= h0 => {
                    Some(((h1 - h0) / (q1 - q0)).clamp(0.0, 1.0))
                }
                (_, Some(_)) => None,
                (_, None) => snap.cache_hit_rate,
            };
            if counters.is_some() {
                prev = counters;
            }
            point.kv_usage = snap.kv_usage;
            point.waiting = snap.waiting;
            point.running = snap.running;
        }
        out.push(point);
    }
    out
}

/// The one rule for secret names (JSON keys here, request headers everywhere else) and the
/// redaction of a configuration for reports: see [`bench_rundir::secrets`].
pub use bench_rundir::secrets::{is_secret_name, redact};
