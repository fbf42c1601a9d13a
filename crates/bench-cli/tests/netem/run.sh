#!/usr/bin/env bash
# Real network faults between `bench run` and `bench sim` (Linux, root): usage run.sh BENCH_BIN
#
# `bench sim` runs in a network namespace of its own, behind a veth pair with private
# addresses (10.213.N.1 on the host side, 10.213.N.2 in the namespace); `bench run` plays
# against it from the host, through real TCP on a real (virtual) link:
#
#  1. baseline: a small closed-loop plan against the simulator's fixed TTFT/ITL;
#  2. delay: 40 ms added to one direction; TTFT p50 must grow by 40 ms (± 8 ms) and TPOT not;
#  3. jitter (± 10 ms) and 1.5% packet loss: the run finishes and every planned turn has a
#     record (errors, if any, of the recorded kinds);
#  4. the link cut mid-run: the run finishes in bounded time, every planned turn and session
#     is accounted for, the failures are `connect`/`io`/`timeout` errors, and the exit code
#     follows --max-error-rate;
#
# then prints the measured figures. Everything it creates (namespace, veth, route, processes,
# temporary files) goes in a trap on EXIT, even on failure (KEEP=1 keeps the files).
#
# Which direction is delayed, and why TTFT grows by exactly the delay: the impairment applies
# to packets from the host to the namespace (netem on the host-side veth's egress, `root`
# qdisc: what the host sends). TTFT is measured from the moment the request is written to the
# first token, so a request that reaches the server 40 ms later shows 40 ms more TTFT, once.
# Tokens flow the other way, undelayed, so the gaps between them (TPOT) do not change; the
# ACKs the client sends back are delayed, but the sim (TCP_NODELAY) never waits for them: a
# streamed answer is a few hundred bytes, far inside the congestion window of a warm
# connection. Only turns on a reused keep-alive connection count (records without
# `connect_ms`): a turn that opens a connection also waits for its SYN, delayed too, so it
# would see the delay twice. A delay on both directions (or on the namespace side) would add
# it to every token instead, or twice to TTFT.
#
# The tolerance, ±8 ms (20% of the delay): netem's delay itself is exact to well under a
# millisecond; what moves is the difference of two medians of ~40 TTFTs each, measured on a
# shared 2-core machine whose scheduling noise is a few ms (the simulator's 50 ms TTFT is a
# timer, the client and server are processes competing with anything else). ±8 ms still fails
# a delay not applied (0), applied twice (80) or applied to a new connection's handshake as
# well. The pair of runs is measured up to 3 times and passes on the first within tolerance
# (a consistent error fails all three; a neighbour's burst does not fail the check).
#
# Kernels without sch_netem (CONFIG_NET_SCH_NETEM unset, as in some VM images): the same
# impairments come from netfilter instead, when iptables and its NFQUEUE target are there: an
# iptables rule in the namespace queues the packets arriving from the host side (the same
# direction) to delayline.py, which holds each for the delay (± jitter) and drops the lost
# ones. BENCH_NETEM_BACKEND=netem|nfqueue forces one (default auto: netem first). Without
# either, or without root or network namespaces, the script prints `SKIPPED netem: <reason>`
# and exits 0.
set -euo pipefail

BENCH_ARG=${1:?usage: run.sh BENCH_BIN}
HERE=$(cd "$(dirname "$0")" && pwd)

skip() {
  echo "SKIPPED netem: $*"
  exit 0
}
fail() {
  echo "FAILED netem: $*" >&2
  exit 1
}

[ "$(uname -s)" = Linux ] || skip "not Linux"
[ "$(id -u)" -eq 0 ] || skip "not root"
for c in ip tc python3 timeout; do
  command -v "$c" >/dev/null 2>&1 || skip "no $c (apt-get install iproute2 python3 coreutils)"
done
BENCH=$(realpath "$BENCH_ARG")
[ -x "$BENCH" ] || fail "$BENCH_ARG is not an executable"

ID=$$
NS="bench-netem-$ID"
VH="bnh$ID" # host side (interface names have at most 15 characters)
VN="bnn$ID" # namespace side
N=$(((ID % 200) + 20))
while ip -4 route show | grep -q "10\.213\.$N\."; do N=$(((N % 250) + 1)); done
NET="10.213.$N.0/30"
HOST_IP="10.213.$N.1"
SIM_IP="10.213.$N.2"
WORK=$(mktemp -d "${TMPDIR:-/tmp}/bench-netem.XXXXXX")
PIDS=()
DL=""

