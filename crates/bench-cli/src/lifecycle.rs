//! Run lifecycle for `bench run`: who is running (pid, host, process start time), heartbeats
//! in `events.jsonl`, and signals (the first SIGINT/SIGTERM stops dispatching and lets turns in
//! flight finish within a grace period; a second one, or the end of the grace period, cuts
//! them).

use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, Instant};

use bench_runner::{CancelToken, Observer, RunEvent};

/// This machine's name, as `bench status` reads it back (empty when unknown).
pub fn host() -> String {
    bench_telemetry::health::hostname().unwrap_or_default()
}

/// When process `pid` started (RFC 3339 UTC), from `/proc/<pid>/stat` and the boot time in
/// `/proc/stat` (the reading `bench status` compares it with); `None` off Linux or when
/// unreadable. The kernel counts clock ticks (1/100 s) from a boot time in whole seconds.
pub fn process_start_utc(pid: u32) -> Option<String> {
    match bench_telemetry::health::process_liveness(pid) {
        bench_telemetry::health::Liveness::Alive { started } => started
            .format(&time::format_description::well_known::Rfc3339)
            .ok(),
        _ => None,
    }
}

/// Raises this process's open-files limit (the soft limit, up to the hard one) so that `need`
/// descriptors fit; `None` raises it as far as it goes. Returns the limit now in force. When
/// `need` cannot fit, the error says how many are needed, the limits, and how to raise them.
pub fn ensure_open_files(need: Option<u64>, what: &str) -> Result<u64, crate::CliError> {
    let want = need.unwrap_or(u64::MAX);
    let lim = rlimit::increase_nofile_limit(want)
        .map_err(|e| crate::CliError::Failed(format!("cannot raise the open-files limit: {e}")))?;
    match need {
        Some(n) if lim < n => {
            let hard = rlimit::getrlimit(rlimit::Resource::NOFILE).map_or(lim, |(_, h)| h);
            Err(crate::CliError::Usage(format!(
                "{what} needs about {n} open files, but the limit is {lim} (hard limit {hard}); \
                 raise the hard limit (`ulimit -Hn {n}` as root, /etc/security/limits.conf, or \
                 LimitNOFILE= in a systemd unit) or lower the concurrency"
            )))
        }
        _ => Ok(lim),
    }
}

/// Counts what the heartbeat reports.
#[derive(Debug, Default)]
pub struct Beat {
    sessions_started: AtomicU64,
    sessions_finished: AtomicU64,
    turns_sent: AtomicU64,
    turns_done: AtomicU64,
    input: AtomicU64,
    output: AtomicU64,
    cached: AtomicU64,
}

impl Observer for Beat {
    fn on_event(&self, e: &RunEvent<'_>) {
        match e {
            RunEvent::SessionStarted { .. } => {
                self.sessions_started.fetch_add(1, Ordering::Relaxed);
            }
            RunEvent::SessionFinished(_) => {
                self.sessions_finished.fetch_add(1, Ordering::Relaxed);
            }
            RunEvent::TurnSent { .. } => {
                self.turns_sent.fetch_add(1, Ordering::Relaxed);
            }
            RunEvent::TurnFinished(t) => {
                self.turns_done.fetch_add(1, Ordering::Relaxed);
                if t.status == bench_report::TurnStatus::Ok && !t.warmup {
                    let add = |a: &AtomicU64, v: Option<u64>| {
                        a.fetch_add(v.unwrap_or(0), Ordering::Relaxed);
                    };
                    add(&self.input, t.input_tokens);
                    add(&self.output, t.output_tokens);
                    add(&self.cached, t.cached_tokens);
                }
            }
            _ => {}
        }
    }
}

impl Beat {
    /// The `heartbeat` event's fields now.
    pub fn fields(&self, elapsed: Duration) -> serde_json::Value {
        let l = |a: &AtomicU64| a.load(Ordering::Relaxed);
        let done = l(&self.turns_done);
        serde_json::json!({
            "elapsed_s": elapsed.as_secs_f64(),
            "turns_done": done,
            "in_flight": l(&self.turns_sent).saturating_sub(done),
            "active_sessions": l(&self.sessions_started).saturating_sub(l(&self.sessions_finished)),
            "tokens": {"input": l(&self.input), "output": l(&self.output), "cached": l(&self.cached)},
        })
    }
}

/// Emits a `heartbeat` event every `every` until aborted.
pub fn spawn_heartbeat(
    beat: Arc<Beat>,
    every: Duration,
    emit: impl Fn(serde_json::Value) + Send + 'static,
) -> tokio::task::JoinHandle<()> {
    let start = Instant::now();
    tokio::spawn(async move {
        let mut tick = tokio::time::interval_at(tokio::time::Instant::now() + every, every);
        tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
        loop {
            tick.tick().await;
            emit(beat.fields(start.elapsed()));
        }
    })
}

/// Handles SIGINT and SIGTERM: the first cancels (no new turn; turns in flight finish) and
/// starts the `grace` period; a second signal, or the end of the grace period, aborts (turns
/// in flight are cut and recorded as `cancelled`).
pub fn spawn_signals(cancel: CancelToken, grace: Duration) -> tokio::task::JoinHandle<()> {
    tokio::spawn(async move {
        let mut term =
            tokio::signal::unix::signal(tokio::signal::unix::SignalKind::terminate()).ok();
        let next = async |term: &mut Option<tokio::signal::unix::Signal>| match term {
            Some(t) => {
                tokio::select! {
                    _ = tokio::signal::ctrl_c() => {}
                    _ = t.recv() => {}
                }
            }
            None => {
                let _ = tokio::signal::ctrl_c().await;
            }
        };
        next(&mut term).await;
        eprintln!(
            "bench run: stopping: no new turn starts; turns in flight get {} s to finish \
             (signal again to cut them now)",
            grace.as_secs_f64()
        );
        cancel.cancel();
        tokio::select! {
            () = next(&mut term) => eprintln!("bench run: second signal: cutting turns in flight"),
            () = tokio::time::sleep(grace) => eprintln!("bench run: grace period over: cutting turns in flight"),
        }
        cancel.abort();
    })
}
