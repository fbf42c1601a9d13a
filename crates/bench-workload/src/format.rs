//! The native session trace format (compatible with agentic-bench's `abench-session-jsonl-v1`).
//!
//! One session per JSONL line:
//!
//! ```json
//! {"session_id": "s1",
//!  "source": {"dataset": "lmcache", "agent": "mini-swe-agent", "model": "openai/gpt-5.4", "trial": "0"},
//!  "system_prompt": "You are a helpful assistant.",
//!  "turns": [{"index": 0,
//!             "input_delta": [{"role": "user", "content": "Fix the bug"}],
//!             "assistant_text": "Let me look.",
//!             "input_tokens": 812, "output_tokens": 5, "cached_tokens": 0,
//!             "pre_gap_ms": 0, "tool_calls": null}]}
//! ```
//!
//! `input_delta` holds the messages added before that turn; token counts are what the recording
//! server reported (absent when unknown). `timestamp_ms` (an extension) is when the recorded
//! request was sent, in ms from the start of the trace; importers of timed traces (Mooncake,
//! LMCache) fill it for open-loop replay.

use serde::{Deserialize, Serialize};

/// The format tag written by `bench import` into each session's `source.format` is not needed:
/// the schema is identified by this name in docs and manifests.
pub const FORMAT_NAME: &str = "abench-session-jsonl-v1";

/// Where a session was recorded.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct Source {
    /// Dataset name (e.g. `lmcache`, `mooncake`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub dataset: Option<String>,
    /// The agent that produced the trajectory.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub agent: Option<String>,
    /// The model that served the recording (keys the recording-rate table).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub model: Option<String>,
    /// Trial or run identifier.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub trial: Option<String>,
}

/// One chat message as recorded. Roles other than system/user/assistant (e.g. `tool`) are kept
/// here and coerced when a request is built (unless `--tool-messages faithful`).
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct Message {
    /// The recorded role.
    pub role: String,
    /// The text.
    pub content: String,
    /// A tool result's `tool_call_id`: the id of the assistant's call it answers.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub tool_call_id: Option<String>,
}

/// One recorded turn (one LLM call).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct TraceTurn {
    /// Position in the session, from 0.
    pub index: u32,
    /// Messages appended to the conversation before this turn's request.
    #[serde(default)]
    pub input_delta: Vec<Message>,
    /// What the assistant answered.
    #[serde(default)]
    pub assistant_text: String,
    /// Prompt tokens the recording server reported.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub input_tokens: Option<u64>,
    /// Completion tokens the recording server reported.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub output_tokens: Option<u64>,
    /// Prefix-cache hits the recording server reported.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub cached_tokens: Option<u64>,
    /// Time between the previous turn's end and this turn's request (tool work), ms.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub pre_gap_ms: Option<f64>,
    /// Tool calls the assistant made (kept opaque).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub tool_calls: Option<serde_json::Value>,
    /// When the recorded request was sent, ms from the start of the trace (timed traces).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub timestamp_ms: Option<f64>,
    /// Agent graphs: the nodes this turn waits for besides the previous turn of its own
    /// conversation (a join), as [`NodeRef`] strings (`"main:3"`, `"explore-a:1"`). Their
    /// answers join this turn's input, one message each, before its `input_delta`; its
    /// `pre_gap_ms` counts from the last of them to finish.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub after: Vec<String>,
}

impl TraceTurn {
    /// A turn with only messages and an answer.
    pub fn new(index: u32, input_delta: Vec<Message>, assistant_text: impl Into<String>) -> Self {
        TraceTurn {
            index,
            input_delta,
            assistant_text: assistant_text.into(),
            input_tokens: None,
            output_tokens: None,
            cached_tokens: None,
            pre_gap_ms: None,
            tool_calls: None,
            timestamp_ms: None,
            after: Vec::new(),
        }
    }
}

/// One recorded session (an agent trajectory).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct TraceSession {
    /// Unique within a dataset.
    pub session_id: String,
    /// Provenance.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub source: Option<Source>,
    /// The session's own system prompt, if recorded separately from the turns.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub system_prompt: Option<String>,
    /// The turns, in order.
    #[serde(default)]
    pub turns: Vec<TraceTurn>,
    /// The tool definitions the agent sent (OpenAI `tools`), when recorded.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub tools: Option<serde_json::Value>,
    /// Agent graphs: the subagents the session forks (none: one chain of turns). A subagent
    /// is a conversation of its own that starts once the node it forks from has finished and
    /// runs beside its parent; a later turn that names one of its turns in `after` joins it.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub subagents: Vec<Subagent>,
}

/// The conversation a subagent starts from.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum SubagentContext {
    /// The forking node's conversation: every message its request sent and its answer (a
    /// prefix the server's cache holds), then the subagent's own turns.
    #[default]
    Fork,
    /// A conversation of its own, from its own system prompt (or none).
    Fresh,
}

/// One subagent of an agent graph (see [`TraceSession::subagents`]).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Subagent {
    /// Unique within its session; not `main`, no `:`.
    pub agent_id: String,
    /// The node it forks from, as a [`NodeRef`] string (`"main:1"`): its first turn is sent
    /// once that node finished and its own first `pre_gap_ms` passed.
    pub after: String,
    /// Where its conversation starts.
    #[serde(default)]
    pub context: SubagentContext,
    /// The kind of subagent as recorded (e.g. Claude Code's `Explore`), for reports.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub subagent_type: Option<String>,
    /// Its own system prompt (`fresh` subagents; with `fork` it is sent as a user message).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub system_prompt: Option<String>,
    /// Its turns, in order (indices from 0).
    pub turns: Vec<TraceTurn>,
}

