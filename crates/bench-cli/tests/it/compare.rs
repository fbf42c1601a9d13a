//! `bench compare`: exit codes, the table and `--markdown` on real runs against the embedded
//! simulator, and the one-line errors on run directories written by hand.

use std::path::Path;

use serde_json::{Value, json};

use crate::{random_run_args, run, serial, tempdir};

/// A short real run into `dir`: 48 sessions of 4 turns at C = 16 against the embedded simulator
/// with fixed latency (TTFT `ttft_ms`, 10 ms between tokens, 5 output tokens; about 4 s).
/// TTFTs of 250 ms keep the loopback's few milliseconds of jitter far below the 5% threshold.
fn real_run(dir: &Path, ttft_ms: u32) {
    let ttft = ttft_ms.to_string();
    let out = run(&random_run_args(
        4,
        48,
        dir,
        &[
            "-c",
            "16",
            "--sim-ttft-ms",
            &ttft,
            "--sim-itl-ms",
            "10",
            "--output-len",
            "5",
        ],
    ));
    assert!(
        out.status.success(),
        "bench run: exit {:?}: {}",
        out.status,
        String::from_utf8_lossy(&out.stderr)
    );
}

fn stdout(out: &std::process::Output) -> String {
    String::from_utf8_lossy(&out.stdout).into_owned()
}

fn stderr(out: &std::process::Output) -> String {
    String::from_utf8_lossy(&out.stderr).into_owned()
}

fn s(p: &Path) -> &str {
    p.to_str().unwrap()
}

/// A copy of run directory `from` (its turns and result) whose result says the plan had
/// seed `seed`.
fn copy_with_seed(from: &Path, to: &Path, seed: u64) {
    std::fs::create_dir_all(to).unwrap();
    std::fs::copy(from.join("turns.jsonl"), to.join("turns.jsonl")).unwrap();
    let mut result: Value =
        serde_json::from_slice(&std::fs::read(from.join("result.json")).unwrap()).unwrap();
    assert_eq!(
        result["config"]["spec"]["plan"]["seed"], 0,
        "a real run.json echo"
    );
    result["config"]["spec"]["plan"]["seed"] = json!(seed);
    std::fs::write(to.join("result.json"), result.to_string()).unwrap();
}

