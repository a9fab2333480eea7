//! The libdcgm C ABI: `#[repr(C)]` structs, version words, constants, C function types, and the
//! runtime-loaded symbol table with thin *safe* wrappers.
//!
//! This is the only module of the exporter allowed to contain `unsafe` (docs/developing.md). Everything
//! here mirrors NVIDIA's DCGM 4.x headers (`dcgm_structs.h`, `dcgm_agent.h`, `dcgm_fields.h`); the numbers are
//! checked against the compiled layout probe `tests/fixtures/dcgm/dcgm-abi-layout.txt` by `tests/e2e/abi_layout.rs`.
//!
//! Names deliberately keep the C spelling (`dcgmFieldValue_v1`, `DCGM_ST_OK`, `entityGroupId`) so that
//! the ABI test can match every Rust item to its C counterpart by name, and so that a reader can grep the
//! reference. Version words are computed from `size_of` exactly like the C macro `MAKE_DCGM_VERSION`.
//!
//! The safe wrappers on [`Symbols`] are 1:1 with the C functions and return the raw `dcgmReturn_t`;
//! turning codes into typed errors is the client's job (`client.rs`). Every wrapper takes Rust references
//! / slices sized so that the library can never write outside them, and C strings as `&CStr`.
#![allow(non_camel_case_types, non_snake_case, non_upper_case_globals)]
// The one module where `unsafe` is allowed (the crate denies it everywhere else, Cargo.toml [lints]).
#![allow(unsafe_code)]

use std::ffi::{c_char, c_int, c_longlong, c_uint, c_ushort, c_void, CStr, OsStr};
use std::mem::size_of;

// ---------------------------------------------------------------------------------------------------
// Scalar typedefs (x86_64 Linux LP64)
// ---------------------------------------------------------------------------------------------------

/// `dcgmReturn_t` (C enum, signed values).
pub type dcgmReturn_t = i32;
/// `dcgmHandle_t` (`uintptr_t`).
pub type dcgmHandle_t = usize;
/// `dcgmGpuGrp_t` (`uintptr_t`).
pub type dcgmGpuGrp_t = usize;
/// `dcgmFieldGrp_t` (`uintptr_t`).
pub type dcgmFieldGrp_t = usize;
/// `dcgm_field_entity_group_t` (C enum, 0..10).
pub type dcgm_field_entity_group_t = u32;
/// `dcgm_field_eid_t` (`unsigned int`).
pub type dcgm_field_eid_t = u32;
/// `dcgmOperationMode_t`.
pub type dcgmOperationMode_t = u32;
/// `dcgmGroupType_t`.
pub type dcgmGroupType_t = u32;
/// `DcgmLoggingSeverity_t` (has -1).
pub type DcgmLoggingSeverity_t = i32;
/// `DcgmEntityStatus_t`.
pub type DcgmEntityStatus_t = u32;
/// `dcgmNvLinkLinkState_t`.
pub type dcgmNvLinkLinkState_t = u32;
/// `dcgmHealthSystems_t` (a bitmask; `DCGM_HEALTH_WATCH_ALL` is 0xFFFFFFFF).
pub type dcgmHealthSystems_t = u32;
/// `dcgmHealthWatchResults_t` (`DCGM_HEALTH_RESULT_*`: 0, 10, 20).
pub type dcgmHealthWatchResults_t = u32;
/// `dcgmNvLinkGpuP2PStatus_t` (0 OK … 6 Unknown).
pub type dcgmNvLinkGpuP2PStatus_t = u32;
/// `dcgmFieldValueEntityEnumeration_f`: called by `dcgmGetValuesSince_v2` once per (entity, field)
/// batch with `numValues` samples in time order; a non-zero return stops the enumeration.
pub type dcgmFieldValueEntityEnumeration_f = Option<
    unsafe extern "C" fn(
        dcgm_field_entity_group_t,
        dcgm_field_eid_t,
        *mut dcgmFieldValue_v1,
        c_int,
        *mut c_void,
    ) -> c_int,
>;

/// `MAKE_DCGM_VERSION(type, ver)`: `sizeof(type) | (ver << 24)`, as a 32-bit word.
pub const fn make_dcgm_version(struct_size: usize, ver: u32) -> u32 {
    (struct_size as u32) | (ver << 24)
}

// ---------------------------------------------------------------------------------------------------
// Constants
// ---------------------------------------------------------------------------------------------------

// Return codes (dcgmReturn_t).
pub const DCGM_ST_OK: dcgmReturn_t = 0;
pub const DCGM_ST_BADPARAM: dcgmReturn_t = -1;
pub const DCGM_ST_GENERIC_ERROR: dcgmReturn_t = -3;
pub const DCGM_ST_MEMORY: dcgmReturn_t = -4;
pub const DCGM_ST_NOT_CONFIGURED: dcgmReturn_t = -5;
pub const DCGM_ST_NOT_SUPPORTED: dcgmReturn_t = -6;
pub const DCGM_ST_INIT_ERROR: dcgmReturn_t = -7;
pub const DCGM_ST_NVML_ERROR: dcgmReturn_t = -8;
pub const DCGM_ST_PENDING: dcgmReturn_t = -9;
pub const DCGM_ST_UNINITIALIZED: dcgmReturn_t = -10;
pub const DCGM_ST_TIMEOUT: dcgmReturn_t = -11;
pub const DCGM_ST_VER_MISMATCH: dcgmReturn_t = -12;
pub const DCGM_ST_UNKNOWN_FIELD: dcgmReturn_t = -13;
pub const DCGM_ST_NO_DATA: dcgmReturn_t = -14;
pub const DCGM_ST_STALE_DATA: dcgmReturn_t = -15;
pub const DCGM_ST_NOT_WATCHED: dcgmReturn_t = -16;
pub const DCGM_ST_NO_PERMISSION: dcgmReturn_t = -17;
pub const DCGM_ST_GPU_IS_LOST: dcgmReturn_t = -18;
pub const DCGM_ST_RESET_REQUIRED: dcgmReturn_t = -19;
pub const DCGM_ST_FUNCTION_NOT_FOUND: dcgmReturn_t = -20;
pub const DCGM_ST_CONNECTION_NOT_VALID: dcgmReturn_t = -21;
pub const DCGM_ST_GPU_NOT_SUPPORTED: dcgmReturn_t = -22;
pub const DCGM_ST_GROUP_INCOMPATIBLE: dcgmReturn_t = -23;
pub const DCGM_ST_MAX_LIMIT: dcgmReturn_t = -24;
pub const DCGM_ST_LIBRARY_NOT_FOUND: dcgmReturn_t = -25;
pub const DCGM_ST_DUPLICATE_KEY: dcgmReturn_t = -26;
pub const DCGM_ST_REQUIRES_ROOT: dcgmReturn_t = -29;
pub const DCGM_ST_INSUFFICIENT_SIZE: dcgmReturn_t = -31;
pub const DCGM_ST_FIELD_UNSUPPORTED_BY_API: dcgmReturn_t = -32;
pub const DCGM_ST_MODULE_NOT_LOADED: dcgmReturn_t = -33;
pub const DCGM_ST_IN_USE: dcgmReturn_t = -34;
pub const DCGM_ST_GROUP_IS_EMPTY: dcgmReturn_t = -35;
pub const DCGM_ST_PROFILING_NOT_SUPPORTED: dcgmReturn_t = -36;
pub const DCGM_ST_PROFILING_LIBRARY_ERROR: dcgmReturn_t = -37;
pub const DCGM_ST_PROFILING_MULTI_PASS: dcgmReturn_t = -38;
pub const DCGM_ST_INSUFFICIENT_DRIVER_VERSION: dcgmReturn_t = -44;
pub const DCGM_ST_INSTANCE_NOT_FOUND: dcgmReturn_t = -45;
pub const DCGM_ST_COMPUTE_INSTANCE_NOT_FOUND: dcgmReturn_t = -46;
pub const DCGM_ST_INSUFFICIENT_RESOURCES: dcgmReturn_t = -49;
pub const DCGM_ST_ALREADY_INITIALIZED: dcgmReturn_t = -55;
pub const DCGM_ST_NVML_NOT_LOADED: dcgmReturn_t = -56;
pub const DCGM_ST_NVML_DRIVER_TIMEOUT: dcgmReturn_t = -57;
pub const DCGM_ST_GPUS_DETACHED: dcgmReturn_t = -67;

// Entity groups (dcgm_field_entity_group_t).
pub const DCGM_FE_NONE: dcgm_field_entity_group_t = 0;
pub const DCGM_FE_GPU: dcgm_field_entity_group_t = 1;
pub const DCGM_FE_VGPU: dcgm_field_entity_group_t = 2;
pub const DCGM_FE_SWITCH: dcgm_field_entity_group_t = 3;
pub const DCGM_FE_GPU_I: dcgm_field_entity_group_t = 4;
pub const DCGM_FE_GPU_CI: dcgm_field_entity_group_t = 5;
pub const DCGM_FE_LINK: dcgm_field_entity_group_t = 6;
pub const DCGM_FE_CPU: dcgm_field_entity_group_t = 7;
pub const DCGM_FE_CPU_CORE: dcgm_field_entity_group_t = 8;
pub const DCGM_FE_CONNECTX: dcgm_field_entity_group_t = 9;
pub const DCGM_FE_COUNT: dcgm_field_entity_group_t = 10;

// Field types (a char code widened to unsigned short in dcgmFieldValue_*::fieldType).
pub const DCGM_FT_BINARY: u8 = b'b';
pub const DCGM_FT_DOUBLE: u8 = b'd';
pub const DCGM_FT_INT64: u8 = b'i';
pub const DCGM_FT_STRING: u8 = b's';
pub const DCGM_FT_TIMESTAMP: u8 = b't';

// Field scopes.
pub const DCGM_FS_GLOBAL: c_int = 0;
pub const DCGM_FS_ENTITY: c_int = 1;
pub const DCGM_FS_DEVICE: c_int = 1;

// Flags.
pub const DCGM_FV_FLAG_LIVE_DATA: c_uint = 1;
pub const DCGM_GEGE_FLAG_ONLY_SUPPORTED: c_uint = 1;

// Blank sentinels.
pub const DCGM_INT8_BLANK: i64 = 0x70;
pub const DCGM_INT32_BLANK: i64 = 0x7fff_fff0;
pub const DCGM_INT32_NOT_FOUND: i64 = DCGM_INT32_BLANK + 1;
pub const DCGM_INT32_NOT_SUPPORTED: i64 = DCGM_INT32_BLANK + 2;
pub const DCGM_INT32_NOT_PERMISSIONED: i64 = DCGM_INT32_BLANK + 3;
pub const DCGM_INT64_BLANK: i64 = 0x7fff_ffff_ffff_fff0;
pub const DCGM_INT64_NOT_FOUND: i64 = DCGM_INT64_BLANK + 1;
pub const DCGM_INT64_NOT_SUPPORTED: i64 = DCGM_INT64_BLANK + 2;
pub const DCGM_INT64_NOT_PERMISSIONED: i64 = DCGM_INT64_BLANK + 3;
pub const DCGM_FP64_BLANK: f64 = 140_737_488_355_328.0;
pub const DCGM_FP64_NOT_FOUND: f64 = DCGM_FP64_BLANK + 1.0;
pub const DCGM_FP64_NOT_SUPPORTED: f64 = DCGM_FP64_BLANK + 2.0;
pub const DCGM_FP64_NOT_PERMISSIONED: f64 = DCGM_FP64_BLANK + 3.0;
pub const DCGM_STR_BLANK: &str = "<<<NULL>>>";
pub const DCGM_STR_NOT_FOUND: &str = "<<<NOT_FOUND>>>";
pub const DCGM_STR_NOT_SUPPORTED: &str = "<<<NOT_SUPPORTED>>>";
pub const DCGM_STR_NOT_PERMISSIONED: &str = "<<<NOT_PERM>>>";

