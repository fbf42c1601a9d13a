//! Built-in journey packs.

use std::sync::Arc;

use crate::journey::Journey;

pub mod openai;

/// Names of the built-in packs.
pub const NAMES: [&str; 3] = ["openai", "agent-sessions", "agent-turns"];

/// The `agent-sessions` pack: an agent server's session API (Omnigent's), as a declarative file.
pub const AGENT_SESSIONS_TOML: &str = include_str!("agent-sessions.toml");

/// The `agent-turns` pack: full agent turns through an agent server whose runner executes them
/// and whose LLM is a parameter (normally `bench sim`), as a declarative file with
/// `[params]`.
pub const AGENT_TURNS_TOML: &str = include_str!("agent-turns.toml");

/// A declarative built-in pack's file name and text; `None` for `openai` (code) and unknown
/// names.
pub fn file(name: &str) -> Option<(&'static str, &'static str)> {
    match name {
        "agent-sessions" => Some(("agent-sessions.toml", AGENT_SESSIONS_TOML)),
        "agent-turns" => Some(("agent-turns.toml", AGENT_TURNS_TOML)),
        _ => None,
    }
}

/// The journeys of a built-in pack (declarative ones with their parameters' defaults);
/// `None` for an unknown name.
pub fn pack(name: &str) -> Option<Result<Vec<Arc<dyn Journey>>, crate::declarative::FileError>> {
    match name {
        "openai" => Some(Ok(openai::journeys())),
        _ => file(name).map(|(f, text)| crate::declarative::parse(f, text).map(|f| f.journeys())),
    }
}
