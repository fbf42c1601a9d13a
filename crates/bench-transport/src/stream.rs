//! Turning a response of any [`Endpoint`] into a [`TurnOutcome`].
//!
//! [`ChatStreamConsumer`] is synchronous: feed it body bytes with the instant they arrived, then
//! [`finish`](ChatStreamConsumer::finish) it. [`crate::Client`] drives it from the network;
//! tests drive it from captured streams. It parses each endpoint's stream and whole-JSON answer
//! as the wire contract (`docs/endpoints.md`) and the real APIs define them.
//!
//! Definitions (see `docs/metrics.md`):
//! * **Output** is reasoning or answer text. *Reasoning* is chat's `delta.reasoning_content`
//!   (or `delta.reasoning`), responses' `response.reasoning_text.delta` (and
//!   `response.reasoning_summary_text.delta`), messages' `thinking_delta`. *Answer* is everything
//!   else a user is shown: text (`content`, `output_text`, `text_delta`, a completion's `text`),
//!   a refusal, and tool-call text (a tool's name or argument text). Empty strings, role-only
//!   chunks, signatures, pings and lifecycle events are not output.
//! * TTFT (`ttft`): from the request being sent to the first chunk (event) that carries output
//!   of either kind. TTFA (`ttfa`): to the first chunk that carries *answer* output; on a
//!   reasoning model `ttfa − ttft` is the thinking time. For non-streamed responses both are the
//!   whole response time (TTFA only when the response has an answer).
//! * Every output-bearing chunk's arrival offset is kept (inter-chunk gaps come from these);
//!   `reasoning_chunks` and `answer_chunks` count them by kind (a chunk carrying both counts in
//!   both).
//! * Usage is the last usage the stream carried, mapped to the same terms for every endpoint
//!   (see [`Usage`]).
//! * A stream is complete when its endpoint's terminal event arrived: `data: [DONE]` for chat
//!   and completions, `response.completed` or `response.incomplete` for responses,
//!   `message_stop` for messages. Events after it are counted and ignored; a stream that ends
//!   without it is [`ErrorKind::Incomplete`]. An error event (or an error object in a chat or
//!   completions chunk) is [`ErrorKind::Server`] with the server's message; event types the
//!   client does not know are ignored.

use std::time::{Duration, Instant};

use serde::Serialize;

use crate::endpoint::Endpoint;
use crate::error::{Error, ErrorKind};
use crate::limits::Limits;
use crate::openai::{Usage, wire};
use crate::sse::{SseItem, SseParser};

#[cfg(test)]
mod captures;
#[cfg(test)]
mod tests;

/// Everything measured about one turn.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct TurnOutcome {
    /// The generated answer text (choice 0's `content` or `text`, responses' `output_text`,
    /// messages' text blocks). Refusals and tool-call text are output but not part of it.
    pub content: String,
    /// The generated reasoning text (choice 0's `reasoning_content`, responses' reasoning text,
    /// messages' thinking blocks).
    pub reasoning: String,
    /// Time to first output of any kind (reasoning or answer). `None` when no chunk carried
    /// output.
    pub ttft: Option<Duration>,
    /// Time to first answer output (not reasoning). `None` when no chunk carried an answer; for
    /// a non-streamed response with an answer it equals `e2e`.
    pub ttfa: Option<Duration>,
    /// Request sent → end of the response body.
    pub e2e: Duration,
    /// Arrival offset (from the request being sent) of every output-bearing chunk.
    pub chunk_offsets: Vec<Duration>,
    /// Output-bearing chunks that carried reasoning (1 for a non-streamed response with
    /// reasoning).
    pub reasoning_chunks: u32,
    /// Output-bearing chunks that carried answer output (1 for a non-streamed response with an
    /// answer).
    pub answer_chunks: u32,
    /// Usage as reported by the server, if it reported any.
    pub usage: Option<Usage>,
    /// Finish reason: chat's and completions' choice 0 `finish_reason`; responses' `"stop"`
    /// (completed) or `"length"` (incomplete: the output cap was hit); messages' `"stop"`
    /// (`end_turn`), `"length"` (`max_tokens`) or the `stop_reason` as sent.
    pub finish_reason: Option<String>,
    /// Whether the response was an event stream.
    pub streamed: bool,
    /// Number of SSE data events (including `[DONE]` and events after the terminal one), 0 for
    /// non-streamed responses.
    pub events: u32,
    /// Response body size in bytes.
    pub body_bytes: u64,
    /// How many times the request was re-sent because its pooled connection had been closed by
    /// the server before the request reached it (see [`crate::Client`]).
    pub redials: u32,
    /// Of [`TurnOutcome::redials`], the times the request had been written before its
    /// connection closed without any response: the server may have received it, so each is
    /// a failed attempt.
    pub resent: u32,
    /// Value of the configured worker header on the response, if any.
    pub worker: Option<String>,
    /// TCP connect time of the new connection the request went out on, measured by the
    /// client. `None` on a reused connection (and always from the consumer).
    pub connect: Option<Duration>,
    /// TLS handshake time of the new connection the request went out on, measured by the
    /// client. `None` on a reused connection or plain HTTP (and always from the consumer).
    pub tls: Option<Duration>,
    /// Responses: the id of the response (what a next turn's `previous_response_id` names).
    pub response_id: Option<String>,
}

