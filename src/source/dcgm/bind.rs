//! `--enable-gpu-bind-unbind-watch`: follow DCGM's GPU bind/unbind event (`DCGM_FI_BIND_UNBIND_EVENT`,
//! a global field, DCGM ≥ 4.5). When a GPU is unbound from the driver (or bound to it) the host engine
//! re-initialises and records the event (1 = reinitializing, 2 = reinitialization completed) with a new
//! timestamp. A watcher thread per connection watches the field on all GPUs at the poll interval and,
//! on a new event, raises a flag and wakes the collector: its next poll rebuilds the watches from a
//! fresh discovery — an unbound GPU's series are withdrawn from /metrics and OTLP, a bound GPU's appear,
//! without a restart. (dcgm-exporter re-initialises DCGM entirely and serves an empty body meanwhile;
//! dcgm-otel keeps the connection and serves the other GPUs throughout.)
//!
//! Like dcgm-exporter the watcher reads the event through GPU 0 (the id does not matter for a global
//! field) and only reacts to events newer than the one present at start. It does not force field
//! updates (dcgm-exporter calls `dcgmUpdateAllFields` every poll, which refreshes every watched field):
//! DCGM samples the watched event field at the poll interval by itself.

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::mpsc::{self, RecvTimeoutError};
use std::sync::Arc;
use std::thread::JoinHandle;
use std::time::Duration;

use super::client::{Connection, EntityPair, ValueBuffer};
use super::ffi;
use super::values::Payload;
use crate::source::Waker;

/// `DCGM_FI_BIND_UNBIND_EVENT` (`DCGM_FI_SYSTEM_GPU_BIND_EVENT` in DCGM 4.6 names).
pub const BIND_UNBIND_EVENT_FIELD: u16 = 6;
/// How long DCGM keeps event samples.
const KEEP_AGE: Duration = Duration::from_secs(3600);

/// The watcher of one connection; stopped (and its watch removed) when dropped.
pub struct BindWatch {
    stop: Option<mpsc::Sender<()>>,
    thread: Option<JoinHandle<()>>,
    event: Arc<AtomicBool>,
}

/// The latest event: (state, timestamp in µs), when DCGM has one.
fn latest(
    conn: &Connection,
    buf: &mut ValueBuffer,
) -> Result<Option<(i64, i64)>, super::client::DcgmError> {
    conn.latest_values(
        &[EntityPair::new(ffi::DCGM_FE_GPU, 0)],
        &[BIND_UNBIND_EVENT_FIELD],
        false,
        buf,
    )?;
    Ok(buf.iter().find_map(|v| match (v.status(), v.payload()) {
        (ffi::DCGM_ST_OK, Payload::Int(state))
            if !(ffi::DCGM_INT64_BLANK..=ffi::DCGM_INT64_NOT_PERMISSIONED).contains(&state) =>
        {
            Some((state, v.timestamp()))
        }
        _ => None,
    }))
}

impl BindWatch {
    /// Watch the event on `conn` every `every`; `name` is the field group's (unique per engine). `None`
    /// (logged) when DCGM cannot watch it (older than 4.5).
    pub fn start(
        conn: Connection,
        every: Duration,
        name: &str,
        waker: Option<Waker>,
    ) -> Option<BindWatch> {
        let fields = match conn.create_field_group(name, &[BIND_UNBIND_EVENT_FIELD]) {
            Ok(f) => f,
            Err(e) => {
                tracing::warn!(error = %e, "cannot watch GPU bind/unbind events (needs DCGM 4.5 or newer); GPUs bound later are not discovered");
                return None;
            }
        };
        if let Err(e) = conn.watch_all_gpus(&fields, every, KEEP_AGE) {
            tracing::warn!(error = %e, "cannot watch GPU bind/unbind events (needs DCGM 4.5 or newer); GPUs bound later are not discovered");
            return None;
        }
        let mut buf = ValueBuffer::default();
        // Events from before start-up are not news: only a newer timestamp is.
        let _ = conn.update_all_fields();
        let mut last_ts = match latest(&conn, &mut buf) {
            Ok(Some((_, ts))) => ts,
            _ => 0,
        };
        let event = Arc::new(AtomicBool::new(false));
        let (stop, stopped) = mpsc::channel::<()>();
        let flag = event.clone();
        let thread = std::thread::Builder::new()
            .name("gpu-bind-watch".into())
            .spawn(move || {
                tracing::info!(
                    poll_ms = every.as_millis() as u64,
                    "watching GPU bind/unbind events"
                );
                while let Err(RecvTimeoutError::Timeout) = stopped.recv_timeout(every) {
                    match latest(&conn, &mut buf) {
                        Ok(Some((state, ts))) if ts > last_ts && state != 0 => {
                            last_ts = ts;
                            let what = match state {
                                1 => "GPU unbind or bind begun (system reinitializing)",
                                2 => "GPU bind or unbind completed (reinitialization completed)",
                                _ => "GPU bind/unbind event",
                            };
                            tracing::info!(state, "{what}; rediscovering the GPUs");
                            flag.store(true, Ordering::Release);
                            if let Some(w) = &waker {
                                w.wake();
                            }
                        }
                        Ok(_) => {}
                        Err(e) if e.connection_lost() => break,
                        Err(e) => tracing::debug!(error = %e, "bind/unbind event not readable"),
                    }
                }
                let _ = conn.unwatch_all_gpus(&fields);
                drop(fields);
            });
        match thread {
            Ok(t) => Some(BindWatch {
                stop: Some(stop),
                thread: Some(t),
                event,
            }),
            Err(e) => {
                tracing::warn!(error = %e, "cannot start the GPU bind/unbind watcher");
                None
            }
        }
    }

    /// Whether an event arrived since the last call.
    pub fn take_event(&self) -> bool {
        self.event.swap(false, Ordering::AcqRel)
    }
}

impl Drop for BindWatch {
    fn drop(&mut self) {
        drop(self.stop.take());
        if let Some(t) = self.thread.take() {
            let _ = t.join();
        }
    }
}
