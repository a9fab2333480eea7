// Package dcgmreceiver is an OpenTelemetry Collector receiver of NVIDIA GPU metrics and incident log
// records, read through DCGM, NVML or a simulated fleet by the dcgm-otel engine
// (libdcgm_otel_engine.so, loaded with purego: no cgo). See README.md.
//
//go:generate mdatagen metadata.yaml
package dcgmreceiver // import "github.com/dcgm-otel/dcgm-otel/collector/receiver/dcgmreceiver"