// Special group ids (pass as dcgmGpuGrp_t).
pub const DCGM_GROUP_ALL_GPUS: dcgmGpuGrp_t = 0x7fff_ffff;
pub const DCGM_GROUP_ALL_NVSWITCHES: dcgmGpuGrp_t = 0x7fff_fffe;
pub const DCGM_GROUP_ALL_INSTANCES: dcgmGpuGrp_t = 0x7fff_fffd;
pub const DCGM_GROUP_ALL_COMPUTE_INSTANCES: dcgmGpuGrp_t = 0x7fff_fffc;
pub const DCGM_GROUP_ALL_ENTITIES: dcgmGpuGrp_t = 0x7fff_fffb;
pub const DCGM_GROUP_NULL: dcgmGpuGrp_t = 0x7fff_fffa;

// dcgmGroupType_t.
pub const DCGM_GROUP_DEFAULT: dcgmGroupType_t = 0;
pub const DCGM_GROUP_EMPTY: dcgmGroupType_t = 1;
pub const DCGM_GROUP_DEFAULT_NVSWITCHES: dcgmGroupType_t = 2;
pub const DCGM_GROUP_DEFAULT_INSTANCES: dcgmGroupType_t = 3;
pub const DCGM_GROUP_DEFAULT_COMPUTE_INSTANCES: dcgmGroupType_t = 4;
pub const DCGM_GROUP_DEFAULT_EVERYTHING: dcgmGroupType_t = 5;

// dcgmOperationMode_t.
pub const DCGM_OPERATION_MODE_AUTO: dcgmOperationMode_t = 1;
pub const DCGM_OPERATION_MODE_MANUAL: dcgmOperationMode_t = 2;

// DcgmLoggingSeverity_t.
pub const DcgmLoggingSeverityUnspecified: DcgmLoggingSeverity_t = -1;
pub const DcgmLoggingSeverityNone: DcgmLoggingSeverity_t = 0;
pub const DcgmLoggingSeverityError: DcgmLoggingSeverity_t = 2;
pub const DcgmLoggingSeverityWarning: DcgmLoggingSeverity_t = 3;
pub const DcgmLoggingSeverityInfo: DcgmLoggingSeverity_t = 4;
pub const DcgmLoggingSeverityDebug: DcgmLoggingSeverity_t = 5;

// DcgmEntityStatus_t.
pub const DcgmEntityStatusUnknown: DcgmEntityStatus_t = 0;
pub const DcgmEntityStatusOk: DcgmEntityStatus_t = 1;
pub const DcgmEntityStatusUnsupported: DcgmEntityStatus_t = 2;
pub const DcgmEntityStatusInaccessible: DcgmEntityStatus_t = 3;
pub const DcgmEntityStatusLost: DcgmEntityStatus_t = 4;
pub const DcgmEntityStatusFake: DcgmEntityStatus_t = 5;
pub const DcgmEntityStatusDisabled: DcgmEntityStatus_t = 6;
pub const DcgmEntityStatusDetached: DcgmEntityStatus_t = 7;

// dcgmModuleId_t values used in deny lists.
pub const DcgmModuleIdProfiling: c_uint = 8;

// dcgmNvLinkLinkState_t.
pub const DcgmNvLinkLinkStateNotSupported: dcgmNvLinkLinkState_t = 0;
pub const DcgmNvLinkLinkStateDisabled: dcgmNvLinkLinkState_t = 1;
pub const DcgmNvLinkLinkStateDown: dcgmNvLinkLinkState_t = 2;
pub const DcgmNvLinkLinkStateUp: dcgmNvLinkLinkState_t = 3;

// Health watches.
pub const DCGM_HEALTH_WATCH_ALL: dcgmHealthSystems_t = 0xFFFF_FFFF;
pub const DCGM_HEALTH_RESULT_PASS: dcgmHealthWatchResults_t = 0;
pub const DCGM_HEALTH_RESULT_WARN: dcgmHealthWatchResults_t = 10;
pub const DCGM_HEALTH_RESULT_FAIL: dcgmHealthWatchResults_t = 20;
pub const DCGM_HEALTH_WATCH_MAX_INCIDENTS_V2: usize = 1024;

// Limits.
pub const DCGM_MAX_NUM_DEVICES: usize = 32;
pub const DCGM_MAX_NUM_SWITCHES: usize = 12;
pub const DCGM_MAX_NUM_CPUS: usize = 8;
pub const DCGM_MAX_NUM_CPU_CORES: usize = 1024;
pub const DCGM_CPU_CORE_BITMASK_COUNT_V1: usize = DCGM_MAX_NUM_CPU_CORES / 64;
pub const DCGM_MAX_STR_LENGTH: usize = 256;
pub const DCGM_MAX_BLOB_LENGTH: usize = 4096;
pub const DCGM_MAX_CLOCKS: usize = 256;
pub const DCGM_GROUP_MAX_ENTITIES_V1: usize = 64;
pub const DCGM_GROUP_MAX_ENTITIES_V2: usize = 1024;
pub const DCGM_MAX_NUM_GROUPS: usize = 64;
pub const DCGM_MAX_NUM_FIELD_GROUPS: usize = 64;
pub const DCGM_MAX_FIELD_IDS_PER_FIELD_GROUP: usize = 128;
pub const DCGM_MAX_INSTANCES_PER_GPU: usize = 8;
pub const DCGM_MAX_COMPUTE_INSTANCES_PER_GPU: usize = 8;
pub const DCGM_MAX_TOTAL_INSTANCES_PER_GPU: usize = 14;
pub const DCGM_MAX_HIERARCHY_INFO: usize = 448;
pub const DCGM_NVLINK_MAX_LINKS_PER_GPU: usize = 36;
pub const DCGM_NVLINK_MAX_LINKS_PER_GPU_LEGACY3: usize = 18;
pub const DCGM_NVLINK_MAX_LINKS_PER_NVSWITCH: usize = 256;
pub const DCGM_MODULE_ID_COUNT_V1: usize = 10;
pub const DCGM_MODULE_ID_COUNT_V2: usize = 16;
pub const DCGM_PROF_MAX_NUM_GROUPS_V2: usize = 10;
pub const DCGM_PROF_MAX_FIELD_IDS_PER_GROUP_V2: usize = 64;
pub const DCGM_MAX_AGE_USEC_DEFAULT: i64 = 30_000_000;
pub const DCGM_HE_PORT_NUMBER: u16 = 5555;
pub const DCGM_DEFAULT_SOCKET_PATH: &str = "/tmp/nv-hostengine";
pub const DCGM_UNIX_SOCKET_PREFIX: &str = "unix://";
pub const DCGM_TCP_SOCKET_PREFIX: &str = "tcp://";
pub const DCGM_VSOCK_SOCKET_PREFIX: &str = "vsock://";
/// Not in the public headers (internal `dcgm_test_apis.h`): the handle `dcgmStartEmbedded` returns.
pub const DCGM_EMBEDDED_HANDLE: dcgmHandle_t = 0x7fff_ffff;

// ---------------------------------------------------------------------------------------------------
// Structs
// ---------------------------------------------------------------------------------------------------

/// The value union of `dcgmFieldValue_v1/_v2`. Interpret by `fieldType`.
#[repr(C)]
#[derive(Clone, Copy)]
pub union dcgmFieldValueUnion {
    pub i64: i64,
    pub dbl: f64,
    pub str: [c_char; DCGM_MAX_STR_LENGTH],
    pub blob: [c_char; DCGM_MAX_BLOB_LENGTH],
}

/// `dcgmFieldValue_v1`: one value, as filled by `dcgmEntityGetLatestValues`.
#[repr(C)]
#[derive(Clone, Copy)]
pub struct dcgmFieldValue_v1 {
    pub version: c_uint,
    pub fieldId: c_ushort,
    pub fieldType: c_ushort,
    pub status: c_int,
    pub ts: i64,
    pub value: dcgmFieldValueUnion,
}

/// `dcgmFieldValue_v2`: one value with its entity, as filled by `dcgmEntitiesGetLatestValues`.
#[repr(C)]
#[derive(Clone, Copy)]
pub struct dcgmFieldValue_v2 {
    pub version: c_uint,
    pub entityGroupId: dcgm_field_entity_group_t,
    pub entityId: dcgm_field_eid_t,
    pub fieldId: c_ushort,
    pub fieldType: c_ushort,
    pub status: c_int,
    pub unused: c_uint,
    pub ts: i64,
    pub value: dcgmFieldValueUnion,
}

/// `dcgmGroupEntityPair_t`.
#[repr(C)]
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash)]
pub struct dcgmGroupEntityPair_t {
    pub entityGroupId: dcgm_field_entity_group_t,
    pub entityId: dcgm_field_eid_t,
}

/// `dcgmConnectV2Params_v1`.
#[repr(C)]
#[derive(Clone, Copy, Debug, Default)]
pub struct dcgmConnectV2Params_v1 {
    pub version: c_uint,
    pub persistAfterDisconnect: c_uint,
}

/// `dcgmConnectV2Params_v2` (= `dcgmConnectV2Params_t`).
#[repr(C)]
#[derive(Clone, Copy, Debug, Default)]
pub struct dcgmConnectV2Params_v2 {
    pub version: c_uint,
    pub persistAfterDisconnect: c_uint,
    pub timeoutMs: c_uint,
    pub addressIsUnixSocket: c_uint,
}

/// `dcgmConnectV3Params_v1` (= `dcgmConnectV3Params_t`, DCGM ≥ 4.5).
#[repr(C)]
#[derive(Clone, Copy, Debug, Default)]
pub struct dcgmConnectV3Params_v1 {
    pub version: c_uint,
    pub persistAfterDisconnect: c_uint,
    pub timeoutMs: c_uint,
}

/// `dcgmStartEmbeddedV2Params_v1`.
#[repr(C)]
#[derive(Clone, Copy, Debug)]
pub struct dcgmStartEmbeddedV2Params_v1 {
    pub version: c_uint,
    pub opMode: dcgmOperationMode_t,
    pub dcgmHandle: dcgmHandle_t,
    pub logFile: *const c_char,
    pub severity: DcgmLoggingSeverity_t,
    pub denyListCount: c_uint,
    pub denyList: [c_uint; DCGM_MODULE_ID_COUNT_V1],
}

