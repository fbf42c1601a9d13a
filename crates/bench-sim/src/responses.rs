//! The OpenAI Responses API (`POST /v1/responses`): request parsing, events and bodies.

use std::io::Write as _;
use std::sync::Arc;

use bytes::{BufMut, BytesMut};
use http::StatusCode;
use serde::Deserialize;
use serde_json::{Value, json};

use crate::openai::Usage;
use crate::prompt;
use crate::store::{Draft, Stored};
use crate::wire::{
    Answer, ApiError, GenRequest, Output, Rejected, invalid_json, output_limit, typed_event,
};

/// The fields of a Responses request the simulator reads; others are ignored.
#[derive(Debug, Deserialize)]
struct ResponsesRequest {
    #[serde(default)]
    model: Option<String>,
    #[serde(default)]
    input: Option<Input>,
    #[serde(default)]
    instructions: Option<String>,
    #[serde(default)]
    max_output_tokens: Option<i64>,
    #[serde(default)]
    stream: Option<bool>,
    #[serde(default)]
    ignore_eos: Option<bool>,
    #[serde(default)]
    previous_response_id: Option<String>,
    #[serde(default)]
    store: Option<bool>,
}

/// `input`: a user message's text or a list of items.
#[derive(Debug, Deserialize)]
#[serde(untagged)]
enum Input {
    Text(String),
    Items(Vec<Item>),
}

/// An input item: a message, a function call or a function call's output; other types (e.g.
/// `reasoning`) render nothing.
#[derive(Debug, Deserialize)]
struct Item {
    #[serde(default, rename = "type")]
    kind: Option<String>,
    #[serde(default)]
    role: Option<String>,
    #[serde(default)]
    content: Option<Value>,
    #[serde(default)]
    name: Option<String>,
    #[serde(default)]
    arguments: Option<Value>,
    #[serde(default)]
    output: Option<Value>,
}

/// Renders `input` (a string is one user message); returns the assistant messages in it.
fn render_input(input: &Input, out: &mut String) -> u32 {
    let items = match input {
        Input::Text(t) => {
            prompt::message(out, "user", t);
            return 0;
        }
        Input::Items(items) => items,
    };
    let mut assistant = 0u32;
    for it in items {
        match it.kind.as_deref() {
            None | Some("message") => {
                let role = it.role.as_deref().unwrap_or("user");
                prompt::open(out, role);
                if let Some(c) = &it.content {
                    prompt::push_content(out, c);
                }
                prompt::close(out);
                if role == "assistant" {
                    assistant = assistant.saturating_add(1);
                }
            }
            Some("function_call") => {
                prompt::open(out, "assistant");
                prompt::tool_call(out, it.name.as_deref().unwrap_or(""), it.arguments.as_ref());
                prompt::close(out);
            }
            Some("function_call_output") => {
                prompt::open(out, "tool");
                if let Some(o) = &it.output {
                    prompt::push_content(out, o);
                }
                prompt::close(out);
            }
            Some(_) => {}
        }
    }
    assistant
}

/// Parses a `/v1/responses` body; `lookup` finds the response named by
/// `previous_response_id`.
///
/// The prompt is the instructions (given, or else those of the previous response) as a
/// `system` message, then the stored conversation, then the rendered input: the same text as
/// resending every item with the same instructions.
pub(crate) fn parse(
    body: &[u8],
    lookup: impl FnOnce(&str) -> Option<Arc<Stored>>,
) -> Result<GenRequest, Rejected> {
    let r: ResponsesRequest = serde_json::from_slice(body).map_err(|e| invalid_json(&e))?;
    let stream = r.stream.unwrap_or(false);
    let reject = |error, turn_index| Rejected {
        error,
        stream,
        turn_index,
    };
    let parent = match r.previous_response_id.as_deref() {
        Some(id) => Some(lookup(id).ok_or_else(|| reject(not_found(id), 0))?),
        None => None,
    };
    let Some(input) = &r.input else {
        return Err(reject(ApiError::bad_request("input is required"), 0));
    };
    let instructions = match r.instructions {
        Some(i) => Some(Arc::<str>::from(i)),
        None => parent.as_ref().and_then(|p| p.instructions().cloned()),
    };
    let mut text = String::new();
    if let Some(i) = &instructions {
        prompt::message(&mut text, "system", i);
    }
    if let Some(p) = &parent {
        p.render_into(&mut text);
    }
    let input_at = text.len();
    let assistant = render_input(input, &mut text);
    let turn_index = parent
        .as_ref()
        .map_or(0, |p| p.turns())
        .saturating_add(assistant);
    let max_out = output_limit("max_output_tokens", r.max_output_tokens)
        .map_err(|e| reject(e, turn_index))?;
    let store = (r.store != Some(false)).then(|| Draft {
        instructions,
        parent,
        input: text[input_at..].to_owned(),
        turn_index,
    });
    Ok(GenRequest {
        model: r.model,
        prompt: text,
        max_out,
        max_tokens_only: max_out,
        stream,
        include_usage: false,
        ignore_eos: r.ignore_eos.unwrap_or(false),
        turn_index,
        store,
    })
}

