//! Loading and planning: every knob, the edge cases, and counts checked against an
//! independent tokenizer computation.

use std::io::Read;
use std::path::Path;
use std::sync::{Arc, OnceLock};

use bench_workload::PlanError;
use bench_workload::plan::{
    DatasetSpec, GapPolicy, MESSAGE_OVERHEAD_TOKENS, OutputPolicy, PlanConfig, RecordingRates,
    SyntheticSpec, build_plan_with, extract_tool_waits,
};
use bench_workload::tokenize::{TokenCounter, TokenizerSpec};
use serde_json::json;

/// The embedded tokenizer, loaded once for the whole test binary.
fn qwen3() -> &'static TokenCounter {
    static C: OnceLock<TokenCounter> = OnceLock::new();
    C.get_or_init(|| TokenCounter::load(&TokenizerSpec::Qwen3).unwrap())
}

/// The same tokenizer loaded independently, straight from the fixture file.
fn reference_tokenizer() -> &'static tokenizers::Tokenizer {
    static T: OnceLock<tokenizers::Tokenizer> = OnceLock::new();
    T.get_or_init(|| {
        let gz =
            std::fs::read(crate::fixtures().join("tokenizer/qwen3/tokenizer.json.gz")).unwrap();
        let mut json = Vec::new();
        flate2::read::GzDecoder::new(&gz[..])
            .read_to_end(&mut json)
            .unwrap();
        tokenizers::Tokenizer::from_bytes(&json).unwrap()
    })
}

fn ref_count(s: &str) -> u64 {
    reference_tokenizer().encode(s, false).unwrap().len() as u64
}

/// A fresh temporary directory, removed with what the test wrote in it when dropped (at the
/// end of the test, even a failed one).
fn tempdir(name: &str) -> tempfile::TempDir {
    tempfile::Builder::new()
        .prefix(&format!("bench-workload-{name}-"))
        .tempdir()
        .unwrap()
}

fn write_lines(path: &Path, lines: &[String]) {
    std::fs::write(path, lines.join("\n") + "\n").unwrap();
}

fn session(id: &str, turns: &[(&str, &str)]) -> serde_json::Value {
    json!({
        "session_id": id,
        "source": {"dataset": "test", "model": "openai/gpt-5.4"},
        "turns": turns.iter().enumerate().map(|(i, (u, a))| json!({
            "index": i,
            "input_delta": [{"role": if i == 0 { "user" } else { "tool" }, "content": u}],
            "assistant_text": a,
            "output_tokens": 7,
            "input_tokens": 100 * (i + 1),
            "pre_gap_ms": if i == 0 { 0.0 } else { 2000.0 },
        })).collect::<Vec<_>>(),
    })
}

fn plan(cfg: PlanConfig) -> Result<bench_workload::plan::Plan, PlanError> {
    build_plan_with(cfg, qwen3())
}

fn path_cfg(p: &Path) -> PlanConfig {
    let mut c = PlanConfig::new(DatasetSpec::Path(p.to_path_buf()));
    c.concurrency = 50;
    c
}

#[test]
fn counts_match_an_independent_tokenizer_computation() {
    let tmp = tempdir("counts");
    let d = tmp.path();
    let sessions = [
        session(
            "a",
            &[
                (
                    "Fix the failing test in parser.rs",
                    "Let me look at the file.",
                ),
                ("cat parser.rs\nfn main() {}", "The bug is on line 3."),
            ],
        ),
        session("b", &[("Ünïcödé and emoji 🚀 in the prompt", "Noted.")]),
        session("c", &[("one", "two"), ("three", "four"), ("five", "six")]),
    ];
    write_lines(
        &d.join("trace.jsonl"),
        &sessions.iter().map(|s| s.to_string()).collect::<Vec<_>>(),
    );
    let p = plan(path_cfg(d)).unwrap();
    let s = &p.summary;
    assert_eq!(s.sessions, 3);
    assert_eq!(s.turns, 6);
    assert_eq!(s.tokenizer, "hf:qwen3");
    // Independent expectations.
    let (mut new_in, mut input, mut output) = (0u64, 0u64, 0u64);
    for sess in &sessions {
        let mut ctx = 0u64;
        for t in sess["turns"].as_array().unwrap() {
            let u = ref_count(t["input_delta"][0]["content"].as_str().unwrap());
            new_in += u;
            ctx += u + MESSAGE_OVERHEAD_TOKENS;
            input += ctx;
            output += 7;
            ctx += ref_count(t["assistant_text"].as_str().unwrap()) + MESSAGE_OVERHEAD_TOKENS;
        }
    }
    assert_eq!(s.new_input_tokens, new_in);
    assert_eq!(s.input_tokens, input);
    assert_eq!(s.output_tokens, output);
    assert_eq!(
        s.recorded_input_tokens,
        Some(100 + 200 + 100 + 100 + 200 + 300)
    );
    assert_eq!(s.recorded_output_tokens, Some(42));
    assert_eq!(
        s.recorded_cached_tokens, None,
        "not recorded → null, never 0"
    );
    assert_eq!(s.coerced_roles, 3, "tool messages are sent as user");
    // Every message's JSON is ready to splice into a request body.
    for sess in &p.sessions {
        for t in &sess.turns {
            for m in &t.input_delta {
                let v: serde_json::Value = serde_json::from_str(&m.json()).unwrap();
                assert_eq!(v["role"], "user");
                assert_eq!(v["content"].as_str().unwrap(), m.content());
            }
        }
    }
}

