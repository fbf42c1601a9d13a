//! `cargo xtask bench`: how CI uses us. Against the embedded simulator in fixed-latency mode it
//! runs three gates, each compared with a committed baseline, and prints the markdown of each:
//!
//! 1. the `openai` journey pack (`fixtures/baselines/journeys-openai.json`) through
//!    `bench journeys --baseline` (a journeys report keeps per-run statistics, not samples);
//! 2. a short replay (`fixtures/baselines/replay/`) through `bench compare`;
//! 3. one sweep point (`fixtures/baselines/sweep-point/`) through `bench compare`.
//!
//! TTFT p99 is shown but not gated (a p99 of a few hundred turns moves with the machine's other
//! load). Then it checks that the gate can fail: the replay again with the simulator's latency raised
//! by 30% must be reported as a regression by `bench compare` (exit 1), else the task fails.
//!
//! `cargo xtask bench --update-baseline` rewrites the three baselines from fresh runs (commit
//! them); `--latency-factor F` multiplies the simulator's latency (to try the gate by hand).

use std::path::{Path, PathBuf};
use std::process::Command;

use anyhow::{Context, Result, bail};

fn root() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR"))
        .parent()
        .map(PathBuf::from)
        .unwrap_or_default()
}

/// The committed journeys baseline.
pub const BASELINE: &str = "fixtures/baselines/journeys-openai.json";
/// The committed replay baseline (a run directory's records and result).
pub const REPLAY_BASELINE: &str = "fixtures/baselines/replay";
/// The committed sweep-point baseline.
pub const SWEEP_BASELINE: &str = "fixtures/baselines/sweep-point";

/// The simulator's fixed latency at factor 1.
const TTFT_MS: f64 = 20.0;
const ITL_MS: f64 = 2.0;

/// The journeys configuration (the baseline must be made with the same).
const JOURNEY_ARGS: &[&str] = &[
    "journeys",
    "--pack",
    "openai",
    "--iterations",
    "30",
    "--warmup",
    "5",
    "--runs",
    "3",
];

/// The replay: 48 synthetic sessions of 4 turns at C=8 (192 turns, ~10 s).
const REPLAY_ARGS: &[&str] = &[
    "--tokenizer",
    "none",
    "--dataset",
    "random",
    "--turns",
    "4",
    "--num-sessions",
    "48",
    "--gap-policy",
    "zero",
    "--seed",
    "7",
    "-q",
];

/// Journeys: relative regression allowed, and the absolute noise floor (ms) below which an
/// increase never counts: sub-millisecond journeys (list_models, metrics_scrape) jitter by far
/// more than 20 % on a shared machine, while a real slowdown shows in the chat journeys as
/// whole milliseconds.
const THRESHOLD: &str = "0.2";
const MIN_DELTA_MS: &str = "5";
/// Replays: a change counts when its 95% bootstrap interval excludes zero and it is beyond
/// this (the fixed-latency simulator's figures move by a few percent on a busy machine).
const COMPARE_THRESHOLD: &str = "0.15";

struct Opts {
    update: bool,
    factor: f64,
}

fn parse(args: &[String]) -> Result<Opts> {
    let mut o = Opts {
        update: false,
        factor: 1.0,
    };
    let mut it = args.iter();
    while let Some(a) = it.next() {
        match a.as_str() {
            "--update-baseline" => o.update = true,
            "--latency-factor" => {
                let v = it.next().context("--latency-factor needs a value")?;
                o.factor = v
                    .parse()
                    .ok()
                    .filter(|f: &f64| f.is_finite() && *f > 0.0)
                    .with_context(|| format!("--latency-factor {v:?}: not a positive number"))?;
            }
            other => {
                bail!("unknown flag {other:?} (known: --update-baseline, --latency-factor F)")
            }
        }
    }
    if o.update && o.factor != 1.0 {
        bail!(
            "--update-baseline records the baselines at the normal latency: drop --latency-factor"
        );
    }
    Ok(o)
}

fn sim_args(factor: f64) -> Vec<String> {
    vec![
        "--sim-ttft-ms".into(),
        format!("{}", TTFT_MS * factor),
        "--sim-itl-ms".into(),
        format!("{}", ITL_MS * factor),
    ]
}

