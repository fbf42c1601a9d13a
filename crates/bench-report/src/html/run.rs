//! The nine charts of one run's report (and a tenth, the agent-graph timeline, for runs with
//! graph sessions). Turn charts use the measured ok turns (the session
//! timeline: measured turns of any status); warmup and superseded records are skipped
//! everywhere. The three server charts plot `ReportData::server`.

use std::collections::BTreeMap;

use plotters::prelude::*;

use super::chart::{
    Axes, C_BLUE, C_GREEN, C_GREY, C_ORANGE, C_PURPLE, C_RED, C_SHADE, C_SHADE_KEY, DESC_FONT,
    Figure, Key, LABEL_FONT, axis_num, build, cdf_steps, frame, legend, marks_end, marks_start,
    mesh, nice_ceil, range_of, staircase, thin,
};
use super::{MAX_CDF_STEPS, MAX_LINE_POINTS, MAX_SCATTER_POINTS, MAX_TIMELINE_PLAYS};
use crate::percentile;
use crate::record::{TurnRecord, TurnStatus};
use crate::report::{ReportData, ServerPoint};
use crate::stats::sorted_finite;

/// Most buckets of the throughput chart.
const MAX_BUCKETS: f64 = 300.0;
/// Turn indices at or past this are pooled in the TTFT-by-turn chart.
const TURN_INDEX_CAP: u32 = 50;
/// Most bars (turns and tool waits) the session timeline draws.
const MAX_TIMELINE_BARS: usize = 8_000;
/// The session timeline's width, px.
const TIMELINE_WIDTH: u32 = 1000;
/// Every other chart's size, px.
const SIZE: (u32, u32) = (1000, 380);

/// The report's figures, in page order.
pub(super) fn figures(data: &ReportData) -> Vec<Figure> {
    let measured: Vec<&TurnRecord> = data
        .turns
        .iter()
        .filter(|r| !r.warmup && !r.superseded)
        .collect();
    let ok: Vec<&TurnRecord> = measured
        .iter()
        .copied()
        .filter(|r| r.status == TurnStatus::Ok)
        .collect();
    let skipped = data.turns.len() - measured.len();
    let covers = format!(
        "Covers the {} measured ok turns of the whole run; {} warmup or superseded records are \
         skipped.",
        count(ok.len()),
        count(skipped)
    );
    let window = steady_span(data);
    let mut figures = vec![
        cdf(
            "ttft_cdf",
            "TTFT distribution",
            "time to first token",
            ok.iter().filter_map(|r| r.ttft_ms),
            &covers,
        ),
        cdf(
            "e2e_cdf",
            "Turn latency (e2e) distribution",
            "request-to-last-byte latency",
            ok.iter().filter_map(|r| r.e2e_ms),
            &covers,
        ),
        ttft_by_turn(&ok, &covers),
        ttft_vs_input(&ok, &covers),
        throughput(&measured, &ok, window, &covers),
        server_chart(
            &data.server,
            ServerChart {
                name: "kv_usage_over_time",
                title: "KV-cache usage over time",
                what: "KV-cache usage",
                y_desc: "KV-cache usage, %",
                scale: 100.0,
                series: &[("KV-cache usage", |p| p.kv_usage, C_BLUE)],
            },
        ),
        server_chart(
            &data.server,
            ServerChart {
                name: "queue_depth_over_time",
                title: "Server queue over time",
                what: "waiting or running requests",
                y_desc: "requests",
                scale: 1.0,
                series: &[
                    ("waiting", |p| p.waiting, C_ORANGE),
                    ("running", |p| p.running, C_BLUE),
                ],
            },
        ),
        server_chart(
            &data.server,
            ServerChart {
                name: "prefix_hit_over_time",
                title: "Prefix-cache hit rate over time",
                what: "a prefix-cache hit rate",
                y_desc: "hit rate since the previous scrape, %",
                scale: 100.0,
                series: &[("prefix-cache hit rate", |p| p.prefix_hit_rate, C_GREEN)],
            },
        ),
        timeline(&measured, skipped),
    ];
    // GPU power (only when a scraped source reported it: a DCGM exporter via --scrape).
    if data.server.iter().any(|p| p.gpu_power_w.is_some()) {
        figures.push(server_chart(
            &data.server,
            ServerChart {
                name: "gpu_power_over_time",
                title: "GPU power over time",
                what: "GPU power",
                y_desc: "GPU power (DCGM), W",
                scale: 1.0,
                series: &[("GPU power, summed over the GPUs", |p| p.gpu_power_w, C_RED)],
            },
        ));
    }
    // Agent graphs: one play's branches, drawn (only when the run has graph sessions).
    if let Some((sid, replay)) = crate::graph::pick_timeline_play(&data.turns) {
        figures.push(graph_timeline(&data.turns, &sid, replay));
    }
    figures
}

