//! Sharded runs (`--shard I/N`, `--shards N`, `--start-at`) and `bench merge`: the same plan as
//! one process and as four, against one simulator.

use std::collections::BTreeSet;
use std::path::{Path, PathBuf};

use serde_json::Value;

use super::*;

/// `bench run` of the shared plan (24 sessions of 3 turns), recorded in `dir`.
fn plan_args(url: &str, dir: &Path, extra: &[&str]) -> Vec<String> {
    let mut a = random_run_args(3, 24, dir, &["--base-url", url, "-q"]);
    a.extend(extra.iter().map(|s| (*s).to_owned()));
    a
}

/// Runs the four shards of the plan at once (each at -c 2), starting together; their dirs.
fn run_shards(url: &str, root: &Path, extra: &[&str]) -> Vec<PathBuf> {
    let at = time::OffsetDateTime::now_utc() + time::Duration::seconds(3);
    let at = at
        .format(&time::format_description::well_known::Rfc3339)
        .unwrap();
    let dirs: Vec<PathBuf> = (0..4).map(|i| root.join(format!("shard-{i}"))).collect();
    let children: Vec<_> = dirs
        .iter()
        .enumerate()
        .map(|(i, d)| {
            let shard = format!("{i}/4");
            let mut a = plan_args(url, d, &["-c", "2", "--shard", &shard, "--start-at", &at]);
            a.extend(extra.iter().map(|s| (*s).to_owned()));
            bench().args(&a).stdout(Stdio::null()).spawn().unwrap()
        })
        .collect();
    for mut c in children {
        assert!(c.wait().unwrap().success(), "a shard failed");
    }
    dirs
}

fn merge(dirs: &[PathBuf], out: &Path, extra: &[&str]) -> Output {
    let mut a: Vec<String> = vec!["merge".into()];
    a.extend(dirs.iter().map(|d| d.display().to_string()));
    a.extend(["-o".into(), out.display().to_string()]);
    a.extend(extra.iter().map(|s| (*s).to_owned()));
    run(&a)
}

fn json_file(p: &Path) -> Value {
    serde_json::from_slice(&std::fs::read(p).unwrap()).unwrap()
}

/// Linear-interpolation percentile (the documented method), computed here independently.
fn pct(sorted: &[f64], q: f64) -> f64 {
    let h = (sorted.len() - 1) as f64 * q;
    let lo = h.floor() as usize;
    let hi = (lo + 1).min(sorted.len() - 1);
    sorted[lo] + (h - lo as f64) * (sorted[hi] - sorted[lo])
}

fn turn_keys(turns: &[Value]) -> BTreeSet<(String, u64)> {
    turns
        .iter()
        .map(|t| {
            (
                t["session_id"].as_str().unwrap().to_owned(),
                t["turn_index"].as_u64().unwrap(),
            )
        })
        .collect()
}

