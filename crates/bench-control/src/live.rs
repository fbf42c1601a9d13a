//! What a run looks like while it runs: [`Live`] watches the engine (an [`Observer`]: turns in
//! flight) and the finished turns (a [`Hooks`]: counts, errors by kind, TTFT/TPOT histograms,
//! graded `turn.completed` events, sampled), and renders the active run's Prometheus text.

use std::sync::atomic::{AtomicU32, AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Instant;

use bench_run::hooks::{Hooks, NamedGrade, Operation, TurnView};
use bench_rundir::{ErrorKind, TurnStatus};
use bench_runner::{Observer, RunEvent};
use hdrhistogram::Histogram;
use prometheus_client::metrics::counter::Counter;
use prometheus_client::metrics::family::Family;
use prometheus_client::metrics::gauge::Gauge;
use prometheus_client::metrics::histogram::{Histogram as PromHistogram, exponential_buckets};
use prometheus_client::registry::Registry;
use serde::Serialize;

use crate::stream::EventLog;

/// At most this many `turn.completed` events a second; the rest are counted.
pub const TURN_EVENTS_PER_S: u32 = 20;

type Labels = Vec<(String, String)>;

/// The live figures of one run.
pub struct Live {
    log: Arc<EventLog>,
    start: Instant,
    turns: Family<Labels, Counter>,
    errors: Family<Labels, Counter>,
    output_tokens: Counter,
    in_flight: Gauge,
    sessions_active: Gauge,
    ttft: PromHistogram,
    tpot: PromHistogram,
    e2e: PromHistogram,
    operations: Family<Labels, Counter>,
    registry: Registry,
    /// Measured ok turns' TTFT, µs (for p50/p99 so far).
    ttft_us: Mutex<Option<Histogram<u64>>>,
    errors_by_kind: Mutex<std::collections::BTreeMap<&'static str, u64>>,
    sample_second: AtomicU64,
    sample_count: AtomicU32,
    skipped: AtomicU64,
}

impl std::fmt::Debug for Live {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Live").finish_non_exhaustive()
    }
}

/// A finished turn as the stream shows it.
#[derive(Serialize)]
struct TurnEvent<'a> {
    utc: &'a str,
    session_id: &'a str,
    replay: u32,
    turn_index: u32,
    status: TurnStatus,
    error_kind: Option<ErrorKind>,
    ttft_ms: Option<f64>,
    tpot_ms: Option<f64>,
    e2e_ms: Option<f64>,
    input_tokens: Option<u64>,
    output_tokens: Option<u64>,
    warmup: bool,
    grades: &'a [NamedGrade],
}

impl Live {
    /// Live figures for a run identified as `run_id`, whose events go to `log`.
    pub fn new(run_id: &str, kind: &str, log: Arc<EventLog>) -> Live {
        let ms = || PromHistogram::new(exponential_buckets(1.0, 2.0, 17));
        let mut registry = Registry::with_prefix("bench");
        let info = Family::<Labels, Gauge>::default();
        info.get_or_create(&vec![
            ("run_id".into(), run_id.into()),
            ("kind".into(), kind.into()),
        ])
        .set(1);
        registry.register("run_info", "The run these figures are about", info);
        let live = Live {
            log,
            start: Instant::now(),
            turns: Family::default(),
            errors: Family::default(),
            output_tokens: Counter::default(),
            in_flight: Gauge::default(),
            sessions_active: Gauge::default(),
            ttft: ms(),
            tpot: ms(),
            e2e: ms(),
            operations: Family::default(),
            registry: Registry::default(),
            ttft_us: Mutex::new(Histogram::new_with_bounds(1, 3_600_000_000, 3).ok()),
            errors_by_kind: Mutex::default(),
            sample_second: AtomicU64::new(0),
            sample_count: AtomicU32::new(0),
            skipped: AtomicU64::new(0),
        };
        registry.register(
            "turns",
            "Finished turns by status (warmup included)",
            live.turns.clone(),
        );
        registry.register(
            "turn_errors",
            "Failed turns by error kind",
            live.errors.clone(),
        );
        registry.register(
            "output_tokens",
            "Output tokens of ok turns",
            live.output_tokens.clone(),
        );
        registry.register(
            "turns_in_flight",
            "Turns sent and not finished",
            live.in_flight.clone(),
        );
        registry.register(
            "sessions_active",
            "Session plays started and not ended",
            live.sessions_active.clone(),
        );
        registry.register(
            "ttft_milliseconds",
            "Time to first token of measured ok turns, ms",
            live.ttft.clone(),
        );
        registry.register(
            "tpot_milliseconds",
            "Time per output token after the first of measured ok turns, ms",
            live.tpot.clone(),
        );
        registry.register(
            "e2e_milliseconds",
            "End-to-end latency of measured ok turns, ms",
            live.e2e.clone(),
        );
        registry.register(
            "journey_operations",
            "Timed journey operations by journey and outcome",
            live.operations.clone(),
        );
        Live { registry, ..live }
    }

