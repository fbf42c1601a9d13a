//! `cargo xtask perf`: performance scenarios. Results go to `target/perf/` as JSON and a
//! markdown table printed to stdout.
//!
//! * `plan` — planning throughput, CPU and peak memory on a generated 20,000-session trace
//!   that looks like agent traces (shared system prompts, repeated tool outputs).
//! * the load scenarios (`client`, `http`, `fidelity`, `scale`, `long`, `sim`, `api`; all of
//!   them when none is named) — see `perf_load.rs`.

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

/// Shared system prompts of the generated trace: every session starts with one of them.
const SYSTEM_PROMPTS: usize = 8;
/// Bytes of each shared system prompt.
const SYSTEM_PROMPT_BYTES: usize = 6000;
/// Shared tool outputs (the same `ls` listing or file read) that tool results repeat.
const SHARED_TOOL_OUTPUTS: usize = 200;
/// The share of tool results that repeat a shared tool output.
const SHARED_TOOL_SHARE: f64 = 0.3;

/// What [`generate_trace`] wrote.
pub struct TraceStats {
    pub sessions: u64,
    pub turns: u64,
    /// Bytes of all message text (system prompts, user and tool messages, answers), repeats
    /// counted every time.
    pub text_bytes: u64,
    /// Bytes of the distinct texts (each shared text once): a rough count, as the text that is
    /// not shared is taken to be distinct.
    pub distinct_text_bytes: u64,
}

/// Writes a synthetic agent trace: every session has one of [`SYSTEM_PROMPTS`] shared system
/// prompts (its `system_prompt`), and about [`SHARED_TOOL_SHARE`] of the tool results repeat
/// one of [`SHARED_TOOL_OUTPUTS`] shared outputs; the rest of the text is fresh.
pub fn generate_trace(path: &Path, sessions: u32, seed: u64) -> Result<TraceStats> {
    let mut rng = ChaCha8Rng::seed_from_u64(seed);
    let prompts: Vec<String> = (0..SYSTEM_PROMPTS)
        .map(|i| {
            format!(
                "You are coding agent #{i}. Follow the rules below.\n{}",
                text(&mut rng, SYSTEM_PROMPT_BYTES)
            )
        })
        .collect();
    let tool_outputs: Vec<String> = (0..SHARED_TOOL_OUTPUTS)
        .map(|_| {
            let len = rng.random_range(200..4000);
            text(&mut rng, len)
        })
        .collect();
    let mut prompt_used = vec![false; prompts.len()];
    let mut output_used = vec![false; tool_outputs.len()];
    let f =
        std::fs::File::create(path).with_context(|| format!("cannot create {}", path.display()))?;
    let mut w = BufWriter::new(f);
    let (mut turns_total, mut text_bytes, mut distinct) = (0u64, 0u64, 0u64);
    /// Counts a shared text's bytes: every time in `text_bytes`, once in `distinct`.
    fn shared(s: &str, used: &mut bool, text_bytes: &mut u64, distinct: &mut u64) {
        *text_bytes += s.len() as u64;
        if !std::mem::replace(used, true) {
            *distinct += s.len() as u64;
        }
    }
    for s in 0..sessions {
        let p = rng.random_range(0..prompts.len());
        shared(
            &prompts[p],
            &mut prompt_used[p],
            &mut text_bytes,
            &mut distinct,
        );
        let n_turns = rng.random_range(2..=18u32);
        let mut turns = Vec::with_capacity(n_turns as usize);
        for t in 0..n_turns {
            let user = if t > 0 && rng.random_bool(SHARED_TOOL_SHARE) {
                let i = rng.random_range(0..tool_outputs.len());
                shared(
                    &tool_outputs[i],
                    &mut output_used[i],
                    &mut text_bytes,
                    &mut distinct,
                );
                tool_outputs[i].clone()
            } else {
                let len = if t == 0 {
                    1500
                } else {
                    rng.random_range(100..1600)
                };
                let fresh = text(&mut rng, len);
                text_bytes += fresh.len() as u64;
                distinct += fresh.len() as u64;
                fresh
            };
            let answer_len = rng.random_range(60..500);
            let answer = text(&mut rng, answer_len);
            text_bytes += answer.len() as u64;
            distinct += answer.len() as u64;
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
            "system_prompt": prompts[p],
            "turns": turns,
        });
        serde_json::to_writer(&mut w, &line)?;
        w.write_all(b"\n")?;
    }
    w.flush()?;
    Ok(TraceStats {
        sessions: u64::from(sessions),
        turns: turns_total,
        text_bytes,
        distinct_text_bytes: distinct,
    })
}

