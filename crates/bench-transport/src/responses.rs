//! The OpenAI Responses API (`POST /v1/responses`): its stream events and its whole response.
//!
//! Streamed, the `type` inside an event's data names it (the `event:` line is used when the data
//! has none). Output: `response.output_text.delta` (answer text), `response.refusal.delta` and
//! `response.function_call_arguments.delta` (answer: a refusal, tool-call text),
//! `response.output_item.added` of a `function_call` with a name (tool-call text),
//! `response.reasoning_text.delta` and `response.reasoning_summary_text.delta` (reasoning). The
//! end: `response.completed` (finish `stop`) or `response.incomplete` (finish `length` when the
//! output cap was hit, else the reason given), both carrying the usage. Errors: `error` and
//! `response.failed`. Anything else is ignored, and so is a `data: [DONE]` (not part of this
//! API, but some proxies send one).

use std::borrow::Cow;

use serde::Deserialize;
use serde_json::value::RawValue;

use crate::error::Error;
use crate::openai::Usage;
use crate::openai::wire::Str;
use crate::stream::{Accum, Step, error_text, malformed, server_error};

/// One event's data: its type and the raw members the client may read.
#[derive(Deserialize)]
struct Event<'a> {
    #[serde(borrow, default, rename = "type")]
    kind: Option<Str<'a>>,
    #[serde(borrow, default)]
    delta: Option<&'a RawValue>,
    #[serde(borrow, default)]
    item: Option<&'a RawValue>,
    #[serde(borrow, default)]
    response: Option<&'a RawValue>,
}

/// A response object (in a terminal event, or the whole non-streamed answer).
#[derive(Deserialize, Default)]
struct Response<'a> {
    #[serde(borrow, default)]
    id: Option<Str<'a>>,
    #[serde(borrow, default)]
    status: Option<Str<'a>>,
    #[serde(default)]
    usage: Option<UsageWire>,
    #[serde(borrow, default)]
    incomplete_details: Option<Incomplete<'a>>,
    #[serde(default)]
    error: Option<serde_json::Value>,
    #[serde(borrow, default)]
    output: Option<Vec<Item<'a>>>,
}

#[derive(Deserialize)]
struct Incomplete<'a> {
    #[serde(borrow, default)]
    reason: Option<Str<'a>>,
}

/// An output item; `content` and `summary` are read only for the item types that define them.
#[derive(Deserialize)]
struct Item<'a> {
    #[serde(borrow, default, rename = "type")]
    kind: Option<Str<'a>>,
    #[serde(borrow, default)]
    content: Option<&'a RawValue>,
    #[serde(borrow, default)]
    summary: Option<&'a RawValue>,
    #[serde(borrow, default)]
    name: Option<&'a RawValue>,
    #[serde(borrow, default)]
    arguments: Option<&'a RawValue>,
}

/// A content or summary part of an item.
#[derive(Deserialize)]
struct Part<'a> {
    #[serde(borrow, default, rename = "type")]
    kind: Option<Str<'a>>,
    #[serde(borrow, default)]
    text: Option<Str<'a>>,
    #[serde(borrow, default)]
    refusal: Option<Str<'a>>,
}

#[derive(Deserialize, Default)]
struct UsageWire {
    #[serde(default)]
    input_tokens: Option<u64>,
    #[serde(default)]
    input_tokens_details: Option<InputDetails>,
    #[serde(default)]
    output_tokens: Option<u64>,
    #[serde(default)]
    output_tokens_details: Option<OutputDetails>,
    #[serde(default)]
    total_tokens: Option<u64>,
}

#[derive(Deserialize, Default)]
struct InputDetails {
    #[serde(default)]
    cached_tokens: Option<u64>,
}

#[derive(Deserialize, Default)]
struct OutputDetails {
    #[serde(default)]
    reasoning_tokens: Option<u64>,
}

impl UsageWire {
    fn usage(&self) -> Usage {
        Usage {
            prompt_tokens: self.input_tokens,
            completion_tokens: self.output_tokens,
            total_tokens: self.total_tokens,
            cached_tokens: self
                .input_tokens_details
                .as_ref()
                .and_then(|d| d.cached_tokens),
            cached_device_tokens: None,
            cached_host_tokens: None,
            reasoning_tokens: self
                .output_tokens_details
                .as_ref()
                .and_then(|d| d.reasoning_tokens),
        }
    }
}

/// Decodes a raw member as `T`, reporting a mismatch as malformed JSON in `data`.
fn decode<'a, T: Deserialize<'a>>(raw: &'a RawValue, data: &str, what: &str) -> Result<T, Error> {
    serde_json::from_str(raw.get()).map_err(|e| malformed(&e, data, what))
}

/// A text member (absent or `null`: empty).
fn text<'a>(raw: Option<&'a RawValue>, data: &str, what: &str) -> Result<Cow<'a, str>, Error> {
    match raw {
        None => Ok(Cow::Borrowed("")),
        Some(r) => Ok(decode::<Option<Str<'a>>>(r, data, what)?.map_or(Cow::Borrowed(""), |t| t.0)),
    }
}

