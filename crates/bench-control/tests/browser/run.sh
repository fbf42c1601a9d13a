#!/usr/bin/env bash
# Real-browser end-to-end test of the `bench serve` dashboard.
#
#   bash crates/bench-control/tests/browser/run.sh [path/to/bench]     (default target/debug/bench)
#
# Installs Debian's chromium when /usr/bin/chromium is missing (as root, like CI), installs
# playwright-core from package-lock.json into target/browser-test/ (never into the source tree),
# starts `bench serve` on a free port with a fresh runs directory, runs dashboard.mjs against it
# and always stops the server. Exit status 0 only when every check passed. The screenshot goes
# to target/browser-test/dashboard.png (dashboard-failure.png on a failure).
# BENCH_DASHBOARD_ASSETS=crates/bench-control/assets makes the browser get the dashboard's files
# from that folder instead of the binary's embedded copies (trying edits without a rebuild);
# BENCH_BROWSER_TOKEN=SECRET runs the server with --token and the page with #token=SECRET.
set -euo pipefail

here="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
root="$(cd "$here/../../../.." && pwd)"
cd "$root"

bin="${1:-target/debug/bench}"
case "$bin" in /*) ;; *) bin="$root/$bin" ;; esac
if [[ ! -x "$bin" ]]; then
  echo "run.sh: no bench binary at $bin (cargo build -p bench-cli first)" >&2
  exit 1
fi

work="$root/target/browser-test"
mkdir -p "$work"

# 1. Chromium, from Debian (a browser build of playwright's own cannot be downloaded here).
if [[ ! -x /usr/bin/chromium ]]; then
  echo "run.sh: installing Debian's chromium"
  apt-get update -qq
  DEBIAN_FRONTEND=noninteractive apt-get install -y -qq chromium >/dev/null
fi
/usr/bin/chromium --version 2>/dev/null | head -n1 || true

# 2. playwright-core, pinned by package-lock.json, under target/ (ignored by git).
cp "$here/package.json" "$here/package-lock.json" "$work/"
if ! cmp -s "$here/package-lock.json" "$work/node_modules/.installed-lock.json" 2>/dev/null; then
  (cd "$work" && npm ci --no-audit --no-fund --loglevel=error)
  cp "$here/package-lock.json" "$work/node_modules/.installed-lock.json"
fi
# Node resolves `import 'playwright-core'` from the script's own folder: run a copy beside node_modules.
cp "$here/dashboard.mjs" "$work/dashboard.mjs"

# 3. bench serve on a free loopback port, with runs in a fresh directory.
runs="$(mktemp -d "${TMPDIR:-/tmp}/bench-browser-runs.XXXXXX")"
log="$work/serve.log"
: >"$log"
server_pid=""
cleanup() {
  local status=$?
  if [[ -n "$server_pid" ]] && kill -0 "$server_pid" 2>/dev/null; then
    kill "$server_pid" 2>/dev/null || true
    for _ in $(seq 1 50); do kill -0 "$server_pid" 2>/dev/null || break; sleep 0.1; done
    kill -9 "$server_pid" 2>/dev/null || true
    wait "$server_pid" 2>/dev/null || true
  fi
  if [[ $status -ne 0 && -s "$log" ]]; then
    echo "--- bench serve stderr (last 40 lines) ---"
    tail -n 40 "$log"
  fi
  rm -rf "$runs"
  exit "$status"
}
trap cleanup EXIT
trap 'exit 130' INT TERM

# No token unless BENCH_BROWSER_TOKEN asks for one (then the page gets it as #token=…); a
# BENCH_SERVE_TOKEN the environment might carry is not passed on (bench serve reads it).
token_args=()
if [[ -n "${BENCH_BROWSER_TOKEN:-}" ]]; then token_args=(--token "$BENCH_BROWSER_TOKEN"); fi
env -u BENCH_SERVE_TOKEN "$bin" serve --bind 127.0.0.1:0 --runs-dir "$runs" "${token_args[@]}" 2>"$log" &
server_pid=$!

url=""
for _ in $(seq 1 150); do
  line="$(grep -m1 -o 'bench serve: listening on http://[^ ]*' "$log" 2>/dev/null || true)"
  if [[ -n "$line" ]]; then
    url="${line#bench serve: listening on }"
    break
  fi
  if ! kill -0 "$server_pid" 2>/dev/null; then
    echo "run.sh: bench serve exited before it listened" >&2
    exit 1
  fi
  sleep 0.1
done
if [[ -z "$url" ]]; then
  echo "run.sh: bench serve printed no 'listening on' line within 15 s" >&2
  exit 1
fi
echo "run.sh: bench serve at $url (runs in $runs)"

# 4. The browser test, with a hard stop beyond its own 120 s timeout.
timeout -k 5 150 node "$work/dashboard.mjs" --url "$url" --out "$work" \
  ${BENCH_DASHBOARD_ASSETS:+--assets "$BENCH_DASHBOARD_ASSETS"} ${BENCH_BROWSER_TOKEN:+--token "$BENCH_BROWSER_TOKEN"}
