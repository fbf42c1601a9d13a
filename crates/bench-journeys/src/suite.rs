//! Running a set of journeys `runs` times and building the report.

use std::collections::BTreeMap;
use std::sync::Arc;

use crate::journey::{Env, Failure, Journey, Kind};
use crate::report::{JourneyReport, REPORT_SCHEMA_VERSION, Report, RunRow, Summary};
use crate::runner::{Cancel, run};

/// How a suite runs.
#[derive(Debug, Clone, PartialEq)]
pub struct SuiteConfig {
    /// Timed operations per latency run (clamped per journey).
    pub iterations: u32,
    /// Untimed operations before timing.
    pub warmup: u32,
    /// Operations in flight; above 1, concurrency-safe journeys run as throughput.
    pub concurrency: u32,
    /// Timed operations per throughput run.
    pub requests: u32,
    /// Repetitions of every journey.
    pub runs: u32,
    /// Play only shard `(index, count)` of the suite's journey runs (`--shard I/N`): the
    /// (journey, run) pairs in order, every `count`-th from the `index`-th ([`in_shard`]).
    pub shard: Option<(u32, u32)>,
}

/// Whether the `k`-th (journey, run) pair of a suite (0-based, journeys in order, each
/// journey's runs in order) is in `shard` (`(index, count)`; `None`: every pair is).
pub fn in_shard(k: u32, shard: Option<(u32, u32)>) -> bool {
    shard.is_none_or(|(i, n)| k % n.max(1) == i)
}

/// How many (journey, run) pairs of `journeys` journeys with `runs` runs each `shard` plays.
pub fn plays_in_shard(journeys: usize, runs: u32, shard: Option<(u32, u32)>) -> u32 {
    let all = journeys as u32 * runs.max(1);
    (0..all).filter(|k| in_shard(*k, shard)).count() as u32
}

impl Default for SuiteConfig {
    fn default() -> Self {
        SuiteConfig {
            iterations: 50,
            warmup: 5,
            concurrency: 1,
            requests: 200,
            runs: 1,
            shard: None,
        }
    }
}

/// How `j` runs under `cfg`: throughput only when concurrency > 1 and it is concurrency-safe.
pub fn mode_of(j: &dyn Journey, cfg: &SuiteConfig) -> Kind {
    if cfg.concurrency > 1 && j.concurrency_safe() {
        Kind::Throughput
    } else {
        Kind::Latency
    }
}

/// Picks journeys by name, in the order given (all when `names` is empty). An unknown name is
/// an error listing the known ones.
pub fn select(
    all: Vec<Arc<dyn Journey>>,
    names: &[String],
) -> Result<Vec<Arc<dyn Journey>>, String> {
    if names.is_empty() {
        return Ok(all);
    }
    let mut out = Vec::new();
    for n in names {
        match all.iter().find(|j| j.name() == n) {
            Some(j) => out.push(j.clone()),
            None => {
                let known: Vec<&str> = all.iter().map(|j| j.name()).collect();
                return Err(format!(
                    "unknown journey {n:?}; known: {}",
                    known.join(", ")
                ));
            }
        }
    }
    Ok(out)
}

/// One timed operation of a suite, as [`run_suite_observed`] reports it (warmup operations
/// are not reported).
#[derive(Debug, Clone, Copy)]
pub struct OpEvent<'a> {
    /// The journey's name.
    pub journey: &'a str,
    /// Which run of the journey (from 1).
    pub run: u32,
    /// `Ok(latency in ms)` when it succeeded, else why it failed.
    pub outcome: Result<f64, &'a Failure>,
}

impl OpEvent<'_> {
    /// Its latency when it succeeded, ms.
    pub fn latency_ms(&self) -> Option<f64> {
        self.outcome.ok()
    }

    /// Its failure reason (`HTTP 404`, `timeout`, …) when it failed.
    pub fn failure_reason(&self) -> Option<&str> {
        self.outcome.err().map(|f| f.reason.as_str())
    }
}

/// Runs every journey `cfg.runs` times (journey by journey), calling `on_run` after each run.
/// Stops starting runs once `cancel` is cancelled. `config` and `host`/`git_sha` go into the
/// report as given.
pub async fn run_suite(
    journeys: &[Arc<dyn Journey>],
    env: &Env,
    cfg: &SuiteConfig,
    cancel: &Cancel,
    on_run: impl FnMut(&str, &RunRow),
) -> BTreeMap<String, JourneyReport> {
    run_suite_observed(journeys, env, cfg, cancel, on_run, &|_| {}).await
}

