//! The NVML C ABI (`libnvidia-ml.so.1`): the `#[repr(C)]` structs, constants and function types
//! dcgm-otel uses, and the runtime-loaded symbol table with thin *safe* wrappers.
//!
//! NVML ships with every NVIDIA driver; it is loaded with `dlopen` at start-up (never linked), so the
//! binary starts on hosts without a driver. Everything here mirrors NVIDIA's `nvml.h` (NVML API 12, as
//! DCGM 4.6 carries it in `sdk/nvidia/nvml/dcgm_nvml.h`); sizes, offsets and constants are checked
//! against the compiled probe `tests/fixtures/nvml/nvml-abi-layout.txt` by `tests/e2e/nvml_abi_layout.rs`.
//! Names keep the C spelling so every item can be matched to the header by name.
//!
//! A hand-written binding rather than the `nvml-wrapper` crate: that crate lacks
//! `nvmlDeviceGetGpuInstanceId` (the MIG instance id of a MIG device handle), so raw calls would be
//! needed anyway, it ties device handles to a borrowed lifetime, and it brings a proc-macro tree and a
//! second `thiserror` to the build.
//!
//! Only the functions in [`REQUIRED_SYMBOLS`] must exist; every other one is optional and its wrapper
//! answers [`NVML_ERROR_FUNCTION_NOT_FOUND`] when the library lacks it (older drivers), which the
//! source turns into an absent value. Device handles are opaque tokens ([`nvmlDevice_t`] kept as an
//! address) that are only ever passed back to the library.
#![allow(non_camel_case_types, non_snake_case, non_upper_case_globals)]
// The NVML FFI module is allowed `unsafe` (the crate denies it everywhere else, Cargo.toml [lints]).
#![allow(unsafe_code)]

use std::ffi::{c_char, c_int, c_uint, c_ulonglong, CStr, OsStr};

// ---------------------------------------------------------------------------------------------------
// Scalar typedefs
// ---------------------------------------------------------------------------------------------------

/// `nvmlReturn_t` (C enum).
pub type nvmlReturn_t = c_uint;
/// `nvmlDevice_t`: an opaque pointer, kept as its address so that handles are plain `Send` values.
pub type nvmlDevice_t = usize;
/// `nvmlEventSet_t`: an opaque pointer, kept as its address.
pub type nvmlEventSet_t = usize;

// ---------------------------------------------------------------------------------------------------
// Constants
// ---------------------------------------------------------------------------------------------------

pub const NVML_SUCCESS: nvmlReturn_t = 0;
pub const NVML_ERROR_UNINITIALIZED: nvmlReturn_t = 1;
pub const NVML_ERROR_INVALID_ARGUMENT: nvmlReturn_t = 2;
pub const NVML_ERROR_NOT_SUPPORTED: nvmlReturn_t = 3;
pub const NVML_ERROR_NO_PERMISSION: nvmlReturn_t = 4;
pub const NVML_ERROR_NOT_FOUND: nvmlReturn_t = 6;
pub const NVML_ERROR_INSUFFICIENT_SIZE: nvmlReturn_t = 7;
pub const NVML_ERROR_DRIVER_NOT_LOADED: nvmlReturn_t = 9;
pub const NVML_ERROR_TIMEOUT: nvmlReturn_t = 10;
pub const NVML_ERROR_FUNCTION_NOT_FOUND: nvmlReturn_t = 13;
pub const NVML_ERROR_GPU_IS_LOST: nvmlReturn_t = 15;
pub const NVML_ERROR_NO_DATA: nvmlReturn_t = 21;
pub const NVML_ERROR_UNKNOWN: nvmlReturn_t = 999;

pub const NVML_DEVICE_UUID_V2_BUFFER_SIZE: usize = 96;
pub const NVML_DEVICE_NAME_V2_BUFFER_SIZE: usize = 96;
pub const NVML_SYSTEM_DRIVER_VERSION_BUFFER_SIZE: usize = 80;
pub const NVML_DEVICE_SERIAL_BUFFER_SIZE: usize = 30;
pub const NVML_DEVICE_VBIOS_VERSION_BUFFER_SIZE: usize = 32;
pub const NVML_DEVICE_PCI_BUS_ID_BUFFER_SIZE: usize = 32;
pub const NVML_DEVICE_PCI_BUS_ID_BUFFER_V2_SIZE: usize = 16;

// nvmlClockType_t
pub const NVML_CLOCK_GRAPHICS: c_uint = 0;
pub const NVML_CLOCK_SM: c_uint = 1;
pub const NVML_CLOCK_MEM: c_uint = 2;
pub const NVML_CLOCK_VIDEO: c_uint = 3;
// nvmlTemperatureSensors_t
pub const NVML_TEMPERATURE_GPU: c_uint = 0;
// nvmlPcieUtilCounter_t
pub const NVML_PCIE_UTIL_TX_BYTES: c_uint = 0;
pub const NVML_PCIE_UTIL_RX_BYTES: c_uint = 1;
// nvmlEnableState_t / MIG mode
pub const NVML_FEATURE_ENABLED: c_uint = 1;
pub const NVML_DEVICE_MIG_ENABLE: c_uint = 1;
/// `nvmlEventTypeXidCriticalError`.
pub const nvmlEventTypeXidCriticalError: c_ulonglong = 8;
/// `gpuInstanceId` of a process or event outside MIG.
pub const NVML_NO_INSTANCE: c_uint = 0xFFFF_FFFF;

// nvmlValueType_t
pub const NVML_VALUE_TYPE_DOUBLE: c_uint = 0;
pub const NVML_VALUE_TYPE_UNSIGNED_INT: c_uint = 1;
pub const NVML_VALUE_TYPE_UNSIGNED_LONG: c_uint = 2;
pub const NVML_VALUE_TYPE_UNSIGNED_LONG_LONG: c_uint = 3;
pub const NVML_VALUE_TYPE_SIGNED_LONG_LONG: c_uint = 4;
pub const NVML_VALUE_TYPE_SIGNED_INT: c_uint = 5;
pub const NVML_VALUE_TYPE_UNSIGNED_SHORT: c_uint = 6;

