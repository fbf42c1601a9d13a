//! Constructed texts: labels, tensor-parallel and data-parallel series, renamed metrics,
//! truncated and non-Prometheus bodies.

use bench_telemetry::{Backend, ScrapeError, Snapshot, parse};

/// vLLM V1 with two data-parallel engines, each reported by two tensor-parallel ranks.
const VLLM_TP_DP: &str = r#"# HELP vllm:num_requests_running Number of requests in model execution batches.
# TYPE vllm:num_requests_running gauge
vllm:num_requests_running{engine="0",model_name="org/m",tp_rank="0"} 5.0
vllm:num_requests_running{engine="0",model_name="org/m",tp_rank="1"} 5.0
vllm:num_requests_running{engine="1",model_name="org/m",tp_rank="0"} 3.0
vllm:num_requests_running{engine="1",model_name="org/m",tp_rank="1"} 3.0
# TYPE vllm:num_requests_waiting gauge
vllm:num_requests_waiting{engine="0",model_name="org/m",tp_rank="0"} 7.0
vllm:num_requests_waiting{engine="0",model_name="org/m",tp_rank="1"} 7.0
vllm:num_requests_waiting{engine="1",model_name="org/m",tp_rank="0"} 0.0
vllm:num_requests_waiting{engine="1",model_name="org/m",tp_rank="1"} 0.0
# TYPE vllm:kv_cache_usage_perc gauge
vllm:kv_cache_usage_perc{engine="0",model_name="org/m",tp_rank="0"} 0.5
vllm:kv_cache_usage_perc{engine="0",model_name="org/m",tp_rank="1"} 0.5
vllm:kv_cache_usage_perc{engine="1",model_name="org/m",tp_rank="0"} 0.25
vllm:kv_cache_usage_perc{engine="1",model_name="org/m",tp_rank="1"} 0.25
# TYPE vllm:cache_config_info gauge
vllm:cache_config_info{block_size="16",engine="0",num_gpu_blocks="1000",num_gpu_blocks_override="None"} 1.0
vllm:cache_config_info{block_size="16",engine="1",num_gpu_blocks="1000",num_gpu_blocks_override="None"} 1.0
# TYPE vllm:prefix_cache_queries counter
vllm:prefix_cache_queries_total{engine="0",model_name="org/m",tp_rank="0"} 1000.0
vllm:prefix_cache_queries_total{engine="0",model_name="org/m",tp_rank="1"} 1000.0
vllm:prefix_cache_queries_total{engine="1",model_name="org/m",tp_rank="0"} 500.0
vllm:prefix_cache_queries_total{engine="1",model_name="org/m",tp_rank="1"} 500.0
vllm:prefix_cache_queries_created{engine="0",model_name="org/m",tp_rank="0"} 1.7e9
# TYPE vllm:prefix_cache_hits counter
vllm:prefix_cache_hits_total{engine="0",model_name="org/m",tp_rank="0"} 600.0
vllm:prefix_cache_hits_total{engine="0",model_name="org/m",tp_rank="1"} 600.0
vllm:prefix_cache_hits_total{engine="1",model_name="org/m",tp_rank="0"} 100.0
vllm:prefix_cache_hits_total{engine="1",model_name="org/m",tp_rank="1"} 100.0
# TYPE vllm:num_preemptions counter
vllm:num_preemptions_total{engine="0",model_name="org/m"} 2.0
vllm:num_preemptions_total{engine="1",model_name="org/m"} 1.0
# TYPE vllm:prompt_tokens_cached counter
vllm:prompt_tokens_cached_total{engine="0",model_name="org/m"} 700.0
"#;

#[test]
fn vllm_tensor_parallel_ranks_collapse_and_engines_add_up() {
    let s = parse(VLLM_TP_DP).unwrap();
    assert_eq!(
        s,
        Snapshot {
            backend: Backend::Vllm,
            // Ranks of one engine are one batch (5 and 3, not 10 and 6); engines add up.
            running: Some(8.0),
            waiting: Some(7.0),
            // The engines' usage averaged.
            kv_usage: Some(0.375),
            kv_capacity_tokens: Some(2.0 * 1000.0 * 16.0),
            // …and the block size, the unit of prefix-cache hits.
            block_size: Some(16.0),
            preemptions: Some(3.0),
            prefix_cache_queries: Some(1500.0),
            prefix_cache_hits: Some(700.0),
            cached_tokens: Some(700.0),
            ..Snapshot::default()
        }
    );
}

