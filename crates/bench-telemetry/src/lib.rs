//! Server telemetry: the Prometheus `/metrics` text of vLLM, SGLang and llama.cpp normalized into
//! one [`Snapshot`].
//!
//! [`parse`] takes the body of one scrape and returns a [`Snapshot`] whose fields are all
//! `Option`s (`None` when the server does not report that quantity), or a [`ScrapeError`] when the
//! body is not Prometheus text at all (an HTML page, JSON), so that the caller can disable
//! scraping with one warning. The [`Backend`] is detected from the metric names. How several
//! series of one name (label sets, tensor-parallel ranks, data-parallel engines) are combined is
//! documented on [`Snapshot`] and in `docs/telemetry.md`.
//!
//! Plain synchronous code: no runtime, no I/O.
//!
//! ```
//! use bench_telemetry::{Backend, parse};
//!
//! let text = "\
//! # TYPE sglang:num_running_reqs gauge
//! sglang:num_running_reqs{model_name=\"m\",tp_rank=\"0\"} 3
//! sglang:num_running_reqs{model_name=\"m\",tp_rank=\"1\"} 3
//! sglang:cached_tokens_total{model_name=\"m\",cache_source=\"device\"} 100
//! sglang:cached_tokens_total{model_name=\"m\",cache_source=\"host\"} 20
//! ";
//! let snap = parse(text)?;
//! assert_eq!(snap.backend, Backend::Sglang);
//! assert_eq!(snap.running, Some(3.0)); // the two tensor-parallel ranks report one batch
//! assert_eq!(snap.cached_tokens, Some(120.0)); // label sets are summed
//! # Ok::<(), bench_telemetry::ScrapeError>(())
//! ```

use std::collections::{BTreeMap, HashMap};

use serde::{Deserialize, Serialize};

pub mod health;
pub mod summary;

pub use summary::{
    EnergyMethod, GpuEnergy, Scrape, ServerSummary, TargetSummary, energy_of, gpu_energy,
    summarize, summarize_targets,
};

/// The serving engine a scrape came from, detected from its metric-name prefixes.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Backend {
    /// vLLM (`vllm:` names).
    Vllm,
    /// SGLang (`sglang:` names).
    Sglang,
    /// llama.cpp's server (`llamacpp:` names).
    Llamacpp,
    /// Any other OpenAI-compatible server (on `/metrics`: valid Prometheus text without any
    /// of the names above). Written `unknown`; `openai` is read as it too.
    #[default]
    #[serde(alias = "openai")]
    Unknown,
}

impl Backend {
    /// Every family.
    pub const ALL: [Backend; 4] = [
        Backend::Vllm,
        Backend::Sglang,
        Backend::Llamacpp,
        Backend::Unknown,
    ];

    /// Its name on the command line (`openai` for [`Backend::Unknown`]).
    pub fn name(self) -> &'static str {
        match self {
            Backend::Vllm => "vllm",
            Backend::Sglang => "sglang",
            Backend::Llamacpp => "llamacpp",
            Backend::Unknown => "openai",
        }
    }

    /// The endpoint that empties the server's prefix cache, if the family has one.
    pub fn flush_path(self) -> Option<&'static str> {
        match self {
            Backend::Vllm => Some("/reset_prefix_cache"),
            Backend::Sglang => Some("/flush_cache"),
            Backend::Llamacpp | Backend::Unknown => None,
        }
    }

    /// The family an `owned_by` of `/v1/models` names, if any.
    pub fn from_owned_by(owned_by: &str) -> Option<Backend> {
        match owned_by.to_ascii_lowercase().as_str() {
            "vllm" => Some(Backend::Vllm),
            "sglang" => Some(Backend::Sglang),
            "llamacpp" | "llama.cpp" => Some(Backend::Llamacpp),
            _ => None,
        }
    }

    /// The family whose metric prefix appears first on a sample line of a Prometheus text,
    /// with that prefix.
    pub fn from_metric_names(text: &str) -> Option<(Backend, &'static str)> {
        const PREFIXES: [(&str, Backend); 3] = [
            ("vllm:", Backend::Vllm),
            ("sglang:", Backend::Sglang),
            ("llamacpp:", Backend::Llamacpp),
        ];
        text.lines().filter(|l| !l.starts_with('#')).find_map(|l| {
            PREFIXES
                .iter()
                .find(|(p, _)| l.starts_with(p))
                .map(|(p, b)| (*b, *p))
        })
    }
}

