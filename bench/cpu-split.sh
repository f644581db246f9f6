#!/usr/bin/env bash
# bench/cpu-split.sh -- where a proxied request's CPU goes: user space or the kernel,
# for easeoff and an nginx reverse proxy in turn against the same nginx upstream.
# overhead.sh gives CPU per request as one sum (utime + stime); this splits it, so a
# gap to nginx can be told apart as our code's (user) or the system calls' (sys).
#
# Usage: bench/cpu-split.sh [--rounds R] [--requests N] [--conns C] [--minproxy BINARY]
#                           [EASEOFF_BINARY]
#   EASEOFF_BINARY defaults to target/release/easeoff (build it first; the image's
#   profile-guided binary is target/docker-context/release/easeoff). --minproxy adds
#   ../shared/bench/minproxy's binary (a bare hyper proxy, per-core) to every round.
# Each round runs nginx, then easeoff (per-core runtime, bench/passthrough.toml): a
# warm-up of 20,000 requests, then N (default 200,000) HTTP/1.1 keep-alive GETs of /
# with h2load at C connections (default 16); the proxy's process tree's utime and stime
# from /proc, before and after, divided by N. Prints one line per run and the medians:
#   nginx    user=2.80 sys=7.70 total=10.50 us/req rps=77441
# The nginx proxy is overhead.sh's: 2 workers, an upstream keepalive pool of 256.
# /proc counts CPU in clock ticks (10 ms): N=200,000 resolves 0.05 us per request.
# Every process started here is stopped by PID on exit.
set -euo pipefail

ROUNDS=3
N=200000
C=16
REPO=$(cd "$(dirname "$0")/.." && pwd)
BIN=$REPO/target/release/easeoff
MINPROXY=
while [ $# -gt 0 ]; do
  case "$1" in
    --rounds) ROUNDS=${2:?}; shift 2 ;;
    --requests) N=${2:?}; shift 2 ;;
    --conns) C=${2:?}; shift 2 ;;
    --minproxy) MINPROXY=${2:?}; shift 2 ;;
    -h|--help) sed -n '2,/^set -euo/p' "$0" | sed '$d; s/^# \{0,1\}//'; exit 0 ;;
    -*) echo "cpu-split.sh: unknown option $1 (try --help)" >&2; exit 2 ;;
    *) BIN=$1; shift ;;
  esac
done
for t in nginx h2load pgrep; do
  command -v "$t" >/dev/null || { echo "cpu-split.sh: missing tool: $t" >&2; exit 2; }
done
[ -x "$BIN" ] || { echo "cpu-split.sh: no executable at $BIN (cargo build --release)" >&2; exit 2; }
[ -z "$MINPROXY" ] || [ -x "$MINPROXY" ] \
  || { echo "cpu-split.sh: no executable at $MINPROXY (build ../shared/bench/minproxy)" >&2; exit 2; }
KINDS="nginx easeoff${MINPROXY:+ minproxy}"

. "$REPO/bench/lib.sh"
start_work cpu-split

# nginx.conf DIR WORKERS BODY: an nginx serving BODY (a server block) from DIR.
nginx_conf() {
  mkdir -p "$1"
  cat >"$1/nginx.conf" <<EOF
worker_processes $2;
daemon off;
pid $1/nginx.pid;
error_log $1/error.log warn;
events { worker_connections 4096; }
http {
  access_log off;
  client_body_temp_path $1/cb; proxy_temp_path $1/p;
  fastcgi_temp_path $1/f; uwsgi_temp_path $1/u; scgi_temp_path $1/s;
  keepalive_requests 100000000;
  keepalive_timeout 120s;
  $3
}
EOF
}

# ticks PID: "utime stime" of PID and its children, in clock ticks.
ticks() {
  local p u=0 s=0 pu ps
  for p in "$1" $(pgrep -P "$1" || true); do
    read -r pu ps < <(awk '{print $14, $15}' "/proc/$p/stat" 2>/dev/null || echo "0 0")
    u=$((u + pu)); s=$((s + ps))
  done
  echo "$u $s"
}

