//! A fake `libnvidia-ml.so.1` for tests: the NVML C functions dcgm-otel calls (real names and
//! signatures, type-checked at compile time against `dcgm_otel::source::nvml::ffi::fn_types`), served
//! from the project's simulated fleet (`dcgm_otel::source::sim`) and the scenario's `processes:`, with
//! fault injection (`FAKE_NVML_FAULTS`) and a call log (`FAKE_NVML_CALL_LOG`). See README.md.
//!
//! Device handles are small integers (`0x1000 × (index + 1)`, a MIG device `+ 1 + n`), never
//! dereferenced. Each export runs inside `catch_unwind`: a panic answers `NVML_ERROR_UNKNOWN`.
#![allow(clippy::missing_safety_doc, non_snake_case)]
#![deny(unsafe_op_in_unsafe_fn)]

mod config;

use std::collections::VecDeque;
use std::ffi::{c_char, c_int, c_uint, c_ulonglong};
use std::fs::{File, OpenOptions};
use std::io::Write;
use std::panic::{catch_unwind, AssertUnwindSafe};
use std::sync::{LazyLock, Mutex};

use dcgm_otel::snapshot::{Absent, EntityKind, FieldValue};
use dcgm_otel::source::nvml::ffi::*;
use dcgm_otel::source::sim::fleet::link_entity_id;
use dcgm_otel::source::sim::scenario::SimProcess;
use dcgm_otel::source::sim::{Fleet, Scenario};

use config::Config;

/// The library's state between `nvmlInit_v2` and the last `nvmlShutdown`.
struct Engine {
    cfg: Config,
    fleet: Fleet,
    processes: Vec<SimProcess>,
    /// `nvmlDeviceGetCount_v2` calls so far.
    tick: u64,
    refs: u32,
    /// XID events waiting in the event set: (GPU index, code, GPU-instance id on MIG).
    events: VecDeque<(u32, u64, Option<u32>)>,
    /// The scenario's XIDs already handed to the event set (those of the state found at start too:
    /// an event set only sees what happens after it is made).
    xid_cursor: usize,
}

static ENGINE: LazyLock<Mutex<Option<Engine>>> = LazyLock::new(|| Mutex::new(None));

static LOG: LazyLock<Mutex<Option<File>>> = LazyLock::new(|| {
    let file = std::env::var_os("FAKE_NVML_CALL_LOG")
        .filter(|p| !p.is_empty())
        .and_then(|p| OpenOptions::new().create(true).append(true).open(p).ok());
    Mutex::new(file)
});

fn log(name: &str, rc: nvmlReturn_t) {
    let mut guard = LOG.lock().unwrap_or_else(|e| e.into_inner());
    if let Some(f) = guard.as_mut() {
        let _ = f.write_all(format!("{name} rc={rc}\n").as_bytes());
    }
}

/// Run an export body with the engine; logs the call; a panic answers NVML_ERROR_UNKNOWN.
fn call(name: &str, f: impl FnOnce(&mut Engine) -> nvmlReturn_t) -> nvmlReturn_t {
    let rc = catch_unwind(AssertUnwindSafe(|| {
        let mut guard = ENGINE.lock().unwrap_or_else(|e| e.into_inner());
        match guard.as_mut() {
            None => NVML_ERROR_UNINITIALIZED,
            Some(e) if e.cfg.faults.not_supported.iter().any(|n| n == name) => {
                NVML_ERROR_NOT_SUPPORTED
            }
            Some(e) => f(e),
        }
    }))
    .unwrap_or(NVML_ERROR_UNKNOWN);
    log(name, rc);
    rc
}

/// What a handle designates: (GPU position in the fleet, MIG index).
fn decode(h: nvmlDevice_t) -> Option<(usize, Option<usize>)> {
    if h < 0x1000 {
        return None;
    }
    let gpu = h / 0x1000 - 1;
    let rest = h % 0x1000;
    Some((gpu, rest.checked_sub(1)))
}

fn gpu_handle(pos: usize) -> nvmlDevice_t {
    0x1000 * (pos + 1)
}

/// Write one value through an out pointer.
///
/// # Safety
/// `p` is NULL or valid for a write of one `T`.
unsafe fn put<T>(p: *mut T, v: T) -> nvmlReturn_t {
    if p.is_null() {
        return NVML_ERROR_INVALID_ARGUMENT;
    }
    // SAFETY: non-NULL and valid for one T per the caller's contract.
    unsafe { p.write(v) };
    NVML_SUCCESS
}

/// Copy `s` into a caller's char buffer of `len` bytes.
///
/// # Safety
/// `buf` is NULL or valid for `len` bytes.
unsafe fn put_str(buf: *mut c_char, len: c_uint, s: &str) -> nvmlReturn_t {
    if buf.is_null() {
        return NVML_ERROR_INVALID_ARGUMENT;
    }
    if (len as usize) <= s.len() {
        return NVML_ERROR_INSUFFICIENT_SIZE;
    }
    // SAFETY: valid for `len` bytes per the caller's contract; we write s.len() + 1 <= len.
    let dst = unsafe { std::slice::from_raw_parts_mut(buf, len as usize) };
    write_chars(dst, s);
    NVML_SUCCESS
}

/// The DCGM-field view of a device handle: (kind, entity id).
fn entity_of(e: &Engine, pos: usize, mig: Option<usize>) -> Option<(EntityKind, u32)> {
    let g = e.fleet.gpus().get(pos)?;
    match mig {
        None => Some((EntityKind::Gpu, g.identity.index)),
        Some(n) => g
            .instances
            .get(n)
            .map(|m| (EntityKind::GpuInstance, m.entity_id)),
    }
}

impl Engine {
    fn lost(&self, pos: usize) -> bool {
        let Some(g) = self.fleet.gpus().get(pos) else {
            return false;
        };
        self.cfg
            .faults
            .lost
            .iter()
            .any(|&(idx, at)| idx == g.identity.index && self.tick >= at)
    }

