//! `record_write`: the per-turn cost of recording a finished turn, on a realistic
//! `TurnRecord` (every measurement field set, 64 or 1,024 chunk gaps with full-precision ms
//! values as the engine computes them).
//!
//! - `serialize/<n>_gaps`: `TurnRecord::write_json` + `\n` into a fresh buffer (serde's bytes,
//!   its keys written as literals), as `RunDirWriter` does into its batch;
//! - `write_only/<n>_gaps`: one `write_all` of the ready line on an unbuffered append-mode
//!   `File` (the syscall alone);
//! - `serialize_write/<n>_gaps`: the real `RunDirWriter` handling `RunEvent::TurnFinished`
//!   (lock, serialize into the waiting batch; one `write_all` to `turns.jsonl` in a temp dir
//!   per 32 KiB of lines, or by its flusher thread).
//!
//! The files are emptied every 4,096 records, outside the timed sections, so they stay small.
#![allow(missing_docs, clippy::unwrap_used)]

use std::fs::{File, OpenOptions};
use std::hint::black_box;
use std::io::Write;
use std::path::Path;
use std::time::{Duration, Instant};

use bench_run::RunDirWriter;
use bench_rundir::{CountSource, TurnRecord};
use bench_runner::{Observer, RunEvent};
use criterion::{Criterion, Throughput, criterion_group, criterion_main};

/// Records written between two truncations of the file.
const CHUNK: u64 = 4_096;

/// A finished ok turn of a long agentic session, shaped as `turn_record` fills it.
fn record(gaps: usize) -> TurnRecord {
    let ms = |d: Duration| d.as_secs_f64() * 1000.0;
    // Decode gaps of ~8–24 ms with ns resolution (a deterministic xorshift).
    let mut x = 0x9e37_79b9_7f4a_7c15_u64;
    let chunk_gaps_ms = (0..gaps)
        .map(|_| {
            x ^= x << 13;
            x ^= x >> 7;
            x ^= x << 17;
            ms(Duration::from_nanos(8_000_000 + x % 16_000_000))
        })
        .collect();
    TurnRecord {
        replay: 2,
        error_kind: Some(bench_transport::ErrorKind::Status),
        error: Some("HTTP 503 Service Unavailable: the engine is overloaded".into()),
        ttft_ms: Some(ms(Duration::from_nanos(1_234_567_891))),
        e2e_ms: Some(ms(Duration::from_nanos(4_987_654_321))),
        tpot_ms: Some(ms(Duration::from_nanos(14_735_261))),
        chunk_gaps_ms,
        input_tokens: Some(31_874),
        input_tokens_source: Some(CountSource::Server),
        output_tokens: Some(256),
        output_tokens_source: Some(CountSource::Server),
        cached_tokens: Some(30_720),
        cached_device_tokens: Some(28_672),
        cached_host_tokens: Some(2_048),
        max_output_tokens: 256,
        recorded_output_tokens: Some(241),
        active_at_dispatch: 64,
        due_s: 1_234.567_890_123,
        sent_s: 1_234.568_012_345,
        first_token_s: Some(1_235.802_580_236),
        end_s: 1_239.555_666_777,
        sent_utc: "2026-01-15T10:23:45.123456789Z".into(),
        end_utc: "2026-01-15T10:23:50.111111111Z".into(),
        worker: Some("vllm-worker-3.bench.svc.cluster.local".into()),
        redials: 1,
        ..TurnRecord::example("swe-agent__django__django-11099__run-3", 37)
    }
}

/// `RunDirWriter`'s serialization of a turn record.
fn line(rec: &TurnRecord) -> Vec<u8> {
    let mut l = Vec::new();
    rec.write_json(&mut l).expect("a record serializes");
    l.push(b'\n');
    l
}

/// A fresh temporary directory, removed when the returned guard drops.
fn temp_dir() -> tempfile::TempDir {
    tempfile::Builder::new()
        .prefix("bench-runner-record-write-")
        .tempdir()
        .unwrap()
}

/// Times `iters` calls of `f`, emptying `path` every [`CHUNK`] calls (untimed).
fn timed_with_truncation(path: &Path, iters: u64, mut f: impl FnMut()) -> Duration {
    let trunc = OpenOptions::new().write(true).open(path).unwrap();
    let mut total = Duration::ZERO;
    let mut left = iters;
    while left > 0 {
        let n = left.min(CHUNK);
        trunc.set_len(0).unwrap();
        let t0 = Instant::now();
        for _ in 0..n {
            f();
        }
        total += t0.elapsed();
        left -= n;
    }
    total
}

fn bench(c: &mut Criterion) {
    let tmp = temp_dir();
    let dir = tmp.path();
    let mut g = c.benchmark_group("record_write");
    g.warm_up_time(Duration::from_secs(1));
    g.measurement_time(Duration::from_secs(3));
    g.throughput(Throughput::Elements(1));
    for gaps in [64, 1_024] {
        let rec = record(gaps);
        let ready = line(&rec);
        // Reads back (floats only to within an ulp: serde_json parses without
        // `float_roundtrip`), one object with every field, no null.
        let back: TurnRecord = serde_json::from_slice(&ready).unwrap();
        assert_eq!(back.chunk_gaps_ms.len(), gaps);
        let v: serde_json::Value = serde_json::from_slice(&ready).unwrap();
        let obj = v.as_object().unwrap();
        assert!(obj.values().all(|f| !f.is_null()), "every field is set");
        eprintln!("{gaps} gaps: a line is {} bytes", ready.len());

        g.bench_function(format!("serialize/{gaps}_gaps"), |b| {
            b.iter(|| line(black_box(&rec)))
        });

        let raw_path = dir.join(format!("raw-{gaps}.jsonl"));
        let mut raw: File = OpenOptions::new()
            .create(true)
            .append(true)
            .open(&raw_path)
            .unwrap();
        g.bench_function(format!("write_only/{gaps}_gaps"), |b| {
            b.iter_custom(|iters| {
                timed_with_truncation(&raw_path, iters, || {
                    raw.write_all(black_box(&ready)).unwrap()
                })
            })
        });

        let run_dir = dir.join(format!("run-{gaps}"));
        let writer = RunDirWriter::create(&run_dir).unwrap();
        let turns = run_dir.join("turns.jsonl");
        g.bench_function(format!("serialize_write/{gaps}_gaps"), |b| {
            b.iter_custom(|iters| {
                timed_with_truncation(&turns, iters, || {
                    writer.on_event(&RunEvent::TurnFinished(black_box(&rec)))
                })
            })
        });
        assert!(writer.errors().is_empty(), "{:?}", writer.errors());
    }
    g.finish();
}

criterion_group!(benches, bench);
criterion_main!(benches);
