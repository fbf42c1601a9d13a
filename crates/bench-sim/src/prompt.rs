//! The prompt text every endpoint renders to count tokens and key the prefix cache.
//!
//! A conversation renders as `<|role|>\n` + the message's text + `\n` per message, whatever the
//! API, so a later turn's prompt (the earlier messages, the answer, a new message) starts with the
//! earlier turn's prompt plus `<|assistant|>\n<answer>\n`, and the prefix cache hits on it. What
//! a client may or may not resend verbatim adds nothing: reasoning (Responses `reasoning` items,
//! Anthropic `thinking` blocks), images, and the simulator's own bookkeeping fields.

use serde_json::Value;

/// Starts a message of `role`.
pub(crate) fn open(out: &mut String, role: &str) {
    out.push_str("<|");
    out.push_str(role);
    out.push_str("|>\n");
}

/// Ends a message.
pub(crate) fn close(out: &mut String) {
    out.push('\n');
}

/// One whole message of `role` with text `text`.
pub(crate) fn message(out: &mut String, role: &str, text: &str) {
    open(out, role);
    out.push_str(text);
    close(out);
}

/// The text of a JSON content value: a string, or the `text` of each part of an array (parts
/// without text, such as images, add nothing). Anything else adds nothing.
pub(crate) fn push_content(out: &mut String, content: &Value) {
    match content {
        Value::String(s) => out.push_str(s),
        Value::Array(parts) => {
            for p in parts {
                if let Some(t) = p.get("text").and_then(Value::as_str) {
                    out.push_str(t);
                }
            }
        }
        _ => {}
    }
}

/// A tool call inside a message: `<tool_call>NAME ARGUMENTS</tool_call>` (arguments as given
/// when a string, as compact JSON otherwise).
pub(crate) fn tool_call(out: &mut String, name: &str, arguments: Option<&Value>) {
    out.push_str("<tool_call>");
    out.push_str(name);
    out.push(' ');
    match arguments {
        Some(Value::String(s)) => out.push_str(s),
        Some(v) => out.push_str(&v.to_string()),
        None => {}
    }
    out.push_str("</tool_call>");
}

/// A tool result inside a message: `<tool_result>CONTENT</tool_result>`.
pub(crate) fn tool_result(out: &mut String, content: Option<&Value>) {
    out.push_str("<tool_result>");
    if let Some(c) = content {
        push_content(out, c);
    }
    out.push_str("</tool_result>");
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn content_values() {
        let mut out = String::new();
        push_content(&mut out, &json!("a"));
        push_content(
            &mut out,
            &json!([{"type": "input_text", "text": "b"}, {"type": "input_image", "image_url": "u"},
                    {"type": "text", "text": "c"}]),
        );
        push_content(&mut out, &json!(null));
        tool_call(&mut out, "f", Some(&json!({"x": 1})));
        tool_call(&mut out, "g", Some(&json!("{\"y\":2}")));
        tool_result(&mut out, Some(&json!([{"type": "text", "text": "ok"}])));
        assert_eq!(
            out,
            "abc<tool_call>f {\"x\":1}</tool_call><tool_call>g {\"y\":2}</tool_call>\
             <tool_result>ok</tool_result>"
        );
    }
}