    /// Resolve a handle; `Err` is the code to answer.
    fn device(&self, h: nvmlDevice_t) -> Result<(usize, Option<usize>), nvmlReturn_t> {
        let (pos, mig) = decode(h).ok_or(NVML_ERROR_INVALID_ARGUMENT)?;
        let g = self
            .fleet
            .gpus()
            .get(pos)
            .ok_or(NVML_ERROR_INVALID_ARGUMENT)?;
        if let Some(n) = mig {
            if n >= g.instances.len() {
                return Err(NVML_ERROR_INVALID_ARGUMENT);
            }
        }
        if self.lost(pos) {
            return Err(NVML_ERROR_GPU_IS_LOST);
        }
        Ok((pos, mig))
    }

    /// A DCGM field of the fleet on the device.
    fn value(&self, h: nvmlDevice_t, field: u16) -> Result<FieldValue, nvmlReturn_t> {
        let (pos, mig) = self.device(h)?;
        let (kind, id) = entity_of(self, pos, mig).ok_or(NVML_ERROR_INVALID_ARGUMENT)?;
        match self.fleet.value(kind, id, field) {
            FieldValue::Absent(Absent::NotSupported) => Err(NVML_ERROR_NOT_SUPPORTED),
            FieldValue::Absent(_) => Err(NVML_ERROR_NO_DATA),
            v => Ok(v),
        }
    }

    fn uint(&self, h: nvmlDevice_t, field: u16) -> Result<u32, nvmlReturn_t> {
        match self.value(h, field)? {
            FieldValue::Int(i) => Ok(i.clamp(0, u32::MAX as i64) as u32),
            FieldValue::Double(d) => Ok(d.max(0.0) as u32),
            _ => Err(NVML_ERROR_NO_DATA),
        }
    }

    /// The scenario's processes still running on a device (all of a GPU's, or one MIG instance's).
    fn processes_on(&self, h: nvmlDevice_t) -> Result<Vec<&SimProcess>, nvmlReturn_t> {
        let (pos, mig) = self.device(h)?;
        let g = &self.fleet.gpus()[pos];
        let gi = mig.and_then(|n| g.instances.get(n)).map(|m| m.gi_id);
        Ok(self
            .processes
            .iter()
            .filter(|p| p.gpu == g.identity.index)
            .filter(|p| gi.is_none() || p.gpu_i_id == gi)
            .filter(|p| {
                !self
                    .cfg
                    .faults
                    .exits
                    .iter()
                    .any(|&(pid, at)| pid == p.pid && self.tick >= at)
            })
            .collect())
    }
}

// ---------------------------------------------------------------------------------------------------
// Exports
// ---------------------------------------------------------------------------------------------------

#[no_mangle]
pub unsafe extern "C" fn nvmlInit_v2() -> nvmlReturn_t {
    let rc = catch_unwind(|| {
        let mut guard = ENGINE.lock().unwrap_or_else(|e| e.into_inner());
        if let Some(e) = guard.as_mut() {
            e.refs += 1;
            return NVML_SUCCESS;
        }
        let cfg = match Config::from_env() {
            Ok(c) => c,
            Err(msg) => {
                eprintln!("fake-libnvml: {msg}");
                return NVML_ERROR_UNKNOWN;
            }
        };
        if let Some(code) = cfg.faults.init {
            return code;
        }
        let scenario = match Scenario::load(&cfg.scenario) {
            Ok(s) => s,
            Err(err) => {
                eprintln!("fake-libnvml: FAKE_NVML_SCENARIO: {err}");
                return NVML_ERROR_UNKNOWN;
            }
        };
        let fleet = Fleet::new(
            &scenario,
            cfg.seed,
            &dcgm_otel::source::sim::node_name(std::env::var("NODE_NAME").ok().as_deref()),
        );
        *guard = Some(Engine {
            processes: scenario.processes.clone(),
            fleet,
            cfg,
            tick: 0,
            refs: 1,
            events: VecDeque::new(),
            xid_cursor: usize::MAX,
        });
        NVML_SUCCESS
    })
    .unwrap_or(NVML_ERROR_UNKNOWN);
    log("nvmlInit_v2", rc);
    rc
}

#[no_mangle]
pub unsafe extern "C" fn nvmlShutdown() -> nvmlReturn_t {
    let rc = catch_unwind(|| {
        let mut guard = ENGINE.lock().unwrap_or_else(|e| e.into_inner());
        match guard.as_mut() {
            None => NVML_ERROR_UNINITIALIZED,
            Some(e) => {
                e.refs = e.refs.saturating_sub(1);
                if e.refs == 0 {
                    *guard = None;
                }
                NVML_SUCCESS
            }
        }
    })
    .unwrap_or(NVML_ERROR_UNKNOWN);
    log("nvmlShutdown", rc);
    rc
}

static ERROR_TEXTS: LazyLock<Vec<(nvmlReturn_t, &'static std::ffi::CStr)>> = LazyLock::new(|| {
    vec![
        (NVML_SUCCESS, c"Success"),
        (NVML_ERROR_UNINITIALIZED, c"Uninitialized"),
        (NVML_ERROR_INVALID_ARGUMENT, c"Invalid Argument"),
        (NVML_ERROR_NOT_SUPPORTED, c"Not Supported"),
        (NVML_ERROR_NO_PERMISSION, c"Insufficient Permissions"),
        (NVML_ERROR_NOT_FOUND, c"Not Found"),
        (NVML_ERROR_INSUFFICIENT_SIZE, c"Insufficient Size"),
        (NVML_ERROR_DRIVER_NOT_LOADED, c"Driver Not Loaded"),
        (NVML_ERROR_TIMEOUT, c"Timeout"),
        (NVML_ERROR_GPU_IS_LOST, c"GPU is lost"),
        (NVML_ERROR_NO_DATA, c"No data"),
    ]
});

#[no_mangle]
pub unsafe extern "C" fn nvmlErrorString(code: nvmlReturn_t) -> *const c_char {
    ERROR_TEXTS
        .iter()
        .find(|(c, _)| *c == code)
        .map_or(c"Unknown Error".as_ptr(), |(_, t)| t.as_ptr())
}

#[no_mangle]
pub unsafe extern "C" fn nvmlSystemGetDriverVersion(buf: *mut c_char, len: c_uint) -> nvmlReturn_t {
    // SAFETY: the caller's buffer holds `len` chars (NVML contract).
    call("nvmlSystemGetDriverVersion", |e| unsafe {
        put_str(buf, len, e.fleet.driver_version())
    })
}

