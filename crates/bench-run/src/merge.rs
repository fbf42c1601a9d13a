//! `bench merge`: the run directories of a sharded run (`--shard I/N`) put back together as
//! one run directory that `bench status`, `bench report` and `bench compare` read like any
//! other.
//!
//! The merge is exact: the records are concatenated on one timeline and every run-level
//! figure is computed once from their union, by the same code as a single run's
//! ([`crate::report::recompute`]); no figure is averaged over shards. On that timeline:
//!
//! - each shard's times (`due_s`, `sent_s`, `first_token_s`, `end_s`, failed attempts' `end_s`,
//!   sessions' `start_s`/`end_s`) are shifted by how long after the earliest shard its measured
//!   run started, from its records' own clock (`sent_utc` − `sent_s`): the hosts' clocks are
//!   trusted to agree (NTP); each shard's offset against the server's `Date` header is kept in
//!   `run.json` to audit that;
//! - a turn's `active_at_dispatch` becomes the sessions active across all shards when it was
//!   sent: its own shard's count as recorded, plus the other shards' sessions whose plays
//!   (their session records) spanned that instant; the run's concurrency is the shards' sum;
//! - the server's scrapes are the lowest-index shard's (every shard scraped the same server).
//!
//! Refused, naming the problem: a directory that is not a finished shard of a replay run,
//! shards of different plans or configurations (their digests differ), shard counts that
//! differ, a shard index given twice, missing shards and unfinished ones (both allowed with
//! `partial`, which the result's validity then fails as the `shards` check).

use std::io::Write;
use std::path::{Path, PathBuf};

use bench_rundir::{
    EventLine, LifecycleEvent, Merged, MergedShard, Opened, RunJsonHead, RunKind, SessionRecord,
    StopBy, TurnRecord, files,
};
use bench_telemetry::Scrape;

use crate::RunError;
use crate::report::{Strict, read_jsonl};
use crate::run_json::{JourneysRunJson, ReplayRunJson};

/// What [`merge`] made.
#[derive(Debug)]
pub struct MergeOutcome {
    /// The merged run directory.
    pub dir: PathBuf,
    /// How it was made (also in its `run.json`).
    pub merged: Merged,
    /// Its `result.json` (a replay run).
    pub result: Option<bench_report::RunResult>,
    /// Its `report.json` (a journeys run).
    pub journeys: Option<bench_journeys::Report>,
    /// Records set aside while reading the shards (torn last lines), one line each.
    pub notes: Vec<String>,
}

/// One shard's run directory, read.
struct ShardDir {
    dir: PathBuf,
    run_json: ReplayRunJson,
    head: RunJsonHead,
    index: u32,
    count: u32,
    finished: bool,
    stopped: Option<(StopBy, String)>,
    host: Option<String>,
    opened: Option<Opened>,
    turns: Vec<TurnRecord>,
    sessions: Vec<SessionRecord>,
    scrapes: Vec<Scrape>,
    client: Option<bench_report::ClientCpu>,
    /// Its measured run's start on the UTC clock, s since the epoch.
    start_unix_s: Option<f64>,
}

fn invalid(what: impl std::fmt::Display) -> RunError {
    RunError::Invalid(what.to_string())
}

