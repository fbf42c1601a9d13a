//! `bench_report::compare`: a known shift is found, equal runs raise no alarm, plans that differ
//! are refused by key, repeats, the seeded bootstrap and the rendered tables.

use bench_report::compare::{
    CompareError, CompareOptions, CompareRun, Comparison, Metric, Side, Verdict, compare,
};
use bench_report::{RunInfo, Slo, TurnRecord, TurnStatus, compute};
use rand::{Rng, SeedableRng};
use rand_chacha::ChaCha8Rng;
use serde_json::{Value, json};

use crate::common::turn;

/// A run's `config` as `run.json` has it (the keys the plan identity reads, and the load).
fn config(seed: u64, sessions: u64, concurrency: u64) -> Value {
    json!({
        "spec": {
            "plan": {
                "dataset": "sample",
                "tokenizer": "qwen3",
                "seed": seed,
                "num_sessions": null,
                "concurrency": concurrency,
                "output": null,
                "gap_cap_ms": 30000.0
            },
            "load": {"closed": {"concurrency": concurrency, "ramp_up": null}}
        },
        "plan": {"dataset": "sample (bundled)", "sessions": sessions, "turns": 51}
    })
}

fn normal(rng: &mut ChaCha8Rng) -> f64 {
    // Box–Muller; 1 − u keeps the logarithm's argument in (0, 1].
    let u1: f64 = 1.0 - rng.random::<f64>();
    let u2: f64 = rng.random::<f64>();
    (-2.0 * u1.ln()).sqrt() * (std::f64::consts::TAU * u2).cos()
}

/// How a constructed run's turns are drawn.
#[derive(Clone, Copy)]
struct Shape {
    turns: usize,
    /// TTFT is lognormal: median 200 ms × `ttft_scale`, log-sd `ttft_sigma`.
    ttft_sigma: f64,
    ttft_scale: f64,
}

/// A run of `shape.turns` measured turns drawn with `seed`: one sent every 100 ms, 2% failed,
/// lognormal TTFT, TPOT lognormal around 20 ms (log-sd 0.05), 90–110 output tokens, e2e =
/// `ttft + tpot × (tokens − 1)`; measured for `turns × 0.1 + 5` s. The result is computed from
/// the records as `bench run` does (`compute`), with `slo`.
fn run(label: &str, seed: u64, shape: Shape, slo: Option<Slo>) -> CompareRun {
    let mut rng = ChaCha8Rng::seed_from_u64(seed);
    let mut turns = Vec::with_capacity(shape.turns);
    for i in 0..shape.turns {
        let mut t = turn(&format!("s{i}"), 0, i as f64 * 0.1);
        if rng.random::<f64>() < 0.02 {
            t.status = TurnStatus::Error;
            t.ttft_ms = None;
            t.tpot_ms = None;
            t.e2e_ms = None;
            t.output_tokens = None;
        } else {
            let ttft = 200.0 * shape.ttft_scale * (shape.ttft_sigma * normal(&mut rng)).exp();
            let tpot = 20.0 * (0.05 * normal(&mut rng)).exp();
            let out: u64 = rng.random_range(90..=110);
            t.ttft_ms = Some(ttft);
            t.tpot_ms = Some(tpot);
            t.e2e_ms = Some(ttft + tpot * (out - 1) as f64);
            t.output_tokens = Some(out);
        }
        turns.push(t);
    }
    let info = RunInfo {
        concurrency: 1,
        duration_s: shape.turns as f64 * 0.1 + 5.0,
        judge: bench_report::Judge::with_slo(slo),
        config: config(0, 16, 8),
        ..RunInfo::default()
    };
    let result = compute(&turns, &[], &info);
    CompareRun::new(label, turns, result)
}

fn slo() -> Slo {
    "ttft_ms=250".parse().unwrap()
}

fn verdict(c: &Comparison, m: Metric) -> Verdict {
    c.row(m).unwrap_or_else(|| panic!("no {m:?} row")).verdict
}

/// A run whose every ok turn is the same: TTFT `ttft_ms`, TPOT 10 ms, e2e 1000 ms, 10 output
/// tokens; `n` turns over a measured 10 s (fewer than 30 make the run `invalid`).
fn constant(label: &str, n: usize, ttft_ms: f64, config: Value) -> CompareRun {
    let turns: Vec<TurnRecord> = (0..n)
        .map(|i| TurnRecord {
            ttft_ms: Some(ttft_ms),
            tpot_ms: Some(10.0),
            ..turn(&format!("s{i}"), 0, i as f64 * 0.1)
        })
        .collect();
    let info = RunInfo {
        duration_s: 10.0,
        config,
        ..RunInfo::default()
    };
    let result = compute(&turns, &[], &info);
    CompareRun::new(label, turns, result)
}

