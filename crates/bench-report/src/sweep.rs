//! A sweep's summary: one point per load level (`bench sweep`), the saturation rule that stops a
//! sweep early, and the result of a `--find-max` search. Running the points is
//! `bench_run::sweep`; the HTML is [`crate::html::sweep_html`].

use serde::{Deserialize, Serialize};

use crate::validity::Verdict;

/// What a sweep varies.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum SweepAxis {
    /// Closed loop: sessions in flight.
    Concurrency,
    /// Open loop: sessions started per second.
    Rate,
}

impl SweepAxis {
    /// `concurrency` or `rate`.
    pub fn as_str(self) -> &'static str {
        match self {
            SweepAxis::Concurrency => "concurrency",
            SweepAxis::Rate => "rate",
        }
    }
}

/// One load level's run, as the sweep summary shows it.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct SweepPoint {
    /// The load level (sessions in flight, or sessions/s).
    pub level: f64,
    /// The point's run directory, relative to the sweep directory.
    pub run_dir: String,
    /// Turns that ended ok / failed (measured turns).
    pub turns_ok: u64,
    /// Turns that failed.
    pub turns_failed: u64,
    /// System output throughput over the steady window, tok/s.
    pub output_tps: Option<f64>,
    /// Median per-user output rate (one request's output tokens over its decode time), tok/s.
    pub per_user_tps: Option<f64>,
    /// TTFT p50 / p99 over the steady window, ms.
    pub ttft_p50_ms: Option<f64>,
    /// TTFT p99, ms.
    pub ttft_p99_ms: Option<f64>,
    /// Share of turns that met the SLO (`None` without `--slo`).
    pub goodput: Option<f64>,
    /// Share of the judged session plays that met the session SLO (`None` without
    /// `--session-slo`; `sessions.session_slo.share` in the point's `result.json`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub session_goodput: Option<f64>,
    /// The point's validity verdict.
    pub verdict: Verdict,
    /// The client was the bottleneck at this point (its client-saturation check failed or
    /// warned): the point is flagged in every view, never silently plotted.
    pub client_bound: bool,
    /// The names of the point's checks that did not pass.
    #[serde(default)]
    pub failed_checks: Vec<String>,
}

/// Why a sweep stopped.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(tag = "by", rename_all = "snake_case")]
pub enum SweepStop {
    /// Not finished: the sweep is still running — or its process died (`bench status` on the
    /// last point's run directory tells which).
    Running,
    /// Every listed level was run.
    Completed,
    /// Throughput stopped rising while TTFT kept growing ([`saturation`]).
    Saturated {
        /// One line naming the levels and figures.
        reason: String,
    },
    /// A point's run failed (it could not start, or every turn failed).
    Failed {
        /// One line.
        reason: String,
    },
    /// Interrupted (Ctrl-C).
    Interrupted,
}

/// The result of `--find-max`: the highest level whose goodput met the target.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct FindMax {
    /// The goodput target (share of turns, or of sessions, meeting the SLO), 0–1.
    pub target: f64,
    /// What the target is a share of: turns meeting `--slo` or session plays meeting
    /// `--session-slo`.
    #[serde(default)]
    pub of: GoodputOf,
    /// The highest level that met it (`None` when even the lowest did not).
    pub best: Option<f64>,
    /// The lowest level tried that did not meet it (`None` when the highest bound met it).
    pub first_failing: Option<f64>,
    /// The search's resolution: it stops when the bracket is at most this wide.
    pub step: f64,
    /// Levels that met the target while the client was the bottleneck: not an answer (the
    /// server may hold more than the client could offer), counted as missing it.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub client_bound: Vec<f64>,
}

/// What a `--find-max` target is a share of.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum GoodputOf {
    /// Measured turns meeting `--slo` (steady window).
    #[default]
    Turns,
    /// Judged session plays meeting `--session-slo`.
    Sessions,
}