/// Merges the shard run directories `dirs` into a new run directory `out` (which must not
/// exist, or be empty). `partial`: merge what is there even when shards are missing or did not
/// finish, and say so in the result.
///
/// # Errors
///
/// [`RunError::Invalid`] naming the directory and the problem (see the module docs);
/// [`RunError::Failed`] when `out` cannot be written.
pub fn merge(dirs: &[PathBuf], out: &Path, partial: bool) -> Result<MergeOutcome, RunError> {
    if dirs.is_empty() {
        return Err(invalid("bench merge: no shard directory given"));
    }
    if out.exists()
        && std::fs::read_dir(out)
            .map(|mut d| d.next().is_some())
            .unwrap_or(true)
    {
        return Err(invalid(format!(
            "{}: already exists and is not empty (bench merge writes a new run directory)",
            out.display()
        )));
    }
    let mut notes = Vec::new();
    if head_of(&dirs[0]).is_some_and(|h| h.kind == RunKind::Journeys) {
        return merge_journeys(dirs, out, partial);
    }
    let mut shards = Vec::with_capacity(dirs.len());
    for d in dirs {
        shards.push(read_shard(d, &mut notes)?);
    }
    shards.sort_by_key(|s| s.index);
    let members: Vec<Member<'_>> = shards
        .iter()
        .map(|s| Member {
            dir: &s.dir,
            head: &s.head,
            index: s.index,
            count: s.count,
            finished: s.finished,
        })
        .collect();
    let (count, missing) = check_set(&members, partial)?;

    // One timeline: the earliest shard's start is 0.
    let origin = shards
        .iter()
        .filter_map(|s| s.start_unix_s)
        .reduce(f64::min)
        .unwrap_or(0.0);
    let shifts: Vec<f64> = shards
        .iter()
        .map(|s| s.start_unix_s.map_or(0.0, |t| t - origin))
        .collect();
    // Every shard's session plays on the merged timeline, for the concurrency across shards.
    let spans: Vec<Spans> = shards
        .iter()
        .zip(&shifts)
        .map(|(s, sh)| Spans::of(&s.sessions, *sh))
        .collect();
    let mut turns = Vec::new();
    let mut sessions = Vec::new();
    for (k, (s, sh)) in shards.iter().zip(&shifts).enumerate() {
        for t in &s.turns {
            let mut t = t.clone();
            shift_turn(&mut t, *sh);
            let others: u64 = spans
                .iter()
                .enumerate()
                .filter(|(j, _)| *j != k)
                .map(|(_, sp)| sp.active_at(t.sent_s))
                .sum();
            t.active_at_dispatch = t
                .active_at_dispatch
                .saturating_add(u32::try_from(others).unwrap_or(u32::MAX));
            turns.push(t);
        }
        for x in &s.sessions {
            let mut x = x.clone();
            x.start_s += sh;
            x.end_s += sh;
            sessions.push(x);
        }
    }
    turns.sort_by(|a, b| a.end_s.total_cmp(&b.end_s));
    sessions.sort_by(|a, b| a.start_s.total_cmp(&b.start_s));
    let scrapes: Vec<Scrape> = shards
        .first()
        .map(|s| {
            s.scrapes
                .iter()
                .cloned()
                .map(|mut x| {
                    x.t_s += shifts[0];
                    x
                })
                .collect()
        })
        .unwrap_or_default();

    let merged = Merged {
        count,
        partial: !missing.is_empty() || shards.iter().any(|s| !s.finished),
        missing: missing.clone(),
        shards: shards
            .iter()
            .zip(&shifts)
            .map(|(s, sh)| MergedShard {
                index: s.index,
                dir: s.dir.display().to_string(),
                host: s.host.clone(),
                start_utc: s.start_unix_s.map(utc_of),
                shift_s: *sh,
                clock: s.head.clock,
                concurrency: s.run_json.concurrency(),
                finished: s.finished,
                turns: s.turns.len() as u64,
                sessions: s.sessions.len() as u64,
            })
            .collect(),
    };
    let run_json = shards[0].run_json.merged(merged.clone());

    std::fs::create_dir_all(out)
        .map_err(|e| RunError::Failed(format!("cannot create {}: {e}", out.display())))?;
    write_pretty(&out.join(files::RUN_JSON), &run_json)?;
    write_lines(&out.join(files::TURNS), &turns)?;
    write_lines(&out.join(files::SESSIONS), &sessions)?;
    if !scrapes.is_empty() {
        write_lines(&out.join(files::SCRAPES), &scrapes)?;
    }
    write_lines(&out.join(files::EVENTS), &merged_events(&shards, &merged))?;

    // Client saturation is a per-process figure: the busiest shard's stands for the run.
    let client = shards
        .iter()
        .filter_map(|s| s.client)
        .max_by(|a, b| a.cores.unwrap_or(0.0).total_cmp(&b.cores.unwrap_or(0.0)));
    let config = serde_json::to_value(&run_json).unwrap_or_default();
    let result =
        crate::report::recompute(Some(&run_json), config, &turns, &sessions, &scrapes, client);
    write_pretty(&out.join(files::RESULT), &result)?;
    Ok(MergeOutcome {
        dir: out.to_path_buf(),
        merged,
        result: Some(result),
        journeys: None,
        notes,
    })
}

