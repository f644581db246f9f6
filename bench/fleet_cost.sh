#!/usr/bin/env bash
# What the fleet costs one redis-server: for each member count, simulated members
# (in-process fleets, each with its own connection and sync task, as many sidecars
# would have) sync LANES lanes every SYNC_MS against a fresh redis-server; prints
# Redis's commands/s (script calls and the commands inside them, from INFO), its CPU
# (% of a core), its CPU per member·lane·sync, the syncs done against those due, the
# mean sync and the sync errors. BUSY is the percentage of each member's lanes that
# carry demand (a request always waiting); the others are idle. Runs RUNS times per
# member count.
#
#   bench/fleet_cost.sh [--members "10 100 1000"] [--lanes 50] [--sync-ms 250]
#                       [--seconds 10] [--runs 3] [--busy 100]
#
# Needs redis-server. Builds tests/fleet_cost.rs in release.
set -euo pipefail
cd "$(dirname "$0")/.."
members="10 100 1000" lanes=50 sync_ms=250 seconds=10 runs=3 busy=100
while [ $# -gt 0 ]; do
  case "$1" in
    --members) members="$2"; shift 2 ;;
    --lanes) lanes="$2"; shift 2 ;;
    --sync-ms) sync_ms="$2"; shift 2 ;;
    --seconds) seconds="$2"; shift 2 ;;
    --runs) runs="$2"; shift 2 ;;
    --busy) busy="$2"; shift 2 ;;
    -h|--help) sed -n '2,14p' "$0"; exit 0 ;;
    *) echo "unknown option $1" >&2; exit 2 ;;
  esac
done
cargo test --release --test fleet_cost --no-run >/dev/null 2>&1
for m in $members; do
  for _ in $(seq "$runs"); do
    EASEOFF_COST_MEMBERS="$m" EASEOFF_COST_LANES="$lanes" EASEOFF_COST_SYNC_MS="$sync_ms" \
      EASEOFF_COST_SECONDS="$seconds" EASEOFF_COST_BUSY="$busy" \
      cargo test --release --test fleet_cost -- --ignored --nocapture 2>/dev/null | grep '^members'
  done
done