/// One agent-graph play: a row per conversation (main on top, then its subagents in the order
/// they started), each node a bar from its send to its last byte, its wait (from the end of
/// what released it to its send) a thin grey bar, and a line from the node that released it.
fn graph_timeline(turns: &[TurnRecord], sid: &str, replay: u32) -> Figure {
    const NAME: &str = "graph_timeline";
    const TITLE: &str = "Agent graph: one session's branches";
    let bars = crate::graph::timeline(turns, sid, replay);
    let covers = format!(
        "Session {sid:?}, play {replay}: the graph play with the most nodes ({} nodes).",
        bars.len()
    );
    if bars.is_empty() {
        return Figure::empty(NAME, TITLE, covers, "No graph node: nothing to plot.");
    }
    let mut rows: Vec<&str> = Vec::new();
    for b in &bars {
        if !rows.contains(&b.agent.as_str()) {
            rows.push(&b.agent);
        }
    }
    let row_of = |agent: &str| rows.iter().position(|r| *r == agent).unwrap_or(0) as f64;
    let released: std::collections::HashMap<u32, (f64, Option<u32>)> = turns
        .iter()
        .filter(|r| r.session_id == sid && r.replay == replay && !r.warmup && !r.superseded)
        .filter_map(|r| {
            r.node
                .as_ref()
                .map(|n| (r.turn_index, (n.released_s, n.released_by)))
        })
        .collect();
    let by_index: std::collections::HashMap<u32, &crate::graph::TimelineBar> =
        bars.iter().map(|b| (b.turn_index, b)).collect();
    let x = range_of(
        bars.iter().flat_map(|b| [b.due_s, b.sent_s, b.end_s]),
        false,
    );
    let px = (x.end - x.start) / f64::from(TIMELINE_WIDTH - 90);
    let n_rows = rows.len();
    let top = n_rows as f64 - 1.0;
    let caption = format!(
        "One row per conversation of the play ({n_rows}: main at the top, then its subagents by          start): each request a bar from its send to its last byte (blue ok, red failed), the          wait before it — from the end of the node that released it to its send — a thin grey          bar, and a line from that node's end: forks fan out from one node, a join is drawn          from its slowest dependency. {covers}"
    );
    let height = (n_rows as u32 * 28 + 120).max(240);
    let labels: Vec<String> = rows.iter().map(|r| (*r).to_string()).collect();
    Figure::drawn(NAME, TITLE, caption, (TIMELINE_WIDTH, height), |root| {
        let mut chart = build(
            root,
            &Axes {
                x: x.clone(),
                y: -0.7..top + 0.7,
                ..Axes::default()
            },
        )?;
        chart
            .configure_mesh()
            .disable_y_mesh()
            .x_desc("time since the run started, s")
            .y_desc("conversation")
            .x_labels(10)
            .y_labels(n_rows.min(12))
            .axis_desc_style(("sans-serif", DESC_FONT))
            .label_style(("sans-serif", LABEL_FONT))
            .x_label_formatter(&|v| axis_num(*v))
            .y_label_formatter(&|v| {
                let row = top - v.round();
                if row >= 0.0 && (v - v.round()).abs() < 1e-9 {
                    labels.get(row as usize).cloned().unwrap_or_default()
                } else {
                    String::new()
                }
            })
            .draw()?;
        marks_start(root)?;
        let y_of = |agent: &str| top - row_of(agent);
        let (mut waits, mut ok_bars, mut failed_bars, mut links) =
            (Vec::new(), Vec::new(), Vec::new(), Vec::new());
        for b in &bars {
            let y = y_of(&b.agent);
            if let Some(&(rel, by)) = released.get(&b.turn_index) {
                if b.sent_s > rel {
                    waits.push(Rectangle::new(
                        [(rel, y - 0.1), (b.sent_s, y + 0.1)],
                        C_GREY.mix(0.7).filled(),
                    ));
                }
                if let Some(from) = by.and_then(|d| by_index.get(&d)) {
                    links.push(PathElement::new(
                        vec![(from.end_s, y_of(&from.agent)), (rel.max(from.end_s), y)],
                        C_GREY.stroke_width(1),
                    ));
                }
            }
            let (into, color) = match b.status {
                crate::graph::BarStatus::Ok => (&mut ok_bars, C_BLUE),
                crate::graph::BarStatus::Failed => (&mut failed_bars, C_RED),
            };
            into.push(Rectangle::new(
                [(b.sent_s, y - 0.35), (b.end_s.max(b.sent_s + px), y + 0.35)],
                color.filled(),
            ));
        }
        chart.draw_series(links)?;
        chart.draw_series(waits)?;
        chart.draw_series(ok_bars)?;
        let any_failed = !failed_bars.is_empty();
        if any_failed {
            chart.draw_series(failed_bars)?;
        }
        marks_end(root)?;
        let mut keys = vec![
            (Key::Box, C_BLUE, "request (ok)"),
            (Key::Box, C_GREY, "wait / released by"),
        ];
        if any_failed {
            keys.push((Key::Box, C_RED, "request (failed)"));
        }
        legend(root, &keys)
    })
}