#[test]
fn four_shards_merge_into_the_run_one_process_plays() {
    let _serial = serial();
    let (sim, url) = spawn_sim(&["--ttft-ms", "5", "--itl-ms", "1"]);
    let root = tempdir("shards-merge");
    // The plan as one process at C = 8, then as four shards at C = 2 each.
    let one = root.join("one");
    let out = run(&plan_args(&url, &one, &["-c", "8"]));
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let dirs = run_shards(&url, &root, &[]);
    let merged = root.join("merged");
    let out = merge(&dirs, &merged, &[]);
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    stop_sim(sim);

    // Every shard played its part: the same plan and configuration, disjoint sessions.
    let mut seen = BTreeSet::new();
    let mut digests = BTreeSet::new();
    for (i, d) in dirs.iter().enumerate() {
        let rj = json_file(&d.join("run.json"));
        assert_eq!(rj["shard"]["index"], i as u64);
        assert_eq!(rj["shard"]["count"], 4);
        assert!(rj["clock"]["uncertainty_s"].as_f64().unwrap() >= 0.5);
        digests.insert((
            rj["plan_digest"].to_string(),
            rj["config_digest"].to_string(),
        ));
        for s in read_jsonl(&d.join("sessions.jsonl")) {
            assert!(seen.insert(s["session_id"].as_str().unwrap().to_owned()));
        }
    }
    assert_eq!(digests.len(), 1, "{digests:?}");
    let one_rj = json_file(&one.join("run.json"));
    assert_eq!(
        one_rj["plan_digest"],
        json_file(&dirs[0].join("run.json"))["plan_digest"]
    );

    // The merged run: the same sessions and turns as the single process.
    let one_turns = read_jsonl(&one.join("turns.jsonl"));
    let m_turns = read_jsonl(&merged.join("turns.jsonl"));
    assert_eq!(turn_keys(&one_turns), turn_keys(&m_turns));
    assert_eq!(one_turns.len(), 72);
    let one_sessions: BTreeSet<String> = read_jsonl(&one.join("sessions.jsonl"))
        .iter()
        .map(|s| s["session_id"].as_str().unwrap().to_owned())
        .collect();
    assert_eq!(one_sessions, seen);
    let r = json_file(&merged.join("result.json"));
    let r1 = json_file(&one.join("result.json"));
    for k in ["turns_ok", "turns_failed", "sessions_completed"] {
        assert_eq!(r["summary"][k], r1["summary"][k], "{k}");
    }
    assert_eq!(r["sessions"]["plays"], 24);
    let rj = json_file(&merged.join("run.json"));
    assert_eq!(rj["merged"]["count"], 4);
    assert_eq!(rj["merged"]["partial"], false);
    assert_eq!(rj["spec"]["load"]["closed"]["concurrency"], 8);

    // Every figure the merge computes equals the same figure computed once over the shards'
    // records concatenated (read here from the shards' own files, not the merged ones).
    let all: Vec<Value> = dirs
        .iter()
        .flat_map(|d| read_jsonl(&d.join("turns.jsonl")))
        .collect();
    assert_eq!(all.len(), 72);
    let sorted = |key: &str| {
        let mut v: Vec<f64> = all
            .iter()
            .filter(|t| t["status"] == "ok")
            .filter_map(|t| t[key].as_f64())
            .collect();
        v.sort_by(f64::total_cmp);
        v
    };
    for (key, metric) in [
        ("ttft_ms", "ttft_ms"),
        ("e2e_ms", "e2e_ms"),
        ("tpot_ms", "tpot_ms"),
    ] {
        let v = sorted(key);
        let m = &r["overall"][metric];
        assert_eq!(m["count"].as_u64(), Some(v.len() as u64), "{metric}");
        for (q, name) in [(0.5, "p50"), (0.9, "p90"), (0.99, "p99")] {
            let want = pct(&v, q);
            let got = m[name].as_f64().unwrap();
            assert!(
                (got - want).abs() < 1e-9,
                "{metric} {name}: {got} vs {want}"
            );
        }
        assert_eq!(m["max"].as_f64(), v.last().copied(), "{metric} max");
    }
    // Pooled chunk gaps (ITL) across shards, and the token totals.
    let mut gaps: Vec<f64> = all
        .iter()
        .filter(|t| t["status"] == "ok")
        .flat_map(|t| t["chunk_gaps_ms"].as_array().unwrap().clone())
        .map(|g| g.as_f64().unwrap())
        .collect();
    gaps.sort_by(f64::total_cmp);
    let itl = &r["overall"]["itl_ms"];
    assert_eq!(itl["count"].as_u64(), Some(gaps.len() as u64));
    assert!((itl["p99"].as_f64().unwrap() - pct(&gaps, 0.99)).abs() < 1e-9);

    // The merged directory reads like any run's.
    let st = status_json(&merged);
    assert_eq!(st["turns_done"], 72, "{st}");
    let rep = run_json(&["report", merged.to_str().unwrap(), "--format", "json"]);
    assert_eq!(rep["summary"]["turns_ok"], 72);
    let cmp = run(&["compare", one.to_str().unwrap(), merged.to_str().unwrap()]);
    assert_ne!(
        cmp.status.code(),
        Some(2),
        "{}",
        String::from_utf8_lossy(&cmp.stderr)
    );
}