fn not_found(id: &str) -> ApiError {
    ApiError {
        status: StatusCode::NOT_FOUND,
        message: format!("Previous response with id '{id}' not found."),
        param: Some("previous_response_id"),
        code: Some("previous_response_not_found"),
    }
}

/// An OpenAI-shaped error body: `{"error":{"message","type","param","code"}}`.
pub(crate) fn error_json(e: &ApiError) -> Vec<u8> {
    let kind = if e.status.is_server_error() {
        "server_error"
    } else {
        "invalid_request_error"
    };
    json!({"error": {"message": e.message, "type": kind, "param": e.param, "code": e.code}})
        .to_string()
        .into_bytes()
}

/// Writes one answer's Responses events, or its response object.
pub(crate) struct ResponsesFormat {
    id: String,
    rs_id: String,
    msg_id: String,
    model: String,
    created_at: u64,
    /// The answer starts with a reasoning item.
    reasoning: bool,
    /// The answer has a message item.
    answer: bool,
    /// Next `sequence_number`.
    seq: u64,
    /// Fault `truncated-usage`: the response objects have no `usage`.
    omit_usage: bool,
    /// Fault `no-done`: no `response.completed` / `response.incomplete`.
    omit_terminal: bool,
    /// `event: response.reasoning_text.delta\ndata: {…,"delta":"`
    reasoning_head: String,
    /// `event: response.output_text.delta\ndata: {…,"delta":"`
    text_head: String,
}

impl ResponsesFormat {
    pub(crate) fn new(a: &Answer<'_>) -> Self {
        let rs_id = format!("rs_{}", a.id_hex);
        let msg_id = format!("msg_{}", a.id_hex);
        let head = |ty: &str, item: &str, index: u32| {
            format!(
                "event: {ty}\ndata: {{\"type\":\"{ty}\",\"item_id\":\"{item}\",\
                 \"output_index\":{index},\"content_index\":0,\"delta\":\""
            )
        };
        let reasoning_head = if a.reasoning {
            head("response.reasoning_text.delta", &rs_id, 0)
        } else {
            String::new()
        };
        let text_head = head(
            "response.output_text.delta",
            &msg_id,
            u32::from(a.reasoning),
        );
        Self {
            id: format!("resp_{}", a.id_hex),
            rs_id,
            msg_id,
            model: a.model.to_owned(),
            created_at: a.created,
            reasoning: a.reasoning,
            answer: a.answer,
            seq: 0,
            omit_usage: a.omit_usage,
            omit_terminal: a.omit_terminal,
            reasoning_head,
            text_head,
        }
    }

    /// The response id (`resp_…`).
    pub(crate) fn id(&self) -> &str {
        &self.id
    }

    fn message_index(&self) -> u32 {
        u32::from(self.reasoning)
    }

    fn event(&mut self, buf: &mut BytesMut, ty: &str, data: &Value) {
        typed_event(buf, ty, data, Some(self.seq));
        self.seq += 1;
    }

    fn response(&self, status: &str, output: Vec<Value>) -> Value {
        json!({
            "id": self.id,
            "object": "response",
            "created_at": self.created_at,
            "status": status,
            "model": self.model,
            "output": output,
        })
    }

    /// The finished response object (the non-streamed body and the terminal event's).
    fn finished(&self, usage: Usage, finish: &str, out: Output<'_>) -> Value {
        let mut output = Vec::new();
        if self.reasoning {
            output.push(self.reasoning_item(out.reasoning));
        }
        if self.answer {
            output.push(self.message_item(out.text));
        }
        let complete = finish != "length";
        let mut v = self.response(if complete { "completed" } else { "incomplete" }, output);
        if !complete {
            v["incomplete_details"] = json!({"reason": "max_output_tokens"});
        }
        if self.omit_usage {
            return v;
        }
        v["usage"] = json!({
            "input_tokens": usage.prompt_tokens,
            "input_tokens_details": {"cached_tokens": usage.cached_tokens},
            "output_tokens": usage.completion_tokens,
            "output_tokens_details": {"reasoning_tokens": usage.reasoning_tokens},
            "total_tokens": u64::from(usage.prompt_tokens) + u64::from(usage.completion_tokens),
        });
        v
    }

    fn reasoning_item(&self, text: &str) -> Value {
        json!({
            "type": "reasoning",
            "id": self.rs_id,
            "summary": [],
            "content": [{"type": "reasoning_text", "text": text}],
        })
    }