/// `dcgmStartEmbeddedV2Params_v2`.
#[repr(C)]
#[derive(Clone, Copy, Debug)]
pub struct dcgmStartEmbeddedV2Params_v2 {
    pub version: c_uint,
    pub opMode: dcgmOperationMode_t,
    pub dcgmHandle: dcgmHandle_t,
    pub logFile: *const c_char,
    pub severity: DcgmLoggingSeverity_t,
    pub denyListCount: c_uint,
    pub serviceAccount: *const c_char,
    pub denyList: [c_uint; DCGM_MODULE_ID_COUNT_V1],
}

/// `dcgmStartEmbeddedV2Params_v3` (DCGM ≥ 4.3).
#[repr(C)]
#[derive(Clone, Copy, Debug)]
pub struct dcgmStartEmbeddedV2Params_v3 {
    pub version: c_uint,
    pub opMode: dcgmOperationMode_t,
    pub dcgmHandle: dcgmHandle_t,
    pub logFile: *const c_char,
    pub severity: DcgmLoggingSeverity_t,
    pub denyListCount: c_uint,
    pub serviceAccount: *const c_char,
    pub denyList: [c_uint; DCGM_MODULE_ID_COUNT_V2],
}

/// `dcgmClockSet_v1` (note the signed `version`).
#[repr(C)]
#[derive(Clone, Copy, Debug, Default)]
pub struct dcgmClockSet_v1 {
    pub version: c_int,
    pub memClock: c_uint,
    pub smClock: c_uint,
}

/// `dcgmDeviceSupportedClockSets_v1`.
#[repr(C)]
#[derive(Clone, Copy, Debug)]
pub struct dcgmDeviceSupportedClockSets_v1 {
    pub version: c_uint,
    pub count: c_uint,
    pub clockSet: [dcgmClockSet_v1; DCGM_MAX_CLOCKS],
}

/// `dcgmDeviceThermals_v1`.
#[repr(C)]
#[derive(Clone, Copy, Debug, Default)]
pub struct dcgmDeviceThermals_v1 {
    pub version: c_uint,
    pub slowdownTemp: c_uint,
    pub shutdownTemp: c_uint,
}

/// `dcgmDevicePowerLimits_v1` (watts).
#[repr(C)]
#[derive(Clone, Copy, Debug, Default)]
pub struct dcgmDevicePowerLimits_v1 {
    pub version: c_uint,
    pub curPowerLimit: c_uint,
    pub defaultPowerLimit: c_uint,
    pub enforcedPowerLimit: c_uint,
    pub minPowerLimit: c_uint,
    pub maxPowerLimit: c_uint,
}

/// `dcgmDeviceIdentifiers_v1`: UUID, names, PCI bus id, driver version.
#[repr(C)]
#[derive(Clone, Copy, Debug)]
pub struct dcgmDeviceIdentifiers_v1 {
    pub version: c_uint,
    pub brandName: [c_char; DCGM_MAX_STR_LENGTH],
    pub deviceName: [c_char; DCGM_MAX_STR_LENGTH],
    pub pciBusId: [c_char; DCGM_MAX_STR_LENGTH],
    pub serial: [c_char; DCGM_MAX_STR_LENGTH],
    pub uuid: [c_char; DCGM_MAX_STR_LENGTH],
    pub vbios: [c_char; DCGM_MAX_STR_LENGTH],
    pub inforomImageVersion: [c_char; DCGM_MAX_STR_LENGTH],
    pub pciDeviceId: c_uint,
    pub pciSubSystemId: c_uint,
    pub driverVersion: [c_char; DCGM_MAX_STR_LENGTH],
    pub virtualizationMode: c_uint,
}

/// `dcgmDeviceMemoryUsage_v1` (MB).
#[repr(C)]
#[derive(Clone, Copy, Debug, Default)]
pub struct dcgmDeviceMemoryUsage_v1 {
    pub version: c_uint,
    pub bar1Total: c_uint,
    pub fbTotal: c_uint,
    pub fbUsed: c_uint,
    pub fbFree: c_uint,
}

/// `dcgmDeviceSettings_v2`.
#[repr(C)]
#[derive(Clone, Copy, Debug, Default)]
pub struct dcgmDeviceSettings_v2 {
    pub version: c_uint,
    pub persistenceModeEnabled: c_uint,
    pub migModeEnabled: c_uint,
    pub confidentialComputeMode: c_uint,
}

/// `dcgmDeviceAttributes_v3` (= `dcgmDeviceAttributes_t`). 5220 bytes: heap-allocate.
#[repr(C)]
#[derive(Clone, Copy, Debug)]
pub struct dcgmDeviceAttributes_v3 {
    pub version: c_uint,
    pub clockSets: dcgmDeviceSupportedClockSets_v1,
    pub thermalSettings: dcgmDeviceThermals_v1,
    pub powerLimits: dcgmDevicePowerLimits_v1,
    pub identifiers: dcgmDeviceIdentifiers_v1,
    pub memoryUsage: dcgmDeviceMemoryUsage_v1,
    pub settings: dcgmDeviceSettings_v2,
}

/// `dcgmMigEntityInfo_t`.
#[repr(C)]
#[derive(Clone, Copy, Debug)]
pub struct dcgmMigEntityInfo_t {
    pub gpuUuid: [c_char; 128],
    pub nvmlGpuIndex: c_uint,
    pub nvmlInstanceId: c_uint,
    pub nvmlComputeInstanceId: c_uint,
    pub nvmlMigProfileId: c_uint,
    pub nvmlProfileSlices: c_uint,
}

/// `dcgmMigHierarchyInfo_v2`: one GPU-instance or compute-instance row.
#[repr(C)]
#[derive(Clone, Copy, Debug)]
pub struct dcgmMigHierarchyInfo_v2 {
    pub entity: dcgmGroupEntityPair_t,
    pub parent: dcgmGroupEntityPair_t,
    pub info: dcgmMigEntityInfo_t,
}

/// `dcgmMigHierarchy_v2`. 73,480 bytes: heap-allocate ([`Pod::boxed_zeroed`]).
#[repr(C)]
#[derive(Clone, Copy, Debug)]
pub struct dcgmMigHierarchy_v2 {
    pub version: c_uint,
    pub count: c_uint,
    pub entityList: [dcgmMigHierarchyInfo_v2; DCGM_MAX_HIERARCHY_INFO],
}

/// `dcgmNvLinkGpuLinkStatus_v3` (18 links; inside `dcgmNvLinkStatus_v4`).
#[repr(C)]
#[derive(Clone, Copy, Debug)]
pub struct dcgmNvLinkGpuLinkStatus_v3 {
    pub entityId: dcgm_field_eid_t,
    pub linkState: [dcgmNvLinkLinkState_t; DCGM_NVLINK_MAX_LINKS_PER_GPU_LEGACY3],
}

/// `dcgmNvLinkGpuLinkStatus_v4` (36 links; inside `dcgmNvLinkStatus_v5`).
#[repr(C)]
#[derive(Clone, Copy, Debug)]
pub struct dcgmNvLinkGpuLinkStatus_v4 {
    pub entityId: dcgm_field_eid_t,
    pub linkState: [dcgmNvLinkLinkState_t; DCGM_NVLINK_MAX_LINKS_PER_GPU],
}

/// `dcgmNvLinkNvSwitchLinkStatus_t`.
#[repr(C)]
#[derive(Clone, Copy, Debug)]
pub struct dcgmNvLinkNvSwitchLinkStatus_t {
    pub entityId: dcgm_field_eid_t,
    pub linkState: [dcgmNvLinkLinkState_t; DCGM_NVLINK_MAX_LINKS_PER_NVSWITCH],
}

/// `dcgmNvLinkStatus_v4` (DCGM 4.0–4.6).
#[repr(C)]
#[derive(Clone, Copy, Debug)]
pub struct dcgmNvLinkStatus_v4 {
    pub version: c_uint,
    pub numGpus: c_uint,
    pub gpus: [dcgmNvLinkGpuLinkStatus_v3; DCGM_MAX_NUM_DEVICES],
    pub numNvSwitches: c_uint,
    pub nvSwitches: [dcgmNvLinkNvSwitchLinkStatus_t; DCGM_MAX_NUM_SWITCHES],
}

/// `dcgmNvLinkStatus_v5` (DCGM ≥ 4.6 only).
#[repr(C)]
#[derive(Clone, Copy, Debug)]
pub struct dcgmNvLinkStatus_v5 {
    pub version: c_uint,
    pub numGpus: c_uint,
    pub gpus: [dcgmNvLinkGpuLinkStatus_v4; DCGM_MAX_NUM_DEVICES],
    pub numNvSwitches: c_uint,
    pub nvSwitches: [dcgmNvLinkNvSwitchLinkStatus_t; DCGM_MAX_NUM_SWITCHES],
}

/// `dcgmNvLinkGpuLinkP2PStatus_v1`: one GPU's P2P status towards every GPU id (inside
/// `dcgmNvLinkP2PStatus_v1`).
#[repr(C)]
#[derive(Clone, Copy, Debug)]
pub struct dcgmNvLinkGpuLinkP2PStatus_v1 {
    pub entityId: dcgm_field_eid_t,
    pub linkStatus: [dcgmNvLinkGpuP2PStatus_t; DCGM_MAX_NUM_DEVICES],
}

/// `dcgmNvLinkP2PStatus_v1` (`dcgmGetNvLinkP2PStatus`, DCGM ≥ 4.3; `numGpus` 0 in = all GPUs).
#[repr(C)]
#[derive(Clone, Copy, Debug)]
pub struct dcgmNvLinkP2PStatus_v1 {
    pub version: c_uint,
    pub numGpus: c_uint,
    pub gpus: [dcgmNvLinkGpuLinkP2PStatus_v1; DCGM_MAX_NUM_DEVICES],
}

/// `dcgmDiagErrorDetail_t`: a health incident's message and `DCGM_FR_*` code.
#[repr(C)]
#[derive(Clone, Copy, Debug)]
pub struct dcgmDiagErrorDetail_t {
    /// `char msg[1024]` (the header spells the length as a literal).
    pub msg: [c_char; 1024],
    pub code: c_uint,
}

/// `dcgmIncidentInfo_t`: one health incident.
#[repr(C)]
#[derive(Clone, Copy, Debug)]
pub struct dcgmIncidentInfo_t {
    pub system: dcgmHealthSystems_t,
    pub health: dcgmHealthWatchResults_t,
    pub error: dcgmDiagErrorDetail_t,
    pub entityInfo: dcgmGroupEntityPair_t,
}

/// `dcgmHealthResponse_v5` (1,069,068 bytes: always on the heap).
#[repr(C)]
#[derive(Clone, Copy, Debug)]
pub struct dcgmHealthResponse_v5 {
    pub version: c_uint,
    pub overallHealth: dcgmHealthWatchResults_t,
    pub incidentCount: c_uint,
    pub incidents: [dcgmIncidentInfo_t; DCGM_HEALTH_WATCH_MAX_INCIDENTS_V2],
}

/// `dcgmCpuHierarchyOwnedCores_v1`: bit n of the mask = CPU core n owned.
#[repr(C)]
#[derive(Clone, Copy, Debug)]
pub struct dcgmCpuHierarchyOwnedCores_v1 {
    pub version: c_uint,
    pub bitmask: [u64; DCGM_CPU_CORE_BITMASK_COUNT_V1],
}

