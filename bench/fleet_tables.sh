#!/usr/bin/env bash
# Two sidecars with tens of thousands of tables each, end to end: a redis-server, an
# unthrottled `easeoff mock-upstream --style dynamodb`, MEMBERS easeoff processes in
# one fleet (dynamodb preset, `max_lanes = 100000`, the default `metrics_lanes` 32 and
# `sync_interval` 250 ms), and per member bench/tables_writer.py: RATE PutItems a
# second spread over TABLES tables (every table once, in a shuffled order, then at
# random; the members share the tables), and two closed-loop writers on the ordinary
# table `orders`, timed. After WARMUP seconds (every table met by then at the default
# rate), over the SECONDS after, once a second: whether each member is connected to
# Redis (`easeoff_fleet_connected`), and at the end per member: its lanes, its series
# of each fleet family (`easeoff_fleet_members`, `_share_ratio`, `_rate`), its syncs
# (count, mean, the share within `sync_interval`), its sync errors, and the ordinary
# table's p50 and p99; then Redis's commands a second and CPU (% of one core).
#
#   bench/fleet_tables.sh [--members 2] [--tables 30000] [--rate 1000] [--warmup 40]
#                         [--seconds 30]
#
# Needs redis-server, curl and python3. Uses target/release/easeoff (EASEOFF_BIN
# overrides). Every process it starts is stopped on exit.
set -euo pipefail
cd "$(dirname "$0")/.."
source bench/lib.sh
members=2 tables=30000 rate=1000 warmup=40 seconds=30
while [ $# -gt 0 ]; do
  case "$1" in
    --members) members=$2 ;; --tables) tables=$2 ;; --rate) rate=$2 ;;
    --warmup) warmup=$2 ;; --seconds) seconds=$2 ;;
    -h|--help) sed -n '2,19p' "$0"; exit 0 ;;
    *) echo "unknown option $1" >&2; exit 2 ;;
  esac
  shift 2
done
for tool in redis-server redis-cli curl python3; do
  command -v "$tool" >/dev/null || { echo "fleet_tables.sh needs $tool" >&2; exit 2; }
done
bin=${EASEOFF_BIN:-$PWD/target/release/easeoff}
[ -x "$bin" ] || { echo "no $bin: cargo build --release" >&2; exit 2; }
start_work fleet-tables

redis=$(free_port)
redis-server --port "$redis" --bind 127.0.0.1 --save '' --appendonly no >"$WORK/redis.log" 2>&1 &
PIDS+=($!)
wait_listening "$redis" 10 $! || { echo "redis-server did not start" >&2; exit 1; }
mock=$(free_port)
"$bin" mock-upstream --listen "127.0.0.1:$mock" --style dynamodb --rate 1000000 \
  --log-level warn >"$WORK/mock.log" 2>&1 &
PIDS+=($!)
wait_listening "$mock" 10 $! || { echo "the mock did not start" >&2; exit 1; }

listens=() admins=()
for i in $(seq "$members"); do
  listen=$(free_port) admin=$(free_port)
  listens+=("$listen") admins+=("$admin")
  cat >"$WORK/easeoff-$i.toml" <<EOF
[fleet]
redis = "redis://127.0.0.1:$redis/0"
group = "tables"

[server]
admin_listen = "127.0.0.1:$admin"
runtime = "multi-thread"

[[upstream]]
name = "ddb"
listen = "127.0.0.1:$listen"
url = "http://127.0.0.1:$mock"
preset = "dynamodb"

[upstream.lanes]
max_lanes = 100000
EOF
  HOSTNAME="member-$i" "$bin" run --config "$WORK/easeoff-$i.toml" --log-format json \
    --log-level warn >"$WORK/easeoff-$i.log" 2>&1 &
  PIDS+=($!)
  wait_listening "$admin" 10 $! || { echo "member $i did not start" >&2; exit 1; }
done

for i in $(seq "$members"); do
  python3 bench/tables_writer.py "http://127.0.0.1:${listens[i - 1]}" --tables "$tables" \
    --rate "$rate" --seconds $((warmup + seconds)) --measure-from "$warmup" \
    --out "$WORK/orders-$i.txt" >"$WORK/writer-$i.json" &
  PIDS+=($!)
  writers+=($!)
done

