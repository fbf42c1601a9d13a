//! OpenAI chat-completions request parsing and response/chunk formatting.

use std::io::Write as _;

use bytes::{BufMut, BytesMut};
use serde::Deserialize;
use serde_json::{Value, json};

use crate::config::Flavor;

/// The fields of a chat-completions request the simulator reads; others are ignored.
#[derive(Debug, Deserialize)]
pub(crate) struct ChatRequest {
    #[serde(default)]
    pub(crate) model: Option<String>,
    pub(crate) messages: Vec<Message>,
    #[serde(default)]
    pub(crate) stream: Option<bool>,
    #[serde(default)]
    pub(crate) stream_options: Option<StreamOptions>,
    #[serde(default)]
    pub(crate) max_completion_tokens: Option<i64>,
    #[serde(default)]
    pub(crate) max_tokens: Option<i64>,
    #[serde(default)]
    pub(crate) ignore_eos: Option<bool>,
}

/// `stream_options`.
#[derive(Debug, Deserialize)]
pub(crate) struct StreamOptions {
    #[serde(default)]
    pub(crate) include_usage: Option<bool>,
}

/// One chat message.
#[derive(Debug, Deserialize)]
pub(crate) struct Message {
    pub(crate) role: String,
    #[serde(default)]
    pub(crate) content: Option<Content>,
}

/// Message content: a string or an array of parts.
#[derive(Debug, Deserialize)]
#[serde(untagged)]
pub(crate) enum Content {
    Text(String),
    Parts(Vec<Part>),
}

/// A content part; only `text` parts contribute to the prompt.
#[derive(Debug, Deserialize)]
pub(crate) struct Part {
    #[serde(default)]
    pub(crate) text: Option<String>,
}

impl ChatRequest {
    /// Number of assistant messages (the turn index of a multi-turn conversation).
    pub(crate) fn turn_index(&self) -> u32 {
        let n = self
            .messages
            .iter()
            .filter(|m| m.role == "assistant")
            .count();
        u32::try_from(n).unwrap_or(u32::MAX)
    }

    /// The requested completion limit: `max_completion_tokens` wins over `max_tokens`.
    pub(crate) fn max_out(&self) -> Option<i64> {
        self.max_completion_tokens.or(self.max_tokens)
    }
}

/// Renders messages into one prompt text: `<|role|>\n` + content + `\n` per message.
pub(crate) fn render_prompt(messages: &[Message]) -> String {
    let mut out = String::new();
    for m in messages {
        out.push_str("<|");
        out.push_str(&m.role);
        out.push_str("|>\n");
        match &m.content {
            Some(Content::Text(t)) => out.push_str(t),
            Some(Content::Parts(parts)) => {
                for t in parts.iter().filter_map(|p| p.text.as_deref()) {
                    out.push_str(t);
                }
            }
            None => {}
        }
        out.push('\n');
    }
    out
}

/// Token counts of a finished (or aborted) request.
#[derive(Clone, Copy, Debug, Default)]
pub(crate) struct Usage {
    pub(crate) prompt_tokens: u32,
    pub(crate) completion_tokens: u32,
    pub(crate) cached_tokens: u32,
}

impl Usage {
    fn to_json(self) -> Value {
        json!({
            "prompt_tokens": self.prompt_tokens,
            "total_tokens": u64::from(self.prompt_tokens) + u64::from(self.completion_tokens),
            "completion_tokens": self.completion_tokens,
            "prompt_tokens_details": {"cached_tokens": self.cached_tokens},
        })
    }
}

fn sglext(cached: u32) -> Value {
    json!({"cached_tokens_details": {"device": cached, "host": 0}})
}

/// Preformatted pieces of one request's SSE chunks, so each token only splices its text.
pub(crate) struct ChunkFormat {
    /// `"id":…,"object":"chat.completion.chunk","created":…,"model":…`
    header: String,
    /// `data: {<header>,"choices":[{"index":0,"delta":{"content":"`
    token_head: String,
    flavor: Flavor,
}

