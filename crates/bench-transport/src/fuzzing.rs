//! Entry points for the fuzz targets of `xtask/fuzz` (`docs/fuzzing.md`) into private code.
//! Not part of the API: hidden from the docs, and may change with the code they expose.

use crate::openai::{Usage, wire};
use crate::stream::error_text;

/// What the client reads from one chat-completions chunk, by either path.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ChunkReading {
    /// `choices` was there (not absent or `null`).
    pub choices: bool,
    /// Some choice carried reasoning output.
    pub has_reasoning: bool,
    /// Some choice carried answer output.
    pub has_answer: bool,
    /// Choice 0's answer text.
    pub content: Option<String>,
    /// Choice 0's reasoning text.
    pub reasoning: Option<String>,
    /// Choice 0's finish reason.
    pub finish_reason: Option<String>,
    /// The usage the chunk reports (`usage` and `sglext`), if any.
    pub usage: Option<Usage>,
    /// The error the chunk reports, as the client words it.
    pub error: Option<String>,
}

fn reading(c: wire::Chunk<'_>) -> ChunkReading {
    let usage = (c.usage.is_some() || c.sglext.is_some())
        .then(|| Usage::from_wire(c.usage.as_ref(), c.sglext.as_ref()));
    let ch = c.choices;
    ChunkReading {
        choices: ch.is_some(),
        has_reasoning: ch.as_ref().is_some_and(|c| c.has_reasoning),
        has_answer: ch.as_ref().is_some_and(|c| c.has_answer),
        content: ch
            .as_ref()
            .and_then(|c| c.content.as_deref().map(str::to_owned)),
        reasoning: ch
            .as_ref()
            .and_then(|c| c.reasoning.as_deref().map(str::to_owned)),
        finish_reason: ch.and_then(|c| c.finish_reason.map(|f| f.into_owned())),
        usage,
        error: c.error.as_ref().map(error_text),
    }
}

/// The fast path's reading of `data`; `None` when it leaves the chunk to serde.
pub fn chat_chunk_fast(data: &str) -> Option<ChunkReading> {
    crate::fastchunk::parse(data).map(reading)
}

/// The fast path's reading of `data` after it read `first` of the same stream (the memo of
/// what chunks of a stream share); `None` when it leaves `data` to serde. It must read `data`
/// exactly as [`chat_chunk_fast`] does.
pub fn chat_chunk_fast_after(first: &str, data: &str) -> Option<ChunkReading> {
    let mut memo = crate::fastchunk::Memo::default();
    let _ = crate::fastchunk::parse_with(first, &mut memo);
    crate::fastchunk::parse_with(data, &mut memo).map(reading)
}

/// serde's reading of `data`, or why serde rejects it.
pub fn chat_chunk_serde(data: &str) -> Result<ChunkReading, String> {
    serde_json::from_str::<wire::Chunk<'_>>(data)
        .map(reading)
        .map_err(|e| e.to_string())
}

/// What the client's HTTP/1.1 reads of one response to a `GET`, fed in reads of the sizes of
/// `chunks` and then the end of the stream: the status, the body and whether the connection
/// could carry another request, or the error's text.
pub fn http_response(chunks: &[&[u8]]) -> Result<(u16, Vec<u8>, bool), String> {
    crate::h1::read_from_memory(chunks)
}

/// The error [`http_response`] gives if a read ever waited on memory (a bug: it must not).
pub const HTTP_WAITED: &str = crate::h1::WAITED;
