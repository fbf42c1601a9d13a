//! Integration tests of `bench-journeys` (one binary).
#![allow(clippy::unwrap_used, clippy::expect_used, missing_docs)]

mod declarative;
mod interrupt;
mod omnigent;
mod sse_server;
mod streams;
