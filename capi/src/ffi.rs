//! The exported C functions (declared in `include/dcgm_otel_engine.h`): pointers in and out, each call
//! behind `catch_unwind` ([`crate::guarded`]) and with SIGPIPE blocked ([`SigpipeBlocked`]); the work
//! is the safe functions of the crate root. The only module of the crate with `unsafe`.
#![allow(unsafe_code)]

use std::ffi::{c_char, CStr, CString};
use std::ptr;

use dcgm_otel::engine::Engine;

use crate::{guarded, CollectedBox, CollectedC, Failure, Status, ABI_VERSION};

/// SIGPIPE blocked in the calling thread for the duration of one call, so that every thread the
/// engine starts during it inherits a mask with SIGPIPE blocked (and the threads those start, in turn):
/// a write to a closed socket or pipe then fails with `EPIPE` instead of raising a signal that would
/// end a host process that never meant to ignore it. A SIGPIPE the call itself raised on this thread is
/// taken off before the caller's mask is restored, so it is never delivered to the caller.
struct SigpipeBlocked {
    old: libc::sigset_t,
    pending_before: bool,
}

fn sigpipe_set() -> libc::sigset_t {
    // SAFETY: sigset_t is a plain bit array; all zeroes is a valid (empty) value, set up by
    // sigemptyset right after.
    let mut set: libc::sigset_t = unsafe { std::mem::zeroed() };
    // SAFETY: `set` is a valid, writable sigset_t.
    unsafe { libc::sigemptyset(&mut set) };
    // SAFETY: `set` is a valid sigset_t and SIGPIPE a valid signal number.
    unsafe { libc::sigaddset(&mut set, libc::SIGPIPE) };
    set
}

fn sigpipe_pending() -> bool {
    // SAFETY: as in sigpipe_set: an all-zero sigset_t is valid and sigpending overwrites it.
    let mut pending: libc::sigset_t = unsafe { std::mem::zeroed() };
    // SAFETY: `pending` is a valid, writable sigset_t.
    if unsafe { libc::sigpending(&mut pending) } != 0 {
        return false;
    }
    // SAFETY: `pending` was filled by sigpending; SIGPIPE is a valid signal number.
    unsafe { libc::sigismember(&pending, libc::SIGPIPE) == 1 }
}

impl SigpipeBlocked {
    fn new() -> Option<SigpipeBlocked> {
        let set = sigpipe_set();
        // SAFETY: as in sigpipe_set; pthread_sigmask overwrites it with the previous mask.
        let mut old: libc::sigset_t = unsafe { std::mem::zeroed() };
        // SAFETY: both pointers are valid sigset_t values; this changes the calling thread's mask
        // only, and Drop restores it.
        if unsafe { libc::pthread_sigmask(libc::SIG_BLOCK, &set, &mut old) } != 0 {
            return None;
        }
        Some(SigpipeBlocked {
            old,
            pending_before: sigpipe_pending(),
        })
    }
}

impl Drop for SigpipeBlocked {
    fn drop(&mut self) {
        if !self.pending_before && sigpipe_pending() {
            let set = sigpipe_set();
            let now = libc::timespec {
                tv_sec: 0,
                tv_nsec: 0,
            };
            // SAFETY: `set` and `now` are valid; a null siginfo pointer is allowed; with a zero
            // timeout the call only takes the pending SIGPIPE off, it does not wait.
            unsafe { libc::sigtimedwait(&set, ptr::null_mut(), &now) };
        }
        // SAFETY: `self.old` is the mask pthread_sigmask returned in new(); a null old-mask pointer
        // is allowed.
        unsafe { libc::pthread_sigmask(libc::SIG_SETMASK, &self.old, ptr::null_mut()) };
    }
}

