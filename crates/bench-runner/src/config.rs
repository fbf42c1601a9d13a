//! Run settings and the request body built from them.

use std::time::Duration;

use bytes::Bytes;
use http::{HeaderName, HeaderValue};
use serde::{Deserialize, Serialize};

/// What joins the conversation after each turn.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum ContentMode {
    /// The recorded assistant text (reproducible across engines).
    #[default]
    Trace,
    /// What the server generated.
    Model,
}

/// Which request field carries the pinned output length (chat completions; the other APIs
/// have one field each).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum OutputCapField {
    /// `max_completion_tokens`, unless a check turn before the run shows that the server
    /// ignores it and honours `max_tokens` (bench-run checks servers it does not know to
    /// honour it; the engine sends `max_completion_tokens`).
    #[default]
    Auto,
    /// `max_completion_tokens` (the current OpenAI name), unchecked.
    MaxCompletionTokens,
    /// `max_tokens` (older servers).
    MaxTokens,
}

impl OutputCapField {
    /// The JSON key.
    pub fn key(self) -> &'static str {
        match self {
            OutputCapField::Auto | OutputCapField::MaxCompletionTokens => "max_completion_tokens",
            OutputCapField::MaxTokens => "max_tokens",
        }
    }
}

/// How responses are asked for.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum ResponseMode {
    /// A server-sent event stream (with `stream_options.include_usage`): TTFT and every gap
    /// between chunks are measured.
    #[default]
    Stream,
    /// One JSON response (`stream: false`): TTFT is the whole response time.
    Whole,
}

/// What happens to the tool waits a plan records between turns.
#[derive(Debug, Clone, Copy, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case", tag = "mode", deny_unknown_fields)]
pub enum ToolWaits {
    /// Wait: each planned wait times `scale`, capped at `cap`.
    Honour {
        /// Multiplies every wait.
        scale: f64,
        /// The longest wait.
        #[serde(with = "humantime_serde")]
        cap: Duration,
    },
    /// Send the next turn as soon as the last one ended.
    Skip,
    /// Every turn but a session's first waits exactly `wait`, whatever the plan recorded: the
    /// idle gap of a cache-retention sweep (`bench sweep --idle-gaps`).
    Fixed {
        /// The wait before each later turn.
        #[serde(with = "humantime_serde")]
        wait: Duration,
    },
}

impl Default for ToolWaits {
    /// Honoured as planned, capped at 30 s.
    fn default() -> Self {
        ToolWaits::Honour {
            scale: 1.0,
            cap: Duration::from_secs(30),
        }
    }
}

impl ToolWaits {
    /// The wait before a later turn whose plan says `planned_ms` (`None`: no wait).
    pub fn wait(self, planned_ms: f64) -> Option<Duration> {
        match self {
            ToolWaits::Honour { scale, cap } if planned_ms > 0.0 => {
                Some(Duration::from_secs_f64((planned_ms * scale / 1000.0).max(0.0)).min(cap))
            }
            ToolWaits::Fixed { wait } if !wait.is_zero() => Some(wait),
            _ => None,
        }
    }
}

/// Where a multi-turn Responses conversation is kept.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum ResponsesState {
    /// Every request resends the conversation as `input` items.
    #[default]
    Client,
    /// Later turns send only their new input with `previous_response_id`: the server keeps the
    /// conversation, so what joins it is what the model generated (as [`ContentMode::Model`]).
    /// A turn after a failed one resends the whole conversation.
    Server,
}

/// The inside of a JSON string literal (its quotes removed).
fn inner(lit: &str) -> &str {
    lit.strip_prefix('"')
        .and_then(|s| s.strip_suffix('"'))
        .unwrap_or(lit)
}

