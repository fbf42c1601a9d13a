//! The OpenAI legacy completions API (`POST /v1/completions`): its chunks and its whole answer.
//!
//! A chunk is `{"choices":[{"index":0,"text":…,"finish_reason":…}],"usage":…}` (the usage as in
//! chat, possibly on its own chunk with `"choices":[]`); the stream ends with `data: [DONE]`.
//! There is no reasoning shape: every non-empty `text` is answer output. A non-streamed answer
//! has the same shape.

use serde::Deserialize;

use crate::error::Error;
use crate::openai::wire::{SglExt, Str, UsageWire};
use crate::stream::{Accum, Step, error_text, malformed, server_error};

#[derive(Deserialize)]
struct Chunk<'a> {
    #[serde(borrow, default)]
    choices: Option<Vec<Choice<'a>>>,
    #[serde(default)]
    usage: Option<UsageWire>,
    #[serde(default)]
    sglext: Option<SglExt>,
    #[serde(default)]
    error: Option<serde_json::Value>,
}

#[derive(Deserialize)]
struct Choice<'a> {
    #[serde(default)]
    index: u32,
    #[serde(borrow, default)]
    text: Option<Str<'a>>,
    #[serde(borrow, default)]
    finish_reason: Option<Str<'a>>,
}

/// One chunk, or a whole non-streamed answer.
pub(crate) fn on_chunk(acc: &mut Accum, data: &str) -> Result<Step, Error> {
    let chunk: Chunk<'_> = serde_json::from_str(data).map_err(|e| malformed(&e, data, "chunk"))?;
    if let Some(err) = &chunk.error {
        if !err.is_null() {
            return Err(server_error(&error_text(err)));
        }
    }
    if chunk.usage.is_some() || chunk.sglext.is_some() {
        acc.chat_usage(chunk.usage.as_ref(), chunk.sglext.as_ref());
    }
    let mut step = Step::NONE;
    for c in chunk.choices.into_iter().flatten() {
        step.answer |= c.text.as_deref().is_some_and(|t| !t.is_empty());
        if c.index == 0 {
            if let Some(t) = &c.text {
                acc.content.push_str(t);
            }
            if let Some(f) = c.finish_reason {
                acc.finish_reason = Some(f.0.into_owned());
            }
        }
    }
    Ok(step)
}
