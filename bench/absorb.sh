#!/usr/bin/env bash
# Absorbing throttles with the real binaries: 16 writers with no retry logic of their own
# (h2load, one request at a time per connection) send N requests through easeoff to
# `easeoff mock-upstream`. Reports what the writers saw (status codes) and what the
# upstream saw after the settling time (throttled share of attempts, goodput / capacity).
#
#   bench/absorb.sh [--style dynamodb|http429] [--requests 3000] [--rate 100]
#                   [--burst 20] [--clients 16] [--settle 10] [--runs 1]
#
# Needs h2load (Debian: nghttp2-client) and curl. Builds the release binary if needed;
# every process it starts is stopped on exit.
set -euo pipefail
cd "$(dirname "$0")/.."

style=dynamodb requests=3000 rate=100 burst=20 clients=16 settle=10 runs=1
while [ $# -gt 0 ]; do
  case "$1" in
    --style) style=$2 ;; --requests) requests=$2 ;; --rate) rate=$2 ;;
    --burst) burst=$2 ;; --clients) clients=$2 ;; --settle) settle=$2 ;;
    --runs) runs=$2 ;;
    *) echo "unknown option $1" >&2; exit 2 ;;
  esac
  shift 2
done
for tool in h2load curl; do
  command -v "$tool" >/dev/null || { echo "absorb.sh needs $tool (apt-get install nghttp2-client curl)" >&2; exit 2; }
done
cargo build --release --locked --quiet
bin=$PWD/target/release/easeoff
work=$(mktemp -d)
pids=()
cleanup() {
  for pid in "${pids[@]}"; do kill "$pid" 2>/dev/null || true; done
  wait 2>/dev/null || true
  rm -rf "$work"
}
trap cleanup EXIT

. bench/lib.sh
wait_http() { for _ in $(seq 100); do curl -fs "$1" >/dev/null && return 0; sleep 0.1; done; echo "no answer from $1" >&2; exit 1; }
# One sample of a counter from a /metrics page.
sample() { curl -fs "$1" | awk -v s="$2" '$1 == s { print $2; found=1 } END { if (!found) print 0 }'; }

preset=none
[ "$style" = dynamodb ] && preset=dynamodb
printf '%-4s %-9s %8s %8s %8s %9s %12s %9s %8s\n' run style 2xx 4xx 5xx no-answer throttled% goodput% seconds
for run in $(seq "$runs"); do
  mock_port=$(free_port) mock_admin=$(free_port) proxy_port=$(free_port) admin_port=$(free_port)
  "$bin" mock-upstream --listen "127.0.0.1:$mock_port" --admin "127.0.0.1:$mock_admin" \
    --rate "$rate" --burst "$burst" --style "$style" --log-format json >"$work/mock.log" 2>&1 &
  pids+=($!)
  cat >"$work/easeoff.toml" <<EOF
[server]
admin_listen = "127.0.0.1:$admin_port"

[[upstream]]
name = "mock"
listen = "127.0.0.1:$proxy_port"
url = "http://127.0.0.1:$mock_port"
preset = "$preset"
EOF
  "$bin" run --config "$work/easeoff.toml" --log-format json --log-level warn >"$work/easeoff.log" 2>&1 &
  pids+=($!)
  wait_http "http://127.0.0.1:$mock_admin/metrics"
  wait_http "http://127.0.0.1:$admin_port/readyz"

  mock_metrics="http://127.0.0.1:$mock_admin/metrics"
  started=$(date +%s.%N)
  h2load --h1 -n "$requests" -c "$clients" -m 1 "http://127.0.0.1:$proxy_port/" >"$work/h2load.txt" 2>&1 &
  load=$!
  pids+=("$load")
  sleep "$settle"
  ok0=$(sample "$mock_metrics" 'mock_requests_total{result="ok"}')
  th0=$(sample "$mock_metrics" 'mock_requests_total{result="throttled"}')
  t0=$(date +%s.%N)
  wait "$load"
  t1=$(date +%s.%N)
  ok1=$(sample "$mock_metrics" 'mock_requests_total{result="ok"}')
  th1=$(sample "$mock_metrics" 'mock_requests_total{result="throttled"}')
  read -r s2 s4 s5 < <(awk '/^status codes:/ { gsub(",", ""); print $3, $7, $9 }' "$work/h2load.txt")
  # Transport errors and timeouts: requests that got no HTTP answer at all.
  read -r errored timedout < <(awk '/^requests:/ { gsub(",", ""); print $12, $14 }' "$work/h2load.txt")
  awk -v run="$run" -v style="$style" -v s2="$s2" -v s4="$s4" -v s5="$s5" \
      -v errors=$((errored + timedout)) -v ok0="$ok0" -v ok1="$ok1" -v th0="$th0" -v th1="$th1" \
      -v t0="$t0" -v t1="$t1" -v started="$started" -v rate="$rate" 'BEGIN {
    ok = ok1 - ok0; th = th1 - th0
    printf "%-4s %-9s %8d %8d %8d %9d %11.1f%% %8.1f%% %8.1f\n", run, style, s2, s4, s5, errors,
      100 * th / (ok + th), 100 * ok / ((t1 - t0) * rate), t1 - started
  }'
  admin_metrics=$(curl -fs "http://127.0.0.1:$admin_port/metrics")
  echo "$admin_metrics" | grep -E '^easeoff_(retries_total|retry_budget_exhausted_total|requests_total)\{' \
    | grep -v ' 0$' | sed 's/^/     /'
  for pid in "${pids[@]}"; do kill "$pid" 2>/dev/null || true; done
  wait 2>/dev/null || true
  pids=()
done
