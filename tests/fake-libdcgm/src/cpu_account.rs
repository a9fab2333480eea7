//! `FAKE_DCGM_CPU_FILE=path`: the CPU time the fake itself spends inside its exported calls (all threads,
//! in ns), written to that file — at most once every 10 ms of wall time, at the end of a call — so that
//! a measurement of an exporter running on the fake can take the fake's own share out of the process's
//! CPU (`benches/dcgm_exporter_side_by_side.py`). Without the variable nothing is measured.

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{LazyLock, Mutex};
use std::time::{Duration, Instant};

static FILE: LazyLock<Option<std::path::PathBuf>> = LazyLock::new(|| {
    std::env::var_os("FAKE_DCGM_CPU_FILE")
        .filter(|p| !p.is_empty())
        .map(Into::into)
});
static TOTAL_NS: AtomicU64 = AtomicU64::new(0);
static LAST_WRITE: Mutex<Option<Instant>> = Mutex::new(None);

/// The calling thread's CPU time, in ns.
fn thread_cpu_ns() -> u64 {
    let mut ts = libc::timespec {
        tv_sec: 0,
        tv_nsec: 0,
    };
    // SAFETY: clock_gettime writes one timespec through a valid pointer to a local.
    let rc = unsafe { libc::clock_gettime(libc::CLOCK_THREAD_CPUTIME_ID, &mut ts) };
    if rc != 0 {
        return 0;
    }
    (ts.tv_sec as u64) * 1_000_000_000 + ts.tv_nsec as u64
}

/// Run `f`, adding the CPU it takes on this thread to the total when `FAKE_DCGM_CPU_FILE` is set.
pub fn measured<T>(f: impl FnOnce() -> T) -> T {
    let Some(path) = FILE.as_ref() else {
        return f();
    };
    let started = thread_cpu_ns();
    let out = f();
    let total = TOTAL_NS.fetch_add(thread_cpu_ns().saturating_sub(started), Ordering::Relaxed);
    let mut last = LAST_WRITE.lock().unwrap_or_else(|e| e.into_inner());
    if last.is_none_or(|t| t.elapsed() >= Duration::from_millis(10)) {
        *last = Some(Instant::now());
        // A failed write must not change what the fake answers.
        let _ = std::fs::write(path, format!("{}\n", total));
    }
    out
}
