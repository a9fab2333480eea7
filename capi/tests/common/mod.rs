//! What the C ABI tests share: the entry points called as a C caller would (pointers in, statuses and
//! library-owned results out), the process's threads, the fake libdcgm.
#![allow(dead_code, clippy::unwrap_used, clippy::expect_used)]

use std::ffi::{c_char, CStr, CString};
use std::path::PathBuf;
use std::process::Command;
use std::ptr;

use dcgm_otel::engine::Engine;
use dcgm_otel_engine::ffi;

/// A status and, when not OK, its message.
pub type Outcome = (i32, Option<String>);

fn take_message(m: *mut c_char) -> Option<String> {
    if m.is_null() {
        return None;
    }
    // SAFETY: (test) a message the library returned, freed right after.
    let s = unsafe { CStr::from_ptr(m) }.to_string_lossy().into_owned();
    unsafe { ffi::dcgm_otel_string_free(m) };
    Some(s)
}

pub fn start(args: &[&str]) -> Result<*mut Engine, Outcome> {
    let owned: Vec<CString> = args.iter().map(|a| CString::new(*a).unwrap()).collect();
    let ptrs: Vec<*const c_char> = owned.iter().map(|c| c.as_ptr()).collect();
    let mut engine = ptr::null_mut();
    let mut message = ptr::null_mut();
    let rc = unsafe {
        ffi::dcgm_otel_engine_start(ptrs.as_ptr(), ptrs.len(), &mut engine, &mut message)
    };
    let message = take_message(message);
    if rc == 0 {
        assert!(message.is_none());
        Ok(engine)
    } else {
        Err((rc, message))
    }
}

/// One collection's sizes: (seq, data points, metrics bytes, log bytes).
pub struct Got {
    pub seq: u64,
    pub data_points: u64,
    pub metrics: Vec<u8>,
    pub logs: Vec<u8>,
}

pub fn collect(engine: *mut Engine, wait_ms: u32) -> Result<Got, Outcome> {
    let mut out = ptr::null_mut();
    let mut message = ptr::null_mut();
    let rc = unsafe { ffi::dcgm_otel_engine_collect(engine, wait_ms, &mut out, &mut message) };
    let message = take_message(message);
    if rc != 0 {
        return Err((rc, message));
    }
    let c = unsafe { &*out };
    let bytes = |p: *const u8, n: usize| {
        if n == 0 {
            Vec::new()
        } else {
            unsafe { std::slice::from_raw_parts(p, n) }.to_vec()
        }
    };
    let got = Got {
        seq: c.seq,
        data_points: c.data_points,
        metrics: bytes(c.metrics, c.metrics_len),
        logs: bytes(c.logs, c.logs_len),
    };
    unsafe { ffi::dcgm_otel_collected_free(out) };
    Ok(got)
}

pub fn stop(engine: *mut Engine, timeout_ms: u32) -> Outcome {
    let mut message = ptr::null_mut();
    let rc = unsafe { ffi::dcgm_otel_engine_stop(engine, timeout_ms, &mut message) };
    (rc, take_message(message))
}

pub fn free(engine: *mut Engine) {
    unsafe { ffi::dcgm_otel_engine_free(engine) };
}

/// The process's threads: (tid, name).
pub fn threads() -> Vec<(String, String)> {
    let mut out = Vec::new();
    for t in std::fs::read_dir("/proc/self/task").unwrap().flatten() {
        let name = std::fs::read_to_string(t.path().join("comm")).unwrap_or_default();
        out.push((
            t.file_name().to_string_lossy().into_owned(),
            name.trim().to_string(),
        ));
    }
    out
}

/// Whether SIGPIPE is in a thread's blocked set (`SigBlk` of /proc/self/task/TID/status).
pub fn blocks_sigpipe(tid: &str) -> bool {
    let status = std::fs::read_to_string(format!("/proc/self/task/{tid}/status")).unwrap();
    let blk = status
        .lines()
        .find_map(|l| l.strip_prefix("SigBlk:"))
        .unwrap()
        .trim();
    let mask = u64::from_str_radix(blk, 16).unwrap();
    mask & (1 << (13 - 1)) != 0
}

/// The fake libdcgm (tests/fake-libdcgm), built into this target directory when missing.
pub fn fake_libdcgm() -> PathBuf {
    let exe = std::env::current_exe().unwrap();
    let dir = exe.parent().unwrap().parent().unwrap();
    let so = dir.join("libfake_libdcgm.so");
    if !so.exists() {
        let cargo = std::env::var("CARGO").unwrap_or_else(|_| "cargo".into());
        let profile = dir.file_name().unwrap().to_string_lossy().into_owned();
        let mut cmd = Command::new(cargo);
        cmd.args(["build", "-p", "fake-libdcgm"]);
        if profile != "debug" {
            cmd.args(["--profile", &profile]);
        }
        assert!(
            cmd.status().unwrap().success(),
            "building fake-libdcgm failed"
        );
    }
    so
}
