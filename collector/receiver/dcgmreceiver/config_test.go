package dcgmreceiver

import (
	"path/filepath"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"go.opentelemetry.io/collector/component"
	"go.opentelemetry.io/collector/confmap"
	"go.opentelemetry.io/collector/confmap/confmaptest"

	"github.com/dcgm-otel/dcgm-otel/collector/receiver/dcgmreceiver/internal/metadata"
)

func load(t *testing.T, name string) *Config {
	cm, err := confmaptest.LoadConf(filepath.Join("testdata", "config.yaml"))
	require.NoError(t, err)
	sub, err := cm.Sub(component.MustNewIDWithName(metadata.Type.String(), name).String())
	require.NoError(t, err)
	cfg := NewFactory().CreateDefaultConfig()
	require.NoError(t, sub.Unmarshal(cfg))
	return cfg.(*Config)
}

func TestDefaultsAreTheBinarysDefaults(t *testing.T) {
	cfg := load(t, "")
	require.NoError(t, confmap.Validate(cfg))
	assert.Equal(t, []string{
		"-c", "30000", "--source", "dcgm", "-k=false",
		"--otel-metric-names", "dcgm", "--otel-resource-mode", "per-entity",
		"--otel-attribute-style", "otel", "--otlp-logs=true",
	}, cfg.engineArgs())
}

func TestEveryKeyIsItsFlag(t *testing.T) {
	cfg := load(t, "all")
	require.NoError(t, confmap.Validate(cfg))
	assert.Equal(t, 10*time.Second, cfg.CollectionInterval)
	assert.Equal(t, []string{
		"-c", "10000", "--simulate=dgx-h100-mig", "--simulate-seed", "7",
		"-f", "/etc/dcgm-exporter/default-counters.csv",
		"-k=true", "--kubernetes-gpu-id-type", "device-name",
		"--pod-resources-kubelet-socket", "/var/lib/kubelet/pod-resources/kubelet.sock",
		"--kubernetes-virtual-gpus=true", "--kubernetes-enable-pod-labels=true",
		"--collect-processes=true",
		"--otel-metric-names", "semconv", "--otel-resource-mode", "host",
		"--otel-attribute-style", "otel", "--otlp-logs=false",
		"--distribution", "DCGM_FI_DEV_POWER_USAGE@100ms",
	}, cfg.engineArgs())
	assert.Equal(t, "/opt/dcgm-otel/lib/libdcgm_otel_engine.so", cfg.LibraryPath)

	remote := load(t, "remote")
	require.NoError(t, confmap.Validate(remote))
	assert.Contains(t, remote.engineArgs(), "nv-hostengine.gpu-operator:5555")
}

func TestInvalidConfigsAreRefusedWithOneError(t *testing.T) {
	for name, want := range map[string]string{
		"bad_source":                `source: "dcgmi" is not one of dcgm, nvml, auto, simulate`,
		"bad_interval":              "collection_interval: 150.5ms is not a whole number of milliseconds",
		"short_interval":            "collection_interval: 50ms is not within 100ms..1h (the engine's -c range)",
		"semconv_dcgm_style":        "metric_names: semconv and both need attribute_style otel",
		"scenario_without_simulate": "scenario, simulate_seed: only with source simulate",
		"bad_distribution":          `distributions[0]: "DCGM_FI_DEV_POWER_USAGE" is not FIELD@PERIOD (e.g. DCGM_FI_DEV_POWER_USAGE@100ms)`,
		"host_engine_with_nvml":     "host_engine: not with source nvml (NVML has no host engine)",
	} {
		t.Run(name, func(t *testing.T) {
			err := confmap.Validate(load(t, name))
			require.Error(t, err)
			assert.Equal(t, want, err.Error())
		})
	}
}
