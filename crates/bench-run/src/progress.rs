//! Run progress: the counters behind a progress bar, the heartbeat lines and a control
//! plane's `progress` events. [`ProgressCounters`] is an [`Observer`]: the engine's workers
//! only bump atomics (no lock, no allocation per turn); a reader takes a [`Snapshot`] whenever
//! it likes (a ticker thread, so a stalled server still shows).
//!
//! A heartbeat line ([`line()`]):
//!
//! ```text
//! bench run: 35 s · 412/1200 turns · 31 sessions done · 8/8 active · 1532 output tok/s · 0 failed · ETA 1m 07s
//! ```
//!
//! - **active** counts session plays that have finished at least one turn and not yet ended
//!   (a play's first turn has `turn_index` 0; its end is `SessionFinished` with
//!   `turns_played ≥ 1`). A play still waiting for its first turn is not counted: right after
//!   the start, and while first turns are in flight, the figure under-counts. It never
//!   over-counts and is capped at C.
//! - **output tok/s** is over a sliding window ([`RateWindow`]), so it drops to 0 when the
//!   server stalls; it is not the run's average.
//! - **warmup**: during the unmeasured warmup phase the line starts with `warmup ·` and counts
//!   the warmup's turns (no ETA); when the measured phase begins the counts and the clock
//!   start over (the `duration` deadline counts from there).
//! - **ETA**: time left to the `duration` deadline when there is one ("draining" once it has
//!   passed: turns in flight finish), else the remaining planned turns at the pace so far
//!   ("n/a" before the first turn), else none.

use std::collections::VecDeque;
use std::fmt::Write as _;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::time::{Duration, Instant};

use bench_rundir::{Phase, SessionStatus, TurnStatus};
use bench_runner::{Observer, RunEvent};

/// What the run looks like at one moment: the input of [`line()`].
#[derive(Debug, Clone, PartialEq)]
pub struct Snapshot {
    /// In the unmeasured warmup: the counts are the warmup's, and there is no ETA.
    pub warmup: bool,
    /// Time since the run (or, during the warmup, the warmup) started.
    pub elapsed: Duration,
    /// Turns finished (ok or not).
    pub turns_done: u64,
    /// Turns planned; `None` when the run loops the pool under a duration.
    pub turns_planned: Option<u64>,
    /// Turns that ended in an error or a timeout.
    pub turns_failed: u64,
    /// Session plays in progress (see the module docs for what is counted).
    pub active: u32,
    /// Target concurrency `C`; 0 when there is none (open loop): `active` is then shown alone.
    pub concurrency: u32,
    /// Session plays ended (any status).
    pub sessions_done: u64,
    /// Of those, plays cut by the deadline or the fuse.
    pub sessions_truncated: u64,
    /// Output tokens per second over the last interval; `None` when not measured yet.
    pub output_tok_s: Option<f64>,
    /// The `duration` deadline, from the run start.
    pub deadline: Option<Duration>,
}

/// What the ETA field says.
#[derive(Debug, Clone, Copy, PartialEq)]
pub enum Eta {
    /// Time left.
    Left(Duration),
    /// The deadline has passed: turns in flight are finishing.
    Draining,
    /// A planned total but no turn finished yet: no pace to extrapolate from.
    Unknown,
}

impl Snapshot {
    /// Time left: to the deadline when there is one, else the remaining planned turns at the
    /// pace so far; `None` with neither.
    pub fn eta(&self) -> Option<Eta> {
        if self.warmup {
            return None;
        }
        if let Some(d) = self.deadline {
            return Some(if self.elapsed >= d {
                Eta::Draining
            } else {
                Eta::Left(d - self.elapsed)
            });
        }
        let planned = self.turns_planned?;
        if self.turns_done >= planned {
            return Some(Eta::Left(Duration::ZERO));
        }
        if self.turns_done == 0 || self.elapsed.is_zero() {
            return Some(Eta::Unknown);
        }
        let per_turn = self.elapsed.as_secs_f64() / self.turns_done as f64;
        let left = (per_turn * (planned - self.turns_done) as f64).round();
        Some(Duration::try_from_secs_f64(left).map_or(Eta::Unknown, Eta::Left))
    }

