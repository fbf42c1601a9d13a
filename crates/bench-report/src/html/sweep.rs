//! The sweep page: why it stopped, the `--find-max` result, the points table and three charts
//! (`pareto`, `throughput_vs_load`, `ttft_vs_load`); an idle-gap sweep shows its cache
//! retention (the half-life, a table per gap) and charts `cache_retention` and `ttft_vs_load`
//! instead. A point where the client was the bottleneck is flagged in the table and drawn with
//! its own marker in every chart.

use std::fmt::Write as _;

use plotters::prelude::*;

use super::chart::{
    Axes, C_BLUE, C_GREEN, C_GREY, C_ORANGE, C_PURPLE, C_RED, Figure, Key, LABEL_FONT, frame,
    legend, marks_end, marks_start, range_of,
};
use super::{esc, num, pct};
use crate::sweep::{
    HALF_LIFE_KEPT, Retention, SweepAxis, SweepPoint, SweepStop, SweepSummary, fmt_level,
    retention_text,
};
use crate::validity::Verdict;

const SIZE: (u32, u32) = (1000, 420);
/// What the flag says.
const CLIENT_BOUND: &str = "client was the bottleneck";

/// Everything between `<body>` and the configuration.
pub(super) fn body(out: &mut String, s: &SweepSummary) {
    let axis = s.axis.as_str();
    let _ = writeln!(
        out,
        "<header><h1>Sweep over {axis}</h1><p class=\"sub\">{} · {} points</p></header>",
        esc(&s.generated_by),
        s.points.len()
    );
    let stop = match &s.stop {
        SweepStop::Running => "not finished: still running, or its process died".to_owned(),
        SweepStop::Completed => "completed: every listed level was run".to_owned(),
        SweepStop::Saturated { reason } => format!("stopped early (saturation): {reason}"),
        SweepStop::Failed { reason } => format!("stopped: a point failed: {reason}"),
        SweepStop::Interrupted => "stopped: interrupted (Ctrl-C)".to_owned(),
    };
    let _ = writeln!(
        out,
        "<section id=\"stop\">\n<h2>Why the sweep stopped</h2>\n<p class=\"stop\">{}</p>\n</section>",
        esc(&stop)
    );
    if let Some(f) = &s.find_max {
        let best = f.best.map_or_else(
            || "no level met it".to_owned(),
            |b| format!("the highest level that met it is {}", fmt_level(b)),
        );
        let failing = f.first_failing.map_or_else(
            || "the highest bound met it".to_owned(),
            |l| format!("the lowest level tried that did not is {}", fmt_level(l)),
        );
        let _ = writeln!(
            out,
            "<section id=\"find-max\">\n<h2>Find max</h2>\n<p class=\"find-max\">Goodput target \
             {}: {}; {} (resolution {}).</p>\n</section>",
            pct(Some(f.target)),
            esc(&best),
            esc(&failing),
            esc(&fmt_level(f.step))
        );
    }
    if let Some(r) = &s.retention {
        retention_section(out, r);
    }
    points_table(out, s);
    out.push_str("<section id=\"charts\">\n<h2>Charts</h2>\n");
    let figures = match (s.axis, &s.retention) {
        (SweepAxis::IdleGap, Some(r)) => vec![retention_chart(r), ttft_vs_load(s)],
        _ => vec![pareto(s), throughput_vs_load(s), ttft_vs_load(s)],
    };
    for f in figures {
        f.render(out);
    }
    out.push_str("</section>\n");
}

