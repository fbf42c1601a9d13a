//! `cargo xtask ci`: the same checks as `.ci/run`, for a developer's machine.

use std::path::PathBuf;
use std::process::Command;

use anyhow::{Context, Result, bail};

fn root() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR"))
        .parent()
        .map(PathBuf::from)
        .unwrap_or_default()
}

fn step(name: &str, program: &str, args: &[&str], env: &[(&str, &str)]) -> Result<()> {
    eprintln!("xtask ci: {name}: {program} {}", args.join(" "));
    let status = Command::new(program)
        .args(args)
        .envs(env.iter().copied())
        .current_dir(root())
        .status()
        .with_context(|| format!("cannot run {program}"))?;
    if !status.success() {
        bail!("{name} failed ({status})");
    }
    Ok(())
}

/// Runs every check in order, stopping at the first failure.
pub fn run() -> Result<()> {
    step("format", "cargo", &["fmt", "--all", "--check"], &[])?;
    step(
        "lint",
        "cargo",
        &[
            "clippy",
            "--workspace",
            "--all-targets",
            "--",
            "-D",
            "warnings",
        ],
        &[],
    )?;
    step(
        "docs",
        "cargo",
        &["doc", "--workspace", "--no-deps"],
        &[("RUSTDOCFLAGS", "-D warnings")],
    )?;
    step("tests", "cargo", &["test", "--workspace"], &[])?;
    step(
        "main command",
        "cargo",
        &["run", "--release", "-p", "bench-cli", "--", "run"],
        &[],
    )?;
    crate::bench::run(&[])?;
    crate::it::run(&["llama".to_owned()])?;
    crate::it::run(&["omnigent".to_owned()])?;
    Ok(())
}
