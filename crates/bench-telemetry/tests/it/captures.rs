//! The real captures in `fixtures/metrics`, their numbers checked against the text by hand.

use bench_telemetry::{Backend, Snapshot, parse};

use crate::fixture;

#[test]
fn vllm_v0_capture() {
    let s = parse(&fixture("vllm_v0.7_aibrix_runtime_doc.prom")).unwrap();
    assert_eq!(
        s,
        Snapshot {
            backend: Backend::Vllm,
            running: Some(0.0),
            waiting: Some(0.0),
            // Only the V0 name `gpu_cache_usage_perc` is present.
            kv_usage: Some(0.0),
            // cache_config_info{block_size="16",...,num_gpu_blocks="81767",...}
            kv_capacity_tokens: Some(81767.0 * 16.0),
            // …and the block size, the unit of prefix-cache hits.
            block_size: Some(16.0),
            preemptions: Some(0.0),
            // gpu_prefix_cache_hit_rate is -1.0: "no data".
            cache_hit_rate: None,
            prompt_tokens: Some(148.0),
            generation_tokens: Some(955.0),
            ..Snapshot::default()
        }
    );
}

#[test]
fn vllm_v1_snippet_has_only_a_histogram() {
    let s = parse(&fixture("vllm_v1_docs_usage_metrics_snippet.prom")).unwrap();
    assert_eq!(
        s,
        Snapshot {
            backend: Backend::Vllm,
            ..Snapshot::default()
        }
    );
}

fn sglang_expected() -> Snapshot {
    Snapshot {
        backend: Backend::Sglang,
        running: Some(162.0),
        waiting: Some(2826.0),
        kv_usage: Some(0.28),
        // The old name `num_used_tokens`.
        kv_used_tokens: Some(123859.0),
        cache_hit_rate: Some(0.007507552643049313),
        prompt_tokens: Some(8.128902e6),
        generation_tokens: Some(7.557572e6),
        ..Snapshot::default()
    }
}

#[test]
fn sglang_capture() {
    let s = parse(&fixture("sglang_docs_production_metrics.prom")).unwrap();
    assert_eq!(s, sglang_expected());
}

#[test]
fn truncated_sglang_capture_keeps_what_is_complete() {
    let s = parse(&fixture("sglang_docs_production_metrics_truncated.prom")).unwrap();
    assert_eq!(
        s,
        Snapshot {
            // The cut line read `num_used_tokens{...} 1238` (really 123859.0): dropped, not
            // misread; the queue gauge came after the cut.
            kv_used_tokens: None,
            waiting: None,
            truncated: true,
            ..sglang_expected()
        }
    );
}

#[test]
fn llamacpp_capture() {
    let s = parse(&fixture("llamacpp_smollm2_metrics.prom")).unwrap();
    assert_eq!(
        s,
        Snapshot {
            backend: Backend::Llamacpp,
            running: Some(0.0),
            waiting: Some(0.0),
            cached_tokens: Some(124.0),
            prompt_tokens: Some(36.0),
            generation_tokens: Some(282.0),
            ..Snapshot::default()
        }
    );
}

/// Every capture cut at many points parses or is refused, never panics, and a cut body never
/// reports a value the full body does not.
#[test]
fn every_cut_of_every_capture_is_handled() {
    for name in [
        "vllm_v0.7_aibrix_runtime_doc.prom",
        "vllm_v1_docs_usage_metrics_snippet.prom",
        "sglang_docs_production_metrics.prom",
        "llamacpp_smollm2_metrics.prom",
    ] {
        let text = fixture(name);
        let full = parse(&text).unwrap();
        let mut parsed = 0;
        for cut in (1..text.len())
            .filter(|&i| text.is_char_boundary(i))
            .step_by(3)
        {
            let Ok(s) = parse(&text[..cut]) else { continue };
            parsed += 1;
            let pairs = [
                (s.running, full.running),
                (s.waiting, full.waiting),
                (s.kv_usage, full.kv_usage),
                (s.kv_used_tokens, full.kv_used_tokens),
                (s.prompt_tokens, full.prompt_tokens),
                (s.generation_tokens, full.generation_tokens),
                (s.cached_tokens, full.cached_tokens),
                (s.kv_capacity_tokens, full.kv_capacity_tokens),
            ];
            for (got, want) in pairs {
                if got.is_some() {
                    assert_eq!(got, want, "{name} cut at {cut}");
                }
            }
        }
        assert!(parsed > 0, "{name}: no cut parsed");
    }
}