impl TurnOutcome {
    /// Output tokens: the server's `completion_tokens` when reported.
    pub fn completion_tokens(&self) -> Option<u64> {
        self.usage.and_then(|u| u.completion_tokens)
    }

    /// Time per output token: `(e2e − ttft) / (completion_tokens − 1)`, when more than one token
    /// was produced and TTFT is known.
    pub fn tpot(&self) -> Option<Duration> {
        let n = self.completion_tokens()?;
        let ttft = self.ttft?;
        if n <= 1 || !self.streamed {
            return None;
        }
        let decode = self.e2e.checked_sub(ttft)?;
        Some(decode / u32::try_from(n - 1).unwrap_or(u32::MAX))
    }

    /// Gaps between consecutive output chunks.
    pub fn chunk_gaps(&self) -> impl Iterator<Item = Duration> + '_ {
        self.chunk_offsets
            .windows(2)
            .map(|w| w[1].saturating_sub(w[0]))
    }
}

/// Incremental consumer of a streamed (SSE) or whole (JSON) response body of one
/// [`Endpoint`].
#[derive(Debug)]
pub struct ChatStreamConsumer {
    sent: Instant,
    streamed: bool,
    endpoint: Endpoint,
    parser: SseParser,
    done: bool,
    state: Accum,
    error: Option<Error>,
    body: Vec<u8>,
    body_bytes: u64,
    limits: Limits,
}

/// What one chunk (event) carried.
#[derive(Debug, Default, Clone, Copy, PartialEq, Eq)]
pub(crate) struct Step {
    /// Reasoning output.
    pub reasoning: bool,
    /// Answer output.
    pub answer: bool,
    /// The endpoint's terminal event (responses, messages).
    pub terminal: bool,
}

impl Step {
    pub(crate) const NONE: Step = Step {
        reasoning: false,
        answer: false,
        terminal: false,
    };

    /// Answer output when `yes`.
    pub(crate) fn answer(yes: bool) -> Step {
        Step {
            answer: yes,
            ..Step::NONE
        }
    }

    /// Reasoning output when `yes`.
    pub(crate) fn reasoning(yes: bool) -> Step {
        Step {
            reasoning: yes,
            ..Step::NONE
        }
    }

    /// The terminal event.
    pub(crate) const TERMINAL: Step = Step {
        reasoning: false,
        answer: false,
        terminal: true,
    };
}

/// What a turn has accumulated so far (shared by every endpoint's parser).
#[derive(Debug, Default)]
pub(crate) struct Accum {
    pub(crate) content: String,
    pub(crate) reasoning: String,
    ttft: Option<Duration>,
    ttfa: Option<Duration>,
    chunk_offsets: Vec<Duration>,
    reasoning_chunks: u32,
    answer_chunks: u32,
    pub(crate) usage: Option<Usage>,
    pub(crate) finish_reason: Option<String>,
    events: u32,
    /// Messages: the usage counters seen so far (they come in two events).
    pub(crate) message_usage: crate::messages::UsageParts,
    /// Responses: the response's id.
    pub(crate) response_id: Option<String>,
    /// Chat: what this stream's chunks share, for the fast path.
    chunk_memo: crate::fastchunk::Memo,
}

