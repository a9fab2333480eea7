/*
 * dcgm_otel_engine.h: the C ABI of the dcgm-otel engine (libdcgm_otel_engine.so).
 *
 * The engine collects NVIDIA GPU metrics through DCGM, NVML or a simulated fleet, exactly as the
 * dcgm-otel binary does, and returns each collection as the OTLP requests the binary would push:
 * an ExportMetricsServiceRequest and an ExportLogsServiceRequest (incident log records), encoded.
 *
 * Every call returns a status (DCGM_OTEL_OK or an error) and, for an error, a one-line message the
 * caller frees with dcgm_otel_string_free. Buffers the library returns are freed through the library.
 * No call blocks beyond a deadline the engine keeps (collect: wait_ms; stop: timeout_ms; start:
 * DCGM's connect timeout). A panic inside is returned as DCGM_OTEL_PANIC. The library installs no
 * signal handler and sets no environment variable; SIGPIPE is blocked in its threads.
 *
 * Threads: a handle may be used from any thread; dcgm_otel_engine_free must not run while another
 * call on the same handle does. Kept in step with capi/src/ffi.rs by capi/tests/header.rs.
 */
#ifndef DCGM_OTEL_ENGINE_H
#define DCGM_OTEL_ENGINE_H

#include <stddef.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

#define DCGM_OTEL_ABI_VERSION 1

/* Statuses. */
#define DCGM_OTEL_OK 0
#define DCGM_OTEL_INVALID_ARGUMENT 1  /* a null pointer, an argument that is not UTF-8 */
#define DCGM_OTEL_BAD_OPTIONS 2       /* fix the configuration */
#define DCGM_OTEL_ENVIRONMENT 3       /* the environment failed (a library missing ...): may pass */
#define DCGM_OTEL_PANIC 4             /* a panic inside the engine (a bug), caught */
#define DCGM_OTEL_STOP_TIMED_OUT 5    /* stop gave up waiting for a source call that has not returned */
#define DCGM_OTEL_ENGINE_ENDED 6      /* the engine's collector thread has ended: stop and free it */
#define DCGM_OTEL_NOTHING_TO_RELOAD 7 /* reload without counters from a file */
#define DCGM_OTEL_NOT_READY 8         /* ready: not ready, the message says why */

/* An engine (opaque). */
typedef struct dcgm_otel_engine dcgm_otel_engine;

/* One collection; the buffers belong to the library until dcgm_otel_collected_free. */
typedef struct dcgm_otel_collected {
    const uint8_t *metrics;       /* ExportMetricsServiceRequest; empty: no new collection */
    size_t metrics_len;
    const uint8_t *logs;          /* ExportLogsServiceRequest; empty: no incident */
    size_t logs_len;
    uint64_t data_points;
    uint64_t log_records;
    uint64_t log_records_dropped; /* since the previous collect (the caller fell behind) */
    uint64_t seq;                 /* the collection's number (0: none yet) */
} dcgm_otel_collected;

/* DCGM_OTEL_ABI_VERSION of the library. */
uint32_t dcgm_otel_abi_version(void);

/* Start an engine with the dcgm-otel binary's flags (no program name), e.g. {"--simulate", "-c",
 * "1000"}; the flags of the :9400 server and of the OTLP transport are refused. */
int32_t dcgm_otel_engine_start(const char *const *args, size_t nargs, dcgm_otel_engine **out,
                               char **message);

/* Wait at most wait_ms for the next collection; *out is set on DCGM_OTEL_OK. */
int32_t dcgm_otel_engine_collect(const dcgm_otel_engine *engine, uint32_t wait_ms,
                                 dcgm_otel_collected **out, char **message);

/* DCGM_OTEL_OK when ready, DCGM_OTEL_NOT_READY with the reason otherwise. */
int32_t dcgm_otel_engine_ready(const dcgm_otel_engine *engine, char **message);

/* Re-read the counters file before the next collection. */
int32_t dcgm_otel_engine_reload(const dcgm_otel_engine *engine, char **message);

/* Stop collecting, waiting at most timeout_ms; the handle stays valid until freed. */
int32_t dcgm_otel_engine_stop(const dcgm_otel_engine *engine, uint32_t timeout_ms, char **message);

/* Free a handle (stopping the engine, at most 5 s, if not stopped). NULL is ignored. */
void dcgm_otel_engine_free(dcgm_otel_engine *engine);

/* Free what dcgm_otel_engine_collect returned. NULL is ignored. */
void dcgm_otel_collected_free(dcgm_otel_collected *collected);

/* Free a message. NULL is ignored. */
void dcgm_otel_string_free(char *message);

#ifdef __cplusplus
}
#endif

#endif /* DCGM_OTEL_ENGINE_H */
