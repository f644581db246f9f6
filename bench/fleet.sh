#!/usr/bin/env bash
# A fleet of sidecars against one throttled bucket: N easeoff processes, each with its
# own closed-loop writers (bench/latency.py, one request at a time per connection,
# every request timed), all
# forwarding to one `easeoff mock-upstream --rate RATE`, first each on its own
# ("independent"), then sharing through a redis-server ("fleet"). After a warm-up,
# reports over the measured window: goodput / capacity and throttled attempts (what
# the bucket saw), Jain's fairness index over the members' goodput, the members'
# rates, the writers' errors (answers other than 2xx, or none), and the writers'
# latency p50/p99 (ms, every answer the full-speed writers waited for).
#
#   bench/fleet.sh [--members "1 4 8 16"] [--modes "independent fleet"] [--rate 100]
#                  [--clients 4] [--light 0] [--light-rate 5] [--warmup 10]
#                  [--seconds 20] [--runs 1] [--fault KILL:RESTART] [--fault-kind kill|oom]
#                  [--baseline yes|no] [--svg FILE] [--idle 0] [--roll 0] [--series 0|1]
#                  [--writer latency|boto3] [--burst-seconds S]
#
# --light K: the first K members' writers send LIGHT_RATE requests/s in all (h2load)
# instead of as fast as they can (unequal demand). --fault 10:20 kills redis 10 s into
# the measured window and starts it again, empty, at 20 s (fleet mode only), and reports
# goodput and latency before, during and after the outage; unless --baseline no, the
# same fleet round runs first without the fault, its windows reported alike, so the
# fault's cost is read side by side. It also samples every member's
# successes once a second and draws them (bench/fleet_svg.py: one line per member, the
# outage shaded) into FILE (default target/fleet-fault.svg). --fault-kind oom keeps
# redis running but out of memory instead (`CONFIG SET maxmemory 1`: it answers and
# refuses every write) from KILL to RESTART, and counts each member's fleet log lines.
# --warmup 0 measures from the writers' first request (a cold start) and, as --series 1
# does for any run, prints the table's accepted/throttled count of each second (the
# accepted ones as the writers timed their answers, unless --light), member 1's pacing
# interval at the end of each second, when the first throttle came, how long after it
# the table reached 0.95 of capacity for good (bench/fleet_series.py), and each
# member's first pacing interval beside an equal share's spacing. --idle S starts the writers S seconds after the members are ready.
# --roll S replaces one member in turn every S seconds of the measured window, as a
# rollout does (its writers end, it gets SIGTERM, a new member and writers take its
# place). --writer boto3 makes the writers boto3 clients (bench/boto3_writer.py: PutItem
# after PutItem, standard retry mode, CLIENTS threads per member) instead of
# bench/latency.py, as a DynamoDB application is (BOTO3_PYTHON, else
# EASEOFF_E2E_VENV/bin/python, must have boto3). --burst-seconds S gives the table S
# seconds of its rate as burst capacity, full at the start, as DynamoDB keeps up to
# 300 s of unused capacity (the mock's default is a tenth of a second). The cold-start runs:
#   bench/fleet.sh --members 16 --modes fleet --warmup 0 --seconds 40
#   bench/fleet.sh --members 1 --modes independent --clients 16 --idle 3 --warmup 0 --seconds 20
#   bench/fleet.sh --members 16 --modes fleet --warmup 10 --seconds 60 --roll 2
# For the usual fault run:
#   bench/fleet.sh --members 16 --modes fleet --seconds 60 --fault 20:40
# Mode "cluster" shares through a 3-master Redis Cluster instead (redis_mode =
# "cluster", seeded with one node); --migrate S moves the lane's slot, key included,
# to another master S seconds into the measured window:
#   bench/fleet.sh --members 8 --modes cluster --seconds 20 --migrate 10
# Needs h2load (nghttp2-client), curl
# and redis-server. Uses target/release/easeoff (EASEOFF_BIN overrides; it is built
# if missing); every process it starts is stopped on exit.
# EASEOFF_LOG_LEVEL sets the members' log filter (info; easeoff=debug logs each
# interval change) and KEEP=1 keeps their logs (the work directory is printed).
set -euo pipefail
cd "$(dirname "$0")/.."

