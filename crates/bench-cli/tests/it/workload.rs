//! `bench plan` and `bench import` end to end.

use std::path::PathBuf;

use serde_json::Value;

use crate::{run, run_json, tempdir};

fn fixtures() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../../fixtures")
}

/// Tokens of `s` under the Qwen3 tokenizer loaded straight from the fixture file.
fn ref_count(s: &str) -> u64 {
    use std::io::Read;
    static T: std::sync::OnceLock<tokenizers::Tokenizer> = std::sync::OnceLock::new();
    let t = T.get_or_init(|| {
        let gz = std::fs::read(fixtures().join("tokenizer/qwen3/tokenizer.json.gz")).unwrap();
        let mut json = Vec::new();
        flate2::read::GzDecoder::new(&gz[..])
            .read_to_end(&mut json)
            .unwrap();
        tokenizers::Tokenizer::from_bytes(&json).unwrap()
    });
    t.encode(s, false).unwrap().len() as u64
}

#[test]
fn plan_of_a_directory_counts_what_an_independent_computation_counts() {
    let _serial = crate::serial();
    let d = tempdir("workload-dir-counts");
    let texts = [
        (
            "Fix the flaky test in tests/test_io.py",
            "I'll start by reading it.",
        ),
        (
            "$ pytest -q\n1 failed, 41 passed in 2.31s",
            "The failure is a race.",
        ),
        (
            "Traceback (most recent call last):\n  File \"io.py\"",
            "Patched; rerunning.",
        ),
    ];
    let mut lines = Vec::new();
    for s in 0..3usize {
        let turns: Vec<Value> = texts[..=s]
            .iter()
            .enumerate()
            .map(|(i, (u, a))| serde_json::json!({"index": i, "input_delta": [{"role": "user", "content": u}], "assistant_text": a}))
            .collect();
        lines.push(serde_json::json!({"session_id": format!("s{s}"), "turns": turns}).to_string());
    }
    std::fs::write(d.join("a.jsonl"), lines.join("\n")).unwrap();
    let v = run_json(&[
        "plan",
        "--json",
        "--dataset",
        d.to_str().unwrap(),
        "--system-prompt-tokens",
        "300",
    ]);
    // Expectations computed here, from the texts and the plan rules in docs/workload.md.
    const OVERHEAD: u64 = 5;
    let (mut input, mut new_input, mut output, mut turns) = (0u64, 0u64, 0u64, 0u64);
    for s in 0..3usize {
        let mut ctx = 300 + OVERHEAD;
        for (u, a) in &texts[..=s] {
            let (nu, na) = (ref_count(u), ref_count(a));
            new_input += nu;
            ctx += nu + OVERHEAD;
            input += ctx;
            output += na; // no recorded counts: the answer counted
            ctx += na + OVERHEAD;
            turns += 1;
        }
    }
    assert_eq!(v["sessions"], 3);
    assert_eq!(v["turns"], turns);
    assert_eq!(v["system_prompt_tokens"], 300);
    assert_eq!(v["new_input_tokens"], new_input);
    assert_eq!(v["input_tokens"], input);
    assert_eq!(v["output_tokens"], output);
}

#[test]
fn plan_json_has_the_stable_keys() {
    let _serial = crate::serial();
    let v = run_json(&["plan", "--json"]);
    for k in [
        "sessions",
        "turns",
        "input_tokens",
        "output_tokens",
        "system_prompt_tokens",
        "tokenizer",
    ] {
        assert!(v.get(k).is_some(), "{k} missing");
    }
    assert_eq!(v["tokenizer"], "hf:qwen3");
    assert_eq!(
        v["sessions"], 16,
        "the bundled sample: a pool of 2 × C = 16 of its 24 sessions"
    );
}

#[test]
fn import_then_plan_round_trip() {
    let _serial = crate::serial();
    let d = tempdir("workload-import");
    let out_file = d.join("lmcache.jsonl.zst");
    let out = run(&[
        "import",
        "--from",
        "lmcache",
        fixtures()
            .join("traces/lmcache-agent-trace/miniswe")
            .to_str()
            .unwrap(),
        "-o",
        out_file.to_str().unwrap(),
    ]);
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    assert!(String::from_utf8_lossy(&out.stdout).contains("2 sessions, 12 turns"));
    let v = run_json(&[
        "plan",
        "--json",
        "--dataset",
        out_file.to_str().unwrap(),
        "--system-prompt-tokens",
        "1000",
    ]);
    assert_eq!(v["sessions"], 2);
    assert_eq!(v["turns"], 12);
    assert_eq!(v["system_prompt_tokens"], 1000);
    // No temporary files are left beside the output.
    let names: Vec<_> = std::fs::read_dir(&d)
        .unwrap()
        .map(|e| e.unwrap().file_name())
        .collect();
    assert_eq!(names.len(), 1, "{names:?}");
}