/// The system prompt a body starts with.
#[derive(Debug, Clone, Copy)]
pub enum System<'a> {
    /// None.
    None,
    /// The plan's shared system message (long ones are sent from the plan's copy).
    Shared(&'a bench_workload::plan::PlannedMessage),
    /// A session's own system text, as a JSON string literal (quotes included).
    Own(&'a str),
    /// The plan's shared system message with `marker` (JSON-escaped text, no quotes) at the
    /// end of its text: a cache-busting replay. The shared text is still sent from the plan's
    /// copy (50,000 replays of an 8K-token prompt would otherwise hold 50,000 copies of it).
    Marked(&'a bench_workload::plan::PlannedMessage, &'a str),
}

/// How much of a system message's JSON string literal a body takes.
#[derive(Clone, Copy)]
enum Cut {
    /// Without the closing quote (a marker follows inside the string).
    Open,
    /// Without either quote (inside another string).
    Inner,
}

/// `m`'s text cut by `cut`: its own piece (the plan's copy, shared) when long, else copied into
/// `b`. A piece ends `b` first.
fn push_system(
    b: &mut String,
    parts: &mut Vec<Bytes>,
    m: &bench_workload::plan::PlannedMessage,
    cut: Cut,
) {
    if crate::conv::is_long(m) {
        parts.push(Bytes::from(std::mem::take(b)));
        parts.push(match cut {
            Cut::Open => {
                let whole = crate::conv::shared(m);
                whole.slice(..whole.len().saturating_sub(1))
            }
            Cut::Inner => crate::conv::shared_inner(m),
        });
    } else {
        let lit = &*m.content_json;
        b.push_str(match cut {
            Cut::Open => lit.strip_suffix('"').unwrap_or(lit),
            Cut::Inner => inner(lit),
        });
    }
}

/// How sessions arrive in an open-loop run.
#[derive(Debug, Clone, Copy, PartialEq, Default, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum ArrivalProcess {
    /// Exponential gaps between session starts (a Poisson process).
    #[default]
    Poisson,
    /// Evenly spaced session starts.
    Constant,
    /// Gamma-distributed gaps with shape `burstiness` and the rate's mean (vLLM's
    /// `--burstiness`): 1 is Poisson, below 1 burstier, above 1 more even; the gaps'
    /// coefficient of variation is `1 / sqrt(burstiness)`.
    Gamma {
        /// The gamma shape, > 0.
        burstiness: f64,
    },
    /// Each session starts at its recorded offset: its first turn's `timestamp_ms` (from a
    /// timed trace: Mooncake, LMCache) less the earliest one, times `time_scale` (0.5 plays
    /// the trace twice as fast). Sessions start in that order; [`Arrival::rate`] is only
    /// reported (the trace's mean rate).
    Trace {
        /// Multiplies every recorded offset, > 0.
        time_scale: f64,
    },
}

/// Open loop: sessions start on a schedule of their own, whatever the server's speed.
#[derive(Debug, Clone, Copy, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Arrival {
    /// Session starts per second.
    pub rate: f64,
    /// Spacing of the starts.
    pub process: ArrivalProcess,
    /// Seed of the Poisson gaps (same seed, same schedule).
    pub seed: u64,
}

/// Retries of failed turns: none by default (a benchmark must not hide errors). With
/// `max > 0` a turn whose attempt failed in a way a retry can fix ([`Retry::retries`]) is sent
/// again after a wait: the server's `Retry-After` when it sent one, else `backoff` doubled per
/// attempt, at most `max_wait` either way. Every failed attempt stays in the turn's record
/// (`failed_attempts`) and in the run's per-attempt error counts.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct Retry {
    /// Attempts after the first (0: none).
    pub max: u32,
    /// The first wait; each later one doubles.
    #[serde(with = "humantime_serde")]
    pub backoff: Duration,
    /// The longest wait (also caps a server's `Retry-After`).
    #[serde(with = "humantime_serde")]
    pub max_wait: Duration,
}

impl Default for Retry {
    fn default() -> Self {
        Retry {
            max: 0,
            backoff: Duration::from_millis(500),
            max_wait: Duration::from_secs(30),
        }
    }
}

impl Retry {
    /// No retries (the default).
    pub fn is_off(&self) -> bool {
        self.max == 0
    }

    /// Whether a failure of this kind (and status) is worth another attempt: HTTP 408, 429,
    /// 500, 502, 503 and 504, no connection, a connection that broke (`io`), and a stream cut
    /// before its end. Not: timeouts (the turn already used its time), malformed answers (a
    /// server bug a retry hides), `response_too_large`, TLS, invalid requests, other statuses.
    pub fn retries(kind: bench_transport::ErrorKind, status: Option<u16>) -> bool {
        use bench_transport::ErrorKind as K;
        match kind {
            K::Status => matches!(status, Some(408 | 429 | 500 | 502 | 503 | 504)),
            K::Connect | K::Io | K::Incomplete => true,
            _ => false,
        }
    }

    /// The wait before attempt `next` (2 for the first retry), given the server's
    /// `Retry-After`.
    pub fn wait(&self, next: u32, retry_after: Option<Duration>) -> Duration {
        let backoff = self
            .backoff
            .saturating_mul(1u32 << next.saturating_sub(2).min(20));
        retry_after.unwrap_or(backoff).min(self.max_wait)
    }
}

