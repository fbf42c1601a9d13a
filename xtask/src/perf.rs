//! `cargo xtask perf`: performance scenarios. Results go to `target/perf/` as JSON and a
//! markdown table printed to stdout.
//!
//! * `plan` — planning throughput and peak memory on a generated 20,000-session trace.
//! * the load scenarios (`client`, `http`, `fidelity`, `scale`, `long`, `sim`; all of them when
//!   none is named) — see `perf_load.rs`.

use std::io::{BufWriter, Write};
use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::Instant;

use anyhow::{Context, Result, bail};
use rand::{Rng, SeedableRng};
use rand_chacha::ChaCha8Rng;

fn root() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR"))
        .parent()
        .map(PathBuf::from)
        .unwrap_or_default()
}

const VOCAB: &[&str] = &[
    "the", "function", "returns", "error", "value", "file", "test", "assert", "import", "self",
    "config", "parser", "token", "request", "response", "server", "client", "cache", "prefix",
    "let", "mut", "fn", "struct", "impl", "match", "Some", "None", "Ok", "Err", "vec", "String",
    "line", "column", "failed", "passed", "warning", "build", "cargo", "python", "def", "class",
    "return", "if", "else", "for", "while", "in", "not", "and", "or", "with", "open", "read",
];

fn text(rng: &mut ChaCha8Rng, bytes: usize) -> String {
    let mut s = String::with_capacity(bytes + 16);
    let mut col = 0;
    while s.len() < bytes {
        let w = VOCAB[rng.random_range(0..VOCAB.len())];
        s.push_str(w);
        col += w.len() + 1;
        if col > 72 {
            s.push('\n');
            col = 0;
        } else {
            s.push(if rng.random_bool(0.1) { '_' } else { ' ' });
        }
        if rng.random_bool(0.02) {
            s.push_str(&rng.random_range(0..100_000u32).to_string());
        }
    }
    s
}

/// Writes a synthetic agent trace; returns (sessions, turns, text bytes).
pub fn generate_trace(path: &Path, sessions: u32, seed: u64) -> Result<(u64, u64, u64)> {
    let mut rng = ChaCha8Rng::seed_from_u64(seed);
    let f =
        std::fs::File::create(path).with_context(|| format!("cannot create {}", path.display()))?;
    let mut w = BufWriter::new(f);
    let (mut turns_total, mut text_bytes) = (0u64, 0u64);
    for s in 0..sessions {
        let n_turns = rng.random_range(2..=18u32);
        let mut turns = Vec::with_capacity(n_turns as usize);
        for t in 0..n_turns {
            let user_len = if t == 0 {
                1500
            } else {
                rng.random_range(100..1600)
            };
            let user = text(&mut rng, user_len);
            let answer_len = rng.random_range(60..500);
            let answer = text(&mut rng, answer_len);
            text_bytes += (user.len() + answer.len()) as u64;
            turns.push(serde_json::json!({
                "index": t,
                "input_delta": [{"role": if t == 0 { "user" } else { "tool" }, "content": user}],
                "assistant_text": answer,
                "output_tokens": rng.random_range(20..150u32),
                "pre_gap_ms": if t == 0 { 0.0 } else { rng.random_range(200.0..8000.0) },
            }));
        }
        turns_total += u64::from(n_turns);
        let line = serde_json::json!({
            "session_id": format!("perf-{s}"),
            "source": {"dataset": "perf", "model": "openai/gpt-5.4"},
            "turns": turns,
        });
        serde_json::to_writer(&mut w, &line)?;
        w.write_all(b"\n")?;
    }
    w.flush()?;
    Ok((u64::from(sessions), turns_total, text_bytes))
}

