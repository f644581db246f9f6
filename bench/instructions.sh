#!/usr/bin/env bash
# bench/instructions.sh -- CPU instructions per proxied request, counted by valgrind's
# callgrind: deterministic, so it tells a 2% change apart on a noisy shared machine
# where wall-clock figures swing 10-25%.
#
# Usage: bench/instructions.sh [--requests N] [--conns C] [--path P] [--h2] [--tls]
#                              [--header 'NAME: VALUE' ...] [--data FILE] [--by-crate]
#                              [--cache-sim] 'COMMAND' ...
#   COMMAND starts a proxy in the foreground on 127.0.0.1:$PORT forwarding to
#   $UPSTREAM (the overhead.sh convention), e.g.
#     bench/instructions.sh 'exec target/release/easeoff --config bench/passthrough.toml'
#   Several commands are measured one after another against the same upstream.
#   --header adds a request header (repeatable); --data FILE sends POSTs with that body
#   (a DynamoDB call, say, to measure the lanes: see bench/passthrough-dynamodb.toml).
#   --tls serves the upstream over https (HTTP/1.1) with a certificate for 127.0.0.1
#   from a CA of its own, whose PEM file is $UPSTREAM_CA; $UPSTREAM_SCHEME is then
#   https (otherwise http). bench/passthrough-recipe.toml uses both.
#   --by-crate also prints each command's instructions per request by the crate (and
#   easeoff's file) whose source they came from, inlined code included (bench/by_crate.py;
#   build with CARGO_PROFILE_RELEASE_DEBUG=line-tables-only for the line tables).
#   --cache-sim runs callgrind's cache and branch model too, and prints each command's
#   misses per request (I1, D1 read and write, mispredicted conditional branches).
# An nginx upstream answers "ok". Each proxy runs under callgrind; after a warm-up of
# 2000 requests the counters are zeroed, N requests (default 20000) are sent with
# h2load (HTTP/1.1 keep-alive unless --h2), and the instructions of every thread
# are summed and divided by N. Prints one line per command:
#   instructions/request=...  allocations are not counted here (see benches/).
# Every process started here is stopped by PID on exit.
set -euo pipefail

N=20000
C=16
P=/
H2=0
TLS=0
BY_CRATE=0
SIM=()
CMDS=()
EXTRA=()
while [ $# -gt 0 ]; do
  case "$1" in
    --requests) N=${2:?}; shift 2 ;;
    --conns) C=${2:?}; shift 2 ;;
    --path) P=${2:?}; shift 2 ;;
    --h2) H2=1; shift ;;
    --tls) TLS=1; shift ;;
    --by-crate) BY_CRATE=1; shift ;;
    --cache-sim) SIM=(--cache-sim=yes --branch-sim=yes); shift ;;
    --header) EXTRA+=(-H "${2:?}"); shift 2 ;;
    --data) EXTRA+=(-d "${2:?}"); shift 2 ;;
    -h|--help) sed -n '2,/^set -euo/p' "$0" | sed '$d; s/^# \{0,1\}//'; exit 0 ;;
    *) CMDS+=("$1"); shift ;;
  esac