/// Whether an event's data is `[DONE]` (surrounding whitespace allowed): the same as
/// `data.trim() == "[DONE]"`, with a shortcut for the common chunk.
#[inline]
fn is_done_marker(data: &str) -> bool {
    data.as_bytes().first() != Some(&b'{') && data.trim() == "[DONE]"
}

/// The first 200 bytes of `data` (at a character boundary) on one line.
pub(crate) fn snippet(data: &str) -> String {
    // Never inside a word: a secret the server echoed is whole (for the client's scrub) or
    // left out.
    bench_rundir::secrets::cut(data, 200).replace(['\n', '\r'], " ")
}

/// A JSON payload (`what`: "chunk", "event", "response") that did not parse.
pub(crate) fn malformed(e: &serde_json::Error, data: &str, what: &str) -> Error {
    Error::new(
        ErrorKind::MalformedJson,
        format!("{e} in {what}: {}", snippet(data)),
    )
}

/// An error the server reported inside a successful response.
pub(crate) fn server_error(message: &str) -> Error {
    Error::new(
        ErrorKind::Server,
        format!("server error in stream: {}", snippet(message)),
    )
}

/// The message of an error object: its `message` (prefixed with its `type` or `code` when that
/// is a string), a string as it is, anything else as JSON.
pub(crate) fn error_text(err: &serde_json::Value) -> String {
    let label = |k: &str| {
        err.get(k)
            .and_then(|v| v.as_str())
            .filter(|s| !s.is_empty())
    };
    match err.get("message").and_then(|m| m.as_str()) {
        Some(m) => match label("type").or_else(|| label("code")) {
            Some(kind) => format!("{kind}: {m}"),
            None => m.to_owned(),
        },
        None => match err.as_str() {
            Some(s) => s.to_owned(),
            None => err.to_string(),
        },
    }
}

impl ChatStreamConsumer {
    /// A consumer for a chat-completions response to a request sent at `sent`. `streamed` says
    /// whether to parse the body as an event stream (true) or as one JSON object (false).
    pub fn new(sent: Instant, streamed: bool) -> Self {
        Self::with_endpoint(sent, streamed, Endpoint::Chat)
    }

    /// A consumer for a response of `endpoint` to a request sent at `sent`. `streamed` says
    /// whether to parse the body as an event stream (true) or as one JSON object (false).
    pub fn with_endpoint(sent: Instant, streamed: bool, endpoint: Endpoint) -> Self {
        ChatStreamConsumer {
            sent,
            streamed,
            endpoint,
            parser: SseParser::with_max_len(Limits::DEFAULT.max_event_bytes),
            done: false,
            state: Accum::default(),
            error: None,
            body: Vec::new(),
            body_bytes: 0,
            limits: Limits::DEFAULT,
        }
    }

    /// The same consumer with other size caps (default [`Limits::DEFAULT`]). Past a cap,
    /// [`ChatStreamConsumer::feed`] fails with [`ErrorKind::ResponseTooLarge`] and nothing more
    /// is buffered.
    pub fn with_limits(mut self, limits: Limits) -> Self {
        self.limits = limits;
        self.parser = SseParser::with_max_len(limits.max_event_bytes);
        self
    }

    /// The endpoint whose responses this consumer parses.
    pub fn endpoint(&self) -> Endpoint {
        self.endpoint
    }

    /// True once the stream's terminal event was seen: `data: [DONE]` (chat, completions),
    /// `response.completed` or `response.incomplete` (responses), `message_stop` (messages).
    /// Always false for a non-streamed body.
    pub fn is_done(&self) -> bool {
        self.done
    }

    /// Number of output-bearing chunks so far.
    pub fn chunks(&self) -> usize {
        self.state.chunk_offsets.len()
    }

