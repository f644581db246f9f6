#!/usr/bin/env bash
# bench/overhead.sh -- easeoff's pass-through overhead next to nginx, haproxy and the
# bare hyper reference (minproxy) in both runtime shapes, in one command.
#
# Builds easeoff and minproxy in release, then runs ../shared/bench/overhead.sh once
# per candidate per round, the candidates interleaved (round 1: A B C D, round 2:
# A B C D, ...) so machine drift hits them alike. overhead.sh takes one candidate
# per run, so every figure here is a ratio taken inside one overhead.sh run (the
# candidate against the nginx proxy of that same run), then:
#   x/nginx     median over rounds of that ratio, geometric mean over the matrix;
#   x/minproxy  per round, x/nginx divided by minproxy's x/nginx of the same round
#               (minproxy in its best shape: the lower CPU per request), then the
#               median over rounds and the geometric mean over the matrix.
# RSS idle: each candidate alone, 2 s after it listens, before any request.
#
# Usage: bench/overhead.sh [--rounds N] [--duration S] [--matrix "P:C ..."] [--h2]
#                          [--candidates "easeoff-percore easeoff-multi ..."]
#                          [--out DIR] [--no-build]
#   candidates: easeoff-percore easeoff-multi minproxy-percore minproxy-multi
#   (default: all four). Defaults: 3 rounds, overhead.sh's own duration and matrix.
#   --out DIR keeps every run's raw results (DIR/rR-NAME/) and the tables.
#   EASEOFF_BIN=PATH measures that easeoff instead of building one: the image's
#   profile-guided build is target/docker-context/release/easeoff after .ci/docker-context.
# Needs nginx, haproxy, wrk (and h2load for --h2), cargo. Takes about
# rounds x candidates x 2 min. Prints markdown tables for BENCHMARKS.md last.
# Every process started here, and by overhead.sh, is stopped on exit.
set -euo pipefail

REPO=$(cd "$(dirname "$0")/.." && pwd)
TOOLS=${EASEOFF_BENCH_TOOLS:-$REPO/../shared/bench}
ROUNDS=3
PASS=()
CANDIDATES="easeoff-percore easeoff-multi minproxy-percore minproxy-multi"
OUT=""
BUILD=1
H2=0
while [ $# -gt 0 ]; do
  case "$1" in
    --rounds) ROUNDS=${2:?}; shift 2 ;;
    --duration|--matrix) PASS+=("$1" "${2:?}"); shift 2 ;;
    --h2) H2=1; PASS+=(--h2); shift ;;
    --candidates) CANDIDATES=${2:?}; shift 2 ;;
    --out) OUT=${2:?}; shift 2 ;;
    --no-build) BUILD=0; shift ;;
    -h|--help) sed -n '2,/^set -euo/p' "$0" | sed '$d; s/^# \{0,1\}//'; exit 0 ;;
    *) echo "bench/overhead.sh: unknown argument: $1 (try --help)" >&2; exit 2 ;;
  esac
done
[ -x "$TOOLS/overhead.sh" ] || { echo "bench/overhead.sh: no $TOOLS/overhead.sh (set EASEOFF_BENCH_TOOLS)" >&2; exit 2; }

EASEOFF=${EASEOFF_BIN:-$REPO/target/release/easeoff}
MINPROXY_TARGET=$REPO/target/minproxy
MINPROXY=$MINPROXY_TARGET/release/minproxy
if [ "$BUILD" = 1 ]; then
  [ -n "${EASEOFF_BIN:-}" ] || cargo build --release --quiet --manifest-path "$REPO/Cargo.toml"
  cargo build --release --quiet --manifest-path "$TOOLS/minproxy/Cargo.toml" --target-dir "$MINPROXY_TARGET"
fi

command_of() { # the overhead.sh --under-test command of a candidate
  case "$1" in
    easeoff-percore) echo "EASEOFF_RUNTIME=per-core exec $EASEOFF --log-format json --config $REPO/bench/passthrough.toml" ;;
    easeoff-multi) echo "EASEOFF_RUNTIME=multi-thread exec $EASEOFF --log-format json --config $REPO/bench/passthrough.toml" ;;
    minproxy-percore) echo "MINPROXY_RUNTIME=percore exec $MINPROXY" ;;
    minproxy-multi) echo "MINPROXY_RUNTIME=multi exec $MINPROXY" ;;
    *) echo "bench/overhead.sh: unknown candidate $1" >&2; return 2 ;;
  esac
}
for c in $CANDIDATES; do command_of "$c" >/dev/null; done
# Each candidate's binary must be there: --no-build builds nothing, and EASEOFF_BIN may
# point anywhere.
for c in $CANDIDATES; do
  case "$c" in easeoff-*) bin=$EASEOFF ;; *) bin=$MINPROXY ;; esac
  [ -x "$bin" ] || { echo "bench/overhead.sh: $c: no executable at $bin (build it, or drop --no-build)" >&2; exit 2; }