/// The half-life and a row per gap.
fn retention_section(out: &mut String, r: &Retention) {
    let _ = writeln!(
        out,
        "<section id=\"retention\">\n<h2>Cache retention</h2>\n<p class=\"half-life\">\
         <strong>{}</strong></p>\n<p class=\"sub\">Later turns (a session's second and on) \
         after each idle gap: the share of their prompt tokens the server reported cached, and \
         that share over the reference gap's (the cache benefit kept).</p>\n<table \
         class=\"retention\">\n<thead><tr><th>idle gap, s</th><th>cached share</th><th>benefit \
         kept</th><th>TTFT p50, ms</th><th>TTFT vs reference</th></tr></thead>\n<tbody>",
        esc(&retention_text(r))
    );
    for g in &r.gaps {
        let _ = writeln!(
            out,
            "<tr><td class=\"n\">{}</td><td class=\"n\">{}</td><td class=\"n\">{}</td>\
             <td class=\"n\">{}</td><td class=\"n\">{}</td></tr>",
            esc(&fmt_level(g.gap_s)),
            pct(g.cached_ratio),
            pct(g.kept),
            num(g.ttft_later_p50_ms, 1),
            g.ttft_vs_reference
                .map_or_else(|| "n/a".to_owned(), |x| format!("{x:.2}×")),
        );
    }
    out.push_str("</tbody>\n</table>\n</section>\n");
}

/// The share of the cache benefit kept against the idle gap, the half-life marked.
fn retention_chart(r: &Retention) -> Figure {
    const NAME: &str = "cache_retention";
    const TITLE: &str = "Cache benefit kept against idle gap";
    let pts: Vec<(f64, f64)> = r
        .gaps
        .iter()
        .filter_map(|g| Some((g.gap_s, g.kept?)))
        .filter(|p| p.0.is_finite() && p.1.is_finite())
        .collect();
    let caption = format!(
        "One dot per idle gap: the later turns' cached share over the reference gap's (y, 100% \
         at the reference). {}{}",
        retention_text(r),
        if r.half_life_s.is_some() {
            "; the dashed line marks it."
        } else {
            "."
        }
    );
    if pts.len() < 2 {
        return Figure::empty(
            NAME,
            TITLE,
            caption,
            "Fewer than two gaps have a cached share to compare: nothing to plot.",
        );
    }
    let x = range_of(pts.iter().map(|p| p.0 * 1.05), true);
    let y = range_of(
        pts.iter().map(|p| p.1 * 1.05).chain(std::iter::once(1.05)),
        true,
    );
    Figure::drawn(NAME, TITLE, caption, SIZE, |root| {
        let mut chart = frame(
            root,
            &Axes {
                x_desc: SweepAxis::IdleGap.describe(),
                y_desc: "cache benefit kept (1 = as at the reference)",
                x: x.clone(),
                y: y.clone(),
                ..Axes::default()
            },
        )?;
        marks_start(root)?;
        chart.draw_series(
            LineSeries::new(pts.iter().copied(), C_BLUE.stroke_width(2)).point_size(4),
        )?;
        chart.draw_series(LineSeries::new(
            [(x.start, HALF_LIFE_KEPT), (x.end, HALF_LIFE_KEPT)],
            C_GREY.mix(0.7).stroke_width(1),
        ))?;
        let mut keys = vec![
            (Key::Line, C_BLUE, "benefit kept"),
            (Key::Line, C_GREY, "half"),
        ];
        if let Some(h) = r.half_life_s {
            chart.draw_series(DashedLineSeries::new(
                [(h, y.start), (h, y.end)],
                6,
                4,
                C_ORANGE.stroke_width(2),
            ))?;
            keys.push((Key::Line, C_ORANGE, "half-life"));
        }
        marks_end(root)?;
        legend(root, &keys)
    })
}

/// A relative link to a point's run directory (its text only when the path is absolute).
fn run_link(dir: &str) -> String {
    if dir.starts_with('/') || dir.starts_with('\\') || dir.is_empty() {
        return esc(dir);
    }
    let mut href = String::new();
    for b in dir.bytes() {
        if b.is_ascii_alphanumeric() || b"-._~/".contains(&b) {
            href.push(b as char);
        } else {
            let _ = write!(href, "%{b:02X}");
        }
    }
    format!("<a href=\"{href}/\">{}</a>", esc(dir))
}

