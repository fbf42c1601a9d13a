//! The HTML reports: one self-contained file each (inline CSS, inline SVG charts drawn with
//! plotters, no script, no external asset), viewable offline.
//!
//! - [`html`]: one run — its validity verdict and checks, the summary over the steady window
//!   and the whole run, the per-session metrics, nine charts (`ttft_cdf`, `e2e_cdf`,
//!   `ttft_by_turn`, `ttft_vs_input`, `throughput_over_time`, `kv_usage_over_time`,
//!   `queue_depth_over_time`, `prefix_hit_over_time`, `session_timeline`) and the run's
//!   configuration.
//! - [`sweep_html`]: a sweep — its points, why it stopped, the `--find-max` result and three
//!   charts (`pareto`, `throughput_vs_load`, `ttft_vs_load`).
//!
//! Every chart is a `<figure class="chart" data-chart="NAME">` holding an `<svg>` (its data
//! marks inside `<g class="marks">`) or, when there is nothing to draw, a `<p class="empty">`
//! saying why, and a `<figcaption>` naming the records it covers. Every string that comes from
//! the data is HTML-escaped. Sizes are bounded: a scatter plot shows at most
//! 5,000 points and a CDF at most 1,000 steps, both chosen deterministically.

mod chart;
mod run;
mod sweep;

use std::collections::BTreeMap;
use std::fmt::Write as _;

use crate::console::{num, pct};
use crate::record::{SessionStatus, TurnRecord, TurnStatus};
use crate::report::ReportData;
use crate::result::{Dist, Metrics, RunResult};
use crate::sweep::SweepSummary;
use crate::validity::{CheckStatus, Validity, Verdict};

/// Most points a scatter plot draws.
const MAX_SCATTER_POINTS: usize = 5_000;
/// Most steps a CDF draws.
const MAX_CDF_STEPS: usize = 1_000;
/// Most points a line over time draws.
const MAX_LINE_POINTS: usize = 2_000;
/// Most session plays the timeline shows.
const MAX_TIMELINE_PLAYS: usize = 200;

/// One run's HTML report: a complete, self-contained document.
pub fn html(data: &ReportData) -> String {
    let r = &data.result;
    let mut out = String::with_capacity(256 * 1024);
    head(&mut out, &format!("bench report: {}", data.title));
    let _ = writeln!(
        out,
        "<header><h1>{}</h1><p class=\"sub\">{} · result schema v{}</p></header>",
        esc(&data.title),
        esc(&r.generated_by),
        r.schema_version
    );
    if let Some(why) = &data.recomputed {
        let _ = writeln!(
            out,
            "<p class=\"note recomputed\"><strong>Recomputed:</strong> {}</p>",
            esc(why)
        );
    }
    verdict(&mut out, r.validity.as_ref());
    summary(&mut out, r, &data.turns);
    sessions(&mut out, r, data);

    out.push_str("<section id=\"charts\">\n<h2>Charts</h2>\n");
    for figure in run::figures(data) {
        figure.render(&mut out);
    }
    out.push_str("</section>\n");

    config(&mut out, &data.config);
    out.push_str("</body>\n</html>\n");
    out
}

/// A sweep's HTML summary: a complete, self-contained document.
pub fn sweep_html(summary: &SweepSummary) -> String {
    let mut out = String::with_capacity(64 * 1024);
    head(
        &mut out,
        &format!("bench sweep over {}", summary.axis.as_str()),
    );
    sweep::body(&mut out, summary);
    config(&mut out, &summary.config);
    out.push_str("</body>\n</html>\n");
    out
}

/// `s` escaped for HTML text and attribute values.
pub(crate) fn esc(s: &str) -> String {
    let mut out = String::with_capacity(s.len());
    for c in s.chars() {
        match c {
            '&' => out.push_str("&amp;"),
            '<' => out.push_str("&lt;"),
            '>' => out.push_str("&gt;"),
            '"' => out.push_str("&quot;"),
            '\'' => out.push_str("&#39;"),
            c => out.push(c),
        }
    }
    out
}

