//! A fake `libdcgm.so.4` for tests: NVIDIA DCGM's C ABI (the functions an exporter calls, with the real
//! names, signatures and struct-version checks) served from the project's simulated fleet, with fault
//! injection and a call log. See README.md for the environment interface and how to load it.
//!
//! This file only marshals C pointers (the crate's `unsafe` is here, in `go_dcgm` — the calls only
//! dcgm-exporter makes — one `clock_gettime` in `cpu_account` and the counting allocator of
//! `heap_account`, each block with a `// SAFETY:` comment); every decision is made in safe Rust in
//! [`engine`]. Each export runs inside `catch_unwind`, so no panic ever unwinds into C: a panic answers
//! `DCGM_ST_GENERIC_ERROR` (or NULL).
//! The export signatures are type-checked against `dcgm_otel::source::dcgm::ffi::fn_types` at compile
//! time (see the `const _` block at the end).
// The safety contract of every export is the C API's (dcgm_agent.h as summarised in dcgm-abi.md §2).
#![allow(clippy::missing_safety_doc, non_snake_case)]
#![deny(unsafe_op_in_unsafe_fn)]

mod calllog;
mod config;
mod cpu_account;
mod dbglog;
mod engine;
mod go_dcgm;
mod heap_account;

use std::collections::HashMap;
use std::ffi::{c_char, c_int, c_uint, c_ushort, CStr};
use std::panic::{catch_unwind, AssertUnwindSafe};
use std::ptr;
use std::sync::LazyLock;

use dcgm_otel::fields::catalog;
use dcgm_otel::source::dcgm::ffi::{self, *};

use calllog::word;
use engine::{engine, level_group, EntityKey, Payload, Sample};

/// Run an export body; a panic becomes DCGM_ST_GENERIC_ERROR instead of unwinding into C.
fn guard(name: &str, f: impl FnOnce() -> dcgmReturn_t) -> dcgmReturn_t {
    let out = cpu_account::measured(|| catch_unwind(AssertUnwindSafe(f)));
    heap_account::note();
    match out {
        Ok(rc) => rc,
        Err(_) => {
            calllog::line(&format!(
                "{name} panicked rc={}",
                ffi::DCGM_ST_GENERIC_ERROR
            ));
            ffi::DCGM_ST_GENERIC_ERROR
        }
    }
}

fn log(text: String) {
    calllog::line(&text);
}

/// Copy a C string argument (NULL → None), lossy UTF-8.
///
/// # Safety
/// `p` is NULL or points to a NUL-terminated string valid for the duration of the call.
unsafe fn c_string(p: *const c_char) -> Option<String> {
    if p.is_null() {
        return None;
    }
    // SAFETY: non-NULL and NUL-terminated per the caller's contract (a C string argument).
    Some(unsafe { CStr::from_ptr(p) }.to_string_lossy().into_owned())
}

/// Read the leading `unsigned int version` of a versioned struct.
///
/// # Safety
/// `p` is non-NULL and points to at least 4 readable, aligned bytes.
unsafe fn read_version<T>(p: *const T) -> u32 {
    // SAFETY: every versioned DCGM struct starts with `unsigned int version` at offset 0 (checked by
    // tests/e2e/abi_layout.rs); the pointer is non-NULL and aligned per the caller's contract.
    unsafe { p.cast::<u32>().read() }
}

/// Copy a fully built struct into the caller's buffer without going through the stack.
///
/// # Safety
/// `dst` is non-NULL, aligned and valid for writes of one `T`.
unsafe fn write_out<T: Pod>(dst: *mut T, value: &T) {
    // SAFETY: `dst` is valid for one T per the caller's contract; `value` is a distinct Rust object.
    unsafe { ptr::copy_nonoverlapping(value, dst, 1) }
}

fn fill(u: &mut dcgmFieldValueUnion, p: &Payload) {
    match p {
        Payload::Int(i) => u.set_i64(*i),
        Payload::Double(d) => u.set_f64(*d),
        Payload::Text(s) => u.set_string(s),
    }
}

fn value_v1(field: u16, s: &Sample) -> dcgmFieldValue_v1 {
    let mut v = dcgmFieldValue_v1::zeroed();
    v.version = ffi::dcgmFieldValue_version1;
    v.fieldId = field;
    v.fieldType = u16::from(s.field_type);
    v.status = s.status;
    v.ts = s.ts_us;
    fill(&mut v.value, &s.value);
    v
}

fn value_v2(key: EntityKey, field: u16, s: &Sample) -> dcgmFieldValue_v2 {
    let mut v = dcgmFieldValue_v2::zeroed();
    v.version = ffi::dcgmFieldValue_version2;
    v.entityGroupId = key.0;
    v.entityId = key.1;
    v.fieldId = field;
    v.fieldType = u16::from(s.field_type);
    v.status = s.status;
    v.unused = 0;
    v.ts = s.ts_us;
    fill(&mut v.value, &s.value);
    v
}

fn join<T: ToString>(items: &[T]) -> String {
    items
        .iter()
        .map(ToString::to_string)
        .collect::<Vec<_>>()
        .join(",")
}

// ------------------------------------------------------------------------------------------ lifecycle

#[no_mangle]
pub unsafe extern "C" fn dcgmInit() -> dcgmReturn_t {
    guard("dcgmInit", || {
        let rc = match engine().init() {
            Ok(()) => ffi::DCGM_ST_OK,
            Err((rc, msg)) => {
                eprintln!("fake libdcgm: {msg}");
                rc
            }
        };
        log(format!("dcgmInit rc={rc}"));
        rc
    })
}

#[no_mangle]
pub unsafe extern "C" fn dcgmShutdown() -> dcgmReturn_t {
    guard("dcgmShutdown", || {
        engine().shutdown();
        log(format!("dcgmShutdown rc={}", ffi::DCGM_ST_OK));
        ffi::DCGM_ST_OK
    })
}

#[no_mangle]
pub unsafe extern "C" fn dcgmStartEmbedded(
    op_mode: dcgmOperationMode_t,
    handle: *mut dcgmHandle_t,
) -> dcgmReturn_t {
    guard("dcgmStartEmbedded", || {
        let (rc, h) = if handle.is_null() {
            (ffi::DCGM_ST_BADPARAM, 0)
        } else {
            match engine().start_embedded(op_mode) {
                Ok(h) => {
                    // SAFETY: non-NULL out pointer to a dcgmHandle_t provided by the caller.
                    unsafe { handle.write(h) };
                    (ffi::DCGM_ST_OK, h)
                }
                Err(rc) => (rc, 0),
            }
        };
        if rc == ffi::DCGM_ST_OK {
            dbglog::host_engine_started(op_mode);
        }
        log(format!(
            "dcgmStartEmbedded mode={op_mode} handle={h} rc={rc}"
        ));
        rc
    })
}