cleanup() {
  set +e
  for p in "${PIDS[@]}"; do kill "$p" 2>/dev/null; done
  for p in "${PIDS[@]}"; do wait "$p" 2>/dev/null; done
  tc qdisc del dev "$VH" root 2>/dev/null
  ip route del unreachable "$NET" metric 4000 2>/dev/null
  ip link del "$VH" 2>/dev/null
  ip netns del "$NS" 2>/dev/null
  if [ -n "${KEEP:-}" ]; then echo "netem: files kept in $WORK"; else rm -rf "$WORK"; fi
}
trap cleanup EXIT
trap 'exit 130' INT TERM

ip netns add "$NS" 2>/dev/null || skip "ip netns add is not permitted"
ip link add "$VH" type veth peer name "$VN" 2>/dev/null || skip "cannot create a veth pair"
ip link set "$VN" netns "$NS"
ip addr add "$HOST_IP/30" dev "$VH"
ip link set "$VH" up
ip netns exec "$NS" ip addr add "$SIM_IP/30" dev "$VN"
ip netns exec "$NS" ip link set "$VN" up
ip netns exec "$NS" ip link set lo up
# When the link is cut the connected route goes with it: this one then answers "no route"
# at once, and the simulator's address never leaks to the default route.
ip route add unreachable "$NET" metric 4000

BACKEND=${BENCH_NETEM_BACKEND:-auto}
WHY_NO_NETEM=""
if [ "$BACKEND" != nfqueue ]; then
  if WHY_NO_NETEM=$(tc qdisc add dev "$VH" root netem delay 0ms 2>&1); then
    tc qdisc del dev "$VH" root
    BACKEND=netem
  elif [ "$BACKEND" = netem ]; then
    skip "tc qdisc ... netem is not permitted: $WHY_NO_NETEM"
  fi
fi
if [ "$BACKEND" != netem ]; then
  if command -v iptables >/dev/null 2>&1 &&
    ip netns exec "$NS" iptables -w -A INPUT -i "$VN" -j NFQUEUE --queue-num 0 --queue-bypass 2>/dev/null; then
    BACKEND=nfqueue
  else
    skip "tc qdisc ... netem is not permitted (${WHY_NO_NETEM:-forced off}) and the NFQUEUE fallback is unavailable (it needs iptables with the NFQUEUE target: apt-get install iptables)"
  fi
fi

stop_delayline() {
  if [ -n "$DL" ]; then
    kill "$DL" 2>/dev/null || true
    wait "$DL" 2>/dev/null || true
    DL=""
  fi
}

# impair DELAY_MS JITTER_MS LOSS_PERCENT: packets from the host to the namespace.
impair() {
  case "$BACKEND" in
    netem)
      local a="delay ${1}ms"
      [ "$2" = 0 ] || a="$a ${2}ms"
      [ "$3" = 0 ] || a="$a loss ${3}%"
      # shellcheck disable=SC2086
      tc qdisc replace dev "$VH" root netem $a
      ;;
    nfqueue)
      stop_delayline
      # Emptied here, not by the child's redirection: a `ready` left by the previous delay
      # line must not be read as this one's.
      : >"$WORK/delayline.out"
      ip netns exec "$NS" python3 "$HERE/delayline.py" --delay-ms "$1" --jitter-ms "$2" \
        --loss "$(python3 -c "print($3 / 100)")" >>"$WORK/delayline.out" 2>>"$WORK/delayline.err" &
      DL=$!
      PIDS+=("$DL")
      for _ in $(seq 100); do
        grep -q ready "$WORK/delayline.out" 2>/dev/null && return 0
        kill -0 "$DL" 2>/dev/null || fail "delayline.py did not start: $(cat "$WORK/delayline.err")"
        sleep 0.05
      done
      fail "delayline.py did not get ready"
      ;;
  esac
}

unimpair() {
  case "$BACKEND" in
    netem) tc qdisc del dev "$VH" root 2>/dev/null || true ;;
    nfqueue) stop_delayline ;;
  esac
}

# The simulator: fixed 50 ms TTFT, 5 ms between tokens.
ip netns exec "$NS" "$BENCH" sim --host "$SIM_IP" --port 0 --ttft-ms 50 --itl-ms 5 \
  >"$WORK/sim.out" 2>"$WORK/sim.err" &
SIM=$!
PIDS+=("$SIM")
URL=""
for _ in $(seq 200); do
  URL=$(grep -o 'http://[0-9.:]*' "$WORK/sim.out" 2>/dev/null | head -n1 || true)
  [ -n "$URL" ] && break
  kill -0 "$SIM" 2>/dev/null || fail "bench sim did not start: $(cat "$WORK/sim.err")"
  sleep 0.05
done
[ -n "$URL" ] || fail "bench sim printed no URL"
echo "netem: bench sim at $URL in namespace $NS (veth $VH/$VN); impairments by $BACKEND"

