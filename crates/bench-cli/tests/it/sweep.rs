//! `bench sweep` end to end against the embedded simulator.

use std::path::Path;
use std::process::Stdio;
use std::time::{Duration, Instant};

use serde_json::Value;

use super::{
    SimChild, bench, random_run_args, run, serial, signal, sim_metrics, spawn_sim, stop_sim,
    tempdir,
};

/// The arguments of a sweep on the synthetic workload: sessions of 4 turns with no tool
/// waits (every session always has a request in flight), 200 new tokens per turn, the
/// simulator 4× faster than its default timing, each point 2 s long; `extra` is what the
/// test varies.
fn sweep_args(dir: &Path, output_len: u32, extra: &[&str]) -> Vec<String> {
    let output_len = output_len.to_string();
    let mut args: Vec<String> = [
        "sweep",
        "--tokenizer",
        "none",
        "--dataset",
        "random",
        "--turns",
        "4",
        "--no-gaps",
        "--input-increment",
        "200",
        "--output-len",
        &output_len,
        "--sim-time-scale",
        "0.25",
        "--duration",
        "2s",
        "--no-metrics",
        "-q",
        "--sweep-dir",
        dir.to_str().unwrap(),
    ]
    .map(String::from)
    .into();
    args.extend(extra.iter().map(|a| a.to_string()));
    args
}

fn summary(dir: &Path) -> Value {
    serde_json::from_slice(&std::fs::read(dir.join("sweep.json")).unwrap()).unwrap()
}

fn levels(s: &Value) -> Vec<f64> {
    s["points"]
        .as_array()
        .unwrap()
        .iter()
        .map(|p| p["level"].as_f64().unwrap())
        .collect()
}

#[test]
fn a_sweep_against_a_simulator_with_a_tiny_kv_cache_stops_early_and_says_why() {
    let _serial = serial();
    let tmp_dir = tempdir("sweep-kv");
    let dir = tmp_dir.join("sweep");
    // 2048 tokens of KV cache hold about two of these sessions' requests: past C = 2 the
    // output rate stays flat while requests queue for blocks.
    let t0 = Instant::now();
    let out = run(&sweep_args(
        &dir,
        16,
        &["-c", "1,2,4,8,16,32", "--sim-kv-capacity-tokens", "2048"],
    ));
    let (stdout, stderr) = (
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr),
    );
    assert_eq!(out.status.code(), Some(0), "{stdout}\n{stderr}");
    assert!(stdout.contains("stopped early: saturated at "), "{stdout}");
    let s = summary(&dir);
    assert_eq!(s["axis"], "concurrency");
    assert_eq!(s["stop"]["by"], "saturated", "{s}");
    let reason = s["stop"]["reason"].as_str().unwrap();
    assert!(reason.contains("TTFT p50 grew"), "{reason}");
    let lv = levels(&s);
    assert!(lv.len() >= 3 && lv.len() < 6, "{lv:?}");
    assert_eq!(lv, [1.0, 2.0, 4.0, 8.0, 16.0][..lv.len()]);
    // One table line per point, one run directory per point, and the summary's files.
    let rows = stdout
        .lines()
        .filter(|l| l.trim_start().starts_with(|c: char| c.is_ascii_digit()))
        .count();
    assert_eq!(rows, lv.len(), "{stdout}");
    for p in s["points"].as_array().unwrap() {
        let name = p["run_dir"].as_str().unwrap();
        assert_eq!(name, format!("c{:04}", p["level"].as_f64().unwrap() as u32));
        assert!(dir.join(name).join("result.json").is_file(), "{name}");
        assert!(p["output_tps"].as_f64().unwrap() > 0.0, "{p}");
        assert!(p["turns_ok"].as_u64().unwrap() > 0, "{p}");
    }
    let md = std::fs::read_to_string(dir.join("sweep.md")).unwrap();
    assert!(
        md.contains("| level |") && md.contains("stopped early"),
        "{md}"
    );
    assert!(
        std::fs::read_to_string(dir.join("sweep.html"))
            .unwrap()
            .starts_with("<!doctype html>")
    );
    eprintln!("{} points in {:?}", lv.len(), t0.elapsed());
    let _ = std::fs::remove_dir_all(dir.parent().unwrap());
}

