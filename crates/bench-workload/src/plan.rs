//! Building a [`Plan`]: selection, shaping, token counting, tool waits, synthetic sessions.

use std::collections::HashMap;
use std::path::PathBuf;
use std::sync::Arc;

use rand::{Rng, SeedableRng};
use rand_chacha::ChaCha8Rng;
use serde::{Deserialize, Serialize};

use crate::error::PlanError;
use crate::format::{Manifest, TraceSession, TraceTurn};
use crate::load;
use crate::tokenize::{TokenCounter, TokenizerSpec};

mod build;

/// Tokens a chat template adds around each message (role markers, separators): an estimate
/// added to every message when prompt lengths are estimated (Qwen/ChatML: `<|im_start|>role\n`
/// … `<|im_end|>\n` is 5 tokens with the role).
pub const MESSAGE_OVERHEAD_TOKENS: u64 = 5;

/// The bundled sample dataset (see `fixtures/datasets/README.md`), compiled in so the default
/// needs no file.
static SAMPLE: &[u8] = include_bytes!("../../../fixtures/datasets/sample.jsonl.zst");

/// Where sessions come from. On disk: `"sample"`, `{"path": "…"}` or `{"random": {…}}`.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum DatasetSpec {
    /// The bundled sample dataset.
    Sample,
    /// A native trace file or directory.
    Path(PathBuf),
    /// Synthetic sessions.
    Random(SyntheticSpec),
    /// Synthetic agent graphs (`--dataset agentic`).
    Agentic(crate::agentic::AgenticSpec),
}

/// Knobs of `--dataset random` (named as in agentic-bench).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct SyntheticSpec {
    /// Turns per session (`--turns`).
    pub turns: u32,
    /// New user tokens per turn (`--input-increment`).
    pub input_increment: u32,
    /// Output tokens per turn (`--output-len`).
    pub output_len: u32,
    /// Tool wait before each turn after the first (`--gap-policy`).
    pub gap: GapPolicy,
}

impl Default for SyntheticSpec {
    fn default() -> Self {
        SyntheticSpec {
            turns: 10,
            input_increment: 512,
            output_len: 128,
            gap: GapPolicy::Zero,
        }
    }
}

/// Distribution of synthetic tool waits.
#[derive(Debug, Clone, Copy, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum GapPolicy {
    /// No wait.
    Zero,
    /// Always this many ms.
    Fixed(f64),
    /// Uniform between two ms values.
    Uniform(f64, f64),
    /// Exponential with this mean in ms.
    Exponential(f64),
}

fn positive_ms(s: &str, what: &str) -> Result<f64, String> {
    let v: f64 = s
        .trim()
        .parse()
        .map_err(|_| format!("{what} must be a number of ms, got {s:?}"))?;
    if !v.is_finite() || v < 0.0 {
        return Err(format!(
            "{what} must be a non-negative number of ms, got {s:?}"
        ));
    }
    Ok(v)
}

impl std::str::FromStr for GapPolicy {
    type Err = String;

    /// `zero`, `fixed:MS`, `uniform:LO,HI`, `exponential:MEAN`.
    fn from_str(s: &str) -> Result<Self, String> {
        let (kind, arg) = s.split_once(':').unwrap_or((s, ""));
        match kind {
            "zero" if arg.is_empty() => Ok(GapPolicy::Zero),
            "fixed" => Ok(GapPolicy::Fixed(positive_ms(arg, "fixed:MS")?)),
            "uniform" => {
                let (lo, hi) = arg
                    .split_once(',')
                    .ok_or_else(|| format!("uniform needs LO,HI in ms, got {s:?}"))?;
                let (lo, hi) = (positive_ms(lo, "LO")?, positive_ms(hi, "HI")?);
                if lo > hi {
                    return Err(format!("uniform:LO,HI needs LO <= HI, got {s:?}"));
                }
                Ok(GapPolicy::Uniform(lo, hi))
            }
            "exponential" => {
                let m = positive_ms(arg, "exponential:MEAN")?;
                if m == 0.0 {
                    return Err("exponential:MEAN must be above 0 (use zero)".into());
                }
                Ok(GapPolicy::Exponential(m))
            }
            _ => Err(format!(
                "unknown gap policy {s:?}: use zero, fixed:MS, uniform:LO,HI or exponential:MEAN"
            )),
        }
    }
}

impl GapPolicy {
    fn sample(self, rng: &mut ChaCha8Rng) -> f64 {
        match self {
            GapPolicy::Zero => 0.0,
            GapPolicy::Fixed(ms) => ms,
            GapPolicy::Uniform(lo, hi) => {
                if hi > lo {
                    rng.random_range(lo..=hi)
                } else {
                    lo
                }
            }
            GapPolicy::Exponential(mean) => {
                let u: f64 = rng.random_range(f64::EPSILON..1.0);
                -mean * u.ln()
            }
        }
    }
}

/// How many output tokens each turn is pinned to.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(tag = "policy", rename_all = "lowercase")]
pub enum OutputPolicy {
    /// What the recording produced (the recorded count, else the assistant text counted).
    Trace,
    /// Always `K` tokens.
    Fixed {
        /// Tokens per turn.
        tokens: u32,
    },
    /// `T` tokens per session, split evenly over its turns.
    Budget {
        /// Tokens per session.
        tokens: u64,
    },
}

impl std::str::FromStr for OutputPolicy {
    type Err = String;

    /// `trace`, `fixed:K`, `budget:T`.
    fn from_str(s: &str) -> Result<Self, String> {
        let (kind, arg) = s.split_once(':').unwrap_or((s, ""));
        let n = |what: &str| -> Result<u64, String> {
            let v: u64 = arg
                .trim()
                .parse()
                .map_err(|_| format!("{what} needs a positive whole number, got {s:?}"))?;
            if v == 0 {
                return Err(format!("{what} must be at least 1, got {s:?}"));
            }
            Ok(v)
        };
        match kind {
            "trace" if arg.is_empty() => Ok(OutputPolicy::Trace),
            "fixed" => Ok(OutputPolicy::Fixed {
                tokens: u32::try_from(n("fixed:K")?)
                    .map_err(|_| "fixed:K is too large".to_string())?,
            }),
            "budget" => Ok(OutputPolicy::Budget {
                tokens: n("budget:T")?,
            }),
            _ => Err(format!(
                "unknown output policy {s:?}: use trace, fixed:K or budget:T"
            )),
        }
    }
}