/// Runs the gates; see the module docs.
pub fn run(args: &[String]) -> Result<()> {
    let o = parse(args)?;
    let root = root();
    let out_dir = root.join("target/bench");
    std::fs::create_dir_all(&out_dir).context("cannot create target/bench")?;
    let bench = match crate::bench_bin() {
        Some(bin) => bin,
        None => {
            let status = Command::new("cargo")
                .args(["build", "--release", "-p", "bench-cli"])
                .current_dir(&root)
                .status()
                .context("cannot run cargo build")?;
            if !status.success() {
                bail!("cargo build --release -p bench-cli failed ({status})");
            }
            root.join("target/release/bench")
        }
    };
    let mut failures = Vec::new();

    // 1. Journeys.
    if let Err(e) = journeys(&root, &bench, &out_dir, &o) {
        failures.push(format!("journeys: {e:#}"));
    }
    // 2. A short replay.
    let replay = out_dir.join("replay");
    let mut flags: Vec<String> = REPLAY_ARGS.iter().map(|s| s.to_string()).collect();
    flags.extend(["--concurrency".into(), "8".into()]);
    flags.extend(sim_args(o.factor));
    match fresh_run(&bench, &replay, &flags).and_then(|()| {
        gate(
            &root,
            &bench,
            &replay,
            REPLAY_BASELINE,
            &out_dir.join("replay.md"),
            &o,
        )
    }) {
        Ok(()) => {}
        Err(e) => failures.push(format!("replay: {e:#}")),
    }
    // 3. One sweep point.
    let sweep_dir = out_dir.join("sweep");
    let point = sweep_point(&bench, &sweep_dir, o.factor);
    match point.and_then(|p| {
        gate(
            &root,
            &bench,
            &p,
            SWEEP_BASELINE,
            &out_dir.join("sweep-point.md"),
            &o,
        )
    }) {
        Ok(()) => {}
        Err(e) => failures.push(format!("sweep point: {e:#}")),
    }
    if !failures.is_empty() {
        bail!("{}", failures.join("; "));
    }
    if o.update {
        eprintln!("xtask bench: baselines updated under fixtures/baselines/ (commit them)");
        return Ok(());
    }
    // 4. The gate must see a 30% slowdown.
    if o.factor == 1.0 {
        let slow = out_dir.join("replay-slow");
        let mut flags: Vec<String> = REPLAY_ARGS.iter().map(|s| s.to_string()).collect();
        flags.extend(["--concurrency".into(), "8".into()]);
        flags.extend(sim_args(1.3));
        fresh_run(&bench, &slow, &flags)?;
        let md = out_dir.join("replay-slow.md");
        let worse = compare(&bench, &root.join(REPLAY_BASELINE), &slow, &md)?;
        if worse.iter().any(|m| m == "ttft_p50_ms") {
            eprintln!(
                "xtask bench: the replay with the simulator 30% slower is flagged as a regression ({} worse), as it must be",
                worse.join(", ")
            );
        } else {
            bail!(
                "the gate did not flag a replay whose simulator was 30% slower (worse: {worse:?}): it cannot catch a regression"
            );
        }
    }
    Ok(())
}

