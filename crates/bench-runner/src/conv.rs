//! The conversation a session has sent so far, as pieces that are sent without being joined.
//!
//! Each turn's request carries the whole conversation. Copying it into one buffer per turn
//! costs O(context) memory traffic per turn (a 100K-token context is ~400 KB); instead the
//! conversation is a list of shared [`Bytes`]: long messages (≥ [`SHARED_MIN`] bytes of JSON)
//! are the plan's own text, never copied; short ones are appended to an open run, which is
//! frozen into a piece once it reaches [`RUN_MAX`]. A turn then copies at most the open run.

use std::sync::Arc;

use bench_workload::plan::PlannedMessage;
use bytes::Bytes;

/// Messages whose text JSON is at least this long are sent from the plan's copy.
pub const SHARED_MIN: usize = 16 * 1024;
/// The open run is frozen into a piece once it is this long.
pub const RUN_MAX: usize = 64 * 1024;

/// Whether `m` is sent from the plan's copy.
pub(crate) fn is_long(m: &PlannedMessage) -> bool {
    m.content_json.len() >= SHARED_MIN
}

/// The plan's text of `m` as a shared piece (no copy).
pub(crate) fn shared(m: &PlannedMessage) -> Bytes {
    struct ArcStr(Arc<str>);
    impl AsRef<[u8]> for ArcStr {
        fn as_ref(&self) -> &[u8] {
            self.0.as_bytes()
        }
    }
    Bytes::from_owner(ArcStr(m.content_json.clone()))
}

/// How messages are written.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub enum Render {
    /// Comma-separated JSON message objects (chat `messages`, Responses `input`).
    #[default]
    Json,
    /// The same, a system message written as a user one (Anthropic `messages` hold only user
    /// and assistant turns; the session's system prompt goes to `system`).
    JsonNoSystem,
    /// Responses `input` items: each message with its `"type":"message"`, which OpenAI's API
    /// takes as optional and llama.cpp's requires for assistant items ("Cannot determine type
    /// of 'item'" without it); a tool result (not sent faithfully there) as a user item.
    Items,
    /// The inside of one JSON string: `System: …`, `User: …` or `Assistant: …` paragraphs,
    /// each followed by a blank line (a legacy completions `prompt`).
    Text,
}

/// The start of a message's Responses input item ([`Render::Items`]), up to its content.
pub(crate) fn item_prefix(role: bench_workload::plan::Role) -> &'static str {
    use bench_workload::plan::Role;
    match role {
        Role::System => "{\"type\":\"message\",\"role\":\"system\",\"content\":",
        Role::User | Role::Tool => "{\"type\":\"message\",\"role\":\"user\",\"content\":",
        Role::Assistant => "{\"type\":\"message\",\"role\":\"assistant\",\"content\":",
    }
}

/// The paragraph label of a message in [`Render::Text`].
pub(crate) fn text_label(m: &PlannedMessage) -> &'static str {
    match m.role {
        bench_workload::plan::Role::System => "System: ",
        bench_workload::plan::Role::User => "User: ",
        bench_workload::plan::Role::Assistant => "Assistant: ",
        bench_workload::plan::Role::Tool => "Tool: ",
    }
}

/// A paragraph's end inside a JSON string: a blank line.
pub(crate) const TEXT_SEP: &str = "\\n\\n";

/// The plan's text of `m` without its quotes, as a shared piece (no copy).
pub(crate) fn shared_inner(m: &PlannedMessage) -> Bytes {
    let b = shared(m);
    let n = b.len();
    b.slice(1..n.saturating_sub(1).max(1))
}

/// The conversation so far, as pieces: see [`Render`] for how messages are written.
#[derive(Debug, Default, Clone)]
pub struct Conversation {
    frozen: Vec<Bytes>,
    open: String,
    len: usize,
    render: Render,
}

impl Conversation {
    /// An empty conversation whose open run has room for `capacity` bytes.
    pub fn with_capacity(capacity: usize) -> Self {
        Self::rendered(capacity, Render::Json)
    }

    /// An empty conversation written as `render` says.
    pub fn rendered(capacity: usize, render: Render) -> Self {
        Conversation {
            frozen: Vec::new(),
            open: String::with_capacity(capacity.min(RUN_MAX + SHARED_MIN)),
            len: 0,
            render,
        }
    }

    /// No message yet.
    pub fn is_empty(&self) -> bool {
        self.len == 0
    }

    /// Bytes in all.
    pub fn len(&self) -> usize {
        self.len
    }

    /// Appends text (JSON already).
    pub fn push_str(&mut self, s: &str) {
        self.open.push_str(s);
        self.len += s.len();
        self.maybe_freeze();
    }

    /// Appends a `,` between messages when there is something before (not in
    /// [`Render::Text`], whose paragraphs end with their own separator).
    pub fn comma(&mut self) {
        if !self.is_empty() && self.render != Render::Text {
            self.push_str(",");
        }
    }

