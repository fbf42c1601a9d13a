//! OpenAI chat completions and legacy completions: request parsing, chunk and body formatting,
//! and the vLLM-shaped error body.

use std::io::Write as _;

use bytes::{BufMut, BytesMut};
use http::StatusCode;
use serde::Deserialize;
use serde_json::{Value, json};

use crate::config::Flavor;
use crate::prompt;
use crate::wire::{GenRequest, Output, Rejected, invalid_json, output_limit};

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
        prompt::open(&mut out, &m.role);
        match &m.content {
            Some(Content::Text(t)) => out.push_str(t),
            Some(Content::Parts(parts)) => {
                for t in parts.iter().filter_map(|p| p.text.as_deref()) {
                    out.push_str(t);
                }
            }
            None => {}
        }
        prompt::close(&mut out);
    }
    out
}

/// Parses a `/v1/chat/completions` body.
pub(crate) fn parse_chat(body: &[u8]) -> Result<GenRequest, Rejected> {
    let r: ChatRequest = serde_json::from_slice(body).map_err(|e| invalid_json(&e))?;
    let stream = r.stream.unwrap_or(false);
    let turn_index = r.turn_index();
    let reject = |error| Rejected {
        error,
        stream,
        turn_index,
    };
    if r.messages.is_empty() {
        return Err(reject(crate::wire::ApiError::bad_request(
            "messages must not be empty",
        )));
    }
    let max_out = output_limit("max_tokens", r.max_out()).map_err(reject)?;
    let max_tokens_only = output_limit("max_tokens", r.max_tokens).map_err(reject)?;
    Ok(GenRequest {
        prompt: render_prompt(&r.messages),
        max_out,
        max_tokens_only,
        stream,
        include_usage: include_usage(r.stream_options.as_ref()),
        ignore_eos: r.ignore_eos.unwrap_or(false),
        turn_index,
        store: None,
        model: r.model,
    })
}

fn include_usage(o: Option<&StreamOptions>) -> bool {
    o.and_then(|o| o.include_usage).unwrap_or(false)
}

/// The fields of a legacy completions request the simulator reads; others are ignored.
#[derive(Debug, Deserialize)]
pub(crate) struct CompletionRequest {
    #[serde(default)]
    pub(crate) model: Option<String>,
    pub(crate) prompt: PromptText,
    #[serde(default)]
    pub(crate) stream: Option<bool>,
    #[serde(default)]
    pub(crate) stream_options: Option<StreamOptions>,
    #[serde(default)]
    pub(crate) max_tokens: Option<i64>,
    #[serde(default)]
    pub(crate) ignore_eos: Option<bool>,
}

/// A completions prompt: a string or a list of strings (the first is used).
#[derive(Debug, Deserialize)]
#[serde(untagged)]
pub(crate) enum PromptText {
    Text(String),
    List(Vec<String>),
}

/// Parses a `/v1/completions` body. The prompt is used as it is (no roles): a client
/// continuing a text appends the answer and its next input, so the prefix cache hits.
pub(crate) fn parse_completion(body: &[u8]) -> Result<GenRequest, Rejected> {
    let r: CompletionRequest = serde_json::from_slice(body).map_err(|e| invalid_json(&e))?;
    let stream = r.stream.unwrap_or(false);
    let reject = |error| Rejected {
        error,
        stream,
        turn_index: 0,
    };
    let prompt = match r.prompt {
        PromptText::Text(t) => t,
        PromptText::List(list) => list.into_iter().next().ok_or_else(|| {
            reject(crate::wire::ApiError::bad_request(
                "prompt must not be empty",
            ))
        })?,
    };
    let max_out = output_limit("max_tokens", r.max_tokens).map_err(reject)?;
    Ok(GenRequest {
        prompt,
        max_out,
        max_tokens_only: max_out,
        stream,
        include_usage: include_usage(r.stream_options.as_ref()),
        ignore_eos: r.ignore_eos.unwrap_or(false),
        turn_index: 0,
        store: None,
        model: r.model,
    })
}

/// Token counts of a finished (or aborted) request.
#[derive(Clone, Copy, Debug, Default)]
pub(crate) struct Usage {
    pub(crate) prompt_tokens: u32,
    pub(crate) completion_tokens: u32,
    pub(crate) cached_tokens: u32,
    /// Completion tokens that were reasoning.
    pub(crate) reasoning_tokens: u32,
}