/// The acceptance case: a candidate whose TTFTs are the base's distribution × 1.10 (drawn
/// afresh, so with its own noise), a few hundred turns a side, is `worse` on TTFT p50 — and
/// only where it should be: TPOT, which did not change, is not. (Calibration, same shape over
/// 1,000 seeded pairs: the shift was found in all of them.)
#[test]
fn compare_finds_a_10_percent_ttft_shift() {
    for k in 0..5 {
        let base = [run(
            "base",
            100 + 2 * k,
            Shape {
                turns: 400,
                ttft_sigma: 0.15,
                ttft_scale: 1.0,
            },
            Some(slo()),
        )];
        let cand = [run(
            "cand",
            101 + 2 * k,
            Shape {
                turns: 400,
                ttft_sigma: 0.15,
                ttft_scale: 1.10,
            },
            Some(slo()),
        )];
        let c = compare(&base, &cand, &CompareOptions::default()).unwrap();
        let row = c.row(Metric::TtftP50Ms).unwrap();
        assert_eq!(row.verdict, Verdict::Worse, "pair {k}: {row:?}");
        let change = row.change.unwrap();
        assert!((0.05..0.15).contains(&change), "pair {k}: {change}");
        assert!(row.ci_low.unwrap() > 0.0 && row.ci_low.unwrap() <= change);
        assert!(row.ci_high.unwrap() >= change);
        assert_eq!(verdict(&c, Metric::TpotP50Ms), Verdict::NoSignificantChange);
        assert!(c.regressed());
        assert!(c.text().contains("regression: TTFT p50 ms"), "{}", c.text());

        // The same shift the other way is an improvement, not a regression.
        let faster = [run(
            "cand",
            101 + 2 * k,
            Shape {
                turns: 400,
                ttft_sigma: 0.15,
                ttft_scale: 0.90,
            },
            Some(slo()),
        )];
        let c = compare(&base, &faster, &CompareOptions::default()).unwrap();
        assert_eq!(verdict(&c, Metric::TtftP50Ms), Verdict::Better);
        assert!(c.regressions().all(|r| r.metric != Metric::TtftP50Ms));
    }
}

/// The acceptance case: 20 seeded pairs of runs drawn from one distribution (different seeds),
/// at the default threshold: no metric is `worse` or `better` in any of them.
///
/// The runs are long enough (2,000 turns, TTFT log-sd 0.1) that each metric's noise is well
/// under the 5% threshold; that is the regime the threshold protects. With a few hundred turns
/// the noise of TTFT p99 and of goodput is about the threshold's size, and a 95% interval then
/// excludes 0 by chance often enough to be a verdict (calibration over 1,000 pairs of
/// 400-turn runs, log-sd 0.15: TTFT p99 in 2.9% of them, goodput in 3.4%; these 2,000-turn
/// runs, seeds 1000–2999: none of 1,000) — which is what the wider-than-the-threshold note
/// warns about.
#[test]
fn compare_raises_no_false_alarm_on_20_pairs_of_equal_runs() {
    let shape = Shape {
        turns: 2000,
        ttft_sigma: 0.1,
        ttft_scale: 1.0,
    };
    for k in 0..20 {
        let base = [run("base", 1000 + 2 * k, shape, Some(slo()))];
        let cand = [run("cand", 1001 + 2 * k, shape, Some(slo()))];
        let c = compare(&base, &cand, &CompareOptions::default()).unwrap();
        assert_eq!(c.metrics.len(), 6, "goodput is compared: both have an SLO");
        for row in &c.metrics {
            assert_eq!(
                row.verdict,
                Verdict::NoSignificantChange,
                "pair {k}: {row:?}"
            );
            // The interval covers the point change.
            let change = row.change.unwrap();
            assert!(row.ci_low.unwrap() <= change && change <= row.ci_high.unwrap());
        }
        assert!(!c.regressed());
        assert!(c.text().contains("no significant regression"));
    }
}

