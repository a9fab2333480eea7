package dcgmreceiver

import (
	"context"
	"errors"
	"sync"
	"time"

	"go.opentelemetry.io/collector/component"
	"go.opentelemetry.io/collector/component/componentstatus"
	"go.opentelemetry.io/collector/consumer"
	"go.opentelemetry.io/collector/consumer/consumererror"
	"go.opentelemetry.io/collector/pdata/plog"
	"go.opentelemetry.io/collector/pdata/pmetric"
	"go.opentelemetry.io/collector/receiver"
	"go.uber.org/zap"

	"github.com/dcgm-otel/dcgm-otel/collector/receiver/dcgmreceiver/internal/metadata"
)

// collectWaitMs is how long one collect call waits for the next collection: the loop looks at its
// stop channel at least this often.
const collectWaitMs = 500

// dcgmReceiver runs one engine for one configuration and hands each collection to the metrics and
// logs consumers. It never fails Start: an engine that cannot start is reported through component
// status and started again after retry_interval.
type dcgmReceiver struct {
	cfg       *Config
	set       receiver.Settings
	telemetry *metadata.TelemetryBuilder
	forget    func()
	metrics   consumer.Metrics
	logs      consumer.Logs

	startOnce sync.Once
	stopOnce  sync.Once
	host      component.Host
	stopCh    chan struct{}
	done      chan struct{}
	engine    *engine
	// lastReady is the readiness last reported ("" when ready).
	lastReady string
	reported  bool
}

func newReceiver(cfg *Config, set receiver.Settings, telemetry *metadata.TelemetryBuilder, forget func()) *dcgmReceiver {
	return &dcgmReceiver{
		cfg:       cfg,
		set:       set,
		telemetry: telemetry,
		forget:    forget,
		stopCh:    make(chan struct{}),
		done:      make(chan struct{}),
	}
}

func (r *dcgmReceiver) setMetrics(next consumer.Metrics) { r.metrics = next }
func (r *dcgmReceiver) setLogs(next consumer.Logs)       { r.logs = next }

// Start starts the engine's loop once for both pipelines; it does not wait for the engine.
func (r *dcgmReceiver) Start(_ context.Context, host component.Host) error {
	r.startOnce.Do(func() {
		r.host = host
		go r.run()
	})
	return nil
}

// Shutdown stops the loop and the engine (at most stop_timeout, or the context's deadline if sooner).
func (r *dcgmReceiver) Shutdown(ctx context.Context) error {
	var err error
	r.stopOnce.Do(func() {
		r.forget()
		defer r.telemetry.Shutdown()
		close(r.stopCh)
		started := false
		r.startOnce.Do(func() { close(r.done) })
		select {
		case <-r.done:
			started = true
		case <-ctx.Done():
			err = ctx.Err()
			return
		}
		if started && r.engine != nil {
			timeout := r.cfg.StopTimeout
			if deadline, ok := ctx.Deadline(); ok && time.Until(deadline) < timeout {
				timeout = max(time.Until(deadline), time.Millisecond)
			}
			if stopErr := r.engine.stop(uint32(timeout.Milliseconds())); stopErr != nil {
				r.set.Logger.Warn("the dcgm-otel engine did not stop in time; its collector thread is left behind", zap.Error(stopErr))
			}
			r.engine = nil
		}
	})
	return err
}

func (r *dcgmReceiver) report(event *componentstatus.Event) {
	if r.host != nil {
		componentstatus.ReportStatus(r.host, event)
	}
}

// run starts the engine (again, after retry_interval, when it cannot) and delivers its collections
// until stopped.
func (r *dcgmReceiver) run() {
	defer close(r.done)
	for {
		select {
		case <-r.stopCh:
			return
		default:
		}
		if r.engine == nil {
			switch r.startEngine() {
			case started:
			case refused:
				// A configuration the engine refuses stays refused: no retry.
				<-r.stopCh
				return
			case failed:
				select {
				case <-r.stopCh:
					return
				case <-time.After(r.cfg.RetryInterval):
				}
				continue
			}
		}
		r.collectOnce()
	}
}

type startOutcome int

const (
	started startOutcome = iota
	// refused: the engine refuses the configuration (reported as a permanent error).
	refused
	// failed: the library is missing or the environment failed (reported; retried).
	failed
)

