//! A sweep's summary: one point per load level (`bench sweep`), the saturation rule that stops a
//! sweep early, the result of a `--find-max` search, and an idle-gap sweep's cache
//! [`Retention`] curve and half-life. Running the points is
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
    /// The idle time before each later turn of a session, s, at a fixed load: how long the
    /// server's prefix cache keeps an idle session warm ([`Retention`]).
    #[serde(rename = "idle_gap")]
    IdleGap,
}

impl SweepAxis {
    /// `concurrency`, `rate` or `idle_gap`.
    pub fn as_str(self) -> &'static str {
        match self {
            SweepAxis::Concurrency => "concurrency",
            SweepAxis::Rate => "rate",
            SweepAxis::IdleGap => "idle_gap",
        }
    }

    /// What a level is, for tables and charts.
    pub fn describe(self) -> &'static str {
        match self {
            SweepAxis::Concurrency => "concurrency (sessions in flight)",
            SweepAxis::Rate => "rate (sessions started per second)",
            SweepAxis::IdleGap => "idle gap before each later turn, s",
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
    /// Σ cached ÷ Σ input tokens of the later turns (`turn_index` ≥ 1) over the whole measured
    /// run (`overall.prefix_cache_later_ratio`; `None` when the server reported no cached
    /// tokens).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub later_cache_ratio: Option<f64>,
    /// TTFT p50 of those later turns, ms (`overall.ttft_later_turns_ms.p50`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub ttft_later_p50_ms: Option<f64>,
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
    /// An idle-gap sweep's cache retention curve and half-life ([`retention`]).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub retention: Option<Retention>,
    /// The run flags every point shared (secrets redacted).
    #[serde(default)]
    pub config: serde_json::Value,
}

/// How much of the prefix cache's benefit an idle session keeps, per idle gap: an idle-gap
/// sweep's answer ([`retention`]).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Retention {
    /// The reference gap (the sweep's first, 0 s), s.
    pub reference_gap_s: f64,
    /// The later turns' cached share at the reference gap (`None`: the server reported no
    /// cached tokens there).
    pub reference_ratio: Option<f64>,
    /// Their TTFT p50 at the reference gap, ms.
    pub reference_ttft_ms: Option<f64>,
    /// One entry per point, by gap.
    pub gaps: Vec<RetentionGap>,
    /// The gap at which half the benefit is gone, s: where `kept` first falls below 0.5,
    /// interpolated linearly between that gap and the one before it (`None`: no gap lost half,
    /// or there is no reference).
    pub half_life_s: Option<f64>,
    /// The two gaps that bracket the half-life, s (the last keeping half, the first not).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub bracket_s: Option<[f64; 2]>,
}

/// One idle gap's figures in a [`Retention`].
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct RetentionGap {
    /// The idle gap, s.
    pub gap_s: f64,
    /// Later turns' cached share at this gap.
    pub cached_ratio: Option<f64>,
    /// `cached_ratio ÷ reference_ratio`: the share of the cache benefit kept (1 at the
    /// reference; `None` without both figures).
    pub kept: Option<f64>,
    /// Later turns' TTFT p50, ms.
    pub ttft_later_p50_ms: Option<f64>,
    /// That ÷ the reference's (`None` without both).
    pub ttft_vs_reference: Option<f64>,
}

/// The share of its benefit a cache must have lost for the gap to be the half-life.
pub const HALF_LIFE_KEPT: f64 = 0.5;

/// The retention curve of an idle-gap sweep's points (the first point, by gap, is the
/// reference; `None` without points).
///
/// ```
/// use bench_report::sweep::retention;
/// # use bench_report::sweep::SweepPoint;
/// # fn p(gap: f64, ratio: f64) -> SweepPoint {
/// #     serde_json::from_value(serde_json::json!({"level": gap, "run_dir": "g", "turns_ok": 8,
/// #         "turns_failed": 0, "output_tps": null, "per_user_tps": null, "ttft_p50_ms": null,
/// #         "ttft_p99_ms": null, "goodput": null, "verdict": "valid", "client_bound": false,
/// #         "later_cache_ratio": ratio})).unwrap()
/// # }
/// // 80% of later turns' tokens cached at 0 s, 60% at 10 s, 20% at 20 s.
/// let r = retention(&[p(0.0, 0.8), p(10.0, 0.6), p(20.0, 0.2)]).unwrap();
/// // Kept 0.75 at 10 s and 0.25 at 20 s: half is gone half-way between them.
/// assert!((r.half_life_s.unwrap() - 15.0).abs() < 1e-9);
/// assert_eq!(r.bracket_s, Some([10.0, 20.0]));
/// ```
pub fn retention(points: &[SweepPoint]) -> Option<Retention> {
    let mut points: Vec<&SweepPoint> = points.iter().filter(|p| p.level.is_finite()).collect();
    points.sort_by(|a, b| a.level.total_cmp(&b.level));
    let reference = *points.first()?;
    let base = reference.later_cache_ratio.filter(|r| *r > 0.0);
    let base_ttft = reference.ttft_later_p50_ms.filter(|t| *t > 0.0);
    let gaps: Vec<RetentionGap> = points
        .iter()
        .map(|p| RetentionGap {
            gap_s: p.level,
            cached_ratio: p.later_cache_ratio,
            kept: p.later_cache_ratio.zip(base).map(|(r, b)| r / b),
            ttft_later_p50_ms: p.ttft_later_p50_ms,
            ttft_vs_reference: p.ttft_later_p50_ms.zip(base_ttft).map(|(t, b)| t / b),
        })
        .collect();
    let mut half_life_s = None;
    let mut bracket_s = None;
    let mut last_kept: Option<(f64, f64)> = None;
    for g in &gaps {
        let Some(k) = g.kept else { continue };
        if k < HALF_LIFE_KEPT {
            if let Some((g0, k0)) = last_kept {
                half_life_s = Some(g0 + (k0 - HALF_LIFE_KEPT) / (k0 - k) * (g.gap_s - g0));
                bracket_s = Some([g0, g.gap_s]);
            }
            break;
        }
        last_kept = Some((g.gap_s, k));
    }
    Some(Retention {
        reference_gap_s: reference.level,
        reference_ratio: base,
        reference_ttft_ms: base_ttft,
        gaps,
        half_life_s,
        bracket_s,
    })
}

