//! SWE-agent `.traj` trajectories: `{"environment", "trajectory", "history", "info"}`. The
//! conversation is `history` (the messages the main agent sent and received).

use std::path::Path;

use serde_json::Value;

use super::openai::message;
use super::{
    Ctx, Document, ImportError, NoteKind, as_object, build_turns, describe, emit_conversation,
    file_stem, read_document,
};
use crate::format::{Source, TraceSession};

/// The model that produced the trajectory, from the first of: `replay_config` (a JSON string or
/// object) `.agent.model.name`/`.model_name`, `config.agent.model.name`/`.model_name`,
/// `info.model_name`, `info.model`.
fn model(traj: &Value) -> Option<String> {
    fn agent_model(config: &Value) -> Option<String> {
        let m = config.get("agent")?.get("model")?;
        m.get("name")
            .or_else(|| m.get("model_name"))
            .and_then(Value::as_str)
            .map(str::to_string)
    }
    let replay = match traj.get("replay_config") {
        Some(Value::String(s)) => serde_json::from_str::<Value>(s).ok(),
        Some(v @ Value::Object(_)) => Some(v.clone()),
        _ => None,
    };
    replay
        .as_ref()
        .and_then(agent_model)
        .or_else(|| traj.get("config").and_then(agent_model))
        .or_else(|| {
            let info = traj.get("info")?;
            info.get("model_name")
                .or_else(|| info.get("model"))
                .and_then(Value::as_str)
                .map(str::to_string)
        })
        .filter(|m| !m.is_empty())
}

fn session(traj: &Value, session_id: String) -> Result<(TraceSession, usize, u64), String> {
    let obj = as_object(traj, "trajectory file")?;
    let history = match obj.get("history") {
        Some(Value::Array(a)) => a,
        None => return Err("\"history\": missing".to_string()),
        Some(v) => {
            return Err(format!(
                "\"history\": expected an array, found {}",
                describe(v)
            ));
        }
    };
    // The main agent is the one of the first entry that names one; entries of other agents
    // (e.g. subroutines) are not part of its conversation.
    let main_agent = history
        .iter()
        .find_map(|e| e.get("agent").and_then(Value::as_str));
    let mut msgs = Vec::with_capacity(history.len());
    let mut dropped = 0;
    for (i, entry) in history.iter().enumerate() {
        let here = format!("\"history\"[{i}]");
        let e = as_object(entry, &here)?;
        let agent = e.get("agent").and_then(Value::as_str);
        if agent.is_some() && agent != main_agent {
            continue;
        }
        msgs.push(message(e, &here, &mut dropped)?);
    }
    let turns = build_turns(msgs);
    Ok((
        TraceSession {
            session_id,
            source: Some(Source {
                agent: Some("swe-agent".to_string()),
                model: model(traj),
                ..Source::default()
            }),
            system_prompt: turns.system_prompt,
            turns: turns.turns,
            tools: None,
            subagents: Vec::new(),
        },
        turns.trailing,
        dropped,
    ))
}

pub(crate) fn import_file(ctx: &mut Ctx<'_>, path: &Path) -> Result<(), ImportError> {
    match read_document(path)? {
        Document::Empty => Ok(()),
        Document::Invalid(e) => ctx.invalid(e),
        Document::Lines(_) => ctx.invalid(ImportError::new(
            path,
            None,
            "expected one JSON object, found several JSON values",
        )),
        Document::Json(traj) => match session(&traj, file_stem(path)) {
            Ok((s, trailing, dropped)) => {
                ctx.note(NoteKind::PartsDropped, dropped);
                emit_conversation(ctx, path, None, s, trailing)
            }
            Err(m) => ctx.invalid(ImportError::new(path, None, m)),
        },
    }
}
