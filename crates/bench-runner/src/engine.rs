//! The replay engine. Closed loop: exactly `C` workers, each playing one planned session at a
//! time, turn by turn; a finished session's slot is refilled at once from the pool. Open loop:
//! sessions start on a Poisson or constant schedule of their own, each playing turn by turn.

use std::future::Future;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicU32, AtomicUsize, Ordering};
use std::time::Duration;

use bench_rundir::record::{CountSource, SessionRecord, SessionStatus, TurnRecord, TurnStatus};
use bench_transport::{Client, ErrorKind, RequestOptions, Segments, TurnOutcome};
use bench_workload::plan::{Plan, PlannedSession};
use rand::{Rng, SeedableRng};
use tokio::sync::{Notify, Semaphore};
use tokio::time::Instant;

use crate::config::{Arrival, ArrivalProcess, ResponseMode, RunConfig};
use crate::conv::Conversation;
use crate::observer::{Observer, Phase, RunEvent};

mod graph;
mod thread;

use thread::Thread;

/// Turns in a warmup session play (`--warmup-sessions`).
pub const WARMUP_TURNS: usize = 3;

/// Where the engine sends a turn. [`Client`] is the real one (HTTP on a keep-alive pool); tests
/// and embedders may script their own (the engine reads time from tokio, so a transport that
/// sleeps on tokio's clock runs under a paused test clock).
pub trait Transport: Send + Sync + 'static {
    /// Sends one chat request body (pieces to send in order: [`Segments::to_bytes`] joins them)
    /// and measures the answer. `opts.timeout` bounds the whole request; exceeding it is an
    /// error of kind [`ErrorKind::Timeout`].
    fn send_turn(
        &self,
        body: Segments,
        stream: bool,
        opts: &RequestOptions,
    ) -> impl Future<Output = Result<TurnOutcome, bench_transport::Error>> + Send;
}

impl Transport for Client {
    fn send_turn(
        &self,
        body: Segments,
        stream: bool,
        opts: &RequestOptions,
    ) -> impl Future<Output = Result<TurnOutcome, bench_transport::Error>> + Send {
        self.chat_segments(body, stream, opts)
    }
}

/// Why the run stopped.
#[derive(Debug, Clone, Copy, PartialEq, Eq, serde::Serialize)]
#[serde(rename_all = "snake_case")]
pub enum StopReason {
    /// Every session of the pool was played (no `--duration`).
    Exhausted,
    /// The `--duration` deadline passed and in-flight sessions were cut at a turn boundary.
    Duration,
    /// The `--max-duration` fuse blew.
    MaxDuration,
    /// The caller cancelled the run.
    Cancelled,
}

/// What a run produced.
#[derive(Debug, Clone)]
pub struct RunOutcome {
    /// Every finished turn (warmup ones marked), in finishing order.
    pub turns: Vec<TurnRecord>,
    /// Every finished session play (warmup ones marked).
    pub sessions: Vec<SessionRecord>,
    /// Wall time of the measured phase (warmup excluded).
    pub elapsed: Duration,
    /// Wall time of the warmup phase (zero without one).
    pub warmup_elapsed: Duration,
    /// Why it stopped.
    pub stopped_by: StopReason,
    /// Open loop: sessions whose start was due but never came (the run stopped first).
    pub arrivals_not_started: u64,
    /// Replay tasks that panicked (a bug, e.g. in a custom [`Transport`]): the session each was
    /// playing is lost from here on; every record made before is kept.
    pub task_failures: Vec<String>,
}

/// A handle to stop a running replay: [`CancelToken::cancel`] between turns (turns in flight
/// finish), [`CancelToken::abort`] at once (turns in flight are cut and recorded as
/// `cancelled`).
#[derive(Debug, Clone, Default)]
pub struct CancelToken(Arc<CancelState>);

#[derive(Debug, Default)]
struct CancelState {
    cancelled: AtomicBool,
    aborted: AtomicBool,
    notify: Notify,
}

impl CancelToken {
    /// A fresh token.
    pub fn new() -> Self {
        Self::default()
    }
    /// Asks the run to stop: no new turn is sent; turns in flight finish; tool waits and
    /// open-loop arrival waits end at once.
    pub fn cancel(&self) {
        self.0.cancelled.store(true, Ordering::SeqCst);
        self.0.notify.notify_waiters();
    }
    /// Stops the run now: as [`CancelToken::cancel`], and turns in flight are cut (recorded
    /// with error kind `cancelled`).
    pub fn abort(&self) {
        self.0.aborted.store(true, Ordering::SeqCst);
        self.cancel();
    }
    /// Whether [`CancelToken::cancel`] (or abort) was called.
    pub fn is_cancelled(&self) -> bool {
        self.0.cancelled.load(Ordering::SeqCst)
    }
    /// Whether [`CancelToken::abort`] was called.
    pub fn is_aborted(&self) -> bool {
        self.0.aborted.load(Ordering::SeqCst)
    }
    /// Resolves once [`CancelToken::cancel`] has been called.
    pub async fn cancelled(&self) {
        self.wait(Self::is_cancelled).await;
    }
    /// Resolves once [`CancelToken::abort`] has been called.
    pub async fn aborted(&self) {
        self.wait(Self::is_aborted).await;
    }
    async fn wait(&self, done: fn(&Self) -> bool) {
        loop {
            let n = self.0.notify.notified();
            tokio::pin!(n);
            n.as_mut().enable();
            if done(self) {
                return;
            }
            n.await;
        }
    }
}

/// What the whole run shares.
struct Shared<T> {
    cfg: RunConfig,
    client: T,
    observers: Vec<Arc<dyn Observer>>,
    start: Instant,
    utc: UtcClock,
    /// `--max-duration`: the hard fuse.
    fuse: Option<Instant>,
    cancel: CancelToken,
    fuse_blown: AtomicBool,
    duration_hit: AtomicBool,
    /// Every record so far, kept as it is made (a failing task loses none of them).
    records: std::sync::Mutex<Records>,
    /// Replay tasks that panicked.
    task_failures: std::sync::Mutex<Vec<String>>,
    /// Every message-boundary prefix sent so far (the warm-cache check's theoretical hit).
    prefixes: crate::prefix::PrefixIndex,
    /// Chains of the tools and system prompt that several sessions send alike, keyed by the
    /// plan's message and tools (pointers into the plan, which outlives the run): each play
    /// starts from a clone that shares the pieces.
    chain_starts: std::sync::Mutex<std::collections::HashMap<(usize, usize), crate::prefix::Chain>>,
}

