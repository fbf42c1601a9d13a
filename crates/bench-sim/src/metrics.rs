//! Counters and the Prometheus text exposition of `/metrics` (vLLM or SGLang vocabulary).

use std::fmt::Write as _;

use crate::config::Flavor;
use crate::faults::FaultKind;

/// vLLM v1 `time_to_first_token_buckets`.
const VLLM_TTFT: &[f64] = &[
    0.001, 0.005, 0.01, 0.02, 0.04, 0.06, 0.08, 0.1, 0.25, 0.5, 0.75, 1.0, 2.5, 5.0, 7.5, 10.0,
    20.0, 40.0, 80.0, 160.0, 640.0, 2560.0,
];
/// vLLM v1 `request_latency_buckets`.
const VLLM_E2E: &[f64] = &[
    0.3, 0.5, 0.8, 1.0, 1.5, 2.0, 2.5, 5.0, 10.0, 15.0, 20.0, 30.0, 40.0, 50.0, 60.0, 120.0, 240.0,
    480.0, 960.0, 1920.0, 7680.0,
];
/// SGLang TTFT buckets (as in the docs capture).
const SGLANG_TTFT: &[f64] = &[
    0.001, 0.005, 0.01, 0.02, 0.04, 0.06, 0.08, 0.1, 0.25, 0.5, 0.75, 1.0, 2.5, 5.0, 7.5, 10.0,
    15.0, 20.0, 25.0, 30.0,
];
/// SGLang e2e buckets (as in the docs capture).
const SGLANG_E2E: &[f64] = &[
    0.3, 0.5, 0.8, 1.0, 1.5, 2.0, 2.5, 5.0, 10.0, 15.0, 20.0, 30.0, 40.0, 50.0, 60.0,
];

/// A cumulative Prometheus histogram.
#[derive(Debug)]
pub(crate) struct Histogram {
    bounds: &'static [f64],
    counts: Vec<u64>,
    sum: f64,
    count: u64,
}

impl Histogram {
    fn new(bounds: &'static [f64]) -> Self {
        Self {
            bounds,
            counts: vec![0; bounds.len()],
            sum: 0.0,
            count: 0,
        }
    }

    /// Records one observation, in seconds.
    pub(crate) fn observe(&mut self, v: f64) {
        if let Some(i) = self.bounds.iter().position(|b| v <= *b) {
            self.counts[i] += 1;
        }
        self.sum += v;
        self.count += 1;
    }

    fn render(&self, out: &mut String, name: &str, labels: &str) {
        let mut cum = 0u64;
        for (b, c) in self.bounds.iter().zip(&self.counts) {
            cum += c;
            let _ = writeln!(
                out,
                "{name}_bucket{{le=\"{b:?}\",{labels}}} {:?}",
                cum as f64
            );
        }
        let _ = writeln!(
            out,
            "{name}_bucket{{le=\"+Inf\",{labels}}} {:?}",
            self.count as f64
        );
        let _ = writeln!(out, "{name}_count{{{labels}}} {:?}", self.count as f64);
        let _ = writeln!(out, "{name}_sum{{{labels}}} {:?}", self.sum);
    }
}

/// Cumulative counters since start.
#[derive(Debug)]
pub(crate) struct Counters {
    pub(crate) requests_total: u64,
    pub(crate) prompt_tokens_total: u64,
    pub(crate) cached_tokens_total: u64,
    pub(crate) completion_tokens_total: u64,
    /// Prompt tokens looked up in the prefix cache.
    pub(crate) prefix_queries_tokens: u64,
    pub(crate) finished_stop: u64,
    pub(crate) finished_length: u64,
    pub(crate) aborted_total: u64,
    pub(crate) errors_total: u64,
    pub(crate) ttft_s: Histogram,
    pub(crate) e2e_s: Histogram,
}

impl Counters {
    pub(crate) fn new(flavor: Flavor) -> Self {
        let (ttft, e2e) = match flavor {
            Flavor::Vllm => (VLLM_TTFT, VLLM_E2E),
            Flavor::Sglang => (SGLANG_TTFT, SGLANG_E2E),
        };
        Self {
            requests_total: 0,
            prompt_tokens_total: 0,
            cached_tokens_total: 0,
            completion_tokens_total: 0,
            prefix_queries_tokens: 0,
            finished_stop: 0,
            finished_length: 0,
            aborted_total: 0,
            errors_total: 0,
            ttft_s: Histogram::new(ttft),
            e2e_s: Histogram::new(e2e),
        }
    }
}

/// Gauges read at scrape time.
#[derive(Debug)]
pub(crate) struct Gauges {
    pub(crate) running: u64,
    pub(crate) waiting: u64,
    pub(crate) used_blocks: u64,
    pub(crate) free_blocks: u64,
    pub(crate) evictable_blocks: u64,
    pub(crate) total_blocks: u64,
    pub(crate) evicted_blocks_total: u64,
    pub(crate) block_size: u32,
}