#[no_mangle]
pub unsafe extern "C" fn nvmlSystemGetProcessName(
    pid: c_uint,
    buf: *mut c_char,
    len: c_uint,
) -> nvmlReturn_t {
    call("nvmlSystemGetProcessName", |e| {
        match e.processes.iter().find(|p| p.pid == pid) {
            // SAFETY: the caller's buffer holds `len` chars.
            Some(p) => unsafe { put_str(buf, len, &p.name) },
            None => NVML_ERROR_NOT_FOUND,
        }
    })
}

#[no_mangle]
pub unsafe extern "C" fn nvmlDeviceGetCount_v2(count: *mut c_uint) -> nvmlReturn_t {
    call("nvmlDeviceGetCount_v2", |e| {
        e.tick += 1;
        if e.tick > 1 {
            e.fleet.advance(1.0);
        }
        let tick = e.tick;
        let due: Vec<(u32, u64, Option<u32>)> = e
            .cfg
            .faults
            .xids
            .iter()
            .filter(|&&(_, _, at)| at == tick)
            .map(|&(code, gpu, _)| (gpu, code, None))
            .collect();
        e.events.extend(due);
        // The scenario's `events:` XIDs, as they happen.
        let log = e.fleet.xid_log();
        if e.xid_cursor != usize::MAX {
            let new: Vec<(u32, u64, Option<u32>)> = log
                .get(e.xid_cursor..)
                .unwrap_or_default()
                .iter()
                .map(|x| (x.gpu, u64::from(x.code), x.gpu_i_id))
                .collect();
            e.events.extend(new);
        }
        e.xid_cursor = log.len();
        // SAFETY: `count` is a valid out pointer (NVML contract).
        unsafe { put(count, e.fleet.gpus().len() as c_uint) }
    })
}

#[no_mangle]
pub unsafe extern "C" fn nvmlDeviceGetHandleByIndex_v2(
    index: c_uint,
    device: *mut nvmlDevice_t,
) -> nvmlReturn_t {
    call("nvmlDeviceGetHandleByIndex_v2", |e| {
        match e
            .fleet
            .gpus()
            .iter()
            .position(|g| g.identity.index == index)
        {
            // SAFETY: valid out pointer.
            Some(pos) => unsafe { put(device, gpu_handle(pos)) },
            None => NVML_ERROR_INVALID_ARGUMENT,
        }
    })
}

macro_rules! string_export {
    ($name:ident, |$e:ident, $pos:ident, $mig:ident| $body:expr) => {
        #[no_mangle]
        pub unsafe extern "C" fn $name(
            device: nvmlDevice_t,
            buf: *mut c_char,
            len: c_uint,
        ) -> nvmlReturn_t {
            call(stringify!($name), |$e| match $e.device(device) {
                Ok(($pos, $mig)) => {
                    let text: String = $body;
                    // SAFETY: the caller's buffer holds `len` chars.
                    unsafe { put_str(buf, len, &text) }
                }
                Err(rc) => rc,
            })
        }
    };
}

string_export!(nvmlDeviceGetUUID, |e, pos, mig| {
    let g = &e.fleet.gpus()[pos];
    match mig {
        Some(n) => g.instances[n].uuid.clone(),
        None => g.identity.uuid.clone(),
    }
});
string_export!(nvmlDeviceGetName, |e, pos, mig| {
    let g = &e.fleet.gpus()[pos];
    match mig {
        Some(n) => format!("{} MIG {}", g.identity.model, g.instances[n].profile),
        None => g.identity.model.clone(),
    }
});
string_export!(nvmlDeviceGetSerial, |e, pos, _mig| {
    match e
        .fleet
        .value(EntityKind::Gpu, e.fleet.gpus()[pos].identity.index, 53)
    {
        FieldValue::Text(t) => t.to_string(),
        _ => String::new(),
    }
});
string_export!(nvmlDeviceGetVbiosVersion, |e, pos, _mig| {
    match e
        .fleet
        .value(EntityKind::Gpu, e.fleet.gpus()[pos].identity.index, 85)
    {
        FieldValue::Text(t) => t.to_string(),
        _ => String::new(),
    }
});

#[no_mangle]
pub unsafe extern "C" fn nvmlDeviceGetPciInfo_v3(
    device: nvmlDevice_t,
    pci: *mut nvmlPciInfo_t,
) -> nvmlReturn_t {
    call("nvmlDeviceGetPciInfo_v3", |e| match e.device(device) {
        Ok((pos, _)) => {
            let mut info = nvmlPciInfo_t::default();
            let bus = &e.fleet.gpus()[pos].identity.pci_bus_id;
            write_chars(&mut info.busId, bus);
            write_chars(&mut info.busIdLegacy, bus.get(4..).unwrap_or(bus));
            // SAFETY: valid out pointer.
            unsafe { put(pci, info) }
        }
        Err(rc) => rc,
    })
}

#[no_mangle]
pub unsafe extern "C" fn nvmlDeviceGetMigMode(
    device: nvmlDevice_t,
    current: *mut c_uint,
    pending: *mut c_uint,
) -> nvmlReturn_t {
    call("nvmlDeviceGetMigMode", |e| match e.device(device) {
        Ok((pos, None)) => {
            let on = c_uint::from(!e.fleet.gpus()[pos].instances.is_empty());
            // SAFETY: valid out pointers.
            unsafe {
                put(current, on);
                put(pending, on)
            }
        }
        Ok(_) => NVML_ERROR_NOT_SUPPORTED,
        Err(rc) => rc,
    })
}

#[no_mangle]
pub unsafe extern "C" fn nvmlDeviceGetMaxMigDeviceCount(
    device: nvmlDevice_t,
    count: *mut c_uint,
) -> nvmlReturn_t {
    call("nvmlDeviceGetMaxMigDeviceCount", |e| {
        match e.device(device) {
            Ok((pos, None)) => {
                let n = if e.fleet.gpus()[pos].instances.is_empty() {
                    0
                } else {
                    7
                };
                // SAFETY: valid out pointer.
                unsafe { put(count, n) }
            }
            Ok(_) => NVML_ERROR_NOT_SUPPORTED,
            Err(rc) => rc,
        }
    })
}