/// The steady window's `(start, end)`, s, when the result has one.
fn steady_span(data: &ReportData) -> Option<(f64, f64)> {
    let w = &data.result.steady_window;
    let (a, b) = (w.start_s?, w.end_s?);
    (a.is_finite() && b.is_finite() && b > a).then_some((a, b))
}

/// `n` with a thousands separator.
fn count(n: usize) -> String {
    let s = n.to_string();
    let mut out = String::new();
    for (i, c) in s.chars().enumerate() {
        if i > 0 && (s.len() - i) % 3 == 0 {
            out.push(',');
        }
        out.push(c);
    }
    out
}

fn ms(v: Option<f64>) -> String {
    v.map_or_else(|| "n/a".to_owned(), |v| format!("{v:.1} ms"))
}

/// An empirical CDF with dots at p50, p90 and p99.
fn cdf(
    name: &'static str,
    title: &str,
    what: &str,
    values: impl Iterator<Item = f64>,
    covers: &str,
) -> Figure {
    let sorted = sorted_finite(values);
    if sorted.is_empty() {
        return Figure::empty(
            name,
            title,
            covers,
            format!("No measured ok turn has a {what}: nothing to plot."),
        );
    }
    let steps = cdf_steps(&sorted, MAX_CDF_STEPS);
    let line = staircase(&steps);
    let quantiles: Vec<(f64, f64)> = [0.5, 0.9, 0.99]
        .into_iter()
        .filter_map(|q| Some((percentile(&sorted, q)?, q)))
        .collect();
    let drawn = if steps.len() < sorted.len() {
        format!(
            " ({} steps drawn at evenly spaced ranks of {} values)",
            count(steps.len()),
            count(sorted.len())
        )
    } else {
        String::new()
    };
    let caption = format!(
        "Share of turns whose {what} is at most x (empirical CDF{drawn}); dots at p50 {}, \
         p90 {}, p99 {}. {covers}",
        ms(quantiles.first().map(|q| q.0)),
        ms(quantiles.get(1).map(|q| q.0)),
        ms(quantiles.get(2).map(|q| q.0)),
    );
    let x = range_of([sorted[0], sorted[sorted.len() - 1]], true);
    Figure::drawn(name, title, caption, SIZE, |root| {
        let mut chart = frame(
            root,
            &Axes {
                x_desc: &format!("{what}, ms"),
                y_desc: "share of turns ≤ x",
                x,
                y: 0.0..1.02,
                ..Axes::default()
            },
        )?;
        marks_start(root)?;
        chart.draw_series(LineSeries::new(line, C_BLUE.stroke_width(2)))?;
        chart.draw_series(
            quantiles
                .iter()
                .map(|&p| Circle::new(p, 4, C_ORANGE.filled())),
        )?;
        marks_end(root)?;
        legend(
            root,
            &[
                (Key::Line, C_BLUE, "share of turns ≤ x"),
                (Key::Dot, C_ORANGE, "p50, p90, p99"),
            ],
        )
    })
}