#[test]
fn synthetic_workload_has_exact_shape() {
    let spec = SyntheticSpec {
        turns: 4,
        input_increment: 100,
        output_len: 20,
        gap: GapPolicy::Exponential(3000.0),
    };
    let mut cfg = PlanConfig::new(DatasetSpec::Random(spec));
    cfg.num_sessions = Some(6);
    cfg.gap_cap_ms = 5000.0;
    cfg.seed = 7;
    let p = plan(cfg.clone()).unwrap();
    assert_eq!(p.summary.sessions, 6);
    assert_eq!(p.summary.turns, 24);
    // Every word is one token: exact counts under the real tokenizer.
    assert_eq!(p.summary.new_input_tokens, 24 * 100);
    for s in &p.sessions {
        assert_eq!(s.turns[0].pre_gap_ms, 0.0, "first turn never waits");
        for t in &s.turns {
            assert!(t.pre_gap_ms <= 5000.0);
            assert_eq!(t.max_output_tokens, 20);
            assert_eq!(ref_count(&t.input_delta[0].content()), 100);
            assert_eq!(ref_count(&t.assistant.content()), 20);
        }
    }
    assert!(
        p.sessions
            .iter()
            .any(|s| s.turns[1..].iter().any(|t| t.pre_gap_ms > 0.0))
    );
    // Same seed, same plan; another seed, other text.
    let again = plan(cfg.clone()).unwrap();
    assert_eq!(again.sessions, p.sessions);
    cfg.seed = 8;
    let other = plan(cfg).unwrap();
    assert_ne!(
        other.sessions[0].turns[0].input_delta[0].content(),
        p.sessions[0].turns[0].input_delta[0].content()
    );
}

#[test]
fn pool_defaults_to_twice_the_concurrency_and_shuffle_is_seeded() {
    let tmp = tempdir("pool");
    let d = tmp.path();
    let lines: Vec<String> = (0..40)
        .map(|i| session(&format!("s{i}"), &[("hi", "yo")]).to_string())
        .collect();
    write_lines(&d.join("t.jsonl"), &lines);
    let mut cfg = path_cfg(d);
    cfg.concurrency = 8;
    let a = plan(cfg.clone()).unwrap();
    assert_eq!(a.summary.sessions, 16);
    let ids = |p: &bench_workload::plan::Plan| {
        p.sessions
            .iter()
            .map(|s| s.id.to_string())
            .collect::<Vec<_>>()
    };
    assert_eq!(ids(&a), ids(&plan(cfg.clone()).unwrap()));
    cfg.seed = 1;
    assert_ne!(ids(&a), ids(&plan(cfg.clone()).unwrap()));
    // More asked than eligible: all of them, with a note.
    cfg.num_sessions = Some(100);
    let all = plan(cfg).unwrap();
    assert_eq!(all.summary.sessions, 40);
    assert!(
        all.summary
            .notes
            .iter()
            .any(|n| n.contains("100 sessions asked for, 40 eligible"))
    );
}

#[test]
fn turn_filters_cut_but_never_pad() {
    let tmp = tempdir("turns");
    let d = tmp.path();
    write_lines(
        &d.join("t.jsonl"),
        &[
            session("one", &[("a", "b")]).to_string(),
            session("three", &[("a", "b"), ("c", "d"), ("e", "f")]).to_string(),
            json!({"session_id": "empty", "turns": []}).to_string(),
        ],
    );
    let mut cfg = path_cfg(d);
    cfg.min_turns = Some(2);
    cfg.max_turns = Some(2);
    let p = plan(cfg).unwrap();
    assert_eq!(p.summary.sessions, 1);
    assert_eq!(p.sessions[0].turns.len(), 2, "cut to --max-turns");
    assert_eq!(p.summary.excluded_min_turns, 1);
    assert_eq!(p.summary.excluded_empty, 1);
    let mut cfg = path_cfg(d);
    cfg.max_turns = Some(10);
    let p = plan(cfg).unwrap();
    let mut lens: Vec<usize> = p.sessions.iter().map(|s| s.turns.len()).collect();
    lens.sort();
    assert_eq!(lens, [1, 3], "never padded");
}

#[test]
fn context_band_counts_the_system_prompt_and_can_exclude_everything() {
    let tmp = tempdir("band");
    let d = tmp.path();
    write_lines(
        &d.join("t.jsonl"),
        &[session("a", &[("hello there", "hi")]).to_string()],
    );
    let base = plan(path_cfg(d)).unwrap().sessions[0].peak_context;
    let mut cfg = path_cfg(d);
    cfg.system_prompt_tokens = Some(500);
    let with_sp = plan(cfg.clone()).unwrap();
    assert_eq!(with_sp.summary.system_prompt_tokens, 500);
    assert_eq!(
        with_sp.sessions[0].peak_context,
        base + 500 + MESSAGE_OVERHEAD_TOKENS
    );
    // Room for the prompt alone, not for the session on top of it.
    cfg.max_context = Some(500 + MESSAGE_OVERHEAD_TOKENS + base - 1);
    let e = plan(cfg).unwrap_err().to_string();
    assert!(e.contains("excludes all 1 sessions"), "{e}");
    assert!(e.contains("500-token system prompt"), "{e}");
}

