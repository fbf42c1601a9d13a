//! OpenAI chat-completions request and response types, and [`Usage`] (shared by every
//! [`crate::Endpoint`]).
//!
//! Requests are plain serde structs; [`ChatRequest::extra`] is a free-form JSON object merged
//! into the body *last*, so a user can override or add any field (a `null` value removes a
//! field). Response chunks are parsed with borrowed strings (see [`crate::stream`]).

use bytes::Bytes;
use serde::{Deserialize, Serialize};

use crate::error::{Error, ErrorKind};

/// The role of a chat message.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Role {
    /// Instructions for the model.
    System,
    /// A user turn (also used for tool observations when replaying traces).
    User,
    /// A model turn.
    Assistant,
    /// A tool result (strict OpenAI validators also want a `tool_call_id`).
    Tool,
}

/// One chat message.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct ChatMessage {
    /// Who speaks.
    pub role: Role,
    /// The text.
    pub content: String,
}

impl ChatMessage {
    /// A message with the given role and text.
    pub fn new(role: Role, content: impl Into<String>) -> Self {
        ChatMessage {
            role,
            content: content.into(),
        }
    }
}

/// `stream_options` of a streaming request.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub struct StreamOptions {
    /// Ask for a final usage-only chunk.
    pub include_usage: bool,
}

/// A `POST /v1/chat/completions` request body.
#[derive(Debug, Clone, Default, PartialEq, Serialize)]
pub struct ChatRequest {
    /// The model name the server expects.
    pub model: String,
    /// The conversation so far.
    pub messages: Vec<ChatMessage>,
    /// Stream the answer as server-sent events.
    pub stream: bool,
    /// Streaming options (usage chunk).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub stream_options: Option<StreamOptions>,
    /// The output cap under its current name.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub max_completion_tokens: Option<u32>,
    /// The output cap under its legacy name (for servers that lack the new one).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub max_tokens: Option<u32>,
    /// vLLM/SGLang/llama.cpp extension: keep generating past end-of-sequence tokens.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub ignore_eos: Option<bool>,
    /// Sampling temperature.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub temperature: Option<f32>,
    /// Free-form fields merged into the body last (they win over everything above; a JSON
    /// `null` removes the field).
    #[serde(skip)]
    pub extra: serde_json::Map<String, serde_json::Value>,
}

impl ChatRequest {
    /// A request for `model` with `messages`, streaming with a usage chunk.
    pub fn new(model: impl Into<String>, messages: Vec<ChatMessage>) -> Self {
        ChatRequest {
            model: model.into(),
            messages,
            stream: true,
            stream_options: Some(StreamOptions {
                include_usage: true,
            }),
            ..Default::default()
        }
    }

    /// Pins the output length: `max_completion_tokens` (or `max_tokens` when `legacy_name`)
    /// plus `ignore_eos`.
    pub fn pin_output(&mut self, tokens: u32, legacy_name: bool) {
        if legacy_name {
            self.max_tokens = Some(tokens);
            self.max_completion_tokens = None;
        } else {
            self.max_completion_tokens = Some(tokens);
            self.max_tokens = None;
        }
        self.ignore_eos = Some(true);
    }

    /// Whether the *final* body asks for a stream (after `extra` is merged).
    pub fn wants_stream(&self) -> bool {
        match self.extra.get("stream") {
            Some(v) => v.as_bool().unwrap_or(false),
            None => self.stream,
        }
    }

    /// Serializes the body, merging [`ChatRequest::extra`] last.
    pub fn to_body(&self) -> Result<Bytes, Error> {
        let bytes = if self.extra.is_empty() {
            serde_json::to_vec(self)
        } else {
            let mut value = serde_json::to_value(self).map_err(|e| {
                Error::new(
                    ErrorKind::InvalidRequest,
                    format!("cannot encode request: {e}"),
                )
            })?;
            if let Some(obj) = value.as_object_mut() {
                for (k, v) in &self.extra {
                    if v.is_null() {
                        obj.remove(k);
                    } else {
                        obj.insert(k.clone(), v.clone());
                    }
                }
            }
            serde_json::to_vec(&value)
        };
        bytes.map(Bytes::from).map_err(|e| {
            Error::new(
                ErrorKind::InvalidRequest,
                format!("cannot encode request: {e}"),
            )
        })
    }
}