impl Usage {
    fn to_json(self) -> Value {
        let mut v = json!({
            "prompt_tokens": self.prompt_tokens,
            "total_tokens": u64::from(self.prompt_tokens) + u64::from(self.completion_tokens),
            "completion_tokens": self.completion_tokens,
            "prompt_tokens_details": {"cached_tokens": self.cached_tokens},
        });
        if self.reasoning_tokens > 0 {
            v["completion_tokens_details"] = json!({"reasoning_tokens": self.reasoning_tokens});
        }
        v
    }
}

fn sglext(cached: u32) -> Value {
    json!({"cached_tokens_details": {"device": cached, "host": 0}})
}

/// Chat chunks or legacy text-completion chunks.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum ChunkKind {
    /// `chat.completion.chunk` with `delta`s.
    Chat,
    /// `text_completion` with `text`.
    Text,
}

/// Preformatted pieces of one request's SSE chunks, so each token only splices its text.
pub(crate) struct ChunkFormat {
    kind: ChunkKind,
    id: String,
    created: u64,
    model: String,
    /// `"id":…,"object":"chat.completion.chunk","created":…,"model":…`
    header: String,
    /// `data: {<header>,"choices":[{"index":0,"delta":{"content":"` (chat) or
    /// `data: {<header>,"choices":[{"index":0,"text":"` (text)
    token_head: String,
    /// `data: {<header>,"choices":[{"index":0,"delta":{"reasoning_content":"` (chat with
    /// reasoning; empty otherwise)
    reasoning_head: String,
    flavor: Flavor,
}

const TOKEN_TAIL: &[u8] = b"\"},\"logprobs\":null,\"finish_reason\":null}]}\n\n";
const FINISH_TAIL: &[u8] = b"\"},\"logprobs\":null,\"finish_reason\":\"";
const TEXT_TOKEN_TAIL: &[u8] = b"\",\"logprobs\":null,\"finish_reason\":null}]}\n\n";
const TEXT_FINISH_TAIL: &[u8] = b"\",\"logprobs\":null,\"finish_reason\":\"";

impl ChunkFormat {
    /// Chunks of completion `id` created at `created` (Unix seconds) by `model`; `reasoning`
    /// when its first tokens are reasoning (chat only).
    pub(crate) fn new(
        kind: ChunkKind,
        id: String,
        created: u64,
        model: &str,
        flavor: Flavor,
        reasoning: bool,
    ) -> Self {
        let object = match kind {
            ChunkKind::Chat => "chat.completion.chunk",
            ChunkKind::Text => "text_completion",
        };
        let header = format!(
            "\"id\":{},\"object\":\"{object}\",\"created\":{created},\"model\":{}",
            json_str(&id),
            json_str(model)
        );
        let choice = format!("data: {{{header},\"choices\":[{{\"index\":0,");
        let (token_head, reasoning_head) = match kind {
            ChunkKind::Chat => (
                format!("{choice}\"delta\":{{\"content\":\""),
                if reasoning {
                    format!("{choice}\"delta\":{{\"reasoning_content\":\"")
                } else {
                    String::new()
                },
            ),
            ChunkKind::Text => (format!("{choice}\"text\":\""), String::new()),
        };
        Self {
            kind,
            id,
            created,
            model: model.to_owned(),
            header,
            token_head,
            reasoning_head,
            flavor,
        }
    }

