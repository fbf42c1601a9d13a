//! The Responses API's server-side conversation state (`previous_response_id`), bounded.
//!
//! Each stored response keeps only its own turn (its rendered input items and answer) and a
//! pointer to the response it continued, so a conversation of N turns costs O(N) text, not
//! O(N²). The store forgets the oldest responses first once it holds [`RESPONSE_STORE_CAP`];
//! a response still continued by a remembered one stays alive through that pointer.

use std::collections::{HashMap, VecDeque};
use std::sync::Arc;

use crate::prompt;

/// Responses remembered at most; the oldest is forgotten first.
pub(crate) const RESPONSE_STORE_CAP: usize = 4096;

/// One remembered response.
#[derive(Debug)]
pub(crate) struct Stored {
    /// The instructions it ran with (given, or inherited from the response it continued).
    instructions: Option<Arc<str>>,
    /// The response it continued (`previous_response_id`).
    parent: Option<Arc<Stored>>,
    /// Its rendered input items followed by its rendered answer.
    turn: String,
    /// Assistant turns of the conversation up to and including this answer.
    turns: u32,
}

impl Stored {
    /// The instructions of this response.
    pub(crate) fn instructions(&self) -> Option<&Arc<str>> {
        self.instructions.as_ref()
    }

    /// Assistant turns of the conversation up to and including this response.
    pub(crate) fn turns(&self) -> u32 {
        self.turns
    }

    /// Appends the whole conversation that led to (and includes) this response, without its
    /// instructions: exactly what resending every item would render.
    pub(crate) fn render_into(&self, out: &mut String) {
        let mut chain = Vec::new();
        let mut at = Some(self);
        while let Some(s) = at {
            chain.push(s.turn.as_str());
            at = s.parent.as_deref();
        }
        out.reserve(chain.iter().map(|t| t.len()).sum());
        for t in chain.iter().rev() {
            out.push_str(t);
        }
    }
}

impl Drop for Stored {
    /// Frees a long chain iteratively (a recursive drop of thousands of turns could overflow
    /// the stack).
    fn drop(&mut self) {
        let mut next = self.parent.take();
        while let Some(p) = next {
            next = match Arc::try_unwrap(p) {
                Ok(mut s) => s.parent.take(),
                Err(_) => None,
            };
        }
    }
}

/// What a Responses request will remember once its answer is complete.
#[derive(Debug)]
pub(crate) struct Draft {
    /// Instructions it runs with.
    pub(crate) instructions: Option<Arc<str>>,
    /// The response it continues.
    pub(crate) parent: Option<Arc<Stored>>,
    /// Its rendered input items.
    pub(crate) input: String,
    /// Its turn index (assistant turns before its answer).
    pub(crate) turn_index: u32,
}

impl Draft {
    /// The stored response once the answer `answer` (its message text, without reasoning) is
    /// known. An empty answer has no message item, so it renders nothing, as a client
    /// resending the response's output items would.
    pub(crate) fn finish(self, answer: &str) -> Stored {
        let mut turn = self.input;
        if !answer.is_empty() {
            prompt::message(&mut turn, "assistant", answer);
        }
        Stored {
            instructions: self.instructions,
            parent: self.parent,
            turn,
            turns: self.turn_index.saturating_add(1),
        }
    }
}

/// Responses by id, the oldest forgotten first beyond a capacity.
#[derive(Debug)]
pub(crate) struct ResponseStore {
    by_id: HashMap<String, Arc<Stored>>,
    /// Ids in insertion order.
    order: VecDeque<String>,
    cap: usize,
}

impl ResponseStore {
    /// An empty store holding at most `cap` responses (at least 1).
    pub(crate) fn new(cap: usize) -> Self {
        Self {
            by_id: HashMap::new(),
            order: VecDeque::new(),
            cap: cap.max(1),
        }
    }

    /// The response stored under `id`.
    pub(crate) fn get(&self, id: &str) -> Option<Arc<Stored>> {
        self.by_id.get(id).cloned()
    }

    /// Stores `response` under `id`; returns the responses forgotten to make room (drop them
    /// outside any lock: the last reference to a long conversation frees all of it).
    pub(crate) fn insert(&mut self, id: String, response: Arc<Stored>) -> Vec<Arc<Stored>> {
        if self.by_id.insert(id.clone(), response).is_none() {
            self.order.push_back(id);
        }
        let mut forgotten = Vec::new();
        while self.by_id.len() > self.cap {
            let Some(old) = self.order.pop_front() else {
                break;
            };
            forgotten.extend(self.by_id.remove(&old));
        }
        forgotten
    }

    /// Responses stored.
    #[cfg(test)]
    pub(crate) fn len(&self) -> usize {
        self.by_id.len()
    }
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use super::*;

    fn draft(parent: Option<Arc<Stored>>, input: &str) -> Draft {
        let turn_index = parent.as_ref().map_or(0, |p| p.turns());
        let mut rendered = String::new();
        prompt::message(&mut rendered, "user", input);
        Draft {
            instructions: parent.as_ref().and_then(|p| p.instructions().cloned()),
            parent,
            input: rendered,
            turn_index,
        }
    }

    #[test]
    fn a_chain_renders_the_whole_conversation() {
        let first = Arc::new(draft(None, "q1").finish(" a1"));
        let second = Arc::new(draft(Some(first), "q2").finish(""));
        let third = Arc::new(draft(Some(Arc::clone(&second)), "q3").finish(" a3"));
        let mut out = String::new();
        third.render_into(&mut out);
        // The empty second answer renders nothing.
        assert_eq!(
            out,
            "<|user|>\nq1\n<|assistant|>\n a1\n<|user|>\nq2\n<|user|>\nq3\n<|assistant|>\n a3\n"
        );
        assert_eq!(third.turns(), 3);
    }

    #[test]
    fn the_oldest_is_forgotten_first_and_chains_survive() {
        let mut store = ResponseStore::new(2);
        let a = Arc::new(draft(None, "a").finish(" x"));
        assert!(store.insert("a".into(), Arc::clone(&a)).is_empty());
        let b = Arc::new(draft(Some(a), "b").finish(" y"));
        assert!(store.insert("b".into(), b).is_empty());
        let c = Arc::new(draft(None, "c").finish(" z"));
        let forgotten = store.insert("c".into(), c);
        assert_eq!(forgotten.len(), 1);
        assert_eq!(store.len(), 2);
        assert!(store.get("a").is_none());
        // "b" still renders "a"'s turn through its parent.
        let mut out = String::new();
        store.get("b").unwrap().render_into(&mut out);
        assert!(out.starts_with("<|user|>\na\n"), "{out}");
    }

    #[test]
    fn a_very_long_chain_drops_without_recursion() {
        let mut last: Option<Arc<Stored>> = None;
        for _ in 0..200_000 {
            last = Some(Arc::new(draft(last, "q").finish(" a")));
        }
        assert_eq!(last.as_ref().unwrap().turns(), 200_000);
        drop(last);
    }
}