#[test]
fn merge_refuses_shards_of_other_runs_missing_twice_given_or_unfinished() {
    let _serial = serial();
    let (sim, url) = spawn_sim(&["--instant"]);
    let root = tempdir("shards-refuse");
    let dirs = run_shards(&url, &root, &[]);
    // Shard 0 of another plan (another seed) and of another configuration (another -c).
    let other_plan = root.join("other-plan");
    let o = run(&plan_args(
        &url,
        &other_plan,
        &["-c", "2", "--shard", "0/4", "--seed", "1"],
    ));
    assert!(o.status.success());
    let other_cfg = root.join("other-cfg");
    let o = run(&plan_args(&url, &other_cfg, &["-c", "3", "--shard", "0/4"]));
    assert!(o.status.success());
    let whole = root.join("whole");
    let o = run(&plan_args(&url, &whole, &["-c", "2"]));
    assert!(o.status.success());
    stop_sim(sim);

    // The merged result, with its `shards` check, is what the committed schema describes.
    let schema_path = concat!(env!("CARGO_MANIFEST_DIR"), "/../../docs/result.schema.json");
    let schema: Value =
        serde_json::from_str(&std::fs::read_to_string(schema_path).unwrap()).unwrap();
    let validator = jsonschema::validator_for(&schema).unwrap();

    let refused = |dirs: Vec<PathBuf>, extra: &[&str], want: &str| {
        let out_dir = root.join(format!("m-{}", want.len()));
        let o = merge(&dirs, &out_dir, extra);
        let err = String::from_utf8_lossy(&o.stderr).into_owned();
        assert_eq!(o.status.code(), Some(2), "{want}: {err}");
        assert!(err.contains(want), "wanted {want:?} in: {err}");
        assert_eq!(err.trim().lines().count(), 1, "one line: {err}");
        assert!(!out_dir.join("result.json").exists());
    };
    let with = |i: usize, d: &Path| {
        let mut v = dirs.clone();
        v[i] = d.to_path_buf();
        v
    };
    refused(with(1, &other_plan), &[], "a different plan");
    refused(with(1, &other_cfg), &[], "a different configuration");
    refused(dirs[..3].to_vec(), &[], "missing shard 3 of 4");
    refused(with(3, &dirs[1]), &[], "shard 1 of 4 given twice");
    refused(with(2, &whole), &[], "not a shard");
    // Twice given stays refused with --partial.
    refused(with(3, &dirs[1]), &["--partial"], "given twice");

    // A shard that did not finish: its process died before run.stopped and result.json.
    let cut = root.join("cut");
    std::fs::create_dir_all(&cut).unwrap();
    for f in ["run.json", "turns.jsonl", "sessions.jsonl"] {
        std::fs::copy(dirs[2].join(f), cut.join(f)).unwrap();
    }
    let events = std::fs::read_to_string(dirs[2].join("events.jsonl")).unwrap();
    let kept: String = events
        .lines()
        .filter(|l| !l.contains("run.stopped"))
        .map(|l| format!("{l}\n"))
        .collect();
    std::fs::write(cut.join("events.jsonl"), kept).unwrap();
    refused(with(2, &cut), &[], "shard 2 of 4 did not finish");

    // --partial merges what is there and says so: in run.json and as a failed validity check.
    let partial = root.join("partial");
    let o = merge(
        &[dirs[0].clone(), dirs[1].clone(), cut.clone()],
        &partial,
        &["--partial"],
    );
    assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
    let rj = json_file(&partial.join("run.json"));
    assert_eq!(rj["merged"]["partial"], true);
    assert_eq!(rj["merged"]["missing"], serde_json::json!([3]));
    let r = json_file(&partial.join("result.json"));
    assert_eq!(r["validity"]["verdict"], "invalid");
    let check = r["validity"]["checks"]
        .as_array()
        .unwrap()
        .iter()
        .find(|c| c["name"] == "shards")
        .unwrap()
        .clone();
    assert_eq!(check["status"], "fail");
    let errors: Vec<String> = validator.iter_errors(&r).map(|e| e.to_string()).collect();
    assert!(errors.is_empty(), "{errors:?}");
    let text = check["explanation"].as_str().unwrap();
    assert!(
        text.contains("missing 3") && text.contains("unfinished 2"),
        "{text}"
    );
    // The records of the shards given are all there.
    let n: usize = [&dirs[0], &dirs[1], &cut]
        .iter()
        .map(|d| read_jsonl(&d.join("turns.jsonl")).len())
        .sum();
    assert_eq!(read_jsonl(&partial.join("turns.jsonl")).len(), n);
    // An output directory that holds a run is never overwritten.
    let o = merge(&dirs, &partial, &[]);
    assert_eq!(o.status.code(), Some(2));
    assert!(String::from_utf8_lossy(&o.stderr).contains("already exists"));
    assert_eq!(
        json_file(&partial.join("run.json"))["merged"]["partial"],
        true
    );
    let _ = std::fs::remove_dir_all(&root);
}