#[no_mangle]
pub unsafe extern "C" fn dcgmStartEmbedded_v2(
    params: *mut dcgmStartEmbeddedV2Params_v1,
) -> dcgmReturn_t {
    guard("dcgmStartEmbedded_v2", || {
        if params.is_null() {
            log(format!("dcgmStartEmbedded_v2 rc={}", ffi::DCGM_ST_BADPARAM));
            return ffi::DCGM_ST_BADPARAM;
        }
        // SAFETY: non-NULL pointer to a params struct whose first member is the version word.
        let version = unsafe { read_version(params) };
        let ver = match version {
            ffi::dcgmStartEmbeddedV2Params_version1 => 1,
            ffi::dcgmStartEmbeddedV2Params_version2 => 2,
            ffi::dcgmStartEmbeddedV2Params_version3 => 3,
            _ => 0,
        };
        if ver == 0 {
            let rc = ffi::DCGM_ST_VER_MISMATCH;
            log(format!("dcgmStartEmbedded_v2 version={version:#x} rc={rc}"));
            return rc;
        }
        // SAFETY: v1, v2 and v3 share the prefix version/opMode/dcgmHandle (offsets 0/4/8, checked by
        // the ABI test); the caller passed a struct of the version it declared, so opMode is readable.
        let mode = unsafe { ptr::addr_of!((*params).opMode).read() };
        let (rc, h) = match engine().start_embedded(mode) {
            Ok(h) => {
                // SAFETY: as above, `dcgmHandle` at offset 8 lies inside every accepted version.
                unsafe { ptr::addr_of_mut!((*params).dcgmHandle).write(h) };
                (ffi::DCGM_ST_OK, h)
            }
            Err(rc) => (rc, 0),
        };
        if rc == ffi::DCGM_ST_OK {
            dbglog::host_engine_started(mode);
        }
        log(format!(
            "dcgmStartEmbedded_v2 version={ver} mode={mode} handle={h} rc={rc}"
        ));
        rc
    })
}

#[no_mangle]
pub unsafe extern "C" fn dcgmStopEmbedded(handle: dcgmHandle_t) -> dcgmReturn_t {
    guard("dcgmStopEmbedded", || {
        let rc = engine().close(handle, true);
        log(format!("dcgmStopEmbedded handle={handle} rc={rc}"));
        rc
    })
}

#[no_mangle]
pub unsafe extern "C" fn dcgmConnect_v2(
    address: *const c_char,
    params: *mut dcgmConnectV2Params_v2,
    handle: *mut dcgmHandle_t,
) -> dcgmReturn_t {
    guard("dcgmConnect_v2", || {
        // SAFETY: `address` is a C string argument (or NULL).
        let addr = unsafe { c_string(address) };
        let (rc, unix, h) = connect_v2(addr.as_deref(), params, handle);
        log(format!(
            "dcgmConnect_v2 address={} unix={unix} handle={h} rc={rc}",
            word(addr.as_deref().unwrap_or("(null)"))
        ));
        rc
    })
}

fn connect_v2(
    addr: Option<&str>,
    params: *mut dcgmConnectV2Params_v2,
    handle: *mut dcgmHandle_t,
) -> (dcgmReturn_t, u32, usize) {
    let (Some(addr), false, false) = (addr, params.is_null(), handle.is_null()) else {
        return (ffi::DCGM_ST_BADPARAM, 0, 0);
    };
    // SAFETY: non-NULL params pointer; the version word is its first member.
    let version = unsafe { read_version(params) };
    let unix = match version {
        ffi::dcgmConnectV2Params_version1 => 0,
        // SAFETY: a version-2 struct is 16 bytes; addressIsUnixSocket is at offset 12 (ABI test).
        ffi::dcgmConnectV2Params_version2 => unsafe {
            ptr::addr_of!((*params).addressIsUnixSocket).read()
        },
        _ => return (ffi::DCGM_ST_VER_MISMATCH, 0, 0),
    };
    match engine().connect(addr) {
        Ok(h) => {
            // SAFETY: non-NULL out pointer to a dcgmHandle_t.
            unsafe { handle.write(h) };
            (ffi::DCGM_ST_OK, unix, h)
        }
        Err(rc) => (rc, unix, 0),
    }
}

#[no_mangle]
pub unsafe extern "C" fn dcgmConnect_v3(
    uri: *const c_char,
    params: *mut dcgmConnectV3Params_v1,
    handle: *mut dcgmHandle_t,
) -> dcgmReturn_t {
    guard("dcgmConnect_v3", || {
        // SAFETY: `uri` is a C string argument (or NULL).
        let addr = unsafe { c_string(uri) };
        let rc_h = match (addr.as_deref(), params.is_null(), handle.is_null()) {
            (Some(a), false, false) => {
                // SAFETY: non-NULL params pointer; the version word is its first member.
                let version = unsafe { read_version(params) };
                let known = [
                    ffi::DCGM_TCP_SOCKET_PREFIX,
                    ffi::DCGM_UNIX_SOCKET_PREFIX,
                    ffi::DCGM_VSOCK_SOCKET_PREFIX,
                ];
                if version != ffi::dcgmConnectV3Params_version1 {
                    (ffi::DCGM_ST_VER_MISMATCH, 0)
                } else if !known.iter().any(|p| a.starts_with(p)) {
                    (ffi::DCGM_ST_BADPARAM, 0)
                } else {
                    match engine().connect(a) {
                        Ok(h) => {
                            // SAFETY: non-NULL out pointer to a dcgmHandle_t.
                            unsafe { handle.write(h) };
                            (ffi::DCGM_ST_OK, h)
                        }
                        Err(rc) => (rc, 0),
                    }
                }
            }
            _ => (ffi::DCGM_ST_BADPARAM, 0),
        };
        log(format!(
            "dcgmConnect_v3 address={} handle={} rc={}",
            word(addr.as_deref().unwrap_or("(null)")),
            rc_h.1,
            rc_h.0
        ));
        rc_h.0
    })
}

#[no_mangle]
pub unsafe extern "C" fn dcgmDisconnect(handle: dcgmHandle_t) -> dcgmReturn_t {
    guard("dcgmDisconnect", || {
        let rc = engine().close(handle, false);
        log(format!("dcgmDisconnect handle={handle} rc={rc}"));
        rc
    })
}

// ------------------------------------------------------------------------------------------ discovery

unsafe fn all_devices(
    name: &str,
    handle: dcgmHandle_t,
    ids: *mut c_uint,
    count: *mut c_int,
) -> dcgmReturn_t {
    let e = engine();
    let (rc, n) = match e.check(handle) {
        Err(rc) => (rc, 0),
        Ok(()) if ids.is_null() || count.is_null() => (ffi::DCGM_ST_BADPARAM, 0),
        Ok(()) => {
            let gpus = e.gpus();
            for (i, g) in gpus.iter().enumerate() {
                // SAFETY: the caller's array holds DCGM_MAX_NUM_DEVICES ids; gpus() returns at most that.
                unsafe { ids.add(i).write(g.index) };
            }
            // SAFETY: non-NULL out pointer to an int.
            unsafe { count.write(gpus.len() as c_int) };
            (ffi::DCGM_ST_OK, gpus.len())
        }
    };
    drop(e);
    log(format!("{name} count={n} handle={handle} rc={rc}"));
    rc
}

#[no_mangle]
pub unsafe extern "C" fn dcgmGetAllDevices(
    handle: dcgmHandle_t,
    ids: *mut c_uint,
    count: *mut c_int,
) -> dcgmReturn_t {
    // SAFETY: arguments forwarded unchanged under the same C contract.
    guard("dcgmGetAllDevices", || unsafe {
        all_devices("dcgmGetAllDevices", handle, ids, count)
    })
}