#[test]
fn compare_refuses_different_plans_naming_the_key() {
    let base = [constant("base", 20, 100.0, config(0, 16, 8))];
    let cand = [constant("cand", 20, 100.0, config(7, 16, 8))];
    let err = compare(&base, &cand, &CompareOptions::default()).unwrap_err();
    assert_eq!(
        err.to_string(),
        "plans differ: spec.plan.seed is 0 in BASE and 7 in CAND"
    );
    let CompareError::PlansDiffer(diff) = &err else {
        panic!("{err:?}")
    };
    assert_eq!(diff.path, "spec.plan.seed");

    // Forced: compared, and the difference is recorded.
    let forced = CompareOptions {
        force: true,
        ..CompareOptions::default()
    };
    let c = compare(&base, &cand, &forced).unwrap();
    assert_eq!(c.plans_differ.as_ref().unwrap().path, "spec.plan.seed");
    assert!(
        c.notes
            .iter()
            .any(|n| n.contains("spec.plan.seed is 0 in BASE and 7 in CAND")),
        "{:?}",
        c.notes
    );
    assert_eq!(verdict(&c, Metric::TtftP50Ms), Verdict::NoSignificantChange);

    // The plan as built counts too.
    let cand = [constant("cand", 20, 100.0, config(0, 32, 8))];
    let err = compare(&base, &cand, &CompareOptions::default()).unwrap_err();
    assert_eq!(
        err.to_string(),
        "plans differ: plan.sessions is 16 in BASE and 32 in CAND"
    );

    // A key only one side has.
    let mut extra = config(0, 16, 8);
    extra["spec"]["plan"]["min_turns"] = json!(2);
    let err = compare(
        &base,
        &[constant("cand", 20, 100.0, extra)],
        &CompareOptions::default(),
    )
    .unwrap_err();
    assert_eq!(
        err.to_string(),
        "plans differ: spec.plan.min_turns is absent in BASE and 2 in CAND"
    );

    // The concurrency is the load, not the plan (its pool size is `plan.sessions`): the
    // comparison is made, with a note.
    let cand = [constant("cand", 20, 100.0, config(0, 16, 16))];
    let c = compare(&base, &cand, &CompareOptions::default()).unwrap();
    assert!(c.plans_differ.is_none());
    assert!(
        c.notes
            .iter()
            .any(|n| n == "load differs: spec.load.closed.concurrency is 8 in BASE and 16 in CAND"),
        "{:?}",
        c.notes
    );

    // Runs of one side must share a plan as well.
    let repeats = [
        constant("base/1", 20, 100.0, config(0, 16, 8)),
        constant("base/2", 20, 100.0, config(3, 16, 8)),
    ];
    let err = compare(&repeats, &base, &CompareOptions::default()).unwrap_err();
    assert_eq!(
        err.to_string(),
        "BASE runs differ in plan: spec.plan.seed is 0 in base/1 and 3 in base/2"
    );
    assert!(matches!(
        err,
        CompareError::RunPlansDiffer {
            side: Side::Base,
            ..
        }
    ));
    assert!(compare(&repeats, &base, &forced).is_ok());
}

/// Only measured turns count: warmup and superseded records are skipped; goodput's
/// denominator holds the failed turns; throughput divides by the run's measured time.
#[test]
fn compare_reads_measured_turns_only() {
    let mut turns: Vec<TurnRecord> = (0..10)
        .map(|i| TurnRecord {
            ttft_ms: Some(100.0 + i as f64),
            ..turn(&format!("s{i}"), 0, i as f64)
        })
        .collect();
    // Two of the ten measured turns fail; the SLO (ttft ≤ 105) is met by 100..=105 of the rest.
    turns[8].status = TurnStatus::Error;
    turns[9].status = TurnStatus::Timeout;
    for extra in [
        TurnRecord {
            warmup: true,
            ttft_ms: Some(10_000.0),
            output_tokens: Some(1000),
            ..turn("w", 0, 0.0)
        },
        TurnRecord {
            superseded: true,
            ttft_ms: Some(10_000.0),
            output_tokens: Some(1000),
            ..turn("x", 0, 0.0)
        },
    ] {
        turns.push(extra);
    }
    let slo: Slo = "ttft_ms=105".parse().unwrap();
    let info = RunInfo {
        duration_s: 20.0,
        judge: bench_report::Judge::with_slo(Some(slo)),
        config: config(0, 16, 8),
        ..RunInfo::default()
    };
    let result = compute(&turns, &[], &info);
    let r = [CompareRun::new("r", turns, result)];
    let c = compare(&r, &r, &CompareOptions::default()).unwrap();
    assert_eq!(c.base.measured_turns, 10);
    assert_eq!(c.base.ok_turns, 8);
    assert_eq!(c.base.span_s, Some(20.0));
    let row = |m| c.row(m).unwrap();
    // Ok turns' TTFT 100..=107: p50 = 103.5, p99 = 106.93.
    assert_eq!(row(Metric::TtftP50Ms).base, Some(103.5));
    assert!((row(Metric::TtftP99Ms).base.unwrap() - 106.93).abs() < 1e-9);
    // 8 ok turns × 10 tokens over the measured 20 s.
    assert_eq!(row(Metric::OutputThroughputTokS).base, Some(4.0));
    // 6 of the 10 measured turns are ok and meet the SLO.
    assert_eq!(row(Metric::Goodput).base, Some(0.6));
    // A run against itself: no change, an interval around 0, no verdict.
    for r in &c.metrics {
        assert_eq!(r.change, Some(0.0), "{r:?}");
        assert!(r.ci_low.unwrap() <= 0.0 && r.ci_high.unwrap() >= 0.0);
        assert_eq!(r.verdict, Verdict::NoSignificantChange);
    }
}

