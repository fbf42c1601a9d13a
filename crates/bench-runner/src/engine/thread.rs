//! The steps one turn of a play goes through, shared by a linear session and an agent graph's
//! branches: the conversation as it stands ([`Thread`]), clearing a turn to go
//! ([`clear_turn`]), its request body, and its answer joining the context.

use bench_rundir::record::SessionStatus;
use bench_transport::{Segments, TurnOutcome};
use bench_workload::plan::{MESSAGE_OVERHEAD_TOKENS, PlannedTurn, Role};
use tokio::time::Instant;

use super::{PhaseState, Shared, Transport, push_msg};
use crate::config::{ContentMode, RunConfig, System};
use crate::conv::Conversation;

/// A conversation as it stands in a play (a linear session, or one branch of a graph).
#[derive(Clone)]
pub(super) struct Thread {
    /// The messages so far, as comma-separated message objects: built once, appended to.
    pub(super) messages: Conversation,
    /// Their prefix identity (see `prefix.rs`).
    pub(super) chain: crate::prefix::Chain,
    /// Chain pieces this play sent itself: what its next request can reuse.
    pub(super) own_before: usize,
    /// `model` content mode: how far generated answers' tokens are from the recorded ones.
    pub(super) est_shift: i64,
    /// Responses with server-side state: the id the next turn continues, when the last turn
    /// gave one.
    pub(super) previous_response_id: Option<String>,
}

impl Thread {
    /// `capacity`: the conversation's whole size, known from the plan. Reserved exactly, so
    /// that growing it never doubles its capacity (10,000 sessions with an 8K-token system
    /// prompt would otherwise hold up to twice their text).
    pub(super) fn new(capacity: usize, cfg: &RunConfig, chain: crate::prefix::Chain) -> Thread {
        Thread {
            messages: Conversation::rendered(capacity, cfg.render()),
            chain,
            own_before: 0,
            est_shift: 0,
            previous_response_id: None,
        }
    }

    /// The id the next request continues from, when the server keeps the state.
    pub(super) fn continues(&self, cfg: &RunConfig) -> Option<&str> {
        self.previous_response_id
            .as_deref()
            .filter(|_| server_state(cfg))
    }

    /// The request body for `turn`, its input already pushed: the whole conversation, or
    /// (Responses with server-side state, after a first answer) only `delta`.
    pub(super) fn body(
        &self,
        cfg: &RunConfig,
        system: System<'_>,
        turn: &PlannedTurn,
        tools: Option<&str>,
        delta: Option<&Conversation>,
    ) -> Segments {
        match (self.continues(cfg), delta) {
            (Some(id), Some(d)) => {
                cfg.body_segments(system, d, turn.max_output_tokens, Some(id), tools)
            }
            _ => cfg.body_segments(system, &self.messages, turn.max_output_tokens, None, tools),
        }
    }

    /// The answer joins the conversation: the recorded text (`trace` content mode), or what
    /// the server said (`model`: returned as a JSON string literal with its tokens, for the
    /// joins that wait on it).
    pub(super) fn push_answer(
        &mut self,
        cfg: &RunConfig,
        turn: &PlannedTurn,
        result: &Result<TurnOutcome, bench_transport::Error>,
        output_tokens: u64,
    ) -> Option<(String, u64)> {
        if server_state(cfg) {
            self.previous_response_id = result.as_ref().ok().and_then(|o| o.response_id.clone());
        }
        self.messages.comma();
        match (cfg.request.content_mode, result) {
            (ContentMode::Model, Ok(o)) => {
                let text = serde_json::to_string(&o.content).unwrap_or_default();
                self.messages.push_text(Role::Assistant, &text);
                self.chain.push(
                    &[b"assistant", text.as_bytes()],
                    output_tokens + MESSAGE_OVERHEAD_TOKENS,
                );
                self.own_before = self.chain.len();
                self.est_shift += output_tokens as i64 - i64::from(turn.assistant.tokens);
                Some((text, output_tokens))
            }
            _ => {
                self.messages.push_msg(&turn.assistant);
                push_msg(&mut self.chain, &turn.assistant);
                None
            }
        }
    }
}