#[no_mangle]
pub unsafe extern "C" fn dcgmGetAllSupportedDevices(
    handle: dcgmHandle_t,
    ids: *mut c_uint,
    count: *mut c_int,
) -> dcgmReturn_t {
    // SAFETY: arguments forwarded unchanged under the same C contract.
    guard("dcgmGetAllSupportedDevices", || unsafe {
        all_devices("dcgmGetAllSupportedDevices", handle, ids, count)
    })
}

#[no_mangle]
pub unsafe extern "C" fn dcgmGetDeviceAttributes(
    handle: dcgmHandle_t,
    gpu_id: c_uint,
    attributes: *mut dcgmDeviceAttributes_v3,
) -> dcgmReturn_t {
    guard("dcgmGetDeviceAttributes", || {
        let e = engine();
        let rc = match e.check(handle) {
            Err(rc) => rc,
            Ok(()) if attributes.is_null() => ffi::DCGM_ST_BADPARAM,
            Ok(()) => {
                // SAFETY: non-NULL pointer to the caller's struct; version word first.
                let version = unsafe { read_version(attributes) };
                if version != ffi::dcgmDeviceAttributes_version3 {
                    ffi::DCGM_ST_VER_MISMATCH
                } else {
                    match e.device_attributes(gpu_id) {
                        Ok(a) => {
                            // SAFETY: the version word says the caller's buffer is a v3 struct.
                            unsafe { write_out(attributes, &a) };
                            ffi::DCGM_ST_OK
                        }
                        Err(rc) => rc,
                    }
                }
            }
        };
        drop(e);
        log(format!(
            "dcgmGetDeviceAttributes gpu={gpu_id} handle={handle} rc={rc}"
        ));
        rc
    })
}

#[no_mangle]
pub unsafe extern "C" fn dcgmGetEntityGroupEntities(
    handle: dcgmHandle_t,
    entity_group: dcgm_field_entity_group_t,
    entities: *mut dcgm_field_eid_t,
    num_entities: *mut c_int,
    flags: c_uint,
) -> dcgmReturn_t {
    guard("dcgmGetEntityGroupEntities", || {
        let e = engine();
        let (rc, n) = match e.check(handle) {
            Err(rc) => (rc, 0),
            Ok(()) if num_entities.is_null() => (ffi::DCGM_ST_BADPARAM, 0),
            Ok(()) => {
                // SAFETY: non-NULL in/out int (IN = capacity).
                let capacity = unsafe { num_entities.read() }.max(0) as usize;
                match e.group_entities(entity_group) {
                    Err(rc) => (rc, 0),
                    Ok(list) => {
                        // SAFETY: non-NULL in/out int.
                        unsafe { num_entities.write(list.len() as c_int) };
                        if list.len() > capacity {
                            (ffi::DCGM_ST_INSUFFICIENT_SIZE, list.len())
                        } else if entities.is_null() && !list.is_empty() {
                            (ffi::DCGM_ST_BADPARAM, 0)
                        } else {
                            for (i, id) in list.iter().enumerate() {
                                // SAFETY: i < list.len() <= capacity, the caller's array length.
                                unsafe { entities.add(i).write(*id) };
                            }
                            (ffi::DCGM_ST_OK, list.len())
                        }
                    }
                }
            }
        };
        drop(e);
        log(format!(
            "dcgmGetEntityGroupEntities entityGroup={entity_group} flags={flags} count={n} \
             handle={handle} rc={rc}"
        ));
        rc
    })
}

#[no_mangle]
pub unsafe extern "C" fn dcgmGetGpuInstanceHierarchy(
    handle: dcgmHandle_t,
    hierarchy: *mut dcgmMigHierarchy_v2,
) -> dcgmReturn_t {
    guard("dcgmGetGpuInstanceHierarchy", || {
        let e = engine();
        let (rc, n) = match e.check(handle) {
            Err(rc) => (rc, 0),
            Ok(()) if hierarchy.is_null() => (ffi::DCGM_ST_BADPARAM, 0),
            Ok(()) => {
                // SAFETY: non-NULL pointer to the caller's struct; version word first.
                if unsafe { read_version(hierarchy) } != ffi::dcgmMigHierarchy_version2 {
                    (ffi::DCGM_ST_VER_MISMATCH, 0)
                } else {
                    match e.mig_hierarchy() {
                        Ok(h) => {
                            // SAFETY: the version word says the caller's buffer is a v2 struct.
                            unsafe { write_out(hierarchy, &h) };
                            (ffi::DCGM_ST_OK, h.count)
                        }
                        Err(rc) => (rc, 0),
                    }
                }
            }
        };
        drop(e);
        log(format!(
            "dcgmGetGpuInstanceHierarchy count={n} handle={handle} rc={rc}"
        ));
        rc
    })
}

#[no_mangle]
pub unsafe extern "C" fn dcgmGetNvLinkLinkStatus(
    handle: dcgmHandle_t,
    status: *mut dcgmNvLinkStatus_v5,
) -> dcgmReturn_t {
    guard("dcgmGetNvLinkLinkStatus", || {
        let e = engine();
        let (rc, ver) = match e.check(handle) {
            Err(rc) => (rc, 0),
            Ok(()) if status.is_null() => (ffi::DCGM_ST_BADPARAM, 0),
            // SAFETY: non-NULL pointer to the caller's struct; version word first.
            Ok(()) => match unsafe { read_version(status) } {
                ffi::dcgmNvLinkStatus_version5 => {
                    let mut s = dcgmNvLinkStatus_v5::boxed_zeroed();
                    s.version = ffi::dcgmNvLinkStatus_version5;
                    let states = e.nvlink_states(ffi::DCGM_NVLINK_MAX_LINKS_PER_GPU);
                    s.numGpus = states.len() as u32;
                    for (i, (gpu, st)) in states.iter().enumerate() {
                        s.gpus[i].entityId = *gpu;
                        s.gpus[i].linkState.copy_from_slice(st);
                    }
                    let switches = e.switch_link_states();
                    s.numNvSwitches = switches.len() as u32;
                    for (i, (sw, st)) in switches.iter().enumerate() {
                        s.nvSwitches[i].entityId = *sw;
                        s.nvSwitches[i].linkState.copy_from_slice(st);
                    }
                    // SAFETY: the version word says the caller's buffer is a v5 struct.
                    unsafe { write_out(status, &s) };
                    (ffi::DCGM_ST_OK, 5)
                }
                ffi::dcgmNvLinkStatus_version4 => {
                    let mut s = dcgmNvLinkStatus_v4::boxed_zeroed();
                    s.version = ffi::dcgmNvLinkStatus_version4;
                    let states = e.nvlink_states(ffi::DCGM_NVLINK_MAX_LINKS_PER_GPU_LEGACY3);
                    s.numGpus = states.len() as u32;
                    for (i, (gpu, st)) in states.iter().enumerate() {
                        s.gpus[i].entityId = *gpu;
                        s.gpus[i].linkState.copy_from_slice(st);
                    }
                    let switches = e.switch_link_states();
                    s.numNvSwitches = switches.len() as u32;
                    for (i, (sw, st)) in switches.iter().enumerate() {
                        s.nvSwitches[i].entityId = *sw;
                        s.nvSwitches[i].linkState.copy_from_slice(st);
                    }
                    // SAFETY: the version word says the caller's buffer is a (smaller) v4 struct.
                    unsafe { write_out(status.cast::<dcgmNvLinkStatus_v4>(), &s) };
                    (ffi::DCGM_ST_OK, 4)
                }
                _ => (ffi::DCGM_ST_VER_MISMATCH, 0),
            },
        };
        drop(e);
        log(format!(
            "dcgmGetNvLinkLinkStatus version={ver} handle={handle} rc={rc}"
        ));
        rc
    })
}