/// What each request of a run looks like: a run spec's `request` table, and the engine's
/// ([`RunConfig::request`]). `model` and `max_model_len` are what was asked for; the engine
/// uses the resolved [`RunConfig::model`] and [`RunConfig::max_model_len`].
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct RequestShape {
    /// Model name; by default the first model `GET /v1/models` lists.
    pub model: Option<String>,
    /// The model's window for the context guard; by default `max_model_len` from
    /// `/v1/models` (llama.cpp: `meta.n_ctx`).
    pub max_model_len: Option<u64>,
    /// The field that carries the pinned output length.
    pub output_cap_field: OutputCapField,
    /// Send `ignore_eos: true` (output reaches the pinned length).
    pub ignore_eos: bool,
    /// Streamed or whole responses.
    pub response: ResponseMode,
    /// What joins the conversation after each turn.
    pub content_mode: ContentMode,
    /// Mark replays of recycled sessions so they cannot hit the cache their previous play
    /// warmed.
    pub cache_bust: bool,
    /// With `cache_bust`, mark every play of this run with this tag, first plays too, so that
    /// none hits the cache another run of the same plan warmed (a sweep tags each point).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub cache_bust_tag: Option<String>,
    /// Tool waits between turns.
    pub tool_waits: ToolWaits,
    /// JSON merged into every body last (a `null` removes a field).
    pub extra_body: serde_json::Map<String, serde_json::Value>,
    /// Send each session's id in this header (a routing key).
    pub routing_header: Option<String>,
    /// Response header naming the worker that served a turn.
    pub worker_header: Option<String>,
    /// The API every turn calls (`chat` by default).
    pub endpoint: bench_transport::Endpoint,
    /// Responses API: resend the conversation (`client`) or chain `previous_response_id`
    /// (`server`).
    pub responses_state: ResponsesState,
}

impl Default for RequestShape {
    /// Output pinned with `max_completion_tokens` (checked: [`OutputCapField::Auto`]) and
    /// `ignore_eos`, streamed, trace content, cache busting, tool waits honoured (capped at
    /// 30 s), chat completions.
    fn default() -> Self {
        RequestShape {
            model: None,
            max_model_len: None,
            output_cap_field: OutputCapField::Auto,
            ignore_eos: true,
            response: ResponseMode::Stream,
            content_mode: ContentMode::Trace,
            cache_bust: true,
            cache_bust_tag: None,
            tool_waits: ToolWaits::default(),
            extra_body: serde_json::Map::new(),
            routing_header: None,
            worker_header: None,
            endpoint: bench_transport::Endpoint::Chat,
            responses_state: ResponsesState::Client,
        }
    }
}

/// Clock limits and response size caps: a run spec's `limits` table, and the engine's
/// ([`RunConfig::limits`]).
#[derive(Debug, Clone, Copy, PartialEq, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct Limits {
    /// Run this long, looping the pool; no new session or turn after it.
    #[serde(with = "humantime_serde")]
    pub duration: Option<Duration>,
    /// Hard fuse on the whole run: requests in flight are cut.
    #[serde(with = "humantime_serde")]
    pub max_duration: Option<Duration>,
    /// Per-request timeout.
    #[serde(with = "humantime_serde")]
    pub turn_timeout: Duration,
    /// Stop a session at its next turn boundary once it has run this long.
    #[serde(with = "humantime_serde")]
    pub session_timeout: Option<Duration>,
    /// Cap on one event-stream line or event, in bytes ([`bench_transport::Limits`]).
    pub max_event_bytes: u64,
    /// Cap on one response body, in bytes.
    pub max_response_bytes: u64,
    /// Cap on one non-streamed answer read whole, in bytes.
    pub max_json_bytes: u64,
}

impl Limits {
    /// The transport's size caps.
    pub fn response_caps(&self) -> bench_transport::Limits {
        let to_usize = |n: u64| usize::try_from(n).unwrap_or(usize::MAX);
        bench_transport::Limits {
            max_event_bytes: to_usize(self.max_event_bytes),
            max_response_bytes: self.max_response_bytes,
            max_json_bytes: to_usize(self.max_json_bytes),
        }
    }
}