/// `at` (a UTC time) as RFC 3339, byte for byte what `time`'s `Rfc3339` format writes
/// (`2026-12-06T05:30:35.1234Z`: the fraction without trailing zeros, none when whole; `""`
/// outside years 0–9999, which RFC 3339 cannot write), without its generic writer: two of
/// these per turn were ~3% of a non-streamed turn's client CPU.
fn rfc3339_utc(at: time::OffsetDateTime) -> String {
    match day_prefix(at) {
        Some(date) => rfc3339_in_day(&date, at.time().as_hms_nano()),
        None => String::new(),
    }
}

/// `YYYY-MM-DDT` of `at`'s day, or `None` outside years 0–9999.
fn day_prefix(at: time::OffsetDateTime) -> Option<[u8; 11]> {
    let (year, month, day) = at.to_calendar_date();
    let year = u32::try_from(year).ok().filter(|y| *y < 10_000)?;
    let mut b = *b"0000-00-00T";
    put_digits(&mut b[0..4], year);
    put_digits(&mut b[5..7], u8::from(month).into());
    put_digits(&mut b[8..10], day.into());
    Some(b)
}

/// `value`'s last `out.len()` decimal digits, zero-padded.
fn put_digits(out: &mut [u8], mut value: u32) {
    for d in out.iter_mut().rev() {
        *d = b'0' + (value % 10) as u8;
        value /= 10;
    }
}

/// The RFC 3339 time of the day `date` (`YYYY-MM-DDT`) at `hour:minute:second.nanos`.
fn rfc3339_in_day(date: &[u8; 11], (hour, minute, second, nanos): (u8, u8, u8, u32)) -> String {
    let mut b = *b"00:00:00.000000000";
    put_digits(&mut b[0..2], hour.into());
    put_digits(&mut b[3..5], minute.into());
    put_digits(&mut b[6..8], second.into());
    let end = if nanos == 0 {
        8
    } else {
        put_digits(&mut b[9..], nanos);
        let mut end = b.len();
        while b[end - 1] == b'0' {
            end -= 1;
        }
        end
    };
    let mut s = String::with_capacity(date.len() + end + 1);
    s.push_str(std::str::from_utf8(date).unwrap_or_default());
    s.push_str(std::str::from_utf8(&b[..end]).unwrap_or_default());
    s.push('Z');
    s
}

/// The run's UTC clock: an instant's RFC 3339 time ([`rfc3339_utc`]), with the calendar
/// date worked out once for the day the run started (two times per turn; the calendar
/// arithmetic was about half of each).
struct UtcClock {
    start: Instant,
    start_utc: time::OffsetDateTime,
    /// Nanoseconds from midnight (UTC) of the start's day to the start.
    start_in_day_ns: u64,
    /// `YYYY-MM-DDT` of the start's day (`None` outside years 0–9999).
    date: Option<[u8; 11]>,
}

impl UtcClock {
    const DAY_NS: u64 = 86_400 * 1_000_000_000;

    fn new(start: Instant, start_utc: time::OffsetDateTime) -> UtcClock {
        UtcClock {
            start,
            start_utc,
            start_in_day_ns: u64::try_from(
                (start_utc.time() - time::Time::MIDNIGHT).whole_nanoseconds(),
            )
            .unwrap_or(0),
            date: day_prefix(start_utc),
        }
    }

    /// `t` in RFC 3339 (after the start: an instant before it is the start).
    fn rfc3339(&self, t: Instant) -> String {
        let since = t.saturating_duration_since(self.start);
        let in_day = u64::try_from(since.as_nanos())
            .ok()
            .and_then(|n| n.checked_add(self.start_in_day_ns))
            .filter(|n| *n < Self::DAY_NS);
        match (in_day, &self.date) {
            (Some(ns), Some(date)) => {
                let secs = (ns / 1_000_000_000) as u32;
                let nanos = (ns % 1_000_000_000) as u32;
                let hms = (
                    (secs / 3600) as u8,
                    (secs / 60 % 60) as u8,
                    (secs % 60) as u8,
                    nanos,
                );
                rfc3339_in_day(date, hms)
            }
            // Past the start's day (a run across midnight) or outside RFC 3339's years.
            _ => time::Duration::try_from(since)
                .ok()
                .and_then(|d| self.start_utc.checked_add(d))
                .map(rfc3339_utc)
                .unwrap_or_default(),
        }
    }
}

/// One phase (warmup or measuring): its pool and its own clock limits.
struct PhaseState {
    sessions: PhaseSessions,
    warmup: bool,
    /// `--duration`: no new session or turn after it (the pool loops until then).
    deadline: Option<Instant>,
    next: AtomicUsize,
    active: AtomicU32,
    /// Whether [`Phase::Draining`] was announced.
    draining: AtomicBool,
}

impl<T: Transport> Shared<T> {
    fn offset_s(&self, t: Instant) -> f64 {
        (self.cfg.time_origin + t.saturating_duration_since(self.start)).as_secs_f64()
    }

    /// The measured phase starts no further session or turn: tell the observers, once.
    fn drain(&self, ph: &PhaseState) {
        if !ph.warmup && !ph.draining.swap(true, Ordering::SeqCst) {
            self.emit(RunEvent::Phase(Phase::Draining));
        }
    }

    fn utc(&self, t: Instant) -> String {
        self.utc.rfc3339(t)
    }

    fn emit(&self, ev: RunEvent<'_>) {
        for o in &self.observers {
            o.on_event(&ev);
        }
    }

    /// Tells the observers about a finished turn (before the session goes on), then keeps it.
    fn turn_finished(&self, rec: TurnRecord) {
        self.emit(RunEvent::TurnFinished(&rec));
        if let Ok(mut r) = self.records.lock() {
            r.turns.push(rec);
        }
    }

