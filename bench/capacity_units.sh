#!/usr/bin/env bash
# DynamoDB writes of mixed sizes against a table that charges capacity units by item
# size (`easeoff mock-upstream --charge-by-size`): 8 boto3 writer threads (bench/lanes.py
# `mixed`: every fifth item 8 KB, 8 units; the rest 1), for SECONDS, three ways in one
# invocation, alternating, RUNS rounds: boto3's adaptive retry mode straight at the
# table; through EASEOFF_BEFORE (another build, e.g. main's) with the dynamodb preset;
# through EASEOFF_BIN with the dynamodb preset (which paces in capacity units). Prints
# the medians: the share of the table's units used, throttled attempts, lost writes.
#
#   EASEOFF_BEFORE=... bench/capacity_units.sh [SECONDS=30] [RUNS=3] [UNITS_PER_S=200]
set -euo pipefail
cd "$(dirname "$0")/.."
source bench/lib.sh
seconds=${1:-30}
runs=${2:-3}
capacity=${3:-200}
bin=${EASEOFF_BIN:-target/release/easeoff}
before=${EASEOFF_BEFORE:-}
venv=${EASEOFF_E2E_VENV:-${XDG_CACHE_HOME:-$HOME/.cache}/easeoff-e2e}
start_work easeoff-capacity

mock_metric() { # NAME: the mock's sample, summed over its labels
  curl -s "http://127.0.0.1:$mock_admin/metrics" | awk -v n="$1" '$1 ~ "^" n { s += $2 } END { print s + 0 }'
}

one_run() { # SIDE RUN -> one JSON line
  local side=$1 mock proxy admin url mode=standard
  mock=$(free_port); mock_admin=$(free_port)
  "$bin" mock-upstream --listen "127.0.0.1:$mock" --admin "127.0.0.1:$mock_admin" --style dynamodb \
    --rate 100000 --table-rate "t=$capacity" --charge-by-size --log-level warn >"$WORK/mock.log" 2>&1 &
  PIDS+=($!)
  wait_listening "$mock" 10 "$!" || { cat "$WORK/mock.log" >&2; exit 1; }
  wait_listening "$mock_admin" 10 "${PIDS[-1]}"
  url="http://127.0.0.1:$mock"
  if [ "$side" = adaptive ]; then
    mode=adaptive
  else
    local use=$bin
    [ "$side" = before ] && use=$before
    proxy=$(free_port); admin=$(free_port)
    printf '[server]\nadmin_listen = "127.0.0.1:%s"\n[[upstream]]\nname = "up"\nlisten = "127.0.0.1:%s"\nurl = "http://127.0.0.1:%s"\npreset = "dynamodb"\n' \
      "$admin" "$proxy" "$mock" >"$WORK/easeoff.toml"
    "$use" --config "$WORK/easeoff.toml" --log-level warn >"$WORK/easeoff.log" 2>&1 &
    PIDS+=($!)
    wait_listening "$proxy" 10 "$!" || { cat "$WORK/easeoff.log" >&2; exit 1; }
    url="http://127.0.0.1:$proxy"
  fi
  local report
  report=$("$venv/bin/python" bench/lanes.py "$url" --seconds "$seconds" --retry-mode "$mode" mixed:t:8)
  local units ok throttled
  units=$(mock_metric mock_capacity_units_total)
  ok=$(mock_metric 'mock_requests_total{result="ok"')
  throttled=$(mock_metric 'mock_requests_total{result="throttled"')
  kill "${PIDS[@]}" 2>/dev/null || true
  wait 2>/dev/null || true
  PIDS=()
  python3 -c 'import json,sys; r=json.loads(sys.argv[1])["mixed:t:8"]; print(json.dumps(dict(side=sys.argv[2], run=int(sys.argv[3]), per_second=r["per_second"], lost=sum(r["errors"].values()), units=float(sys.argv[4]), ok=int(float(sys.argv[5])), throttled=int(float(sys.argv[6])))))' \
    "$report" "$side" "$2" "$units" "$ok" "$throttled"
}

sides="adaptive"
[ -n "$before" ] && sides="$sides before"
sides="$sides after"
for run in $(seq 1 "$runs"); do
  for side in $sides; do
    one_run "$side" "$run" | tee -a "$WORK/runs.jsonl"
  done
done
python3 - "$WORK/runs.jsonl" "$seconds" "$capacity" "$runs" <<'PY'
import json, statistics, sys
rows = [json.loads(l) for l in open(sys.argv[1])]
seconds, capacity, runs = float(sys.argv[2]), float(sys.argv[3]), sys.argv[4]
names = {"adaptive": "boto3 adaptive, alone", "before": "through easeoff before", "after": "through easeoff"}
print(f"\n{seconds:.0f} s, 8 writer threads, every fifth item 8 KB; a table of {capacity:.0f} write units/s charging by size; medians of {runs}")
print("| side | items/s | of the capacity units | throttled attempts | lost writes | each run: units share, throttled % |")
print("|---|---|---|---|---|---|")
for side in ["adaptive", "before", "after"]:
    rs = [r for r in rows if r["side"] == side]
    if not rs:
        continue
    # The table starts with a burst of a tenth of a second's units.
    share = lambda r: r["units"] / (capacity * seconds + capacity / 10)
    thr = lambda r: 100 * r["throttled"] / max(1, r["ok"] + r["throttled"])
    m = lambda f: statistics.median(f(r) for r in rs)
    each = ", ".join(f"{share(r):.3f} / {thr(r):.2f} %" for r in rs)
    print(f"| {names[side]} | {m(lambda r: r['per_second']):.1f} | {m(share):.3f} | {m(thr):.2f} % | {m(lambda r: r['lost']):.0f} | {each} |")
PY
