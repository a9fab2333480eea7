package dcgmreceiver

import (
	"context"
	"sync"
	"time"

	"go.opentelemetry.io/collector/component"
	"go.opentelemetry.io/collector/consumer"
	"go.opentelemetry.io/collector/receiver"

	"github.com/dcgm-otel/dcgm-otel/collector/receiver/dcgmreceiver/internal/metadata"
)

// NewFactory is the dcgm receiver's factory: metrics and logs pipelines of one configuration share
// one engine.
func NewFactory() receiver.Factory {
	return receiver.NewFactory(
		metadata.Type,
		createDefaultConfig,
		receiver.WithMetrics(createMetrics, metadata.MetricsStability),
		receiver.WithLogs(createLogs, metadata.LogsStability),
	)
}

func createDefaultConfig() component.Config {
	return &Config{
		CollectionInterval: 30 * time.Second,
		Source:             "dcgm",
		MetricNames:        "dcgm",
		ResourceMode:       "per-entity",
		AttributeStyle:     "otel",
		IncidentLogs:       true,
		LibraryPath:        "libdcgm_otel_engine.so",
		StopTimeout:        5 * time.Second,
		RetryInterval:      30 * time.Second,
	}
}

// receivers holds the receiver of each configuration (the metrics and the logs pipeline of one
// component get the same *Config), until it shuts down.
var (
	receivers   = map[*Config]*dcgmReceiver{}
	receiversMu sync.Mutex
)

func shared(cfg component.Config, set receiver.Settings) (*dcgmReceiver, error) {
	c := cfg.(*Config)
	receiversMu.Lock()
	defer receiversMu.Unlock()
	if r, ok := receivers[c]; ok {
		return r, nil
	}
	telemetry, err := metadata.NewTelemetryBuilder(set.TelemetrySettings)
	if err != nil {
		return nil, err
	}
	r := newReceiver(c, set, telemetry, func() {
		receiversMu.Lock()
		defer receiversMu.Unlock()
		delete(receivers, c)
	})
	receivers[c] = r
	return r, nil
}

func createMetrics(_ context.Context, set receiver.Settings, cfg component.Config, next consumer.Metrics) (receiver.Metrics, error) {
	r, err := shared(cfg, set)
	if err != nil {
		return nil, err
	}
	r.setMetrics(next)
	return r, nil
}

func createLogs(_ context.Context, set receiver.Settings, cfg component.Config, next consumer.Logs) (receiver.Logs, error) {
	r, err := shared(cfg, set)
	if err != nil {
		return nil, err
	}
	r.setLogs(next)
	return r, nil
}