/// TTFT p50 and p90 per turn index, turn 0 set apart.
fn ttft_by_turn(ok: &[&TurnRecord], covers: &str) -> Figure {
    const NAME: &str = "ttft_by_turn";
    const TITLE: &str = "TTFT by turn index";
    let mut by: BTreeMap<u32, Vec<f64>> = BTreeMap::new();
    for r in ok {
        if let Some(t) = r.ttft_ms.filter(|t| t.is_finite()) {
            by.entry(r.turn_index.min(TURN_INDEX_CAP))
                .or_default()
                .push(t);
        }
    }
    if by.is_empty() {
        return Figure::empty(
            NAME,
            TITLE,
            covers,
            "No measured ok turn has a time to first token: nothing to plot.",
        );
    }
    // (index, p50, p90, n)
    let rows: Vec<(f64, f64, f64, usize)> = by
        .into_iter()
        .filter_map(|(i, v)| {
            let s = sorted_finite(v);
            Some((
                f64::from(i),
                percentile(&s, 0.5)?,
                percentile(&s, 0.9)?,
                s.len(),
            ))
        })
        .collect();
    let first = rows.iter().find(|r| r.0 == 0.0).copied();
    let later: Vec<f64> = ok
        .iter()
        .filter(|r| r.turn_index > 0)
        .filter_map(|r| r.ttft_ms)
        .collect();
    let later_p50 = percentile(&sorted_finite(later.iter().copied()), 0.5);
    let caption = format!(
        "TTFT p50 (line with dots) and p90 (thin line) per turn index; turn 0, a session's first \
         turn with no prefix of its own cached yet, is the orange mark ({} turns, p50 {}); the {} \
         later turns have p50 {}. Indices of {TURN_INDEX_CAP} and more are pooled at \
         {TURN_INDEX_CAP}. {covers}",
        first.map_or(0, |f| f.3),
        ms(first.map(|f| f.1)),
        later.len(),
        ms(later_p50),
    );
    let max_i = rows.last().map_or(0.0, |r| r.0);
    let y = range_of(rows.iter().map(|r| r.2), true);
    Figure::drawn(NAME, TITLE, caption, SIZE, |root| {
        let mut chart = frame(
            root,
            &Axes {
                x_desc: "turn index (0 = first turn)",
                y_desc: "TTFT, ms",
                x: -0.5..max_i + 0.5,
                y,
                ..Axes::default()
            },
        )?;
        marks_start(root)?;
        chart.draw_series(LineSeries::new(
            rows.iter().map(|r| (r.0, r.2)),
            C_PURPLE.mix(0.8).stroke_width(1),
        ))?;
        chart.draw_series(
            LineSeries::new(rows.iter().map(|r| (r.0, r.1)), C_BLUE.stroke_width(2)).point_size(3),
        )?;
        if let Some(f) = first {
            chart.draw_series([
                Circle::new((0.0, f.1), 6, C_ORANGE.filled()),
                Circle::new((0.0, f.2), 5, C_ORANGE.stroke_width(2)),
            ])?;
        }
        marks_end(root)?;
        legend(
            root,
            &[
                (Key::Line, C_BLUE, "p50"),
                (Key::Line, C_PURPLE, "p90"),
                (
                    Key::Dot,
                    C_ORANGE,
                    "turn 0 (first turns): p50 filled, p90 hollow",
                ),
            ],
        )
    })
}

/// TTFT against input tokens, one dot per turn (at most [`MAX_SCATTER_POINTS`]).
fn ttft_vs_input(ok: &[&TurnRecord], covers: &str) -> Figure {
    const NAME: &str = "ttft_vs_input";
    const TITLE: &str = "TTFT against input tokens";
    let all: Vec<(f64, f64, bool)> = ok
        .iter()
        .filter_map(|r| Some((r.input_tokens? as f64, r.ttft_ms?, r.turn_index == 0)))
        .filter(|p| p.0.is_finite() && p.1.is_finite())
        .collect();
    if all.is_empty() {
        return Figure::empty(
            NAME,
            TITLE,
            covers,
            "No measured ok turn has both a TTFT and an input-token count: nothing to plot.",
        );
    }
    let shown = thin(&all, MAX_SCATTER_POINTS);
    let thinned = if shown.len() < all.len() {
        format!(
            " {} of the {} turns are drawn, evenly spaced in record order.",
            count(shown.len()),
            count(all.len())
        )
    } else {
        String::new()
    };
    let caption = format!(
        "One dot per turn: its TTFT against its prompt's input tokens; first turns (turn 0) \
         orange, later turns blue.{thinned} {covers}"
    );
    let x = range_of(shown.iter().map(|p| p.0), true);
    let y = range_of(shown.iter().map(|p| p.1), true);
    Figure::drawn(NAME, TITLE, caption, SIZE, |root| {
        let mut chart = frame(
            root,
            &Axes {
                x_desc: "input tokens",
                y_desc: "TTFT, ms",
                x,
                y,
                ..Axes::default()
            },
        )?;
        marks_start(root)?;
        chart.draw_series(
            shown
                .iter()
                .filter(|p| !p.2)
                .map(|p| Circle::new((p.0, p.1), 2, C_BLUE.mix(0.45).filled())),
        )?;
        chart.draw_series(
            shown
                .iter()
                .filter(|p| p.2)
                .map(|p| Circle::new((p.0, p.1), 3, C_ORANGE.mix(0.75).filled())),
        )?;
        marks_end(root)?;
        legend(
            root,
            &[
                (Key::Dot, C_BLUE, "later turns"),
                (Key::Dot, C_ORANGE, "first turns (turn 0)"),
            ],
        )
    })
}