#[no_mangle]
pub unsafe extern "C" fn nvmlDeviceGetMigDeviceHandleByIndex(
    device: nvmlDevice_t,
    index: c_uint,
    mig: *mut nvmlDevice_t,
) -> nvmlReturn_t {
    call("nvmlDeviceGetMigDeviceHandleByIndex", |e| {
        match e.device(device) {
            Ok((pos, None)) if (index as usize) < e.fleet.gpus()[pos].instances.len() => {
                // SAFETY: valid out pointer.
                unsafe { put(mig, gpu_handle(pos) + 1 + index as usize) }
            }
            Ok((_, None)) => NVML_ERROR_NOT_FOUND,
            Ok(_) => NVML_ERROR_INVALID_ARGUMENT,
            Err(rc) => rc,
        }
    })
}

#[no_mangle]
pub unsafe extern "C" fn nvmlDeviceGetGpuInstanceId(
    device: nvmlDevice_t,
    id: *mut c_uint,
) -> nvmlReturn_t {
    call("nvmlDeviceGetGpuInstanceId", |e| match e.device(device) {
        // SAFETY: valid out pointer.
        Ok((pos, Some(n))) => unsafe { put(id, e.fleet.gpus()[pos].instances[n].gi_id) },
        Ok(_) => NVML_ERROR_INVALID_ARGUMENT,
        Err(rc) => rc,
    })
}

// The calls below are dcgm-exporter's (go-nvml), made to map a pod's MIG device UUID to its GPU
// instance with `-k`; dcgm-otel does not make them, so they are not in `fn_types`.

/// `nvmlDeviceGetHandleByUUID`: a GPU's or a MIG device's handle by its UUID.
#[no_mangle]
pub unsafe extern "C" fn nvmlDeviceGetHandleByUUID(
    uuid: *const c_char,
    device: *mut nvmlDevice_t,
) -> nvmlReturn_t {
    let wanted = if uuid.is_null() {
        None
    } else {
        // SAFETY: a non-NULL NUL-terminated C string argument, per NVML's contract.
        Some(
            unsafe { std::ffi::CStr::from_ptr(uuid) }
                .to_string_lossy()
                .into_owned(),
        )
    };
    call("nvmlDeviceGetHandleByUUID", |e| {
        let Some(wanted) = wanted else {
            return NVML_ERROR_INVALID_ARGUMENT;
        };
        let found = e.fleet.gpus().iter().enumerate().find_map(|(pos, g)| {
            if g.identity.uuid == wanted {
                return Some(gpu_handle(pos));
            }
            let n = g.instances.iter().position(|m| m.uuid == wanted)?;
            Some(gpu_handle(pos) + 1 + n)
        });
        match found {
            // SAFETY: valid out pointer.
            Some(h) => unsafe { put(device, h) },
            None => NVML_ERROR_NOT_FOUND,
        }
    })
}

/// `nvmlDeviceGetDeviceHandleFromMigDeviceHandle`: a MIG device's parent GPU.
#[no_mangle]
pub unsafe extern "C" fn nvmlDeviceGetDeviceHandleFromMigDeviceHandle(
    mig: nvmlDevice_t,
    device: *mut nvmlDevice_t,
) -> nvmlReturn_t {
    call("nvmlDeviceGetDeviceHandleFromMigDeviceHandle", |e| {
        match e.device(mig) {
            // SAFETY: valid out pointer.
            Ok((pos, Some(_))) => unsafe { put(device, gpu_handle(pos)) },
            Ok(_) => NVML_ERROR_INVALID_ARGUMENT,
            Err(rc) => rc,
        }
    })
}

/// `nvmlDeviceGetComputeInstanceId`: every simulated GPU instance has one compute instance, id 0.
#[no_mangle]
pub unsafe extern "C" fn nvmlDeviceGetComputeInstanceId(
    device: nvmlDevice_t,
    id: *mut c_uint,
) -> nvmlReturn_t {
    call("nvmlDeviceGetComputeInstanceId", |e| {
        match e.device(device) {
            // SAFETY: valid out pointer.
            Ok((_, Some(_))) => unsafe { put(id, 0) },
            Ok(_) => NVML_ERROR_INVALID_ARGUMENT,
            Err(rc) => rc,
        }
    })
}

/// A `u32` read of a DCGM field of the fleet.
macro_rules! uint_export {
    ($name:ident, $field:expr) => {
        #[no_mangle]
        pub unsafe extern "C" fn $name(device: nvmlDevice_t, out: *mut c_uint) -> nvmlReturn_t {
            call(stringify!($name), |e| match e.uint(device, $field) {
                // SAFETY: valid out pointer.
                Ok(v) => unsafe { put(out, v) },
                Err(rc) => rc,
            })
        }
    };
}

uint_export!(nvmlDeviceGetPerformanceState, 190);
uint_export!(nvmlDeviceGetFanSpeed, 191);
uint_export!(nvmlDeviceGetCurrPcieLinkGeneration, 237);
uint_export!(nvmlDeviceGetCurrPcieLinkWidth, 238);

#[no_mangle]
pub unsafe extern "C" fn nvmlDeviceGetPowerUsage(
    device: nvmlDevice_t,
    out: *mut c_uint,
) -> nvmlReturn_t {
    call("nvmlDeviceGetPowerUsage", |e| match e.value(device, 155) {
        Ok(FieldValue::Double(w)) => {
            // SAFETY: valid out pointer.
            unsafe { put(out, (w * 1000.0).round() as c_uint) }
        }
        Ok(_) => NVML_ERROR_NO_DATA,
        Err(rc) => rc,
    })
}

#[no_mangle]
pub unsafe extern "C" fn nvmlDeviceGetPowerManagementLimit(
    device: nvmlDevice_t,
    out: *mut c_uint,
) -> nvmlReturn_t {
    call("nvmlDeviceGetPowerManagementLimit", |e| {
        match e.device(device) {
            // SAFETY: valid out pointer.
            Ok(_) => unsafe { put(out, 700_000) },
            Err(rc) => rc,
        }
    })
}