const TOKEN_TAIL: &[u8] = b"\"},\"logprobs\":null,\"finish_reason\":null}]}\n\n";

impl ChunkFormat {
    /// Chunks of completion `id` created at `created` (Unix seconds) by `model`.
    pub(crate) fn new(id: &str, created: u64, model: &str, flavor: Flavor) -> Self {
        let header = format!(
            "\"id\":{},\"object\":\"chat.completion.chunk\",\"created\":{created},\"model\":{}",
            json_str(id),
            json_str(model)
        );
        let token_head =
            format!("data: {{{header},\"choices\":[{{\"index\":0,\"delta\":{{\"content\":\"");
        Self {
            header,
            token_head,
            flavor,
        }
    }

    /// The first chunk: `delta: {"role":"assistant","content":""}`.
    pub(crate) fn role(&self, buf: &mut BytesMut) {
        buf.put_slice(b"data: {");
        buf.put_slice(self.header.as_bytes());
        buf.put_slice(
            b",\"choices\":[{\"index\":0,\"delta\":{\"role\":\"assistant\",\"content\":\"\"},\
              \"logprobs\":null,\"finish_reason\":null}]}\n\n",
        );
    }

    /// One content chunk carrying `word` (which must need no JSON escaping), with
    /// `finish_reason` when it is the last.
    pub(crate) fn token(&self, buf: &mut BytesMut, word: &str, finish: Option<&str>) {
        buf.put_slice(self.token_head.as_bytes());
        buf.put_slice(word.as_bytes());
        match finish {
            None => buf.put_slice(TOKEN_TAIL),
            Some(reason) => {
                buf.put_slice(b"\"},\"logprobs\":null,\"finish_reason\":\"");
                buf.put_slice(reason.as_bytes());
                buf.put_slice(b"\"}]}\n\n");
            }
        }
    }

    /// The usage chunk (`"choices":[]`), for `stream_options.include_usage`.
    pub(crate) fn usage(&self, buf: &mut BytesMut, usage: Usage) {
        buf.put_slice(b"data: {");
        buf.put_slice(self.header.as_bytes());
        // Written by hand (numbers only), with the keys in the order of `Usage::to_json`.
        let total = u64::from(usage.prompt_tokens) + u64::from(usage.completion_tokens);
        let mut w = buf.writer();
        let _ = write!(
            w,
            ",\"choices\":[],\"usage\":{{\"completion_tokens\":{},\"prompt_tokens\":{},\
             \"prompt_tokens_details\":{{\"cached_tokens\":{}}},\"total_tokens\":{total}}}",
            usage.completion_tokens, usage.prompt_tokens, usage.cached_tokens
        );
        if self.flavor == Flavor::Sglang {
            let _ = write!(
                w,
                ",\"sglext\":{{\"cached_tokens_details\":{{\"device\":{},\"host\":0}}}}",
                usage.cached_tokens
            );
        }
        w.into_inner().put_slice(b"}\n\n");
    }

    /// The terminating `data: [DONE]` event.
    pub(crate) fn done(buf: &mut BytesMut) {
        buf.put_slice(b"data: [DONE]\n\n");
    }
}

/// A non-streaming `chat.completion` object.
pub(crate) fn completion_json(
    id: &str,
    created: u64,
    model: &str,
    content: &str,
    finish: &str,
    usage: Usage,
    flavor: Flavor,
) -> Vec<u8> {
    let mut v = json!({
        "id": id,
        "object": "chat.completion",
        "created": created,
        "model": model,
        "choices": [{
            "index": 0,
            "message": {"role": "assistant", "content": content},
            "logprobs": null,
            "finish_reason": finish,
        }],
        "usage": usage.to_json(),
    });
    if flavor == Flavor::Sglang {
        v["sglext"] = sglext(usage.cached_tokens);
    }
    v.to_string().into_bytes()
}