#[test]
fn system_prompt_is_tiled_to_the_exact_token_count() {
    for target in [1u32, 17, 2000, 8192] {
        let sp = bench_workload::plan::system_prompt(qwen3(), target);
        assert_eq!(sp.actual_tokens, target);
        assert_eq!(ref_count(&sp.text), u64::from(target));
    }
    let chars = TokenCounter::load(&TokenizerSpec::Chars).unwrap();
    let sp = bench_workload::plan::system_prompt(&chars, 100);
    assert_eq!(sp.actual_tokens, 100);
}

#[test]
fn shared_messages_are_not_copied() {
    let spec = SyntheticSpec::default();
    let mut cfg = PlanConfig::new(DatasetSpec::Random(spec));
    cfg.num_sessions = Some(3);
    cfg.system_prompt_tokens = Some(64);
    let p = plan(cfg).unwrap();
    let a = p.sessions[0].system.as_ref().unwrap();
    let b = p.sessions[2].system.as_ref().unwrap();
    assert!(
        Arc::ptr_eq(a, b),
        "one system message shared by every session"
    );
}

#[test]
fn output_policies() {
    let tmp = tempdir("output");
    let d = tmp.path();
    write_lines(
        &d.join("t.jsonl"),
        &[session("a", &[("a", "b"), ("c", "d"), ("e", "f")]).to_string()],
    );
    let mut cfg = path_cfg(d);
    cfg.output = Some("fixed:9".parse().unwrap());
    let p = plan(cfg.clone()).unwrap();
    assert!(p.sessions[0].turns.iter().all(|t| t.max_output_tokens == 9));
    cfg.output = Some("budget:100".parse().unwrap());
    let p = plan(cfg.clone()).unwrap();
    let outs: Vec<u32> = p.sessions[0]
        .turns
        .iter()
        .map(|t| t.max_output_tokens)
        .collect();
    assert_eq!(outs, [34, 33, 33]);
    cfg.output = Some(OutputPolicy::Trace);
    let p = plan(cfg).unwrap();
    assert!(
        p.sessions[0].turns.iter().all(|t| t.max_output_tokens == 7),
        "recorded counts"
    );
    for bad in ["fixed:0", "fixed:-3", "budget:x", "bogus", "trace:1"] {
        assert!(bad.parse::<OutputPolicy>().is_err(), "{bad}");
    }
    for bad in [
        "fixed:-1",
        "uniform:5",
        "uniform:9,1",
        "exponential:0",
        "poisson:3",
        "zero:1",
    ] {
        assert!(bad.parse::<GapPolicy>().is_err(), "{bad}");
    }
    assert_eq!(
        "uniform:1,5".parse::<GapPolicy>().unwrap(),
        GapPolicy::Uniform(1.0, 5.0)
    );
}

#[test]
fn knobs_are_validated_naming_the_flag() {
    let mk = || PlanConfig::new(DatasetSpec::Sample);
    let cases: Vec<(PlanConfig, &str)> = vec![
        (
            {
                let mut c = mk();
                c.max_turns = Some(0);
                c
            },
            "--max-turns",
        ),
        (
            {
                let mut c = mk();
                c.min_turns = Some(5);
                c.max_turns = Some(2);
                c
            },
            "--min-turns",
        ),
        (
            {
                let mut c = mk();
                c.min_context = Some(9);
                c.max_context = Some(2);
                c
            },
            "--min-context",
        ),
        (
            {
                let mut c = mk();
                c.num_sessions = Some(0);
                c
            },
            "--num-sessions",
        ),
        (
            {
                let mut c = mk();
                c.concurrency = 0;
                c
            },
            "--concurrency",
        ),
        (
            {
                let mut c = mk();
                c.gap_cap_ms = -1.0;
                c
            },
            "--gap-cap-ms",
        ),
        (
            {
                let mut c = mk();
                c.system_prompt_tokens = Some(4096);
                c.max_context = Some(4096);
                c
            },
            "--system-prompt-tokens",
        ),
        (
            {
                let mut c = PlanConfig::new(DatasetSpec::Random(SyntheticSpec {
                    turns: 0,
                    ..SyntheticSpec::default()
                }));
                c.seed = 1;
                c
            },
            "--turns",
        ),
    ];
    for (cfg, flag) in cases {
        let e = plan(cfg).unwrap_err().to_string();
        assert!(e.starts_with(flag), "{flag}: {e}");
    }
}