    fn session_finished(&self, rec: SessionRecord) {
        self.emit(RunEvent::SessionFinished(&rec));
        if let Ok(mut r) = self.records.lock() {
            r.sessions.push(rec);
        }
    }

    /// Whether no further turn may start, and why.
    fn stop_now(&self, ph: &PhaseState, now: Instant) -> Option<StopReason> {
        if self.cancel.is_cancelled() {
            return Some(StopReason::Cancelled);
        }
        if self.fuse.is_some_and(|f| now >= f) {
            self.fuse_blown.store(true, Ordering::SeqCst);
            return Some(StopReason::MaxDuration);
        }
        if ph.deadline.is_some_and(|d| now >= d) {
            self.duration_hit.store(true, Ordering::SeqCst);
            return Some(StopReason::Duration);
        }
        None
    }

    /// Sleeps until `t`, or less: until the phase deadline, the fuse or a cancel.
    async fn sleep_until(&self, ph: &PhaseState, t: Instant) {
        let limit = [ph.deadline, self.fuse].into_iter().flatten().min();
        let wake = limit.map_or(t, |l| t.min(l));
        tokio::select! {
            _ = tokio::time::sleep_until(wake) => {}
            _ = self.cancel.cancelled() => {}
        }
    }
}

/// The sessions a phase plays: the plan's own, never copied (a copy of 50,000 sessions' turn
/// lists cost ~90 MB), in an order of their own when arrivals follow the trace.
struct PhaseSessions {
    plan: Arc<Plan>,
    /// The first `len` sessions of the plan (all but in warmup).
    len: usize,
    /// Plan indices in play order (trace arrivals: recorded order); `None`: the plan's order.
    order: Option<Vec<u32>>,
    /// Turns played per session (warmup: cut short).
    max_turns: usize,
}

impl PhaseSessions {
    fn len(&self) -> usize {
        self.len
    }

    fn get(&self, i: usize) -> &PlannedSession {
        let i = self.order.as_ref().map_or(i, |o| o[i] as usize);
        &self.plan.sessions[i]
    }
}

impl PhaseState {
    /// The next session play: `(index into the pool, replay number)`.
    fn next_session(&self) -> Option<(usize, u32)> {
        let n = self.sessions.len();
        if n == 0 {
            return None;
        }
        let i = self.next.fetch_add(1, Ordering::SeqCst);
        if self.deadline.is_none() && i >= n {
            return None; // no duration: the pool is played once
        }
        Some((i % n, (i / n) as u32))
    }
}

/// Collected records of a phase, in chunks: a chunk is never reallocated, so keeping a record
/// never copies the ones before it (a `Vec` doubling 100,000 records under this lock stalled
/// every worker for milliseconds: late first tokens in the timing-fidelity runs).
#[derive(Default)]
struct Records {
    turns: Chunked<TurnRecord>,
    sessions: Chunked<SessionRecord>,
}

/// A list kept as chunks of [`Chunked::CHUNK`] items.
struct Chunked<T> {
    chunks: Vec<Vec<T>>,
}

impl<T> Default for Chunked<T> {
    fn default() -> Self {
        Chunked { chunks: Vec::new() }
    }
}

impl<T> Chunked<T> {
    const CHUNK: usize = 1024;

    fn push(&mut self, item: T) {
        match self.chunks.last_mut() {
            Some(c) if c.len() < Self::CHUNK => c.push(item),
            _ => {
                let mut c = Vec::with_capacity(Self::CHUNK);
                c.push(item);
                self.chunks.push(c);
            }
        }
    }

    /// The items, in order, as one `Vec` (made once, at the end of the run).
    fn into_vec(self) -> Vec<T> {
        let mut out = Vec::with_capacity(self.chunks.iter().map(Vec::len).sum());
        for c in self.chunks {
            out.extend(c);
        }
        out
    }
}

