#!/usr/bin/env bash
# Sharded runs across real network hosts (Linux, root): usage run.sh BENCH_BIN
#
# Five network namespaces: one holds `bench sim` behind a bridge (10.215.N.1), four are the
# client hosts, each on its own veth pair into that bridge with an address of its own
# (10.215.N.10 to .13). The test
#
#  1. plays a plan (24 sessions of 3 turns) as one process at -c 8 from the first host;
#  2. plays it again as 4 shards, one per host (`--shard I/4 -c 2`), started together with
#     `--start-at`;
#  3. merges the shards (`bench merge`) and checks: the merged run has the same sessions and
#     (session, turn) pairs as the single process, every shard recorded the same plan and
#     config digests and its clock offset, each host's own link carried its shard's traffic
#     (the bytes its veth sent grew by at least its requests' size), and `bench status` and
#     `bench report` read the merged directory.
#
# Everything it creates (namespaces, their links, processes, temporary files) goes in a trap on
# EXIT, even on failure (KEEP=1 keeps the files). Without root, network namespaces or veth
# support it prints `SKIPPED shards: <reason>` and exits 0.
set -euo pipefail

BENCH_ARG=${1:?usage: run.sh BENCH_BIN}

skip() {
  echo "SKIPPED shards: $*"
  exit 0
}
fail() {
  echo "FAILED shards: $*" >&2
  exit 1
}

[ "$(uname -s)" = Linux ] || skip "not Linux"
[ "$(id -u)" -eq 0 ] || skip "not root"
for c in ip python3 timeout; do
  command -v "$c" >/dev/null 2>&1 || skip "no $c (apt-get install iproute2 python3 coreutils)"
done
BENCH=$(realpath "$BENCH_ARG")
[ -x "$BENCH" ] || fail "$BENCH_ARG is not an executable"

ID=$$
SIMNS="bench-shsim-$ID"
HOSTS=("bench-sh0-$ID" "bench-sh1-$ID" "bench-sh2-$ID" "bench-sh3-$ID")
N=$(((ID % 200) + 20))
SIM_IP="10.215.$N.1"
WORK=$(mktemp -d "${TMPDIR:-/tmp}/bench-shards.XXXXXX")
PIDS=()

cleanup() {
  set +e
  for p in "${PIDS[@]}"; do kill "$p" 2>/dev/null; done
  for p in "${PIDS[@]}"; do wait "$p" 2>/dev/null; done
  # Deleting a namespace deletes the links in it (and so their veth peers).
  for ns in "${HOSTS[@]}" "$SIMNS"; do ip netns del "$ns" 2>/dev/null; done
  if [ -n "${KEEP:-}" ]; then echo "shards: files kept in $WORK"; else rm -rf "$WORK"; fi
}
trap cleanup EXIT
trap 'exit 130' INT TERM

ip netns add "$SIMNS" 2>/dev/null || skip "ip netns add is not permitted"
ip -n "$SIMNS" link set lo up
ip -n "$SIMNS" link add "br$ID" type bridge 2>/dev/null || skip "cannot create a bridge"
ip -n "$SIMNS" addr add "$SIM_IP/24" dev "br$ID"
ip -n "$SIMNS" link set "br$ID" up
for i in 0 1 2 3; do
  ns=${HOSTS[$i]}
  ip netns add "$ns"
  ip -n "$ns" link set lo up
  # The host's end (vh) in its namespace, the bridge's end (vb) in the simulator's.
  ip link add "vh$i-$ID" netns "$ns" type veth peer name "vb$i-$ID" netns "$SIMNS" 2>/dev/null ||
    skip "cannot create a veth pair between namespaces"
  ip -n "$SIMNS" link set "vb$i-$ID" master "br$ID" up
  ip -n "$ns" addr add "10.215.$N.$((10 + i))/24" dev "vh$i-$ID"
  ip -n "$ns" link set "vh$i-$ID" up
done

ip netns exec "$SIMNS" "$BENCH" sim --host "$SIM_IP" --port 0 --ttft-ms 5 --itl-ms 1 \
  >"$WORK/sim.out" 2>"$WORK/sim.err" &
PIDS+=("$!")
URL=""
for _ in $(seq 200); do
  URL=$(grep -o 'http://[0-9.:]*' "$WORK/sim.out" 2>/dev/null | head -n1 || true)
  [ -n "$URL" ] && break
  kill -0 "${PIDS[0]}" 2>/dev/null || fail "bench sim did not start: $(cat "$WORK/sim.err")"
  sleep 0.05
done
[ -n "$URL" ] || fail "bench sim printed no URL"
# Every host reaches it over its own link.
for i in 0 1 2 3; do
  timeout 30 ip netns exec "${HOSTS[$i]}" "$BENCH" probe --base-url "$URL" >/dev/null 2>&1 ||
    fail "host $i cannot reach $URL"