done

WORK=$(mktemp -d "${TMPDIR:-/tmp}/easeoff-overhead.XXXXXX")
PROBE=""
cleanup() {
  local rc=$?
  trap - EXIT INT TERM
  if [ -n "$PROBE" ]; then kill -TERM "$PROBE" 2>/dev/null || true; wait "$PROBE" 2>/dev/null || true; fi
  if [ -n "$OUT" ]; then mkdir -p "$OUT" && cp -r "$WORK"/. "$OUT"/ 2>/dev/null || true; fi
  rm -rf -- "$WORK"
  exit $rc
}
trap cleanup EXIT
trap 'exit 130' INT
trap 'exit 143' TERM

. "$REPO/bench/lib.sh"

# RSS idle: the candidate alone, forwarding to a closed port (no request is sent).
for c in $CANDIDATES; do
  PORT=$(free_port); UPSTREAM=127.0.0.1:$(free_port)
  PORT=$PORT UPSTREAM=$UPSTREAM bash -c "$(command_of "$c")" >"$WORK/probe.$c.log" 2>&1 &
  PROBE=$!
  for _ in $(seq 1 100); do port_busy "$PORT" && break; sleep 0.1; done
  sleep 2
  rss=$(awk '/^VmRSS:/ {print $2}' "/proc/$PROBE/status" 2>/dev/null || echo 0)
  printf '%s\t%s\n' "$c" "${rss:-0}" >>"$WORK/rss_idle.tsv"
  kill -TERM "$PROBE" 2>/dev/null || true; wait "$PROBE" 2>/dev/null || true; PROBE=""
done

for ((r=1; r<=ROUNDS; r++)); do
  for c in $CANDIDATES; do
    echo "# round $r/$ROUNDS: $c" >&2
    # A run that could not start (a port taken by someone else on a shared machine)
    # is tried once more.
    for attempt in 1 2; do
      rm -rf "$WORK/r$r-$c"
      "$TOOLS/overhead.sh" --rounds 1 "${PASS[@]}" --under-test "$(command_of "$c")" \
        --name "$c" --out "$WORK/r$r-$c" >"$WORK/r$r-$c.txt" 2>"$WORK/r$r-$c.err" && break
      tail -3 "$WORK/r$r-$c.err" >&2
      [ "$attempt" = 2 ] && exit 1
    done
    tail -1 "$WORK/r$r-$c.txt" | sed "s/^under-test/  $c/" >&2
  done
done

# One line per (round, candidate, config): the candidate's ratios to that run's nginx
# and haproxy's, and the run's absolute figures.
for ((r=1; r<=ROUNDS; r++)); do
  for c in $CANDIDATES; do
    awk -F'\t' -v r="$r" -v c="$c" '
      NR == 1 { next }
      { k = $3 ":" $4; rps[$2, k] = $5; p50[$2, k] = $6; p99[$2, k] = $8
        cpu[$2, k] = $12 / $10; keys[k] = 1 }
      END { for (k in keys) printf "%d\t%s\t%s\t%f\t%f\t%f\t%f\t%f\t%f\t%f\n", r, c, k,
              rps["under-test", k] / rps["nginx", k], p50["under-test", k] / p50["nginx", k],
              p99["under-test", k] / p99["nginx", k], cpu["under-test", k] / cpu["nginx", k],
              rps["haproxy", k] / rps["nginx", k], cpu["haproxy", k] / cpu["nginx", k],
              rps["nginx", k] }' "$WORK/r$r-$c/results.tsv" >>"$WORK/ratios.tsv"
  done
done

machine="$(nproc) cpus, $(uname -sr), load average $(cut -d' ' -f1-3 /proc/loadavg)"
awk -F'\t' -v rounds="$ROUNDS" -v cands="$CANDIDATES" -v rssfile="$WORK/rss_idle.tsv" \
    -v machine="$machine" -v h2="$H2" '