fn journeys(root: &Path, bench: &Path, out_dir: &Path, o: &Opts) -> Result<()> {
    let report = out_dir.join("journeys-openai.json");
    let markdown = out_dir.join("journeys-openai.md");
    let mut cmd = Command::new(bench);
    cmd.args(JOURNEY_ARGS)
        .args(sim_args(o.factor))
        .arg("--output")
        .arg(&report)
        .arg("--markdown")
        .arg(&markdown)
        .current_dir(root);
    let baseline = root.join(BASELINE);
    if !o.update {
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
    eprintln!("xtask bench: bench {}", JOURNEY_ARGS.join(" "));
    let status = cmd.status().context("cannot run bench")?;
    if o.update {
        print_markdown(&markdown);
        if !status.success() {
            bail!("the run failed ({status}); the baseline was not updated");
        }
        std::fs::copy(&report, &baseline)
            .with_context(|| format!("cannot write {}", baseline.display()))?;
        return Ok(());
    }
    if !status.success() {
        bail!("journeys regressed against {BASELINE} or failed ({status})");
    }
    Ok(())
}

/// `bench run` into a fresh `dir`.
fn fresh_run(bench: &Path, dir: &Path, flags: &[String]) -> Result<()> {
    let _ = std::fs::remove_dir_all(dir);
    eprintln!("xtask bench: bench run {}", flags.join(" "));
    let status = Command::new(bench)
        .arg("run")
        .args(flags)
        .arg("--run-dir")
        .arg(dir)
        .status()
        .context("cannot run bench run")?;
    if !status.success() {
        bail!("bench run failed ({status})");
    }
    Ok(())
}

/// One sweep point (C=16, 64 sessions) under `sweep_dir`; returns its run directory.
fn sweep_point(bench: &Path, sweep_dir: &Path, factor: f64) -> Result<PathBuf> {
    let _ = std::fs::remove_dir_all(sweep_dir);
    let mut flags: Vec<String> = REPLAY_ARGS.iter().map(|s| s.to_string()).collect();
    for f in flags.iter_mut() {
        if f == "48" {
            *f = "64".into();
        }
    }
    flags.extend(sim_args(factor));
    eprintln!(
        "xtask bench: bench sweep --concurrency 16 {}",
        flags.join(" ")
    );
    let status = Command::new(bench)
        .args(["sweep", "--concurrency", "16"])
        .args(&flags)
        .arg("--sweep-dir")
        .arg(sweep_dir)
        .status()
        .context("cannot run bench sweep")?;
    if !status.success() {
        bail!("bench sweep failed ({status})");
    }
    let mut points: Vec<PathBuf> = std::fs::read_dir(sweep_dir)
        .with_context(|| format!("cannot read {}", sweep_dir.display()))?
        .filter_map(|e| e.ok().map(|e| e.path()))
        .filter(|p| p.join("turns.jsonl").is_file())
        .collect();
    points.sort();
    match points.as_slice() {
        [one] => Ok(one.clone()),
        other => bail!(
            "expected one point's run directory under {}, found {}",
            sweep_dir.display(),
            other.len()
        ),
    }
}

/// Compares `run` with the baseline (or, updating, makes `run` the baseline).
fn gate(root: &Path, bench: &Path, run: &Path, baseline: &str, md: &Path, o: &Opts) -> Result<()> {
    let base = root.join(baseline);
    if o.update {
        let _ = std::fs::remove_dir_all(&base);
        std::fs::create_dir_all(&base).with_context(|| format!("cannot create {baseline}"))?;
        for f in ["run.json", "turns.jsonl", "sessions.jsonl", "result.json"] {
            std::fs::copy(run.join(f), base.join(f))
                .with_context(|| format!("cannot copy {f} to {baseline}"))?;
        }
        return Ok(());
    }
    if !base.join("turns.jsonl").is_file() {
        bail!("{baseline} is missing: make it with `cargo xtask bench --update-baseline`");
    }
    let worse = compare(bench, &base, run, md)?;
    if !worse.is_empty() {
        bail!("regressed against {baseline}: {} worse", worse.join(", "));
    }
    Ok(())
}

/// Metrics the gate ignores: a p99 of a few hundred turns moves with whatever else the
/// machine runs (its bootstrap interval covers sampling, not a neighbour's load), so it is
/// printed but never fails CI.
const NOT_GATED: &[&str] = &["ttft_p99_ms"];

/// `bench compare` of `cand` against `base` (its markdown printed); the gated metrics that got
/// significantly worse.
fn compare(bench: &Path, base: &Path, cand: &Path, md: &Path) -> Result<Vec<String>> {
    let out = Command::new(bench)
        .arg("compare")
        .arg(base)
        .arg(cand)
        .args(["--threshold", COMPARE_THRESHOLD, "--json", "--markdown"])
        .arg(md)
        .stderr(std::process::Stdio::inherit())
        .output()
        .context("cannot run bench compare")?;
    print_markdown(md);
    // Exit 0 (no regression) or 1 (a regression); anything else is an error.
    if !matches!(out.status.code(), Some(0 | 1)) {
        bail!("bench compare failed ({})", out.status);
    }
    let doc: serde_json::Value =
        serde_json::from_slice(&out.stdout).context("bench compare --json printed no JSON")?;
    let worse = doc["metrics"]
        .as_array()
        .context("bench compare --json: no metrics")?
        .iter()
        .filter(|m| m["verdict"] == "worse")
        .filter_map(|m| m["metric"].as_str())
        .filter(|m| !NOT_GATED.contains(m))
        .map(str::to_owned)
        .collect();
    Ok(worse)
}

fn print_markdown(path: &Path) {
    if let Ok(md) = std::fs::read_to_string(path) {
        println!("{md}");
    }
}
