# Shared by the bench scripts (sourced): loopback port helpers.

# True when something listens on 127.0.0.1:PORT.
port_busy() { (exec 3<>"/dev/tcp/127.0.0.1/$1") 2>/dev/null; }

# A port nobody listens on, outside the ephemeral range that clients' own sockets use.
free_port() {
  local p
  while :; do
    p=$(( 20000 + (RANDOM * 32768 + RANDOM) % 40000 ))
    port_busy "$p" || { echo "$p"; return; }
  done
}
