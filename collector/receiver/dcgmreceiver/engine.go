package dcgmreceiver

// The dcgm-otel engine's C ABI (capi/include/dcgm_otel_engine.h), loaded with purego: the library is
// dlopened at run time, so the collector builds with CGO_ENABLED=0 (ocb's default) and starts without
// it. Every call returns within a deadline the engine keeps (collect: its wait; stop: its timeout);
// buffers and messages belong to the library and are copied, then freed through it.

import (
	"errors"
	"fmt"
	"sync"
	"unsafe"

	"github.com/ebitengine/purego"
)

// abiVersion is the DCGM_OTEL_ABI_VERSION this receiver was written for.
const abiVersion = 1

// The statuses of dcgm_otel_engine.h.
const (
	statusOK              = 0
	statusInvalidArgument = 1
	statusBadOptions      = 2
	statusEnvironment     = 3
	statusPanic           = 4
	statusStopTimedOut    = 5
	statusEngineEnded     = 6
	statusNothingToReload = 7
	statusNotReady        = 8
)

// engineC is the library's opaque dcgm_otel_engine.
type engineC struct{}

// collectedC is dcgm_otel_collected.
type collectedC struct {
	metrics           *byte
	metricsLen        uintptr
	logs              *byte
	logsLen           uintptr
	dataPoints        uint64
	logRecords        uint64
	logRecordsDropped uint64
	seq               uint64
}

// library is the loaded libdcgm_otel_engine.so's entry points.
type library struct {
	abiVersion    func() uint32
	start         func(args **byte, nargs uintptr, out **engineC, message **byte) int32
	collect       func(e *engineC, waitMs uint32, out **collectedC, message **byte) int32
	ready         func(e *engineC, message **byte) int32
	reload        func(e *engineC, message **byte) int32
	stop          func(e *engineC, timeoutMs uint32, message **byte) int32
	free          func(e *engineC)
	collectedFree func(c *collectedC)
	stringFree    func(message *byte)
}

// EngineError is a status the library returned, with its message.
type EngineError struct {
	Status  int32
	Message string
}

func (e *EngineError) Error() string { return e.Message }

// IsBadOptions tells a configuration the engine refuses (fix the configuration) from a failing
// environment (retry).
func IsBadOptions(err error) bool {
	var e *EngineError
	return errors.As(err, &e) && (e.Status == statusBadOptions || e.Status == statusInvalidArgument)
}

var (
	libraries   = map[string]*library{}
	librariesMu sync.Mutex
)

// loadLibrary opens path once per process (a library is never closed: a thread of a stopped engine may
// still be inside it, in a DCGM call that has not returned). A failure is not remembered: the next
// call tries again (the library may be installed meanwhile).
func loadLibrary(path string) (*library, error) {
	librariesMu.Lock()
	defer librariesMu.Unlock()
	if lib, ok := libraries[path]; ok {
		return lib, nil
	}
	handle, err := purego.Dlopen(path, purego.RTLD_NOW|purego.RTLD_LOCAL)
	if err != nil {
		return nil, fmt.Errorf("cannot load the dcgm-otel engine library %q: %w", path, err)
	}
	lib := &library{}
	for name, fn := range map[string]any{
		"dcgm_otel_abi_version":    &lib.abiVersion,
		"dcgm_otel_engine_start":   &lib.start,
		"dcgm_otel_engine_collect": &lib.collect,
		"dcgm_otel_engine_ready":   &lib.ready,
		"dcgm_otel_engine_reload":  &lib.reload,
		"dcgm_otel_engine_stop":    &lib.stop,
		"dcgm_otel_engine_free":    &lib.free,
		"dcgm_otel_collected_free": &lib.collectedFree,
		"dcgm_otel_string_free":    &lib.stringFree,
	} {
		if _, err := purego.Dlsym(handle, name); err != nil {
			return nil, fmt.Errorf("%q is not a dcgm-otel engine library: %s missing", path, name)
		}
		purego.RegisterLibFunc(fn, handle, name)
	}
	if v := lib.abiVersion(); v != abiVersion {
		return nil, fmt.Errorf("%q has ABI version %d; this receiver speaks version %d", path, v, abiVersion)
	}
	libraries[path] = lib
	return lib, nil
}

// cString is s as a NUL-terminated string in Go memory (which the collector never moves).
func cString(s string) *byte {
	b := make([]byte, len(s)+1)
	copy(b, s)
	return &b[0]
}

// takeMessage copies a library message and frees it.
func (l *library) takeMessage(m *byte) string {
	if m == nil {
		return ""
	}
	n := 0
	for *(*byte)(unsafe.Add(unsafe.Pointer(m), n)) != 0 {
		n++
	}
	s := string(unsafe.Slice(m, n))
	l.stringFree(m)
	return s
}

func (l *library) result(rc int32, message *byte) error {
	text := l.takeMessage(message)
	if rc == statusOK {
		return nil
	}
	if text == "" {
		text = fmt.Sprintf("the dcgm-otel engine returned status %d", rc)
	}
	return &EngineError{Status: rc, Message: text}
}

// engine is one running dcgm-otel engine.
type engine struct {
	lib    *library
	handle *engineC
}

// startEngine starts an engine with the dcgm-otel flags args.
func startEngine(lib *library, args []string) (*engine, error) {
	ptrs := make([]*byte, len(args))
	for i, a := range args {
		ptrs[i] = cString(a)
	}
	var first **byte
	if len(ptrs) > 0 {
		first = &ptrs[0]
	}
	var handle *engineC
	var message *byte
	rc := lib.start(first, uintptr(len(ptrs)), &handle, &message)
	if err := lib.result(rc, message); err != nil {
		return nil, err
	}
	return &engine{lib: lib, handle: handle}, nil
}

// collection is one collection's requests, copied out of the library.
type collection struct {
	metrics        []byte
	logs           []byte
	droppedRecords uint64
	seq            uint64
}

func copyBytes(p *byte, n uintptr) []byte {
	if n == 0 {
		return nil
	}
	return append([]byte(nil), unsafe.Slice(p, n)...)
}

// collect waits at most waitMs for the next collection.
func (e *engine) collect(waitMs uint32) (collection, error) {
	var out *collectedC
	var message *byte
	rc := e.lib.collect(e.handle, waitMs, &out, &message)
	if err := e.lib.result(rc, message); err != nil {
		return collection{}, err
	}
	c := collection{
		metrics:        copyBytes(out.metrics, out.metricsLen),
		logs:           copyBytes(out.logs, out.logsLen),
		droppedRecords: out.logRecordsDropped,
		seq:            out.seq,
	}
	e.lib.collectedFree(out)
	return c, nil
}

// ready is nil when the engine's last collection succeeded and is fresh, else why not.
func (e *engine) ready() error {
	var message *byte
	return e.lib.result(e.lib.ready(e.handle, &message), message)
}

// reload asks the engine to re-read its counters file.
func (e *engine) reload() error {
	var message *byte
	return e.lib.result(e.lib.reload(e.handle, &message), message)
}

// stop stops the engine (at most timeoutMs) and frees it; an engine whose source call hangs is left
// to end by itself, and its handle is freed all the same.
func (e *engine) stop(timeoutMs uint32) error {
	var message *byte
	err := e.lib.result(e.lib.stop(e.handle, timeoutMs, &message), message)
	e.lib.free(e.handle)
	e.handle = nil
	return err
}
