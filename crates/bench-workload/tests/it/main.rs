//! Integration tests of `bench-workload`.
#![allow(clippy::unwrap_used, clippy::expect_used, missing_docs)]

mod graph_importers;
mod import;
mod plan;

use std::path::PathBuf;

pub fn fixtures() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../../fixtures")
}