/// A sweep's `sweep.json`.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct SweepSummary {
    /// `"bench <version>"`.
    pub generated_by: String,
    /// What was varied.
    pub axis: SweepAxis,
    /// Points in the order they were run.
    pub points: Vec<SweepPoint>,
    /// Why the sweep ended.
    pub stop: SweepStop,
    /// The `--find-max` search's result, if one was run.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub find_max: Option<FindMax>,
    /// The run flags every point shared (secrets redacted).
    #[serde(default)]
    pub config: serde_json::Value,
}

/// Throughput counts as no longer rising when a point's output tok/s is below this factor times
/// the best earlier point's (i.e. it grew by less than 5 %).
pub const SATURATION_MIN_GAIN: f64 = 1.05;
/// …while TTFT p50 grew by at least this factor against the previous point.
pub const SATURATION_TTFT_GROWTH: f64 = 1.2;

/// The saturation rule, applied after each point: the last point's output throughput rose by
/// less than 5 % over the best earlier point ([`SATURATION_MIN_GAIN`]) while its TTFT p50 grew
/// by at least 20 % over the previous point's ([`SATURATION_TTFT_GROWTH`]). Returns the
/// one-line reason, or `None` while the sweep should go on. Points without the figures (every
/// turn failed) never count as saturated here.
pub fn saturation(points: &[SweepPoint]) -> Option<String> {
    let [.., prev, last] = points else {
        return None;
    };
    let best = points[..points.len() - 1]
        .iter()
        .filter_map(|p| p.output_tps.map(|t| (p.level, t)))
        .max_by(|a, b| a.1.total_cmp(&b.1))?;
    let (tps, ttft, prev_ttft) = (last.output_tps?, last.ttft_p50_ms?, prev.ttft_p50_ms?);
    if tps < best.1 * SATURATION_MIN_GAIN
        && prev_ttft > 0.0
        && ttft >= prev_ttft * SATURATION_TTFT_GROWTH
    {
        Some(format!(
            "saturated at {}: output {:.0} tok/s is not 5% above the best so far ({:.0} tok/s at {}) while TTFT p50 grew {:.0}% ({:.1} → {:.1} ms)",
            fmt_level(last.level),
            tps,
            best.1,
            fmt_level(best.0),
            (ttft / prev_ttft - 1.0) * 100.0,
            prev_ttft,
            ttft
        ))
    } else {
        None
    }
}

/// A level as a user wrote it (`8`, `0.5`).
pub fn fmt_level(level: f64) -> String {
    if level.fract() == 0.0 && level.abs() < 1e15 {
        format!("{}", level as i64)
    } else {
        format!("{level}")
    }
}

/// `x` with `decimals`, or `—` when not measured.
pub fn fmt_opt(x: Option<f64>, decimals: usize) -> String {
    x.map_or_else(|| "—".to_owned(), |v| format!("{v:.decimals$}"))
}

/// How the sweep ended, in words: `completed: every level was run` (a search: `completed:
/// the search is over after N points`), `stopped early: <reason>`, `failed: <reason>`,
/// `interrupted`.
pub fn stop_text(summary: &SweepSummary) -> String {
    match &summary.stop {
        SweepStop::Completed if summary.find_max.is_some() => format!(
            "completed: the search is over after {} points",
            summary.points.len()
        ),
        SweepStop::Completed => "completed: every level was run".into(),
        SweepStop::Saturated { reason } => format!("stopped early: {reason}"),
        SweepStop::Failed { reason } => format!("failed: {reason}"),
        SweepStop::Interrupted => "interrupted".into(),
        SweepStop::Running => "not finished (still running, or its process died)".into(),
    }
}

/// The `--find-max` result in words: `highest load meeting goodput ≥ 90%: 12 (13 did not)`.
pub fn find_max_text(f: &FindMax) -> String {
    let pct = fmt_level((f.target * 100.0 * 1e6).round() / 1e6);
    let target = match f.of {
        GoodputOf::Turns => format!("goodput ≥ {pct}%"),
        GoodputOf::Sessions => format!("≥ {pct}% of sessions within the session SLO"),
    };
    let mut text = match (f.best, f.first_failing) {
        (Some(b), Some(x)) => format!(
            "highest load meeting {target}: {} ({} did not)",
            fmt_level(b),
            fmt_level(x)
        ),
        (Some(b), None) => format!(
            "highest load meeting {target}: {} (the highest level given; raise it to look further)",
            fmt_level(b)
        ),
        (None, Some(x)) => format!(
            "no load met {target}: not even the lowest level given, {}",
            fmt_level(x)
        ),
        (None, None) => format!("no load met {target}: no level was measured"),
    };
    if !f.client_bound.is_empty() {
        let levels: Vec<String> = f.client_bound.iter().map(|l| fmt_level(*l)).collect();
        text.push_str(&format!(
            "; at {} the client was the bottleneck, so the server's own limit may be higher",
            levels.join(", ")
        ));
    }
    text
}