done
echo "shards: bench sim at $URL in $SIMNS; hosts 10.215.$N.10-13 in ${HOSTS[*]}"

PLAN=(--base-url "$URL" --tokenizer none --dataset random --turns 3 --num-sessions 24 -q)

timeout 120 ip netns exec "${HOSTS[0]}" "$BENCH" run "${PLAN[@]}" -c 8 --run-dir "$WORK/one" \
  >/dev/null 2>"$WORK/one.err" || fail "the single run failed: $(tail -n 3 "$WORK/one.err")"

tx_bytes() { ip netns exec "${HOSTS[$1]}" cat "/sys/class/net/vh$1-$ID/statistics/tx_bytes"; }
declare -a TX0
for i in 0 1 2 3; do TX0[$i]=$(tx_bytes "$i"); done
AT=$(date -u -d '+4 seconds' +%Y-%m-%dT%H:%M:%SZ)
SHARDS=()
for i in 0 1 2 3; do
  timeout 120 ip netns exec "${HOSTS[$i]}" "$BENCH" run "${PLAN[@]}" -c 2 --shard "$i/4" \
    --start-at "$AT" --run-dir "$WORK/shard-$i" >/dev/null 2>"$WORK/shard-$i.err" &
  SHARDS+=("$!")
done
for i in 0 1 2 3; do
  wait "${SHARDS[$i]}" || fail "shard $i failed: $(tail -n 3 "$WORK/shard-$i.err")"
done
for i in 0 1 2 3; do echo "$(($(tx_bytes "$i") - TX0[i]))" >"$WORK/tx-$i"; done

"$BENCH" merge "$WORK"/shard-{0,1,2,3} -o "$WORK/merged" || fail "bench merge refused the shards"
"$BENCH" status "$WORK/merged" >"$WORK/status.txt" || fail "bench status cannot read the merged run"
"$BENCH" report "$WORK/merged" --format json >"$WORK/report.json" ||
  fail "bench report cannot read the merged run"

python3 - "$WORK" "$N" <<'EOF' || fail "the merged run does not match"
import json, sys
work, n = sys.argv[1], sys.argv[2]

def lines(p):
    with open(p) as f:
        return [json.loads(l) for l in f if l.strip()]

def keys(d):
    return {(t["session_id"], t["turn_index"]) for t in lines(f"{work}/{d}/turns.jsonl")}

one, merged = keys("one"), keys("merged")
assert one == merged and len(one) == 72, (len(one), len(merged))
s1 = {s["session_id"] for s in lines(f"{work}/one/sessions.jsonl")}
sm = {s["session_id"] for s in lines(f"{work}/merged/sessions.jsonl")}
assert s1 == sm and len(s1) == 24, (len(s1), len(sm))
digests = set()
for i in range(4):
    rj = json.load(open(f"{work}/shard-{i}/run.json"))
    assert rj["shard"]["index"] == i and rj["shard"]["count"] == 4, rj["shard"]
    assert rj["clock"]["uncertainty_s"] >= 0.5, rj["clock"]
    digests.add((rj["plan_digest"], rj["config_digest"]))
    # This host's link carried its own shard: at least the bytes of its requests' bodies.
    sent = int(open(f"{work}/tx-{i}").read())
    turns = len(lines(f"{work}/shard-{i}/turns.jsonl"))
    assert turns > 0 and sent > turns * 200, (i, sent, turns)
    print(f"shards: host 10.215.{n}.{10 + i}: shard {i}/4, {rj['shard']['sessions']} sessions, "
          f"{turns} turns, {sent} bytes sent on its link, clock offset {rj['clock']['offset_s']:+.2f} s "
          f"± {rj['clock']['uncertainty_s']:.2f}")
assert len(digests) == 1, digests
r = json.load(open(f"{work}/merged/result.json"))
r1 = json.load(open(f"{work}/one/result.json"))
assert r["summary"]["turns_ok"] == r1["summary"]["turns_ok"] == 72, (r["summary"], r1["summary"])
rep = json.load(open(f"{work}/report.json"))
assert rep["summary"]["turns_ok"] == 72
m = json.load(open(f"{work}/merged/run.json"))["merged"]
assert m["count"] == 4 and not m["partial"] and len(m["shards"]) == 4, m
print(f"shards: merged 4 shards: {r['summary']['turns_ok']} turns, TTFT p50 "
      f"{r['overall']['ttft_ms']['p50']:.2f} ms (one process: {r1['overall']['ttft_ms']['p50']:.2f} ms); "
      f"shifts {[round(s['shift_s'], 3) for s in m['shards']]} s")
EOF
echo "shards: passed"
