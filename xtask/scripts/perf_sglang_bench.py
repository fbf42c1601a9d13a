#!/usr/bin/env python3
"""Run SGLang's Rust benchmark client (`sglang-bench`) as a perf-harness peer.

The client ships inside the PyPI `sglang` wheel as the PyO3 extension
`sglang/srt/rust_extensions/_bench.cpython-3XX-*.so` (exports `PyInit__bench`,
functions `run_argv(argv)` and `run_config(json_str) -> json_str`). This script
loads that .so directly, WITHOUT importing the `sglang` package (which would
need torch & co), so it runs on any python matching the wheel's ABI tag
(sglang==0.5.23 on PyPI: cp311 for python3.11 here).

Install (once):
    python3.11 -m venv target/perf/sglang-venv
    target/perf/sglang-venv/bin/pip install --no-deps sglang==0.5.23
    mkdir -p target/perf/tokenizer/qwen3
    gunzip -c fixtures/tokenizer/qwen3/tokenizer.json.gz > target/perf/tokenizer/qwen3/tokenizer.json
    cp fixtures/tokenizer/qwen3/tokenizer_config.json target/perf/tokenizer/qwen3/

Run:
    python3.11 xtask/scripts/perf_sglang_bench.py \
        --ext target/perf/sglang-venv/lib/python3.11/site-packages/sglang/srt/rust_extensions/_bench.cpython-311-x86_64-linux-gnu.so \
        --tokenizer target/perf/tokenizer/qwen3 \
        --base-url http://127.0.0.1:18080 --model MODEL \
        --concurrency 64 --num-requests 2000 --input-tokens 256 --output-tokens 64

Workload: dataset `random-ids` (token-id sequences decoded with the local
tokenizer, so no ShareGPT download), `random_range_ratio=1.0` so every prompt
is exactly --input-tokens tokens and every request asks for exactly
--output-tokens (the default ratio 0 would draw lengths uniformly in [1, len]),
backend `vllm-chat` (streamed POST /v1/chat/completions with
`max_completion_tokens` + `ignore_eos`), no warm-up request, request rate inf,
closed loop capped at --concurrency in flight.

Process model: one process; the Rust side runs a Tokio multi-thread runtime
with --worker-threads workers (default: available parallelism) plus the
Python main thread. The client's own report table goes to stderr (fd 1 is
redirected during the run); stdout gets exactly ONE JSON line:
    {"completed", "failed", "wall_s", "ttft_*_ms", "itl_*_ms", "e2e_*_ms",
     "output_tokens", "input_tokens", "request_throughput", ...}
Exit status is 0 when the client ran (even with failed requests), else non-zero.
"""

import argparse
import importlib.machinery
import importlib.util
import json
import os
import sys
import tempfile
import time


def load_ext(path):
    # The module name must match the PyInit_ symbol: PyInit__bench -> "_bench".
    name = os.path.basename(path).split(".")[0]
    loader = importlib.machinery.ExtensionFileLoader(name, path)
    spec = importlib.util.spec_from_file_location(name, path, loader=loader)
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


def main():
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--ext", required=True, help="path to _bench.cpython-*.so")
    p.add_argument("--base-url", required=True)
    p.add_argument("--model", required=True)
    p.add_argument("--tokenizer", required=True,
                   help="local dir holding tokenizer.json (no HF Hub access)")
    p.add_argument("--concurrency", type=int, required=True)
    p.add_argument("--num-requests", type=int, required=True)
    p.add_argument("--input-tokens", type=int, default=256)
    p.add_argument("--output-tokens", type=int, default=64)
    p.add_argument("--backend", default="vllm-chat",
                   help="vllm-chat or sglang-oai-chat: both POST /v1/chat/completions")
    p.add_argument("--worker-threads", type=int, default=None,
                   help="Tokio worker threads (client default: available parallelism)")
    p.add_argument("--disable-retokenize", action="store_true",
                   help="skip re-tokenizing generated text (saves client CPU)")
    p.add_argument("--disable-stream", action="store_true")
    p.add_argument("--keep-output", default=None,
                   help="also keep the client's result JSONL (with per-request details) here")
    a = p.parse_args()

    # Never touch the network for tokenizers, whatever the path resolution does.
    os.environ.setdefault("HF_HUB_OFFLINE", "1")
    ext = load_ext(os.path.abspath(a.ext))

    tmpdir = tempfile.mkdtemp(prefix="perf_sglang_bench.")
    out_file = a.keep_output or os.path.join(tmpdir, "result.jsonl")
    cfg = {
        "backend": a.backend,
        "base_url": a.base_url,
        "model": a.model,
        "tokenizer": os.path.abspath(a.tokenizer),
        "dataset_name": "random-ids",
        "num_prompts": a.num_requests,
        "random_input_len": a.input_tokens,
        "random_output_len": a.output_tokens,
        "random_range_ratio": 1.0,
        "request_rate": "inf",
        "max_concurrency": a.concurrency,
        "warmup_requests": 0,
        "ready_check_timeout_sec": 30,
        "disable_tqdm": True,
        "disable_stream": a.disable_stream,
        "disable_retokenize": a.disable_retokenize,
        "output_file": out_file,
        "output_details": True,
        "seed": 42,
    }
    if a.worker_threads is not None:
        cfg["worker_threads"] = a.worker_threads

    # The Rust client prints its table on fd 1; keep stdout for our JSON line.
    sys.stdout.flush()
    saved = os.dup(1)
    os.dup2(2, 1)
    t0 = time.perf_counter()
    try:
        res = json.loads(ext.run_config(json.dumps(cfg)))
    finally:
        wall = time.perf_counter() - t0
        sys.stdout.flush()
        os.dup2(saved, 1)
        os.close(saved)

    errors = res.get("errors") or []
    failed = sum(1 for e in errors if e)
    completed = int(res.get("completed", a.num_requests - failed))
    out_lens = res.get("output_lens") or []
    summary = {
        "peer": "sglang-bench",
        "completed": completed,
        "failed": a.num_requests - completed,
        "failed_with_error": failed,
        "wall_s": res.get("duration"),
        "process_wall_s": round(wall, 4),
        "request_throughput": res.get("request_throughput"),
        "output_throughput": res.get("output_throughput"),
        "input_tokens": res.get("total_input_tokens"),
        "output_tokens": res.get("total_output_tokens"),
        "output_tokens_retokenized": res.get("total_output_tokens_retokenized"),
        "exact_output_len": sum(1 for n in out_lens if n == a.output_tokens) if out_lens else None,
    }
    for metric in ("ttft", "itl", "e2e_latency", "tpot"):
        for stat in ("mean", "median", "p90", "p95", "p99"):
            key = f"{stat}_{metric}_ms"
            if key in res:
                short = "e2e" if metric == "e2e_latency" else metric
                summary[f"{short}_{'p50' if stat == 'median' else stat}_ms"] = res[key]
    if a.keep_output is None:
        try:
            os.remove(out_file)
            os.rmdir(tmpdir)
        except OSError:
            pass
    print(json.dumps(summary), flush=True)


if __name__ == "__main__":
    main()