impl Default for Limits {
    fn default() -> Self {
        Limits {
            duration: None,
            max_duration: None,
            turn_timeout: Duration::from_secs(600),
            session_timeout: None,
            max_event_bytes: bench_transport::Limits::DEFAULT.max_event_bytes as u64,
            max_response_bytes: bench_transport::Limits::DEFAULT.max_response_bytes,
            max_json_bytes: bench_transport::Limits::DEFAULT.max_json_bytes as u64,
        }
    }
}
/// How a run behaves. `RunConfig::new(model, concurrency)` gives the defaults. `run.json`
/// records it (`run`); the headers, which it does not record, read back empty.
#[derive(Debug, Clone, Serialize, Deserialize)]
#[serde(default)]
pub struct RunConfig {
    /// Model name sent in every request.
    pub model: String,
    /// Closed loop: workers, i.e. sessions played at once. Open loop ([`RunConfig::arrival`]):
    /// the most sessions in flight, `0` for no limit (a session arriving while the limit is
    /// reached waits, and its wait counts as dispatch lag).
    pub concurrency: u32,
    /// Open loop: start sessions on this schedule instead of refilling `concurrency` workers.
    pub arrival: Option<Arrival>,
    /// Closed loop: start the `concurrency` workers evenly over this time instead of all at
    /// once (no thundering herd of first turns and connections). Turns sent while fewer are
    /// active fall outside the steady window by its concurrency rule.
    #[serde(with = "humantime_serde")]
    pub ramp_up: Option<Duration>,
    /// Play the first N sessions of the pool, cut to 3 turns, before the measured run; their
    /// records are marked `warmup` and left out of every metric.
    pub warmup_sessions: u32,
    /// Duration, fuse, turn and session timeouts, response size caps.
    pub limits: Limits,
    /// Retries of failed turns (none by default).
    pub retry: Retry,
    /// The model's window: a session stops when its next prompt plus pinned output would not fit.
    pub max_model_len: Option<u64>,
    /// What each request looks like.
    pub request: RequestShape,
    /// Send `return_cached_tokens_details: true` (SGLang: the device/host split of cache hits).
    pub return_cached_tokens_details: bool,
    /// Headers the endpoint needs on every request (Messages: `anthropic-version`, `x-api-key`).
    #[serde(skip)]
    pub endpoint_headers: Vec<(HeaderName, HeaderValue)>,
    /// [`RequestShape::routing_header`], parsed: the header carrying a stable per-session
    /// routing key, if any.
    #[serde(skip)]
    pub routing_header: Option<HeaderName>,
    /// [`RequestShape::worker_header`], parsed.
    #[serde(skip)]
    pub worker_header: Option<HeaderName>,
    /// Where this run's clock starts: every record's `*_s` offset adds it. A resumed run sets
    /// it to where its predecessor's records end, so one run directory keeps one timeline.
    #[serde(with = "humantime_serde")]
    pub time_origin: Duration,
}

impl Default for RunConfig {
    /// [`RunConfig::new`] with no model, one session at a time.
    fn default() -> Self {
        RunConfig::new("", 1)
    }
}

impl RunConfig {
    /// Defaults: no duration, 600 s turn timeout, gaps honoured (capped at 30 s), cache
    /// busting on, output pinned with `max_completion_tokens` + `ignore_eos`, trace content,
    /// streaming.
    pub fn new(model: impl Into<String>, concurrency: u32) -> Self {
        RunConfig {
            model: model.into(),
            concurrency,
            arrival: None,
            ramp_up: None,
            warmup_sessions: 0,
            limits: Limits::default(),
            retry: Retry::default(),
            max_model_len: None,
            request: RequestShape::default(),
            return_cached_tokens_details: false,
            endpoint_headers: Vec::new(),
            routing_header: None,
            worker_header: None,
            time_origin: Duration::ZERO,
        }
    }

    /// The chat-completions request body (for [`bench_transport::Endpoint::Chat`]; other
    /// endpoints: [`RunConfig::body_segments`]): a concatenation of constant pieces and the
    /// conversation so far (`messages` is the comma-separated message objects, already JSON).
    pub fn body(&self, messages: &str, max_output_tokens: u32) -> String {
        self.body_with_head(None, messages, max_output_tokens)
    }

    /// [`RunConfig::body`] with `head` (a message shared by many sessions, such as the plan's
    /// system prompt) written before `messages`: each session then keeps only its own part of
    /// the conversation, not a copy of the shared prompt.
    pub fn body_with_head(
        &self,
        head: Option<&bench_workload::plan::PlannedMessage>,
        messages: &str,
        max_output_tokens: u32,
    ) -> String {
        let head_len = head.map_or(0, |h| h.json_len() + 1);
        let mut b = String::with_capacity(head_len + messages.len() + 256);
        self.open_body(&mut b);
        if let Some(h) = head {
            h.write_json(&mut b);
            if !messages.is_empty() {
                b.push(',');
            }
        }
        b.push_str(messages);
        self.close_body(&mut b, max_output_tokens);
        b
    }

