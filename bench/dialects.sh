#!/usr/bin/env bash
# Vendors' dialects, side by side: the real `openai` and `anthropic` Python SDKs
# (pinned, in a venv under ~/.cache), 16 threads offering 3x a request bucket that
# answers as the vendor does (`easeoff mock-upstream --style openai|anthropic`: the
# vendor's rate-limit headers on every answer; for anthropic also one 529
# overloaded_error in 40), once straight at the mock and once through easeoff with the
# vendor's preset and nothing else, RUNS times each; prints the medians.
#   VENDORS="openai anthropic" bench/dialects.sh [SECONDS=60] [RUNS=3]
set -euo pipefail
cd "$(dirname "$0")/.."
source bench/lib.sh

seconds="${1:-60}"
runs="${2:-3}"
limit=20        # requests/s the mock accepts (its bucket holds a second's worth)
workers=16
offered=$(( 3 * limit ))
bin="${EASEOFF_BIN:-target/release/easeoff}"
[ -x "$bin" ] || { echo "build first: cargo build --release (or set EASEOFF_BIN)" >&2; exit 1; }

vendors="${VENDORS:-openai anthropic}"
pins="openai==1.59.9 anthropic==0.42.0"
venv="${XDG_CACHE_HOME:-$HOME/.cache}/easeoff-bench-sdks"
if [ "$(cat "$venv/.pins" 2>/dev/null)" != "$pins" ]; then
  rm -rf "$venv"
  python3 -m venv "$venv"
  "$venv/bin/pip" install -q $pins
  echo "$pins" >"$venv/.pins"
fi

start_work easeoff-dialects
throttled() { curl -s "http://127.0.0.1:$1/metrics" | awk '/^mock_requests_total\{result="throttled"\}/ {print $2}'; }

one_run() { # VENDOR SIDE -> JSON with the mock's refusals
  local vendor=$1 side=$2 mock mock_admin proxy admin url extra=()
  mock=$(free_port); mock_admin=$(free_port)
  [ "$vendor" = anthropic ] && extra=(--overload-every 40)
  "$bin" mock-upstream --listen "127.0.0.1:$mock" --admin "127.0.0.1:$mock_admin" \
    --rate "$limit" --burst "$limit" --style "$vendor" "${extra[@]}" >"$WORK/mock.log" 2>&1 &
  local mock_pid=$!
  PIDS+=("$mock_pid")
  wait_listening "$mock" 10 "$mock_pid"
  url="http://127.0.0.1:$mock"
  if [ "$side" = easeoff ]; then
    proxy=$(free_port); admin=$(free_port)
    printf '[server]\nadmin_listen = "127.0.0.1:%s"\n[[upstream]]\nname = "%s"\nlisten = "127.0.0.1:%s"\nurl = "http://127.0.0.1:%s"\npreset = "%s"\n' \
      "$admin" "$vendor" "$proxy" "$mock" "$vendor" >"$WORK/easeoff.toml"
    "$bin" run --config "$WORK/easeoff.toml" >"$WORK/easeoff.log" 2>&1 &
    local proxy_pid=$!
    PIDS+=("$proxy_pid")
    wait_listening "$proxy" 10 "$proxy_pid"
    url="http://127.0.0.1:$proxy"
  fi
  local result
  result=$("$venv/bin/python" bench/dialects.py "$vendor" "$url" "$workers" "$offered" "$seconds")
  local refused
  refused=$(throttled "$mock_admin")
  kill "${PIDS[@]}" 2>/dev/null || true
  wait 2>/dev/null || true
  PIDS=()
  echo "$result" | python3 -c "import json,sys; r=json.load(sys.stdin); r['refused']=float('${refused:-0}'); print(json.dumps(r))"
}

for vendor in $vendors; do
  for side in sdk easeoff; do
    for run in $(seq 1 "$runs"); do
      one_run "$vendor" "$side" | tee -a "$WORK/$vendor-$side.jsonl"
    done
  done
done
python3 - "$WORK" "$limit" "$seconds" "$runs" $vendors <<'PY'
import json, statistics, sys
work, limit, seconds, runs, vendors = sys.argv[1], float(sys.argv[2]), sys.argv[3], sys.argv[4], sys.argv[5:]
print(f"\n{seconds} s runs, medians of {runs}; limit {limit:.0f}/s, offered {3*limit:.0f}/s by 16 workers")
print("| side | calls/s | of the limit | client errors | refusals (429s, 529s) | refusals per call | p50 ms | p99 ms |")
print("|---|---|---|---|---|---|---|---|")
for vendor in vendors:
    for side in ["sdk", "easeoff"]:
        rows = [json.loads(l) for l in open(f"{work}/{vendor}-{side}.jsonl")]
        m = lambda f: statistics.median(f(r) for r in rows)
        rate = m(lambda r: r["ok"] / r["elapsed"])
        name = f"{vendor} SDK alone" if side == "sdk" else f"{vendor} SDK through easeoff"
        print(f"| {name} | {rate:.1f} | {100*rate/limit:.0f} % | {m(lambda r: r['errors']):.0f} | {m(lambda r: r['refused']):.0f} | "
              f"{m(lambda r: r['refused'] / max(1, r['ok'] + r['errors'])):.3f} | {1000*m(lambda r: r['p50']):.0f} | {1000*m(lambda r: r['p99']):.0f} |")
PY
