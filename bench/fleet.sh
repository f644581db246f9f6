#!/usr/bin/env bash
# A fleet of sidecars against one throttled bucket: N easeoff processes, each with its
# own closed-loop writers (h2load, one request at a time per connection), all
# forwarding to one `easeoff mock-upstream --rate RATE`, first each on its own
# ("independent"), then sharing through a redis-server ("fleet"). After a warm-up,
# reports over the measured window: goodput / capacity and throttled attempts (what
# the bucket saw), Jain's fairness index over the members' goodput, the members'
# rates, and the writers' errors (answers other than 2xx, or none).
#
#   bench/fleet.sh [--members "1 4 8 16"] [--modes "independent fleet"] [--rate 100]
#                  [--clients 4] [--light 0] [--light-rate 5] [--warmup 10]
#                  [--seconds 20] [--runs 1] [--fault KILL:RESTART] [--fault-kind kill|oom]
#                  [--svg FILE]
#
# --light K: the first K members' writers send LIGHT_RATE requests/s in all instead of
# as fast as they can (unequal demand). --fault 10:20 kills redis 10 s into the
# measured window and starts it again, empty, at 20 s (fleet mode only), and reports
# goodput before, during and after the outage; it also samples every member's
# successes once a second and draws them (bench/fleet_svg.py: one line per member, the
# outage shaded) into FILE (default target/fleet-fault.svg). --fault-kind oom keeps
# redis running but out of memory instead (`CONFIG SET maxmemory 1`: it answers and
# refuses every write) from KILL to RESTART, and counts each member's fleet log lines.
# For the usual fault run:
#   bench/fleet.sh --members 16 --modes fleet --seconds 60 --fault 20:40
# Mode "cluster" shares through a 3-master Redis Cluster instead (redis_mode =
# "cluster", seeded with one node); --migrate S moves the lane's slot, key included,
# to another master S seconds into the measured window:
#   bench/fleet.sh --members 8 --modes cluster --seconds 20 --migrate 10
# Needs h2load (nghttp2-client), curl
# and redis-server. Uses target/release/easeoff (EASEOFF_BIN overrides; it is built
# if missing); every process it starts is stopped on exit.
set -euo pipefail
cd "$(dirname "$0")/.."

members_list="1 4 8 16" modes="independent fleet" rate=100 clients=4 light=0 light_rate=5
warmup=10 seconds=20 runs=1 fault="" fault_kind=kill svg=target/fleet-fault.svg migrate=""
while [ $# -gt 0 ]; do
  case "$1" in
    --members) members_list=$2 ;; --modes) modes=$2 ;; --rate) rate=$2 ;;
    --clients) clients=$2 ;; --light) light=$2 ;; --light-rate) light_rate=$2 ;;
    --warmup) warmup=$2 ;; --seconds) seconds=$2 ;; --runs) runs=$2 ;; --fault) fault=$2 ;; --svg) svg=$2 ;;
    --fault-kind) fault_kind=$2 ;; --migrate) migrate=$2 ;;
    *) echo "unknown option $1" >&2; exit 2 ;;
  esac
  shift 2
done
for tool in h2load curl redis-server; do
  command -v "$tool" >/dev/null || { echo "fleet.sh needs $tool (apt-get install nghttp2-client curl redis-server)" >&2; exit 2; }
done
bin=${EASEOFF_BIN:-$PWD/target/release/easeoff}
[ -x "$bin" ] || { cargo build --release --locked --quiet; bin=$PWD/target/release/easeoff; }
work=$(mktemp -d)
pids=()
stop_all() {
  for pid in "${pids[@]}"; do kill "$pid" 2>/dev/null || true; done
  wait 2>/dev/null || true
  pids=()
}
trap 'stop_all; [ -n "${KEEP:-}" ] || rm -rf "$work"' EXIT