/// Output tok/s in time buckets, with the sessions active over the same buckets.
fn throughput(
    measured: &[&TurnRecord],
    ok: &[&TurnRecord],
    window: Option<(f64, f64)>,
    covers: &str,
) -> Figure {
    const NAME: &str = "throughput_over_time";
    const TITLE: &str = "Output throughput and active sessions over time";
    let finite = |t: f64| t.is_finite().then_some(t);
    let t_min = measured
        .iter()
        .filter_map(|r| finite(r.due_s.min(r.sent_s)))
        .min_by(f64::total_cmp);
    let t_max = measured
        .iter()
        .filter_map(|r| finite(r.end_s))
        .max_by(f64::total_cmp);
    let (Some(t0), Some(t1)) = (t_min, t_max) else {
        return Figure::empty(NAME, TITLE, covers, "No measured turn: nothing to plot.");
    };
    let bucket = nice_ceil(((t1 - t0) / MAX_BUCKETS).max(1.0));
    let k0 = (t0 / bucket).floor() as i64;
    let n = (((t1 / bucket).floor() as i64 - k0).max(0) + 1) as usize;
    let mut tokens = vec![0.0_f64; n];
    let add = |a: f64, b: f64, amount: f64, into: &mut Vec<f64>| {
        // `amount` spread uniformly over [a, b] (all at b when empty).
        if b <= a {
            let k = ((b / bucket).floor() as i64 - k0).clamp(0, n as i64 - 1) as usize;
            into[k] += amount;
            return;
        }
        let rate = amount / (b - a);
        // Only the chart's buckets (a first token far outside the run would loop for long).
        let ka = ((a / bucket).floor() as i64).max(k0);
        let kb = ((b / bucket).floor() as i64).min(k0 + n as i64 - 1);
        for k in ka..=kb {
            let i = k - k0;
            let lo = a.max(k as f64 * bucket);
            let hi = b.min((k + 1) as f64 * bucket);
            if hi > lo {
                into[i as usize] += rate * (hi - lo);
            }
        }
    };
    for r in ok {
        let Some(out) = r.output_tokens.filter(|n| *n > 0) else {
            continue;
        };
        let Some(b) = finite(r.end_s) else { continue };
        let a = r.first_token_s.and_then(finite).unwrap_or(b);
        add(a, b, out as f64, &mut tokens);
    }
    // Session plays: from their first turn's due time to their last turn's end.
    let mut plays: BTreeMap<(&str, u32), (f64, f64)> = BTreeMap::new();
    for r in measured {
        let (Some(a), Some(b)) = (finite(r.due_s.min(r.sent_s)), finite(r.end_s)) else {
            continue;
        };
        let e = plays
            .entry((r.session_id.as_str(), r.replay))
            .or_insert((a, b));
        e.0 = e.0.min(a);
        e.1 = e.1.max(b);
    }
    let mut active = vec![0.0_f64; n];
    for &(a, b) in plays.values() {
        if b > a {
            // Σ overlap ÷ bucket = time-weighted mean of plays in flight.
            add(a, b, b - a, &mut active);
        }
    }
    let mid = |i: usize| (k0 + i as i64) as f64 * bucket + bucket / 2.0;
    let rate: Vec<(f64, f64)> = (0..n).map(|i| (mid(i), tokens[i] / bucket)).collect();
    let active: Vec<(f64, f64)> = (0..n).map(|i| (mid(i), active[i] / bucket)).collect();
    let caption = format!(
        "Output tokens per second in {} s buckets (each turn's output spread evenly from its \
         first token to its end), over the measured ok turns; and, on the right axis, the mean \
         number of session plays in flight in each bucket (from a play's first due turn to its \
         last byte, measured turns of any status){}. {covers}",
        axis_num(bucket),
        if window.is_some() {
            "; the steady window is shaded"
        } else {
            ""
        }
    );
    let x = (k0 as f64 * bucket)..((k0 + n as i64) as f64 * bucket);
    let y = range_of(rate.iter().map(|p| p.1), true);
    let ya = range_of(active.iter().map(|p| p.1), true);
    Figure::drawn(NAME, TITLE, caption, SIZE, |root| {
        let axes = Axes {
            x_desc: "time since the run started, s",
            y_desc: "output tok/s",
            x: x.clone(),
            y: y.clone(),
            right: 66,
        };
        let mut chart = build(root, &axes)?.set_secondary_coord(x.clone(), ya);
        mesh(&mut chart, &axes)?;
        chart
            .configure_secondary_axes()
            .y_desc("active sessions")
            .axis_desc_style(("sans-serif", DESC_FONT))
            .label_style(("sans-serif", LABEL_FONT))
            .y_label_formatter(&|v| axis_num(*v))
            .draw()?;
        if let Some((a, b)) = window {
            chart.draw_series([Rectangle::new(
                [(a.max(x.start), y.start), (b.min(x.end), y.end)],
                C_SHADE.mix(0.22).filled(),
            )])?;
        }
        marks_start(root)?;
        chart.draw_series(
            LineSeries::new(rate.iter().copied(), C_BLUE.stroke_width(2))
                .point_size(if rate.len() < 3 { 3 } else { 0 }),
        )?;
        chart.draw_secondary_series(
            LineSeries::new(active.iter().copied(), C_GREEN.stroke_width(2))
                .point_size(if active.len() < 3 { 3 } else { 0 }),
        )?;
        marks_end(root)?;
        let mut keys = vec![
            (Key::Line, C_BLUE, "output tok/s (left axis)"),
            (Key::Line, C_GREEN, "active sessions (right axis)"),
        ];
        if window.is_some() {
            keys.push((Key::Box, C_SHADE_KEY, "steady window"));
        }
        legend(root, &keys)
    })
}

