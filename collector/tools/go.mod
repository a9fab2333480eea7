module github.com/dcgm-otel/dcgm-otel/collector/tools

go 1.26.0

require go.opentelemetry.io/collector/cmd/mdatagen v0.158.0