#[test]
fn find_max_finds_the_known_capacity_of_a_fixed_capacity_simulator_within_one_step() {
    let _serial = serial();
    let tmp_dir = tempdir("sweep-find-max");
    let dir = tmp_dir.join("sweep");
    // 4 sequence slots; with no tool waits a fifth session's request always waits for a whole
    // answer (64 tokens, ~160 ms here), far past the 100 ms TTFT bound, which an admitted
    // request meets with room to spare (~25 ms).
    let capacity = 4.0;
    let out = run(&sweep_args(
        &dir,
        64,
        &[
            "-c",
            "1,16",
            "--find-max",
            "--slo",
            "ttft_ms=100",
            "--sim-max-num-seqs",
            "4",
        ],
    ));
    let (stdout, stderr) = (
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr),
    );
    assert_eq!(out.status.code(), Some(0), "{stdout}\n{stderr}");
    let s = summary(&dir);
    assert_eq!(s["stop"]["by"], "completed", "{s}");
    let f = &s["find_max"];
    assert_eq!(
        (f["target"].as_f64(), f["step"].as_f64()),
        (Some(0.9), Some(1.0))
    );
    let best = f["best"].as_f64().unwrap();
    let failing = f["first_failing"].as_f64().unwrap();
    assert!((best - capacity).abs() <= 1.0, "{f}\n{stdout}");
    assert_eq!(failing, best + 1.0, "{f}");
    let line = format!("highest load meeting goodput ≥ 90%: {best} ({failing} did not)",);
    assert!(stdout.contains(&line), "{stdout}");
    // Every point run, by level: the bounds first, then at most log2(15) bisections.
    let lv = levels(&s);
    assert!(lv.windows(2).all(|w| w[0] < w[1]), "{lv:?}");
    assert!(lv.contains(&1.0) && lv.contains(&16.0), "{lv:?}");
    assert!(lv.len() <= 6, "{lv:?}");
    for p in s["points"].as_array().unwrap() {
        let g = p["goodput"].as_f64().unwrap();
        let level = p["level"].as_f64().unwrap();
        assert_eq!(g >= 0.9, level <= best, "{p}");
    }
    let _ = std::fs::remove_dir_all(dir.parent().unwrap());
}