#[test]
fn bad_input_names_file_line_and_field() {
    let tmp = tempdir("bad");
    let d = tmp.path();
    let f = d.join("t.jsonl");
    let good = session("a", &[("x", "y")]).to_string();
    let cases: Vec<(Vec<u8>, &str)> = vec![
        (format!("{good}\n{{not json\n").into_bytes(), "t.jsonl:2:"),
        (
            format!(
                "{good}\n{}\n",
                json!({"session_id": "b", "turns": [{"index": "zero"}]})
            )
            .into_bytes(),
            "t.jsonl:2: turns[0].index",
        ),
        (
            format!("{}\n", json!({"session_id": "b", "turns": [{"index": 1}]})).into_bytes(),
            "turns[0].index: expected 0",
        ),
        (
            format!(
                "{}\n",
                json!({"session_id": "b", "turns": [{"index": 0, "pre_gap_ms": -5}]})
            )
            .into_bytes(),
            "pre_gap_ms",
        ),
        (
            [good.as_bytes(), b"\n", b"{\"session_id\": \"\xff\"}\n"].concat(),
            "t.jsonl:2: invalid UTF-8",
        ),
        (
            format!("{}\n", json!({"turns": []})).into_bytes(),
            "session_id",
        ),
        (Vec::new(), "no sessions found"),
    ];
    for (bytes, want) in cases {
        std::fs::write(&f, &bytes).unwrap();
        let e = plan(path_cfg(&f)).unwrap_err().to_string();
        assert!(e.contains(want), "want {want:?} in {e:?}");
        assert!(!e.contains('\n'), "one line: {e:?}");
    }
    // --skip-invalid counts and goes on.
    let other = session("b", &[("x", "y")]).to_string();
    std::fs::write(&f, format!("{good}\n{{oops\n{other}\n")).unwrap();
    let mut cfg = path_cfg(&f);
    cfg.skip_invalid = true;
    let p = plan(cfg).unwrap();
    assert_eq!(p.summary.skipped_invalid, 1);
    assert_eq!(p.summary.sessions, 2);
    // Missing file, and a directory with nothing usable.
    let e = plan(path_cfg(&d.join("missing.jsonl")))
        .unwrap_err()
        .to_string();
    assert!(
        e.contains("missing.jsonl") && e.contains("cannot read"),
        "{e}"
    );
    let empty_tmp = tempdir("empty-dir");
    let empty = empty_tmp.path();
    std::fs::write(empty.join("notes.txt"), "hi").unwrap();
    let e = plan(path_cfg(empty)).unwrap_err().to_string();
    assert!(e.contains("no .jsonl"), "{e}");
}

#[test]
fn directories_zstd_json_files_and_manifest_defaults() {
    let tmp = tempdir("dir");
    let d = tmp.path();
    let lines: Vec<String> = (0..5)
        .map(|i| session(&format!("z{i}"), &[("a", "b"), ("c", "d"), ("e", "f")]).to_string())
        .collect();
    let zst = zstd::encode_all((lines.join("\n") + "\n").as_bytes(), 3).unwrap();
    std::fs::write(d.join("part-1.jsonl.zst"), zst).unwrap();
    std::fs::write(
        d.join("one.json"),
        session("j", &[("a", "b"), ("c", "d")]).to_string(),
    )
    .unwrap();
    std::fs::write(
        d.join("manifest.json"),
        json!({"max_turns": 2, "output_policy": "fixed:5"}).to_string(),
    )
    .unwrap();
    let p = plan(path_cfg(d)).unwrap();
    assert_eq!(p.summary.sessions, 6);
    assert!(
        p.sessions.iter().all(|s| s.turns.len() <= 2),
        "manifest max_turns"
    );
    assert!(
        p.sessions
            .iter()
            .all(|s| s.turns.iter().all(|t| t.max_output_tokens == 5))
    );
    // Flags win over the manifest.
    let mut cfg = path_cfg(d);
    cfg.max_turns = Some(3);
    assert_eq!(plan(cfg).unwrap().summary.turns, 5 * 3 + 2);
    // A bad manifest is named.
    std::fs::write(d.join("manifest.json"), json!({"max_turn": 2}).to_string()).unwrap();
    let e = plan(path_cfg(d)).unwrap_err().to_string();
    assert!(e.contains("manifest.json") && e.contains("max_turn"), "{e}");
}

#[test]
fn an_agentic_bench_manifest_gives_its_band_and_system_prompt() {
    let tmp = tempdir("abench-manifest");
    let d = tmp.path();
    let small = session("small", &[("a", "b")]).to_string();
    let big = session("big", &[(&"word ".repeat(3000), "b")]).to_string();
    std::fs::write(d.join("data.jsonl"), format!("{small}\n{big}\n")).unwrap();
    let manifest = |band: serde_json::Value| {
        let m = json!({"dataset": "deepswe", "tier": "mixed", "version": "v1.1", "n_sessions": 2,
            "band": band, "system_prompt_len": 32, "files": [{"path": "data.jsonl"}]});
        std::fs::write(d.join("manifest.json"), m.to_string()).unwrap();
    };
    manifest(json!(null));
    let p = plan(path_cfg(d)).unwrap();
    assert_eq!(
        (p.summary.sessions, p.summary.system_prompt_tokens),
        (2, 32)
    );
    // The band is the context defaults: only the big session's peak is within it.
    manifest(json!([1000, 100_000]));
    let p = plan(path_cfg(d)).unwrap();
    assert_eq!(p.summary.sessions, 1);
    // Flags win over it.
    let mut cfg = path_cfg(d);
    cfg.min_context = Some(1);
    assert_eq!(plan(cfg).unwrap().summary.sessions, 2);
}