#[test]
fn ctrl_c_while_waiting_for_start_at_stops_the_run_before_its_first_turn() {
    let (sim, url) = spawn_sim(&["--instant"]);
    let tmp_dir = tempdir("shards-start-at-int");
    let dir = tmp_dir.join("r");
    // A minute ahead: the run plans, checks the server, writes its directory and waits.
    let at = (time::OffsetDateTime::now_utc() + time::Duration::seconds(60))
        .format(&time::format_description::well_known::Rfc3339)
        .unwrap();
    let mut child = bench()
        .args(plan_args(&url, &dir, &["--start-at", &at]))
        .stdout(Stdio::null())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let mut err = BufReader::new(child.stderr.take().unwrap());
    let mut line = String::new();
    let t0 = std::time::Instant::now();
    while !line.contains("starting at") {
        line.clear();
        assert!(err.read_line(&mut line).unwrap() > 0, "no wait announced");
    }
    signal(&child, "-INT");
    let mut rest = String::new();
    let _ = err.read_to_string(&mut rest);
    let status = child.wait().unwrap();
    assert!(
        t0.elapsed() < Duration::from_secs(30),
        "the run waited on after Ctrl-C: {rest}"
    );
    assert!(!status.success(), "{rest}");
    // Stopped, not crashed: the directory says the signal stopped it, with no turn played.
    let s = status_json(&dir);
    assert_eq!(s["stopped"]["by"], "signal", "{s}");
    assert_eq!(s["crashed"], false, "{s}");
    assert_eq!(s["turns_done"], 0, "{s}");
    stop_sim(sim);
    let _ = std::fs::remove_dir_all(dir.parent().unwrap());
}

#[test]
fn sigterm_while_a_journeys_shard_waits_for_start_at_stops_it_before_any_run() {
    // The journeys wait is the replay's (one Placement), and SIGTERM, what Kubernetes sends a
    // pod, stops it as Ctrl-C does instead of killing the process.
    let (sim, url) = spawn_sim(&["--instant"]);
    let tmp_dir = tempdir("shards-journeys-term");
    let dir = tmp_dir.join("j");
    let at = (time::OffsetDateTime::now_utc() + time::Duration::seconds(60))
        .format(&time::format_description::well_known::Rfc3339)
        .unwrap();
    let mut child = bench()
        .args(["journeys", "--base-url", &url, "--iterations", "2"])
        .args(["--shard", "0/2", "--start-at", &at, "--run-dir"])
        .arg(&dir)
        .stdout(Stdio::null())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let mut err = BufReader::new(child.stderr.take().unwrap());
    let mut line = String::new();
    while !line.contains("bench journeys: ready; starting at") {
        line.clear();
        assert!(err.read_line(&mut line).unwrap() > 0, "no wait announced");
    }
    signal(&child, "-TERM");
    let mut rest = String::new();
    let _ = err.read_to_string(&mut rest);
    let status = child.wait().unwrap();
    // Exited by itself (a process killed by the signal has no exit code), before any run.
    assert!(status.code().is_some(), "killed by SIGTERM: {rest}");
    assert!(rest.contains("bench journeys: stopping"), "{rest}");
    let events = std::fs::read_to_string(dir.join("events.jsonl")).unwrap();
    let stopped: Vec<serde_json::Value> = events
        .lines()
        .map(|l| serde_json::from_str(l).unwrap())
        .filter(|e: &serde_json::Value| e["event"] == "run.stopped")
        .collect();
    assert_eq!(stopped.len(), 1, "{events}");
    assert_eq!(stopped[0]["by"], "signal", "{events}");
    let report = bench_journeys::Report::read(&dir.join("report.json")).unwrap();
    assert!(
        report.journeys.values().all(|j| j.runs.is_empty()),
        "a run played after the signal: {:?}",
        report.journeys.keys()
    );
    stop_sim(sim);
}

