//! Records → [`RunResult`], the `result.json` document. Definitions: `docs/report.md`.

use std::collections::{BTreeMap, HashMap};
use std::fmt;

use serde::de::{MapAccess, Visitor};
use serde::ser::SerializeMap;
use serde::{Deserialize, Deserializer, Serialize, Serializer};

use crate::SCHEMA_VERSION;
use crate::grade::GraderSummary;
use crate::record::{SessionRecord, SessionStatus, TurnRecord, TurnStatus};
use crate::slo::Slo;
use crate::stats::{ITL_EXACT_LIMIT, PooledDist, mean, percentile, sorted_finite};

/// Default share of the concurrency that must be active for a turn to be in the steady window.
pub const DEFAULT_STEADY_FRAC: f64 = 0.9;

/// What [`compute`] needs to know about the run besides its records.
#[derive(Debug, Clone, PartialEq)]
pub struct RunInfo {
    /// Target concurrency `C` (sessions in flight).
    pub concurrency: u32,
    /// How the run is judged: the steady window's `steady_frac` (a turn is in it when at
    /// least `ceil(steady_frac × C)` sessions were active when it was sent), goodput's SLO
    /// and the warm-cache check's block size.
    pub judge: crate::Judge,
    /// Wall time of the measured run (warmup excluded), s: the denominator of the whole-run
    /// throughputs. Not positive or not finite: the span of the run's ok turns is used instead.
    pub duration_s: f64,
    /// The resolved run config, echoed into `result.json` as `config`.
    pub config: serde_json::Value,
    /// Sessions arrived on a schedule (open loop): the steady window is then cut by time,
    /// from the first session play's end to the last play's start, instead of by concurrency.
    pub open_loop: bool,
    /// What the server's `/metrics` said ([`bench_telemetry::summarize`]), when scraped:
    /// `result.json`'s `server`, and the cache checks' other side.
    pub server: Option<bench_telemetry::ServerSummary>,
    /// The client's own CPU over the run, when measured: `result.json`'s `client` and the
    /// `client_cpu` check.
    pub client: Option<crate::validity::ClientCpu>,
    /// Each `--scrape` target's summary ([`bench_telemetry::summarize_targets`]).
    pub targets: Vec<bench_telemetry::TargetSummary>,
    /// The GPUs' energy over the measured run, when a source reported it
    /// ([`bench_telemetry::gpu_energy`]).
    pub energy: Option<bench_telemetry::GpuEnergy>,
    /// Checks the caller adds to the computed ones (a merged run's `shards`).
    pub checks: Vec<crate::validity::Check>,
}

impl Default for RunInfo {
    fn default() -> Self {
        Self {
            concurrency: 1,
            judge: crate::Judge::default(),
            duration_s: 0.0,
            config: serde_json::Value::Null,
            open_loop: false,
            server: None,
            client: None,
            targets: Vec::new(),
            energy: None,
            checks: Vec::new(),
        }
    }
}

impl RunInfo {
    /// `server`, `targets` and `energy` from a run's scrapes (the server's own `/metrics` and
    /// its `--scrape` targets').
    pub fn with_scrapes(mut self, scrapes: &[bench_telemetry::Scrape]) -> RunInfo {
        self.server = scrapes
            .iter()
            .any(|s| s.target.is_none() && s.phase.is_measured())
            .then(|| bench_telemetry::summarize(scrapes));
        self.targets = bench_telemetry::summarize_targets(scrapes);
        self.energy = bench_telemetry::gpu_energy(scrapes);
        self
    }
}

/// The `result.json` document.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct RunResult {
    /// [`SCHEMA_VERSION`].
    pub schema_version: u32,
    /// `"bench <version>"`.
    pub generated_by: String,
    /// The resolved run config ([`RunInfo::config`]).
    pub config: serde_json::Value,
    /// The SLO goodput was measured against (`null` without one).
    pub slo: Option<Slo>,
    /// Whole-run counts, then the metrics of the steady window.
    pub summary: Summary,
    /// The same metrics over every measured (non-warmup) ok turn.
    pub overall: Metrics,
    /// How the steady window was cut.
    pub steady_window: SteadyWindow,
    /// What the server's own `/metrics` said about the measured run
    /// ([`bench_telemetry::summarize`] of the run's scrapes; `null` when not scraped).
    #[serde(default)]
    pub server: Option<bench_telemetry::ServerSummary>,
    /// Each grader's summary over the ok turns this process graded (absent without graders;
    /// filled by the caller, e.g. `bench_run`, never by [`compute`]).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub grades: Vec<GraderSummary>,
    /// Per session play: e2e, model time against tool waits, turns, tokens, session goodput
    /// (absent when no measured turn was sent, and in results written before it existed).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub sessions: Option<crate::sessions::SessionMetrics>,
    /// Agent graphs: where the time of the plays of sessions that fork subagents went, along
    /// each one's critical path, and TTFT by depth (absent when every session is one chain).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub graph: Option<crate::graph::GraphBreakdown>,
    /// Each `--scrape` target's metrics over the measured run, summarized as `server` is
    /// (absent without `--scrape`).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub scrape_targets: Vec<bench_telemetry::TargetSummary>,
    /// The GPUs' energy over the measured phase per turn, session and output token (absent
    /// when no scraped source reported DCGM power or energy).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub energy: Option<crate::cost::EnergySummary>,
    /// The measured phase at the deployment's price (absent without `--cost-per-hour`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub cost: Option<crate::cost::CostSummary>,
    /// The client's own CPU over the measured phase (filled by the caller, e.g. `bench_run`;
    /// absent when not read).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub client: Option<crate::validity::ClientCpu>,
    /// Whether the figures can be trusted: a verdict over documented checks
    /// ([`RunResult::assess_validity`]; absent in results written before it existed).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub validity: Option<crate::validity::Validity>,
}