UP_PORT=$(free_port)
nginx_conf "$WORK/up" 1 "server { listen 127.0.0.1:$UP_PORT; location / { default_type text/plain; return 200 \"ok\"; } }"
nginx -p "$WORK/up/" -e "$WORK/up/error.log" -c "$WORK/up/nginx.conf" &
PIDS+=($!)
wait_listening "$UP_PORT" 10 "${PIDS[0]}" || { echo "cpu-split.sh: the upstream did not start" >&2; exit 1; }

HZ=$(getconf CLK_TCK)
# run KIND: one measured run of KIND (nginx, easeoff or minproxy); appends a line to
# results.
run() {
  local port pid before after out rps
  port=$(free_port)
  if [ "$1" = nginx ]; then
    nginx_conf "$WORK/px" 2 "upstream up { server 127.0.0.1:$UP_PORT; keepalive 256; keepalive_requests 100000000; keepalive_timeout 120s; }
  server { listen 127.0.0.1:$port; location / { proxy_pass http://up; proxy_http_version 1.1;
    proxy_set_header Connection \"\"; proxy_buffer_size 16k; proxy_buffers 8 16k; proxy_max_temp_file_size 0; } }"
    nginx -p "$WORK/px/" -e "$WORK/px/error.log" -c "$WORK/px/nginx.conf" &
  elif [ "$1" = minproxy ]; then
    PORT=$port UPSTREAM=127.0.0.1:$UP_PORT MINPROXY_RUNTIME=percore "$MINPROXY" >"$WORK/proxy.log" 2>&1 &
  else
    PORT=$port UPSTREAM=127.0.0.1:$UP_PORT EASEOFF_RUNTIME=per-core \
      "$BIN" --log-format json --config "$REPO/bench/passthrough.toml" >"$WORK/proxy.log" 2>&1 &
  fi
  pid=$!
  PIDS+=("$pid")
  wait_listening "$port" 60 "$pid" || { echo "cpu-split.sh: $1 did not start" >&2; tail -5 "$WORK/proxy.log" >&2 || true; exit 1; }
  h2load --h1 -c"$C" -n20000 "http://127.0.0.1:$port/" >/dev/null
  before=$(ticks "$pid")
  out=$(h2load --h1 -c"$C" -n"$N" "http://127.0.0.1:$port/")
  after=$(ticks "$pid")
  grep -q "$N succeeded" <<<"$out" || { grep '^requests:' <<<"$out" >&2; exit 1; }
  rps=$(sed -n 's/^finished in .*, \([0-9.]*\) req\/s.*/\1/p' <<<"$out")
  kill -TERM "$pid" 2>/dev/null || true
  wait "$pid" 2>/dev/null || true
  awk -v b="$before" -v a="$after" -v n="$N" -v hz="$HZ" -v r="$rps" -v k="$1" 'BEGIN {
    split(b, x, " "); split(a, y, " ")
    u = (y[1] - x[1]) / hz / n * 1e6; s = (y[2] - x[2]) / hz / n * 1e6
    printf "%-8s user=%.2f sys=%.2f total=%.2f us/req rps=%.0f\n", k, u, s, u + s, r }' \
    | tee -a "$WORK/results"
}

for ((r = 1; r <= ROUNDS; r++)); do
  for k in $KINDS; do run "$k"; done
done
# median FIELD KIND: the median of FIELD (user, sys, total, rps) over KIND's runs.
median() {
  sed -n "s/^$2 .*$1=\([0-9.]*\).*/\1/p" "$WORK/results" | sort -n \
    | awk '{ v[NR] = $1 } END { print NR % 2 ? v[(NR + 1) / 2] : (v[NR / 2] + v[NR / 2 + 1]) / 2 }'
}
echo "medians over $ROUNDS rounds ($N requests, $C connections each):"
for k in $KINDS; do
  printf '%-8s user=%.2f sys=%.2f total=%.2f us/req rps=%.0f\n' "$k" \
    "$(median user "$k")" "$(median sys "$k")" "$(median total "$k")" "$(median rps "$k")"
done