. bench/lib.sh
# Dozens of processes and hundreds of client sockets: pick listen ports below Linux's
# ephemeral range (32768 and up), where no client socket can already hold them.
free_port() {
  local p
  while :; do
    p=$(( 10000 + (RANDOM * 32768 + RANDOM) % 22000 ))
    port_busy "$p" || { echo "$p"; return; }
  done
}
wait_http() { for _ in $(seq 100); do curl -fs "$1" >/dev/null && return 0; sleep 0.1; done; echo "no answer from $1" >&2; exit 1; }
# One sample from a /metrics page, 0 when absent.
sample() { curl -fs "$1" | awk -v s="$2" '$1 == s { print $2; found=1 } END { if (!found) print 0 }'; }
start_redis() {
  redis-server --port "$1" --bind 127.0.0.1 --save '' --appendonly no >"$work/redis.log" 2>&1 &
  redis_pid=$!
  pids+=("$redis_pid")
  for _ in $(seq 100); do port_busy "$1" && return 0; sleep 0.05; done
  echo "redis-server did not start" >&2; exit 1
}
# Three cluster masters, every slot covered; their ports in cluster_ports.
start_cluster() {
  cluster_ports=()
  local p
  for _ in 1 2 3; do
    p=$(free_port)
    cluster_ports+=("$p")
    redis-server --port "$p" --bind 127.0.0.1 --save '' --appendonly no --dir "$work" \
      --cluster-enabled yes --cluster-config-file "$work/nodes-$p.conf" >"$work/redis-$p.log" 2>&1 &
    pids+=($!)
  done
  for p in "${cluster_ports[@]}"; do
    for _ in $(seq 100); do port_busy "$p" && break; sleep 0.05; done
  done
  redis-cli --cluster create $(printf '127.0.0.1:%s ' "${cluster_ports[@]}") \
    --cluster-replicas 0 --cluster-yes >"$work/cluster-create.log" 2>&1
  for p in "${cluster_ports[@]}"; do
    for _ in $(seq 100); do redis-cli -p "$p" CLUSTER INFO | grep -q cluster_state:ok && break; sleep 0.1; done
  done
}
# Moves the slot of key $1 to another master, keys included; prints slot, from, to.
move_slot() {
  local slot from="" to="" p keys
  slot=$(redis-cli -p "${cluster_ports[0]}" CLUSTER KEYSLOT "$1")
  for p in "${cluster_ports[@]}"; do
    [ "$(redis-cli -p "$p" CLUSTER COUNTKEYSINSLOT "$slot")" -gt 0 ] && from=$p
  done
  [ -n "$from" ] || { echo "no node holds $1"; return; }
  for p in "${cluster_ports[@]}"; do [ "$p" != "$from" ] && { to=$p; break; }; done
  local from_id to_id
  from_id=$(redis-cli -p "$from" CLUSTER MYID) to_id=$(redis-cli -p "$to" CLUSTER MYID)
  redis-cli -p "$to" CLUSTER SETSLOT "$slot" IMPORTING "$from_id" >/dev/null
  redis-cli -p "$from" CLUSTER SETSLOT "$slot" MIGRATING "$to_id" >/dev/null
  keys=$(redis-cli -p "$from" CLUSTER GETKEYSINSLOT "$slot" 100)
  [ -z "$keys" ] || redis-cli -p "$from" MIGRATE 127.0.0.1 "$to" "" 0 5000 KEYS $keys >/dev/null
  for p in "${cluster_ports[@]}"; do redis-cli -p "$p" CLUSTER SETSLOT "$slot" NODE "$to_id" >/dev/null; done
  echo "slot $slot moved from :$from to :$to"
}
success='easeoff_requests_total{outcome="success",upstream="mock"}'
# Once a second until killed: seconds since $1, then each member's successes so far, to
# $2; and whether every member was connected to Redis (seconds, then 1 or 0), to $3.
sample_members() {
  local line all page
  while :; do
    line=$(awk -v t0="$1" -v now="$(date +%s.%N)" 'BEGIN { printf "%.3f", now - t0 }')
    all=1
    for admin in "${admins[@]}"; do
      page=$(curl -fs "http://127.0.0.1:$admin/metrics" || true)
      line+=" $(awk -v s="$success" '$1 == s { print $2; found=1 } END { if (!found) print 0 }' <<<"$page")"
      awk '$1 == "easeoff_fleet_connected" && $2 == 1 { up=1 } END { exit !up }' <<<"$page" || all=0
    done
    echo "$line" >>"$2"
    echo "${line%% *} $all" >>"$3"
    sleep 1
  done
}
printf '%-4s %-12s %7s %9s %10s %6s %7s  %s\n' run mode members goodput throttled% jain errors "member rates (/s)"
for run in $(seq "$runs"); do
  for n in $members_list; do
    for mode in $modes; do
      mock_port=$(free_port) mock_admin=$(free_port)
      "$bin" mock-upstream --listen "127.0.0.1:$mock_port" --admin "127.0.0.1:$mock_admin" \
        --rate "$rate" --style dynamodb --log-format json >"$work/mock.log" 2>&1 &
      pids+=($!)
      fleet_section=""
      if [ "$mode" = fleet ]; then
        redis_port=$(free_port)
        start_redis "$redis_port"
        fleet_section="[fleet]