/// Token usage as reported by the server, in the same terms for every [`crate::Endpoint`].
///
/// | field | chat, completions | responses | messages |
/// |---|---|---|---|
/// | `prompt_tokens` | `prompt_tokens` | `input_tokens` | `input_tokens + cache_read_input_tokens + cache_creation_input_tokens` |
/// | `completion_tokens` | `completion_tokens` | `output_tokens` | the last `output_tokens` |
/// | `total_tokens` | `total_tokens` | `total_tokens` | not reported |
/// | `cached_tokens` | `prompt_tokens_details.cached_tokens` | `input_tokens_details.cached_tokens` | `cache_read_input_tokens` |
/// | `reasoning_tokens` | `completion_tokens_details.reasoning_tokens` | `output_tokens_details.reasoning_tokens` | not reported |
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct Usage {
    /// Prompt (input) tokens, cached ones included.
    pub prompt_tokens: Option<u64>,
    /// Generated tokens, reasoning ones included.
    pub completion_tokens: Option<u64>,
    /// Prompt plus generated tokens, when the server reports it.
    pub total_tokens: Option<u64>,
    /// Prompt tokens served from the prefix cache.
    pub cached_tokens: Option<u64>,
    /// SGLang `sglext.cached_tokens_details.device`: hits served from device (GPU) memory.
    pub cached_device_tokens: Option<u64>,
    /// SGLang `sglext.cached_tokens_details.host`: hits served from the host (CPU) tier.
    pub cached_host_tokens: Option<u64>,
    /// Generated tokens that were reasoning (part of `completion_tokens`), when the server
    /// reports them (chat: `completion_tokens_details.reasoning_tokens`, responses:
    /// `output_tokens_details.reasoning_tokens`; never for messages).
    #[serde(default)]
    pub reasoning_tokens: Option<u64>,
}

/// Wire shapes, parsed with borrowed strings where possible.
pub(crate) mod wire {
    use std::borrow::Cow;

    use serde::Deserialize;
    use serde::de::IgnoredAny;

    #[derive(Deserialize)]
    pub(crate) struct Chunk<'a> {
        #[serde(borrow, default)]
        pub choices: Option<Choices<'a>>,
        #[serde(default)]
        pub usage: Option<UsageWire>,
        #[serde(default)]
        pub sglext: Option<SglExt>,
        #[serde(default)]
        pub error: Option<serde_json::Value>,
    }

    #[derive(Deserialize)]
    pub(crate) struct Choice<'a> {
        #[serde(default)]
        pub index: u32,
        #[serde(borrow, default)]
        pub delta: Option<Delta<'a>>,
        #[serde(borrow, default)]
        pub message: Option<Delta<'a>>,
        #[serde(borrow, default)]
        pub finish_reason: Option<Cow<'a, str>>,
    }

    #[derive(Deserialize)]
    pub(crate) struct Delta<'a> {
        #[serde(borrow, default)]
        pub content: Option<Cow<'a, str>>,
        #[serde(borrow, default)]
        pub reasoning_content: Option<Cow<'a, str>>,
        /// Some servers (and newer vLLM) name it `reasoning`.
        #[serde(borrow, default)]
        pub reasoning: Option<Cow<'a, str>>,
        #[serde(borrow, default)]
        pub refusal: Option<Cow<'a, str>>,
        #[serde(borrow, default)]
        pub tool_calls: Option<Vec<ToolCall<'a>>>,
    }

    /// Whether an optional text is there and not empty.
    pub(crate) fn some(c: &Option<Cow<'_, str>>) -> bool {
        c.as_deref().is_some_and(|c| !c.is_empty())
    }

    /// A JSON string, borrowed from the input when it has no escapes. (serde borrows a
    /// `Cow<str>` only when it is a field's whole type: an `Option<Cow<str>>` is always
    /// copied; an `Option<Str>` is not.)
    #[derive(Deserialize, Debug)]
    #[serde(transparent)]
    pub(crate) struct Str<'a>(#[serde(borrow)] pub Cow<'a, str>);

    impl std::ops::Deref for Str<'_> {
        type Target = str;
        fn deref(&self) -> &str {
            &self.0
        }
    }

    impl Delta<'_> {
        /// Whether it carries reasoning output: a non-empty `reasoning_content` or
        /// `reasoning`.
        pub(crate) fn has_reasoning(&self) -> bool {
            some(&self.reasoning_content) || some(&self.reasoning)
        }

        /// Whether it carries answer output: text, a refusal or a tool call's name or
        /// arguments.
        pub(crate) fn has_answer(&self) -> bool {
            some(&self.content)
                || some(&self.refusal)
                || self.tool_calls.iter().flatten().any(|t| {
                    t.function
                        .as_ref()
                        .is_some_and(|f| some(&f.name) || some(&f.arguments))
                })
        }
    }

    /// A chunk's `choices`, folded as they are read (no `Vec`, no moves of `Choice`s): whether
    /// any choice carried reasoning or answer output, and choice 0's text, reasoning and finish
    /// reason.
    #[derive(Default)]
    pub(crate) struct Choices<'a> {
        pub has_reasoning: bool,
        pub has_answer: bool,
        pub content: Option<Cow<'a, str>>,
        pub reasoning: Option<Cow<'a, str>>,
        pub finish_reason: Option<Cow<'a, str>>,
    }

    /// Appends `more` to `acc` (a second choice 0 in one chunk, never seen in practice).
    fn join<'a>(acc: &mut Option<Cow<'a, str>>, more: Option<Cow<'a, str>>) {
        match (acc.as_mut(), more) {
            (Some(a), Some(m)) => a.to_mut().push_str(&m),
            (None, m) => *acc = m,
            (Some(_), None) => {}
        }
    }

    impl<'de: 'a, 'a> Deserialize<'de> for Choices<'a> {
        fn deserialize<D: serde::Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
            struct V<'a>(std::marker::PhantomData<&'a ()>);
            impl<'de: 'a, 'a> serde::de::Visitor<'de> for V<'a> {
                type Value = Choices<'a>;
                fn expecting(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
                    f.write_str("an array of choices")
                }
                fn visit_seq<S: serde::de::SeqAccess<'de>>(
                    self,
                    mut seq: S,
                ) -> Result<Choices<'a>, S::Error> {
                    let mut out = Choices::default();
                    while let Some(c) = seq.next_element::<Choice<'a>>()? {
                        let Choice {
                            index,
                            delta,
                            message,
                            finish_reason,
                        } = c;
                        let d = delta.or(message);
                        if let Some(d) = &d {
                            out.has_reasoning |= d.has_reasoning();
                            out.has_answer |= d.has_answer();
                        }
                        if index == 0 {
                            if let Some(d) = d {
                                join(&mut out.content, d.content);
                                join(&mut out.reasoning, d.reasoning_content.or(d.reasoning));
                            }
                            if finish_reason.is_some() {
                                out.finish_reason = finish_reason;
                            }
                        }
                    }
                    Ok(out)
                }
            }
            d.deserialize_seq(V(std::marker::PhantomData))
        }
    }

    #[derive(Deserialize)]
    pub(crate) struct ToolCall<'a> {
        #[serde(borrow, default)]
        pub function: Option<Function<'a>>,
        #[serde(default, rename = "id")]
        pub _id: Option<IgnoredAny>,
    }

    #[derive(Deserialize)]
    pub(crate) struct Function<'a> {
        #[serde(borrow, default)]
        pub name: Option<Cow<'a, str>>,
        #[serde(borrow, default)]
        pub arguments: Option<Cow<'a, str>>,
    }

    #[derive(Deserialize, Default, Debug)]
    pub(crate) struct UsageWire {
        #[serde(default)]
        pub prompt_tokens: Option<u64>,
        #[serde(default)]
        pub completion_tokens: Option<u64>,
        #[serde(default)]
        pub total_tokens: Option<u64>,
        #[serde(default)]
        pub prompt_tokens_details: Option<PromptDetails>,
        #[serde(default)]
        pub completion_tokens_details: Option<CompletionDetails>,
    }

    #[derive(Deserialize, Default, Debug)]
    pub(crate) struct CompletionDetails {
        #[serde(default)]
        pub reasoning_tokens: Option<u64>,
    }

    #[derive(Deserialize, Default, Debug)]
    pub(crate) struct PromptDetails {
        #[serde(default)]
        pub cached_tokens: Option<u64>,
    }

    #[derive(Deserialize, Default)]
    pub(crate) struct SglExt {
        #[serde(default)]
        pub cached_tokens_details: Option<CachedDetails>,
    }

    #[derive(Deserialize, Default)]
    pub(crate) struct CachedDetails {
        #[serde(default)]
        pub device: Option<u64>,
        #[serde(default)]
        pub host: Option<u64>,
    }
}

