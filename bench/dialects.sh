#!/usr/bin/env bash
# Vendors' dialects, side by side in one invocation: a vendor's client, 16 workers
# offering 3x the binding limit for SECONDS from the first call, once straight at an
# upstream that rate-limits as the vendor documents (bench/vendor_mock.py) and once
# through easeoff with the vendor's `preset` and nothing else; RUNS rounds, the two
# sides alternating; prints the medians.
#   SCENARIOS="openai anthropic github shared" bench/dialects.sh [SECONDS=60] [RUNS=3]
# openai     the `openai` SDK; RPM 6000 and TPM 22800, each a bucket holding a minute's
#            worth refilled continuously; 19 tokens a call as the mock counts them (a
#            15-token prompt by its word-piece rule, not characters / 4, plus max_tokens
#            4), so the TPM binds at 20 calls/s, and an idle account starts with 1,200
#            calls' worth.
# openai-dry the same, the buckets empty at the start (an account already at its limit).
# openai-other  openai-dry with other=0.1: traffic on the same key that easeoff does not
#            see takes a tenth of every refill (binding: 18/s).
# anthropic  the `anthropic` SDK; 1,200 requests a minute (binding: 20/s), one 529
#            overloaded_error in 40.
# anthropic-dry  the same, the buckets empty at the start.
# github     a careful GitHub client (httpx); 5,000 an hour primary, a secondary limit
#            of 900 points a minute, a GET 1 point (binding: 15/s).
# shared     two easeoff instances in front of one GitHub quota (600 per 30 s window,
#            binding: 20/s together), 16 workers each; no client alone.
# plain      a plain HTTP API (`preset = "none"`) refilling 1 request every 50 ms (20/s,
#            a bucket of 1, empty at the start), 429 with Retry-After in whole seconds
#            (RFC 9110: 1 for a 50 ms wait); a careful client (httpx) that waits a
#            Retry-After, else 50 ms, 3 retries at most.
# plain-exact  the same with a decimal Retry-After (0.05: not standard).
# plain-blind  the same with no Retry-After at all.
# openai-shift     the `openai` SDK against an account already at its limit (TPM
#            140,000, both buckets empty), 400-character prompts and max_tokens 20
#            (140 tokens a call as the mock counts them: 16.7 calls/s) that turn 6x
#            longer 20 s in (700 tokens: 3.3 calls/s); offered 50 calls/s. Run it for 45 s.
# openai-shift-blind  openai-shift with no x-ratelimit-* headers (only retry-after on
#            a refusal): what the pacer learns from refusals alone.
# anthropic-shift  the same with the `anthropic` SDK against separate input (113,000
#            a minute, binding: 113 input tokens a call, 16.7 calls/s, then 673: 2.8
#            calls/s) and output (40,000) token limits, no 529s.
# SIDES="sdk main easeoff" adds a side through EASEOFF_BEFORE (another build, e.g.
# main's), so before and after run in one invocation; tables of the shift scenarios
# come from bench/cost_table.py.
set -euo pipefail
cd "$(dirname "$0")/.."
source bench/lib.sh

seconds="${1:-60}"
runs="${2:-3}"
workers=16
bin="${EASEOFF_BIN:-target/release/easeoff}"
[ -x "$bin" ] || { echo "build first: cargo build --release (or set EASEOFF_BIN)" >&2; exit 1; }

scenarios="${SCENARIOS:-openai anthropic github shared}"
sdk_venv

start_work easeoff-dialects

# scenario -> "vendor preset binding-calls/s mock-options"
setup() {
  case $1 in
    openai) echo "openai openai 20 rpm=6000 tpm=22800" ;;
    openai-dry) echo "openai openai 20 rpm=6000 tpm=22800 fill=0" ;;
    openai-other) echo "openai openai 18 rpm=6000 tpm=22800 fill=0 other=0.1" ;;
    anthropic) echo "anthropic anthropic 20 rpm=1200 overload_every=40" ;;
    anthropic-dry) echo "anthropic anthropic 20 rpm=1200 overload_every=40 fill=0" ;;
    github) echo "github github 15 limit=5000 window=3600 points=900" ;;
    shared) echo "github github 20 limit=600 window=30 points=0" ;;
    plain) echo "plain none 20 rate=20 tick=0.05 retry_after=whole fill=0" ;;
    plain-exact) echo "plain none 20 rate=20 tick=0.05 retry_after=exact fill=0" ;;
    plain-blind) echo "plain none 20 rate=20 tick=0.05 retry_after=none fill=0" ;;
    openai-shift) echo "openai openai 16.7 rpm=10000 tpm=140000 fill=0" ;;
    openai-shift-blind) echo "openai openai 16.7 rpm=10000 tpm=140000 fill=0 quota_headers=0" ;;
    anthropic-shift) echo "anthropic anthropic 16.7 rpm=10000 itpm=113000 otpm=40000 fill=0 overload_every=0" ;;
    *) echo "unknown scenario $1" >&2; exit 2 ;;
  esac
}