/// Everything that decides a plan. Build with [`PlanConfig::new`] and set what differs.
/// Serializable (a run's `run.json` records it); missing fields take [`PlanConfig::default`]'s
/// values.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct PlanConfig {
    /// Where sessions come from.
    pub dataset: DatasetSpec,
    /// Token counter.
    pub tokenizer: TokenizerSpec,
    /// Keep sessions with at least this many turns (after nothing is cut).
    pub min_turns: Option<u32>,
    /// Cut sessions to this many turns (never pads).
    pub max_turns: Option<u32>,
    /// Lower bound of the peak-context band, tokens.
    pub min_context: Option<u64>,
    /// The model's window: sessions whose peak context (with the shared system prompt and
    /// pinned output) exceeds it are left out.
    pub max_context: Option<u64>,
    /// Sessions in the pool; default 2 × `concurrency`.
    pub num_sessions: Option<u32>,
    /// Concurrency the plan is for (sets the default pool size).
    pub concurrency: u32,
    /// Seed of the shuffle and of synthetic text and gaps.
    pub seed: u64,
    /// Output pinning.
    pub output: Option<OutputPolicy>,
    /// Shared system prompt length in tokens (0: none).
    pub system_prompt_tokens: Option<u32>,
    /// Tool waits longer than this are capped, ms.
    pub gap_cap_ms: f64,
    /// Take recorded gaps as pure tool waits (skip the recording-rate extraction).
    pub raw_gaps: bool,
    /// Skip invalid trace records instead of failing.
    pub skip_invalid: bool,
    /// The longest trace line read, in bytes ([`load::DEFAULT_MAX_LINE_BYTES`] by default):
    /// a longer one is an invalid record, read no further than the cap.
    #[serde(skip_serializing_if = "is_default_line_cap")]
    pub max_trace_line_bytes: u64,
    /// How recorded tool calls and tool results are sent.
    #[serde(skip_serializing_if = "ToolMessages::is_coerce")]
    pub tool_messages: ToolMessages,
    /// Called as planning advances (long plans take a while with a real tokenizer).
    #[serde(skip)]
    pub progress: Option<ProgressFn>,
}

/// How a trace's tool calls and tool results reach the server.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum ToolMessages {
    /// As text: tool results are user messages, assistant tool calls are dropped (the answer's
    /// text stays). Every chat template accepts it.
    #[default]
    Coerce,
    /// As recorded: assistant messages carry their `tool_calls` (with ids), tool results are
    /// `role: tool` with their `tool_call_id`, and the session's `tools` definitions go with
    /// every request, so the chat template and the prefix cache see what the agent sent.
    Faithful,
}

fn is_default_line_cap(n: &u64) -> bool {
    *n == load::DEFAULT_MAX_LINE_BYTES
}

impl ToolMessages {
    fn is_coerce(&self) -> bool {
        *self == ToolMessages::Coerce
    }
}

impl Default for PlanConfig {
    /// The bundled sample with every default.
    fn default() -> Self {
        PlanConfig::new(DatasetSpec::Sample)
    }
}

/// Where planning is.
#[derive(Debug, Clone, Copy, PartialEq)]
#[non_exhaustive]
pub enum PlanProgress {
    /// Sessions read so far (reported every 1,000).
    Reading {
        /// Sessions read.
        sessions: u64,
    },
    /// Counting tokens: bytes of distinct text counted so far, of the total.
    Counting {
        /// Distinct texts.
        texts: u64,
        /// Bytes counted.
        done_bytes: u64,
        /// Bytes to count.
        total_bytes: u64,
    },
    /// Selection and encoding.
    Shaping,
    /// A plan starts (its clock starts here: one callback may see several plans, one per
    /// point of a sweep).
    Started,
}

/// A progress callback.
#[derive(Clone)]
pub struct ProgressFn(pub Arc<dyn Fn(PlanProgress) + Send + Sync>);

impl ProgressFn {
    /// A callback that hands `line` a description of where planning is, at most once every
    /// `period` and not before `period` has passed (short plans say nothing), e.g. `counting
    /// tokens of 120 distinct texts: 45% of 12.3 MB (4 s)`.
    pub fn lines_every(
        period: std::time::Duration,
        line: impl Fn(String) + Send + Sync + 'static,
    ) -> ProgressFn {
        let now = std::time::Instant::now();
        // (When the plan started, when a line was last printed.)
        let clock = std::sync::Mutex::new((now, now));
        ProgressFn(Arc::new(move |p: PlanProgress| {
            let now = std::time::Instant::now();
            let Ok(mut clock) = clock.lock() else { return };
            if p == PlanProgress::Started {
                *clock = (now, now);
                return;
            }
            let (start, last) = *clock;
            if now.duration_since(start) < period || now.duration_since(last) < period {
                return;
            }
            clock.1 = now;
            let t = now.duration_since(start).as_secs_f64();
            line(match p {
                PlanProgress::Reading { sessions } => {
                    format!("{sessions} sessions read ({t:.0} s)")
                }
                PlanProgress::Counting {
                    texts,
                    done_bytes,
                    total_bytes,
                } => format!(
                    "counting tokens of {texts} distinct texts: {:.0}% of {:.1} MB ({t:.0} s)",
                    done_bytes as f64 * 100.0 / total_bytes.max(1) as f64,
                    total_bytes as f64 / 1e6
                ),
                PlanProgress::Shaping | PlanProgress::Started => {
                    format!("selecting and encoding ({t:.0} s)")
                }
            })
        }))
    }
}

/// Two callbacks are equal when they are the same one.
impl PartialEq for ProgressFn {
    fn eq(&self, other: &Self) -> bool {
        Arc::ptr_eq(&self.0, &other.0)
    }
}

impl std::fmt::Debug for ProgressFn {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("ProgressFn")
    }
}

