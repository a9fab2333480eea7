//! The C ABI of the dcgm-otel engine ([`dcgm_otel::engine`]): `libdcgm_otel_engine.so`, loaded by the
//! OpenTelemetry Collector receiver (`collector/receiver/dcgmreceiver`, through purego) or by any
//! program that can call C. The declarations are `include/dcgm_otel_engine.h` (hand-written; the tests
//! in `tests/header.rs` compare it with the Rust signatures of [`ffi`] and compile it with a C compiler).
//!
//! The contract, for every entry point:
//! - an opaque handle (`dcgm_otel_engine *`); buffers and strings the library returns are owned by the
//!   library and freed by the caller through the library (`dcgm_otel_collected_free`,
//!   `dcgm_otel_string_free`);
//! - a status ([`Status`]) and, for every status but `DCGM_OTEL_OK`, a one-line message;
//! - a panic inside is caught (`catch_unwind`) and returned as `DCGM_OTEL_PANIC`, never unwound into
//!   the caller (which would abort the process);
//! - no call blocks beyond a deadline the engine keeps itself (a caller cannot cancel a blocked C
//!   call): `collect` waits at most its `wait_ms`, `stop` at most its `timeout_ms`, `start` at most
//!   DCGM's connect timeout;
//! - no signal handler is installed, no environment variable set; SIGPIPE is blocked in every thread
//!   the engine starts and during each call (a write to a closed socket returns `EPIPE`), so it is
//!   never fatal to a host process (a Go program crashes on a SIGPIPE raised in a thread it did not
//!   start).
//!
//! This module holds the safe part: the statuses and each call's body. [`ffi`] converts pointers.

pub mod ffi;

use std::ffi::CString;
use std::time::Duration;

use dcgm_otel::engine::{Collected, Engine, EngineError, EngineOptions};

/// The version of this ABI; a caller refuses a library whose version it does not know.
pub const ABI_VERSION: u32 = 1;

/// What a call returns (`int32_t`).
#[repr(i32)]
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Status {
    Ok = 0,
    /// A null pointer, or an argument that is not UTF-8.
    InvalidArgument = 1,
    /// The options (or a file or variable they name) are wrong: fix the configuration.
    BadOptions = 2,
    /// The environment failed (a library missing, a thread that could not start): may pass.
    Environment = 3,
    /// A panic inside the engine (a bug), caught.
    Panic = 4,
    /// `stop` gave up waiting for a source call that has not returned.
    StopTimedOut = 5,
    /// The engine's collector thread has ended; stop and free the handle.
    EngineEnded = 6,
    /// `reload` without counters from a file.
    NothingToReload = 7,
    /// `ready`: the engine is not ready; the message says why.
    NotReady = 8,
}

/// A failed call: its status and message.
pub struct Failure {
    pub status: Status,
    pub message: String,
}

impl Failure {
    pub fn invalid(message: impl Into<String>) -> Failure {
        Failure {
            status: Status::InvalidArgument,
            message: message.into(),
        }
    }
}

impl From<EngineError> for Failure {
    fn from(e: EngineError) -> Failure {
        let status = match &e {
            EngineError::Input(_) => Status::BadOptions,
            EngineError::Environment(_) => Status::Environment,
            EngineError::CollectorEnded => Status::EngineEnded,
            EngineError::NothingToReload => Status::NothingToReload,
            EngineError::StopTimedOut(_) => Status::StopTimedOut,
        };
        Failure {
            status,
            message: e.to_string(),
        }
    }
}

/// One collection as the C caller reads it (`dcgm_otel_collected`): pointers into buffers the
/// library owns until `dcgm_otel_collected_free`.
#[repr(C)]
pub struct CollectedC {
    pub metrics: *const u8,
    pub metrics_len: usize,
    pub logs: *const u8,
    pub logs_len: usize,
    pub data_points: u64,
    pub log_records: u64,
    pub log_records_dropped: u64,
    pub seq: u64,
}

/// The owner of a [`CollectedC`]'s buffers: the header first, so a pointer to it is a pointer to the
/// header.
#[repr(C)]
pub struct CollectedBox {
    pub header: CollectedC,
    metrics: Box<[u8]>,
    logs: Box<[u8]>,
}

impl CollectedBox {
    pub fn new(c: Collected) -> Box<CollectedBox> {
        let metrics = c.metrics.into_boxed_slice();
        let logs = c.logs.into_boxed_slice();
        Box::new(CollectedBox {
            header: CollectedC {
                metrics: metrics.as_ptr(),
                metrics_len: metrics.len(),
                logs: logs.as_ptr(),
                logs_len: logs.len(),
                data_points: c.data_points as u64,
                log_records: c.log_records as u64,
                log_records_dropped: c.log_records_dropped,
                seq: c.seq,
            },
            metrics,
            logs,
        })
    }
}

/// Run `body`; a panic becomes [`Status::Panic`] with its message.
pub fn guarded<T>(body: impl FnOnce() -> Result<T, Failure>) -> Result<T, Failure> {
    match std::panic::catch_unwind(std::panic::AssertUnwindSafe(body)) {
        Ok(r) => r,
        Err(payload) => {
            let what = payload
                .downcast_ref::<&str>()
                .map(|s| s.to_string())
                .or_else(|| payload.downcast_ref::<String>().cloned())
                .unwrap_or_else(|| "a panic without a message".to_string());
            Err(Failure {
                status: Status::Panic,
                message: format!("panic in the dcgm-otel engine (a bug; please report it): {what}"),
            })
        }
    }
}

/// A message as a C string (NUL bytes, which C cannot carry, become spaces).
pub fn c_message(message: &str) -> CString {
    CString::new(message.replace('\0', " ")).unwrap_or_default()
}

/// `dcgm_otel_engine_start`'s body.
pub fn start(args: Vec<String>) -> Result<Box<Engine>, Failure> {
    let options = EngineOptions::from_args(args).map_err(|e| Failure {
        status: Status::BadOptions,
        message: e.to_string(),
    })?;
    Ok(Box::new(Engine::start(options)?))
}

/// `dcgm_otel_engine_collect`'s body.
pub fn collect(engine: &Engine, wait_ms: u32) -> Result<Box<CollectedBox>, Failure> {
    let collected = engine.collect(Duration::from_millis(u64::from(wait_ms)))?;
    Ok(CollectedBox::new(collected))
}

/// `dcgm_otel_engine_ready`'s body.
pub fn ready(engine: &Engine) -> Result<(), Failure> {
    engine.ready().map_err(|why| Failure {
        status: Status::NotReady,
        message: why,
    })
}

/// `dcgm_otel_engine_stop`'s body.
pub fn stop(engine: &Engine, timeout_ms: u32) -> Result<(), Failure> {
    Ok(engine.stop(Duration::from_millis(u64::from(timeout_ms)))?)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    #[allow(clippy::panic)]
    fn a_panic_is_a_status_and_a_message() {
        let r: Result<(), Failure> = guarded(|| panic!("boom {}", 7));
        let f = r.err().unwrap();
        assert_eq!(f.status, Status::Panic);
        assert!(f.message.ends_with(": boom 7"), "{}", f.message);
    }

    #[test]
    fn a_message_with_nul_bytes_still_reaches_c() {
        assert_eq!(c_message("a\0b").to_str().unwrap(), "a b");
    }
}
