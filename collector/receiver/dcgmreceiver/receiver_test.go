package dcgmreceiver

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"go.opentelemetry.io/collector/component"
	"go.opentelemetry.io/collector/component/componentstatus"
	"go.opentelemetry.io/collector/component/componenttest"
	"go.opentelemetry.io/collector/consumer/consumertest"
	"go.opentelemetry.io/collector/pdata/plog"
	"go.opentelemetry.io/collector/pdata/pmetric"
	"go.opentelemetry.io/collector/pipeline"
	"go.opentelemetry.io/collector/receiver/receivertest"
)

// engineLibrary is the built libdcgm_otel_engine.so: $DCGM_OTEL_ENGINE_LIBRARY, or the workspace's
// debug build (cargo build -p dcgm-otel-engine). Without it a test is skipped, unless CI is set.
func engineLibrary(t *testing.T) string {
	path := os.Getenv("DCGM_OTEL_ENGINE_LIBRARY")
	if path == "" {
		path, _ = filepath.Abs(filepath.Join("..", "..", "..", "target", "debug", "libdcgm_otel_engine.so"))
	}
	if _, err := os.Stat(path); err != nil {
		if os.Getenv("CI") != "" {
			t.Fatalf("the engine library %s is missing (cargo build -p dcgm-otel-engine)", path)
		}
		t.Skipf("SKIP: the engine library %s is missing (cargo build -p dcgm-otel-engine)", path)
	}
	return path
}

func simulated(t *testing.T, scenario string, interval time.Duration) *Config {
	cfg := createDefaultConfig().(*Config)
	cfg.Source = "simulate"
	cfg.Scenario = scenario
	cfg.CollectionInterval = interval
	cfg.LibraryPath = engineLibrary(t)
	require.NoError(t, cfg.Validate())
	return cfg
}

// stamper marks the data of collections the contract checker's generator asked for with unique
// test_id attributes (each data point, each log record), and withholds the collections nobody asked
// for: the checker must see every element it generated exactly once, and nothing else.
type stamper struct {
	signal   pipeline.Signal
	requests chan chan []receivertest.UniqueIDAttrVal
	mu       sync.Mutex
	next     int
}

func (s *stamper) Start() {}
func (s *stamper) Stop()  {}

// Generate waits for the next collection with data and returns the ids stamped into it.
func (s *stamper) Generate() []receivertest.UniqueIDAttrVal {
	reply := make(chan []receivertest.UniqueIDAttrVal, 1)
	s.requests <- reply
	return <-reply
}

func (s *stamper) id() receivertest.UniqueIDAttrVal {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.next++
	return receivertest.UniqueIDAttrVal(fmt.Sprintf("id-%d", s.next))
}

func (s *stamper) hook(c collection) collection {
	var data []byte
	if s.signal == pipeline.SignalMetrics {
		data = c.metrics
	} else {
		data = c.logs
	}
	if len(data) == 0 {
		return collection{}
	}
	var reply chan []receivertest.UniqueIDAttrVal
	select {
	case reply = <-s.requests:
	default:
		return collection{}
	}
	var ids []receivertest.UniqueIDAttrVal
	stamp := func(attrs interface{ PutStr(string, string) }) {
		id := s.id()
		attrs.PutStr(receivertest.UniqueIDAttrName, string(id))
		ids = append(ids, id)
	}
	out := collection{seq: c.seq}
	if s.signal == pipeline.SignalMetrics {
		md, err := (&pmetric.ProtoUnmarshaler{}).UnmarshalMetrics(data)
		if err != nil {
			panic(err)
		}
		forEachPoint(md, func(attrs pcommonMap) { stamp(attrs) })
		out.metrics, _ = (&pmetric.ProtoMarshaler{}).MarshalMetrics(md)
	} else {
		ld, err := (&plog.ProtoUnmarshaler{}).UnmarshalLogs(data)
		if err != nil {
			panic(err)
		}
		for _, rl := range ld.ResourceLogs().All() {
			for _, sl := range rl.ScopeLogs().All() {
				for _, r := range sl.LogRecords().All() {
					stamp(r.Attributes())
				}
			}
		}
		out.logs, _ = (&plog.ProtoMarshaler{}).MarshalLogs(ld)
	}
	reply <- ids
	return out
}

