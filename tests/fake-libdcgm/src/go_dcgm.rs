//! The DCGM calls that NVIDIA's dcgm-exporter makes (through its cgo binding, go-dcgm) and dcgm-otel
//! does not: field-library init, GPU status, the per-GPU latest-values read and topology of go-dcgm's
//! device info, adding a GPU to a group, a group's info and health watches. With these the real
//! dcgm-exporter runs on the fake as a test peer (`tests/e2e/dcgm_exporter_diff.rs`); the README's
//! "Exported symbols" lists them.
//!
//! Like `lib.rs`, this file only marshals C pointers (each `unsafe` block with a `// SAFETY:`
//! comment); the engine decides. dcgm-otel never calls these, so they are not in
//! `dcgm_otel::source::dcgm::ffi::fn_types`: their signatures are DCGM 4.x `dcgm_agent.h`'s /
//! `dcgm_fields.h`'s, and running dcgm-exporter on them is their test.

use std::ffi::{c_int, c_uint, c_ushort, c_void};

use dcgm_otel::source::dcgm::ffi::{self, *};

use crate::engine::{engine, EntityKey};
use crate::{guard, join, log, read_version, value_v1, write_out};

/// `int DcgmFieldsInit(void)`: the field metadata is built in; 0 = success.
#[no_mangle]
pub unsafe extern "C" fn DcgmFieldsInit() -> c_int {
    log("DcgmFieldsInit rc=0".to_string());
    0
}

/// `int DcgmFieldsTerm(void)`: 0 = success.
#[no_mangle]
pub unsafe extern "C" fn DcgmFieldsTerm() -> c_int {
    log("DcgmFieldsTerm rc=0".to_string());
    0
}

#[no_mangle]
pub unsafe extern "C" fn dcgmGetGpuStatus(
    handle: dcgmHandle_t,
    gpu_id: c_uint,
    status: *mut DcgmEntityStatus_t,
) -> dcgmReturn_t {
    guard("dcgmGetGpuStatus", || {
        let e = engine();
        let (rc, st) = match e.check(handle) {
            Err(rc) => (rc, 0),
            Ok(()) if status.is_null() => (ffi::DCGM_ST_BADPARAM, 0),
            Ok(()) => match e.gpu_status(gpu_id) {
                Ok(st) => {
                    // SAFETY: non-NULL out pointer to a DcgmEntityStatus_t.
                    unsafe { status.write(st) };
                    (ffi::DCGM_ST_OK, st)
                }
                Err(rc) => (rc, 0),
            },
        };
        drop(e);
        log(format!(
            "dcgmGetGpuStatus gpu={gpu_id} status={st} handle={handle} rc={rc}"
        ));
        rc
    })
}

/// `dcgmGetLatestValuesForFields`: one GPU's cached values, as `dcgmEntityGetLatestValues` on
/// `DCGM_FE_GPU` answers them. Only go-dcgm's device-info discovery uses it (CPU affinity, PCIe link),
/// so it is not a poll: it neither advances the simulated fleet nor counts for the poll faults.
#[no_mangle]
pub unsafe extern "C" fn dcgmGetLatestValuesForFields(
    handle: dcgmHandle_t,
    gpu_id: c_int,
    fields: *mut c_ushort,
    count: c_uint,
    values: *mut dcgmFieldValue_v1,
) -> dcgmReturn_t {
    guard("dcgmGetLatestValuesForFields", || {
        let n = count as usize;
        let ok_args = n <= ffi::DCGM_MAX_FIELD_IDS_PER_FIELD_GROUP
            && (n == 0 || (!fields.is_null() && !values.is_null()));
        let ids: Vec<u16> = if ok_args && n > 0 {
            // SAFETY: the caller passes `count` (≤ 128, checked) readable field ids.
            unsafe { std::slice::from_raw_parts(fields, n) }.to_vec()
        } else {
            Vec::new()
        };
        let key: EntityKey = (ffi::DCGM_FE_GPU, gpu_id as u32);
        let e = engine();
        let rc = match e.check(handle) {
            Err(rc) => rc,
            Ok(()) if !ok_args => ffi::DCGM_ST_BADPARAM,
            Ok(()) => {
                for (i, f) in ids.iter().enumerate() {
                    let v = value_v1(*f, &e.read(key, *f, false));
                    // SAFETY: `values` holds `count` entries (C contract) and i < count.
                    unsafe { write_out(values.add(i), &v) };
                }
                ffi::DCGM_ST_OK
            }
        };
        drop(e);
        log(format!(
            "dcgmGetLatestValuesForFields gpu={gpu_id} fields={} handle={handle} rc={rc}",
            join(&ids)
        ));
        rc
    })
}

