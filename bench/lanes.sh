#!/usr/bin/env bash
# Lanes against the real binary: `easeoff mock-upstream` with per-table and per-key
# capacity (DynamoDB-style throttles carrying ThrottlingReasons), easeoff in front with
# the dynamodb preset's defaults, and boto3 writers and readers (bench/lanes.py). Each
# scenario runs twice, the same traffic alone and beside a throttled neighbour:
#
#   tables     8 writers on `fast` (500/s) alone, then beside 8 on `slow` (20/s)
#   readwrite  8 readers of `t` (reads 500/s) alone, then beside 8 writers (writes 20/s)
#   hotkey     8 writers on new keys of `t` (500/s) alone, then beside 4 on one key (10/s)
#   grpc       method B at 10 calls/s alone, then while 4 callers hammer method A,
#              which always answers RESOURCE_EXHAUSTED (curl, h2c)
#
#   bench/lanes.sh [SECONDS] [SCENARIOS...]      (defaults: 20, all four)
#
# Needs the e2e venv with boto3 (EASEOFF_E2E_VENV, else ~/.cache/easeoff-e2e) and a
# built easeoff (EASEOFF_BIN, else target/release/easeoff). EASEOFF_EXTRA is appended to
# the upstream's table (e.g. a [upstream.sleeper] section) to try other settings.
set -euo pipefail
cd "$(dirname "$0")/.."
source bench/lib.sh
seconds=${1:-20}
shift || true
scenarios=("${@:-tables readwrite hotkey grpc}")
read -r -a scenarios <<<"${scenarios[*]}"
bin=${EASEOFF_BIN:-target/release/easeoff}
venv=${EASEOFF_E2E_VENV:-${XDG_CACHE_HOME:-$HOME/.cache}/easeoff-e2e}
dir=$(mktemp -d)
pids=()
cleanup() { for p in "${pids[@]}"; do kill "$p" 2>/dev/null || true; done; rm -rf "$dir"; }
trap cleanup EXIT
wait_port() { for _ in $(seq 200); do port_busy "$1" && return; sleep 0.05; done; echo "nothing on $1" >&2; exit 1; }

# start MOCK_ARGS... : a mock and an easeoff in front of it; sets $proxy, $mock_admin, $admin.
start() {
  for p in "${pids[@]}"; do kill "$p" 2>/dev/null || true; done
  pids=()
  local mock preset=$1
  shift
  mock=$(free_port); mock_admin=$(free_port); proxy=$(free_port); admin=$(free_port)
  "$bin" mock-upstream --listen "127.0.0.1:$mock" --admin "127.0.0.1:$mock_admin" "$@" --log-level warn >"$dir/mock.log" 2>&1 &
  pids+=($!)
  cat >"$dir/easeoff.toml" <<TOML
[server]
admin_listen = "127.0.0.1:$admin"

[[upstream]]
name = "up"
listen = "127.0.0.1:$proxy"
url = "http://127.0.0.1:$mock"
preset = "$preset"
${EASEOFF_EXTRA:-}
TOML
  "$bin" --config "$dir/easeoff.toml" --log-level warn >"$dir/easeoff.log" 2>&1 &
  pids+=($!)
  wait_port "$mock"; wait_port "$proxy"; wait_port "$admin"
}

# mock_count TABLE ACCESS RESULT: the mock's count so far.
mock_count() {
  curl -s "http://127.0.0.1:$mock_admin/metrics" |
    awk -v t="$1" -v a="$2" -v r="$3" '$1 ~ /^mock_table_requests_total/ && index($1, "table=\"" t "\"") && index($1, "access=\"" a "\"") && index($1, "result=\"" r "\"") { s += $2 } END { print s + 0 }'
}

# run GROUPS...: boto3 groups for $seconds; prints their JSON report.
run() { "$venv/bin/python" bench/lanes.py "http://127.0.0.1:$proxy" --seconds "$seconds" "$@"; }

rate() { python3 -c 'import json,sys; print(json.loads(sys.argv[1])[sys.argv[2]]["per_second"])' "$1" "$2"; }
errs() { python3 -c 'import json,sys; r=json.loads(sys.argv[1]); print(sum(sum(g["errors"].values()) for g in r.values()))' "$1"; }
ratio() { python3 -c "import sys; a,b=float(sys.argv[1]),float(sys.argv[2]); print(f'{a/b:.3f}' if b else 'n/a')" "$1" "$2"; }