/// A check's value: up to four significant digits.
fn value(v: Option<f64>) -> String {
    match v {
        Some(v) if v.is_finite() => {
            let a = v.abs();
            if a == 0.0 || a >= 1000.0 {
                format!("{v:.0}")
            } else if a >= 1.0 {
                format!("{v:.2}")
            } else {
                format!("{v:.4}")
            }
        }
        _ => "n/a".to_owned(),
    }
}

const CSS: &str = "
:root{--fg:#1d1d1f;--muted:#5f6368;--line:#d8dadd;--bg:#fff;--soft:#f6f7f8}
*{box-sizing:border-box}
body{font:15px/1.45 system-ui,-apple-system,'Segoe UI',Roboto,sans-serif;color:var(--fg);background:var(--bg);margin:0 auto;padding:20px 28px 60px;max-width:1120px}
h1{font-size:26px;margin:0 0 2px;word-break:break-all}
h2{font-size:19px;margin:30px 0 10px;border-bottom:1px solid var(--line);padding-bottom:4px}
.sub{color:var(--muted);margin:0 0 12px}
.note{background:#fff8e1;border:1px solid #f0d58a;border-radius:6px;padding:8px 12px}
table{border-collapse:collapse;margin:6px 0 12px;font-size:14px}
th,td{border-bottom:1px solid var(--line);padding:4px 10px;text-align:left;vertical-align:top}
th{background:var(--soft);font-weight:600}
td.n{text-align:right;font-variant-numeric:tabular-nums;white-space:nowrap}
.verdict{border-radius:10px;padding:12px 18px;margin:14px 0 6px;border:2px solid}
.verdict .word{font-size:34px;font-weight:800;letter-spacing:.04em;text-transform:uppercase}
.verdict-valid{background:#e8f5e9;border-color:#2e7d32;color:#1b5e20}
.verdict-suspect{background:#fff8e1;border-color:#e0a000;color:#6d4c00}
.verdict-invalid{background:#fdecea;border-color:#c62828;color:#8e1b1b}
.verdict-unknown{background:var(--soft);border-color:var(--line);color:var(--muted)}
.verdict table{color:var(--fg);background:#fff}
.status-pass{color:#1b5e20;font-weight:600}.status-warn{color:#8a5a00;font-weight:600}
.status-fail{color:#b71c1c;font-weight:700}.status-skipped{color:var(--muted)}
figure.chart{margin:18px 0 26px;padding:10px;border:1px solid var(--line);border-radius:8px}
figure.chart svg{display:block;max-width:100%;height:auto}
figcaption{color:var(--muted);font-size:13.5px;margin-top:6px}
figcaption strong{color:var(--fg)}
p.empty{background:var(--soft);border:1px dashed var(--line);border-radius:6px;padding:22px;text-align:center;color:var(--muted);margin:0}
pre.config{background:var(--soft);border:1px solid var(--line);border-radius:6px;padding:10px;overflow:auto;font-size:12.5px;max-height:640px}
tr.client-bound td{background:#fff3e0}
.flag{color:#b35c00;font-weight:600}
td.id{font-family:ui-monospace,monospace;font-size:12.5px;word-break:break-all;max-width:360px}
h3{font-size:16px;margin:18px 0 6px}
td.verdict-cell.valid{color:#1b5e20;font-weight:600}td.verdict-cell.suspect{color:#8a5a00;font-weight:600}
td.verdict-cell.invalid{color:#b71c1c;font-weight:700}
";

/// The document's start: doctype, head (charset, title, the inline style), `<body>`.
fn head(out: &mut String, title: &str) {
    let _ = write!(
        out,
        "<!doctype html>\n<html lang=\"en\">\n<head>\n<meta charset=\"utf-8\">\n\
         <meta name=\"viewport\" content=\"width=device-width, initial-scale=1\">\n\
         <title>{}</title>\n<style>{CSS}</style>\n</head>\n<body>\n",
        esc(title)
    );
}

/// The verdict, big and colored, with its checks.
fn verdict(out: &mut String, validity: Option<&Validity>) {
    let Some(v) = validity else {
        out.push_str(
            "<section id=\"verdict\" class=\"verdict verdict-unknown\" data-verdict=\"unknown\">\n\
             <div class=\"word\">not assessed</div>\n\
             <p>This result has no validity block (it was written before validity existed).</p>\n\
             </section>\n",
        );
        return;
    };
    let why = match v.verdict {
        Verdict::Valid => "Every check that could be made passed.",
        Verdict::Suspect => "A check warned: read the figures with its explanation in mind.",
        Verdict::Invalid => "A check failed: the figures do not describe the server.",
    };
    let name = v.verdict.as_str();
    let _ = writeln!(
        out,
        "<section id=\"verdict\" class=\"verdict verdict-{name}\" data-verdict=\"{name}\">\n\
         <div class=\"word\">{name}</div>\n<p>{why}</p>"
    );
    out.push_str(
        "<table class=\"checks\">\n<thead><tr><th>check</th><th>status</th><th>value</th>\
         <th>threshold</th><th>explanation</th></tr></thead>\n<tbody>\n",
    );
    for c in &v.checks {
        let status = match c.status {
            CheckStatus::Pass => "pass",
            CheckStatus::Warn => "warn",
            CheckStatus::Fail => "fail",
            CheckStatus::Skipped => "skipped",
        };
        let _ = writeln!(
            out,
            "<tr><td>{}</td><td class=\"status-{status}\">{status}</td><td class=\"n\">{}</td>\
             <td>{}</td><td>{}</td></tr>",
            esc(&c.name),
            value(c.value),
            esc(&c.threshold),
            esc(&c.explanation)
        );
    }
    out.push_str("</tbody>\n</table>\n</section>\n");
}

/// How the steady window was cut, in words.
fn window_words(r: &RunResult) -> String {
    let w = &r.steady_window;
    let span = match (w.start_s, w.end_s) {
        (Some(a), Some(b)) => format!(", {a:.1}–{b:.1} s"),
        _ => String::new(),
    };
    let which = match w.rule.as_str() {
        "concurrency" => format!(
            "steady window: turns sent while at least {} of {} sessions were active",
            w.min_active, w.concurrency
        ),
        "arrivals" => "steady window: turns sent between the first session play's end and the \
                       last play's start (open loop)"
            .to_owned(),
        "whole_run" => "whole run: the open-loop plays never overlapped enough to cut a steady \
                        window"
            .to_owned(),
        other => format!("steady window (rule {other})"),
    };
    format!(
        "{which} — {} of {} measured turns{span}",
        w.turns, w.turns_total
    )
}

/// The summary: counts, then the metrics over the steady window beside the whole run's.
fn summary(out: &mut String, r: &RunResult, turns: &[TurnRecord]) {
    let s = &r.summary;
    out.push_str("<section id=\"summary\">\n<h2>Summary</h2>\n");
    let errors = if s.errors_by_kind.is_empty() {
        "none".to_owned()
    } else {
        s.errors_by_kind
            .iter()
            .map(|(k, n)| format!("{}: {n}", esc(k)))
            .collect::<Vec<_>>()
            .join(", ")
    };
    out.push_str("<table class=\"counts\">\n<tbody>\n");
    let mut row = |k: &str, v: String| {
        let _ = writeln!(out, "<tr><th>{k}</th><td>{v}</td></tr>");
    };
    row("turns ok", s.turns_ok.to_string());
    row("turns failed", s.turns_failed.to_string());
    row("errors by kind", errors);
    if !s.failed_attempts_by_kind.is_empty() {
        let kinds = s
            .failed_attempts_by_kind
            .iter()
            .map(|(k, n)| format!("{}: {n}", esc(k)))
            .collect::<Vec<_>>()
            .join(", ");
        row("failed attempts sent again", kinds);
    }
    row(
        "sessions",
        format!(
            "{} completed, {} truncated, {} stopped by the context guard, {} timed out, {} failed",
            s.sessions_completed,
            s.sessions_truncated,
            s.sessions_context_guard,
            s.sessions_timeout,
            s.sessions_failed
        ),
    );
    if let Some(slo) = &r.slo {
        row("SLO", esc(&slo.to_string()));
    }
    out.push_str("</tbody>\n</table>\n");

    let _ = writeln!(
        out,
        "<p class=\"window\">Window of the first column: {}.</p>",
        esc(&window_words(r))
    );
    out.push_str(
        "<table class=\"metrics\">\n<thead><tr><th>metric</th><th>steady window</th>\
         <th>whole run</th></tr></thead>\n<tbody>\n",
    );
    let (a, b) = (&s.steady, &r.overall);
    let mut row = |k: &str, f: &dyn Fn(&Metrics) -> String| {
        let _ = writeln!(
            out,
            "<tr><th>{k}</th><td class=\"n\">{}</td><td class=\"n\">{}</td></tr>",
            f(a),
            f(b)
        );
    };
    row("ok turns", &|m| m.turns.to_string());
    row("span, s", &|m| num(m.span_s, 1));
    row("TTFT p50, ms", &|m| num(m.ttft_ms.p50, 1));
    row("TTFT p90, ms", &|m| num(m.ttft_ms.p90, 1));
    row("TTFT p99, ms", &|m| num(m.ttft_ms.p99, 1));
    row("TTFT p50 first turns / later turns, ms", &|m| {
        format!(
            "{} / {}",
            num(m.ttft_first_turn_ms.p50, 1),
            num(m.ttft_later_turns_ms.p50, 1)
        )
    });
    row("TPOT p50, ms", &|m| num(m.tpot_ms.p50, 2));
    row("e2e p50, ms", &|m| num(m.e2e_ms.p50, 1));
    row("e2e p99, ms", &|m| num(m.e2e_ms.p99, 1));
    row("output tok/s", &|m| num(m.output_throughput_tok_s, 1));
    row("input tok/s", &|m| num(m.input_throughput_tok_s, 1));
    row("turns/s", &|m| num(m.request_throughput_turns_s, 2));
    row("per-user output tok/s p50", &|m| {
        num(m.per_user_output_tok_s.p50, 1)
    });
    row("prefix-cache ratio", &|m| pct(m.prefix_cache_ratio));
    row("dispatch lag p99, ms", &|m| num(m.dispatch_lag_ms.p99, 2));
    if r.slo.is_some() {
        row(
            "goodput (share meeting the SLO)",
            &|m| pct(m.slo_attainment),
        );
        row("goodput, turns/s", &|m| num(m.goodput_turns_s, 2));
    }
    out.push_str("</tbody>\n</table>\n");
    failures(out, turns);
    out.push_str("</section>\n");
}

/// Most distinct errors the failures table lists.
const MAX_ERRORS: usize = 10;
/// Longest error text shown, characters.
const MAX_ERROR_CHARS: usize = 300;

/// The measured failed turns' errors: each distinct kind and text with its count, the most
/// frequent first.
fn failures(out: &mut String, turns: &[TurnRecord]) {
    let mut by: BTreeMap<(String, String), u64> = BTreeMap::new();
    for r in turns
        .iter()
        .filter(|r| !r.warmup && !r.superseded && r.status != TurnStatus::Ok)
    {
        let kind = match (&r.error_kind, r.status) {
            (Some(k), _) => k.as_str().to_owned(),
            (None, TurnStatus::Timeout) => "timeout".to_owned(),
            (None, _) => "unknown".to_owned(),
        };
        let mut text: String = r
            .error
            .as_deref()
            .unwrap_or("")
            .chars()
            .take(MAX_ERROR_CHARS + 1)
            .collect();
        if text.chars().count() > MAX_ERROR_CHARS {
            text = text.chars().take(MAX_ERROR_CHARS).collect::<String>() + "…";
        }
        *by.entry((kind, text)).or_default() += 1;
    }
    if by.is_empty() {
        return;
    }
    let distinct = by.len();
    let mut rows: Vec<((String, String), u64)> = by.into_iter().collect();
    rows.sort_by(|a, b| b.1.cmp(&a.1).then_with(|| a.0.cmp(&b.0)));
    out.push_str(
        "<table class=\"errors\">\n<thead><tr><th>error kind</th><th>turns</th><th>error</th>\
         </tr></thead>\n<tbody>\n",
    );
    for ((kind, text), n) in rows.iter().take(MAX_ERRORS) {
        let _ = writeln!(
            out,
            "<tr><td>{}</td><td class=\"n\">{n}</td><td>{}</td></tr>",
            esc(kind),
            esc(text)
        );
    }
    out.push_str("</tbody>\n</table>\n");
    if distinct > MAX_ERRORS {
        let _ = writeln!(
            out,
            "<p class=\"more\">{} more distinct errors are not shown.</p>",
            distinct - MAX_ERRORS
        );
    }
}

/// The per-session-play block, when the result has one.
fn sessions(out: &mut String, r: &RunResult, data: &ReportData) {
    let Some(m) = &r.sessions else {
        return;
    };
    out.push_str("<section id=\"sessions\">\n<h2>Per session play</h2>\n");
    let _ = writeln!(
        out,
        "<p>{} measured session plays sent a turn; {} completed ({}). Model share (time in \
         requests over the plays' life): {}.{}</p>",
        m.plays,
        m.completed,
        pct(m.completion_rate),
        pct(m.model_share),
        match (m.slo_met, m.goodput) {
            (Some(n), g) => format!(
                " Session goodput (every turn ok and within the SLO): {n} plays, {}.",
                pct(g)
            ),
            _ => String::new(),
        } + &m
            .session_slo
            .as_ref()
            .map(|s| format!(" {}.", esc(s.text().trim())))
            .unwrap_or_default()
    );
    out.push_str(
        "<table class=\"session-metrics\">\n<thead><tr><th>per play</th><th>p50</th><th>p90</th>\
         <th>p99</th><th>mean</th><th>max</th></tr></thead>\n<tbody>\n",
    );
    let mut row = |k: &str, d: &Dist, decimals: usize| {
        let _ = writeln!(
            out,
            "<tr><th>{k}</th><td class=\"n\">{}</td><td class=\"n\">{}</td><td class=\"n\">{}</td>\
             <td class=\"n\">{}</td><td class=\"n\">{}</td></tr>",
            num(d.p50, decimals),
            num(d.p90, decimals),
            num(d.p99, decimals),
            num(d.mean, decimals),
            num(d.max, decimals)
        );
    };
    row("e2e, s", &m.e2e_s, 2);
    row("model time, s", &m.model_s, 2);
    row("tool waits and think time, s", &m.tool_wait_s, 2);
    row("turns", &m.turns, 0);
    row("input tokens", &m.input_tokens, 0);
    row("output tokens", &m.output_tokens, 0);
    out.push_str("</tbody>\n</table>\n");
    longest_plays(out, data);
    if let Some(g) = &r.graph {
        graph(out, g);
    }
    out.push_str("</section>\n");
}

/// Agent graphs: each play's critical path by component, and TTFT by depth.
fn graph(out: &mut String, g: &crate::graph::GraphBreakdown) {
    out.push_str("<h3>Agent graphs: where the time went</h3>\n");
    let c = &g.critical_path_share;
    let _ = writeln!(
        out,
        "<p>{} graph plays; requests in flight per play p50 {}, max {} (<code>-c</code> \
         counts sessions). The critical path — walked back from each play's last node along the \
         agent's own line, time blocked on a slower sibling counted as join wait — is {} of a \
         play's e2e at p50 (p90 {}).</p>",
        g.sessions,
        num(g.max_in_flight.p50, 1),
        g.max_in_flight.max,
        pct(c.p50),
        pct(c.p90)
    );
    out.push_str(
        "<table class=\"graph-metrics\">\n<thead><tr><th>on the critical path</th><th>total, s</th>\
         <th>mean share of e2e</th></tr></thead>\n<tbody>\n",
    );
    for (name, comp) in g.components.named() {
        let _ = writeln!(
            out,
            "<tr><th>{}</th><td class=\"n\">{}</td><td class=\"n\">{}</td></tr>",
            esc(name),
            num(Some(comp.total_s), 3),
            pct(comp.share)
        );
    }
    out.push_str("</tbody>\n</table>\n");
    if !g.ttft_by_depth.is_empty() {
        out.push_str(
            "<table class=\"graph-depth\">\n<thead><tr><th>TTFT by depth, ms</th><th>p50</th>\
             <th>p90</th><th>p99</th><th>n</th></tr></thead>\n<tbody>\n",
        );
        for d in &g.ttft_by_depth {
            let _ = writeln!(
                out,
                "<tr><th>depth {}</th><td class=\"n\">{}</td><td class=\"n\">{}</td>\
                 <td class=\"n\">{}</td><td class=\"n\">{}</td></tr>",
                d.depth,
                num(d.p50_ms, 1),
                num(d.p90_ms, 1),
                num(d.p99_ms, 1),
                d.n
            );
        }
        out.push_str("</tbody>\n</table>\n");
    }
}

/// How many of the longest plays are listed.
const LONGEST_PLAYS: usize = 10;

/// The longest measured session plays (first send → last byte), with their row in the
/// session timeline.
fn longest_plays(out: &mut String, data: &ReportData) {
    let measured: Vec<&TurnRecord> = data
        .turns
        .iter()
        .filter(|r| !r.warmup && !r.superseded)
        .collect();
    let plays = run::plays(&measured);
    if plays.is_empty() {
        return;
    }
    let status: BTreeMap<(&str, u32), SessionStatus> = data
        .sessions
        .iter()
        .filter(|s| !s.warmup && !s.superseded)
        .map(|s| ((s.session_id.as_str(), s.replay), s.status))
        .collect();
    // (timeline row, play, e2e s, model s)
    let mut rows: Vec<(usize, &Vec<&TurnRecord>, f64, f64)> = plays
        .iter()
        .enumerate()
        .map(|(i, p)| {
            let start = p[0].sent_s;
            let end = p.iter().map(|r| r.end_s).fold(start, f64::max);
            let model: f64 = p
                .iter()
                .map(|r| crate::result::busy_s(r))
                .filter(|b| b.is_finite() && *b > 0.0)
                .sum();
            (i, p, end - start, model)
        })
        .collect();
    rows.sort_by(|a, b| b.2.total_cmp(&a.2).then(a.0.cmp(&b.0)));
    let _ = writeln!(
        out,
        "<h3>Longest session plays</h3>\n<table class=\"plays\">\n<thead><tr><th>session</th>\
         <th>play</th><th>timeline row</th><th>turns (failed)</th><th>start, s</th>\
         <th>e2e, s</th><th>model, s</th><th>tool waits, s</th><th>ended</th></tr></thead>\n<tbody>"
    );
    for (i, p, e2e, model) in rows.iter().take(LONGEST_PLAYS) {
        let first = p[0];
        let failed = p.iter().filter(|r| r.status != TurnStatus::Ok).count();
        let ended = match status.get(&(first.session_id.as_str(), first.replay)) {
            Some(SessionStatus::Completed) => "completed",
            Some(SessionStatus::Truncated) => "truncated",
            Some(SessionStatus::ContextGuard) => "context guard",
            Some(SessionStatus::Timeout) => "timeout",
            Some(SessionStatus::Failed) => "failed",
            None => "no session record",
        };
        let row = if *i < MAX_TIMELINE_PLAYS {
            format!("#{}", i + 1)
        } else {
            "not shown".to_owned()
        };
        let _ = writeln!(
            out,
            "<tr><td class=\"id\">{}</td><td class=\"n\">{}</td><td class=\"n\">{row}</td>\
             <td class=\"n\">{} ({failed})</td><td class=\"n\">{:.2}</td><td class=\"n\">{:.2}</td>\
             <td class=\"n\">{:.2}</td><td class=\"n\">{:.2}</td><td>{ended}</td></tr>",
            esc(&first.session_id),
            first.replay,
            p.len(),
            first.sent_s,
            e2e,
            model,
            (e2e - model).max(0.0),
        );
    }
    out.push_str("</tbody>\n</table>\n");
}

/// The configuration as pretty JSON (already redacted by whoever built the data).
fn config(out: &mut String, config: &serde_json::Value) {
    let text = serde_json::to_string_pretty(config).unwrap_or_else(|e| format!("({e})"));
    let _ = writeln!(
        out,
        "<section id=\"config\">\n<h2>Configuration</h2>\n<pre class=\"config\">{}</pre>\n</section>",
        esc(&text)
    );
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn escapes_markup_and_quotes() {
        assert_eq!(
            esc("<a href=\"x\">'&'</a>"),
            "&lt;a href=&quot;x&quot;&gt;&#39;&amp;&#39;&lt;/a&gt;"
        );
    }
}