/// `dcgmCpuHierarchyCpu_v1`: one CPU of `dcgmCpuHierarchy_v1`.
#[repr(C)]
#[derive(Clone, Copy, Debug)]
pub struct dcgmCpuHierarchyCpu_v1 {
    pub cpuId: c_uint,
    pub ownedCores: dcgmCpuHierarchyOwnedCores_v1,
}

/// `dcgmCpuHierarchy_v1` (`dcgmGetCpuHierarchy`).
#[repr(C)]
#[derive(Clone, Copy, Debug)]
pub struct dcgmCpuHierarchy_v1 {
    pub version: c_uint,
    pub numCpus: c_uint,
    pub cpus: [dcgmCpuHierarchyCpu_v1; DCGM_MAX_NUM_CPUS],
}

/// `dcgmCpuHierarchyCpu_v2`: one CPU of `dcgmCpuHierarchy_v2`, with its serial number.
#[repr(C)]
#[derive(Clone, Copy, Debug)]
pub struct dcgmCpuHierarchyCpu_v2 {
    pub cpuId: c_uint,
    pub ownedCores: dcgmCpuHierarchyOwnedCores_v1,
    pub serial: [c_char; DCGM_MAX_STR_LENGTH],
}

/// `dcgmCpuHierarchy_v2` (`dcgmGetCpuHierarchy_v2`, DCGM ≥ 4.0).
#[repr(C)]
#[derive(Clone, Copy, Debug)]
pub struct dcgmCpuHierarchy_v2 {
    pub version: c_uint,
    pub numCpus: c_uint,
    pub cpus: [dcgmCpuHierarchyCpu_v2; DCGM_MAX_NUM_CPUS],
}

/// `dcgm_field_output_format_t`.
#[repr(C)]
#[derive(Clone, Copy, Debug)]
pub struct dcgm_field_output_format_t {
    pub shortName: [c_char; 10],
    pub unit: [c_char; 4],
    pub width: i16,
}

/// `dcgm_field_meta_t` (returned by `DcgmFieldGetById`; library-owned).
#[repr(C)]
#[derive(Clone, Copy, Debug)]
pub struct dcgm_field_meta_t {
    pub fieldId: c_ushort,
    pub fieldType: c_char,
    pub size: u8,
    pub tag: [c_char; 48],
    pub scope: c_int,
    pub nvmlFieldId: c_int,
    pub entityLevel: dcgm_field_entity_group_t,
    pub valueFormat: *mut dcgm_field_output_format_t,
}

/// `dcgmFieldGroupInfo_v1`.
#[repr(C)]
#[derive(Clone, Copy, Debug)]
pub struct dcgmFieldGroupInfo_v1 {
    pub version: c_uint,
    pub numFieldIds: c_uint,
    pub fieldGroupId: dcgmFieldGrp_t,
    pub fieldGroupName: [c_char; DCGM_MAX_STR_LENGTH],
    pub fieldIds: [c_ushort; DCGM_MAX_FIELD_IDS_PER_FIELD_GROUP],
}

/// `dcgmGroupInfo_v3` (= `dcgmGroupInfo_t` in 4.x).
#[repr(C)]
#[derive(Clone, Copy, Debug)]
pub struct dcgmGroupInfo_v3 {
    pub version: c_uint,
    pub count: c_uint,
    pub groupName: [c_char; DCGM_MAX_STR_LENGTH],
    pub entityList: [dcgmGroupEntityPair_t; DCGM_GROUP_MAX_ENTITIES_V2],
}

/// `dcgmProfMetricGroupInfo_v2`.
#[repr(C)]
#[derive(Clone, Copy, Debug)]
pub struct dcgmProfMetricGroupInfo_v2 {
    pub majorId: c_ushort,
    pub minorId: c_ushort,
    pub numFieldIds: c_uint,
    pub fieldIds: [c_ushort; DCGM_PROF_MAX_FIELD_IDS_PER_GROUP_V2],
}

/// `dcgmProfGetMetricGroups_v3` (= `dcgmProfGetMetricGroups_t`).
#[repr(C)]
#[derive(Clone, Copy, Debug)]
pub struct dcgmProfGetMetricGroups_v3 {
    pub version: c_uint,
    pub unused: c_uint,
    pub gpuId: c_uint,
    pub numMetricGroups: c_uint,
    pub metricGroups: [dcgmProfMetricGroupInfo_v2; DCGM_PROF_MAX_NUM_GROUPS_V2],
}

/// `dcgmVersionInfo_v2`.
#[repr(C)]
#[derive(Clone, Copy, Debug)]
pub struct dcgmVersionInfo_v2 {
    pub version: c_uint,
    pub rawBuildInfoString: [c_char; 512],
}

/// `dcgmHostengineHealth_v1`.
#[repr(C)]
#[derive(Clone, Copy, Debug, Default)]
pub struct dcgmHostengineHealth_v1 {
    pub version: c_uint,
    pub overallHealth: c_uint,
}

// ---------------------------------------------------------------------------------------------------
// Version words (MAKE_DCGM_VERSION)
// ---------------------------------------------------------------------------------------------------

pub const dcgmFieldValue_version1: u32 = make_dcgm_version(size_of::<dcgmFieldValue_v1>(), 1);
pub const dcgmFieldValue_version2: u32 = make_dcgm_version(size_of::<dcgmFieldValue_v2>(), 2);
pub const dcgmConnectV2Params_version1: u32 =
    make_dcgm_version(size_of::<dcgmConnectV2Params_v1>(), 1);
pub const dcgmConnectV2Params_version2: u32 =
    make_dcgm_version(size_of::<dcgmConnectV2Params_v2>(), 2);
pub const dcgmConnectV2Params_version: u32 = dcgmConnectV2Params_version2;
pub const dcgmConnectV3Params_version1: u32 =
    make_dcgm_version(size_of::<dcgmConnectV3Params_v1>(), 1);
pub const dcgmConnectV3Params_version: u32 = dcgmConnectV3Params_version1;
pub const dcgmStartEmbeddedV2Params_version1: u32 =
    make_dcgm_version(size_of::<dcgmStartEmbeddedV2Params_v1>(), 1);
pub const dcgmStartEmbeddedV2Params_version2: u32 =
    make_dcgm_version(size_of::<dcgmStartEmbeddedV2Params_v2>(), 2);
pub const dcgmStartEmbeddedV2Params_version3: u32 =
    make_dcgm_version(size_of::<dcgmStartEmbeddedV2Params_v3>(), 3);
pub const dcgmStartEmbeddedV2Params_version: u32 = dcgmStartEmbeddedV2Params_version3;
pub const dcgmClockSet_version1: u32 = make_dcgm_version(size_of::<dcgmClockSet_v1>(), 1);
pub const dcgmDeviceSupportedClockSets_version1: u32 =
    make_dcgm_version(size_of::<dcgmDeviceSupportedClockSets_v1>(), 1);
pub const dcgmDeviceThermals_version1: u32 =
    make_dcgm_version(size_of::<dcgmDeviceThermals_v1>(), 1);
pub const dcgmDevicePowerLimits_version1: u32 =
    make_dcgm_version(size_of::<dcgmDevicePowerLimits_v1>(), 1);
pub const dcgmDeviceIdentifiers_version1: u32 =
    make_dcgm_version(size_of::<dcgmDeviceIdentifiers_v1>(), 1);
pub const dcgmDeviceMemoryUsage_version1: u32 =
    make_dcgm_version(size_of::<dcgmDeviceMemoryUsage_v1>(), 1);
pub const dcgmDeviceSettings_version2: u32 =
    make_dcgm_version(size_of::<dcgmDeviceSettings_v2>(), 2);
pub const dcgmDeviceAttributes_version3: u32 =
    make_dcgm_version(size_of::<dcgmDeviceAttributes_v3>(), 3);
pub const dcgmDeviceAttributes_version: u32 = dcgmDeviceAttributes_version3;
pub const dcgmMigHierarchy_version2: u32 = make_dcgm_version(size_of::<dcgmMigHierarchy_v2>(), 2);
pub const dcgmMigHierarchy_version: u32 = dcgmMigHierarchy_version2;
pub const dcgmNvLinkStatus_version4: u32 = make_dcgm_version(size_of::<dcgmNvLinkStatus_v4>(), 4);
pub const dcgmNvLinkStatus_version5: u32 = make_dcgm_version(size_of::<dcgmNvLinkStatus_v5>(), 5);
pub const dcgmCpuHierarchyOwnedCores_version1: u32 =
    make_dcgm_version(size_of::<dcgmCpuHierarchyOwnedCores_v1>(), 1);
pub const dcgmCpuHierarchy_version1: u32 = make_dcgm_version(size_of::<dcgmCpuHierarchy_v1>(), 1);
pub const dcgmCpuHierarchy_version2: u32 = make_dcgm_version(size_of::<dcgmCpuHierarchy_v2>(), 2);
pub const dcgmCpuHierarchy_version: u32 = dcgmCpuHierarchy_version2;
pub const dcgmFieldGroupInfo_version1: u32 =
    make_dcgm_version(size_of::<dcgmFieldGroupInfo_v1>(), 1);
pub const dcgmGroupInfo_version3: u32 = make_dcgm_version(size_of::<dcgmGroupInfo_v3>(), 3);
pub const dcgmProfGetMetricGroups_version3: u32 =
    make_dcgm_version(size_of::<dcgmProfGetMetricGroups_v3>(), 3);
pub const dcgmProfGetMetricGroups_version: u32 = dcgmProfGetMetricGroups_version3;
pub const dcgmVersionInfo_version2: u32 = make_dcgm_version(size_of::<dcgmVersionInfo_v2>(), 2);
pub const dcgmVersionInfo_version: u32 = dcgmVersionInfo_version2;
pub const dcgmHostengineHealth_version1: u32 =
    make_dcgm_version(size_of::<dcgmHostengineHealth_v1>(), 1);
pub const dcgmHostengineHealth_version: u32 = dcgmHostengineHealth_version1;
pub const dcgmHealthResponse_version5: u32 =
    make_dcgm_version(size_of::<dcgmHealthResponse_v5>(), 5);
pub const dcgmNvLinkP2PStatus_version1: u32 =
    make_dcgm_version(size_of::<dcgmNvLinkP2PStatus_v1>(), 1);

// ---------------------------------------------------------------------------------------------------
// Plain-old-data helpers: zeroed (heap) allocation, union access, C char arrays
// ---------------------------------------------------------------------------------------------------

/// Marker for the `#[repr(C)]` structs above: every field is an integer, float, raw pointer, array or
/// union of those, so the all-zero bit pattern is a valid value.
///
/// # Safety
/// Implement only for types for which all-zero bytes are a valid value.
pub unsafe trait Pod: Copy + Sized {
    /// An all-zero value (pointers null, strings empty, counts 0).
    fn zeroed() -> Self {
        // SAFETY: the implementor guarantees (trait contract) that all-zero bytes are a valid `Self`.
        unsafe { std::mem::MaybeUninit::<Self>::zeroed().assume_init() }
    }