/// Replays `plan` through `client` with `cfg`, telling `observers` about every finished turn
/// and session. Returns when the pool is exhausted, the duration or fuse passes, or `cancel`
/// is cancelled. With [`RunConfig::warmup_sessions`], an unmeasured warmup phase comes first
/// and the duration counts from the end of it.
pub async fn run<T: Transport>(
    plan: Arc<Plan>,
    client: T,
    cfg: RunConfig,
    observers: Vec<Arc<dyn Observer>>,
    cancel: CancelToken,
) -> RunOutcome {
    let start = Instant::now();
    let shared = Arc::new(Shared {
        fuse: cfg.limits.max_duration.map(|d| start + d),
        client,
        observers,
        start,
        utc: UtcClock::new(start, time::OffsetDateTime::now_utc()),
        cancel,
        fuse_blown: AtomicBool::new(false),
        duration_hit: AtomicBool::new(false),
        records: std::sync::Mutex::new(Records::default()),
        task_failures: std::sync::Mutex::new(Vec::new()),
        prefixes: crate::prefix::PrefixIndex::with_expected(
            crate::prefix::PrefixIndex::expected_pieces(&plan),
        ),
        chain_starts: std::sync::Mutex::new(std::collections::HashMap::new()),
        cfg,
    });
    shared.emit(RunEvent::Started {
        concurrency: shared.cfg.concurrency,
        sessions: plan.sessions.len(),
    });
    // Warmup: the first N sessions, cut short, closed loop, unmeasured.
    let n_warm = (shared.cfg.warmup_sessions as usize).min(plan.sessions.len());
    if n_warm > 0 {
        shared.emit(RunEvent::Phase(Phase::Warmup));
        let ph = Arc::new(PhaseState {
            sessions: PhaseSessions {
                plan: plan.clone(),
                len: n_warm,
                order: None,
                max_turns: WARMUP_TURNS,
            },
            warmup: true,
            deadline: None,
            next: AtomicUsize::new(0),
            active: AtomicU32::new(0),
            draining: AtomicBool::new(false),
        });
        let c = shared.cfg.concurrency.max(1).min(n_warm as u32);
        closed_loop(&shared, &ph, c).await;
    }
    let warmup_elapsed = start.elapsed();

    let mut not_started = 0;
    let measure_start = Instant::now();
    if !shared.cancel.is_cancelled() && shared.fuse.is_none_or(|f| measure_start < f) {
        shared.emit(RunEvent::Phase(Phase::Measuring));
        let order = match shared.cfg.arrival {
            Some(Arrival {
                process: ArrivalProcess::Trace { .. },
                ..
            }) => {
                // Recorded order (stable: ties keep the plan's order).
                let mut o: Vec<u32> = (0..plan.sessions.len() as u32).collect();
                o.sort_by(|&a, &b| {
                    trace_offset_ms(&plan.sessions[a as usize])
                        .total_cmp(&trace_offset_ms(&plan.sessions[b as usize]))
                });
                Some(o)
            }
            _ => None,
        };
        let ph = Arc::new(PhaseState {
            sessions: PhaseSessions {
                plan: plan.clone(),
                len: plan.sessions.len(),
                order,
                max_turns: usize::MAX,
            },
            warmup: false,
            deadline: shared.cfg.limits.duration.map(|d| measure_start + d),
            next: AtomicUsize::new(0),
            active: AtomicU32::new(0),
            draining: AtomicBool::new(false),
        });
        match shared.cfg.arrival {
            Some(a) => not_started = open_loop(&shared, &ph, a).await,
            None => closed_loop(&shared, &ph, shared.cfg.concurrency).await,
        }
    }
    let elapsed = measure_start.elapsed();
    let all = shared
        .records
        .lock()
        .map(|mut r| std::mem::take(&mut *r))
        .unwrap_or_default();
    let mut turns = all.turns.into_vec();
    turns.sort_by(|a: &TurnRecord, b| a.end_s.total_cmp(&b.end_s));
    let stopped_by = if shared.cancel.is_cancelled() {
        StopReason::Cancelled
    } else if shared.fuse_blown.load(Ordering::SeqCst) {
        StopReason::MaxDuration
    } else if shared.duration_hit.load(Ordering::SeqCst) || shared.cfg.limits.duration.is_some() {
        StopReason::Duration
    } else {
        StopReason::Exhausted
    };
    shared.emit(RunEvent::Stopped { by: stopped_by });
    RunOutcome {
        turns,
        sessions: all.sessions.into_vec(),
        elapsed,
        warmup_elapsed,
        stopped_by,
        arrivals_not_started: not_started,
        task_failures: shared
            .task_failures
            .lock()
            .map(|f| f.clone())
            .unwrap_or_default(),
    }
}

/// Exactly `c` workers, each refilled from the pool as soon as its session ends. Each worker's
/// first session is taken (and counted active) before any is spawned, so the first turns see
/// all `c` sessions active.
async fn closed_loop<T: Transport>(sh: &Arc<Shared<T>>, ph: &Arc<PhaseState>, c: u32) {
    // Every first session is taken and counted before the first worker starts: a worker
    // spawned early could otherwise finish its session and take the next worker's.
    let firsts: Vec<(usize, u32)> = (0..c).map_while(|_| ph.next_session()).collect();
    // With a ramp-up, worker i starts i/C of the way through it and counts itself active then.
    let ramp = sh.cfg.ramp_up.filter(|r| !r.is_zero() && !ph.warmup);
    if ramp.is_none() {
        ph.active.fetch_add(firsts.len() as u32, Ordering::SeqCst);
    }
    let t0 = Instant::now();
    let mut workers = tokio::task::JoinSet::new();
    for (i, first) in firsts.into_iter().enumerate() {
        let (sh, ph) = (sh.clone(), ph.clone());
        workers.spawn(async move {
            if let Some(r) = ramp {
                sh.sleep_until(&ph, t0 + r.mul_f64(i as f64 / f64::from(c)))
                    .await;
                ph.active.fetch_add(1, Ordering::SeqCst);
                if sh.stop_now(&ph, Instant::now()).is_some() {
                    sh.drain(&ph);
                    ph.active.fetch_sub(1, Ordering::SeqCst);
                    return;
                }
            }
            let mut next = Some(first);
            while let Some((idx, replay)) = next {
                let rec = play_session(&sh, &ph, idx, replay, None).await;
                sh.session_finished(rec);
                next = if sh.stop_now(&ph, Instant::now()).is_some() {
                    None
                } else {
                    ph.next_session()
                };
                if next.is_none() {
                    sh.drain(&ph);
                    ph.active.fetch_sub(1, Ordering::SeqCst);
                }
            }
        });
    }
    join_all(sh, workers).await;
}

/// Waits for every task; a panicked one is noted in `task_failures`.
async fn join_all<T: Transport>(sh: &Shared<T>, mut set: tokio::task::JoinSet<()>) {
    while let Some(r) = set.join_next().await {
        note_failure(sh, r);
    }
}

fn note_failure<T: Transport>(sh: &Shared<T>, r: Result<(), tokio::task::JoinError>) {
    if let Err(e) = r {
        tracing::error!("a replay task failed: {e}");
        if let Ok(mut f) = sh.task_failures.lock() {
            f.push(e.to_string());
        }
    }
}

/// A session's recorded start, ms (its first timed turn; sessions without one sort last).
fn trace_offset_ms(s: &PlannedSession) -> f64 {
    s.turns
        .iter()
        .find_map(|t| t.timestamp_ms)
        .unwrap_or(f64::INFINITY)
}

/// The gap before arrival `n + 1`.
fn interarrival(a: &Arrival, rng: &mut rand_chacha::ChaCha8Rng) -> Duration {
    let mean = 1.0 / a.rate;
    let s = match a.process {
        ArrivalProcess::Constant => mean,
        // Inverse transform of a uniform in (0, 1].
        ArrivalProcess::Poisson => -(1.0 - rng.random::<f64>()).ln() * mean,
        // Due times come from the sessions themselves (see `open_loop`).
        ArrivalProcess::Trace { .. } => 0.0,
        // Shape B, scale mean / B: the mean stays 1 / rate.
        ArrivalProcess::Gamma { burstiness } => {
            match rand_distr::Gamma::new(burstiness, mean / burstiness) {
                Ok(g) => rand_distr::Distribution::sample(&g, rng),
                // Refused by validation; an even schedule rather than none.
                Err(_) => mean,
            }
        }
    };
    Duration::from_secs_f64(s.clamp(0.0, 1e9))
}