// NVML field ids (nvmlDeviceGetFieldValues).
pub const NVML_FI_DEV_ECC_SBE_VOL_TOTAL: c_uint = 3;
pub const NVML_FI_DEV_ECC_DBE_VOL_TOTAL: c_uint = 4;
pub const NVML_FI_DEV_ECC_SBE_AGG_TOTAL: c_uint = 5;
pub const NVML_FI_DEV_ECC_DBE_AGG_TOTAL: c_uint = 6;
pub const NVML_FI_DEV_RETIRED_SBE: c_uint = 29;
pub const NVML_FI_DEV_RETIRED_DBE: c_uint = 30;
pub const NVML_FI_DEV_RETIRED_PENDING: c_uint = 31;
pub const NVML_FI_DEV_NVLINK_CRC_FLIT_ERROR_COUNT_TOTAL: c_uint = 38;
pub const NVML_FI_DEV_NVLINK_CRC_DATA_ERROR_COUNT_TOTAL: c_uint = 45;
pub const NVML_FI_DEV_NVLINK_REPLAY_ERROR_COUNT_TOTAL: c_uint = 52;
pub const NVML_FI_DEV_NVLINK_RECOVERY_ERROR_COUNT_TOTAL: c_uint = 59;
pub const NVML_FI_DEV_NVLINK_BANDWIDTH_C0_TOTAL: c_uint = 66;
pub const NVML_FI_DEV_MEMORY_TEMP: c_uint = 82;
pub const NVML_FI_DEV_PCIE_REPLAY_COUNTER: c_uint = 94;
pub const NVML_FI_DEV_NVLINK_THROUGHPUT_DATA_TX: c_uint = 138;
pub const NVML_FI_DEV_NVLINK_THROUGHPUT_DATA_RX: c_uint = 139;
pub const NVML_FI_DEV_REMAPPED_COR: c_uint = 142;
pub const NVML_FI_DEV_REMAPPED_UNC: c_uint = 143;
pub const NVML_FI_DEV_REMAPPED_PENDING: c_uint = 144;
pub const NVML_FI_DEV_REMAPPED_FAILURE: c_uint = 145;
pub const NVML_FI_DEV_NVLINK_ERROR_DL_REPLAY: c_uint = 161;
pub const NVML_FI_DEV_NVLINK_ERROR_DL_RECOVERY: c_uint = 162;
pub const NVML_FI_DEV_NVLINK_ERROR_DL_CRC: c_uint = 163;

/// Links NVML numbers per GPU (`NVML_NVLINK_MAX_LINKS`).
pub const NVML_NVLINK_MAX_LINKS: u32 = 36;

// ---------------------------------------------------------------------------------------------------
// Structs
// ---------------------------------------------------------------------------------------------------

/// `nvmlPciInfo_t` (as filled by `nvmlDeviceGetPciInfo_v3`).
#[repr(C)]
#[derive(Clone, Copy, Debug, Default)]
pub struct nvmlPciInfo_t {
    pub busIdLegacy: [c_char; NVML_DEVICE_PCI_BUS_ID_BUFFER_V2_SIZE],
    pub domain: c_uint,
    pub bus: c_uint,
    pub device: c_uint,
    pub pciDeviceId: c_uint,
    pub pciSubSystemId: c_uint,
    pub busId: [c_char; NVML_DEVICE_PCI_BUS_ID_BUFFER_SIZE],
}

/// `nvmlUtilization_t` (percent).
#[repr(C)]
#[derive(Clone, Copy, Debug, Default)]
pub struct nvmlUtilization_t {
    pub gpu: c_uint,
    pub memory: c_uint,
}

/// `nvmlMemory_v2_t` (bytes); `version` must be [`nvmlMemory_v2`].
#[repr(C)]
#[derive(Clone, Copy, Debug, Default)]
pub struct nvmlMemory_v2_t {
    pub version: c_uint,
    pub total: c_ulonglong,
    pub reserved: c_ulonglong,
    pub free: c_ulonglong,
    pub used: c_ulonglong,
}

/// `NVML_STRUCT_VERSION(Memory, 2)`: `sizeof(nvmlMemory_v2_t) | 2 << 24`.
pub const nvmlMemory_v2: c_uint = (std::mem::size_of::<nvmlMemory_v2_t>() as c_uint) | (2 << 24);

/// `nvmlProcessInfo_t` (= `nvmlProcessInfo_v2_t`, filled by the `_v3` process-list functions).
#[repr(C)]
#[derive(Clone, Copy, Debug, Default)]
pub struct nvmlProcessInfo_t {
    pub pid: c_uint,
    pub usedGpuMemory: c_ulonglong,
    pub gpuInstanceId: c_uint,
    pub computeInstanceId: c_uint,
}

/// `nvmlProcessUtilizationSample_t` (percent over the driver's sample period; µs timestamp).
#[repr(C)]
#[derive(Clone, Copy, Debug, Default)]
pub struct nvmlProcessUtilizationSample_t {
    pub pid: c_uint,
    pub timeStamp: c_ulonglong,
    pub smUtil: c_uint,
    pub memUtil: c_uint,
    pub encUtil: c_uint,
    pub decUtil: c_uint,
}

/// `nvmlValue_t`: interpret by `nvmlFieldValue_t::valueType`.
#[repr(C)]
#[derive(Clone, Copy)]
pub union nvmlValue_t {
    pub dVal: f64,
    pub siVal: c_int,
    pub uiVal: c_uint,
    pub ulVal: std::ffi::c_ulong,
    pub ullVal: c_ulonglong,
    pub sllVal: i64,
    pub usVal: u16,
}

impl Default for nvmlValue_t {
    fn default() -> Self {
        nvmlValue_t { ullVal: 0 }
    }
}

impl std::fmt::Debug for nvmlValue_t {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "nvmlValue_t({:#x})", self.raw())
    }
}

impl nvmlValue_t {
    /// The 8 bytes as an unsigned integer.
    pub fn raw(&self) -> u64 {
        // SAFETY: every member is plain bytes and the union is 8 bytes; any pattern is a valid u64.
        unsafe { self.ullVal }
    }

    /// The value by its NVML type: integers as `i64` (unsigned 64-bit values above `i64::MAX` are
    /// `None`), doubles as `f64`; `None` for an unknown type.
    pub fn read(&self, value_type: c_uint) -> Option<NvmlNumber> {
        let raw = self.raw();
        match value_type {
            NVML_VALUE_TYPE_DOUBLE => Some(NvmlNumber::Double(f64::from_bits(raw))),
            NVML_VALUE_TYPE_UNSIGNED_INT => Some(NvmlNumber::Int(i64::from(raw as u32))),
            NVML_VALUE_TYPE_SIGNED_INT => Some(NvmlNumber::Int(i64::from(raw as u32 as i32))),
            NVML_VALUE_TYPE_UNSIGNED_SHORT => Some(NvmlNumber::Int(i64::from(raw as u16))),
            NVML_VALUE_TYPE_UNSIGNED_LONG | NVML_VALUE_TYPE_UNSIGNED_LONG_LONG => {
                i64::try_from(raw).ok().map(NvmlNumber::Int)
            }
            NVML_VALUE_TYPE_SIGNED_LONG_LONG => Some(NvmlNumber::Int(raw as i64)),
            _ => None,
        }
    }

    /// An unsigned 64-bit value (what the fake and tests write).
    pub fn from_u64(v: u64) -> nvmlValue_t {
        nvmlValue_t { ullVal: v }
    }
}

/// A number read from an [`nvmlValue_t`].
#[derive(Debug, Clone, Copy, PartialEq)]
pub enum NvmlNumber {
    Int(i64),
    Double(f64),
}

/// `nvmlFieldValue_t`: set `fieldId` (and `scopeId`) before `nvmlDeviceGetFieldValues`.
#[repr(C)]
#[derive(Clone, Copy, Debug, Default)]
pub struct nvmlFieldValue_t {
    pub fieldId: c_uint,
    pub scopeId: c_uint,
    pub timestamp: i64,
    pub latencyUsec: i64,
    pub valueType: c_uint,
    pub nvmlReturn: nvmlReturn_t,
    pub value: nvmlValue_t,
}

