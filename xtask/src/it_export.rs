//! `cargo xtask it exporters`: a run's results where teams look, checked by real receivers.
//!
//! - **OTLP**: `xtask/scripts/otlp_receiver.py` decodes every export request with the official
//!   `opentelemetry-proto` package (PyPI); a `bench run --otlp-endpoint` against `bench sim`
//!   must leave it exactly one span per measured turn and one per session play, each turn's
//!   token counts, model and first-token event equal to its record in `turns.jsonl`. A run
//!   whose receiver is down still exits 0, with one warning.
//!
//! - **MLflow**: a real `mlflow server` (PyPI; SQLite store, artifacts proxied through it).
//!   `bench run --mlflow` must leave exactly one run in its experiment whose parameters,
//!   metrics, verdict tag and artifacts equal the run's `result.json`, as MLflow's own Python
//!   client reads them back (`xtask/scripts/mlflow_readback.py`); `bench sweep --mlflow` one
//!   parent run (`sweep.json`, `sweep.html`) with a child per point. A server that is down costs
//!   the run one warning.
//!
//! The venv is `target/it/exporters-venv` (pinned packages, reused while they stay the same).

use std::io::{BufRead, BufReader};
use std::path::Path;
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use anyhow::{Context, Result, bail};
use serde_json::Value;

use crate::it::{Sim, build_bench, ensure_venv, http_get, llama_python, root};

/// The OTLP protobuf definitions the receiver decodes with.
const OTLP_PROTO: &str = "opentelemetry-proto==1.45.2";
/// The MLflow release checked (3.18.0 needs an `mlflow-tracing` PyPI does not have).
const MLFLOW: &str = "mlflow==3.17.2";

/// A child process killed when dropped.
struct Kill(Child);

