//! The markdown report of one run (`bench report --format markdown`): the verdict and its
//! checks, the headline table with each figure's window named, per-session figures.

use std::fmt::Write as _;

use crate::console::{num, pct};
use crate::result::{Dist, RunResult};
use crate::validity::CheckStatus;

/// `|` and line breaks cannot appear inside a markdown table cell.
fn cell(s: &str) -> String {
    s.replace('|', "\\|").replace(['\n', '\r'], " ")
}

impl RunResult {
    /// The report as GitHub-flavoured markdown, under a `# title` heading.
    pub fn markdown(&self, title: &str) -> String {
        let mut md = String::new();
        let s = &self.summary;
        let m = &s.steady;
        let w = &self.steady_window;
        let _ = writeln!(md, "# {}\n", cell(title));
        if let Some(v) = &self.validity {
            let _ = writeln!(md, "**Validity: {}**\n", v.verdict.as_str());
            let _ = writeln!(md, "| check | status | value | threshold | explanation |");
            let _ = writeln!(md, "|---|---|---|---|---|");
            for c in &v.checks {
                let status = match c.status {
                    CheckStatus::Pass => "pass",
                    CheckStatus::Warn => "**warn**",
                    CheckStatus::Fail => "**FAIL**",
                    CheckStatus::Skipped => "n/a",
                };
                let _ = writeln!(
                    md,
                    "| {} | {status} | {} | {} | {} |",
                    c.name,
                    c.value.map_or("n/a".into(), |v| format!("{v:.3}")),
                    cell(&c.threshold),
                    cell(&c.explanation)
                );
            }
            md.push('\n');
        }
        let errors: Vec<String> = s
            .errors_by_kind
            .iter()
            .map(|(k, n)| format!("{k} {n}"))
            .collect();
        let _ = writeln!(
            md,
            "{} — concurrency {}. Turns ok {}, failed {}{}. Sessions completed {}, truncated {}, \
             context guard {}, timeout {}, failed {}.\n",
            self.generated_by,
            w.concurrency,
            s.turns_ok,
            s.turns_failed,
            if errors.is_empty() {
                String::new()
            } else {
                format!(" ({})", errors.join(", "))
            },
            s.sessions_completed,
            s.sessions_truncated,
            s.sessions_context_guard,
            s.sessions_timeout,
            s.sessions_failed
        );
        if !s.failed_attempts_by_kind.is_empty() {
            let kinds: Vec<String> = s
                .failed_attempts_by_kind
                .iter()
                .map(|(k, n)| format!("{k} {n}"))
                .collect();
            let _ = writeln!(md, "Failed attempts sent again: {}.\n", kinds.join(", "));
        }
        let _ = writeln!(
            md,
            "Steady window: {} of {} turns (rule `{}`).\n",
            w.turns, w.turns_total, w.rule
        );
        let _ = writeln!(md, "| latency, ms | window | p50 | p90 | p99 | mean | n |");
        let _ = writeln!(md, "|---|---|---|---|---|---|---|");
        let row = |md: &mut String, name: &str, window: &str, d: &Dist| {
            let _ = writeln!(
                md,
                "| {name} | {window} | {} | {} | {} | {} | {} |",
                num(d.p50, 1),
                num(d.p90, 1),
                num(d.p99, 1),
                num(d.mean, 1),
                d.count
            );
        };
        row(&mut md, "TTFT", "steady", &m.ttft_ms);
        row(&mut md, "TTFT turn 1", "steady", &m.ttft_first_turn_ms);
        row(&mut md, "TTFT turns 2+", "steady", &m.ttft_later_turns_ms);
        row(&mut md, "TPOT", "steady", &m.tpot_ms);
        row(&mut md, "e2e", "steady", &m.e2e_ms);
        row(&mut md, "TTFT", "whole run", &self.overall.ttft_ms);
        row(&mut md, "e2e", "whole run", &self.overall.e2e_ms);
        md.push('\n');
        let _ = writeln!(md, "| figure | window | value |");
        let _ = writeln!(md, "|---|---|---|");
        let fig = |md: &mut String, name: &str, window: &str, value: String| {
            let _ = writeln!(md, "| {name} | {window} | {value} |");
        };
        fig(
            &mut md,
            "output tok/s",
            "steady",
            num(m.output_throughput_tok_s, 1),
        );
        fig(
            &mut md,
            "output tok/s",
            "whole run",
            num(self.overall.output_throughput_tok_s, 1),
        );
        fig(
            &mut md,
            "per-user output tok/s (p50)",
            "steady",
            num(m.per_user_output_tok_s.p50, 1),
        );
        fig(
            &mut md,
            "turns/s",
            "steady",
            num(m.request_throughput_turns_s, 2),
        );
        fig(
            &mut md,
            "prefix cache (client, cached/input tokens)",
            "steady",
            pct(m.prefix_cache_ratio),
        );
        fig(
            &mut md,
            "prefix cache (client, cached/input tokens)",
            "whole run",
            pct(self.overall.prefix_cache_ratio),
        );
        if let Some(p) = self.overall.prefix_cache_possible_ratio {
            fig(
                &mut md,
                "prefix cache the run's own reuse allowed",
                "whole run",
                pct(Some(p)),
            );
        }
        if let Some(s) = &self.server {
            fig(
                &mut md,
                "prefix cache (server /metrics)",
                "measured phase",
                pct(s.prefix_cache_ratio),
            );
            fig(
                &mut md,
                "KV usage mean (server)",
                "measured phase",
                pct(s.kv_usage_mean),
            );
        }
        if let Some(o) = &m.osl_fidelity {
            fig(
                &mut md,
                "output length achieved / pinned",
                "steady",
                num(o.ratio, 3),
            );
        }
        if let Some(slo) = &self.slo {
            fig(
                &mut md,
                &format!("SLO attainment ({})", cell(&slo.to_string())),
                "steady",
                pct(m.slo_attainment),
            );
            fig(
                &mut md,
                "goodput turns/s",
                "steady",
                num(m.goodput_turns_s, 2),
            );
        }
        fig(
            &mut md,
            "dispatch lag p99, ms",
            "steady",
            num(m.dispatch_lag_ms.p99, 1),
        );
        if let Some(p) = &self.sessions {
            md.push('\n');
            let _ = writeln!(md, "| per session | value |");
            let _ = writeln!(md, "|---|---|");
            let _ = writeln!(md, "| plays | {} |", p.plays);
            let _ = writeln!(md, "| completion rate | {} |", pct(p.completion_rate));
            let _ = writeln!(
                md,
                "| e2e p50 / p95, s | {} / {} |",
                num(p.e2e_s.p50, 2),
                num(p.e2e_s.p95, 2)
            );
            let _ = writeln!(md, "| model share of e2e | {} |", pct(p.model_share));
            let _ = writeln!(md, "| tool waits p50, s | {} |", num(p.tool_wait_s.p50, 2));
            if let Some(g) = p.goodput {
                let _ = writeln!(
                    md,
                    "| session goodput (every turn met the SLO) | {} |",
                    pct(Some(g))
                );
            }
            if let Some(s) = &p.session_slo {
                let _ = writeln!(
                    md,
                    "| sessions within the session SLO (`{}`) | {} of {} judged ({}; {} cut by the run's end) |",
                    s.slo,
                    s.met,
                    s.judged,
                    pct(s.share),
                    s.cut
                );
            }
        }
        if let Some(g) = &self.graph {
            md.push('\n');
            md.push_str(&g.markdown());
        }
        md
    }
}