fn escape_label(v: &str) -> String {
    v.replace('\\', "\\\\")
        .replace('"', "\\\"")
        .replace('\n', "\\n")
}

struct Out<'a> {
    s: String,
    labels: &'a str,
}

impl Out<'_> {
    fn head(&mut self, name: &str, kind: &str, help: &str) {
        let _ = writeln!(self.s, "# HELP {name} {help}");
        let _ = writeln!(self.s, "# TYPE {name} {kind}");
    }

    fn metric(&mut self, name: &str, kind: &str, help: &str, value: f64) {
        self.head(name, kind, help);
        let _ = writeln!(self.s, "{name}{{{}}} {value:?}", self.labels);
    }
}

fn ratio(a: u64, b: u64) -> f64 {
    if b == 0 { 0.0 } else { a as f64 / b as f64 }
}

/// Appends `sim_faults_total{kind=...}`: the faults injected per configured kind.
pub(crate) fn render_faults(out: &mut String, model: &str, counts: &[(FaultKind, u64)]) {
    let model = escape_label(model);
    let _ = writeln!(
        out,
        "# HELP sim_faults_total Faults injected by the simulator, per kind."
    );
    let _ = writeln!(out, "# TYPE sim_faults_total counter");
    for (kind, n) in counts {
        let _ = writeln!(
            out,
            "sim_faults_total{{model_name=\"{model}\",kind=\"{kind}\"}} {:?}",
            *n as f64
        );
    }
}

