//! The human report printed at the end of a run.

use crate::result::{Dist, RunResult};
use crate::stats::PooledDist;

/// A number with a fixed number of decimals, or `n/a` (every text renderer's).
pub(crate) fn num(v: Option<f64>, decimals: usize) -> String {
    match v {
        Some(v) if v.is_finite() => format!("{v:.decimals$}"),
        _ => "n/a".to_owned(),
    }
}

/// A share as a percentage, or `n/a`.
pub(crate) fn pct(v: Option<f64>) -> String {
    match v {
        Some(v) if v.is_finite() => format!("{:.1}%", v * 100.0),
        _ => "n/a".to_owned(),
    }
}

impl RunResult {
    /// The human report: a compact table of the headline numbers (`n/a` where not measured).
    pub fn console(&self) -> String {
        let s = &self.summary;
        let m = &s.steady;
        let w = &self.steady_window;
        let mut out = String::new();
        let mut line = |text: String| {
            out.push_str(text.trim_end());
            out.push('\n');
        };

        // The verdict first: whether the figures below can be trusted.
        if let Some(v) = &self.validity {
            for l in v.console().lines() {
                line(l.to_owned());
            }
        }
        let errors = if s.errors_by_kind.is_empty() {
            String::new()
        } else {
            let kinds: Vec<String> = s
                .errors_by_kind
                .iter()
                .map(|(k, n)| format!("{k} {n}"))
                .collect();
            format!(" ({})", kinds.join(", "))
        };
        // The run's `--tag`, from the run.json echoed as `config`.
        let tag = match self
            .config
            .pointer("/spec/exports/tag")
            .and_then(|t| t.as_str())
        {
            Some(t) => format!(" — tag {t}"),
            None => String::new(),
        };
        line(format!(
            "{} — concurrency {}{tag}",
            self.generated_by, w.concurrency
        ));
        line(format!(
            "turns          ok {}  failed {}{errors}",
            s.turns_ok, s.turns_failed
        ));
        if !s.failed_attempts_by_kind.is_empty() {
            let kinds: Vec<String> = s
                .failed_attempts_by_kind
                .iter()
                .map(|(k, n)| format!("{k} {n}"))
                .collect();
            line(format!(
                "retried        {} failed attempts sent again ({})",
                s.failed_attempts_by_kind.values().sum::<u64>(),
                kinds.join(", ")
            ));
        }
        line(format!(
            "sessions       completed {}  truncated {}  context_guard {}  timeout {}  failed {}",
            s.sessions_completed,
            s.sessions_truncated,
            s.sessions_context_guard,
            s.sessions_timeout,
            s.sessions_failed
        ));
        if let Some(p) = &self.sessions {
            let goodput = match (p.goodput, p.slo_met) {
                (Some(g), Some(met)) => {
                    format!("  every turn met the SLO {met} ({})", pct(Some(g)))
                }
                _ => String::new(),
            };
            line(format!(
                "  per session  {} plays, {} completed  e2e p50 {} s p95 {} s  model {} of it, \
                 tool waits p50 {} s  turns p50 {}{goodput}",
                p.plays,
                pct(p.completion_rate),
                num(p.e2e_s.p50, 2),
                num(p.e2e_s.p95, 2),
                pct(p.model_share),
                num(p.tool_wait_s.p50, 2),
                num(p.turns.p50, 0),
            ));
            if let Some(s) = &p.session_slo {
                line(s.text());
            }
        }
        if let Some(g) = &self.graph {
            for l in g.text().lines() {
                line(l.to_string());
            }
        }
        let range = match (w.start_s, w.end_s) {
            (Some(a), Some(b)) => format!(", {a:.1}–{b:.1} s"),
            _ => String::new(),
        };
        let rule = match w.rule.as_str() {
            "arrivals" => "sent between the first session's end and the last one's start".into(),
            "whole_run" => "every turn: no session ended before the last one started".into(),
            _ => format!("active at dispatch ≥ {}", w.min_active),
        };
        line(format!(
            "steady window  {} of {} turns ({rule}){range}",
            w.turns, w.turns_total
        ));
        line(String::new());
        line(format!(
            "{:<22}{:>10}{:>10}{:>10}{:>10}{:>8}",
            "steady window, ms", "p50", "p90", "p99", "mean", "n"
        ));
        // A p99 of fewer than 100 values is about their slowest: marked, and said below.
        let thin = std::cell::Cell::new(false);
        let dist = |name: &str, d: &Dist| {
            let mark = if d.p99.is_some() && d.count < crate::validity::P99_MIN_COUNT {
                thin.set(true);
                "*"
            } else {
                ""
            };
            format!(
                "{name:<22}{:>10}{:>10}{:>10}{:>10}{:>8}",
                num(d.p50, 1),
                num(d.p90, 1),
                format!("{}{mark}", num(d.p99, 1)),
                num(d.mean, 1),
                d.count
            )
        };
        let pooled = |name: &str, d: &PooledDist| {
            format!(
                "{name:<22}{:>10}{:>10}{:>10}{:>10}{:>8}",
                num(d.p50, 2),
                num(d.p90, 2),
                num(d.p99, 2),
                num(d.mean, 2),
                d.count
            )
        };
        line(dist("TTFT", &m.ttft_ms));
        line(dist("  TTFT turn 1", &m.ttft_first_turn_ms));
        line(dist("  TTFT turns 2+", &m.ttft_later_turns_ms));
        line(format!(
            "  TTFT 2+/1 (p50)     {:>10}",
            num(m.ttft_later_over_first_p50, 2)
        ));
        if let Some(r) = &m.reasoning {
            line(dist("TTFA (answer)", &m.ttfa_ms));
            line(format!(
                "  reasoning           {} turns · {} reasoning / {} answer chunks · {} reasoning tokens · thinking p50 {} ms",
                r.turns,
                r.reasoning_chunks,
                r.answer_chunks,
                r.reasoning_tokens
                    .map_or("n/a".to_string(), |t| t.to_string()),
                num(r.thinking_p50_ms, 1)
            ));
        }
        if m.tls_handshake_ms.count > 0 {
            line(dist("TLS handshake", &m.tls_handshake_ms));
        }
        line(dist("TPOT", &m.tpot_ms));
        line(pooled("ITL (chunk gaps)", &m.itl_ms));
        line(dist("e2e", &m.e2e_ms));
        if w.rule != "concurrency" {
            // Open loop: latency as a user arriving on schedule saw it.
            line(dist("TTFT from due", &m.ttft_from_due_ms));
            line(dist("e2e from due", &m.e2e_from_due_ms));
        }
        if thin.get() {
            line(format!(
                "  * p99 of fewer than {} values: about the slowest of them, not a 1% tail",
                crate::validity::P99_MIN_COUNT
            ));
        }
        line(String::new());
        line(format!(
            "output tok/s   {} (peak 1 s {})   input tok/s {}   turns/s {}",
            num(m.output_throughput_tok_s, 1),
            num(m.peak_output_tok_s_1s, 1),
            num(m.input_throughput_tok_s, 1),
            num(m.request_throughput_turns_s, 2)
        ));
        line(format!(
            "per-user tok/s p50 {}  mean {}  (session plays: {})",
            num(m.per_user_output_tok_s.p50, 1),
            num(m.per_user_output_tok_s.mean, 1),
            m.per_user_output_tok_s.sessions
        ));
        let host = match m.prefix_cache_host_share {
            Some(h) => format!(" (host tier {})", pct(Some(h))),
            None => String::new(),
        };
        // The window of each figure is named: the client's steady window here, the whole
        // measured phase on the server line below (and both for the same phase).
        let possible = match self.overall.prefix_cache_possible_ratio {
            Some(p) => format!(" (the run's own reuse allowed {})", pct(Some(p))),
            None => String::new(),
        };
        line(format!(
            "prefix cache   {} of input tokens in the steady window{host}; {} over the measured phase{possible}",
            pct(m.prefix_cache_ratio),
            pct(self.overall.prefix_cache_ratio)
        ));
        match &m.osl_fidelity {
            Some(o) => line(format!(
                "OSL fidelity   achieved {:.1} / pinned {:.1} = {} ({})",
                o.achieved_mean,
                o.pinned_mean,
                num(o.ratio, 3),
                if o.within_10pct {
                    "within ±10%"
                } else {
                    "OUTSIDE ±10%"
                }
            )),
            None => line("OSL fidelity   n/a".to_owned()),
        }
        if m.routing_stickiness.is_some() {
            line(format!("stickiness     {}", pct(m.routing_stickiness)));
        }
        if let Some(slo) = &self.slo {
            line(format!(
                "goodput        {} turns/s  (SLO attainment {}; {slo})",
                num(m.goodput_turns_s, 2),
                pct(m.slo_attainment)
            ));
        }
        line(format!(
            "dispatch lag   p50 {} ms  p99 {} ms  max {} ms",
            num(m.dispatch_lag_ms.p50, 1),
            num(m.dispatch_lag_ms.p99, 1),
            num(m.dispatch_lag_ms.max, 1)
        ));
        if let Some(s) = &self.server {
            line(format!(
                "server         {} /metrics over the measured phase: KV usage mean {} (p99 {}), queue p99 {}, running mean {}, prefix cache {}",
                s.backend.name(),
                pct(s.kv_usage_mean),
                pct(s.kv_usage_p99),
                num(s.queue_depth_p99, 1),
                num(s.running_mean, 1),
                pct(s.prefix_cache_ratio)
            ));
        }
        for t in &self.scrape_targets {
            let s = &t.summary;
            let mut parts = vec![format!("{} scrapes", s.scrapes)];
            if s.backend != bench_telemetry::Backend::Unknown {
                parts.push(format!("{} metrics", s.backend.name()));
            }
            if let Some(w) = s.gpu_power_mean_w {
                parts.push(format!("GPU power mean {w:.0} W"));
            }
            line(format!("scraped        {}: {}", t.target, parts.join(", ")));
        }
        if let Some(e) = &self.energy {
            line(format!(
                "energy         {:.0} J over the measured phase ({}): {} J/turn, {} J/session, {} J/output token",
                e.joules,
                match e.method {
                    bench_telemetry::EnergyMethod::Counter => "DCGM energy counter",
                    bench_telemetry::EnergyMethod::PowerIntegrated => "DCGM power integrated",
                },
                num(e.j_per_turn, 1),
                num(e.j_per_session, 1),
                num(e.j_per_output_token, 3)
            ));
        }
        if let Some(c) = &self.cost {
            line(format!(
                "cost           ${:.4} over the measured phase ({} GPU × ${}/h): ${}/M output tokens, ${}/turn, ${}/session",
                c.usd,
                c.gpus,
                c.usd_per_gpu_hour,
                num(c.usd_per_m_output_tokens, 3),
                num(c.usd_per_turn, 6),
                num(c.usd_per_session, 5)
            ));
        }
        out
    }
}