impl std::str::FromStr for Backend {
    type Err = String;

    /// `vllm`, `sglang`, `llamacpp` or `openai` (any other OpenAI-compatible server).
    fn from_str(s: &str) -> Result<Self, Self::Err> {
        Backend::ALL
            .into_iter()
            .find(|b| b.name() == s || (*b == Backend::Unknown && s == "unknown"))
            .ok_or_else(|| format!("{s:?} is not a backend (vllm, sglang, llamacpp, openai)"))
    }
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod backend_tests {
    use super::Backend;

    #[test]
    fn owned_by_names_the_family() {
        assert_eq!(Backend::from_owned_by("vllm"), Some(Backend::Vllm));
        assert_eq!(Backend::from_owned_by("sglang"), Some(Backend::Sglang));
        assert_eq!(Backend::from_owned_by("llamacpp"), Some(Backend::Llamacpp));
        assert_eq!(Backend::from_owned_by("openai"), None);
        assert_eq!(Backend::from_owned_by(""), None);
    }

    #[test]
    fn metric_prefixes_name_the_family() {
        let vllm = "# HELP vllm:num_requests_running x\n# TYPE vllm:num_requests_running gauge\n\
                    vllm:num_requests_running{model_name=\"m\"} 0.0\n";
        assert_eq!(
            Backend::from_metric_names(vllm),
            Some((Backend::Vllm, "vllm:"))
        );
        let sglang = "python_gc_objects_collected_total 3\nsglang:num_running_reqs 1\n";
        assert_eq!(
            Backend::from_metric_names(sglang),
            Some((Backend::Sglang, "sglang:"))
        );
        assert_eq!(
            Backend::from_metric_names("llamacpp:prompt_tokens_total 4\n"),
            Some((Backend::Llamacpp, "llamacpp:"))
        );
        assert_eq!(
            Backend::from_metric_names("# HELP vllm:x only a comment\nup 1\n"),
            None
        );
    }

    #[test]
    fn names_parse_back() {
        for b in Backend::ALL {
            assert_eq!(b.name().parse::<Backend>(), Ok(b));
        }
        assert!(
            "tgi"
                .parse::<Backend>()
                .unwrap_err()
                .contains("not a backend")
        );
    }
}

/// One scrape, normalized across engines.
///
/// Every quantity is `None` when the engine does not report it. Values are the raw readings;
/// counters (`preemptions`, `prefix_cache_*`, `*_tokens` totals, `evicted_tokens`) are
/// cumulative since the server started, to be used as deltas between two snapshots.
///
/// **Several series of one name.** Series whose labels differ only in a rank label
/// (`tp_rank`, `pp_rank`, `moe_ep_rank`, `ep_rank`) are copies of one engine instance (each
/// tensor-parallel rank reports the same batch): within such a group the **maximum** is taken.
/// The resulting groups (other label sets: `engine` and `dp_rank` replicas, several models,
/// `cache_source`, ...) are **summed**, except for fractions (`kv_usage`, `cache_hit_rate`),
/// which are **averaged** over the groups.
///
/// **Renamed metrics.** For each field a list of names is tried in order and the first one
/// present wins (new name first, so a server that exposes both the deprecated and the new name
/// is not counted twice). Each name is accepted with and without a `_total` suffix.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
pub struct Snapshot {
    /// The engine, detected from the metric names.
    pub backend: Backend,
    /// Requests in the running batch (vLLM `num_requests_running`, SGLang `num_running_reqs`,
    /// llama.cpp `requests_processing`).
    pub running: Option<f64>,
    /// Requests waiting for admission (vLLM `num_requests_waiting`, SGLang `num_queue_reqs`,
    /// llama.cpp `requests_deferred`).
    pub waiting: Option<f64>,
    /// KV-cache usage as a fraction, 1.0 = full (vLLM `kv_cache_usage_perc` or
    /// `gpu_cache_usage_perc`, SGLang `token_usage`, llama.cpp `kv_cache_usage_ratio`).
    pub kv_usage: Option<f64>,
    /// KV-cache capacity in tokens (vLLM `cache_config_info` labels
    /// `num_gpu_blocks × block_size`, SGLang `max_total_num_tokens`).
    pub kv_capacity_tokens: Option<f64>,
    /// KV token slots in active use (SGLang `kv_used_tokens`, formerly `num_used_tokens` /
    /// `used_tokens`; llama.cpp `kv_cache_tokens`).
    pub kv_used_tokens: Option<f64>,
    /// Free KV token slots (SGLang `kv_available_tokens`, formerly `available_tokens`).
    pub kv_available_tokens: Option<f64>,
    /// KV token slots held only by the prefix cache and evictable (SGLang
    /// `kv_evictable_tokens`, formerly `evictable_tokens`).
    pub kv_evictable_tokens: Option<f64>,
    /// Counter: KV token slots freed by eviction (SGLang `evicted_tokens_total`).
    pub evicted_tokens: Option<f64>,
    /// Counter: preemptions (vLLM `num_preemptions_total`).
    pub preemptions: Option<f64>,
    /// Counter: prompt tokens looked up in the prefix cache (vLLM `prefix_cache_queries_total`,
    /// formerly `gpu_prefix_cache_queries_total`).
    pub prefix_cache_queries: Option<f64>,
    /// Counter: prompt tokens found in the prefix cache (vLLM `prefix_cache_hits_total`,
    /// formerly `gpu_prefix_cache_hits_total`).
    pub prefix_cache_hits: Option<f64>,
    /// The engine's own prefix-cache hit rate, a fraction (SGLang `cache_hit_rate`; vLLM V0
    /// `gpu_prefix_cache_hit_rate`, whose `-1` "no data" is `None`).
    pub cache_hit_rate: Option<f64>,
    /// Counter: prompt tokens served from a cache (SGLang `cached_tokens_total` summed over its
    /// `cache_source` label sets, vLLM `prompt_tokens_cached_total`, llama.cpp
    /// `prompt_tokens_cached_total`).
    pub cached_tokens: Option<f64>,
    /// Counter: prompt tokens processed (`prompt_tokens_total`; llama.cpp counts only the tokens
    /// it did not take from its cache).
    pub prompt_tokens: Option<f64>,
    /// Counter: generated tokens (`generation_tokens_total`, llama.cpp `tokens_predicted_total`).
    pub generation_tokens: Option<f64>,
    /// Tokens held in SGLang's hierarchical-cache host memory (`hicache_host_used_tokens`).
    pub hicache_host_used_tokens: Option<f64>,
    /// Capacity of SGLang's hierarchical-cache host memory in tokens
    /// (`hicache_host_total_tokens`).
    pub hicache_host_total_tokens: Option<f64>,
    /// The body did not end with a newline: its last line was dropped as possibly cut short.
    #[serde(default)]
    pub truncated: bool,
    /// Tokens per KV-cache block (vLLM `cache_config_info`'s `block_size` label), the unit of
    /// prefix-cache hits.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub block_size: Option<f64>,
    /// GPU board power, W, summed over the GPUs reported (a DCGM exporter's
    /// `DCGM_FI_DEV_POWER_USAGE`, one series per GPU).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub gpu_power_w: Option<f64>,
    /// Counter: energy the GPUs consumed, J, summed over the GPUs reported (DCGM's
    /// `DCGM_FI_DEV_TOTAL_ENERGY_CONSUMPTION`, in mJ since the driver loaded).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub gpu_energy_j: Option<f64>,
    /// GPUs reporting power or energy (series of those metrics).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub gpus: Option<f64>,
}

/// Why a body could not be read as Prometheus text.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum ScrapeError {
    /// The body is empty or only whitespace.
    #[error("empty metrics body")]
    Empty,
    /// The body is something else (HTML, JSON, plain text) or holds no sample.
    #[error("not prometheus text: {reason}")]
    NotPrometheus {
        /// What gave it away.
        reason: String,
    },
    /// The underlying parser failed.
    #[error("prometheus text could not be parsed")]
    Parse(#[source] std::io::Error),
}

/// Labels that tell tensor/pipeline/expert-parallel ranks of one engine instance apart.
const RANK_LABELS: &[&str] = &["tp_rank", "pp_rank", "moe_ep_rank", "ep_rank"];

/// `prometheus-parse` reads metric names as `\w+`, which has no `:`; names are rewritten with
/// this stand-in before parsing and restored afterwards.
const COLON: &str = "__bench_colon__";

/// One sample value with its labels.
#[derive(Debug)]
struct Series {
    labels: HashMap<String, String>,
    value: f64,
}

/// How the groups left after collapsing rank duplicates are combined.
#[derive(Clone, Copy)]
enum Across {
    Sum,
    Mean,
}

/// Parses one `/metrics` body into a normalized [`Snapshot`].
///
/// Tolerant of labels, of several series per name, of renamed metrics, of lines it cannot
/// read (skipped) and of a body cut short (an unterminated last line is dropped and
/// [`Snapshot::truncated`] set). An error means the body is not Prometheus text at all.
pub fn parse(text: &str) -> Result<Snapshot, ScrapeError> {
    let body = text.trim_start_matches('\u{feff}');
    let first = body.trim_start();
    if first.is_empty() {
        return Err(ScrapeError::Empty);
    }
    if let Some(c) = first.chars().next()
        && matches!(c, '<' | '{' | '[')
    {
        let kind = if c == '<' { "html or xml" } else { "json" };
        return Err(ScrapeError::NotPrometheus {
            reason: format!("body looks like {kind}"),
        });
    }

    // The text format ends every line, the last included, with '\n': an unterminated last line
    // may have been cut anywhere (even inside a number), so it is not trusted.
    let truncated = !body.ends_with('\n');
    let complete = if truncated {
        body.rfind('\n').map_or("", |i| &body[..=i])
    } else {
        body
    };

    // The first line tells HTML error pages, JSON and plain-text answers apart.
    if let Some(line) = body.lines().map(str::trim).find(|l| !l.is_empty())
        && !line.starts_with('#')
        && !is_sample(&escape_colons(line))
    {
        return Err(ScrapeError::NotPrometheus {
            reason: format!("first line is not a sample or comment: {line:.60}"),
        });
    }
    let lines: Vec<String> = complete
        .lines()
        .map(str::trim)
        .filter(|l| !l.is_empty())
        .map(escape_colons)
        .collect();
    let scrape =
        prometheus_parse::Scrape::parse(lines.into_iter().map(Ok)).map_err(ScrapeError::Parse)?;

    let mut by_name: BTreeMap<String, Vec<Series>> = BTreeMap::new();
    for sample in scrape.samples {
        let value = match sample.value {
            prometheus_parse::Value::Counter(v)
            | prometheus_parse::Value::Gauge(v)
            | prometheus_parse::Value::Untyped(v) => v,
            // Histograms and summaries carry no field of the snapshot.
            prometheus_parse::Value::Histogram(_) | prometheus_parse::Value::Summary(_) => {
                continue;
            }
        };
        let labels = sample
            .labels
            .iter()
            .map(|(k, v)| (k.clone(), v.clone()))
            .collect();
        by_name
            .entry(sample.metric.replace(COLON, ":"))
            .or_default()
            .push(Series { labels, value });
    }
    if by_name.is_empty() {
        return Err(ScrapeError::NotPrometheus {
            reason: "no sample line".to_owned(),
        });
    }

    let backend = detect(&by_name);
    let m = Metrics(&by_name);
    let mut s = Snapshot {
        backend,
        truncated,
        ..Snapshot::default()
    };
    match backend {
        Backend::Vllm => {
            s.running = m.get(&["vllm:num_requests_running"], Across::Sum);
            s.waiting = m.get(&["vllm:num_requests_waiting"], Across::Sum);
            s.kv_usage = m.get(
                &["vllm:kv_cache_usage_perc", "vllm:gpu_cache_usage_perc"],
                Across::Mean,
            );
            s.kv_capacity_tokens = m.vllm_capacity();
            s.block_size = m.vllm_block_size();
            s.preemptions = m.get(&["vllm:num_preemptions"], Across::Sum);
            s.prefix_cache_queries = m.get(
                &["vllm:prefix_cache_queries", "vllm:gpu_prefix_cache_queries"],
                Across::Sum,
            );
            s.prefix_cache_hits = m.get(
                &["vllm:prefix_cache_hits", "vllm:gpu_prefix_cache_hits"],
                Across::Sum,
            );
            s.cache_hit_rate = m.get_fraction(&["vllm:gpu_prefix_cache_hit_rate"]);
            s.cached_tokens = m.get(&["vllm:prompt_tokens_cached"], Across::Sum);
            s.prompt_tokens = m.get(&["vllm:prompt_tokens"], Across::Sum);
            s.generation_tokens = m.get(&["vllm:generation_tokens"], Across::Sum);
        }
        Backend::Sglang => {
            s.running = m.get(&["sglang:num_running_reqs"], Across::Sum);
            s.waiting = m.get(&["sglang:num_queue_reqs"], Across::Sum);
            s.kv_usage = m.get(&["sglang:token_usage"], Across::Mean);
            s.kv_capacity_tokens = m.get(&["sglang:max_total_num_tokens"], Across::Sum);
            s.kv_used_tokens = m.get(
                &[
                    "sglang:kv_used_tokens",
                    "sglang:num_used_tokens",
                    "sglang:used_tokens",
                ],
                Across::Sum,
            );
            s.kv_available_tokens = m.get(
                &["sglang:kv_available_tokens", "sglang:available_tokens"],
                Across::Sum,
            );
            s.kv_evictable_tokens = m.get(
                &["sglang:kv_evictable_tokens", "sglang:evictable_tokens"],
                Across::Sum,
            );
            s.evicted_tokens = m.get(&["sglang:evicted_tokens"], Across::Sum);
            s.cache_hit_rate = m.get_fraction(&["sglang:cache_hit_rate"]);
            s.cached_tokens = m.get(&["sglang:cached_tokens"], Across::Sum);
            s.prompt_tokens = m.get(&["sglang:prompt_tokens"], Across::Sum);
            s.generation_tokens = m.get(&["sglang:generation_tokens"], Across::Sum);
            s.hicache_host_used_tokens = m.get(&["sglang:hicache_host_used_tokens"], Across::Sum);
            s.hicache_host_total_tokens = m.get(&["sglang:hicache_host_total_tokens"], Across::Sum);
        }
        Backend::Llamacpp => {
            s.running = m.get(&["llamacpp:requests_processing"], Across::Sum);
            s.waiting = m.get(&["llamacpp:requests_deferred"], Across::Sum);
            s.kv_usage = m.get(&["llamacpp:kv_cache_usage_ratio"], Across::Mean);
            s.kv_used_tokens = m.get(&["llamacpp:kv_cache_tokens"], Across::Sum);
            s.cached_tokens = m.get(&["llamacpp:prompt_tokens_cached"], Across::Sum);
            s.prompt_tokens = m.get(&["llamacpp:prompt_tokens"], Across::Sum);
            s.generation_tokens = m.get(&["llamacpp:tokens_predicted"], Across::Sum);
        }
        Backend::Unknown => {}
    }
    // A DCGM exporter beside any engine (or alone): one series per GPU, summed.
    s.gpu_power_w = m.get(&[DCGM_POWER], Across::Sum);
    s.gpu_energy_j = m.get(&[DCGM_ENERGY], Across::Sum).map(|mj| mj / 1000.0);
    s.gpus = [DCGM_POWER, DCGM_ENERGY]
        .iter()
        .filter_map(|n| by_name.get(*n))
        .map(Vec::len)
        .max()
        .map(|n| n as f64);
    Ok(s)
}

/// DCGM's board power gauge, W.
pub const DCGM_POWER: &str = "DCGM_FI_DEV_POWER_USAGE";
/// DCGM's energy counter, mJ since the driver loaded.
pub const DCGM_ENERGY: &str = "DCGM_FI_DEV_TOTAL_ENERGY_CONSUMPTION";

/// Replaces `:` in the metric name of a sample, `# HELP` or `# TYPE` line (never in label
/// values) with [`COLON`].
fn escape_colons(line: &str) -> String {
    let (prefix, rest) = if let Some(rest) = line.strip_prefix("# HELP ") {
        ("# HELP ", rest)
    } else if let Some(rest) = line.strip_prefix("# TYPE ") {
        ("# TYPE ", rest)
    } else if line.starts_with('#') {
        return line.to_owned();
    } else {
        ("", line)
    };
    let rest = rest.trim_start();
    let end = rest
        .find(|c: char| c == '{' || c.is_whitespace())
        .unwrap_or(rest.len());
    let (name, tail) = rest.split_at(end);
    // `prometheus-parse` wants at least one label between braces.
    let tail = tail.strip_prefix("{}").unwrap_or(tail);
    format!("{prefix}{}{tail}", name.replace(':', COLON))
}

/// Whether `prometheus-parse` reads an (escaped) line as a sample.
fn is_sample(line: &str) -> bool {
    matches!(
        prometheus_parse::LineInfo::parse(line),
        prometheus_parse::LineInfo::Sample { .. }
    )
}

/// The backend whose prefix most sample names carry (ties: vLLM, SGLang, llama.cpp).
fn detect(by_name: &BTreeMap<String, Vec<Series>>) -> Backend {
    let count = |prefix: &str| by_name.keys().filter(|k| k.starts_with(prefix)).count();
    let candidates = [
        (count("vllm:"), Backend::Vllm),
        (count("sglang:"), Backend::Sglang),
        (count("llamacpp:"), Backend::Llamacpp),
    ];
    let mut best = (0, Backend::Unknown);
    for c in candidates {
        if c.0 > best.0 {
            best = c;
        }
    }
    best.1
}

/// Lookups over the parsed series.
struct Metrics<'a>(&'a BTreeMap<String, Vec<Series>>);

