//! A GPU's power and energy as a DCGM exporter reports them (`SimConfig::gpu_metrics`).
//!
//! Power is [`IDLE_W`] with nothing running and `IDLE_W + (MAX_W − IDLE_W) × (0.6 + 0.4 ×
//! running ÷ max_num_seqs)` otherwise (a GPU with any batch runs its kernels near full clock; a
//! fuller batch draws a little more). Energy is that power integrated every
//! [`TICK`] and whenever `/metrics` is read, exposed in mJ like DCGM's counter.

use std::fmt::Write as _;
use std::time::{Duration, Instant};

/// Power with nothing running, W.
pub const IDLE_W: f64 = 70.0;
/// Power with the batch full, W.
pub const MAX_W: f64 = 350.0;
/// How often the energy is integrated.
pub const TICK: Duration = Duration::from_millis(10);

/// The meter: the energy so far and when it was last brought up to date.
#[derive(Debug)]
pub(crate) struct GpuMeter {
    last: Instant,
    energy_j: f64,
    power_w: f64,
}

impl GpuMeter {
    pub(crate) fn new(now: Instant) -> GpuMeter {
        GpuMeter {
            last: now,
            energy_j: 0.0,
            power_w: IDLE_W,
        }
    }

    /// Power with `running` of `max_num_seqs` sequences running, W.
    pub(crate) fn power(running: u64, max_num_seqs: usize) -> f64 {
        if running == 0 {
            return IDLE_W;
        }
        let fill = (running as f64 / max_num_seqs.max(1) as f64).min(1.0);
        IDLE_W + (MAX_W - IDLE_W) * (0.6 + 0.4 * fill)
    }

    /// Adds the energy since the last update at the power then, and sets the power now.
    pub(crate) fn advance(&mut self, now: Instant, power_w: f64) {
        let dt = now.saturating_duration_since(self.last).as_secs_f64();
        self.energy_j += self.power_w * dt;
        self.last = now;
        self.power_w = power_w;
    }

    /// The DCGM lines of GPU 0.
    pub(crate) fn render(&self, out: &mut String) {
        let labels =
            "gpu=\"0\",UUID=\"GPU-bench-sim-0\",device=\"nvidia0\",modelName=\"bench-sim\"";
        let _ = writeln!(
            out,
            "# HELP DCGM_FI_DEV_POWER_USAGE Power draw (in W).\n\
             # TYPE DCGM_FI_DEV_POWER_USAGE gauge\n\
             DCGM_FI_DEV_POWER_USAGE{{{labels}}} {:.3}\n\
             # HELP DCGM_FI_DEV_TOTAL_ENERGY_CONSUMPTION Total energy consumption since boot (in mJ).\n\
             # TYPE DCGM_FI_DEV_TOTAL_ENERGY_CONSUMPTION counter\n\
             DCGM_FI_DEV_TOTAL_ENERGY_CONSUMPTION{{{labels}}} {}",
            self.power_w,
            (self.energy_j * 1000.0).round() as u64
        );
    }
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]
    use super::*;

    #[test]
    fn energy_integrates_the_power_between_updates() {
        let t0 = Instant::now();
        let mut m = GpuMeter::new(t0);
        assert_eq!(GpuMeter::power(0, 4), IDLE_W);
        assert_eq!(GpuMeter::power(4, 4), MAX_W);
        assert_eq!(GpuMeter::power(8, 4), MAX_W);
        let half = GpuMeter::power(2, 4);
        assert!((half - (70.0 + 280.0 * 0.8)).abs() < 1e-9);
        // 2 s idle, then 1 s at full power.
        m.advance(t0 + Duration::from_secs(2), MAX_W);
        m.advance(t0 + Duration::from_secs(3), IDLE_W);
        assert!((m.energy_j - (2.0 * IDLE_W + MAX_W)).abs() < 1e-9);
        let mut text = String::new();
        m.render(&mut text);
        let snap = text.lines().last().unwrap();
        assert!(snap.ends_with(" 490000"), "{text}");
        assert!(text.contains("DCGM_FI_DEV_POWER_USAGE{gpu=\"0\""));
    }
}