/// The summary as a markdown table (`sweep.md`): one row per point, then how the sweep ended.
pub fn markdown(s: &SweepSummary) -> String {
    use std::fmt::Write as _;
    let mut out = format!("# Sweep of {}\n\n", s.axis.as_str());
    out.push_str(
        "| level | run | output tok/s | per-user tok/s | TTFT p50 ms | TTFT p99 ms | goodput | turns ok / failed | verdict | client-bound | checks not passed |\n\
         |---:|---|---:|---:|---:|---:|---:|---:|---|---|---|\n",
    );
    for p in &s.points {
        let _ = writeln!(
            out,
            "| {} | {} | {} | {} | {} | {} | {} | {} / {} | {} | {} | {} |",
            fmt_level(p.level),
            p.run_dir,
            fmt_opt(p.output_tps, 1),
            fmt_opt(p.per_user_tps, 1),
            fmt_opt(p.ttft_p50_ms, 1),
            fmt_opt(p.ttft_p99_ms, 1),
            p.goodput
                .map_or_else(|| "—".to_owned(), |g| format!("{:.1}%", g * 100.0)),
            p.turns_ok,
            p.turns_failed,
            p.verdict.as_str(),
            if p.client_bound { "yes" } else { "" },
            p.failed_checks.join(", "),
        );
    }
    if s.points.iter().any(|p| p.session_goodput.is_some()) {
        out.push_str("\nSessions within the session SLO (share of judged session plays):\n\n");
        for p in &s.points {
            let _ = writeln!(
                out,
                "- {}: {}",
                fmt_level(p.level),
                p.session_goodput
                    .map_or_else(|| "—".to_owned(), |g| format!("{:.1}%", g * 100.0))
            );
        }
    }
    let _ = writeln!(out, "\n{}", stop_text(s));
    if let Some(f) = &s.find_max {
        let _ = writeln!(out, "\n{}", find_max_text(f));
    }
    out
}

/// The header of the table `bench sweep` prints, a row per point as it ends.
pub fn table_header() -> String {
    format!(
        "{:>9}  {:>12}  {:>14}  {:>11}  {:>11}  {:>7}  verdict\n",
        "level", "output tok/s", "per-user tok/s", "TTFT p50 ms", "TTFT p99 ms", "goodput"
    )
}

/// One point's line of the table ([`table_header`]).
pub fn table_row(p: &SweepPoint) -> String {
    let mut line = format!(
        "{:>9}  {:>12}  {:>14}  {:>11}  {:>11}  {:>7}  {}",
        fmt_level(p.level),
        fmt_opt(p.output_tps, 1),
        fmt_opt(p.per_user_tps, 1),
        fmt_opt(p.ttft_p50_ms, 1),
        fmt_opt(p.ttft_p99_ms, 1),
        p.goodput
            .map_or_else(|| "—".to_owned(), |g| format!("{:.1}%", g * 100.0)),
        p.verdict.as_str(),
    );
    if !p.failed_checks.is_empty() {
        line.push_str(&format!(" ({})", p.failed_checks.join(", ")));
    }
    if let Some(g) = p.session_goodput {
        line.push_str(&format!("  sessions in SLO {:.1}%", g * 100.0));
    }
    if p.turns_failed > 0 {
        line.push_str(&format!(
            "  {} of {} turns failed",
            p.turns_failed,
            p.turns_ok + p.turns_failed
        ));
    }
    if p.client_bound {
        line.push_str("  CLIENT-BOUND: the client, not the server, set the pace");
    }
    line.push('\n');
    line
}
