#!/usr/bin/env bash
# Concurrency limits, side by side in one invocation: upstreams that refuse past a
# number of requests in flight (not a rate), each client's workers calling in a loop
# for SECONDS from the first call, once straight at the upstream and once through
# easeoff; RUNS rounds, the sides alternating; prints the medians
# (bench/concurrency_table.py).
#   SCENARIOS="tgi ollama github-concurrent github-fleet" bench/concurrency.sh [SECONDS=30] [RUNS=3]
# tgi        bench/model_server.py as TGI: 8 slots (--max-concurrent-requests), a 429
#            at once past them; calls take 0.25 to 1.65 s (the output length drawn
#            uniformly, seeded). 24 workers of the `openai` SDK, its retries on.
# ollama     the same as Ollama: 8 slots (OLLAMA_NUM_PARALLEL) and OLLAMA_QUEUE (8)
#            calls waiting for one (OLLAMA_MAX_QUEUE), a 503 past them.
# github-concurrent  bench/vendor_mock.py github: 100 requests of one token in flight
#            at most (GH_CONCURRENT), each admitted call taking GH_LATENCY (0.25 s),
#            so concurrency binds at 400 calls/s; the points and hourly limits are off
#            (points=0, limit 10,000,000), which alone would bind first at these
#            rates. GH_WORKERS (150) workers of GitHub's documented retry loop
#            (bench/concurrency_client.py github). A refusal is 403 with the
#            secondary-limit message, and retry-after GH_RETRY_AFTER (none: absent,
#            so the documented client waits a minute; or whole seconds).
# github-fleet  the same mock, one token, behind 4 sidecars, each with its own client
#            of FLEET_WORKERS (40) workers; easeoff sides share through a
#            redis-server ([fleet], as bench/fleet.sh writes it). The mock never lets
#            more than the limit in: its refusals count the fleet's tries past it.
#            FLEET_WORKERS may list one count per sidecar ("70,50,30,10"): a fleet
#            whose members want different shares of the limit.
# SIDES (default "sdk easeoff"): sdk the clients straight at the mock; easeoff through
# EASEOFF_BIN (target/release/easeoff) with preset "model-server" (MODEL_PRESET) or
# "github" and EASEOFF_EXTRA (default: max_in_flight = "learn") in the [[upstream]]
# table; main through EASEOFF_BEFORE, an older build: preset "github" for the GitHub
# scenarios, no preset for the model servers, and no extra keys. KEEP=1 keeps the work
# directory (configs, logs, JSON lines, the mock's counts). Needs python3 and curl, and
# redis-server for github-fleet through easeoff; the clients run in the SDK venv
# (sdk_venv, bench/lib.sh). The mocks' self-tests: bench/model_server_test.py,
# bench/vendor_mock_test.py; this script's: bench/concurrency_test.py.
set -euo pipefail
cd "$(dirname "$0")/.."
source bench/lib.sh

seconds="${1:-30}"
runs="${2:-3}"
scenarios="${SCENARIOS:-tgi ollama github-concurrent github-fleet}"
sides="${SIDES:-sdk easeoff}"
extra="${EASEOFF_EXTRA-max_in_flight = \"learn\"}"
model_preset="${MODEL_PRESET:-model-server}"
ollama_queue="${OLLAMA_QUEUE:-8}"
gh_concurrent="${GH_CONCURRENT:-100}"
gh_latency="${GH_LATENCY:-0.25}"
gh_retry_after="${GH_RETRY_AFTER:-none}"
gh_workers="${GH_WORKERS:-150}"
fleet_workers="${FLEET_WORKERS:-40}"
bin="${EASEOFF_BIN:-target/release/easeoff}"
for side in $sides; do
  case $side in
    sdk) ;;
    easeoff) [ -x "$bin" ] || { echo "build first: cargo build --release (or set EASEOFF_BIN)" >&2; exit 1; } ;;
    main) [ -x "${EASEOFF_BEFORE:-}" ] || { echo "SIDES has main: set EASEOFF_BEFORE to an easeoff binary" >&2; exit 1; } ;;
    *) echo "unknown side $side (sdk, easeoff, main)" >&2; exit 2 ;;
  esac
done
case " $scenarios " in *" github-fleet "*)
  [ "$sides" = sdk ] || command -v redis-server >/dev/null || { echo "github-fleet needs redis-server (apt-get install redis-server)" >&2; exit 2; } ;;
esac
sdk_venv
start_work easeoff-concurrency
[ -z "${KEEP:-}" ] || trap 'echo "kept $WORK" >&2; for p in ${PIDS[@]+"${PIDS[@]}"}; do kill "$p" 2>/dev/null || true; done' EXIT

# Several listeners are drawn before any binds (a sidecar's proxy and admin ports):
# a port is handed out once per invocation.
fresh_port() {
  local p
  while :; do
    p=$(free_port)
    grep -qx "$p" "$WORK/ports" 2>/dev/null && continue
    echo "$p" >>"$WORK/ports"
    echo "$p"
    return
  done
}

