//! Server-side summaries of a run, from its scrapes.

use bench_rundir::ScrapePhase;
use bench_stats::{mean, percentile, sorted_finite as sorted};
use serde::{Deserialize, Serialize};

use crate::{Backend, Snapshot};

/// One scrape, placed on the run's clock.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Scrape {
    /// Seconds since the run started.
    pub t_s: f64,
    /// When it was taken (RFC 3339 UTC).
    pub utc: String,
    /// When it was taken: before any turn, during the warmup, the measured phase or its
    /// drain, or after the last turn.
    pub phase: ScrapePhase,
    /// What the server reported.
    pub snapshot: Snapshot,
}

/// What the server's own metrics said about the measured run (`result.json` `server`). Every
/// figure is `null` when the server did not report what it needs.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[serde(default)]
pub struct ServerSummary {
    /// The family the metric names showed.
    pub backend: Backend,
    /// Scrapes taken during the measured run (the final one included).
    pub scrapes: u64,
    /// Median KV-cache capacity, tokens.
    pub kv_capacity_tokens: Option<f64>,
    /// Mean KV-cache usage (0–1).
    pub kv_usage_mean: Option<f64>,
    /// 99th percentile of KV-cache usage (0–1).
    pub kv_usage_p99: Option<f64>,
    /// Tokens evicted from the KV cache during the measured run (counter delta).
    pub evicted_tokens: Option<f64>,
    /// Preemptions during the measured run (counter delta, vLLM).
    pub preemptions: Option<f64>,
    /// 99th percentile of requests waiting in the server's queue.
    pub queue_depth_p99: Option<f64>,
    /// Mean of requests running.
    pub running_mean: Option<f64>,
    /// vLLM: prefix-cache hits ÷ queries over the measured run (counter deltas).
    pub prefix_cache_ratio: Option<f64>,
    /// Tokens per KV-cache block, as the last measured scrape said (vLLM).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub block_size: Option<f64>,
}

/// A counter's increase from `start` to `end` (`None` when either lacks it; a reset, i.e. a
/// decrease, counts from zero).
fn delta(
    start: Option<&Snapshot>,
    end: &Snapshot,
    f: impl Fn(&Snapshot) -> Option<f64>,
) -> Option<f64> {
    let e = f(end)?;
    let s = start.and_then(&f).unwrap_or(0.0);
    Some(if e >= s { e - s } else { e })
}

/// Summarizes the measured run: gauges over the scrapes of phase `measuring`, `draining` and
/// `final`; counters as the increase from the last scrape before measuring (the baseline, or
/// the end of the warmup) to the last scrape.
pub fn summarize(scrapes: &[Scrape]) -> ServerSummary {
    let measured: Vec<&Scrape> = scrapes.iter().filter(|s| s.phase.is_measured()).collect();
    let Some(last) = measured.last() else {
        return ServerSummary::default();
    };
    let start = scrapes
        .iter()
        .rev()
        .find(|s| matches!(s.phase, ScrapePhase::Baseline | ScrapePhase::Warmup))
        .map(|s| &s.snapshot);
    let gauge =
        |f: fn(&Snapshot) -> Option<f64>| sorted(measured.iter().filter_map(|s| f(&s.snapshot)));
    let usage = gauge(|s| s.kv_usage);
    let waiting = gauge(|s| s.waiting);
    let running = gauge(|s| s.running);
    let capacity = gauge(|s| s.kv_capacity_tokens);
    let end = &last.snapshot;
    let queries = delta(start, end, |s| s.prefix_cache_queries);
    let hits = delta(start, end, |s| s.prefix_cache_hits);
    ServerSummary {
        backend: end.backend,
        scrapes: measured.len() as u64,
        kv_capacity_tokens: percentile(&capacity, 0.5),
        kv_usage_mean: mean(&usage),
        kv_usage_p99: percentile(&usage, 0.99),
        evicted_tokens: delta(start, end, |s| s.evicted_tokens),
        preemptions: delta(start, end, |s| s.preemptions),
        queue_depth_p99: percentile(&waiting, 0.99),
        running_mean: mean(&running),
        prefix_cache_ratio: match (hits, queries) {
            (Some(h), Some(q)) if q > 0.0 => Some(h / q),
            _ => None,
        },
        block_size: end.block_size,
    }
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]
    use super::*;

    fn scrape(t: f64, phase: &str, f: impl FnOnce(&mut Snapshot)) -> Scrape {
        let mut snapshot = Snapshot {
            backend: Backend::Vllm,
            ..Snapshot::default()
        };
        f(&mut snapshot);
        Scrape {
            t_s: t,
            utc: String::new(),
            phase: serde_json::from_value(serde_json::Value::String(phase.into()))
                .expect("a scrape phase"),
            snapshot,
        }
    }

    #[test]
    fn gauges_over_the_measured_scrapes_counters_from_the_baseline() {
        let s = [
            scrape(0.0, "baseline", |s| {
                s.prefix_cache_queries = Some(1000.0);
                s.prefix_cache_hits = Some(100.0);
                s.kv_usage = Some(0.9); // before the run: not counted
            }),
            scrape(1.0, "measuring", |s| {
                s.kv_usage = Some(0.2);
                s.waiting = Some(0.0);
                s.running = Some(4.0);
                s.kv_capacity_tokens = Some(1000.0);
            }),
            scrape(2.0, "measuring", |s| {
                s.kv_usage = Some(0.4);
                s.waiting = Some(10.0);
                s.running = Some(8.0);
                s.kv_capacity_tokens = Some(1000.0);
            }),
            scrape(3.0, "final", |s| {
                s.kv_usage = Some(0.6);
                s.waiting = Some(2.0);
                s.running = Some(6.0);
                s.prefix_cache_queries = Some(3000.0);
                s.prefix_cache_hits = Some(1100.0);
            }),
        ];
        let r = summarize(&s);
        assert_eq!(r.scrapes, 3);
        assert!((r.kv_usage_mean.unwrap() - 0.4).abs() < 1e-12);
        // p99 of [0.2, 0.4, 0.6]: h = 1.98 → 0.4 + 0.98 × 0.2.
        assert!((r.kv_usage_p99.unwrap() - 0.596).abs() < 1e-12);
        // p99 of waiting [0, 2, 10]: h = 1.98 → 2 + 0.98 × 8.
        assert!((r.queue_depth_p99.unwrap() - 9.84).abs() < 1e-12);
        assert_eq!(r.running_mean, Some(6.0));
        assert_eq!(r.kv_capacity_tokens, Some(1000.0));
        // (1100 − 100) / (3000 − 1000).
        assert_eq!(r.prefix_cache_ratio, Some(0.5));
        assert_eq!(r.evicted_tokens, None, "not reported: null, not 0");
    }

    #[test]
    fn no_measured_scrape_is_all_null() {
        let r = summarize(&[scrape(0.0, "baseline", |_| {})]);
        assert_eq!(r, ServerSummary::default());
    }

    #[test]
    fn a_counter_reset_counts_from_zero() {
        let s = [
            scrape(0.0, "baseline", |s| s.evicted_tokens = Some(500.0)),
            scrape(1.0, "final", |s| s.evicted_tokens = Some(40.0)),
        ];
        assert_eq!(summarize(&s).evicted_tokens, Some(40.0));
    }
}
