//! The closed loop: exactly `C` workers, each playing one planned session at a time, turn by
//! turn; a finished session's slot is refilled at once from the pool.

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicU32, AtomicUsize, Ordering};
use std::time::Duration;

use bench_report::record::{CountSource, SessionRecord, SessionStatus, TurnRecord, TurnStatus};
use bench_transport::{Client, ErrorKind, RequestOptions, TurnOutcome};
use bench_workload::plan::{Plan, PlannedSession};
use bytes::Bytes;
use tokio::time::Instant;

use crate::config::{ContentMode, RunConfig};
use crate::observer::{Observer, RunEvent};

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
    /// Every finished turn, in finishing order.
    pub turns: Vec<TurnRecord>,
    /// Every finished session play.
    pub sessions: Vec<SessionRecord>,
    /// Wall time of the run.
    pub elapsed: Duration,
    /// Why it stopped.
    pub stopped_by: StopReason,
}

/// A handle to stop a running replay between turns.
#[derive(Debug, Clone, Default)]
pub struct CancelToken(Arc<AtomicBool>);

impl CancelToken {
    /// A fresh token.
    pub fn new() -> Self {
        Self::default()
    }
    /// Asks the run to stop: no new turn is sent; turns in flight finish.
    pub fn cancel(&self) {
        self.0.store(true, Ordering::SeqCst);
    }
    /// Whether [`CancelToken::cancel`] was called.
    pub fn is_cancelled(&self) -> bool {
        self.0.load(Ordering::SeqCst)
    }
}

struct Shared {
    plan: Arc<Plan>,
    cfg: RunConfig,
    client: Client,
    observers: Vec<Arc<dyn Observer>>,
    next: AtomicUsize,
    active: AtomicU32,
    start: Instant,
    start_utc: time::OffsetDateTime,
    /// `--duration`: no new session or turn after it.
    deadline: Option<Instant>,
    /// `--max-duration`: the hard fuse.
    fuse: Option<Instant>,
    cancel: CancelToken,
    fuse_blown: AtomicBool,
    duration_hit: AtomicBool,
}

impl Shared {
    fn offset_s(&self, t: Instant) -> f64 {
        t.saturating_duration_since(self.start).as_secs_f64()
    }

    fn utc(&self, t: Instant) -> String {
        let at = self.start_utc + t.saturating_duration_since(self.start);
        at.format(&time::format_description::well_known::Rfc3339)
            .unwrap_or_default()
    }

    fn emit(&self, ev: RunEvent<'_>) {
        for o in &self.observers {
            o.on_event(&ev);
        }
    }

    /// Whether no further turn may start, and why.
    fn stop_now(&self, now: Instant) -> Option<StopReason> {
        if self.cancel.is_cancelled() {
            return Some(StopReason::Cancelled);
        }
        if self.fuse.is_some_and(|f| now >= f) {
            self.fuse_blown.store(true, Ordering::SeqCst);
            return Some(StopReason::MaxDuration);
        }
        if self.deadline.is_some_and(|d| now >= d) {
            self.duration_hit.store(true, Ordering::SeqCst);
            return Some(StopReason::Duration);
        }
        None
    }