impl PlanConfig {
    /// Defaults: the bundled sample, the Qwen3 tokenizer, C = 32, seed 0, no shared system
    /// prompt, output as recorded, gaps capped at 30 s.
    pub fn new(dataset: DatasetSpec) -> Self {
        PlanConfig {
            dataset,
            tokenizer: TokenizerSpec::Qwen3,
            min_turns: None,
            max_turns: None,
            min_context: None,
            max_context: None,
            num_sessions: None,
            concurrency: 32,
            seed: 0,
            output: None,
            system_prompt_tokens: None,
            gap_cap_ms: 30_000.0,
            raw_gaps: false,
            skip_invalid: false,
            max_trace_line_bytes: load::DEFAULT_MAX_LINE_BYTES,
            tool_messages: ToolMessages::Coerce,
            progress: None,
        }
    }

    fn apply_manifest(&mut self, m: &Manifest) -> Result<(), PlanError> {
        self.min_turns = self.min_turns.or(m.min_turns);
        self.max_turns = self.max_turns.or(m.max_turns);
        self.min_context = self.min_context.or(m.min_context).or(m.band.map(|b| b[0]));
        self.max_context = self.max_context.or(m.max_context).or(m.band.map(|b| b[1]));
        self.system_prompt_tokens = self.system_prompt_tokens.or(m.system_prompt_tokens);
        if self.output.is_none() {
            if let Some(p) = &m.output_policy {
                self.output = Some(
                    p.parse()
                        .map_err(|e: String| PlanError::flag("manifest.json output_policy", e))?,
                );
            }
        }
        Ok(())
    }

    /// Rejects invalid values and combinations, naming the flag.
    pub fn validate(&self) -> Result<(), PlanError> {
        if self.max_trace_line_bytes == 0 {
            return Err(PlanError::flag(
                "--max-trace-line",
                "must be at least 1 byte",
            ));
        }
        if self.concurrency == 0 {
            return Err(PlanError::flag("--concurrency", "must be at least 1"));
        }
        if self.num_sessions == Some(0) {
            return Err(PlanError::flag("--num-sessions", "must be at least 1"));
        }
        if self.min_turns == Some(0) {
            return Err(PlanError::flag("--min-turns", "must be at least 1"));
        }
        if self.max_turns == Some(0) {
            return Err(PlanError::flag("--max-turns", "must be at least 1"));
        }
        if let (Some(lo), Some(hi)) = (self.min_turns, self.max_turns) {
            if lo > hi {
                return Err(PlanError::flag(
                    "--min-turns",
                    format!("{lo} is above --max-turns {hi}"),
                ));
            }
        }
        if self.max_context == Some(0) {
            return Err(PlanError::flag("--max-context", "must be at least 1"));
        }
        if let (Some(lo), Some(hi)) = (self.min_context, self.max_context) {
            if lo > hi {
                return Err(PlanError::flag(
                    "--min-context",
                    format!("{lo} is above --max-context {hi}"),
                ));
            }
        }
        if let (Some(sp), Some(hi)) = (self.system_prompt_tokens, self.max_context) {
            if u64::from(sp) >= hi {
                return Err(PlanError::flag(
                    "--system-prompt-tokens",
                    format!("{sp} leaves no room in --max-context {hi}"),
                ));
            }
        }
        if !self.gap_cap_ms.is_finite() || self.gap_cap_ms < 0.0 {
            return Err(PlanError::flag(
                "--gap-cap-ms",
                format!("must be a non-negative number, got {}", self.gap_cap_ms),
            ));
        }
        if let DatasetSpec::Agentic(a) = &self.dataset {
            a.validate().map_err(|e| PlanError::flag("--agentic", e))?;
        }
        if let DatasetSpec::Random(s) = &self.dataset {
            for (v, f) in [
                (s.turns, "--turns"),
                (s.input_increment, "--input-increment"),
                (s.output_len, "--output-len"),
            ] {
                if v == 0 {
                    return Err(PlanError::flag(f, "must be at least 1"));
                }
            }
        }
        if let Some(OutputPolicy::Budget { tokens }) = self.output {
            if let Some(max) = self.max_turns {
                if tokens < u64::from(max) {
                    return Err(PlanError::flag(
                        "--output-policy",
                        format!(
                            "budget:{tokens} is less than one token per turn for --max-turns {max}"
                        ),
                    ));
                }
            }
        }
        Ok(())
    }
}

/// A chat role after coercion (roles other than system/user/assistant are sent as user).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize)]
#[serde(rename_all = "lowercase")]
pub enum Role {
    /// System.
    System,
    /// User (and coerced tool observations).
    User,
    /// Assistant.
    Assistant,
    /// A tool result, sent as recorded (`ToolMessages::Faithful` only).
    Tool,
}

impl Role {
    fn coerce(recorded: &str, tools: ToolMessages) -> (Role, bool) {
        match recorded {
            "system" => (Role::System, false),
            "user" => (Role::User, false),
            "assistant" => (Role::Assistant, false),
            "tool" if tools == ToolMessages::Faithful => (Role::Tool, false),
            _ => (Role::User, true),
        }
    }

    /// The role name as sent.
    pub fn as_str(self) -> &'static str {
        match self {
            Role::System => "system",
            Role::User => "user",
            Role::Assistant => "assistant",
            Role::Tool => "tool",
        }
    }
}

/// One message of a plan, shared (not copied) by every session and turn that sends it.
///
/// Only the JSON encoding of the text is kept (made once at plan time, shared by every role the
/// text is sent under): a request body is a concatenation of [`PlannedMessage::json_prefix`],
/// [`PlannedMessage::content_json`] and `}`. Keeping one copy of every text is what keeps
/// planning memory near the size of the trace.
#[derive(Debug, PartialEq, Eq)]
pub struct PlannedMessage {
    /// Role as sent.
    pub role: Role,
    /// The text as a JSON string literal, quotes included.
    pub content_json: Arc<str>,
    /// Tokens of the text under the plan's counter.
    pub tokens: u32,
    /// More members written after `content` (`,"tool_calls":[…]` or `,"tool_call_id":"…"`:
    /// `ToolMessages::Faithful`), already JSON.
    pub extra_json: Option<Arc<str>>,
}

