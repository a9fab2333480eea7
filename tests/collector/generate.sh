#!/usr/bin/env bash
# Regenerates otelcol-dcgm/ (the collector's sources, go.mod and go.sum) from builder-config.yaml with ocb, the
# OpenTelemetry Collector Builder, at the version the distribution pins. Run it after changing
# builder-config.yaml and commit what changed; tests/collector/build.sh then builds the new distribution.
# Needs the Go module proxy (GOSUMDB=off: sum.golang.org is unreachable here; the go.sum written is complete).
set -euo pipefail
cd "$(dirname "$0")"
OCB_VERSION=v0.165.0
export GOSUMDB=off GOFLAGS=-buildvcs=false GOTOOLCHAIN=local
tools=$(mktemp -d)
trap 'rm -rf "$tools"' EXIT
GOBIN=$tools go install "go.opentelemetry.io/collector/cmd/builder@$OCB_VERSION"
rm -rf otelcol-dcgm
"$tools/builder" --config builder-config.yaml --skip-compilation
gofmt -w otelcol-dcgm   # ocb does not sort its imports
echo "regenerated tests/collector/otelcol-dcgm/ (commit it; build.sh builds it)"
