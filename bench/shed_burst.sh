#!/usr/bin/env bash
# A shed burst against the real binary: `easeoff mock-upstream` taking 5 requests/s
# (DynamoDB-style throttles), easeoff in front with a small queue (max_waiting = 4,
# max_wait = 500ms) already paced at the upstream's rate (constant 200ms, so the burst
# meets sheds, not a controller still learning), and N concurrent boto3 calls in
# standard retry mode (bench/shed_burst.py) once per hint mode; modes js and js-fixed-1s
# run the AWS SDK for JavaScript v3 instead (bench/shed_burst.cjs).
#
#   bench/shed_burst.sh [CALLS] [HINT_MODES...]    (defaults: 100, server none fixed-1s)
#
# The JS SDK is looked for under EASEOFF_E2E_JS (else ~/.cache/easeoff-e2e-js), where
# .ci/run installs it.
# Needs the e2e venv with boto3 (EASEOFF_E2E_VENV, else ~/.cache/easeoff-e2e) and a
# built target/debug/easeoff (EASEOFF_BIN overrides).
# MOCK_BURST sets the mock's bucket size (its default at 5/s is 1: then a request
# that reaches it a fraction of a millisecond early, as the way there varies, is
# throttled).
set -euo pipefail
cd "$(dirname "$0")/.."
source bench/lib.sh
calls=${1:-100}
shift || true
modes=("${@:-server none fixed-1s}")
read -r -a modes <<<"${modes[*]}"
bin=${EASEOFF_BIN:-target/debug/easeoff}
venv=${EASEOFF_E2E_VENV:-${XDG_CACHE_HOME:-$HOME/.cache}/easeoff-e2e}
dir=$(mktemp -d)
pids=()
cleanup() { for p in "${pids[@]}"; do kill "$p" 2>/dev/null || true; done; rm -rf "$dir"; }
trap cleanup EXIT

wait_port() { for _ in $(seq 100); do port_busy "$1" && return; sleep 0.05; done; echo "nothing on $1" >&2; exit 1; }

for mode in "${modes[@]}"; do
  mock=$(free_port)
  proxy=$(free_port)
  "$bin" mock-upstream --listen "127.0.0.1:$mock" --rate 5 ${MOCK_BURST:+--burst "$MOCK_BURST"} --style dynamodb --log-level warn >"$dir/mock.log" 2>&1 &
  pids+=($!)
  cat >"$dir/easeoff.toml" <<TOML
[server]
admin_listen = "127.0.0.1:0"

[[upstream]]
name = "ddb"
listen = "127.0.0.1:$proxy"
url = "http://127.0.0.1:$mock"
preset = "dynamodb"
[upstream.sleeper]
strategy = "constant"
initial_interval = "200ms"
[upstream.queue]
max_waiting = 4
max_wait = "500ms"
TOML
  "$bin" --config "$dir/easeoff.toml" --log-level warn >"$dir/easeoff.log" 2>&1 &
  pids+=($!)
  wait_port "$mock"
  wait_port "$proxy"
  case $mode in
    js | js-*)
      NODE_PATH="${EASEOFF_E2E_JS:-${XDG_CACHE_HOME:-$HOME/.cache}/easeoff-e2e-js}/node_modules" \
        node bench/shed_burst.cjs "http://127.0.0.1:$proxy" "$calls" "$( [ "$mode" = js ] && echo server || echo "${mode#js-}")" ;;
    *) "$venv/bin/python" bench/shed_burst.py "http://127.0.0.1:$proxy" --calls "$calls" --hint "$mode" ;;
  esac
  for p in "${pids[@]}"; do kill "$p" 2>/dev/null || true; wait "$p" 2>/dev/null || true; done
  pids=()
  echo
done
