//! Turning a chat-completions response into a [`TurnOutcome`].
//!
//! [`ChatStreamConsumer`] is synchronous: feed it body bytes with the instant they arrived, then
//! [`finish`](ChatStreamConsumer::finish) it. [`crate::Client`] drives it from the network;
//! tests drive it from captured streams.
//!
//! Definitions (see `docs/metrics.md`):
//! * TTFT: from the request being sent to the first chunk that carries output: non-empty
//!   `content` or `reasoning_content` (`reasoning`), a refusal, or tool-call text. Role-only and
//!   empty chunks do not count. For non-streamed responses it is the whole response time.
//! * Every output-bearing chunk's arrival offset is kept (inter-chunk gaps come from these).
//! * Usage is the last `usage` object the stream carried.

use std::time::{Duration, Instant};

use serde::Serialize;

use crate::error::{Error, ErrorKind};
use crate::openai::{Usage, wire};
use crate::sse::{SseItem, SseParser};

/// Everything measured about one chat turn.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct TurnOutcome {
    /// Generated `content` of choice 0.
    pub content: String,
    /// Generated `reasoning_content` of choice 0.
    pub reasoning: String,
    /// Time to first output chunk. `None` when no chunk carried output.
    pub ttft: Option<Duration>,
    /// Request sent → end of the response body.
    pub e2e: Duration,
    /// Arrival offset (from the request being sent) of every output-bearing chunk.
    pub chunk_offsets: Vec<Duration>,
    /// Usage as reported by the server, if it reported any.
    pub usage: Option<Usage>,
    /// Finish reason of choice 0.
    pub finish_reason: Option<String>,
    /// Whether the response was an event stream.
    pub streamed: bool,
    /// Number of SSE data events (including `[DONE]`), 0 for non-streamed responses.
    pub events: u32,
    /// Response body size in bytes.
    pub body_bytes: u64,
    /// How many times the request was re-sent because its pooled connection had been closed by
    /// the server before the request reached it (see [`crate::Client`]).
    pub redials: u32,
    /// Value of the configured worker header on the response, if any.
    pub worker: Option<String>,
}

impl TurnOutcome {
    /// Output tokens: the server's `completion_tokens` when reported.
    pub fn completion_tokens(&self) -> Option<u64> {
        self.usage.and_then(|u| u.completion_tokens)
    }

    /// Time per output token: `(e2e − ttft) / (completion_tokens − 1)`, when more than one token
    /// was produced and TTFT is known.
    pub fn tpot(&self) -> Option<Duration> {
        let n = self.completion_tokens()?;
        let ttft = self.ttft?;
        if n <= 1 || !self.streamed {
            return None;
        }
        let decode = self.e2e.checked_sub(ttft)?;
        Some(decode / u32::try_from(n - 1).unwrap_or(u32::MAX))
    }

    /// Gaps between consecutive output chunks.
    pub fn chunk_gaps(&self) -> impl Iterator<Item = Duration> + '_ {
        self.chunk_offsets
            .windows(2)
            .map(|w| w[1].saturating_sub(w[0]))
    }
}

/// Incremental consumer of a streamed (SSE) or whole (JSON) chat-completions body.
#[derive(Debug)]
pub struct ChatStreamConsumer {
    sent: Instant,
    streamed: bool,
    parser: SseParser,
    done: bool,
    state: Accum,
    error: Option<Error>,
    body: Vec<u8>,
    body_bytes: u64,
}

#[derive(Debug, Default)]
struct Accum {
    content: String,
    reasoning: String,
    ttft: Option<Duration>,
    chunk_offsets: Vec<Duration>,
    usage: Option<Usage>,
    finish_reason: Option<String>,
    events: u32,
}

fn snippet(data: &str) -> String {
    let mut end = data.len().min(200);
    while !data.is_char_boundary(end) {
        end -= 1;
    }
    data[..end].replace(['\n', '\r'], " ")
}

impl ChatStreamConsumer {
    /// A consumer for a response to a request sent at `sent`. `streamed` says whether to
    /// parse the body as an event stream (true) or as one JSON object (false).
    pub fn new(sent: Instant, streamed: bool) -> Self {
        ChatStreamConsumer {
            sent,
            streamed,
            parser: SseParser::new(),
            done: false,
            state: Accum::default(),
            error: None,
            body: Vec::new(),
            body_bytes: 0,
        }
    }

    /// True once `data: [DONE]` was seen.
    pub fn is_done(&self) -> bool {
        self.done
    }

    /// Number of output-bearing chunks so far.
    pub fn chunks(&self) -> usize {
        self.state.chunk_offsets.len()
    }