/// The retention curve's answer in one line: `cache half-life: 15 s (10 s kept 75% of the cache
/// benefit, 20 s 25%)`, or why there is none.
pub fn retention_text(r: &Retention) -> String {
    let secs = |s: f64| format!("{} s", fmt_secs(s));
    let kept_at = |gap: f64| {
        r.gaps
            .iter()
            .find(|g| g.gap_s == gap)
            .and_then(|g| g.kept)
            .map_or_else(|| "—".to_owned(), |k| format!("{:.0}%", k * 100.0))
    };
    if r.reference_ratio.is_none() {
        return format!(
            "no cache half-life: at the reference gap ({}) later turns reported no cached tokens              (the server reports none, or keeps no prefix cache)",
            secs(r.reference_gap_s)
        );
    }
    match (r.half_life_s, r.bracket_s) {
        (Some(h), Some([a, b])) => format!(
            "cache half-life: {} (idle {} kept {} of the cache benefit, {} kept {})",
            secs(h),
            secs(a),
            kept_at(a),
            secs(b),
            kept_at(b)
        ),
        _ => {
            let last = r.gaps.iter().rev().find(|g| g.kept.is_some());
            match last {
                Some(g) if g.gap_s > r.reference_gap_s => format!(
                    "cache half-life: longer than {}, the longest gap tried (it kept {})",
                    secs(g.gap_s),
                    kept_at(g.gap_s)
                ),
                _ => "no cache half-life: no gap beyond the reference was measured".to_owned(),
            }
        }
    }
}

/// Seconds as a user reads them: `15`, `1.5`, `0.25`.
fn fmt_secs(s: f64) -> String {
    if s >= 10.0 {
        format!("{s:.0}")
    } else if s >= 1.0 {
        let t = format!("{s:.1}");
        t.strip_suffix(".0").map_or(t.clone(), str::to_owned)
    } else {
        let t = format!("{s:.2}");
        t.trim_end_matches('0').trim_end_matches('.').to_owned()
    }
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
    if let Some(r) = &s.retention {
        out.push_str(
            "\n## Cache retention\n\nLater turns (a session's second and on) after each idle gap, \
             against the reference gap:\n\n\
             | idle gap s | cached share | benefit kept | TTFT p50 ms | TTFT vs reference |\n\
             |---:|---:|---:|---:|---:|\n",
        );
        for g in &r.gaps {
            let _ = writeln!(
                out,
                "| {} | {} | {} | {} | {} |",
                fmt_level(g.gap_s),
                g.cached_ratio
                    .map_or_else(|| "—".to_owned(), |x| format!("{:.1}%", x * 100.0)),
                g.kept
                    .map_or_else(|| "—".to_owned(), |x| format!("{:.0}%", x * 100.0)),
                fmt_opt(g.ttft_later_p50_ms, 1),
                g.ttft_vs_reference
                    .map_or_else(|| "—".to_owned(), |x| format!("{x:.2}×")),
            );
        }
        let _ = writeln!(out, "\n{}", retention_text(r));
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

/// One point's line of the table ([`table_header`]); an idle-gap sweep's level is in seconds
/// and its line ends with the later turns' cached share and TTFT.
pub fn table_row(axis: SweepAxis, p: &SweepPoint) -> String {
    let level = match axis {
        SweepAxis::IdleGap => format!("{}s", fmt_level(p.level)),
        _ => fmt_level(p.level),
    };
    let mut line = format!(
        "{:>9}  {:>12}  {:>14}  {:>11}  {:>11}  {:>7}  {}",
        level,
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
    if axis == SweepAxis::IdleGap {
        line.push_str(&format!(
            "  later turns: {} cached, TTFT p50 {} ms",
            p.later_cache_ratio
                .map_or_else(|| "—".to_owned(), |x| format!("{:.1}%", x * 100.0)),
            fmt_opt(p.ttft_later_p50_ms, 1)
        ));
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