impl PlannedMessage {
    /// `{"role":"<role>","content":` — the constant start of this message's JSON.
    pub fn json_prefix(&self) -> &'static str {
        match self.role {
            Role::System => "{\"role\":\"system\",\"content\":",
            Role::User => "{\"role\":\"user\",\"content\":",
            Role::Assistant => "{\"role\":\"assistant\",\"content\":",
            Role::Tool => "{\"role\":\"tool\",\"content\":",
        }
    }

    /// What follows the content: the extra members, if any.
    pub fn json_extra(&self) -> &str {
        self.extra_json.as_deref().unwrap_or("")
    }

    /// The length in bytes of the message's JSON object (what [`Self::write_json`] appends).
    pub fn json_len(&self) -> usize {
        self.json_prefix().len() + self.content_json.len() + self.json_extra().len() + 1
    }

    /// Appends the message's JSON object to `out`.
    pub fn write_json(&self, out: &mut String) {
        out.push_str(self.json_prefix());
        out.push_str(&self.content_json);
        out.push_str(self.json_extra());
        out.push('}');
    }

    /// The message's JSON object.
    pub fn json(&self) -> String {
        let mut s = String::with_capacity(self.content_json.len() + 40);
        self.write_json(&mut s);
        s
    }

    /// The text (decoded from its JSON; for reports and tests, not the hot path).
    pub fn content(&self) -> String {
        serde_json::from_str(&self.content_json).unwrap_or_default()
    }
}

/// A shared message handle.
pub type Msg = Arc<PlannedMessage>;

/// One turn of a planned session.
#[derive(Debug, Clone, PartialEq)]
pub struct PlannedTurn {
    /// Position in the session.
    pub index: u32,
    /// Messages appended before this turn.
    pub input_delta: Vec<Msg>,
    /// The recorded answer (appended after the turn in `trace` content mode).
    pub assistant: Msg,
    /// Output tokens the request is pinned to.
    pub max_output_tokens: u32,
    /// Output tokens the recording produced, when known.
    pub recorded_output_tokens: Option<u64>,
    /// Input tokens the recording server reported, when known.
    pub recorded_input_tokens: Option<u64>,
    /// Prefix-cache hits the recording server reported, when known.
    pub recorded_cached_tokens: Option<u64>,
    /// Tool wait before this turn, ms (extracted and capped; 0 for the first turn).
    pub pre_gap_ms: f64,
    /// Estimated prompt tokens of this turn's request (system prompt, every earlier message and
    /// answer, this delta, plus [`MESSAGE_OVERHEAD_TOKENS`] per message).
    pub est_prompt_tokens: u64,
    /// When the recorded request was sent, ms from the trace start (timed traces).
    pub timestamp_ms: Option<f64>,
}

/// One planned session.
#[derive(Debug, Clone, PartialEq)]
pub struct PlannedSession {
    /// Session id from the trace.
    pub id: Arc<str>,
    /// Its own system message (shared prompt and the session's prompt), if any.
    pub system: Option<Msg>,
    /// Turns in order.
    pub turns: Vec<PlannedTurn>,
    /// Prompt plus pinned output at the last turn.
    pub peak_context: u64,
    /// Recording model (for reports).
    pub model: Option<String>,
    /// The recorded `tools` definitions as JSON (`ToolMessages::Faithful` only), sent with
    /// every request of the session.
    pub tools: Option<Arc<str>>,
    /// Agent graphs: the branches and joins (`None`: one chain of turns). `turns` then holds
    /// every node, in node order: the main branch's, then each subagent's.
    pub graph: Option<Box<PlannedGraph>>,
}

/// The graph of a session that forks subagents (see [`crate::graph`]).
#[derive(Debug, Clone, PartialEq)]
pub struct PlannedGraph {
    /// Branch 0 is the main conversation, then the subagents.
    pub branches: Vec<PlannedBranch>,
    /// Per node: the joins it waits for (node numbers) besides its branch predecessor or fork
    /// node. A join node's first `joins.len()` messages are those nodes' answers (recorded
    /// ones in the plan; a run in `model` content mode sends the live ones).
    pub joins: Vec<Vec<u32>>,
    /// Per node: its branch.
    pub branch_of: Vec<u32>,
    /// Per node: whether a subagent forks from it (its conversation is kept for the child).
    pub forks: Vec<bool>,
    /// Figures for `bench plan`.
    pub stats: GraphStats,
}

/// One conversation of an agent graph.
#[derive(Debug, Clone, PartialEq)]
pub struct PlannedBranch {
    /// `main` or the subagent's id.
    pub agent: Arc<str>,
    /// The node it forks from (`None` for main).
    pub fork: Option<u32>,
    /// Where its conversation starts.
    pub context: crate::format::SubagentContext,
    /// A `fresh` branch's system message (the shared prompt and its own).
    pub system: Option<Msg>,
    /// Nesting depth (0 for main).
    pub depth: u32,
    /// Its first node.
    pub first: u32,
    /// Its number of nodes.
    pub len: u32,
}

impl PlannedGraph {
    /// Node `n`'s predecessor in its branch (or, first in a subagent, its fork node).
    pub fn pred(&self, n: u32) -> Option<u32> {
        let b = &self.branches[self.branch_of[n as usize] as usize];
        if n > b.first { Some(n - 1) } else { b.fork }
    }
    /// Every node `n` waits for.
    pub fn deps(&self, n: u32) -> impl Iterator<Item = u32> + '_ {
        self.pred(n)
            .into_iter()
            .chain(self.joins[n as usize].iter().copied())
    }
}

/// The shape of one agent graph.
#[derive(Debug, Clone, Copy, Default, PartialEq, Serialize)]
pub struct GraphStats {
    /// Subagents.
    pub subagents: u32,
    /// The most subagents forked from one node.
    pub max_fan_out: u32,
    /// The deepest nesting (1: subagents of main).
    pub depth: u32,
    /// The most requests in flight at once with every wait at zero and each request taking
    /// time in proportion to its pinned output.
    pub max_parallel: u32,
    /// Pinned output tokens along the longest path (by output tokens).
    pub critical_path_output_tokens: u64,
    /// Estimated wall time played as one chain: Σ output ÷ [`EST_STREAM_TOKS`] + Σ waits, s.
    pub est_serial_s: f64,
    /// Estimated wall time with the graph's parallelism: the longest path of output ÷
    /// [`EST_STREAM_TOKS`] + waits, s.
    pub est_parallel_s: f64,
}

