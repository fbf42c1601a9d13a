//! `bench-transport`: the hot path of every benchmark — an HTTP/1.1 client with pooled
//! keep-alive connections ([`Client`]), OpenAI chat-completions types ([`ChatRequest`]), an
//! incremental server-sent-events parser ([`sse::SseParser`]) and a chat-stream consumer that
//! measures a turn ([`TurnOutcome`]: TTFT, every chunk's arrival, usage, finish reason).
//!
//! Errors are typed ([`Error`], [`ErrorKind`]): connect, timeout, HTTP status (with the first
//! 200 bytes of the body), I/O, malformed SSE or JSON, a stream that ended before `[DONE]`.
//!
//! ```no_run
//! # async fn demo() -> Result<(), bench_transport::Error> {
//! use bench_transport::{ChatMessage, ChatRequest, Client, ClientConfig, RequestOptions, Role};
//!
//! let client = Client::new(ClientConfig::new("http://127.0.0.1:8000"))?;
//! let mut req = ChatRequest::new("my-model", vec![ChatMessage::new(Role::User, "Hello")]);
//! req.pin_output(32, false); // max_completion_tokens = 32, ignore_eos = true
//! let turn = client.chat(&req, &RequestOptions::default()).await?;
//! println!("ttft {:?}, tpot {:?}, usage {:?}", turn.ttft, turn.tpot(), turn.usage);
//! # Ok(()) }
//! ```
//!
//! Timestamps are taken when body bytes arrive, before any parsing; event data is borrowed from
//! the received chunk when possible and chunk JSON is parsed with borrowed strings.

pub mod client;
pub mod error;
pub mod openai;
pub mod sse;
pub mod stream;

pub use client::{Auth, Client, ClientConfig, RequestOptions, SimpleResponse};
pub use error::{Error, ErrorKind};
pub use openai::{ChatMessage, ChatRequest, Role, StreamOptions, Usage};
pub use stream::{ChatStreamConsumer, TurnOutcome};