impl RunResult {
    /// (Re)computes [`RunResult::validity`] from the result as it stands (`server` and
    /// `client` filled in) and the run's records.
    /// `cache_block_size` is the server's KV block size as the run was told it
    /// ([`crate::Judge::cache_block_size`]), for when its `/metrics` does not say.
    pub fn assess_validity(
        &mut self,
        records: &[TurnRecord],
        open_loop: bool,
        cache_block_size: Option<u32>,
    ) {
        self.validity = Some(crate::validity::Validity::assess(
            self,
            records,
            open_loop,
            self.client.as_ref(),
            cache_block_size,
        ));
    }
}

/// Whole-run counts (every non-warmup record) and the steady-window metrics (flattened beside
/// them in JSON).
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct Summary {
    /// Turns that ended ok.
    pub turns_ok: u64,
    /// Turns that ended in an error or a timeout.
    pub turns_failed: u64,
    /// Failed turns by `error_kind` (`timeout` when a timed-out turn has none, else `unknown`).
    pub errors_by_kind: BTreeMap<String, u64>,
    /// Attempts that failed before their turn's last one, by kind: retries (`--retries`) and
    /// requests the transport sent again after a reused connection closed without an answer.
    /// With `errors_by_kind` this counts every failed request. Written only when there were any.
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub failed_attempts_by_kind: BTreeMap<String, u64>,
    /// Session plays that played every planned turn.
    pub sessions_completed: u64,
    /// Session plays cut by the duration deadline or the fuse.
    pub sessions_truncated: u64,
    /// Session plays stopped by the context guard.
    pub sessions_context_guard: u64,
    /// Session plays stopped by the per-session timeout.
    pub sessions_timeout: u64,
    /// Session plays stopped after a failed turn.
    pub sessions_failed: u64,
    /// Metrics over the steady window.
    #[serde(flatten)]
    pub steady: Metrics,
}