    /// Feeds body bytes that arrived at `at`. Returns an error as soon as the stream is known to
    /// be bad (malformed JSON in an event, or an error sent by the server).
    pub fn feed(&mut self, bytes: &[u8], at: Instant) -> Result<(), Error> {
        self.body_bytes += bytes.len() as u64;
        if self.body_bytes > self.limits.max_response_bytes {
            return Err(crate::limits::too_large(
                "the response body",
                self.limits.max_response_bytes,
                "--max-response-bytes",
                &format!(
                    " after {} events and {} output chunks",
                    self.state.events,
                    self.state.chunk_offsets.len()
                ),
            ));
        }
        if !self.streamed {
            if self.body.len() + bytes.len() > self.limits.max_json_bytes {
                return Err(crate::limits::too_large(
                    "a non-streamed answer",
                    self.limits.max_json_bytes as u64,
                    "--max-json-bytes",
                    "",
                ));
            }
            self.body.extend_from_slice(bytes);
            return Ok(());
        }
        // Keep the first bytes of a stream to quote them if it turns out not to be one.
        if self.body.len() < 200 {
            let take = (200 - self.body.len()).min(bytes.len());
            self.body.extend_from_slice(&bytes[..take]);
        }
        let offset = at.saturating_duration_since(self.sent);
        let endpoint = self.endpoint;
        let state = &mut self.state;
        let done = &mut self.done;
        let error = &mut self.error;
        self.parser.feed(bytes, |item| {
            if error.is_some() {
                return;
            }
            if let SseItem::Event(ev) = item {
                state.events += 1;
                if *done {
                    return;
                }
                let data = ev.data.as_ref();
                let step = match endpoint {
                    // The hot path, kept as lean as it was before the other endpoints.
                    Endpoint::Chat => {
                        if is_done_marker(data) {
                            *done = true;
                        } else if let Err(e) = state.on_chunk(data, offset) {
                            *error = Some(e);
                        }
                        return;
                    }
                    Endpoint::Completions => {
                        if is_done_marker(data) {
                            *done = true;
                            return;
                        }
                        crate::completions::on_chunk(state, data)
                    }
                    Endpoint::Responses => {
                        crate::responses::on_event(state, ev.event.as_deref(), data)
                    }
                    Endpoint::Messages => {
                        crate::messages::on_event(state, ev.event.as_deref(), data)
                    }
                };
                match step {
                    Ok(step) => {
                        state.record(offset, step);
                        *done = step.terminal;
                    }
                    Err(e) => *error = Some(e),
                }
            }
        });
        if let Some(e) = self.error.take() {
            return Err(e);
        }
        if self.parser.overflowed() {
            return Err(crate::limits::too_large(
                "one event-stream line or event",
                self.limits.max_event_bytes as u64,
                "--max-event-bytes",
                &format!(
                    " after {} events and {} output chunks",
                    self.state.events,
                    self.state.chunk_offsets.len()
                ),
            ));
        }
        Ok(())
    }

    /// Ends the body at `end` and returns the outcome, or why the response is not a valid one.
    pub fn finish(mut self, end: Instant) -> Result<TurnOutcome, Error> {
        let e2e = end.saturating_duration_since(self.sent);
        if !self.streamed {
            // simdutf8: a whole answer's bytes, several times faster than std's check.
            let text = simdutf8::basic::from_utf8(&self.body)
                .map_err(|_| Error::new(ErrorKind::MalformedJson, "response body is not UTF-8"))?;
            let s = &mut self.state;
            let step = match self.endpoint {
                Endpoint::Chat => s.chat_body(text)?,
                Endpoint::Completions => crate::completions::on_chunk(s, text)?,
                Endpoint::Responses => crate::responses::on_body(s, text)?,
                Endpoint::Messages => crate::messages::on_body(s, text)?,
            };
            // Non-streamed: the first "token" is the whole response.
            s.ttft = Some(e2e);
            s.ttfa = step.answer.then_some(e2e);
            s.chunk_offsets = vec![e2e];
            s.reasoning_chunks = u32::from(step.reasoning);
            s.answer_chunks = u32::from(step.answer);
        } else if !self.done {
            if self.state.events == 0 && self.body_bytes > 0 {
                let head = String::from_utf8_lossy(&self.body);
                return Err(Error::new(
                    ErrorKind::MalformedSse,
                    format!(
                        "no server-sent event in {} bytes of body: {}",
                        self.body_bytes,
                        snippet(&head)
                    ),
                ));
            }
            let missing = match self.endpoint {
                Endpoint::Chat | Endpoint::Completions => "[DONE]",
                Endpoint::Responses => "response.completed or response.incomplete",
                Endpoint::Messages => "message_stop",
            };
            return Err(Error::new(
                ErrorKind::Incomplete,
                format!(
                    "stream ended before {missing} after {} events and {} output chunks",
                    self.state.events,
                    self.state.chunk_offsets.len()
                ),
            ));
        }
        let s = self.state;
        Ok(TurnOutcome {
            content: s.content,
            reasoning: s.reasoning,
            ttft: s.ttft,
            ttfa: s.ttfa,
            e2e,
            chunk_offsets: s.chunk_offsets,
            reasoning_chunks: s.reasoning_chunks,
            answer_chunks: s.answer_chunks,
            usage: s.usage,
            finish_reason: s.finish_reason,
            streamed: self.streamed,
            events: s.events,
            body_bytes: self.body_bytes,
            redials: 0,
            resent: 0,
            worker: None,
            connect: None,
            tls: None,
            response_id: s.response_id,
        })
    }
}

