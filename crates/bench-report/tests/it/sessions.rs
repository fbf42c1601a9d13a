//! Per-session metrics (`result.json` `sessions`).

use bench_report::{RunInfo, SessionStatus, compute};

use crate::common::{close, failed, session, some_close, turn};

#[test]
fn plays_roll_up_e2e_model_time_tool_waits_tokens_and_session_goodput() {
    // Session a: three turns sent at 0, 3 and 10 s, each 1 s long (one slow first token):
    // e2e 0 → 11 s, model 3 s, tool waits 8 s. Session b: two turns at 0 and 1.5 s, the second
    // failed. Session c: one turn, never finished (no session record: the run was cut).
    let mut slow = turn("a", 0, 0.0);
    slow.ttft_ms = Some(900.0);
    let mut b1 = failed("b", 1, 1.5, Some("http_status"));
    b1.end_s = 2.0;
    let mut warm = turn("w", 0, 0.0);
    warm.warmup = true;
    let records = vec![
        slow,
        turn("a", 1, 3.0),
        turn("a", 2, 10.0),
        turn("b", 0, 0.0),
        b1,
        turn("c", 0, 4.0),
        warm,
    ];
    let sessions = vec![
        session("a", SessionStatus::Completed),
        session("b", SessionStatus::Failed),
    ];
    let info = RunInfo {
        concurrency: 3,
        judge: bench_report::Judge::with_slo(Some("ttft_ms=500".parse().unwrap())),
        ..RunInfo::default()
    };
    let r = compute(&records, &sessions, &info);
    let s = r.sessions.expect("a sessions block");
    assert_eq!(s.plays, 3, "the warmup play is not counted");
    assert_eq!(s.completed, 1);
    some_close(s.completion_rate, 1.0 / 3.0);
    // e2e: a 11 s, b 2 s (0 → its failed turn's end), c 1 s.
    assert_eq!(s.e2e_s.count, 3);
    some_close(s.e2e_s.max, 11.0);
    some_close(s.e2e_s.p50, 2.0);
    // model: a 3 s, b 1.5 s (the failed turn has no e2e_ms: its 0.5 s span counts), c 1 s.
    some_close(s.model_s.max, 3.0);
    some_close(s.model_s.p50, 1.5);
    // tool waits: a 8 s, b 0.5 s, c 0 s.
    some_close(s.tool_wait_s.max, 8.0);
    some_close(s.tool_wait_s.p50, 0.5);
    // Σ model ÷ Σ e2e = (3 + 1.5 + 1) ÷ (11 + 2 + 1).
    some_close(s.model_share, 5.5 / 14.0);
    some_close(s.turns.max, 3.0);
    // Tokens of ok turns only: a 300 in, b 100 in (its failed turn adds nothing).
    some_close(s.input_tokens.max, 300.0);
    some_close(s.output_tokens.p50, 10.0);
    // SLO ttft ≤ 500: a has a 900 ms first token, b a failed turn; only c met it everywhere.
    assert_eq!(s.slo_met, Some(1));
    some_close(s.goodput, 1.0 / 3.0);
    close(s.e2e_s.mean.unwrap(), 14.0 / 3.0);

    // Without an SLO there is no session goodput; the rest is the same.
    let r = compute(&records, &sessions, &RunInfo::default());
    let s = r.sessions.clone().unwrap();
    assert_eq!((s.slo_met, s.goodput), (None, None));
    assert_eq!(s.plays, 3);
    let console = r.console();
    assert!(
        console.contains("per session  3 plays, 33.3% completed  e2e p50 2.00 s p95 10.10 s"),
        "{console}"
    );
}

#[test]
fn the_session_slo_judges_whole_plays_and_leaves_out_plays_the_run_cut() {
    // Each turn 1 s long, TTFT 100 ms. Plays:
    //   a: completed, turns at 0, 2, 4 s → e2e 5 s: met.
    //   b: completed, e2e 0 → 9 s: over the 6 s session budget.
    //   c: completed, one turn with a 900 ms first token: over the per-turn TTFT bound.
    //   d: failed (its second turn failed): missed.
    //   e: truncated by the run's end after 1 s, nothing missed yet: cut, not judged.
    //   f: truncated, but already 7 s long: judged, missed.
    //   g: no session record (the run was cut), nothing missed: cut.
    let mut slow = turn("c", 1, 2.0);
    slow.ttft_ms = Some(900.0);
    let records = vec![
        turn("a", 0, 0.0),
        turn("a", 1, 2.0),
        turn("a", 2, 4.0),
        turn("b", 0, 0.0),
        turn("b", 1, 8.0),
        turn("c", 0, 0.0),
        slow,
        turn("d", 0, 0.0),
        failed("d", 1, 2.0, Some("http_status")),
        turn("e", 0, 0.0),
        turn("f", 0, 0.0),
        turn("f", 1, 6.0),
        turn("g", 0, 0.0),
    ];
    let sessions = vec![
        session("a", SessionStatus::Completed),
        session("b", SessionStatus::Completed),
        session("c", SessionStatus::Completed),
        session("d", SessionStatus::Failed),
        session("e", SessionStatus::Truncated),
        session("f", SessionStatus::Truncated),
    ];
    let judge = bench_report::Judge {
        session_slo: Some("ttft_ms=500, session_s=6".into()),
        ..bench_report::Judge::default()
    };
    let info = RunInfo {
        concurrency: 7,
        judge,
        ..RunInfo::default()
    };
    let r = compute(&records, &sessions, &info);
    let s = r
        .sessions
        .clone()
        .unwrap()
        .session_slo
        .expect("a session SLO block");
    assert_eq!(s.slo, "ttft_ms=500,session_s=6");
    assert_eq!((s.judged, s.met, s.cut), (5, 1, 2));
    some_close(s.share, 0.2);
    assert!(
        r.console().contains(
            "sessions within the session SLO (ttft_ms=500,session_s=6): 1 of 5 judged (20.0%), \
             2 cut by the run's end"
        ),
        "{}",
        r.console()
    );
    let j = serde_json::to_value(&r).unwrap();
    assert_eq!(j["sessions"]["session_slo"]["met"], 1);
    // Without the session budget, b meets it too.
    let info = RunInfo {
        judge: bench_report::Judge {
            session_slo: Some("ttft_ms=500".into()),
            ..bench_report::Judge::default()
        },
        ..info
    };
    let s = compute(&records, &sessions, &info)
        .sessions
        .unwrap()
        .session_slo
        .unwrap();
    // f's 7 s no longer counts against it: cut, like e and g.
    assert_eq!((s.judged, s.met, s.cut), (4, 2, 3));
    // Without a session SLO there is no block.
    let r = compute(&records, &sessions, &RunInfo::default());
    assert!(r.sessions.unwrap().session_slo.is_none());
}

#[test]
fn no_measured_turn_no_sessions_block() {
    let mut warm = turn("w", 0, 0.0);
    warm.warmup = true;
    let r = compute(&[warm], &[], &RunInfo::default());
    assert!(r.sessions.is_none());
    let json = serde_json::to_value(&r).unwrap();
    assert!(json.get("sessions").is_none());
}
