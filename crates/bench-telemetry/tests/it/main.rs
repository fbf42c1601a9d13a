//! Integration tests of `bench-telemetry`: every checked-in `/metrics` capture, constructed
//! texts with labels, tensor-parallel duplicates and renamed metrics, truncated and
//! non-Prometheus bodies.
#![allow(clippy::unwrap_used, clippy::expect_used, missing_docs)]

mod captures;
mod constructed;

use std::path::PathBuf;

/// The repository's `fixtures/metrics` folder.
pub fn fixture(name: &str) -> String {
    let path = PathBuf::from(env!("CARGO_MANIFEST_DIR"))
        .join("../../fixtures/metrics")
        .join(name);
    std::fs::read_to_string(&path).unwrap_or_else(|e| panic!("{}: {e}", path.display()))
}
