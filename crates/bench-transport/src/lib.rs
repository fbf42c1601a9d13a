//! `bench-transport`: the hot path of every benchmark — an HTTP/1.1 client with pooled
//! keep-alive connections ([`Client`]), OpenAI chat-completions types ([`ChatRequest`]), an
//! incremental server-sent-events parser ([`sse::SseParser`]) and a chat-stream consumer that
//! measures a turn ([`TurnOutcome`]: TTFT, every chunk's arrival, usage, finish reason).
//!
//! Errors are typed ([`Error`], [`ErrorKind`]): connect, timeout, HTTP status (with the first
//! 200 bytes of the body), I/O, malformed SSE or JSON, a stream that ended before `[DONE]`.
//!
//! ```
//! # async fn demo() -> Result<(), Box<dyn std::error::Error>> {
//! use bench_transport::{ChatMessage, ChatRequest, Client, ClientConfig, RequestOptions, Role};
//!
//! // Any OpenAI-compatible server; here the embedded simulator on a free loopback port.
//! let sim = bench_sim::SimServer::start(bench_sim::SimConfig::default()).await?;
//! let client = Client::new(ClientConfig::new(sim.base_url()))?;
//! let mut req = ChatRequest::new("bench-sim", vec![ChatMessage::new(Role::User, "Hello")]);
//! req.pin_output(8, false); // max_completion_tokens = 8, ignore_eos = true
//! let turn = client.chat(&req, &RequestOptions::default()).await?;
//! assert_eq!(turn.completion_tokens(), Some(8));
//! println!("ttft {:?}, tpot {:?}, usage {:?}", turn.ttft, turn.tpot(), turn.usage);
//! sim.shutdown().await;
//! # Ok(()) }
//! # tokio::runtime::Builder::new_current_thread().enable_all().build().unwrap().block_on(demo()).unwrap();
//! ```
//!
//! Timestamps are taken when body bytes arrive, before any parsing; event data is borrowed from
//! the received chunk when possible and chunk JSON is parsed with borrowed strings.

pub mod bodies;
pub mod body;
pub mod client;
mod completions;
pub mod endpoint;
pub mod error;
mod fastchunk;
#[doc(hidden)]
pub mod fuzzing;
mod h1;
pub mod limits;
mod messages;
pub mod openai;
mod responses;
pub mod sse;
pub mod stream;
pub mod tls;

pub use body::Segments;
pub use client::{
    Auth, Client, ClientConfig, RequestOptions, Secrets, SimpleResponse, StreamingResponse,
};
pub use endpoint::{Endpoint, ParseEndpointError};
pub use error::{Error, ErrorKind};
pub use limits::Limits;
pub use openai::{ChatMessage, ChatRequest, Role, StreamOptions, Usage};
pub use stream::{ChatStreamConsumer, TurnOutcome};
pub use tls::TlsOptions;