impl Metrics<'_> {
    /// The series of the first of `names` present, each tried as given, with `_total` and
    /// without it.
    fn series(&self, names: &[&str]) -> Option<&[Series]> {
        names.iter().find_map(|name| {
            let base = name.strip_suffix("_total").unwrap_or(name);
            [base.to_owned(), format!("{base}_total")]
                .iter()
                .find_map(|n| self.0.get(n).filter(|v| !v.is_empty()))
                .map(Vec::as_slice)
        })
    }

    /// The combined value of the first of `names` present (see [`Snapshot`]).
    fn get(&self, names: &[&str], across: Across) -> Option<f64> {
        let series = self.series(names)?;
        combine(series.iter().map(|s| (&s.labels, s.value)), across)
    }

    /// Like [`Metrics::get`] averaged, for a fraction whose negative values mean "no data".
    fn get_fraction(&self, names: &[&str]) -> Option<f64> {
        let series = self.series(names)?;
        combine(
            series
                .iter()
                .filter(|s| s.value >= 0.0)
                .map(|s| (&s.labels, s.value)),
            Across::Mean,
        )
    }

    /// vLLM's KV capacity: `num_gpu_blocks × block_size` from the labels of `cache_config_info`.
    fn vllm_block_size(&self) -> Option<f64> {
        self.series(&["vllm:cache_config_info"])?
            .iter()
            .filter_map(|s| s.labels.get("block_size")?.parse::<f64>().ok())
            .filter(|b| b.is_finite() && *b >= 1.0)
            .reduce(f64::max)
    }

    fn vllm_capacity(&self) -> Option<f64> {
        let series = self.series(&["vllm:cache_config_info"])?;
        let number = |s: &Series, key: &str| {
            s.labels
                .get(key)
                .and_then(|v| v.parse::<f64>().ok())
                .filter(|v| v.is_finite() && *v >= 0.0)
        };
        combine(
            series.iter().filter_map(|s| {
                Some((
                    &s.labels,
                    number(s, "num_gpu_blocks")? * number(s, "block_size")?,
                ))
            }),
            Across::Sum,
        )
    }
}

/// Collapses series that differ only in a rank label (maximum), then sums or averages the
/// groups. Non-finite values are ignored; `None` when nothing is left.
fn combine<'a>(
    series: impl Iterator<Item = (&'a HashMap<String, String>, f64)>,
    across: Across,
) -> Option<f64> {
    let mut groups: BTreeMap<Vec<(&str, &str)>, f64> = BTreeMap::new();
    for (labels, value) in series {
        if !value.is_finite() {
            continue;
        }
        let mut key: Vec<(&str, &str)> = labels
            .iter()
            .filter(|(k, _)| !RANK_LABELS.contains(&k.as_str()))
            .map(|(k, v)| (k.as_str(), v.as_str()))
            .collect();
        key.sort_unstable();
        groups
            .entry(key)
            .and_modify(|g| *g = g.max(value))
            .or_insert(value);
    }
    if groups.is_empty() {
        return None;
    }
    let sum: f64 = groups.values().sum();
    Some(match across {
        Across::Sum => sum,
        Across::Mean => sum / groups.len() as f64,
    })
}