metrics() { curl -fs "http://127.0.0.1:${admins[$1]}/metrics" || true; }
# The sync histogram's count, sum and count within 250 ms, and the sync errors.
syncs() {
  awk '$1 == "easeoff_fleet_sync_seconds_count" { c = $2 }
       $1 == "easeoff_fleet_sync_seconds_sum" { s = $2 }
       $1 == "easeoff_fleet_sync_seconds_bucket{le=\"0.25\"}" { w = $2 }
       $1 == "easeoff_fleet_sync_errors_total" { e = $2 }
       END { print c + 0, s + 0, w + 0, e + 0 }'
}
redis_info() {
  redis-cli -p "$redis" INFO everything | tr -d '\r' | awk -F: '
    $1 == "total_commands_processed" { c = $2 } $1 == "used_cpu_sys" { s = $2 }
    $1 == "used_cpu_user" { u = $2 } END { print c, s + u }'
}

sleep "$warmup"
read -r cmds0 cpu0 < <(redis_info)
t0=$(date +%s.%N)
declare -a sync0 disconnected
for i in $(seq 0 $((members - 1))); do
  sync0[i]=$(metrics "$i" | syncs)
  disconnected[i]=0
done
for _ in $(seq "$seconds"); do
  sleep 1
  for i in $(seq 0 $((members - 1))); do
    metrics "$i" | awk '$1 == "easeoff_fleet_connected" && $2 == 1 { up = 1 } END { exit !up }' ||
      disconnected[i]=$((disconnected[i] + 1))
  done
done
read -r cmds1 cpu1 < <(redis_info)
t1=$(date +%s.%N)
for i in $(seq 0 $((members - 1))); do
  page=$(metrics "$i")
  read -r c0 s0 w0 e0 <<<"${sync0[i]}"
  read -r c1 s1 w1 e1 < <(syncs <<<"$page")
  lanes=$(awk '$1 ~ /^easeoff_lanes\{/ { print $2 }' <<<"$page")
  series=$(awk '$1 ~ /^easeoff_fleet_(members|share_ratio|rate)\{/ { sub(/\{.*/, "", $1); n[$1]++ }
    END { printf "members %d share_ratio %d rate %d", n["easeoff_fleet_members"], n["easeoff_fleet_share_ratio"], n["easeoff_fleet_rate"] }' <<<"$page")
  awk -v i=$((i + 1)) -v lanes="$lanes" -v series="$series" -v c="$((${c1%.*} - ${c0%.*}))" \
    -v s="$(awk -v a="$s1" -v b="$s0" 'BEGIN { print a - b }')" -v w="$(awk -v a="$w1" -v b="$w0" 'BEGIN { print a - b }')" \
    -v e="$(awk -v a="$e1" -v b="$e0" 'BEGIN { print a - b }')" -v d="${disconnected[i]}" -v secs="$seconds" 'BEGIN {
      printf "member %d: lanes %s, fleet series: %s; syncs %d (%.1f/s), mean %.1f ms, within 250 ms %.1f %%, sync errors %d; disconnected %d of %d s\n",
        i, lanes, series, c, c / secs, c ? 1000 * s / c : 0, c ? 100 * w / c : 0, e, d, secs }'
done
for w in "${writers[@]}"; do wait "$w" || true; done
for i in $(seq "$members"); do echo "member $i writers: $(cat "$WORK/writer-$i.json")"; done
python3 - "$WORK"/orders-*.txt <<'EOF'
import sys
xs = sorted(float(l) for f in sys.argv[1:] for l in open(f))
pick = lambda p: xs[min(len(xs) - 1, int(p * len(xs)))] if xs else float("nan")
print(f"ordinary table, all members: {len(xs)} requests, p50 {pick(0.5):.2f} ms, p99 {pick(0.99):.2f} ms")
EOF
awk -v c0="$cmds0" -v c1="$cmds1" -v u0="$cpu0" -v u1="$cpu1" -v t0="$t0" -v t1="$t1" 'BEGIN {
  printf "redis: %.0f commands/s, %.1f %% of a core\n", (c1 - c0) / (t1 - t0), 100 * (u1 - u0) / (t1 - t0) }'
for i in $(seq "$members"); do
  echo "member $i fleet log lines:"
  grep -o '"message":"fleet[^"]*"' "$WORK/easeoff-$i.log" | sort | uniq -c | sort -rn | head -5 || true
done
