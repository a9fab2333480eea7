# Sourced by shell scripts (benches/load.sh, benches/collection_cost.sh, tests/stack/run-stack-test.sh): the port
# a process told to listen on 127.0.0.1:0 says it bound, read from its log (issue 40: a port is bound once, by the
# process that serves on it, never found free here and bound again there). The same rule as
# tests/support/listening.py, in shell, so that a bench polling every 5 ms starts no interpreter.
#
# What each logs: dcgm-otel "serving /metrics ... address=127.0.0.1:PORT" (text) or "address":"127.0.0.1:PORT"
# (JSON); Prometheus "Listening on ... address=127.0.0.1:PORT"; the OTel Collector's OTLP receiver
# "Starting GRPC server ... "endpoint": "127.0.0.1:PORT"".
# dcgm-otel logs that line at level INFO: a script that quiets it keeps that line, e.g.
# RUST_LOG=warn,dcgm_otel::server=info.

# logged_port LOG NEEDLE PID [TIMEOUT_S=20] -> prints the port of the first line of LOG with NEEDLE and an
# address; fails (status 1, with the log's end on stderr) when PID exits first or after TIMEOUT_S.
logged_port() {
  local log=$1 needle=$2 pid=$3 limit=${4:-20} end port
  end=$((SECONDS + limit))
  while :; do
    port=$( (grep -F -- "$needle" "$log" 2>/dev/null || true) |
      grep -oE '(address=|"address": ?"|"endpoint": ?")[^ ",]*:[0-9]+' | head -n 1 | grep -oE '[0-9]+$' || true)
    if [ -n "$port" ]; then echo "$port"; return 0; fi
    if ! kill -0 "$pid" 2>/dev/null; then
      echo "$log: process $pid exited before logging '$needle' with an address:" >&2; tail -n 20 "$log" >&2
      return 1
    fi
    if [ "$SECONDS" -ge "$end" ]; then
      echo "$log: no '$needle' line with an address within $limit s:" >&2; tail -n 20 "$log" >&2
      return 1
    fi
    sleep 0.005
  done
}