    /// The next session play: `(index into the pool, replay number)`.
    fn next_session(&self) -> Option<(usize, u32)> {
        let n = self.plan.sessions.len();
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

/// Replays `plan` against `client` with `cfg`, telling `observers` about every finished turn
/// and session. Returns when the pool is exhausted, the duration or fuse passes, or `cancel`
/// is cancelled.
pub async fn run(
    plan: Arc<Plan>,
    client: Client,
    cfg: RunConfig,
    observers: Vec<Arc<dyn Observer>>,
    cancel: CancelToken,
) -> RunOutcome {
    let start = Instant::now();
    let shared = Arc::new(Shared {
        deadline: cfg.duration.map(|d| start + d),
        fuse: cfg.max_duration.map(|d| start + d),
        plan,
        client,
        observers,
        next: AtomicUsize::new(0),
        active: AtomicU32::new(0),
        start,
        start_utc: time::OffsetDateTime::now_utc(),
        cancel,
        fuse_blown: AtomicBool::new(false),
        duration_hit: AtomicBool::new(false),
        cfg,
    });
    shared.emit(RunEvent::Started {
        concurrency: shared.cfg.concurrency,
        sessions: shared.plan.sessions.len(),
    });
    let mut workers = tokio::task::JoinSet::new();
    for _ in 0..shared.cfg.concurrency {
        let sh = shared.clone();
        workers.spawn(async move { worker(sh).await });
    }
    let mut turns = Vec::new();
    let mut sessions = Vec::new();
    while let Some(r) = workers.join_next().await {
        if let Ok((t, s)) = r {
            turns.extend(t);
            sessions.extend(s);
        }
    }
    turns.sort_by(|a: &TurnRecord, b| a.end_s.total_cmp(&b.end_s));
    let stopped_by = if shared.cancel.is_cancelled() {
        StopReason::Cancelled
    } else if shared.fuse_blown.load(Ordering::SeqCst) {
        StopReason::MaxDuration
    } else if shared.duration_hit.load(Ordering::SeqCst) || shared.deadline.is_some() {
        StopReason::Duration
    } else {
        StopReason::Exhausted
    };
    let elapsed = start.elapsed();
    shared.emit(RunEvent::Stopped { by: stopped_by });
    RunOutcome {
        turns,
        sessions,
        elapsed,
        stopped_by,
    }
}

async fn worker(sh: Arc<Shared>) -> (Vec<TurnRecord>, Vec<SessionRecord>) {
    let mut turns = Vec::new();
    let mut sessions = Vec::new();
    loop {
        if sh.stop_now(Instant::now()).is_some() {
            break;
        }
        let Some((idx, replay)) = sh.next_session() else {
            break;
        };
        sh.active.fetch_add(1, Ordering::SeqCst);
        let sess = &sh.plan.sessions[idx];
        let rec = play_session(&sh, sess, replay, &mut turns).await;
        sh.active.fetch_sub(1, Ordering::SeqCst);
        sh.emit(RunEvent::SessionFinished(&rec));
        sessions.push(rec);
    }
    (turns, sessions)
}

/// The JSON string literal of `marker` appended inside an existing string literal.
fn splice_marker(literal: &str, marker: &str) -> String {
    let inner = &literal[..literal.len().saturating_sub(1)];
    let m = serde_json::to_string(marker).unwrap_or_default();
    format!("{inner}{}\"", &m[1..m.len().saturating_sub(1)])
}

async fn play_session(
    sh: &Shared,
    sess: &PlannedSession,
    replay: u32,
    out: &mut Vec<TurnRecord>,
) -> SessionRecord {
    let cfg = &sh.cfg;
    let session_start = Instant::now();
    // The conversation so far, as comma-separated message objects: built once, appended to.
    let mut messages = String::new();
    let marker =
        (cfg.cache_bust && replay > 0).then(|| format!("[bench replay {}#{replay}]", sess.id));
    let mut extra_tokens = 0u64;
    match (&sess.system, &marker) {
        (Some(sys), Some(m)) => {
            messages.push_str(sys.json_prefix());
            messages.push_str(&splice_marker(&sys.content_json, &format!("\n{m}")));
            messages.push('}');
            extra_tokens += (m.len() as u64).div_ceil(4);
        }
        (Some(sys), None) => sys.write_json(&mut messages),
        (None, Some(m)) => {
            messages.push_str("{\"role\":\"system\",\"content\":");
            messages.push_str(&serde_json::to_string(m).unwrap_or_default());
            messages.push('}');
            extra_tokens += (m.len() as u64).div_ceil(4) + 5;
        }
        (None, None) => {}
    }
    let mut status = SessionStatus::Completed;
    let mut played = 0u32;
    let mut output_tokens = 0u64;
    let mut busy = Duration::ZERO;
    let mut any_failed = false;
    let mut est_shift: i64 = 0; // model mode: generated answers differ from the recorded ones
    for turn in &sess.turns {
        // Tool wait before the turn (not counted in any latency).
        if turn.index > 0 && !cfg.no_gaps && turn.pre_gap_ms > 0.0 {
            let gap_ms = (turn.pre_gap_ms * cfg.gap_scale).min(cfg.gap_cap_ms);
            let wake = Instant::now() + Duration::from_secs_f64(gap_ms / 1000.0);
            let limit = [sh.deadline, sh.fuse].into_iter().flatten().min();
            tokio::time::sleep_until(limit.map_or(wake, |l| wake.min(l))).await;
        }
        let now = Instant::now();
        if sh.stop_now(now).is_some() {
            status = SessionStatus::Truncated;
            break;
        }
        if cfg
            .session_timeout
            .is_some_and(|t| now.duration_since(session_start) >= t)
        {
            status = SessionStatus::Timeout;
            break;
        }
        let est_prompt =
            (turn.est_prompt_tokens as i64 + est_shift + extra_tokens as i64).max(0) as u64;
        if let Some(max) = cfg.max_model_len {
            if est_prompt + u64::from(turn.max_output_tokens) > max {
                status = SessionStatus::ContextGuard;
                break;
            }
        }
        for m in &turn.input_delta {
            if !messages.is_empty() {
                messages.push(',');
            }
            m.write_json(&mut messages);
        }
        let body = cfg.body(&messages, turn.max_output_tokens);
        // Per-request timeout: the tighter of the turn timeout and what is left of the fuse.
        let mut timeout = cfg.turn_timeout;
        if let Some(f) = sh.fuse {
            timeout = timeout.min(f.saturating_duration_since(now));
        }
        let opts = RequestOptions {
            timeout: Some(timeout.max(Duration::from_millis(1))),
            headers: cfg.headers_for(&sess.id),
            worker_header: cfg.worker_header.clone(),
        };
        let active = sh.active.load(Ordering::SeqCst);
        let sent = Instant::now();
        let result = sh
            .client
            .chat_body(Bytes::from(body), cfg.stream, &opts)
            .await;
        let end = Instant::now();
        busy += end.duration_since(sent);
        played += 1;
        let rec = turn_record(
            sh, sess, replay, turn, &result, active, now, sent, end, est_prompt,
        );
        if rec.status == TurnStatus::Ok {
            output_tokens += rec.output_tokens.unwrap_or(0);
        } else {
            any_failed = true;
        }
        // The answer joins the context: recorded text (trace mode) or what the server said.
        if !messages.is_empty() {
            messages.push(',');
        }
        match (cfg.content_mode, &result) {
            (ContentMode::Model, Ok(o)) => {
                messages.push_str("{\"role\":\"assistant\",\"content\":");
                messages.push_str(&serde_json::to_string(&o.content).unwrap_or_default());
                messages.push('}');
                est_shift +=
                    rec.output_tokens.unwrap_or(0) as i64 - i64::from(turn.assistant.tokens);
            }
            _ => turn.assistant.write_json(&mut messages),
        }
        // The record reaches the observers (and the run directory, the OS) before the next turn.
        sh.emit(RunEvent::TurnFinished(&rec));
        out.push(rec);
    }
    if status == SessionStatus::Completed && any_failed {
        status = SessionStatus::Failed;
    }
    SessionRecord {
        session_id: sess.id.to_string(),
        replay,
        status,
        turns_played: played,
        turns_planned: sess.turns.len() as u32,
        output_tokens,
        busy_s: busy.as_secs_f64(),
        marker,
        warmup: false,
    }
}

#[allow(clippy::too_many_arguments)]
fn turn_record(
    sh: &Shared,
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
        }
        Err(e) => {
            r.status = if e.kind() == ErrorKind::Timeout {
                TurnStatus::Timeout
            } else {
                TurnStatus::Error
            };
            r.error_kind = Some(e.kind().as_str().to_string());
            r.error = Some(e.to_string());
        }
    }
    r
}