# play NAME ARGS...: bench run against the simulator into $WORK/NAME; sets RC and ELAPSED.
play() {
  local name=$1
  shift
  local t0 t1
  t0=$(date +%s%N)
  set +e
  timeout 180 "$BENCH" run --base-url "$URL" --tokenizer none --dataset random --no-gaps \
    --no-metrics -q --run-dir "$WORK/$name" "$@" >"$WORK/$name.out" 2>"$WORK/$name.err"
  RC=$?
  set -e
  t1=$(date +%s%N)
  ELAPSED=$(((t1 - t0) / 1000000))
  [ "$RC" -ne 124 ] || fail "$name: bench run did not finish within 180 s"
}

# stats NAME: one JSON object about $WORK/NAME's records.
stats() {
  python3 - "$WORK/$1" <<'PY'
import json, statistics, sys
d = sys.argv[1]
def lines(f):
    try:
        with open(f"{d}/{f}") as fh:
            return [json.loads(l) for l in fh if l.strip()]
    except FileNotFoundError:
        return []
turns = [t for t in lines("turns.jsonl") if not t.get("superseded")]
ok = [t for t in turns if t["status"] == "ok"]
reused = [t for t in ok if t.get("connect_ms") is None]
kinds = {}
for t in turns:
    if t["status"] != "ok":
        k = t.get("error_kind") or t["status"]
        kinds[k] = kinds.get(k, 0) + 1
planned = next((e.get("turns_planned") for e in lines("events.jsonl") if e.get("event") == "run.started"), None)
med = lambda v: round(statistics.median(v), 2) if v else None
print(json.dumps({
    "planned": planned, "records": len(turns), "ok": len(ok), "reused": len(reused),
    "errors": kinds, "sessions": len(lines("sessions.jsonl")),
    "ttft_p50": med([t["ttft_ms"] for t in reused]),
    "tpot_p50": med([t["tpot_ms"] for t in reused if t.get("tpot_ms") is not None]),
    "e2e_p50": med([t["e2e_ms"] for t in reused]),
}))
PY
}
field() { python3 -c "import json,sys; v=json.loads(sys.argv[1]).get(sys.argv[2]); print('' if v is None else v)" "$1" "$2"; }

PLAN=(-c 2 --num-sessions 4 --turns 10 --output-len 8)
TURNS=40

# 1-2: baseline, then 40 ms of delay; the pair up to 3 times.
DELAY=40
TOL=8
PASSED=""
TRIES=()
for attempt in 1 2 3; do
  unimpair
  play "base$attempt" "${PLAN[@]}" --turn-timeout 10s
  [ "$RC" -eq 0 ] || fail "baseline: exit $RC: $(tail -n3 "$WORK/base$attempt.err")"
  BASE=$(stats "base$attempt")
  [ "$(field "$BASE" ok)" = "$TURNS" ] || fail "baseline: not every turn ok: $BASE"
  impair "$DELAY" 0 0
  play "delay$attempt" "${PLAN[@]}" --turn-timeout 10s
  [ "$RC" -eq 0 ] || fail "delay: exit $RC: $(tail -n3 "$WORK/delay$attempt.err")"
  DELAYED=$(stats "delay$attempt")
  [ "$(field "$DELAYED" ok)" = "$TURNS" ] || fail "delay: not every turn ok: $DELAYED"
  VERDICT=$(python3 - "$BASE" "$DELAYED" "$DELAY" "$TOL" <<'PY'
import json, sys
b, d = json.loads(sys.argv[1]), json.loads(sys.argv[2])
delay, tol = float(sys.argv[3]), float(sys.argv[4])
dt = d["ttft_p50"] - b["ttft_p50"]
dp = d["tpot_p50"] - b["tpot_p50"]
ok = abs(dt - delay) <= tol and abs(dp) <= 2.0 and b["reused"] >= 20 and d["reused"] >= 20
print(f"{'pass' if ok else 'miss'} {dt:.2f} {dp:.2f} {b['ttft_p50']} {d['ttft_p50']} {b['tpot_p50']} {d['tpot_p50']}")
PY
)
  read -r V DTTFT DTPOT BTTFT DLTTFT BTPOT DLTPOT <<<"$VERDICT"
  TRIES+=("attempt $attempt: TTFT p50 $BTTFT -> $DLTTFT ms (+$DTTFT), TPOT p50 $BTPOT -> $DLTPOT ms ($DTPOT)")
  echo "netem: delay ${DELAY} ms, ${TRIES[-1]}"
  if [ "$V" = pass ]; then
    PASSED=1
    break
  fi
done
[ -n "$PASSED" ] || fail "TTFT p50 did not grow by ${DELAY} ± ${TOL} ms (with TPOT within ± 2 ms) in 3 attempts: ${TRIES[*]}"

