//! Run progress on stderr: an [`indicatif`] bar on a terminal, plain heartbeat lines otherwise.
//!
//! [`Progress`] is an [`Observer`]: the engine's workers only bump atomics (no lock, no
//! allocation per turn). A ticker thread reads them on a timer and draws, so a stalled server
//! still shows heartbeats: elapsed time keeps moving while the turn count and the output rate
//! stand still. [`Progress::finish`] stops the ticker and clears the bar.
//!
//! A heartbeat line ([`line()`]):
//!
//! ```text
//! bench run: 35 s · 412/1200 turns · 31 sessions done · 8/8 active · 1532 output tok/s · 0 failed · ETA 1m 07s
//! ```
//!
//! - **active** counts session plays that have finished at least one turn and not yet ended
//!   (a play's first turn has `turn_index` 0; its end is `SessionFinished` with
//!   `turns_played ≥ 1`). Events carry no "session started", so a play still waiting for its
//!   first turn is not counted: right after the start, and while first turns are in flight, the
//!   figure under-counts. It never over-counts and is capped at C.
//! - **output tok/s** is over the last heartbeat interval (ok turns' `output_tokens`), so it
//!   drops to 0 when the server stalls; it is not the run's average.
//! - **warmup**: during the unmeasured warmup phase the line starts with `warmup ·` and counts
//!   the warmup's turns (no ETA); when the measured phase begins the counts and the clock
//!   start over (the `--duration` deadline counts from there).
//! - **ETA**: time left to the `--duration` deadline when there is one ("draining" once it has
//!   passed: turns in flight finish), else the remaining planned turns at the pace so far
//!   ("n/a" before the first turn), else none.

use std::collections::VecDeque;
use std::fmt::Write as _;
use std::io::{IsTerminal, Write as _};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::mpsc::{self, RecvTimeoutError};
use std::sync::{Arc, Mutex};
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

use bench_report::record::{SessionStatus, TurnStatus};
use bench_runner::{Observer, Phase, RunEvent};
use indicatif::{ProgressBar, ProgressDrawTarget, ProgressStyle};

/// Default heartbeat interval (`--progress-interval`).
pub const DEFAULT_INTERVAL: Duration = Duration::from_secs(5);

/// How often the bar is redrawn (its message, position and spinner).
const BAR_REFRESH: Duration = Duration::from_millis(200);

/// The shortest heartbeat interval accepted (shorter ones are raised to it).
const MIN_INTERVAL: Duration = Duration::from_millis(100);

/// How progress is shown.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Mode {
    /// An indicatif progress bar on stderr (for a terminal).
    Bar,
    /// A plain heartbeat line on stderr every interval (for logs and pipes).
    Lines,
    /// Nothing.
    Off,
}

impl Mode {
    /// [`Mode::Bar`] when stderr is a terminal, else [`Mode::Lines`].
    pub fn auto() -> Mode {
        if std::io::stderr().is_terminal() {
            Mode::Bar
        } else {
            Mode::Lines
        }
    }
}

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
    /// The `--duration` deadline, from the run start.
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