/// Sessions start on the arrival schedule; at most `concurrency` are in flight (0: no limit).
/// Returns how many arrivals were due but never started.
async fn open_loop<T: Transport>(sh: &Arc<Shared<T>>, ph: &Arc<PhaseState>, a: Arrival) -> u64 {
    let slots =
        (sh.cfg.concurrency > 0).then(|| Arc::new(Semaphore::new(sh.cfg.concurrency as usize)));
    let not_started = Arc::new(AtomicUsize::new(0));
    let mut rng = rand_chacha::ChaCha8Rng::seed_from_u64(a.seed);
    let mut tasks = tokio::task::JoinSet::new();
    let t0 = Instant::now();
    let mut due = t0;
    // Trace arrivals: offsets from the earliest recorded start (the sessions are sorted).
    let trace = match a.process {
        ArrivalProcess::Trace { time_scale } => {
            (ph.sessions.len() > 0).then(|| (trace_offset_ms(ph.sessions.get(0)), time_scale))
        }
        _ => None,
    };
    // Take the session first: when the pool is used up the loop ends now, not one
    // inter-arrival gap later.
    while let Some((idx, replay)) = ph.next_session() {
        if let Some((first, scale)) = trace {
            let off = trace_offset_ms(ph.sessions.get(idx)) - first;
            if off.is_finite() {
                due = t0 + Duration::from_secs_f64((off * scale / 1000.0).clamp(0.0, 1e9));
            }
        }
        sh.sleep_until(ph, due).await;
        if sh.stop_now(ph, Instant::now()).is_some() {
            break;
        }
        let (sh2, ph2, slots, not_started) =
            (sh.clone(), ph.clone(), slots.clone(), not_started.clone());
        tasks.spawn(async move {
            let _permit = match slots {
                Some(s) => {
                    let permit = tokio::select! {
                        p = s.acquire_owned() => p.ok(),
                        _ = sh2.cancel.cancelled() => None,
                    };
                    if permit.is_none() || sh2.stop_now(&ph2, Instant::now()).is_some() {
                        not_started.fetch_add(1, Ordering::SeqCst);
                        return;
                    }
                    permit
                }
                None => None,
            };
            ph2.active.fetch_add(1, Ordering::SeqCst);
            let rec = play_session(&sh2, &ph2, idx, replay, Some(due)).await;
            ph2.active.fetch_sub(1, Ordering::SeqCst);
            sh2.session_finished(rec);
        });
        due += interarrival(&a, &mut rng);
        // Reap finished tasks as we go (memory stays bounded on long runs).
        while let Some(r) = tasks.try_join_next() {
            note_failure(sh, r);
        }
    }
    sh.drain(ph);
    join_all(sh, tasks).await;
    not_started.load(Ordering::SeqCst) as u64
}

/// How a play's conversation opens: its system prompt as sent, with a cache-busting replay's
/// or warmup's marker (one per play; an agent graph's fresh branches carry it too).
struct Opening {
    /// The system message as a JSON string literal, when the play writes its own (a marker
    /// without a system prompt).
    own_system: Option<String>,
    /// The marker, JSON-escaped, written after a shared system prompt's text.
    marker_json: Option<String>,
    /// Estimated tokens the marker adds.
    pub(crate) extra_tokens: u64,
}

impl Opening {
    pub(crate) fn new(
        sys: Option<&bench_workload::plan::PlannedMessage>,
        marker: Option<&str>,
    ) -> Opening {
        let mut extra_tokens = 0u64;
        // The shared system prompt stays shared: the body writes it before the session's own
        // messages, a marked replay's or warmup's marker as a piece of its own after it.
        let (own_system, marker_json) = match (sys, marker) {
            (Some(_), Some(m)) => {
                extra_tokens += (m.len() as u64).div_ceil(4);
                (None, Some(json_inner(&format!("\n{m}"))))
            }
            (None, Some(m)) => {
                extra_tokens += (m.len() as u64).div_ceil(4) + 5;
                (Some(serde_json::to_string(m).unwrap_or_default()), None)
            }
            _ => (None, None),
        };
        Opening {
            own_system,
            marker_json,
            extra_tokens,
        }
    }

    pub(crate) fn system<'a>(
        &'a self,
        sys: Option<&'a bench_workload::plan::PlannedMessage>,
    ) -> crate::config::System<'a> {
        match (&self.own_system, sys, &self.marker_json) {
            (Some(own), _, _) => crate::config::System::Own(own),
            (None, Some(sys), Some(m)) => crate::config::System::Marked(sys, m),
            (None, Some(sys), None) => crate::config::System::Shared(sys),
            (None, None, _) => crate::config::System::None,
        }
    }

    /// The request's prefix identity, element by element: the tools, the system prompt as
    /// sent, then every message (see `prefix.rs`). A system prompt (and tools) that other
    /// sessions send alike starts from a shared chain.
    fn chain<T: Transport>(
        &self,
        sh: &Shared<T>,
        sys: Option<&Arc<bench_workload::plan::PlannedMessage>>,
        tools: Option<&Arc<str>>,
    ) -> crate::prefix::Chain {
        let overhead = bench_workload::plan::MESSAGE_OVERHEAD_TOKENS;
        let extra_tokens = self.extra_tokens;
        let (own_system, marker_json) = (&self.own_system, &self.marker_json);
        let start_chain = || {
            let mut chain = crate::prefix::Chain::default();
            if let Some(tools) = tools {
                chain.push(&[b"tools", tools.as_bytes()], 0);
            }
            match (own_system, sys, marker_json) {
                (Some(own), sys, _) => chain.push(
                    &[b"system", own.as_bytes()],
                    sys.as_ref().map_or(0, |s| u64::from(s.tokens) + overhead) + extra_tokens,
                ),
                // The same bytes as the body sends: the literal, the marker, the closing quote.
                (None, Some(sys), Some(m)) => {
                    let lit = sys.content_json.as_bytes();
                    chain.push(
                        &[
                            b"system",
                            &lit[..lit.len().saturating_sub(1)],
                            m.as_bytes(),
                            b"\"",
                        ],
                        u64::from(sys.tokens) + overhead + extra_tokens,
                    );
                }
                (None, Some(sys), None) => chain.push(
                    &[b"system", sys.content_json.as_bytes()],
                    u64::from(sys.tokens) + overhead,
                ),
                (None, None, _) => {}
            }
            chain
        };
        let shared_start = match (own_system, sys, marker_json) {
            (None, Some(sys), None)
                if Arc::strong_count(sys) > 1 && tools.is_none_or(|t| Arc::strong_count(t) > 1) =>
            {
                Some((
                    Arc::as_ptr(sys) as usize,
                    tools.map_or(0, |t| Arc::as_ptr(t).cast::<u8>() as usize),
                ))
            }
            _ => None,
        };
        match shared_start {
            Some(key) => {
                let mut starts = sh
                    .chain_starts
                    .lock()
                    .unwrap_or_else(std::sync::PoisonError::into_inner);
                starts
                    .entry(key)
                    .or_insert_with(|| start_chain().template())
                    .clone()
            }
            None => start_chain(),
        }
    }
}