# 3: jitter and loss. Every planned turn has a record; errors (if any) are recorded kinds.
impair "$DELAY" 10 1.5
play jitter "${PLAN[@]}" --turn-timeout 20s --max-error-rate 1
[ "$RC" -eq 0 ] || fail "jitter and loss: exit $RC with --max-error-rate 1: $(tail -n3 "$WORK/jitter.err")"
JITTER=$(stats jitter)
JITTER_S=$ELAPSED
python3 - "$JITTER" "$TURNS" <<'PY' || fail "jitter and loss: $JITTER"
import json, sys
s, planned = json.loads(sys.argv[1]), int(sys.argv[2])
known = {"connect", "io", "timeout", "incomplete_stream", "malformed_sse", "malformed_json", "http_status", "server_error"}
assert s["planned"] == planned and s["records"] == planned, "a planned turn has no record"
assert s["sessions"] == 4, "a session did not end"
assert set(s["errors"]) <= known, f"unknown error kinds {s['errors']}"
PY
if [ "$BACKEND" = nfqueue ]; then
  stop_delayline
  LOST=$(tail -n1 "$WORK/delayline.err")
else
  LOST=$(tc -s qdisc show dev "$VH" | grep -o 'dropped [0-9]*' | head -n1 || true)
fi
unimpair

# 4: the link cut mid-run (the host side of the veth down, once 10 turns are recorded), with a
# 3 s turn timeout and --max-error-rate 0: the turn in flight times out, later ones cannot
# connect ("no route"), each recorded; the run must end, and exit 1.
CUT_PLAN=(-c 2 --num-sessions 4 --turns 25 --output-len 8)
CUT_TURNS=100
t0=$(date +%s%N)
set +e
timeout 120 "$BENCH" run --base-url "$URL" --tokenizer none --dataset random --no-gaps --no-metrics \
  -q --run-dir "$WORK/cut" "${CUT_PLAN[@]}" --turn-timeout 3s --max-error-rate 0 \
  >"$WORK/cut.out" 2>"$WORK/cut.err" &
CUT=$!
set -e
PIDS+=("$CUT")
for _ in $(seq 600); do
  n=0
  [ -f "$WORK/cut/turns.jsonl" ] && n=$(wc -l <"$WORK/cut/turns.jsonl")
  [ "$n" -ge 10 ] && break
  kill -0 "$CUT" 2>/dev/null || break
  sleep 0.02
done
ip link set "$VH" down
CUT_AT=$(($(date +%s%N) - t0))
set +e
wait "$CUT"
RC=$?
set -e
CUT_S=$((($(date +%s%N) - t0) / 1000000))
[ "$RC" -ne 124 ] || fail "link cut: bench run hung (killed after 120 s)"
[ "$RC" -eq 1 ] || fail "link cut: exit $RC, want 1 (failed turns above --max-error-rate 0): $(tail -n3 "$WORK/cut.err")"
grep -q "above --max-error-rate 0" "$WORK/cut.err" || fail "link cut: stderr does not say why it exits 1: $(tail -n3 "$WORK/cut.err")"
CUTS=$(stats cut)
python3 - "$CUTS" "$CUT_TURNS" "$CUT_S" <<'PY' || fail "link cut: $CUTS"
import json, sys
s, planned, ms = json.loads(sys.argv[1]), int(sys.argv[2]), int(sys.argv[3])
assert s["planned"] == planned and s["records"] == planned, "a planned turn has no record"
assert s["sessions"] == 4, "a session did not end"
assert s["errors"], "no turn failed after the cut"
assert set(s["errors"]) <= {"connect", "io", "timeout"}, f"unexpected error kinds {s['errors']}"
# Bounded: the turns in flight at the cut wait out their 3 s timeout; later ones fail at once.
assert ms < 30000, f"took {ms} ms"
PY

echo "netem: summary ($BACKEND)"
echo "  baseline (sim TTFT 50 ms, ITL 5 ms; ${TURNS} turns, C=2): TTFT p50 $(field "$BASE" ttft_p50) ms, TPOT p50 $(field "$BASE" tpot_p50) ms"
echo "  +${DELAY} ms one way: TTFT p50 $(field "$DELAYED" ttft_p50) ms (+${DTTFT}, want ${DELAY} ± ${TOL}), TPOT p50 $(field "$DELAYED" tpot_p50) ms (${DTPOT}); ${#TRIES[@]} attempt(s)"
echo "  +${DELAY} ± 10 ms, 1.5% loss: $(field "$JITTER" records)/${TURNS} records, ok $(field "$JITTER" ok), errors $(field "$JITTER" errors), TTFT p50 $(field "$JITTER" ttft_p50) ms, ${JITTER_S} ms wall (${LOST})"
echo "  link cut after $((CUT_AT / 1000000)) ms: $(field "$CUTS" records)/${CUT_TURNS} records, ok $(field "$CUTS" ok), errors $(field "$CUTS" errors), $(field "$CUTS" sessions) sessions ended, exit $RC, ${CUT_S} ms wall"
echo "netem: passed"