/// `dcgmGetDeviceTopology`: the fake models no PCIe/NvLink path matrix and says so
/// (`DCGM_ST_NOT_SUPPORTED`, which go-dcgm takes as "no topology"); the buffer is not touched.
#[no_mangle]
pub unsafe extern "C" fn dcgmGetDeviceTopology(
    handle: dcgmHandle_t,
    gpu_id: c_uint,
    topology: *mut c_void,
) -> dcgmReturn_t {
    guard("dcgmGetDeviceTopology", || {
        let e = engine();
        let rc = match e.check(handle) {
            Err(rc) => rc,
            Ok(()) if topology.is_null() => ffi::DCGM_ST_BADPARAM,
            Ok(()) if e.gpu_status(gpu_id).is_err() => ffi::DCGM_ST_BADPARAM,
            Ok(()) => ffi::DCGM_ST_NOT_SUPPORTED,
        };
        drop(e);
        log(format!(
            "dcgmGetDeviceTopology gpu={gpu_id} handle={handle} rc={rc}"
        ));
        rc
    })
}

/// `dcgmGroupAddDevice`: `dcgmGroupAddEntity` of a GPU.
#[no_mangle]
pub unsafe extern "C" fn dcgmGroupAddDevice(
    handle: dcgmHandle_t,
    group: dcgmGpuGrp_t,
    gpu_id: c_uint,
) -> dcgmReturn_t {
    guard("dcgmGroupAddDevice", || {
        let mut e = engine();
        let rc = match e.check(handle) {
            Err(rc) => rc,
            Ok(()) => match e.group_add_entity(group, (ffi::DCGM_FE_GPU, gpu_id)) {
                Ok(()) => ffi::DCGM_ST_OK,
                Err(rc) => rc,
            },
        };
        drop(e);
        log(format!(
            "dcgmGroupAddDevice group={group} gpu={gpu_id} handle={handle} rc={rc}"
        ));
        rc
    })
}

/// `dcgmGroupGetInfo` (`dcgmGroupInfo_v3` only).
#[no_mangle]
pub unsafe extern "C" fn dcgmGroupGetInfo(
    handle: dcgmHandle_t,
    group: dcgmGpuGrp_t,
    info: *mut dcgmGroupInfo_v3,
) -> dcgmReturn_t {
    guard("dcgmGroupGetInfo", || {
        let e = engine();
        let (rc, n) = match e.check(handle) {
            Err(rc) => (rc, 0),
            Ok(()) if info.is_null() => (ffi::DCGM_ST_BADPARAM, 0),
            // SAFETY: non-NULL pointer to the caller's struct; version word first.
            Ok(()) if unsafe { read_version(info) } != ffi::dcgmGroupInfo_version3 => {
                (ffi::DCGM_ST_VER_MISMATCH, 0)
            }
            Ok(()) => match e.group_info(group) {
                Err(rc) => (rc, 0),
                Ok((name, members)) => {
                    let mut g = dcgmGroupInfo_v3::boxed_zeroed();
                    g.version = ffi::dcgmGroupInfo_version3;
                    write_chars(&mut g.groupName, &name);
                    let n = members.len().min(g.entityList.len());
                    g.count = n as u32;
                    for (slot, (group_id, id)) in g.entityList.iter_mut().zip(&members) {
                        slot.entityGroupId = *group_id;
                        slot.entityId = *id;
                    }
                    // SAFETY: the version word says the caller's buffer is a v3 struct.
                    unsafe { write_out(info, &g) };
                    (ffi::DCGM_ST_OK, n)
                }
            },
        };
        drop(e);
        log(format!(
            "dcgmGroupGetInfo group={group} count={n} handle={handle} rc={rc}"
        ));
        rc
    })
}

/// `dcgmHealthGet`: the systems watched on a group.
#[no_mangle]
pub unsafe extern "C" fn dcgmHealthGet(
    handle: dcgmHandle_t,
    group: dcgmGpuGrp_t,
    systems: *mut dcgmHealthSystems_t,
) -> dcgmReturn_t {
    guard("dcgmHealthGet", || {
        let e = engine();
        let (rc, s) = match e.check(handle) {
            Err(rc) => (rc, 0),
            Ok(()) if systems.is_null() => (ffi::DCGM_ST_BADPARAM, 0),
            Ok(()) => match e.health_get(group) {
                Ok(s) => {
                    // SAFETY: non-NULL out pointer to a dcgmHealthSystems_t.
                    unsafe { systems.write(s) };
                    (ffi::DCGM_ST_OK, s)
                }
                Err(rc) => (rc, 0),
            },
        };
        drop(e);
        log(format!(
            "dcgmHealthGet group={group} systems={s:#x} handle={handle} rc={rc}"
        ));
        rc
    })
}
