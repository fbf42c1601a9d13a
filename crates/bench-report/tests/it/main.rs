//! Integration tests of `bench-report`: percentiles, the steady window, every metric of
//! `result.json`, the console report and the committed JSON Schema.
#![allow(clippy::unwrap_used, clippy::expect_used, missing_docs)]

mod common;
mod compare;
mod html;
mod metrics;
mod percentile;
mod schema;
mod sessions;
mod slo;
mod validity;