/// An OpenAI-shaped error body.
pub(crate) fn error_json(status: u16, kind: &str, message: &str) -> Vec<u8> {
    json!({"error": {"message": message, "type": kind, "param": null, "code": status}})
        .to_string()
        .into_bytes()
}

fn json_str(s: &str) -> String {
    Value::from(s).to_string()
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use super::*;

    #[test]
    fn parses_string_and_part_content() {
        let r: ChatRequest = serde_json::from_str(
            r#"{"model":"m","messages":[{"role":"system","content":"be brief"},
            {"role":"user","content":[{"type":"text","text":"hi "},{"type":"text","text":"there"}]},
            {"role":"assistant","content":null},{"role":"user","content":"again"}],
            "max_tokens":5,"max_completion_tokens":7,"extra":{"x":1}}"#,
        )
        .unwrap();
        assert_eq!(r.max_out(), Some(7));
        assert_eq!(r.turn_index(), 1);
        assert_eq!(
            render_prompt(&r.messages),
            "<|system|>\nbe brief\n<|user|>\nhi there\n<|assistant|>\n\n<|user|>\nagain\n"
        );
    }

    #[test]
    fn chunks_are_valid_json_events() {
        let f = ChunkFormat::new("chatcmpl-1", 17, "m\"x", Flavor::Sglang);
        let mut buf = BytesMut::new();
        f.role(&mut buf);
        f.token(&mut buf, " lorem", None);
        f.token(&mut buf, " ipsum", Some("length"));
        f.usage(
            &mut buf,
            Usage {
                prompt_tokens: 3,
                completion_tokens: 2,
                cached_tokens: 0,
            },
        );
        ChunkFormat::done(&mut buf);
        let text = std::str::from_utf8(&buf).unwrap();
        let events: Vec<&str> = text.split("\n\n").filter(|e| !e.is_empty()).collect();
        assert_eq!(events.len(), 5);
        let parsed: Vec<Value> = events[..4]
            .iter()
            .map(|e| serde_json::from_str(e.strip_prefix("data: ").unwrap()).unwrap())
            .collect();
        assert_eq!(parsed[0]["choices"][0]["delta"]["role"], "assistant");
        assert_eq!(parsed[1]["choices"][0]["delta"]["content"], " lorem");
        assert_eq!(parsed[2]["choices"][0]["finish_reason"], "length");
        assert_eq!(parsed[3]["usage"]["total_tokens"], 5);
        assert_eq!(parsed[3]["sglext"]["cached_tokens_details"]["host"], 0);
        assert_eq!(parsed[1]["model"], "m\"x");
        assert_eq!(events[4], "data: [DONE]");
    }

    #[test]
    fn the_hand_written_usage_chunk_equals_the_json_objects() {
        let usage = Usage {
            prompt_tokens: 4_000_000_000,
            completion_tokens: 500_000_000,
            cached_tokens: 1234,
        };
        for flavor in [Flavor::Vllm, Flavor::Sglang] {
            let f = ChunkFormat::new("id", 1, "m", flavor);
            let mut buf = BytesMut::new();
            f.usage(&mut buf, usage);
            let text = std::str::from_utf8(&buf).unwrap();
            let event = text
                .strip_prefix("data: ")
                .unwrap()
                .strip_suffix("\n\n")
                .unwrap();
            let v: Value = serde_json::from_str(event).unwrap();
            assert_eq!(v["usage"], usage.to_json(), "{flavor:?}");
            assert_eq!(v["usage"]["total_tokens"], 4_500_000_000u64);
            assert_eq!(v["choices"], json!([]));
            match flavor {
                Flavor::Sglang => assert_eq!(v["sglext"], sglext(1234)),
                _ => assert!(v.get("sglext").is_none(), "{v}"),
            }
        }
    }
}
