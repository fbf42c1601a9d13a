//! The records a run writes: one [`TurnRecord`] per finished turn (`turns.jsonl`) and one
//! [`SessionRecord`] per finished session play (`sessions.jsonl`).
//!
//! Stable keys scripts rely on: `session_id`, `turn_index`, `status`, `error_kind`, `ttft_ms`,
//! `e2e_ms`, `input_tokens`, `output_tokens`, `cached_tokens`. Times are monotonic offsets from
//! the run start in seconds (`*_s`) plus UTC wall times (`*_utc`, RFC 3339). "Not measured" is
//! `null`, never `0`.

use serde::{Deserialize, Serialize};

use crate::ErrorKind;

fn is_false(b: &bool) -> bool {
    !*b
}

fn one() -> u32 {
    1
}

fn is_one(n: &u32) -> bool {
    *n == 1
}

/// One failed attempt of a turn that was sent again ([`TurnRecord::failed_attempts`]).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct FailedAttempt {
    /// What went wrong.
    pub kind: ErrorKind,
    /// The HTTP status, for `http_status` failures.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub status: Option<u16>,
    /// One line of detail (secrets scrubbed).
    pub error: String,
    /// When the attempt failed, in seconds from the run start (monotonic).
    pub end_s: f64,
    /// How long the client waited before the next attempt, in ms (`Retry-After` when the
    /// server sent one, else the backoff; 0 for a transport redial).
    pub wait_ms: f64,
}

/// How a turn ended.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum TurnStatus {
    /// A complete response.
    Ok,
    /// A failure other than a timeout (the kind is in `error_kind`).
    Error,
    /// The request did not finish within its timeout.
    Timeout,
}

/// Where a token count came from.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum CountSource {
    /// The server's `usage`.
    Server,
    /// Counted or estimated by the client (tokenizer at plan time, or ~4 chars/token).
    Client,
}

