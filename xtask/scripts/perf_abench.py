#!/usr/bin/env python3
"""Run agentic-bench (`python -m abench run --dataset-name random`) as a perf-harness peer.

Runs abench IN THIS PROCESS (no subprocess, so the harness's /proc CPU sample
covers it) with a single-turn random workload, then prints ONE JSON line on
stdout; abench's own console report goes to stderr.

Install (once):
    python3.11 -m venv target/perf/abench-venv
    target/perf/abench-venv/bin/pip install agentic-bench==0.2.0
    # optional, only for --tokenizer (exact-length prompts):
    target/perf/abench-venv/bin/pip install tokenizers

Run (use the venv's python, not the pyenv shim):
    target/perf/abench-venv/bin/python xtask/scripts/perf_abench.py \
        --base-url http://127.0.0.1:18080 --model bench-sim \
        --concurrency 64 --num-requests 2000 --input-tokens 256 --output-tokens 64

Equivalent bare command line (what this wrapper passes to abench):
    python -m abench run --dataset-name random --base-url URL --model NAME \
        --backend openai --max-concurrency C --num-sessions N --turns 1 \
        --input-increment 256 --output-len 64 --system-prompt-len 0 \
        --no-gaps --gap-policy zero --warmup-requests 0 --metrics-interval 0 \
        --progress-interval 0 --disable-tqdm --ready-check-timeout-sec 30 \
        --output-file FILE.jsonl
abench always sends `max_completion_tokens` + `ignore_eos: true`, streaming
with `stream_options.include_usage` (unless --disable-stream).

Tokenizer: abench resolves one via transformers.AutoTokenizer (a local dir, or
an HF Hub id -> network!) and falls back to tiktoken, then to chars/4. With
neither installed (the default venv above) prompts are sized by chars/4:
`--input-increment 256` becomes ~6 repeats of a 150-char block (~190 Qwen3
tokens). `--tokenizer PATH` (tokenizer.json, .json.gz, or a dir holding one)
plugs a `tokenizers`-based encoder in instead (exact 256-token prompts; abench
then also counts tokens on a default ThreadPoolExecutor, i.e. extra threads).

Output keys: completed, failed, wall_s (abench: first dispatch -> last
completion), process_wall_s, ttft_p50/p90/p99_ms and e2e_p50/p99_ms over all
OK turns, output_tokens (server usage), input_tokens_mean, exact_output_len.
"""

import argparse
import contextlib
import gzip
import json
import os
import sys
import tempfile
import time


class _TokShim:
    """The one method abench calls on a tokenizer: encode(text) -> sequence."""

    def __init__(self, path):
        from tokenizers import Tokenizer

        if os.path.isdir(path):
            cand = [os.path.join(path, f) for f in ("tokenizer.json", "tokenizer.json.gz")]
            path = next(p for p in cand if os.path.exists(p))
        if path.endswith(".gz"):
            with gzip.open(path, "rt", encoding="utf-8") as f:
                self._tok = Tokenizer.from_str(f.read())
        else:
            self._tok = Tokenizer.from_file(path)

    def encode(self, text):
        return self._tok.encode(text, add_special_tokens=False).ids


def _pct(xs, q):
    if not xs:
        return None
    xs = sorted(xs)
    k = (len(xs) - 1) * q
    lo = int(k)
    hi = min(lo + 1, len(xs) - 1)
    return xs[lo] + (xs[hi] - xs[lo]) * (k - lo)


def main():
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--base-url", required=True)
    p.add_argument("--model", required=True)
    p.add_argument("--concurrency", type=int, required=True)
    p.add_argument("--num-requests", type=int, required=True)
    p.add_argument("--input-tokens", type=int, default=256)
    p.add_argument("--output-tokens", type=int, default=64)
    p.add_argument("--tokenizer", default=None,
                   help="tokenizer.json(.gz) or dir; needs `pip install tokenizers`")
    p.add_argument("--disable-stream", action="store_true")
    p.add_argument("--keep-output", default=None,
                   help="keep abench's result JSONL (per-turn details) at this path")
    a = p.parse_args()

    os.environ.setdefault("HF_HUB_OFFLINE", "1")
    import abench.cli
    import abench.runner

    tok = _TokShim(a.tokenizer) if a.tokenizer else None
    # Skip abench's resolution chain (transformers / Hub / tiktoken) entirely.
    abench.runner.load_tokenizer = lambda *args, **kw: tok

    tmpdir = tempfile.mkdtemp(prefix="perf_abench.")
    out_file = a.keep_output or os.path.join(tmpdir, "result.jsonl")
    if os.path.exists(out_file):
        os.remove(out_file)  # abench appends
    argv = [
        "abench", "run", "--dataset-name", "random",
        "--base-url", a.base_url, "--model", a.model, "--backend", "openai",
        "--max-concurrency", str(a.concurrency),
        "--num-sessions", str(a.num_requests), "--turns", "1",
        "--input-increment", str(a.input_tokens),
        "--output-len", str(a.output_tokens),
        "--system-prompt-len", "0", "--no-gaps", "--gap-policy", "zero",
        "--warmup-requests", "0", "--metrics-interval", "0",
        "--progress-interval", "0", "--disable-tqdm",
        "--ready-check-timeout-sec", "30",
        "--output-file", out_file,
    ]
    if a.disable_stream:
        argv.append("--disable-stream")

    sys.argv = argv
    t0 = time.perf_counter()
    with contextlib.redirect_stdout(sys.stderr):
        abench.cli.main()
    wall = time.perf_counter() - t0

    with open(out_file) as f:
        rec = json.loads(f.readline())
    turns = [t for s in rec.get("sessions", []) for t in s["turns"]]
    ok = [t for t in turns if t["status"] == "ok"]
    m = rec["metrics"]
    ttft = [t["ttft"] * 1000.0 for t in ok]
    e2e = [t["latency"] * 1000.0 for t in ok]
    summary = {
        "peer": "abench",
        "completed": len(ok),
        "failed": a.num_requests - len(ok),
        "wall_s": m.get("wall_duration_s"),
        "process_wall_s": round(wall, 4),
        "request_throughput": m.get("turns_throughput"),
        "output_tokens": sum(t["output_len"] for t in ok),
        "input_tokens_mean": (sum(t["input_len"] for t in ok) / len(ok)) if ok else None,
        "exact_output_len": sum(1 for t in ok if t["output_len"] == a.output_tokens),
        "ttft_p50_ms": _pct(ttft, 0.5),
        "ttft_p90_ms": _pct(ttft, 0.9),
        "ttft_p99_ms": _pct(ttft, 0.99),
        "e2e_p50_ms": _pct(e2e, 0.5),
        "e2e_p99_ms": _pct(e2e, 0.99),
        "errors_sample": sorted({(t.get("error") or "")[:160] for t in turns if t["status"] != "ok"})[:3],
    }
    if a.keep_output is None:
        with contextlib.suppress(OSError):
            os.remove(out_file)
            os.rmdir(tmpdir)
    print(json.dumps(summary), flush=True)


if __name__ == "__main__":
    main()
