//! Integration tests of `bench-run`: the run API against the in-process simulator.
#![allow(clippy::unwrap_used, missing_docs)]

mod grading;
mod handle;
mod journeys;
mod output_cap;
mod sweep;
