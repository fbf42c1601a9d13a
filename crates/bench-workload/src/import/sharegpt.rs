//! ShareGPT conversations: a JSON array (or JSONL) of
//! `{"id", "conversations": [{"from": "human"|"gpt"|"system"|..., "value"}]}`.

use std::path::Path;

use serde_json::Value;

use super::{
    ChatMessage, Ctx, Document, ImportError, as_object, build_turns, cursor, describe,
    emit_conversation, file_stem, id_string, import_lines, is_jsonl, open, read_document,
};
use crate::format::{Source, TraceSession};

/// Maps a ShareGPT speaker to a chat role.
fn role(from: &str) -> String {
    let lower = from.trim().to_lowercase();
    match lower.as_str() {
        "human" | "user" => "user".to_string(),
        "gpt" | "chatgpt" | "assistant" | "bard" | "bing" => "assistant".to_string(),
        _ => lower,
    }
}

/// Parses one conversation into a session and the number of trailing messages without an
/// answer (dropped). `at` prefixes error messages (e.g. `[3]: `).
fn conversation(
    value: &Value,
    at: &str,
    default_id: String,
) -> Result<(TraceSession, usize), String> {
    let obj = as_object(value, &format!("{at}conversation"))?;
    let session_id = match obj.get("id") {
        None | Some(Value::Null) => default_id,
        Some(v) => id_string(v, "id").map_err(|m| format!("{at}{m}"))?,
    };
    let items = match obj.get("conversations") {
        Some(Value::Array(a)) => a,
        None => return Err(format!("{at}\"conversations\": missing")),
        Some(v) => {
            return Err(format!(
                "{at}\"conversations\": expected an array, found {}",
                describe(v)
            ));
        }
    };
    let mut messages = Vec::with_capacity(items.len());
    for (i, item) in items.iter().enumerate() {
        let here = format!("{at}\"conversations\"[{i}]");
        let m = as_object(item, &here)?;
        let from = match (m.get("from"), m.get("role")) {
            (Some(Value::String(s)), _) | (None, Some(Value::String(s))) => s,
            (Some(v), _) => {
                return Err(format!(
                    "{here}.from: expected a string, found {}",
                    describe(v)
                ));
            }
            (None, Some(v)) => {
                return Err(format!(
                    "{here}.role: expected a string, found {}",
                    describe(v)
                ));
            }
            (None, None) => return Err(format!("{here}.from: missing")),
        };
        let (key, text) = match m.get("value") {
            Some(v) => ("value", Some(v)),
            None => ("content", m.get("content")),
        };
        let content = match text {
            None | Some(Value::Null) => String::new(),
            Some(Value::String(s)) => s.clone(),
            Some(v) => {
                return Err(format!(
                    "{here}.{key}: expected a string, found {}",
                    describe(v)
                ));
            }
        };
        messages.push(ChatMessage {
            role: role(from),
            content,
            tool_calls: None,
            tool_call_id: None,
        });
    }
    let mut turns = build_turns(messages);
    if turns.system_prompt.is_none() {
        if let Some(Value::String(s)) = obj.get("system") {
            turns.system_prompt = Some(s.clone());
        }
    }
    let session = TraceSession {
        session_id,
        source: Some(Source {
            dataset: Some("sharegpt".to_string()),
            ..Source::default()
        }),
        system_prompt: turns.system_prompt,
        turns: turns.turns,
        tools: None,
        subagents: Vec::new(),
    };
    Ok((session, turns.trailing))
}

pub(crate) fn import_file(ctx: &mut Ctx<'_>, path: &Path) -> Result<(), ImportError> {
    let stem = file_stem(path);
    // Lines carry no error prefix: their errors name the line.
    let per_line = |_: &mut Ctx<'_>, value: &Value, id| conversation(value, "", id);
    if is_jsonl(path) {
        return import_lines(ctx, path, open(path)?, &stem, per_line);
    }
    match read_document(path)? {
        Document::Empty => Ok(()),
        Document::Invalid(e) => ctx.invalid(e),
        Document::Lines(bytes) => import_lines(ctx, path, cursor(bytes), &stem, per_line),
        Document::Json(Value::Array(items)) => {
            for (i, item) in items.iter().enumerate() {
                match conversation(item, &format!("[{i}]: "), format!("{stem}-{i}")) {
                    Ok((session, trailing)) => {
                        emit_conversation(ctx, path, None, session, trailing)?;
                    }
                    Err(m) => ctx.invalid(ImportError::new(path, None, m))?,
                }
            }
            Ok(())
        }
        Document::Json(value @ Value::Object(_)) => {
            match conversation(&value, "", format!("{stem}-0")) {
                Ok((session, trailing)) => emit_conversation(ctx, path, None, session, trailing),
                Err(m) => ctx.invalid(ImportError::new(path, None, m)),
            }
        }
        Document::Json(other) => ctx.invalid(ImportError::new(
            path,
            None,
            format!(
                "expected an array of conversations, found {}",
                describe(&other)
            ),
        )),
    }
}