/// `nvmlEventData_t`.
#[repr(C)]
#[derive(Clone, Copy, Debug, Default)]
pub struct nvmlEventData_t {
    pub device: nvmlDevice_t,
    pub eventType: c_ulonglong,
    pub eventData: c_ulonglong,
    pub gpuInstanceId: c_uint,
    pub computeInstanceId: c_uint,
}

/// The text of a NUL-terminated C char array (up to the first NUL, or the whole array), lossy UTF-8.
pub fn chars_to_string(chars: &[c_char]) -> String {
    let bytes: Vec<u8> = chars
        .iter()
        .take_while(|&&c| c != 0)
        .map(|&c| c as u8)
        .collect();
    String::from_utf8_lossy(&bytes).into_owned()
}

/// Copy `s` into a C char array, truncated to `dst.len() - 1` bytes and NUL-terminated.
pub fn write_chars(dst: &mut [c_char], s: &str) {
    let n = s.len().min(dst.len().saturating_sub(1));
    for (d, &b) in dst.iter_mut().zip(&s.as_bytes()[..n]) {
        *d = b as c_char;
    }
    for d in dst.iter_mut().skip(n) {
        *d = 0;
    }
}

// ---------------------------------------------------------------------------------------------------
// C function types (nvml.h, NVML API 12)
// ---------------------------------------------------------------------------------------------------

/// One `unsafe extern "C" fn` type per C function, named like the C symbol. The fake library
/// type-checks its exports against these. Device and event-set handles are declared as `usize`
/// (same size and passing convention as the C pointers on every supported target).
pub mod fn_types {
    use super::*;

    pub type nvmlInit_v2 = unsafe extern "C" fn() -> nvmlReturn_t;
    pub type nvmlShutdown = unsafe extern "C" fn() -> nvmlReturn_t;
    pub type nvmlErrorString = unsafe extern "C" fn(nvmlReturn_t) -> *const c_char;
    pub type nvmlSystemGetDriverVersion = unsafe extern "C" fn(*mut c_char, c_uint) -> nvmlReturn_t;
    pub type nvmlSystemGetProcessName =
        unsafe extern "C" fn(c_uint, *mut c_char, c_uint) -> nvmlReturn_t;
    pub type nvmlDeviceGetCount_v2 = unsafe extern "C" fn(*mut c_uint) -> nvmlReturn_t;
    pub type nvmlDeviceGetHandleByIndex_v2 =
        unsafe extern "C" fn(c_uint, *mut nvmlDevice_t) -> nvmlReturn_t;
    pub type nvmlDeviceGetUUID =
        unsafe extern "C" fn(nvmlDevice_t, *mut c_char, c_uint) -> nvmlReturn_t;
    pub type nvmlDeviceGetName =
        unsafe extern "C" fn(nvmlDevice_t, *mut c_char, c_uint) -> nvmlReturn_t;
    pub type nvmlDeviceGetSerial =
        unsafe extern "C" fn(nvmlDevice_t, *mut c_char, c_uint) -> nvmlReturn_t;
    pub type nvmlDeviceGetVbiosVersion =
        unsafe extern "C" fn(nvmlDevice_t, *mut c_char, c_uint) -> nvmlReturn_t;
    pub type nvmlDeviceGetPciInfo_v3 =
        unsafe extern "C" fn(nvmlDevice_t, *mut nvmlPciInfo_t) -> nvmlReturn_t;
    pub type nvmlDeviceGetMigMode =
        unsafe extern "C" fn(nvmlDevice_t, *mut c_uint, *mut c_uint) -> nvmlReturn_t;
    pub type nvmlDeviceGetMaxMigDeviceCount =
        unsafe extern "C" fn(nvmlDevice_t, *mut c_uint) -> nvmlReturn_t;
    pub type nvmlDeviceGetMigDeviceHandleByIndex =
        unsafe extern "C" fn(nvmlDevice_t, c_uint, *mut nvmlDevice_t) -> nvmlReturn_t;
    pub type nvmlDeviceGetGpuInstanceId =
        unsafe extern "C" fn(nvmlDevice_t, *mut c_uint) -> nvmlReturn_t;
    pub type nvmlDeviceGetClockInfo =
        unsafe extern "C" fn(nvmlDevice_t, c_uint, *mut c_uint) -> nvmlReturn_t;
    pub type nvmlDeviceGetMaxClockInfo =
        unsafe extern "C" fn(nvmlDevice_t, c_uint, *mut c_uint) -> nvmlReturn_t;
    pub type nvmlDeviceGetTemperature =
        unsafe extern "C" fn(nvmlDevice_t, c_uint, *mut c_uint) -> nvmlReturn_t;
    pub type nvmlDeviceGetPowerUsage =
        unsafe extern "C" fn(nvmlDevice_t, *mut c_uint) -> nvmlReturn_t;
    pub type nvmlDeviceGetPowerManagementLimit =
        unsafe extern "C" fn(nvmlDevice_t, *mut c_uint) -> nvmlReturn_t;
    pub type nvmlDeviceGetTotalEnergyConsumption =
        unsafe extern "C" fn(nvmlDevice_t, *mut c_ulonglong) -> nvmlReturn_t;
    pub type nvmlDeviceGetPerformanceState =
        unsafe extern "C" fn(nvmlDevice_t, *mut c_uint) -> nvmlReturn_t;
    pub type nvmlDeviceGetFanSpeed =
        unsafe extern "C" fn(nvmlDevice_t, *mut c_uint) -> nvmlReturn_t;
    pub type nvmlDeviceGetPcieThroughput =
        unsafe extern "C" fn(nvmlDevice_t, c_uint, *mut c_uint) -> nvmlReturn_t;
    pub type nvmlDeviceGetCurrPcieLinkGeneration =
        unsafe extern "C" fn(nvmlDevice_t, *mut c_uint) -> nvmlReturn_t;
    pub type nvmlDeviceGetCurrPcieLinkWidth =
        unsafe extern "C" fn(nvmlDevice_t, *mut c_uint) -> nvmlReturn_t;
    pub type nvmlDeviceGetUtilizationRates =
        unsafe extern "C" fn(nvmlDevice_t, *mut nvmlUtilization_t) -> nvmlReturn_t;
    pub type nvmlDeviceGetEncoderUtilization =
        unsafe extern "C" fn(nvmlDevice_t, *mut c_uint, *mut c_uint) -> nvmlReturn_t;
    pub type nvmlDeviceGetDecoderUtilization =
        unsafe extern "C" fn(nvmlDevice_t, *mut c_uint, *mut c_uint) -> nvmlReturn_t;
    pub type nvmlDeviceGetMemoryInfo_v2 =
        unsafe extern "C" fn(nvmlDevice_t, *mut nvmlMemory_v2_t) -> nvmlReturn_t;
    pub type nvmlDeviceGetCurrentClocksThrottleReasons =
        unsafe extern "C" fn(nvmlDevice_t, *mut c_ulonglong) -> nvmlReturn_t;
    pub type nvmlDeviceGetFieldValues =
        unsafe extern "C" fn(nvmlDevice_t, c_int, *mut nvmlFieldValue_t) -> nvmlReturn_t;
    pub type nvmlDeviceGetNvLinkState =
        unsafe extern "C" fn(nvmlDevice_t, c_uint, *mut c_uint) -> nvmlReturn_t;
    pub type nvmlDeviceGetComputeRunningProcesses_v3 =
        unsafe extern "C" fn(nvmlDevice_t, *mut c_uint, *mut nvmlProcessInfo_t) -> nvmlReturn_t;
    pub type nvmlDeviceGetGraphicsRunningProcesses_v3 =
        unsafe extern "C" fn(nvmlDevice_t, *mut c_uint, *mut nvmlProcessInfo_t) -> nvmlReturn_t;
    pub type nvmlDeviceGetMPSComputeRunningProcesses_v3 =
        unsafe extern "C" fn(nvmlDevice_t, *mut c_uint, *mut nvmlProcessInfo_t) -> nvmlReturn_t;
    pub type nvmlDeviceGetProcessUtilization = unsafe extern "C" fn(
        nvmlDevice_t,
        *mut nvmlProcessUtilizationSample_t,
        *mut c_uint,
        c_ulonglong,
    ) -> nvmlReturn_t;
    pub type nvmlEventSetCreate = unsafe extern "C" fn(*mut nvmlEventSet_t) -> nvmlReturn_t;
    pub type nvmlDeviceRegisterEvents =
        unsafe extern "C" fn(nvmlDevice_t, c_ulonglong, nvmlEventSet_t) -> nvmlReturn_t;
    pub type nvmlEventSetWait_v2 =
        unsafe extern "C" fn(nvmlEventSet_t, *mut nvmlEventData_t, c_uint) -> nvmlReturn_t;
    pub type nvmlEventSetFree = unsafe extern "C" fn(nvmlEventSet_t) -> nvmlReturn_t;
}