/// Two real runs of one configuration compare equal (exit 0); a candidate whose TTFT is 60%
/// slower is a regression (exit 1, named, after the table; `--markdown` writes it); the faster
/// one against it is `better` and exits 0; repeats show each side's CV; runs of different
/// plans are refused (exit 2) unless `--force`.
#[test]
fn compare_real_runs() {
    let d = tempdir("compare");
    let (a, b, slow) = (d.join("a"), d.join("b"), d.join("slow"));
    {
        let _serial = serial();
        real_run(&a, 250);
        real_run(&b, 250);
        real_run(&slow, 400);
    }

    // (A wider threshold than the default: two runs on a busy machine, 250 ms apart from
    // jitter; the default's false-alarm rate is the library test's business.)
    let out = run(&["compare", s(&a), s(&b), "--threshold", "0.15"]);
    let text = stdout(&out);
    assert_eq!(out.status.code(), Some(0), "{text}{}", stderr(&out));
    assert!(text.contains("TTFT p50 ms"), "{text}");
    assert!(text.contains("no significant regression"), "{text}");
    assert!(!text.contains("worse"), "{text}");

    let md = d.join("cmp.md");
    let out = run(&["compare", s(&a), s(&slow), "--markdown", s(&md)]);
    let (text, err) = (stdout(&out), stderr(&out));
    assert_eq!(out.status.code(), Some(1), "{text}{err}");
    // The table is printed first, then the one-line error naming the regression.
    assert!(
        text.contains("regression: TTFT p50 ms, TTFT p99 ms"),
        "{text}"
    );
    let err_lines: Vec<&str> = err.lines().collect();
    assert_eq!(err_lines.len(), 1, "{err}");
    assert!(
        err_lines[0].starts_with("error: regression beyond the 5% threshold: TTFT p50 ms +"),
        "{err}"
    );
    let md = std::fs::read_to_string(&md).unwrap();
    assert!(
        md.contains("| metric | base | candidate | change | 95% CI | verdict |"),
        "{md}"
    );
    assert!(md.contains("| TTFT p50 ms | "), "{md}");
    assert!(md.contains("**worse**"), "{md}");

    // The other way round the candidate is faster: better, exit 0.
    let out = run(&["compare", s(&slow), s(&a)]);
    assert_eq!(out.status.code(), Some(0), "{}", stdout(&out));
    assert!(stdout(&out).contains("better"), "{}", stdout(&out));

    // Repeats on the base side: pooled, with each side's CV; --json prints the document.
    let both = format!("{},{}", s(&a), s(&b));
    let out = run(&["compare", &both, s(&slow), "--json", "--seed", "3"]);
    assert_eq!(out.status.code(), Some(1), "{}", stderr(&out));
    let doc: Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(doc["base"]["runs"].as_array().unwrap().len(), 2);
    assert_eq!(doc["base"]["measured_turns"], 384);
    assert_eq!(doc["seed"], 3);
    assert_eq!(doc["resamples"], 2000);
    assert_eq!(doc["regressed"], true);
    assert_eq!(doc["metrics"][0]["metric"], "ttft_p50_ms");
    assert_eq!(doc["metrics"][0]["verdict"], "worse");
    assert!(doc["metrics"][0]["base_cv"].as_f64().unwrap() < 0.05);
    assert!(
        doc["metrics"][0]["candidate_cv"].is_null(),
        "one candidate run"
    );

    // Different plans: refused with the key named, or compared with --force.
    let other = d.join("other-seed");
    copy_with_seed(&a, &other, 7);
    let out = run(&["compare", s(&a), s(&other)]);
    assert_eq!(out.status.code(), Some(2), "{}", stdout(&out));
    assert_eq!(
        stderr(&out),
        "error: plans differ: spec.plan.seed is 0 in BASE and 7 in CAND (--force compares anyway)\n"
    );
    assert!(out.stdout.is_empty());
    let out = run(&["compare", s(&a), s(&other), "--force"]);
    assert_eq!(out.status.code(), Some(0), "{}", stderr(&out));
    assert!(
        stdout(&out).contains("(compared anyway)"),
        "{}",
        stdout(&out)
    );

    std::fs::remove_dir_all(&d).unwrap();
}

/// One measured ok turn of a hand-written `turns.jsonl` (only the keys a record requires).
fn turn_line(i: usize, ttft_ms: f64) -> String {
    let sent = i as f64 * 0.1;
    json!({
        "session_id": format!("s{i}"), "replay": 0, "turn_index": 0, "status": "ok",
        "ttft_ms": ttft_ms, "e2e_ms": ttft_ms + 400.0, "tpot_ms": 10.0,
        "chunk_gaps_ms": [], "output_tokens": 40, "max_output_tokens": 40,
        "active_at_dispatch": 4, "due_s": sent, "sent_s": sent, "end_s": sent + 0.5,
        "sent_utc": "2026-01-01T00:00:00Z", "end_utc": "2026-01-01T00:00:01Z",
        "redials": 0, "warmup": false
    })
    .to_string()
}

/// A run directory written by hand: `n` turns of TTFT `ttft_ms` and a result computed from
/// them, its plan seeded 0.
fn write_run(dir: &Path, n: usize, ttft_ms: f64) {
    std::fs::create_dir_all(dir).unwrap();
    let lines: Vec<String> = (0..n).map(|i| turn_line(i, ttft_ms)).collect();
    std::fs::write(dir.join("turns.jsonl"), lines.join("\n") + "\n").unwrap();
    let turns: Vec<bench_report::TurnRecord> = lines
        .iter()
        .map(|l| serde_json::from_str(l).unwrap())
        .collect();
    let info = bench_report::RunInfo {
        concurrency: 4,
        duration_s: n as f64 * 0.1,
        config: json!({"spec": {"plan": {"dataset": "sample", "seed": 0}}, "plan": {"sessions": 8, "turns": n}}),
        ..bench_report::RunInfo::default()
    };
    let result = bench_report::compute(&turns, &[], &info);
    std::fs::write(
        dir.join("result.json"),
        serde_json::to_string(&result).unwrap(),
    )
    .unwrap();
}

