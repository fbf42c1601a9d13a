//! The Anthropic Messages API (`POST /v1/messages`): its stream events and its whole message.
//!
//! Streamed, the `type` inside an event's data names it (the `event:` line is used when the data
//! has none): `message_start` (usage), `content_block_start` / `content_block_delta`
//! (`text_delta` is answer, `thinking_delta` reasoning, `input_json_delta` tool-call text;
//! `signature_delta` is not output), `message_delta` (stop reason, cumulative output tokens),
//! `message_stop` (the end), `error`. Anything else (`ping`, `content_block_stop`, new types)
//! is ignored.
//!
//! Usage follows Anthropic's semantics: `input_tokens` excludes cache reads and writes, so the
//! prompt is `input_tokens + cache_read_input_tokens + cache_creation_input_tokens`; the
//! completion is the last `output_tokens` seen; reasoning tokens are not reported.

use serde::Deserialize;
use serde_json::value::RawValue;

use crate::error::Error;
use crate::openai::Usage;
use crate::openai::wire::Str;
use crate::stream::{Accum, Step, error_text, malformed, server_error};

/// The usage counters of a message, as far as they were reported.
#[derive(Debug, Default, Clone, Copy, PartialEq, Eq, Deserialize)]
pub(crate) struct UsageParts {
    #[serde(default)]
    input_tokens: Option<u64>,
    #[serde(default)]
    cache_read_input_tokens: Option<u64>,
    #[serde(default)]
    cache_creation_input_tokens: Option<u64>,
    #[serde(default)]
    output_tokens: Option<u64>,
}

impl UsageParts {
    /// Takes every counter `newer` reports (the last one seen wins).
    fn update(&mut self, newer: &UsageParts) {
        let take = |old: &mut Option<u64>, new: Option<u64>| {
            if new.is_some() {
                *old = new;
            }
        };
        take(&mut self.input_tokens, newer.input_tokens);
        take(
            &mut self.cache_read_input_tokens,
            newer.cache_read_input_tokens,
        );
        take(
            &mut self.cache_creation_input_tokens,
            newer.cache_creation_input_tokens,
        );
        take(&mut self.output_tokens, newer.output_tokens);
    }

    fn usage(&self) -> Usage {
        let parts = [
            self.input_tokens,
            self.cache_read_input_tokens,
            self.cache_creation_input_tokens,
        ];
        // Saturating: the counts are the server's, and absurd ones must not overflow.
        let prompt = parts.iter().any(Option::is_some).then(|| {
            parts
                .iter()
                .fold(0u64, |sum, p| sum.saturating_add(p.unwrap_or(0)))
        });
        Usage {
            prompt_tokens: prompt,
            completion_tokens: self.output_tokens,
            total_tokens: None,
            cached_tokens: self.cache_read_input_tokens,
            cached_device_tokens: None,
            cached_host_tokens: None,
            reasoning_tokens: None,
        }
    }
}

/// One event's data: its type and the raw members the client may read.
#[derive(Deserialize)]
struct Event<'a> {
    #[serde(borrow, default, rename = "type")]
    kind: Option<Str<'a>>,
    #[serde(borrow, default)]
    message: Option<&'a RawValue>,
    #[serde(borrow, default)]
    content_block: Option<&'a RawValue>,
    #[serde(borrow, default)]
    delta: Option<&'a RawValue>,
    #[serde(borrow, default)]
    usage: Option<&'a RawValue>,
    #[serde(default)]
    error: Option<serde_json::Value>,
}

/// `message_start`'s message (only its usage is read).
#[derive(Deserialize)]
struct Start {
    #[serde(default)]
    usage: Option<UsageParts>,
}

/// A content block (at `content_block_start`, or in a whole message).
#[derive(Deserialize)]
struct Block<'a> {
    #[serde(borrow, default, rename = "type")]
    kind: Option<Str<'a>>,
    #[serde(borrow, default)]
    text: Option<Str<'a>>,
    #[serde(borrow, default)]
    thinking: Option<Str<'a>>,
    #[serde(borrow, default)]
    name: Option<Str<'a>>,
}

/// A `content_block_delta`'s or a `message_delta`'s delta.
#[derive(Deserialize)]
struct Delta<'a> {
    #[serde(borrow, default, rename = "type")]
    kind: Option<Str<'a>>,
    #[serde(borrow, default)]
    text: Option<Str<'a>>,
    #[serde(borrow, default)]
    thinking: Option<Str<'a>>,
    #[serde(borrow, default)]
    partial_json: Option<Str<'a>>,
    #[serde(borrow, default)]
    stop_reason: Option<Str<'a>>,
}

/// A whole (non-streamed) message.
#[derive(Deserialize)]
struct Message<'a> {
    #[serde(borrow, default, rename = "type")]
    kind: Option<Str<'a>>,
    #[serde(borrow, default)]
    content: Option<Vec<Block<'a>>>,
    #[serde(borrow, default)]
    stop_reason: Option<Str<'a>>,
    #[serde(default)]
    usage: Option<UsageParts>,
    #[serde(default)]
    error: Option<serde_json::Value>,
}