    /// How far along the run is, in `[0, 1]`: the planned turns done, else the share of the
    /// deadline elapsed; `None` with neither.
    pub fn fraction(&self) -> Option<f64> {
        if self.warmup {
            return None;
        }
        if let Some(d) = self.deadline.filter(|d| !d.is_zero()) {
            return Some((self.elapsed.as_secs_f64() / d.as_secs_f64()).clamp(0.0, 1.0));
        }
        match self.turns_planned {
            Some(0) => Some(1.0),
            Some(p) => Some((self.turns_done as f64 / p as f64).clamp(0.0, 1.0)),
            None => None,
        }
    }
}

/// `35 s`, `1m 07s`, `2h 03m 04s` (whole seconds, rounded down).
pub fn format_duration(d: Duration) -> String {
    let s = d.as_secs();
    match (s / 3600, s / 60 % 60, s % 60) {
        (0, 0, sec) => format!("{sec} s"),
        (0, m, sec) => format!("{m}m {sec:02}s"),
        (h, m, sec) => format!("{h}h {m:02}m {sec:02}s"),
    }
}

/// The fields of a heartbeat without the `bench run: ` prefix (also the bar's message).
pub fn body(s: &Snapshot) -> String {
    let mut out = String::new();
    if s.warmup {
        out.push_str("warmup · ");
    }
    out.push_str(&format_duration(s.elapsed));
    // Writing to a String cannot fail.
    let _ = match s.turns_planned.filter(|_| !s.warmup) {
        Some(p) => write!(out, " · {}/{p} turns", s.turns_done),
        None => write!(out, " · {} turns", s.turns_done),
    };
    let _ = write!(out, " · {} sessions done", s.sessions_done);
    if s.sessions_truncated > 0 {
        let _ = write!(out, " ({} truncated)", s.sessions_truncated);
    }
    let _ = match s.concurrency {
        0 => write!(out, " · {} active", s.active),
        c => write!(out, " · {}/{c} active", s.active),
    };
    let _ = match s.output_tok_s {
        Some(r) if r.is_finite() => write!(out, " · {r:.0} output tok/s"),
        _ => write!(out, " · n/a output tok/s"),
    };
    let _ = write!(out, " · {} failed", s.turns_failed);
    let _ = match s.eta() {
        Some(Eta::Left(d)) => write!(out, " · ETA {}", format_duration(d)),
        Some(Eta::Draining) => write!(out, " · draining"),
        Some(Eta::Unknown) => write!(out, " · ETA n/a"),
        None => Ok(()),
    };
    out
}

/// One heartbeat line (no trailing newline), e.g. `bench run: 35 s · 412/1200 turns · 31
/// sessions done · 8/8 active · 1532 output tok/s · 0 failed · ETA 1m 07s`.
pub fn line(s: &Snapshot) -> String {
    format!("bench run: {}", body(s))
}

/// The counters the engine bumps (as an [`Observer`]) and readers snapshot.
#[derive(Debug)]
pub struct ProgressCounters {
    created: Instant,
    /// When the clock of the display starts, ns after `created`: moved at `Started` and at
    /// the start of the measured phase (the deadline counts from there).
    start_ns: AtomicU64,
    /// In the warmup phase.
    warmup: AtomicBool,
    /// Bumped when the counts are zeroed (so the ticker restarts its rate window).
    epoch: AtomicU64,
    turns_planned: Option<u64>,
    concurrency: u32,
    deadline: Option<Duration>,
    turns_done: AtomicU64,
    turns_failed: AtomicU64,
    output_tokens: AtomicU64,
    /// Plays whose first turn (`turn_index` 0) finished.
    plays_started: AtomicU64,
    /// Plays ended after at least one turn.
    plays_ended: AtomicU64,
    sessions_done: AtomicU64,
    sessions_truncated: AtomicU64,
}

impl ProgressCounters {
    /// Counters for a run of `turns_planned` turns (`None`: a duration run looping its pool)
    /// at `concurrency` (0: open loop without a cap), with the `deadline` of its duration.
    /// The clock starts now and again at the engine's `Started` event.
    pub fn new(turns_planned: Option<u64>, concurrency: u32, deadline: Option<Duration>) -> Self {
        ProgressCounters {
            created: Instant::now(),
            start_ns: AtomicU64::new(0),
            warmup: AtomicBool::new(false),
            epoch: AtomicU64::new(0),
            turns_planned,
            concurrency,
            deadline,
            turns_done: AtomicU64::new(0),
            turns_failed: AtomicU64::new(0),
            output_tokens: AtomicU64::new(0),
            plays_started: AtomicU64::new(0),
            plays_ended: AtomicU64::new(0),
            sessions_done: AtomicU64::new(0),
            sessions_truncated: AtomicU64::new(0),
        }
    }

