//! The Anthropic Messages API (`POST /v1/messages`): request parsing, events and bodies.
//!
//! Headers `x-api-key` and `anthropic-version` are accepted and never required.

use bytes::{BufMut, BytesMut};
use http::StatusCode;
use serde::Deserialize;
use serde_json::{Value, json};

use crate::openai::Usage;
use crate::prompt;
use crate::wire::typed_event;
use crate::wire::{Answer, ApiError, GenRequest, Output, Rejected, invalid_json, output_limit};

/// The signature of every simulated thinking block (`signature_delta`, non-streamed blocks).
const SIGNATURE: &str = "YmVuY2gtc2ltIHNpbXVsYXRlZCB0aGlua2luZw==";

/// The fields of a Messages request the simulator reads; others (`thinking`, `temperature`,
/// `tools`, ...) are ignored.
#[derive(Debug, Deserialize)]
struct MessagesRequest {
    #[serde(default)]
    model: Option<String>,
    #[serde(default)]
    max_tokens: Option<i64>,
    #[serde(default)]
    system: Option<Value>,
    messages: Vec<Message>,
    #[serde(default)]
    stream: Option<bool>,
    #[serde(default)]
    ignore_eos: Option<bool>,
}

#[derive(Debug, Deserialize)]
struct Message {
    role: String,
    #[serde(default)]
    content: Option<Content>,
}

/// Message content: a string or content blocks.
#[derive(Debug, Deserialize)]
#[serde(untagged)]
enum Content {
    Text(String),
    Blocks(Vec<Block>),
}

/// A content block: `text`, `tool_use` and `tool_result` render; others (`thinking`,
/// `redacted_thinking`, `image`, ...) add nothing.
#[derive(Debug, Deserialize)]
struct Block {
    #[serde(default, rename = "type")]
    kind: Option<String>,
    #[serde(default)]
    text: Option<String>,
    #[serde(default)]
    name: Option<String>,
    #[serde(default)]
    input: Option<Value>,
    #[serde(default)]
    content: Option<Value>,
}

fn render(system: Option<&Value>, messages: &[Message]) -> String {
    let mut out = String::new();
    if let Some(s) = system {
        prompt::open(&mut out, "system");
        prompt::push_content(&mut out, s);
        prompt::close(&mut out);
    }
    for m in messages {
        prompt::open(&mut out, &m.role);
        match &m.content {
            Some(Content::Text(t)) => out.push_str(t),
            Some(Content::Blocks(blocks)) => {
                for b in blocks {
                    match b.kind.as_deref() {
                        Some("text") => out.push_str(b.text.as_deref().unwrap_or("")),
                        Some("tool_use") => prompt::tool_call(
                            &mut out,
                            b.name.as_deref().unwrap_or(""),
                            b.input.as_ref(),
                        ),
                        Some("tool_result") => prompt::tool_result(&mut out, b.content.as_ref()),
                        _ => {}
                    }
                }
            }
            None => {}
        }
        prompt::close(&mut out);
    }
    out
}

/// Parses a `/v1/messages` body (`max_tokens` is required, as in Anthropic's API).
pub(crate) fn parse(body: &[u8]) -> Result<GenRequest, Rejected> {
    let r: MessagesRequest = serde_json::from_slice(body).map_err(|e| invalid_json(&e))?;
    let stream = r.stream.unwrap_or(false);
    let n = r.messages.iter().filter(|m| m.role == "assistant").count();
    let turn_index = u32::try_from(n).unwrap_or(u32::MAX);
    let reject = |error| Rejected {
        error,
        stream,
        turn_index,
    };
    if r.max_tokens.is_none() {
        return Err(reject(ApiError::bad_request("max_tokens: Field required")));
    }
    if r.messages.is_empty() {
        return Err(reject(ApiError::bad_request(
            "messages: at least one message is required",
        )));
    }
    let max_out = output_limit("max_tokens", r.max_tokens).map_err(reject)?;
    Ok(GenRequest {
        prompt: render(r.system.as_ref(), &r.messages),
        model: r.model,
        max_out,
        max_tokens_only: max_out,
        stream,
        include_usage: false,
        ignore_eos: r.ignore_eos.unwrap_or(false),
        turn_index,
        store: None,
    })
}