// ---------------------------------------------------------------------------------------------------
// Symbol table
// ---------------------------------------------------------------------------------------------------

/// Why libnvidia-ml could not be loaded.
#[derive(Debug, thiserror::Error)]
pub enum LoadError {
    #[error("cannot load NVML (tried {tried}): {last}")]
    NotFound { tried: String, last: String },
    #[error("{library} has no symbol {symbol}: {source}")]
    MissingSymbol {
        library: String,
        symbol: &'static str,
        source: libloading::Error,
    },
}

/// What [`Symbols::load_default`] tries, in order: the driver's soname, then the development link.
pub const DEFAULT_LIBRARY_NAMES: &[&str] = &["libnvidia-ml.so.1", "libnvidia-ml.so"];

macro_rules! symbols {
    (required: [$($req:ident),* $(,)?] optional: [$($opt:ident),* $(,)?]) => {
        /// The C functions of a loaded libnvidia-ml; the library stays mapped while this lives.
        pub struct Symbols {
            $( $req: fn_types::$req, )*
            $( $opt: Option<fn_types::$opt>, )*
            /// Keeps the function pointers valid; dropped last.
            _library: libloading::Library,
            path: String,
        }

        /// Functions every supported libnvidia-ml exports.
        pub const REQUIRED_SYMBOLS: &[&str] = &[$(stringify!($req)),*];
        /// Functions used when present.
        pub const OPTIONAL_SYMBOLS: &[&str] = &[$(stringify!($opt)),*];

        impl Symbols {
            fn resolve(library: libloading::Library, path: String) -> Result<Self, LoadError> {
                $(
                    // SAFETY: looked up by its exact C name and typed with the C signature from
                    // nvml.h (fn_types); only called while `_library` keeps the library mapped.
                    let $req: fn_types::$req = unsafe {
                        match library.get::<fn_types::$req>(concat!(stringify!($req), "\0").as_bytes()) {
                            Ok(sym) => *sym,
                            Err(source) => {
                                return Err(LoadError::MissingSymbol {
                                    library: path,
                                    symbol: stringify!($req),
                                    source,
                                })
                            }
                        }
                    };
                )*
                $(
                    // SAFETY: as above; an absent optional symbol is allowed.
                    let $opt: Option<fn_types::$opt> = unsafe {
                        library
                            .get::<fn_types::$opt>(concat!(stringify!($opt), "\0").as_bytes())
                            .ok()
                            .map(|sym| *sym)
                    };
                )*
                Ok(Symbols { $($req,)* $($opt,)* _library: library, path })
            }
        }
    };
}

symbols!(
    required: [
        nvmlInit_v2,
        nvmlShutdown,
        nvmlErrorString,
        nvmlDeviceGetCount_v2,
        nvmlDeviceGetHandleByIndex_v2,
        nvmlDeviceGetUUID,
    ]
    optional: [
        nvmlSystemGetDriverVersion,
        nvmlSystemGetProcessName,
        nvmlDeviceGetName,
        nvmlDeviceGetSerial,
        nvmlDeviceGetVbiosVersion,
        nvmlDeviceGetPciInfo_v3,
        nvmlDeviceGetMigMode,
        nvmlDeviceGetMaxMigDeviceCount,
        nvmlDeviceGetMigDeviceHandleByIndex,
        nvmlDeviceGetGpuInstanceId,
        nvmlDeviceGetClockInfo,
        nvmlDeviceGetMaxClockInfo,
        nvmlDeviceGetTemperature,
        nvmlDeviceGetPowerUsage,
        nvmlDeviceGetPowerManagementLimit,
        nvmlDeviceGetTotalEnergyConsumption,
        nvmlDeviceGetPerformanceState,
        nvmlDeviceGetFanSpeed,
        nvmlDeviceGetPcieThroughput,
        nvmlDeviceGetCurrPcieLinkGeneration,
        nvmlDeviceGetCurrPcieLinkWidth,
        nvmlDeviceGetUtilizationRates,
        nvmlDeviceGetEncoderUtilization,
        nvmlDeviceGetDecoderUtilization,
        nvmlDeviceGetMemoryInfo_v2,
        nvmlDeviceGetCurrentClocksThrottleReasons,
        nvmlDeviceGetFieldValues,
        nvmlDeviceGetNvLinkState,
        nvmlDeviceGetComputeRunningProcesses_v3,
        nvmlDeviceGetGraphicsRunningProcesses_v3,
        nvmlDeviceGetMPSComputeRunningProcesses_v3,
        nvmlDeviceGetProcessUtilization,
        nvmlEventSetCreate,
        nvmlDeviceRegisterEvents,
        nvmlEventSetWait_v2,
        nvmlEventSetFree,
    ]
);

/// A `u32` out-parameter call: the value on success, the code otherwise.
fn out_u32(rc: nvmlReturn_t, v: c_uint) -> Result<u32, nvmlReturn_t> {
    if rc == NVML_SUCCESS {
        Ok(v)
    } else {
        Err(rc)
    }
}

impl Symbols {
    /// `dlopen` one file or soname and resolve the symbols.
    pub fn load(path: &OsStr) -> Result<Self, LoadError> {
        // SAFETY: loading libnvidia-ml runs its ELF initialisers, which only set up static state.
        // This is the trust boundary of the module.
        let library = unsafe { libloading::Library::new(path) };
        let name = path.to_string_lossy().into_owned();
        match library {
            Ok(library) => Self::resolve(library, name),
            Err(e) => Err(LoadError::NotFound {
                tried: name,
                last: e.to_string(),
            }),
        }
    }