/// The main conversation's name in node references.
pub const MAIN_AGENT: &str = "main";

/// A node of an agent graph: turn `turn` of the conversation `agent` (`main` or a subagent's
/// id), written `"agent:turn"` (the last `:` splits; an optional `"SESSION/"` before it names
/// the session, which must be the node's own).
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub struct NodeRef {
    /// `main` or a subagent's id.
    pub agent: String,
    /// The turn's index in that conversation.
    pub turn: u32,
}

impl NodeRef {
    /// Parses `"agent:turn"` (or `"SESSION/agent:turn"`) for a node of `session`.
    pub fn parse(s: &str, session: &str) -> Result<NodeRef, String> {
        let (agent, turn) = s.rsplit_once(':').ok_or_else(|| {
            format!("{s:?} is not a node reference (AGENT:TURN, e.g. \"main:2\")")
        })?;
        let agent = match agent.split_once('/') {
            Some((sess, _)) if sess != session => {
                return Err(format!(
                    "{s:?} waits on a node of another session ({sess:?}): a graph's nodes are its own session's"
                ));
            }
            Some((_, a)) => a,
            None => agent,
        };
        let turn = turn
            .parse::<u32>()
            .map_err(|_| format!("{s:?}: the turn after ':' must be a number"))?;
        Ok(NodeRef {
            agent: agent.to_string(),
            turn,
        })
    }
}

impl std::fmt::Display for NodeRef {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{}:{}", self.agent, self.turn)
    }
}

impl TraceSession {
    /// Checks what serde cannot: turn indices in order from 0, finite non-negative gaps and
    /// timestamps, token counts no larger than [`crate::load::MAX_PLAUSIBLE_TOKENS`].
    /// Returns the name of the offending field and what is wrong.
    pub fn check(&self) -> Result<(), String> {
        if self.session_id.is_empty() {
            return Err("session_id: must not be empty".into());
        }
        check_turns(&self.turns, "turns")?;
        for (k, a) in self.subagents.iter().enumerate() {
            check_turns(&a.turns, &format!("subagents[{k}].turns"))?;
        }
        if !self.subagents.is_empty() || self.turns.iter().any(|t| !t.after.is_empty()) {
            crate::graph::check(self)?;
        }
        Ok(())
    }
}

fn check_turns(turns: &[TraceTurn], at: &str) -> Result<(), String> {
    {
        for (i, t) in turns.iter().enumerate() {
            if t.index as usize != i {
                return Err(format!(
                    "{at}[{i}].index: expected {i}, found {} (turns must be in order from 0)",
                    t.index
                ));
            }
            if let Some(g) = t.pre_gap_ms {
                if !g.is_finite() || g < 0.0 {
                    return Err(format!(
                        "{at}[{i}].pre_gap_ms: must be a non-negative number, found {g}"
                    ));
                }
            }
            for (field, v) in [
                ("input_tokens", t.input_tokens),
                ("output_tokens", t.output_tokens),
                ("cached_tokens", t.cached_tokens),
            ] {
                if let Some(v) = v.filter(|&v| v > crate::load::MAX_PLAUSIBLE_TOKENS) {
                    return Err(format!(
                        "{at}[{i}].{field}: {v} is not a plausible token count (above {})",
                        crate::load::MAX_PLAUSIBLE_TOKENS
                    ));
                }
            }
            if let Some(ts) = t.timestamp_ms {
                if !ts.is_finite() || ts < 0.0 {
                    return Err(format!(
                        "{at}[{i}].timestamp_ms: must be a non-negative number, found {ts}"
                    ));
                }
            }
        }
        Ok(())
    }
}

/// Default selection knobs a dataset directory may carry in `manifest.json`. Flags given on the
/// command line win.
///
/// agentic-bench's manifests (written by `python3 -m abench data NAME/TIER`) are read too:
/// `band: [lo, hi] | null` gives the context defaults, `system_prompt_len` is
/// `system_prompt_tokens`, and its descriptive keys (`dataset`, `tier`, `version`, `n_sessions`,
/// `files`) are kept but change nothing. Any other key is an error.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Manifest {
    /// Free text.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub description: Option<String>,
    /// Keep sessions with at least this many turns.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub min_turns: Option<u32>,
    /// Cut sessions to at most this many turns.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub max_turns: Option<u32>,
    /// Peak-context band, lower bound (tokens).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub min_context: Option<u64>,
    /// Peak-context band, upper bound (tokens): the model's window.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub max_context: Option<u64>,
    /// Output policy (`trace`, `fixed:K`, `budget:T`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub output_policy: Option<String>,
    /// Shared system prompt length in tokens (agentic-bench: `system_prompt_len`).
    #[serde(
        default,
        alias = "system_prompt_len",
        skip_serializing_if = "Option::is_none"
    )]
    pub system_prompt_tokens: Option<u32>,
    /// agentic-bench's peak-context band `[lo, hi]`: `min_context` and `max_context` when those
    /// keys are absent (`null`: no band).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub band: Option<[u64; 2]>,
    /// agentic-bench: the dataset's name (informational).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub dataset: Option<String>,
    /// agentic-bench: the tier's name (informational).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub tier: Option<String>,
    /// agentic-bench: the tier's version (informational, any JSON value).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub version: Option<serde_json::Value>,
    /// agentic-bench: how many sessions the tier holds (informational).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub n_sessions: Option<u64>,
    /// agentic-bench: the tier's files with sizes and checksums (informational, not checked).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub files: Option<serde_json::Value>,
}