func checkContract(t *testing.T, signal pipeline.Signal, cfg *Config) {
	s := &stamper{signal: signal, requests: make(chan chan []receivertest.UniqueIDAttrVal)}
	testCollectionHook = s.hook
	defer func() { testCollectionHook = nil }()
	receivertest.CheckConsumeContract(receivertest.CheckConsumeContractParams{
		T:             t,
		Factory:       NewFactory(),
		Signal:        signal,
		Config:        cfg,
		Generator:     s,
		GenerateCount: 8,
	})
}

func TestConsumeContractMetrics(t *testing.T) {
	checkContract(t, pipeline.SignalMetrics, simulated(t, "default", 100*time.Millisecond))
}

func TestConsumeContractLogs(t *testing.T) {
	// The incidents scenario plays XIDs, clock events and health transitions from its first collections.
	checkContract(t, pipeline.SignalLogs, simulated(t, "incidents", 100*time.Millisecond))
}

// statusHost records the component status events reported to it.
type statusHost struct {
	component.Host
	mu     sync.Mutex
	events []*componentstatus.Event
}

func (h *statusHost) Report(e *componentstatus.Event) {
	h.mu.Lock()
	defer h.mu.Unlock()
	h.events = append(h.events, e)
}

func (h *statusHost) errors() []string {
	h.mu.Lock()
	defer h.mu.Unlock()
	var out []string
	for _, e := range h.events {
		if e.Err() != nil {
			out = append(out, fmt.Sprintf("%s: %s", e.Status(), e.Err()))
		}
	}
	return out
}

func (h *statusHost) sawOK() bool {
	h.mu.Lock()
	defer h.mu.Unlock()
	for _, e := range h.events {
		if e.Status() == componentstatus.StatusOK {
			return true
		}
	}
	return false
}

func TestWithoutTheLibraryItStartsReportsAndRetries(t *testing.T) {
	cfg := createDefaultConfig().(*Config)
	cfg.LibraryPath = filepath.Join(t.TempDir(), "libdcgm_otel_engine.so")
	cfg.RetryInterval = 50 * time.Millisecond
	host := &statusHost{Host: componenttest.NewNopHost()}
	r, err := NewFactory().CreateMetrics(context.Background(), receivertest.NewNopSettings(NewFactory().Type()), cfg, consumertest.NewNop())
	require.NoError(t, err)
	require.NoError(t, r.Start(context.Background(), host))
	// Reported, then tried again (a second report).
	require.Eventually(t, func() bool { return len(host.errors()) >= 2 }, 10*time.Second, 10*time.Millisecond)
	first := host.errors()[0]
	assert.True(t, strings.HasPrefix(first, "StatusRecoverableError: cannot load the dcgm-otel engine library \""+cfg.LibraryPath+"\""), first)
	require.NoError(t, r.Shutdown(context.Background()))
}

func TestAPanicInTheEngineIsAnErrorAndCollectionGoesOn(t *testing.T) {
	t.Setenv("DCGM_OTEL_TEST_PANIC", "collect@3")
	cfg := simulated(t, "default", 100*time.Millisecond)
	host := &statusHost{Host: componenttest.NewNopHost()}
	sink := new(consumertest.MetricsSink)
	r, err := NewFactory().CreateMetrics(context.Background(), receivertest.NewNopSettings(NewFactory().Type()), cfg, sink)
	require.NoError(t, err)
	require.NoError(t, r.Start(context.Background(), host))
	require.Eventually(t, func() bool {
		return len(host.errors()) >= 1 && sink.DataPointCount() > 0 && len(sink.AllMetrics()) >= 4
	}, 20*time.Second, 10*time.Millisecond)
	require.NoError(t, r.Shutdown(context.Background()))
	assert.Equal(t, []string{"StatusRecoverableError: panic in the dcgm-otel engine (a bug; please report it): deliberate panic in collect call 3 (DCGM_OTEL_TEST_PANIC)"}, host.errors())
}

