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
    /// The `--scrape` target it came from (its URL, credentials removed); absent for the
    /// server's own `/metrics`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub target: Option<String>,
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
    /// Mean GPU power over the measured scrapes, W (DCGM).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub gpu_power_mean_w: Option<f64>,
    /// Highest GPU power a measured scrape saw, W (DCGM).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub gpu_power_max_w: Option<f64>,
    /// GPU energy over the measured run, J ([`energy_of`]).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub gpu_energy_j: Option<f64>,
    /// GPUs reporting, as the last measured scrape said.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub gpus: Option<f64>,
}

/// A `--scrape` target's summary (`result.json` `scrape_targets`).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct TargetSummary {
    /// Its URL, credentials removed.
    pub target: String,
    /// Its metrics over the measured run, summarized as the server's are.
    pub summary: ServerSummary,
}

/// How a source's energy over the measured run was found.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum EnergyMethod {
    /// The increase of `DCGM_FI_DEV_TOTAL_ENERGY_CONSUMPTION`.
    Counter,
    /// `DCGM_FI_DEV_POWER_USAGE` integrated over the scrapes (trapezoids).
    PowerIntegrated,
}

/// GPU energy over the measured run from one source's scrapes: the energy counter's increase
/// from the last scrape before measuring (the baseline, or the end of the warmup) to the last
/// scrape, else the power gauge integrated between the same scrapes (trapezoids; needs two
/// scrapes with power). `None` when the source reports neither.
pub fn energy_of(scrapes: &[&Scrape]) -> Option<(f64, EnergyMethod)> {
    let measured: Vec<&Scrape> = scrapes
        .iter()
        .copied()
        .filter(|s| s.phase.is_measured())
        .collect();
    let last = measured.last()?;
    let start = scrapes
        .iter()
        .copied()
        .rev()
        .find(|s| matches!(s.phase, ScrapePhase::Baseline | ScrapePhase::Warmup));
    if let (Some(a), Some(b)) = (
        start.and_then(|s| s.snapshot.gpu_energy_j),
        last.snapshot.gpu_energy_j,
    ) {
        return Some((if b >= a { b - a } else { b }, EnergyMethod::Counter));
    }
    let points: Vec<(f64, f64)> = start
        .into_iter()
        .chain(measured.iter().copied())
        .filter_map(|s| Some((s.t_s, s.snapshot.gpu_power_w?)))
        .collect();
    if points.len() < 2 {
        return None;
    }
    let j = points
        .windows(2)
        .map(|w| (w[1].0 - w[0].0).max(0.0) * (w[0].1 + w[1].1) / 2.0)
        .sum();
    Some((j, EnergyMethod::PowerIntegrated))
}

/// The GPUs' energy over the measured run, from every source that reports it.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct GpuEnergy {
    /// Σ over the sources, J.
    pub joules: f64,
    /// How each source's was found (the counter's when every source had one).
    pub method: EnergyMethod,
    /// Where it came from: `server` (its own `/metrics`) or the `--scrape` targets' URLs.
    pub sources: Vec<String>,
    /// GPUs reporting, summed over the sources.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub gpus: Option<f64>,
}

/// The run's GPU energy: from the `--scrape` targets that report DCGM power or energy, else
/// from the server's own `/metrics` (never both, so one exporter scraped twice is not counted
/// twice).
pub fn gpu_energy(scrapes: &[Scrape]) -> Option<GpuEnergy> {
    let mut targets: Vec<&str> = Vec::new();
    for s in scrapes {
        if let Some(t) = s.target.as_deref()
            && !targets.contains(&t)
        {
            targets.push(t);
        }
    }
    let of = |t: Option<&str>| -> Vec<&Scrape> {
        scrapes
            .iter()
            .filter(|s| s.target.as_deref() == t)
            .collect()
    };
    let mut found: Vec<(String, f64, EnergyMethod, Option<f64>)> = Vec::new();
    for t in &targets {
        let ss = of(Some(t));
        if let Some((j, m)) = energy_of(&ss) {
            let gpus = ss.iter().rev().find_map(|s| s.snapshot.gpus);
            found.push(((*t).to_owned(), j, m, gpus));
        }
    }
    if found.is_empty() {
        let ss = of(None);
        if let Some((j, m)) = energy_of(&ss) {
            let gpus = ss.iter().rev().find_map(|s| s.snapshot.gpus);
            found.push(("server".to_owned(), j, m, gpus));
        }
    }
    if found.is_empty() {
        return None;
    }
    let method = if found.iter().all(|f| f.2 == EnergyMethod::Counter) {
        EnergyMethod::Counter
    } else {
        EnergyMethod::PowerIntegrated
    };
    let gpus = found.iter().filter_map(|f| f.3).reduce(|a, b| a + b);
    Some(GpuEnergy {
        joules: found.iter().map(|f| f.1).sum(),
        method,
        sources: found.into_iter().map(|f| f.0).collect(),
        gpus,
    })
}