#[test]
fn compare_without_an_slo_omits_goodput_with_a_note() {
    let base = [constant("base", 20, 100.0, config(0, 16, 8))];
    let c = compare(&base, &base, &CompareOptions::default()).unwrap();
    assert!(c.row(Metric::Goodput).is_none());
    assert!(c.slo.is_none());
    assert!(
        c.notes.iter().any(|n| n.starts_with("goodput omitted")),
        "{:?}",
        c.notes
    );
    // An SLO given to the comparison measures both sides against it.
    let opts = CompareOptions {
        slo: Some("ttft_ms=150".parse().unwrap()),
        ..CompareOptions::default()
    };
    let c = compare(&base, &base, &opts).unwrap();
    assert_eq!(c.row(Metric::Goodput).unwrap().base, Some(1.0));
}

/// Repeats: resampled within each run, pooled; each side's run-to-run CV is reported.
#[test]
fn compare_with_repeats_pools_runs_and_reports_their_cv() {
    let shape = Shape {
        turns: 300,
        ttft_sigma: 0.15,
        ttft_scale: 1.0,
    };
    let base = [
        run("base/1", 1, shape, None),
        run("base/2", 2, shape, None),
        run("base/3", 3, shape, None),
    ];
    let cand = [run("cand/1", 4, shape, None), run("cand/2", 5, shape, None)];
    let c = compare(&base, &cand, &CompareOptions::default()).unwrap();
    assert_eq!(c.base.runs, ["base/1", "base/2", "base/3"]);
    assert_eq!(c.base.measured_turns, 900);
    assert_eq!(c.base.span_s, Some(3.0 * 35.0));

    // Pooled throughput: Σ tokens of every base run ÷ Σ of their measured times.
    let tokens: u64 = base
        .iter()
        .flat_map(|r| &r.turns)
        .filter(|t| t.status == TurnStatus::Ok)
        .filter_map(|t| t.output_tokens)
        .sum();
    let thr = c.row(Metric::OutputThroughputTokS).unwrap();
    assert!((thr.base.unwrap() - tokens as f64 / 105.0).abs() < 1e-9);

    // The CV is the sample sd ÷ mean of the per-run values.
    let per_run: Vec<f64> = base
        .iter()
        .map(|r| r.result.overall.ttft_ms.p50.unwrap())
        .collect();
    let mean = per_run.iter().sum::<f64>() / 3.0;
    let sd = (per_run.iter().map(|x| (x - mean).powi(2)).sum::<f64>() / 2.0).sqrt();
    let ttft = c.row(Metric::TtftP50Ms).unwrap();
    assert!((ttft.base_cv.unwrap() - sd / mean).abs() < 1e-12);
    for r in &c.metrics {
        assert!(r.base_cv.is_some() && r.candidate_cv.is_some(), "{r:?}");
        assert!(r.base_cv.unwrap() < 0.1, "{r:?}");
    }
    assert!(c.text().contains("base CV"));
    assert!(c.markdown().contains("| base CV | cand CV |"));

    // One run a side: no CV.
    let c = compare(&base[..1], &cand[..1], &CompareOptions::default()).unwrap();
    assert!(c.metrics.iter().all(|r| r.base_cv.is_none()));
    assert!(!c.markdown().contains("CV"));
}

