#!/usr/bin/env bash
# Control quality with the real binaries: `easeoff mock-upstream` steps its capacity
# (steady 100/s, 100->50, 50->100, auto-scaling 50->100) while 16 closed-loop writers
# with unbounded demand go through `easeoff run` (preset dynamodb, any strategy) or,
# as baselines, hit the mock directly with botocore-style standard / adaptive retries.
# Prints one row per (scenario, client, run) and a median row per group.
#
#   bench/control.sh [--scenario steady,step-down,step-up,autoscale]
#                    [--client easeoff:cubic,easeoff:responsive,sdk-standard,sdk-adaptive]
#                    [--runs 1] [--phase 30s] [--warmup 10s] [--jobs 1]
#                    [--csv-dir DIR] [--svg-dir DIR]     (all: --help)
#
# Every process it starts is stopped on exit.
exec "$(dirname "$0")/harness.sh" control "$@"