/// Latency and throughput metrics over one set of ok turns (the steady window, or the whole run).
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct Metrics {
    /// Ok turns in the set.
    pub turns: u64,
    /// The time the throughputs are divided by, s (`null` when not positive).
    pub span_s: Option<f64>,
    /// Time to first token, ms.
    pub ttft_ms: Dist,
    /// TTFT of first turns (`turn_index` 0), ms.
    pub ttft_first_turn_ms: Dist,
    /// TTFT of later turns (`turn_index` ≥ 1), ms.
    pub ttft_later_turns_ms: Dist,
    /// `ttft_later_turns_ms.p50 / ttft_first_turn_ms.p50`.
    pub ttft_later_over_first_p50: Option<f64>,
    /// Time to the first *answer* token (reasoning excluded), ms: equals TTFT for a model that
    /// does not reason first. (Absent in results written before it existed.)
    #[serde(default)]
    pub ttfa_ms: Dist,
    /// Reasoning, over turns that produced any (`null` when none did).
    #[serde(default)]
    pub reasoning: Option<ReasoningSummary>,
    /// TCP connect time of the connections turns opened, ms (reused connections: none).
    #[serde(default)]
    pub connect_ms: Dist,
    /// TLS handshake time of the connections turns opened, ms (plain HTTP: none).
    #[serde(default)]
    pub tls_handshake_ms: Dist,
    /// Per-turn time per output token, ms.
    pub tpot_ms: Dist,
    /// Gaps between consecutive output chunks, pooled over turns, ms.
    pub itl_ms: PooledDist,
    /// Turn latency (request sent → end of body), ms.
    pub e2e_ms: Dist,
    /// TTFT counted from when the turn was due rather than sent (`dispatch lag + ttft`): what a
    /// user arriving on schedule saw, corrected for coordinated omission, ms.
    pub ttft_from_due_ms: Dist,
    /// e2e counted from when the turn was due (`dispatch lag + e2e`), ms.
    pub e2e_from_due_ms: Dist,
    /// Median e2e by turn index: `"0"` … `"9"`, `"10+"`.
    pub e2e_by_turn_index_ms: KeyedP50,
    /// Median e2e by input-token band (K = 1024): `0-2K`, `2-8K`, `8-16K`, `16-32K`, `32K+`.
    pub e2e_by_input_band_ms: KeyedP50,
    /// Σ output tokens ÷ `span_s`.
    pub output_throughput_tok_s: Option<f64>,
    /// Σ input tokens ÷ `span_s`.
    pub input_throughput_tok_s: Option<f64>,
    /// Turns ÷ `span_s`.
    pub request_throughput_turns_s: Option<f64>,
    /// Largest output-token count in one 1-second bin of the run clock.
    pub peak_output_tok_s_1s: Option<f64>,
    /// Per session play: output tokens ÷ time in requests (tool waits excluded).
    pub per_user_output_tok_s: PerUserRate,
    /// Σ cached ÷ Σ input tokens over turns that reported `cached_tokens`.
    pub prefix_cache_ratio: Option<f64>,
    /// The same over later turns (`turn_index` ≥ 1) only: what a session's own earlier turns
    /// left in the cache (a cache-retention sweep's figure, `bench sweep --idle-gaps`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub prefix_cache_later_ratio: Option<f64>,
    /// The most of that the run's own requests allowed: Σ shared prefix ÷ Σ input
    /// tokens over the same turns (those that also know their shared prefix). A cache that
    /// started empty cannot beat it; the gap below it is reuse the server missed.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub prefix_cache_possible_ratio: Option<f64>,
    /// Σ host-tier hits ÷ Σ cached tokens over turns that reported the split.
    pub prefix_cache_host_share: Option<f64>,
    /// Achieved vs pinned output length.
    pub osl_fidelity: Option<OslFidelity>,
    /// Mean over session plays of the share of their turns served by their most frequent worker.
    pub routing_stickiness: Option<f64>,
    /// Turns meeting every SLO bound ÷ `span_s` (`null` without an SLO).
    pub goodput_turns_s: Option<f64>,
    /// Share of turns meeting every SLO bound (`null` without an SLO).
    pub slo_attainment: Option<f64>,
    /// How late requests left: `sent_s − due_s`, ms.
    pub dispatch_lag_ms: LagDist,
}

/// How much of the output was reasoning.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct ReasoningSummary {
    /// Ok turns with at least one reasoning chunk.
    pub turns: u64,
    /// Σ reasoning chunks.
    pub reasoning_chunks: u64,
    /// Σ answer chunks of the same turns.
    pub answer_chunks: u64,
    /// Σ reasoning tokens the server's usage reported (`null` when it never did: the Messages
    /// API does not).
    pub reasoning_tokens: Option<u64>,
    /// Median of `ttfa − ttft` over those turns: how long the model thought before answering, ms.
    pub thinking_p50_ms: Option<f64>,
}

/// Summary of an exactly computed distribution (see [`percentile`]); fields are `null` when there
/// are no samples.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct Dist {
    /// Number of samples.
    pub count: u64,
    /// Median.
    pub p50: Option<f64>,
    /// 90th percentile.
    pub p90: Option<f64>,
    /// 95th percentile.
    pub p95: Option<f64>,
    /// 99th percentile.
    pub p99: Option<f64>,
    /// Arithmetic mean.
    pub mean: Option<f64>,
    /// Largest sample.
    pub max: Option<f64>,
}

impl Dist {
    /// Summarizes `values` (non-finite ones dropped).
    pub fn from_values(values: impl IntoIterator<Item = f64>) -> Self {
        let s = sorted_finite(values);
        Self {
            count: s.len() as u64,
            p50: percentile(&s, 0.50),
            p90: percentile(&s, 0.90),
            p95: percentile(&s, 0.95),
            p99: percentile(&s, 0.99),
            mean: mean(&s),
            max: s.last().copied(),
        }
    }
}

/// Dispatch-lag summary, ms.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct LagDist {
    /// Number of samples.
    pub count: u64,
    /// Median.
    pub p50: Option<f64>,
    /// 99th percentile.
    pub p99: Option<f64>,
    /// Largest lag.
    pub max: Option<f64>,
}

/// Per-user output rate over session plays, tok/s.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct PerUserRate {
    /// Session plays with time in requests.
    pub sessions: u64,
    /// Median over session plays.
    pub p50: Option<f64>,
    /// Mean over session plays.
    pub mean: Option<f64>,
}

/// Output-length fidelity: achieved vs pinned output tokens (what each request asked for,
/// `max_output_tokens`) over turns that have both.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct OslFidelity {
    /// Turns with both counts.
    pub turns: u64,
    /// Mean achieved `output_tokens`.
    pub achieved_mean: f64,
    /// Mean pinned `max_output_tokens`. (A file of an older bench has none: read as 0.)
    #[serde(default)]
    pub pinned_mean: f64,
    /// Mean `recorded_output_tokens` of those turns that have one (what the recording
    /// produced; the pin differs from it under `--output-policy fixed|budget`).
    pub recorded_mean: Option<f64>,
    /// `achieved_mean / pinned_mean` (`null` when the pinned mean is 0).
    pub ratio: Option<f64>,
    /// `|ratio − 1| ≤ 0.1`.
    pub within_10pct: bool,
}

