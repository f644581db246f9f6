# shellcheck shell=bash
# Shared by the bench scripts (sourced): loopback port helpers, a work directory.

# True when something listens on 127.0.0.1:PORT.
port_busy() { (exec 3<>"/dev/tcp/127.0.0.1/$1") 2>/dev/null; }

# A port nobody listens on, below the ephemeral range that clients' own sockets use
# (Linux: /proc/sys/net/ipv4/ip_local_port_range, 32768 by default), so a load
# generator's outgoing connection cannot take it between this check and the bind.
free_port() {
  local lo=32768 p
  read -r lo _ </proc/sys/net/ipv4/ip_local_port_range 2>/dev/null || lo=32768
  [ "$lo" -gt 11000 ] 2>/dev/null || lo=32768
  while :; do
    p=$(( 10000 + (RANDOM * 32768 + RANDOM) % (lo - 10000) ))
    port_busy "$p" || { echo "$p"; return; }
  done
}

# wait_listening PORT SECONDS PID: true once something listens on 127.0.0.1:PORT, false
# after SECONDS or as soon as PID has exited.
wait_listening() {
  local _
  for _ in $(seq 1 $(( $2 * 10 ))); do
    port_busy "$1" && return 0
    kill -0 "$3" 2>/dev/null || return 1
    sleep 0.1
  done
  return 1
}

# start_work NAME: a fresh directory $WORK (readable by nginx's workers) and an empty
# $PIDS; on exit every process in $PIDS is stopped and $WORK removed.
start_work() {
  WORK=$(mktemp -d "${TMPDIR:-/tmp}/$1.XXXXXX")
  chmod 755 "$WORK"
  PIDS=()
  trap stop_work EXIT
  trap 'exit 130' INT
  trap 'exit 143' TERM
}

stop_work() {
  local p
  for p in ${PIDS[@]+"${PIDS[@]}"}; do kill -TERM "$p" 2>/dev/null || true; done
  for p in ${PIDS[@]+"${PIDS[@]}"}; do wait "$p" 2>/dev/null || true; done
  rm -rf -- "$WORK"
}

# sdk_venv: sets $venv to the virtualenv of the vendors' SDKs the bench clients use,
# made (or made again, when the pins changed) on first use.
sdk_venv() {
  local pins="openai==1.59.9 anthropic==0.42.0"
  venv="${XDG_CACHE_HOME:-$HOME/.cache}/easeoff-bench-sdks"
  if [ "$(cat "$venv/.pins" 2>/dev/null)" != "$pins" ]; then
    rm -rf "$venv"
    python3 -m venv "$venv"
    # shellcheck disable=SC2086 # one requirement a word
    "$venv/bin/pip" install -q $pins
    echo "$pins" >"$venv/.pins"
  fi
}