/// One shard's identity, for the checks every merge makes.
struct Member<'a> {
    dir: &'a Path,
    head: &'a RunJsonHead,
    index: u32,
    count: u32,
    finished: bool,
}

/// Checks `members` (sorted by index) are the shards of one run: one plan, one configuration,
/// one count, no index twice, none missing and all finished (the last two allowed with
/// `partial`). Returns the count and the missing indices.
fn check_set(members: &[Member<'_>], partial: bool) -> Result<(u32, Vec<u32>), RunError> {
    let first = &members[0];
    for s in &members[1..] {
        let same = |a: &Option<String>, b: &Option<String>| a.is_some() && a == b;
        if !same(&s.head.plan_digest, &first.head.plan_digest) {
            return Err(invalid(format!(
                "{}: a different plan from {} (plan digests {} and {}): the shards of one run \
                 are planned from the same flags and --seed",
                s.dir.display(),
                first.dir.display(),
                s.head.plan_digest.as_deref().unwrap_or("-"),
                first.head.plan_digest.as_deref().unwrap_or("-"),
            )));
        }
        if !same(&s.head.config_digest, &first.head.config_digest) {
            return Err(invalid(format!(
                "{}: a different configuration from {} (config digests {} and {}): the shards \
                 of one run are started with the same flags",
                s.dir.display(),
                first.dir.display(),
                s.head.config_digest.as_deref().unwrap_or("-"),
                first.head.config_digest.as_deref().unwrap_or("-"),
            )));
        }
        if s.count != first.count {
            return Err(invalid(format!(
                "{}: shard {}/{} but {} is shard {}/{}: the shards of one run have one count",
                s.dir.display(),
                s.index,
                s.count,
                first.dir.display(),
                first.index,
                first.count
            )));
        }
    }
    let count = first.count;
    for w in members.windows(2) {
        if w[0].index == w[1].index {
            return Err(invalid(format!(
                "shard {} of {count} given twice: {} and {}",
                w[0].index,
                w[0].dir.display(),
                w[1].dir.display()
            )));
        }
    }
    let missing: Vec<u32> = (0..count)
        .filter(|i| !members.iter().any(|s| s.index == *i))
        .collect();
    if !missing.is_empty() && !partial {
        return Err(invalid(format!(
            "missing shard{} {} of {count}: give every shard's run directory (or --partial to \
             merge what is there, marked as partial)",
            if missing.len() == 1 { "" } else { "s" },
            join(&missing)
        )));
    }
    if !partial {
        if let Some(s) = members.iter().find(|s| !s.finished) {
            return Err(invalid(format!(
                "{}: shard {} of {count} did not finish (no run.stopped in events.jsonl, or no \
                 result): finish it with `bench run --resume {}`, or merge without its missing \
                 part with --partial",
                s.dir.display(),
                s.index,
                s.dir.display()
            )));
        }
    }
    Ok((count, missing))
}

/// The session plays of one shard as sorted starts and ends, for "how many were active at t".
struct Spans {
    starts: Vec<f64>,
    ends: Vec<f64>,
}

impl Spans {
    fn of(sessions: &[SessionRecord], shift: f64) -> Spans {
        let mut starts: Vec<f64> = sessions
            .iter()
            .filter(|s| !s.superseded)
            .map(|s| s.start_s + shift)
            .collect();
        let mut ends: Vec<f64> = sessions
            .iter()
            .filter(|s| !s.superseded)
            .map(|s| s.end_s + shift)
            .collect();
        starts.sort_by(f64::total_cmp);
        ends.sort_by(f64::total_cmp);
        Spans { starts, ends }
    }

    /// Plays with `start ≤ t < end`.
    fn active_at(&self, t: f64) -> u64 {
        let started = self.starts.partition_point(|s| *s <= t);
        let ended = self.ends.partition_point(|e| *e <= t);
        started.saturating_sub(ended) as u64
    }
}

fn shift_turn(t: &mut TurnRecord, sh: f64) {
    t.due_s += sh;
    t.sent_s += sh;
    t.end_s += sh;
    if let Some(f) = &mut t.first_token_s {
        *f += sh;
    }
    for a in &mut t.failed_attempts {
        a.end_s += sh;
    }
}

/// The `run.json` head of `dir`, when it reads.
fn head_of(dir: &Path) -> Option<RunJsonHead> {
    let b = std::fs::read(crate::report::run_dir_of(dir).join(files::RUN_JSON)).ok()?;
    serde_json::from_slice(&b).ok()
}

/// A journeys run's shards (`bench journeys --shard I/N`): every journey's run rows from every
/// shard, each journey's summary recomputed over all of them.
fn merge_journeys(dirs: &[PathBuf], out: &Path, partial: bool) -> Result<MergeOutcome, RunError> {
    struct J {
        dir: PathBuf,
        run_json: JourneysRunJson,
        head: RunJsonHead,
        shard: bench_rundir::ShardInfo,
        report: Option<bench_journeys::Report>,
        stopped: Option<(StopBy, String)>,
        opened: Option<Opened>,
    }
    let mut notes = Vec::new();
    let mut shards = Vec::new();
    for d in dirs {
        let (dir, run_json, head, shard) = read_head(d, RunKind::Journeys)?;
        let report = bench_journeys::Report::read(&dir.join(files::JOURNEYS_REPORT)).ok();
        let events = read_jsonl::<EventLine>(&dir.join(files::EVENTS), Strict::No, &mut notes)
            .map_err(invalid)?;
        let (mut stopped, mut opened) = (None, None);
        for e in events {
            match e.event {
                LifecycleEvent::Stopped { by, reason } => stopped = Some((by, reason)),
                LifecycleEvent::Started(o) => opened = Some(o),
                _ => {}
            }
        }
        shards.push(J {
            dir,
            run_json,
            head,
            shard,
            report,
            stopped,
            opened,
        });
    }
    shards.sort_by_key(|s| s.shard.index);
    let finished = |s: &J| s.report.is_some() && s.stopped.is_some();
    let members: Vec<Member<'_>> = shards
        .iter()
        .map(|s| Member {
            dir: &s.dir,
            head: &s.head,
            index: s.shard.index,
            count: s.shard.count,
            finished: finished(s),
        })
        .collect();
    let (count, missing) = check_set(&members, partial)?;
    // Every journey's rows from every shard, in run order; the summary over all of them.
    let mut journeys: std::collections::BTreeMap<String, bench_journeys::JourneyReport> =
        std::collections::BTreeMap::new();
    for r in shards.iter().filter_map(|s| s.report.as_ref()) {
        for (name, j) in &r.journeys {
            match journeys.get_mut(name) {
                Some(m) => m.runs.extend(j.runs.iter().cloned()),
                None => {
                    journeys.insert(name.clone(), j.clone());
                }
            }
        }
    }
    for j in journeys.values_mut() {
        j.runs.sort_by_key(|r| r.run);
        j.summary = bench_journeys::report::Summary::over(&j.runs);
    }
    let first_report = shards.iter().find_map(|s| s.report.as_ref());
    let report = bench_journeys::suite::report(
        journeys,
        first_report.map_or(serde_json::Value::Null, |r| r.config.clone()),
        first_report.and_then(|r| r.git_sha.clone()),
        first_report.map_or(serde_json::Value::Null, |r| r.host.clone()),
    );
    let merged = Merged {
        count,
        partial: !missing.is_empty() || shards.iter().any(|s| !finished(s)),
        missing,
        shards: shards
            .iter()
            .map(|s| MergedShard {
                index: s.shard.index,
                dir: s.dir.display().to_string(),
                host: s.opened.as_ref().and_then(|o| o.host.clone()),
                start_utc: None,
                shift_s: 0.0,
                clock: s.head.clock,
                concurrency: s.run_json.spec.concurrency,
                finished: finished(s),
                turns: s.report.as_ref().map_or(0, |r| {
                    r.journeys.values().map(|j| j.runs.len() as u64).sum()
                }),
                sessions: s.shard.sessions,
            })
            .collect(),
    };
    let run_json = shards[0].run_json.merged(merged.clone());
    std::fs::create_dir_all(out)
        .map_err(|e| RunError::Failed(format!("cannot create {}: {e}", out.display())))?;
    write_pretty(&out.join(files::RUN_JSON), &run_json)?;
    write_pretty(&out.join(files::JOURNEYS_REPORT), &report)?;
    let played: u64 = merged.shards.iter().map(|s| s.turns).sum();
    let events = vec![
        EventLine {
            event: LifecycleEvent::Started(Opened {
                host: Some(format!("{} shards merged", merged.shards.len())),
                ..Opened::default()
            }),
            utc: report.generated_utc.clone(),
        },
        EventLine {
            event: LifecycleEvent::Stopped {
                by: shards
                    .iter()
                    .find_map(|s| s.stopped.as_ref().map(|(b, _)| *b))
                    .unwrap_or(StopBy::Unknown),
                reason: format!(
                    "merged from {} of {} shards (bench merge{}): {played} journey runs",
                    merged.shards.len(),
                    merged.count,
                    if merged.partial { " --partial" } else { "" },
                ),
            },
            utc: report.generated_utc.clone(),
        },
    ];
    write_lines(&out.join(files::EVENTS), &events)?;
    Ok(MergeOutcome {
        dir: out.to_path_buf(),
        merged,
        result: None,
        journeys: Some(report),
        notes,
    })
}

/// A shard's run directory, its `run.json` and what it says: refused unless it is a shard
/// of a run of `kind` (not a merged one).
fn read_head<T: serde::de::DeserializeOwned>(
    dir: &Path,
    kind: RunKind,
) -> Result<(PathBuf, T, RunJsonHead, bench_rundir::ShardInfo), RunError> {
    let dir = crate::report::run_dir_of(dir);
    let at = |what: &str| invalid(format!("{}: {what}", dir.display()));
    if !dir.is_dir() {
        return Err(at("no such run directory"));
    }
    let path = dir.join(files::RUN_JSON);
    let run_json: serde_json::Value = match std::fs::read(&path) {
        Ok(b) => {
            serde_json::from_slice(&b).map_err(|e| invalid(format!("{}: {e}", path.display())))?
        }
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => {
            return Err(at("not a run directory (no run.json)"));
        }
        Err(e) => return Err(invalid(format!("{}: {e}", path.display()))),
    };
    let head: RunJsonHead = serde_json::from_value(run_json.clone())
        .map_err(|e| invalid(format!("{}: {e}", path.display())))?;
    if head.kind != kind {
        return Err(at(&format!(
            "a {} run among the shards of a {} run (bench merge merges the shards of one run)",
            head.kind.as_str(),
            kind.as_str()
        )));
    }
    if head.merged.is_some() {
        return Err(at(
            "already a merged run (merge the shards' own directories)",
        ));
    }
    let Some(shard) = head.shard else {
        return Err(at(
            "not a shard (its run.json has no shard: it was not run with --shard I/N or --shards N)",
        ));
    };
    let doc = serde_json::from_value(run_json).map_err(|e| {
        invalid(format!(
            "{}: not a run.json this bench reads ({e}): merge the shards with the bench that \
             ran them",
            path.display()
        ))
    })?;
    Ok((dir, doc, head, shard))
}

fn read_shard(dir: &Path, notes: &mut Vec<String>) -> Result<ShardDir, RunError> {
    let (dir, run_json, head, shard) = read_head(dir, RunKind::Replay)?;
    let at = |what: &str| invalid(format!("{}: {what}", dir.display()));
    if head.plan_digest.is_none() || head.config_digest.is_none() {
        return Err(at("its run.json has no plan or config digest"));
    }
    let lerr = |e: crate::report::LoadError| invalid(e);
    let turns =
        read_jsonl::<TurnRecord>(&dir.join(files::TURNS), Strict::Yes, notes).map_err(lerr)?;
    let sessions = read_jsonl::<SessionRecord>(&dir.join(files::SESSIONS), Strict::Yes, notes)
        .map_err(lerr)?;
    let scrapes =
        read_jsonl::<Scrape>(&dir.join(files::SCRAPES), Strict::No, notes).map_err(lerr)?;
    let events =
        read_jsonl::<EventLine>(&dir.join(files::EVENTS), Strict::No, notes).map_err(lerr)?;
    let mut stopped = None;
    let mut opened = None;
    for e in events {
        match e.event {
            LifecycleEvent::Stopped { by, reason } => stopped = Some((by, reason)),
            LifecycleEvent::Started(o) => opened = Some(o),
            LifecycleEvent::Resumed(r) => opened = Some(r.opened),
            _ => {}
        }
    }
    let result: Option<bench_report::RunResult> = std::fs::read(dir.join(files::RESULT))
        .ok()
        .and_then(|b| serde_json::from_slice(&b).ok());
    let finished = stopped.is_some() && result.is_some();
    // The measured run's start on the UTC clock: any record's `sent_utc` less its `sent_s`.
    let start_unix_s = turns
        .iter()
        .min_by(|a, b| a.sent_s.total_cmp(&b.sent_s))
        .and_then(|t| {
            let utc = time::OffsetDateTime::parse(
                &t.sent_utc,
                &time::format_description::well_known::Rfc3339,
            )
            .ok()?;
            Some(utc.unix_timestamp_nanos() as f64 / 1e9 - t.sent_s)
        });
    Ok(ShardDir {
        host: opened.as_ref().and_then(|o| o.host.clone()),
        opened,
        index: shard.index,
        count: shard.count,
        finished,
        stopped,
        client: result.and_then(|r| r.client),
        dir,
        run_json,
        head,
        turns,
        sessions,
        scrapes,
        start_unix_s,
    })
}

fn utc_of(unix_s: f64) -> String {
    time::OffsetDateTime::from_unix_timestamp_nanos((unix_s * 1e9) as i128)
        .ok()
        .and_then(|t| {
            t.format(&time::format_description::well_known::Rfc3339)
                .ok()
        })
        .unwrap_or_default()
}

/// `run.started` and `run.stopped` of the merged run, as the shards' were.
fn merged_events(shards: &[ShardDir], merged: &Merged) -> Vec<EventLine> {
    let opened = shards
        .iter()
        .find_map(|s| s.opened.clone())
        .unwrap_or_default();
    let total: u32 = merged.shards.iter().map(|s| s.concurrency).sum();
    let start = EventLine {
        event: LifecycleEvent::Started(Opened {
            pid: None,
            host: Some(format!(
                "{} shard{} merged",
                merged.shards.len(),
                if merged.shards.len() == 1 { "" } else { "s" }
            )),
            process_start_utc: None,
            sessions_planned: Some(
                shards
                    .iter()
                    .filter_map(|s| s.head.shard)
                    .map(|s| s.sessions)
                    .sum(),
            ),
            turns_planned: Some(
                shards
                    .iter()
                    .filter_map(|s| s.head.shard)
                    .map(|s| s.turns)
                    .sum(),
            ),
            concurrency: Some(total),
            rate: opened.rate.map(|r| r * merged.shards.len() as f64),
            ..opened
        }),
        utc: merged
            .shards
            .iter()
            .find_map(|s| s.start_utc.clone())
            .unwrap_or_default(),
    };
    let by = shards
        .iter()
        .find_map(|s| s.stopped.as_ref().map(|(b, _)| *b))
        .unwrap_or(StopBy::Unknown);
    let mut each: Vec<String> = shards
        .iter()
        .map(|s| match &s.stopped {
            Some((b, _)) if s.finished => format!("shard {} {}", s.index, stop_word(*b)),
            _ => format!("shard {} unfinished", s.index),
        })
        .collect();
    if !merged.missing.is_empty() {
        each.push(format!("missing {}", join(&merged.missing)));
    }
    let stop = EventLine {
        event: LifecycleEvent::Stopped {
            by,
            reason: format!(
                "merged from {} of {} shards (bench merge{}): {}",
                merged.shards.len(),
                merged.count,
                if merged.partial { " --partial" } else { "" },
                each.join(", ")
            ),
        },
        utc: time::OffsetDateTime::now_utc()
            .format(&time::format_description::well_known::Rfc3339)
            .unwrap_or_default(),
    };
    vec![start, stop]
}

fn stop_word(b: StopBy) -> String {
    serde_json::to_value(b)
        .ok()
        .and_then(|v| v.as_str().map(str::to_owned))
        .unwrap_or_else(|| "stopped".into())
}

fn join(v: &[u32]) -> String {
    v.iter().map(u32::to_string).collect::<Vec<_>>().join(", ")
}

fn write_pretty(path: &Path, v: &impl serde::Serialize) -> Result<(), RunError> {
    let text = serde_json::to_string_pretty(v)
        .map_err(|e| RunError::Failed(format!("cannot encode {}: {e}", path.display())))?;
    std::fs::write(path, text + "\n")
        .map_err(|e| RunError::Failed(format!("cannot write {}: {e}", path.display())))
}

fn write_lines<T: serde::Serialize>(path: &Path, rows: &[T]) -> Result<(), RunError> {
    let fail = |e: &dyn std::fmt::Display| {
        RunError::Failed(format!("cannot write {}: {e}", path.display()))
    };
    let f = std::fs::File::create(path).map_err(|e| fail(&e))?;
    let mut w = std::io::BufWriter::new(f);
    for r in rows {
        serde_json::to_writer(&mut w, r).map_err(|e| fail(&e))?;
        w.write_all(b"\n").map_err(|e| fail(&e))?;
    }
    w.flush().map_err(|e| fail(&e))
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]
    use super::*;

    #[test]
    fn active_plays_are_counted_at_an_instant() {
        let s = |start_s: f64, end_s: f64| SessionRecord {
            session_id: "s".into(),
            replay: 0,
            status: bench_rundir::SessionStatus::Completed,
            turns_played: 1,
            turns_planned: 1,
            output_tokens: 1,
            busy_s: 0.0,
            marker: None,
            warmup: false,
            start_s,
            end_s,
            superseded: false,
        };
        let sp = Spans::of(&[s(0.0, 2.0), s(1.0, 3.0), s(2.5, 4.0)], 10.0);
        assert_eq!(sp.active_at(9.0), 0);
        assert_eq!(sp.active_at(10.0), 1);
        assert_eq!(sp.active_at(11.5), 2);
        assert_eq!(sp.active_at(12.0), 1); // the first ended at 12
        assert_eq!(sp.active_at(12.6), 2);
        assert_eq!(sp.active_at(14.0), 0);
    }
}
