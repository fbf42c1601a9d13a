//! The output cap's field against a server bench does not know: checked before the run, and
//! `max_tokens` sent when the server ignores `max_completion_tokens` (as llama-cpp-python's
//! server does), with one notice and `run.json` recording it.

use std::sync::{Arc, Mutex};
use std::time::Duration;

use bench_run::run_json::ReplayRunJson;
use bench_run::server::OutputCapCheck;
use bench_run::{Load, Notice, RunOptions, RunSpec, Target};
use bench_rundir::{TurnRecord, files, jsonl};
use bench_runner::OutputCapField;
use bench_sim::{LatencyMode, SimConfig, SimServer};
use bench_workload::plan::{DatasetSpec, PlanConfig, SyntheticSpec};
use bench_workload::tokenize::TokenizerSpec;

/// An unknown OpenAI-compatible server: no `/metrics`, fast fixed latency; answers 64
/// tokens when it does not read the cap.
async fn server(ignores_max_completion_tokens: bool, metrics: bool) -> SimServer {
    SimServer::start(SimConfig {
        metrics,
        ..quiet(ignores_max_completion_tokens)
    })
    .await
    .unwrap()
}

fn quiet(ignores_max_completion_tokens: bool) -> SimConfig {
    SimConfig {
        mode: LatencyMode::Fixed {
            ttft: Duration::from_millis(2),
            itl: Duration::from_micros(200),
        },
        metrics: false,
        ignore_max_completion_tokens: ignores_max_completion_tokens,
        default_max_tokens: 64,
        ..SimConfig::default()
    }
}

/// 4 sessions of 2 turns of 16 output tokens each, at C = 2, against `base_url`.
fn spec(base_url: String, field: OutputCapField) -> RunSpec {
    let synthetic = SyntheticSpec {
        turns: 2,
        output_len: 16,
        ..SyntheticSpec::default()
    };
    let mut plan = PlanConfig::new(DatasetSpec::Random(synthetic));
    plan.num_sessions = Some(4);
    plan.tokenizer = TokenizerSpec::Chars;
    let mut spec = RunSpec {
        plan,
        load: Load::Closed {
            concurrency: 2,
            ramp_up: None,
        },
        target: Target::Url {
            base_url,
            header_names: Vec::new(),
            secret_header_names: Vec::new(),
            ready_timeout: Duration::from_secs(10),
            tls: Default::default(),
        },
        ..RunSpec::default()
    };
    spec.request.output_cap_field = field;
    spec
}

/// Plays `spec`; its `run.json`, its turns and the notices it gave.
async fn play(spec: RunSpec) -> (ReplayRunJson, Vec<TurnRecord>, Vec<Notice>) {
    let tmp = tempfile::tempdir().unwrap();
    let dir = tmp.path().join("run");
    let notices = Arc::new(Mutex::new(Vec::new()));
    let sink = notices.clone();
    let options = RunOptions {
        run_dir: Some(dir.clone()),
        notices: Some(Arc::new(move |n| sink.lock().unwrap().push(n))),
        ..RunOptions::default()
    };
    let report = bench_run::start(spec, options)
        .await
        .unwrap()
        .wait()
        .await
        .unwrap();
    assert_eq!(report.turns_failed, 0, "{}", report.reason);
    let doc: ReplayRunJson = bench_run::run_json::read(&dir).unwrap();
    let turns = jsonl::read::<TurnRecord>(&dir.join(files::TURNS))
        .unwrap()
        .records;
    assert_eq!(turns.len(), 8);
    let notices = notices.lock().unwrap().clone();
    (doc, turns, notices)
}

fn cap_notices(notices: &[Notice]) -> Vec<&str> {
    notices
        .iter()
        .filter_map(|n| match n {
            Notice::Warning(w) if w.contains("max_completion_tokens") => Some(w.as_str()),
            _ => None,
        })
        .collect()
}

fn outputs(turns: &[TurnRecord]) -> Vec<Option<u64>> {
    turns.iter().map(|t| t.output_tokens).collect()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_server_ignoring_max_completion_tokens_is_pinned_through_max_tokens() {
    let sim = server(true, false).await;
    let (doc, turns, notices) = play(spec(sim.base_url(), OutputCapField::Auto)).await;
    assert_eq!(
        doc.output_cap,
        Some(OutputCapCheck {
            field: OutputCapField::MaxTokens,
            honoured: true,
            evidence: "asked 8 tokens with max_completion_tokens and got 64; with max_tokens, 8"
                .into(),
        })
    );
    assert_eq!(doc.run.request.output_cap_field, OutputCapField::MaxTokens);
    // The recorded choice stays the user's: a resume checks again.
    assert_eq!(doc.spec.request.output_cap_field, OutputCapField::Auto);
    let said = cap_notices(&notices);
    assert_eq!(said.len(), 1, "one notice: {notices:?}");
    assert!(said[0].contains("sent as max_tokens"), "{}", said[0]);
    // Every turn, the first ones too, got its pinned length.
    assert_eq!(outputs(&turns), vec![Some(16); 8]);
    // Without the check (the field forced), the same server overruns every turn.
    let (doc, turns, notices) =
        play(spec(sim.base_url(), OutputCapField::MaxCompletionTokens)).await;
    assert_eq!(doc.output_cap, None);
    assert!(cap_notices(&notices).is_empty(), "{notices:?}");
    assert_eq!(outputs(&turns), vec![Some(64); 8]);
    sim.shutdown().await;
    // One that answers past the read cap (32 KiB) is cut there, not read to its end.
    let sim = SimServer::start(SimConfig {
        default_max_tokens: 4_000,
        ..quiet(true)
    })
    .await
    .unwrap();
    let (doc, turns, _) = play(spec(sim.base_url(), OutputCapField::Auto)).await;
    let check = doc.output_cap.unwrap();
    assert_eq!(check.field, OutputCapField::MaxTokens);
    assert!(
        check.evidence.contains("got more than 32 KiB of answer"),
        "{check:?}"
    );
    assert_eq!(outputs(&turns), vec![Some(16); 8]);
    sim.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_server_honouring_max_completion_tokens_keeps_it_and_a_known_one_is_not_checked() {
    // Unknown (no /metrics), honouring: checked once, kept, nothing said.
    let sim = server(false, false).await;
    let (doc, turns, notices) = play(spec(sim.base_url(), OutputCapField::Auto)).await;
    let check = doc.output_cap.expect("an unknown server is checked");
    assert_eq!(check.field, OutputCapField::MaxCompletionTokens);
    assert!(check.honoured, "{check:?}");
    assert!(cap_notices(&notices).is_empty(), "{notices:?}");
    assert_eq!(outputs(&turns), vec![Some(16); 8]);
    sim.shutdown().await;
    // vLLM's names on /metrics: known to honour it, no check turn.
    let sim = server(false, true).await;
    let (doc, _, _) = play(spec(sim.base_url(), OutputCapField::Auto)).await;
    assert_eq!(doc.output_cap, None);
    sim.shutdown().await;
}