/// How the steady window was cut (auditable trim).
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct SteadyWindow {
    /// `concurrency` (closed loop: `active_at_dispatch ≥ min_active`), `arrivals` (open loop:
    /// sent between the first play's end and the last play's start) or `whole_run` (open loop
    /// whose plays never overlapped that way).
    pub rule: String,
    /// Target concurrency `C`.
    pub concurrency: u32,
    /// The `steady_frac` used.
    pub steady_frac: f64,
    /// `ceil(steady_frac × C)`: the fewest active sessions at dispatch for a turn to count.
    pub min_active: u32,
    /// Ok turns in the window.
    pub turns: u64,
    /// Measured (non-warmup) turns of any status.
    pub turns_total: u64,
    /// `sent_s` of the first turn in the window (`null` when empty).
    pub start_s: Option<f64>,
    /// `end_s` of the last turn in the window (`null` when empty).
    pub end_s: Option<f64>,
    /// Measured turns by `active_at_dispatch` (JSON keys are the counts as strings).
    pub concurrency_histogram: BTreeMap<u32, u64>,
}

/// Labeled medians in a fixed order (serialized as a JSON object, `null` for empty labels).
#[derive(Debug, Clone, Default, PartialEq)]
pub struct KeyedP50(pub Vec<(String, Option<f64>)>);

impl KeyedP50 {
    /// The median under `label`, if the label exists and had samples.
    pub fn get(&self, label: &str) -> Option<f64> {
        self.0
            .iter()
            .find(|(l, _)| l == label)
            .and_then(|(_, v)| *v)
    }
}

impl Serialize for KeyedP50 {
    fn serialize<S: Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        let mut m = s.serialize_map(Some(self.0.len()))?;
        for (k, v) in &self.0 {
            m.serialize_entry(k, v)?;
        }
        m.end()
    }
}

impl<'de> Deserialize<'de> for KeyedP50 {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        struct V;
        impl<'de> Visitor<'de> for V {
            type Value = KeyedP50;
            fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
                f.write_str("a map of label to number or null")
            }
            fn visit_map<A: MapAccess<'de>>(self, mut a: A) -> Result<KeyedP50, A::Error> {
                let mut v = Vec::new();
                while let Some(e) = a.next_entry::<String, Option<f64>>()? {
                    v.push(e);
                }
                Ok(KeyedP50(v))
            }
        }
        d.deserialize_map(V)
    }
}

/// Turn-index labels of `e2e_by_turn_index_ms`.
const TURN_INDEX_LABELS: [&str; 11] = ["0", "1", "2", "3", "4", "5", "6", "7", "8", "9", "10+"];

/// Input-band labels of `e2e_by_input_band_ms`, in order.
const INPUT_BAND_LABELS: [&str; 5] = ["0-2K", "2-8K", "8-16K", "16-32K", "32K+"];

/// The input-length band of a prompt (K = 1024, lower bound inclusive): `0-2K` is
/// `[0, 2048)`, `2-8K` `[2048, 8192)`, `8-16K` `[8192, 16384)`, `16-32K` `[16384, 32768)`,
/// `32K+` the rest.
pub fn input_band(input_tokens: u64) -> &'static str {
    match input_tokens {
        0..2048 => "0-2K",
        2048..8192 => "2-8K",
        8192..16384 => "8-16K",
        16384..32768 => "16-32K",
        _ => "32K+",
    }
}

/// `ceil(steady_frac × concurrency)`; `steady_frac` is clamped to `[0, 1]` (NaN → the default).
/// A tolerance of 1e-9 keeps products like `0.9 × 30` from rounding up past the integer.
pub fn min_active(steady_frac: f64, concurrency: u32) -> u32 {
    let f = if steady_frac.is_nan() {
        DEFAULT_STEADY_FRAC
    } else {
        steady_frac.clamp(0.0, 1.0)
    };
    let x = f * f64::from(concurrency);
    ((x - 1e-9).ceil().max(0.0) as u32).min(concurrency)
}