/// One finished turn.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct TurnRecord {
    /// Session id from the plan.
    pub session_id: String,
    /// Which play of the session this is (0 first; the pool loops in duration runs).
    pub replay: u32,
    /// Turn position in the session.
    pub turn_index: u32,
    /// How the turn ended.
    pub status: TurnStatus,
    /// Error kind (`http_status`, `io`, `timeout`, ...) when not ok.
    pub error_kind: Option<ErrorKind>,
    /// Error detail (one line) when not ok.
    pub error: Option<String>,
    /// Request sent → first output chunk, ms.
    pub ttft_ms: Option<f64>,
    /// Request sent → end of body, ms.
    pub e2e_ms: Option<f64>,
    /// `(e2e − ttft) / (output_tokens − 1)`, ms.
    pub tpot_ms: Option<f64>,
    /// Gaps between consecutive output chunks, ms.
    pub chunk_gaps_ms: Vec<f64>,
    /// Prompt tokens (server usage, else the plan's estimate).
    pub input_tokens: Option<u64>,
    /// Where `input_tokens` came from.
    pub input_tokens_source: Option<CountSource>,
    /// Output tokens (server usage, else counted by the client).
    pub output_tokens: Option<u64>,
    /// Where `output_tokens` came from.
    pub output_tokens_source: Option<CountSource>,
    /// Prefix-cache hits reported by the server (`null` when not reported).
    pub cached_tokens: Option<u64>,
    /// SGLang: hits served from device memory.
    pub cached_device_tokens: Option<u64>,
    /// SGLang: hits served from the host tier.
    pub cached_host_tokens: Option<u64>,
    /// Output tokens the request was pinned to.
    pub max_output_tokens: u32,
    /// Output tokens the recording produced, when known (output-length fidelity).
    pub recorded_output_tokens: Option<u64>,
    /// Sessions active (in a turn or a tool wait) when this turn was sent.
    pub active_at_dispatch: u32,
    /// When the turn was due (after its tool wait), s since the run start.
    pub due_s: f64,
    /// When the request was sent, s since the run start.
    pub sent_s: f64,
    /// When the first output chunk arrived, s since the run start.
    pub first_token_s: Option<f64>,
    /// When the response ended (or failed), s since the run start.
    pub end_s: f64,
    /// Wall time the request was sent (RFC 3339 UTC).
    pub sent_utc: String,
    /// Wall time the response ended (RFC 3339 UTC).
    pub end_utc: String,
    /// Value of the worker header on the response, if configured.
    pub worker: Option<String>,
    /// Requests re-sent because a pooled connection had been closed by the server.
    pub redials: u32,
    /// Request sent → first *answer* chunk (not reasoning), ms. Equals `ttft_ms` unless the
    /// model reasoned first. Written only when known.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub ttfa_ms: Option<f64>,
    /// Output-bearing chunks carrying reasoning. Written only when there were any.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub reasoning_chunks: Option<u32>,
    /// Output-bearing chunks carrying answer text. Written only for streamed ok turns.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub answer_chunks: Option<u32>,
    /// Reasoning tokens as the server's usage reports them (not every API does).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub reasoning_tokens: Option<u64>,
    /// TCP connect time of a connection opened for this turn, ms; absent on a reused one.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub connect_ms: Option<f64>,
    /// TLS handshake time of a connection opened for this turn, ms; absent on a reused one
    /// and over plain HTTP.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub tls_ms: Option<f64>,
    /// The client's estimate of the prompt's tokens (the plan's counts plus a per-message
    /// overhead), whatever `input_tokens` says: with the server's `usage` beside it, the
    /// token-estimate check. Written only when known.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub est_input_tokens: Option<u64>,
    /// Estimated tokens of the longest prefix (cut at message boundaries) this request shared
    /// with any request the run sent before it: the most a prefix cache that was empty when the
    /// run began could hit (the warm-cache check). Written only when known.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub prefix_shared_tokens: Option<u64>,
    /// Part of the unmeasured warmup.
    pub warmup: bool,
    /// Replaced by a later play of its session (a resumed run played the session again):
    /// readers skip it. Written only when true.
    #[serde(default, skip_serializing_if = "is_false")]
    pub superseded: bool,
    /// Requests sent for this turn: 1, unless the transport redialed a stale keep-alive
    /// connection or `--retries` retried a failed attempt. Written only when more than 1.
    #[serde(default = "one", skip_serializing_if = "is_one")]
    pub attempts: u32,
    /// The attempts that failed before the last one, in order. Each counts as one error of its
    /// kind in the run's per-attempt totals; the turn's own `status` is its last attempt's.
    /// Written only when there were any.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub failed_attempts: Vec<FailedAttempt>,
    /// Agent graphs: where the turn sits in its session's graph (absent for a session that is
    /// one chain). `turn_index` is then the node's number in the session (main turns first,
    /// then each subagent's).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub node: Option<NodeInfo>,
}