impl Accum {
    /// Takes a response object's usage and finish reason; `status` is the one to assume when
    /// the object gives none (from the terminal event's type).
    fn response_end(&mut self, r: &Response<'_>, status: Option<&str>) -> Result<(), Error> {
        if let Some(id) = r.id.as_deref() {
            self.response_id = Some(id.to_owned());
        }
        if let Some(u) = &r.usage {
            self.usage = Some(u.usage());
        }
        let status = r.status.as_deref().or(status);
        if status == Some("failed") || r.error.as_ref().is_some_and(|e| !e.is_null()) {
            let msg = match &r.error {
                Some(e) if !e.is_null() => error_text(e),
                _ => "the response failed".to_owned(),
            };
            return Err(server_error(&msg));
        }
        let reason = r
            .incomplete_details
            .as_ref()
            .and_then(|d| d.reason.as_deref());
        self.finish_reason = status.map(|s| match s {
            "completed" => "stop".to_owned(),
            "incomplete" => match reason {
                None | Some("max_output_tokens") => "length".to_owned(),
                Some(other) => other.to_owned(),
            },
            other => other.to_owned(),
        });
        Ok(())
    }
}

/// One streamed event; `event` is its SSE event name.
pub(crate) fn on_event(acc: &mut Accum, event: Option<&str>, data: &str) -> Result<Step, Error> {
    if data.trim() == "[DONE]" {
        return Ok(Step::NONE);
    }
    let ev: Event<'_> = match serde_json::from_str(data) {
        Ok(ev) => ev,
        Err(_) if event == Some("error") => return Err(server_error(data)),
        Err(e) => return Err(malformed(&e, data, "event")),
    };
    let kind = ev.kind.as_deref().or(event).unwrap_or("");
    match kind {
        "response.output_text.delta" => {
            let t = text(ev.delta, data, "event")?;
            acc.content.push_str(&t);
            Ok(Step::answer(!t.is_empty()))
        }
        "response.reasoning_text.delta" | "response.reasoning_summary_text.delta" => {
            let t = text(ev.delta, data, "event")?;
            acc.reasoning.push_str(&t);
            Ok(Step::reasoning(!t.is_empty()))
        }
        "response.refusal.delta" | "response.function_call_arguments.delta" => {
            Ok(Step::answer(!text(ev.delta, data, "event")?.is_empty()))
        }
        "response.output_item.added" => match ev.item {
            Some(raw) => {
                let item: Item<'_> = decode(raw, data, "event")?;
                let call = item.kind.as_deref() == Some("function_call")
                    && !text(item.name, data, "event")?.is_empty();
                Ok(Step::answer(call))
            }
            None => Ok(Step::NONE),
        },
        "response.completed" | "response.incomplete" => {
            let status = kind.strip_prefix("response.");
            match ev.response {
                Some(raw) => acc.response_end(&decode(raw, data, "event")?, status)?,
                None => acc.response_end(&Response::default(), status)?,
            }
            Ok(Step::TERMINAL)
        }
        "response.failed" => {
            let r: Response<'_> = match ev.response {
                Some(raw) => decode(raw, data, "event")?,
                None => Response::default(),
            };
            let msg = match &r.error {
                Some(e) if !e.is_null() => error_text(e),
                _ => "the response failed".to_owned(),
            };
            Err(server_error(&msg))
        }
        "error" => {
            let v: serde_json::Value =
                serde_json::from_str(data).map_err(|e| malformed(&e, data, "event"))?;
            // `{"type":"error","code":…,"message":…}` (its `type` says nothing), or an `error`
            // object inside.
            let err = match v.get("error") {
                Some(e) if !e.is_null() => e,
                _ => &v,
            };
            let msg = match err.get("message").and_then(|m| m.as_str()) {
                Some(m) => match err.get("code").and_then(|c| c.as_str()) {
                    Some(code) => format!("{code}: {m}"),
                    None => m.to_owned(),
                },
                None => error_text(err),
            };
            Err(server_error(&msg))
        }
        _ => Ok(Step::NONE),
    }
}

/// A whole (non-streamed) response.
pub(crate) fn on_body(acc: &mut Accum, body: &str) -> Result<Step, Error> {
    let r: Response<'_> =
        serde_json::from_str(body).map_err(|e| malformed(&e, body, "response"))?;
    acc.response_end(&r, None)?;
    let mut step = Step::NONE;
    for item in r.output.iter().flatten() {
        match item.kind.as_deref() {
            Some("message") => {
                for p in parts(item.content, body)? {
                    match p.kind.as_deref() {
                        Some("output_text") => {
                            let t = p.text.as_deref().unwrap_or("");
                            acc.content.push_str(t);
                            step.answer |= !t.is_empty();
                        }
                        Some("refusal") => {
                            step.answer |= p.refusal.as_deref().is_some_and(|t| !t.is_empty());
                        }
                        _ => {}
                    }
                }
            }
            Some("reasoning") => {
                let content = parts(item.content, body)?;
                let summary = parts(item.summary, body)?;
                for p in content.iter().chain(&summary) {
                    if let Some("reasoning_text" | "summary_text") = p.kind.as_deref() {
                        let t = p.text.as_deref().unwrap_or("");
                        acc.reasoning.push_str(t);
                        step.reasoning |= !t.is_empty();
                    }
                }
            }
            Some("function_call") => {
                step.answer |= !text(item.name, body, "response")?.is_empty()
                    || !text(item.arguments, body, "response")?.is_empty();
            }
            _ => {}
        }
    }
    Ok(step)
}

/// The parts of an item's `content` or `summary` (absent or `null`: none).
fn parts<'a>(raw: Option<&'a RawValue>, body: &str) -> Result<Vec<Part<'a>>, Error> {
    match raw {
        None => Ok(Vec::new()),
        Some(r) => Ok(decode::<Option<Vec<Part<'a>>>>(r, body, "response")?.unwrap_or_default()),
    }
}
