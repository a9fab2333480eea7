package dcgmreceiver

import (
	"errors"
	"fmt"
	"strconv"
	"strings"
	"time"
)

// Config is the receiver's configuration. Each key is one dcgm-otel flag (README.md has the table);
// the engine checks the values the way the binary checks its flags.
type Config struct {
	// CollectionInterval is how often the engine collects (-c).
	CollectionInterval time.Duration `mapstructure:"collection_interval"`
	// Source is dcgm, nvml, auto or simulate (--source, --simulate).
	Source string `mapstructure:"source"`
	// Scenario is the simulated fleet with source simulate (--simulate=SCENARIO): a built-in name or
	// a scenario file.
	Scenario string `mapstructure:"scenario"`
	// SimulateSeed is the simulated fleet's seed (--simulate-seed); 0: the default.
	SimulateSeed uint64 `mapstructure:"simulate_seed"`
	// HostEngine is nv-hostengine's address (-r); empty: DCGM's embedded host engine.
	HostEngine string `mapstructure:"host_engine"`
	// DCGMLibrary is the libdcgm to load (--dcgm-library); empty: libdcgm.so.4 from the loader's path.
	DCGMLibrary string `mapstructure:"dcgm_library"`
	// CountersFile is the counters CSV (-f); empty: the built-in default counters.
	CountersFile string `mapstructure:"counters_file"`
	// Kubernetes attributes GPUs to pods (-k and its flags).
	Kubernetes KubernetesConfig `mapstructure:"kubernetes"`
	// CollectProcesses adds per-process readings (--collect-processes); unset: the engine's default.
	CollectProcesses *bool `mapstructure:"collect_processes"`
	// MetricNames is dcgm, semconv or both (--otel-metric-names).
	MetricNames string `mapstructure:"metric_names"`
	// ResourceMode is per-entity or host (--otel-resource-mode).
	ResourceMode string `mapstructure:"resource_mode"`
	// AttributeStyle is otel or dcgm (--otel-attribute-style).
	AttributeStyle string `mapstructure:"attribute_style"`
	// Distributions are fields sampled between collections, FIELD@PERIOD (--distribution).
	Distributions []string `mapstructure:"distributions"`
	// IncidentLogs sends GPU incidents as log records to the logs pipeline (--otlp-logs).
	IncidentLogs bool `mapstructure:"incident_logs"`
	// LibraryPath is libdcgm_otel_engine.so; a bare name is searched on the loader's path.
	LibraryPath string `mapstructure:"library_path"`
	// StopTimeout bounds the engine's stop at shutdown (a hung DCGM call is left behind after it).
	StopTimeout time.Duration `mapstructure:"stop_timeout"`
	// RetryInterval is how long the receiver waits before starting the engine again after it could
	// not (the library missing, the environment failing).
	RetryInterval time.Duration `mapstructure:"retry_interval"`
}

// KubernetesConfig is the pod attribution (-k).
type KubernetesConfig struct {
	Enabled bool `mapstructure:"enabled"`
	// GPUIDType is uid or device-name (--kubernetes-gpu-id-type).
	GPUIDType string `mapstructure:"gpu_id_type"`
	// PodResourcesSocket is the kubelet's pod-resources socket (--pod-resources-kubelet-socket).
	PodResourcesSocket string `mapstructure:"pod_resources_socket"`
	// VirtualGPUs splits shared GPUs by pod (--kubernetes-virtual-gpus).
	VirtualGPUs bool `mapstructure:"virtual_gpus"`
	// PodLabels adds pod labels (--kubernetes-enable-pod-labels).
	PodLabels bool `mapstructure:"pod_labels"`
}

func oneOf(key, value string, allowed ...string) error {
	for _, a := range allowed {
		if value == a {
			return nil
		}
	}
	return fmt.Errorf("%s: %q is not one of %s", key, value, strings.Join(allowed, ", "))
}