function median(list,    n, a, i, j, v) {
  n = split(list, a, " ")
  for (i = 2; i <= n; i++) { v = a[i]; j = i - 1; while (j >= 1 && a[j] + 0 > v + 0) { a[j+1] = a[j]; j-- } a[j+1] = v }
  return (n % 2) ? a[(n + 1) / 2] : (a[n / 2] + a[n / 2 + 1]) / 2
}
function gmean(c, m,    k, s, n) { s = 0; n = 0; for (k in K) if ((c, m, k) in MED) { s += log(MED[c, m, k]); n++ } return n ? exp(s / n) : -1 }
BEGIN { while ((getline line < rssfile) > 0) { split(line, f, "\t"); RSS[f[1]] = f[2] } }
{ r = $1; c = $2; k = $3; K[k] = 1
  V[c, "rps", k] = V[c, "rps", k] " " $4; V[c, "p50", k] = V[c, "p50", k] " " $5
  V[c, "p99", k] = V[c, "p99", k] " " $6; V[c, "cpu", k] = V[c, "cpu", k] " " $7
  V["haproxy", "rps", k] = V["haproxy", "rps", k] " " $8; V["haproxy", "cpu", k] = V["haproxy", "cpu", k] " " $9
  R[r, c, "rps", k] = $4; R[r, c, "cpu", k] = $7 }
END {
  n = split(cands, C, " "); C[++n] = "haproxy"
  for (i = 1; i <= n; i++) for (k in K) for (m in M0) {}
  split("rps p50 p99 cpu", MS, " ")
  for (i = 1; i <= n; i++) for (k in K) for (j = 1; j <= 4; j++) if ((C[i], MS[j], k) in V) MED[C[i], MS[j], k] = median(V[C[i], MS[j], k])
  # minproxy in its best shape: lower CPU per request (geometric mean over the matrix)
  best = ""; bc = 1e9
  for (i = 1; i <= n; i++) if (C[i] ~ /^minproxy/ && gmean(C[i], "cpu") < bc) { bc = gmean(C[i], "cpu"); best = C[i] }
  for (i = 1; i <= n; i++) for (k in K) for (m = 1; m <= 4; m += 3) {
    if (best == "" || C[i] == "haproxy") continue
    list = ""; for (r = 1; r <= rounds; r++) if ((r, best, MS[m], k) in R && R[r, best, MS[m], k] > 0) list = list " " R[r, C[i], MS[m], k] / R[r, best, MS[m], k]
    if (list != "") MED[C[i], "mp" MS[m], k] = median(list)
  }
  printf "\n## Pass-through overhead (%s; %d round(s); %s)\n\n", h2 ? "HTTP/2 h2c, h2load" : "HTTP/1.1 keep-alive, wrk", rounds, machine
  printf "Ratios inside each overhead.sh run, medians over rounds, geometric mean over the matrix; minproxy best shape: %s.\n\n", best
  printf "| target | rps / nginx | p50 / nginx | p99 / nginx | CPU/req / nginx | rps / minproxy | CPU/req / minproxy | RSS idle |\n"
  printf "|---|---:|---:|---:|---:|---:|---:|---:|\n"
  for (i = 1; i <= n; i++) {
    mp = (best != "" && C[i] != "haproxy") ? sprintf("%.2f | %.2f", gmean(C[i], "mprps"), gmean(C[i], "mpcpu")) : "- | -"
    rss = (C[i] in RSS) ? sprintf("%.1f MiB", RSS[C[i]] / 1024) : "-"
    if (C[i] == "haproxy") printf "| haproxy | %.2f | - | - | %.2f | - | - | - |\n", gmean(C[i], "rps"), gmean(C[i], "cpu")
    else printf "| %s | %.2f | %.2f | %.2f | %.2f | %s | %s |\n", C[i], gmean(C[i], "rps"), gmean(C[i], "p50"), gmean(C[i], "p99"), gmean(C[i], "cpu"), mp, rss
  }
  printf "\nPer configuration (path:connections), rps / nginx and CPU/req / nginx:\n\n| target |"
  nk = 0; for (k in K) KK[++nk] = k
  for (a = 2; a <= nk; a++) { v = KK[a]; b = a - 1; while (b >= 1 && KK[b] > v) { KK[b+1] = KK[b]; b-- } KK[b+1] = v }
  for (a = 1; a <= nk; a++) printf " %s rps | %s cpu |", KK[a], KK[a]
  printf "\n|---|"; for (a = 1; a <= nk; a++) printf "---:|---:|"; printf "\n"
  for (i = 1; i <= n; i++) { printf "| %s |", C[i]; for (a = 1; a <= nk; a++) printf " %.2f | %.2f |", MED[C[i], "rps", KK[a]], MED[C[i], "cpu", KK[a]]; printf "\n" }
}' "$WORK/ratios.tsv" | tee "$WORK/tables.md"