/// Each `--scrape` target's summary, in the order they were first scraped.
pub fn summarize_targets(scrapes: &[Scrape]) -> Vec<TargetSummary> {
    let mut out: Vec<TargetSummary> = Vec::new();
    for s in scrapes {
        let Some(t) = s.target.as_deref() else {
            continue;
        };
        if out.iter().any(|o| o.target == t) {
            continue;
        }
        let ss: Vec<&Scrape> = scrapes
            .iter()
            .filter(|x| x.target.as_deref() == Some(t))
            .collect();
        out.push(TargetSummary {
            target: t.to_owned(),
            summary: summarize_refs(&ss),
        });
    }
    out
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
/// The server's own scrapes only (those of `--scrape` targets are [`summarize_targets`]').
pub fn summarize(scrapes: &[Scrape]) -> ServerSummary {
    let own: Vec<&Scrape> = scrapes.iter().filter(|s| s.target.is_none()).collect();
    summarize_refs(&own)
}

fn summarize_refs(scrapes: &[&Scrape]) -> ServerSummary {
    let measured: Vec<&Scrape> = scrapes
        .iter()
        .copied()
        .filter(|s| s.phase.is_measured())
        .collect();
    let Some(last) = measured.last() else {
        return ServerSummary::default();
    };
    let start = scrapes
        .iter()
        .rev()
        .find(|s| matches!(s.phase, ScrapePhase::Baseline | ScrapePhase::Warmup))
        .map(|s| &s.snapshot);
    let power = sorted(measured.iter().filter_map(|s| s.snapshot.gpu_power_w));
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
        gpu_power_mean_w: mean(&power),
        gpu_power_max_w: power.last().copied(),
        gpu_energy_j: energy_of(scrapes).map(|e| e.0),
        gpus: end.gpus,
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
            target: None,
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
    fn dcgm_energy_from_the_counter_else_the_power_integrated() {
        let text = "# TYPE DCGM_FI_DEV_POWER_USAGE gauge\n\
            DCGM_FI_DEV_POWER_USAGE{gpu=\"0\",UUID=\"GPU-a\"} 250.5\n\
            DCGM_FI_DEV_POWER_USAGE{gpu=\"1\",UUID=\"GPU-b\"} 100\n\
            # TYPE DCGM_FI_DEV_TOTAL_ENERGY_CONSUMPTION counter\n\
            DCGM_FI_DEV_TOTAL_ENERGY_CONSUMPTION{gpu=\"0\",UUID=\"GPU-a\"} 5000\n\
            DCGM_FI_DEV_TOTAL_ENERGY_CONSUMPTION{gpu=\"1\",UUID=\"GPU-b\"} 7000\n";
        let snap = crate::parse(text).unwrap();
        assert_eq!(snap.gpu_power_w, Some(350.5));
        assert_eq!(snap.gpu_energy_j, Some(12.0), "mJ summed, in J");
        assert_eq!(snap.gpus, Some(2.0));
        assert_eq!(snap.backend, Backend::Unknown);

        let at = |t: f64, phase: &str, w: f64, j: Option<f64>, target: Option<&str>| {
            let mut s = scrape(t, phase, |s| {
                s.gpu_power_w = Some(w);
                s.gpu_energy_j = j;
                s.gpus = Some(1.0);
            });
            s.target = target.map(str::to_owned);
            s
        };
        // The counter: from the warmup's last scrape (not the baseline) to the final one.
        let c = [
            at(0.0, "baseline", 100.0, Some(10.0), None),
            at(1.0, "warmup", 300.0, Some(200.0), None),
            at(2.0, "measuring", 300.0, Some(500.0), None),
            at(4.0, "final", 100.0, Some(1000.0), None),
        ];
        let refs: Vec<&Scrape> = c.iter().collect();
        assert_eq!(energy_of(&refs), Some((800.0, EnergyMethod::Counter)));
        let r = summarize(&c);
        assert_eq!(r.gpu_energy_j, Some(800.0));
        assert_eq!(r.gpu_power_mean_w, Some(200.0));
        assert_eq!(r.gpu_power_max_w, Some(300.0));
        // Power only: trapezoids 1→2 s (300, 300) and 2→4 s (300, 100): 300 + 400.
        let p: Vec<Scrape> = c
            .iter()
            .cloned()
            .map(|mut s| {
                s.snapshot.gpu_energy_j = None;
                s
            })
            .collect();
        let refs: Vec<&Scrape> = p.iter().collect();
        assert_eq!(
            energy_of(&refs),
            Some((700.0, EnergyMethod::PowerIntegrated))
        );
        // A --scrape target that reports it wins over the server's own /metrics.
        let mut both = c.to_vec();
        both.extend([
            at(
                0.5,
                "warmup",
                50.0,
                Some(1.0),
                Some("http://gpu:9400/metrics"),
            ),
            at(
                4.0,
                "final",
                50.0,
                Some(31.0),
                Some("http://gpu:9400/metrics"),
            ),
        ]);
        let e = gpu_energy(&both).unwrap();
        assert_eq!(e.joules, 30.0);
        assert_eq!(e.sources, ["http://gpu:9400/metrics"]);
        assert_eq!(
            summarize(&both).gpu_energy_j,
            Some(800.0),
            "the server's own"
        );
        let t = summarize_targets(&both);
        assert_eq!(t.len(), 1);
        assert_eq!(t[0].summary.gpu_energy_j, Some(30.0));
        assert_eq!(gpu_energy(&c).unwrap().sources, ["server"]);
        assert_eq!(gpu_energy(&[scrape(0.0, "final", |_| {})]), None);
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
