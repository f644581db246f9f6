#!/usr/bin/env bash
# What lanes cost and whether it comes back: waves of requests to N distinct DynamoDB
# tables (a lane each, every lane pacing at a constant interval so that each waits),
# an idle spell after each wave long enough for every lane to be dropped; prints
# easeoff's RSS and open descriptors, peak during each wave and after its idle spell.
#
#   bench/churn.sh [--tables 10000] [--waves 2] [--max-lanes N] [--clients 64]
#                  [--lane-idle 5s] [--interval 2ms] [--fleet REDIS_URL]   (all: --help)
#
# Every process it starts is stopped on exit.
exec "$(dirname "$0")/harness.sh" churn "$@"