/// Renders the exposition text.
pub(crate) fn render(flavor: Flavor, model: &str, c: &Counters, g: &Gauges) -> String {
    let model = escape_label(model);
    let bs = u64::from(g.block_size);
    match flavor {
        Flavor::Vllm => {
            let labels = format!("model_name=\"{model}\",engine=\"0\"");
            let mut o = Out {
                s: String::with_capacity(8192),
                labels: &labels,
            };
            o.head(
                "vllm:cache_config_info",
                "gauge",
                "Information of the LLMEngine CacheConfig",
            );
            let _ = writeln!(
                o.s,
                "vllm:cache_config_info{{block_size=\"{}\",cache_dtype=\"auto\",\
                 enable_prefix_caching=\"True\",engine=\"0\",num_gpu_blocks=\"{}\"}} 1.0",
                g.block_size, g.total_blocks
            );
            o.metric(
                "vllm:num_requests_running",
                "gauge",
                "Number of requests in model execution batches.",
                g.running as f64,
            );
            o.metric(
                "vllm:num_requests_waiting",
                "gauge",
                "Number of requests waiting to be processed.",
                g.waiting as f64,
            );
            o.metric(
                "vllm:kv_cache_usage_perc",
                "gauge",
                "KV-cache usage. 1 means 100 percent usage.",
                ratio(g.used_blocks, g.total_blocks),
            );
            o.metric(
                "vllm:prefix_cache_queries_total",
                "counter",
                "Prefix cache queries, in terms of number of queried tokens.",
                c.prefix_queries_tokens as f64,
            );
            o.metric(
                "vllm:prefix_cache_hits_total",
                "counter",
                "Prefix cache hits, in terms of number of cached tokens.",
                c.cached_tokens_total as f64,
            );
            o.metric(
                "vllm:num_preemptions_total",
                "counter",
                "Cumulative number of preemption from the engine.",
                0.0,
            );
            o.metric(
                "vllm:prompt_tokens_total",
                "counter",
                "Number of prefill tokens processed.",
                c.prompt_tokens_total as f64,
            );
            o.metric(
                "vllm:generation_tokens_total",
                "counter",
                "Number of generation tokens processed.",
                c.completion_tokens_total as f64,
            );
            o.head(
                "vllm:request_success_total",
                "counter",
                "Count of successfully processed requests.",
            );
            for (reason, n) in [
                ("stop", c.finished_stop),
                ("length", c.finished_length),
                ("abort", c.aborted_total),
            ] {
                let _ = writeln!(
                    o.s,
                    "vllm:request_success_total{{{labels},finished_reason=\"{reason}\"}} {:?}",
                    n as f64
                );
            }
            o.head(
                "vllm:time_to_first_token_seconds",
                "histogram",
                "Histogram of time to first token in seconds.",
            );
            c.ttft_s
                .render(&mut o.s, "vllm:time_to_first_token_seconds", &labels);
            o.head(
                "vllm:e2e_request_latency_seconds",
                "histogram",
                "Histogram of e2e request latency in seconds.",
            );
            c.e2e_s
                .render(&mut o.s, "vllm:e2e_request_latency_seconds", &labels);
            o.s
        }
        Flavor::Sglang => {
            let labels = format!("model_name=\"{model}\"");
            let mut o = Out {
                s: String::with_capacity(8192),
                labels: &labels,
            };
            o.metric(
                "sglang:num_running_reqs",
                "gauge",
                "The number of running requests.",
                g.running as f64,
            );
            o.metric(
                "sglang:num_queue_reqs",
                "gauge",
                "The number of requests in the waiting queue.",
                g.waiting as f64,
            );
            o.metric(
                "sglang:token_usage",
                "gauge",
                "The token usage.",
                ratio(g.used_blocks, g.total_blocks),
            );
            o.metric(
                "sglang:max_total_num_tokens",
                "gauge",
                "Maximum total number of tokens in the KV cache pool.",
                (g.total_blocks * bs) as f64,
            );
            o.metric(
                "sglang:cache_hit_rate",
                "gauge",
                "The prefix cache hit rate.",
                ratio(c.cached_tokens_total, c.prefix_queries_tokens),
            );
            o.metric(
                "sglang:kv_available_tokens",
                "gauge",
                "Number of free token slots in the KV cache pool.",
                (g.free_blocks * bs) as f64,
            );
            o.metric(
                "sglang:kv_used_tokens",
                "gauge",
                "Number of actively used token slots in the KV cache pool.",
                (g.used_blocks * bs) as f64,
            );
            o.metric(
                "sglang:kv_evictable_tokens",
                "gauge",
                "Number of evictable (radix-cached) token slots in the KV cache pool.",
                (g.evictable_blocks * bs) as f64,
            );
            o.metric(
                "sglang:evicted_tokens_total",
                "counter",
                "The number of device KV token slots freed by eviction.",
                (g.evicted_blocks_total * bs) as f64,
            );
            o.metric(
                "sglang:prompt_tokens_total",
                "counter",
                "Number of prefill tokens processed.",
                c.prompt_tokens_total as f64,
            );
            o.metric(
                "sglang:generation_tokens_total",
                "counter",
                "Number of generation tokens processed.",
                c.completion_tokens_total as f64,
            );
            o.head(
                "sglang:cached_tokens_total",
                "counter",
                "Number of cached prompt tokens by source (device/host/storage).",
            );
            let _ = writeln!(
                o.s,
                "sglang:cached_tokens_total{{{labels},cache_source=\"device\"}} {:?}",
                c.cached_tokens_total as f64
            );
            o.head(
                "sglang:time_to_first_token_seconds",
                "histogram",
                "Histogram of time to first token in seconds.",
            );
            c.ttft_s
                .render(&mut o.s, "sglang:time_to_first_token_seconds", &labels);
            o.head(
                "sglang:e2e_request_latency_seconds",
                "histogram",
                "Histogram of End-to-end request latency in seconds",
            );
            c.e2e_s
                .render(&mut o.s, "sglang:e2e_request_latency_seconds", &labels);
            o.s
        }
    }
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use super::*;

    fn gauges() -> Gauges {
        Gauges {
            running: 2,
            waiting: 1,
            used_blocks: 4,
            free_blocks: 10,
            evictable_blocks: 2,
            total_blocks: 16,
            evicted_blocks_total: 3,
            block_size: 16,
        }
    }

    fn lines_are_well_formed(text: &str) {
        for line in text.lines() {
            if line.starts_with('#') {
                assert!(
                    line.starts_with("# HELP ") || line.starts_with("# TYPE "),
                    "{line}"
                );
                continue;
            }
            let (series, value) = line.rsplit_once(' ').unwrap_or_default();
            assert!(value.parse::<f64>().is_ok(), "bad value in {line}");
            assert!(series.ends_with('}'), "{line}");
        }
    }

    #[test]
    fn vllm_exposition() {
        let mut c = Counters::new(Flavor::Vllm);
        c.ttft_s.observe(0.03);
        c.ttft_s.observe(3.0);
        let t = render(Flavor::Vllm, "m", &c, &gauges());
        lines_are_well_formed(&t);
        assert!(t.contains("vllm:kv_cache_usage_perc{model_name=\"m\",engine=\"0\"} 0.25\n"));
        assert!(t.contains("num_gpu_blocks=\"16\""));
        assert!(t.contains(
            "vllm:time_to_first_token_seconds_bucket{le=\"0.04\",model_name=\"m\",engine=\"0\"} 1.0"
        ));
        assert!(t.contains(
            "vllm:time_to_first_token_seconds_bucket{le=\"+Inf\",model_name=\"m\",engine=\"0\"} 2.0"
        ));
    }

    #[test]
    fn sglang_exposition() {
        let c = Counters::new(Flavor::Sglang);
        let t = render(Flavor::Sglang, "a\"b", &c, &gauges());
        lines_are_well_formed(&t);
        assert!(t.contains("sglang:max_total_num_tokens{model_name=\"a\\\"b\"} 256.0"));
        assert!(t.contains("sglang:evicted_tokens_total{model_name=\"a\\\"b\"} 48.0"));
    }
}
