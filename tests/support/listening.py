"""The port a process told to listen on 127.0.0.1:0 says it bound, read from its log (issue 40: a port is bound
once, by the process that serves on it, never found free here and bound again there, where another test may
take it in between).

What each process logs once it listens, with the bound address:
- dcgm-otel: "serving /metrics" ... `address=127.0.0.1:PORT` (text) or `"address":"127.0.0.1:PORT"` (JSON);
- Prometheus and dcgm-exporter (exporter-toolkit): "Listening on" ... `address=127.0.0.1:PORT`;
- the OpenTelemetry Collector's OTLP receiver: "Starting GRPC server" / "Starting HTTP server" ...
  `"endpoint": "127.0.0.1:PORT"`.

From Python: `port_in_log(path, needle, timeout_s, exited)`. From a shell script:
    port=$(python3 tests/support/listening.py LOG NEEDLE TIMEOUT_S [PID])
prints the port, or says why not on stderr and exits 1 (PID: give up as soon as that process is gone).
"""
import os
import re
import sys
import time

ADDRESS = re.compile(r'(?:address=|"address":\s*"|"endpoint":\s*")[^\s",]*:(\d+)')


def port_of(line, needle):
    """The port in `line` when it contains `needle` and an address, else None."""
    if needle not in line:
        return None
    m = ADDRESS.search(line)
    return int(m.group(1)) if m else None


def port_in_log(path, needle, timeout_s, exited=lambda: False, interval_s=0.05):
    """The port of the first line of the file `path` with `needle` and an address, read every interval_s;
    raises RuntimeError when `exited()` turns true first or after timeout_s."""
    deadline = time.monotonic() + timeout_s
    while True:
        try:
            with open(path, errors="replace") as f:
                for line in f:
                    port = port_of(line, needle)
                    if port is not None:
                        return port
        except FileNotFoundError:
            pass
        if exited():
            raise RuntimeError(f"{path}: the process exited before logging {needle!r} with an address")
        if time.monotonic() > deadline:
            raise RuntimeError(f"{path}: no {needle!r} line with an address within {timeout_s} s")
        time.sleep(interval_s)


def pid_gone(pid):
    """Whether process `pid` has ended (a zombie counts as ended)."""
    try:
        with open(f"/proc/{pid}/stat") as f:
            return f.read().rsplit(")", 1)[1].split()[0] == "Z"
    except OSError:
        return True


def main(argv):
    if len(argv) not in (4, 5):
        print(__doc__, file=sys.stderr)
        return 2
    path, needle, timeout_s = argv[1], argv[2], float(argv[3])
    pid = int(argv[4]) if len(argv) == 5 else None
    try:
        print(port_in_log(path, needle, timeout_s, lambda: pid is not None and pid_gone(pid)))
    except RuntimeError as e:
        print(e, file=sys.stderr)
        if os.path.exists(path):
            with open(path, errors="replace") as f:
                sys.stderr.writelines(f.readlines()[-20:])
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