/// [`run_suite`], also calling `on_op` as each timed operation completes (on the runner's
/// task, between completions: keep it quick; operations already in flight go on meanwhile).
pub async fn run_suite_observed(
    journeys: &[Arc<dyn Journey>],
    env: &Env,
    cfg: &SuiteConfig,
    cancel: &Cancel,
    mut on_run: impl FnMut(&str, &RunRow),
    on_op: &(dyn Fn(&OpEvent<'_>) + Sync),
) -> BTreeMap<String, JourneyReport> {
    let mut out = BTreeMap::new();
    let mut pair = 0u32;
    for j in journeys {
        let mode = mode_of(j.as_ref(), cfg);
        let (requests, concurrency) = match mode {
            Kind::Latency => (cfg.iterations, 1),
            Kind::Throughput => (cfg.requests, cfg.concurrency),
        };
        let mut rows = Vec::new();
        for n in 1..=cfg.runs.max(1) {
            let mine = in_shard(pair, cfg.shard);
            pair += 1;
            if !mine {
                continue;
            }
            if cancel.is_cancelled() {
                break;
            }
            let observe = |outcome: Result<f64, &Failure>| {
                on_op(&OpEvent {
                    journey: j.name(),
                    run: n,
                    outcome,
                })
            };
            let r = run(
                j.as_ref(),
                env,
                mode,
                requests,
                concurrency,
                cfg.warmup,
                cancel,
                Some(&observe),
            )
            .await;
            let row = RunRow::from_result(n, &r);
            on_run(j.name(), &row);
            rows.push(row);
        }
        if rows.is_empty() {
            continue;
        }
        out.insert(
            j.name().to_owned(),
            JourneyReport {
                kind: j.kind(),
                mode,
                description: j.description().to_owned(),
                summary: Summary::over(&rows),
                runs: rows,
            },
        );
    }
    out
}

/// A report around `journeys`, stamped now.
pub fn report(
    journeys: BTreeMap<String, JourneyReport>,
    config: serde_json::Value,
    git_sha: Option<String>,
    host: serde_json::Value,
) -> Report {
    Report {
        schema_version: REPORT_SCHEMA_VERSION,
        generated_by: format!("bench {}", env!("CARGO_PKG_VERSION")),
        generated_utc: time::OffsetDateTime::now_utc()
            .format(&time::format_description::well_known::Rfc3339)
            .unwrap_or_default(),
        git_sha,
        host,
        config,
        journeys,
    }
}

/// One line per journey: name, kind, flags, description (`bench journeys --list`).
pub fn listing(journeys: &[Arc<dyn Journey>]) -> String {
    let mut s = String::new();
    for j in journeys {
        let mut flags = Vec::new();
        if j.concurrency_safe() {
            flags.push("concurrency-safe".to_owned());
        }
        if j.needs_runner() {
            flags.push("needs-runner".to_owned());
        }
        if j.needs_mock_llm() {
            flags.push("needs-mock-llm".to_owned());
        }
        if let Some(m) = j.max_iterations() {
            flags.push(format!("max-iterations={m}"));
        }
        s.push_str(&format!(
            "{:<28}{:<12}{:<46}{}\n",
            j.name(),
            j.kind().as_str(),
            flags.join(","),
            j.description()
        ));
    }
    s
}

/// The commit measured: `GITHUB_SHA`, `BENCH_GIT_SHA`, or `git rev-parse HEAD` when it works.
pub fn git_sha() -> Option<String> {
    for k in ["BENCH_GIT_SHA", "GITHUB_SHA"] {
        if let Ok(v) = std::env::var(k) {
            if !v.trim().is_empty() {
                return Some(v.trim().to_owned());
            }
        }
    }
    let o = std::process::Command::new("git")
        .args(["rev-parse", "HEAD"])
        .stderr(std::process::Stdio::null())
        .output()
        .ok()?;
    let s = String::from_utf8(o.stdout).ok()?.trim().to_owned();
    (o.status.success() && !s.is_empty()).then_some(s)
}

/// The report's `host`: `name`, the CPUs this process may use, the OS.
pub fn host_info(name: &str) -> serde_json::Value {
    let cpus = std::thread::available_parallelism().map_or(0, |n| n.get());
    serde_json::json!({ "name": name, "cpus": cpus, "os": std::env::consts::OS })
}