// Validate refuses a configuration with one error naming the key; what only the engine can check
// (files, device names) it checks at start.
func (c *Config) Validate() error {
	if c.CollectionInterval < 100*time.Millisecond || c.CollectionInterval > time.Hour {
		return fmt.Errorf("collection_interval: %s is not within 100ms..1h (the engine's -c range)", c.CollectionInterval)
	}
	if c.CollectionInterval%time.Millisecond != 0 {
		return fmt.Errorf("collection_interval: %s is not a whole number of milliseconds", c.CollectionInterval)
	}
	checks := []error{
		oneOf("source", c.Source, "dcgm", "nvml", "auto", "simulate"),
		oneOf("metric_names", c.MetricNames, "dcgm", "semconv", "both"),
		oneOf("resource_mode", c.ResourceMode, "per-entity", "host"),
		oneOf("attribute_style", c.AttributeStyle, "otel", "dcgm"),
	}
	if c.Kubernetes.GPUIDType != "" {
		checks = append(checks, oneOf("kubernetes.gpu_id_type", c.Kubernetes.GPUIDType, "uid", "device-name"))
	}
	for _, err := range checks {
		if err != nil {
			return err
		}
	}
	if c.Source != "simulate" && (c.Scenario != "" || c.SimulateSeed != 0) {
		return errors.New("scenario, simulate_seed: only with source simulate")
	}
	if c.Source == "simulate" && (c.HostEngine != "" || c.DCGMLibrary != "") {
		return errors.New("host_engine, dcgm_library: not with source simulate")
	}
	if c.Source == "nvml" && c.HostEngine != "" {
		return errors.New("host_engine: not with source nvml (NVML has no host engine)")
	}
	if c.MetricNames != "dcgm" && c.AttributeStyle != "otel" {
		return errors.New("metric_names: semconv and both need attribute_style otel")
	}
	for i, d := range c.Distributions {
		if !strings.Contains(d, "@") {
			return fmt.Errorf("distributions[%d]: %q is not FIELD@PERIOD (e.g. DCGM_FI_DEV_POWER_USAGE@100ms)", i, d)
		}
	}
	if c.LibraryPath == "" {
		return errors.New("library_path: empty (the default is libdcgm_otel_engine.so)")
	}
	if c.StopTimeout <= 0 || c.RetryInterval <= 0 {
		return errors.New("stop_timeout, retry_interval: must be positive")
	}
	return nil
}

// engineArgs are the dcgm-otel flags the configuration stands for.
func (c *Config) engineArgs() []string {
	args := []string{"-c", strconv.FormatInt(c.CollectionInterval.Milliseconds(), 10)}
	switch c.Source {
	case "simulate":
		scenario := c.Scenario
		if scenario == "" {
			scenario = "default"
		}
		args = append(args, "--simulate="+scenario)
		if c.SimulateSeed != 0 {
			args = append(args, "--simulate-seed", strconv.FormatUint(c.SimulateSeed, 10))
		}
	default:
		args = append(args, "--source", c.Source)
	}
	if c.HostEngine != "" {
		args = append(args, "-r", c.HostEngine)
	}
	if c.DCGMLibrary != "" {
		args = append(args, "--dcgm-library", c.DCGMLibrary)
	}
	if c.CountersFile != "" {
		args = append(args, "-f", c.CountersFile)
	}
	args = append(args, "-k="+strconv.FormatBool(c.Kubernetes.Enabled))
	if c.Kubernetes.Enabled {
		if c.Kubernetes.GPUIDType != "" {
			args = append(args, "--kubernetes-gpu-id-type", c.Kubernetes.GPUIDType)
		}
		if c.Kubernetes.PodResourcesSocket != "" {
			args = append(args, "--pod-resources-kubelet-socket", c.Kubernetes.PodResourcesSocket)
		}
		args = append(args,
			"--kubernetes-virtual-gpus="+strconv.FormatBool(c.Kubernetes.VirtualGPUs),
			"--kubernetes-enable-pod-labels="+strconv.FormatBool(c.Kubernetes.PodLabels))
	}
	if c.CollectProcesses != nil {
		args = append(args, "--collect-processes="+strconv.FormatBool(*c.CollectProcesses))
	}
	args = append(args,
		"--otel-metric-names", c.MetricNames,
		"--otel-resource-mode", c.ResourceMode,
		"--otel-attribute-style", c.AttributeStyle,
		"--otlp-logs="+strconv.FormatBool(c.IncidentLogs))
	for _, d := range c.Distributions {
		args = append(args, "--distribution", d)
	}
	return args
}