/// Appends a parsed text to an accumulated one: the first (a whole non-streamed answer) is
/// taken as it is when serde already copied it, not copied again.
fn append(acc: &mut String, text: Option<std::borrow::Cow<'_, str>>) {
    match text {
        Some(std::borrow::Cow::Owned(t)) if acc.is_empty() => *acc = t,
        Some(t) => acc.push_str(&t),
        None => {}
    }
}

impl Accum {
    /// Records the arrival of a chunk that carried `step`.
    #[inline]
    fn record(&mut self, offset: Duration, step: Step) {
        if !(step.reasoning || step.answer) {
            return;
        }
        if self.ttft.is_none() {
            self.ttft = Some(offset);
        }
        if step.answer && self.ttfa.is_none() {
            self.ttfa = Some(offset);
        }
        self.reasoning_chunks += u32::from(step.reasoning);
        self.answer_chunks += u32::from(step.answer);
        self.chunk_offsets.push(offset);
    }

    /// Takes a chat-shaped usage object (chat, completions). A usage object on every chunk
    /// (continuous usage) is fine: the last one wins, except that a later chunk with only
    /// `sglext` keeps earlier counts.
    pub(crate) fn chat_usage(
        &mut self,
        usage: Option<&wire::UsageWire>,
        sglext: Option<&wire::SglExt>,
    ) {
        let u = Usage::from_wire(usage, sglext);
        let merged = match self.usage {
            Some(prev) if usage.is_none() => Usage {
                cached_device_tokens: u.cached_device_tokens,
                cached_host_tokens: u.cached_host_tokens,
                ..prev
            },
            _ => u,
        };
        self.usage = Some(merged);
    }

    /// One streamed chat-completions chunk that arrived at `offset`.
    #[inline]
    fn on_chunk(&mut self, data: &str, offset: Duration) -> Result<(), Error> {
        let step = self.chat_chunk(data)?;
        self.record(offset, step);
        Ok(())
    }

    /// One streamed chat-completions chunk.
    fn chat_chunk(&mut self, data: &str) -> Result<Step, Error> {
        // The common shape without serde; anything else (and every error) through serde.
        let chunk = match crate::fastchunk::parse_with(data, &mut self.chunk_memo) {
            Some(c) => c,
            None => serde_json::from_str::<wire::Chunk<'_>>(data)
                .map_err(|e| malformed(&e, data, "chunk"))?,
        };
        self.chat_read(chunk)
    }

    /// A whole non-streamed chat completion: the fast path's common shape (its `message` read
    /// as a delta, its `usage`), anything else through serde.
    fn chat_body(&mut self, data: &str) -> Result<Step, Error> {
        let chunk = match crate::fastchunk::parse(data) {
            Some(c) => c,
            None => serde_json::from_str::<wire::Chunk<'_>>(data)
                .map_err(|e| malformed(&e, data, "chunk"))?,
        };
        self.chat_read(chunk)
    }

    /// What a chunk (or a whole response) adds.
    fn chat_read(&mut self, chunk: wire::Chunk<'_>) -> Result<Step, Error> {
        if let Some(err) = chunk.error {
            return Err(server_error(&error_text(&err)));
        }
        if chunk.usage.is_some() || chunk.sglext.is_some() {
            self.chat_usage(chunk.usage.as_ref(), chunk.sglext.as_ref());
        }
        let mut step = Step::NONE;
        if let Some(c) = chunk.choices {
            step.reasoning = c.has_reasoning;
            step.answer = c.has_answer;
            append(&mut self.content, c.content);
            append(&mut self.reasoning, c.reasoning);
            if let Some(f) = c.finish_reason {
                self.finish_reason = Some(f.into_owned());
            }
        }
        Ok(step)
    }
}