redis = \"redis://127.0.0.1:$redis_port/0\"
group = \"bench\""
      elif [ "$mode" = cluster ]; then
        start_cluster
        fleet_section="[fleet]
redis = [\"redis://127.0.0.1:${cluster_ports[0]}\"]
redis_mode = \"cluster\"
group = \"bench\""
      fi
      admins=() listens=()
      for i in $(seq "$n"); do
        listen=$(free_port) admin=$(free_port)
        listens+=("$listen") admins+=("$admin")
        cat >"$work/easeoff-$i.toml" <<EOF
$fleet_section

[server]
admin_listen = "127.0.0.1:$admin"
runtime = "multi-thread"

[[upstream]]
name = "mock"
listen = "127.0.0.1:$listen"
url = "http://127.0.0.1:$mock_port"
preset = "dynamodb"
EOF
        HOSTNAME="member-$i" "$bin" run --config "$work/easeoff-$i.toml" --log-format json \
          --log-level info >"$work/easeoff-$i.log" 2>&1 &
        pids+=($!)
      done
      wait_http "http://127.0.0.1:$mock_admin/metrics"
      for admin in "${admins[@]}"; do wait_http "http://127.0.0.1:$admin/readyz"; done

      total=$((warmup + seconds + 2))
      for i in $(seq "$n"); do
        url="http://127.0.0.1:${listens[$((i - 1))]}/"
        if [ "$i" -le "$light" ]; then
          # LIGHT_RATE in all: one connection at that many requests per second.
          h2load --h1 -D "$total" -c 1 -m 1 --rps "$light_rate" "$url" >"$work/h2load-$i.txt" 2>&1 &
        else
          h2load --h1 -D "$total" -c "$clients" -m 1 "$url" >"$work/h2load-$i.txt" 2>&1 &
        fi
        pids+=($!)
      done
      sleep "$warmup"
      mock="http://127.0.0.1:$mock_admin/metrics"
      ok0=$(sample "$mock" 'mock_requests_total{result="ok"}')
      th0=$(sample "$mock" 'mock_requests_total{result="throttled"}')
      before=()
      for admin in "${admins[@]}"; do before+=("$(sample "http://127.0.0.1:$admin/metrics" "$success")"); done
      t0=$(date +%s.%N)
      phases=""
      if [ -n "$fault" ] && [ "$mode" = fleet ]; then
        kill_at=${fault%%:*} restart_at=${fault##*:}
        : >"$work/series.txt"
        : >"$work/connected.txt"
        sample_members "$t0" "$work/series.txt" "$work/connected.txt" &
        sampler=$!
        pids+=("$sampler")
        sleep "$kill_at"
        okk=$(sample "$mock" 'mock_requests_total{result="ok"}') tk=$(date +%s.%N)
        if [ "$fault_kind" = oom ]; then
          redis-cli -p "$redis_port" CONFIG SET maxmemory 1 >/dev/null
        else
          kill -9 "$redis_pid" 2>/dev/null || true
        fi
        sleep $((restart_at - kill_at))
        okr=$(sample "$mock" 'mock_requests_total{result="ok"}') tr=$(date +%s.%N)
        if [ "$fault_kind" = oom ]; then
          redis-cli -p "$redis_port" CONFIG SET maxmemory 0 >/dev/null
        else
          start_redis "$redis_port"
        fi
        sleep $((seconds - restart_at))
        kill "$sampler" 2>/dev/null || true
        phases="$okk $tk $okr $tr"
      elif [ -n "$migrate" ] && [ "$mode" = cluster ]; then
        sleep "$migrate"
        moved=$(move_slot 'easeoff:{bench:mock:default}:state')
        sleep $((seconds - migrate))
      else
        sleep "$seconds"
      fi
      t1=$(date +%s.%N)
      ok1=$(sample "$mock" 'mock_requests_total{result="ok"}')
      th1=$(sample "$mock" 'mock_requests_total{result="throttled"}')
      after=()
      for admin in "${admins[@]}"; do after+=("$(sample "http://127.0.0.1:$admin/metrics" "$success")"); done
      connected=""
      if [ "$mode" != independent ]; then
        for admin in "${admins[@]}"; do connected+="$(sample "http://127.0.0.1:$admin/metrics" easeoff_fleet_connected)"; done
      fi
      # Wait for the writers to finish, then count their non-2xx answers and errors.
      sleep 3
      errors=0
      for i in $(seq "$n"); do
        read -r s4 s5 < <(awk '/^status codes:/ { gsub(",", ""); print $7, $9 }' "$work/h2load-$i.txt" 2>/dev/null || echo "0 0")
        read -r errored timedout < <(awk '/^requests:/ { gsub(",", ""); print $12, $14 }' "$work/h2load-$i.txt" 2>/dev/null || echo "0 0")
        errors=$((errors + ${s4:-0} + ${s5:-0} + ${errored:-0} + ${timedout:-0}))
      done
      awk -v run="$run" -v mode="$mode" -v n="$n" -v rate="$rate" -v ok0="$ok0" -v ok1="$ok1" \
          -v th0="$th0" -v th1="$th1" -v t0="$t0" -v t1="$t1" -v errors="$errors" \
          -v before="${before[*]}" -v after="${after[*]}" 'BEGIN {
        ok = ok1 - ok0; th = th1 - th0; secs = t1 - t0
        split(before, b, " "); split(after, a, " ")
        sum = 0; sq = 0; rates = ""
        for (i = 1; i <= n; i++) { x = (a[i] - b[i]) / secs; sum += x; sq += x * x; rates = rates sprintf(" %.1f", x) }
        jain = sq > 0 ? sum * sum / (n * sq) : 0
        printf "%-4s %-12s %7d %8.3f %9.2f%% %6.3f %7d %s\n", run, mode, n, ok / (secs * rate),
          100 * th / (ok + th), jain, errors, rates
      }'
      if [ "$mode" = cluster ]; then
        echo "     ${moved:-no slot moved}; connected at the end: $connected"
      fi
      if [ -n "$phases" ]; then
        read -r okk tk okr tr <<<"$phases"
        awk -v ok0="$ok0" -v t0="$t0" -v okk="$okk" -v tk="$tk" -v okr="$okr" -v tr="$tr" \
            -v ok1="$ok1" -v t1="$t1" -v rate="$rate" -v connected="$connected" 'BEGIN {
          printf "     goodput/capacity before the kill %.3f, redis down %.3f, after the restart %.3f; connected at the end: %s\n",
            (okk - ok0) / ((tk - t0) * rate), (okr - okk) / ((tr - tk) * rate), (ok1 - okr) / ((t1 - tr) * rate), connected
        }'
        mkdir -p "$(dirname "$svg")"
        python3 bench/fleet_svg.py "$work/series.txt" "$kill_at" "$restart_at" "$rate" "$svg" &&
          echo "     per-member rates over time: $svg"
        restarted=$(awk -v t0="$t0" -v tr="$tr" 'BEGIN { print tr - t0 }')
        back=$(awk -v r="$restarted" '$1 > r && $2 == 1 { printf "%.1f", $1 - r; exit }' "$work/connected.txt")
        echo "     every member connected again ${back:-never} s after redis restarted (sampled about once a second)"
        for i in $(seq "$n"); do
          echo "     member $i fleet log lines: $(grep -c '"message":"fleet: ' "$work/easeoff-$i.log" || true)"
          grep -o '"message":"fleet: [^"]*"' "$work/easeoff-$i.log" | sed 's/^/       /' || true
        done
      fi
      stop_all
    done
  done
done