    /// Chat: the first chunk, `delta: {"role":"assistant","content":""}`; text: nothing.
    pub(crate) fn begin(&self, buf: &mut BytesMut) {
        if self.kind == ChunkKind::Chat {
            self.role(buf);
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
    #[inline]
    pub(crate) fn token(&self, buf: &mut BytesMut, word: &str, finish: Option<&str>) {
        self.chunk(&self.token_head, buf, word, finish);
    }

    /// One `delta.reasoning_content` chunk (chat; a plain token for text completions).
    pub(crate) fn reasoning(&self, buf: &mut BytesMut, word: &str, finish: Option<&str>) {
        let head = if self.reasoning_head.is_empty() {
            &self.token_head
        } else {
            &self.reasoning_head
        };
        self.chunk(head, buf, word, finish);
    }

    #[inline]
    fn chunk(&self, head: &str, buf: &mut BytesMut, word: &str, finish: Option<&str>) {
        buf.put_slice(head.as_bytes());
        buf.put_slice(word.as_bytes());
        let (tail, finish_tail) = match self.kind {
            ChunkKind::Chat => (TOKEN_TAIL, FINISH_TAIL),
            ChunkKind::Text => (TEXT_TOKEN_TAIL, TEXT_FINISH_TAIL),
        };
        match finish {
            None => buf.put_slice(tail),
            Some(reason) => {
                buf.put_slice(finish_tail);
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
            ",\"choices\":[],\"usage\":{{\"completion_tokens\":{},",
            usage.completion_tokens
        );
        if usage.reasoning_tokens > 0 {
            let _ = write!(
                w,
                "\"completion_tokens_details\":{{\"reasoning_tokens\":{}}},",
                usage.reasoning_tokens
            );
        }
        let _ = write!(
            w,
            "\"prompt_tokens\":{},\"prompt_tokens_details\":{{\"cached_tokens\":{}}},\
             \"total_tokens\":{total}}}",
            usage.prompt_tokens, usage.cached_tokens
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

    /// The non-streamed `chat.completion` or `text_completion` object (without `usage` unless
    /// `with_usage`).
    pub(crate) fn body(
        &self,
        usage: Usage,
        finish: &str,
        out: Output<'_>,
        with_usage: bool,
    ) -> Vec<u8> {
        let mut v = match self.kind {
            ChunkKind::Chat => {
                let mut message = json!({"role": "assistant", "content": out.text});
                if !out.reasoning.is_empty() {
                    message["reasoning_content"] = out.reasoning.into();
                }
                json!({
                    "id": self.id,
                    "object": "chat.completion",
                    "created": self.created,
                    "model": self.model,
                    "choices": [{
                        "index": 0,
                        "message": message,
                        "logprobs": null,
                        "finish_reason": finish,
                    }],
                    "usage": usage.to_json(),
                })
            }
            ChunkKind::Text => json!({
                "id": self.id,
                "object": "text_completion",
                "created": self.created,
                "model": self.model,
                "choices": [{
                    "index": 0,
                    "text": out.text,
                    "logprobs": null,
                    "finish_reason": finish,
                }],
                "usage": usage.to_json(),
            }),
        };
        if !with_usage {
            if let Some(o) = v.as_object_mut() {
                o.remove("usage");
            }
        } else if self.flavor == Flavor::Sglang {
            v["sglext"] = sglext(usage.cached_tokens);
        }
        v.to_string().into_bytes()
    }
}

/// An OpenAI-shaped error body (vLLM's: `code` is the status).
pub(crate) fn error_json(status: u16, kind: &str, message: &str) -> Vec<u8> {
    json!({"error": {"message": message, "type": kind, "param": null, "code": status}})
        .to_string()
        .into_bytes()
}

/// vLLM's error `type` for a status.
pub(crate) fn error_kind(status: StatusCode) -> &'static str {
    match status {
        StatusCode::BAD_REQUEST => "BadRequestError",
        StatusCode::NOT_FOUND => "NotFoundError",
        StatusCode::METHOD_NOT_ALLOWED => "MethodNotAllowed",
        StatusCode::SERVICE_UNAVAILABLE => "ServiceUnavailableError",
        _ => "InternalServerError",
    }
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
        let f = ChunkFormat::new(
            ChunkKind::Chat,
            "chatcmpl-1".into(),
            17,
            "m\"x",
            Flavor::Sglang,
            true,
        );
        let mut buf = BytesMut::new();
        f.role(&mut buf);
        f.reasoning(&mut buf, " hmm", None);
        f.token(&mut buf, " lorem", None);
        f.token(&mut buf, " ipsum", Some("length"));
        f.usage(
            &mut buf,
            Usage {
                prompt_tokens: 3,
                completion_tokens: 3,
                cached_tokens: 0,
                reasoning_tokens: 1,
            },
        );
        ChunkFormat::done(&mut buf);
        let text = std::str::from_utf8(&buf).unwrap();
        let events: Vec<&str> = text.split("\n\n").filter(|e| !e.is_empty()).collect();
        assert_eq!(events.len(), 6);
        let parsed: Vec<Value> = events[..5]
            .iter()
            .map(|e| serde_json::from_str(e.strip_prefix("data: ").unwrap()).unwrap())
            .collect();
        assert_eq!(parsed[0]["choices"][0]["delta"]["role"], "assistant");
        assert_eq!(
            parsed[1]["choices"][0]["delta"]["reasoning_content"],
            " hmm"
        );
        assert!(parsed[1]["choices"][0]["delta"].get("content").is_none());
        assert_eq!(parsed[2]["choices"][0]["delta"]["content"], " lorem");
        assert_eq!(parsed[3]["choices"][0]["finish_reason"], "length");
        assert_eq!(parsed[4]["usage"]["total_tokens"], 6);
        assert_eq!(
            parsed[4]["usage"]["completion_tokens_details"]["reasoning_tokens"],
            1
        );
        assert_eq!(parsed[4]["sglext"]["cached_tokens_details"]["host"], 0);
        assert_eq!(parsed[1]["model"], "m\"x");
        assert_eq!(events[5], "data: [DONE]");
    }

    #[test]
    fn text_completion_chunks() {
        let f = ChunkFormat::new(
            ChunkKind::Text,
            "cmpl-1".into(),
            17,
            "m",
            Flavor::Vllm,
            false,
        );
        let mut buf = BytesMut::new();
        f.begin(&mut buf);
        assert!(buf.is_empty(), "no role chunk");
        f.reasoning(&mut buf, " a", None);
        f.token(&mut buf, " b", Some("stop"));
        let text = std::str::from_utf8(&buf).unwrap();
        let parsed: Vec<Value> = text
            .split("\n\n")
            .filter(|e| !e.is_empty())
            .map(|e| serde_json::from_str(e.strip_prefix("data: ").unwrap()).unwrap())
            .collect();
        assert_eq!(parsed.len(), 2);
        assert_eq!(parsed[0]["object"], "text_completion");
        assert_eq!(parsed[0]["choices"][0]["text"], " a");
        assert!(parsed[0]["choices"][0]["finish_reason"].is_null());
        assert_eq!(parsed[1]["choices"][0]["text"], " b");
        assert_eq!(parsed[1]["choices"][0]["finish_reason"], "stop");
        let body: Value = serde_json::from_slice(&f.body(
            Usage::default(),
            "stop",
            Output {
                reasoning: "",
                text: " a b",
            },
            true,
        ))
        .unwrap();
        assert_eq!(body["object"], "text_completion");
        assert_eq!(body["choices"][0]["text"], " a b");
    }

    #[test]
    fn the_hand_written_usage_chunk_equals_the_json_objects() {
        for reasoning_tokens in [0, 7] {
            let usage = Usage {
                prompt_tokens: 4_000_000_000,
                completion_tokens: 500_000_000,
                cached_tokens: 1234,
                reasoning_tokens,
            };
            for flavor in [Flavor::Vllm, Flavor::Sglang] {
                let f = ChunkFormat::new(ChunkKind::Chat, "id".into(), 1, "m", flavor, false);
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
                assert_eq!(
                    v["usage"].get("completion_tokens_details").is_some(),
                    reasoning_tokens > 0
                );
                assert_eq!(v["choices"], json!([]));
                match flavor {
                    Flavor::Sglang => assert_eq!(v["sglext"], sglext(1234)),
                    _ => assert!(v.get("sglext").is_none(), "{v}"),
                }
            }
        }
    }

    #[test]
    fn parse_errors_keep_how_the_request_asked_to_be_served() {
        let e = parse_chat(br#"{"messages":[],"stream":true}"#).unwrap_err();
        assert!(e.stream);
        assert_eq!(e.error.message, "messages must not be empty");
        let e = parse_chat(br#"{"messages":[{"role":"user","content":"x"}],"max_tokens":0}"#)
            .unwrap_err();
        assert_eq!(e.error.message, "max_tokens must be at least 1, got 0");
        let r = parse_completion(br#"{"prompt":["first","second"],"max_tokens":3}"#).unwrap();
        assert_eq!(r.prompt, "first");
        assert_eq!(r.max_out, Some(3));
        assert!(parse_completion(br#"{"prompt":[]}"#).is_err());
    }
}