/// `bench plan` of a trace of `n_sessions` generated sessions, once with the qwen3 tokenizer
/// and once with `--tokenizer none`, unpinned (all cores), under `/usr/bin/time`: wall, CPU
/// (user + system), the CPU-to-wall ratio (~2 on 2 cores when planning uses both) and peak
/// RSS. The trace is deleted afterwards unless `keep_trace`.
fn plan_scenario(n_sessions: u32, keep_trace: bool) -> Result<serde_json::Value> {
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
    // Relative to the workspace root, where the commands run: the printed commands are the
    // ones that ran.
    let trace_rel = format!("target/perf/plan-trace-{n_sessions}.jsonl");
    let trace = root.join(&trace_rel);
    eprintln!("xtask perf plan: generating {}", trace.display());
    let stats = generate_trace(&trace, n_sessions, 42)?;
    let file_bytes = std::fs::metadata(&trace)?.len();
    let mut rows = Vec::new();
    for tokenizer in ["qwen3", "none"] {
        let args = [
            "plan",
            "--json",
            "--num-sessions",
            &n_sessions.to_string(),
            "--tokenizer",
            tokenizer,
            "--dataset",
            &trace_rel,
        ]
        .map(str::to_owned);
        let command = format!("target/release/bench {}", args.join(" "));
        eprintln!("xtask perf plan: {command}");
        let t0 = Instant::now();
        let output = Command::new("/usr/bin/time")
            .args(["-f", "XTASK-TIME %e %U %S %M", "target/release/bench"])
            .args(&args)
            .current_dir(&root)
            .output()
            .context("cannot run /usr/bin/time (Debian package `time`)")?;
        let elapsed = t0.elapsed().as_secs_f64();
        let stderr = String::from_utf8_lossy(&output.stderr);
        if !output.status.success() {
            bail!("{command} failed: {stderr}");
        }
        let line = stderr
            .lines()
            .rfind(|l| l.starts_with("XTASK-TIME "))
            .with_context(|| format!("no /usr/bin/time line in: {stderr}"))?;
        let v: Vec<f64> = line
            .split_whitespace()
            .skip(1)
            .filter_map(|x| x.parse().ok())
            .collect();
        let [wall, user, sys, rss_kb] = v[..] else {
            bail!("cannot read /usr/bin/time's {line:?}");
        };
        let wall_s = if wall > 0.0 { wall } else { elapsed };
        let cpu_s = user + sys;
        let summary: serde_json::Value = serde_json::from_slice(&output.stdout)
            .with_context(|| format!("{command}: not JSON"))?;
        if summary["turns"].as_u64() != Some(stats.turns) {
            bail!(
                "plan has {} turns, the trace {}",
                summary["turns"],
                stats.turns
            );
        }
        let rss = rss_kb * 1024.0;
        rows.push(serde_json::json!({
            "tokenizer": tokenizer,
            "command": command,
            "wall_s": wall_s,
            "turns_per_s": stats.turns as f64 / wall_s,
            "text_mb_per_s": stats.text_bytes as f64 / 1e6 / wall_s,
            "cpu_s": cpu_s,
            "user_s": user,
            "sys_s": sys,
            "cpu_over_wall": cpu_s / wall_s,
            "peak_rss_bytes": rss,
            "peak_rss_over_text": rss / stats.text_bytes as f64,
            "peak_rss_over_distinct_text": rss / stats.distinct_text_bytes.max(1) as f64,
        }));
    }
    if !keep_trace {
        let _ = std::fs::remove_file(&trace);
    }
    let mut command = format!("cargo xtask perf plan --sessions {n_sessions}");
    if keep_trace {
        command.push_str(" --keep-trace");
    }
    Ok(serde_json::json!({
        "scenario": "plan",
        "command": command,
        "trace": trace_rel,
        "trace_kept": keep_trace,
        "trace_seed": 42,
        "sessions": stats.sessions,
        "turns": stats.turns,
        "text_bytes": stats.text_bytes,
        "distinct_text_bytes": stats.distinct_text_bytes,
        "file_bytes": file_bytes,
        "shape": format!("{SYSTEM_PROMPTS} shared system prompts of ~{SYSTEM_PROMPT_BYTES} bytes (one per session, its system_prompt); {:.0}% of tool results repeat one of {SHARED_TOOL_OUTPUTS} shared outputs", SHARED_TOOL_SHARE * 100.0),
        "runs": rows,
    }))
}

