//! An embedded OpenAI-compatible LLM serving simulator.
//!
//! [`SimServer`] serves four generation endpoints, streaming and not: `POST /v1/chat/completions`,
//! `POST /v1/completions` (legacy), `POST /v1/responses` (OpenAI Responses API, with bounded
//! server-side `previous_response_id` state) and `POST /v1/messages` (Anthropic Messages API);
//! and `GET /v1/models`, `GET /health`, `GET /metrics` (vLLM or SGLang vocabulary, see
//! [`Flavor`]), the cache-flush endpoints `POST /flush_cache` / `POST /reset_prefix_cache` and
//! the simulator's own control routes under `/sim/` (hold mode, below), on loopback, so every
//! feature of bench runs without a GPU. The generation endpoints share one
//! pipeline (prompt rendering, token count, prefix-cache keys, admission, the token schedule,
//! request log, metrics, aborts) and differ only in request parsing and output shapes; a
//! conversation renders the same prompt prefix on every turn of every endpoint, so the prefix
//! cache hits. With [`SimConfig::reasoning_tokens`] the first tokens of every answer are
//! reasoning, in each API's own shape. [`SimConfig`] sets the latency model ([`LatencyMode`]):
//!
//! - `Model`: one engine task runs a step loop with continuous batching. Each step admits
//!   waiting requests in FIFO order while a batch slot and KV blocks are free (evicting
//!   least-recently-used cached prefix blocks), lasts
//!   `(decode_step_base_ms + decode_step_ms_per_seq × decoding + prefill_ms_per_token × uncached)
//!   × time_scale`, and ends with one token per running request. A prefix cache over chained
//!   block hashes reports `cached_tokens`.
//! - `Fixed { ttft, itl }`: every request gets exactly these delays, whatever the load.
//! - `Instant`: no delay; still one SSE event per token (for client-capacity tests).
//!
//! For tests that must act on a request certainly in flight, hold mode (`POST /sim/hold`,
//! [`SimServer::hold`], [`SimConfig::hold`]) stops every new generation request before its
//! first output token until `POST /sim/release` ([`SimServer::release`]); `GET /sim/held`
//! long-polls for the number held and `GET /sim/config` returns the [`SimConfig`].
//!
//! [`SimConfig::faults`] ([`Faults`]) injects seeded faults into a share of the requests, one
//! [`FaultKind`] at most each: HTTP `429`/`503`/`500` with real servers' bodies, TCP resets before
//! or during the answer, a malformed chunk, a stream without its terminal event, a stall, a slow
//! head, a missing usage; each injected fault is written to a fault log and the request log.
//!
//! [`SimConfig::expected_ttft_ms`] and [`SimConfig::expected_tpot_ms`] give the model's
//! prediction for an idle server; [`SimServer::stats`] a [`SimStats`] snapshot. Every random
//! choice comes from ChaCha seeded with `seed ^ request_number`. The full model is described in
//! `docs/simulator.md`.
//!
//! ```
//! # fn main() -> Result<(), Box<dyn std::error::Error>> {
//! let rt = tokio::runtime::Builder::new_current_thread().enable_all().build()?;
//! rt.block_on(async {
//!     let sim = bench_sim::SimServer::start(bench_sim::SimConfig::default()).await?;
//!     assert!(sim.base_url().starts_with("http://127.0.0.1:"));
//!     assert_eq!(sim.stats().running, 0);
//!     sim.shutdown().await;
//!     Ok::<_, bench_sim::SimError>(())
//! })?;
//! # Ok(())
//! # }
//! ```

mod anthropic;
mod body;
mod cache;
mod config;
mod engine;
mod error;
mod faults;
pub mod gpu;
mod hold;
mod metrics;
mod openai;
mod prompt;
mod reqlog;
mod responses;
mod server;
mod store;
mod timer;
mod tls;
mod tokens;
mod wire;

pub use config::{Flavor, LatencyMode, SimConfig};
pub use error::SimError;
pub use faults::{FaultKind, Faults};
pub use server::{SimServer, SimStats};
pub use tls::{SelfSignedCa, SimTls};