/// Fill a CPU hierarchy (v1 or v2: the same leading layout per CPU, v2 with the serial).
fn fill_cores(mask: &mut dcgmCpuHierarchyOwnedCores_v1, cores: &[u32]) {
    mask.version = ffi::dcgmCpuHierarchyOwnedCores_version1;
    for core in cores {
        if let Some(word) = mask.bitmask.get_mut(*core as usize / 64) {
            *word |= 1u64 << (core % 64);
        }
    }
}

#[no_mangle]
pub unsafe extern "C" fn dcgmGetCpuHierarchy(
    handle: dcgmHandle_t,
    hierarchy: *mut dcgmCpuHierarchy_v1,
) -> dcgmReturn_t {
    guard("dcgmGetCpuHierarchy", || {
        let e = engine();
        let (rc, n) = match e.check(handle) {
            Err(rc) => (rc, 0),
            Ok(()) if hierarchy.is_null() => (ffi::DCGM_ST_BADPARAM, 0),
            // SAFETY: non-NULL pointer to the caller's struct; version word first.
            Ok(()) if unsafe { read_version(hierarchy) } != ffi::dcgmCpuHierarchy_version1 => {
                (ffi::DCGM_ST_VER_MISMATCH, 0)
            }
            Ok(()) => {
                let cpus = e.cpu_hierarchy();
                let mut h = dcgmCpuHierarchy_v1::boxed_zeroed();
                h.version = ffi::dcgmCpuHierarchy_version1;
                h.numCpus = cpus.len() as u32;
                for (i, (id, cores, _)) in cpus.iter().enumerate() {
                    h.cpus[i].cpuId = *id;
                    fill_cores(&mut h.cpus[i].ownedCores, cores);
                }
                // SAFETY: the version word says the caller's buffer is a v1 struct.
                unsafe { write_out(hierarchy, &h) };
                (ffi::DCGM_ST_OK, cpus.len())
            }
        };
        drop(e);
        log(format!(
            "dcgmGetCpuHierarchy count={n} handle={handle} rc={rc}"
        ));
        rc
    })
}

#[no_mangle]
pub unsafe extern "C" fn dcgmGetCpuHierarchy_v2(
    handle: dcgmHandle_t,
    hierarchy: *mut dcgmCpuHierarchy_v2,
) -> dcgmReturn_t {
    guard("dcgmGetCpuHierarchy_v2", || {
        let e = engine();
        let (rc, n) = match e.check(handle) {
            Err(rc) => (rc, 0),
            Ok(()) if hierarchy.is_null() => (ffi::DCGM_ST_BADPARAM, 0),
            // SAFETY: non-NULL pointer to the caller's struct; version word first.
            Ok(()) if unsafe { read_version(hierarchy) } != ffi::dcgmCpuHierarchy_version2 => {
                (ffi::DCGM_ST_VER_MISMATCH, 0)
            }
            Ok(()) => {
                let cpus = e.cpu_hierarchy();
                let mut h = dcgmCpuHierarchy_v2::boxed_zeroed();
                h.version = ffi::dcgmCpuHierarchy_version2;
                h.numCpus = cpus.len() as u32;
                for (i, (id, cores, serial)) in cpus.iter().enumerate() {
                    h.cpus[i].cpuId = *id;
                    fill_cores(&mut h.cpus[i].ownedCores, cores);
                    write_chars(&mut h.cpus[i].serial, serial);
                }
                // SAFETY: the version word says the caller's buffer is a v2 struct.
                unsafe { write_out(hierarchy, &h) };
                (ffi::DCGM_ST_OK, cpus.len())
            }
        };
        drop(e);
        log(format!(
            "dcgmGetCpuHierarchy_v2 count={n} handle={handle} rc={rc}"
        ));
        rc
    })
}

#[no_mangle]
pub unsafe extern "C" fn dcgmProfGetSupportedMetricGroups(
    handle: dcgmHandle_t,
    groups: *mut dcgmProfGetMetricGroups_v3,
) -> dcgmReturn_t {
    guard("dcgmProfGetSupportedMetricGroups", || {
        let e = engine();
        let (rc, gpu, n) = match e.check(handle) {
            Err(rc) => (rc, 0, 0),
            Ok(()) if groups.is_null() => (ffi::DCGM_ST_BADPARAM, 0, 0),
            Ok(()) => {
                // SAFETY: non-NULL pointer to the caller's struct; version word first.
                if unsafe { read_version(groups) } != ffi::dcgmProfGetMetricGroups_version3 {
                    (ffi::DCGM_ST_VER_MISMATCH, 0, 0)
                } else {
                    // SAFETY: a v3 struct (version checked); gpuId at offset 8 is an input.
                    let gpu = unsafe { ptr::addr_of!((*groups).gpuId).read() };
                    match e.metric_groups(gpu) {
                        Ok(g) => {
                            // SAFETY: the version word says the caller's buffer is a v3 struct.
                            unsafe { write_out(groups, &g) };
                            (ffi::DCGM_ST_OK, gpu, g.numMetricGroups)
                        }
                        Err(rc) => (rc, gpu, 0),
                    }
                }
            }
        };
        drop(e);
        log(format!(
            "dcgmProfGetSupportedMetricGroups gpu={gpu} groups={n} handle={handle} rc={rc}"
        ));
        rc
    })
}

// ------------------------------------------------------------------------------------------ groups

#[no_mangle]
pub unsafe extern "C" fn dcgmGroupCreate(
    handle: dcgmHandle_t,
    group_type: dcgmGroupType_t,
    group_name: *const c_char,
    group: *mut dcgmGpuGrp_t,
) -> dcgmReturn_t {
    guard("dcgmGroupCreate", || {
        // SAFETY: `group_name` is a C string argument (or NULL).
        let name = unsafe { c_string(group_name) };
        let mut e = engine();
        let (rc, id) = match e.check(handle) {
            Err(rc) => (rc, 0),
            Ok(()) => match (&name, group.is_null()) {
                (Some(n), false) => {
                    // The real engine copies the name into a 256-byte field (truncated).
                    let n: String = n.chars().take(ffi::DCGM_MAX_STR_LENGTH - 1).collect();
                    match e.group_create(group_type, &n) {
                        Ok(id) => {
                            // SAFETY: non-NULL out pointer to a dcgmGpuGrp_t.
                            unsafe { group.write(id) };
                            (ffi::DCGM_ST_OK, id)
                        }
                        Err(rc) => (rc, 0),
                    }
                }
                _ => (ffi::DCGM_ST_BADPARAM, 0),
            },
        };
        drop(e);
        log(format!(
            "dcgmGroupCreate type={group_type} name={} group={id} handle={handle} rc={rc}",
            word(name.as_deref().unwrap_or("(null)"))
        ));
        rc
    })
}