fn text_of<'t>(t: &'t Option<Str<'_>>) -> &'t str {
    t.as_deref().unwrap_or("")
}

/// `end_turn` → `stop`, `max_tokens` → `length`, anything else as sent.
fn finish(stop_reason: &str) -> String {
    match stop_reason {
        "end_turn" => "stop".to_owned(),
        "max_tokens" => "length".to_owned(),
        other => other.to_owned(),
    }
}

/// Decodes a raw member as `T`, reporting a mismatch as malformed JSON in `data`.
fn decode<'a, T: Deserialize<'a>>(raw: &'a RawValue, data: &str) -> Result<T, Error> {
    serde_json::from_str(raw.get()).map_err(|e| malformed(&e, data, "event"))
}

impl Accum {
    fn message_usage(&mut self, u: &UsageParts) {
        self.message_usage.update(u);
        self.usage = Some(self.message_usage.usage());
    }

    /// A content block's own text (normally empty at `content_block_start`).
    fn block(&mut self, b: &Block<'_>) -> Step {
        match b.kind.as_deref() {
            Some("text") => {
                let t = text_of(&b.text);
                self.content.push_str(t);
                Step::answer(!t.is_empty())
            }
            Some("thinking") => {
                let t = text_of(&b.thinking);
                self.reasoning.push_str(t);
                Step::reasoning(!t.is_empty())
            }
            // A tool call's name is tool-call text, as in a chat tool-call chunk.
            Some("tool_use") => Step::answer(!text_of(&b.name).is_empty()),
            _ => Step::NONE,
        }
    }
}

/// One streamed event; `event` is its SSE event name.
pub(crate) fn on_event(acc: &mut Accum, event: Option<&str>, data: &str) -> Result<Step, Error> {
    if data.trim() == "[DONE]" {
        // Not part of this API; a proxy's trailing one is no event.
        return Ok(Step::NONE);
    }
    let ev: Event<'_> = match serde_json::from_str(data) {
        Ok(ev) => ev,
        Err(_) if event == Some("error") => return Err(server_error(data)),
        Err(e) => return Err(malformed(&e, data, "event")),
    };
    let kind = ev.kind.as_deref().or(event).unwrap_or("");
    match kind {
        "content_block_delta" => {
            let Some(raw) = ev.delta else {
                return Ok(Step::NONE);
            };
            let d: Delta<'_> = decode(raw, data)?;
            Ok(match d.kind.as_deref() {
                Some("text_delta") => {
                    let t = text_of(&d.text);
                    acc.content.push_str(t);
                    Step::answer(!t.is_empty())
                }
                Some("thinking_delta") => {
                    let t = text_of(&d.thinking);
                    acc.reasoning.push_str(t);
                    Step::reasoning(!t.is_empty())
                }
                Some("input_json_delta") => Step::answer(!text_of(&d.partial_json).is_empty()),
                _ => Step::NONE, // signature_delta, citations_delta, new kinds
            })
        }
        "content_block_start" => match ev.content_block {
            Some(raw) => Ok(acc.block(&decode(raw, data)?)),
            None => Ok(Step::NONE),
        },
        "message_start" => {
            if let Some(raw) = ev.message {
                let start: Start = decode(raw, data)?;
                if let Some(u) = &start.usage {
                    acc.message_usage(u);
                }
            }
            Ok(Step::NONE)
        }
        "message_delta" => {
            if let Some(raw) = ev.delta {
                let d: Delta<'_> = decode(raw, data)?;
                if let Some(r) = d.stop_reason.as_deref() {
                    acc.finish_reason = Some(finish(r));
                }
            }
            if let Some(raw) = ev.usage {
                let u: Option<UsageParts> = decode(raw, data)?;
                if let Some(u) = &u {
                    acc.message_usage(u);
                }
            }
            Ok(Step::NONE)
        }
        "message_stop" => Ok(Step::TERMINAL),
        "error" => {
            let msg = match &ev.error {
                Some(e) => error_text(e),
                None => data.to_owned(),
            };
            Err(server_error(&msg))
        }
        _ => Ok(Step::NONE),
    }
}

/// A whole (non-streamed) message.
pub(crate) fn on_body(acc: &mut Accum, body: &str) -> Result<Step, Error> {
    let m: Message<'_> = serde_json::from_str(body).map_err(|e| malformed(&e, body, "response"))?;
    if m.kind.as_deref() == Some("error") || m.error.as_ref().is_some_and(|e| !e.is_null()) {
        let msg = match &m.error {
            Some(e) if !e.is_null() => error_text(e),
            _ => body.to_owned(),
        };
        return Err(server_error(&msg));
    }
    if let Some(u) = &m.usage {
        acc.message_usage(u);
    }
    if let Some(r) = m.stop_reason.as_deref() {
        acc.finish_reason = Some(finish(r));
    }
    let mut step = Step::NONE;
    for b in m.content.iter().flatten() {
        let s = acc.block(b);
        step.reasoning |= s.reasoning;
        step.answer |= s.answer;
    }
    Ok(step)
}