#[test]
fn shard_flags_are_checked_before_any_turn() {
    // --shards takes the index from Kubernetes' JOB_COMPLETION_INDEX.
    let o = bench()
        .args(["run", "--shards", "4", "-q"])
        .env_remove("JOB_COMPLETION_INDEX")
        .output()
        .unwrap();
    assert_eq!(o.status.code(), Some(2));
    assert!(String::from_utf8_lossy(&o.stderr).contains("JOB_COMPLETION_INDEX is not set"));
    let o = bench()
        .args(["run", "--shards", "4", "-q"])
        .env("JOB_COMPLETION_INDEX", "4")
        .output()
        .unwrap();
    assert_eq!(o.status.code(), Some(2));
    assert!(String::from_utf8_lossy(&o.stderr).contains("not below the shard count 4"));
    let o = run(&["run", "--shard", "2/1"]);
    assert_eq!(o.status.code(), Some(2));
    // A start time already past is refused before planning.
    let o = run(&["run", "--start-at", "2026-01-01T00:00:00Z", "-q"]);
    assert_eq!(o.status.code(), Some(2));
    assert!(String::from_utf8_lossy(&o.stderr).contains("already"));
    let o = run(&["run", "--start-at", "tomorrow", "-q"]);
    assert_eq!(o.status.code(), Some(2));
    assert!(String::from_utf8_lossy(&o.stderr).contains("RFC 3339"));
    // A shard left without a session (more shards than sessions) says so before any turn.
    let o = run(&random_run_args(
        1,
        2,
        &tempdir("shards-empty").join("r"),
        &["--shard", "3/4", "-q"],
    ));
    assert_eq!(o.status.code(), Some(2));
    assert!(
        String::from_utf8_lossy(&o.stderr)
            .contains("this shard has no session (the plan has 2 for 4 shards)"),
        "{}",
        String::from_utf8_lossy(&o.stderr)
    );
    // With the index from the environment, the run records its shard.
    let dir = tempdir("shards-env");
    let o = bench()
        .args(random_run_args(
            1,
            8,
            &dir.join("r"),
            &["-q", "-c", "2", "--shards", "4"],
        ))
        .env("JOB_COMPLETION_INDEX", "2")
        .output()
        .unwrap();
    assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
    let rj = json_file(&dir.join("r/run.json"));
    assert_eq!(rj["shard"]["index"], 2);
    assert_eq!(rj["shard"]["sessions"], 2);
    let _ = std::fs::remove_dir_all(&dir);
}

#[test]
fn journeys_shards_merge_into_every_journey_run_once() {
    let _serial = serial();
    let (sim, url) = spawn_sim(&["--ttft-ms", "2", "--itl-ms", "1"]);
    let root = tempdir("shards-journeys");
    let dirs: Vec<PathBuf> = (0..3).map(|i| root.join(format!("j{i}"))).collect();
    let children: Vec<_> = dirs
        .iter()
        .enumerate()
        .map(|(i, d)| {
            let shard = format!("{i}/3");
            bench()
                .args([
                    "journeys",
                    "--base-url",
                    &url,
                    "--iterations",
                    "3",
                    "--warmup",
                    "1",
                ])
                .args([
                    "--runs",
                    "2",
                    "--shard",
                    &shard,
                    "--run-dir",
                    d.to_str().unwrap(),
                ])
                .stdout(Stdio::null())
                .stderr(Stdio::null())
                .spawn()
                .unwrap()
        })
        .collect();
    for mut c in children {
        assert!(c.wait().unwrap().success());
    }
    stop_sim(sim);
    let merged = root.join("merged");
    let o = merge(&dirs, &merged, &[]);
    assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
    // Every (journey, run) pair was played by exactly one shard, and all are in the merge.
    let mut rows: std::collections::BTreeMap<String, Vec<bench_journeys::RunRow>> =
        Default::default();
    for d in &dirs {
        let r = bench_journeys::Report::read(&d.join("report.json")).unwrap();
        for (name, j) in r.journeys {
            rows.entry(name).or_default().extend(j.runs);
        }
    }
    let m = bench_journeys::Report::read(&merged.join("report.json")).unwrap();
    assert_eq!(m.journeys.len(), 6, "the openai pack's six journeys");
    for (name, j) in &m.journeys {
        let mut runs: Vec<u32> = j.runs.iter().map(|r| r.run).collect();
        runs.sort_unstable();
        assert_eq!(runs, vec![1, 2], "{name}");
        let mut mine = rows[name].clone();
        mine.sort_by_key(|r| r.run);
        assert_eq!(j.runs, mine, "{name}");
        // The summary is recomputed over every shard's rows, not taken from one shard.
        assert_eq!(j.summary, bench_journeys::Summary::over(&mine), "{name}");
    }
    let st = status_json(&merged);
    assert_eq!(st["stopped"]["by"], "completed", "{st}");
}
