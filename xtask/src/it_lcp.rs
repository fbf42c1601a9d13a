//! `cargo xtask it llama-cpp-python`: a second real server implementation.
//!
//! llama-cpp-python's OpenAI-compatible server (PyPI `llama-cpp-python[server]`: FastAPI,
//! uvicorn and sse-starlette, so another framing and keep-alive behaviour than llama.cpp's own
//! server) serving the same SmolLM2 GGUF as `cargo xtask it llama`. PyPI has only its source,
//! so the first install compiles llama.cpp (about 5 minutes on 2 cores; pip keeps the wheel in
//! its cache, later installs take seconds). Built without `GGML_NATIVE`: the native build of
//! 0.3.36 crashed in its first multi-token decode on this machine's AMX/AVX-512 CPU.
//!
//! The server reads only `max_tokens` and has no `/metrics`. `bench run` with its defaults
//! must find that out itself: its check turn sees `max_completion_tokens` ignored, the run
//! sends `max_tokens` with one warning, `run.json` records it, every turn is ok with the
//! output pinned (its streams carry no usage, even with `stream_options.include_usage`: the
//! length is read from the chunks, one token each), the validity check `output_length` passes,
//! and the missing `/metrics` is said once.

use std::fs::File;
use std::path::Path;
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use anyhow::{Context, Result, bail};
use bench_rundir::TurnStatus;
use serde_json::Value;

use crate::it::{
    SMOLLM2, Server, build_bench, ensure_venv, find_gguf, http_get, llama_python, read_turns, root,
};

/// The release checked.
const LLAMA_CPP_PYTHON: &str = "llama-cpp-python[server]==0.3.36";

/// A portable CPU build (see the module's note on the native one).
const CMAKE_ARGS: &str =
    "cmake.args=-DGGML_NATIVE=OFF;-DGGML_AVX2=ON;-DGGML_FMA=ON;-DGGML_F16C=ON;-DGGML_OPENMP=OFF";

const ALIAS: &str = "SmolLM2-135M-Instruct";
const N_CTX: u32 = 4096;
const PINNED: u64 = 16;
const START_TIMEOUT: Duration = Duration::from_secs(120);

/// `cargo xtask it llama-cpp-python`.
pub fn run() -> Result<()> {
    let t_all = Instant::now();
    let root = root();
    let it_dir = root.join("target/it");
    std::fs::create_dir_all(&it_dir)?;
    let t = Instant::now();
    let venv = it_dir.join("lcp-venv");
    let config = format!("--config-settings={CMAKE_ARGS}");
    let installed = ensure_venv(
        "llama-cpp-python",
        &venv,
        llama_python,
        &[&[LLAMA_CPP_PYTHON, &config], &[SMOLLM2, "--no-deps"]],
    )?;
    let gguf = find_gguf(&venv)?;
    let install_s = t.elapsed().as_secs_f64();
    let bench = build_bench("llama-cpp-python", &root)?;

    let t = Instant::now();
    let (server, base) = start(&venv, &gguf, &it_dir)?;
    let start_s = t.elapsed().as_secs_f64();
    eprintln!("xtask it llama-cpp-python: listening on {base} after {start_s:.1} s");
    let t = Instant::now();
    let outcome = replay(&bench, &it_dir, &base);
    if outcome.is_err() {
        server.print_log_tail(40);
    }
    drop(server);
    let line = outcome?;
    println!("xtask it llama-cpp-python: ok: {line}");
    println!(
        "xtask it llama-cpp-python: times: venv {install_s:.1} s ({}), server start {start_s:.1} \
         s, bench run {:.1} s, total {:.1} s",
        if installed { "installed" } else { "reused" },
        t.elapsed().as_secs_f64(),
        t_all.elapsed().as_secs_f64()
    );
    Ok(())
}

/// `python -m llama_cpp.server` on a free loopback port, one request at a time without
/// interrupting the one in progress (its default interrupts a stream when another request
/// arrives); ready when `/v1/models` answers.
fn start(venv: &Path, gguf: &Path, it_dir: &Path) -> Result<(Server, String)> {
    let log = it_dir.join("lcp-server.log");
    let out = File::create(&log).with_context(|| format!("cannot create {}", log.display()))?;
    let err = out.try_clone()?;
    let port = std::net::TcpListener::bind("127.0.0.1:0")?
        .local_addr()?
        .port();
    let threads = std::thread::available_parallelism()
        .map_or(1, |n| n.get().saturating_sub(1))
        .clamp(1, 8);
    eprintln!(
        "xtask it llama-cpp-python: starting the server (n_ctx {N_CTX}, {threads} threads), log {}",
        log.display()
    );
    let child = Command::new(venv.join("bin/python"))
        .args(["-m", "llama_cpp.server", "--model"])
        .arg(gguf)
        .args(["--model_alias", ALIAS, "--host", "127.0.0.1"])
        .args(["--port", &port.to_string()])
        .args(["--n_ctx", &N_CTX.to_string()])
        .args(["--n_threads", &threads.to_string()])
        .args(["--interrupt_requests", "False"])
        .stdin(Stdio::null())
        .stdout(out)
        .stderr(err)
        .spawn()
        .context("cannot start llama_cpp.server")?;
    let base = format!("http://127.0.0.1:{port}");
    Server::spawned("llama-cpp-python", child, log).wait_ready(
        "llama-cpp-python's server",
        START_TIMEOUT,
        || matches!(http_get(&base, "/v1/models"), Ok((200, _))).then(|| base.clone()),
    )
}