#[no_mangle]
pub unsafe extern "C" fn dcgmGroupAddEntity(
    handle: dcgmHandle_t,
    group: dcgmGpuGrp_t,
    entity_group: dcgm_field_entity_group_t,
    entity_id: dcgm_field_eid_t,
) -> dcgmReturn_t {
    guard("dcgmGroupAddEntity", || {
        let mut e = engine();
        let rc = match e.check(handle) {
            Err(rc) => rc,
            Ok(()) => match e.group_add_entity(group, (entity_group, entity_id)) {
                Ok(()) => ffi::DCGM_ST_OK,
                Err(rc) => rc,
            },
        };
        drop(e);
        log(format!(
            "dcgmGroupAddEntity group={group} entityGroup={entity_group} entity={entity_id} \
             handle={handle} rc={rc}"
        ));
        rc
    })
}

#[no_mangle]
pub unsafe extern "C" fn dcgmGroupDestroy(
    handle: dcgmHandle_t,
    group: dcgmGpuGrp_t,
) -> dcgmReturn_t {
    guard("dcgmGroupDestroy", || {
        let mut e = engine();
        let rc = match e.check(handle) {
            Err(rc) => rc,
            Ok(()) => e.group_destroy(group).err().unwrap_or(ffi::DCGM_ST_OK),
        };
        drop(e);
        log(format!(
            "dcgmGroupDestroy group={group} handle={handle} rc={rc}"
        ));
        rc
    })
}

#[no_mangle]
pub unsafe extern "C" fn dcgmFieldGroupCreate(
    handle: dcgmHandle_t,
    num_field_ids: c_int,
    field_ids: *const c_ushort,
    field_group_name: *const c_char,
    field_group: *mut dcgmFieldGrp_t,
) -> dcgmReturn_t {
    guard("dcgmFieldGroupCreate", || {
        // SAFETY: `field_group_name` is a C string argument (or NULL).
        let name = unsafe { c_string(field_group_name) };
        let n_ok = (1..ffi::DCGM_MAX_FIELD_IDS_PER_FIELD_GROUP as c_int).contains(&num_field_ids);
        let fields: Vec<u16> = if n_ok && !field_ids.is_null() {
            // SAFETY: the caller passes `num_field_ids` (1..=127, checked) readable ids.
            unsafe { std::slice::from_raw_parts(field_ids, num_field_ids as usize) }.to_vec()
        } else {
            Vec::new()
        };
        let mut e = engine();
        let (rc, id) = match e.check(handle) {
            Err(rc) => (rc, 0),
            Ok(()) => match (&name, fields.is_empty(), field_group.is_null()) {
                (Some(n), false, false) => match e.field_group_create(&fields, n) {
                    Ok(id) => {
                        // SAFETY: non-NULL out pointer to a dcgmFieldGrp_t.
                        unsafe { field_group.write(id) };
                        (ffi::DCGM_ST_OK, id)
                    }
                    Err(rc) => (rc, 0),
                },
                _ => (ffi::DCGM_ST_BADPARAM, 0),
            },
        };
        drop(e);
        log(format!(
            "dcgmFieldGroupCreate name={} fields={} fieldGroup={id} handle={handle} rc={rc}",
            word(name.as_deref().unwrap_or("(null)")),
            join(&fields)
        ));
        rc
    })
}

#[no_mangle]
pub unsafe extern "C" fn dcgmFieldGroupDestroy(
    handle: dcgmHandle_t,
    field_group: dcgmFieldGrp_t,
) -> dcgmReturn_t {
    guard("dcgmFieldGroupDestroy", || {
        let mut e = engine();
        let rc = match e.check(handle) {
            Err(rc) => rc,
            Ok(()) => e
                .field_group_destroy(field_group)
                .err()
                .unwrap_or(ffi::DCGM_ST_OK),
        };
        drop(e);
        log(format!(
            "dcgmFieldGroupDestroy fieldGroup={field_group} handle={handle} rc={rc}"
        ));
        rc
    })
}

#[no_mangle]
pub unsafe extern "C" fn dcgmWatchFields(
    handle: dcgmHandle_t,
    group: dcgmGpuGrp_t,
    field_group: dcgmFieldGrp_t,
    update_freq: i64,
    max_keep_age: f64,
    max_keep_samples: c_int,
) -> dcgmReturn_t {
    guard("dcgmWatchFields", || {
        let mut e = engine();
        let rc = match e.check(handle) {
            Err(rc) => rc,
            Ok(()) => e
                .watch_keeping(
                    group,
                    field_group,
                    update_freq,
                    max_keep_age,
                    max_keep_samples,
                )
                .err()
                .unwrap_or(ffi::DCGM_ST_OK),
        };
        drop(e);
        log(format!(
            "dcgmWatchFields group={group} fieldGroup={field_group} freq={update_freq} \
             maxKeepAge={max_keep_age} maxKeepSamples={max_keep_samples} handle={handle} rc={rc}"
        ));
        rc
    })
}

#[no_mangle]
pub unsafe extern "C" fn dcgmUnwatchFields(
    handle: dcgmHandle_t,
    group: dcgmGpuGrp_t,
    field_group: dcgmFieldGrp_t,
) -> dcgmReturn_t {
    guard("dcgmUnwatchFields", || {
        let mut e = engine();
        let rc = match e.check(handle) {
            Err(rc) => rc,
            Ok(()) => e
                .unwatch(group, field_group)
                .err()
                .unwrap_or(ffi::DCGM_ST_OK),
        };
        drop(e);
        log(format!(
            "dcgmUnwatchFields group={group} fieldGroup={field_group} handle={handle} rc={rc}"
        ));
        rc
    })
}

#[no_mangle]
pub unsafe extern "C" fn dcgmUpdateAllFields(
    handle: dcgmHandle_t,
    wait_for_update: c_int,
) -> dcgmReturn_t {
    guard("dcgmUpdateAllFields", || {
        let mut e = engine();
        let rc = match e.check(handle) {
            Err(rc) => rc,
            Ok(()) => {
                e.update_all();
                ffi::DCGM_ST_OK
            }
        };
        drop(e);
        log(format!(
            "dcgmUpdateAllFields wait={wait_for_update} handle={handle} rc={rc}"
        ));
        rc
    })
}

// ------------------------------------------------------------------------------------------ values

/// `slow_ms` / `hang_ms`: sleep before taking the engine lock for the read, so other calls are not
/// held up. Live reads (discovery) are slowed but never hang.
fn slow_down(live: bool) {
    let d = if live {
        engine().slow()
    } else {
        engine().delay_for_poll()
    };
    if !d.is_zero() {
        std::thread::sleep(d);
    }
}