members_list="1 4 8 16" modes="independent fleet" rate=100 clients=4 light=0 light_rate=5
warmup=10 seconds=20 runs=1 fault="" fault_kind=kill baseline=yes svg=target/fleet-fault.svg
idle=0 roll=0 series=0 migrate="" writer=latency burst_seconds=
while [ $# -gt 0 ]; do
  case "$1" in
    --members) members_list=$2 ;; --modes) modes=$2 ;; --rate) rate=$2 ;;
    --clients) clients=$2 ;; --light) light=$2 ;; --light-rate) light_rate=$2 ;;
    --warmup) warmup=$2 ;; --seconds) seconds=$2 ;; --runs) runs=$2 ;; --fault) fault=$2 ;; --svg) svg=$2 ;;
    --fault-kind) fault_kind=$2 ;; --baseline) baseline=$2 ;;
    --idle) idle=$2 ;; --roll) roll=$2 ;; --series) series=$2 ;; --migrate) migrate=$2 ;;
    --writer) writer=$2 ;; --burst-seconds) burst_seconds=$2 ;;
    *) echo "unknown option $1" >&2; exit 2 ;;
  esac
  shift 2
done
for tool in h2load curl redis-server python3; do
  command -v "$tool" >/dev/null || { echo "fleet.sh needs $tool (apt-get install nghttp2-client curl redis-server python3)" >&2; exit 2; }
done
case "$writer" in latency | boto3) ;; *) echo "--writer is latency or boto3" >&2; exit 2 ;; esac
# boto3 writers run on BOTO3_PYTHON, else the e2e virtualenv's python, else python3.
boto3_python=${BOTO3_PYTHON:-${EASEOFF_E2E_VENV:-$HOME/.cache/easeoff-e2e}/bin/python}
[ -x "$boto3_python" ] || boto3_python=python3
if [ "$writer" = boto3 ] && ! "$boto3_python" -c 'import boto3' 2>/dev/null; then
  echo "--writer boto3 needs boto3 for $boto3_python (pip install boto3, or set BOTO3_PYTHON)" >&2
  exit 2
fi
bin=${EASEOFF_BIN:-$PWD/target/release/easeoff}
[ -x "$bin" ] || { cargo build --release --locked --quiet; bin=$PWD/target/release/easeoff; }
work=$(mktemp -d)
pids=()
stop_all() {
  for pid in "${pids[@]}"; do kill "$pid" 2>/dev/null || true; done
  wait 2>/dev/null || true
  pids=()
}
trap 'stop_all; if [ -n "${KEEP:-}" ]; then echo "kept: $work" >&2; else rm -rf "$work"; fi' EXIT

