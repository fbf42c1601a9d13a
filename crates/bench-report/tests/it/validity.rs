//! The validity verdict: each check is triggered by a constructed case and stays quiet on a
//! clean run.

use bench_report::{
    CheckStatus, ClientCpu, RunInfo, RunResult, SessionStatus, TurnRecord, Verdict, compute,
};

use crate::common::{failed, session, turn};

/// A clean closed-loop run: 10 sessions × 20 turns, all at full load, on time, with the
/// recorded output length, cache counters that agree.
fn clean_records() -> Vec<TurnRecord> {
    let mut recs = Vec::new();
    for s in 0..10 {
        for t in 0..20 {
            let mut r = turn(&format!("s{s}"), t, f64::from(t) * 1.5);
            r.recorded_output_tokens = Some(10);
            r.cached_tokens = Some(50);
            // The server counted 100 prompt tokens, the client estimated 98; every turn after
            // a session's first shares 64 tokens with its earlier turns.
            r.input_tokens_source = Some(bench_report::CountSource::Server);
            r.est_input_tokens = Some(98);
            r.prefix_shared_tokens = Some(if t == 0 { 50 } else { 64 });
            recs.push(r);
        }
    }
    recs
}

fn run(recs: &[TurnRecord], open_loop: bool) -> RunResult {
    let sessions: Vec<_> = (0..10)
        .map(|s| session(&format!("s{s}"), SessionStatus::Completed))
        .collect();
    let info = RunInfo {
        concurrency: 10,
        open_loop,
        ..RunInfo::default()
    };
    let mut r = compute(recs, &sessions, &info);
    r.server = Some(bench_telemetry::ServerSummary {
        prefix_cache_ratio: Some(0.5),
        block_size: Some(16.0),
        ..Default::default()
    });
    r.client = Some(ClientCpu::new(3.0, 30.0, false));
    r.assess_validity(recs, open_loop, None);
    r
}

fn status(r: &RunResult, name: &str) -> CheckStatus {
    let v = r.validity.as_ref().expect("a verdict");
    v.checks
        .iter()
        .find(|c| c.name == name)
        .unwrap_or_else(|| panic!("no check {name}"))
        .status
}

#[test]
fn a_clean_run_is_valid_and_every_check_is_accounted_for() {
    let r = run(&clean_records(), false);
    let v = r.validity.as_ref().unwrap();
    assert_eq!(v.verdict, Verdict::Valid, "{}", v.console());
    for (name, want) in [
        ("error_rate", CheckStatus::Pass),
        ("dispatch_lag", CheckStatus::Pass),
        ("client_cpu", CheckStatus::Pass),
        ("schedule_slip", CheckStatus::Skipped),
        ("steady_window", CheckStatus::Pass),
        ("output_length", CheckStatus::Pass),
        ("prefix_cache_counters", CheckStatus::Pass),
        ("token_estimate", CheckStatus::Pass),
        ("warm_cache", CheckStatus::Pass),
    ] {
        assert_eq!(status(&r, name), want, "{name}: {}", v.console());
    }
    assert!(
        r.console()
            .starts_with("valid: all 8 checks passed (1 not applicable; docs/report.md)")
    );
    // The JSON carries the verdict and each check.
    let j = serde_json::to_value(&r).unwrap();
    assert_eq!(j["validity"]["verdict"], "valid");
    assert_eq!(j["validity"]["checks"].as_array().unwrap().len(), 9);
    assert_eq!(j["client"]["cores"], 0.1);
}

#[test]
fn a_saturated_client_shows_in_its_lag_and_its_cpu() {
    let mut recs = clean_records();
    for r in recs.iter_mut().step_by(7) {
        r.due_s = r.sent_s - 0.2; // left 200 ms after it was due
    }
    let mut r = run(&recs, false);
    assert_eq!(status(&r, "dispatch_lag"), CheckStatus::Fail);
    assert_eq!(r.validity.as_ref().unwrap().verdict, Verdict::Invalid);
    assert!(
        r.console().starts_with("invalid: dispatch_lag: "),
        "{}",
        r.console()
    );
    assert!(
        r.console().contains("\n  fail dispatch_lag: "),
        "{}",
        r.console()
    );

    r.client = Some(ClientCpu::new(29.0, 30.0, false));
    r.assess_validity(&clean_records(), false, None);
    assert_eq!(status(&r, "client_cpu"), CheckStatus::Fail);
    r.client = Some(ClientCpu::new(24.0, 30.0, false));
    r.assess_validity(&clean_records(), false, None);
    assert_eq!(status(&r, "client_cpu"), CheckStatus::Warn);
    assert_eq!(r.validity.as_ref().unwrap().verdict, Verdict::Suspect);
    // The embedded simulator's CPU is in the process's: no verdict from it.
    r.client = Some(ClientCpu::new(29.0, 30.0, true));
    r.assess_validity(&clean_records(), false, None);
    assert_eq!(status(&r, "client_cpu"), CheckStatus::Skipped);
}