    /// Output tokens of ok turns so far (this phase).
    pub fn output_tokens(&self) -> u64 {
        self.output_tokens.load(Ordering::Relaxed)
    }

    /// Bumped whenever the counts are zeroed (warmup → measured): a rate window restarts.
    pub fn epoch(&self) -> u64 {
        self.epoch.load(Ordering::SeqCst)
    }

    /// The counters now, `output_tok_s` the average since the clock started.
    pub fn snapshot_now(&self) -> Snapshot {
        let mut s = self.snapshot(Instant::now());
        let secs = s.elapsed.as_secs_f64();
        s.output_tok_s = (secs > 0.0).then(|| self.output_tokens() as f64 / secs);
        s
    }

    /// When the clock of this phase started.
    pub fn start(&self) -> Instant {
        self.created + Duration::from_nanos(self.start_ns.load(Ordering::Relaxed))
    }

    /// Starts the display clock now.
    fn restart_clock(&self) {
        let ns = self.created.elapsed().as_nanos();
        self.start_ns
            .store(u64::try_from(ns).unwrap_or(u64::MAX), Ordering::Relaxed);
    }

    /// Zeroes the counts (the warmup's records were all delivered before the measured phase
    /// begins).
    fn reset_counts(&self) {
        for c in [
            &self.turns_done,
            &self.turns_failed,
            &self.output_tokens,
            &self.plays_started,
            &self.plays_ended,
            &self.sessions_done,
            &self.sessions_truncated,
        ] {
            c.store(0, Ordering::SeqCst);
        }
        self.epoch.fetch_add(1, Ordering::SeqCst);
    }

    fn count(&self, event: &RunEvent<'_>) {
        match event {
            RunEvent::Started { .. } => self.restart_clock(),
            RunEvent::Phase(Phase::Warmup) => {
                self.warmup.store(true, Ordering::SeqCst);
                self.restart_clock();
            }
            RunEvent::Phase(Phase::Measuring) => {
                if self.warmup.swap(false, Ordering::SeqCst) {
                    self.reset_counts();
                }
                self.restart_clock();
            }
            RunEvent::TurnFinished(t) => {
                self.turns_done.fetch_add(1, Ordering::Relaxed);
                if t.status == TurnStatus::Ok {
                    if let Some(n) = t.output_tokens {
                        self.output_tokens.fetch_add(n, Ordering::Relaxed);
                    }
                } else {
                    self.turns_failed.fetch_add(1, Ordering::Relaxed);
                }
                if t.turn_index == 0 {
                    self.plays_started.fetch_add(1, Ordering::SeqCst);
                }
            }
            RunEvent::SessionFinished(s) => {
                if s.turns_played > 0 {
                    self.plays_ended.fetch_add(1, Ordering::SeqCst);
                }
                self.sessions_done.fetch_add(1, Ordering::Relaxed);
                if s.status == SessionStatus::Truncated {
                    self.sessions_truncated.fetch_add(1, Ordering::Relaxed);
                }
            }
            _ => {}
        }
    }

    /// The counters at `now`; `output_tok_s` is left for the caller to fill.
    pub fn snapshot(&self, now: Instant) -> Snapshot {
        // Ended first: a play is counted as started before it can end.
        let ended = self.plays_ended.load(Ordering::SeqCst);
        let started = self.plays_started.load(Ordering::SeqCst);
        let active = started.saturating_sub(ended);
        Snapshot {
            warmup: self.warmup.load(Ordering::SeqCst),
            elapsed: now.saturating_duration_since(self.start()),
            turns_done: self.turns_done.load(Ordering::Relaxed),
            turns_planned: self.turns_planned,
            turns_failed: self.turns_failed.load(Ordering::Relaxed),
            active: u32::try_from(active).unwrap_or(u32::MAX),
            concurrency: self.concurrency,
            sessions_done: self.sessions_done.load(Ordering::Relaxed),
            sessions_truncated: self.sessions_truncated.load(Ordering::Relaxed),
            output_tok_s: None,
            deadline: self.deadline,
        }
    }
}

