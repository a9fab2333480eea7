//! `FAKE_DCGM_HEAP_FILE=path`: the heap the fake's own code holds (live bytes, and the most it held),
//! written to that file as `live peak` — at most once every 10 ms of wall time, at the end of a call — so
//! that a measurement of an exporter's memory on the fake can tell the fake's share of the process's RSS
//! (`benches/dcgm_exporter_side_by_side.py`). The fake is a cdylib with its own Rust runtime: its global
//! allocator (this one, counting, over the system's) serves every allocation of the fake's code and of
//! the dcgm-otel library code it runs (the simulated fleet), and none of the host process's. Counting is
//! always on (two relaxed atomics per allocation); without the variable nothing is written.

use std::alloc::{GlobalAlloc, Layout, System};
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{LazyLock, Mutex};
use std::time::{Duration, Instant};

/// The system allocator, counting the bytes it holds for the fake.
struct Counting;

static LIVE: AtomicUsize = AtomicUsize::new(0);
static PEAK: AtomicUsize = AtomicUsize::new(0);

fn grew(by: usize) {
    let now = LIVE.fetch_add(by, Ordering::Relaxed) + by;
    PEAK.fetch_max(now, Ordering::Relaxed);
}

fn shrank(by: usize) {
    LIVE.fetch_sub(by, Ordering::Relaxed);
}

// SAFETY (of the impl): every method forwards to `System` with the caller's arguments unchanged, so
// `System`'s guarantees are the ones given; the counters are plain atomics beside it.
unsafe impl GlobalAlloc for Counting {
    unsafe fn alloc(&self, layout: Layout) -> *mut u8 {
        // SAFETY: the caller's contract for `alloc` (a non-zero-size layout) is passed on as is.
        let p = unsafe { System.alloc(layout) };
        if !p.is_null() {
            grew(layout.size());
        }
        p
    }

    unsafe fn alloc_zeroed(&self, layout: Layout) -> *mut u8 {
        // SAFETY: as `alloc`.
        let p = unsafe { System.alloc_zeroed(layout) };
        if !p.is_null() {
            grew(layout.size());
        }
        p
    }

    unsafe fn dealloc(&self, ptr: *mut u8, layout: Layout) {
        // SAFETY: `ptr` was allocated by this allocator (hence by `System`) with `layout`.
        unsafe { System.dealloc(ptr, layout) };
        shrank(layout.size());
    }

    unsafe fn realloc(&self, ptr: *mut u8, layout: Layout, new_size: usize) -> *mut u8 {
        // SAFETY: `ptr` was allocated by `System` with `layout`; `new_size` per the caller's contract.
        let p = unsafe { System.realloc(ptr, layout, new_size) };
        if !p.is_null() {
            shrank(layout.size());
            grew(new_size);
        }
        p
    }
}

#[global_allocator]
static ALLOCATOR: Counting = Counting;

static FILE: LazyLock<Option<std::path::PathBuf>> = LazyLock::new(|| {
    std::env::var_os("FAKE_DCGM_HEAP_FILE")
        .filter(|p| !p.is_empty())
        .map(Into::into)
});
static LAST_WRITE: Mutex<Option<Instant>> = Mutex::new(None);

/// At the end of a call: write `live peak` when `FAKE_DCGM_HEAP_FILE` is set and 10 ms have passed.
pub fn note() {
    let Some(path) = FILE.as_ref() else {
        return;
    };
    let mut last = LAST_WRITE.lock().unwrap_or_else(|e| e.into_inner());
    if last.is_none_or(|t| t.elapsed() >= Duration::from_millis(10)) {
        *last = Some(Instant::now());
        let text = format!(
            "{} {}\n",
            LIVE.load(Ordering::Relaxed),
            PEAK.load(Ordering::Relaxed)
        );
        // A failed write must not change what the fake answers.
        let _ = std::fs::write(path, text);
    }
}
