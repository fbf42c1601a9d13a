//! The four generation APIs: one request pipeline (in `server.rs`), four wire formats.
//!
//! An [`Api`] turns a request body into a [`GenRequest`] (the rendered prompt, the output limit,
//! streaming options) and builds the [`Wire`] that writes the answer in its own shape; errors
//! are written in its own error shape ([`Api::error_body`]). Everything between (token counting,
//! prefix-cache keys, admission, the token schedule, the request log, metrics, aborts) is shared.

use std::sync::Arc;

use bytes::BytesMut;
use http::StatusCode;

use crate::anthropic::{self, MessagesFormat};
use crate::config::Flavor;
use crate::openai::{self, ChunkFormat, ChunkKind, Usage};
use crate::responses::{self, ResponsesFormat};
use crate::store::{Draft, Stored};

/// A generation endpoint.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Api {
    /// `POST /v1/chat/completions` (OpenAI chat completions, vLLM extensions).
    Chat,
    /// `POST /v1/completions` (legacy text completions).
    Completions,
    /// `POST /v1/responses` (OpenAI Responses API).
    Responses,
    /// `POST /v1/messages` (Anthropic Messages API).
    Messages,
}

/// A request refused with `status`: the message and, for the OpenAI shapes, `param` and `code`.
#[derive(Debug)]
pub(crate) struct ApiError {
    pub(crate) status: StatusCode,
    pub(crate) message: String,
    pub(crate) param: Option<&'static str>,
    pub(crate) code: Option<&'static str>,
}

impl ApiError {
    /// An error without `param` or `code`.
    pub(crate) fn new(status: StatusCode, message: impl Into<String>) -> Self {
        Self {
            status,
            message: message.into(),
            param: None,
            code: None,
        }
    }

    /// A `400`.
    pub(crate) fn bad_request(message: impl Into<String>) -> Self {
        Self::new(StatusCode::BAD_REQUEST, message)
    }
}

/// A request refused while parsing, with how it asked to be served (for its log line).
#[derive(Debug)]
pub(crate) struct Rejected {
    pub(crate) error: ApiError,
    pub(crate) stream: bool,
    pub(crate) turn_index: u32,
}

impl From<ApiError> for Rejected {
    fn from(error: ApiError) -> Self {
        Self {
            error,
            stream: false,
            turn_index: 0,
        }
    }
}

/// What the pipeline needs from a request, whatever its API.
#[derive(Debug, Default)]
pub(crate) struct GenRequest {
    /// Echoed model name.
    pub(crate) model: Option<String>,
    /// The rendered prompt (see `prompt.rs`).
    pub(crate) prompt: String,
    /// The output limit, at least 1 (none: `default_max_tokens`).
    pub(crate) max_out: Option<u32>,
    /// Chat: the limit from `max_tokens` alone, for a server that ignores
    /// `max_completion_tokens` ([`SimConfig::ignore_max_completion_tokens`]); other APIs: the
    /// same as `max_out`.
    ///
    /// [`SimConfig::ignore_max_completion_tokens`]: crate::SimConfig::ignore_max_completion_tokens
    pub(crate) max_tokens_only: Option<u32>,
    pub(crate) stream: bool,
    /// Chat and completions: `stream_options.include_usage`.
    pub(crate) include_usage: bool,
    pub(crate) ignore_eos: bool,
    /// Assistant turns before this request's answer.
    pub(crate) turn_index: u32,
    /// Responses API: what to remember once the answer is complete.
    pub(crate) store: Option<Draft>,
}

/// `Ok(None)` when absent; a `400` naming `name` when below 1.
pub(crate) fn output_limit(name: &str, value: Option<i64>) -> Result<Option<u32>, ApiError> {
    match value {
        Some(n) if n < 1 => Err(ApiError::bad_request(format!(
            "{name} must be at least 1, got {n}"
        ))),
        Some(n) => Ok(Some(u32::try_from(n).unwrap_or(u32::MAX))),
        None => Ok(None),
    }
}

/// `invalid request: <serde error>`.
pub(crate) fn invalid_json(e: &serde_json::Error) -> ApiError {
    ApiError::bad_request(format!("invalid request: {e}"))
}

impl Api {
    /// Every generation endpoint.
    pub(crate) const ALL: [Api; 4] = [Api::Chat, Api::Completions, Api::Responses, Api::Messages];