/// Computes the `result.json` document, validity assessed once from everything `info` holds
/// (the server's summary, the client's CPU, added checks): the one computation behind a live
/// run, `bench report` and `bench merge`. Warmup records (`warmup == true`) are ignored
/// everywhere.
pub fn compute(records: &[TurnRecord], sessions: &[SessionRecord], info: &RunInfo) -> RunResult {
    let measured: Vec<&TurnRecord> = records.iter().filter(|r| !r.warmup).collect();
    let ok: Vec<&TurnRecord> = measured
        .iter()
        .copied()
        .filter(|r| r.status == TurnStatus::Ok)
        .collect();
    let (rule, min_active, steady): (&str, u32, Vec<&TurnRecord>) = if info.open_loop {
        match arrival_window(sessions) {
            Some((from, to)) => (
                "arrivals",
                0,
                ok.iter()
                    .copied()
                    .filter(|r| r.sent_s >= from && r.sent_s <= to)
                    .collect(),
            ),
            None => ("whole_run", 0, ok.clone()),
        }
    } else {
        let m = min_active(info.judge.steady_frac, info.concurrency);
        let steady = ok
            .iter()
            .copied()
            .filter(|r| r.active_at_dispatch >= m)
            .collect();
        ("concurrency", m, steady)
    };

    let (steady_start, steady_end) = time_range(&steady);
    let steady_span = positive(steady_end.zip(steady_start).map(|(e, s)| e - s));
    let overall_span = if info.duration_s.is_finite() && info.duration_s > 0.0 {
        Some(info.duration_s)
    } else {
        let (s, e) = time_range(&ok);
        positive(e.zip(s).map(|(e, s)| e - s))
    };
    let slo = info.judge.slo();
    let slo = slo.as_ref();
    let session_slo = info.judge.session_slo();

    let mut summary = Summary {
        steady: Metrics::from_turns(&steady, steady_span, slo),
        ..Summary::default()
    };
    for r in &measured {
        for a in &r.failed_attempts {
            *summary
                .failed_attempts_by_kind
                .entry(a.kind.as_str().to_owned())
                .or_default() += 1;
        }
        if r.status == TurnStatus::Ok {
            summary.turns_ok += 1;
        } else {
            summary.turns_failed += 1;
            let kind = match (&r.error_kind, r.status) {
                (Some(k), _) => k.as_str().to_owned(),
                (None, TurnStatus::Timeout) => "timeout".to_owned(),
                (None, _) => "unknown".to_owned(),
            };
            *summary.errors_by_kind.entry(kind).or_default() += 1;
        }
    }
    for s in sessions.iter().filter(|s| !s.warmup) {
        let slot = match s.status {
            SessionStatus::Completed => &mut summary.sessions_completed,
            SessionStatus::Truncated => &mut summary.sessions_truncated,
            SessionStatus::ContextGuard => &mut summary.sessions_context_guard,
            SessionStatus::Timeout => &mut summary.sessions_timeout,
            SessionStatus::Failed => &mut summary.sessions_failed,
        };
        *slot += 1;
    }

    let mut concurrency_histogram = BTreeMap::new();
    for r in &measured {
        *concurrency_histogram
            .entry(r.active_at_dispatch)
            .or_default() += 1;
    }

    let mut result = RunResult {
        schema_version: SCHEMA_VERSION,
        generated_by: format!("bench {}", env!("CARGO_PKG_VERSION")),
        config: info.config.clone(),
        slo: slo.copied(),
        summary,
        overall: Metrics::from_turns(&ok, overall_span, slo),
        server: info.server.clone(),
        scrape_targets: info.targets.clone(),
        energy: None,
        cost: None,
        grades: Vec::new(),
        sessions: crate::sessions::SessionMetrics::compute(
            records,
            sessions,
            slo,
            session_slo.as_ref(),
        ),
        graph: crate::graph::breakdown(records, sessions),
        client: info.client,
        validity: None,
        steady_window: SteadyWindow {
            rule: rule.to_owned(),
            concurrency: info.concurrency,
            steady_frac: info.judge.steady_frac,
            min_active,
            turns: steady.len() as u64,
            turns_total: measured.len() as u64,
            start_s: steady_start,
            end_s: steady_end,
            concurrency_histogram,
        },
    };
    let d = crate::cost::Denominators {
        turns: result.overall.turns,
        output_tokens: ok
            .iter()
            .filter_map(|r| r.output_tokens)
            .fold(0.0, |a, n| a + n as f64),
        sessions: result.sessions.as_ref().map_or(0, |s| s.completed),
        window_s: result.overall.span_s,
    };
    result.energy = crate::cost::energy(info.energy.as_ref(), d);
    result.cost = crate::cost::cost(info.judge.cost.as_ref(), d);
    result.assess_validity(records, info.open_loop, info.judge.cache_block_size);
    if let Some(v) = result.validity.as_mut() {
        for c in &info.checks {
            v.add(c.clone());
        }
    }
    result
}

/// Open loop: `(first measured play's end, last measured play's start)`, when the first
/// ends before the last starts.
fn arrival_window(sessions: &[SessionRecord]) -> Option<(f64, f64)> {
    let measured = || sessions.iter().filter(|s| !s.warmup);
    let from = measured()
        .map(|s| s.end_s)
        .filter(|t| t.is_finite())
        .min_by(f64::total_cmp)?;
    let to = measured()
        .map(|s| s.start_s)
        .filter(|t| t.is_finite())
        .max_by(f64::total_cmp)?;
    (from < to).then_some((from, to))
}

