//! `cargo xtask`: project automation (matklad's convention). One module per task.
//!
//! * `cargo xtask ci` — runs `bash .ci/run`, the one list of CI checks, and exits with its
//!   status.
//! * `cargo xtask perf [SCENARIO...]` — the load scenarios side by side with peers (client,
//!   http, fidelity, scale, long, sim); `cargo xtask perf plan` — planning. Results in
//!   `target/perf/`.
//! * `cargo xtask it llama` — integration test against a real llama.cpp server (needs PyPI).
//! * `cargo xtask it omnigent` — the `agent-sessions` journey pack against a real Omnigent agent
//!   server (needs PyPI and Python 3.12).
//! * `cargo xtask bench [--update-baseline] [--latency-factor F]` — the `openai` journey pack,
//!   a short replay and one sweep point against the embedded simulator, gated against the
//!   baselines in `fixtures/baselines/` (see `bench.rs`).
//! * `cargo xtask fuzz [--seconds N] [--target NAME...] [--jobs J]` — the cargo-fuzz targets of
//!   `xtask/fuzz/` (nightly; installs cargo-fuzz when missing), N seconds each; exit 1 on a
//!   crash (see `fuzz.rs`, `docs/fuzzing.md`). Not part of CI.
//!
//! `bench` and `it` build the release binary unless `BENCH_BIN` names one.

mod bench;
mod ci;
mod fuzz;
mod it;
mod it_export;
mod it_lcp;
mod it_sdk;
mod perf;
mod perf_load;
mod tidy;

use std::process::ExitCode;

/// `BENCH_BIN`: the `bench` binary `bench` and `it` use instead of building the release one
/// (CI gives its test build's, so that one build serves every step).
pub fn bench_bin() -> Option<std::path::PathBuf> {
    std::env::var_os("BENCH_BIN")
        .filter(|v| !v.is_empty())
        .map(std::path::PathBuf::from)
}

fn main() -> ExitCode {
    let args: Vec<String> = std::env::args().skip(1).collect();
    let result = match args.first().map(String::as_str) {
        Some("ci") => return ci::run(&args[1..]),
        Some("perf") => perf::run(&args[1..]),
        Some("it") => it::run(&args[1..]),
        Some("bench") => bench::run(&args[1..]),
        Some("fuzz") => fuzz::run(&args[1..]),
        Some("-h" | "--help") | None => {
            println!(
                "usage: cargo xtask <task>\n\ntasks:\n  ci            bash .ci/run: every CI check, exiting with its status\n  perf [SCENARIO...] [--scale-sessions N] [--scale-seconds S]\n                load scenarios with peers: client http fidelity scale long sim api\n                (all by default; summary in target/perf/summary.json); fidelity-split:\n                fidelity with each TTFT split into the simulator's own and the client's\n  perf plan [--sessions N] [--keep-trace]\n                planning throughput and memory\n  it llama      real llama.cpp server (xllamacpp + SmolLM2 from PyPI)\n  it omnigent   Omnigent agent server (PyPI, Python 3.12) with the agent-sessions journeys\n  bench [--update-baseline] [--latency-factor F]\n                journeys, a replay and a sweep point vs the committed baselines (how CI uses us)\n  fuzz [--seconds N] [--target NAME...] [--jobs J]\n                cargo-fuzz targets of xtask/fuzz (nightly), N s each; exit 1 on a crash"
            );
            Ok(())
        }
        Some(other) => {
            eprintln!("xtask: unknown task {other:?} (known: ci, perf, it, bench, fuzz)");
            return ExitCode::from(2);
        }
    };
    match result {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("xtask: {e:#}");
            ExitCode::FAILURE
        }
    }
}