. bench/lib.sh
# Dozens of processes and hundreds of client sockets: pick listen ports below Linux's
# ephemeral range (32768 and up), where no client socket can already hold them.
# A port is handed out once per run: two drawn before either is bound (a member's
# listen and admin ports) would otherwise be able to match.
free_port() {
  local p
  while :; do
    p=$(( 10000 + (RANDOM * 32768 + RANDOM) % 22000 ))
    grep -qx "$p" "$work/ports" 2>/dev/null && continue
    port_busy "$p" || { echo "$p" >>"$work/ports"; echo "$p"; return; }
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
# Starts member I (its config and process) into slot I of admins, listens and
# member_pids; a replacement takes the slot of the member it replaces.
start_member() {
  local i=$1 listen admin
  listen=$(free_port) admin=$(free_port)
  listens[i - 1]=$listen admins[i - 1]=$admin
  echo "$admin" >"$work/admin-$i"
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
    --log-level "${EASEOFF_LOG_LEVEL:-info}" >>"$work/easeoff-$i.log" 2>&1 &
  member_pids[i - 1]=$!
  pids+=($!)
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
# The rounds of one run and member count, MODE:FAULT: with a fault, a fleet round
# without it first (the baseline), unless --baseline no.
rounds() {
  local mode
  for mode in $modes; do
    if [ -n "$fault" ] && [ "$mode" = fleet ]; then
      [ "$baseline" = no ] || echo "fleet:0"
      echo "fleet:1"
    else
      echo "$mode:0"
    fi
  done
}
# The pacing interval (s) of the lane with the most dispatches on a member's /metrics
# page $1, 0 if none: the upstream's headline is the largest over its lanes, and an
# idle lane held at the start of a cold fleet would stand for them all.
busiest_interval() {
  curl -fs "$1" | awk '
    /^easeoff_lane_dispatches_total\{/ && $1 !~ /lane="other"/ {
      match($1, /lane="[^"]*"/); lane = substr($1, RSTART, RLENGTH)
      if ($2 + 0 > most) { most = $2 + 0; busiest = lane }
    }
    /^easeoff_lane_interval_seconds\{/ {
      match($1, /lane="[^"]*"/); interval[substr($1, RSTART, RLENGTH)] = $2
    }
    END { print (busiest in interval) ? interval[busiest] : 0 }'
}
# Four times a second until killed: seconds since $1, then the mock's accepted and
# throttled counts so far and member 1's pacing interval (ms, of its busiest lane),
# to $2 (bench/fleet_series.py reads it).
sample_mock() {
  local page now interval
  while :; do
    page=$(curl -fs "http://127.0.0.1:$mock_admin/metrics" || true)
    now=$(date +%s.%N)
    # The file, not the array: a replaced member 1 (--roll) has a new admin port.
    interval=$(busiest_interval "http://127.0.0.1:$(cat "$work/admin-1")/metrics" || true)
    awk -v t0="$1" -v now="$now" -v interval="${interval:-0}" '
      $1 == "mock_requests_total{result=\"ok\"}" { ok = $2 }
      $1 == "mock_requests_total{result=\"throttled\"}" { th = $2 }
      END { printf "%.3f %d %d %.3f\n", now - t0, ok, th, 1000 * interval }' <<<"$page" >>"$2"
    sleep 0.25
  done
}
# How long generation G of member I's writers runs, in seconds from now (at least
# one): to its replacement with --roll, else to the end of the run.
life() {
  local i=$1 g=$2 end
  end=$((warmup + seconds + 2))
  if [ "$roll" -gt 0 ]; then
    local replaced=$((warmup + roll * (i + n * g)))
    [ $((replaced - warmup)) -lt "$seconds" ] && end=$replaced
  fi
  awk -v end="$end" -v t0="$writers_at" -v now="$(date +%s.%N)" 'BEGIN { d = end - (now - t0); printf "%.3f\n", (d < 1 ? 1 : d) }'
}
# Member I's writers for SECONDS: CLIENTS closed-loop connections timing every
# request (bench/latency.py), or one h2load connection at LIGHT_RATE in all for the
# first --light members.
start_writers() {
  local i=$1 url="http://127.0.0.1:${listens[$(($1 - 1))]}/" tag
  tag="$i-$(date +%s%N)"
  if [ "$i" -le "$light" ]; then
    h2load --h1 -D "${2%.*}" -c 1 -m 1 --rps "$light_rate" "$url" >"$work/h2load-$tag.txt" 2>&1 &
  elif [ "$writer" = boto3 ]; then
    "$boto3_python" bench/boto3_writer.py "$url" --seconds "$2" --threads "$clients" \
      --start-at "${go_at:-0}" --out "$work/latency-$tag.txt" >"$work/writer-$tag.txt" 2>&1 &
  else
    python3 bench/latency.py run "$url" --seconds "$2" --threads "$clients" \
      --out "$work/latency-$tag.txt" >"$work/writer-$tag.txt" 2>&1 &
  fi
  writer_pids[i - 1]=$!
  pids+=($!)
}
# --roll: every ROLL seconds of the measured window one member (in turn) is replaced,
# as a rollout does: its writers end, it gets SIGTERM, and a new member with new
# writers takes its place.
replace_members() {
  local k=1 i
  while [ $((roll * k)) -lt "$seconds" ]; do
    sleep_until "$(awk -v t="$writers_at" -v s=$((warmup + roll * k)) 'BEGIN { printf "%.3f", t + s }')"
    i=$(((k - 1) % n + 1))
    wait "${writer_pids[i - 1]}" 2>/dev/null || true
    kill -TERM "${member_pids[i - 1]}" 2>/dev/null || true
    start_member "$i"
    wait_http "http://127.0.0.1:${admins[i - 1]}/readyz"
    start_writers "$i" "$(life "$i" $(((k - 1) / n + 1)))"
    k=$((k + 1))
  done
  sleep_until "$(awk -v t="$writers_at" -v s=$((warmup + seconds)) 'BEGIN { printf "%.3f", t + s }')"
}
sleep_until() {
  local left
  left=$(awk -v t="$1" -v now="$(date +%s.%N)" 'BEGIN { d = t - now; printf "%.3f", (d > 0 ? d : 0) }')
  sleep "$left"
}
# Each member's first pacing interval (its log's first "pacing requests" line) beside
# the spacing that would give it an equal share of the rate.
first_pacing() {
  local firsts="" i first
  for i in $(seq "$n"); do
    first=$(grep -m1 'the upstream throttles; pacing requests' "$work/easeoff-$i.log" |
      grep -o '"interval_ms":[0-9.e+-]*' | sed 's/.*://' || true)
    firsts+=" ${first:--}"
  done
  awk -v n="$n" -v rate="$rate" -v firsts="$firsts" 'BEGIN {
    printf "     first pacing interval (ms) per member:%s; an equal share is %.1f ms\n", firsts, 1000 * n / rate }'
}
printf '%-4s %-12s %7s %9s %10s %6s %7s  %s\n' run mode members goodput throttled% jain errors "member rates (/s)"
for run in $(seq "$runs"); do
  for n in $members_list; do
    for round in $(rounds); do
      mode=${round%%:*} faulting=${round##*:}
      label=$mode
      [ "$faulting" = 0 ] || label="$mode+$fault_kind"
      mock_port=$(free_port) mock_admin=$(free_port)
      "$bin" mock-upstream --listen "127.0.0.1:$mock_port" --admin "127.0.0.1:$mock_admin" \
        --rate "$rate" --style dynamodb ${burst_seconds:+--burst-seconds "$burst_seconds"} \
        --log-format json >"$work/mock.log" 2>&1 &
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
      admins=() listens=() member_pids=()
      rm -f "$work"/easeoff-*.log
      for i in $(seq "$n"); do start_member "$i"; done
      wait_http "http://127.0.0.1:$mock_admin/metrics"
      for admin in "${admins[@]}"; do wait_http "http://127.0.0.1:$admin/readyz"; done

      sleep "$idle"
      rm -f "$work"/latency-*.txt "$work"/writer-*.txt "$work"/h2load-*.txt
      : >"$work/mock-series.txt"
      go_at=""
      # boto3 takes a second or more to import in each process: the writers start
      # together, ready, at go_at, and the run counts from then.
      [ "$writer" = boto3 ] && go_at=$(awk -v now="$(date +%s.%N)" -v n="$n" 'BEGIN { printf "%.3f", now + 3 + n / 4 }')
      writers_at=${go_at:-$(date +%s.%N)}
      if [ -n "$go_at" ]; then
        for i in $(seq "$n"); do start_writers "$i" "$(life "$i" 0)"; done
        sleep_until "$go_at"
      fi
      sample_mock "$writers_at" "$work/mock-series.txt" &
      pids+=($!)
      [ -n "$go_at" ] || for i in $(seq "$n"); do start_writers "$i" "$(life "$i" 0)"; done
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
        thk=$(sample "$mock" 'mock_requests_total{result="throttled"}')
        if [ "$faulting" = 0 ]; then
          :
        elif [ "$fault_kind" = oom ]; then
          redis-cli -p "$redis_port" CONFIG SET maxmemory 1 >/dev/null
        else
          kill -9 "$redis_pid" 2>/dev/null || true
        fi
        sleep $((restart_at - kill_at))
        okr=$(sample "$mock" 'mock_requests_total{result="ok"}') tr=$(date +%s.%N)
        thr=$(sample "$mock" 'mock_requests_total{result="throttled"}')
        if [ "$faulting" = 0 ]; then
          :
        elif [ "$fault_kind" = oom ]; then
          redis-cli -p "$redis_port" CONFIG SET maxmemory 0 >/dev/null
        else
          start_redis "$redis_port"
        fi
        sleep $((seconds - restart_at))
        kill "$sampler" 2>/dev/null || true
        phases="$okk $tk $okr $tr $thk $thr"
      elif [ "$roll" -gt 0 ]; then
        replace_members
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
      for out in "$work"/h2load-*.txt; do
        read -r s4 s5 < <(awk '/^status codes:/ { gsub(",", ""); print $7, $9 }' "$out" 2>/dev/null || echo "0 0")
        read -r errored timedout < <(awk '/^requests:/ { gsub(",", ""); print $12, $14 }' "$out" 2>/dev/null || echo "0 0")
        errors=$((errors + ${s4:-0} + ${s5:-0} + ${errored:-0} + ${timedout:-0}))
        if [ $((${s4:-0} + ${s5:-0} + ${errored:-0} + ${timedout:-0})) -gt 0 ]; then
          mkdir -p target/fleet-errors && cp "$out" target/fleet-errors/
          echo "     writer errors in $(basename "$out") (kept in target/fleet-errors): $(grep -m1 '^requests:' "$out")"
        fi
      done
      for out in "$work"/writer-*.txt; do
        [ -f "$out" ] || continue
        failed=$(awk '/^ok / { print $4; found=1 } END { if (!found) print (NR > 0 ? 1 : -1) }' "$out")
        if [ "$failed" -lt 0 ]; then
          # Still in a call when the run ended (a boto3 retry's backoff, say): the
          # answers it timed count, the one in flight does not.
          failed=$(awk '$3 < 200 || $3 >= 300 { n++ } END { print n + 0 }' "${out/writer-/latency-}" 2>/dev/null || echo 1)
        fi
        errors=$((errors + failed))
        if [ "$failed" -gt 0 ]; then
          mkdir -p target/fleet-errors && cp "$out" target/fleet-errors/
          echo "     writer errors in $(basename "$out") (kept in target/fleet-errors)"
        fi
      done
      awk -v run="$run" -v mode="$label" -v n="$n" -v rate="$rate" -v ok0="$ok0" -v ok1="$ok1" \
          -v th0="$th0" -v th1="$th1" -v t0="$t0" -v t1="$t1" -v errors="$errors" \
          -v before="${before[*]}" -v after="${after[*]}" -v roll="$roll" 'BEGIN {
        ok = ok1 - ok0; th = th1 - th0; secs = t1 - t0
        split(before, b, " "); split(after, a, " ")
        sum = 0; sq = 0; rates = ""
        for (i = 1; i <= n; i++) { x = (a[i] - b[i]) / secs; sum += x; sq += x * x; rates = rates sprintf(" %.1f", x) }
        jain = sq > 0 ? sum * sum / (n * sq) : 0
        if (roll > 0) { jain = 0; rates = " (members replaced: no per-member rates)" }
        printf "%-4s %-12s %7d %8.3f %9.2f%% %6.3f %7d %s\n", run, mode, n, ok / (secs * rate),
          100 * th / (ok + th), jain, errors, rates
      }'
      if [ "$mode" = cluster ]; then
        echo "     ${moved:-no slot moved}; connected at the end: $connected"
      fi
      if [ -n "$phases" ]; then
        read -r okk tk okr tr thk thr <<<"$phases"
        awk -v ok0="$ok0" -v t0="$t0" -v okk="$okk" -v tk="$tk" -v okr="$okr" -v tr="$tr" \
            -v ok1="$ok1" -v t1="$t1" -v rate="$rate" -v connected="$connected" \
            -v th0="$th0" -v thk="$thk" -v thr="$thr" -v th1="$th1" 'BEGIN {
          printf "     goodput/capacity before the fault %.3f, during %.3f, after %.3f; throttled%% %.2f, %.2f, %.2f; connected at the end: %s\n",
            (okk - ok0) / ((tk - t0) * rate), (okr - okk) / ((tr - tk) * rate), (ok1 - okr) / ((t1 - tr) * rate),
            100 * (thk - th0) / (okk - ok0 + thk - th0), 100 * (thr - thk) / (okr - okk + thr - thk),
            100 * (th1 - thr) / (ok1 - okr + th1 - thr), connected
        }'
        latencies=("$work"/latency-*.txt)
        if [ -e "${latencies[0]}" ]; then
          python3 bench/latency.py summary --window "before:$t0:$tk" --window "during:$tk:$tr" \
            --window "after:$tr:$t1" "${latencies[@]}" |
            awk '{ printf "%s %s %.1f/%.1f (%d requests, %d errors)", NR == 1 ? "     writers latency p50/p99 ms:" : ",", $1, $5, $7, $3, $9 } END { print "" }'
        fi
        [ "$faulting" = 1 ] || { stop_all; continue; }
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
      if [ "$series" = 1 ] || [ "$warmup" = 0 ]; then
        timed=()
        # With every member's writers timing their requests, they time the series.
        [ "$light" -gt 0 ] || timed=("$writers_at" "$work"/latency-*.txt)
        python3 bench/fleet_series.py "$work/mock-series.txt" "$rate" "$((warmup + seconds))" "${timed[@]}"
        first_pacing
      fi
      stop_all
    done
  done
done