fn points_table(out: &mut String, s: &SweepSummary) {
    out.push_str(
        "<section id=\"points\">\n<h2>Points</h2>\n<table class=\"points\">\n<thead><tr>\
         <th>level</th><th>run</th><th>turns ok</th><th>turns failed</th><th>output tok/s</th>\
         <th>per-user tok/s</th><th>TTFT p50, ms</th><th>TTFT p99, ms</th><th>goodput</th>\
         <th>verdict</th><th>flags</th></tr></thead>\n<tbody>\n",
    );
    for p in &s.points {
        let mut flags = Vec::new();
        if p.client_bound {
            flags.push(format!("<span class=\"flag\">{CLIENT_BOUND}</span>"));
        }
        if let Some(g) = p.session_goodput {
            flags.push(format!(
                "sessions within the session SLO: {:.1}%",
                g * 100.0
            ));
        }
        if !p.failed_checks.is_empty() {
            flags.push(format!(
                "checks not passed: {}",
                esc(&p.failed_checks.join(", "))
            ));
        }
        let _ = writeln!(
            out,
            "<tr{}><td class=\"n\">{}</td><td>{}</td><td class=\"n\">{}</td><td class=\"n\">{}</td>\
             <td class=\"n\">{}</td><td class=\"n\">{}</td><td class=\"n\">{}</td>\
             <td class=\"n\">{}</td><td class=\"n\">{}</td><td class=\"verdict-cell {v}\">{v}</td>\
             <td>{}</td></tr>",
            if p.client_bound {
                " class=\"client-bound\""
            } else {
                ""
            },
            esc(&fmt_level(p.level)),
            run_link(&p.run_dir),
            p.turns_ok,
            p.turns_failed,
            num(p.output_tps, 1),
            num(p.per_user_tps, 1),
            num(p.ttft_p50_ms, 1),
            num(p.ttft_p99_ms, 1),
            pct(p.goodput),
            flags.join("; "),
            v = verdict_word(p.verdict),
        );
    }
    out.push_str("</tbody>\n</table>\n</section>\n");
}

fn verdict_word(v: Verdict) -> &'static str {
    v.as_str()
}

/// Levels the chart leaves out because they lack a figure, for the caption.
fn missing(points: &[&SweepPoint], what: &str) -> String {
    if points.is_empty() {
        return String::new();
    }
    let levels: Vec<String> = points.iter().map(|p| fmt_level(p.level)).collect();
    format!(" Not drawn (no {what}): {}.", levels.join(", "))
}

/// How the client-bound points are drawn, for the caption.
fn client_note(points: &[&SweepPoint]) -> String {
    let bound: Vec<String> = points
        .iter()
        .filter(|p| p.client_bound)
        .map(|p| fmt_level(p.level))
        .collect();
    if bound.is_empty() {
        " No point was client-bound.".to_owned()
    } else {
        format!(
            " Red crosses: the {CLIENT_BOUND} ({} {}), so {} understate the server.",
            if bound.len() == 1 { "level" } else { "levels" },
            bound.join(", "),
            if bound.len() == 1 {
                "that point may"
            } else {
                "those points may"
            }
        )
    }
}

