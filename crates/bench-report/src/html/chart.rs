//! One chart: drawn with plotters' SVG backend into a string, its data marks wrapped in
//! `<g class="marks">` (so a reader, or a test, can tell the data from the axes), inside a
//! `<figure class="chart" data-chart="NAME">` with its caption — or, when there is nothing to
//! draw, the same figure with a `<p class="empty">` saying why.
//!
//! Text needs no font files: without plotters' `ttf`/`ab_glyph` features its text layout is an
//! estimate from the string's length, and the SVG backend writes `<text>` elements the browser
//! lays out itself.

use std::error::Error;
use std::fmt::Write as _;
use std::ops::Range;

use plotters::coord::Shift;
use plotters::coord::types::RangedCoordf64;
use plotters::prelude::*;

use super::esc;

/// The drawing area every chart is drawn on.
pub(super) type Area<'a> = DrawingArea<SVGBackend<'a>, Shift>;
/// A chart context with two linear `f64` axes.
pub(super) type Chart<'a, 'b> =
    ChartContext<'a, SVGBackend<'b>, Cartesian2d<RangedCoordf64, RangedCoordf64>>;
/// What drawing returns (plotters' errors boxed).
pub(super) type DrawResult<T = ()> = Result<T, Box<dyn Error>>;

/// Colors of the series (a colour-blind-safe categorical palette).
pub(super) const C_BLUE: RGBColor = RGBColor(31, 119, 180);
pub(super) const C_ORANGE: RGBColor = RGBColor(230, 110, 0);
pub(super) const C_GREEN: RGBColor = RGBColor(44, 150, 44);
pub(super) const C_RED: RGBColor = RGBColor(200, 30, 30);
pub(super) const C_PURPLE: RGBColor = RGBColor(128, 80, 180);
pub(super) const C_GREY: RGBColor = RGBColor(140, 140, 140);
/// The shading of a time window (the steady window, the measured phase).
pub(super) const C_SHADE: RGBColor = RGBColor(255, 200, 80);
/// The shading as its legend key shows it (the shade over white).
pub(super) const C_SHADE_KEY: RGBColor = RGBColor(255, 228, 168);

/// Pixels marking where the data marks start and end: replaced by `<g class="marks">` and
/// `</g>` once the SVG is drawn. Colors no chart uses.
const START_MARK: RGBColor = RGBColor(1, 2, 3);
const END_MARK: RGBColor = RGBColor(3, 2, 1);

/// What a figure shows.
pub(super) enum Body {
    /// An inline `<svg>`.
    Svg(String),
    /// Why there is no chart (HTML-escaped when rendered).
    Empty(String),
}

/// One `<figure class="chart">`.
pub(super) struct Figure {
    /// The `data-chart` name.
    pub name: &'static str,
    /// The heading inside the caption.
    pub title: String,
    /// What it shows and which records it covers (plain text, escaped when rendered).
    pub caption: String,
    /// The chart, or why there is none.
    pub body: Body,
}