    /// Appends a message; a long one's text is shared, not copied.
    pub fn push_msg(&mut self, m: &PlannedMessage) {
        let (prefix, suffix) = match self.render {
            Render::Json => (m.json_prefix(), "}"),
            Render::JsonNoSystem
                if matches!(
                    m.role,
                    bench_workload::plan::Role::System | bench_workload::plan::Role::Tool
                ) =>
            {
                ("{\"role\":\"user\",\"content\":", "}")
            }
            Render::JsonNoSystem => (m.json_prefix(), "}"),
            Render::Items => (item_prefix(m.role), "}"),
            Render::Text => (text_label(m), TEXT_SEP),
        };
        let text = self.render == Render::Text;
        let mut added = prefix.len() + suffix.len();
        self.open.push_str(prefix);
        if is_long(m) {
            self.freeze();
            let piece = if text { shared_inner(m) } else { shared(m) };
            added += piece.len();
            self.frozen.push(piece);
        } else {
            let c = &m.content_json;
            let c = if text {
                &c[1..c.len().saturating_sub(1).max(1)]
            } else {
                &c[..]
            };
            self.open.push_str(c);
            added += c.len();
        }
        if !text {
            // Tool calls or a tool result's id (faithful tool messages).
            self.open.push_str(m.json_extra());
            added += m.json_extra().len();
        }
        self.open.push_str(suffix);
        self.len += added;
        self.maybe_freeze();
    }

    /// Appends a message of `role` whose text is `content_json` (a JSON string literal, e.g.
    /// what the server generated), written as [`Render`] says.
    pub fn push_text(&mut self, role: bench_workload::plan::Role, content_json: &str) {
        let m = PlannedMessage {
            role,
            content_json: std::sync::Arc::from(content_json),
            tokens: 0,
            extra_json: None,
        };
        // Short or long, the text is copied once here (it is not the plan's).
        let (prefix, suffix) = match (self.render, role) {
            (Render::Text, _) => (text_label(&m), TEXT_SEP),
            (Render::JsonNoSystem, bench_workload::plan::Role::System) => {
                ("{\"role\":\"user\",\"content\":", "}")
            }
            (Render::Items, _) => (item_prefix(role), "}"),
            _ => (m.json_prefix(), "}"),
        };
        let c = if self.render == Render::Text {
            &content_json[1..content_json.len().saturating_sub(1).max(1)]
        } else {
            content_json
        };
        self.push_str(prefix);
        self.push_str(c);
        self.push_str(suffix);
    }

    fn freeze(&mut self) {
        if !self.open.is_empty() {
            let run = std::mem::take(&mut self.open);
            self.frozen.push(Bytes::from(run));
        }
    }

    /// Room for `more` bytes in the open run (bounded as [`Conversation::rendered`] bounds it),
    /// so that growing a copied conversation does not double its capacity.
    pub fn reserve(&mut self, more: usize) {
        let room = (RUN_MAX + SHARED_MIN).saturating_sub(self.open.len());
        self.open.reserve_exact(more.min(room));
    }

    fn maybe_freeze(&mut self) {
        if self.open.len() >= RUN_MAX {
            self.freeze();
        }
    }

    /// How many pieces [`Conversation::pieces`] adds.
    pub fn pieces_len(&self) -> usize {
        self.frozen.len() + usize::from(!self.open.is_empty())
    }

    /// Adds the pieces to `out`: the frozen ones shared, the open run copied.
    pub fn pieces(&self, out: &mut Vec<Bytes>) {
        out.extend(self.frozen.iter().cloned());
        if !self.open.is_empty() {
            out.push(Bytes::copy_from_slice(self.open.as_bytes()));
        }
    }

    /// The whole conversation as one string (a copy).
    pub fn to_string_lossy(&self) -> String {
        let mut s = String::with_capacity(self.len);
        for p in &self.frozen {
            s.push_str(&String::from_utf8_lossy(p));
        }
        s.push_str(&self.open);
        s
    }
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use super::*;
    use bench_workload::plan::Role;

    fn msg(role: Role, text: &str) -> PlannedMessage {
        PlannedMessage {
            role,
            content_json: serde_json::to_string(text).unwrap().into(),
            tokens: 0,
            extra_json: None,
        }
    }

    #[test]
    fn pieces_join_to_the_same_json_as_one_string_and_long_texts_are_shared() {
        let long = "x".repeat(SHARED_MIN + 10);
        let msgs = [
            msg(Role::User, "hi"),
            msg(Role::Assistant, "hello"),
            msg(Role::User, &long),
            msg(Role::Assistant, "ok"),
        ];
        let mut c = Conversation::with_capacity(0);
        let mut flat = String::new();
        for m in &msgs {
            c.comma();
            if !flat.is_empty() {
                flat.push(',');
            }
            c.push_msg(m);
            m.write_json(&mut flat);
        }
        assert_eq!(c.len(), flat.len());
        assert_eq!(c.to_string_lossy(), flat);
        let mut parts = Vec::new();
        c.pieces(&mut parts);
        assert_eq!(parts.len(), c.pieces_len());
        let joined: Vec<u8> = parts.iter().flat_map(|p| p.iter().copied()).collect();
        assert_eq!(joined, flat.as_bytes());
        // The long text is the plan's own allocation.
        let text = &msgs[2].content_json;
        assert!(parts.iter().any(|p| p.as_ptr() == text.as_ptr()));
    }

    #[test]
    fn the_open_run_is_frozen_at_its_limit() {
        let chunk = "y".repeat(1000);
        let m = msg(Role::User, &chunk);
        let mut c = Conversation::with_capacity(0);
        for _ in 0..200 {
            c.comma();
            c.push_msg(&m);
        }
        assert!(c.pieces_len() >= 3, "{}", c.pieces_len());
        let mut parts = Vec::new();
        c.pieces(&mut parts);
        // Only the open run is copied per turn: it stays under the limit.
        assert!(parts.last().unwrap().len() < RUN_MAX + SHARED_MIN);
        assert_eq!(parts.iter().map(Bytes::len).sum::<usize>(), c.len());
    }
}