#[no_mangle]
pub unsafe extern "C" fn dcgmEntityGetLatestValues(
    handle: dcgmHandle_t,
    entity_group: dcgm_field_entity_group_t,
    entity_id: c_int,
    fields: *mut c_ushort,
    count: c_uint,
    values: *mut dcgmFieldValue_v1,
) -> dcgmReturn_t {
    guard("dcgmEntityGetLatestValues", || {
        let ids_peek: Vec<u16> =
            if !fields.is_null() && count as usize <= ffi::DCGM_MAX_FIELD_IDS_PER_FIELD_GROUP {
                // SAFETY: the caller passes `count` (≤ 128, checked) readable field ids.
                unsafe { std::slice::from_raw_parts(fields, count as usize) }.to_vec()
            } else {
                Vec::new()
            };
        let poll = !engine::global_only(&ids_peek);
        slow_down(!poll);
        // The C parameter is `int`; entity ids (packed link ids) use the same 32-bit pattern.
        let key: EntityKey = (entity_group, entity_id as u32);
        let n = count as usize;
        let ok_args = n <= ffi::DCGM_MAX_FIELD_IDS_PER_FIELD_GROUP
            && (n == 0 || (!fields.is_null() && !values.is_null()));
        let ids: Vec<u16> = if ok_args && n > 0 {
            // SAFETY: the caller passes `count` (≤ 128, checked) readable field ids.
            unsafe { std::slice::from_raw_parts(fields, n) }.to_vec()
        } else {
            Vec::new()
        };
        let mut e = engine();
        let rc = match e.check(handle) {
            Err(rc) => rc,
            Ok(()) if !ok_args => ffi::DCGM_ST_BADPARAM,
            Ok(()) => {
                if poll {
                    e.begin_read(&[key], &ids);
                }
                for (i, f) in ids.iter().enumerate() {
                    let v = value_v1(*f, &e.read(key, *f, false));
                    // SAFETY: `values` holds `count` entries (C contract) and i < count.
                    unsafe { write_out(values.add(i), &v) };
                }
                if poll {
                    e.end_read();
                }
                ffi::DCGM_ST_OK
            }
        };
        drop(e);
        log(format!(
            "dcgmEntityGetLatestValues entityGroup={entity_group} entity={} fields={} \
             handle={handle} rc={rc}",
            entity_id as u32,
            join(&ids)
        ));
        rc
    })
}

#[no_mangle]
pub unsafe extern "C" fn dcgmEntitiesGetLatestValues(
    handle: dcgmHandle_t,
    entities: *mut dcgmGroupEntityPair_t,
    entity_count: c_uint,
    fields: *mut c_ushort,
    field_count: c_uint,
    flags: c_uint,
    values: *mut dcgmFieldValue_v2,
) -> dcgmReturn_t {
    guard("dcgmEntitiesGetLatestValues", || {
        let (ne, nf) = (entity_count as usize, field_count as usize);
        let ids_peek: Vec<u16> =
            if !fields.is_null() && nf <= ffi::DCGM_MAX_FIELD_IDS_PER_FIELD_GROUP {
                // SAFETY: the caller passes `field_count` (≤ 128, checked) readable field ids.
                unsafe { std::slice::from_raw_parts(fields, nf) }.to_vec()
            } else {
                Vec::new()
            };
        // Live reads (discovery) and reads of global fields only (the bind/unbind watcher) are not
        // polls: they neither advance the fleet nor count for the faults.
        let not_poll = flags & ffi::DCGM_FV_FLAG_LIVE_DATA != 0 || engine::global_only(&ids_peek);
        slow_down(not_poll);
        let ok_args = ne <= ffi::DCGM_GROUP_MAX_ENTITIES_V2
            && nf <= ffi::DCGM_MAX_FIELD_IDS_PER_FIELD_GROUP
            && (ne == 0 || !entities.is_null())
            && (nf == 0 || !fields.is_null())
            && (ne * nf == 0 || !values.is_null());
        let (keys, ids): (Vec<EntityKey>, Vec<u16>) = if ok_args {
            let keys = if ne > 0 {
                // SAFETY: the caller passes `entity_count` (≤ 1024, checked) readable pairs.
                unsafe { std::slice::from_raw_parts(entities, ne) }
                    .iter()
                    .map(|p| (p.entityGroupId, p.entityId))
                    .collect()
            } else {
                Vec::new()
            };
            let ids = if nf > 0 {
                // SAFETY: the caller passes `field_count` (≤ 128, checked) readable field ids.
                unsafe { std::slice::from_raw_parts(fields, nf) }.to_vec()
            } else {
                Vec::new()
            };
            (keys, ids)
        } else {
            (Vec::new(), Vec::new())
        };
        let live = flags & ffi::DCGM_FV_FLAG_LIVE_DATA != 0;
        let mut e = engine();
        let rc = match e.check(handle) {
            Err(rc) => rc,
            Ok(()) if !ok_args => ffi::DCGM_ST_BADPARAM,
            Ok(()) => {
                if !not_poll {
                    e.begin_read(&keys, &ids);
                }
                // DCGM promises no order; the fake answers field-major (all entities for the first
                // field, then the next field) so that a caller assuming entity-major order fails.
                let mut i = 0usize;
                for f in &ids {
                    for key in &keys {
                        let v = value_v2(*key, *f, &e.read(*key, *f, live));
                        // SAFETY: `values` holds entity_count × field_count entries (C contract);
                        // i < ne × nf.
                        unsafe { write_out(values.add(i), &v) };
                        i += 1;
                    }
                }
                if !not_poll {
                    e.end_read();
                }
                ffi::DCGM_ST_OK
            }
        };
        drop(e);
        let ents: Vec<String> = keys.iter().map(|(g, id)| format!("{g}:{id}")).collect();
        log(format!(
            "dcgmEntitiesGetLatestValues entities={} fields={} flags={flags} handle={handle} rc={rc}",
            join(&ents),
            join(&ids)
        ));
        rc
    })
}

// ------------------------------------------------------------------------------------- incidents

#[no_mangle]
pub unsafe extern "C" fn dcgmGetValuesSince_v2(
    handle: dcgmHandle_t,
    group: dcgmGpuGrp_t,
    field_group: dcgmFieldGrp_t,
    since: std::ffi::c_longlong,
    next: *mut std::ffi::c_longlong,
    callback: dcgmFieldValueEntityEnumeration_f,
    user: *mut std::ffi::c_void,
) -> dcgmReturn_t {
    guard("dcgmGetValuesSince_v2", || {
        let e = engine();
        let found = match e.check(handle) {
            Err(rc) => Err(rc),
            Ok(()) if next.is_null() || callback.is_none() => Err(ffi::DCGM_ST_BADPARAM),
            Ok(()) => e.values_since(group, field_group, since),
        };
        // The callback runs without the engine lock (it may be slow; it must not call back in).
        drop(e);
        let (rc, n) = match found {
            Err(rc) => (rc, 0),
            Ok((samples, cursor)) => {
                let n = samples.len();
                let mut i = 0;
                while i < n {
                    let (key, field) = (samples[i].key, samples[i].field);
                    let mut batch = Vec::new();
                    while i < n && samples[i].key == key && samples[i].field == field {
                        let s = &samples[i];
                        batch.push(value_v1(
                            field,
                            &Sample {
                                status: ffi::DCGM_ST_OK,
                                field_type: s.field_type,
                                ts_us: s.ts_us,
                                value: s.value.clone(),
                            },
                        ));
                        i += 1;
                    }
                    if let Some(cb) = callback {
                        // SAFETY: the caller's callback and user data, per the C contract; `batch`
                        // lives until it returns.
                        let stop = unsafe {
                            cb(key.0, key.1, batch.as_mut_ptr(), batch.len() as c_int, user)
                        };
                        if stop != 0 {
                            break;
                        }
                    }
                }
                // SAFETY: non-NULL (checked) writable cursor.
                unsafe { next.write(cursor) };
                (ffi::DCGM_ST_OK, n)
            }
        };
        log(format!(
            "dcgmGetValuesSince_v2 group={group} fieldGroup={field_group} samples={n} handle={handle} rc={rc}"
        ));
        rc
    })
}