    /// The body of [`RequestShape::endpoint`] as pieces sent without being joined: the
    /// conversation's own pieces ([`crate::Conversation`], written with
    /// [`RunConfig::render`]) and a long shared system prompt are not copied.
    /// `previous_response_id` (Responses, server state): `conv` holds only this turn's input,
    /// and the system prompt is the server's already. `tools`: the session's recorded tool
    /// definitions (JSON), sent as chat's `tools` (faithful tool messages).
    ///
    /// The shapes: chat `{"model","messages":[…],cap,…}`; Responses `{"model",
    /// ["previous_response_id",] "input":[…],"max_output_tokens",…}`; Messages `{"model",
    /// "system","messages":[…],"max_tokens",…}`; completions `{"model","prompt":"System: …
    /// User: … Assistant:","max_tokens",…}`. `ignore_eos`, `stream` and the extra body go into
    /// every one.
    pub fn body_segments(
        &self,
        system: System<'_>,
        conv: &crate::Conversation,
        max_output_tokens: u32,
        previous_response_id: Option<&str>,
        tools: Option<&str>,
    ) -> bench_transport::Segments {
        use crate::conv::{TEXT_SEP, is_long, shared};
        use bench_transport::Endpoint;
        let mut parts = Vec::with_capacity(conv.pieces_len() + 5);
        let mut b = String::with_capacity(256);
        b.push('{');
        self.write_model(&mut b);
        // A long shared text goes out as its own piece.
        let piece = |b: &mut String, parts: &mut Vec<Bytes>, p: Bytes| {
            parts.push(Bytes::from(std::mem::take(b)));
            parts.push(p);
        };
        match self.request.endpoint {
            Endpoint::Chat | Endpoint::Responses => {
                if let (Endpoint::Responses, Some(id)) =
                    (self.request.endpoint, previous_response_id)
                {
                    b.push_str("\"previous_response_id\":");
                    bench_rundir::json_str::push_str(&mut b, id);
                    b.push(',');
                }
                b.push_str(if self.request.endpoint == Endpoint::Chat {
                    "\"messages\":["
                } else {
                    "\"input\":["
                });
                let system = if previous_response_id.is_some() {
                    System::None
                } else {
                    system
                };
                // A Responses item says its type (see `Render::Items`).
                let system_prefix = if self.request.endpoint == Endpoint::Responses {
                    crate::conv::item_prefix(bench_workload::plan::Role::System)
                } else {
                    "{\"role\":\"system\",\"content\":"
                };
                match system {
                    System::None => {}
                    System::Shared(h) if is_long(h) => {
                        b.push_str(system_prefix);
                        piece(&mut b, &mut parts, shared(h));
                        b.push('}');
                    }
                    System::Shared(h) => {
                        b.push_str(system_prefix);
                        b.push_str(&h.content_json);
                        b.push('}');
                    }
                    System::Own(lit) => {
                        b.push_str(system_prefix);
                        b.push_str(lit);
                        b.push('}');
                    }
                    System::Marked(h, marker) => {
                        b.push_str(system_prefix);
                        push_system(&mut b, &mut parts, h, Cut::Open);
                        b.push_str(marker);
                        b.push_str("\"}");
                    }
                }
                if !matches!(system, System::None) && !conv.is_empty() {
                    b.push(',');
                }
            }
            Endpoint::Messages => {
                match system {
                    System::None => {}
                    System::Shared(h) if is_long(h) => {
                        b.push_str("\"system\":");
                        piece(&mut b, &mut parts, shared(h));
                        b.push(',');
                    }
                    System::Shared(h) => {
                        b.push_str("\"system\":");
                        b.push_str(&h.content_json);
                        b.push(',');
                    }
                    System::Own(lit) => {
                        b.push_str("\"system\":");
                        b.push_str(lit);
                        b.push(',');
                    }
                    System::Marked(h, marker) => {
                        b.push_str("\"system\":");
                        push_system(&mut b, &mut parts, h, Cut::Open);
                        b.push_str(marker);
                        b.push_str("\",");
                    }
                }
                b.push_str("\"messages\":[");
            }
            Endpoint::Completions => {
                b.push_str("\"prompt\":\"");
                match system {
                    System::None => {}
                    System::Shared(h) => {
                        b.push_str("System: ");
                        push_system(&mut b, &mut parts, h, Cut::Inner);
                        b.push_str(TEXT_SEP);
                    }
                    System::Own(lit) => {
                        b.push_str("System: ");
                        b.push_str(inner(lit));
                        b.push_str(TEXT_SEP);
                    }
                    System::Marked(h, marker) => {
                        b.push_str("System: ");
                        push_system(&mut b, &mut parts, h, Cut::Inner);
                        b.push_str(marker);
                        b.push_str(TEXT_SEP);
                    }
                }
            }
        }
        parts.push(Bytes::from(b));
        conv.pieces(&mut parts);
        let mut b = String::with_capacity(192);
        self.close_body(&mut b, max_output_tokens);
        if let (Some(t), Endpoint::Chat) = (tools, self.request.endpoint) {
            if !self.request.extra_body.contains_key("tools") {
                // Before the closing brace.
                b.pop();
                b.push_str(",\"tools\":");
                b.push_str(t);
                b.push('}');
            }
        }
        parts.push(Bytes::from(b));
        bench_transport::Segments::new(parts)
    }