/// Responses with server-side state: each turn sends only its new input after the previous
/// response's id.
pub(super) fn server_state(cfg: &RunConfig) -> bool {
    cfg.request.endpoint == bench_transport::Endpoint::Responses
        && cfg.request.responses_state == crate::config::ResponsesState::Server
}

/// The bytes `turns` add to a conversation (their messages and answers, with separators).
pub(super) fn conversation_bytes(turns: &[PlannedTurn]) -> usize {
    turns
        .iter()
        .map(|t| {
            t.input_delta
                .iter()
                .map(|m| m.json_len() + 1)
                .sum::<usize>()
                + t.assistant.json_len()
                + 1
        })
        .sum()
}

/// A play's cache-busting marker: a warmup's always, a replay's after its first play.
pub(super) fn play_marker(
    cfg: &RunConfig,
    session_id: &str,
    replay: u32,
    warmup: bool,
) -> Option<String> {
    if !cfg.request.cache_bust {
        return None;
    }
    match (&cfg.request.cache_bust_tag, warmup) {
        (None, true) => Some(format!("[bench warmup {session_id}]")),
        (Some(tag), true) => Some(format!("[bench warmup {tag} {session_id}]")),
        (None, false) if replay > 0 => Some(format!("[bench replay {session_id}#{replay}]")),
        (Some(tag), false) => Some(format!("[bench {tag} {session_id}#{replay}]")),
        _ => None,
    }
}

/// A turn cleared to go.
pub(super) struct Cleared {
    /// When it was due: its arrival, its release, or the end of its tool wait.
    pub(super) due: Instant,
    /// When it was cleared.
    pub(super) now: Instant,
    /// Its prompt's estimated tokens as this play sends it.
    pub(super) est_prompt: u64,
}

/// Where a turn starts from and what it carries into [`clear_turn`].
pub(super) struct Due {
    /// When it may go at the earliest (before any tool wait).
    pub(super) at: Instant,
    /// Whether its recorded tool wait comes first (not for a session's first turn).
    pub(super) tool_wait: bool,
    /// When the play started (the session timeout counts from it).
    pub(super) play_start: Instant,
    /// Tokens the play adds to every prompt ([`super::Opening`]) and the thread's shift.
    pub(super) extra_tokens: u64,
    pub(super) est_shift: i64,
}

/// Waits until `turn` is due (its tool wait is counted in no latency) and checks that it may
/// still go: within the session timeout, the run not stopping, its prompt within
/// `max_model_len`. `Err` is why the session ends before it.
pub(super) async fn clear_turn<T: Transport>(
    sh: &Shared<T>,
    ph: &PhaseState,
    turn: &PlannedTurn,
    d: Due,
) -> Result<Cleared, SessionStatus> {
    let cfg = &sh.cfg;
    let timed_out = |t: Instant| {
        cfg.limits
            .session_timeout
            .is_some_and(|limit| t.saturating_duration_since(d.play_start) >= limit)
    };
    let mut due = d.at;
    if let Some(wait) = cfg
        .request
        .tool_waits
        .wait(turn.pre_gap_ms)
        .filter(|_| d.tool_wait)
    {
        due += wait;
        // A session whose next turn would come after its timeout ends now, not after the wait.
        if timed_out(due) {
            return Err(SessionStatus::Timeout);
        }
        sh.sleep_until(ph, due).await;
    } else if due > Instant::now() {
        sh.sleep_until(ph, due).await;
    }
    let now = Instant::now();
    if sh.stop_now(ph, now).is_some() {
        sh.drain(ph);
        return Err(SessionStatus::Truncated);
    }
    if timed_out(now) {
        return Err(SessionStatus::Timeout);
    }
    let est_prompt =
        (turn.est_prompt_tokens as i64 + d.est_shift + d.extra_tokens as i64).max(0) as u64;
    if cfg
        .max_model_len
        .is_some_and(|max| est_prompt + u64::from(turn.max_output_tokens) > max)
    {
        return Err(SessionStatus::ContextGuard);
    }
    Ok(Cleared {
        due,
        now,
        est_prompt,
    })
}