    /// An all-zero value on the heap, never touching the stack (for the 72 KiB MIG hierarchy etc.).
    fn boxed_zeroed() -> Box<Self> {
        let layout = std::alloc::Layout::new::<Self>();
        if layout.size() == 0 {
            return Box::new(Self::zeroed());
        }
        // SAFETY: `layout` has a non-zero size; `alloc_zeroed` returns NULL or memory with Self's size
        // and alignment, all bytes zero, which is a valid `Self` by the trait contract. `Box::from_raw`
        // takes ownership of memory from the global allocator allocated with `Layout::new::<Self>()`,
        // which is exactly what Box deallocates with.
        unsafe {
            let p = std::alloc::alloc_zeroed(layout).cast::<Self>();
            if p.is_null() {
                std::alloc::handle_alloc_error(layout);
            }
            Box::from_raw(p)
        }
    }
}

macro_rules! impl_pod {
    ($($t:ty),* $(,)?) => {
        $(
            // SAFETY: a #[repr(C)] struct of integers, floats, raw pointers, and arrays/unions/structs of
            // those; the all-zero pattern is valid for each of them.
            unsafe impl Pod for $t {}
        )*
    };
}

impl_pod!(
    dcgmFieldValueUnion,
    dcgmFieldValue_v1,
    dcgmFieldValue_v2,
    dcgmGroupEntityPair_t,
    dcgmConnectV2Params_v1,
    dcgmConnectV2Params_v2,
    dcgmConnectV3Params_v1,
    dcgmStartEmbeddedV2Params_v1,
    dcgmStartEmbeddedV2Params_v2,
    dcgmStartEmbeddedV2Params_v3,
    dcgmClockSet_v1,
    dcgmDeviceSupportedClockSets_v1,
    dcgmDeviceThermals_v1,
    dcgmDevicePowerLimits_v1,
    dcgmDeviceIdentifiers_v1,
    dcgmDeviceMemoryUsage_v1,
    dcgmDeviceSettings_v2,
    dcgmDeviceAttributes_v3,
    dcgmMigEntityInfo_t,
    dcgmMigHierarchyInfo_v2,
    dcgmMigHierarchy_v2,
    dcgmNvLinkGpuLinkStatus_v3,
    dcgmNvLinkGpuLinkStatus_v4,
    dcgmNvLinkNvSwitchLinkStatus_t,
    dcgmNvLinkStatus_v4,
    dcgmNvLinkStatus_v5,
    dcgmCpuHierarchyOwnedCores_v1,
    dcgmCpuHierarchyCpu_v1,
    dcgmCpuHierarchy_v1,
    dcgmCpuHierarchyCpu_v2,
    dcgmCpuHierarchy_v2,
    dcgm_field_output_format_t,
    dcgm_field_meta_t,
    dcgmFieldGroupInfo_v1,
    dcgmGroupInfo_v3,
    dcgmProfMetricGroupInfo_v2,
    dcgmProfGetMetricGroups_v3,
    dcgmVersionInfo_v2,
    dcgmHostengineHealth_v1,
    dcgmNvLinkGpuLinkP2PStatus_v1,
    dcgmNvLinkP2PStatus_v1,
    dcgmDiagErrorDetail_t,
    dcgmIncidentInfo_t,
    dcgmHealthResponse_v5,
);

/// The text of a NUL-terminated C char array (up to the first NUL, or the whole array), lossy UTF-8.
pub fn chars_to_string(chars: &[c_char]) -> String {
    let bytes: Vec<u8> = chars
        .iter()
        .take_while(|&&c| c != 0)
        .map(|&c| c as u8)
        .collect();
    String::from_utf8_lossy(&bytes).into_owned()
}

/// Copy `s` into a C char array, truncating to `dst.len() - 1` bytes and NUL-terminating; the rest of
/// `dst` is zeroed.
pub fn write_chars(dst: &mut [c_char], s: &str) {
    let n = s.len().min(dst.len().saturating_sub(1));
    for (d, &b) in dst.iter_mut().zip(&s.as_bytes()[..n]) {
        *d = b as c_char;
    }
    for d in dst.iter_mut().skip(n) {
        *d = 0;
    }
}

impl dcgmFieldValue_v2 {
    /// A value built from raw bytes laid out as the C struct (`bytes` shorter than the struct leave the
    /// rest zero; longer ones are cut). The seam that lets `fuzz/` hand arbitrary structs — any status,
    /// type, sentinel, a string without its NUL — to the decoder exactly as the library would.
    pub fn from_bytes(bytes: &[u8]) -> Box<dcgmFieldValue_v2> {
        let mut value = dcgmFieldValue_v2::boxed_zeroed();
        let n = bytes.len().min(std::mem::size_of::<dcgmFieldValue_v2>());
        // SAFETY: the destination is a live, exclusively borrowed `dcgmFieldValue_v2` of
        // `size_of::<dcgmFieldValue_v2>()` bytes and `n` is at most that; the source is `n` readable
        // bytes of a distinct allocation. Every field is an integer, a float or a byte array (no padding
        // holds an invariant), so any byte pattern is a valid value.
        unsafe {
            std::ptr::copy_nonoverlapping(
                bytes.as_ptr(),
                std::ptr::from_mut::<dcgmFieldValue_v2>(&mut *value).cast::<u8>(),
                n,
            );
        }
        value
    }
}

impl dcgmFieldValueUnion {
    /// The value as `int64_t` (fieldType 'i' or 't').
    pub fn as_i64(&self) -> i64 {
        // SAFETY: every variant is plain bytes and every 8-byte pattern is a valid i64.
        unsafe { self.i64 }
    }

    /// The value as `double` (fieldType 'd').
    pub fn as_f64(&self) -> f64 {
        // SAFETY: every variant is plain bytes and every 8-byte pattern is a valid f64.
        unsafe { self.dbl }
    }

    /// The string value (fieldType 's'), up to the first NUL within 256 bytes, lossy UTF-8.
    pub fn as_string(&self) -> String {
        // SAFETY: every variant is plain bytes and every byte pattern is a valid c_char array.
        let chars = unsafe { &self.str };
        chars_to_string(chars)
    }

    /// The raw 4096 bytes (fieldType 'b').
    pub fn as_blob(&self) -> &[c_char; DCGM_MAX_BLOB_LENGTH] {
        // SAFETY: the union is 4096 bytes; every byte pattern is a valid c_char array.
        unsafe { &self.blob }
    }

    /// Set the integer variant (the rest of the union is left as is).
    pub fn set_i64(&mut self, v: i64) {
        self.i64 = v;
    }

    /// Set the double variant.
    pub fn set_f64(&mut self, v: f64) {
        self.dbl = v;
    }

    /// Set the string variant (truncated to 255 bytes, NUL-terminated, rest of the 256 bytes zeroed).
    pub fn set_string(&mut self, s: &str) {
        let mut buf = [0 as c_char; DCGM_MAX_STR_LENGTH];
        write_chars(&mut buf, s);
        self.str = buf;
    }
}

// ---------------------------------------------------------------------------------------------------
// C function types (the real signatures of DCGM 4.6.0 dcgm_agent.h / dcgm_fields.h / dcgm_structs.h)
// ---------------------------------------------------------------------------------------------------

/// One `unsafe extern "C" fn` type alias per C function, named exactly like the C symbol. The fake
/// library type-checks its exports against these (`const _: fn_types::dcgmInit = dcgmInit;`).
pub mod fn_types {
    use super::*;

    pub type dcgmInit = unsafe extern "C" fn() -> dcgmReturn_t;
    pub type dcgmShutdown = unsafe extern "C" fn() -> dcgmReturn_t;
    pub type dcgmStartEmbedded =
        unsafe extern "C" fn(dcgmOperationMode_t, *mut dcgmHandle_t) -> dcgmReturn_t;
    /// Declared with the v1 params type; the library reads `version` and accepts v1, v2 or v3.
    pub type dcgmStartEmbedded_v2 =
        unsafe extern "C" fn(*mut dcgmStartEmbeddedV2Params_v1) -> dcgmReturn_t;
    pub type dcgmStopEmbedded = unsafe extern "C" fn(dcgmHandle_t) -> dcgmReturn_t;
    pub type dcgmConnect_v2 = unsafe extern "C" fn(
        *const c_char,
        *mut dcgmConnectV2Params_v2,
        *mut dcgmHandle_t,
    ) -> dcgmReturn_t;
    pub type dcgmConnect_v3 = unsafe extern "C" fn(
        *const c_char,
        *mut dcgmConnectV3Params_v1,
        *mut dcgmHandle_t,
    ) -> dcgmReturn_t;
    pub type dcgmDisconnect = unsafe extern "C" fn(dcgmHandle_t) -> dcgmReturn_t;
    pub type dcgmGetValuesSince_v2 = unsafe extern "C" fn(
        dcgmHandle_t,
        dcgmGpuGrp_t,
        dcgmFieldGrp_t,
        c_longlong,
        *mut c_longlong,
        dcgmFieldValueEntityEnumeration_f,
        *mut c_void,
    ) -> dcgmReturn_t;
    pub type dcgmHealthSet =
        unsafe extern "C" fn(dcgmHandle_t, dcgmGpuGrp_t, dcgmHealthSystems_t) -> dcgmReturn_t;
    pub type dcgmHealthCheck = unsafe extern "C" fn(
        dcgmHandle_t,
        dcgmGpuGrp_t,
        *mut dcgmHealthResponse_v5,
    ) -> dcgmReturn_t;
    pub type dcgmGetNvLinkP2PStatus =
        unsafe extern "C" fn(dcgmHandle_t, *mut dcgmNvLinkP2PStatus_v1) -> dcgmReturn_t;
    pub type dcgmGetAllDevices =
        unsafe extern "C" fn(dcgmHandle_t, *mut c_uint, *mut c_int) -> dcgmReturn_t;
    pub type dcgmGetAllSupportedDevices =
        unsafe extern "C" fn(dcgmHandle_t, *mut c_uint, *mut c_int) -> dcgmReturn_t;
    pub type dcgmGetDeviceAttributes =
        unsafe extern "C" fn(dcgmHandle_t, c_uint, *mut dcgmDeviceAttributes_v3) -> dcgmReturn_t;
    pub type dcgmGetEntityGroupEntities = unsafe extern "C" fn(
        dcgmHandle_t,
        dcgm_field_entity_group_t,
        *mut dcgm_field_eid_t,
        *mut c_int,
        c_uint,
    ) -> dcgmReturn_t;
    pub type dcgmGetGpuInstanceHierarchy =
        unsafe extern "C" fn(dcgmHandle_t, *mut dcgmMigHierarchy_v2) -> dcgmReturn_t;
    /// Declared with the v5 type; the library reads `version` and accepts v4 or v5 (4.6+).
    pub type dcgmGetNvLinkLinkStatus =
        unsafe extern "C" fn(dcgmHandle_t, *mut dcgmNvLinkStatus_v5) -> dcgmReturn_t;
    pub type dcgmGetCpuHierarchy =
        unsafe extern "C" fn(dcgmHandle_t, *mut dcgmCpuHierarchy_v1) -> dcgmReturn_t;
    pub type dcgmGetCpuHierarchy_v2 =
        unsafe extern "C" fn(dcgmHandle_t, *mut dcgmCpuHierarchy_v2) -> dcgmReturn_t;
    pub type dcgmGroupCreate = unsafe extern "C" fn(
        dcgmHandle_t,
        dcgmGroupType_t,
        *const c_char,
        *mut dcgmGpuGrp_t,
    ) -> dcgmReturn_t;
    pub type dcgmGroupAddEntity = unsafe extern "C" fn(
        dcgmHandle_t,
        dcgmGpuGrp_t,
        dcgm_field_entity_group_t,
        dcgm_field_eid_t,
    ) -> dcgmReturn_t;
    pub type dcgmGroupDestroy = unsafe extern "C" fn(dcgmHandle_t, dcgmGpuGrp_t) -> dcgmReturn_t;
    pub type dcgmFieldGroupCreate = unsafe extern "C" fn(
        dcgmHandle_t,
        c_int,
        *const c_ushort,
        *const c_char,
        *mut dcgmFieldGrp_t,
    ) -> dcgmReturn_t;
    pub type dcgmFieldGroupDestroy =
        unsafe extern "C" fn(dcgmHandle_t, dcgmFieldGrp_t) -> dcgmReturn_t;
    pub type dcgmWatchFields = unsafe extern "C" fn(
        dcgmHandle_t,
        dcgmGpuGrp_t,
        dcgmFieldGrp_t,
        i64,
        f64,
        c_int,
    ) -> dcgmReturn_t;
    pub type dcgmUnwatchFields =
        unsafe extern "C" fn(dcgmHandle_t, dcgmGpuGrp_t, dcgmFieldGrp_t) -> dcgmReturn_t;
    pub type dcgmUpdateAllFields = unsafe extern "C" fn(dcgmHandle_t, c_int) -> dcgmReturn_t;
    pub type dcgmEntityGetLatestValues = unsafe extern "C" fn(
        dcgmHandle_t,
        dcgm_field_entity_group_t,
        c_int,
        *mut c_ushort,
        c_uint,
        *mut dcgmFieldValue_v1,
    ) -> dcgmReturn_t;
    pub type dcgmEntitiesGetLatestValues = unsafe extern "C" fn(
        dcgmHandle_t,
        *mut dcgmGroupEntityPair_t,
        c_uint,
        *mut c_ushort,
        c_uint,
        c_uint,
        *mut dcgmFieldValue_v2,
    ) -> dcgmReturn_t;
    pub type dcgmProfGetSupportedMetricGroups =
        unsafe extern "C" fn(dcgmHandle_t, *mut dcgmProfGetMetricGroups_v3) -> dcgmReturn_t;
    pub type dcgmHostengineIsHealthy =
        unsafe extern "C" fn(dcgmHandle_t, *mut dcgmHostengineHealth_v1) -> dcgmReturn_t;
    pub type dcgmVersionInfo = unsafe extern "C" fn(*mut dcgmVersionInfo_v2) -> dcgmReturn_t;
    pub type errorString = unsafe extern "C" fn(dcgmReturn_t) -> *const c_char;
    pub type DcgmFieldGetById = unsafe extern "C" fn(c_ushort) -> *const dcgm_field_meta_t;
}