/// The counters the observer bumps and the ticker reads.
#[derive(Debug)]
struct Counters {
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

impl Counters {
    fn start(&self) -> Instant {
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

    fn on_event(&self, event: &RunEvent<'_>) {
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

    /// The counters now; `output_tok_s` is left for the caller to fill.
    fn snapshot(&self, now: Instant) -> Snapshot {
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

/// Output rate over a sliding window of samples taken by the ticker.
#[derive(Debug)]
struct RateWindow {
    window: Duration,
    samples: VecDeque<(Instant, u64)>,
}

impl RateWindow {
    fn new(window: Duration, at: Instant) -> Self {
        let mut samples = VecDeque::new();
        samples.push_back((at, 0));
        Self { window, samples }
    }

    /// Records `tokens` (a running total) at `now`; returns the rate over the window.
    fn push(&mut self, now: Instant, tokens: u64) -> Option<f64> {
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

/// The ticker thread and the channel that stops it.
#[derive(Debug)]
struct Ticker {
    stop: mpsc::Sender<()>,
    thread: JoinHandle<()>,
}

/// Run progress on stderr; register it with the engine as an [`Observer`] and call
/// [`Progress::finish`] when the run returns.
#[derive(Debug)]
pub struct Progress {
    counters: Arc<Counters>,
    mode: Mode,
    bar: Option<ProgressBar>,
    ticker: Mutex<Option<Ticker>>,
}

impl Progress {
    /// Starts showing progress (the ticker starts now; the elapsed time counts from the
    /// engine's `Started` event, or from now until it arrives).
    ///
    /// `turns_planned` is `None` when the run loops the pool under a duration; `deadline` is
    /// that duration (from the run start); `interval` is the heartbeat period of
    /// [`Mode::Lines`] and the window of the output rate.
    pub fn start(
        turns_planned: Option<u64>,
        concurrency: u32,
        deadline: Option<Duration>,
        interval: Duration,
        mode: Mode,
    ) -> Progress {
        let interval = interval.max(MIN_INTERVAL);
        let now = Instant::now();
        let counters = Arc::new(Counters {
            created: now,
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
        });
        let bar = (mode == Mode::Bar).then(|| new_bar(&counters.snapshot(now)));
        let ticker = match mode {
            Mode::Off => None,
            Mode::Bar | Mode::Lines => {
                let (stop, rx) = mpsc::channel::<()>();
                let c = Arc::clone(&counters);
                let b = bar.clone();
                let spawned = std::thread::Builder::new()
                    .name("bench-progress".into())
                    .spawn(move || tick(&c, b.as_ref(), interval, &rx));
                // Without a thread there is no progress display; the run goes on regardless.
                spawned.ok().map(|thread| Ticker { stop, thread })
            }
        };
        Progress {
            counters,
            mode,
            bar,
            ticker: Mutex::new(ticker),
        }
    }

    /// The mode this display was started in.
    pub fn mode(&self) -> Mode {
        self.mode
    }

    /// The counters now (`output_tok_s` is the average since the start here, not the
    /// last-interval rate the display shows).
    pub fn snapshot(&self) -> Snapshot {
        let mut s = self.counters.snapshot(Instant::now());
        let secs = s.elapsed.as_secs_f64();
        s.output_tok_s =
            (secs > 0.0).then(|| self.counters.output_tokens.load(Ordering::Relaxed) as f64 / secs);
        s
    }

    /// Prints a line on stderr without tearing the bar (above it in [`Mode::Bar`]).
    pub fn println(&self, msg: &str) {
        match &self.bar {
            Some(bar) => bar.println(msg),
            None => {
                let _ = writeln!(std::io::stderr().lock(), "{msg}");
            }
        }
    }

    /// Stops the ticker and clears the bar. Idempotent; also done on drop.
    pub fn finish(&self) {
        let ticker = match self.ticker.lock() {
            Ok(mut t) => t.take(),
            Err(poisoned) => poisoned.into_inner().take(),
        };
        if let Some(t) = ticker {
            let _ = t.stop.send(());
            let _ = t.thread.join();
        }
        if let Some(bar) = &self.bar {
            bar.finish_and_clear();
        }
    }
}

impl Drop for Progress {
    fn drop(&mut self) {
        self.finish();
    }
}

impl Observer for Progress {
    fn on_event(&self, event: &RunEvent<'_>) {
        self.counters.on_event(event);
    }
}

/// The bar: a proportional bar when the run has a planned total or a deadline, a spinner
/// otherwise; the heartbeat fields are its message.
fn new_bar(first: &Snapshot) -> ProgressBar {
    let (len, template) = match first.fraction() {
        Some(_) => (Some(1000), "{spinner} [{bar:24}] {msg}"),
        None => (None, "{spinner} {msg}"),
    };
    let bar = ProgressBar::with_draw_target(len, ProgressDrawTarget::stderr());
    if let Ok(style) = ProgressStyle::with_template(template) {
        bar.set_style(style.progress_chars("=> "));
    }
    bar.set_message(body(first));
    bar
}

/// The ticker: redraws the bar every [`BAR_REFRESH`], or prints a line every `interval`,
/// until `stop` receives or disconnects.
fn tick(c: &Counters, bar: Option<&ProgressBar>, interval: Duration, stop: &mpsc::Receiver<()>) {
    let period = if bar.is_some() {
        BAR_REFRESH.min(interval)
    } else {
        interval
    };
    // Tokens are counted when a turn ends, in bursts: average over at least 10 s so the rate
    // does not swing between 0 and a burst.
    let window = interval.max(Duration::from_secs(10));
    let mut rate = RateWindow::new(window, Instant::now());
    let mut epoch = c.epoch.load(Ordering::SeqCst);
    loop {
        match stop.recv_timeout(period) {
            Err(RecvTimeoutError::Timeout) => {}
            Ok(()) | Err(RecvTimeoutError::Disconnected) => return,
        }
        let now = Instant::now();
        let e = c.epoch.load(Ordering::SeqCst);
        if e != epoch {
            // The counts were zeroed (warmup → measured run): the rate starts over.
            epoch = e;
            rate = RateWindow::new(window, c.start());
        }
        let mut s = c.snapshot(now);
        s.output_tok_s = rate.push(now, c.output_tokens.load(Ordering::Relaxed));
        match bar {
            Some(bar) => {
                if let Some(f) = s.fraction() {
                    bar.set_position((f * 1000.0).round() as u64);
                }
                bar.set_message(body(&s));
                bar.tick();
            }
            None => {
                let _ = writeln!(std::io::stderr().lock(), "{}", line(&s));
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use bench_report::record::{SessionRecord, TurnRecord};

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
            session_id: session.into(),
            replay: 0,
            turn_index: index,
            status,
            error_kind: None,
            error: None,
            ttft_ms: None,
            e2e_ms: None,
            tpot_ms: None,
            chunk_gaps_ms: Vec::new(),
            input_tokens: None,
            input_tokens_source: None,
            output_tokens: out,
            output_tokens_source: None,
            cached_tokens: None,
            cached_device_tokens: None,
            cached_host_tokens: None,
            max_output_tokens: 10,
            recorded_output_tokens: None,
            active_at_dispatch: 1,
            due_s: 0.0,
            sent_s: 0.0,
            first_token_s: None,
            end_s: 0.0,
            sent_utc: String::new(),
            end_utc: String::new(),
            worker: None,
            redials: 0,
            warmup: false,
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
        }
    }

    #[test]
    fn observer_counts() {
        let p = Progress::start(Some(6), 2, None, DEFAULT_INTERVAL, Mode::Off);
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
        let s = p.snapshot();
        assert_eq!((s.turns_done, s.turns_failed, s.active), (3, 1, 2));
        assert_eq!(p.counters.output_tokens.load(Ordering::Relaxed), 15);
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
        let s = p.snapshot();
        assert_eq!((s.active, s.sessions_done, s.sessions_truncated), (1, 2, 1));
        assert_eq!(s.turns_planned, Some(6));
        assert_eq!(s.concurrency, 2);
        p.finish();
    }

    #[test]
    fn warmup_then_measured() {
        let p = Progress::start(Some(6), 2, None, DEFAULT_INTERVAL, Mode::Off);
        p.on_event(&RunEvent::Phase(Phase::Warmup));
        p.on_event(&RunEvent::TurnFinished(&turn(
            "w",
            0,
            TurnStatus::Ok,
            Some(7),
        )));
        let s = p.snapshot();
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
        let s = p.snapshot();
        assert!(!s.warmup);
        assert_eq!((s.turns_done, s.sessions_done, s.active), (0, 0, 0));
        assert_eq!(p.counters.output_tokens.load(Ordering::Relaxed), 0);
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

    #[test]
    fn lines_ticker_stops_at_once() {
        // A long interval: finish must not wait for the next tick.
        let p = Progress::start(None, 4, None, Duration::from_secs(3600), Mode::Lines);
        let t = Instant::now();
        p.finish();
        p.finish();
        assert!(t.elapsed() < Duration::from_secs(5));
        assert_eq!(p.mode(), Mode::Lines);
    }

    #[test]
    fn bar_ticker_stops_on_drop() {
        let p = Progress::start(Some(10), 4, None, DEFAULT_INTERVAL, Mode::Bar);
        p.on_event(&RunEvent::TurnFinished(&turn(
            "a",
            0,
            TurnStatus::Ok,
            Some(1),
        )));
        std::thread::sleep(BAR_REFRESH * 2);
        p.println("a line above the bar");
        drop(p);
    }
}