#[test]
fn tool_waits_subtract_the_recording_models_generation_time() {
    let rates = RecordingRates::bundled();
    assert_eq!(rates.pooled, 140.0);
    let gpt = rates.by_model["openai/gpt-5.4"];
    // 1,000 ms interval after a 100-token answer at the table's rate.
    let w = extract_tool_waits(&[0.0, 1000.0], &[0, 100], Some("openai/gpt-5.4"), &rates);
    assert!((w[1] - (1000.0 - 100.0 / gpt * 1000.0)).abs() < 1e-9);
    assert_eq!(w[0], 0.0);
    // Unknown model, few samples: the pooled rate; never negative.
    let w = extract_tool_waits(&[0.0, 100.0], &[0, 1000], Some("nobody/unknown"), &rates);
    assert_eq!(w[1], 0.0);
    // Unknown model, ≥ 20 samples: the session's own 5th-percentile rate.
    let n = 41;
    let intervals: Vec<f64> = (0..n)
        .map(|i| {
            if i == 0 {
                0.0
            } else {
                1000.0 + 10.0 * i as f64
            }
        })
        .collect();
    let outs: Vec<u64> = (0..n).map(|i| if i == 0 { 0 } else { 100 }).collect();
    let w = extract_tool_waits(&intervals, &outs, None, &rates);
    // Seconds per token 0.0101..0.0140; their 5th percentile (linear interpolation, rank
    // 39 × 0.05 = 1.95) is 0.010295 s → 97.1 tok/s → a 100-token answer took 1,029.5 ms.
    let gen_ms = 100.0 * 0.010295 * 1000.0;
    assert_eq!(
        w[1], 0.0,
        "an interval shorter than the generation time leaves no wait"
    );
    assert!((w[n - 1] - (1400.0 - gen_ms)).abs() < 1e-6, "{}", w[n - 1]);
}

#[test]
fn the_bundled_sample_plans_without_files() {
    let p = plan(PlanConfig::new(DatasetSpec::Sample)).unwrap();
    assert!(p.summary.sessions > 0);
    assert!(p.summary.turns >= p.summary.sessions);
    assert_eq!(p.summary.dataset, "sample (bundled)");
}

#[test]
fn embedded_tokenizer_matches_hugging_face_golden_encodings() {
    // Token ids produced by HF `tokenizers` (Python) from the same tokenizer.json.
    let golden: serde_json::Value = serde_json::from_slice(
        &std::fs::read(
            crate::fixtures().join("tokenizer/qwen3/golden_chat_template_and_encodings.json"),
        )
        .unwrap(),
    )
    .unwrap();
    let mut n = 0;
    for case in golden["plain_encodings"].as_array().unwrap() {
        let text = case["text"].as_str().unwrap();
        let ids: Vec<u32> = case["ids"]
            .as_array()
            .unwrap()
            .iter()
            .map(|v| v.as_u64().unwrap() as u32)
            .collect();
        assert_eq!(qwen3().encode(text).unwrap(), ids, "{text:?}");
        assert_eq!(qwen3().count(text) as usize, ids.len());
        n += 1;
    }
    for case in golden["chat_template_cases"].as_array().unwrap() {
        let rendered = case["rendered"].as_str().unwrap();
        assert_eq!(
            qwen3().count(rendered) as u64,
            case["num_tokens"].as_u64().unwrap(),
            "{}",
            case["name"]
        );
        n += 1;
    }
    assert!(n >= 10);
}

#[test]
fn a_text_sent_under_two_roles_and_as_a_system_prompt() {
    let tmp = tempdir("roles");
    let d = tmp.path();
    let same = "the very same text";
    let s1 = json!({"session_id": "a", "system_prompt": same, "turns": [
        {"index": 0, "input_delta": [{"role": "user", "content": same}], "assistant_text": same}]});
    let s2 = json!({"session_id": "b", "system_prompt": same, "turns": [
        {"index": 0, "input_delta": [{"role": "user", "content": "hi"}], "assistant_text": same}]});
    write_lines(&d.join("t.jsonl"), &[s1.to_string(), s2.to_string()]);
    let p = plan(path_cfg(d)).unwrap();
    for s in &p.sessions {
        assert_eq!(s.system.as_ref().unwrap().content(), same);
        assert_eq!(s.turns[0].assistant.content(), same);
        assert_eq!(
            s.turns[0].assistant.json(),
            format!("{{\"role\":\"assistant\",\"content\":\"{same}\"}}")
        );
    }
    let a = p.sessions.iter().find(|s| &*s.id == "a").unwrap();
    assert_eq!(a.turns[0].input_delta[0].content(), same);
    assert!(Arc::ptr_eq(
        &a.turns[0].input_delta[0].content_json,
        &a.turns[0].assistant.content_json
    ));
}

#[test]
fn progress_is_reported_while_planning() {
    use bench_workload::plan::{PlanProgress, ProgressFn};
    use std::sync::Mutex;
    let seen: Arc<Mutex<Vec<PlanProgress>>> = Arc::default();
    let s2 = seen.clone();
    let mut cfg = PlanConfig::new(DatasetSpec::Random(SyntheticSpec {
        turns: 2,
        input_increment: 8,
        output_len: 4,
        gap: GapPolicy::Zero,
    }));
    cfg.num_sessions = Some(2500);
    cfg.progress = Some(ProgressFn(Arc::new(move |p| s2.lock().unwrap().push(p))));
    let chars = TokenCounter::load(&TokenizerSpec::Chars).unwrap();
    build_plan_with(cfg, &chars).unwrap();
    let seen = seen.lock().unwrap();
    let reads: Vec<u64> = seen
        .iter()
        .filter_map(|p| match p {
            PlanProgress::Reading { sessions } => Some(*sessions),
            _ => None,
        })
        .collect();
    assert_eq!(reads, [1000, 2000]);
    let last_count = seen.iter().rev().find_map(|p| match p {
        PlanProgress::Counting {
            done_bytes,
            total_bytes,
            ..
        } => Some((*done_bytes, *total_bytes)),
        _ => None,
    });
    let (done, total) = last_count.unwrap();
    assert_eq!(done, total, "counting ends at 100%");
    assert!(matches!(seen.last(), Some(PlanProgress::Shaping)));
    assert_eq!(seen.first(), Some(&PlanProgress::Started));
}

