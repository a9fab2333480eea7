#!/usr/bin/env bash
# The Debian package (issue 24): build it with cargo-deb, check its contents (the third-party notices too), control data, conffiles and
# maintainer scripts with dpkg-deb, unpack it into a temporary root and run the packaged binary from there
# with --simulate, scraping /metrics. Usage: tests/packaging/check-deb.sh [cargo-deb arguments]
# tests/run-all.sh passes `--profile dev`: the package then holds the debug build (stripped) that the test
# command has just made, instead of a second, release build of the whole dependency tree on 2 cores; what is
# checked here (files, control data, scripts, a binary that runs) does not depend on the profile. cargo-deb
# 3.8 warns that it may refuse dev profiles one day: tests/run-all.sh pins 3.8.0. Users run plain `cargo deb`.
set -euo pipefail
cd "$(dirname "$0")/../.."
out=$(mktemp -d)
trap 'kill "${pid:-}" 2>/dev/null || true; rm -rf "$out"' EXIT
fail() { echo "check-deb: $*" >&2; exit 1; }

cargo deb --output "$out/" "$@" >"$out/build.log" 2>&1 || { cat "$out/build.log" >&2; fail "cargo deb failed"; }
deb=$(ls "$out"/*.deb)
[ "$(echo "$deb" | wc -l)" = 1 ] || fail "expected one .deb, got: $deb"

# Control data.
version=$(sed -n 's/^version = "\(.*\)"/\1/p' Cargo.toml | head -n1)
[ "$(dpkg-deb -f "$deb" Package)" = dcgm-otel ] || fail "Package is not dcgm-otel"
[ "$(dpkg-deb -f "$deb" Version)" = "$version-1" ] || fail "Version is not $version-1 (cargo-deb adds the Debian revision)"
[ "$(dpkg-deb -f "$deb" Architecture)" = "$(dpkg --print-architecture)" ] || fail "wrong Architecture"
dpkg-deb -f "$deb" Depends | grep -q 'libc6' || fail "Depends lacks libc6: $(dpkg-deb -f "$deb" Depends)"

# Contents: exactly these files (directories aside).
dpkg-deb -c "$deb" | awk '$1 !~ /^d/ {print $1, $6}' | sed 's|^\([^ ]*\) \./|\1 /|' | sort >"$out/files"
sort >"$out/expected" <<'LIST'
-rw-r--r-- /etc/dcgm-exporter/1.x-compatibility-metrics.csv
-rw-r--r-- /etc/dcgm-exporter/dcp-metrics-included.csv
-rw-r--r-- /etc/dcgm-exporter/default-counters.csv
-rw-r--r-- /etc/default/dcgm-otel
-rw-r--r-- /usr/lib/systemd/system/dcgm-otel.service
-rw-r--r-- /usr/lib/systemd/system/dcgm-otel.socket
-rw-r--r-- /usr/share/doc/dcgm-otel/README.md
-rw-r--r-- /usr/share/doc/dcgm-otel/THIRD-PARTY-NOTICES
-rw-r--r-- /usr/share/doc/dcgm-otel/copyright
-rwxr-xr-x /usr/bin/dcgm-otel
LIST
diff -u "$out/expected" "$out/files" || fail "package contents differ from the list above"

# Conffiles and the systemd hooks of the maintainer scripts.
dpkg-deb -e "$deb" "$out/DEBIAN"
sort "$out/DEBIAN/conffiles" >"$out/conffiles"
diff -u - "$out/conffiles" <<'LIST' || fail "conffiles differ"
/etc/dcgm-exporter/1.x-compatibility-metrics.csv
/etc/dcgm-exporter/dcp-metrics-included.csv
/etc/dcgm-exporter/default-counters.csv
/etc/default/dcgm-otel
LIST
grep -q 'deb-systemd-helper.*enable.*dcgm-otel.socket' "$out/DEBIAN/postinst" || fail "postinst does not enable dcgm-otel.socket"
grep -q 'deb-systemd-helper.*enable.*dcgm-otel.service' "$out/DEBIAN/postinst" || fail "postinst does not enable dcgm-otel.service"
grep -q 'deb-systemd-invoke.*stop.*dcgm-otel' "$out/DEBIAN/prerm" || fail "prerm does not stop the units"

# Unpacked: the files are the repository's, and the binary runs and serves from the packaged counters.
root="$out/root"
dpkg-deb -x "$deb" "$root"
for csv in packaging/dcgm-exporter/default-counters.csv src/counters/dcgm-exporter/*.csv; do
  cmp "$csv" "tests/fixtures/dcgm/dcgm-exporter-csv/4.5.3-4.8.2/$(basename "$csv")" || fail "$csv is not dcgm-exporter 4.5.3-4.8.2's"
  cmp "$csv" "$root/etc/dcgm-exporter/$(basename "$csv")" || fail "$csv not packaged as is"
done
cmp packaging/systemd/dcgm-otel.service "$root/usr/lib/systemd/system/dcgm-otel.service" || fail "unit changed in packaging"
grep -q 'Apache License' "$root/usr/share/doc/dcgm-otel/copyright" || fail "copyright lacks the licence"
# issue 35: the licence texts of the crates in the binary, as generated (tests/run-all.sh checks it current)
cmp packaging/THIRD-PARTY-NOTICES "$root/usr/share/doc/dcgm-otel/THIRD-PARTY-NOTICES" || fail "third-party notices not packaged as is"
"$root/usr/bin/dcgm-otel" --version | grep -q "$version" || fail "packaged binary: --version"
port=$(python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])')
"$root/usr/bin/dcgm-otel" --simulate -n -a "127.0.0.1:$port" \
  -f "$root/etc/dcgm-exporter/default-counters.csv" 2>"$out/stderr" &
pid=$!
for _ in $(seq 1 200); do
  curl -fsS "http://127.0.0.1:$port/ready" >/dev/null 2>&1 && break
  kill -0 "$pid" 2>/dev/null || { cat "$out/stderr" >&2; fail "packaged binary exited"; }
  sleep 0.1
done
curl -fsS "http://127.0.0.1:$port/metrics" >"$out/metrics" || fail "no /metrics from the packaged binary"
# dcgm-exporter's help text, from the packaged CSV (dcgm-otel's built-in set words it differently).
grep -qx '# HELP DCGM_FI_DEV_GPU_TEMP GPU temperature (in C).' "$out/metrics" \
  || fail "/metrics lacks dcgm-exporter's GPU_TEMP help: $(head -c 600 "$out/metrics")"
grep -q '^DCGM_FI_DEV_GPU_TEMP{gpu="0",' "$out/metrics" || fail "/metrics lacks DCGM_FI_DEV_GPU_TEMP"
echo "check-deb: $(basename "$deb") ($(du -k "$deb" | cut -f1) KiB): contents, control, conffiles, maintainer scripts, unpacked binary serving /metrics: OK"