    fn message_item(&self, text: &str) -> Value {
        json!({
            "type": "message",
            "id": self.msg_id,
            "role": "assistant",
            "content": [{"type": "output_text", "text": text, "annotations": []}],
        })
    }

    /// `response.created`, `response.in_progress` and the first item's opening events.
    pub(crate) fn begin(&mut self, buf: &mut BytesMut) {
        let r = json!({"response": self.response("in_progress", Vec::new())});
        self.event(buf, "response.created", &r);
        self.event(buf, "response.in_progress", &r);
        if self.reasoning {
            let item = json!({"output_index": 0, "item": {"type": "reasoning", "id": self.rs_id}});
            self.event(buf, "response.output_item.added", &item);
        } else {
            self.open_message(buf);
        }
    }

    fn open_message(&mut self, buf: &mut BytesMut) {
        let k = self.message_index();
        let item = json!({
            "output_index": k,
            "item": {"type": "message", "id": self.msg_id, "role": "assistant", "content": []},
        });
        self.event(buf, "response.output_item.added", &item);
        let part = json!({
            "item_id": self.msg_id,
            "output_index": k,
            "content_index": 0,
            "part": {"type": "output_text", "text": ""},
        });
        self.event(buf, "response.content_part.added", &part);
    }

    fn close_reasoning(&mut self, buf: &mut BytesMut, text: &str) {
        let done =
            json!({"item_id": self.rs_id, "output_index": 0, "content_index": 0, "text": text});
        self.event(buf, "response.reasoning_text.done", &done);
        let item = json!({"output_index": 0, "item": self.reasoning_item(text)});
        self.event(buf, "response.output_item.done", &item);
    }

    /// One `response.reasoning_text.delta` or `response.output_text.delta`.
    pub(crate) fn token(&mut self, buf: &mut BytesMut, word: &str, reasoning: bool) {
        let head = if reasoning {
            &self.reasoning_head
        } else {
            &self.text_head
        };
        buf.put_slice(head.as_bytes());
        buf.put_slice(word.as_bytes());
        let _ = write!(buf.writer(), "\",\"sequence_number\":{}}}\n\n", self.seq);
        self.seq += 1;
    }

    /// Closes the reasoning item (whose text is `reasoning`) and opens the message.
    pub(crate) fn answer_begins(&mut self, buf: &mut BytesMut, reasoning: &str) {
        self.close_reasoning(buf, reasoning);
        self.open_message(buf);
    }

    /// Closes the open item, then `response.completed` or `response.incomplete` (not under the
    /// fault `no-done`).
    pub(crate) fn end(&mut self, buf: &mut BytesMut, usage: Usage, finish: &str, out: Output<'_>) {
        if self.answer {
            let k = self.message_index();
            let done = json!({"item_id": self.msg_id, "output_index": k, "content_index": 0,
                              "text": out.text});
            self.event(buf, "response.output_text.done", &done);
            let part = json!({
                "item_id": self.msg_id,
                "output_index": k,
                "content_index": 0,
                "part": {"type": "output_text", "text": out.text, "annotations": []},
            });
            self.event(buf, "response.content_part.done", &part);
            let item = json!({"output_index": k, "item": self.message_item(out.text)});
            self.event(buf, "response.output_item.done", &item);
        } else if self.reasoning {
            self.close_reasoning(buf, out.reasoning);
        }
        if self.omit_terminal {
            return;
        }
        let terminal = if finish == "length" {
            "response.incomplete"
        } else {
            "response.completed"
        };
        let r = json!({"response": self.finished(usage, finish, out)});
        self.event(buf, terminal, &r);
    }

    /// The non-streamed response object.
    pub(crate) fn body(&self, usage: Usage, finish: &str, out: Output<'_>) -> Vec<u8> {
        self.finished(usage, finish, out).to_string().into_bytes()
    }
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use super::*;
    use crate::config::Flavor;

    fn none(_: &str) -> Option<Arc<Stored>> {
        None
    }