# scenario -> "mock-script style preset workers clients limit mock-options"
setup() {
  local gh="points=0 limit=10000000 concurrent=$gh_concurrent latency=$gh_latency concurrent_retry_after=$gh_retry_after"
  case $1 in
    tgi) echo "model_server tgi $model_preset 24 1 8 slots=8 seed=1" ;;
    ollama) echo "model_server ollama $model_preset 24 1 8 slots=8 queue=$ollama_queue seed=1" ;;
    github-concurrent) echo "vendor_mock github github $gh_workers 1 $gh_concurrent $gh" ;;
    github-fleet) echo "vendor_mock github github $fleet_workers 4 $gh_concurrent $gh" ;;
    *) echo "unknown scenario $1" >&2; exit 2 ;;
  esac
}

start_easeoff() { # NAME MOCK-PORT SIDE PRESET FLEET-SECTION UPSTREAM -> proxy port
  local proxy admin use=$bin preset_line="preset = \"$4\"" more=$extra
  proxy=$(fresh_port); admin=$(fresh_port)
  if [ "$3" = main ]; then
    # An older build knows neither the new keys nor the model-server preset.
    use=$EASEOFF_BEFORE more=""
    [ "$4" = github ] || preset_line=""
  fi
  {
    [ -z "$5" ] || printf '%s\n\n' "$5"
    printf '[server]\nadmin_listen = "127.0.0.1:%s"\n\n[[upstream]]\nname = "%s"\nlisten = "127.0.0.1:%s"\nurl = "http://127.0.0.1:%s"\n' \
      "$admin" "$6" "$proxy" "$2"
    [ -z "$preset_line" ] || echo "$preset_line"
    [ -z "$more" ] || echo "$more"
  } >"$WORK/$1.toml"
  HOSTNAME="$1" "$use" run --config "$WORK/$1.toml" >"$WORK/$1.log" 2>&1 &
  # Called in a command substitution: the parent's PIDS never sees this one.
  echo $! >>"$WORK/easeoff.pids"
  wait_listening "$proxy" 10 "$!" || { cat "$WORK/$1.toml" "$WORK/$1.log" >&2; exit 1; }
  echo "$proxy"
}

each() { # LIST N -> the Nth of a comma-separated list, or the list if it is one
  local list
  IFS=, read -r -a list <<<"$1"
  if [ "${#list[@]}" -gt 1 ]; then echo "${list[$(($2 - 1))]}"; else echo "$1"; fi
}

one_run() { # SCENARIO SIDE RUN -> one JSON line per client
  local script style preset workers nclients limit options mock kind=openai
  read -r script style preset workers nclients limit options <<<"$(setup "$1")"
  [ "$style" = github ] && kind=github
  mock=$(fresh_port)
  # shellcheck disable=SC2086 # the options are separate words
  python3 "bench/$script.py" "$style" "$mock" $options >"$WORK/mock.log" 2>&1 &
  PIDS+=($!)
  wait_listening "$mock" 10 "$!" || { cat "$WORK/mock.log" >&2; exit 1; }
  local fleet="" redis
  if [ "$nclients" -gt 1 ] && [ "$2" != sdk ]; then
    redis=$(fresh_port)
    redis-server --port "$redis" --bind 127.0.0.1 --save '' --appendonly no >"$WORK/redis.log" 2>&1 &
    PIDS+=($!)
    wait_listening "$redis" 10 "$!" || { cat "$WORK/redis.log" >&2; exit 1; }
    fleet=$(printf '[fleet]\nredis = "redis://127.0.0.1:%s/0"\ngroup = "bench"' "$redis")
  fi
  local pids=() c url
  for c in $(seq 1 "$nclients"); do
    url="http://127.0.0.1:$mock"
    [ "$2" = sdk ] || url="http://127.0.0.1:$(start_easeoff "$1-$2-c$c" "$mock" "$2" "$preset" "$fleet" "$style")"
    "$venv/bin/python" bench/concurrency_client.py "$kind" "$url" "$(each "$workers" "$c")" "$seconds" "c$c" >"$WORK/client-$c.json" &
    pids+=($!)
  done
  wait "${pids[@]}"
  local counts
  counts=$(curl -s "http://127.0.0.1:$mock/__counts")
  echo "$counts" >"$WORK/counts-$1-$2-$3.json"
  # shellcheck disable=SC2046 # one pid a word
  kill "${PIDS[@]}" $(cat "$WORK/easeoff.pids" 2>/dev/null) 2>/dev/null || true
  rm -f "$WORK/easeoff.pids"
  wait 2>/dev/null || true
  PIDS=()
  for c in $(seq 1 "$nclients"); do
    # The mock's refusal times (refused_at) stay in $WORK/counts-SCENARIO-SIDE-RUN.json.
    python3 -c 'import json,sys; r=json.load(open(sys.argv[1])); m=json.loads(sys.argv[2]); [m.pop(k, None) for k in ("refused_at", "first_at")]; r.update(mock=m, scenario=sys.argv[3], side=sys.argv[4], run=int(sys.argv[5]), client=sys.argv[6], limit=int(sys.argv[7]), workers=int(sys.argv[8])); print(json.dumps(r))' \
      "$WORK/client-$c.json" "$counts" "$1" "$2" "$3" "c$c" "$limit" "$(each "$workers" "$c")"
  done
}

for scenario in $scenarios; do
  for run in $(seq 1 "$runs"); do
    for side in $sides; do
      one_run "$scenario" "$side" "$run" | tee -a "$WORK/$scenario-$side.jsonl"
    done
  done
done
# shellcheck disable=SC2086 # one scenario a word
python3 bench/concurrency_table.py "$WORK" "$seconds" "$runs" $scenarios