/// `text` escaped for the inside of a JSON string literal (no quotes).
fn json_inner(text: &str) -> String {
    let m = serde_json::to_string(text).unwrap_or_default();
    m[1..m.len().saturating_sub(1)].to_owned()
}

/// Plays one session turn by turn. `arrival`: when an open-loop session was due to start.
async fn play_session<T: Transport>(
    sh: &Shared<T>,
    ph: &PhaseState,
    idx: usize,
    replay: u32,
    arrival: Option<Instant>,
) -> SessionRecord {
    let cfg = &sh.cfg;
    let sess = ph.sessions.get(idx);
    let turns = &sess.turns[..sess.turns.len().min(ph.sessions.max_turns)];
    sh.emit(RunEvent::SessionStarted {
        session_id: &sess.id,
        replay,
        warmup: ph.warmup,
    });
    let marker = thread::play_marker(cfg, &sess.id, replay, ph.warmup);
    if let Some(g) = &sess.graph {
        return Box::pin(graph::play_graph(sh, ph, sess, g, replay, arrival, marker)).await;
    }
    let play_start = Instant::now();
    let opening = Opening::new(sess.system.as_deref(), marker.as_deref());
    let system = opening.system(sess.system.as_deref());
    let mut th = Thread::new(
        64 + sess.id.len() + thread::conversation_bytes(turns),
        cfg,
        opening.chain(sh, sess.system.as_ref(), sess.tools.as_ref()),
    );
    let mut tally = Tally::default();
    let mut status = SessionStatus::Completed;
    for turn in turns {
        // When the turn is due: the session's arrival (open loop), the end of its tool wait,
        // or now.
        let due = thread::Due {
            at: arrival
                .filter(|_| turn.index == 0)
                .unwrap_or_else(Instant::now),
            tool_wait: turn.index > 0,
            play_start,
            extra_tokens: opening.extra_tokens,
            est_shift: th.est_shift,
        };
        let c = match thread::clear_turn(sh, ph, turn, due).await {
            Ok(c) => c,
            Err(why) => {
                status = why;
                break;
            }
        };
        let mut delta = th
            .continues(cfg)
            .map(|_| Conversation::rendered(0, cfg.render()));
        for m in &turn.input_delta {
            th.messages.comma();
            th.messages.push_msg(m);
            push_msg(&mut th.chain, m);
            if let Some(d) = delta.as_mut() {
                d.comma();
                d.push_msg(m);
            }
        }
        let body = th.body(cfg, system, turn, sess.tools.as_deref(), delta.as_ref());
        let opts = request_options(sh, &sess.id, c.now);
        let active = ph.active.load(Ordering::SeqCst);
        let own_pieces = th.own_before;
        sh.prefixes.sent(&mut th.chain);
        let first_sent = Instant::now();
        sh.emit(RunEvent::TurnSent {
            session_id: &sess.id,
            turn_index: turn.index,
        });
        // Boxed: the request's state (the connection's futures, several KB) exists only while a
        // turn is in flight, not in every session waiting out a tool call (50,000 sessions).
        let (result, sent, failed) = Box::pin(send_with_retries(sh, ph, body, opts)).await;
        let end = Instant::now();
        let mut rec = turn_record(
            sh,
            sess,
            replay,
            turn,
            &result,
            active,
            c.due,
            sent,
            end,
            c.est_prompt,
        );
        sent_record(&mut rec, failed, ph, c.est_prompt);
        rec.prefix_shared_tokens = sh.prefixes.shared(&mut th.chain, own_pieces);
        // What the next request can reuse from this play: this prompt (and a generated answer
        // it sends back as it was generated).
        th.own_before = th.chain.len();
        tally.add(&rec, end.duration_since(first_sent));
        // The answer joins the context: recorded text (trace mode) or what the server said.
        // After the play's last turn nothing reads the context again.
        if turns.last().is_some_and(|last| !std::ptr::eq(last, turn)) {
            th.push_answer(cfg, turn, &result, rec.output_tokens.unwrap_or(0));
        }
        // What the server answered, for graders (borrowed: no copy).
        if let (TurnStatus::Ok, Ok(o)) = (rec.status, &result) {
            sh.emit(RunEvent::Answer {
                record: &rec,
                answer: &o.content,
            });
        }
        // The record reaches the observers (and the run directory, the OS) before the next turn.
        sh.turn_finished(rec);
    }
    if status == SessionStatus::Completed && tally.any_failed {
        status = SessionStatus::Failed;
    }
    SessionRecord {
        session_id: sess.id.to_string(),
        replay,
        status,
        turns_played: tally.played,
        turns_planned: turns.len() as u32,
        output_tokens: tally.output_tokens,
        busy_s: tally.busy.as_secs_f64(),
        marker,
        warmup: ph.warmup,
        start_s: sh.offset_s(arrival.unwrap_or(play_start)),
        end_s: sh.offset_s(Instant::now()),
        superseded: false,
    }
}