/// One line of a server chart: its label, the figure it reads, its color.
type ServerSeries = (&'static str, fn(&ServerPoint) -> Option<f64>, RGBColor);
/// A line as drawn: label, points, color.
type Line<'a> = (&'a str, Vec<(f64, f64)>, RGBColor);
/// A timeline row: its bars and its tool waits.
type Row = (Vec<Bar>, Vec<(f64, f64)>);

/// A server chart: which figures of the scrapes it plots.
struct ServerChart {
    name: &'static str,
    title: &'static str,
    /// What the figures are, for the empty note.
    what: &'static str,
    y_desc: &'static str,
    /// The figure is multiplied by this (100: a share drawn as %).
    scale: f64,
    series: &'static [ServerSeries],
}

/// Lines over the run's `/metrics` scrapes, the measured phase shaded.
fn server_chart(points: &[ServerPoint], c: ServerChart) -> Figure {
    let finite: Vec<&ServerPoint> = points.iter().filter(|p| p.t_s.is_finite()).collect();
    let measured: Vec<f64> = finite
        .iter()
        .filter(|p| p.measured)
        .map(|p| p.t_s)
        .collect();
    let caption = format!(
        "From the server's own /metrics, scraped during the run ({} scrapes, {} in the measured \
         phase, which is shaded): server-side figures, not turn records.",
        finite.len(),
        measured.len()
    );
    if finite.is_empty() {
        return Figure::empty(
            c.name,
            c.title,
            caption,
            "No /metrics scrapes: the run did not scrape the server (--no-metrics, or a run \
             without scrapes.jsonl), so there is nothing to plot.",
        );
    }
    let series: Vec<Line<'_>> = c
        .series
        .iter()
        .map(|(label, get, color)| {
            let pts: Vec<(f64, f64)> = finite
                .iter()
                .filter_map(|p| Some((p.t_s, get(p)? * c.scale)))
                .filter(|p| p.1.is_finite())
                .collect();
            (*label, thin(&pts, MAX_LINE_POINTS), *color)
        })
        .filter(|s| !s.1.is_empty())
        .collect();
    if series.is_empty() {
        return Figure::empty(
            c.name,
            c.title,
            caption,
            format!(
                "The server's /metrics reported no {} in any of the {} scrapes.",
                c.what,
                finite.len()
            ),
        );
    }
    let shade = match (
        measured.iter().copied().min_by(f64::total_cmp),
        measured.iter().copied().max_by(f64::total_cmp),
    ) {
        (Some(a), Some(b)) if b > a => Some((a, b)),
        _ => None,
    };
    let x = range_of(finite.iter().map(|p| p.t_s), false);
    let mut y = range_of(series.iter().flat_map(|s| s.1.iter().map(|p| p.1)), true);
    if c.scale == 100.0 {
        y = 0.0..y.end.max(100.0);
    }
    Figure::drawn(c.name, c.title, caption, SIZE, |root| {
        let mut chart = frame(
            root,
            &Axes {
                x_desc: "time since the run started, s",
                y_desc: c.y_desc,
                x,
                y: y.clone(),
                ..Axes::default()
            },
        )?;
        if let Some((a, b)) = shade {
            chart.draw_series([Rectangle::new(
                [(a, y.start), (b, y.end)],
                C_SHADE.mix(0.22).filled(),
            )])?;
        }
        marks_start(root)?;
        for (_, pts, color) in &series {
            let color = *color;
            chart.draw_series(
                LineSeries::new(pts.iter().copied(), color.stroke_width(2))
                    .point_size(if pts.len() <= 60 { 2 } else { 0 }),
            )?;
        }
        marks_end(root)?;
        let mut keys: Vec<(Key, RGBColor, &str)> =
            series.iter().map(|s| (Key::Line, s.2, s.0)).collect();
        if shade.is_some() {
            keys.push((Key::Box, C_SHADE_KEY, "measured phase"));
        }
        legend(root, &keys)
    })
}

