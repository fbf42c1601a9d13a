#!/usr/bin/env bash
# Install the peer benchmark clients for the perf harness under target/perf/
# (git-ignored). Needs only PyPI and crates.io. Idempotent: re-running skips
# what is already there. Usage: bash xtask/scripts/perf_install_peers.sh [abench|sglang|oha|tokenizer]...
#   abench    -> target/perf/abench-venv     agentic-bench 0.2.0 (+ tokenizers), python3.11
#   sglang    -> target/perf/sglang-venv     sglang 0.5.23 wheel, --no-deps (only the _bench .so is used)
#   tokenizer -> target/perf/tokenizer/qwen3 tokenizer.json unpacked from fixtures/ (sglang-bench needs it)
#   oha       -> target/perf/oha/bin/oha     oha 1.16.0 (cargo install: minutes, once; ~20 min at -j1 on 2 busy cores)
# Env: PERF_DIR (default target/perf), PYTHON311 (default: $(pyenv root)/versions/3.11.7/bin/python3.11, else python3.11).
set -euo pipefail
ROOT="$(cd "$(dirname "$0")/../.." && pwd)"
PERF="${PERF_DIR:-$ROOT/target/perf}"
mkdir -p "$PERF"
PY="${PYTHON311:-}"
if [ -z "$PY" ]; then
  PY="$(pyenv root 2>/dev/null)/versions/3.11.7/bin/python3.11"
  [ -x "$PY" ] || PY="$(command -v python3.11)"
fi
what=("$@"); [ ${#what[@]} -eq 0 ] && what=(tokenizer abench sglang oha)
for w in "${what[@]}"; do
  case "$w" in
    tokenizer)
      d="$PERF/tokenizer/qwen3"; mkdir -p "$d"
      [ -s "$d/tokenizer.json" ] || gunzip -c "$ROOT/fixtures/tokenizer/qwen3/tokenizer.json.gz" > "$d/tokenizer.json"
      cp "$ROOT/fixtures/tokenizer/qwen3/tokenizer_config.json" "$d/" ;;
    abench)
      [ -x "$PERF/abench-venv/bin/python" ] || "$PY" -m venv "$PERF/abench-venv"
      "$PERF/abench-venv/bin/pip" install -q -r "$ROOT/xtask/scripts/perf_abench_requirements.txt" ;;
    sglang)
      [ -x "$PERF/sglang-venv/bin/python" ] || "$PY" -m venv "$PERF/sglang-venv"
      "$PERF/sglang-venv/bin/pip" install -q --no-deps sglang==0.5.23
      ls "$PERF"/sglang-venv/lib/python3.11/site-packages/sglang/srt/rust_extensions/_bench.cpython-311-*.so ;;
    oha)
      [ -x "$PERF/oha/bin/oha" ] || cargo install oha --version 1.16.0 --locked -j2 --root "$PERF/oha"
      "$PERF/oha/bin/oha" --version ;;
    *) echo "unknown peer: $w" >&2; exit 2 ;;
  esac
done