#[test]
fn one_late_turn_of_a_short_run_does_not_decide_the_lag_check_but_a_late_tail_of_a_long_one_does() {
    let check = |r: &RunResult| {
        r.validity
            .as_ref()
            .unwrap()
            .checks
            .iter()
            .find(|c| c.name == "dispatch_lag")
            .cloned()
            .unwrap()
    };
    // 60 turns (fewer than 100), one of them 30 ms late (a late wake on a busy machine): its
    // p99 is that turn; the check is judged on the p90 and says so.
    let mut short: Vec<TurnRecord> = clean_records().into_iter().take(60).collect();
    short[30].due_s = short[30].sent_s - 0.03;
    let r = run(&short, false);
    let c = check(&r);
    assert_eq!(c.status, CheckStatus::Pass, "{}", r.console());
    assert_eq!(c.value, Some(0.0));
    assert!(
        c.explanation.contains("judged on the p90"),
        "{}",
        c.explanation
    );
    // 200 turns with 3 late ones (1.5%): the p99 is theirs, and it is judged.
    let mut long = clean_records();
    for i in [10, 90, 170] {
        long[i].due_s = long[i].sent_s - 0.03;
    }
    let r = run(&long, false);
    let c = check(&r);
    assert_eq!(c.status, CheckStatus::Warn, "{}", r.console());
    assert!(!c.explanation.contains("p90"), "{}", c.explanation);
}

#[test]
fn a_slipped_schedule_is_caught_in_open_loop() {
    let mut recs = clean_records();
    for r in recs.iter_mut().filter(|r| r.turn_index == 0) {
        r.due_s = r.sent_s - 0.5;
    }
    let r = run(&recs, true);
    assert_eq!(status(&r, "schedule_slip"), CheckStatus::Fail);
    assert_eq!(status(&r, "dispatch_lag"), CheckStatus::Skipped);
    // On time: quiet.
    let r = run(&clean_records(), true);
    assert_eq!(status(&r, "schedule_slip"), CheckStatus::Pass);
}

#[test]
fn a_server_ignoring_the_pinned_length_is_caught() {
    let mut recs = clean_records();
    for r in &mut recs {
        r.output_tokens = Some(7); // 70% of the recorded 10
    }
    let r = run(&recs, false);
    assert_eq!(status(&r, "output_length"), CheckStatus::Warn);
    let c = &r.validity.as_ref().unwrap().checks;
    let osl = c.iter().find(|c| c.name == "output_length").unwrap();
    assert!((osl.value.unwrap() - 0.7).abs() < 1e-9);
}

#[test]
fn mismatched_cache_counters_are_caught() {
    let mut r = run(&clean_records(), false);
    r.server = Some(bench_telemetry::ServerSummary {
        prefix_cache_ratio: Some(0.9),
        ..Default::default()
    }); // the client saw 0.5
    r.assess_validity(&clean_records(), false, None);
    assert_eq!(status(&r, "prefix_cache_counters"), CheckStatus::Fail);
    r.server = None;
    r.assess_validity(&clean_records(), false, None);
    assert_eq!(status(&r, "prefix_cache_counters"), CheckStatus::Skipped);
}

