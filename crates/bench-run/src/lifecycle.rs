//! Who runs a run (pid, host, process start time), its open-files limit, and the heartbeat
//! counters written to `events.jsonl`.

use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, Instant};

use bench_rundir::{Heartbeat, Tokens, TurnStatus};
use bench_runner::{Observer, RunEvent};

use crate::RunError;

/// This machine's name, as `bench status` reads it back (empty when unknown).
pub fn host() -> String {
    bench_telemetry::health::hostname().unwrap_or_default()
}

/// When process `pid` started (RFC 3339 UTC), from `/proc` (the reading `bench status`
/// compares it with); `None` off Linux or when unreadable.
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
pub fn ensure_open_files(need: Option<u64>, what: &str) -> Result<u64, RunError> {
    let want = need.unwrap_or(u64::MAX);
    let lim = rlimit::increase_nofile_limit(want)
        .map_err(|e| RunError::Failed(format!("cannot raise the open-files limit: {e}")))?;
    match need {
        Some(n) if lim < n => {
            let hard = rlimit::getrlimit(rlimit::Resource::NOFILE).map_or(lim, |(_, h)| h);
            Err(RunError::Invalid(format!(
                "{what} needs about {n} open files, but the limit is {lim} (hard limit {hard}); \
                 raise the hard limit (`ulimit -Hn {n}` as root, /etc/security/limits.conf, or \
                 LimitNOFILE= in a systemd unit) or lower the concurrency"
            )))
        }
        _ => Ok(lim),
    }
}

/// This host's ephemeral (local) ports: `net.ipv4.ip_local_port_range`, low and high
/// (`None` off Linux or when unreadable).
pub fn ephemeral_port_range() -> Option<(u32, u32)> {
    let s = std::fs::read_to_string("/proc/sys/net/ipv4/ip_local_port_range").ok()?;
    let mut it = s.split_whitespace().map(str::parse::<u32>);
    let (lo, hi) = (it.next()?.ok()?, it.next()?.ok()?);
    (lo <= hi).then_some((lo, hi))
}

/// Every connection to one server (one address and port) needs its own local port, so at most
/// as many connections as the ephemeral port range holds can be open to it at once. A run
/// whose `in_flight` sessions would all be in a request together (`all_at_once`: a closed loop
/// without tool waits, or one that starts every session at once) and do not fit is refused
/// before it starts; one whose sessions spend time in tool waits between requests gets a
/// warning (returned), since only the sessions in a request at that moment hold a connection.
pub fn check_ephemeral_ports(
    in_flight: Option<u32>,
    all_at_once: bool,
    target: &str,
) -> Result<Option<String>, RunError> {
    let (Some(c), Some((lo, hi))) = (in_flight, ephemeral_port_range()) else {
        return Ok(None);
    };
    ports_verdict(u64::from(c), lo, hi, all_at_once, target)
}

fn ports_verdict(
    c: u64,
    lo: u32,
    hi: u32,
    all_at_once: bool,
    target: &str,
) -> Result<Option<String>, RunError> {
    let ports = u64::from(hi - lo) + 1;
    if c <= ports {
        return Ok(None);
    }
    let why = format!(
        "{c} sessions in flight may need up to {c} connections to {target}, but this host has \
         {ports} ephemeral ports per destination (net.ipv4.ip_local_port_range {lo} {hi})"
    );
    if all_at_once {
        Err(RunError::Invalid(format!(
            "{why}: widen the range (`sysctl -w net.ipv4.ip_local_port_range=\"1024 65535\"` as \
             root), lower the concurrency, start sessions over a --ramp-up, or split the run \
             across client hosts"
        )))
    } else {
        Ok(Some(format!(
            "{why}; with tool waits only the sessions in a request hold one, but a burst of more \
             than {ports} requests at once will fail to connect"
        )))
    }
}

/// Counts what the heartbeat reports (an [`Observer`]: atomics only).
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
                if t.status == TurnStatus::Ok && !t.warmup {
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
    /// The `heartbeat` event now, `elapsed` into the segment.
    pub fn heartbeat(&self, elapsed: Duration) -> Heartbeat {
        let l = |a: &AtomicU64| a.load(Ordering::Relaxed);
        let done = l(&self.turns_done);
        Heartbeat {
            elapsed_s: elapsed.as_secs_f64(),
            turns_done: done,
            in_flight: l(&self.turns_sent).saturating_sub(done),
            active_sessions: l(&self.sessions_started).saturating_sub(l(&self.sessions_finished)),
            tokens: Tokens {
                input: l(&self.input),
                output: l(&self.output),
                cached: l(&self.cached),
            },
        }
    }
}

/// Emits a heartbeat every `every` (the first after one interval) until aborted.
pub fn spawn_heartbeat(
    beat: Arc<Beat>,
    every: Duration,
    emit: impl Fn(Heartbeat) + Send + 'static,
) -> tokio::task::JoinHandle<()> {
    let start = Instant::now();
    tokio::spawn(async move {
        let mut tick = tokio::time::interval_at(tokio::time::Instant::now() + every, every);
        tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
        loop {
            tick.tick().await;
            emit(beat.heartbeat(start.elapsed()));
        }
    })
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use super::*;
    use std::sync::Mutex;

    #[tokio::test(start_paused = true)]
    async fn heartbeats_come_every_interval_with_the_counts() {
        let beat = Arc::new(Beat::default());
        beat.on_event(&RunEvent::SessionStarted {
            session_id: "a",
            replay: 0,
            warmup: false,
        });
        beat.on_event(&RunEvent::TurnSent {
            session_id: "a",
            turn_index: 0,
        });
        let seen = Arc::new(Mutex::new(Vec::new()));
        let s = seen.clone();
        let task = spawn_heartbeat(beat.clone(), Duration::from_secs(5), move |h| {
            s.lock().unwrap().push(h)
        });
        tokio::time::sleep(Duration::from_millis(4_900)).await;
        assert!(seen.lock().unwrap().is_empty(), "none before the interval");
        tokio::time::sleep(Duration::from_millis(10_200)).await;
        task.abort();
        let seen = seen.lock().unwrap();
        assert_eq!(seen.len(), 3, "at 5, 10 and 15 s");
        assert_eq!(seen[0].in_flight, 1);
        assert_eq!(seen[0].active_sessions, 1);
        assert_eq!(seen[0].turns_done, 0);
    }

    #[test]
    fn ports_fit_or_are_refused_or_warned() {
        assert!(matches!(
            ports_verdict(28_000, 32768, 60999, true, "x"),
            Ok(None)
        ));
        let Err(RunError::Invalid(e)) = ports_verdict(50_000, 32768, 60999, true, "127.0.0.1:8000")
        else {
            panic!("50,000 sessions at once on 28,232 ports must be refused");
        };
        assert!(e.contains("28232 ephemeral ports"), "{e}");
        assert!(e.contains("127.0.0.1:8000"), "{e}");
        assert!(!e.contains('\n'));
        let Ok(Some(w)) = ports_verdict(50_000, 32768, 60999, false, "x") else {
            panic!("with tool waits: a warning");
        };
        assert!(w.contains("burst of more than 28232"), "{w}");
    }
}