/// One bar of the timeline: `[x0, x1]` s, whether a turn in it failed.
#[derive(Clone, Copy)]
struct Bar {
    x0: f64,
    x1: f64,
    failed: bool,
}

/// A play's bars, turns closer than `min_gap` s merged; and its tool waits.
fn bars(turns: &[&TurnRecord], min_gap: f64) -> Row {
    let mut bars: Vec<Bar> = Vec::new();
    let mut waits = Vec::new();
    for r in turns {
        let next = Bar {
            x0: r.sent_s,
            x1: r.end_s.max(r.sent_s),
            failed: r.status != TurnStatus::Ok,
        };
        match bars.last_mut() {
            Some(cur) if next.x0 - cur.x1 < min_gap => {
                cur.x1 = cur.x1.max(next.x1);
                cur.failed |= next.failed;
            }
            Some(cur) => {
                waits.push((cur.x1, next.x0));
                bars.push(next);
            }
            None => bars.push(next),
        }
    }
    (bars, waits)
}

/// Each session play as a row: its turns as bars, its tool waits as thin bars between.
/// The measured session plays (turns of any status with finite times), each its turns in send
/// order, the plays by start time (ties: by session id and replay): the timeline's rows.
pub(super) fn plays<'a>(measured: &[&'a TurnRecord]) -> Vec<Vec<&'a TurnRecord>> {
    let mut plays: BTreeMap<(&str, u32), Vec<&TurnRecord>> = BTreeMap::new();
    for r in measured
        .iter()
        .filter(|r| r.sent_s.is_finite() && r.end_s.is_finite())
    {
        plays
            .entry((r.session_id.as_str(), r.replay))
            .or_default()
            .push(r);
    }
    let mut plays: Vec<Vec<&TurnRecord>> = plays.into_values().collect();
    for p in &mut plays {
        p.sort_by(|a, b| {
            a.sent_s
                .total_cmp(&b.sent_s)
                .then(a.turn_index.cmp(&b.turn_index))
        });
    }
    // The stable sort keeps the BTreeMap's order among equal starts.
    plays.sort_by(|a, b| a[0].sent_s.total_cmp(&b[0].sent_s));
    plays
}