#[test]
fn progress_lines_count_from_each_plan_start() {
    use bench_workload::plan::{PlanProgress, ProgressFn};
    use std::sync::Mutex;
    // One callback for several plans (a sweep's points): a quick plan started long after the
    // callback was made prints nothing, as a quick plan alone would.
    let lines = Arc::new(Mutex::new(Vec::new()));
    let l2 = lines.clone();
    let p = ProgressFn::lines_every(std::time::Duration::from_millis(40), move |l| {
        l2.lock().unwrap().push(l)
    });
    std::thread::sleep(std::time::Duration::from_millis(60));
    (p.0)(PlanProgress::Started);
    (p.0)(PlanProgress::Shaping);
    assert!(
        lines.lock().unwrap().is_empty(),
        "{:?}",
        lines.lock().unwrap()
    );
    std::thread::sleep(std::time::Duration::from_millis(60));
    (p.0)(PlanProgress::Shaping);
    let lines = lines.lock().unwrap();
    assert_eq!(lines.len(), 1);
    assert!(
        lines[0].starts_with("selecting and encoding ("),
        "{lines:?}"
    );
}

#[test]
fn summary_text_is_the_bench_plan_report() {
    use bench_workload::plan::{Dist, PlanSummary, SystemPromptInfo};

    let mut s = PlanSummary {
        dataset: "traces/x.jsonl".into(),
        sessions: 12,
        turns: 345,
        input_tokens: 1_234_567,
        new_input_tokens: 98_765,
        output_tokens: 9_999,
        recorded_input_tokens: Some(2_500_000_000),
        recorded_output_tokens: None,
        recorded_cached_tokens: Some(10_000),
        tokenizer: "hf:qwen3".into(),
        turns_per_session: Some(Dist {
            min: 1.0,
            p50: 20.5,
            p90: 40.0,
            max: 99.0,
        }),
        peak_context: Some(Dist {
            min: 900.0,
            p50: 15_000.0,
            p90: 31_234.0,
            max: 1_500_000.0,
        }),
        system_prompt: Some(SystemPromptInfo {
            target_tokens: 500,
            actual_tokens: 498,
            text: Arc::from(""),
        }),
        total_tool_wait_s: 12.6,
        capped_gaps: 3,
        gap_source: "extracted".into(),
        sessions_read: 20,
        skipped_invalid: 2,
        excluded_min_turns: 5,
        excluded_empty: 1,
        excluded_context_band: 2,
        notes: vec!["first note".into(), "second note".into()],
        ..PlanSummary::default()
    };
    s.est_wall_time_s.insert("250".into(), 40.0);
    s.est_wall_time_s.insert("1000".into(), 10.4);
    s.est_wall_time_s.insert("4000".into(), 2.5);
    assert_eq!(
        s.text(),
        "bench plan: traces/x.jsonl · tokenizer hf:qwen3\n\
         \x20 sessions        12 (of 20 read; left out: 1 empty, 5 too few turns, 2 outside the context band, 2 invalid skipped)\n\
         \x20 turns           345 (per session: min 1 · p50 20 · p90 40 · max 99)\n\
         \x20 input tokens    1.23M sent in all prompts (98.8K new)\n\
         \x20 output tokens   9999 pinned\n\
         \x20 recorded        input 2.50G · output n/a · cached 10.0K\n\
         \x20 system prompt   500 tokens asked, 498 measured\n\
         \x20 peak context    min 900 · p50 15.0K · p90 31.2K · max 1.50M\n\
         \x20 tool waits      13 s in total (extracted; 3 capped)\n\
         \x20 est. wall time  40 s at 250 output tok/s · 10 s at 1,000 · 2 s at 4,000\n\
         \x20 note: first note\n\
         \x20 note: second note\n"
    );

    // Without the optional parts: no turns, system prompt or peak-context line, no notes.
    let empty = PlanSummary {
        dataset: "sample".into(),
        tokenizer: "chars/4".into(),
        gap_source: "synthetic".into(),
        ..PlanSummary::default()
    };
    assert_eq!(
        empty.text(),
        "bench plan: sample · tokenizer chars/4\n\
         \x20 sessions        0 (of 0 read; left out: 0 empty, 0 too few turns, 0 outside the context band)\n\
         \x20 input tokens    0 sent in all prompts (0 new)\n\
         \x20 output tokens   0 pinned\n\
         \x20 recorded        input n/a · output n/a · cached n/a\n\
         \x20 tool waits      0 s in total (synthetic; 0 capped)\n\
         \x20 est. wall time  0 s at 250 output tok/s · 0 s at 1,000 · 0 s at 4,000\n"
    );
}

