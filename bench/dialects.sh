#!/usr/bin/env bash
# The OpenAI dialect, side by side: the real `openai` Python SDK (pinned, in a venv
# under ~/.cache) with WORKERS threads offering 3x an OpenAI-style request bucket
# (`easeoff mock-upstream --style openai`: the x-ratelimit-*-requests headers on every
# answer, 429 with retry-after-ms), once straight at the mock and once through easeoff
# (config/openai.toml's preset), RUNS times each; prints the medians.
#   bench/dialects.sh [SECONDS=60] [RUNS=3]
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

pins="openai==1.59.9"
venv="${XDG_CACHE_HOME:-$HOME/.cache}/easeoff-bench-openai"
if [ "$(cat "$venv/.pins" 2>/dev/null)" != "$pins" ]; then
  rm -rf "$venv"
  python3 -m venv "$venv"
  "$venv/bin/pip" install -q $pins
  echo "$pins" >"$venv/.pins"
fi

start_work easeoff-dialects
throttled() { curl -s "http://127.0.0.1:$1/metrics" | awk '/^mock_requests_total\{result="throttled"\}/ {print $2}'; }

one_run() { # SIDE -> JSON with the mock's refusals
  local side=$1 mock mock_admin proxy admin url
  mock=$(free_port); mock_admin=$(free_port)
  "$bin" mock-upstream --listen "127.0.0.1:$mock" --admin "127.0.0.1:$mock_admin" \
    --rate "$limit" --burst "$limit" --style openai >"$WORK/mock.log" 2>&1 &
  local mock_pid=$!
  PIDS+=("$mock_pid")
  wait_listening "$mock" 10 "$mock_pid"
  url="http://127.0.0.1:$mock/v1"
  if [ "$side" = easeoff ]; then
    proxy=$(free_port); admin=$(free_port)
    printf '[server]\nadmin_listen = "127.0.0.1:%s"\n[[upstream]]\nname = "openai"\nlisten = "127.0.0.1:%s"\nurl = "http://127.0.0.1:%s"\npreset = "openai"\n' \
      "$admin" "$proxy" "$mock" >"$WORK/easeoff.toml"
    "$bin" run --config "$WORK/easeoff.toml" >"$WORK/easeoff.log" 2>&1 &
    local proxy_pid=$!
    PIDS+=("$proxy_pid")
    wait_listening "$proxy" 10 "$proxy_pid"
    url="http://127.0.0.1:$proxy/v1"
  fi
  local result
  result=$("$venv/bin/python" bench/dialects.py "$url" "$workers" "$offered" "$seconds")
  local refused
  refused=$(throttled "$mock_admin")
  kill "${PIDS[@]}" 2>/dev/null || true
  wait 2>/dev/null || true
  PIDS=()
  echo "$result" | python3 -c "import json,sys; r=json.load(sys.stdin); r['refused']=float('${refused:-0}'); print(json.dumps(r))"
}

for side in sdk easeoff; do
  for run in $(seq 1 "$runs"); do
    one_run "$side" | tee -a "$WORK/$side.jsonl"
  done
done
python3 - "$WORK" "$limit" "$seconds" <<'PY'
import json, statistics, sys
work, limit, seconds = sys.argv[1], float(sys.argv[2]), sys.argv[3]
print(f"\n{seconds} s runs, medians of {sum(1 for _ in open(work + '/sdk.jsonl'))}; limit {limit:.0f}/s, offered {3*limit:.0f}/s by 16 workers")
print("| side | calls/s | of the limit | client errors | refusals (429s) | refusals per call | p50 ms | p99 ms |")
print("|---|---|---|---|---|---|---|---|")
for side in ["sdk", "easeoff"]:
    rows = [json.loads(l) for l in open(f"{work}/{side}.jsonl")]
    m = lambda f: statistics.median(f(r) for r in rows)
    rate = m(lambda r: r["ok"] / r["elapsed"])
    name = "openai SDK alone" if side == "sdk" else "openai SDK through easeoff"
    print(f"| {name} | {rate:.1f} | {100*rate/limit:.0f} % | {m(lambda r: r['errors']):.0f} | {m(lambda r: r['refused']):.0f} | "
          f"{m(lambda r: r['refused'] / max(1, r['ok'] + r['errors'])):.3f} | {1000*m(lambda r: r['p50']):.0f} | {1000*m(lambda r: r['p99']):.0f} |")
PY