/// `(min sent_s, max end_s)` over finite times.
fn time_range(turns: &[&TurnRecord]) -> (Option<f64>, Option<f64>) {
    let start = turns
        .iter()
        .map(|r| r.sent_s)
        .filter(|t| t.is_finite())
        .min_by(f64::total_cmp);
    let end = turns
        .iter()
        .map(|r| r.end_s)
        .filter(|t| t.is_finite())
        .max_by(f64::total_cmp);
    (start, end)
}

/// How late the turn left, ms (`sent_s − due_s`, never negative).
fn lag_ms(r: &TurnRecord) -> f64 {
    ((r.sent_s - r.due_s) * 1000.0).max(0.0)
}

fn positive(x: Option<f64>) -> Option<f64> {
    x.filter(|x| x.is_finite() && *x > 0.0)
}

fn ratio(num: f64, den: f64) -> Option<f64> {
    positive(Some(den))
        .map(|d| num / d)
        .filter(|r| r.is_finite())
}

/// Time the turn spent in its request, s.
pub(crate) fn busy_s(r: &TurnRecord) -> f64 {
    match r.e2e_ms {
        Some(ms) if ms.is_finite() => ms / 1000.0,
        _ => r.end_s - r.sent_s,
    }
}

impl Metrics {
    /// Metrics over `turns` (only ok ones are used); throughputs divide by `span_s`.
    pub fn from_turns(turns: &[&TurnRecord], span_s: Option<f64>, slo: Option<&Slo>) -> Self {
        let turns: Vec<&TurnRecord> = turns
            .iter()
            .copied()
            .filter(|r| r.status == TurnStatus::Ok)
            .collect();
        let span_s = positive(span_s);
        let per_span = |x: f64| span_s.map(|s| x / s);

        let ttft_ms = Dist::from_values(turns.iter().filter_map(|r| r.ttft_ms));
        let ttft_first_turn_ms = Dist::from_values(
            turns
                .iter()
                .filter(|r| r.turn_index == 0)
                .filter_map(|r| r.ttft_ms),
        );
        let ttft_later_turns_ms = Dist::from_values(
            turns
                .iter()
                .filter(|r| r.turn_index > 0)
                .filter_map(|r| r.ttft_ms),
        );
        let ttft_later_over_first_p50 = match (ttft_later_turns_ms.p50, ttft_first_turn_ms.p50) {
            (Some(l), Some(f)) => ratio(l, f),
            _ => None,
        };

        let gaps: Vec<f64> = turns
            .iter()
            .flat_map(|r| r.chunk_gaps_ms.iter().copied())
            .collect();

        let mut by_index: Vec<Vec<f64>> = vec![Vec::new(); TURN_INDEX_LABELS.len()];
        let mut by_band: Vec<Vec<f64>> = vec![Vec::new(); INPUT_BAND_LABELS.len()];
        for r in &turns {
            let Some(e2e) = r.e2e_ms else { continue };
            let i = (r.turn_index as usize).min(TURN_INDEX_LABELS.len() - 1);
            by_index[i].push(e2e);
            if let Some(input) = r.input_tokens {
                let band = input_band(input);
                if let Some(b) = INPUT_BAND_LABELS.iter().position(|l| *l == band) {
                    by_band[b].push(e2e);
                }
            }
        }
        let keyed = |labels: &[&str], groups: Vec<Vec<f64>>| {
            KeyedP50(
                labels
                    .iter()
                    .zip(groups)
                    .map(|(l, g)| ((*l).to_owned(), percentile(&sorted_finite(g), 0.5)))
                    .collect(),
            )
        };

        let out_tokens = saturating_sum(turns.iter().filter_map(|r| r.output_tokens));
        let in_tokens = saturating_sum(turns.iter().filter_map(|r| r.input_tokens));

        let lags = sorted_finite(turns.iter().map(|r| lag_ms(r)));

        let (goodput_turns_s, slo_attainment) = match slo {
            Some(slo) if !turns.is_empty() => {
                let good = turns.iter().filter(|r| slo.is_met_by(r)).count() as f64;
                (per_span(good), Some(good / turns.len() as f64))
            }
            _ => (None, None),
        };

        Self {
            turns: turns.len() as u64,
            span_s,
            ttft_ms,
            ttft_first_turn_ms,
            ttft_later_turns_ms,
            ttft_later_over_first_p50,
            ttfa_ms: Dist::from_values(turns.iter().filter_map(|r| r.ttfa_ms)),
            reasoning: reasoning_summary(&turns),
            connect_ms: Dist::from_values(turns.iter().filter_map(|r| r.connect_ms)),
            tls_handshake_ms: Dist::from_values(turns.iter().filter_map(|r| r.tls_ms)),
            tpot_ms: Dist::from_values(turns.iter().filter_map(|r| r.tpot_ms)),
            itl_ms: PooledDist::from_values(&gaps, ITL_EXACT_LIMIT),
            e2e_ms: Dist::from_values(turns.iter().filter_map(|r| r.e2e_ms)),
            ttft_from_due_ms: Dist::from_values(
                turns
                    .iter()
                    .filter_map(|r| r.ttft_ms.map(|t| lag_ms(r) + t)),
            ),
            e2e_from_due_ms: Dist::from_values(
                turns.iter().filter_map(|r| r.e2e_ms.map(|t| lag_ms(r) + t)),
            ),
            e2e_by_turn_index_ms: keyed(&TURN_INDEX_LABELS, by_index),
            e2e_by_input_band_ms: keyed(&INPUT_BAND_LABELS, by_band),
            output_throughput_tok_s: per_span(out_tokens as f64),
            input_throughput_tok_s: per_span(in_tokens as f64),
            request_throughput_turns_s: per_span(turns.len() as f64),
            peak_output_tok_s_1s: peak_1s(&turns),
            per_user_output_tok_s: per_user(&turns),
            prefix_cache_ratio: cache_ratio(&turns),
            prefix_cache_later_ratio: cache_ratio(
                &turns
                    .iter()
                    .copied()
                    .filter(|r| r.turn_index > 0)
                    .collect::<Vec<_>>(),
            ),
            prefix_cache_possible_ratio: possible_ratio(&turns),
            prefix_cache_host_share: host_share(&turns),
            osl_fidelity: osl_fidelity(&turns),
            routing_stickiness: stickiness(&turns),
            goodput_turns_s,
            slo_attainment,
            dispatch_lag_ms: LagDist {
                count: lags.len() as u64,
                p50: percentile(&lags, 0.5),
                p99: percentile(&lags, 0.99),
                max: lags.last().copied(),
            },
        }
    }
}