# throttled_share TABLE ACCESS BEFORE_OK BEFORE_THROTTLED: throttled attempts / attempts since.
throttled_share() {
  local ok th
  ok=$(( $(mock_count "$1" "$2" ok) - $3 )); th=$(( $(mock_count "$1" "$2" throttled) - $4 ))
  python3 -c "import sys; o,t=int(sys.argv[1]),int(sys.argv[2]); print(f'{100*t/max(o+t,1):.2f} % ({t} of {o+t})')" "$ok" "$th"
}

two_phase() { # NAME MOCKARGS -- ALONE_GROUP -- NEIGHBOUR_GROUP NEIGHBOUR_TABLE NEIGHBOUR_ACCESS NEIGHBOUR_CAPACITY
  local name=$1 alone=$2 neighbour=$3 ntable=$4 naccess=$5 ncap=$6
  shift 6
  start dynamodb --style dynamodb --rate 100000 "$@"
  local a b ok0 th0
  a=$(run "$alone")
  start dynamodb --style dynamodb --rate 100000 "$@"
  ok0=$(mock_count "$ntable" "$naccess" ok); th0=$(mock_count "$ntable" "$naccess" throttled)
  b=$(run "$alone" "$neighbour")
  echo "== $name ($seconds s per phase)"
  echo "alone:          $a"
  echo "with neighbour: $b"
  echo "$alone: $(rate "$a" "$alone")/s alone, $(rate "$b" "$alone")/s beside the neighbour: ratio $(ratio "$(rate "$b" "$alone")" "$(rate "$a" "$alone")")"
  echo "$neighbour: $(rate "$b" "$neighbour")/s of $ncap/s: $(ratio "$(rate "$b" "$neighbour")" "$ncap"); throttled attempts $(throttled_share "$ntable" "$naccess" "$ok0" "$th0")"
  echo "client errors: $(errs "$a") alone, $(errs "$b") with neighbour"
  echo "easeoff lanes: $(curl -s "http://127.0.0.1:$admin/metrics" | grep -E '^easeoff_lane_interval_seconds' | tr '\n' ' ')"
}

grpc_phase() { # SECONDS_HAMMER: B at 10/s for $seconds, with or without A hammered
  local hammer=$1 out=$dir/b.txt hpids=()
  : >"$out"
  if [ "$hammer" = yes ]; then
    for _ in 1 2 3 4; do
      ( while :; do curl -s -o /dev/null --http2-prior-knowledge -X POST -H 'content-type: application/grpc' "http://127.0.0.1:$proxy/pkg.Svc/A"; done ) &
      hpids+=($!)
    done
  fi
  local end=$(( $(date +%s%N) + seconds * 1000000000 )) next
  next=$(date +%s%N)
  while [ "$(date +%s%N)" -lt "$end" ]; do
    curl -s -o /dev/null --http2-prior-knowledge -X POST -H 'content-type: application/grpc' -w '%{time_total}\n' "http://127.0.0.1:$proxy/pkg.Svc/B" >>"$out"
    next=$(( next + 100000000 ))
    local now; now=$(date +%s%N)
    [ "$now" -lt "$next" ] && sleep "$(python3 -c "print(($next-$now)/1e9)")"
  done
  for p in "${hpids[@]}"; do kill "$p" 2>/dev/null || true; done
  wait "${hpids[@]}" 2>/dev/null || true
  python3 - "$out" "$seconds" <<'PY'
import statistics, sys
t = [float(x) for x in open(sys.argv[1]) if x.strip()]
print(f"{len(t)/float(sys.argv[2]):.2f} calls/s, p50 {1000*statistics.median(t):.2f} ms")
PY
}

for s in "${scenarios[@]}"; do
  case $s in
    tables) two_phase tables put:fast:8 put:slow:8 slow write 20 --table-rate fast=500 --table-rate slow=20 ;;
    readwrite) two_phase readwrite get:t:8 put:t:8 t write 20 --table-rate t:read=500 --table-rate t:write=20 ;;
    hotkey) two_phase hotkey put:t:8 hot:t:4 t write 10 --table-rate t=500 --key-rate 10 ;;
    grpc)
      start grpc --style grpc --rate 100000 --throttle-path /pkg.Svc/A
      echo "== grpc ($seconds s per phase)"
      echo "B alone:         $(grpc_phase no)"
      echo "B beside A:      $(grpc_phase yes)"
      echo "A's lane: $(curl -s "http://127.0.0.1:$admin/metrics" | grep -E '^easeoff_lane_interval_seconds' | tr '\n' ' ')" ;;
    *) echo "unknown scenario $s" >&2; exit 2 ;;
  esac
done