/// The status of `result`; its message, if any, written to `message` (when not null).
///
/// # Safety
/// `message` is null or valid for one write of a pointer.
unsafe fn finish<T>(
    result: Result<T, Failure>,
    message: *mut *mut c_char,
    on_ok: impl FnOnce(T),
) -> i32 {
    let (status, text) = match result {
        Ok(v) => {
            on_ok(v);
            (Status::Ok, None)
        }
        Err(f) => (f.status, Some(f.message)),
    };
    if !message.is_null() {
        let raw = text.map_or(ptr::null_mut(), |t| crate::c_message(&t).into_raw());
        // SAFETY: the caller promises `message` is valid for a write when not null.
        unsafe { *message = raw };
    }
    status as i32
}

/// The engine behind a handle, or a failure naming the null handle.
///
/// # Safety
/// `engine` is null or a handle from `dcgm_otel_engine_start` not yet freed.
unsafe fn engine_ref<'a>(engine: *const Engine) -> Result<&'a Engine, Failure> {
    // SAFETY: the caller promises a live handle (a Box<Engine> leaked by start) or null.
    unsafe { engine.as_ref() }.ok_or_else(|| Failure::invalid("the engine handle is null"))
}

/// The ABI version (`ABI_VERSION`).
#[no_mangle]
pub extern "C" fn dcgm_otel_abi_version() -> u32 {
    ABI_VERSION
}

/// Start an engine with `args` (the binary's flags, without a program name).
///
/// # Safety
/// `args` points to `nargs` valid NUL-terminated strings (it may be null when `nargs` is 0); `out`
/// is valid for one write; `message` is null or valid for one write.
#[no_mangle]
pub unsafe extern "C" fn dcgm_otel_engine_start(
    args: *const *const c_char,
    nargs: usize,
    out: *mut *mut Engine,
    message: *mut *mut c_char,
) -> i32 {
    let _sigpipe = SigpipeBlocked::new();
    let result = guarded(|| {
        if out.is_null() || (args.is_null() && nargs > 0) {
            return Err(Failure::invalid(
                "null pointer for the arguments or the handle",
            ));
        }
        let mut list = Vec::with_capacity(nargs);
        for i in 0..nargs {
            // SAFETY: the caller promises `args` holds `nargs` pointers; i < nargs.
            let p = unsafe { *args.add(i) };
            if p.is_null() {
                return Err(Failure::invalid(format!("argument {i} is a null pointer")));
            }
            // SAFETY: the caller promises each pointer is a valid NUL-terminated string.
            let s = unsafe { CStr::from_ptr(p) };
            let s = s
                .to_str()
                .map_err(|_| Failure::invalid(format!("argument {i} is not UTF-8")))?;
            list.push(s.to_string());
        }
        crate::start(list)
    });
    // SAFETY: `message` is null or writable (the caller's promise).
    unsafe {
        finish(result, message, |engine| {
            // SAFETY: `out` was checked not null above (else the result is an error) and is
            // writable (the caller's promise).
            *out = Box::into_raw(engine);
        })
    }
}

/// Wait at most `wait_ms` for the next collection and return its requests in `*out` (free with
/// `dcgm_otel_collected_free`).
///
/// # Safety
/// `engine` is a live handle (not freed, not being freed by another thread); `out` is valid for one
/// write; `message` is null or valid for one write.
#[no_mangle]
pub unsafe extern "C" fn dcgm_otel_engine_collect(
    engine: *const Engine,
    wait_ms: u32,
    out: *mut *mut CollectedC,
    message: *mut *mut c_char,
) -> i32 {
    let _sigpipe = SigpipeBlocked::new();
    let result = guarded(|| {
        if out.is_null() {
            return Err(Failure::invalid("null pointer for the result"));
        }
        // SAFETY: the caller promises a live handle or null (refused).
        let engine = unsafe { engine_ref(engine) }?;
        crate::collect(engine, wait_ms)
    });
    // SAFETY: `message` is null or writable (the caller's promise).
    unsafe {
        finish(result, message, |c| {
            // SAFETY: `out` is not null (checked) and writable; CollectedBox starts with its header
            // (repr(C)), so the pointer is also a pointer to the header.
            *out = Box::into_raw(c).cast::<CollectedC>();
        })
    }
}