    /// `"model":…,` unless the extra body names the model.
    fn write_model(&self, b: &mut String) {
        if !self.request.extra_body.contains_key("model") {
            b.push_str("\"model\":");
            bench_rundir::json_str::push_str(b, &self.model);
            b.push(',');
        }
    }

    /// `{"model":…,"messages":[` (chat).
    fn open_body(&self, b: &mut String) {
        b.push('{');
        self.write_model(b);
        b.push_str("\"messages\":[");
    }

    /// How a conversation is written for [`RequestShape::endpoint`].
    pub fn render(&self) -> crate::conv::Render {
        match self.request.endpoint {
            bench_transport::Endpoint::Chat => crate::conv::Render::Json,
            bench_transport::Endpoint::Responses => crate::conv::Render::Items,
            bench_transport::Endpoint::Messages => crate::conv::Render::JsonNoSystem,
            bench_transport::Endpoint::Completions => crate::conv::Render::Text,
        }
    }

    /// The end of the conversation, then `,…}`: the output cap, `ignore_eos`, streaming and
    /// the extra body, as the endpoint names them.
    fn close_body(&self, b: &mut String, max_output_tokens: u32) {
        use bench_transport::Endpoint;
        let has = |k: &str| self.request.extra_body.contains_key(k);
        let stream = self.request.response == ResponseMode::Stream;
        let (close, cap, stream_options) = match self.request.endpoint {
            Endpoint::Chat => ("]", self.request.output_cap_field.key(), stream),
            Endpoint::Responses => ("]", "max_output_tokens", false),
            Endpoint::Messages => ("]", "max_tokens", false),
            Endpoint::Completions => ("Assistant:\"", "max_tokens", stream),
        };
        b.push_str(close);
        if !has(cap) {
            b.push_str(",\"");
            b.push_str(cap);
            b.push_str("\":");
            b.push_str(itoa::Buffer::new().format(max_output_tokens));
        }
        if self.request.ignore_eos && !has("ignore_eos") {
            b.push_str(",\"ignore_eos\":true");
        }
        if !has("stream") {
            b.push_str(if stream {
                ",\"stream\":true"
            } else {
                ",\"stream\":false"
            });
        }
        if stream_options && !has("stream_options") {
            b.push_str(",\"stream_options\":{\"include_usage\":true}");
        }
        if self.return_cached_tokens_details
            && self.request.endpoint == Endpoint::Chat
            && !has("return_cached_tokens_details")
        {
            b.push_str(",\"return_cached_tokens_details\":true");
        }
        for (k, v) in &self.request.extra_body {
            if v.is_null() {
                continue;
            }
            b.push(',');
            bench_rundir::json_str::push_str(b, k);
            b.push(':');
            b.push_str(&v.to_string());
        }
        b.push('}');
    }