/// Anthropic's error body: `{"type":"error","error":{"type","message"}}`.
pub(crate) fn error_json(e: &ApiError) -> Vec<u8> {
    let kind = match e.status {
        StatusCode::NOT_FOUND => "not_found_error",
        StatusCode::TOO_MANY_REQUESTS => "rate_limit_error",
        StatusCode::SERVICE_UNAVAILABLE => "overloaded_error",
        StatusCode::PAYLOAD_TOO_LARGE => "request_too_large",
        s if s.is_server_error() => "api_error",
        _ => "invalid_request_error",
    };
    json!({"type": "error", "error": {"type": kind, "message": e.message}})
        .to_string()
        .into_bytes()
}

fn drop_key(v: &mut Value, key: &str) {
    if let Some(o) = v.as_object_mut() {
        o.remove(key);
    }
}

/// `end_turn` or `max_tokens`.
fn stop_reason(finish: &str) -> &str {
    match finish {
        "stop" => "end_turn",
        "length" => "max_tokens",
        other => other,
    }
}

/// Writes one answer's Messages events, or its message object.
pub(crate) struct MessagesFormat {
    id: String,
    model: String,
    /// The answer starts with a thinking block.
    reasoning: bool,
    /// The answer has a text block.
    answer: bool,
    /// Fault `truncated-usage`: no `usage` in `message_start`, `message_delta` or the body.
    omit_usage: bool,
    /// Fault `no-done`: no `message_stop`.
    omit_terminal: bool,
    /// `event: content_block_delta\ndata: {…"delta":{"type":"thinking_delta","thinking":"`
    thinking_head: String,
    /// `event: content_block_delta\ndata: {…"delta":{"type":"text_delta","text":"`
    text_head: String,
}

const DELTA_TAIL: &[u8] = b"\"}}\n\n";

impl MessagesFormat {
    pub(crate) fn new(a: &Answer<'_>) -> Self {
        let head = |index: u32, kind: &str, field: &str| {
            format!(
                "event: content_block_delta\ndata: {{\"type\":\"content_block_delta\",\
                 \"index\":{index},\"delta\":{{\"type\":\"{kind}\",\"{field}\":\""
            )
        };
        Self {
            id: format!("msg_{}", a.id_hex),
            model: a.model.to_owned(),
            reasoning: a.reasoning,
            answer: a.answer,
            omit_usage: a.omit_usage,
            omit_terminal: a.omit_terminal,
            thinking_head: if a.reasoning {
                head(0, "thinking_delta", "thinking")
            } else {
                String::new()
            },
            text_head: head(u32::from(a.reasoning), "text_delta", "text"),
        }
    }

    fn text_index(&self) -> u32 {
        u32::from(self.reasoning)
    }

    fn usage_json(usage: Usage, output_tokens: u32) -> Value {
        json!({
            "input_tokens": usage.prompt_tokens.saturating_sub(usage.cached_tokens),
            "cache_creation_input_tokens": 0,
            "cache_read_input_tokens": usage.cached_tokens,
            "output_tokens": output_tokens,
        })
    }

    /// `message_start`, the first block's `content_block_start`, `ping`.
    pub(crate) fn begin(&mut self, buf: &mut BytesMut, usage: Usage) {
        let mut start = json!({"message": {
            "id": self.id,
            "type": "message",
            "role": "assistant",
            "model": self.model,
            "content": [],
            "stop_reason": null,
            "stop_sequence": null,
            "usage": Self::usage_json(usage, 1),
        }});
        if self.omit_usage {
            drop_key(&mut start["message"], "usage");
        }
        typed_event(buf, "message_start", &start, None);
        let block = if self.reasoning {
            json!({"index": 0, "content_block": {"type": "thinking", "thinking": ""}})
        } else {
            json!({"index": 0, "content_block": {"type": "text", "text": ""}})
        };
        typed_event(buf, "content_block_start", &block, None);
        typed_event(buf, "ping", &json!({}), None);
    }

    /// One `thinking_delta` or `text_delta`.
    pub(crate) fn token(&mut self, buf: &mut BytesMut, word: &str, reasoning: bool) {
        let head = if reasoning {
            &self.thinking_head
        } else {
            &self.text_head
        };
        buf.put_slice(head.as_bytes());
        buf.put_slice(word.as_bytes());
        buf.put_slice(DELTA_TAIL);
    }

    fn close_thinking(buf: &mut BytesMut) {
        let sig = json!({"index": 0, "delta": {"type": "signature_delta", "signature": SIGNATURE}});
        typed_event(buf, "content_block_delta", &sig, None);
        typed_event(buf, "content_block_stop", &json!({"index": 0}), None);
    }