/// The per-request decode rate the graph estimates assume, output tokens/s.
pub const EST_STREAM_TOKS: f64 = 50.0;

/// The shared system prompt.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct SystemPromptInfo {
    /// Tokens asked for.
    pub target_tokens: u32,
    /// Tokens the prompt measures under the plan's counter.
    pub actual_tokens: u32,
    /// The text.
    #[serde(skip)]
    pub text: Arc<str>,
}

/// A validated plan: the sessions a runner plays, with everything precomputed.
#[derive(Debug, Clone)]
pub struct Plan {
    /// The sessions of the pool, shuffled.
    pub sessions: Vec<PlannedSession>,
    /// The shared system prompt, if any.
    pub system_prompt: Option<SystemPromptInfo>,
    /// What counted tokens.
    pub tokenizer: String,
    /// The resolved configuration, for the record.
    pub seed: u64,
    /// Summary figures.
    pub summary: PlanSummary,
}

/// Distribution summary.
#[derive(Debug, Clone, Copy, Default, PartialEq, Serialize, Deserialize)]
pub struct Dist {
    /// Smallest.
    pub min: f64,
    /// Median.
    pub p50: f64,
    /// 90th percentile.
    pub p90: f64,
    /// Largest.
    pub max: f64,
}

/// Linear-interpolation percentile of sorted values (`q` in 0..=1).
pub fn percentile(sorted: &[f64], q: f64) -> f64 {
    if sorted.is_empty() {
        return f64::NAN;
    }
    let h = (sorted.len() - 1) as f64 * q.clamp(0.0, 1.0);
    let lo = h.floor() as usize;
    let hi = (lo + 1).min(sorted.len() - 1);
    sorted[lo] + (h - lo as f64) * (sorted[hi] - sorted[lo])
}

impl Dist {
    fn of(mut v: Vec<f64>) -> Option<Dist> {
        if v.is_empty() {
            return None;
        }
        v.sort_by(f64::total_cmp);
        Some(Dist {
            min: v[0],
            p50: percentile(&v, 0.5),
            p90: percentile(&v, 0.9),
            max: v[v.len() - 1],
        })
    }
}

/// What `bench plan` prints. Keys are stable.
#[derive(Debug, Clone, Default, Serialize, Deserialize)]
#[serde(default)]
pub struct PlanSummary {
    /// Where sessions came from.
    pub dataset: String,
    /// Sessions in the pool.
    pub sessions: u64,
    /// Turns in the pool.
    pub turns: u64,
    /// Σ estimated prompt tokens over every turn (what the server will prefill or find cached).
    pub input_tokens: u64,
    /// Σ tokens of the new messages only (the input deltas).
    pub new_input_tokens: u64,
    /// Σ pinned output tokens.
    pub output_tokens: u64,
    /// Σ recorded input tokens, when every turn has them.
    pub recorded_input_tokens: Option<u64>,
    /// Σ recorded output tokens, when every turn has them.
    pub recorded_output_tokens: Option<u64>,
    /// Σ recorded prefix-cache hits, when every turn has them.
    pub recorded_cached_tokens: Option<u64>,
    /// Tokens of the shared system prompt (0 when none).
    pub system_prompt_tokens: u32,
    /// Target and measured length of the shared system prompt.
    pub system_prompt: Option<SystemPromptInfo>,
    /// What counted tokens (`hf:qwen3`, `hf:<path>`, `chars/4`).
    pub tokenizer: String,
    /// Peak context of the sessions, tokens.
    pub peak_context: Option<Dist>,
    /// Turns per session.
    pub turns_per_session: Option<Dist>,
    /// Σ tool waits, seconds.
    pub total_tool_wait_s: f64,
    /// Tool waits cut to the cap.
    pub capped_gaps: u64,
    /// How tool waits were derived (`synthetic`, `extracted`, `raw`).
    pub gap_source: String,
    /// Output policy.
    pub output_policy: Option<OutputPolicy>,
    /// Sessions read from the dataset.
    pub sessions_read: u64,
    /// Invalid records skipped.
    pub skipped_invalid: u64,
    /// Sessions left out: too few turns.
    pub excluded_min_turns: u64,
    /// Sessions left out: no turns at all.
    pub excluded_empty: u64,
    /// Sessions left out: peak context outside the band.
    pub excluded_context_band: u64,
    /// Messages whose recorded role was sent as `user`.
    pub coerced_roles: u64,
    /// Estimated wall time at 250, 1,000 and 4,000 output tok/s: Σ output tokens ÷ rate
    /// (tool waits overlap across sessions and are not added).
    pub est_wall_time_s: HashMap<String, f64>,
    /// Agent graphs in the pool (absent when every session is one chain).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub graph: Option<GraphSummary>,
    /// Facts worth telling (e.g. fewer eligible sessions than asked).
    pub notes: Vec<String>,
}

