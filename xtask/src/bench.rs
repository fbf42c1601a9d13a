//! `cargo xtask bench`: how CI uses us. Runs the `openai` journey pack against the embedded
//! simulator in fixed-latency mode and compares it with the committed baseline
//! (`fixtures/baselines/journeys-openai.json`) through the CLI's gates; prints the markdown
//! summary. `cargo xtask bench --update-baseline` rewrites the baseline from a fresh run.

use std::path::{Path, PathBuf};
use std::process::Command;

use anyhow::{Context, Result, bail};

fn root() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR"))
        .parent()
        .map(PathBuf::from)
        .unwrap_or_default()
}

/// The committed baseline.
pub const BASELINE: &str = "fixtures/baselines/journeys-openai.json";

/// The measured configuration (the baseline must be made with the same).
const ARGS: &[&str] = &[
    "journeys",
    "--pack",
    "openai",
    "--sim-ttft-ms",
    "20",
    "--sim-itl-ms",
    "2",
    "--iterations",
    "30",
    "--warmup",
    "5",
    "--runs",
    "3",
];

/// Relative regression allowed, and the absolute noise floor (ms) below which an increase
/// never counts: sub-millisecond journeys (list_models, metrics_scrape) jitter by far more
/// than 20 % on a shared machine, while a real slowdown of the client shows up in the chat
/// journeys as whole milliseconds.
const THRESHOLD: &str = "0.2";
const MIN_DELTA_MS: &str = "5";

/// Runs the suite; `update` rewrites the baseline instead of comparing.
pub fn run(args: &[String]) -> Result<()> {
    let update = match args.first().map(String::as_str) {
        None => false,
        Some("--update-baseline") => true,
        Some(other) => bail!("unknown flag {other:?} (known: --update-baseline)"),
    };
    let root = root();
    let out_dir = root.join("target/bench");
    std::fs::create_dir_all(&out_dir).context("cannot create target/bench")?;
    let status = Command::new("cargo")
        .args(["build", "--release", "-p", "bench-cli"])
        .current_dir(&root)
        .status()
        .context("cannot run cargo build")?;
    if !status.success() {
        bail!("cargo build --release -p bench-cli failed ({status})");
    }
    let bench = root.join("target/release/bench");
    let report = out_dir.join("journeys-openai.json");
    let markdown = out_dir.join("journeys-openai.md");
    let mut cmd = Command::new(&bench);
    cmd.args(ARGS)
        .arg("--output")
        .arg(&report)
        .arg("--markdown")
        .arg(&markdown)
        .current_dir(&root);
    let baseline = root.join(BASELINE);
    if !update {
        if !baseline.is_file() {
            bail!("{BASELINE} is missing: make it with `cargo xtask bench --update-baseline`");
        }
        cmd.arg("--baseline").arg(&baseline).args([
            "--threshold",
            THRESHOLD,
            "--min-delta-ms",
            MIN_DELTA_MS,
        ]);
    }
    eprintln!("xtask bench: {} {}", bench.display(), ARGS.join(" "));
    let status = cmd.status().context("cannot run bench")?;
    if update {
        // (With a baseline, bench prints the comparison itself.)
        print_markdown(&markdown);
        if !status.success() {
            bail!("the run failed ({status}); the baseline was not updated");
        }
        std::fs::copy(&report, &baseline)
            .with_context(|| format!("cannot write {}", baseline.display()))?;
        eprintln!("xtask bench: baseline updated: {BASELINE} (commit it)");
        return Ok(());
    }
    if !status.success() {
        bail!("journeys regressed against {BASELINE} or failed ({status})");
    }
    Ok(())
}

fn print_markdown(path: &Path) {
    if let Ok(md) = std::fs::read_to_string(path) {
        println!("{md}");
    }
}