#[test]
fn vllm_renamed_metrics() {
    // During the deprecation period both names are served: the new one wins, nothing is
    // counted twice.
    let both = "\
vllm:gpu_cache_usage_perc{model_name=\"m\"} 0.9
vllm:kv_cache_usage_perc{model_name=\"m\"} 0.4
vllm:gpu_prefix_cache_queries_total{model_name=\"m\"} 10
vllm:prefix_cache_queries_total{model_name=\"m\"} 20
";
    let s = parse(both).unwrap();
    assert_eq!(s.kv_usage, Some(0.4));
    assert_eq!(s.prefix_cache_queries, Some(20.0));

    // Only the old names: still read. Counters without `_total` (a TYPE-less or custom
    // exposition) are read too.
    let old = "\
vllm:gpu_cache_usage_perc{model_name=\"m\"} 0.9
vllm:gpu_prefix_cache_queries{model_name=\"m\"} 10
vllm:gpu_prefix_cache_hits_total{model_name=\"m\"} 4
vllm:num_preemptions{model_name=\"m\"} 6
";
    let s = parse(old).unwrap();
    assert_eq!(s.kv_usage, Some(0.9));
    assert_eq!(s.prefix_cache_queries, Some(10.0));
    assert_eq!(s.prefix_cache_hits, Some(4.0));
    assert_eq!(s.preemptions, Some(6.0));
}

#[test]
fn vllm_capacity_needs_numeric_labels() {
    let s =
        parse("vllm:cache_config_info{block_size=\"16\",num_gpu_blocks=\"None\"} 1.0\n").unwrap();
    assert_eq!(s.kv_capacity_tokens, None);
    let s = parse("vllm:cache_config_info{block_size=\"32\",num_gpu_blocks=\"10\"} 1.0\n").unwrap();
    assert_eq!(s.kv_capacity_tokens, Some(320.0));
}

/// Current SGLang labels (engine_type, tp_rank, pp_rank, moe_ep_rank), two tensor-parallel
/// ranks, the new KV pool names, `cached_tokens_total` per source and the hierarchical cache.
const SGLANG_TP: &str = r#"# TYPE sglang:num_running_reqs gauge
sglang:num_running_reqs{engine_type="unified",model_name="qwen",moe_ep_rank="0",pp_rank="0",tp_rank="0"} 12.0
sglang:num_running_reqs{engine_type="unified",model_name="qwen",moe_ep_rank="0",pp_rank="0",tp_rank="1"} 12.0
sglang:num_queue_reqs{engine_type="unified",model_name="qwen",moe_ep_rank="0",pp_rank="0",tp_rank="0"} 4.0
sglang:num_queue_reqs{engine_type="unified",model_name="qwen",moe_ep_rank="0",pp_rank="0",tp_rank="1"} 4.0
sglang:token_usage{engine_type="unified",model_name="qwen",moe_ep_rank="0",pp_rank="0",tp_rank="0"} 0.71
sglang:token_usage{engine_type="unified",model_name="qwen",moe_ep_rank="0",pp_rank="0",tp_rank="1"} 0.71
sglang:max_total_num_tokens{engine_type="unified",model_name="qwen",moe_ep_rank="0",pp_rank="0",tp_rank="0"} 10000.0
sglang:max_total_num_tokens{engine_type="unified",model_name="qwen",moe_ep_rank="0",pp_rank="0",tp_rank="1"} 10000.0
sglang:cache_hit_rate{engine_type="unified",model_name="qwen",moe_ep_rank="0",pp_rank="0",tp_rank="0"} 0.5
sglang:kv_available_tokens{engine_type="unified",model_name="qwen",moe_ep_rank="0",pp_rank="0",tp_rank="0"} 2900.0
sglang:kv_used_tokens{engine_type="unified",model_name="qwen",moe_ep_rank="0",pp_rank="0",tp_rank="0"} 7000.0
sglang:kv_evictable_tokens{engine_type="unified",model_name="qwen",moe_ep_rank="0",pp_rank="0",tp_rank="0"} 100.0
sglang:num_used_tokens{engine_type="unified",model_name="qwen",moe_ep_rank="0",pp_rank="0",tp_rank="0"} 7100.0
# TYPE sglang:evicted_tokens counter
sglang:evicted_tokens_total{engine_type="unified",model_name="qwen",moe_ep_rank="0",pp_rank="0",tp_rank="0"} 48.0
sglang:evicted_tokens_created{engine_type="unified",model_name="qwen",moe_ep_rank="0",pp_rank="0",tp_rank="0"} 1.7e9
# TYPE sglang:cached_tokens counter
sglang:cached_tokens_total{cache_source="device",model_name="qwen",tp_rank="0"} 300.0
sglang:cached_tokens_total{cache_source="host",model_name="qwen",tp_rank="0"} 200.0
sglang:cached_tokens_total{cache_source="storage",model_name="qwen",tp_rank="0"} 5.0
sglang:hicache_host_used_tokens{model_name="qwen",tp_rank="0"} 900
sglang:hicache_host_total_tokens{model_name="qwen",tp_rank="0"} 20000
"#;

#[test]
fn sglang_labels_ranks_and_sources() {
    let s = parse(SGLANG_TP).unwrap();
    assert_eq!(
        s,
        Snapshot {
            backend: Backend::Sglang,
            running: Some(12.0),
            waiting: Some(4.0),
            kv_usage: Some(0.71),
            kv_capacity_tokens: Some(10000.0),
            // The new name wins over the older `num_used_tokens` (7100).
            kv_used_tokens: Some(7000.0),
            kv_available_tokens: Some(2900.0),
            kv_evictable_tokens: Some(100.0),
            evicted_tokens: Some(48.0),
            cache_hit_rate: Some(0.5),
            cached_tokens: Some(505.0),
            hicache_host_used_tokens: Some(900.0),
            hicache_host_total_tokens: Some(20000.0),
            ..Snapshot::default()
        }
    );
}

#[test]
fn sglang_old_kv_pool_names() {
    let s =
        parse("sglang:available_tokens 10\nsglang:evictable_tokens 20\nsglang:used_tokens 30\n")
            .unwrap();
    assert_eq!(s.backend, Backend::Sglang);
    assert_eq!(s.kv_available_tokens, Some(10.0));
    assert_eq!(s.kv_evictable_tokens, Some(20.0));
    assert_eq!(s.kv_used_tokens, Some(30.0));
}

#[test]
fn sglang_data_parallel_ranks_add_up() {
    let text = "\
sglang:num_running_reqs{dp_rank=\"0\",tp_rank=\"0\"} 2
sglang:num_running_reqs{dp_rank=\"0\",tp_rank=\"1\"} 2
sglang:num_running_reqs{dp_rank=\"1\",tp_rank=\"0\"} 5
sglang:num_running_reqs{dp_rank=\"1\",tp_rank=\"1\"} 5
sglang:token_usage{dp_rank=\"0\"} 0.2
sglang:token_usage{dp_rank=\"1\"} 0.6
";
    let s = parse(text).unwrap();
    assert_eq!(s.running, Some(7.0));
    assert!((s.kv_usage.unwrap() - 0.4).abs() < 1e-12);
}

#[test]
fn llamacpp_older_kv_gauges() {
    let text = "\
# TYPE llamacpp:kv_cache_usage_ratio gauge
llamacpp:kv_cache_usage_ratio 0.63
llamacpp:kv_cache_tokens 1234
llamacpp:requests_processing 2
llamacpp:requests_deferred 1
llamacpp:tokens_predicted_total 5000
";
    let s = parse(text).unwrap();
    assert_eq!(
        s,
        Snapshot {
            backend: Backend::Llamacpp,
            running: Some(2.0),
            waiting: Some(1.0),
            kv_usage: Some(0.63),
            kv_used_tokens: Some(1234.0),
            generation_tokens: Some(5000.0),
            ..Snapshot::default()
        }
    );
}

#[test]
fn label_values_keep_their_colons_and_odd_lines_are_skipped() {
    let text = "\
# a free comment
vllm:num_requests_running{model_name=\"org:model\"} 1
this line is garbage
vllm:num_requests_waiting{} 2
vllm:num_requests_running{model_name=\"other:model\"} 4 1700000000000
vllm:kv_cache_usage_perc{model_name=\"org:model\"} NaN
";
    let s = parse(text).unwrap();
    // Two models: summed.
    assert_eq!(s.running, Some(5.0));
    assert_eq!(s.waiting, Some(2.0));
    // A NaN reading is no reading.
    assert_eq!(s.kv_usage, None);
}

#[test]
fn truncated_mid_value_drops_the_last_line() {
    let s = parse("sglang:num_running_reqs 162\nsglang:num_queue_reqs 28").unwrap();
    assert!(s.truncated);
    assert_eq!(s.running, Some(162.0));
    assert_eq!(s.waiting, None);
    let s = parse("sglang:num_running_reqs 162\nsglang:num_queue_reqs 28\n").unwrap();
    assert!(!s.truncated);
    assert_eq!(s.waiting, Some(28.0));
}

#[test]
fn unknown_backend_is_valid_prometheus() {
    let s =
        parse("# TYPE process_cpu_seconds_total counter\nprocess_cpu_seconds_total 1.5\n").unwrap();
    assert_eq!(
        s,
        Snapshot {
            backend: Backend::Unknown,
            ..Snapshot::default()
        }
    );
}

#[test]
fn non_prometheus_bodies_are_errors() {
    let cases = [
        "<!DOCTYPE html>\n<html><body>Not Found</body></html>\n",
        "  <html>\n",
        "{\"object\":\"error\",\"message\":\"Not Found\"}",
        "{\"detail\":\"Not Found\"}\n",
        "[1, 2]\n",
        "404 page not found\n",
        "Not Found",
        "# only a comment\n",
    ];
    for body in cases {
        let err = parse(body).unwrap_err();
        assert!(
            matches!(err, ScrapeError::NotPrometheus { .. }),
            "{body:?}: {err:?}"
        );
        // The message is one line for one warning.
        assert!(!err.to_string().contains('\n'), "{err}");
    }
    assert!(matches!(parse(""), Err(ScrapeError::Empty)));
    assert!(matches!(parse(" \n\n"), Err(ScrapeError::Empty)));
}

#[test]
fn snapshot_serializes_with_nulls_and_lowercase_backend() {
    let s = parse("llamacpp:requests_processing 2\n").unwrap();
    let v = serde_json::to_value(&s).unwrap();
    assert_eq!(v["backend"], "llamacpp");
    assert_eq!(v["running"], 2.0);
    assert!(v["kv_usage"].is_null());
    let back: Snapshot = serde_json::from_value(v).unwrap();
    assert_eq!(back, s);
}