/// `DCGM_OTEL_OK` when the engine is ready (its last collection succeeded and is fresh), else
/// `DCGM_OTEL_NOT_READY` with why.
///
/// # Safety
/// As `dcgm_otel_engine_collect`.
#[no_mangle]
pub unsafe extern "C" fn dcgm_otel_engine_ready(
    engine: *const Engine,
    message: *mut *mut c_char,
) -> i32 {
    let _sigpipe = SigpipeBlocked::new();
    // SAFETY: the caller promises a live handle or null (refused).
    let result = guarded(|| crate::ready(unsafe { engine_ref(engine) }?));
    // SAFETY: `message` is null or writable (the caller's promise).
    unsafe { finish(result, message, |()| {}) }
}

/// Re-read the counters file before the next collection.
///
/// # Safety
/// As `dcgm_otel_engine_collect`.
#[no_mangle]
pub unsafe extern "C" fn dcgm_otel_engine_reload(
    engine: *const Engine,
    message: *mut *mut c_char,
) -> i32 {
    let _sigpipe = SigpipeBlocked::new();
    // SAFETY: the caller promises a live handle or null (refused).
    let result = guarded(|| Ok(unsafe { engine_ref(engine) }?.reload()?));
    // SAFETY: `message` is null or writable (the caller's promise).
    unsafe { finish(result, message, |()| {}) }
}

/// Stop collecting; wait at most `timeout_ms`. The handle stays valid until freed.
///
/// # Safety
/// As `dcgm_otel_engine_collect`.
#[no_mangle]
pub unsafe extern "C" fn dcgm_otel_engine_stop(
    engine: *const Engine,
    timeout_ms: u32,
    message: *mut *mut c_char,
) -> i32 {
    let _sigpipe = SigpipeBlocked::new();
    // SAFETY: the caller promises a live handle or null (refused).
    let result = guarded(|| crate::stop(unsafe { engine_ref(engine) }?, timeout_ms));
    // SAFETY: `message` is null or writable (the caller's promise).
    unsafe { finish(result, message, |()| {}) }
}

/// Free a handle (stopping the engine first, waiting at most 5 s, if it was not stopped). Null is
/// ignored.
///
/// # Safety
/// `engine` is null or a handle from `dcgm_otel_engine_start`, not used again, by any thread.
#[no_mangle]
pub unsafe extern "C" fn dcgm_otel_engine_free(engine: *mut Engine) {
    let _sigpipe = SigpipeBlocked::new();
    if engine.is_null() {
        return;
    }
    // SAFETY: the pointer came from Box::into_raw in start and is freed once (the caller's promise).
    let engine = unsafe { Box::from_raw(engine) };
    let _ = guarded(|| {
        drop(engine);
        Ok(())
    });
}

/// Free what `dcgm_otel_engine_collect` returned. Null is ignored.
///
/// # Safety
/// `collected` is null or a pointer from `dcgm_otel_engine_collect`, freed once.
#[no_mangle]
pub unsafe extern "C" fn dcgm_otel_collected_free(collected: *mut CollectedC) {
    if collected.is_null() {
        return;
    }
    // SAFETY: the pointer is a CollectedBox from Box::into_raw in collect (cast to its first field),
    // freed once (the caller's promise).
    drop(unsafe { Box::from_raw(collected.cast::<CollectedBox>()) });
}

/// Free a message the library returned. Null is ignored.
///
/// # Safety
/// `message` is null or a message from this library, freed once.
#[no_mangle]
pub unsafe extern "C" fn dcgm_otel_string_free(message: *mut c_char) {
    if message.is_null() {
        return;
    }
    // SAFETY: the pointer came from CString::into_raw in finish, freed once (the caller's promise).
    drop(unsafe { CString::from_raw(message) });
}