/// System output tok/s against per-user output tok/s, one labeled point per level.
fn pareto(s: &SweepSummary) -> Figure {
    const NAME: &str = "pareto";
    const TITLE: &str = "System throughput against per-user throughput";
    let mut pts: Vec<(&SweepPoint, f64, f64)> = s
        .points
        .iter()
        .filter_map(|p| Some((p, p.per_user_tps?, p.output_tps?)))
        .filter(|(_, x, y)| x.is_finite() && y.is_finite())
        .collect();
    pts.sort_by(|a, b| a.0.level.total_cmp(&b.0.level));
    let without: Vec<&SweepPoint> = s
        .points
        .iter()
        .filter(|p| !pts.iter().any(|q| std::ptr::eq(q.0, *p)))
        .collect();
    let drawn: Vec<&SweepPoint> = pts.iter().map(|p| p.0).collect();
    let caption = format!(
        "One point per load level ({}), labeled with its level: the system's output tok/s over \
         the steady window (y) against the median per-user output rate (x); the grey line joins \
         the levels in order.{}{}",
        s.axis.as_str(),
        client_note(&drawn),
        missing(&without, "throughput figures")
    );
    if pts.is_empty() {
        return Figure::empty(
            NAME,
            TITLE,
            caption,
            "No point has both a system and a per-user output throughput: nothing to plot.",
        );
    }
    let x = range_of(pts.iter().map(|p| p.1 * 1.08), true);
    let y = range_of(pts.iter().map(|p| p.2 * 1.08), true);
    Figure::drawn(NAME, TITLE, caption, SIZE, |root| {
        let mut chart = frame(
            root,
            &Axes {
                x_desc: "per-user output tok/s (median per session play)",
                y_desc: "system output tok/s",
                x,
                y,
                ..Axes::default()
            },
        )?;
        marks_start(root)?;
        chart.draw_series(LineSeries::new(
            pts.iter().map(|p| (p.1, p.2)),
            C_GREY.mix(0.6).stroke_width(1),
        ))?;
        chart.draw_series(
            pts.iter()
                .filter(|p| !p.0.client_bound)
                .map(|p| Circle::new((p.1, p.2), 5, C_BLUE.filled())),
        )?;
        if pts.iter().any(|p| p.0.client_bound) {
            chart.draw_series(
                pts.iter()
                    .filter(|p| p.0.client_bound)
                    .map(|p| Cross::new((p.1, p.2), 6, C_RED.stroke_width(3))),
            )?;
        }
        marks_end(root)?;
        chart.draw_series(pts.iter().map(|p| {
            EmptyElement::at((p.1, p.2))
                + Text::new(fmt_level(p.0.level), (8, -18), ("sans-serif", LABEL_FONT))
        }))?;
        let mut keys = vec![(Key::Dot, C_BLUE, "load level (labeled)")];
        if pts.iter().any(|p| p.0.client_bound) {
            keys.push((Key::Cross, C_RED, CLIENT_BOUND));
        }
        legend(root, &keys)
    })
}

/// One or more figures against the load level, client-bound points crossed.
struct LoadSeries {
    label: &'static str,
    get: fn(&SweepPoint) -> Option<f64>,
    color: RGBColor,
}

/// A chart against the load level.
struct LoadChart<'s> {
    name: &'static str,
    title: &'s str,
    y_desc: &'s str,
    /// The caption's first sentence.
    lead: &'s str,
    /// What a point may lack, for the notes ("TTFT figures").
    what: &'s str,
    series: &'s [LoadSeries],
}