    /// Try [`DEFAULT_LIBRARY_NAMES`] through the dynamic loader's search path.
    pub fn load_default() -> Result<Self, LoadError> {
        let mut last = String::new();
        for name in DEFAULT_LIBRARY_NAMES {
            match Self::load(OsStr::new(name)) {
                Ok(s) => return Ok(s),
                Err(e @ LoadError::MissingSymbol { .. }) => return Err(e),
                Err(LoadError::NotFound { last: l, .. }) => last = l,
            }
        }
        Err(LoadError::NotFound {
            tried: DEFAULT_LIBRARY_NAMES.join(", "),
            last,
        })
    }

    /// The file or soname this table was loaded from.
    pub fn path(&self) -> &str {
        &self.path
    }

    pub fn init(&self) -> nvmlReturn_t {
        // SAFETY: no arguments; valid function pointer while `self` holds the library.
        unsafe { (self.nvmlInit_v2)() }
    }

    pub fn shutdown(&self) -> nvmlReturn_t {
        // SAFETY: no arguments.
        unsafe { (self.nvmlShutdown)() }
    }

    /// `nvmlErrorString(code)`, copied.
    pub fn error_string(&self, code: nvmlReturn_t) -> Option<String> {
        // SAFETY: plain integer argument; the result is NULL or a static NUL-terminated string.
        let p = unsafe { (self.nvmlErrorString)(code) };
        if p.is_null() {
            return None;
        }
        // SAFETY: non-NULL static string owned by the library, which stays mapped; copied at once.
        Some(unsafe { CStr::from_ptr(p) }.to_string_lossy().into_owned())
    }

    /// A string out-parameter call into a buffer of `N` chars.
    fn string_call<const N: usize>(
        &self,
        call: impl FnOnce(*mut c_char, c_uint) -> nvmlReturn_t,
    ) -> Result<String, nvmlReturn_t> {
        let mut buf = [0 as c_char; N];
        let rc = call(buf.as_mut_ptr(), N as c_uint);
        if rc == NVML_SUCCESS {
            // The library NUL-terminates within N; make sure of it anyway.
            buf[N - 1] = 0;
            Ok(chars_to_string(&buf))
        } else {
            Err(rc)
        }
    }

    pub fn driver_version(&self) -> Result<String, nvmlReturn_t> {
        self.string_call::<NVML_SYSTEM_DRIVER_VERSION_BUFFER_SIZE>(|p, n| {
            self.nvmlSystemGetDriverVersion
                .map_or(NVML_ERROR_FUNCTION_NOT_FOUND, |f| {
                    // SAFETY: `p` points to a writable buffer of `n` chars, which the library NUL-terminates within `n`.
                    unsafe { f(p, n) }
                })
        })
    }

    pub fn process_name(&self, pid: u32) -> Result<String, nvmlReturn_t> {
        self.string_call::<256>(|p, n| {
            self.nvmlSystemGetProcessName
                .map_or(NVML_ERROR_FUNCTION_NOT_FOUND, |f| {
                    // SAFETY: `pid` is plain data; `p` points to a writable buffer of `n` chars, NUL-terminated within `n`.
                    unsafe { f(pid, p, n) }
                })
        })
    }

    pub fn device_count(&self) -> Result<u32, nvmlReturn_t> {
        let mut n: c_uint = 0;
        // SAFETY: `n` is a valid, writable c_uint.
        let rc = unsafe { (self.nvmlDeviceGetCount_v2)(&mut n) };
        out_u32(rc, n)
    }

    pub fn device_by_index(&self, index: u32) -> Result<nvmlDevice_t, nvmlReturn_t> {
        let mut d: nvmlDevice_t = 0;
        // SAFETY: `d` is a valid, writable handle slot.
        let rc = unsafe { (self.nvmlDeviceGetHandleByIndex_v2)(index, &mut d) };
        if rc == NVML_SUCCESS {
            Ok(d)
        } else {
            Err(rc)
        }
    }

    pub fn uuid(&self, d: nvmlDevice_t) -> Result<String, nvmlReturn_t> {
        self.string_call::<NVML_DEVICE_UUID_V2_BUFFER_SIZE>(|p, n| {
            // SAFETY: the buffer holds `n` chars; `d` is a handle the library gave.
            unsafe { (self.nvmlDeviceGetUUID)(d, p, n) }
        })
    }

    pub fn name(&self, d: nvmlDevice_t) -> Result<String, nvmlReturn_t> {
        self.string_call::<NVML_DEVICE_NAME_V2_BUFFER_SIZE>(|p, n| {
            self.nvmlDeviceGetName
                .map_or(NVML_ERROR_FUNCTION_NOT_FOUND, |f| {
                    // SAFETY: `d` is a device handle this library gave; `p` points to a writable buffer of `n` chars.
                    unsafe { f(d, p, n) }
                })
        })
    }

    pub fn serial(&self, d: nvmlDevice_t) -> Result<String, nvmlReturn_t> {
        self.string_call::<NVML_DEVICE_SERIAL_BUFFER_SIZE>(|p, n| {
            self.nvmlDeviceGetSerial
                .map_or(NVML_ERROR_FUNCTION_NOT_FOUND, |f| {
                    // SAFETY: `d` is a device handle this library gave; `p` points to a writable buffer of `n` chars.
                    unsafe { f(d, p, n) }
                })
        })
    }

    pub fn vbios_version(&self, d: nvmlDevice_t) -> Result<String, nvmlReturn_t> {
        self.string_call::<NVML_DEVICE_VBIOS_VERSION_BUFFER_SIZE>(|p, n| {
            self.nvmlDeviceGetVbiosVersion
                .map_or(NVML_ERROR_FUNCTION_NOT_FOUND, |f| {
                    // SAFETY: `d` is a device handle this library gave; `p` points to a writable buffer of `n` chars.
                    unsafe { f(d, p, n) }
                })
        })
    }

    pub fn pci_info(&self, d: nvmlDevice_t) -> Result<nvmlPciInfo_t, nvmlReturn_t> {
        let mut pci = nvmlPciInfo_t::default();
        let p: *mut nvmlPciInfo_t = &mut pci;
        let rc = self
            .nvmlDeviceGetPciInfo_v3
            .map_or(NVML_ERROR_FUNCTION_NOT_FOUND, |f| {
                // SAFETY: `d` is a device handle this library gave; `p` points to a live, writable `nvmlPciInfo_t` (the _v3 layout).
                unsafe { f(d, p) }
            });
        if rc == NVML_SUCCESS {
            Ok(pci)
        } else {
            Err(rc)
        }
    }

    /// (current, pending) MIG mode.
    pub fn mig_mode(&self, d: nvmlDevice_t) -> Result<(u32, u32), nvmlReturn_t> {
        let (mut cur, mut pending): (c_uint, c_uint) = (0, 0);
        let (a, b): (*mut c_uint, *mut c_uint) = (&mut cur, &mut pending);
        let rc = self
            .nvmlDeviceGetMigMode
            .map_or(NVML_ERROR_FUNCTION_NOT_FOUND, |f| {
                // SAFETY: `d` is a device handle this library gave; `a` and `b` point to live, writable c_uints.
                unsafe { f(d, a, b) }
            });
        out_u32(rc, cur).map(|c| (c, pending))
    }

