#!/usr/bin/env bash
# Regenerate the mdatagen code of the dcgm receiver (internal/metadata/, generated_*_test.go,
# documentation.md) from metadata.yaml, with the mdatagen pinned in collector/tools (go.mod, go.sum).
# --check: regenerate into a copy and fail when the committed files differ (tests/run-all.sh).
#
# mdatagen v0.158.0: the Go module proxy refuses (403) go.opentelemetry.io/collector/cmd/mdatagen at
# v0.159.0-v0.165.0 but v0.161.0, whose go.opentelemetry.io/collector/internal/schemagen it refuses too;
# v0.158.0 is the newest that builds. Its output compiles against the collector v0.165.0 / pdata v1.71.0
# this module uses (the tests prove it).
set -euo pipefail
here="$(cd "$(dirname "$0")" && pwd)"
tools="$here/../../tools"
export GOSUMDB=off GOFLAGS=-mod=readonly
bin="$(go env GOCACHE)/dcgm-otel-mdatagen-v0.158.0"
[ -x "$bin" ] || (cd "$tools" && go build -o "$bin" go.opentelemetry.io/collector/cmd/mdatagen)
if [ "${1:-}" != "--check" ]; then
  (cd "$here" && "$bin" metadata.yaml)
  exit 0
fi
tmp="$(mktemp -d)"
trap 'rm -rf "$tmp"' EXIT
work="$tmp/dcgmreceiver" # mdatagen names the package after the folder
mkdir "$work"
cp -r "$here/." "$work/"
(cd "$work" && rm -rf internal/metadata internal/metadatatest generated_*_test.go documentation.md && "$bin" metadata.yaml)
status=0
for f in documentation.md generated_component_test.go generated_package_test.go $(cd "$work" && find internal -name 'generated_*.go'); do
  if ! cmp -s "$work/$f" "$here/$f"; then
    echo "dcgmreceiver: $f is not what mdatagen makes of metadata.yaml; run collector/receiver/dcgmreceiver/generate.sh" >&2
    status=1
  fi
done
exit "$status"
