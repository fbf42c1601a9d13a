//! What a run cost and the energy its GPUs used, per output token, turn and session
//! (`result.json` `cost` and `energy`): the price from `--cost-per-hour` × `--gpus` over the
//! measured phase, the energy from a DCGM exporter's counters ([`bench_telemetry::gpu_energy`]).

use serde::{Deserialize, Serialize};

/// The deployment's price: `judge.cost` (`--cost-per-hour USD`, `--gpus N`).
#[derive(Debug, Clone, Copy, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct CostModel {
    /// Price of one GPU for an hour, USD.
    pub usd_per_gpu_hour: f64,
    /// GPUs the deployment holds [default: 1].
    #[serde(default = "one")]
    pub gpus: u32,
}

fn one() -> u32 {
    1
}

impl CostModel {
    /// Checks the figures: a price that is a finite number ≥ 0 and at least one GPU.
    pub fn validate(&self) -> Result<(), String> {
        if !self.usd_per_gpu_hour.is_finite() || self.usd_per_gpu_hour < 0.0 {
            return Err(format!(
                "--cost-per-hour is a price in USD per GPU-hour (0 or more), not {}",
                self.usd_per_gpu_hour
            ));
        }
        if self.gpus == 0 {
            return Err("--gpus is the number of GPUs the price covers: 1 or more".to_owned());
        }
        Ok(())
    }
}

/// `result.json` `cost`: the measured phase at the deployment's price.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct CostSummary {
    /// `--cost-per-hour`, USD per GPU-hour.
    pub usd_per_gpu_hour: f64,
    /// `--gpus`.
    pub gpus: u32,
    /// The measured phase, s (`overall.span_s`).
    pub window_s: f64,
    /// `usd_per_gpu_hour × gpus × window_s ÷ 3600`.
    pub usd: f64,
    /// `usd ÷` the measured ok turns' output tokens × 10⁶.
    pub usd_per_m_output_tokens: Option<f64>,
    /// `usd ÷` measured ok turns.
    pub usd_per_turn: Option<f64>,
    /// `usd ÷` session plays the measured phase completed.
    pub usd_per_session: Option<f64>,
}

/// `result.json` `energy`: the GPUs' energy over the measured phase.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct EnergySummary {
    /// J, summed over the sources ([`bench_telemetry::GpuEnergy`]).
    pub joules: f64,
    /// `counter` (`DCGM_FI_DEV_TOTAL_ENERGY_CONSUMPTION`'s increase) or `power_integrated`
    /// (`DCGM_FI_DEV_POWER_USAGE` between the scrapes).
    pub method: bench_telemetry::EnergyMethod,
    /// `server` (its own `/metrics`) or the `--scrape` URLs it came from.
    pub sources: Vec<String>,
    /// GPUs reporting.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub gpus: Option<f64>,
    /// `joules ÷` measured ok turns.
    pub j_per_turn: Option<f64>,
    /// `joules ÷` session plays the measured phase completed.
    pub j_per_session: Option<f64>,
    /// `joules ÷` the measured ok turns' output tokens.
    pub j_per_output_token: Option<f64>,
}

/// What the cost and energy are divided by: the measured phase's ok turns, their output
/// tokens, the session plays it completed and its length.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Denominators {
    /// Measured ok turns.
    pub turns: u64,
    /// Their output tokens.
    pub output_tokens: f64,
    /// Session plays completed.
    pub sessions: u64,
    /// The measured phase, s.
    pub window_s: Option<f64>,
}

fn per(x: f64, n: f64) -> Option<f64> {
    (n > 0.0 && x.is_finite()).then(|| x / n)
}

/// The cost of the measured phase (`None` without a price or a positive window).
pub fn cost(model: Option<&CostModel>, d: Denominators) -> Option<CostSummary> {
    let m = model?;
    let window_s = d.window_s.filter(|w| *w > 0.0 && w.is_finite())?;
    let usd = m.usd_per_gpu_hour * f64::from(m.gpus) * window_s / 3600.0;
    Some(CostSummary {
        usd_per_gpu_hour: m.usd_per_gpu_hour,
        gpus: m.gpus,
        window_s,
        usd,
        usd_per_m_output_tokens: per(usd * 1e6, d.output_tokens),
        usd_per_turn: per(usd, d.turns as f64),
        usd_per_session: per(usd, d.sessions as f64),
    })
}

/// The energy per unit (`None` when no source reported GPU power or energy).
pub fn energy(e: Option<&bench_telemetry::GpuEnergy>, d: Denominators) -> Option<EnergySummary> {
    let e = e?;
    Some(EnergySummary {
        joules: e.joules,
        method: e.method,
        sources: e.sources.clone(),
        gpus: e.gpus,
        j_per_turn: per(e.joules, d.turns as f64),
        j_per_session: per(e.joules, d.sessions as f64),
        j_per_output_token: per(e.joules, d.output_tokens),
    })
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]
    use super::*;

    #[test]
    fn cost_and_energy_divide_by_the_measured_phase() {
        let d = Denominators {
            turns: 400,
            output_tokens: 80_000.0,
            sessions: 20,
            window_s: Some(1800.0),
        };
        let m = CostModel {
            usd_per_gpu_hour: 2.5,
            gpus: 8,
        };
        let c = cost(Some(&m), d).unwrap();
        // 2.5 × 8 × 0.5 h = $10.
        assert!((c.usd - 10.0).abs() < 1e-12);
        assert!((c.usd_per_m_output_tokens.unwrap() - 125.0).abs() < 1e-9);
        assert!((c.usd_per_turn.unwrap() - 0.025).abs() < 1e-12);
        assert!((c.usd_per_session.unwrap() - 0.5).abs() < 1e-12);
        let none = Denominators { sessions: 0, ..d };
        assert_eq!(cost(Some(&m), none).unwrap().usd_per_session, None);
        assert_eq!(cost(None, d), None);
        assert_eq!(
            cost(
                Some(&m),
                Denominators {
                    window_s: None,
                    ..d
                }
            ),
            None
        );
        let e = bench_telemetry::GpuEnergy {
            joules: 12_000.0,
            method: bench_telemetry::EnergyMethod::Counter,
            sources: vec!["server".into()],
            gpus: Some(1.0),
        };
        let s = energy(Some(&e), d).unwrap();
        assert_eq!(s.j_per_turn, Some(30.0));
        assert_eq!(s.j_per_session, Some(600.0));
        assert_eq!(s.j_per_output_token, Some(0.15));
        assert!(m.validate().is_ok());
        assert!(
            CostModel { gpus: 0, ..m }
                .validate()
                .unwrap_err()
                .contains("--gpus")
        );
        assert!(
            CostModel {
                usd_per_gpu_hour: -1.0,
                ..m
            }
            .validate()
            .unwrap_err()
            .contains("--cost-per-hour")
        );
    }
}