    pub fn max_mig_device_count(&self, d: nvmlDevice_t) -> Result<u32, nvmlReturn_t> {
        let mut n: c_uint = 0;
        let p: *mut c_uint = &mut n;
        let rc = self
            .nvmlDeviceGetMaxMigDeviceCount
            .map_or(NVML_ERROR_FUNCTION_NOT_FOUND, |f| {
                // SAFETY: `d` is a device handle this library gave; `p` points to a live, writable c_uint.
                unsafe { f(d, p) }
            });
        out_u32(rc, n)
    }

    pub fn mig_device_by_index(
        &self,
        d: nvmlDevice_t,
        index: u32,
    ) -> Result<nvmlDevice_t, nvmlReturn_t> {
        let mut m: nvmlDevice_t = 0;
        let p: *mut nvmlDevice_t = &mut m;
        let rc =
            self.nvmlDeviceGetMigDeviceHandleByIndex
                .map_or(NVML_ERROR_FUNCTION_NOT_FOUND, |f| {
                    // SAFETY: `d` is a device handle this library gave; `index` is plain data; `p` points to a live, writable handle slot.
                    unsafe { f(d, index, p) }
                });
        if rc == NVML_SUCCESS {
            Ok(m)
        } else {
            Err(rc)
        }
    }

    pub fn gpu_instance_id(&self, d: nvmlDevice_t) -> Result<u32, nvmlReturn_t> {
        let mut v: c_uint = 0;
        let p: *mut c_uint = &mut v;
        out_u32(
            self.nvmlDeviceGetGpuInstanceId
                .map_or(NVML_ERROR_FUNCTION_NOT_FOUND, |f| {
                    // SAFETY: `d` is a device handle this library gave (a MIG device's); `p` points to a live, writable c_uint.
                    unsafe { f(d, p) }
                }),
            v,
        )
    }

    pub fn clock_info(&self, d: nvmlDevice_t, clock: u32) -> Result<u32, nvmlReturn_t> {
        let mut v: c_uint = 0;
        let p: *mut c_uint = &mut v;
        out_u32(
            self.nvmlDeviceGetClockInfo
                .map_or(NVML_ERROR_FUNCTION_NOT_FOUND, |f| {
                    // SAFETY: `d` is a device handle this library gave; `clock` is plain data; `p` points to a live, writable c_uint.
                    unsafe { f(d, clock, p) }
                }),
            v,
        )
    }

    pub fn max_clock_info(&self, d: nvmlDevice_t, clock: u32) -> Result<u32, nvmlReturn_t> {
        let mut v: c_uint = 0;
        let p: *mut c_uint = &mut v;
        out_u32(
            self.nvmlDeviceGetMaxClockInfo
                .map_or(NVML_ERROR_FUNCTION_NOT_FOUND, |f| {
                    // SAFETY: `d` is a device handle this library gave; `clock` is plain data; `p` points to a live, writable c_uint.
                    unsafe { f(d, clock, p) }
                }),
            v,
        )
    }

    pub fn temperature(&self, d: nvmlDevice_t, sensor: u32) -> Result<u32, nvmlReturn_t> {
        let mut v: c_uint = 0;
        let p: *mut c_uint = &mut v;
        out_u32(
            self.nvmlDeviceGetTemperature
                .map_or(NVML_ERROR_FUNCTION_NOT_FOUND, |f| {
                    // SAFETY: `d` is a device handle this library gave; `sensor` is plain data; `p` points to a live, writable c_uint.
                    unsafe { f(d, sensor, p) }
                }),
            v,
        )
    }

    /// Milliwatts.
    pub fn power_usage(&self, d: nvmlDevice_t) -> Result<u32, nvmlReturn_t> {
        let mut v: c_uint = 0;
        let p: *mut c_uint = &mut v;
        out_u32(
            self.nvmlDeviceGetPowerUsage
                .map_or(NVML_ERROR_FUNCTION_NOT_FOUND, |f| {
                    // SAFETY: `d` is a device handle this library gave; `p` points to a live, writable c_uint.
                    unsafe { f(d, p) }
                }),
            v,
        )
    }

    /// Milliwatts.
    pub fn power_limit(&self, d: nvmlDevice_t) -> Result<u32, nvmlReturn_t> {
        let mut v: c_uint = 0;
        let p: *mut c_uint = &mut v;
        out_u32(
            self.nvmlDeviceGetPowerManagementLimit
                .map_or(NVML_ERROR_FUNCTION_NOT_FOUND, |f| {
                    // SAFETY: `d` is a device handle this library gave; `p` points to a live, writable c_uint.
                    unsafe { f(d, p) }
                }),
            v,
        )
    }

    /// Millijoules since the driver loaded.
    pub fn total_energy(&self, d: nvmlDevice_t) -> Result<u64, nvmlReturn_t> {
        let mut v: c_ulonglong = 0;
        let p: *mut c_ulonglong = &mut v;
        let rc =
            self.nvmlDeviceGetTotalEnergyConsumption
                .map_or(NVML_ERROR_FUNCTION_NOT_FOUND, |f| {
                    // SAFETY: `d` is a device handle this library gave; `p` points to a live, writable c_ulonglong.
                    unsafe { f(d, p) }
                });
        if rc == NVML_SUCCESS {
            Ok(v)
        } else {
            Err(rc)
        }
    }

    pub fn performance_state(&self, d: nvmlDevice_t) -> Result<u32, nvmlReturn_t> {
        let mut v: c_uint = 0;
        let p: *mut c_uint = &mut v;
        out_u32(
            self.nvmlDeviceGetPerformanceState
                .map_or(NVML_ERROR_FUNCTION_NOT_FOUND, |f| {
                    // SAFETY: `d` is a device handle this library gave; `p` points to a live, writable c_uint (the enum's width).
                    unsafe { f(d, p) }
                }),
            v,
        )
    }

    pub fn fan_speed(&self, d: nvmlDevice_t) -> Result<u32, nvmlReturn_t> {
        let mut v: c_uint = 0;
        let p: *mut c_uint = &mut v;
        out_u32(
            self.nvmlDeviceGetFanSpeed
                .map_or(NVML_ERROR_FUNCTION_NOT_FOUND, |f| {
                    // SAFETY: `d` is a device handle this library gave; `p` points to a live, writable c_uint.
                    unsafe { f(d, p) }
                }),
            v,
        )
    }

    /// KB/s over the driver's 20 ms window.
    pub fn pcie_throughput(&self, d: nvmlDevice_t, counter: u32) -> Result<u32, nvmlReturn_t> {
        let mut v: c_uint = 0;
        let p: *mut c_uint = &mut v;
        out_u32(
            self.nvmlDeviceGetPcieThroughput
                .map_or(NVML_ERROR_FUNCTION_NOT_FOUND, |f| {
                    // SAFETY: `d` is a device handle this library gave; `counter` is plain data; `p` points to a live, writable c_uint.
                    unsafe { f(d, counter, p) }
                }),
            v,
        )
    }

