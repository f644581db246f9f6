#!/usr/bin/env bash
# Two models behind one easeoff (preset openai: a lane per model), one throttled hard:
# the `openai` SDK, 8 workers on `fast` (its own TPM 140,000, 140-token calls as
# bench/vendor_mock.py counts them: 16.7 calls/s, offered 50/s), alone and then beside
# 8 workers hammering `slow` (TPM 3,500: 25 calls a minute, offered 50/s); both buckets
# start empty. RUNS rounds of the two,
# SECONDS each; prints `fast`'s calls/s beside `slow` over alone, per round and median.
#
#   bench/two_models.sh [SECONDS=30] [RUNS=3]
set -euo pipefail
cd "$(dirname "$0")/.."
source bench/lib.sh
seconds=${1:-30}
runs=${2:-3}
bin=${EASEOFF_BIN:-target/release/easeoff}
venv="${XDG_CACHE_HOME:-$HOME/.cache}/easeoff-bench-sdks"
[ -x "$venv/bin/python" ] || { echo "run bench/dialects.sh once first (it makes $venv)" >&2; exit 1; }
start_work easeoff-two-models

one_run() { # PHASE RUN -> fast's JSON line
  local mock proxy admin
  mock=$(free_port); proxy=$(free_port); admin=$(free_port)
  python3 bench/vendor_mock.py openai "$mock" fill=0 rpm=10000 models=fast:140000,slow:3500 >"$WORK/mock.log" 2>&1 &
  PIDS+=($!)
  wait_listening "$mock" 10 "$!" || { cat "$WORK/mock.log" >&2; exit 1; }
  printf '[server]\nadmin_listen = "127.0.0.1:%s"\n[[upstream]]\nname = "openai"\nlisten = "127.0.0.1:%s"\nurl = "http://127.0.0.1:%s"\npreset = "openai"\n' \
    "$admin" "$proxy" "$mock" >"$WORK/easeoff.toml"
  "$bin" run --config "$WORK/easeoff.toml" >"$WORK/easeoff.log" 2>&1 &
  PIDS+=($!)
  wait_listening "$proxy" 10 "$!" || { cat "$WORK/easeoff.log" >&2; exit 1; }
  local url="http://127.0.0.1:$proxy" slow=""
  if [ "$1" = beside ]; then
    MODEL=slow PROMPT=400 MAX_TOKENS=20 "$venv/bin/python" bench/dialects.py openai "$url" 8 50 "$seconds" slow >"$WORK/slow.json" &
    slow=$!
  fi
  MODEL=fast PROMPT=400 MAX_TOKENS=20 "$venv/bin/python" bench/dialects.py openai "$url" 8 50 "$seconds" fast >"$WORK/fast.json"
  [ -z "$slow" ] || wait "$slow"
  kill "${PIDS[@]}" 2>/dev/null || true
  wait 2>/dev/null || true
  PIDS=()
  python3 -c 'import json,sys; r=json.load(open(sys.argv[1])); r.update(phase=sys.argv[2], run=int(sys.argv[3])); print(json.dumps(r))' \
    "$WORK/fast.json" "$1" "$2"
}

for run in $(seq 1 "$runs"); do
  for phase in alone beside; do
    one_run "$phase" "$run" | tee -a "$WORK/runs.jsonl"
  done
done
python3 - "$WORK/runs.jsonl" "$runs" "$seconds" <<'PY'
import json, statistics, sys
rows = [json.loads(l) for l in open(sys.argv[1])]
rate = {(r["run"], r["phase"]): r["ok"] / r["elapsed"] for r in rows}
errors = {(r["run"], r["phase"]): r["errors"] for r in rows}
runs = sorted({r["run"] for r in rows})
print(f"\n{sys.argv[3]} s rounds, `fast` through easeoff alone and beside `slow` throttled hard; medians of {sys.argv[2]}")
print("| round | fast alone, calls/s | fast beside slow, calls/s | beside / alone | fast's client errors (alone, beside) |")
print("|---|---|---|---|---|")
for run in runs:
    a, b = rate[(run, "alone")], rate[(run, "beside")]
    print(f"| {run} | {a:.2f} | {b:.2f} | {b / a:.3f} | {errors[(run, 'alone')]}, {errors[(run, 'beside')]} |")
ratios = [rate[(r, "beside")] / rate[(r, "alone")] for r in runs]
print(f"| median | {statistics.median(rate[(r, 'alone')] for r in runs):.2f} | {statistics.median(rate[(r, 'beside')] for r in runs):.2f} | {statistics.median(ratios):.3f} | |")
PY