#[no_mangle]
pub unsafe extern "C" fn nvmlDeviceGetTotalEnergyConsumption(
    device: nvmlDevice_t,
    out: *mut c_ulonglong,
) -> nvmlReturn_t {
    call("nvmlDeviceGetTotalEnergyConsumption", |e| {
        match e.value(device, 156) {
            // SAFETY: valid out pointer.
            Ok(FieldValue::Int(mj)) => unsafe { put(out, mj.max(0) as c_ulonglong) },
            Ok(_) => NVML_ERROR_NO_DATA,
            Err(rc) => rc,
        }
    })
}

#[no_mangle]
pub unsafe extern "C" fn nvmlDeviceGetClockInfo(
    device: nvmlDevice_t,
    clock: c_uint,
    out: *mut c_uint,
) -> nvmlReturn_t {
    call("nvmlDeviceGetClockInfo", |e| {
        let field = match clock {
            NVML_CLOCK_SM | NVML_CLOCK_GRAPHICS => 100,
            NVML_CLOCK_MEM => 101,
            _ => 102,
        };
        match e.uint(device, field) {
            // SAFETY: valid out pointer.
            Ok(v) => unsafe { put(out, v) },
            Err(rc) => rc,
        }
    })
}

#[no_mangle]
pub unsafe extern "C" fn nvmlDeviceGetMaxClockInfo(
    device: nvmlDevice_t,
    clock: c_uint,
    out: *mut c_uint,
) -> nvmlReturn_t {
    call("nvmlDeviceGetMaxClockInfo", |e| {
        // The simulated model's maximum SM clock (DCGM_FI_DEV_APP_SM_CLOCK in the fleet's table).
        let field = match clock {
            NVML_CLOCK_SM | NVML_CLOCK_GRAPHICS => 110,
            NVML_CLOCK_MEM => 101,
            _ => 102,
        };
        match e.uint(device, field) {
            // SAFETY: valid out pointer.
            Ok(v) => unsafe { put(out, v) },
            Err(rc) => rc,
        }
    })
}

#[no_mangle]
pub unsafe extern "C" fn nvmlDeviceGetTemperature(
    device: nvmlDevice_t,
    sensor: c_uint,
    out: *mut c_uint,
) -> nvmlReturn_t {
    call("nvmlDeviceGetTemperature", |e| {
        if sensor != NVML_TEMPERATURE_GPU {
            return NVML_ERROR_INVALID_ARGUMENT;
        }
        match e.uint(device, 150) {
            // SAFETY: valid out pointer.
            Ok(v) => unsafe { put(out, v) },
            Err(rc) => rc,
        }
    })
}

#[no_mangle]
pub unsafe extern "C" fn nvmlDeviceGetPcieThroughput(
    device: nvmlDevice_t,
    counter: c_uint,
    out: *mut c_uint,
) -> nvmlReturn_t {
    call("nvmlDeviceGetPcieThroughput", |e| {
        match e.uint(device, if counter == 0 { 200 } else { 201 }) {
            // SAFETY: valid out pointer.
            Ok(v) => unsafe { put(out, v) },
            Err(rc) => rc,
        }
    })
}

#[no_mangle]
pub unsafe extern "C" fn nvmlDeviceGetUtilizationRates(
    device: nvmlDevice_t,
    out: *mut nvmlUtilization_t,
) -> nvmlReturn_t {
    call("nvmlDeviceGetUtilizationRates", |e| {
        match (e.uint(device, 203), e.uint(device, 204)) {
            // SAFETY: valid out pointer.
            (Ok(gpu), Ok(memory)) => unsafe { put(out, nvmlUtilization_t { gpu, memory }) },
            (Err(rc), _) | (_, Err(rc)) => rc,
        }
    })
}

macro_rules! codec_export {
    ($name:ident, $field:expr) => {
        #[no_mangle]
        pub unsafe extern "C" fn $name(
            device: nvmlDevice_t,
            out: *mut c_uint,
            period: *mut c_uint,
        ) -> nvmlReturn_t {
            call(stringify!($name), |e| match e.uint(device, $field) {
                // SAFETY: valid out pointers.
                Ok(v) => unsafe {
                    put(period, 167_000);
                    put(out, v)
                },
                Err(rc) => rc,
            })
        }
    };
}

codec_export!(nvmlDeviceGetEncoderUtilization, 206);
codec_export!(nvmlDeviceGetDecoderUtilization, 207);

#[no_mangle]
pub unsafe extern "C" fn nvmlDeviceGetMemoryInfo_v2(
    device: nvmlDevice_t,
    out: *mut nvmlMemory_v2_t,
) -> nvmlReturn_t {
    call("nvmlDeviceGetMemoryInfo_v2", |e| {
        if out.is_null() {
            return NVML_ERROR_INVALID_ARGUMENT;
        }
        // SAFETY: non-NULL out pointer to the caller's struct; `version` is its first member.
        if unsafe { (*out).version } != nvmlMemory_v2 {
            // NVML_ERROR_ARGUMENT_VERSION_MISMATCH
            return 25;
        }
        let mib = |f: u16| e.uint(device, f).map(|v| u64::from(v) << 20);
        match (mib(250), mib(251), mib(252), mib(253)) {
            (Ok(total), Ok(free), Ok(used), Ok(reserved)) => {
                // SAFETY: valid out pointer.
                unsafe {
                    put(
                        out,
                        nvmlMemory_v2_t {
                            version: nvmlMemory_v2,
                            total,
                            reserved,
                            free,
                            used,
                        },
                    )
                }
            }
            (Err(rc), ..) | (_, Err(rc), ..) | (_, _, Err(rc), _) | (.., Err(rc)) => rc,
        }
    })
}

#[no_mangle]
pub unsafe extern "C" fn nvmlDeviceGetCurrentClocksThrottleReasons(
    device: nvmlDevice_t,
    out: *mut c_ulonglong,
) -> nvmlReturn_t {
    call("nvmlDeviceGetCurrentClocksThrottleReasons", |e| {
        match e.uint(device, 112) {
            // SAFETY: valid out pointer.
            Ok(v) => unsafe { put(out, c_ulonglong::from(v)) },
            Err(rc) => rc,
        }
    })
}

