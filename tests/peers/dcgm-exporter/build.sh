#!/usr/bin/env bash
# Build the pinned dcgm-exporter (go.mod here: release 4.5.3-4.8.2, by module path and version, with cgo)
# into target/peers/dcgm-exporter/dcgm-exporter, where tests/e2e/dcgm_exporter_diff.rs and
# benches/dcgm_exporter_side_by_side.py look for it. Once per machine: the build is kept and redone only when
# go.mod, go.sum or this script change. Modules are verified against the committed go.sum (-mod=readonly,
# GOSUMDB=off: sum.golang.org is out of reach).
#
# The Go module proxy refuses github.com/NVIDIA/dcgm-exporter and github.com/NVIDIA/go-dcgm today (403 "This
# module version is not available"): the script asks once (under a second), says so and exits 0, and the
# differential test compares with the committed captures. Any other failure fails it. README.md.
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
root=$(cd "$here/../../.." && pwd)
out="${CARGO_TARGET_DIR:-$root/target}/peers/dcgm-exporter"
module=github.com/NVIDIA/dcgm-exporter
version=$(awk -v m="$module" '$1 == m { print $2 } $1 == "require" && $2 == m { print $3 }' "$here/go.mod")
export GOSUMDB=off GOFLAGS=-mod=readonly GOTOOLCHAIN=local CGO_ENABLED=1

key=$(cat "$here/go.mod" "$here/go.sum" "$0" | sha256sum | cut -c1-16)
if [ -x "$out/dcgm-exporter" ] && [ "$(cat "$out/key" 2>/dev/null)" = "$key" ]; then
  echo "dcgm-exporter $version: built before ($out/dcgm-exporter)"
  exit 0
fi
command -v go >/dev/null || { echo "dcgm-exporter: no go command; the differential test uses its captures"; exit 0; }

# Served (and equal to go.sum)? One request when it is not: the proxy refuses it today.
if ! answer=$(cd "$here" && timeout 120 go mod download -json "$module@$version" 2>&1) ||
   grep -q '"Error"' <<<"$answer"; then
  if grep -q '403\|not available\|404\|410' <<<"$answer"; then
    echo "dcgm-exporter $version: not built, the Go module proxy refuses it:"
    sed -n 's/.*"Error": "\(.*\)"/  \1/p' <<<"$answer" | sed 's/\\n\\t/ /g' | head -n 3
    echo "  (GOSUMDB=off go mod download -json $module@$version); the differential test uses its captures"
    exit 0
  fi
  echo "dcgm-exporter $version: cannot download it:" >&2
  echo "$answer" >&2
  exit 1
fi

echo "building dcgm-exporter $version (cgo) into $out"
mkdir -p "$out"
(cd "$here" && go build -trimpath -o "$out/dcgm-exporter" "$module/cmd/dcgm-exporter")
echo "$key" >"$out/key"
echo "dcgm-exporter $version: $out/dcgm-exporter"
