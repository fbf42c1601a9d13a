//! One conversation ([`ChatRequest`]) as the body of any [`Endpoint`], and the headers an
//! endpoint needs. For one-off requests (`bench probe`, the journeys); the replay engine writes
//! its bodies as shared pieces instead (`bench-runner`), in the same shapes.

use bytes::Bytes;
use http::{HeaderName, HeaderValue};

use crate::Endpoint;
use crate::error::{Error, ErrorKind};
use crate::openai::{ChatMessage, ChatRequest, Role};

/// The request body of `req` (one chat conversation) in `endpoint`'s shape:
///
/// * chat: as is;
/// * responses: the messages as `input` items, the output cap as `max_output_tokens`, no
///   `stream_options` (usage always comes with `response.completed`);
/// * messages: system messages joined into `system`, the cap as `max_tokens` (required);
/// * completions: the conversation rendered to one `prompt` (see [`completion_prompt`]), the
///   cap as `max_tokens`.
///
/// `ignore_eos` and the extra body go into every shape.
impl ChatRequest {
    /// See the module docs.
    pub fn to_endpoint_body(&self, endpoint: Endpoint) -> Result<Bytes, Error> {
        endpoint_body(self, endpoint)
    }
}

fn endpoint_body(req: &ChatRequest, endpoint: Endpoint) -> Result<Bytes, Error> {
    use serde_json::{Value, json};
    if endpoint == Endpoint::Chat {
        return req.to_body();
    }
    let cap = req.max_completion_tokens.or(req.max_tokens);
    let msgs = |keep_system: bool| -> Vec<Value> {
        req.messages
            .iter()
            .filter(|m| keep_system || m.role != Role::System)
            .map(|m| json!({"role": m.role, "content": m.content}))
            .collect()
    };
    let mut body = serde_json::Map::new();
    body.insert("model".into(), json!(req.model));
    match endpoint {
        Endpoint::Chat => {}
        Endpoint::Responses => {
            body.insert("input".into(), Value::Array(msgs(true)));
            if let Some(n) = cap {
                body.insert("max_output_tokens".into(), json!(n));
            }
        }
        Endpoint::Messages => {
            let system: Vec<&str> = req
                .messages
                .iter()
                .filter(|m| m.role == Role::System)
                .map(|m| m.content.as_str())
                .collect();
            if !system.is_empty() {
                body.insert("system".into(), json!(system.join("\n\n")));
            }
            body.insert("messages".into(), Value::Array(msgs(false)));
            body.insert("max_tokens".into(), json!(cap.unwrap_or(1024)));
        }
        Endpoint::Completions => {
            body.insert("prompt".into(), json!(completion_prompt(&req.messages)));
            if let Some(n) = cap {
                body.insert("max_tokens".into(), json!(n));
            }
            if let Some(o) = &req.stream_options {
                body.insert("stream_options".into(), json!(o));
            }
        }
    }
    if let Some(e) = req.ignore_eos {
        body.insert("ignore_eos".into(), json!(e));
    }
    body.insert("stream".into(), json!(req.stream));
    for (k, v) in &req.extra {
        if v.is_null() {
            body.remove(k);
        } else {
            body.insert(k.clone(), v.clone());
        }
    }
    serde_json::to_vec(&body).map(Bytes::from).map_err(|e| {
        Error::new(
            ErrorKind::InvalidRequest,
            format!("cannot encode the request: {e}"),
        )
    })
}

/// A conversation as one legacy-completions prompt: each message as `System: …`, `User: …` or
/// `Assistant: …`, separated by a blank line, ending with `Assistant:` for the model to
/// continue.
pub fn completion_prompt(messages: &[ChatMessage]) -> String {
    let mut s = String::new();
    for m in messages {
        let label = match m.role {
            Role::System => "System",
            Role::User => "User",
            Role::Assistant => "Assistant",
            Role::Tool => "Tool",
        };
        s.push_str(label);
        s.push_str(": ");
        s.push_str(&m.content);
        s.push_str("\n\n");
    }
    s.push_str("Assistant:");
    s
}