/// The DCGM field (and whether per link) behind an NVML field id.
fn dcgm_field_of(nvml_field: c_uint) -> Option<(u16, bool)> {
    Some(match nvml_field {
        NVML_FI_DEV_MEMORY_TEMP => (140, false),
        NVML_FI_DEV_ECC_SBE_VOL_TOTAL => (310, false),
        NVML_FI_DEV_ECC_DBE_VOL_TOTAL => (311, false),
        NVML_FI_DEV_ECC_SBE_AGG_TOTAL => (312, false),
        NVML_FI_DEV_ECC_DBE_AGG_TOTAL => (313, false),
        NVML_FI_DEV_RETIRED_SBE => (390, false),
        NVML_FI_DEV_RETIRED_DBE => (391, false),
        NVML_FI_DEV_RETIRED_PENDING => (392, false),
        NVML_FI_DEV_REMAPPED_UNC => (393, false),
        NVML_FI_DEV_REMAPPED_COR => (394, false),
        NVML_FI_DEV_REMAPPED_FAILURE => (395, false),
        NVML_FI_DEV_REMAPPED_PENDING => (396, false),
        NVML_FI_DEV_PCIE_REPLAY_COUNTER => (202, false),
        NVML_FI_DEV_NVLINK_CRC_FLIT_ERROR_COUNT_TOTAL => (409, false),
        NVML_FI_DEV_NVLINK_CRC_DATA_ERROR_COUNT_TOTAL => (419, false),
        NVML_FI_DEV_NVLINK_REPLAY_ERROR_COUNT_TOTAL => (429, false),
        NVML_FI_DEV_NVLINK_RECOVERY_ERROR_COUNT_TOTAL => (439, false),
        NVML_FI_DEV_NVLINK_ERROR_DL_CRC => (1525, true),
        NVML_FI_DEV_NVLINK_ERROR_DL_REPLAY => (1527, true),
        NVML_FI_DEV_NVLINK_ERROR_DL_RECOVERY => (1528, true),
        _ => return None,
    })
}

/// NVML's cumulative NvLink data counters, in KiB since the driver loaded: a link's transmitted or
/// received data (`scopeId` = link), or counter set 0 over all links (`BANDWIDTH_C0_TOTAL`). `None` for
/// other fields.
fn link_counter(e: &Engine, gpu: u32, field: c_uint, link: c_uint) -> Option<FieldValue> {
    let kib = |link: u32| e.fleet.link_data_kib(gpu, link);
    let total = |(tx, rx): (f64, f64)| FieldValue::Int((tx + rx) as i64);
    let absent = FieldValue::Absent(Absent::NotFound);
    Some(match field {
        NVML_FI_DEV_NVLINK_THROUGHPUT_DATA_TX => {
            kib(link).map_or(absent, |(tx, _)| FieldValue::Int(tx as i64))
        }
        NVML_FI_DEV_NVLINK_THROUGHPUT_DATA_RX => {
            kib(link).map_or(absent, |(_, rx)| FieldValue::Int(rx as i64))
        }
        NVML_FI_DEV_NVLINK_BANDWIDTH_C0_TOTAL => {
            let sum = (0..)
                .map_while(kib)
                .fold((0.0, 0.0), |(a, b), (tx, rx)| (a + tx, b + rx));
            total(sum)
        }
        _ => return None,
    })
}

#[no_mangle]
pub unsafe extern "C" fn nvmlDeviceGetFieldValues(
    device: nvmlDevice_t,
    count: c_int,
    values: *mut nvmlFieldValue_t,
) -> nvmlReturn_t {
    call("nvmlDeviceGetFieldValues", |e| {
        let (pos, _) = match e.device(device) {
            Ok(d) => d,
            Err(rc) => return rc,
        };
        if values.is_null() || count < 0 {
            return NVML_ERROR_INVALID_ARGUMENT;
        }
        // SAFETY: the caller passes `count` entries (NVML contract).
        let list = unsafe { std::slice::from_raw_parts_mut(values, count as usize) };
        let index = e.fleet.gpus()[pos].identity.index;
        for v in list {
            let read = match link_counter(e, index, v.fieldId, v.scopeId) {
                Some(read) => read,
                None => match dcgm_field_of(v.fieldId) {
                    None => FieldValue::Absent(Absent::NotSupported),
                    Some((f, true)) => {
                        e.fleet
                            .value(EntityKind::NvLink, link_entity_id(index, v.scopeId), f)
                    }
                    Some((f, false)) => e.fleet.value(EntityKind::Gpu, index, f),
                },
            };
            match read {
                FieldValue::Int(i) => {
                    v.valueType = NVML_VALUE_TYPE_SIGNED_LONG_LONG;
                    v.value = nvmlValue_t::from_u64(i as u64);
                    v.nvmlReturn = NVML_SUCCESS;
                }
                FieldValue::Double(d) => {
                    v.valueType = NVML_VALUE_TYPE_DOUBLE;
                    v.value = nvmlValue_t::from_u64(d.to_bits());
                    v.nvmlReturn = NVML_SUCCESS;
                }
                FieldValue::Absent(Absent::NotFound) => v.nvmlReturn = NVML_ERROR_INVALID_ARGUMENT,
                _ => v.nvmlReturn = NVML_ERROR_NOT_SUPPORTED,
            }
        }
        NVML_SUCCESS
    })
}

#[no_mangle]
pub unsafe extern "C" fn nvmlDeviceGetNvLinkState(
    device: nvmlDevice_t,
    link: c_uint,
    active: *mut c_uint,
) -> nvmlReturn_t {
    call("nvmlDeviceGetNvLinkState", |e| match e.device(device) {
        Ok((pos, None)) => {
            if link >= e.fleet.gpus()[pos].nvlinks {
                return NVML_ERROR_INVALID_ARGUMENT;
            }
            // SAFETY: valid out pointer.
            unsafe { put(active, NVML_FEATURE_ENABLED) }
        }
        Ok(_) => NVML_ERROR_NOT_SUPPORTED,
        Err(rc) => rc,
    })
}