    /// The endpoint's path.
    pub(crate) fn path(self) -> &'static str {
        match self {
            Api::Chat => "/v1/chat/completions",
            Api::Completions => "/v1/completions",
            Api::Responses => "/v1/responses",
            Api::Messages => "/v1/messages",
        }
    }

    /// The API served at `path`.
    pub(crate) fn from_path(path: &str) -> Option<Api> {
        Api::ALL.into_iter().find(|a| a.path() == path)
    }

    /// Parses a request body; `lookup` finds a stored response (`previous_response_id`).
    pub(crate) fn parse(
        self,
        body: &[u8],
        lookup: impl FnOnce(&str) -> Option<Arc<Stored>>,
    ) -> Result<GenRequest, Rejected> {
        match self {
            Api::Chat => openai::parse_chat(body),
            Api::Completions => openai::parse_completion(body),
            Api::Responses => responses::parse(body, lookup),
            Api::Messages => anthropic::parse(body),
        }
    }

    /// What the context-length error calls the prompt.
    pub(crate) fn prompt_noun(self) -> &'static str {
        match self {
            Api::Chat | Api::Messages => "messages",
            Api::Completions => "prompt",
            Api::Responses => "input",
        }
    }

    /// Whether the API has a shape for reasoning (legacy completions send it as plain text).
    pub(crate) fn has_reasoning_shape(self) -> bool {
        !matches!(self, Api::Completions)
    }

    /// The error body in the API's own shape.
    pub(crate) fn error_body(self, e: &ApiError) -> Vec<u8> {
        match self {
            Api::Chat | Api::Completions => {
                openai::error_json(e.status.as_u16(), openai::error_kind(e.status), &e.message)
            }
            Api::Responses => responses::error_json(e),
            Api::Messages => anthropic::error_json(e),
        }
    }

    /// The formatter of one answer.
    pub(crate) fn wire(self, a: &Answer<'_>) -> Wire {
        let chunks = |kind, id: String| Wire::Chunks {
            fmt: ChunkFormat::new(kind, id, a.created, a.model, a.flavor, a.reasoning),
            include_usage: a.include_usage && !a.omit_usage,
            omit_usage: a.omit_usage,
            omit_terminal: a.omit_terminal,
        };
        match self {
            Api::Chat => chunks(ChunkKind::Chat, format!("chatcmpl-{}", a.id_hex)),
            Api::Completions => chunks(ChunkKind::Text, format!("cmpl-{}", a.id_hex)),
            Api::Responses => Wire::Responses(Box::new(ResponsesFormat::new(a))),
            Api::Messages => Wire::Messages(Box::new(MessagesFormat::new(a))),
        }
    }
}

/// What a formatter knows about its answer before the first token.
#[derive(Debug)]
pub(crate) struct Answer<'a> {
    /// 32 random hex digits: the answer's ids are made of them.
    pub(crate) id_hex: &'a str,
    /// Unix seconds.
    pub(crate) created: u64,
    pub(crate) model: &'a str,
    pub(crate) flavor: Flavor,
    /// It starts with reasoning tokens.
    pub(crate) reasoning: bool,
    /// It has answer tokens after the reasoning.
    pub(crate) answer: bool,
    /// Chat and completions: the usage chunk is sent.
    pub(crate) include_usage: bool,
    /// Fault `truncated-usage`: no usage anywhere (usage chunk, usage objects).
    pub(crate) omit_usage: bool,
    /// Fault `no-done`: the stream ends without its terminal event.
    pub(crate) omit_terminal: bool,
}

/// The produced text of a finished answer.
#[derive(Clone, Copy, Debug)]
pub(crate) struct Output<'a> {
    pub(crate) reasoning: &'a str,
    pub(crate) text: &'a str,
}

/// Writes one answer in its API's shape: SSE events as the tokens come, or a whole body.
pub(crate) enum Wire {
    /// Chat and legacy completions: one `data:` chunk per token, `data: [DONE]` at the end.
    Chunks {
        fmt: ChunkFormat,
        include_usage: bool,
        /// The non-streamed body has no `usage`.
        omit_usage: bool,
        /// No `data: [DONE]`.
        omit_terminal: bool,
    },
    /// Responses API events.
    Responses(Box<ResponsesFormat>),
    /// Anthropic Messages events.
    Messages(Box<MessagesFormat>),
}

impl Wire {
    /// The events sent with the first token, before it (`usage` carries the prompt and cached
    /// tokens).
    pub(crate) fn begin(&mut self, buf: &mut BytesMut, usage: Usage) {
        match self {
            Wire::Chunks { fmt, .. } => fmt.begin(buf),
            Wire::Responses(f) => f.begin(buf),
            Wire::Messages(f) => f.begin(buf, usage),
        }
    }

    /// One token's event; `finish` is set on the last token.
    #[inline]
    pub(crate) fn token(
        &mut self,
        buf: &mut BytesMut,
        word: &str,
        reasoning: bool,
        finish: Option<&str>,
    ) {
        match self {
            Wire::Chunks { fmt, .. } => {
                if reasoning {
                    fmt.reasoning(buf, word, finish);
                } else {
                    fmt.token(buf, word, finish);
                }
            }
            Wire::Responses(f) => f.token(buf, word, reasoning),
            Wire::Messages(f) => f.token(buf, word, reasoning),
        }
    }