/// Agents at SLO (#33): `--find-max --session-slo` against a simulator with 4 sequence slots
/// finds the highest concurrency at which 90% of sessions met every turn's TTFT bound and the
/// session budget, within one step of what running every load by hand finds.
#[test]
fn agents_at_slo_match_running_every_load_by_hand_within_one_step() {
    let _serial = serial();
    let tmp_dir = tempdir("sweep-agents-at-slo");
    let slo = "ttft_ms=100,session_s=10";
    // By hand: one run per concurrency, each point's share of sessions within the SLO.
    let mut by_hand = Vec::new();
    for c in 1..=7u32 {
        let dir = tmp_dir.join(format!("hand/c{c}"));
        let mut args = sweep_args(&dir, 64, &["--session-slo", slo, "--sim-max-num-seqs", "4"]);
        args[0] = "run".into();
        let at = args.iter().position(|a| a == "--sweep-dir").unwrap();
        args[at] = "--run-dir".into();
        args.extend(["-c".to_owned(), c.to_string()]);
        let out = run(&args);
        assert_eq!(
            out.status.code(),
            Some(0),
            "{}",
            String::from_utf8_lossy(&out.stderr)
        );
        let r: Value =
            serde_json::from_slice(&std::fs::read(dir.join("result.json")).unwrap()).unwrap();
        let s = &r["sessions"]["session_slo"];
        assert_eq!(s["slo"], slo, "{s}");
        assert!(s["judged"].as_u64().unwrap() >= 2, "c={c}: {s}");
        by_hand.push((c, s["share"].as_f64().unwrap()));
    }
    // The highest load whose share (and every lower load's) is at least 90%.
    let hand_best = by_hand
        .iter()
        .take_while(|(_, share)| *share >= 0.9)
        .last()
        .map(|(c, _)| f64::from(*c))
        .expect("one session at a time meets the SLO");
    assert!(hand_best < 7.0, "the SLO never failed: {by_hand:?}");

    let dir = tmp_dir.join("sweep");
    let out = run(&sweep_args(
        &dir,
        64,
        &[
            "-c",
            "1,7",
            "--find-max",
            "--session-slo",
            slo,
            "--sim-max-num-seqs",
            "4",
        ],
    ));
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert_eq!(
        out.status.code(),
        Some(0),
        "{stdout}\n{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let s = summary(&dir);
    let f = &s["find_max"];
    assert_eq!(f["of"], "sessions", "{f}");
    let best = f["best"].as_f64().unwrap();
    assert!(
        (best - hand_best).abs() <= 1.0,
        "find-max {best}, by hand {hand_best}: {by_hand:?}\n{stdout}"
    );
    let line = format!(
        "highest load meeting ≥ 90% of sessions within the session SLO: {best} ({} did not)",
        f["first_failing"].as_f64().unwrap()
    );
    assert!(stdout.contains(&line), "{stdout}");
    // Each point carries its session share and its verdict.
    for p in s["points"].as_array().unwrap() {
        assert!(p["session_goodput"].as_f64().is_some(), "{p}");
        assert!(p["verdict"].is_string(), "{p}");
    }
    eprintln!("by hand {by_hand:?}; find-max {f}");
    let _ = std::fs::remove_dir_all(dir.parent().unwrap());
}

/// Cache retention (#33): against a simulator whose cache holds 1,024 blocks of 16 tokens
/// while background traffic (20 unique ~800-token prompts a second) flows through it, the
/// idle-gap sweep's half-life is within 20% of the time that traffic takes to push a whole
/// cache of new blocks through LRU eviction: capacity ÷ the rate of uncached prompt tokens,
/// read from the simulator's own counters over the sweep.
#[test]
fn the_cache_half_life_matches_the_capacity_over_the_eviction_rate() {
    let _serial = serial();
    let tmp_dir = tempdir("sweep-retention");
    let (sim, url) = spawn_sim(&["--kv-capacity-tokens", "16384", "--time-scale", "0.1"]);
    let background = bench()
        .args(random_run_args(
            1,
            100_000,
            &tmp_dir.join("background"),
            &[],
        ))
        .args([
            "--base-url",
            &url,
            "--input-increment",
            "800",
            "--output-len",
            "8",
        ])
        .args([
            "--rate",
            "20",
            "--arrival",
            "constant",
            "--duration",
            "300s",
            "-q",
        ])
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .unwrap();
    let background = SimChild(background);
    // The cache fills (16,384 tokens at ~17,000 a second), then the sweep starts.
    std::thread::sleep(Duration::from_secs(3));
    let before = (Instant::now(), sim_metrics(&url));
    let dir = tmp_dir.join("sweep");
    let out = run(&[
        "sweep",
        "--base-url",
        &url,
        "--tokenizer",
        "none",
        "--dataset",
        "random",
        "--turns",
        "3",
        "--input-increment",
        "256",
        "--output-len",
        "8",
        "-c",
        "2",
        "--num-sessions",
        "2",
        "--idle-gaps",
        "0s,0.5s,0.7s,0.8s,0.9s,1s,1.1s,1.3s",
        "-q",
        "--sweep-dir",
        dir.to_str().unwrap(),
    ]);
    let after = (Instant::now(), sim_metrics(&url));
    drop(background);
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert_eq!(
        out.status.code(),
        Some(0),
        "{stdout}\n{}",
        String::from_utf8_lossy(&out.stderr)
    );
    // Uncached prompt tokens enter the cache; each evicts as many once it is full.
    let uncached = |m: &std::collections::HashMap<String, f64>| {
        m["vllm:prefix_cache_queries_total"] - m["vllm:prefix_cache_hits_total"]
    };
    let rate =
        (uncached(&after.1) - uncached(&before.1)) / after.0.duration_since(before.0).as_secs_f64();
    let computed = 16384.0 / rate;
    let s = summary(&dir);
    let r = &s["retention"];
    let half = r["half_life_s"]
        .as_f64()
        .unwrap_or_else(|| panic!("{r}\n{stdout}"));
    eprintln!(
        "half-life {half:.3} s, computed {computed:.3} s ({rate:.0} tok/s into 16,384 tokens)"
    );
    assert!(
        (half / computed - 1.0).abs() <= 0.2,
        "half-life {half} s vs computed {computed} s\n{r}\n{stdout}"
    );
    // The curve: all kept well before it, nothing long after it.
    let kept = |gap: f64| {
        r["gaps"]
            .as_array()
            .unwrap()
            .iter()
            .find(|g| g["gap_s"].as_f64() == Some(gap))
            .and_then(|g| g["kept"].as_f64())
            .unwrap()
    };
    assert!(kept(0.5) >= 0.9, "{r}");
    assert!(kept(1.3) <= 0.1, "{r}");
    assert!(r["reference_ratio"].as_f64().unwrap() > 0.3, "{r}");
    let line = stdout
        .lines()
        .find(|l| l.starts_with("cache half-life: "))
        .unwrap_or_else(|| panic!("{stdout}"));
    assert!(line.contains(" of the cache benefit, "), "{line}");
    // Each point replays the same plan, tagged: no later turn hits an earlier point's cache.
    for p in s["points"].as_array().unwrap() {
        let checks = p["failed_checks"].as_array().unwrap();
        assert!(!checks.iter().any(|c| c == "warm_cache"), "{p}");
    }
    let html = std::fs::read_to_string(dir.join("sweep.html")).unwrap();
    assert!(html.contains("data-chart=\"cache_retention\""));
    assert!(
        std::fs::read_to_string(dir.join("sweep.md"))
            .unwrap()
            .contains("## Cache retention")
    );
    stop_sim(sim);
}

#[test]
fn a_rate_sweep_runs_open_loop_points_and_prints_its_summary_as_json() {
    let tmp_dir = tempdir("sweep-rates");
    let dir = tmp_dir.join("sweep");
    let out = run(&[
        "sweep",
        "--rates",
        "20,40.5",
        "--max-concurrency",
        "4",
        "--tokenizer",
        "none",
        "--dataset",
        "random",
        "--turns",
        "2",
        "--num-sessions",
        "4",
        "--sim-instant",
        "--no-metrics",
        "-q",
        "--json",
        "--sweep-dir",
        dir.to_str().unwrap(),
    ]);
    assert_eq!(
        out.status.code(),
        Some(0),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let s: Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(s, summary(&dir));
    assert_eq!(
        (s["axis"].as_str(), &s["stop"]["by"]),
        (Some("rate"), &Value::from("completed"))
    );
    let names: Vec<&str> = s["points"]
        .as_array()
        .unwrap()
        .iter()
        .map(|p| p["run_dir"].as_str().unwrap())
        .collect();
    assert_eq!(names, ["r0020.00", "r0040.50"]);
    // Each point's run is the open loop at its rate, capped as asked.
    let run_json: Value =
        serde_json::from_slice(&std::fs::read(dir.join("r0040.50/run.json")).unwrap()).unwrap();
    let load = &run_json["spec"]["load"]["open"];
    assert_eq!(load["arrival"]["rate"].as_f64(), Some(40.5), "{run_json}");
    assert_eq!(load["max_in_flight"].as_u64(), Some(4), "{run_json}");
    assert_eq!(s["config"]["levels"], serde_json::json!([20.0, 40.5]));
    let _ = std::fs::remove_dir_all(dir.parent().unwrap());
}

#[test]
fn a_point_that_fails_stops_the_sweep_with_exit_1() {
    // Nothing listens on this port: the first point cannot reach its server.
    let port = std::net::TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port();
    let tmp_dir = tempdir("sweep-failed");
    let dir = tmp_dir.join("sweep");
    let url = format!("http://127.0.0.1:{port}");
    let out = run(&[
        "sweep",
        "-c",
        "1,2",
        "--base-url",
        &url,
        "--ready-timeout",
        "0",
        "--tokenizer",
        "none",
        "--dataset",
        "random",
        "-q",
        "--sweep-dir",
        dir.to_str().unwrap(),
    ]);
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(1), "{stderr}");
    assert!(
        stderr.contains("error: a point failed: c0001: "),
        "{stderr}"
    );
    let s = summary(&dir);
    assert_eq!(s["stop"]["by"], "failed", "{s}");
    assert!(
        s["stop"]["reason"].as_str().unwrap().starts_with("c0001: "),
        "{s}"
    );
    assert_eq!(s["points"], serde_json::json!([]));
    let _ = std::fs::remove_dir_all(dir.parent().unwrap());
}

#[test]
fn ctrl_c_stops_the_sweep_after_the_current_point_and_records_it_interrupted() {
    let _serial = serial();
    let tmp_dir = tempdir("sweep-signal");
    let dir = tmp_dir.join("sweep");
    let mut args = sweep_args(&dir, 16, &["-c", "1,2,4"]);
    // Long points: the signal comes during the first.
    let d = args.iter().position(|a| a == "2s").unwrap();
    args[d] = "60s".into();
    let child = bench()
        .args(&args)
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let t0 = Instant::now();
    while !dir.join("c0001/turns.jsonl").is_file()
        || std::fs::metadata(dir.join("c0001/turns.jsonl"))
            .unwrap()
            .len()
            == 0
    {
        assert!(
            t0.elapsed() < Duration::from_secs(30),
            "the first point never started"
        );
        std::thread::sleep(Duration::from_millis(50));
    }
    signal(&child, "-INT");
    let out = child.wait_with_output().unwrap();
    let (stdout, stderr) = (
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr),
    );
    assert!(t0.elapsed() < Duration::from_secs(30), "{stderr}");
    assert_eq!(out.status.code(), Some(1), "{stdout}\n{stderr}");
    assert!(
        stderr.contains("error: the sweep was interrupted after 1 point(s)"),
        "{stderr}"
    );
    assert!(stdout.contains("\ninterrupted\n"), "{stdout}");
    let s = summary(&dir);
    assert_eq!(s["stop"]["by"], "interrupted", "{s}");
    assert_eq!(levels(&s), [1.0]);
    assert!(!dir.join("c0002").exists());
    let _ = std::fs::remove_dir_all(dir.parent().unwrap());
}