impl TurnRecord {
    /// A plausible ok turn of play 0 of `session_id`, for tests, examples and benchmarks: set
    /// what a test is about and take the rest from here with struct update syntax.
    ///
    /// Sent at 0 s (also its due time), first token at 0.1 s, ended at 1 s: TTFT 100 ms,
    /// e2e 1000 ms, TPOT 100 ms, 10 output tokens (nine 100 ms chunk gaps; the request was
    /// pinned to 10), 100 input tokens; one session active at dispatch; wall times
    /// `2025-01-01T00:00:00Z` → `…:01Z`; measured (not warmup), one attempt, no redial. Every
    /// other optional field is absent (`None`: token sources, cached tokens, recorded output,
    /// worker, reasoning and connection times, estimates, graph node).
    ///
    /// ```
    /// use bench_rundir::{TurnRecord, TurnStatus};
    ///
    /// let slow = TurnRecord {
    ///     ttft_ms: Some(900.0),
    ///     ..TurnRecord::example("s-1", 3)
    /// };
    /// assert_eq!((slow.session_id.as_str(), slow.turn_index), ("s-1", 3));
    /// assert_eq!(slow.status, TurnStatus::Ok);
    /// assert_eq!(slow.e2e_ms, Some(1000.0));
    /// ```
    pub fn example(session_id: impl Into<String>, turn_index: u32) -> TurnRecord {
        TurnRecord {
            session_id: session_id.into(),
            replay: 0,
            turn_index,
            status: TurnStatus::Ok,
            error_kind: None,
            error: None,
            ttft_ms: Some(100.0),
            e2e_ms: Some(1000.0),
            tpot_ms: Some(100.0),
            chunk_gaps_ms: vec![100.0; 9],
            input_tokens: Some(100),
            input_tokens_source: None,
            output_tokens: Some(10),
            output_tokens_source: None,
            cached_tokens: None,
            cached_device_tokens: None,
            cached_host_tokens: None,
            max_output_tokens: 10,
            recorded_output_tokens: None,
            active_at_dispatch: 1,
            due_s: 0.0,
            sent_s: 0.0,
            first_token_s: Some(0.1),
            end_s: 1.0,
            sent_utc: "2025-01-01T00:00:00Z".to_owned(),
            end_utc: "2025-01-01T00:00:01Z".to_owned(),
            worker: None,
            redials: 0,
            ttfa_ms: None,
            reasoning_chunks: None,
            answer_chunks: None,
            reasoning_tokens: None,
            connect_ms: None,
            tls_ms: None,
            est_input_tokens: None,
            prefix_shared_tokens: None,
            warmup: false,
            superseded: false,
            attempts: 1,
            failed_attempts: Vec::new(),
            node: None,
        }
    }
}

/// A turn's place in an agent graph ([`TurnRecord::node`]).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct NodeInfo {
    /// Its conversation: `main` or the subagent's id.
    pub agent: String,
    /// Nesting depth: 0 for main, 1 for a subagent of main, ….
    pub depth: u32,
    /// The nodes it waited for (`turn_index` values): its predecessor in its conversation (or
    /// the node its subagent forked from), then its joins.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub after: Vec<u32>,
    /// When the last of those finished, s from the run's start (the play's start for a
    /// first node): its tool wait runs from here to `due_s`.
    pub released_s: f64,
    /// The node whose end released it (the slowest of `after`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub released_by: Option<u32>,
    /// Requests of its session in flight when it was sent, itself included
    /// (`active_at_dispatch` counts sessions, so a run's requests in flight may exceed `-c`).
    pub in_flight: u32,
}

/// How a session play ended.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum SessionStatus {
    /// Every planned turn was played.
    Completed,
    /// Cut at a turn boundary by the duration deadline or the fuse.
    Truncated,
    /// Stopped because the next prompt plus pinned output would not fit the model's window.
    ContextGuard,
    /// Stopped by the per-session timeout.
    Timeout,
    /// Stopped after a failed turn.
    Failed,
}

/// One finished session play.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct SessionRecord {
    /// Session id from the plan.
    pub session_id: String,
    /// Which play of the session this is.
    pub replay: u32,
    /// How it ended.
    pub status: SessionStatus,
    /// Turns played (ok or not).
    pub turns_played: u32,
    /// Turns planned.
    pub turns_planned: u32,
    /// Σ output tokens of its ok turns.
    pub output_tokens: u64,
    /// Time spent in requests (tool waits excluded), s.
    pub busy_s: f64,
    /// The cache-busting marker inserted after the system prompt, if any.
    pub marker: Option<String>,
    /// Part of the unmeasured warmup.
    pub warmup: bool,
    /// When the play started (its first turn was due), s from the run's start.
    #[serde(default)]
    pub start_s: f64,
    /// When the play ended, s from the run's start.
    #[serde(default)]
    pub end_s: f64,
    /// Replaced by a later play (see [`TurnRecord::superseded`]). Written only when true.
    #[serde(default, skip_serializing_if = "is_false")]
    pub superseded: bool,
}