impl PlanSummary {
    /// The human-readable summary `bench plan` prints: a headline, then one aligned line per
    /// figure (sessions, turns, tokens, system prompt, peak context, tool waits, estimated wall
    /// time) and one per note, each ending in a newline. Large counts are shortened (`12.3K`,
    /// `1.54M`, `2.00G`); a recorded sum that is not known is `n/a`.
    pub fn text(&self) -> String {
        let s = self;
        let mut t = String::new();
        let opt = |v: Option<u64>| v.map_or("n/a".to_string(), |v| human(v as f64));
        t.push_str(&format!(
            "bench plan: {} · tokenizer {}\n",
            s.dataset, s.tokenizer
        ));
        t.push_str(&format!(
            "  sessions        {} (of {} read; left out: {} empty, {} too few turns, {} outside the context band{})\n",
            s.sessions,
            s.sessions_read,
            s.excluded_empty,
            s.excluded_min_turns,
            s.excluded_context_band,
            if s.skipped_invalid > 0 {
                format!(", {} invalid skipped", s.skipped_invalid)
            } else {
                String::new()
            }
        ));
        if let Some(d) = s.turns_per_session {
            t.push_str(&format!(
                "  turns           {} (per session: min {} · p50 {} · p90 {} · max {})\n",
                s.turns,
                human(d.min),
                human(d.p50),
                human(d.p90),
                human(d.max)
            ));
        }
        t.push_str(&format!(
            "  input tokens    {} sent in all prompts ({} new)\n",
            human(s.input_tokens as f64),
            human(s.new_input_tokens as f64)
        ));
        t.push_str(&format!(
            "  output tokens   {} pinned\n",
            human(s.output_tokens as f64)
        ));
        t.push_str(&format!(
            "  recorded        input {} · output {} · cached {}\n",
            opt(s.recorded_input_tokens),
            opt(s.recorded_output_tokens),
            opt(s.recorded_cached_tokens)
        ));
        if let Some(sp) = &s.system_prompt {
            t.push_str(&format!(
                "  system prompt   {} tokens asked, {} measured\n",
                sp.target_tokens, sp.actual_tokens
            ));
        }
        if let Some(d) = s.peak_context {
            t.push_str(&format!(
                "  peak context    min {} · p50 {} · p90 {} · max {}\n",
                human(d.min),
                human(d.p50),
                human(d.p90),
                human(d.max)
            ));
        }
        t.push_str(&format!(
            "  tool waits      {:.0} s in total ({}; {} capped)\n",
            s.total_tool_wait_s, s.gap_source, s.capped_gaps
        ));
        let w = |k: &str| s.est_wall_time_s.get(k).copied().unwrap_or(0.0);
        t.push_str(&format!(
            "  est. wall time  {:.0} s at 250 output tok/s · {:.0} s at 1,000 · {:.0} s at 4,000\n",
            w("250"),
            w("1000"),
            w("4000")
        ));
        if let Some(g) = &s.graph {
            t.push_str(&format!(
                "  agent graphs    {} sessions fork {} subagents · fan-out p50 {} max {} · depth max {}\n",
                g.graph_sessions,
                g.subagents,
                human(g.fan_out.p50),
                human(g.fan_out.max),
                human(g.depth.max)
            ));
            t.push_str(&format!(
                "                  parallel requests per session p50 {} max {} · critical path p50 {} output tokens\n",
                human(g.max_parallel.p50),
                human(g.max_parallel.max),
                human(g.critical_path_output_tokens.p50)
            ));
            t.push_str(&format!(
                "                  est. session wall time p50 {:.1} s with its parallelism, {:.1} s as one chain (at {} tok/s a request)\n",
                g.est_parallel_s.p50, g.est_serial_s.p50, EST_STREAM_TOKS
            ));
        }
        for n in &s.notes {
            t.push_str(&format!("  note: {n}\n"));
        }
        t
    }
}

/// What `bench plan` reports of a pool's agent graphs.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[serde(default)]
pub struct GraphSummary {
    /// Sessions that fork subagents or join.
    pub graph_sessions: u64,
    /// Their subagents in all.
    pub subagents: u64,
    /// Per graph session: the most subagents forked from one node.
    pub fan_out: Dist,
    /// Per graph session: the deepest nesting.
    pub depth: Dist,
    /// Per graph session: the most requests in flight at once ([`GraphStats::max_parallel`]).
    pub max_parallel: Dist,
    /// Per graph session: pinned output tokens on the longest path.
    pub critical_path_output_tokens: Dist,
    /// Per graph session: estimated wall time played as one chain, s.
    pub est_serial_s: Dist,
    /// Per graph session: estimated wall time with the graph's parallelism, s.
    pub est_parallel_s: Dist,
}

/// A count for people: `12345` → `12.3K`, `1.54M`, `2.00G`; below 10,000 it is written whole.
fn human(n: f64) -> String {
    let a = n.abs();
    if a >= 1e9 {
        format!("{:.2}G", n / 1e9)
    } else if a >= 1e6 {
        format!("{:.2}M", n / 1e6)
    } else if a >= 1e4 {
        format!("{:.1}K", n / 1e3)
    } else {
        format!("{n:.0}")
    }
}

// ---------------------------------------------------------------------------------------------

/// Recording-rate table of agentic-bench 0.2.0 (Apache-2.0; `data/NOTICE`): output tok/s of
/// the model that recorded each trajectory, used to split recorded step intervals into
/// generation and tool wait.
static RECORDING_RATES: &str = include_str!("../data/recording_rates.json");

/// Output tokens/s by recording model, and the pooled fallback.
#[derive(Debug, Clone)]
pub struct RecordingRates {
    /// Per model.
    pub by_model: HashMap<String, f64>,
    /// When neither the model nor the session gives a rate.
    pub pooled: f64,
}

impl RecordingRates {
    /// The bundled table.
    pub fn bundled() -> RecordingRates {
        let v: serde_json::Value = serde_json::from_str(RECORDING_RATES).unwrap_or_default();
        let mut by_model = HashMap::new();
        let mut pooled = 140.0;
        if let Some(o) = v.as_object() {
            for (k, v) in o {
                match (k.as_str(), v.as_f64()) {
                    ("_pooled", Some(r)) => pooled = r,
                    (k, Some(r)) if !k.starts_with('_') && r > 0.0 => {
                        by_model.insert(k.to_string(), r);
                    }
                    _ => {}
                }
            }
        }
        RecordingRates { by_model, pooled }
    }
}

/// Tool waits of one session from its recorded step intervals: each interval (previous
/// request → this request) minus the previous turn's generation time at the recording rate
/// (model table, else the session's own 5th-percentile rate from ≥ 20 intervals, else
/// pooled), never below 0. The first turn's wait is 0.
pub fn extract_tool_waits(
    intervals_ms: &[f64],
    prev_output_tokens: &[u64],
    model: Option<&str>,
    rates: &RecordingRates,
) -> Vec<f64> {
    let rate = model
        .and_then(|m| rates.by_model.get(m).copied())
        .or_else(|| {
            let mut per_tok: Vec<f64> = intervals_ms
                .iter()
                .zip(prev_output_tokens)
                .skip(1)
                .filter(|(i, o)| **i > 0.0 && **o > 0)
                .map(|(i, o)| i / 1000.0 / *o as f64)
                .collect();
            if per_tok.len() >= 20 {
                per_tok.sort_by(f64::total_cmp);
                let p5 = percentile(&per_tok, 0.05);
                (p5 > 0.0).then(|| 1.0 / p5)
            } else {
                None
            }
        })
        .unwrap_or(rates.pooled);
    intervals_ms
        .iter()
        .zip(prev_output_tokens)
        .enumerate()
        .map(|(k, (i, o))| {
            if k == 0 {
                0.0
            } else {
                (i - *o as f64 / rate * 1000.0).max(0.0)
            }
        })
        .collect()
}