impl Figure {
    /// A figure whose chart is drawn by `draw` on a `size` canvas; a drawing error becomes the
    /// empty note.
    pub fn drawn(
        name: &'static str,
        title: impl Into<String>,
        caption: impl Into<String>,
        size: (u32, u32),
        draw: impl FnOnce(&Area<'_>) -> DrawResult,
    ) -> Figure {
        let title = title.into();
        let body = match svg(size, &title, draw) {
            Ok(svg) => Body::Svg(svg),
            Err(e) => Body::Empty(format!("the chart could not be drawn: {e}")),
        };
        Figure {
            name,
            title,
            caption: caption.into(),
            body,
        }
    }

    /// A figure with no chart, saying why.
    pub fn empty(
        name: &'static str,
        title: impl Into<String>,
        caption: impl Into<String>,
        why: impl Into<String>,
    ) -> Figure {
        Figure {
            name,
            title: title.into(),
            caption: caption.into(),
            body: Body::Empty(why.into()),
        }
    }

    /// Appends the figure's HTML to `out`.
    pub fn render(&self, out: &mut String) {
        let _ = writeln!(
            out,
            "<figure class=\"chart\" data-chart=\"{}\" id=\"chart-{}\">",
            self.name, self.name
        );
        match &self.body {
            Body::Svg(svg) => out.push_str(svg),
            Body::Empty(why) => {
                let _ = writeln!(out, "<p class=\"empty\">{}</p>", esc(why));
            }
        }
        let _ = writeln!(
            out,
            "<figcaption><strong>{}.</strong> {}</figcaption>\n</figure>",
            esc(&self.title),
            esc(&self.caption)
        );
    }
}

/// Draws onto a fresh `size` SVG and returns it ready to inline: the namespace attribute dropped
/// (an inline `<svg>` is in the SVG namespace anyway, and the page then names no URL), an
/// accessible label added, the data marks grouped.
fn svg(
    size: (u32, u32),
    label: &str,
    draw: impl FnOnce(&Area<'_>) -> DrawResult,
) -> Result<String, Box<dyn Error>> {
    let mut buf = String::new();
    {
        let root = SVGBackend::with_string(&mut buf, size).into_drawing_area();
        root.fill(&WHITE)?;
        draw(&root)?;
        root.present()?;
    }
    let buf = buf.replacen(" xmlns=\"http://www.w3.org/2000/svg\"", "", 1);
    let buf = buf.replacen(
        "<svg ",
        &format!(
            "<svg class=\"plot\" role=\"img\" aria-label=\"{}\" ",
            esc(label)
        ),
        1,
    );
    let buf = replace_pixel(&buf, START_MARK, "<g class=\"marks\">\n");
    let mut buf = replace_pixel(&buf, END_MARK, "</g>\n");
    if buf.matches("<g class=\"marks\">").count() != buf.matches("</g>").count() {
        // An end mark went missing: close the group before the end of the SVG.
        if let Some(at) = buf.rfind("</svg>") {
            buf.insert_str(at, "</g>\n");
        }
    }
    Ok(buf)
}

/// Replaces the one-pixel `<rect>` of `color` (drawn by [`marks_start`]/[`marks_end`]) by `with`.
fn replace_pixel(svg: &str, color: RGBColor, with: &str) -> String {
    let RGBColor(r, g, b) = color;
    let needle = format!("fill=\"#{r:02X}{g:02X}{b:02X}\"");
    let Some(at) = svg.find(&needle) else {
        return svg.to_owned();
    };
    let (Some(start), Some(end)) = (svg[..at].rfind("<rect"), svg[at..].find("/>")) else {
        return svg.to_owned();
    };
    let mut end = at + end + 2;
    if svg[end..].starts_with('\n') {
        end += 1;
    }
    let mut out = String::with_capacity(svg.len());
    out.push_str(&svg[..start]);
    out.push_str(with);
    out.push_str(&svg[end..]);
    out
}

/// Everything drawn from here to [`marks_end`] is the chart's data.
pub(super) fn marks_start(root: &Area<'_>) -> DrawResult {
    root.draw_pixel((0, 0), &START_MARK)?;
    Ok(())
}

/// Ends the data marks (legends and labels after this are not data).
pub(super) fn marks_end(root: &Area<'_>) -> DrawResult {
    root.draw_pixel((0, 0), &END_MARK)?;
    Ok(())
}

/// Axis descriptions and ranges of a chart.
#[derive(Default)]
pub(super) struct Axes<'s> {
    /// The x axis' description.
    pub x_desc: &'s str,
    /// The y axis' description.
    pub y_desc: &'s str,
    /// The x range.
    pub x: Range<f64>,
    /// The y range.
    pub y: Range<f64>,
    /// Room for a second y axis on the right, px (0: none).
    pub right: u32,
}

/// The chart context, its mesh not drawn yet ([`mesh`]; a second y axis must be set first).
pub(super) fn build<'a, 'b>(root: &'a Area<'b>, axes: &Axes<'_>) -> DrawResult<Chart<'a, 'b>> {
    Ok(ChartBuilder::on(root)
        .margin(12)
        .margin_top(LEGEND_ROOM)
        .margin_right(if axes.right > 0 { 4 } else { 20 })
        .x_label_area_size(44)
        .y_label_area_size(66)
        .right_y_label_area_size(axes.right)
        .build_cartesian_2d(axes.x.clone(), axes.y.clone())?)
}

/// Draws the mesh, the axes and their labels.
pub(super) fn mesh(chart: &mut Chart<'_, '_>, axes: &Axes<'_>) -> DrawResult {
    chart
        .configure_mesh()
        .x_desc(axes.x_desc)
        .y_desc(axes.y_desc)
        .x_labels(8)
        .y_labels(6)
        .max_light_lines(2)
        .light_line_style(BLACK.mix(0.04))
        .bold_line_style(BLACK.mix(0.12))
        .axis_desc_style(("sans-serif", DESC_FONT))
        .label_style(("sans-serif", LABEL_FONT))
        .x_label_formatter(&|v| axis_num(*v))
        .y_label_formatter(&|v| axis_num(*v))
        .draw()?;
    Ok(())
}

/// The chart context with its mesh drawn.
pub(super) fn frame<'a, 'b>(root: &'a Area<'b>, axes: &Axes<'_>) -> DrawResult<Chart<'a, 'b>> {
    let mut chart = build(root, axes)?;
    mesh(&mut chart, axes)?;
    Ok(chart)
}

/// Room above the plot for the legend row, px.
pub(super) const LEGEND_ROOM: u32 = 34;
/// Font sizes (plotters' SVG text is drawn at size ÷ 1.24 px).
pub(super) const LABEL_FONT: u32 = 14;
pub(super) const DESC_FONT: u32 = 16;

/// How a legend entry shows its series.
#[derive(Clone, Copy)]
pub(super) enum Key {
    /// A line.
    Line,
    /// A filled dot.
    Dot,
    /// A cross.
    Cross,
    /// A filled box.
    Box,
}

/// The legend as one row above the plot (so it never hides data): each entry its key and label.
pub(super) fn legend(root: &Area<'_>, entries: &[(Key, RGBColor, &str)]) -> DrawResult {
    use plotters::style::text_anchor::{HPos, Pos, VPos};
    let style = TextStyle::from(("sans-serif", LABEL_FONT).into_font())
        .color(&RGBColor(60, 60, 60))
        .pos(Pos::new(HPos::Left, VPos::Center));
    let (mut x, y) = (78, (LEGEND_ROOM / 2) as i32);
    for &(key, color, label) in entries {
        match key {
            Key::Line => root.draw(&PathElement::new(
                vec![(x, y), (x + 18, y)],
                color.stroke_width(3),
            ))?,
            Key::Dot => root.draw(&Circle::new((x + 9, y), 5, color.filled()))?,
            Key::Cross => root.draw(&Cross::new((x + 9, y), 5, color.stroke_width(2)))?,
            Key::Box => root.draw(&Rectangle::new(
                [(x, y - 6), (x + 18, y + 6)],
                color.filled(),
            ))?,
        }
        root.draw(&Text::new(label.to_owned(), (x + 24, y), style.clone()))?;
        // The browser lays the text out: about 0.55 em a character.
        x += 24 + (label.chars().count() as f64 * f64::from(LABEL_FONT) / 1.24 * 0.52) as i32 + 22;
    }
    Ok(())
}

/// A range over `values` (finite ones), starting at 0 when `from_zero`, padded by 5 % above and
/// never empty.
pub(super) fn range_of(values: impl IntoIterator<Item = f64>, from_zero: bool) -> Range<f64> {
    let (mut lo, mut hi) = (f64::INFINITY, f64::NEG_INFINITY);
    for v in values.into_iter().filter(|v| v.is_finite()) {
        lo = lo.min(v);
        hi = hi.max(v);
    }
    if !lo.is_finite() {
        return 0.0..1.0;
    }
    if from_zero {
        lo = lo.min(0.0);
    }
    let pad = if hi > lo {
        (hi - lo) * 0.05
    } else {
        hi.abs().max(1.0) * 0.5
    };
    let lo = if from_zero && lo >= 0.0 { lo } else { lo - pad };
    lo..hi + pad
}

/// A number as an axis tick shows it: `0`, `2.5`, `0.25`, `1500`, `12k`, `1.2M`.
pub(super) fn axis_num(v: f64) -> String {
    let a = v.abs();
    if !v.is_finite() {
        String::new()
    } else if a >= 1e6 {
        trim(format!("{:.1}", v / 1e6)) + "M"
    } else if a >= 1e4 {
        trim(format!("{:.1}", v / 1e3)) + "k"
    } else if a >= 100.0 || a == 0.0 {
        format!("{v:.0}")
    } else if a >= 1.0 {
        trim(format!("{v:.1}"))
    } else {
        trim(format!("{v:.3}"))
    }
}

fn trim(s: String) -> String {
    if s.contains('.') {
        s.trim_end_matches('0').trim_end_matches('.').to_owned()
    } else {
        s
    }
}

/// At most `max` items of `items`, evenly spaced by position (the first and the last kept):
/// deterministic, and the order is kept.
pub(super) fn thin<T: Copy>(items: &[T], max: usize) -> Vec<T> {
    let n = items.len();
    if n <= max {
        return items.to_vec();
    }
    if max < 2 {
        return items.iter().copied().take(max).collect();
    }
    (0..max)
        .map(|k| items[(k as u128 * (n as u128 - 1) / (max as u128 - 1)) as usize])
        .collect()
}

/// The empirical CDF of `sorted` (ascending, finite) as at most `max_steps` steps: the ranks
/// are evenly spaced (the first and the last kept), each step `(value, share of samples ≤ it)`.
pub(super) fn cdf_steps(sorted: &[f64], max_steps: usize) -> Vec<(f64, f64)> {
    let n = sorted.len();
    if n == 0 || max_steps == 0 {
        return Vec::new();
    }
    let ranks: Vec<usize> = thin(&(0..n).collect::<Vec<_>>(), max_steps);
    let mut steps: Vec<(f64, f64)> = Vec::with_capacity(ranks.len());
    for i in ranks {
        // Ties: the step of a value is at its last rank.
        let mut j = i;
        while j + 1 < n && sorted[j + 1] == sorted[i] {
            j += 1;
        }
        let step = (sorted[i], (j + 1) as f64 / n as f64);
        if steps.last().is_none_or(|last| last.0 != step.0) {
            steps.push(step);
        }
    }
    steps
}

/// The staircase of CDF steps as a polyline: up at each step's value.
pub(super) fn staircase(steps: &[(f64, f64)]) -> Vec<(f64, f64)> {
    let mut pts = Vec::with_capacity(steps.len() * 2 + 1);
    let mut prev = 0.0;
    for &(x, f) in steps {
        pts.push((x, prev));
        pts.push((x, f));
        prev = f;
    }
    pts
}

/// The smallest of 1, 2, 5 × 10^k that is at least `x` (`x` > 0).
pub(super) fn nice_ceil(x: f64) -> f64 {
    if !(x.is_finite() && x > 0.0) {
        return 1.0;
    }
    let p = 10f64.powf(x.log10().floor());
    for m in [1.0, 2.0, 5.0, 10.0] {
        if m * p >= x * (1.0 - 1e-12) {
            return m * p;
        }
    }
    10.0 * p
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn cdf_is_bounded_and_ends_at_one() {
        let v: Vec<f64> = (0..100_000).map(f64::from).collect();
        let s = cdf_steps(&v, 1000);
        assert!(s.len() <= 1000, "{}", s.len());
        assert_eq!(s.first(), Some(&(0.0, 1.0 / 100_000.0)));
        assert_eq!(s.last(), Some(&(99_999.0, 1.0)));
        assert!(s.windows(2).all(|w| w[0].0 < w[1].0 && w[0].1 < w[1].1));
        assert_eq!(staircase(&s).len(), 2 * s.len());
    }

    #[test]
    fn cdf_of_ties_steps_once() {
        let s = cdf_steps(&[1.0, 1.0, 1.0, 2.0], 1000);
        assert_eq!(s, vec![(1.0, 0.75), (2.0, 1.0)]);
        assert!(cdf_steps(&[], 10).is_empty());
    }

    #[test]
    fn thin_keeps_ends_and_order() {
        let v: Vec<u32> = (0..10_001).collect();
        let t = thin(&v, 5000);
        assert_eq!(t.len(), 5000);
        assert_eq!((t[0], t[4999]), (0, 10_000));
        assert!(t.windows(2).all(|w| w[0] < w[1]));
        assert_eq!(thin(&[1, 2, 3], 5000), vec![1, 2, 3]);
    }

    #[test]
    fn nice_numbers() {
        assert_eq!(nice_ceil(1.0), 1.0);
        assert_eq!(nice_ceil(1.2), 2.0);
        assert_eq!(nice_ceil(3.0), 5.0);
        assert_eq!(nice_ceil(12.0), 20.0);
        assert_eq!(axis_num(1500.0), "1500");
        assert_eq!(axis_num(12_000.0), "12k");
        assert_eq!(axis_num(2.50), "2.5");
        assert_eq!(axis_num(0.25), "0.25");
        assert_eq!(axis_num(0.0), "0");
    }

    #[test]
    fn marks_are_grouped_and_no_namespace_url_remains() {
        let f = Figure::drawn("t", "T <x>", "c", (200, 100), |root| {
            let mut chart = frame(
                root,
                &Axes {
                    x_desc: "x",
                    y_desc: "y",
                    x: 0.0..1.0,
                    y: 0.0..1.0,
                    right: 0,
                },
            )?;
            marks_start(root)?;
            chart.draw_series([Circle::new((0.5, 0.5), 3, C_BLUE.filled())])?;
            marks_end(root)?;
            Ok(())
        });
        let mut out = String::new();
        f.render(&mut out);
        assert!(!out.contains("http"), "{out}");
        assert!(
            !out.contains("#010203") && !out.contains("#030201"),
            "{out}"
        );
        let marks = &out[out.find("<g class=\"marks\">").expect("marks")..];
        let marks = &marks[..marks.find("</g>").expect("end")];
        assert_eq!(marks.matches("<circle").count(), 1, "{marks}");
        assert!(out.contains("aria-label=\"T &lt;x&gt;\""), "{out}");
    }
}