#[no_mangle]
pub unsafe extern "C" fn dcgmHealthSet(
    handle: dcgmHandle_t,
    group: dcgmGpuGrp_t,
    systems: dcgmHealthSystems_t,
) -> dcgmReturn_t {
    guard("dcgmHealthSet", || {
        let mut e = engine();
        let rc = match e.check(handle) {
            Err(rc) => rc,
            Ok(()) => match e.health_set(group, systems) {
                Ok(()) => ffi::DCGM_ST_OK,
                Err(rc) => rc,
            },
        };
        drop(e);
        log(format!(
            "dcgmHealthSet group={group} systems={systems:#x} handle={handle} rc={rc}"
        ));
        rc
    })
}

#[no_mangle]
pub unsafe extern "C" fn dcgmHealthCheck(
    handle: dcgmHandle_t,
    group: dcgmGpuGrp_t,
    response: *mut dcgmHealthResponse_v5,
) -> dcgmReturn_t {
    guard("dcgmHealthCheck", || {
        let mut e = engine();
        let (rc, n) = match e.check(handle) {
            Err(rc) => (rc, 0),
            Ok(()) if response.is_null() => (ffi::DCGM_ST_BADPARAM, 0),
            // SAFETY: non-NULL pointer to the caller's struct; version word first.
            Ok(()) if unsafe { read_version(response) } != ffi::dcgmHealthResponse_version5 => {
                (ffi::DCGM_ST_VER_MISMATCH, 0)
            }
            Ok(()) => match e.health_check(group) {
                Err(rc) => (rc, 0),
                Ok(incidents) => {
                    let mut r = dcgmHealthResponse_v5::boxed_zeroed();
                    r.version = ffi::dcgmHealthResponse_version5;
                    let n = incidents.len().min(r.incidents.len());
                    r.incidentCount = n as u32;
                    for (slot, i) in r.incidents.iter_mut().zip(&incidents) {
                        slot.system = i.system;
                        slot.health = i.result;
                        slot.error.code = i.code;
                        let room = slot.error.msg.len() - 1;
                        for (d, b) in slot.error.msg.iter_mut().zip(i.message.bytes().take(room)) {
                            *d = b as c_char;
                        }
                        slot.entityInfo.entityGroupId = ffi::DCGM_FE_GPU;
                        slot.entityInfo.entityId = i.gpu;
                        r.overallHealth = r.overallHealth.max(i.result);
                    }
                    // SAFETY: the version word says the caller's buffer is a v5 response.
                    unsafe { write_out(response, &r) };
                    (ffi::DCGM_ST_OK, n)
                }
            },
        };
        drop(e);
        log(format!(
            "dcgmHealthCheck group={group} incidents={n} handle={handle} rc={rc}"
        ));
        rc
    })
}

#[no_mangle]
pub unsafe extern "C" fn dcgmGetNvLinkP2PStatus(
    handle: dcgmHandle_t,
    status: *mut dcgmNvLinkP2PStatus_v1,
) -> dcgmReturn_t {
    guard("dcgmGetNvLinkP2PStatus", || {
        let e = engine();
        let rc = match e.check(handle) {
            Err(rc) => rc,
            Ok(()) if status.is_null() => ffi::DCGM_ST_BADPARAM,
            // SAFETY: non-NULL pointer to the caller's struct; version word first.
            Ok(()) if unsafe { read_version(status) } != ffi::dcgmNvLinkP2PStatus_version1 => {
                ffi::DCGM_ST_VER_MISMATCH
            }
            Ok(()) if e.cfg.faults.p2p_unsupported => ffi::DCGM_ST_NOT_SUPPORTED,
            Ok(()) => {
                let mut s = dcgmNvLinkP2PStatus_v1::boxed_zeroed();
                s.version = ffi::dcgmNvLinkP2PStatus_version1;
                let rows = e.p2p_status();
                s.numGpus = rows.len().min(s.gpus.len()) as u32;
                for (slot, (gpu, row)) in s.gpus.iter_mut().zip(&rows) {
                    slot.entityId = *gpu;
                    for (d, v) in slot.linkStatus.iter_mut().zip(row) {
                        *d = *v;
                    }
                }
                // SAFETY: the version word says the caller's buffer is a v1 struct.
                unsafe { write_out(status, &s) };
                ffi::DCGM_ST_OK
            }
        };
        drop(e);
        log(format!("dcgmGetNvLinkP2PStatus handle={handle} rc={rc}"));
        rc
    })
}

// ------------------------------------------------------------------------------------------ misc

#[no_mangle]
pub unsafe extern "C" fn dcgmHostengineIsHealthy(
    handle: dcgmHandle_t,
    health: *mut dcgmHostengineHealth_v1,
) -> dcgmReturn_t {
    guard("dcgmHostengineIsHealthy", || {
        let e = engine();
        let rc = match e.check(handle) {
            Err(rc) => rc,
            Ok(()) if health.is_null() => ffi::DCGM_ST_BADPARAM,
            // SAFETY: non-NULL pointer to the caller's struct; version word first.
            Ok(()) if unsafe { read_version(health) } != ffi::dcgmHostengineHealth_version1 => {
                ffi::DCGM_ST_VER_MISMATCH
            }
            Ok(()) => {
                let h = dcgmHostengineHealth_v1 {
                    version: ffi::dcgmHostengineHealth_version1,
                    overallHealth: 0,
                };
                // SAFETY: the version word says the caller's buffer is a v1 struct.
                unsafe { write_out(health, &h) };
                ffi::DCGM_ST_OK
            }
        };
        drop(e);
        log(format!("dcgmHostengineIsHealthy handle={handle} rc={rc}"));
        rc
    })
}

#[no_mangle]
pub unsafe extern "C" fn dcgmVersionInfo(info: *mut dcgmVersionInfo_v2) -> dcgmReturn_t {
    guard("dcgmVersionInfo", || {
        let rc = if info.is_null() {
            ffi::DCGM_ST_BADPARAM
        // SAFETY: non-NULL pointer to the caller's struct; version word first.
        } else if unsafe { read_version(info) } != ffi::dcgmVersionInfo_version2 {
            ffi::DCGM_ST_VER_MISMATCH
        } else {
            let mut v = dcgmVersionInfo_v2::zeroed();
            v.version = ffi::dcgmVersionInfo_version2;
            write_chars(
                &mut v.rawBuildInfoString,
                "version:4.6.0;arch:x86_64;buildtype:Release;buildid:fake;commit:fake-libdcgm;\
                 branch:fake;builddate:2026-11-22;buildplatform:fake-libdcgm",
            );
            // SAFETY: the version word says the caller's buffer is a v2 struct.
            unsafe { write_out(info, &v) };
            ffi::DCGM_ST_OK
        };
        log(format!("dcgmVersionInfo rc={rc}"));
        rc
    })
}