    /// The PCIe link generation in use now (DCGM's `DCGM_FI_DEV_PCIE_LINK_GEN`).
    pub fn pcie_link_generation(&self, d: nvmlDevice_t) -> Result<u32, nvmlReturn_t> {
        let mut v: c_uint = 0;
        let p: *mut c_uint = &mut v;
        out_u32(
            self.nvmlDeviceGetCurrPcieLinkGeneration
                .map_or(NVML_ERROR_FUNCTION_NOT_FOUND, |f| {
                    // SAFETY: `d` is a device handle this library gave; `p` points to a live, writable c_uint.
                    unsafe { f(d, p) }
                }),
            v,
        )
    }

    /// The PCIe link width in use now, lanes (DCGM's `DCGM_FI_DEV_PCIE_LINK_WIDTH`).
    pub fn pcie_link_width(&self, d: nvmlDevice_t) -> Result<u32, nvmlReturn_t> {
        let mut v: c_uint = 0;
        let p: *mut c_uint = &mut v;
        out_u32(
            self.nvmlDeviceGetCurrPcieLinkWidth
                .map_or(NVML_ERROR_FUNCTION_NOT_FOUND, |f| {
                    // SAFETY: `d` is a device handle this library gave; `p` points to a live, writable c_uint.
                    unsafe { f(d, p) }
                }),
            v,
        )
    }

    pub fn utilization_rates(&self, d: nvmlDevice_t) -> Result<nvmlUtilization_t, nvmlReturn_t> {
        let mut u = nvmlUtilization_t::default();
        let p: *mut nvmlUtilization_t = &mut u;
        let rc = self
            .nvmlDeviceGetUtilizationRates
            .map_or(NVML_ERROR_FUNCTION_NOT_FOUND, |f| {
                // SAFETY: `d` is a device handle this library gave; `p` points to a live, writable `nvmlUtilization_t`.
                unsafe { f(d, p) }
            });
        if rc == NVML_SUCCESS {
            Ok(u)
        } else {
            Err(rc)
        }
    }

    pub fn encoder_utilization(&self, d: nvmlDevice_t) -> Result<u32, nvmlReturn_t> {
        let (mut v, mut period): (c_uint, c_uint) = (0, 0);
        let (a, b): (*mut c_uint, *mut c_uint) = (&mut v, &mut period);
        out_u32(
            self.nvmlDeviceGetEncoderUtilization
                .map_or(NVML_ERROR_FUNCTION_NOT_FOUND, |f| {
                    // SAFETY: `d` is a device handle this library gave; `a` and `b` point to live, writable c_uints.
                    unsafe { f(d, a, b) }
                }),
            v,
        )
    }

    pub fn decoder_utilization(&self, d: nvmlDevice_t) -> Result<u32, nvmlReturn_t> {
        let (mut v, mut period): (c_uint, c_uint) = (0, 0);
        let (a, b): (*mut c_uint, *mut c_uint) = (&mut v, &mut period);
        out_u32(
            self.nvmlDeviceGetDecoderUtilization
                .map_or(NVML_ERROR_FUNCTION_NOT_FOUND, |f| {
                    // SAFETY: `d` is a device handle this library gave; `a` and `b` point to live, writable c_uints.
                    unsafe { f(d, a, b) }
                }),
            v,
        )
    }

    pub fn memory_info(&self, d: nvmlDevice_t) -> Result<nvmlMemory_v2_t, nvmlReturn_t> {
        let mut m = nvmlMemory_v2_t {
            version: nvmlMemory_v2,
            ..Default::default()
        };
        let p: *mut nvmlMemory_v2_t = &mut m;
        let rc = self
            .nvmlDeviceGetMemoryInfo_v2
            .map_or(NVML_ERROR_FUNCTION_NOT_FOUND, |f| {
                // SAFETY: `d` is a device handle this library gave; `p` points to a live, writable `nvmlMemory_v2_t` whose `version` says its layout.
                unsafe { f(d, p) }
            });
        if rc == NVML_SUCCESS {
            Ok(m)
        } else {
            Err(rc)
        }
    }

    /// The clock event (throttle) reason bit mask.
    pub fn clocks_throttle_reasons(&self, d: nvmlDevice_t) -> Result<u64, nvmlReturn_t> {
        let mut v: c_ulonglong = 0;
        let p: *mut c_ulonglong = &mut v;
        let rc = self.nvmlDeviceGetCurrentClocksThrottleReasons.map_or(
            NVML_ERROR_FUNCTION_NOT_FOUND,
            |f| {
                // SAFETY: `d` is a device handle this library gave; `p` points to a live, writable c_ulonglong.
                unsafe { f(d, p) }
            },
        );
        if rc == NVML_SUCCESS {
            Ok(v)
        } else {
            Err(rc)
        }
    }

    /// `nvmlDeviceGetFieldValues(d, n, values)`: `fieldId`/`scopeId` of each entry set by the caller;
    /// each entry's `nvmlReturn` says whether its value is valid.
    pub fn field_values(
        &self,
        d: nvmlDevice_t,
        values: &mut [nvmlFieldValue_t],
    ) -> Result<(), nvmlReturn_t> {
        let Ok(n) = c_int::try_from(values.len()) else {
            return Err(NVML_ERROR_INVALID_ARGUMENT);
        };
        let p = values.as_mut_ptr();
        let rc = self
            .nvmlDeviceGetFieldValues
            .map_or(NVML_ERROR_FUNCTION_NOT_FOUND, |f| {
                // SAFETY: `d` is a device handle this library gave; `p` points to `n` live, writable `nvmlFieldValue_t` entries (the library reads and writes exactly `n`).
                unsafe { f(d, n, p) }
            });
        if rc == NVML_SUCCESS {
            Ok(())
        } else {
            Err(rc)
        }
    }

    /// Whether NvLink `link` is active.
    pub fn nvlink_active(&self, d: nvmlDevice_t, link: u32) -> Result<bool, nvmlReturn_t> {
        let mut v: c_uint = 0;
        let p: *mut c_uint = &mut v;
        out_u32(
            self.nvmlDeviceGetNvLinkState
                .map_or(NVML_ERROR_FUNCTION_NOT_FOUND, |f| {
                    // SAFETY: `d` is a device handle this library gave; `link` is plain data; `p` points to a live, writable c_uint.
                    unsafe { f(d, link, p) }
                }),
            v,
        )
        .map(|s| s == NVML_FEATURE_ENABLED)
    }

    /// A process list call with NVML's size protocol: ask with the current buffer; on
    /// INSUFFICIENT_SIZE grow to the count it reports (plus headroom) and ask again, a few times.
    fn process_list(
        &self,
        call: impl Fn(*mut c_uint, *mut nvmlProcessInfo_t) -> nvmlReturn_t,
        buf: &mut Vec<nvmlProcessInfo_t>,
    ) -> Result<(), nvmlReturn_t> {
        if buf.capacity() < 16 {
            buf.reserve(16);
        }
        for _ in 0..4 {
            let cap = buf.capacity();
            buf.clear();
            buf.resize(cap, nvmlProcessInfo_t::default());
            let mut count = c_uint::try_from(cap).unwrap_or(c_uint::MAX);
            let rc = call(&mut count, buf.as_mut_ptr());
            match rc {
                NVML_SUCCESS => {
                    buf.truncate((count as usize).min(cap));
                    return Ok(());
                }
                NVML_ERROR_INSUFFICIENT_SIZE => {
                    let need = (count as usize).max(cap * 2) + 8;
                    buf.clear();
                    buf.reserve(need);
                }
                rc => {
                    buf.clear();
                    return Err(rc);
                }
            }
        }
        buf.clear();
        Err(NVML_ERROR_INSUFFICIENT_SIZE)
    }