    /// The Prometheus text (OpenMetrics) of this run's figures.
    pub fn prometheus(&self) -> String {
        let mut out = String::new();
        let _ = prometheus_client::encoding::text::encode(&mut out, &self.registry);
        out
    }

    /// TTFT p50 and p99 of the measured ok turns so far, ms.
    pub fn ttft_p50_p99(&self) -> (Option<f64>, Option<f64>) {
        match self.ttft_us.lock() {
            Ok(g) => match g.as_ref().filter(|h| !h.is_empty()) {
                Some(h) => (
                    Some(h.value_at_quantile(0.5) as f64 / 1000.0),
                    Some(h.value_at_quantile(0.99) as f64 / 1000.0),
                ),
                None => (None, None),
            },
            Err(_) => (None, None),
        }
    }

    /// Failed turns by kind so far.
    pub fn errors_by_kind(&self) -> std::collections::BTreeMap<&'static str, u64> {
        self.errors_by_kind
            .lock()
            .map(|m| m.clone())
            .unwrap_or_default()
    }

    /// `turn.completed` events left out by the sampling so far.
    pub fn turn_events_skipped(&self) -> u64 {
        self.skipped.load(Ordering::Relaxed)
    }

    /// Turns in flight now.
    pub fn in_flight(&self) -> i64 {
        self.in_flight.get()
    }

    /// Session plays started and not ended now (each counted from its start, before its
    /// first turn).
    pub fn sessions_active(&self) -> i64 {
        self.sessions_active.get()
    }

    fn sampled(&self) -> bool {
        let second = self.start.elapsed().as_secs();
        if self.sample_second.swap(second, Ordering::Relaxed) != second {
            self.sample_count.store(0, Ordering::Relaxed);
        }
        if self.sample_count.fetch_add(1, Ordering::Relaxed) < TURN_EVENTS_PER_S {
            true
        } else {
            self.skipped.fetch_add(1, Ordering::Relaxed);
            false
        }
    }
}

impl Observer for Live {
    fn on_event(&self, e: &RunEvent<'_>) {
        match e {
            RunEvent::TurnSent { .. } => {
                self.in_flight.inc();
            }
            RunEvent::TurnFinished(_) => {
                self.in_flight.dec();
            }
            RunEvent::SessionStarted { .. } => {
                self.sessions_active.inc();
            }
            RunEvent::SessionFinished(_) => {
                self.sessions_active.dec();
            }
            _ => {}
        }
    }
}

impl Hooks for Live {
    fn on_turn(&self, turn: &TurnView<'_>, grades: &[NamedGrade]) {
        let r = turn.record;
        let status = match r.status {
            TurnStatus::Ok => "ok",
            TurnStatus::Error => "error",
            TurnStatus::Timeout => "timeout",
        };
        self.turns
            .get_or_create(&vec![("status".into(), status.into())])
            .inc();
        if r.status == TurnStatus::Ok {
            self.output_tokens.inc_by(r.output_tokens.unwrap_or(0));
            if !r.warmup {
                if let Some(v) = r.ttft_ms {
                    self.ttft.observe(v);
                    if let Ok(mut g) = self.ttft_us.lock() {
                        if let Some(h) = g.as_mut() {
                            h.saturating_record(((v * 1000.0) as u64).max(1));
                        }
                    }
                }
                if let Some(v) = r.tpot_ms {
                    self.tpot.observe(v);
                }
                if let Some(v) = r.e2e_ms {
                    self.e2e.observe(v);
                }
            }
        } else {
            // As result.json counts them: a timeout without a kind is `timeout`.
            let kind = match (r.error_kind, r.status) {
                (Some(k), _) => k.as_str(),
                (None, TurnStatus::Timeout) => "timeout",
                (None, _) => "unknown",
            };
            self.errors
                .get_or_create(&vec![("kind".into(), kind.into())])
                .inc();
            if let Ok(mut m) = self.errors_by_kind.lock() {
                *m.entry(kind).or_default() += 1;
            }
        }
        if self.sampled() {
            self.log.push(
                "turn.completed",
                &TurnEvent {
                    utc: &r.end_utc,
                    session_id: &r.session_id,
                    replay: r.replay,
                    turn_index: r.turn_index,
                    status: r.status,
                    error_kind: r.error_kind,
                    ttft_ms: r.ttft_ms,
                    tpot_ms: r.tpot_ms,
                    e2e_ms: r.e2e_ms,
                    input_tokens: r.input_tokens,
                    output_tokens: r.output_tokens,
                    warmup: r.warmup,
                    grades,
                },
            );
        }
    }

    fn on_operation(&self, op: &Operation<'_>) {
        let outcome = if op.failure.is_some() { "failed" } else { "ok" };
        self.operations
            .get_or_create(&vec![
                ("journey".into(), op.journey.into()),
                ("outcome".into(), outcome.into()),
            ])
            .inc();
    }
}