/// `bench run` at its defaults (no `--legacy-max-tokens`) and the checks; the summary line.
fn replay(bench: &Path, it_dir: &Path, base: &str) -> Result<String> {
    let run_dir = it_dir.join("lcp-run");
    let _ = std::fs::remove_dir_all(&run_dir);
    let stderr_path = it_dir.join("lcp-run.stderr");
    let pinned = format!("fixed:{PINNED}");
    let args = [
        "run",
        "--base-url",
        base,
        "-c",
        "2",
        "--num-sessions",
        "3",
        "--max-turns",
        "4",
        "--max-context",
        "1200",
        "--output-policy",
        &pinned,
        "--max-model-len",
        &N_CTX.to_string(),
        "--turn-timeout",
        "300s",
        "--json",
        "--run-dir",
    ];
    eprintln!("xtask it llama-cpp-python: bench {}", args.join(" "));
    let status = Command::new(bench)
        .args(args)
        .arg(&run_dir)
        .stdout(Stdio::null())
        .stderr(File::create(&stderr_path)?)
        .status()
        .with_context(|| format!("cannot run {}", bench.display()))?;
    let stderr = std::fs::read_to_string(&stderr_path).unwrap_or_default();
    let mut problems = Vec::new();
    if !status.success() {
        problems.push(format!("bench run exited with {status}"));
    }
    // The check turns found the field the server honours, said so once and recorded it.
    let said = stderr
        .lines()
        .filter(|l| l.contains("ignores max_completion_tokens and honours max_tokens"))
        .count();
    if said != 1 {
        problems.push(format!(
            "{said} warnings that max_tokens is sent (want 1); stderr in {}",
            stderr_path.display()
        ));
    }
    if stderr
        .matches("the server has no /metrics (HTTP 404)")
        .count()
        != 1
    {
        problems.push(format!(
            "no single note that /metrics is absent; stderr in {}",
            stderr_path.display()
        ));
    }
    let run_json: Value = serde_json::from_str(
        &std::fs::read_to_string(run_dir.join("run.json")).context("cannot read run.json")?,
    )?;
    let cap = &run_json["output_cap"];
    if cap["field"] != "max_tokens" || cap["honoured"] != true {
        problems.push(format!("run.json output_cap is {cap}"));
    }
    if run_json["run"]["request"]["output_cap_field"] != "max_tokens" {
        problems.push(format!(
            "run.json run.request.output_cap_field is {}",
            run_json["run"]["request"]["output_cap_field"]
        ));
    }
    let turns = read_turns(&run_dir.join(bench_rundir::files::TURNS))?;
    if turns.is_empty() {
        problems.push("no turn recorded".into());
    }
    for t in &turns {
        let who = format!("{} turn {}", t.session_id, t.turn_index);
        if t.status != TurnStatus::Ok {
            problems.push(format!(
                "{who}: {:?} {}",
                t.error_kind,
                t.error.as_deref().unwrap_or("")
            ));
            continue;
        }
        // No usage in its streams (bench counts the text with its own tokenizer: close, not
        // exact); one token a chunk, so the chunks tell the length the server made.
        let chunks = t.chunk_gaps_ms.len() as u64 + 1;
        if chunks != PINNED {
            problems.push(format!(
                "{who}: {chunks} output chunks (one token each), not the {PINNED} pinned"
            ));
        }
    }
    let result: Value = serde_json::from_str(
        &std::fs::read_to_string(run_dir.join("result.json")).context("cannot read result.json")?,
    )?;
    let output_length = result["validity"]["checks"]
        .as_array()
        .and_then(|c| c.iter().find(|c| c["name"] == "output_length"))
        .cloned()
        .unwrap_or(Value::Null);
    if output_length["status"] != "pass" {
        problems.push(format!("validity output_length: {output_length}"));
    }
    if !problems.is_empty() {
        bail!(
            "{} problem(s) in {}:\n  - {}",
            problems.len(),
            run_dir.display(),
            problems.join("\n  - ")
        );
    }
    Ok(format!(
        "{} turns ok, each {PINNED} output tokens (one a chunk; no usage in its streams), sent as \
         max_tokens after the check turns ({}); /metrics absent, said once",
        turns.len(),
        cap["evidence"].as_str().unwrap_or("")
    ))
}