/// What a play's turns add up to.
#[derive(Default)]
struct Tally {
    played: u32,
    output_tokens: u64,
    busy: Duration,
    any_failed: bool,
}

impl Tally {
    fn add(&mut self, rec: &TurnRecord, busy: Duration) {
        self.played += 1;
        self.busy += busy;
        if rec.status == TurnStatus::Ok {
            self.output_tokens += rec.output_tokens.unwrap_or(0);
        } else {
            self.any_failed = true;
        }
    }
}

/// What a sent turn's record adds to [`turn_record`]: its attempts, the phase, its estimate.
fn sent_record(
    rec: &mut TurnRecord,
    failed: Vec<bench_rundir::FailedAttempt>,
    ph: &PhaseState,
    est_prompt: u64,
) {
    rec.attempts = failed.len() as u32 + 1;
    rec.failed_attempts = failed;
    rec.warmup = ph.warmup;
    rec.est_input_tokens = Some(est_prompt);
}

/// The detail of an attempt the transport sent again on a new connection.
/// A turn's request options: the tighter of the turn timeout and what is left of the fuse, the
/// session's headers and the endpoint's.
fn request_options<T: Transport>(sh: &Shared<T>, session_id: &str, now: Instant) -> RequestOptions {
    let cfg = &sh.cfg;
    let mut timeout = cfg.limits.turn_timeout;
    if let Some(f) = sh.fuse {
        timeout = timeout.min(f.saturating_duration_since(now));
    }
    let mut opts = RequestOptions {
        timeout: Some(timeout.max(Duration::from_millis(1))),
        headers: cfg.headers_for(session_id),
        worker_header: cfg.worker_header.clone(),
        endpoint: cfg.request.endpoint,
    };
    opts.headers.extend(cfg.endpoint_headers.iter().cloned());
    opts
}

const RESENT: &str = "the reused keep-alive connection closed without any response after the \
     request was written; the transport sent it again on a new connection";

/// Sends one turn, retrying failed attempts as `cfg.retry` allows (never past the run's
/// deadline, its fuse or a cancel). Returns the last attempt's result, when it was sent, and
/// the attempts that failed before it (including the transport's resends).
async fn send_with_retries<T: Transport>(
    sh: &Shared<T>,
    ph: &PhaseState,
    mut body: Segments,
    mut opts: RequestOptions,
) -> (
    Result<TurnOutcome, bench_transport::Error>,
    Instant,
    Vec<bench_rundir::FailedAttempt>,
) {
    let cfg = &sh.cfg;
    let stream = cfg.request.response == ResponseMode::Stream;
    let mut failed = Vec::new();
    let mut attempt = 1u32;
    loop {
        let sent = Instant::now();
        if attempt > 1 {
            let mut timeout = cfg.limits.turn_timeout;
            if let Some(f) = sh.fuse {
                timeout = timeout.min(f.saturating_duration_since(sent));
            }
            opts.timeout = Some(timeout.max(Duration::from_millis(1)));
        }
        // The body is only copied (a list of shared pieces) when another attempt may follow.
        let this = if attempt <= cfg.retry.max {
            body.clone()
        } else {
            std::mem::take(&mut body)
        };
        let result = tokio::select! {
            r = sh.client.send_turn(this, stream, &opts) => r,
            () = sh.cancel.aborted() => Err(bench_transport::Error::new(
                ErrorKind::Cancelled,
                "the run was aborted while the turn was in flight",
            )),
        };
        let resent = match &result {
            Ok(o) => o.resent,
            Err(e) => e.resent(),
        };
        for _ in 0..resent {
            failed.push(bench_rundir::FailedAttempt {
                kind: ErrorKind::Io,
                status: None,
                error: RESENT.to_owned(),
                end_s: sh.offset_s(sent),
                wait_ms: 0.0,
            });
        }
        let e = match &result {
            Err(e) if attempt <= cfg.retry.max => e,
            _ => return (result, sent, failed),
        };
        let status = e.status().map(|s| s.as_u16());
        if !crate::config::Retry::retries(e.kind(), status) {
            return (result, sent, failed);
        }
        let failed_at = Instant::now();
        let wait = cfg.retry.wait(attempt + 1, e.retry_after());
        sh.sleep_until(ph, failed_at + wait).await;
        if sh.stop_now(ph, Instant::now()).is_some() {
            return (result, sent, failed);
        }
        failed.push(bench_rundir::FailedAttempt {
            kind: e.kind(),
            status,
            error: e.detail().to_owned(),
            end_s: sh.offset_s(failed_at),
            wait_ms: wait.as_secs_f64() * 1000.0,
        });
        attempt += 1;
    }
}

/// Adds a planned message to a request's prefix identity.
fn push_msg(chain: &mut crate::prefix::Chain, m: &bench_workload::plan::PlannedMessage) {
    chain.push(
        &[
            m.json_prefix().as_bytes(),
            m.content_json.as_bytes(),
            m.json_extra().as_bytes(),
        ],
        u64::from(m.tokens) + bench_workload::plan::MESSAGE_OVERHEAD_TOKENS,
    );
}