/// The sum of counts read from records: saturating, as a corrupt or hand-edited record may
/// hold any `u64` (a plain sum overflowed on two near `u64::MAX`).
fn saturating_sum(counts: impl Iterator<Item = u64>) -> u64 {
    counts.fold(0, u64::saturating_add)
}

fn reasoning_summary(turns: &[&TurnRecord]) -> Option<ReasoningSummary> {
    let with: Vec<&&TurnRecord> = turns
        .iter()
        .filter(|r| r.reasoning_chunks.is_some_and(|n| n > 0))
        .collect();
    if with.is_empty() {
        return None;
    }
    let sum = |f: fn(&TurnRecord) -> Option<u64>| saturating_sum(with.iter().filter_map(|r| f(r)));
    let reported = with.iter().any(|r| r.reasoning_tokens.is_some());
    let mut thinking: Vec<f64> = with
        .iter()
        .filter_map(|r| Some(r.ttfa_ms? - r.ttft_ms?))
        .collect();
    thinking.sort_by(f64::total_cmp);
    Some(ReasoningSummary {
        turns: with.len() as u64,
        reasoning_chunks: sum(|r| r.reasoning_chunks.map(u64::from)),
        answer_chunks: sum(|r| r.answer_chunks.map(u64::from)),
        reasoning_tokens: reported.then(|| sum(|r| r.reasoning_tokens)),
        thinking_p50_ms: percentile(&thinking, 0.5),
    })
}

/// Peak output rate: each turn's output tokens spread uniformly over `[first_token_s, end_s]`
/// (all at `end_s` when that interval is empty or unknown), binned in whole seconds of the run
/// clock (`[k, k+1)`), the fullest bin.
fn peak_1s(turns: &[&TurnRecord]) -> Option<f64> {
    let mut bins: HashMap<i64, f64> = HashMap::new();
    for r in turns {
        let Some(n) = r.output_tokens.filter(|n| *n > 0) else {
            continue;
        };
        let n = n as f64;
        let b = r.end_s;
        if !b.is_finite() {
            continue;
        }
        let a = r.first_token_s.filter(|a| a.is_finite()).unwrap_or(b);
        // A streaming interval longer than a day is not one (a hand-edited or corrupt record):
        // its tokens go to the bin of its end rather than into millions of bins.
        if b <= a || b - a > 86_400.0 {
            *bins.entry(b.floor() as i64).or_default() += n;
            continue;
        }
        let rate = n / (b - a);
        let (k0, k1) = (a.floor() as i64, b.floor() as i64);
        for k in k0..=k1 {
            let overlap = b.min((k + 1) as f64) - a.max(k as f64);
            if overlap > 0.0 {
                *bins.entry(k).or_default() += rate * overlap;
            }
        }
    }
    bins.into_values().max_by(f64::total_cmp)
}

/// Group key of a session play.
fn play(r: &TurnRecord) -> (&str, u32) {
    (r.session_id.as_str(), r.replay)
}