fn timeline(measured: &[&TurnRecord], skipped: usize) -> Figure {
    const NAME: &str = "session_timeline";
    const TITLE: &str = "Session timeline";
    let mut plays = plays(measured);
    let total = plays.len();
    plays.truncate(MAX_TIMELINE_PLAYS);
    let shown = plays.len();
    let covers = format!(
        "Covers measured turns of any status; {} warmup or superseded records are skipped.",
        count(skipped)
    );
    if shown == 0 {
        return Figure::empty(NAME, TITLE, covers, "No measured turn: nothing to plot.");
    }
    let x = range_of(
        plays
            .iter()
            .flat_map(|p| p.iter().flat_map(|r| [r.sent_s, r.end_s])),
        false,
    );
    // One pixel of the plot, s; bars narrower than that are widened to it.
    let px = (x.end - x.start) / f64::from(TIMELINE_WIDTH - 90);
    let mut min_gap = px;
    let mut layout: Vec<Row>;
    let mut tries = 0;
    loop {
        layout = plays.iter().map(|p| bars(p, min_gap)).collect();
        let marks: usize = layout.iter().map(|(b, w)| b.len() + w.len()).sum();
        tries += 1;
        if marks <= MAX_TIMELINE_BARS || tries > 60 {
            break;
        }
        min_gap *= 2.0;
    }
    let capped = if shown < total {
        format!(
            " Only the first {shown} of the {} plays by start time are shown.",
            count(total)
        )
    } else {
        String::new()
    };
    let merged = if tries > 1 {
        format!(
            " Turns less than {} s apart are drawn as one bar, to bound the chart's size.",
            axis_num(min_gap)
        )
    } else {
        String::new()
    };
    let caption = format!(
        "One row per session play ({} plays, the earliest at the top): each turn a bar from \
         its send to its last byte (blue ok, red failed), each tool wait — the previous turn's \
         end to the next turn's send — a thin grey bar.{capped}{merged} {covers}",
        count(total)
    );
    let height = (shown as u32 * 5 + 110).max(240);
    let top = shown as f64 - 1.0;
    Figure::drawn(NAME, TITLE, caption, (TIMELINE_WIDTH, height), |root| {
        let mut chart = build(
            root,
            &Axes {
                x: x.clone(),
                y: -0.7..top + 0.7,
                ..Axes::default()
            },
        )?;
        chart
            .configure_mesh()
            .disable_y_mesh()
            .x_desc("time since the run started, s")
            .y_desc("session plays by start time")
            .x_labels(10)
            .y_labels(shown.min(10))
            .max_light_lines(2)
            .light_line_style(BLACK.mix(0.04))
            .bold_line_style(BLACK.mix(0.12))
            .axis_desc_style(("sans-serif", DESC_FONT))
            .label_style(("sans-serif", LABEL_FONT))
            .x_label_formatter(&|v| axis_num(*v))
            .y_label_formatter(&|v| {
                let row = top - v.round();
                if row >= 0.0 && (v - v.round()).abs() < 1e-9 {
                    format!("#{}", row as u64 + 1)
                } else {
                    String::new()
                }
            })
            .draw()?;
        marks_start(root)?;
        let (mut waits, mut ok_bars, mut failed_bars) = (Vec::new(), Vec::new(), Vec::new());
        for (i, (row_bars, row_waits)) in layout.iter().enumerate() {
            let y = top - i as f64;
            for &(a, b) in row_waits {
                waits.push(Rectangle::new(
                    [(a, y - 0.12), (b, y + 0.12)],
                    C_GREY.mix(0.7).filled(),
                ));
            }
            for b in row_bars {
                let (into, color) = if b.failed {
                    (&mut failed_bars, C_RED)
                } else {
                    (&mut ok_bars, C_BLUE)
                };
                into.push(Rectangle::new(
                    [(b.x0, y - 0.4), (b.x1.max(b.x0 + px), y + 0.4)],
                    color.filled(),
                ));
            }
        }
        chart.draw_series(waits)?;
        chart.draw_series(ok_bars)?;
        let any_failed = !failed_bars.is_empty();
        if any_failed {
            chart.draw_series(failed_bars)?;
        }
        marks_end(root)?;
        let mut keys = vec![
            (Key::Box, C_BLUE, "turn (ok)"),
            (Key::Box, C_GREY, "tool wait"),
        ];
        if any_failed {
            keys.push((Key::Box, C_RED, "turn (failed)"));
        }
        legend(root, &keys)
    })
}

#[cfg(test)]
mod tests {
    use super::count;

    #[test]
    fn counts_have_separators() {
        assert_eq!(count(0), "0");
        assert_eq!(count(999), "999");
        assert_eq!(count(1000), "1,000");
        assert_eq!(count(100_000), "100,000");
        assert_eq!(count(1_234_567), "1,234,567");
    }
}
