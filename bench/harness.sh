#!/usr/bin/env bash
# Shared by control.sh and pacing.sh: builds the release binary and the harness
# (examples/bench), runs `bench SUBCOMMAND ARGS...` in its own process group, and on
# exit or Ctrl-C stops that group: the harness and every easeoff it started.
set -euo pipefail
cd "$(dirname "$0")/.."
cargo build --release --locked --quiet --bin easeoff --example bench
harness=""
cleanup() {
  [ -n "$harness" ] && kill -TERM -- "-$harness" 2>/dev/null || true
  wait 2>/dev/null || true
}
trap cleanup EXIT
trap 'exit 130' INT TERM
# A background job of a script is not a group leader, so setsid runs in place and
# the job's pid is the new group's id.
setsid target/release/examples/bench "$@" --bin target/release/easeoff &
harness=$!
status=0
wait "$harness" || status=$?
harness=""
exit "$status"