    /// Before the first answer token that follows reasoning: close the reasoning, open the
    /// answer (`reasoning` is the whole reasoning text when the format collects it).
    pub(crate) fn answer_begins(&mut self, buf: &mut BytesMut, reasoning: &str) {
        match self {
            Wire::Chunks { .. } => {}
            Wire::Responses(f) => f.answer_begins(buf, reasoning),
            Wire::Messages(f) => f.answer_begins(buf),
        }
    }

    /// After the last token: the closing events (usage, terminal event, `[DONE]`; without the
    /// usage or the terminal event under the faults `truncated-usage` and `no-done`).
    pub(crate) fn end(&mut self, buf: &mut BytesMut, usage: Usage, finish: &str, out: Output<'_>) {
        match self {
            Wire::Chunks {
                fmt,
                include_usage,
                omit_terminal,
                ..
            } => {
                if *include_usage {
                    fmt.usage(buf, usage);
                }
                if !*omit_terminal {
                    ChunkFormat::done(buf);
                }
            }
            Wire::Responses(f) => f.end(buf, usage, finish, out),
            Wire::Messages(f) => f.end(buf, usage, finish),
        }
    }

    /// The non-streamed body.
    pub(crate) fn body(&self, usage: Usage, finish: &str, out: Output<'_>) -> Vec<u8> {
        match self {
            Wire::Chunks {
                fmt, omit_usage, ..
            } => fmt.body(usage, finish, out, !*omit_usage),
            Wire::Responses(f) => f.body(usage, finish, out),
            Wire::Messages(f) => f.body(usage, finish, out),
        }
    }

    /// Whether streaming needs the produced text (the Responses `*.done` events repeat it).
    pub(crate) fn collects_text(&self) -> bool {
        matches!(self, Wire::Responses(_))
    }

    /// The Responses API's response id (`resp_…`).
    pub(crate) fn response_id(&self) -> Option<&str> {
        match self {
            Wire::Responses(f) => Some(f.id()),
            _ => None,
        }
    }
}

/// Writes one SSE event `event: TYPE` whose data is `{"type":TYPE, <fields of data>}` plus
/// `"sequence_number": seq` when given.
pub(crate) fn typed_event(
    buf: &mut BytesMut,
    ty: &str,
    data: &serde_json::Value,
    seq: Option<u64>,
) {
    use bytes::BufMut as _;
    use std::io::Write as _;
    let fields = data.to_string();
    let inner = fields
        .strip_prefix('{')
        .and_then(|f| f.strip_suffix('}'))
        .unwrap_or("");
    let mut w = buf.writer();
    let _ = write!(w, "event: {ty}\ndata: {{\"type\":\"{ty}\"");
    if !inner.is_empty() {
        let _ = write!(w, ",{inner}");
    }
    if let Some(n) = seq {
        let _ = write!(w, ",\"sequence_number\":{n}");
    }
    let _ = w.write_all(b"}\n\n");
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use super::*;
    use serde_json::{Value, json};

    #[test]
    fn paths_round_trip() {
        for api in Api::ALL {
            assert_eq!(Api::from_path(api.path()), Some(api));
        }
        assert_eq!(Api::from_path("/v1/models"), None);
    }

    #[test]
    fn typed_events_put_the_type_first() {
        let mut buf = BytesMut::new();
        typed_event(&mut buf, "a.b", &json!({"x": {"y": 1}}), Some(7));
        typed_event(&mut buf, "ping", &json!({}), None);
        let text = std::str::from_utf8(&buf).unwrap();
        assert_eq!(
            text,
            "event: a.b\ndata: {\"type\":\"a.b\",\"x\":{\"y\":1},\"sequence_number\":7}\n\n\
             event: ping\ndata: {\"type\":\"ping\"}\n\n"
        );
        let data: Value =
            serde_json::from_str(text.lines().nth(1).unwrap().strip_prefix("data: ").unwrap())
                .unwrap();
        assert_eq!(data["x"]["y"], 1);
    }

    #[test]
    fn limits() {
        assert_eq!(output_limit("max_tokens", None).unwrap(), None);
        assert_eq!(output_limit("max_tokens", Some(5)).unwrap(), Some(5));
        let e = output_limit("max_output_tokens", Some(0)).unwrap_err();
        assert_eq!(e.status, StatusCode::BAD_REQUEST);
        assert_eq!(e.message, "max_output_tokens must be at least 1, got 0");
    }
}