    /// Closes the thinking block and opens the text block.
    pub(crate) fn answer_begins(&mut self, buf: &mut BytesMut) {
        Self::close_thinking(buf);
        let block =
            json!({"index": self.text_index(), "content_block": {"type": "text", "text": ""}});
        typed_event(buf, "content_block_start", &block, None);
    }

    /// Closes the open block, then `message_delta` and `message_stop` (not under the fault
    /// `no-done`).
    pub(crate) fn end(&mut self, buf: &mut BytesMut, usage: Usage, finish: &str) {
        if self.answer {
            let stop = json!({"index": self.text_index()});
            typed_event(buf, "content_block_stop", &stop, None);
        } else if self.reasoning {
            Self::close_thinking(buf);
        }
        let mut delta = json!({
            "delta": {"stop_reason": stop_reason(finish), "stop_sequence": null},
            "usage": {"output_tokens": usage.completion_tokens},
        });
        if self.omit_usage {
            drop_key(&mut delta, "usage");
        }
        typed_event(buf, "message_delta", &delta, None);
        if !self.omit_terminal {
            typed_event(buf, "message_stop", &json!({}), None);
        }
    }

    /// The non-streamed message object.
    pub(crate) fn body(&self, usage: Usage, finish: &str, out: Output<'_>) -> Vec<u8> {
        let mut content = Vec::new();
        if self.reasoning {
            content.push(
                json!({"type": "thinking", "thinking": out.reasoning, "signature": SIGNATURE}),
            );
        }
        if self.answer {
            content.push(json!({"type": "text", "text": out.text}));
        }
        let mut v = json!({
            "id": self.id,
            "type": "message",
            "role": "assistant",
            "model": self.model,
            "content": content,
            "stop_reason": stop_reason(finish),
            "stop_sequence": null,
            "usage": Self::usage_json(usage, usage.completion_tokens),
        });
        if self.omit_usage {
            drop_key(&mut v, "usage");
        }
        v.to_string().into_bytes()
    }
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use super::*;

    #[test]
    fn blocks_render_and_thinking_adds_nothing() {
        let r = parse(
            br#"{"model":"m","max_tokens":8,"system":[{"type":"text","text":"sys"}],
                "thinking":{"type":"enabled","budget_tokens":1024},
                "messages":[{"role":"user","content":"q1"},
                {"role":"assistant","content":[{"type":"thinking","thinking":"hmm","signature":"s"},
                  {"type":"text","text":" a1"},{"type":"tool_use","id":"t1","name":"f","input":{"x":1}}]},
                {"role":"user","content":[{"type":"tool_result","tool_use_id":"t1","content":"42"},
                  {"type":"text","text":"q2"}]}]}"#,
        )
        .unwrap();
        assert_eq!(
            r.prompt,
            "<|system|>\nsys\n<|user|>\nq1\n<|assistant|>\n a1<tool_call>f {\"x\":1}</tool_call>\n\
             <|user|>\n<tool_result>42</tool_result>q2\n"
        );
        assert_eq!(r.turn_index, 1);
        assert_eq!(r.max_out, Some(8));
        // Resent without the thinking block and with plain strings: the same text.
        let plain = parse(
            br#"{"max_tokens":8,"system":"sys","messages":[{"role":"user","content":"q1"},
                {"role":"assistant","content":[{"type":"text","text":" a1"},
                  {"type":"tool_use","id":"t1","name":"f","input":{"x":1}}]},
                {"role":"user","content":[{"type":"tool_result","tool_use_id":"t1",
                  "content":[{"type":"text","text":"42"}]},{"type":"text","text":"q2"}]}]}"#,
        )
        .unwrap();
        assert_eq!(r.prompt, plain.prompt);
    }

    #[test]
    fn max_tokens_is_required() {
        let e =
            parse(br#"{"messages":[{"role":"user","content":"x"}],"stream":true}"#).unwrap_err();
        assert_eq!(e.error.status, StatusCode::BAD_REQUEST);
        assert!(e.stream);
        let v: Value = serde_json::from_slice(&error_json(&e.error)).unwrap();
        assert_eq!(
            v,
            json!({"type": "error", "error": {"type": "invalid_request_error",
                   "message": "max_tokens: Field required"}})
        );
    }
}
