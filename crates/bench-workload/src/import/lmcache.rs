//! LMCache agent traces: one LLM call per JSONL line,
//! `{"timestamp": <unix µs>, "input": <full prompt>, "output": <completion>, "session_id": ...}`.
//!
//! Calls are grouped by session (across all inputs), sorted by timestamp, and each prompt is
//! reduced to what is new relative to the previous call.

use std::collections::HashMap;
use std::path::PathBuf;

use serde_json::Value;

use super::{
    Ctx, ImportError, NoteKind, for_each_json_line, i64_field, id_string, no_sessions, open,
    required, take_string,
};
use crate::format::{Message, Source, TraceSession, TraceTurn};

/// One recorded call.
struct Call {
    timestamp_us: i64,
    input: String,
    output: String,
    file: usize,
    line: u64,
}

fn parse_call(mut value: Value) -> Result<(String, Call), String> {
    let Some(obj) = value.as_object_mut() else {
        return Err(format!(
            "expected an object, found {}",
            super::describe(&value)
        ));
    };
    let timestamp_us = i64_field(obj, "timestamp")?;
    let session_id = id_string(required(obj, "session_id")?, "session_id")?;
    let input = take_string(obj, "input")?;
    let output = match obj.get("output") {
        Some(Value::Null) => String::new(),
        _ => take_string(obj, "output")?,
    };
    Ok((
        session_id,
        Call {
            timestamp_us,
            input,
            output,
            file: 0,
            line: 0,
        },
    ))
}

/// How a prompt relates to the previous call of its session.
enum Delta<'a> {
    /// It starts with previous prompt + previous output: the rest is new.
    Extension(&'a str),
    /// It starts with the previous prompt but not with the previous output right after it.
    OutputMissing(&'a str),
    /// It does not start with the previous prompt: the whole prompt is new.
    Restart(&'a str),
}

fn delta<'a>(prompt: &'a str, prev_prompt: &str, prev_output: &str) -> Delta<'a> {
    match prompt.strip_prefix(prev_prompt) {
        Some(rest) => match rest.strip_prefix(prev_output) {
            Some(new) => Delta::Extension(new),
            None => Delta::OutputMissing(rest),
        },
        None => Delta::Restart(prompt),
    }
}

pub(crate) fn import(
    ctx: &mut Ctx<'_>,
    groups: &[(PathBuf, Vec<PathBuf>)],
) -> Result<(), ImportError> {
    let mut files: Vec<PathBuf> = Vec::new();
    let mut sessions: HashMap<String, Vec<Call>> = HashMap::new();
    for (input, paths) in groups {
        let before = ctx.usable;
        for path in paths {
            let file = files.len();
            files.push(path.clone());
            let reader = open(path)?;
            for_each_json_line(ctx, path, reader, &mut |ctx, line, value| {
                let (id, mut call) = match parse_call(value) {
                    Ok(c) => c,
                    Err(m) => return Ok(Err(m)),
                };
                call.file = file;
                call.line = line;
                ctx.mark_usable();
                sessions.entry(id).or_default().push(call);
                Ok(Ok(()))
            })?;
        }
        if ctx.usable == before {
            return Err(no_sessions(input));
        }
    }

    let t0 = sessions
        .values()
        .flat_map(|calls| calls.iter().map(|c| c.timestamp_us))
        .min()
        .unwrap_or(0);
    // Sessions in order of their first call.
    let mut order: Vec<(i64, String)> = sessions
        .iter()
        .map(|(id, calls)| {
            let first = calls.iter().map(|c| c.timestamp_us).min().unwrap_or(0);
            (first, id.clone())
        })
        .collect();
    order.sort();
    for (_, id) in order {
        let Some(calls) = sessions.remove(&id) else {
            continue;
        };
        let file = files[calls[0].file].clone();
        let line = calls[0].line;
        let session = build_session(ctx, id, calls, t0);
        ctx.emit(&file, Some(line), session)?;
    }
    Ok(())
}

fn build_session(ctx: &mut Ctx<'_>, id: String, mut calls: Vec<Call>, t0: i64) -> TraceSession {
    if !calls
        .windows(2)
        .all(|w| w[0].timestamp_us <= w[1].timestamp_us)
    {
        ctx.note(NoteKind::LmcacheUnsorted, 1);
        // Stable: calls with equal timestamps keep their file order.
        calls.sort_by_key(|c| c.timestamp_us);
    }
    let mut turns = Vec::with_capacity(calls.len());
    let mut prev: Option<Call> = None;
    for call in calls {
        let (text, gap_us) = match &prev {
            None => (call.input.clone(), 0i128),
            Some(p) => {
                let text = match delta(&call.input, &p.input, &p.output) {
                    Delta::Extension(new) => new.to_string(),
                    Delta::OutputMissing(new) => {
                        ctx.note(NoteKind::LmcacheOutputMissing, 1);
                        new.to_string()
                    }
                    Delta::Restart(whole) => {
                        ctx.note(NoteKind::LmcacheRestart, 1);
                        whole.to_string()
                    }
                };
                (
                    text,
                    i128::from(call.timestamp_us) - i128::from(p.timestamp_us),
                )
            }
        };
        let mut turn = TraceTurn::new(
            turns.len() as u32,
            vec![Message {
                role: "user".to_string(),
                content: text,
                tool_call_id: None,
            }],
            call.output.clone(),
        );
        turn.pre_gap_ms = Some(gap_us as f64 / 1000.0);
        turn.timestamp_ms = Some((i128::from(call.timestamp_us) - i128::from(t0)) as f64 / 1000.0);
        turns.push(turn);
        prev = Some(call);
    }
    TraceSession {
        session_id: id,
        source: Some(Source {
            dataset: Some("lmcache".to_string()),
            ..Source::default()
        }),
        system_prompt: None,
        turns,
        tools: None,
        subagents: Vec::new(),
    }
}
