//! Integration tests of `bench-transport` (one binary, see CONVENTIONS.md).
#![allow(clippy::unwrap_used, clippy::expect_used, missing_docs)]

mod captures;
mod client;
mod secrets;
mod sse_vectors;
mod stream_end;
mod tls;

use std::path::PathBuf;

pub fn fixtures() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../../fixtures")
}

mod against_sim;