#[allow(clippy::too_many_arguments)]
fn turn_record<T: Transport>(
    sh: &Shared<T>,
    sess: &PlannedSession,
    replay: u32,
    turn: &bench_workload::plan::PlannedTurn,
    result: &Result<TurnOutcome, bench_transport::Error>,
    active: u32,
    due: Instant,
    sent: Instant,
    end: Instant,
    est_prompt: u64,
) -> TurnRecord {
    let ms = |d: Duration| d.as_secs_f64() * 1000.0;
    let mut r = TurnRecord {
        session_id: sess.id.to_string(),
        replay,
        turn_index: turn.index,
        status: TurnStatus::Ok,
        error_kind: None,
        error: None,
        ttft_ms: None,
        e2e_ms: None,
        tpot_ms: None,
        chunk_gaps_ms: Vec::new(),
        input_tokens: Some(est_prompt),
        input_tokens_source: Some(CountSource::Client),
        output_tokens: None,
        output_tokens_source: None,
        cached_tokens: None,
        cached_device_tokens: None,
        cached_host_tokens: None,
        max_output_tokens: turn.max_output_tokens,
        recorded_output_tokens: turn.recorded_output_tokens,
        active_at_dispatch: active,
        due_s: sh.offset_s(due),
        sent_s: sh.offset_s(sent),
        first_token_s: None,
        end_s: sh.offset_s(end),
        sent_utc: sh.utc(sent),
        end_utc: sh.utc(end),
        worker: None,
        redials: 0,
        warmup: false,
        ttfa_ms: None,
        reasoning_chunks: None,
        answer_chunks: None,
        reasoning_tokens: None,
        connect_ms: None,
        tls_ms: None,
        est_input_tokens: None,
        prefix_shared_tokens: None,
        superseded: false,
        attempts: 1,
        failed_attempts: Vec::new(),
        node: None,
    };
    match result {
        Ok(o) => {
            r.ttft_ms = o.ttft.map(ms);
            r.e2e_ms = Some(ms(o.e2e));
            r.tpot_ms = o.tpot().map(ms);
            r.chunk_gaps_ms = o.chunk_gaps().map(ms).collect();
            r.first_token_s = o.ttft.map(|t| sh.offset_s(sent + t));
            r.worker = o.worker.clone();
            r.redials = o.redials;
            r.connect_ms = o.connect.map(ms);
            r.tls_ms = o.tls.map(ms);
            r.ttfa_ms = o.ttfa.map(ms);
            r.reasoning_chunks = (o.reasoning_chunks > 0).then_some(o.reasoning_chunks);
            r.answer_chunks = o.streamed.then_some(o.answer_chunks);
            let u = o.usage.unwrap_or_default();
            if let Some(p) = u.prompt_tokens {
                r.input_tokens = Some(p);
                r.input_tokens_source = Some(CountSource::Server);
            }
            match u.completion_tokens {
                Some(c) => {
                    r.output_tokens = Some(c);
                    r.output_tokens_source = Some(CountSource::Server);
                }
                None => {
                    let chars = (o.content.chars().count() + o.reasoning.chars().count()) as u64;
                    r.output_tokens = Some(chars.div_ceil(4));
                    r.output_tokens_source = Some(CountSource::Client);
                }
            }
            r.cached_tokens = u.cached_tokens;
            r.cached_device_tokens = u.cached_device_tokens;
            r.cached_host_tokens = u.cached_host_tokens;
            r.reasoning_tokens = u.reasoning_tokens;
        }
        Err(e) => {
            r.status = if e.kind() == ErrorKind::Timeout {
                TurnStatus::Timeout
            } else {
                TurnStatus::Error
            };
            r.error_kind = Some(e.kind());
            r.error = Some(e.to_string());
        }
    }
    r
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use super::{Chunked, UtcClock, rfc3339_utc};
    use std::time::Duration;

    #[test]
    fn record_times_are_written_as_time_writes_rfc3339() {
        use time::format_description::well_known::Rfc3339;
        let base = time::OffsetDateTime::from_unix_timestamp(1_796_536_235).unwrap();
        let mut nanos = 0u64;
        for step in [
            0u64,
            1,
            10,
            120,
            1_000,
            999_999,
            1_000_000,
            123_456_789,
            500_000_000,
        ] {
            nanos += step;
            for at in [
                base + Duration::from_nanos(nanos),
                base + Duration::from_nanos(step),
                time::OffsetDateTime::UNIX_EPOCH + Duration::from_nanos(step),
                base + Duration::from_secs(86_400 * 400 + 3_599) + Duration::from_nanos(step),
            ] {
                assert_eq!(rfc3339_utc(at), at.format(&Rfc3339).unwrap(), "{at:?}");
            }
        }
        let bc = time::Date::from_calendar_date(-1, time::Month::March, 1)
            .unwrap()
            .midnight()
            .assume_utc();
        assert!(bc.format(&Rfc3339).is_err());
        assert_eq!(rfc3339_utc(bc), "", "a year before 0 has no RFC 3339 form");
    }

    #[test]
    fn the_run_clock_writes_what_time_writes_on_the_start_day_and_past_it() {
        use time::format_description::well_known::Rfc3339;
        let now = tokio::time::Instant::now();
        // Starts early in a day, just before midnight, and on the last day RFC 3339 can write.
        let starts = [
            time::OffsetDateTime::from_unix_timestamp_nanos(1_796_536_235_123_456_789).unwrap(),
            time::OffsetDateTime::from_unix_timestamp(1_796_601_599).unwrap()
                + Duration::from_nanos(999_999_000),
            time::Date::from_calendar_date(9999, time::Month::December, 31)
                .unwrap()
                .with_hms(23, 59, 59)
                .unwrap()
                .assume_utc(),
        ];
        for start_utc in starts {
            let clock = UtcClock::new(now, start_utc);
            for after in [
                Duration::ZERO,
                Duration::from_nanos(1),
                Duration::from_nanos(1_000),
                Duration::from_millis(1),
                Duration::from_secs(1),
                Duration::from_secs(3_599),
                Duration::from_secs(86_399) + Duration::from_nanos(999_999_999),
                Duration::from_secs(86_400),
                Duration::from_secs(86_400 * 3 + 17) + Duration::from_nanos(5),
            ] {
                let want = start_utc
                    .checked_add(after.try_into().unwrap())
                    .and_then(|at| at.format(&Rfc3339).ok())
                    .unwrap_or_default();
                assert_eq!(clock.rfc3339(now + after), want, "{start_utc} + {after:?}");
            }
            assert_eq!(
                clock.rfc3339(now.checked_sub(Duration::from_secs(1)).unwrap_or(now)),
                start_utc.format(&Rfc3339).unwrap(),
                "an instant before the start is the start"
            );
        }
    }

    #[test]
    fn chunked_records_keep_their_order_across_chunks() {
        let mut c = Chunked::default();
        let n = Chunked::<usize>::CHUNK * 3 + 7;
        for i in 0..n {
            c.push(i);
        }
        assert_eq!(c.chunks.len(), 4);
        assert!(
            c.chunks
                .iter()
                .all(|k| k.capacity() == Chunked::<usize>::CHUNK)
        );
        assert_eq!(c.into_vec(), (0..n).collect::<Vec<_>>());
    }
}