/// `--tool-messages`: coerce sends tool results as user text and drops the calls; faithful
/// sends what the agent sent (the assistant's `tool_calls` with their ids, `role: tool` with
/// its `tool_call_id`, and the session's `tools`).
#[test]
fn tool_messages_are_coerced_or_sent_as_recorded() {
    let tmp = tempdir("tools");
    let d = tmp.path();
    let calls = json!([{"id": "call_1", "type": "function",
        "function": {"name": "read_file", "arguments": "{\"path\":\"a.rs\"}"}}]);
    let tools = json!([{"type": "function", "function": {"name": "read_file",
        "parameters": {"type": "object", "properties": {"path": {"type": "string"}}}}}]);
    let s = json!({
        "session_id": "t",
        "tools": tools,
        "turns": [
            {"index": 0, "input_delta": [{"role": "user", "content": "Fix a.rs"}],
             "assistant_text": "", "tool_calls": calls, "output_tokens": 5},
            {"index": 1, "input_delta": [{"role": "tool", "content": "fn main() {}", "tool_call_id": "call_1"}],
             "assistant_text": "Done.", "output_tokens": 2},
        ],
    });
    write_lines(&d.join("trace.jsonl"), &[s.to_string()]);

    let coerced = plan(path_cfg(d)).unwrap();
    let t = &coerced.sessions[0].turns;
    assert_eq!(
        t[0].assistant.json(),
        r#"{"role":"assistant","content":""}"#
    );
    assert_eq!(
        t[1].input_delta[0].json(),
        r#"{"role":"user","content":"fn main() {}"}"#
    );
    assert_eq!(coerced.sessions[0].tools, None);
    assert_eq!(coerced.summary.coerced_roles, 1);

    let mut cfg = path_cfg(d);
    cfg.tool_messages = bench_workload::plan::ToolMessages::Faithful;
    let faithful = plan(cfg).unwrap();
    let t = &faithful.sessions[0].turns;
    let a: serde_json::Value = serde_json::from_str(&t[0].assistant.json()).unwrap();
    assert_eq!(a["tool_calls"], calls);
    assert_eq!(a["role"], "assistant");
    let r: serde_json::Value = serde_json::from_str(&t[1].input_delta[0].json()).unwrap();
    assert_eq!(
        r,
        json!({"role": "tool", "content": "fn main() {}", "tool_call_id": "call_1"})
    );
    let sent: serde_json::Value =
        serde_json::from_str(faithful.sessions[0].tools.as_deref().unwrap()).unwrap();
    assert_eq!(sent, tools);
    assert_eq!(faithful.summary.coerced_roles, 0);
    // The texts (and so the token counts) are the same either way.
    assert_eq!(faithful.summary.input_tokens, coerced.summary.input_tokens);
}

/// Synthetic text is not tokenized: its counts are known by construction, the embedded
/// tokenizer is not even loaded, and the counts are exact under the real tokenizer.
#[test]
fn synthetic_counts_are_known_by_construction_and_exact() {
    let counter = TokenCounter::load(&TokenizerSpec::Qwen3).unwrap();
    let mut cfg = PlanConfig::new(DatasetSpec::Random(SyntheticSpec {
        turns: 3,
        input_increment: 256,
        output_len: 64,
        gap: GapPolicy::Zero,
    }));
    cfg.num_sessions = Some(2000);
    let p = build_plan_with(cfg, &counter).unwrap();
    assert!(
        !counter.is_loaded(),
        "planning synthetic sessions loaded the tokenizer"
    );
    assert_eq!(p.summary.new_input_tokens, 2000 * 3 * 256);
    // A sample of the generated messages, tokenized independently.
    let mut checked = 0;
    for s in p.sessions.iter().step_by(97) {
        for t in &s.turns {
            for m in t.input_delta.iter().chain(std::iter::once(&t.assistant)) {
                assert_eq!(
                    ref_count(&m.content()),
                    u64::from(m.tokens),
                    "{}: planned count of {:?}",
                    s.id,
                    m.content()
                );
                checked += 1;
            }
        }
    }
    assert!(checked >= 120, "{checked} messages checked");
    // The trust above rests on this check against the embedded file itself.
    assert!(counter.check_filler());
    assert!(counter.is_loaded());
}

/// A tokenizer whose tokens are single characters: the synthetic words are not single tokens,
/// so synthetic text is counted with it (and the plan says so) and the counts stay exact.
#[test]
fn synthetic_text_is_counted_when_the_words_are_not_single_tokens() {
    let tmp = tempdir("char-tokenizer");
    let dir = tmp.path();
    let file = dir.join("tokenizer.json");
    let vocab: serde_json::Map<String, serde_json::Value> = std::iter::once("[UNK]".to_owned())
        .chain((b' '..=b'~').map(|c| (c as char).to_string()))
        .enumerate()
        .map(|(i, t)| (t, json!(i)))
        .collect();
    let tok = json!({
        "version": "1.0", "truncation": null, "padding": null, "added_tokens": [],
        "normalizer": null, "post_processor": null, "decoder": null,
        "pre_tokenizer": {"type": "Split", "pattern": {"Regex": "."}, "behavior": "Isolated", "invert": false},
        "model": {"type": "WordLevel", "vocab": vocab, "unk_token": "[UNK]"},
    });
    std::fs::write(&file, tok.to_string()).unwrap();
    let counter = TokenCounter::load(&TokenizerSpec::Path(file)).unwrap();
    assert!(!counter.filler_is_exact());
    let mut cfg = PlanConfig::new(DatasetSpec::Random(SyntheticSpec {
        turns: 2,
        input_increment: 50,
        output_len: 10,
        gap: GapPolicy::Zero,
    }));
    cfg.num_sessions = Some(5);
    let p = build_plan_with(cfg, &counter).unwrap();
    assert!(
        p.summary
            .notes
            .iter()
            .any(|n| n.contains("not single tokens")),
        "{:?}",
        p.summary.notes
    );
    for s in &p.sessions {
        for t in &s.turns {
            let m = &t.input_delta[0];
            assert_eq!(
                m.tokens as usize,
                m.content().len(),
                "one token per character"
            );
        }
    }
}