/// NVML's process-list protocol over the scenario's processes.
///
/// # Safety
/// `count` is a valid in/out pointer; `infos` is NULL or valid for `*count` entries.
unsafe fn process_list(
    e: &Engine,
    device: nvmlDevice_t,
    graphics: bool,
    count: *mut c_uint,
    infos: *mut nvmlProcessInfo_t,
) -> nvmlReturn_t {
    if count.is_null() {
        return NVML_ERROR_INVALID_ARGUMENT;
    }
    let list = match e.processes_on(device) {
        Ok(l) => l,
        Err(rc) => return rc,
    };
    // Processes whose name starts with "Xorg" or "gnome" are graphics clients; the rest compute.
    let list: Vec<&SimProcess> = list
        .into_iter()
        .filter(|p| graphics == (p.name.starts_with("Xorg") || p.name.starts_with("gnome")))
        .collect();
    // SAFETY: valid in/out pointer per the contract.
    let cap = unsafe { count.read() } as usize;
    // SAFETY: as above.
    unsafe { count.write(list.len() as c_uint) };
    if list.len() > cap || (infos.is_null() && !list.is_empty()) {
        return NVML_ERROR_INSUFFICIENT_SIZE;
    }
    for (i, p) in list.iter().enumerate() {
        let info = nvmlProcessInfo_t {
            pid: p.pid,
            usedGpuMemory: p.memory_mib << 20,
            gpuInstanceId: p.gpu_i_id.unwrap_or(NVML_NO_INSTANCE),
            computeInstanceId: if p.gpu_i_id.is_some() {
                0
            } else {
                NVML_NO_INSTANCE
            },
        };
        // SAFETY: i < list.len() <= cap, the buffer's length per the contract.
        unsafe { infos.add(i).write(info) };
    }
    NVML_SUCCESS
}

#[no_mangle]
pub unsafe extern "C" fn nvmlDeviceGetComputeRunningProcesses_v3(
    device: nvmlDevice_t,
    count: *mut c_uint,
    infos: *mut nvmlProcessInfo_t,
) -> nvmlReturn_t {
    // SAFETY: forwarded NVML contract.
    call("nvmlDeviceGetComputeRunningProcesses_v3", |e| unsafe {
        process_list(e, device, false, count, infos)
    })
}

#[no_mangle]
pub unsafe extern "C" fn nvmlDeviceGetGraphicsRunningProcesses_v3(
    device: nvmlDevice_t,
    count: *mut c_uint,
    infos: *mut nvmlProcessInfo_t,
) -> nvmlReturn_t {
    // SAFETY: forwarded NVML contract.
    call("nvmlDeviceGetGraphicsRunningProcesses_v3", |e| unsafe {
        process_list(e, device, true, count, infos)
    })
}

/// The fake runs no MPS server: the MPS client list is always empty (the call is answered).
#[no_mangle]
pub unsafe extern "C" fn nvmlDeviceGetMPSComputeRunningProcesses_v3(
    device: nvmlDevice_t,
    count: *mut c_uint,
    _infos: *mut nvmlProcessInfo_t,
) -> nvmlReturn_t {
    call("nvmlDeviceGetMPSComputeRunningProcesses_v3", |e| {
        match e.device(device) {
            // SAFETY: valid in/out pointer (NVML contract).
            Ok(_) => unsafe { put(count, 0) },
            Err(rc) => rc,
        }
    })
}

#[no_mangle]
pub unsafe extern "C" fn nvmlDeviceGetProcessUtilization(
    device: nvmlDevice_t,
    samples: *mut nvmlProcessUtilizationSample_t,
    count: *mut c_uint,
    since: c_ulonglong,
) -> nvmlReturn_t {
    call("nvmlDeviceGetProcessUtilization", |e| {
        let (pos, _) = match e.device(device) {
            Ok(d) => d,
            Err(rc) => return rc,
        };
        // NVML has no per-process utilization on MIG GPUs.
        if !e.fleet.gpus()[pos].instances.is_empty() {
            return NVML_ERROR_NOT_SUPPORTED;
        }
        if count.is_null() {
            return NVML_ERROR_INVALID_ARGUMENT;
        }
        let now_us = std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map_or(0, |d| d.as_micros() as u64);
        let list = match e.processes_on(device) {
            Ok(l) => l,
            Err(rc) => return rc,
        };
        if list.is_empty() || since >= now_us {
            return NVML_ERROR_NOT_FOUND;
        }
        // SAFETY: valid in/out pointer.
        let cap = unsafe { count.read() } as usize;
        // SAFETY: as above.
        unsafe { count.write(list.len() as c_uint) };
        if samples.is_null() || cap < list.len() {
            return NVML_ERROR_INSUFFICIENT_SIZE;
        }
        for (i, p) in list.iter().enumerate() {
            let s = nvmlProcessUtilizationSample_t {
                pid: p.pid,
                timeStamp: now_us,
                smUtil: p.sm_utilization.round() as c_uint,
                memUtil: p.memory_utilization.round() as c_uint,
                encUtil: p.encoder_utilization.round() as c_uint,
                decUtil: p.decoder_utilization.round() as c_uint,
            };
            // SAFETY: i < list.len() <= cap, the buffer's length.
            unsafe { samples.add(i).write(s) };
        }
        NVML_SUCCESS
    })
}

const EVENT_SET: nvmlEventSet_t = 0xE000;

#[no_mangle]
pub unsafe extern "C" fn nvmlEventSetCreate(set: *mut nvmlEventSet_t) -> nvmlReturn_t {
    // SAFETY: valid out pointer.
    call("nvmlEventSetCreate", |_| unsafe { put(set, EVENT_SET) })
}

#[no_mangle]
pub unsafe extern "C" fn nvmlDeviceRegisterEvents(
    device: nvmlDevice_t,
    types: c_ulonglong,
    set: nvmlEventSet_t,
) -> nvmlReturn_t {
    call("nvmlDeviceRegisterEvents", |e| match e.device(device) {
        Ok(_) if set == EVENT_SET && types & nvmlEventTypeXidCriticalError != 0 => NVML_SUCCESS,
        Ok(_) => NVML_ERROR_INVALID_ARGUMENT,
        Err(rc) => rc,
    })
}