impl Drop for Kill {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

/// `cargo xtask it exporters`.
pub fn run() -> Result<()> {
    let t0 = Instant::now();
    let root = root();
    let bench = build_bench("exporters", &root)?;
    let it_dir = root.join("target/it");
    std::fs::create_dir_all(&it_dir)?;
    let venv = it_dir.join("exporters-venv");
    ensure_venv("exporters", &venv, llama_python, &[&[OTLP_PROTO, MLFLOW]])?;
    let dir = it_dir.join("exporters");
    if dir.exists() {
        std::fs::remove_dir_all(&dir)?;
    }
    std::fs::create_dir_all(&dir)?;
    let sim = Sim::start_with(
        &bench,
        &dir.join("sim.jsonl"),
        &["--port", "0", "--ttft-ms", "5", "--itl-ms", "1"],
    )?;
    let result = otlp(&bench, &venv, &root, &dir, &sim.url);
    let result = result.and_then(|()| mlflow(&bench, &venv, &root, &dir, &sim.url));
    sim.stop()?;
    result?;
    println!(
        "xtask it exporters: ok ({OTLP_PROTO}, {MLFLOW}; {:.0} s)",
        t0.elapsed().as_secs_f64()
    );
    Ok(())
}

/// Starts `script ARGS PORT_FILE` in the venv; returns it and the port it wrote.
fn start_receiver(venv: &Path, script: &Path, port_file: &Path) -> Result<(Kill, u16)> {
    let child = Command::new(venv.join("bin/python"))
        .arg(script)
        .arg(port_file)
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(Stdio::inherit())
        .spawn()
        .with_context(|| format!("cannot start {}", script.display()))?;
    let child = Kill(child);
    let t0 = Instant::now();
    loop {
        if let Some(port) = std::fs::read_to_string(port_file)
            .ok()
            .and_then(|p| p.trim().parse().ok())
        {
            return Ok((child, port));
        }
        if t0.elapsed() > Duration::from_secs(60) {
            bail!("{} did not start within 60 s", script.display());
        }
        std::thread::sleep(Duration::from_millis(100));
    }
}

/// `bench run` against the simulator with `extra`; its stderr.
fn bench_run(bench: &Path, url: &str, run_dir: &Path, extra: &[&str]) -> Result<String> {
    let out = Command::new(bench)
        .args([
            "run",
            "--base-url",
            url,
            "--tokenizer",
            "none",
            "--dataset",
            "random",
        ])
        .args([
            "--turns",
            "3",
            "--num-sessions",
            "8",
            "-c",
            "4",
            "--output-len",
            "16",
        ])
        .arg("--run-dir")
        .arg(run_dir)
        .args(extra)
        .stdin(Stdio::null())
        .output()
        .context("cannot run bench run")?;
    let stderr = String::from_utf8_lossy(&out.stderr).into_owned();
    if !out.status.success() {
        bail!("bench run {extra:?} failed ({}):\n{stderr}", out.status);
    }
    Ok(stderr)
}

fn read_jsonl(path: &Path) -> Result<Vec<Value>> {
    let f = std::fs::File::open(path).with_context(|| format!("cannot read {}", path.display()))?;
    BufReader::new(f)
        .lines()
        .map(|l| Ok(serde_json::from_str(&l?)?))
        .collect()
}

fn otlp(bench: &Path, venv: &Path, root: &Path, dir: &Path, sim_url: &str) -> Result<()> {
    let (_receiver, port) = start_receiver(
        venv,
        &root.join("xtask/scripts/otlp_receiver.py"),
        &dir.join("otlp.port"),
    )?;
    let receiver = format!("http://127.0.0.1:{port}");
    let run_dir = dir.join("otlp-run");
    let stderr = bench_run(bench, sim_url, &run_dir, &["--otlp-endpoint", &receiver])?;
    if !stderr.contains(&format!("otlp: 32 spans sent to {receiver} in 1 requests")) {
        bail!("bench run did not say it sent 32 spans:\n{stderr}");
    }
    let (_, body) = http_get(&receiver, "/spans")?;
    let spans: Vec<Value> = serde_json::from_str(&body).context("the receiver's /spans")?;
    let turns: Vec<Value> = read_jsonl(&run_dir.join("turns.jsonl"))?
        .into_iter()
        .filter(|t| t["warmup"] != true)
        .collect();
    let sessions = spans.iter().filter(|s| s["parent_span_id"] == "").count();
    let children: Vec<&Value> = spans.iter().filter(|s| s["parent_span_id"] != "").collect();
    println!(
        "xtask it exporters: otlp: the receiver decoded {} spans ({sessions} session spans, {} turn spans) for {} turns",
        spans.len(),
        children.len(),
        turns.len()
    );
    if sessions != 8 || children.len() != turns.len() || turns.len() != 24 {
        bail!("expected 8 session spans and 24 turn spans, one per turn record");
    }
    let mut failed = Vec::new();
    for t in &turns {
        let conv = format!("{}#{}", t["session_id"].as_str().unwrap_or(""), t["replay"]);
        let Some(s) = children.iter().find(|s| {
            s["attributes"]["gen_ai.conversation.id"] == conv.as_str()
                && s["attributes"]["bench.turn_index"].as_i64() == t["turn_index"].as_i64()
        }) else {
            failed.push(format!("no span for {conv} turn {}", t["turn_index"]));
            continue;
        };
        let a = &s["attributes"];
        let checks = [
            ("name", s["name"] == "chat bench-sim"),
            ("kind client", s["kind"] == 3),
            ("operation", a["gen_ai.operation.name"] == "chat"),
            ("model", a["gen_ai.request.model"] == "bench-sim"),
            (
                "input tokens",
                a["gen_ai.usage.input_tokens"].as_i64() == t["input_tokens"].as_i64(),
            ),
            (
                "output tokens",
                a["gen_ai.usage.output_tokens"].as_i64() == t["output_tokens"].as_i64(),
            ),
            ("status ok", s["status"]["code"] == 1),
            (
                "first-token event",
                s["events"][0]["name"] == "gen_ai.first_token"
                    && (s["events"][0]["attributes"]["bench.ttft_ms"]
                        .as_f64()
                        .unwrap_or(-1.0)
                        - t["ttft_ms"].as_f64().unwrap_or(-2.0))
                    .abs()
                        < 1e-9,
            ),
            (
                "the event inside the span",
                s["start_ns"].as_u64() <= s["events"][0]["time_ns"].as_u64()
                    && s["events"][0]["time_ns"].as_u64() <= s["end_ns"].as_u64(),
            ),
            (
                "one trace per session play",
                spans.iter().any(|p| {
                    p["parent_span_id"] == ""
                        && p["span_id"] == s["parent_span_id"]
                        && p["trace_id"] == s["trace_id"]
                }),
            ),
        ];
        for (what, ok) in checks {
            if !ok {
                failed.push(format!("{conv} turn {}: {what}: {s}", t["turn_index"]));
            }
        }
    }
    if !failed.is_empty() {
        bail!("the spans differ from the records:\n{}", failed.join("\n"));
    }
    // A receiver that is down: the run is unaffected but for one warning.
    let down = bench_run(
        bench,
        sim_url,
        &dir.join("otlp-down"),
        &["--otlp-endpoint", "http://127.0.0.1:9"],
    )?;
    if !down.contains("warning: otlp: spans not exported: http://127.0.0.1:9/v1/traces") {
        bail!("a down receiver was not a warning:\n{down}");
    }
    println!("xtask it exporters: otlp: a receiver that is down cost the run one warning");
    Ok(())
}

/// A process group stopped with SIGTERM when dropped (`mlflow server` runs workers of its own).
struct Group(Child);

impl Drop for Group {
    fn drop(&mut self) {
        let _ = Command::new("kill")
            .args(["-TERM", "--", &format!("-{}", self.0.id())])
            .stderr(Stdio::null())
            .status();
        let t0 = Instant::now();
        while matches!(self.0.try_wait(), Ok(None)) && t0.elapsed() < Duration::from_secs(15) {
            std::thread::sleep(Duration::from_millis(100));
        }
        // Whatever of the group outlived the signal (uvicorn's worker may) goes now.
        let _ = Command::new("kill")
            .args(["-KILL", "--", &format!("-{}", self.0.id())])
            .stderr(Stdio::null())
            .status();
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

/// What MLflow's own client reads back of `experiment`.
fn readback(venv: &Path, root: &Path, url: &str, experiment: &str) -> Result<Value> {
    let out = Command::new(venv.join("bin/python"))
        .arg(root.join("xtask/scripts/mlflow_readback.py"))
        .args([url, experiment])
        .stdin(Stdio::null())
        .stderr(Stdio::inherit())
        .output()
        .context("cannot run mlflow_readback.py")?;
    if !out.status.success() {
        bail!(
            "mlflow_readback.py {experiment}: {}",
            String::from_utf8_lossy(&out.stdout)
        );
    }
    serde_json::from_slice(&out.stdout).context("mlflow_readback.py's output")
}

fn close(a: Option<f64>, b: Option<f64>) -> bool {
    match (a, b) {
        (Some(a), Some(b)) => (a - b).abs() <= 1e-9 * b.abs().max(1.0),
        _ => false,
    }
}

fn mlflow(bench: &Path, venv: &Path, root: &Path, dir: &Path, sim_url: &str) -> Result<()> {
    use std::os::unix::process::CommandExt;
    let t0 = Instant::now();
    let store = dir.join("mlflow");
    std::fs::create_dir_all(&store)?;
    let port = std::net::TcpListener::bind("127.0.0.1:0")?
        .local_addr()?
        .port();
    let url = format!("http://127.0.0.1:{port}");
    let log = std::fs::File::create(dir.join("mlflow-server.log"))?;
    let server = Command::new(venv.join("bin/mlflow"))
        .args([
            "server",
            "--host",
            "127.0.0.1",
            "--port",
            &port.to_string(),
            "--workers",
            "1",
        ])
        .arg("--backend-store-uri")
        .arg(format!("sqlite:///{}", store.join("mlflow.db").display()))
        .arg("--artifacts-destination")
        .arg(store.join("artifacts"))
        .env("MLFLOW_SERVER_ENABLE_JOB_EXECUTION", "false")
        .stdin(Stdio::null())
        .stdout(log.try_clone()?)
        .stderr(log)
        .process_group(0)
        .spawn()
        .context("cannot start mlflow server")?;
    let _server = Group(server);
    loop {
        if matches!(http_get(&url, "/health"), Ok((200, _))) {
            break;
        }
        if t0.elapsed() > Duration::from_secs(120) {
            bail!(
                "mlflow server did not answer /health within 120 s (see {})",
                dir.join("mlflow-server.log").display()
            );
        }
        std::thread::sleep(Duration::from_millis(250));
    }
    println!(
        "xtask it exporters: mlflow: server ready in {:.0} s",
        t0.elapsed().as_secs_f64()
    );

    // One run.
    let run_dir = dir.join("mlflow-run");
    let stderr = bench_run(
        bench,
        sim_url,
        &run_dir,
        &[
            "--mlflow",
            &url,
            "--mlflow-experiment",
            "it-run",
            "--cost-per-hour",
            "2",
        ],
    )?;
    if !stderr.contains("mlflow: logged as run ") {
        bail!("bench run did not say it logged to MLflow:\n{stderr}");
    }
    let result: Value = serde_json::from_slice(&std::fs::read(run_dir.join("result.json"))?)?;
    let got = readback(venv, root, &url, "it-run")?;
    let runs = got["runs"].as_array().context("runs")?;
    if runs.len() != 1 {
        bail!("expected one run in it-run, found {}: {got}", runs.len());
    }
    let r = &runs[0];
    let steady = &result["summary"];
    let checks = [
        ("name", r["name"] == "mlflow-run"),
        ("status", r["status"] == "FINISHED"),
        (
            "concurrency param",
            r["params"]["load.closed.concurrency"] == "4",
        ),
        (
            "dataset param",
            r["params"]["plan.dataset.random.turns"] == "3",
        ),
        (
            "turns_ok",
            close(
                r["metrics"]["turns_ok"].as_f64(),
                steady["turns_ok"].as_f64(),
            ),
        ),
        (
            "ttft p50",
            close(
                r["metrics"]["ttft_p50_ms"].as_f64(),
                steady["ttft_ms"]["p50"].as_f64(),
            ),
        ),
        (
            "output tok/s",
            close(
                r["metrics"]["output_tok_s"].as_f64(),
                steady["output_throughput_tok_s"].as_f64(),
            ),
        ),
        (
            "usd per turn",
            close(
                r["metrics"]["usd_per_turn"].as_f64(),
                result["cost"]["usd_per_turn"].as_f64(),
            ),
        ),
        (
            "verdict",
            r["tags"]["bench.verdict"] == result["validity"]["verdict"],
        ),
        (
            "artifacts",
            r["artifacts"] == serde_json::json!(["report.html", "result.json"]),
        ),
    ];
    let bad: Vec<&str> = checks.iter().filter(|c| !c.1).map(|c| c.0).collect();
    if !bad.is_empty() {
        bail!("MLflow holds a different run ({}): {r}", bad.join(", "));
    }
    println!(
        "xtask it exporters: mlflow: one run with {} params, {} metrics, verdict {} and its 2 artifacts",
        r["params"].as_object().map_or(0, |m| m.len()),
        r["metrics"].as_object().map_or(0, |m| m.len()),
        r["tags"]["bench.verdict"]
    );

    // A sweep: a parent and a child per point (each point its own embedded simulator).
    let sweep_dir = dir.join("mlflow-sweep");
    let out = Command::new(bench)
        .args([
            "sweep",
            "-c",
            "1,2",
            "--tokenizer",
            "none",
            "--dataset",
            "random",
        ])
        .args(["--turns", "2", "--num-sessions", "4", "--sim-instant", "-q"])
        .args([
            "--mlflow",
            &url,
            "--mlflow-experiment",
            "it-sweep",
            "--sweep-dir",
        ])
        .arg(&sweep_dir)
        .stdin(Stdio::null())
        .output()
        .context("cannot run bench sweep")?;
    if !out.status.success() {
        bail!(
            "bench sweep --mlflow failed: {}",
            String::from_utf8_lossy(&out.stderr)
        );
    }
    let got = readback(venv, root, &url, "it-sweep")?;
    let runs = got["runs"].as_array().context("runs")?;
    let parents: Vec<&Value> = runs.iter().filter(|r| r["parent"].is_null()).collect();
    let [parent] = parents[..] else {
        bail!("expected one parent run in it-sweep: {got}");
    };
    let mut children: Vec<&str> = runs
        .iter()
        .filter(|r| r["parent"] == parent["run_id"])
        .filter_map(|r| r["name"].as_str())
        .collect();
    children.sort_unstable();
    if runs.len() != 3
        || children != ["c0001", "c0002"]
        || parent["artifacts"] != serde_json::json!(["sweep.html", "sweep.json"])
        || parent["metrics"]["points"].as_f64() != Some(2.0)
    {
        bail!("the sweep is not a parent with a child per point: {got}");
    }
    println!(
        "xtask it exporters: mlflow: the sweep is one parent run (sweep.json, sweep.html) with children c0001, c0002"
    );

    // A server that is down.
    let down = bench_run(
        bench,
        sim_url,
        &dir.join("mlflow-down"),
        &["--mlflow", "http://127.0.0.1:9"],
    )?;
    if !down.contains("warning: mlflow: run not logged:") {
        bail!("a down MLflow server was not a warning:\n{down}");
    }
    println!("xtask it exporters: mlflow: a server that is down cost the run one warning");
    Ok(())
}