    /// Feeds body bytes that arrived at `at`. Returns an error as soon as the stream is known to
    /// be bad (malformed JSON in an event, or an error object sent by the server).
    pub fn feed(&mut self, bytes: &[u8], at: Instant) -> Result<(), Error> {
        self.body_bytes += bytes.len() as u64;
        if !self.streamed {
            self.body.extend_from_slice(bytes);
            return Ok(());
        }
        // Keep the first bytes of a stream to quote them if it turns out not to be one.
        if self.body.len() < 200 {
            let take = (200 - self.body.len()).min(bytes.len());
            self.body.extend_from_slice(&bytes[..take]);
        }
        let offset = at.saturating_duration_since(self.sent);
        let state = &mut self.state;
        let done = &mut self.done;
        let error = &mut self.error;
        self.parser.feed(bytes, |item| {
            if error.is_some() {
                return;
            }
            if let SseItem::Event(ev) = item {
                state.events += 1;
                if *done {
                    return;
                }
                let data = ev.data.as_ref();
                if data.trim() == "[DONE]" {
                    *done = true;
                    return;
                }
                if let Err(e) = state.on_chunk(data, offset) {
                    *error = Some(e);
                }
            }
        });
        match self.error.take() {
            Some(e) => Err(e),
            None => Ok(()),
        }
    }

    /// Ends the body at `end` and returns the outcome, or why the response is not a valid one.
    pub fn finish(mut self, end: Instant) -> Result<TurnOutcome, Error> {
        let e2e = end.saturating_duration_since(self.sent);
        if !self.streamed {
            let text = std::str::from_utf8(&self.body)
                .map_err(|_| Error::new(ErrorKind::MalformedJson, "response body is not UTF-8"))?;
            self.state.on_chunk(text, e2e)?;
            // Non-streamed: the first "token" is the whole response.
            self.state.ttft = Some(e2e);
            self.state.chunk_offsets = vec![e2e];
        } else if !self.done {
            if self.state.events == 0 && self.body_bytes > 0 {
                let head = String::from_utf8_lossy(&self.body);
                return Err(Error::new(
                    ErrorKind::MalformedSse,
                    format!(
                        "no server-sent event in {} bytes of body: {}",
                        self.body_bytes,
                        snippet(&head)
                    ),
                ));
            }
            return Err(Error::new(
                ErrorKind::Incomplete,
                format!(
                    "stream ended before [DONE] after {} events and {} output chunks",
                    self.state.events,
                    self.state.chunk_offsets.len()
                ),
            ));
        }
        let s = self.state;
        Ok(TurnOutcome {
            content: s.content,
            reasoning: s.reasoning,
            ttft: s.ttft,
            e2e,
            chunk_offsets: s.chunk_offsets,
            usage: s.usage,
            finish_reason: s.finish_reason,
            streamed: self.streamed,
            events: s.events,
            body_bytes: self.body_bytes,
            redials: 0,
            worker: None,
        })
    }
}

impl Accum {
    fn on_chunk(&mut self, data: &str, offset: Duration) -> Result<(), Error> {
        // The common shape without serde; anything else (and every error) through serde.
        let chunk = match crate::fastchunk::parse(data) {
            Some(c) => c,
            None => serde_json::from_str::<wire::Chunk<'_>>(data).map_err(|e| {
                Error::new(
                    ErrorKind::MalformedJson,
                    format!("{e} in chunk: {}", snippet(data)),
                )
            })?,
        };
        if let Some(err) = chunk.error {
            let msg = err
                .get("message")
                .and_then(|m| m.as_str())
                .map(str::to_owned)
                .unwrap_or_else(|| err.to_string());
            return Err(Error::new(
                ErrorKind::Server,
                format!("server error in stream: {}", snippet(&msg)),
            ));
        }
        if chunk.usage.is_some() || chunk.sglext.is_some() {
            let u = Usage::from_wire(chunk.usage.as_ref(), chunk.sglext.as_ref());
            // A usage object on every chunk (continuous usage) is fine: the last one wins,
            // except that a later chunk with only `sglext` keeps earlier counts.
            let merged = match self.usage {
                Some(prev) if chunk.usage.is_none() => Usage {
                    cached_device_tokens: u.cached_device_tokens,
                    cached_host_tokens: u.cached_host_tokens,
                    ..prev
                },
                _ => u,
            };
            self.usage = Some(merged);
        }
        let mut output = false;
        if let Some(c) = chunk.choices {
            output = c.has_text;
            if let Some(t) = &c.content {
                self.content.push_str(t);
            }
            if let Some(r) = &c.reasoning {
                self.reasoning.push_str(r);
            }
            if let Some(f) = c.finish_reason {
                self.finish_reason = Some(f.into_owned());
            }
        }
        if output {
            if self.ttft.is_none() {
                self.ttft = Some(offset);
            }
            self.chunk_offsets.push(offset);
        }
        Ok(())
    }
}