fn plan_scenario(n_sessions: u32) -> Result<serde_json::Value> {
    let root = root();
    let out_dir = root.join("target/perf");
    std::fs::create_dir_all(&out_dir)?;
    eprintln!("xtask perf plan: building the release binary");
    let st = Command::new("cargo")
        .args(["build", "--release", "-p", "bench-cli"])
        .current_dir(&root)
        .status()?;
    if !st.success() {
        bail!("release build failed");
    }
    let trace = out_dir.join(format!("plan-trace-{n_sessions}.jsonl"));
    eprintln!("xtask perf plan: generating {}", trace.display());
    let (sessions, turns, text_bytes) = generate_trace(&trace, n_sessions, 42)?;
    let file_bytes = std::fs::metadata(&trace)?.len();
    let mut rows = Vec::new();
    for tokenizer in ["qwen3", "none"] {
        eprintln!("xtask perf plan: bench plan --tokenizer {tokenizer}");
        let t0 = Instant::now();
        let output = Command::new("/usr/bin/time")
            .args(["-f", "%M"])
            .arg(root.join("target/release/bench"))
            .args([
                "plan",
                "--json",
                "--num-sessions",
                "20000",
                "--tokenizer",
                tokenizer,
            ])
            .arg("--dataset")
            .arg(&trace)
            .output()
            .context("cannot run /usr/bin/time (Debian package `time`)")?;
        let wall_s = t0.elapsed().as_secs_f64();
        if !output.status.success() {
            bail!(
                "bench plan failed: {}",
                String::from_utf8_lossy(&output.stderr)
            );
        }
        let stderr = String::from_utf8_lossy(&output.stderr);
        let rss_kb: f64 = stderr
            .lines()
            .filter_map(|l| l.trim().parse().ok())
            .next_back()
            .context("no peak RSS from /usr/bin/time")?;
        let summary: serde_json::Value = serde_json::from_slice(&output.stdout)?;
        if summary["turns"].as_u64() != Some(turns) {
            bail!("plan has {} turns, the trace {turns}", summary["turns"]);
        }
        let rss = rss_kb * 1024.0;
        rows.push(serde_json::json!({
            "tokenizer": tokenizer,
            "wall_s": wall_s,
            "turns_per_s": turns as f64 / wall_s,
            "text_mb_per_s": text_bytes as f64 / 1e6 / wall_s,
            "peak_rss_bytes": rss,
            "peak_rss_over_text": rss / text_bytes as f64,
        }));
    }
    let _ = std::fs::remove_file(&trace);
    Ok(serde_json::json!({
        "scenario": "plan",
        "sessions": sessions,
        "turns": turns,
        "text_bytes": text_bytes,
        "file_bytes": file_bytes,
        "runs": rows,
    }))
}

/// `cargo xtask perf [plan [--sessions N] | SCENARIO... [--scale-seconds S]]`: without a
/// scenario, every load scenario of `perf_load` (not `plan`).
pub fn run(args: &[String]) -> Result<()> {
    let value = |flag: &str| -> Result<Option<u64>> {
        match args.iter().position(|a| a == flag) {
            Some(i) => Ok(Some(
                args.get(i + 1)
                    .and_then(|v| v.parse().ok())
                    .with_context(|| format!("{flag} needs a number"))?,
            )),
            None => Ok(None),
        }
    };
    let sessions = value("--sessions")?.unwrap_or(20_000) as u32;
    let scale_seconds = value("--scale-seconds")?.unwrap_or(60) as u32;
    let names: Vec<String> = args
        .iter()
        .enumerate()
        .filter(|(i, a)| {
            let is_value =
                *i > 0 && matches!(args[i - 1].as_str(), "--sessions" | "--scale-seconds");
            !a.starts_with("--") && !is_value
        })
        .map(|(_, a)| a.clone())
        .collect();
    if names.first().map(String::as_str) != Some("plan") {
        return crate::perf_load::run(&names, scale_seconds);
    }
    let which = "plan";
    let result = plan_scenario(sessions)?;
    let path = root().join(format!("target/perf/{which}.json"));
    std::fs::write(&path, serde_json::to_string_pretty(&result)?)?;
    println!("| scenario | tokenizer | turns/s | text MB/s | peak RSS | RSS ÷ trace text |");
    println!("|---|---|---|---|---|---|");
    for r in result["runs"].as_array().into_iter().flatten() {
        println!(
            "| plan, {} sessions, {} turns, {:.0} MB text | {} | {:.0} | {:.1} | {:.0} MB | {:.2} |",
            result["sessions"],
            result["turns"],
            result["text_bytes"].as_f64().unwrap_or(0.0) / 1e6,
            r["tokenizer"].as_str().unwrap_or(""),
            r["turns_per_s"].as_f64().unwrap_or(0.0),
            r["text_mb_per_s"].as_f64().unwrap_or(0.0),
            r["peak_rss_bytes"].as_f64().unwrap_or(0.0) / 1e6,
            r["peak_rss_over_text"].as_f64().unwrap_or(0.0),
        );
    }
    eprintln!("xtask perf: wrote {}", path.display());
    Ok(())
}