/// Hand-written run directories: a clear regression exits 1, a torn last line is noted, and
/// every input problem is one line with exit 2 (a missing result.json names the file and
/// `bench report`).
#[test]
fn compare_constructed_runs_and_their_errors() {
    let d = tempdir("compare-constructed");
    let (base, slow) = (d.join("base"), d.join("slow"));
    write_run(&base, 200, 100.0);
    write_run(&slow, 200, 130.0);

    let out = run(&["compare", s(&base), s(&slow), "--threshold", "0.07"]);
    assert_eq!(out.status.code(), Some(1), "{}", stderr(&out));
    assert_eq!(
        stderr(&out),
        "error: regression beyond the 7% threshold: TTFT p50 ms +30.0%, TTFT p99 ms +30.0%\n"
    );
    // A threshold above the change: no verdict.
    let out = run(&["compare", s(&base), s(&slow), "--threshold", "0.5"]);
    assert_eq!(out.status.code(), Some(0), "{}", stderr(&out));

    // A crash cut the candidate's last line: set aside, and said so.
    let mut torn = std::fs::read_to_string(slow.join("turns.jsonl")).unwrap();
    torn.push_str("{\"session_id\": \"s9");
    std::fs::write(slow.join("turns.jsonl"), torn).unwrap();
    let out = run(&["compare", s(&base), s(&slow), "--threshold", "0.5"]);
    assert_eq!(out.status.code(), Some(0), "{}", stderr(&out));
    assert!(
        stdout(&out).contains("turns.jsonl:201: torn last line set aside"),
        "{}",
        stdout(&out)
    );

    // No result.json.
    let unfinished = d.join("unfinished");
    std::fs::create_dir_all(&unfinished).unwrap();
    std::fs::copy(base.join("turns.jsonl"), unfinished.join("turns.jsonl")).unwrap();
    let out = run(&["compare", s(&base), s(&unfinished)]);
    assert_eq!(out.status.code(), Some(2));
    assert_eq!(
        stderr(&out),
        format!(
            "error: {}: missing, and it cannot be recomputed ({}: not a run directory (no run.json))\n",
            unfinished.join("result.json").display(),
            unfinished.display()
        )
    );

    for (args, needle) in [
        (
            vec!["compare", s(&base), s(&d.join("nowhere"))],
            "not a run directory",
        ),
        (
            vec!["compare", s(&base), &format!("{},", s(&slow))],
            "comma-separated",
        ),
        (
            vec!["compare", s(&base), s(&slow), "--resamples", "0"],
            "at least one bootstrap resample",
        ),
        (
            vec!["compare", s(&base), s(&slow), "--threshold=-0.1"],
            "threshold",
        ),
    ] {
        let out = run(&args);
        assert_eq!(out.status.code(), Some(2), "{args:?}: {}", stderr(&out));
        let err = stderr(&out);
        assert_eq!(err.lines().count(), 1, "{args:?}: {err}");
        assert!(err.contains(needle), "{args:?}: {err}");
    }
    std::fs::remove_dir_all(&d).unwrap();
}

/// A run whose result.json is gone is recomputed from its records (it has its run.json).
#[test]
fn a_run_without_its_result_is_recomputed_for_the_comparison() {
    let d = tempdir("compare-recompute");
    let a = d.join("a");
    let out = run(&crate::random_run_args(
        2,
        8,
        &a,
        &[
            "--concurrency",
            "4",
            "--sim-ttft-ms",
            "5",
            "--sim-itl-ms",
            "1",
            "-q",
        ],
    ));
    assert!(out.status.success(), "{}", stderr(&out));
    let b = d.join("b");
    std::fs::create_dir_all(&b).unwrap();
    for f in ["run.json", "turns.jsonl", "sessions.jsonl"] {
        std::fs::copy(a.join(f), b.join(f)).unwrap();
    }
    let out = run(&["compare", s(&a), s(&b)]);
    assert_eq!(
        out.status.code(),
        Some(0),
        "{}{}",
        stdout(&out),
        stderr(&out)
    );
    assert!(
        stderr(&out).contains("recomputed the result from the records (missing)"),
        "{}",
        stderr(&out)
    );
    // The same records: no change at all.
    assert!(stdout(&out).contains("+0.0%"), "{}", stdout(&out));
    std::fs::remove_dir_all(&d).unwrap();
}