#[test]
fn errors_and_a_short_steady_window_are_caught() {
    let mut recs = clean_records();
    for i in 0..4 {
        recs.push(failed("s0", 20 + i, 40.0, Some("http_status")));
    }
    let r = run(&recs, false);
    assert_eq!(status(&r, "error_rate"), CheckStatus::Warn); // 4 of 204
    // Few turns at full load: a short run. Enough for p50 and p90 (p99 is marked), but not
    // fewer than 30.
    let recs: Vec<TurnRecord> = clean_records().into_iter().take(40).collect();
    let r = run(&recs, false);
    assert_eq!(status(&r, "steady_window"), CheckStatus::Pass);
    let steady = r
        .validity
        .as_ref()
        .unwrap()
        .checks
        .iter()
        .find(|c| c.name == "steady_window");
    assert!(
        steady
            .unwrap()
            .explanation
            .contains("a p99 of fewer than 100 turns"),
        "{steady:?}"
    );
    assert!(
        r.console().contains("  * p99 of fewer than 100 values"),
        "{}",
        r.console()
    );
    let recs: Vec<TurnRecord> = clean_records().into_iter().take(25).collect();
    let r = run(&recs, false);
    assert_eq!(status(&r, "steady_window"), CheckStatus::Fail);
    let mut recs = clean_records();
    for r in &mut recs {
        r.active_at_dispatch = 3; // below ceil(0.9 × 10)
    }
    let r = run(&recs, false);
    assert_eq!(status(&r, "steady_window"), CheckStatus::Fail);
}

#[test]
fn a_client_token_estimate_far_from_the_servers_usage_is_caught() {
    let mut recs = clean_records();
    for r in &mut recs {
        r.est_input_tokens = Some(80); // 80% of what the server counted
    }
    let res = run(&recs, false);
    assert_eq!(status(&res, "token_estimate"), CheckStatus::Warn);
    for r in &mut recs {
        r.est_input_tokens = Some(50);
    }
    let res = run(&recs, false);
    assert_eq!(status(&res, "token_estimate"), CheckStatus::Fail);
    // Client-side counts only (no usage): not measurable, not a failure.
    for r in &mut recs {
        r.input_tokens_source = Some(bench_report::CountSource::Client);
    }
    assert_eq!(
        status(&run(&recs, false), "token_estimate"),
        CheckStatus::Skipped
    );
}

#[test]
fn a_cache_warm_before_the_run_is_caught_and_the_possible_ratio_is_reported() {
    let mut recs = clean_records();
    // Every session's first turn hit 90 cached tokens though nothing before it shared more
    // than its first 16: the server had seen these prompts before the run.
    for r in recs.iter_mut().filter(|r| r.turn_index == 0) {
        r.cached_tokens = Some(90);
        r.prefix_shared_tokens = Some(16);
    }
    let res = run(&recs, false);
    let v = res.validity.as_ref().unwrap();
    let c = v.checks.iter().find(|c| c.name == "warm_cache").unwrap();
    assert_eq!(c.status, CheckStatus::Warn, "{}", v.console()); // 10 of 200 turns: 5%
    assert_eq!(c.value, Some(0.05));
    assert!(
        c.explanation.contains("was warm before the run"),
        "{}",
        c.explanation
    );
    assert!(
        c.explanation
            .contains("s0 turn 0 had 90 cached tokens where the run's own requests allowed 16"),
        "{}",
        c.explanation
    );
    // Beside the achieved ratio, what the run's own requests allowed.
    let possible = res.overall.prefix_cache_possible_ratio.unwrap();
    // (in the server's units: the client's estimate was 98 of the server's 100 tokens)
    let want = (10.0 * 16.0 + 190.0 * 64.0) * (100.0 / 98.0) / 20_000.0;
    assert!((possible - want).abs() < 1e-9, "{possible}");
    assert!(
        res.console().contains("the run's own reuse allowed"),
        "{}",
        res.console()
    );
    // Half the sessions warm: invalid.
    for r in recs.iter_mut().filter(|r| r.turn_index == 1) {
        r.cached_tokens = Some(100);
        r.prefix_shared_tokens = Some(20);
    }
    assert_eq!(status(&run(&recs, false), "warm_cache"), CheckStatus::Fail);
    // Without a block size from the server or the run's flag: not judged, and said why.
    let mut res = run(&clean_records(), false);
    res.server = Some(bench_telemetry::ServerSummary {
        prefix_cache_ratio: Some(0.5),
        ..Default::default()
    });
    res.assess_validity(&clean_records(), false, None);
    let v = res.validity.as_ref().unwrap();
    let c = v.checks.iter().find(|c| c.name == "warm_cache").unwrap();
    assert_eq!(c.status, CheckStatus::Skipped);
    assert!(c.explanation.contains("--cache-block-size"));
    // …and the run's --cache-block-size stands in for it.
    res.assess_validity(&clean_records(), false, Some(16));
    assert_eq!(status(&res, "warm_cache"), CheckStatus::Pass);
}