/// Per session play: Σ output tokens ÷ Σ time in requests of its turns in the set.
fn per_user(turns: &[&TurnRecord]) -> PerUserRate {
    let mut plays: HashMap<(&str, u32), (u64, f64)> = HashMap::new();
    for r in turns {
        let e = plays.entry(play(r)).or_default();
        e.0 = e.0.saturating_add(r.output_tokens.unwrap_or(0));
        let busy = busy_s(r);
        if busy.is_finite() && busy > 0.0 {
            e.1 += busy;
        }
    }
    let rates = sorted_finite(
        plays
            .values()
            .filter(|(_, busy)| *busy > 0.0)
            .map(|(tok, busy)| *tok as f64 / busy),
    );
    PerUserRate {
        sessions: rates.len() as u64,
        p50: percentile(&rates, 0.5),
        mean: mean(&rates),
    }
}

/// Σ cached ÷ Σ input over turns that reported both.
fn cache_ratio(turns: &[&TurnRecord]) -> Option<f64> {
    let (mut cached, mut input, mut any) = (0_u64, 0_u64, false);
    for r in turns {
        if let (Some(c), Some(i)) = (r.cached_tokens, r.input_tokens) {
            cached = cached.saturating_add(c);
            input = input.saturating_add(i);
            any = true;
        }
    }
    if any {
        ratio(cached as f64, input as f64)
    } else {
        None
    }
}

/// A turn's shared prefix ([`TurnRecord::prefix_shared_tokens`], estimated by the client) in
/// the server's token units: scaled up by the server's prompt count over the client's estimate
/// when the client counted fewer, and never more than the prompt.
pub fn shared_prefix_tokens(r: &TurnRecord) -> Option<f64> {
    let shared = r.prefix_shared_tokens? as f64;
    let input = r.input_tokens? as f64;
    let scale = match (r.input_tokens_source, r.est_input_tokens) {
        // Only ever up: where the client overestimates, its own figure is already generous.
        (Some(crate::record::CountSource::Server), Some(est)) if est > 0 => {
            (input / est as f64).max(1.0)
        }
        _ => 1.0,
    };
    Some((shared * scale).min(input))
}

/// Σ shared prefix ÷ Σ input over turns that reported cached tokens and know their prefix.
fn possible_ratio(turns: &[&TurnRecord]) -> Option<f64> {
    let (mut shared, mut input, mut any) = (0.0, 0_u64, false);
    for r in turns {
        if let (Some(_), Some(i), Some(s)) =
            (r.cached_tokens, r.input_tokens, shared_prefix_tokens(r))
        {
            shared += s;
            input += i;
            any = true;
        }
    }
    if any {
        ratio(shared, input as f64)
    } else {
        None
    }
}

/// Σ host-tier hits ÷ Σ cached over turns that reported both.
fn host_share(turns: &[&TurnRecord]) -> Option<f64> {
    let (mut host, mut cached) = (0_u64, 0_u64);
    for r in turns {
        if let (Some(h), Some(c)) = (r.cached_host_tokens, r.cached_tokens) {
            host += h;
            cached += c;
        }
    }
    ratio(host as f64, cached as f64)
}

fn osl_fidelity(turns: &[&TurnRecord]) -> Option<OslFidelity> {
    let done: Vec<(&TurnRecord, u64)> = turns
        .iter()
        .filter(|r| r.max_output_tokens > 0)
        .filter_map(|r| r.output_tokens.map(|o| (*r, o)))
        .collect();
    if done.is_empty() {
        return None;
    }
    let n = done.len() as f64;
    let achieved_mean = done.iter().map(|p| p.1 as f64).sum::<f64>() / n;
    let pinned_mean = done
        .iter()
        .map(|p| f64::from(p.0.max_output_tokens))
        .sum::<f64>()
        / n;
    let recorded: Vec<f64> = done
        .iter()
        .filter_map(|p| p.0.recorded_output_tokens)
        .map(|r| r as f64)
        .collect();
    let recorded_mean =
        (!recorded.is_empty()).then(|| recorded.iter().sum::<f64>() / recorded.len() as f64);
    let ratio = ratio(achieved_mean, pinned_mean);
    Some(OslFidelity {
        turns: done.len() as u64,
        achieved_mean,
        pinned_mean,
        recorded_mean,
        ratio,
        within_10pct: ratio.is_some_and(|r| (r - 1.0).abs() <= 0.1 + 1e-12),
    })
}

/// Mean over session plays with at least two worker-tagged turns of the share of those turns
/// served by the play's most frequent worker.
fn stickiness(turns: &[&TurnRecord]) -> Option<f64> {
    let mut plays: HashMap<(&str, u32), HashMap<&str, u64>> = HashMap::new();
    for r in turns {
        if let Some(w) = r.worker.as_deref() {
            *plays.entry(play(r)).or_default().entry(w).or_default() += 1;
        }
    }
    let shares: Vec<f64> = plays
        .values()
        .filter_map(|workers| {
            let total: u64 = workers.values().sum();
            let top = workers.values().copied().max().unwrap_or(0);
            (total >= 2).then(|| top as f64 / total as f64)
        })
        .collect();
    mean(&shares)
}