// startEngine loads the library and starts the engine.
func (r *dcgmReceiver) startEngine() startOutcome {
	lib, err := loadLibrary(r.cfg.LibraryPath)
	if err == nil {
		r.engine, err = startEngine(lib, r.cfg.engineArgs())
	}
	if err == nil {
		r.set.Logger.Info("dcgm-otel engine started", zap.Strings("flags", r.cfg.engineArgs()))
		return started
	}
	r.telemetry.ReceiverDcgmEngineStartFailures.Add(context.Background(), 1)
	if IsBadOptions(err) {
		r.set.Logger.Error("the dcgm-otel engine refuses this configuration", zap.Error(err))
		r.report(componentstatus.NewPermanentErrorEvent(err))
		return refused
	}
	r.set.Logger.Error("cannot start the dcgm-otel engine; trying again", zap.Error(err), zap.Duration("retry_in", r.cfg.RetryInterval))
	r.report(componentstatus.NewRecoverableErrorEvent(err))
	return failed
}

// collectOnce waits for the next collection and hands it on.
func (r *dcgmReceiver) collectOnce() {
	c, err := r.engine.collect(collectWaitMs)
	var engineErr *EngineError
	switch {
	case err == nil:
	case errors.As(err, &engineErr) && engineErr.Status == statusEngineEnded:
		r.telemetry.ReceiverDcgmEngineErrors.Add(context.Background(), 1)
		r.set.Logger.Error("the dcgm-otel engine ended; starting it again", zap.Error(err))
		r.report(componentstatus.NewRecoverableErrorEvent(err))
		_ = r.engine.stop(uint32(r.cfg.StopTimeout.Milliseconds()))
		r.engine = nil
		return
	default:
		// A panic inside the engine (a bug), caught by the library: this collection is lost.
		r.telemetry.ReceiverDcgmEngineErrors.Add(context.Background(), 1)
		r.set.Logger.Error("collecting from the dcgm-otel engine failed", zap.Error(err))
		r.report(componentstatus.NewRecoverableErrorEvent(err))
		r.reported = false
		return
	}
	if testCollectionHook != nil {
		c = testCollectionHook(c)
	}
	ctx := context.Background()
	if len(c.metrics) > 0 && r.metrics != nil {
		md, err := (&pmetric.ProtoUnmarshaler{}).UnmarshalMetrics(c.metrics)
		if err != nil {
			r.set.Logger.Error("the engine's metrics request does not decode", zap.Error(err))
		} else {
			r.deliver("metrics", func() error { return r.metrics.ConsumeMetrics(ctx, md) })
		}
	}
	if len(c.logs) > 0 && r.logs != nil {
		ld, err := (&plog.ProtoUnmarshaler{}).UnmarshalLogs(c.logs)
		if err != nil {
			r.set.Logger.Error("the engine's logs request does not decode", zap.Error(err))
		} else {
			r.deliver("incident log records", func() error { return r.logs.ConsumeLogs(ctx, ld) })
		}
	}
	if len(c.metrics) > 0 || len(c.logs) > 0 {
		r.telemetry.ReceiverDcgmCollections.Add(ctx, 1)
	}
	if c.droppedRecords > 0 {
		r.telemetry.ReceiverDcgmLogRecordsDropped.Add(ctx, int64(c.droppedRecords))
		r.set.Logger.Warn("incident log records dropped: the receiver fell behind", zap.Uint64("dropped", c.droppedRecords))
	}
	if c.seq > 0 {
		r.reportReadiness()
	}
}

// deliver hands one collection to a consumer: a permanent error drops it (logged), a retryable one
// is retried, 10 ms doubling to 1 s, until accepted or the receiver stops. Meanwhile the engine keeps
// collecting: the metrics of collections not taken are skipped (cumulative sums carry them), log
// records wait in the engine's buffer.
func (r *dcgmReceiver) deliver(what string, consume func() error) {
	backoff := 10 * time.Millisecond
	for {
		err := consume()
		if err == nil {
			return
		}
		if consumererror.IsPermanent(err) {
			r.set.Logger.Debug("refused downstream; dropped", zap.String("data", what), zap.Error(err))
			return
		}
		select {
		case <-r.stopCh:
			r.set.Logger.Debug("refused downstream at shutdown; dropped", zap.String("data", what), zap.Error(err))
			return
		case <-time.After(backoff):
		}
		backoff = min(backoff*2, time.Second)
	}
}

// testCollectionHook lets the tests see (and mark) each collection before it is delivered; nil
// outside tests.
var testCollectionHook func(collection) collection

// reportReadiness reports OK, or a recoverable error with the engine's reason (a source down, stale
// data, fewer GPUs than the node has), when it changed.
func (r *dcgmReceiver) reportReadiness() {
	err := r.engine.ready()
	why := ""
	if err != nil {
		why = err.Error()
	}
	if r.reported && why == r.lastReady {
		return
	}
	r.reported, r.lastReady = true, why
	if err != nil {
		r.set.Logger.Warn("the dcgm-otel engine is not ready", zap.String("reason", why))
		r.report(componentstatus.NewRecoverableErrorEvent(err))
		return
	}
	r.report(componentstatus.NewEvent(componentstatus.StatusOK))
}
