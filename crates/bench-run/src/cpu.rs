//! The client's own CPU time over the measured phase (`result.json` `client`, and the
//! validity check on client saturation).

use std::sync::Mutex;
use std::time::Instant;

use bench_rundir::Phase;
use bench_runner::{Observer, RunEvent};

/// User + system CPU time of this process so far, s (`None` where it cannot be read).
pub fn process_cpu_s() -> Option<f64> {
    #[cfg(unix)]
    {
        use nix::sys::resource::{UsageWho, getrusage};
        let u = getrusage(UsageWho::RUSAGE_SELF).ok()?;
        let s = |t: nix::sys::time::TimeVal| t.tv_sec() as f64 + t.tv_usec() as f64 / 1e6;
        Some(s(u.user_time()) + s(u.system_time()))
    }
    #[cfg(not(unix))]
    {
        None
    }
}

/// The process's peak resident memory so far, in bytes (`None` where it cannot be read).
pub fn peak_rss_bytes() -> Option<u64> {
    #[cfg(unix)]
    {
        use nix::sys::resource::{UsageWho, getrusage};
        let u = getrusage(UsageWho::RUSAGE_SELF).ok()?;
        // Linux reports KiB (macOS bytes).
        let n = u64::try_from(u.max_rss()).ok()?;
        Some(if cfg!(target_os = "macos") {
            n
        } else {
            n * 1024
        })
    }
    #[cfg(not(unix))]
    {
        None
    }
}

/// Reads the process's CPU time when the measured phase starts (or when it is made, for a run
/// without one) and again at [`CpuMeter::finish`].
#[derive(Debug)]
pub struct CpuMeter {
    start: Mutex<(Instant, Option<f64>)>,
}

impl CpuMeter {
    /// Starts counting now.
    pub fn new() -> CpuMeter {
        CpuMeter {
            start: Mutex::new((Instant::now(), process_cpu_s())),
        }
    }

    /// The CPU and wall time since the measured phase began; `None` where CPU time cannot be
    /// read.
    pub fn finish(&self, includes_server: bool) -> Option<bench_report::ClientCpu> {
        let (t0, cpu0) = *self
            .start
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner);
        let (cpu0, cpu1) = (cpu0?, process_cpu_s()?);
        let mut c = bench_report::ClientCpu::new(
            (cpu1 - cpu0).max(0.0),
            t0.elapsed().as_secs_f64(),
            includes_server,
        );
        c.peak_rss_bytes = peak_rss_bytes();
        c.process_cpu_start_s = Some(cpu0);
        c.process_cpu_end_s = Some(cpu1);
        Some(c)
    }
}

impl Default for CpuMeter {
    fn default() -> Self {
        CpuMeter::new()
    }
}

impl Observer for CpuMeter {
    fn on_event(&self, e: &RunEvent<'_>) {
        if let RunEvent::Phase(Phase::Measuring) = e {
            *self
                .start
                .lock()
                .unwrap_or_else(std::sync::PoisonError::into_inner) =
                (Instant::now(), process_cpu_s());
        }
    }
}
