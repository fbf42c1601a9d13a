//! Size caps on what a server may send: a hostile or broken server (one endless event-stream
//! line, a body that never ends) must end as a recorded per-turn error, never as a client that
//! buffers until it runs out of memory.
//!
//! Each cap has a default real servers never reach, and a failure names the cap and the flag
//! that raises it ([`ErrorKind::ResponseTooLarge`]). Once a cap is hit the rest of the response
//! is not read: the connection is closed, so memory stays bounded whatever the server sends.

use crate::error::{Error, ErrorKind};

/// The caps on one response.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Limits {
    /// One event-stream line, and one event's joined `data` lines, in bytes. Default 8 MiB: a
    /// token delta is tens of bytes, and the largest real events (a Responses API
    /// `response.completed` carrying the whole output) stay well below a MiB.
    pub max_event_bytes: usize,
    /// One response body, streamed or not, in bytes. Default 64 MiB: a 128K-token streamed
    /// answer in vLLM's chunks (about 200 bytes a token) is about 26 MB. Streams with
    /// per-token logprobs can need more.
    pub max_response_bytes: u64,
    /// One non-streamed answer (a JSON body read whole: a chat completion, `/v1/models`,
    /// `/metrics`, a journey step's response), in bytes. Default 8 MiB: a 128K-token
    /// completion is about 0.5 MB of JSON.
    pub max_json_bytes: usize,
}

impl Limits {
    /// The default caps.
    pub const DEFAULT: Limits = Limits {
        max_event_bytes: 8 << 20,
        max_response_bytes: 64 << 20,
        max_json_bytes: 8 << 20,
    };

    /// No caps at all (for tests that need to show what a cap prevents).
    pub const NONE: Limits = Limits {
        max_event_bytes: usize::MAX,
        max_response_bytes: u64::MAX,
        max_json_bytes: usize::MAX,
    };
}

impl Default for Limits {
    fn default() -> Self {
        Limits::DEFAULT
    }
}

pub use bench_rundir::size::{human_bytes, parse_bytes};

/// The error for a response past one of the caps.
pub(crate) fn too_large(what: &str, cap: u64, flag: &str, context: &str) -> Error {
    Error::new(
        ErrorKind::ResponseTooLarge,
        format!(
            "{what} passed the {} cap{context}; the rest was not read ({flag} raises the cap)",
            human_bytes(cap)
        ),
    )
}