#[no_mangle]
pub unsafe extern "C" fn nvmlEventSetWait_v2(
    set: nvmlEventSet_t,
    data: *mut nvmlEventData_t,
    _timeout_ms: c_uint,
) -> nvmlReturn_t {
    call("nvmlEventSetWait_v2", |e| {
        if set != EVENT_SET {
            return NVML_ERROR_INVALID_ARGUMENT;
        }
        let Some((gpu, code, gi)) = e.events.pop_front() else {
            return NVML_ERROR_TIMEOUT;
        };
        let Some(pos) = e.fleet.gpus().iter().position(|g| g.identity.index == gpu) else {
            return NVML_ERROR_TIMEOUT;
        };
        let ev = nvmlEventData_t {
            device: gpu_handle(pos),
            eventType: nvmlEventTypeXidCriticalError,
            eventData: code,
            gpuInstanceId: gi.unwrap_or(NVML_NO_INSTANCE),
            computeInstanceId: if gi.is_some() { 0 } else { NVML_NO_INSTANCE },
        };
        // SAFETY: valid out pointer.
        unsafe { put(data, ev) }
    })
}

#[no_mangle]
pub unsafe extern "C" fn nvmlEventSetFree(set: nvmlEventSet_t) -> nvmlReturn_t {
    call("nvmlEventSetFree", |_| {
        if set == EVENT_SET {
            NVML_SUCCESS
        } else {
            NVML_ERROR_INVALID_ARGUMENT
        }
    })
}

// Every export has exactly the C signature the exporter's binding declares.
const _: () = {
    use dcgm_otel::source::nvml::ffi::fn_types as t;
    let _: t::nvmlInit_v2 = nvmlInit_v2;
    let _: t::nvmlShutdown = nvmlShutdown;
    let _: t::nvmlErrorString = nvmlErrorString;
    let _: t::nvmlSystemGetDriverVersion = nvmlSystemGetDriverVersion;
    let _: t::nvmlSystemGetProcessName = nvmlSystemGetProcessName;
    let _: t::nvmlDeviceGetCount_v2 = nvmlDeviceGetCount_v2;
    let _: t::nvmlDeviceGetHandleByIndex_v2 = nvmlDeviceGetHandleByIndex_v2;
    let _: t::nvmlDeviceGetUUID = nvmlDeviceGetUUID;
    let _: t::nvmlDeviceGetName = nvmlDeviceGetName;
    let _: t::nvmlDeviceGetSerial = nvmlDeviceGetSerial;
    let _: t::nvmlDeviceGetVbiosVersion = nvmlDeviceGetVbiosVersion;
    let _: t::nvmlDeviceGetPciInfo_v3 = nvmlDeviceGetPciInfo_v3;
    let _: t::nvmlDeviceGetMigMode = nvmlDeviceGetMigMode;
    let _: t::nvmlDeviceGetMaxMigDeviceCount = nvmlDeviceGetMaxMigDeviceCount;
    let _: t::nvmlDeviceGetMigDeviceHandleByIndex = nvmlDeviceGetMigDeviceHandleByIndex;
    let _: t::nvmlDeviceGetGpuInstanceId = nvmlDeviceGetGpuInstanceId;
    let _: t::nvmlDeviceGetClockInfo = nvmlDeviceGetClockInfo;
    let _: t::nvmlDeviceGetMaxClockInfo = nvmlDeviceGetMaxClockInfo;
    let _: t::nvmlDeviceGetTemperature = nvmlDeviceGetTemperature;
    let _: t::nvmlDeviceGetPowerUsage = nvmlDeviceGetPowerUsage;
    let _: t::nvmlDeviceGetPowerManagementLimit = nvmlDeviceGetPowerManagementLimit;
    let _: t::nvmlDeviceGetTotalEnergyConsumption = nvmlDeviceGetTotalEnergyConsumption;
    let _: t::nvmlDeviceGetPerformanceState = nvmlDeviceGetPerformanceState;
    let _: t::nvmlDeviceGetFanSpeed = nvmlDeviceGetFanSpeed;
    let _: t::nvmlDeviceGetPcieThroughput = nvmlDeviceGetPcieThroughput;
    let _: t::nvmlDeviceGetCurrPcieLinkGeneration = nvmlDeviceGetCurrPcieLinkGeneration;
    let _: t::nvmlDeviceGetCurrPcieLinkWidth = nvmlDeviceGetCurrPcieLinkWidth;
    let _: t::nvmlDeviceGetUtilizationRates = nvmlDeviceGetUtilizationRates;
    let _: t::nvmlDeviceGetEncoderUtilization = nvmlDeviceGetEncoderUtilization;
    let _: t::nvmlDeviceGetDecoderUtilization = nvmlDeviceGetDecoderUtilization;
    let _: t::nvmlDeviceGetMemoryInfo_v2 = nvmlDeviceGetMemoryInfo_v2;
    let _: t::nvmlDeviceGetCurrentClocksThrottleReasons = nvmlDeviceGetCurrentClocksThrottleReasons;
    let _: t::nvmlDeviceGetFieldValues = nvmlDeviceGetFieldValues;
    let _: t::nvmlDeviceGetNvLinkState = nvmlDeviceGetNvLinkState;
    let _: t::nvmlDeviceGetComputeRunningProcesses_v3 = nvmlDeviceGetComputeRunningProcesses_v3;
    let _: t::nvmlDeviceGetGraphicsRunningProcesses_v3 = nvmlDeviceGetGraphicsRunningProcesses_v3;
    let _: t::nvmlDeviceGetMPSComputeRunningProcesses_v3 =
        nvmlDeviceGetMPSComputeRunningProcesses_v3;
    let _: t::nvmlDeviceGetProcessUtilization = nvmlDeviceGetProcessUtilization;
    let _: t::nvmlEventSetCreate = nvmlEventSetCreate;
    let _: t::nvmlDeviceRegisterEvents = nvmlDeviceRegisterEvents;
    let _: t::nvmlEventSetWait_v2 = nvmlEventSetWait_v2;
    let _: t::nvmlEventSetFree = nvmlEventSetFree;
};
