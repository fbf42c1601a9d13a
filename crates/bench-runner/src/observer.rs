//! Observers: runners emit a closed set of events; observers (progress, the run-directory
//! writer of `bench-run`, a caller's own code) never reach into the engine.

use bench_rundir::record::{SessionRecord, TurnRecord};

use crate::engine::StopReason;

/// What happened.
#[derive(Debug)]
#[non_exhaustive]
pub enum RunEvent<'a> {
    /// The run began.
    Started {
        /// Workers.
        concurrency: u32,
        /// Sessions in the pool.
        sessions: usize,
    },
    /// A phase began: the warmup (only with `warmup_sessions`), then the measured run, then
    /// its drain (at most once each).
    Phase(Phase),
    /// A session play began (before its first turn or tool wait).
    SessionStarted {
        /// Session id.
        session_id: &'a str,
        /// Which play of the session.
        replay: u32,
        /// Part of the warmup.
        warmup: bool,
    },
    /// A turn's request is about to be sent.
    TurnSent {
        /// Session id.
        session_id: &'a str,
        /// Its index in the session.
        turn_index: u32,
    },
    /// An ok turn's answer: the text the server answered (the message content, without any
    /// reasoning), delivered right before that turn's [`RunEvent::TurnFinished`]. Failed turns
    /// have none. In trace mode the conversation goes on with the recorded answer anyway; this
    /// is what the server said.
    Answer {
        /// The turn's record (the same one `TurnFinished` carries next).
        record: &'a TurnRecord,
        /// What the server answered.
        answer: &'a str,
    },
    /// A turn finished (ok or not). Delivered before the session's next turn is sent.
    TurnFinished(&'a TurnRecord),
    /// A session play ended.
    SessionFinished(&'a SessionRecord),
    /// The run stopped.
    Stopped {
        /// Why.
        by: StopReason,
    },
}

pub use bench_rundir::Phase;

/// Receives run events. Called on the engine's tasks: keep it quick.
pub trait Observer: Send + Sync {
    /// One event.
    fn on_event(&self, event: &RunEvent<'_>);
}