#[test]
fn compare_is_seeded_and_says_so() {
    let shape = Shape {
        turns: 300,
        ttft_sigma: 0.15,
        ttft_scale: 1.0,
    };
    let base = [run("base", 1, shape, Some(slo()))];
    let cand = [run("cand", 2, shape, Some(slo()))];
    let opts = CompareOptions {
        resamples: 500,
        seed: 42,
        ..CompareOptions::default()
    };
    let a = compare(&base, &cand, &opts).unwrap();
    assert_eq!(a, compare(&base, &cand, &opts).unwrap());
    let other = compare(&base, &cand, &CompareOptions { seed: 43, ..opts }).unwrap();
    assert_ne!(
        a.row(Metric::TtftP50Ms).unwrap().ci_low,
        other.row(Metric::TtftP50Ms).unwrap().ci_low
    );
    assert!(a.text().contains("500 resamples (seed 42)"));
    assert!(a.markdown().contains("500 resamples (seed 42)"));
    let json = serde_json::to_value(&a).unwrap();
    assert_eq!(json["resamples"], 500);
    assert_eq!(json["seed"], 42);
    assert_eq!(json["confidence"], 0.95);
    assert_eq!(json["regressed"], false);
    assert_eq!(json["metrics"][0]["metric"], "ttft_p50_ms");
    assert_eq!(json["metrics"][0]["direction"], "lower_is_better");
    assert_eq!(json["metrics"][4]["direction"], "higher_is_better");

    let bad = CompareOptions {
        resamples: 0,
        ..CompareOptions::default()
    };
    assert!(matches!(
        compare(&base, &cand, &bad),
        Err(CompareError::InvalidOptions(_))
    ));
    assert!(matches!(
        compare(&[], &cand, &CompareOptions::default()),
        Err(CompareError::NoRuns(Side::Base))
    ));
}

/// The whole console text and markdown of a comparison whose every turn is the same (so the
/// intervals are points): TTFT 10% slower, nothing else changed.
#[test]
fn compare_text_and_markdown() {
    let base = [constant("base", 100, 100.0, config(0, 16, 8))];
    let cand = [constant("cand", 100, 110.0, config(0, 16, 8))];
    let c = compare(&base, &cand, &CompareOptions::default()).unwrap();
    assert!(c.regressed());
    let text = c.text();
    let expected_text = "\
BASE 1 run (100 measured turns) vs CAND 1 run (100 measured turns)
95% bootstrap intervals of the relative change, 2000 resamples (seed 0); threshold 5%

metric           base   candidate   change   95% CI             verdict
TTFT p50 ms     100.0       110.0   +10.0%   [+10.0%, +10.0%]   worse
TTFT p99 ms     100.0       110.0   +10.0%   [+10.0%, +10.0%]   worse
TPOT p50 ms      10.0        10.0    +0.0%   [+0.0%, +0.0%]     no significant change
e2e p50 ms     1000.0      1000.0    +0.0%   [+0.0%, +0.0%]     no significant change
output tok/s    100.0       100.0    +0.0%   [+0.0%, +0.0%]     no significant change
note: goodput omitted: BASE and CAND ran without an SLO (`bench run --slo`; or give one to compare against)
regression: TTFT p50 ms, TTFT p99 ms worse
";
    assert_eq!(text, expected_text, "\n{text}");
    let md = c.markdown();
    let expected_md = "\
BASE 1 run (100 measured turns) vs CAND 1 run (100 measured turns)

95% bootstrap intervals of the relative change, 2000 resamples (seed 0); threshold 5%

| metric | base | candidate | change | 95% CI | verdict |
|---|---:|---:|---:|---|---|
| TTFT p50 ms | 100.0 | 110.0 | +10.0% | [+10.0%, +10.0%] | **worse** |
| TTFT p99 ms | 100.0 | 110.0 | +10.0% | [+10.0%, +10.0%] | **worse** |
| TPOT p50 ms | 10.0 | 10.0 | +0.0% | [+0.0%, +0.0%] | no significant change |
| e2e p50 ms | 1000.0 | 1000.0 | +0.0% | [+0.0%, +0.0%] | no significant change |
| output tok/s | 100.0 | 100.0 | +0.0% | [+0.0%, +0.0%] | no significant change |

- goodput omitted: BASE and CAND ran without an SLO (`bench run --slo`; or give one to compare against)

**regression: TTFT p50 ms, TTFT p99 ms worse**
";
    assert_eq!(md, expected_md, "\n{md}");

    // Within the threshold: the interval excludes 0, yet no verdict.
    let cand = [constant("cand", 100, 103.0, config(0, 16, 8))];
    let c = compare(&base, &cand, &CompareOptions::default()).unwrap();
    assert_eq!(verdict(&c, Metric::TtftP50Ms), Verdict::NoSignificantChange);
    assert!(!c.regressed());
    // A lower threshold makes it one.
    let tight = CompareOptions {
        threshold: 0.02,
        ..CompareOptions::default()
    };
    let c = compare(&base, &cand, &tight).unwrap();
    assert_eq!(verdict(&c, Metric::TtftP50Ms), Verdict::Worse);
}
