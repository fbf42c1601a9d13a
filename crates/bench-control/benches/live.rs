//! `live`: what `bench serve` adds to every finished turn, beside the run's own recording.
//!
//! - `on_turn/sampled_x16`: 16 calls of `Live::on_turn`, each turn becoming a `turn.completed` event
//!   (counters, histograms, serialization, one push into the run's `EventLog`);
//! - `on_turn/skipped`: the same past the 20-a-second sampling (counters and histograms only:
//!   what most turns cost at high throughput);
//! - `push/progress`: one `progress`-sized event into an `EventLog` (the once-a-second tick).
//!
//! Compare with `bench-run`'s `record_write/serialize_write/64_gaps` (the turn's record written
//! to `turns.jsonl`), measured in the same run in `docs/performance.md`.
#![allow(missing_docs, clippy::unwrap_used)]

use std::hint::black_box;
use std::sync::Arc;

use bench_control::live::Live;
use bench_control::stream::EventLog;
use bench_run::hooks::{Grade, Hooks, NamedGrade, TurnView};
use bench_rundir::TurnRecord;
use criterion::{Criterion, criterion_group, criterion_main};

fn record() -> TurnRecord {
    TurnRecord {
        replay: 2,
        ttft_ms: Some(1_234.567),
        e2e_ms: Some(4_987.654),
        tpot_ms: Some(14.735),
        chunk_gaps_ms: vec![14.7; 64],
        input_tokens: Some(31_874),
        output_tokens: Some(256),
        cached_tokens: Some(30_720),
        max_output_tokens: 256,
        recorded_output_tokens: Some(241),
        active_at_dispatch: 64,
        due_s: 1_234.5,
        sent_s: 1_234.6,
        first_token_s: Some(1_235.8),
        end_s: 1_239.5,
        sent_utc: "2026-01-15T10:23:45.123456789Z".into(),
        end_utc: "2026-01-15T10:23:50.111111111Z".into(),
        ..TurnRecord::example("swe-agent__django__django-11099__run-3", 37)
    }
}

fn bench(c: &mut Criterion) {
    let rec = record();
    let view = TurnView {
        record: &rec,
        answer: Some("ok"),
    };
    let grades = [NamedGrade {
        grader: "slo".into(),
        grade: Grade {
            score: 1.0,
            label: "pass".into(),
            notes: None,
        },
    }];
    let mut g = c.benchmark_group("on_turn");
    g.bench_function("sampled_x16", |b| {
        // A fresh second's budget per batch: every call here becomes an event.
        b.iter_batched(
            || Live::new("bench", "replay", Arc::new(EventLog::default())),
            |live| {
                for _ in 0..16 {
                    live.on_turn(black_box(&view), &grades);
                }
                live
            },
            criterion::BatchSize::SmallInput,
        );
    });
    let live = Live::new("bench", "replay", Arc::new(EventLog::default()));
    for _ in 0..64 {
        live.on_turn(&view, &grades);
    }
    g.bench_function("skipped", |b| {
        b.iter(|| live.on_turn(black_box(&view), &grades))
    });
    g.finish();
    let log = EventLog::default();
    let progress = serde_json::json!({
        "utc": "2026-01-15T10:23:50.111111111Z", "elapsed_s": 35.2, "warmup": false,
        "turns_done": 412, "turns_planned": 1200, "turns_failed": 0, "sessions_done": 31,
        "active": 8, "in_flight": 8, "concurrency": 8, "output_tok_s": 1532.4,
        "ttft_p50_ms": 41.2, "ttft_p99_ms": 97.3, "errors_by_kind": {}, "fraction": 0.34,
        "turn_events_skipped": 0,
    });
    c.bench_function("push/progress", |b| {
        b.iter(|| log.push("progress", black_box(&progress)))
    });
}

criterion_group!(benches, bench);
criterion_main!(benches);