fn error_text(code: dcgmReturn_t) -> Option<&'static CStr> {
    Some(match code {
        ffi::DCGM_ST_OK => c"Success",
        ffi::DCGM_ST_BADPARAM => c"Bad parameter passed to function",
        ffi::DCGM_ST_GENERIC_ERROR => c"Generic unspecified error",
        ffi::DCGM_ST_MEMORY => c"Out of memory error",
        ffi::DCGM_ST_NOT_CONFIGURED => c"Setting not configured",
        ffi::DCGM_ST_NOT_SUPPORTED => c"Feature not supported",
        ffi::DCGM_ST_INIT_ERROR => c"DCGM initialization error",
        ffi::DCGM_ST_UNINITIALIZED => c"Object is in an undefined state",
        ffi::DCGM_ST_VER_MISMATCH => c"Version mismatch",
        ffi::DCGM_ST_UNKNOWN_FIELD => c"Unknown field identifier",
        ffi::DCGM_ST_NO_DATA => c"No data is available",
        ffi::DCGM_ST_NOT_WATCHED => c"Field is not being watched",
        ffi::DCGM_ST_FUNCTION_NOT_FOUND => c"Function not found",
        ffi::DCGM_ST_CONNECTION_NOT_VALID => c"Host engine connection invalid/disconnected",
        ffi::DCGM_ST_MAX_LIMIT => c"Max limit reached for the object",
        ffi::DCGM_ST_DUPLICATE_KEY => c"Duplicate key passed to function",
        ffi::DCGM_ST_INSUFFICIENT_SIZE => c"More space is needed to store the requested data",
        ffi::DCGM_ST_MODULE_NOT_LOADED => {
            c"This request is serviced by a module of DCGM that is not currently loaded"
        }
        _ => return None,
    })
}

#[no_mangle]
pub unsafe extern "C" fn errorString(result: dcgmReturn_t) -> *const c_char {
    catch_unwind(|| {
        log(format!("errorString code={result}"));
        error_text(result).map_or(ptr::null(), CStr::as_ptr)
    })
    .unwrap_or(ptr::null())
}

/// Field metadata, built once from the project's field catalog; entries never move or change.
struct MetaTable(HashMap<u16, Box<MetaEntry>>);

struct MetaEntry {
    meta: dcgm_field_meta_t,
    format: dcgm_field_output_format_t,
}

// SAFETY: the table is immutable after construction; the only raw pointers in it (`valueFormat`) point
// into the same boxed entries, which live as long as the static.
unsafe impl Send for MetaTable {}
// SAFETY: see above; shared read-only access from any thread is fine.
unsafe impl Sync for MetaTable {}

static META: LazyLock<MetaTable> = LazyLock::new(|| {
    let mut map = HashMap::new();
    for id in 0..=u16::MAX {
        let Some(info) = catalog().by_id(id) else {
            continue;
        };
        let mut entry = Box::new(MetaEntry {
            meta: dcgm_field_meta_t::zeroed(),
            format: dcgm_field_output_format_t::zeroed(),
        });
        let tag = info
            .name
            .trim_start_matches("DCGM_FI_")
            .to_ascii_lowercase();
        write_chars(&mut entry.format.shortName, &tag);
        write_chars(&mut entry.format.unit, info.unit.unwrap_or(""));
        entry.format.width = 8;
        let ft = engine::type_char(info.value_type);
        entry.meta.fieldId = id;
        entry.meta.fieldType = ft as c_char;
        entry.meta.size = if ft == ffi::DCGM_FT_INT64 || ft == ffi::DCGM_FT_DOUBLE {
            8
        } else {
            0
        };
        write_chars(&mut entry.meta.tag, &tag);
        let level = level_group(info.level);
        entry.meta.scope = if level == ffi::DCGM_FE_NONE {
            ffi::DCGM_FS_GLOBAL
        } else {
            ffi::DCGM_FS_ENTITY
        };
        entry.meta.nvmlFieldId = 0;
        entry.meta.entityLevel = level;
        entry.meta.valueFormat = ptr::addr_of_mut!(entry.format);
        map.insert(id, entry);
    }
    MetaTable(map)
});

#[no_mangle]
pub unsafe extern "C" fn DcgmFieldGetById(field_id: c_ushort) -> *const dcgm_field_meta_t {
    catch_unwind(|| {
        let initialized = engine().initialized();
        let p = if initialized {
            META.0
                .get(&field_id)
                .map_or(ptr::null(), |e| ptr::addr_of!(e.meta))
        } else {
            ptr::null()
        };
        log(format!(
            "DcgmFieldGetById field={field_id} found={}",
            u8::from(!p.is_null())
        ));
        p
    })
    .unwrap_or(ptr::null())
}

// Compile-time proof that every export has the exact C signature the exporter's binding declares.
const _: () = {
    use dcgm_otel::source::dcgm::ffi::fn_types as t;
    let _: t::dcgmInit = dcgmInit;
    let _: t::dcgmShutdown = dcgmShutdown;
    let _: t::dcgmStartEmbedded = dcgmStartEmbedded;
    let _: t::dcgmStartEmbedded_v2 = dcgmStartEmbedded_v2;
    let _: t::dcgmStopEmbedded = dcgmStopEmbedded;
    let _: t::dcgmConnect_v2 = dcgmConnect_v2;
    let _: t::dcgmConnect_v3 = dcgmConnect_v3;
    let _: t::dcgmDisconnect = dcgmDisconnect;
    let _: t::dcgmGetAllDevices = dcgmGetAllDevices;
    let _: t::dcgmGetAllSupportedDevices = dcgmGetAllSupportedDevices;
    let _: t::dcgmGetDeviceAttributes = dcgmGetDeviceAttributes;
    let _: t::dcgmGetEntityGroupEntities = dcgmGetEntityGroupEntities;
    let _: t::dcgmGetGpuInstanceHierarchy = dcgmGetGpuInstanceHierarchy;
    let _: t::dcgmGetCpuHierarchy = dcgmGetCpuHierarchy;
    let _: t::dcgmGetCpuHierarchy_v2 = dcgmGetCpuHierarchy_v2;
    let _: t::dcgmGetNvLinkLinkStatus = dcgmGetNvLinkLinkStatus;
    let _: t::dcgmGroupCreate = dcgmGroupCreate;
    let _: t::dcgmGroupAddEntity = dcgmGroupAddEntity;
    let _: t::dcgmGroupDestroy = dcgmGroupDestroy;
    let _: t::dcgmFieldGroupCreate = dcgmFieldGroupCreate;
    let _: t::dcgmFieldGroupDestroy = dcgmFieldGroupDestroy;
    let _: t::dcgmWatchFields = dcgmWatchFields;
    let _: t::dcgmUnwatchFields = dcgmUnwatchFields;
    let _: t::dcgmUpdateAllFields = dcgmUpdateAllFields;
    let _: t::dcgmEntityGetLatestValues = dcgmEntityGetLatestValues;
    let _: t::dcgmEntitiesGetLatestValues = dcgmEntitiesGetLatestValues;
    let _: t::dcgmProfGetSupportedMetricGroups = dcgmProfGetSupportedMetricGroups;
    let _: t::dcgmHostengineIsHealthy = dcgmHostengineIsHealthy;
    let _: t::dcgmVersionInfo = dcgmVersionInfo;
    let _: t::errorString = errorString;
    let _: t::DcgmFieldGetById = DcgmFieldGetById;
};