#[test]
fn bad_input_is_one_line_naming_file_and_line_exit_2() {
    let _serial = crate::serial();
    let d = tempdir("workload-bad");
    let f = d.join("bad.jsonl");
    std::fs::write(
        &f,
        "{\"session_id\":\"a\",\"turns\":[]}\n{\"session_id\": 5}\n",
    )
    .unwrap();
    let cases: Vec<(Vec<String>, String)> = vec![
        (
            vec!["plan".into(), "--dataset".into(), f.display().to_string()],
            format!("{}:2: session_id", f.display()),
        ),
        (
            vec![
                "plan".into(),
                "--dataset".into(),
                d.join("missing").display().to_string(),
            ],
            "missing".into(),
        ),
        (
            vec!["plan".into(), "--max-turns".into(), "0".into()],
            "--max-turns".into(),
        ),
        (
            vec!["plan".into(), "--output-policy".into(), "fixed:0".into()],
            "--output-policy".into(),
        ),
        (
            vec![
                "plan".into(),
                "--dataset".into(),
                "random".into(),
                "--gap-policy".into(),
                "uniform:9,1".into(),
            ],
            "--gap-policy".into(),
        ),
        (
            vec!["plan".into(), "--max-context".into(), "10".into()],
            "excludes all".into(),
        ),
        (
            vec!["plan".into(), "--concurrency".into(), "0".into()],
            "--concurrency".into(),
        ),
        (
            vec![
                "import".into(),
                "--from".into(),
                "nope".into(),
                f.display().to_string(),
                "-o".into(),
                d.join("o.jsonl").display().to_string(),
            ],
            "known formats".into(),
        ),
        (
            vec![
                "import".into(),
                "--from".into(),
                "mooncake".into(),
                f.display().to_string(),
                "-o".into(),
                d.join("o.txt").display().to_string(),
            ],
            ".jsonl".into(),
        ),
        (
            vec![
                "import".into(),
                "--from".into(),
                "sharegpt".into(),
                d.join("nothing.json").display().to_string(),
                "-o".into(),
                d.join("o.jsonl").display().to_string(),
            ],
            "nothing.json".into(),
        ),
    ];
    for (args, want) in cases {
        let args: Vec<&str> = args.iter().map(String::as_str).collect();
        let out = run(&args);
        let stderr = String::from_utf8_lossy(&out.stderr);
        assert_eq!(out.status.code(), Some(2), "{args:?}: {stderr}");
        assert!(!stderr.contains("panicked"), "{stderr}");
        let last = stderr.trim_end().lines().last().unwrap_or("");
        assert!(
            last.contains("error:") && last.contains(&want),
            "{args:?}: want {want:?} in {stderr:?}"
        );
    }
    assert!(
        !d.join("o.jsonl").exists(),
        "a failed import leaves no output"
    );
}

#[test]
fn no_tokenizer_warns_once() {
    let _serial = crate::serial();
    let out = run(&["plan", "--tokenizer", "none", "--json"]);
    assert!(out.status.success());
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert_eq!(stderr.matches("warning").count(), 1, "{stderr}");
    let v: Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(v["tokenizer"], "chars/4");
}

#[test]
fn import_reads_no_line_past_max_trace_line() {
    let d = tempdir("workload-import-cap");
    let f = d.join("chats.jsonl");
    let line = |text: &str| {
        serde_json::json!({"messages": [
            {"role": "user", "content": text},
            {"role": "assistant", "content": "ok"},
        ]})
        .to_string()
    };
    let long = "x".repeat(4000);
    std::fs::write(
        &f,
        format!(
            "{}\n{}\n{}\n",
            line("short"),
            line(&long),
            line("also short")
        ),
    )
    .unwrap();
    let out_file = d.join("out.jsonl");
    let import = |extra: &[&str]| {
        let mut args = vec!["import", "--from", "openai-messages", f.to_str().unwrap()];
        args.extend(["-o", out_file.to_str().unwrap()]);
        args.extend(extra);
        run(&args)
    };
    // The default cap (64 MiB) reads all three.
    let o = import(&[]);
    assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
    assert!(String::from_utf8_lossy(&o.stdout).contains("3 sessions"));
    // Under a 1 KiB cap the long line is an invalid record, named by file and line.
    let o = import(&["--max-trace-line", "1KiB"]);
    assert_eq!(o.status.code(), Some(2));
    let err = String::from_utf8_lossy(&o.stderr);
    assert!(err.contains(&format!("{}:2", f.display())), "{err}");
    assert!(err.contains("cap"), "{err}");
    assert_eq!(err.trim().lines().count(), 1, "{err}");
    // ... which --skip-invalid counts and skips.
    let o = import(&["--max-trace-line", "1KiB", "--skip-invalid"]);
    assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
    let text = String::from_utf8_lossy(&o.stdout);
    assert!(text.contains("2 sessions"), "{text}");
    assert!(text.contains("skipped 1 invalid records"), "{text}");
    let o = import(&["--max-trace-line", "0"]);
    assert_eq!(o.status.code(), Some(2));
    let err = String::from_utf8_lossy(&o.stderr);
    assert!(
        err.contains("--max-trace-line") && err.contains("at least 1 byte"),
        "{err}"
    );
}