/// `cargo xtask perf [plan [--sessions N] [--keep-trace] | SCENARIO... [--scale-seconds S]
/// [--scale-sessions N]]`: without a scenario, every load scenario of `perf_load` (not `plan`).
pub fn run(args: &[String]) -> Result<()> {
    const VALUED: [&str; 3] = ["--sessions", "--scale-seconds", "--scale-sessions"];
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
    let sessions =
        u32::try_from(value("--sessions")?.unwrap_or(20_000)).context("--sessions is too large")?;
    let scale_seconds = u32::try_from(value("--scale-seconds")?.unwrap_or(60))
        .context("--scale-seconds is too large")?;
    let scale_sessions = value("--scale-sessions")?.unwrap_or(50_000);
    let keep_trace = args.iter().any(|a| a == "--keep-trace");
    let names: Vec<String> = args
        .iter()
        .enumerate()
        .filter(|(i, a)| {
            let is_value = *i > 0 && VALUED.contains(&args[i - 1].as_str());
            !a.starts_with("--") && !is_value
        })
        .map(|(_, a)| a.clone())
        .collect();
    if names.first().map(String::as_str) != Some("plan") {
        return crate::perf_load::run(&names, scale_seconds, scale_sessions);
    }
    let which = "plan";
    let result = plan_scenario(sessions, keep_trace)?;
    let path = root().join(format!("target/perf/{which}.json"));
    std::fs::write(&path, serde_json::to_string_pretty(&result)?)?;
    let mb = |k: &str| result[k].as_f64().unwrap_or(0.0) / 1e6;
    println!(
        "plan: {} sessions, {} turns, {:.0} MB of message text ({:.0} MB distinct), {:.0} MB trace file",
        result["sessions"],
        result["turns"],
        mb("text_bytes"),
        mb("distinct_text_bytes"),
        mb("file_bytes"),
    );
    println!();
    println!(
        "| tokenizer | wall s | turns/s | text MB/s | distinct text MB | CPU-s | CPU ÷ wall | peak RSS MB | RSS ÷ text |"
    );
    println!("|---|---|---|---|---|---|---|---|---|");
    let runs = result["runs"].as_array().cloned().unwrap_or_default();
    for r in &runs {
        let f = |k: &str| r[k].as_f64().unwrap_or(f64::NAN);
        println!(
            "| {} | {:.2} | {:.0} | {:.1} | {:.1} | {:.2} | {:.2} | {:.0} | {:.2} |",
            r["tokenizer"].as_str().unwrap_or(""),
            f("wall_s"),
            f("turns_per_s"),
            f("text_mb_per_s"),
            mb("distinct_text_bytes"),
            f("cpu_s"),
            f("cpu_over_wall"),
            f("peak_rss_bytes") / 1e6,
            f("peak_rss_over_text"),
        );
    }
    println!();
    println!(
        "Reproduce: {} (the trace: {}, seed 42{})",
        result["command"].as_str().unwrap_or(""),
        result["trace"].as_str().unwrap_or(""),
        if keep_trace {
            ", kept"
        } else {
            "; add --keep-trace to keep it for the commands below"
        }
    );
    for r in &runs {
        println!(
            "  {}: {}",
            r["tokenizer"].as_str().unwrap_or(""),
            r["command"].as_str().unwrap_or("")
        );
    }
    eprintln!("xtask perf: wrote {}", path.display());
    Ok(())
}