fn load_chart(s: &SweepSummary, c: LoadChart<'_>) -> Figure {
    let LoadChart {
        name,
        title,
        y_desc,
        lead,
        what,
        series,
    } = c;
    let mut points: Vec<&SweepPoint> = s.points.iter().filter(|p| p.level.is_finite()).collect();
    points.sort_by(|a, b| a.level.total_cmp(&b.level));
    // Each series with its points: (level, figure, client-bound).
    type Points = Vec<(f64, f64, bool)>;
    let lines: Vec<(&LoadSeries, Points)> = series
        .iter()
        .map(|ls| {
            let pts = points
                .iter()
                .filter_map(|p| Some((p.level, (ls.get)(p)?, p.client_bound)))
                .filter(|p| p.1.is_finite())
                .collect();
            (ls, pts)
        })
        .collect();
    let without: Vec<&SweepPoint> = points
        .iter()
        .copied()
        .filter(|p| series.iter().all(|ls| (ls.get)(p).is_none()))
        .collect();
    let caption = format!(
        "{lead}, one dot per load level ({}).{}{}",
        s.axis.as_str(),
        client_note(&points),
        missing(&without, what)
    );
    if lines.iter().all(|l| l.1.is_empty()) {
        return Figure::empty(
            name,
            title.to_owned(),
            caption,
            format!("No point has {what}: nothing to plot."),
        );
    }
    let x = range_of(lines.iter().flat_map(|l| l.1.iter().map(|p| p.0)), true);
    let y = range_of(
        lines.iter().flat_map(|l| l.1.iter().map(|p| p.1 * 1.05)),
        true,
    );
    let x_desc = s.axis.describe();
    Figure::drawn(name, title.to_owned(), caption, SIZE, |root| {
        let mut chart = frame(
            root,
            &Axes {
                x_desc,
                y_desc,
                x,
                y,
                ..Axes::default()
            },
        )?;
        marks_start(root)?;
        for (ls, pts) in lines.iter().filter(|l| !l.1.is_empty()) {
            let color = ls.color;
            chart.draw_series(
                LineSeries::new(pts.iter().map(|p| (p.0, p.1)), color.stroke_width(2))
                    .point_size(4),
            )?;
        }
        let crosses: Vec<(f64, f64)> = lines
            .iter()
            .flat_map(|l| l.1.iter().filter(|p| p.2).map(|p| (p.0, p.1)))
            .collect();
        let has_crosses = !crosses.is_empty();
        if has_crosses {
            chart.draw_series(
                crosses
                    .into_iter()
                    .map(|p| Cross::new(p, 7, C_RED.stroke_width(3))),
            )?;
        }
        marks_end(root)?;
        let mut keys: Vec<(Key, RGBColor, &str)> = lines
            .iter()
            .filter(|l| !l.1.is_empty())
            .map(|l| (Key::Line, l.0.color, l.0.label))
            .collect();
        if has_crosses {
            keys.push((Key::Cross, C_RED, CLIENT_BOUND));
        }
        legend(root, &keys)
    })
}

fn throughput_vs_load(s: &SweepSummary) -> Figure {
    load_chart(
        s,
        LoadChart {
            name: "throughput_vs_load",
            title: "Output throughput against load",
            y_desc: "output tok/s",
            lead: "The system's output tok/s over the steady window and the median per-user \
                   output rate",
            what: "output throughput figures",
            series: &[
                LoadSeries {
                    label: "system output tok/s",
                    get: |p| p.output_tps,
                    color: C_BLUE,
                },
                LoadSeries {
                    label: "per-user output tok/s (median)",
                    get: |p| p.per_user_tps,
                    color: C_PURPLE,
                },
            ],
        },
    )
}

fn ttft_vs_load(s: &SweepSummary) -> Figure {
    load_chart(
        s,
        LoadChart {
            name: "ttft_vs_load",
            title: "TTFT against load",
            y_desc: "TTFT, ms",
            lead: "TTFT p50 and p99 over the steady window",
            what: "TTFT figures",
            series: if s.axis == SweepAxis::IdleGap {
                &[
                    LoadSeries {
                        label: "TTFT p50",
                        get: |p| p.ttft_p50_ms,
                        color: C_BLUE,
                    },
                    LoadSeries {
                        label: "TTFT p50, later turns",
                        get: |p| p.ttft_later_p50_ms,
                        color: C_GREEN,
                    },
                    LoadSeries {
                        label: "TTFT p99",
                        get: |p| p.ttft_p99_ms,
                        color: C_ORANGE,
                    },
                ]
            } else {
                &[
                    LoadSeries {
                        label: "TTFT p50",
                        get: |p| p.ttft_p50_ms,
                        color: C_BLUE,
                    },
                    LoadSeries {
                        label: "TTFT p99",
                        get: |p| p.ttft_p99_ms,
                        color: C_ORANGE,
                    },
                ]
            },
        },
    )
}

#[cfg(test)]
mod tests {
    use super::run_link;

    #[test]
    fn run_links_are_relative_and_encoded() {
        assert_eq!(run_link("c8"), "<a href=\"c8/\">c8</a>");
        assert_eq!(
            run_link("a b\"<x>"),
            "<a href=\"a%20b%22%3Cx%3E/\">a b&quot;&lt;x&gt;</a>"
        );
        assert_eq!(run_link("http://x"), "<a href=\"http%3A//x/\">http://x</a>");
        assert_eq!(run_link("/abs/dir"), "/abs/dir");
    }
}