done
[ ${#CMDS[@]} -gt 0 ] || { echo "instructions.sh: no command (try --help)" >&2; exit 2; }
for t in nginx valgrind callgrind_control callgrind_annotate h2load curl; do
  command -v "$t" >/dev/null || { echo "instructions.sh: missing tool: $t" >&2; exit 2; }
done

. "$(cd "$(dirname "$0")" && pwd)/lib.sh"
start_work instructions

UP_PORT=$(free_port)
mkdir -p "$WORK/up"
UPSTREAM_SCHEME=http
UPSTREAM_CA=
LISTEN="listen 127.0.0.1:$UP_PORT;"
if [ "$TLS" = 1 ]; then
  command -v openssl >/dev/null || { echo "instructions.sh: missing tool: openssl" >&2; exit 2; }
  ( cd "$WORK/up"
    openssl req -x509 -newkey ec -pkeyopt ec_paramgen_curve:P-256 -nodes -days 1 \
      -subj "/CN=instructions.sh CA" -keyout ca.key -out ca.pem
    openssl req -newkey ec -pkeyopt ec_paramgen_curve:P-256 -nodes \
      -subj "/CN=127.0.0.1" -keyout up.key -out up.csr
    printf 'subjectAltName=IP:127.0.0.1\n' >up.ext
    openssl x509 -req -in up.csr -CA ca.pem -CAkey ca.key -CAcreateserial -days 1 \
      -extfile up.ext -out up.pem ) >"$WORK/openssl.log" 2>&1 \
    || { cat "$WORK/openssl.log" >&2; exit 1; }
  UPSTREAM_SCHEME=https
  UPSTREAM_CA="$WORK/up/ca.pem"
  LISTEN="listen 127.0.0.1:$UP_PORT ssl; ssl_certificate $WORK/up/up.pem; ssl_certificate_key $WORK/up/up.key;"
fi
cat >"$WORK/up/nginx.conf" <<EOF
worker_processes 1;
daemon off;
pid $WORK/up/nginx.pid;
error_log $WORK/up/error.log warn;
events { worker_connections 1024; }
http {
  access_log off;
  client_body_temp_path $WORK/up/cb; proxy_temp_path $WORK/up/p;
  fastcgi_temp_path $WORK/up/f; uwsgi_temp_path $WORK/up/u; scgi_temp_path $WORK/up/s;
  keepalive_requests 100000000;
  server {
    $LISTEN
    location / { default_type text/plain; return 200 "ok"; }
  }
}
EOF
nginx -p "$WORK/up/" -e "$WORK/up/error.log" -c "$WORK/up/nginx.conf" &
PIDS+=($!)
wait_listening "$UP_PORT" 10 "${PIDS[0]}" || { echo "instructions.sh: upstream did not start" >&2; exit 1; }

load() { # PORT REQUESTS
  local proto=(--h1)
  [ "$H2" = 1 ] && proto=()
  h2load "${proto[@]}" ${EXTRA[@]+"${EXTRA[@]}"} -c"$C" -n"$2" "http://127.0.0.1:$1$P" >"$WORK/load.txt" 2>&1 \
    || { cat "$WORK/load.txt" >&2; return 1; }
  grep -q "succeeded, 0 failed, 0 errored" "$WORK/load.txt" \
    || grep -q "^requests: .* $2 succeeded" "$WORK/load.txt" \
    || { grep '^requests:' "$WORK/load.txt" >&2; return 1; }
}

for cmd in "${CMDS[@]}"; do
  PORT=$(free_port)
  out="$WORK/cg.$PORT"
  export PORT UPSTREAM="127.0.0.1:$UP_PORT" UPSTREAM_SCHEME UPSTREAM_CA
  valgrind --tool=callgrind --trace-children=yes --callgrind-out-file="$out.%p" --dump-instr=no \
    ${SIM[@]+"${SIM[@]}"} \
    bash -c "$cmd" >"$WORK/proxy.log" 2>&1 &
  pid=$!
  PIDS+=("$pid")
  wait_listening "$PORT" 120 "$pid" || { tail -20 "$WORK/proxy.log" >&2; exit 1; }
  load "$PORT" 2000
  callgrind_control --zero "$pid" >/dev/null 2>&1 || callgrind_control --zero >/dev/null
  load "$PORT" "$N"
  rm -f "$out".*
  callgrind_control --dump "$pid" >/dev/null 2>&1 || callgrind_control --dump >/dev/null
  total=$(cat "$out".* 2>/dev/null | awk '/^summary:/ {s += $2} END {printf "%.0f\n", s}')
  printf 'instructions/request=%d requests=%d conns=%d path=%s%s  %s\n' \
    $(( total / N )) "$N" "$C" "$P" "$([ "$H2" = 1 ] && echo ' h2')" "$cmd"
  if [ ${#SIM[@]} -gt 0 ]; then
    # Each file names its events in order; the summary line sums them.
    awk -v n="$N" '/^events:/ { for (i = 2; i <= NF; i++) name[i] = $i }
      /^summary:/ { for (i = 2; i <= NF; i++) sum[name[i]] += $i }
      END { printf "  per request: I1 misses=%.0f D1 read misses=%.0f D1 write misses=%.0f mispredicted branches=%.0f\n",
        sum["I1mr"] / n, sum["D1mr"] / n, sum["D1mw"] / n, sum["Bcm"] / n }' "$out".*
  fi
  if [ "$BY_CRATE" = 1 ]; then python3 "$(dirname "$0")/by_crate.py" "$N" "$out".*; fi
  cp "$out".* "${TMPDIR:-/tmp}/" 2>/dev/null || true
  kill -TERM "$pid" 2>/dev/null || true
  wait "$pid" 2>/dev/null || true
done