impl Observer for ProgressCounters {
    fn on_event(&self, event: &RunEvent<'_>) {
        self.count(event);
    }
}

/// Output rate over a sliding window of samples taken by a reader.
#[derive(Debug)]
pub struct RateWindow {
    window: Duration,
    samples: VecDeque<(Instant, u64)>,
}

impl RateWindow {
    /// A window of length `window` whose first sample (0 tokens) is at `at`.
    pub fn new(window: Duration, at: Instant) -> Self {
        let mut samples = VecDeque::new();
        samples.push_back((at, 0));
        Self { window, samples }
    }

    /// Records `tokens` (a running total) at `now`; returns the rate over the window.
    pub fn push(&mut self, now: Instant, tokens: u64) -> Option<f64> {
        self.samples.push_back((now, tokens));
        // Keep the newest sample at least `window` old as the base.
        while self.samples.len() > 2
            && self
                .samples
                .get(1)
                .is_some_and(|(t, _)| now.saturating_duration_since(*t) >= self.window)
        {
            self.samples.pop_front();
        }
        let (t0, n0) = *self.samples.front()?;
        let dt = now.saturating_duration_since(t0).as_secs_f64();
        (dt > 0.0).then(|| tokens.saturating_sub(n0) as f64 / dt)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use bench_rundir::{SessionRecord, TurnRecord};

    fn snap() -> Snapshot {
        Snapshot {
            warmup: false,
            elapsed: Duration::from_secs(35),
            turns_done: 412,
            turns_planned: Some(1200),
            turns_failed: 0,
            active: 8,
            concurrency: 8,
            sessions_done: 31,
            sessions_truncated: 0,
            output_tok_s: Some(1532.4),
            deadline: None,
        }
    }

    #[test]
    fn durations() {
        assert_eq!(format_duration(Duration::ZERO), "0 s");
        assert_eq!(format_duration(Duration::from_millis(35_900)), "35 s");
        assert_eq!(format_duration(Duration::from_secs(67)), "1m 07s");
        assert_eq!(
            format_duration(Duration::from_secs(3600 + 180 + 4)),
            "1h 03m 04s"
        );
    }

    #[test]
    fn eta_from_pace() {
        // 412 turns in 35 s: 788 more take 788 × 35 / 412 = 66.9 s, rounded.
        assert_eq!(
            line(&snap()),
            "bench run: 35 s · 412/1200 turns · 31 sessions done · 8/8 active · \
             1532 output tok/s · 0 failed · ETA 1m 07s"
        );
        let s = Snapshot {
            turns_done: 0,
            ..snap()
        };
        assert_eq!(s.eta(), Some(Eta::Unknown));
        assert!(line(&s).ends_with("· ETA n/a"), "{}", line(&s));
        let s = Snapshot {
            turns_done: 1200,
            ..snap()
        };
        assert_eq!(s.eta(), Some(Eta::Left(Duration::ZERO)));
        assert_eq!(s.fraction(), Some(1.0));
    }

    #[test]
    fn eta_from_deadline() {
        let s = Snapshot {
            turns_planned: None,
            deadline: Some(Duration::from_secs(300)),
            sessions_truncated: 2,
            turns_failed: 3,
            active: 7,
            ..snap()
        };
        assert_eq!(
            line(&s),
            "bench run: 35 s · 412 turns · 31 sessions done (2 truncated) · 7/8 active · \
             1532 output tok/s · 3 failed · ETA 4m 25s"
        );
        assert!((s.fraction().unwrap_or(0.0) - 35.0 / 300.0).abs() < 1e-12);
        let late = Snapshot {
            elapsed: Duration::from_secs(301),
            ..s
        };
        assert_eq!(late.eta(), Some(Eta::Draining));
        assert!(
            line(&late).ends_with("· 3 failed · draining"),
            "{}",
            line(&late)
        );
        assert_eq!(late.fraction(), Some(1.0));
    }

    #[test]
    fn no_planned_total_no_deadline() {
        let s = Snapshot {
            turns_planned: None,
            output_tok_s: None,
            ..snap()
        };
        assert_eq!(s.eta(), None);
        assert_eq!(s.fraction(), None);
        assert_eq!(
            line(&s),
            "bench run: 35 s · 412 turns · 31 sessions done · 8/8 active · \
             n/a output tok/s · 0 failed"
        );
    }

    fn turn(session: &str, index: u32, status: TurnStatus, out: Option<u64>) -> TurnRecord {
        TurnRecord {
            status,
            ttft_ms: None,
            e2e_ms: None,
            tpot_ms: None,
            chunk_gaps_ms: Vec::new(),
            input_tokens: None,
            output_tokens: out,
            first_token_s: None,
            end_s: 0.0,
            sent_utc: String::new(),
            end_utc: String::new(),
            ..TurnRecord::example(session, index)
        }
    }

    fn session(id: &str, status: SessionStatus, played: u32) -> SessionRecord {
        SessionRecord {
            session_id: id.into(),
            replay: 0,
            status,
            turns_played: played,
            turns_planned: 3,
            output_tokens: 0,
            busy_s: 0.0,
            marker: None,
            warmup: false,
            start_s: 0.0,
            end_s: 0.0,
            superseded: false,
        }
    }

    #[test]
    fn observer_counts() {
        let p = ProgressCounters::new(Some(6), 2, None);
        p.on_event(&RunEvent::Started {
            concurrency: 2,
            sessions: 3,
        });
        p.on_event(&RunEvent::TurnFinished(&turn(
            "a",
            0,
            TurnStatus::Ok,
            Some(10),
        )));
        p.on_event(&RunEvent::TurnFinished(&turn(
            "b",
            0,
            TurnStatus::Ok,
            Some(5),
        )));
        p.on_event(&RunEvent::TurnFinished(&turn(
            "a",
            1,
            TurnStatus::Error,
            Some(99),
        )));
        let s = p.snapshot_now();
        assert_eq!((s.turns_done, s.turns_failed, s.active), (3, 1, 2));
        assert_eq!(p.output_tokens(), 15);
        p.on_event(&RunEvent::SessionFinished(&session(
            "a",
            SessionStatus::Failed,
            2,
        )));
        // Ended before its first turn (deadline at the boundary): not an active play.
        p.on_event(&RunEvent::SessionFinished(&session(
            "c",
            SessionStatus::Truncated,
            0,
        )));
        let s = p.snapshot_now();
        assert_eq!((s.active, s.sessions_done, s.sessions_truncated), (1, 2, 1));
        assert_eq!(s.turns_planned, Some(6));
        assert_eq!(s.concurrency, 2);
    }

    #[test]
    fn warmup_then_measured() {
        let p = ProgressCounters::new(Some(6), 2, None);
        p.on_event(&RunEvent::Phase(Phase::Warmup));
        p.on_event(&RunEvent::TurnFinished(&turn(
            "w",
            0,
            TurnStatus::Ok,
            Some(7),
        )));
        let s = p.snapshot_now();
        assert!(s.warmup);
        assert_eq!((s.turns_done, s.active), (1, 1));
        assert_eq!(s.eta(), None);
        assert!(line(&s).starts_with("bench run: warmup · "), "{}", line(&s));
        assert!(line(&s).contains(" · 1 turns · "), "{}", line(&s));
        p.on_event(&RunEvent::SessionFinished(&session(
            "w",
            SessionStatus::Completed,
            1,
        )));
        p.on_event(&RunEvent::Phase(Phase::Measuring));
        let s = p.snapshot_now();
        assert!(!s.warmup);
        assert_eq!((s.turns_done, s.sessions_done, s.active), (0, 0, 0));
        assert_eq!(p.output_tokens(), 0);
        assert!(line(&s).contains(" · 0/6 turns · "), "{}", line(&s));
    }

    #[test]
    fn rate_window_is_the_last_interval() {
        let t0 = Instant::now();
        let mut r = RateWindow::new(Duration::from_secs(5), t0);
        let at = |s: u64| t0 + Duration::from_secs(s);
        assert_eq!(r.push(at(5), 500), Some(100.0));
        // A stall: no new tokens over the next interval.
        assert_eq!(r.push(at(10), 500), Some(0.0));
        assert_eq!(r.push(at(15), 1500), Some(200.0));
        assert_eq!(r.push(t0, 1500), None);
    }
}