// ---------------------------------------------------------------------------------------------------
// Symbol table
// ---------------------------------------------------------------------------------------------------

/// Why libdcgm could not be loaded.
#[derive(Debug, thiserror::Error)]
pub enum LoadError {
    /// `dlopen` failed for every candidate name.
    #[error("cannot load libdcgm (tried {tried}): {last}")]
    NotFound { tried: String, last: String },
    /// The library loaded but lacks a function every supported DCGM 4.x exports.
    #[error("{library} has no symbol {symbol}: {source}")]
    MissingSymbol {
        library: String,
        symbol: &'static str,
        source: libloading::Error,
    },
}

/// What [`Symbols::load_default`] tries, in order (dcgm-abi.md §1).
pub const DEFAULT_LIBRARY_NAMES: &[&str] = &["libdcgm.so.4", "libdcgm.so"];

macro_rules! symbols {
    (required: [$($req:ident),* $(,)?] optional: [$($opt:ident),* $(,)?]) => {
        /// The C functions of a loaded libdcgm, with the library kept open as long as this lives.
        ///
        /// Functions are private; call them through the safe methods below (each one a 1:1 wrapper that
        /// returns the raw `dcgmReturn_t`). Optional symbols (absent from older 4.x releases) make their
        /// wrapper return [`DCGM_ST_FUNCTION_NOT_FOUND`].
        pub struct Symbols {
            $( $req: fn_types::$req, )*
            $( $opt: Option<fn_types::$opt>, )*
            /// Keeps the function pointers above valid; dropped last (declared last).
            _library: libloading::Library,
            path: String,
        }

        /// Functions every supported libdcgm.so.4 must export.
        pub const REQUIRED_SYMBOLS: &[&str] = &[$(stringify!($req)),*];
        /// Functions used when present.
        pub const OPTIONAL_SYMBOLS: &[&str] = &[$(stringify!($opt)),*];

        impl Symbols {
            fn resolve(library: libloading::Library, path: String) -> Result<Self, LoadError> {
                $(
                    // SAFETY: the symbol is looked up by its exact C name and typed with the C signature
                    // from dcgm_agent.h (fn_types); the copied pointer is only called while `_library`
                    // (moved into the returned struct) keeps the library mapped.
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
                    // SAFETY: as above; absence is allowed for optional symbols.
                    let $opt: Option<fn_types::$opt> = unsafe {
                        library
                            .get::<fn_types::$opt>(concat!(stringify!($opt), "\0").as_bytes())
                            .ok()
                            .map(|sym| *sym)
                    };
                )*
                Ok(Symbols { $($req,)* $($opt,)* _library: library, path })
            }

            /// Whether an optional symbol was found.
            pub fn has(&self, name: &str) -> bool {
                match name {
                    $( stringify!($opt) => self.$opt.is_some(), )*
                    $( stringify!($req) => true, )*
                    _ => false,
                }
            }
        }
    };
}

symbols!(
    required: [
        dcgmInit,
        dcgmShutdown,
        dcgmStartEmbedded,
        dcgmStartEmbedded_v2,
        dcgmStopEmbedded,
        dcgmConnect_v2,
        dcgmDisconnect,
        dcgmGetAllDevices,
        dcgmGetAllSupportedDevices,
        dcgmGetDeviceAttributes,
        dcgmGetEntityGroupEntities,
        dcgmGetGpuInstanceHierarchy,
        dcgmGetNvLinkLinkStatus,
        dcgmGroupCreate,
        dcgmGroupAddEntity,
        dcgmGroupDestroy,
        dcgmFieldGroupCreate,
        dcgmFieldGroupDestroy,
        dcgmWatchFields,
        dcgmUnwatchFields,
        dcgmUpdateAllFields,
        dcgmEntityGetLatestValues,
        dcgmEntitiesGetLatestValues,
        dcgmProfGetSupportedMetricGroups,
        errorString,
        DcgmFieldGetById,
    ]
    optional: [
        dcgmGetValuesSince_v2,
        dcgmHealthSet,
        dcgmHealthCheck,
        dcgmGetNvLinkP2PStatus,
        dcgmGetCpuHierarchy,
        dcgmGetCpuHierarchy_v2,
        dcgmConnect_v3,
        dcgmHostengineIsHealthy,
        dcgmVersionInfo,
    ]
);

/// Struct versions `dcgmStartEmbedded_v2` accepts. The wrapper writes the matching version word, so
/// the library can never be told the buffer is larger than it is.
pub trait StartEmbeddedParams: Pod {
    const VERSION: u32;
    fn version_mut(&mut self) -> &mut c_uint;
}

/// Struct versions `dcgmGetNvLinkLinkStatus` accepts (the wrapper writes the matching version word).
pub trait NvLinkStatus: Pod {
    const VERSION: u32;
    fn version_mut(&mut self) -> &mut c_uint;
}

macro_rules! versioned {
    ($tr:ident: $($t:ty => $v:expr),* $(,)?) => {$(
        impl $tr for $t {
            const VERSION: u32 = $v;
            fn version_mut(&mut self) -> &mut c_uint {
                &mut self.version
            }
        }
    )*};
}

versioned!(StartEmbeddedParams:
    dcgmStartEmbeddedV2Params_v1 => dcgmStartEmbeddedV2Params_version1,
    dcgmStartEmbeddedV2Params_v2 => dcgmStartEmbeddedV2Params_version2,
    dcgmStartEmbeddedV2Params_v3 => dcgmStartEmbeddedV2Params_version3,
);
versioned!(NvLinkStatus:
    dcgmNvLinkStatus_v4 => dcgmNvLinkStatus_version4,
    dcgmNvLinkStatus_v5 => dcgmNvLinkStatus_version5,
);

