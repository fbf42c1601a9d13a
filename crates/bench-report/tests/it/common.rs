//! Record builders.

use bench_report::{RunInfo, SessionRecord, SessionStatus, TurnRecord, TurnStatus};

/// An ok turn of session `s` at `turn_index`, sent at `sent_s`, with plausible defaults:
/// active at dispatch = 10, TTFT 100 ms, e2e 1000 ms, 100 input / 10 output tokens.
pub fn turn(s: &str, turn_index: u32, sent_s: f64) -> TurnRecord {
    TurnRecord {
        active_at_dispatch: 10,
        due_s: sent_s,
        sent_s,
        first_token_s: Some(sent_s + 0.1),
        end_s: sent_s + 1.0,
        ..TurnRecord::example(s, turn_index)
    }
}

/// A failed turn with `kind` (its name on disk, e.g. `http_status`).
pub fn failed(s: &str, turn_index: u32, sent_s: f64, kind: Option<&str>) -> TurnRecord {
    TurnRecord {
        status: TurnStatus::Error,
        error_kind: kind.map(|k| {
            serde_json::from_value(serde_json::Value::String(k.to_owned())).expect("an error kind")
        }),
        error: Some("boom".to_owned()),
        ttft_ms: None,
        e2e_ms: None,
        tpot_ms: None,
        chunk_gaps_ms: Vec::new(),
        output_tokens: None,
        first_token_s: None,
        ..turn(s, turn_index, sent_s)
    }
}

/// A session play record.
pub fn session(s: &str, status: SessionStatus) -> SessionRecord {
    SessionRecord {
        session_id: s.to_owned(),
        replay: 0,
        status,
        turns_played: 1,
        turns_planned: 1,
        output_tokens: 10,
        busy_s: 1.0,
        marker: None,
        warmup: false,
        start_s: 0.0,
        end_s: 1.0,
        superseded: false,
    }
}

/// Concurrency 10, steady_frac 0.9 (min active 9).
pub fn info10() -> RunInfo {
    RunInfo {
        concurrency: 10,
        ..RunInfo::default()
    }
}

/// Asserts two floats are within 1e-9.
#[track_caller]
pub fn close(a: f64, b: f64) {
    assert!((a - b).abs() < 1e-9, "{a} != {b}");
}

/// Asserts an `Option<f64>` is `Some` and within 1e-9 of `b`.
#[track_caller]
pub fn some_close(a: Option<f64>, b: f64) {
    match a {
        Some(a) => close(a, b),
        None => panic!("expected {b}, got None"),
    }
}
