#!/usr/bin/env bash
# Real-browser test of the HTML report (`bench report --format html`).
#
#   bash crates/bench-report/tests/browser/run.sh [path/to/bench]     (default target/debug/bench)
#
# Runs a short multi-turn run (the bundled sample dataset) against the embedded simulator with a
# /metrics scrape every second into target/browser-report/run, renders it with
# `bench report --format html`, and opens the page in Debian's Chromium through playwright-core
# (report.mjs): no request but the file itself, the verdict at the top, all nine charts drawn.
# Installs chromium when /usr/bin/chromium is missing (as root, like CI) and playwright-core from
# the dashboard test's package-lock.json into target/browser-test/ (one install for both browser
# tests, never into the source tree). Exit status 0 only when every check passed; the screenshot
# is target/browser-report/report.png.
# BENCH_REPORT_HTML=FILE skips the run and checks FILE instead (e.g. a page written by
# `BENCH_HTML_DEV_DIR=target/browser-report cargo test -p bench-report --test it html`);
# BENCH_SWEEP_HTML=FILE also checks a sweep's page (its three charts; dev-sweep.html there).
set -euo pipefail

here="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
root="$(cd "$here/../../../.." && pwd)"
cd "$root"

bin="${1:-target/debug/bench}"
case "$bin" in /*) ;; *) bin="$root/$bin" ;; esac
if [[ -z "${BENCH_REPORT_HTML:-}" && ! -x "$bin" ]]; then
  echo "run.sh: no bench binary at $bin (cargo build -p bench-cli first)" >&2
  exit 1
fi

work="$root/target/browser-test"
out="$root/target/browser-report"
mkdir -p "$work" "$out"

# 1. Chromium, from Debian (a browser build of playwright's own cannot be downloaded here).
if [[ ! -x /usr/bin/chromium ]]; then
  echo "run.sh: installing Debian's chromium"
  apt-get update -qq
  DEBIAN_FRONTEND=noninteractive apt-get install -y -qq chromium >/dev/null
fi
/usr/bin/chromium --version 2>/dev/null | head -n1 || true

# 2. playwright-core, pinned by the dashboard test's package-lock.json, under target/ (shared
#    with crates/bench-control/tests/browser/run.sh: whichever runs first installs it).
lock_dir="$root/crates/bench-control/tests/browser"
cp "$lock_dir/package.json" "$lock_dir/package-lock.json" "$work/"
if ! cmp -s "$lock_dir/package-lock.json" "$work/node_modules/.installed-lock.json" 2>/dev/null; then
  (cd "$work" && npm ci --no-audit --no-fund --loglevel=error)
  cp "$lock_dir/package-lock.json" "$work/node_modules/.installed-lock.json"
fi
# Node resolves `import 'playwright-core'` from the script's own folder: run a copy beside node_modules.
cp "$here/report.mjs" "$work/report.mjs"

# 3. The run and its report.
report="${BENCH_REPORT_HTML:-$out/report.html}"
if [[ -z "${BENCH_REPORT_HTML:-}" ]]; then
  rm -rf "$out/run" "$report"
  # 24 sample sessions (8 of them six turns with tool waits) at C = 6 for 20 s, scraped every
  # second: every chart has data, and the run takes about 25 s.
  echo "run.sh: bench run against the embedded simulator → $out/run"
  timeout -k 5 120 "$bin" run --run-dir "$out/run" --metrics-interval 1s \
    --dataset sample --num-sessions 24 -c 6 --duration 20s --gap-scale 0.3 \
    --no-progress-bar >"$out/run.log" 2>&1 || {
    status=$?
    echo "run.sh: bench run failed (exit $status); its output:" >&2
    tail -n 40 "$out/run.log" >&2
    exit 1
  }
  timeout -k 5 60 "$bin" report "$out/run" --format html -o "$report"
fi

# 4. The browser test, with a hard stop beyond its own 60 s timeout.
timeout -k 5 90 node "$work/report.mjs" --file "$report" --out "$out"
if [[ -n "${BENCH_SWEEP_HTML:-}" ]]; then
  timeout -k 5 90 node "$work/report.mjs" --file "$BENCH_SWEEP_HTML" --out "$out" --kind sweep
fi