start_easeoff() { # NAME PRESET MOCK-PORT [BIN] -> proxy port
  local proxy admin bin="${4:-$bin}"
  proxy=$(free_port); admin=$(free_port)
  printf '[server]\nadmin_listen = "127.0.0.1:%s"\n[[upstream]]\nname = "%s"\nlisten = "127.0.0.1:%s"\nurl = "http://127.0.0.1:%s"\npreset = "%s"\n' \
    "$admin" "$2" "$proxy" "$3" "$2" >"$WORK/$1.toml"
  "$bin" run --config "$WORK/$1.toml" >"$WORK/$1.log" 2>&1 &
  # Called in a command substitution: the parent's PIDS never sees this one.
  echo $! >>"$WORK/easeoff.pids"
  PIDS+=($!)
  wait_listening "$proxy" 10 "$!" || { cat "$WORK/$1.log" >&2; exit 1; }
  echo "$proxy"
}

one_run() { # SCENARIO SIDE RUN -> one JSON line per client
  local vendor preset binding options mock url
  read -r vendor preset binding options <<<"$(setup "$1")"
  mock=$(free_port)
  # shellcheck disable=SC2086 # the options are separate words
  python3 bench/vendor_mock.py "$vendor" "$mock" $options >"$WORK/mock.log" 2>&1 &
  PIDS+=($!)
  wait_listening "$mock" 10 "$!" || { cat "$WORK/mock.log" >&2; exit 1; }
  local offered clients=(a)
  offered=$(python3 -c "print(round(3 * $binding))")
  local envs=()
  case $1 in *-shift*) envs=(PROMPT=400 MAX_TOKENS=20 SHIFT=20:6) ;; esac
  [ "$1" = shared ] && { clients=(a b); offered=$(( 3 * binding / 2 )); }
  local pids=() c
  for c in "${clients[@]}"; do
    url="http://127.0.0.1:$mock"
    [ "$2" = easeoff ] && url="http://127.0.0.1:$(start_easeoff "$c" "$preset" "$mock")"
    [ "$2" = main ] && url="http://127.0.0.1:$(start_easeoff "$c" "$preset" "$mock" "$EASEOFF_BEFORE")"
    env "${envs[@]}" "$venv/bin/python" bench/dialects.py "$vendor" "$url" "$workers" "$offered" "$seconds" "$c" \
      >"$WORK/client-$c.json" &
    pids+=($!)
  done
  wait "${pids[@]}"
  local counts
  counts=$(curl -s "http://127.0.0.1:$mock/__counts")
  # shellcheck disable=SC2046 # one pid a word
  kill "${PIDS[@]}" $(cat "$WORK/easeoff.pids" 2>/dev/null) 2>/dev/null || true
  rm -f "$WORK/easeoff.pids"
  wait 2>/dev/null || true
  PIDS=()
  for c in "${clients[@]}"; do
    python3 -c 'import json,sys; r=json.load(open(sys.argv[1])); r.update(mock=json.loads(sys.argv[2]), client=sys.argv[3], run=int(sys.argv[4]), binding=float(sys.argv[5])); print(json.dumps(r))' \
      "$WORK/client-$c.json" "$counts" "$c" "$3" "$binding"
  done
}

for scenario in $scenarios; do
  sides="${SIDES:-sdk easeoff}"
  [ "$scenario" = shared ] && sides=easeoff
  for run in $(seq 1 "$runs"); do
    for side in $sides; do
      one_run "$scenario" "$side" "$run" | tee -a "$WORK/$scenario-$side.jsonl"
    done
  done
done
steady=() shifts=()
for scenario in $scenarios; do
  case $scenario in *-shift*) shifts+=("$scenario") ;; *) steady+=("$scenario") ;; esac
done
[ ${#steady[@]} -eq 0 ] || python3 bench/dialects_table.py "$WORK" "$seconds" "$runs" "${steady[@]}"
[ ${#shifts[@]} -eq 0 ] || python3 bench/cost_table.py "$WORK" "$seconds" "$runs" "${shifts[@]}"
