//! OpenAI chat messages: a JSON array of `{"role", "content"}` (one session), an array of such
//! arrays (many sessions), or JSONL where each line is an array of messages or an object with a
//! `messages` array.

use std::path::Path;

use serde_json::{Map, Value};

use super::{
    ChatMessage, Ctx, Document, ImportError, NoteKind, as_object, build_turns, content_text,
    cursor, describe, emit_conversation, file_stem, id_string, import_lines, is_jsonl, open,
    read_document,
};
use crate::format::TraceSession;

/// Reads a message list (`what` names it in errors); returns the messages and the number of
/// non-text content parts dropped.
pub(crate) fn messages(items: &[Value], what: &str) -> Result<(Vec<ChatMessage>, u64), String> {
    let mut out = Vec::with_capacity(items.len());
    let mut dropped = 0;
    for (i, item) in items.iter().enumerate() {
        let here = format!("{what}[{i}]");
        let m = as_object(item, &here)?;
        out.push(message(m, &here, &mut dropped)?);
    }
    Ok((out, dropped))
}

/// Reads one message object.
pub(crate) fn message(
    m: &Map<String, Value>,
    here: &str,
    dropped: &mut u64,
) -> Result<ChatMessage, String> {
    let role = match m.get("role") {
        Some(Value::String(s)) => s.trim().to_lowercase(),
        Some(v) => {
            return Err(format!(
                "{here}.role: expected a string, found {}",
                describe(v)
            ));
        }
        None => return Err(format!("{here}.role: missing")),
    };
    let (content, d) = content_text(m.get("content"), &format!("{here}.content"))?;
    *dropped += d;
    let tool_calls = if role == "assistant" {
        m.get("tool_calls").filter(|v| !v.is_null()).cloned()
    } else {
        None
    };
    let tool_call_id = if role == "tool" {
        match m.get("tool_call_id") {
            None | Some(Value::Null) => None,
            Some(Value::String(s)) => Some(s.clone()),
            Some(v) => {
                return Err(format!(
                    "{here}.tool_call_id: expected a string, found {}",
                    describe(v)
                ));
            }
        }
    } else {
        None
    };
    Ok(ChatMessage {
        role,
        content,
        tool_calls,
        tool_call_id,
    })
}

/// One session: a message array, or an object with `messages` (and optionally `id` or
/// `session_id`). `at` prefixes error messages.
fn session(ctx: &mut Ctx<'_>, value: &Value, at: &str, default_id: String) -> SessionResult {
    let tools = match value {
        Value::Object(obj) => match obj.get("tools") {
            None | Some(Value::Null) => None,
            Some(t @ Value::Array(_)) => Some(t.clone()),
            Some(v) => {
                return Err(format!(
                    "{at}\"tools\": expected an array, found {}",
                    describe(v)
                ));
            }
        },
        _ => None,
    };
    let (items, session_id) = match value {
        Value::Array(items) => (items, default_id),
        Value::Object(obj) => {
            let items = match obj.get("messages") {
                Some(Value::Array(a)) => a,
                None => return Err(format!("{at}\"messages\": missing")),
                Some(v) => {
                    return Err(format!(
                        "{at}\"messages\": expected an array, found {}",
                        describe(v)
                    ));
                }
            };
            let id = match obj.get("session_id").or_else(|| obj.get("id")) {
                None | Some(Value::Null) => default_id,
                Some(v) => id_string(v, "id").map_err(|m| format!("{at}{m}"))?,
            };
            (items, id)
        }
        other => {
            return Err(format!(
                "{at}expected an array of messages or an object with \"messages\", found {}",
                describe(other)
            ));
        }
    };
    let (msgs, dropped) = messages(items, &format!("{at}messages"))?;
    ctx.note(NoteKind::PartsDropped, dropped);
    let turns = build_turns(msgs);
    Ok((
        TraceSession {
            session_id,
            source: None,
            system_prompt: turns.system_prompt,
            turns: turns.turns,
            tools,
            subagents: Vec::new(),
        },
        turns.trailing,
    ))
}

type SessionResult = Result<(TraceSession, usize), String>;

/// Whether a top-level array holds many sessions (arrays, or objects with `messages`) rather
/// than the messages of one session.
fn is_many(items: &[Value]) -> bool {
    match items.first() {
        Some(Value::Array(_)) => true,
        Some(Value::Object(o)) => o.contains_key("messages") && !o.contains_key("role"),
        _ => false,
    }
}

pub(crate) fn import_file(ctx: &mut Ctx<'_>, path: &Path) -> Result<(), ImportError> {
    let stem = file_stem(path);
    // Lines carry no error prefix: their errors name the line.
    let per_line = |ctx: &mut Ctx<'_>, value: &Value, id| session(ctx, value, "", id);
    if is_jsonl(path) {
        return import_lines(ctx, path, open(path)?, &stem, per_line);
    }
    match read_document(path)? {
        Document::Empty => Ok(()),
        Document::Invalid(e) => ctx.invalid(e),
        Document::Lines(bytes) => import_lines(ctx, path, cursor(bytes), &stem, per_line),
        Document::Json(Value::Array(items)) if is_many(&items) => {
            for (i, item) in items.iter().enumerate() {
                match session(ctx, item, &format!("[{i}]: "), format!("{stem}-{i}")) {
                    Ok((s, trailing)) => emit_conversation(ctx, path, None, s, trailing)?,
                    Err(m) => ctx.invalid(ImportError::new(path, None, m))?,
                }
            }
            Ok(())
        }
        Document::Json(value) => match session(ctx, &value, "", format!("{stem}-0")) {
            Ok((s, trailing)) => emit_conversation(ctx, path, None, s, trailing),
            Err(m) => ctx.invalid(ImportError::new(path, None, m)),
        },
    }
}