#[test]
fn a_system_prompt_does_not_load_the_embedded_tokenizer_and_its_count_is_exact() {
    assert_eq!(
        ref_count(bench_workload::plan::SYSTEM_HEAD),
        u64::from(bench_workload::plan::SYSTEM_HEAD_QWEN3_TOKENS),
        "SYSTEM_HEAD_QWEN3_TOKENS is stale"
    );
    for target in [1u32, 17, 2000, 8192] {
        let fresh = TokenCounter::load(&TokenizerSpec::Qwen3).unwrap();
        let sp = bench_workload::plan::system_prompt(&fresh, target);
        assert!(
            !fresh.is_loaded(),
            "target {target}: the tokenizer was loaded"
        );
        assert_eq!(sp.actual_tokens, target);
        assert_eq!(ref_count(&sp.text), u64::from(target), "target {target}");
        // The same text as with the tokenizer loaded: a plan does not depend on what was
        // counted before it.
        assert_eq!(
            bench_workload::plan::system_prompt(qwen3(), target).text,
            sp.text
        );
    }
}

/// 60 sessions of 1 to 7 turns of differing lengths: weights that do not split evenly.
fn uneven_trace(name: &str) -> tempfile::TempDir {
    let d = tempdir(name);
    let lines: Vec<String> = (0..60)
        .map(|k| {
            let turns: Vec<(String, String)> = (0..(k % 7) + 1)
                .map(|t| ("word ".repeat(10 + (k * 13 + t * 7) % 90), "ok".into()))
                .collect();
            let refs: Vec<(&str, &str)> = turns
                .iter()
                .map(|(u, a)| (u.as_str(), a.as_str()))
                .collect();
            session(&format!("s{k}"), &refs).to_string()
        })
        .collect();
    write_lines(&d.path().join("trace.jsonl"), &lines);
    d
}

#[test]
fn shards_partition_the_plan_exactly_balanced_and_alike_on_every_host() {
    use bench_workload::shard::{Shard, assignment, keep_shard, plan_digest, planned_tokens};
    let tmp = uneven_trace("shards");
    let d = tmp.path();
    let whole = plan(path_cfg(d)).unwrap();
    // A second host plans the same flags on its own (a fresh tokenizer, nothing shared).
    let again = build_plan_with(
        path_cfg(d),
        &TokenCounter::load(&TokenizerSpec::Qwen3).unwrap(),
    )
    .unwrap();
    assert_eq!(plan_digest(&whole), plan_digest(&again));
    assert_eq!(assignment(&whole, 4), assignment(&again, 4));
    let heaviest = whole.sessions.iter().map(planned_tokens).max().unwrap();
    let mut seen = std::collections::BTreeMap::new();
    let mut loads = Vec::new();
    for i in 0..4 {
        let mut p = whole.clone();
        let info = keep_shard(&mut p, Shard::new(i, 4).unwrap());
        assert_eq!(info.sessions, p.sessions.len() as u64);
        assert_eq!(
            info.planned_tokens,
            p.sessions.iter().map(planned_tokens).sum::<u64>()
        );
        // A shard keeps the plan's order.
        let pos: Vec<usize> = p
            .sessions
            .iter()
            .map(|s| whole.sessions.iter().position(|w| w.id == s.id).unwrap())
            .collect();
        assert!(pos.windows(2).all(|w| w[0] < w[1]), "shard {i}: {pos:?}");
        for s in &p.sessions {
            assert!(seen.insert(s.id.clone(), i).is_none(), "{} twice", s.id);
        }
        loads.push(info.planned_tokens);
    }
    // Every session in exactly one shard.
    assert_eq!(seen.len(), whole.sessions.len());
    // Balanced: no two shards differ by more than the heaviest session.
    let (lo, hi) = (*loads.iter().min().unwrap(), *loads.iter().max().unwrap());
    assert!(hi - lo <= heaviest, "loads {loads:?}, heaviest {heaviest}");
    // A different seed is a different plan (the random dataset's text and waits come from it).
    let mut cfg = PlanConfig::new(DatasetSpec::Random(SyntheticSpec::default()));
    cfg.num_sessions = Some(8);
    let a = plan(cfg.clone()).unwrap();
    cfg.seed = 1;
    let b = plan(cfg).unwrap();
    assert_ne!(plan_digest(&a), plan_digest(&b));
    // One shard of one is the whole plan.
    let mut p = whole.clone();
    assert_eq!(keep_shard(&mut p, Shard::new(0, 1).unwrap()).sessions, 60);
}