/// Seed of the filler after [`SYSTEM_HEAD`] (any fixed value: plans must not change with it).
const SYSTEM_FILLER_SEED: u64 = 0x5157_e3f1;

/// Tokens of the system prompt's opening sentence ([`SYSTEM_HEAD`]) under the embedded Qwen3
/// tokenizer, so that a plan with a system prompt does not load it (a test checks the figure).
pub const SYSTEM_HEAD_QWEN3_TOKENS: u32 = 62;

/// The opening sentence of every synthetic system prompt.
pub const SYSTEM_HEAD: &str = "You are an autonomous software engineering agent working in a \
    sandboxed repository. Read the task carefully, inspect the relevant files, run commands to \
    reproduce problems, and make minimal, well-tested changes. Explain each step briefly before \
    you act, prefer standard tools, never invent file contents, and stop when the tests pass.";

/// Builds a shared system prompt of exactly `target` tokens under `counter` (as close as the
/// tokenizer allows; the actual count is measured and recorded).
///
/// When filler words are single tokens under `counter` ([`TokenCounter::filler_is_exact`]),
/// the prompt is [`SYSTEM_HEAD`] followed by filler words (filler alone below the sentence's
/// length): its count is known by construction, and the embedded tokenizer is not loaded for
/// it (an 8K-token prompt used to cost a run the tokenizer's ~100 MB). Otherwise the sentence
/// is tiled and cut to the count.
pub fn system_prompt(counter: &TokenCounter, target: u32) -> SystemPromptInfo {
    if target == 0 {
        return SystemPromptInfo {
            target_tokens: 0,
            actual_tokens: 0,
            text: Arc::from(""),
        };
    }
    if counter.filler_is_exact() {
        let head = if counter.is_embedded() && !counter.is_loaded() {
            SYSTEM_HEAD_QWEN3_TOKENS
        } else {
            counter.count(SYSTEM_HEAD)
        };
        // The sentence ends in a full stop and each filler word starts with a space: the
        // pre-tokenizer splits between them, so the counts add.
        let (text, actual) = if target > head {
            let mut t = String::with_capacity(SYSTEM_HEAD.len() + (target - head) as usize * 6);
            t.push_str(SYSTEM_HEAD);
            t.push_str(&crate::text::filler(SYSTEM_FILLER_SEED, target - head));
            (t, target)
        } else {
            (crate::text::filler(SYSTEM_FILLER_SEED, target), target)
        };
        // A loaded tokenizer costs nothing more to ask: record what it counts.
        let actual = if counter.is_loaded() {
            counter.count(&text)
        } else {
            actual
        };
        return SystemPromptInfo {
            target_tokens: target,
            actual_tokens: actual,
            text: Arc::from(text),
        };
    }
    // The sentence tiled: a space between repetitions.
    let base = format!("{SYSTEM_HEAD} ");
    let text = if let Some(base_ids) = counter.encode(&base) {
        // Boundaries between repetitions can merge tokens: tile with room to spare.
        let reps = (target as usize).div_ceil(base_ids.len().max(2) - 1) + 2;
        let tiled = base.repeat(reps);
        let ids = counter.encode(&tiled).unwrap_or_default();
        let mut take = (target as usize).min(ids.len());
        let mut best = counter.decode(&ids[..take]).unwrap_or_default();
        // Decoding and re-encoding can merge or split at the cut: nudge until exact.
        for _ in 0..16 {
            let n = counter.count(&best) as usize;
            if n == target as usize {
                break;
            }
            take = if n > target as usize {
                take.saturating_sub(n - target as usize)
            } else {
                (take + (target as usize - n)).min(ids.len())
            };
            best = counter.decode(&ids[..take]).unwrap_or_default();
        }
        best
    } else {
        let chars = target as usize * 4;
        base.chars().cycle().take(chars).collect()
    };
    let actual = counter.count(&text);
    SystemPromptInfo {
        target_tokens: target,
        actual_tokens: actual,
        text: Arc::from(text),
    }
}

/// A system message: the shared prompt, the session's (or a fresh subagent's) own, or both.
fn system_message(
    shared: &Option<Arc<str>>,
    own: Option<&Arc<str>>,
    sp: &Option<SystemPromptInfo>,
    counter: &TokenCounter,
) -> Msg {
    let text: String = match (shared, own) {
        (Some(sh), Some(own)) => format!("{sh}\n\n{own}"),
        (Some(sh), None) => sh.to_string(),
        (None, Some(own)) => own.to_string(),
        (None, None) => String::new(),
    };
    // The shared prompt alone was counted when it was built.
    let tokens = match (sp, own) {
        (Some(sp), None) => sp.actual_tokens,
        _ => counter.count(&text),
    };
    Arc::new(PlannedMessage {
        role: Role::System,
        content_json: json_literal(&text),
        tokens,
        extra_json: None,
    })
}