#[test]
fn bad_sweeps_are_refused_in_one_line_before_any_run() {
    let dir = tempdir("sweep-usage");
    let full = dir.join("full");
    std::fs::create_dir_all(&full).unwrap();
    std::fs::write(full.join("x"), "").unwrap();
    let sweep_dir = dir.join("never");
    let sd = sweep_dir.to_str().unwrap();
    for (args, want) in [
        (
            vec![],
            "bench sweep needs --concurrency LIST (e.g. 1,2,4,8), --rates LIST (e.g. 0.5,1,2), \
             --idle-gaps LIST (e.g. 0s,5s,15s,30s) or a --spec file with a sweep table",
        ),
        (
            vec!["--idle-gaps", "0s,5s", "-c", "1,2"],
            "--idle-gaps plays every gap at one load: give -c one value, not \"1,2\"",
        ),
        (
            vec!["--idle-gaps", "5s,10s"],
            "--idle-gaps: the first gap must be 0s, the reference",
        ),
        (
            vec!["--idle-gaps", "0s,5s", "--find-max", "--slo", "ttft_ms=100"],
            "--find-max searches a load level: --idle-gaps plays every gap at one load",
        ),
        (
            vec!["-c", "1,2", "--rates", "1,2"],
            "give --concurrency LIST or --rates LIST, not both",
        ),
        (
            vec!["-c", "1,4,2"],
            "--concurrency: levels must be strictly increasing (4 then 2)",
        ),
        (
            vec!["-c", "1,x"],
            "--concurrency: \"x\" is not a whole number of sessions in flight",
        ),
        (
            vec!["--rates", "1,1"],
            "--rates: levels must be strictly increasing (1 then 1)",
        ),
        (vec!["--rates", "0,1"], "--rates: 0 is not a positive level"),
        (
            vec!["-c", "1,2", "--run-dir", "x"],
            "--run-dir does not apply to a sweep",
        ),
        (
            vec!["-c", "1,2", "--resume", "x"],
            "--resume does not apply to a sweep",
        ),
        (
            vec!["-c", "1,2", "--rate", "3"],
            "--rate is a single rate: a sweep takes --rates LIST",
        ),
        (
            vec!["-c", "1,2", "--csv", "x.csv"],
            "--csv does not apply to a sweep",
        ),
        (
            vec!["-c", "1,2", "--max-concurrency", "4"],
            "--max-concurrency caps the sessions in flight of open-loop points",
        ),
        (
            vec!["--rates", "1,2", "--ramp-up", "5s"],
            "--ramp-up starts closed-loop sessions gradually",
        ),
        (
            vec!["-c", "1,2", "--find-max"],
            "sweep.find_max (--find-max) needs judge.slo (--slo",
        ),
        (
            vec!["-c", "1,2", "--goodput-target", "0.5"],
            "--goodput-target and --step go with --find-max",
        ),
        (
            vec!["-c", "4", "--find-max", "--slo", "ttft_ms=100"],
            "--find-max needs at least two levels",
        ),
        (
            vec![
                "-c",
                "1,4",
                "--find-max",
                "--slo",
                "ttft_ms=100",
                "--goodput-target",
                "90",
            ],
            "--goodput-target is a share within 0–1 (0.9 for 90%), not 90",
        ),
        (
            vec![
                "-c",
                "1,4",
                "--find-max",
                "--slo",
                "ttft_ms=100",
                "--step",
                "1.5",
            ],
            "--step 1.5: concurrency levels are whole numbers",
        ),
        (vec!["-c", "1,2", "--slo", "fast"], "slo: "),
    ] {
        let mut a = vec!["sweep", "--sweep-dir", sd];
        a.extend(&args);
        let out = run(&a);
        let stderr = String::from_utf8_lossy(&out.stderr);
        assert_eq!(out.status.code(), Some(2), "{args:?}: {stderr}");
        assert!(
            stderr.starts_with(&format!("error: {want}")),
            "{args:?}: {stderr}"
        );
        assert_eq!(stderr.lines().count(), 1, "{args:?}: {stderr}");
        assert!(!sweep_dir.exists(), "{args:?} created the sweep directory");
    }
    let out = run(&["sweep", "-c", "1", "--sweep-dir", full.to_str().unwrap()]);
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(2), "{stderr}");
    assert!(
        stderr.contains("not empty: a sweep needs a new (or empty) directory"),
        "{stderr}"
    );
    let _ = std::fs::remove_dir_all(&dir);
}
