//! `cargo xtask it sdk`: the official `openai` and `anthropic` Python SDKs (PyPI) as clients of
//! `bench sim`.
//!
//! Creates or reuses a venv in `target/it/sdk-venv` with both SDKs (pinned), starts two
//! simulators, one over plain HTTP and one over HTTPS (a self-signed CA made at start) whose
//! answers begin with four reasoning tokens, each logging every answer's text
//! (`--request-log … --log-text`), and runs `xtask/scripts/sdk_check.py` against each: chat
//! completions, Responses, Messages and completions, streamed, plainly and with a conversation
//! carrying tool calls and results, parsed by the SDKs' own stream readers. What each SDK
//! accumulated (text, reasoning, usage) must equal the simulator's log; a mismatch is a
//! simulator bug. Prints the events each SDK parsed.

use std::process::{Command, Stdio};
use std::time::Instant;

use anyhow::{Context, Result, bail};
use serde_json::Value;

use crate::it::{Sim, build_bench, ensure_venv, llama_python, root};

/// The SDK releases the simulator's wire formats were last checked with.
const OPENAI_SDK: &str = "openai==3.63.0";
const ANTHROPIC_SDK: &str = "anthropic==2.17.0";

/// `cargo xtask it sdk`.
pub fn run() -> Result<()> {
    let t0 = Instant::now();
    let root = root();
    let bench = build_bench("sdk", &root)?;
    let it_dir = root.join("target/it");
    std::fs::create_dir_all(&it_dir)?;
    let venv = it_dir.join("sdk-venv");
    ensure_venv("sdk", &venv, llama_python, &[&[OPENAI_SDK, ANTHROPIC_SDK]])?;
    let dir = it_dir.join("sdk");
    if dir.exists() {
        std::fs::remove_dir_all(&dir)?;
    }
    std::fs::create_dir_all(&dir)?;
    let ca = dir.join("ca.pem");
    let ca_arg = ca.to_string_lossy().into_owned();
    let timing = [
        "--port",
        "0",
        "--ttft-ms",
        "2",
        "--itl-ms",
        "1",
        "--log-text",
    ];
    let plain_args: Vec<&str> = timing.to_vec();
    let mut tls_args: Vec<&str> = timing.to_vec();
    tls_args.extend(["--reasoning-tokens", "4", "--tls-self-signed", &ca_arg]);
    let mut events: Vec<(String, Value)> = Vec::new();
    let mut failed = Vec::new();
    for (label, args, tls) in [
        ("plain", plain_args, false),
        ("tls-reasoning", tls_args, true),
    ] {
        let log = dir.join(format!("{label}.jsonl"));
        let sim = Sim::start_with(&bench, &log, &args)?;
        let mut cmd = Command::new(venv.join("bin/python"));
        cmd.arg(root.join("xtask/scripts/sdk_check.py"))
            .arg(&sim.url)
            .arg(&log)
            .args(["--label", label]);
        if tls {
            cmd.arg("--ca").arg(&ca);
        }
        let out = cmd
            .stdin(Stdio::null())
            .stderr(Stdio::inherit())
            .output()
            .context("cannot run sdk_check.py")?;
        sim.stop()?;
        let stdout = String::from_utf8_lossy(&out.stdout);
        for line in stdout.lines() {
            println!("{line}");
        }
        let summary = stdout
            .lines()
            .filter_map(|l| serde_json::from_str::<Value>(l).ok())
            .find_map(|v| v.get("summary").cloned());
        match summary {
            Some(s) => events.push((label.to_owned(), s["events"].clone())),
            None => failed.push(format!("{label}: sdk_check.py printed no summary")),
        }
        if !out.status.success() {
            failed.push(format!(
                "{label}: the SDKs disagree with the simulator (sdk_check.py {}; above)",
                out.status
            ));
        }
    }
    for (label, e) in &events {
        let count = |sdk: &str| e[sdk].as_u64().unwrap_or(0);
        println!(
            "xtask it sdk: {label}: the openai SDK parsed {} events, the anthropic SDK {}",
            count("openai"),
            count("anthropic")
        );
        if count("openai") == 0 || count("anthropic") == 0 {
            failed.push(format!("{label}: an SDK parsed no event"));
        }
    }
    if !failed.is_empty() {
        bail!("{}", failed.join("; "));
    }
    println!(
        "xtask it sdk: ok ({OPENAI_SDK}, {ANTHROPIC_SDK}; {:.0} s)",
        t0.elapsed().as_secs_f64()
    );
    Ok(())
}