/// The shape figures of one graph: fan-out, depth, parallelism, the longest path.
fn graph_stats(g: &PlannedGraph, turns: &[PlannedTurn], order: &[u32]) -> GraphStats {
    let mut fan: HashMap<u32, u32> = HashMap::new();
    for b in &g.branches {
        if let Some(f) = b.fork {
            *fan.entry(f).or_default() += 1;
        }
    }
    // Earliest start and end with zero waits, each request lasting its pinned output.
    let n = turns.len();
    let (mut start, mut end) = (vec![0u64; n], vec![0u64; n]);
    let (mut path_out, mut serial_wait) = (vec![0u64; n], 0.0);
    let mut path_s = vec![0f64; n];
    for &k in order {
        let k = k as usize;
        let out = u64::from(turns[k].max_output_tokens);
        let wait_s = turns[k].pre_gap_ms / 1000.0;
        serial_wait += wait_s;
        start[k] = g.deps(k as u32).map(|d| end[d as usize]).max().unwrap_or(0);
        end[k] = start[k] + out.max(1);
        path_out[k] = g
            .deps(k as u32)
            .map(|d| path_out[d as usize])
            .max()
            .unwrap_or(0)
            + out;
        path_s[k] = g
            .deps(k as u32)
            .map(|d| path_s[d as usize])
            .fold(0.0, f64::max)
            + wait_s
            + out as f64 / EST_STREAM_TOKS;
    }
    let mut edges: Vec<(u64, i32)> = (0..n).flat_map(|k| [(start[k], 1), (end[k], -1)]).collect();
    edges.sort_unstable_by_key(|&(t, d)| (t, d)); // an end before a start at the same time
    let (mut cur, mut max_parallel) = (0i32, 0i32);
    for (_, d) in edges {
        cur += d;
        max_parallel = max_parallel.max(cur);
    }
    let total_out: u64 = turns.iter().map(|t| u64::from(t.max_output_tokens)).sum();
    GraphStats {
        subagents: (g.branches.len() - 1) as u32,
        max_fan_out: fan.values().copied().max().unwrap_or(0),
        depth: g.branches.iter().map(|b| b.depth).max().unwrap_or(0),
        max_parallel: max_parallel.max(0) as u32,
        critical_path_output_tokens: path_out.iter().copied().max().unwrap_or(0),
        est_serial_s: total_out as f64 / EST_STREAM_TOKS + serial_wait,
        est_parallel_s: path_s.iter().copied().fold(0.0, f64::max),
    }
}

fn json_literal(content: &str) -> Arc<str> {
    // Serializing a str cannot fail.
    Arc::from(serde_json::to_string(content).unwrap_or_else(|_| "\"\"".into()))
}

/// Synthetic sessions of `--dataset random`.
///
/// Made one session at a time as planning takes them, so their text is held once.
fn synthetic_sessions(
    spec: &SyntheticSpec,
    n: u32,
    seed: u64,
    gap_cap_ms: f64,
) -> impl Iterator<Item = TraceSession> + '_ {
    let mut rng = ChaCha8Rng::seed_from_u64(seed ^ 0x5eed_5e55_1011);
    (0..n).map(move |s| {
        let turns = (0..spec.turns)
            .map(|t| {
                let base = (u64::from(s) << 32) | u64::from(t);
                let user = crate::text::filler(
                    seed ^ base.wrapping_mul(0x9e37_79b9),
                    spec.input_increment,
                );
                let answer =
                    crate::text::filler(seed ^ base.wrapping_mul(0x85eb_ca6b) ^ 1, spec.output_len);
                let mut rec = TraceTurn::new(
                    t,
                    vec![crate::format::Message {
                        role: "user".into(),
                        content: user,
                        tool_call_id: None,
                    }],
                    answer,
                );
                rec.output_tokens = Some(u64::from(spec.output_len));
                rec.pre_gap_ms = Some(if t == 0 {
                    0.0
                } else {
                    spec.gap.sample(&mut rng).min(gap_cap_ms)
                });
                rec
            })
            .collect();
        TraceSession {
            session_id: format!("random-{s}"),
            source: Some(crate::format::Source {
                dataset: Some("random".into()),
                ..Default::default()
            }),
            system_prompt: None,
            turns,
            tools: None,
            subagents: Vec::new(),
        }
    })
}

/// Loads, selects and shapes sessions into a [`Plan`].
pub fn build_plan(cfg: PlanConfig) -> Result<Plan, PlanError> {
    // Before the tokenizer loads (it takes a moment), so a bad flag fails at once;
    // build_plan_with checks again for callers that come to it directly.
    cfg.validate()?;
    let counter = TokenCounter::load(&cfg.tokenizer)?;
    build_plan_with(cfg, &counter)
}

/// [`build_plan`] with an already loaded counter (loading the tokenizer takes a moment).
pub fn build_plan_with(mut cfg: PlanConfig, counter: &TokenCounter) -> Result<Plan, PlanError> {
    cfg.validate()?;
    if let Some(p) = &cfg.progress {
        (p.0)(PlanProgress::Started);
    }
    let mut summary = PlanSummary {
        tokenizer: counter.name().to_string(),
        ..PlanSummary::default()
    };
    let is_synthetic = matches!(
        cfg.dataset,
        DatasetSpec::Random(_) | DatasetSpec::Agentic(_)
    );

    // 1. Read sessions, cut and filter by turns, intern their texts.
    let build::Candidates {
        interner,
        candidates,
        report,
    } = build::read_candidates(&mut cfg, counter, &mut summary)?;

    // 2. Count every distinct text once, in parallel (texts whose count is known by
    //    construction are not counted).
    let counted = build::count_texts(interner, counter, cfg.progress.as_ref());

    // 3. The shared system prompt.
    let sp = build::shared_system_prompt(&cfg, counter);
    let sp_tokens = sp.as_ref().map_or(0, |s| u64::from(s.actual_tokens));

    // 4. Output pinning, prompt estimates, the peak-context band.
    let policy = cfg.output.unwrap_or(OutputPolicy::Trace);
    let mut shaped = build::shape_sessions(
        candidates,
        &counted.counts,
        sp_tokens,
        policy,
        &cfg,
        &mut summary,
    )?;

    // 5. Seeded shuffle, then the pool size.
    build::shuffle_and_size_pool(&mut shaped, &cfg, is_synthetic, &mut summary);

    // 6. Tool waits.
    let waits = build::tool_waits(&cfg, is_synthetic, &mut summary);

    // 7. Messages, encoded once. Each text is replaced by its JSON literal as soon as it is
    //    encoded, so the plan never holds two copies of a text.
    let sessions = build::Encoder::new(counted, &sp, counter, &shaped).encode_sessions(
        shaped,
        &waits,
        cfg.gap_cap_ms,
        &mut summary,
    );

    // 8. The summary's figures and notes.
    build::finish_summary(&mut summary, &sessions, &sp, policy, &report);
    Ok(Plan {
        sessions,
        system_prompt: sp,
        tokenizer: counter.name().to_string(),
        seed: cfg.seed,
        summary,
    })
}