/// Headers an endpoint needs: for messages, `anthropic-version` and `x-api-key` (from
/// `ANTHROPIC_API_KEY`, marked sensitive: never logged).
pub fn endpoint_headers(
    endpoint: Endpoint,
    anthropic_api_key: Option<String>,
) -> Result<Vec<(HeaderName, HeaderValue)>, Error> {
    if endpoint != Endpoint::Messages {
        return Ok(Vec::new());
    }
    let mut h = vec![(
        HeaderName::from_static("anthropic-version"),
        HeaderValue::from_static("2023-06-01"),
    )];
    if let Some(k) = anthropic_api_key.filter(|k| !k.is_empty()) {
        let mut v = HeaderValue::from_str(&k).map_err(|_| {
            Error::new(
                ErrorKind::InvalidRequest,
                "ANTHROPIC_API_KEY is not a valid header value",
            )
        })?;
        v.set_sensitive(true);
        h.push((HeaderName::from_static("x-api-key"), v));
    }
    Ok(h)
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]
    use super::*;
    use serde_json::Value;

    fn conv() -> ChatRequest {
        let mut r = ChatRequest::new(
            "m",
            vec![
                ChatMessage::new(Role::System, "Be brief."),
                ChatMessage::new(Role::User, "Hi"),
                ChatMessage::new(Role::Assistant, "Hello."),
                ChatMessage::new(Role::User, "Bye"),
            ],
        );
        r.pin_output(7, false);
        r
    }

    fn body(e: Endpoint) -> Value {
        serde_json::from_slice(&conv().to_endpoint_body(e).unwrap()).unwrap()
    }

    #[test]
    fn each_endpoint_gets_its_shape() {
        let c = body(Endpoint::Chat);
        assert_eq!(c["max_completion_tokens"], 7);
        assert_eq!(c["messages"].as_array().unwrap().len(), 4);

        let r = body(Endpoint::Responses);
        assert_eq!(r["max_output_tokens"], 7);
        assert_eq!(r["input"].as_array().unwrap().len(), 4);
        assert_eq!(r["input"][0]["role"], "system");
        assert!(r.get("stream_options").is_none() && r.get("messages").is_none());
        assert_eq!(r["ignore_eos"], true);
        assert_eq!(r["stream"], true);

        let m = body(Endpoint::Messages);
        assert_eq!(m["max_tokens"], 7);
        assert_eq!(m["system"], "Be brief.");
        let roles: Vec<&str> = m["messages"]
            .as_array()
            .unwrap()
            .iter()
            .map(|x| x["role"].as_str().unwrap())
            .collect();
        assert_eq!(roles, ["user", "assistant", "user"]);

        let p = body(Endpoint::Completions);
        assert_eq!(p["max_tokens"], 7);
        assert_eq!(
            p["prompt"],
            "System: Be brief.\n\nUser: Hi\n\nAssistant: Hello.\n\nUser: Bye\n\nAssistant:"
        );
        assert_eq!(p["stream_options"]["include_usage"], true);
    }

    #[test]
    fn the_extra_body_wins_and_null_removes() {
        let mut r = conv();
        r.extra.insert("ignore_eos".into(), Value::Null);
        r.extra.insert("temperature".into(), serde_json::json!(0));
        let v: Value =
            serde_json::from_slice(&r.to_endpoint_body(Endpoint::Messages).unwrap()).unwrap();
        assert!(v.get("ignore_eos").is_none());
        assert_eq!(v["temperature"], 0);
    }

    #[test]
    fn anthropic_headers_and_a_redacted_key() {
        assert!(
            endpoint_headers(Endpoint::Chat, Some("k".into()))
                .unwrap()
                .is_empty()
        );
        let h = endpoint_headers(Endpoint::Messages, Some("sk-ant-secret".into())).unwrap();
        assert_eq!(h[0].0, "anthropic-version");
        assert_eq!(h[1].0, "x-api-key");
        assert!(h[1].1.is_sensitive());
        assert_eq!(endpoint_headers(Endpoint::Messages, None).unwrap().len(), 1);
    }
}