    /// Running compute processes (`_v3`), into `buf`.
    pub fn compute_processes(
        &self,
        d: nvmlDevice_t,
        buf: &mut Vec<nvmlProcessInfo_t>,
    ) -> Result<(), nvmlReturn_t> {
        self.process_list(
            |count, infos| {
                self.nvmlDeviceGetComputeRunningProcesses_v3.map_or(
                    NVML_ERROR_FUNCTION_NOT_FOUND,
                    |f| {
                        // SAFETY: `d` is a device handle this library gave; `count` points to a c_uint holding the capacity of `infos`, a writable buffer of that many `nvmlProcessInfo_t`.
                        unsafe { f(d, count, infos) }
                    },
                )
            },
            buf,
        )
    }

    /// Running graphics processes (`_v3`), into `buf`.
    pub fn graphics_processes(
        &self,
        d: nvmlDevice_t,
        buf: &mut Vec<nvmlProcessInfo_t>,
    ) -> Result<(), nvmlReturn_t> {
        self.process_list(
            |count, infos| {
                self.nvmlDeviceGetGraphicsRunningProcesses_v3.map_or(
                    NVML_ERROR_FUNCTION_NOT_FOUND,
                    |f| {
                        // SAFETY: `d` is a device handle this library gave; `count` points to a c_uint holding the capacity of `infos`, a writable buffer of that many `nvmlProcessInfo_t`.
                        unsafe { f(d, count, infos) }
                    },
                )
            },
            buf,
        )
    }

    /// Processes running under the MPS server (`_v3`, Volta and newer), into `buf`.
    pub fn mps_processes(
        &self,
        d: nvmlDevice_t,
        buf: &mut Vec<nvmlProcessInfo_t>,
    ) -> Result<(), nvmlReturn_t> {
        self.process_list(
            |count, infos| {
                self.nvmlDeviceGetMPSComputeRunningProcesses_v3.map_or(
                    NVML_ERROR_FUNCTION_NOT_FOUND,
                    |f| {
                        // SAFETY: `d` is a device handle this library gave; `count` points to a c_uint holding the capacity of `infos`, a writable buffer of that many `nvmlProcessInfo_t`.
                        unsafe { f(d, count, infos) }
                    },
                )
            },
            buf,
        )
    }

    /// Per-process utilization samples newer than `since_us` (CPU µs timestamp; 0 = all the driver
    /// keeps), into `buf`. `NVML_ERROR_NOT_FOUND` means no sample is newer: `buf` is left empty.
    pub fn process_utilization(
        &self,
        d: nvmlDevice_t,
        since_us: u64,
        buf: &mut Vec<nvmlProcessUtilizationSample_t>,
    ) -> Result<(), nvmlReturn_t> {
        buf.clear();
        // First ask for the count (NULL buffer), then fetch.
        let mut count: c_uint = 0;
        let null: *mut nvmlProcessUtilizationSample_t = std::ptr::null_mut();
        let cp: *mut c_uint = &mut count;
        let rc = self
            .nvmlDeviceGetProcessUtilization
            .map_or(NVML_ERROR_FUNCTION_NOT_FOUND, |f| {
                // SAFETY: `d` is a device handle this library gave; a NULL buffer asks for the count only, written to `cp`, a live, writable c_uint.
                unsafe { f(d, null, cp, since_us) }
            });
        match rc {
            NVML_SUCCESS | NVML_ERROR_INSUFFICIENT_SIZE => {}
            NVML_ERROR_NOT_FOUND => return Ok(()),
            rc => return Err(rc),
        }
        if count == 0 {
            return Ok(());
        }
        let cap = count as usize + 8;
        buf.resize(cap, nvmlProcessUtilizationSample_t::default());
        let mut count = cap as c_uint;
        let cp: *mut c_uint = &mut count;
        let p = buf.as_mut_ptr();
        let rc = self
            .nvmlDeviceGetProcessUtilization
            .map_or(NVML_ERROR_FUNCTION_NOT_FOUND, |f| {
                // SAFETY: `d` is a device handle this library gave; `cp` points to a c_uint holding the capacity of `buf` (`p`), a writable buffer of that many samples.
                unsafe { f(d, p, cp, since_us) }
            });
        match rc {
            NVML_SUCCESS => {
                buf.truncate((count as usize).min(cap));
                Ok(())
            }
            NVML_ERROR_NOT_FOUND => {
                buf.clear();
                Ok(())
            }
            rc => {
                buf.clear();
                Err(rc)
            }
        }
    }

    pub fn event_set_create(&self) -> Result<nvmlEventSet_t, nvmlReturn_t> {
        let mut s: nvmlEventSet_t = 0;
        let p: *mut nvmlEventSet_t = &mut s;
        let rc = self
            .nvmlEventSetCreate
            .map_or(NVML_ERROR_FUNCTION_NOT_FOUND, |f| {
                // SAFETY: `p` points to a live, writable event-set slot.
                unsafe { f(p) }
            });
        if rc == NVML_SUCCESS {
            Ok(s)
        } else {
            Err(rc)
        }
    }

    pub fn register_events(
        &self,
        d: nvmlDevice_t,
        types: u64,
        set: nvmlEventSet_t,
    ) -> Result<(), nvmlReturn_t> {
        let rc = self
            .nvmlDeviceRegisterEvents
            .map_or(NVML_ERROR_FUNCTION_NOT_FOUND, |f| {
                // SAFETY: `d` is a device handle this library gave; `types` is plain data; `set` is an event set this library created and not yet freed.
                unsafe { f(d, types, set) }
            });
        if rc == NVML_SUCCESS {
            Ok(())
        } else {
            Err(rc)
        }
    }

    /// One event, waiting at most `timeout_ms` (0: only what is pending). `Err(NVML_ERROR_TIMEOUT)`
    /// when none.
    pub fn event_set_wait(
        &self,
        set: nvmlEventSet_t,
        timeout_ms: u32,
    ) -> Result<nvmlEventData_t, nvmlReturn_t> {
        let mut data = nvmlEventData_t::default();
        let p: *mut nvmlEventData_t = &mut data;
        let rc = self
            .nvmlEventSetWait_v2
            .map_or(NVML_ERROR_FUNCTION_NOT_FOUND, |f| {
                // SAFETY: `set` is an event set this library created and not yet freed; `p` points to a live, writable `nvmlEventData_t`; `timeout_ms` is plain data.
                unsafe { f(set, p, timeout_ms) }
            });
        if rc == NVML_SUCCESS {
            Ok(data)
        } else {
            Err(rc)
        }
    }

    pub fn event_set_free(&self, set: nvmlEventSet_t) -> nvmlReturn_t {
        self.nvmlEventSetFree
            .map_or(NVML_ERROR_FUNCTION_NOT_FOUND, |f| {
                // SAFETY: `set` is an event set this library created; it is not used after this call.
                unsafe { f(set) }
            })
    }
}

impl std::fmt::Debug for Symbols {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Symbols")
            .field("path", &self.path)
            .finish_non_exhaustive()
    }
}