impl Usage {
    pub(crate) fn from_wire(u: Option<&wire::UsageWire>, ext: Option<&wire::SglExt>) -> Usage {
        let mut out = Usage::default();
        if let Some(u) = u {
            out.prompt_tokens = u.prompt_tokens;
            out.completion_tokens = u.completion_tokens;
            out.total_tokens = u.total_tokens;
            out.cached_tokens = u
                .prompt_tokens_details
                .as_ref()
                .and_then(|d| d.cached_tokens);
            out.reasoning_tokens = u
                .completion_tokens_details
                .as_ref()
                .and_then(|d| d.reasoning_tokens);
        }
        if let Some(d) = ext.and_then(|e| e.cached_tokens_details.as_ref()) {
            out.cached_device_tokens = d.device;
            out.cached_host_tokens = d.host;
        }
        out
    }
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]
    use super::*;

    #[test]
    fn extra_is_merged_last_and_null_removes() {
        let mut r = ChatRequest::new("m", vec![ChatMessage::new(Role::User, "hi")]);
        r.pin_output(32, false);
        r.extra.insert("max_completion_tokens".into(), 7.into());
        r.extra.insert("ignore_eos".into(), serde_json::Value::Null);
        r.extra.insert("top_k".into(), 1.into());
        let v: serde_json::Value = serde_json::from_slice(&r.to_body().unwrap()).unwrap();
        assert_eq!(v["max_completion_tokens"], 7);
        assert!(v.get("ignore_eos").is_none());
        assert_eq!(v["top_k"], 1);
        assert_eq!(v["stream_options"]["include_usage"], true);
        assert_eq!(v["messages"][0]["role"], "user");
    }

    #[test]
    fn legacy_output_cap_name() {
        let mut r = ChatRequest::new("m", vec![]);
        r.pin_output(5, true);
        let v: serde_json::Value = serde_json::from_slice(&r.to_body().unwrap()).unwrap();
        assert_eq!(v["max_tokens"], 5);
        assert!(v.get("max_completion_tokens").is_none());
        assert_eq!(v["ignore_eos"], true);
    }
}