// engineThreads are the threads of running engines in this process (by the names the engine gives them).
func engineThreads(t *testing.T) []string {
	entries, err := os.ReadDir("/proc/self/task")
	require.NoError(t, err)
	var out []string
	for _, e := range entries {
		comm, err := os.ReadFile(filepath.Join("/proc/self/task", e.Name(), "comm"))
		if err != nil {
			continue
		}
		// A thread name is at most 15 bytes: collect-watchdog reads collect-watchdo.
		switch name := strings.TrimSpace(string(comm)); name {
		case "collector":
			out = append(out, name)
		case "collect-watchdo":
			out = append(out, "collect-watchdog")
		}
	}
	return out
}

func TestTwoReceiversAndTwoRoundsLeaveNoEngineThread(t *testing.T) {
	require.Empty(t, engineThreads(t))
	for round := 0; round < 2; round++ {
		a, b := simulated(t, "default", 100*time.Millisecond), simulated(t, "hgx-h100", 100*time.Millisecond)
		sinkA, sinkB := new(consumertest.MetricsSink), new(consumertest.MetricsSink)
		host := &statusHost{Host: componenttest.NewNopHost()}
		ra, err := NewFactory().CreateMetrics(context.Background(), receivertest.NewNopSettings(NewFactory().Type()), a, sinkA)
		require.NoError(t, err)
		rb, err := NewFactory().CreateMetrics(context.Background(), receivertest.NewNopSettings(NewFactory().Type()), b, sinkB)
		require.NoError(t, err)
		require.NoError(t, ra.Start(context.Background(), host))
		require.NoError(t, rb.Start(context.Background(), host))
		require.Eventually(t, func() bool { return sinkA.DataPointCount() > 0 && sinkB.DataPointCount() > 0 }, 20*time.Second, 10*time.Millisecond)
		assert.Len(t, engineThreads(t), 4)
		assert.True(t, host.sawOK())
		// Two fleets, two engines: the 8-GPU board is not the 2-GPU one.
		assert.NotEqual(t, sinkA.AllMetrics()[0].ResourceMetrics().Len(), sinkB.AllMetrics()[0].ResourceMetrics().Len())
		require.NoError(t, ra.Shutdown(context.Background()))
		require.NoError(t, rb.Shutdown(context.Background()))
		assert.Empty(t, engineThreads(t))
	}
}

func TestMetricsAndLogsOfOneConfigShareOneEngine(t *testing.T) {
	cfg := simulated(t, "incidents", 100*time.Millisecond)
	metrics, logs := new(consumertest.MetricsSink), new(consumertest.LogsSink)
	f := NewFactory()
	rm, err := f.CreateMetrics(context.Background(), receivertest.NewNopSettings(f.Type()), cfg, metrics)
	require.NoError(t, err)
	rl, err := f.CreateLogs(context.Background(), receivertest.NewNopSettings(f.Type()), cfg, logs)
	require.NoError(t, err)
	host := componenttest.NewNopHost()
	require.NoError(t, rm.Start(context.Background(), host))
	require.NoError(t, rl.Start(context.Background(), host))
	require.Eventually(t, func() bool { return metrics.DataPointCount() > 0 && logs.LogRecordCount() > 0 }, 20*time.Second, 10*time.Millisecond)
	assert.Equal(t, []string{"collect-watchdog", "collector"}, sorted(engineThreads(t)))
	require.NoError(t, rm.Shutdown(context.Background()))
	require.NoError(t, rl.Shutdown(context.Background()))
	assert.Empty(t, engineThreads(t))
}