impl Symbols {
    /// `dlopen` one library file or soname (`RTLD_NOW | RTLD_LOCAL`), resolve every required symbol.
    pub fn load(path: &OsStr) -> Result<Self, LoadError> {
        // SAFETY: loading libdcgm runs its ELF initialisers; libdcgm's constructors only set up static
        // state (no documented side effects). This is the trust boundary of the whole FFI module.
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

    /// Try [`DEFAULT_LIBRARY_NAMES`] in order through the dynamic loader's search path.
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

    /// The path or soname this table was loaded from.
    pub fn path(&self) -> &str {
        &self.path
    }

    /// `dcgmInit()`.
    pub fn init(&self) -> dcgmReturn_t {
        // SAFETY: no arguments; the function pointer is valid while `self` holds the library.
        unsafe { (self.dcgmInit)() }
    }

    /// `dcgmShutdown()`. Do not call while other calls are in flight.
    pub fn shutdown(&self) -> dcgmReturn_t {
        // SAFETY: no arguments; valid function pointer.
        unsafe { (self.dcgmShutdown)() }
    }

    /// `dcgmStartEmbedded(opMode, &handle)`.
    pub fn start_embedded(
        &self,
        op_mode: dcgmOperationMode_t,
        handle: &mut dcgmHandle_t,
    ) -> dcgmReturn_t {
        // SAFETY: `handle` is a valid, writable dcgmHandle_t for the duration of the call.
        unsafe { (self.dcgmStartEmbedded)(op_mode, handle) }
    }

    /// `dcgmStartEmbedded_v2(&params)` with a v1, v2 or v3 params struct. `version` is set here from the
    /// type; `logFile` / `serviceAccount` are reset to NULL (use the `log_file` argument instead), so no
    /// dangling pointer can reach the library.
    pub fn start_embedded_v2<P: StartEmbeddedParams>(
        &self,
        params: &mut P,
        log_file: Option<&CStr>,
    ) -> dcgmReturn_t {
        *params.version_mut() = P::VERSION;
        let p = (params as *mut P).cast::<dcgmStartEmbeddedV2Params_v1>();
        // SAFETY: every StartEmbeddedParams type starts with the v1 prefix (version, opMode, dcgmHandle,
        // logFile, severity, denyListCount; offsets checked by the ABI test), so writing `logFile` through
        // the v1 view stays inside `params`. `log_file` outlives the call. v2/v3 have `serviceAccount` at
        // offset 32, which is zero-initialised by Pod constructors and set to NULL below.
        unsafe {
            (*p).logFile = log_file.map_or(std::ptr::null(), CStr::as_ptr);
            if size_of::<P>() > size_of::<dcgmStartEmbeddedV2Params_v1>() {
                let v2 = (params as *mut P).cast::<dcgmStartEmbeddedV2Params_v2>();
                (*v2).serviceAccount = std::ptr::null();
            }
            (self.dcgmStartEmbedded_v2)(p)
        }
    }

    /// `dcgmStopEmbedded(handle)`.
    pub fn stop_embedded(&self, handle: dcgmHandle_t) -> dcgmReturn_t {
        // SAFETY: plain integer argument.
        unsafe { (self.dcgmStopEmbedded)(handle) }
    }

    /// `dcgmConnect_v2(address, &params, &handle)`; `address` is `host[:port]` or a unix socket path
    /// with `params.addressIsUnixSocket = 1`.
    pub fn connect_v2(
        &self,
        address: &CStr,
        params: &mut dcgmConnectV2Params_v2,
        handle: &mut dcgmHandle_t,
    ) -> dcgmReturn_t {
        // SAFETY: NUL-terminated address and valid writable structs for the duration of the call.
        unsafe { (self.dcgmConnect_v2)(address.as_ptr(), params, handle) }
    }

    /// `dcgmConnect_v3(uri, &params, &handle)` (`tcp://`, `unix://`, `vsock://`; DCGM ≥ 4.5), or
    /// [`DCGM_ST_FUNCTION_NOT_FOUND`] when the library lacks it.
    pub fn connect_v3(
        &self,
        uri: &CStr,
        params: &mut dcgmConnectV3Params_v1,
        handle: &mut dcgmHandle_t,
    ) -> dcgmReturn_t {
        match self.dcgmConnect_v3 {
            // SAFETY: NUL-terminated string and valid writable structs for the duration of the call.
            Some(f) => unsafe { f(uri.as_ptr(), params, handle) },
            None => DCGM_ST_FUNCTION_NOT_FOUND,
        }
    }

    /// `dcgmDisconnect(handle)`.
    pub fn disconnect(&self, handle: dcgmHandle_t) -> dcgmReturn_t {
        // SAFETY: plain integer argument.
        unsafe { (self.dcgmDisconnect)(handle) }
    }

    /// `dcgmGetAllDevices(h, ids[32], &count)`.
    pub fn get_all_devices(
        &self,
        handle: dcgmHandle_t,
        ids: &mut [c_uint; DCGM_MAX_NUM_DEVICES],
        count: &mut c_int,
    ) -> dcgmReturn_t {
        // SAFETY: the library writes at most DCGM_MAX_NUM_DEVICES ids, the array's length.
        unsafe { (self.dcgmGetAllDevices)(handle, ids.as_mut_ptr(), count) }
    }

    /// `dcgmGetAllSupportedDevices(h, ids[32], &count)`.
    pub fn get_all_supported_devices(
        &self,
        handle: dcgmHandle_t,
        ids: &mut [c_uint; DCGM_MAX_NUM_DEVICES],
        count: &mut c_int,
    ) -> dcgmReturn_t {
        // SAFETY: the library writes at most DCGM_MAX_NUM_DEVICES ids, the array's length.
        unsafe { (self.dcgmGetAllSupportedDevices)(handle, ids.as_mut_ptr(), count) }
    }

    /// `dcgmGetDeviceAttributes(h, gpuId, &attr)`; set `attr.version = dcgmDeviceAttributes_version3`.
    pub fn get_device_attributes(
        &self,
        handle: dcgmHandle_t,
        gpu_id: c_uint,
        attributes: &mut dcgmDeviceAttributes_v3,
    ) -> dcgmReturn_t {
        // SAFETY: `attributes` is a valid, writable struct of the declared type.
        unsafe { (self.dcgmGetDeviceAttributes)(handle, gpu_id, attributes) }
    }

    /// `dcgmGetEntityGroupEntities(h, group, buf, &n, flags)`: `n` is set to `buf.len()` (capacity) here
    /// and holds the count (or the required count on DCGM_ST_INSUFFICIENT_SIZE) afterwards.
    pub fn get_entity_group_entities(
        &self,
        handle: dcgmHandle_t,
        group: dcgm_field_entity_group_t,
        entities: &mut [dcgm_field_eid_t],
        count: &mut c_int,
        flags: c_uint,
    ) -> dcgmReturn_t {
        *count = c_int::try_from(entities.len()).unwrap_or(c_int::MAX);
        // SAFETY: the library writes at most `*count` (≤ entities.len()) ids into `entities`.
        unsafe {
            (self.dcgmGetEntityGroupEntities)(handle, group, entities.as_mut_ptr(), count, flags)
        }
    }

    /// `dcgmGetGpuInstanceHierarchy(h, &hier)`; set `hier.version = dcgmMigHierarchy_version2`.
    pub fn get_gpu_instance_hierarchy(
        &self,
        handle: dcgmHandle_t,
        hierarchy: &mut dcgmMigHierarchy_v2,
    ) -> dcgmReturn_t {
        // SAFETY: valid writable struct of the declared type.
        unsafe { (self.dcgmGetGpuInstanceHierarchy)(handle, hierarchy) }
    }

    /// `dcgmGetNvLinkLinkStatus(h, &status)` with a v4 or v5 struct; `version` is set here from the type
    /// (v5 needs DCGM ≥ 4.6, older libraries answer DCGM_ST_VER_MISMATCH).
    pub fn get_nvlink_link_status<S: NvLinkStatus>(
        &self,
        handle: dcgmHandle_t,
        status: &mut S,
    ) -> dcgmReturn_t {
        *status.version_mut() = S::VERSION;
        // SAFETY: the library reads `version` and writes the struct of that version, which is `S`
        // (the version word was just set from S's own size).
        unsafe {
            (self.dcgmGetNvLinkLinkStatus)(handle, (status as *mut S).cast::<dcgmNvLinkStatus_v5>())
        }
    }

    /// `dcgmGetValuesSince_v2(h, group, fieldGroup, since, &next, cb, ud)`: every cached sample newer
    /// than `since` (µs since the epoch; 0 = all), handed to `each` as (entity group, entity id, value)
    /// in time order per (entity, field); `next` receives the cursor for the next call.
    /// [`DCGM_ST_FUNCTION_NOT_FOUND`] when the library lacks it.
    pub fn get_values_since(
        &self,
        handle: dcgmHandle_t,
        group: dcgmGpuGrp_t,
        field_group: dcgmFieldGrp_t,
        since: i64,
        next: &mut i64,
        each: &mut dyn FnMut(dcgm_field_entity_group_t, dcgm_field_eid_t, &dcgmFieldValue_v1),
    ) -> dcgmReturn_t {
        self.get_values_since_batches(handle, group, field_group, since, next, &mut |g, id, vs| {
            for v in vs {
                each(g, id, v);
            }
        })
    }

    /// [`Symbols::get_values_since`] with each callback's batch whole: (entity group, entity id, the
    /// values the library passed, in time order).
    pub fn get_values_since_batches(
        &self,
        handle: dcgmHandle_t,
        group: dcgmGpuGrp_t,
        field_group: dcgmFieldGrp_t,
        since: i64,
        next: &mut i64,
        each: &mut dyn FnMut(dcgm_field_entity_group_t, dcgm_field_eid_t, &[dcgmFieldValue_v1]),
    ) -> dcgmReturn_t {
        let Some(f) = self.dcgmGetValuesSince_v2 else {
            return DCGM_ST_FUNCTION_NOT_FOUND;
        };
        let mut each = each;
        let user = (&mut each
            as *mut &mut dyn FnMut(
                dcgm_field_entity_group_t,
                dcgm_field_eid_t,
                &[dcgmFieldValue_v1],
            ))
            .cast::<c_void>();
        // SAFETY: `next` is writable; the callback is `values_since_trampoline`, whose user data is the
        // `&mut dyn FnMut` above, alive for the whole (synchronous) call; the library calls back on
        // this thread only, before returning.
        unsafe {
            f(
                handle,
                group,
                field_group,
                since,
                next,
                Some(values_since_trampoline),
                user,
            )
        }
    }

    /// `dcgmHealthSet(h, group, systems)`. [`DCGM_ST_FUNCTION_NOT_FOUND`] when the library lacks it.
    pub fn health_set(
        &self,
        handle: dcgmHandle_t,
        group: dcgmGpuGrp_t,
        systems: dcgmHealthSystems_t,
    ) -> dcgmReturn_t {
        match self.dcgmHealthSet {
            // SAFETY: plain value arguments.
            Some(f) => unsafe { f(handle, group, systems) },
            None => DCGM_ST_FUNCTION_NOT_FOUND,
        }
    }

    /// `dcgmHealthCheck(h, group, &resp)` with `resp.version = dcgmHealthResponse_version5` (set here).
    /// [`DCGM_ST_FUNCTION_NOT_FOUND`] when the library lacks it.
    pub fn health_check(
        &self,
        handle: dcgmHandle_t,
        group: dcgmGpuGrp_t,
        response: &mut dcgmHealthResponse_v5,
    ) -> dcgmReturn_t {
        response.version = dcgmHealthResponse_version5;
        match self.dcgmHealthCheck {
            // SAFETY: a writable struct of the version the word announces (1 MiB, on the caller's heap).
            Some(f) => unsafe { f(handle, group, response) },
            None => DCGM_ST_FUNCTION_NOT_FOUND,
        }
    }

    /// `dcgmGetNvLinkP2PStatus(h, &status)` with `version = dcgmNvLinkP2PStatus_version1` and
    /// `numGpus = 0` (all GPUs), set here. [`DCGM_ST_FUNCTION_NOT_FOUND`] before DCGM 4.3.
    pub fn get_nvlink_p2p_status(
        &self,
        handle: dcgmHandle_t,
        status: &mut dcgmNvLinkP2PStatus_v1,
    ) -> dcgmReturn_t {
        status.version = dcgmNvLinkP2PStatus_version1;
        status.numGpus = 0;
        match self.dcgmGetNvLinkP2PStatus {
            // SAFETY: a writable struct of the announced version.
            Some(f) => unsafe { f(handle, status) },
            None => DCGM_ST_FUNCTION_NOT_FOUND,
        }
    }

    /// `dcgmGetCpuHierarchy(h, &hier)` (v1); set `hier.version = dcgmCpuHierarchy_version1`.
    pub fn get_cpu_hierarchy(
        &self,
        handle: dcgmHandle_t,
        hierarchy: &mut dcgmCpuHierarchy_v1,
    ) -> dcgmReturn_t {
        match self.dcgmGetCpuHierarchy {
            // SAFETY: valid writable struct of the declared type.
            Some(f) => unsafe { f(handle, hierarchy) },
            None => DCGM_ST_FUNCTION_NOT_FOUND,
        }
    }

    /// `dcgmGetCpuHierarchy_v2(h, &hier)` (with serials); set `hier.version = dcgmCpuHierarchy_version2`.
    pub fn get_cpu_hierarchy_v2(
        &self,
        handle: dcgmHandle_t,
        hierarchy: &mut dcgmCpuHierarchy_v2,
    ) -> dcgmReturn_t {
        match self.dcgmGetCpuHierarchy_v2 {
            // SAFETY: valid writable struct of the declared type.
            Some(f) => unsafe { f(handle, hierarchy) },
            None => DCGM_ST_FUNCTION_NOT_FOUND,
        }
    }

    /// `dcgmGroupCreate(h, type, name, &groupId)`.
    pub fn group_create(
        &self,
        handle: dcgmHandle_t,
        group_type: dcgmGroupType_t,
        name: &CStr,
        group: &mut dcgmGpuGrp_t,
    ) -> dcgmReturn_t {
        // SAFETY: NUL-terminated name (copied by the library), writable out id.
        unsafe { (self.dcgmGroupCreate)(handle, group_type, name.as_ptr(), group) }
    }

    /// `dcgmGroupAddEntity(h, group, entityGroup, entityId)`.
    pub fn group_add_entity(
        &self,
        handle: dcgmHandle_t,
        group: dcgmGpuGrp_t,
        entity_group: dcgm_field_entity_group_t,
        entity_id: dcgm_field_eid_t,
    ) -> dcgmReturn_t {
        // SAFETY: plain integer arguments.
        unsafe { (self.dcgmGroupAddEntity)(handle, group, entity_group, entity_id) }
    }

    /// `dcgmGroupDestroy(h, group)`.
    pub fn group_destroy(&self, handle: dcgmHandle_t, group: dcgmGpuGrp_t) -> dcgmReturn_t {
        // SAFETY: plain integer arguments.
        unsafe { (self.dcgmGroupDestroy)(handle, group) }
    }

    /// `dcgmFieldGroupCreate(h, n, ids, name, &fieldGroupId)` (1 ≤ n ≤ 127; names unique per engine).
    pub fn field_group_create(
        &self,
        handle: dcgmHandle_t,
        field_ids: &[c_ushort],
        name: &CStr,
        field_group: &mut dcgmFieldGrp_t,
    ) -> dcgmReturn_t {
        let Ok(n) = c_int::try_from(field_ids.len()) else {
            return DCGM_ST_BADPARAM;
        };
        // SAFETY: the library reads `n` ids from `field_ids` and a NUL-terminated name; writes the id.
        unsafe {
            (self.dcgmFieldGroupCreate)(handle, n, field_ids.as_ptr(), name.as_ptr(), field_group)
        }
    }

    /// `dcgmFieldGroupDestroy(h, fieldGroupId)`.
    pub fn field_group_destroy(
        &self,
        handle: dcgmHandle_t,
        field_group: dcgmFieldGrp_t,
    ) -> dcgmReturn_t {
        // SAFETY: plain integer arguments.
        unsafe { (self.dcgmFieldGroupDestroy)(handle, field_group) }
    }

    /// `dcgmWatchFields(h, group, fieldGroup, updateFreq µs, maxKeepAge s, maxKeepSamples)`.
    pub fn watch_fields(
        &self,
        handle: dcgmHandle_t,
        group: dcgmGpuGrp_t,
        field_group: dcgmFieldGrp_t,
        update_freq_us: i64,
        max_keep_age_s: f64,
        max_keep_samples: c_int,
    ) -> dcgmReturn_t {
        // SAFETY: plain value arguments.
        unsafe {
            (self.dcgmWatchFields)(
                handle,
                group,
                field_group,
                update_freq_us,
                max_keep_age_s,
                max_keep_samples,
            )
        }
    }

    /// `dcgmUnwatchFields(h, group, fieldGroup)`.
    pub fn unwatch_fields(
        &self,
        handle: dcgmHandle_t,
        group: dcgmGpuGrp_t,
        field_group: dcgmFieldGrp_t,
    ) -> dcgmReturn_t {
        // SAFETY: plain value arguments.
        unsafe { (self.dcgmUnwatchFields)(handle, group, field_group) }
    }

    /// `dcgmUpdateAllFields(h, waitForUpdate)`.
    pub fn update_all_fields(&self, handle: dcgmHandle_t, wait_for_update: bool) -> dcgmReturn_t {
        // SAFETY: plain value arguments.
        unsafe { (self.dcgmUpdateAllFields)(handle, c_int::from(wait_for_update)) }
    }

    /// `dcgmEntityGetLatestValues(h, group, id, fields, n, values)`: `values[i]` answers `fields[i]`.
    /// Returns DCGM_ST_BADPARAM without calling when `values` is shorter than `fields`.
    pub fn entity_get_latest_values(
        &self,
        handle: dcgmHandle_t,
        entity_group: dcgm_field_entity_group_t,
        entity_id: dcgm_field_eid_t,
        field_ids: &[c_ushort],
        values: &mut [dcgmFieldValue_v1],
    ) -> dcgmReturn_t {
        let Ok(n) = c_uint::try_from(field_ids.len()) else {
            return DCGM_ST_BADPARAM;
        };
        if values.len() < field_ids.len() {
            return DCGM_ST_BADPARAM;
        }
        // SAFETY: `fields` is input only (the C prototype lacks const but the library only reads it);
        // the library writes exactly `n` values, and `values` holds at least `n`. The entity id is passed
        // as the same 32-bit pattern (the C parameter is `int`; packed link ids may exceed i32::MAX).
        unsafe {
            (self.dcgmEntityGetLatestValues)(
                handle,
                entity_group,
                entity_id as c_int,
                field_ids.as_ptr().cast_mut(),
                n,
                values.as_mut_ptr(),
            )
        }
    }

    /// `dcgmEntitiesGetLatestValues(h, entities, ne, fields, nf, flags, values)`: answers in no
    /// particular order (match on entity/field ids). Returns DCGM_ST_BADPARAM without calling when
    /// `values` holds fewer than `entities.len() * fields.len()`.
    pub fn entities_get_latest_values(
        &self,
        handle: dcgmHandle_t,
        entities: &[dcgmGroupEntityPair_t],
        field_ids: &[c_ushort],
        flags: c_uint,
        values: &mut [dcgmFieldValue_v2],
    ) -> dcgmReturn_t {
        let (Ok(ne), Ok(nf)) = (
            c_uint::try_from(entities.len()),
            c_uint::try_from(field_ids.len()),
        ) else {
            return DCGM_ST_BADPARAM;
        };
        match entities.len().checked_mul(field_ids.len()) {
            Some(need) if values.len() >= need => {}
            _ => return DCGM_ST_BADPARAM,
        }
        // SAFETY: `entities` and `fields` are input only (non-const in the C prototype, never written);
        // the library writes at most ne×nf values and `values` holds at least that many.
        unsafe {
            (self.dcgmEntitiesGetLatestValues)(
                handle,
                entities.as_ptr().cast_mut(),
                ne,
                field_ids.as_ptr().cast_mut(),
                nf,
                flags,
                values.as_mut_ptr(),
            )
        }
    }

    /// `dcgmProfGetSupportedMetricGroups(h, &groups)`; set `version = dcgmProfGetMetricGroups_version3`
    /// and `gpuId`.
    pub fn prof_get_supported_metric_groups(
        &self,
        handle: dcgmHandle_t,
        groups: &mut dcgmProfGetMetricGroups_v3,
    ) -> dcgmReturn_t {
        // SAFETY: valid writable struct of the declared type.
        unsafe { (self.dcgmProfGetSupportedMetricGroups)(handle, groups) }
    }

    /// `dcgmHostengineIsHealthy(h, &health)`, or DCGM_ST_FUNCTION_NOT_FOUND when absent.
    pub fn hostengine_is_healthy(
        &self,
        handle: dcgmHandle_t,
        health: &mut dcgmHostengineHealth_v1,
    ) -> dcgmReturn_t {
        match self.dcgmHostengineIsHealthy {
            // SAFETY: valid writable struct of the declared type.
            Some(f) => unsafe { f(handle, health) },
            None => DCGM_ST_FUNCTION_NOT_FOUND,
        }
    }

    /// `dcgmVersionInfo(&info)` (the client library's build info), or DCGM_ST_FUNCTION_NOT_FOUND.
    pub fn version_info(&self, info: &mut dcgmVersionInfo_v2) -> dcgmReturn_t {
        match self.dcgmVersionInfo {
            // SAFETY: valid writable struct of the declared type.
            Some(f) => unsafe { f(info) },
            None => DCGM_ST_FUNCTION_NOT_FOUND,
        }
    }

    /// `errorString(code)`, copied; `None` for codes the library does not know (it returns NULL).
    pub fn error_string(&self, code: dcgmReturn_t) -> Option<String> {
        // SAFETY: plain integer argument; the result is NULL or a static NUL-terminated string.
        let p = unsafe { (self.errorString)(code) };
        if p.is_null() {
            return None;
        }
        // SAFETY: non-NULL pointer to a static NUL-terminated string owned by the library, which stays
        // loaded while `self` lives; copied before returning.
        Some(unsafe { CStr::from_ptr(p) }.to_string_lossy().into_owned())
    }

    /// `DcgmFieldGetById(id)`, copied out; `None` when the library has no metadata for the id (or is
    /// not initialised). Do not dereference `valueFormat` of the copy.
    pub fn field_get_by_id(&self, field_id: c_ushort) -> Option<dcgm_field_meta_t> {
        // SAFETY: plain integer argument; the result is NULL or a pointer into a static table.
        let p = unsafe { (self.DcgmFieldGetById)(field_id) };
        if p.is_null() {
            return None;
        }
        // SAFETY: non-NULL, aligned pointer to a library-owned `dcgm_field_meta_t`, valid while the
        // library is loaded and initialised; copied (the type is Copy) before returning.
        Some(unsafe { *p })
    }
}

impl std::fmt::Debug for Symbols {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Symbols")
            .field("path", &self.path)
            .finish_non_exhaustive()
    }
}

/// The `dcgmGetValuesSince_v2` callback: hands the batch of `n` values to the `&mut dyn FnMut` that
/// `user` points to. Returns 0 (go on); 1 stops the enumeration if the closure panicked.
unsafe extern "C" fn values_since_trampoline(
    group: dcgm_field_entity_group_t,
    id: dcgm_field_eid_t,
    values: *mut dcgmFieldValue_v1,
    n: c_int,
    user: *mut c_void,
) -> c_int {
    let Ok(n) = usize::try_from(n) else {
        return 0;
    };
    if user.is_null() || values.is_null() || n == 0 {
        return 0;
    }
    // SAFETY: `user` is the `&mut &mut dyn FnMut` of `get_values_since_batches`, alive during the
    // call; the library passes `n` initialised values at `values`, valid until this callback returns.
    let (each, values) = unsafe {
        (
            &mut *user.cast::<&mut dyn FnMut(
                dcgm_field_entity_group_t,
                dcgm_field_eid_t,
                &[dcgmFieldValue_v1],
            )>(),
            std::slice::from_raw_parts(values, n),
        )
    };
    let run = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| each(group, id, values)));
    c_int::from(run.is_err())
}
