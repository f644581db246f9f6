#!/usr/bin/env bash
# Pacing fidelity with the real binary: `easeoff run` with strategy = "constant" at
# 5 ms, 20 ms and 100 ms in front of an upstream in the harness that timestamps every
# arrival; 16 writers keep the queue full. Prints the achieved rate against
# 1/interval and the |gap - interval| distribution.
#
#   bench/pacing.sh [--interval 5ms,20ms,100ms] [--duration 10s] [--min-gaps 200]
#                   [--clients 16] [--warmup 1s]     (all: --help)
#
# Every process it starts is stopped on exit.
exec "$(dirname "$0")/harness.sh" pacing "$@"
