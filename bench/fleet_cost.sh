#!/usr/bin/env bash
# What the fleet costs one redis-server: for each member count, simulated members
# (in-process fleets, each with its own connection and sync task, as many sidecars
# would have) sync LANES lanes every SYNC_MS against a fresh redis-server; prints
# Redis's commands/s (script calls and the commands inside them, from INFO), its CPU
# (% of a core, from INFO's used_cpu_sys + used_cpu_user), its CPU per
# member·lane·sync, the syncs done against those due, the mean sync, the sync errors
# and what Redis spent per command (INFO commandstats). BUSY is the percentage of
# each member's lanes that carry demand (a request always waiting); the others are
# idle. Runs RUNS times per member count.
#
#   bench/fleet_cost.sh [--members "10 100 1000"] [--lanes 50] [--sync-ms 250]
#                       [--seconds 10] [--runs 3] [--busy 100]
#                       [--redis-cpus LIST] [--member-cpus LIST] [--redis-nice -10]
#                       [--in-step] [--against BINARY]
#
# The members start spread over one sync interval, so each syncs at a phase of its
# own as sidecars started at different times do; --in-step starts them all at once,
# so they sync together (Redis then answers many calls per wake-up, for less CPU).
# --redis-cpus and --member-cpus pin redis-server and the members' process to those
# CPUs (taskset lists; none by default: one core left to 1,000 members starves them
# on a 2-core machine), and --redis-nice runs redis-server at that
# niceness (negative: before other work; "" to leave it), so that on a small shared
# machine the members and other work do not keep Redis waiting for a core (its CPU,
# read from INFO, is what it used, not what it waited). --against runs another build
# of tests/fleet_cost.rs (say, of main: build it there and copy the executable) in
# the same invocation, alternated run by run with this tree's, labelled "against"
# and "this".
#
# Needs redis-server and taskset. Builds tests/fleet_cost.rs in release.
set -euo pipefail
cd "$(dirname "$0")/.."
members="10 100 1000" lanes=50 sync_ms=250 seconds=10 runs=3 busy=100
redis_cpus="" member_cpus="" redis_nice=-10 spread=1 against=""
while [ $# -gt 0 ]; do
  case "$1" in
    --members) members="$2"; shift 2 ;;
    --lanes) lanes="$2"; shift 2 ;;
    --sync-ms) sync_ms="$2"; shift 2 ;;
    --seconds) seconds="$2"; shift 2 ;;
    --runs) runs="$2"; shift 2 ;;
    --busy) busy="$2"; shift 2 ;;
    --redis-cpus) redis_cpus="$2"; shift 2 ;;
    --member-cpus) member_cpus="$2"; shift 2 ;;
    --redis-nice) redis_nice="$2"; shift 2 ;;
    --in-step) spread=0; shift ;;
    --against) against="$2"; shift 2 ;;
    -h|--help) sed -n '2,29p' "$0"; exit 0 ;;
    *) echo "unknown option $1" >&2; exit 2 ;;
  esac
done
this=$(cargo test --release --test fleet_cost --no-run 2>&1 |
  sed -n 's/.*Executable .*(\(.*\))$/\1/p' | tail -n 1)
[ -x "$this" ] || { echo "could not build tests/fleet_cost.rs" >&2; exit 1; }
builds=("this=$this")
[ -n "$against" ] && builds=("against=$against" "this=$this")
pin=()
[ -n "$member_cpus" ] && pin=(taskset -c "$member_cpus")
redis_prefix=""
[ -n "$redis_nice" ] && redis_prefix="nice -n $redis_nice"
[ -n "$redis_cpus" ] && redis_prefix="$redis_prefix taskset -c $redis_cpus"
echo "# $(date -u +%FT%TZ) load: $(cut -d' ' -f1-3 /proc/loadavg); redis under '${redis_prefix}', members under '${pin[*]-}', spread $spread"
for m in $members; do
  for _ in $(seq "$runs"); do
    for build in "${builds[@]}"; do
      EASEOFF_COST_MEMBERS="$m" EASEOFF_COST_LANES="$lanes" EASEOFF_COST_SYNC_MS="$sync_ms" \
        EASEOFF_COST_SECONDS="$seconds" EASEOFF_COST_BUSY="$busy" \
        EASEOFF_COST_REDIS_PREFIX="$redis_prefix" EASEOFF_COST_SPREAD="$spread" \
        ${pin[@]+"${pin[@]}"} "${build#*=}" --ignored --nocapture 2>/dev/null |
        grep -o 'members .*' | sed "s/^/${build%%=*}: /"
    done
  done
done