    #[test]
    fn items_render_like_chat_messages() {
        let r = parse(
            br#"{"instructions":"be brief","input":[
                {"role":"user","content":"q1"},
                {"type":"reasoning","id":"rs_1","summary":[],"content":[{"type":"reasoning_text","text":"hmm"}]},
                {"type":"message","id":"msg_1","role":"assistant","status":"completed",
                 "content":[{"type":"output_text","text":" a1","annotations":[]}]},
                {"type":"function_call","call_id":"c1","name":"f","arguments":"{\"x\":1}"},
                {"type":"function_call_output","call_id":"c1","output":"42"},
                {"role":"user","content":[{"type":"input_text","text":"q2"}]}],
                "max_output_tokens":9,"store":false}"#,
            none,
        )
        .unwrap();
        assert_eq!(
            r.prompt,
            "<|system|>\nbe brief\n<|user|>\nq1\n<|assistant|>\n a1\n\
             <|assistant|>\n<tool_call>f {\"x\":1}</tool_call>\n<|tool|>\n42\n<|user|>\nq2\n"
        );
        assert_eq!(r.turn_index, 1);
        assert_eq!(r.max_out, Some(9));
        assert!(r.store.is_none());
    }

    /// Server-side state renders exactly what resending the conversation renders.
    #[test]
    fn previous_response_equals_the_resent_conversation() {
        let first = parse(br#"{"instructions":"sys","input":"q1"}"#, none).unwrap();
        let stored = Arc::new(first.store.unwrap().finish(" a1"));
        for second in [
            &br#"{"instructions":"sys","input":"q2","previous_response_id":"resp_1"}"#[..],
            &br#"{"input":[{"role":"user","content":"q2"}],"previous_response_id":"resp_1"}"#[..],
        ] {
            let s = parse(second, |_| Some(Arc::clone(&stored))).unwrap();
            let resent = parse(
                br#"{"instructions":"sys","input":[{"role":"user","content":"q1"},
                    {"role":"assistant","content":" a1"},{"role":"user","content":"q2"}]}"#,
                none,
            )
            .unwrap();
            assert_eq!(s.prompt, resent.prompt);
            assert_eq!(s.turn_index, 1);
            assert!(s.prompt.starts_with(&first.prompt));
        }
        let e = parse(
            br#"{"input":"x","previous_response_id":"resp_9","stream":true}"#,
            none,
        )
        .unwrap_err();
        assert_eq!(e.error.status, StatusCode::NOT_FOUND);
        assert!(e.stream);
        let body: Value = serde_json::from_slice(&error_json(&e.error)).unwrap();
        assert_eq!(
            body,
            json!({"error": {"message": "Previous response with id 'resp_9' not found.",
                   "type": "invalid_request_error", "param": "previous_response_id",
                   "code": "previous_response_not_found"}})
        );
    }

    fn events(buf: &BytesMut) -> Vec<(String, Value)> {
        std::str::from_utf8(buf)
            .unwrap()
            .split("\n\n")
            .filter(|e| !e.is_empty())
            .map(|e| {
                let (ev, data) = e.split_once('\n').unwrap();
                let ty = ev.strip_prefix("event: ").unwrap().to_owned();
                let v: Value = serde_json::from_str(data.strip_prefix("data: ").unwrap()).unwrap();
                assert_eq!(v["type"], ty.as_str());
                (ty, v)
            })
            .collect()
    }

    #[test]
    fn a_reasoning_answer_streams_in_order() {
        let a = Answer {
            id_hex: "ab",
            created: 5,
            model: "m",
            flavor: Flavor::Vllm,
            reasoning: true,
            answer: true,
            include_usage: false,
            omit_usage: false,
            omit_terminal: false,
        };
        let mut f = ResponsesFormat::new(&a);
        let mut buf = BytesMut::new();
        f.begin(&mut buf);
        f.token(&mut buf, " r", true);
        f.answer_begins(&mut buf, " r");
        f.token(&mut buf, " t", false);
        let usage = Usage {
            prompt_tokens: 10,
            completion_tokens: 2,
            cached_tokens: 4,
            reasoning_tokens: 1,
        };
        let out = Output {
            reasoning: " r",
            text: " t",
        };
        f.end(&mut buf, usage, "length", out);
        let ev = events(&buf);
        let types: Vec<&str> = ev.iter().map(|(t, _)| t.as_str()).collect();
        assert_eq!(
            types,
            [
                "response.created",
                "response.in_progress",
                "response.output_item.added",
                "response.reasoning_text.delta",
                "response.reasoning_text.done",
                "response.output_item.done",
                "response.output_item.added",
                "response.content_part.added",
                "response.output_text.delta",
                "response.output_text.done",
                "response.content_part.done",
                "response.output_item.done",
                "response.incomplete",
            ]
        );
        for (i, (_, v)) in ev.iter().enumerate() {
            assert_eq!(v["sequence_number"], i);
        }
        assert_eq!(ev[3].1["item_id"], "rs_ab");
        assert_eq!(ev[8].1["output_index"], 1);
        assert_eq!(ev[8].1["delta"], " t");
        let last = &ev[12].1["response"];
        assert_eq!(last["status"], "incomplete");
        assert_eq!(last["incomplete_details"]["reason"], "max_output_tokens");
        assert_eq!(
            last["usage"]["output_tokens_details"]["reasoning_tokens"],
            1
        );
        assert_eq!(last["usage"]["input_tokens_details"]["cached_tokens"], 4);
        assert_eq!(last["usage"]["total_tokens"], 12);
        assert_eq!(last["output"][1]["content"][0]["text"], " t");
        let body: Value = serde_json::from_slice(&f.body(usage, "length", out)).unwrap();
        assert_eq!(&body, last);
    }
}