    /// Per-request headers of a session (its routing key).
    pub fn headers_for(&self, session_id: &str) -> Vec<(HeaderName, HeaderValue)> {
        match (&self.routing_header, HeaderValue::from_str(session_id)) {
            (Some(h), Ok(v)) => vec![(h.clone(), v)],
            _ => Vec::new(),
        }
    }
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]
    use super::*;

    #[test]
    fn body_is_valid_json_and_extra_wins() {
        let mut c = RunConfig::new("m\"x", 1);
        let msgs = r#"{"role":"user","content":"hi"}"#;
        let v: serde_json::Value = serde_json::from_str(&c.body(msgs, 7)).unwrap();
        assert_eq!(v["model"], "m\"x");
        assert_eq!(v["max_completion_tokens"], 7);
        assert_eq!(v["ignore_eos"], true);
        assert_eq!(v["stream_options"]["include_usage"], true);
        assert_eq!(v["messages"][0]["content"], "hi");
        c.request
            .extra_body
            .insert("max_completion_tokens".into(), 3.into());
        c.request
            .extra_body
            .insert("ignore_eos".into(), serde_json::Value::Null);
        c.request.extra_body.insert("top_k".into(), 1.into());
        c.request.output_cap_field = OutputCapField::MaxCompletionTokens;
        let body = c.body(msgs, 7);
        let v: serde_json::Value = serde_json::from_str(&body).unwrap();
        assert_eq!(v["max_completion_tokens"], 3);
        assert!(v.get("ignore_eos").is_none());
        assert_eq!(
            body.matches("max_completion_tokens").count(),
            1,
            "no duplicate keys"
        );
        c.request.output_cap_field = OutputCapField::MaxTokens;
        c.request.response = ResponseMode::Whole;
        let v: serde_json::Value = serde_json::from_str(&c.body(msgs, 7)).unwrap();
        assert_eq!(v["max_tokens"], 7);
        assert_eq!(v["stream"], false);
        assert!(v.get("stream_options").is_none());
        assert!(v.get("return_cached_tokens_details").is_none());
        c.return_cached_tokens_details = true;
        let v: serde_json::Value = serde_json::from_str(&c.body(msgs, 7)).unwrap();
        assert_eq!(v["return_cached_tokens_details"], true);
    }

    use bench_transport::Endpoint;
    use bench_workload::plan::{PlannedMessage, Role};

    fn pm(role: Role, text: &str) -> PlannedMessage {
        PlannedMessage {
            role,
            content_json: std::sync::Arc::from(serde_json::to_string(text).unwrap()),
            tokens: 1,
            extra_json: None,
        }
    }

    /// A conversation of `u1`, `a1`, `u2` (and a system message in the middle, which the
    /// Messages rendering turns into a user turn) as `c` writes it.
    fn conv(c: &RunConfig, long: bool) -> crate::Conversation {
        let mut conv = crate::Conversation::rendered(0, c.render());
        let u1 = if long {
            "x".repeat(20_000)
        } else {
            "u1".into()
        };
        for m in [
            pm(Role::User, &u1),
            pm(Role::Assistant, "a1"),
            pm(Role::System, "note"),
            pm(Role::User, "u2 \"quoted\"\n"),
        ] {
            conv.comma();
            conv.push_msg(&m);
        }
        conv
    }

    fn body(
        c: &RunConfig,
        system: System<'_>,
        long: bool,
        prev: Option<&str>,
    ) -> serde_json::Value {
        let b = c
            .body_segments(system, &conv(c, long), 9, prev, None)
            .to_bytes();
        serde_json::from_slice(&b)
            .unwrap_or_else(|e| panic!("{e}: {}", String::from_utf8_lossy(&b)))
    }

    #[test]
    fn every_endpoint_gets_its_own_body_shape() {
        let sys = pm(Role::System, "Be brief.");
        for long in [false, true] {
            let mut c = RunConfig::new("m", 1);
            let v = body(&c, System::Shared(&sys), long, None);
            assert_eq!(v["messages"].as_array().unwrap().len(), 5);
            assert_eq!(v["messages"][0]["content"], "Be brief.");
            assert_eq!(v["max_completion_tokens"], 9);

            c.request.endpoint = Endpoint::Responses;
            let v = body(&c, System::Shared(&sys), long, None);
            assert_eq!(v["input"].as_array().unwrap().len(), 5);
            assert_eq!(v["input"][0]["role"], "system");
            assert_eq!(v["max_output_tokens"], 9);
            assert!(v.get("stream_options").is_none() && v.get("messages").is_none());
            assert_eq!(
                (v["stream"].clone(), v["ignore_eos"].clone()),
                (true.into(), true.into())
            );
            // Server state: only this turn's input, after the id; the server has the rest.
            let v = body(&c, System::Shared(&sys), long, Some("resp_1"));
            assert_eq!(v["previous_response_id"], "resp_1");
            assert_eq!(v["input"].as_array().unwrap().len(), 4, "no system item");

            c.request.endpoint = Endpoint::Messages;
            let v = body(&c, System::Shared(&sys), long, None);
            assert_eq!(v["system"], "Be brief.");
            let roles: Vec<&str> = v["messages"]
                .as_array()
                .unwrap()
                .iter()
                .map(|m| m["role"].as_str().unwrap())
                .collect();
            assert_eq!(roles, ["user", "assistant", "user", "user"]);
            assert_eq!(v["max_tokens"], 9);
            let v = body(&c, System::Own("\"own [marker]\""), long, None);
            assert_eq!(v["system"], "own [marker]");

            c.request.endpoint = Endpoint::Completions;
            let v = body(&c, System::Shared(&sys), long, None);
            let u1 = if long {
                "x".repeat(20_000)
            } else {
                "u1".into()
            };
            assert_eq!(
                v["prompt"],
                format!(
                    "System: Be brief.\n\nUser: {u1}\n\nAssistant: a1\n\nSystem: note\n\nUser: u2 \"quoted\"\n\n\nAssistant:"
                )
            );
            assert_eq!(v["max_tokens"], 9);
            assert_eq!(v["stream_options"]["include_usage"], true);
            let v = body(&c, System::None, long, None);
            assert!(v["prompt"].as_str().unwrap().starts_with("User: "));
        }
    }

    #[test]
    fn faithful_tool_messages_and_tools_reach_the_chat_body() {
        let c = RunConfig::new("m", 1);
        let mut conv = crate::Conversation::rendered(0, c.render());
        let mut call = pm(Role::Assistant, "");
        call.extra_json = Some(std::sync::Arc::from(
            r#","tool_calls":[{"id":"c1","type":"function","function":{"name":"ls","arguments":"{}"}}]"#,
        ));
        let mut result = pm(Role::Tool, &"x".repeat(20_000));
        result.extra_json = Some(std::sync::Arc::from(r#","tool_call_id":"c1""#));
        for m in [pm(Role::User, "list"), call, result] {
            conv.comma();
            conv.push_msg(&m);
        }
        let tools = r#"[{"type":"function","function":{"name":"ls"}}]"#;
        let b = c
            .body_segments(System::None, &conv, 4, None, Some(tools))
            .to_bytes();
        let v: serde_json::Value = serde_json::from_slice(&b).unwrap();
        assert_eq!(v["messages"][1]["tool_calls"][0]["id"], "c1");
        assert_eq!(v["messages"][2]["role"], "tool");
        assert_eq!(v["messages"][2]["tool_call_id"], "c1");
        assert_eq!(v["tools"][0]["function"]["name"], "ls");
        assert_eq!(v["max_completion_tokens"], 4);
        assert_eq!(
            conv.len(),
            conv.to_string_lossy().len(),
            "length accounting"
        );
    }

    #[test]
    fn generated_answers_join_in_the_endpoints_rendering() {
        let mut c = RunConfig::new("m", 1);
        c.request.endpoint = Endpoint::Completions;
        let mut conv = crate::Conversation::rendered(0, c.render());
        conv.push_msg(&pm(Role::User, "hi"));
        conv.comma();
        conv.push_text(Role::Assistant, "\"hello \\\"you\\\"\"");
        let b = c
            .body_segments(System::None, &conv, 3, None, None)
            .to_bytes();
        let v: serde_json::Value = serde_json::from_slice(&b).unwrap();
        assert_eq!(
            v["prompt"],
            "User: hi\n\nAssistant: hello \"you\"\n\nAssistant:"
        );
    }

    /// A marked replay's system prompt: the shared text sent from the plan's copy with the
    /// marker after it is byte for byte what a spliced copy of its own was, on every endpoint,
    /// for a short and a long (shared-piece) system prompt.
    #[test]
    fn a_marked_system_prompt_is_the_shared_text_then_the_marker() {
        for text in ["Be \"brief\".".to_owned(), "s".repeat(20_000)] {
            let sys = pm(Role::System, &text);
            let marker = "\\n[bench replay s-1#2]";
            let lit = &sys.content_json;
            let own = format!("{}{marker}\"", &lit[..lit.len() - 1]);
            for endpoint in [
                Endpoint::Chat,
                Endpoint::Responses,
                Endpoint::Messages,
                Endpoint::Completions,
            ] {
                let mut c = RunConfig::new("m", 1);
                c.request.endpoint = endpoint;
                let bytes = |system: System<'_>| {
                    c.body_segments(system, &conv(&c, false), 9, None, None)
                        .to_bytes()
                };
                let marked = bytes(System::Marked(&sys, marker));
                assert_eq!(marked, bytes(System::Own(&own)), "{endpoint:?}");
                let v: serde_json::Value = serde_json::from_slice(&marked).unwrap();
                let want = format!("{text}\n[bench replay s-1#2]");
                let got = match endpoint {
                    Endpoint::Chat => v["messages"][0]["content"].clone(),
                    Endpoint::Responses => v["input"][0]["content"].clone(),
                    Endpoint::Messages => v["system"].clone(),
                    Endpoint::Completions => v["prompt"].clone(),
                };
                match endpoint {
                    Endpoint::Completions => {
                        assert!(
                            got.as_str()
                                .unwrap()
                                .starts_with(&format!("System: {want}"))
                        )
                    }
                    _ => assert_eq!(got, want, "{endpoint:?}"),
                }
            }
        }
    }
}
