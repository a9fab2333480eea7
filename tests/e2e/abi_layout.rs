//! ABI truth test: every struct, typedef, constant and version word declared in
//! `src/source/dcgm/ffi.rs` is checked against the layout probe compiled from NVIDIA's DCGM 4.6.0
//! headers (`tests/fixtures/dcgm/dcgm-abi-layout.txt`), parsed here at test time — no number is copied
//! by hand. Checked per struct: `sizeof`, `alignof`, and for each member its offset, size, C type
//! (mapped to the Rust type, signedness included) and, for arrays, element size and length. A declared
//! item missing from the file fails the test, and so does a `pub struct`/`pub union`/`pub type`/
//! `pub const` in ffi.rs that this test does not cover, or a C member of a covered struct that the Rust
//! struct lacks.
#![allow(clippy::unwrap_used, clippy::expect_used)] // tests and benches fail loudly on purpose

use std::any::type_name;
use std::collections::{BTreeSet, HashMap};
use std::mem::{align_of, offset_of, size_of};

use dcgm_otel::source::dcgm::ffi::*;

const LAYOUT: &str = concat!(
    env!("CARGO_MANIFEST_DIR"),
    "/tests/fixtures/dcgm/dcgm-abi-layout.txt"
);
const FFI_SOURCE: &str = concat!(env!("CARGO_MANIFEST_DIR"), "/src/source/dcgm/ffi.rs");

/// The parsed layout file: `"<kind> <name>"` → the rest of the line.
struct Layout {
    lines: HashMap<String, String>,
    /// Every member path per struct, from the `offsetof` lines, in file order.
    members: HashMap<String, Vec<String>>,
    errors: Vec<String>,
    checked_structs: BTreeSet<String>,
    checked_consts: BTreeSet<String>,
    checked_types: BTreeSet<String>,
}

impl Layout {
    fn load() -> Layout {
        let text = std::fs::read_to_string(LAYOUT)
            .unwrap_or_else(|e| panic!("cannot read the ABI layout file {LAYOUT}: {e}"));
        let mut lines = HashMap::new();
        let mut members: HashMap<String, Vec<String>> = HashMap::new();
        for line in text.lines() {
            if line.starts_with('#') || line.trim().is_empty() {
                continue;
            }
            let mut parts = line.splitn(3, ' ');
            let (Some(kind), Some(name)) = (parts.next(), parts.next()) else {
                continue;
            };
            let rest = parts.next().unwrap_or("").to_string();
            if kind == "offsetof" {
                if let Some((s, m)) = name.split_once('.') {
                    members
                        .entry(s.to_string())
                        .or_default()
                        .push(m.to_string());
                }
            }
            lines.insert(format!("{kind} {name}"), rest);
        }
        assert!(
            lines.len() > 1000,
            "{LAYOUT} looks truncated ({} entries)",
            lines.len()
        );
        Layout {
            lines,
            members,
            errors: Vec::new(),
            checked_structs: BTreeSet::new(),
            checked_consts: BTreeSet::new(),
            checked_types: BTreeSet::new(),
        }
    }

    fn get(&mut self, key: &str) -> Option<String> {
        let v = self.lines.get(key).cloned();
        if v.is_none() {
            self.errors
                .push(format!("MISSING in dcgm-abi-layout.txt: `{key}`"));
        }
        v
    }

    fn expect_num(&mut self, key: &str, actual: i128) {
        if let Some(v) = self.get(key) {
            match v.parse::<i128>() {
                Ok(want) if want == actual => {}
                Ok(want) => self
                    .errors
                    .push(format!("{key}: C says {want}, Rust has {actual}")),
                Err(_) => self
                    .errors
                    .push(format!("{key}: not a number in the file: {v:?}")),
            }
        }
    }

    /// A member's C type (from the `type` line) against the Rust type name.
    fn expect_type(&mut self, key: &str, rust: &str, arraylen: Option<usize>) {
        let Some(c) = self.get(key) else { return };
        let rust_short = shorten(rust);
        let want = c_to_rust(&c, arraylen);
        if !want.contains(&rust_short) {
            self.errors.push(format!(
                "{key}: C type `{c}` wants Rust {want:?}, declared `{rust_short}`"
            ));
        }
    }
}

/// `dcgm_otel::source::dcgm::ffi::dcgmFoo_v1` → `dcgmFoo_v1`, also inside arrays and pointers.
fn shorten(rust: &str) -> String {
    let mut out = String::new();
    let mut word = String::new();
    for ch in rust.chars().chain(std::iter::once('\0')) {
        if ch.is_alphanumeric() || ch == '_' || ch == ':' {
            word.push(ch);
        } else {
            out.push_str(word.rsplit("::").next().unwrap_or(&word));
            word.clear();
            if ch != '\0' {
                out.push(ch);
            }
        }
    }
    out
}

/// The Rust spellings (as `type_name` prints them) acceptable for a C member type.
fn c_to_rust(c: &str, arraylen: Option<usize>) -> Vec<String> {
    if let (Some(open), Some(n)) = (c.find('['), arraylen) {
        return c_to_rust(c[..open].trim(), None)
            .into_iter()
            .map(|e| format!("[{e}; {n}]"))
            .collect();
    }
    let one = |s: &str| vec![s.to_string()];
    match c {
        "unsigned int"
        | "dcgm_field_eid_t"
        | "dcgm_field_entity_group_t"
        | "dcgmOperationMode_t"
        | "dcgmNvLinkLinkState_t"
        | "dcgmHealthSystems_t"
        | "dcgmHealthWatchResults_t"
        | "dcgmNvLinkGpuP2PStatus_t"
        | "dcgmGroupType_t" => one("u32"),
        "int" | "DcgmLoggingSeverity_t" | "dcgmReturn_t" => one("i32"),
        "unsigned short" => one("u16"),
        "short" => one("i16"),
        "unsigned char" => one("u8"),
        // c_char: i8 on x86_64, u8 on aarch64.
        "char" => vec!["i8".into(), "u8".into()],
        "int64_t" | "long long" => one("i64"),
        "uint64_t" => one("u64"),
        "double" => one("f64"),
        "dcgmHandle_t" | "dcgmGpuGrp_t" | "dcgmFieldGrp_t" => one("usize"),
        "const char *" => vec!["*const i8".into(), "*const u8".into()],
        "dcgm_field_output_format_p" => one("*mut dcgm_field_output_format_t"),
        "union <anon>" => one("dcgmFieldValueUnion"),
        // Header typedef aliases of nested structs.
        "dcgmDeviceSupportedClockSets_t" => one("dcgmDeviceSupportedClockSets_v1"),
        "dcgmClockSet_t" => one("dcgmClockSet_v1"),
        "dcgmDeviceThermals_t" => one("dcgmDeviceThermals_v1"),
        "dcgmDevicePowerLimits_t" => one("dcgmDevicePowerLimits_v1"),
        "dcgmDeviceIdentifiers_t" => one("dcgmDeviceIdentifiers_v1"),
        "dcgmDeviceMemoryUsage_t" => one("dcgmDeviceMemoryUsage_v1"),
        other => one(other.trim_start_matches("struct ")),
    }
}

fn member_size<S, T>(_: impl FnOnce(&S) -> &T) -> usize {
    size_of::<T>()
}

fn member_type<S, T>(_: impl FnOnce(&S) -> &T) -> &'static str {
    type_name::<T>()
}

fn array_shape<S, T, const N: usize>(_: impl FnOnce(&S) -> &[T; N]) -> (usize, usize) {
    (size_of::<T>(), N)
}

/// Check one struct: size, alignment, then every listed member (offset, size, C type); `arrays`
/// members also get element size and length; `union` members (paths into the value union) get their
/// offset only. Finally every top-level C member of the struct must have been listed.
macro_rules! check_struct {
    ($lay:ident, $t:ident { $($m:ident),* $(,)? }
        $(arrays { $($a:ident),* $(,)? })?
        $(union { $($u:ident . $v:ident),* $(,)? })?) => {{
        let name = stringify!($t);
        $lay.checked_structs.insert(name.to_string());
        $lay.expect_num(&format!("sizeof {name}"), size_of::<$t>() as i128);
        $lay.expect_num(&format!("alignof {name}"), align_of::<$t>() as i128);
        let mut listed: Vec<&str> = Vec::new();
        $(
            let m = stringify!($m);
            listed.push(m);
            $lay.expect_num(&format!("offsetof {name}.{m}"), offset_of!($t, $m) as i128);
            $lay.expect_num(&format!("sizeof {name}.{m}"), member_size(|s: &$t| &s.$m) as i128);
        )*
        #[allow(unused_mut)]
        let mut arrays: Vec<(&str, usize, usize)> = Vec::new();
        $($(
            let (elem, len) = array_shape(|s: &$t| &s.$a);
            arrays.push((stringify!($a), elem, len));
            $lay.expect_num(&format!("elemsize {name}.{}", stringify!($a)), elem as i128);
            $lay.expect_num(&format!("arraylen {name}.{}", stringify!($a)), len as i128);
        )*)?
        $(
            let m = stringify!($m);
            let len = arrays.iter().find(|a| a.0 == m).map(|a| a.2);
            $lay.expect_type(&format!("type {name}.{m}"), member_type(|s: &$t| &s.$m), len);
        )*
        $($(
            let path = format!("{}.{}", stringify!($u), stringify!($v));
            $lay.expect_num(&format!("offsetof {name}.{path}"), offset_of!($t, $u.$v) as i128);
        )*)?
        let file_members = $lay.members.get(name).cloned().unwrap_or_default();
        for fm in file_members.iter().filter(|m| !m.contains('.') && !m.contains('[')) {
            if !listed.contains(&fm.as_str()) {
                $lay.errors.push(format!("{name}: C member `{fm}` is not declared in Rust"));
            }
        }
    }};
}

/// Scalar typedefs: size and alignment of the Rust alias against the C typedef.
macro_rules! check_typedefs {
    ($lay:ident, $($t:ident),* $(,)?) => {{
        $(
            $lay.checked_types.insert(stringify!($t).to_string());
            $lay.expect_num(&format!("sizeof {}", stringify!($t)), size_of::<$t>() as i128);
            $lay.expect_num(&format!("alignof {}", stringify!($t)), align_of::<$t>() as i128);
        )*
    }};
}

/// How a Rust constant compares with its `const` line.
trait ConstValue {
    fn check(&self, lay: &mut Layout, name: &str);
}

macro_rules! int_const_value {
    ($($t:ty),*) => {$(
        impl ConstValue for $t {
            fn check(&self, lay: &mut Layout, name: &str) {
                lay.expect_num(&format!("const {name}"), *self as i128);
            }
        }
    )*};
}
int_const_value!(i32, u32, i64, u8, u16, usize);

impl ConstValue for f64 {
    fn check(&self, lay: &mut Layout, name: &str) {
        if let Some(bits) = lay.get(&format!("constbits {name}")) {
            let want = u64::from_str_radix(bits.trim_start_matches("0x"), 16);
            if want != Ok(self.to_bits()) {
                lay.errors.push(format!(
                    "constbits {name}: C says {bits}, Rust has {:#018x}",
                    self.to_bits()
                ));
            }
        }
    }
}

impl ConstValue for &str {
    fn check(&self, lay: &mut Layout, name: &str) {
        if let Some(v) = lay.get(&format!("const {name}")) {
            if v != format!("\"{self}\"") {
                lay.errors
                    .push(format!("const {name}: C says {v}, Rust has {self:?}"));
            }
        }
    }
}

macro_rules! check_consts {
    ($lay:ident, $($c:ident),* $(,)?) => {{
        $(
            $lay.checked_consts.insert(stringify!($c).to_string());
            ConstValue::check(&$c, &mut $lay, stringify!($c));
        )*
    }};
}

/// Names declared `pub <kind> NAME` at the top level of ffi.rs (unindented lines; the C function
/// aliases inside `mod fn_types` and the macro-generated symbol table are indented).
fn declared(source: &str, kind: &str) -> BTreeSet<String> {
    let prefix = format!("pub {kind} ");
    source
        .lines()
        .filter_map(|l| l.strip_prefix(&prefix))
        .filter_map(|rest| {
            let name: String = rest
                .chars()
                .take_while(|c| c.is_alphanumeric() || *c == '_')
                .collect();
            (!name.is_empty() && name != "fn").then_some(name)
        })
        .collect()
}

#[test]
fn ffi_matches_dcgm_4_6_headers() {
    let mut lay = Layout::load();

    check_struct!(lay, dcgmFieldValue_v1 { version, fieldId, fieldType, status, ts, value }
        union { value.i64, value.dbl, value.str, value.blob });
    check_struct!(lay, dcgmFieldValue_v2 {
        version, entityGroupId, entityId, fieldId, fieldType, status, unused, ts, value
    } union { value.i64, value.dbl, value.str, value.blob });
    check_struct!(
        lay,
        dcgmGroupEntityPair_t {
            entityGroupId,
            entityId
        }
    );
    check_struct!(
        lay,
        dcgmConnectV2Params_v1 {
            version,
            persistAfterDisconnect
        }
    );
    check_struct!(
        lay,
        dcgmConnectV2Params_v2 {
            version,
            persistAfterDisconnect,
            timeoutMs,
            addressIsUnixSocket
        }
    );
    check_struct!(
        lay,
        dcgmConnectV3Params_v1 {
            version,
            persistAfterDisconnect,
            timeoutMs
        }
    );
    check_struct!(lay, dcgmStartEmbeddedV2Params_v1 {
        version, opMode, dcgmHandle, logFile, severity, denyListCount, denyList
    } arrays { denyList });
    check_struct!(lay, dcgmStartEmbeddedV2Params_v2 {
        version, opMode, dcgmHandle, logFile, severity, denyListCount, serviceAccount, denyList
    } arrays { denyList });
    check_struct!(lay, dcgmStartEmbeddedV2Params_v3 {
        version, opMode, dcgmHandle, logFile, severity, denyListCount, serviceAccount, denyList
    } arrays { denyList });
    check_struct!(
        lay,
        dcgmClockSet_v1 {
            version,
            memClock,
            smClock
        }
    );
    check_struct!(lay, dcgmDeviceSupportedClockSets_v1 { version, count, clockSet }
        arrays { clockSet });
    check_struct!(
        lay,
        dcgmDeviceThermals_v1 {
            version,
            slowdownTemp,
            shutdownTemp
        }
    );
    check_struct!(
        lay,
        dcgmDevicePowerLimits_v1 {
            version,
            curPowerLimit,
            defaultPowerLimit,
            enforcedPowerLimit,
            minPowerLimit,
            maxPowerLimit
        }
    );
    check_struct!(lay, dcgmDeviceIdentifiers_v1 {
        version, brandName, deviceName, pciBusId, serial, uuid, vbios, inforomImageVersion,
        pciDeviceId, pciSubSystemId, driverVersion, virtualizationMode
    } arrays {
        brandName, deviceName, pciBusId, serial, uuid, vbios, inforomImageVersion, driverVersion
    });
    check_struct!(
        lay,
        dcgmDeviceMemoryUsage_v1 {
            version,
            bar1Total,
            fbTotal,
            fbUsed,
            fbFree
        }
    );
    check_struct!(
        lay,
        dcgmDeviceSettings_v2 {
            version,
            persistenceModeEnabled,
            migModeEnabled,
            confidentialComputeMode
        }
    );
    check_struct!(
        lay,
        dcgmDeviceAttributes_v3 {
            version,
            clockSets,
            thermalSettings,
            powerLimits,
            identifiers,
            memoryUsage,
            settings
        }
    );
    check_struct!(lay, dcgmMigEntityInfo_t {
        gpuUuid, nvmlGpuIndex, nvmlInstanceId, nvmlComputeInstanceId, nvmlMigProfileId,
        nvmlProfileSlices
    } arrays { gpuUuid });
    check_struct!(
        lay,
        dcgmMigHierarchyInfo_v2 {
            entity,
            parent,
            info
        }
    );
    check_struct!(lay, dcgmMigHierarchy_v2 { version, count, entityList } arrays { entityList });
    check_struct!(lay, dcgmNvLinkGpuLinkStatus_v3 { entityId, linkState } arrays { linkState });
    check_struct!(lay, dcgmNvLinkGpuLinkStatus_v4 { entityId, linkState } arrays { linkState });
    check_struct!(lay, dcgmNvLinkNvSwitchLinkStatus_t { entityId, linkState }
        arrays { linkState });
    check_struct!(lay, dcgmNvLinkStatus_v4 { version, numGpus, gpus, numNvSwitches, nvSwitches }
        arrays { gpus, nvSwitches });
    check_struct!(lay, dcgmNvLinkStatus_v5 { version, numGpus, gpus, numNvSwitches, nvSwitches }
        arrays { gpus, nvSwitches });
    check_struct!(lay, dcgmCpuHierarchyOwnedCores_v1 { version, bitmask } arrays { bitmask });
    check_struct!(lay, dcgmCpuHierarchy_v1 { version, numCpus, cpus } arrays { cpus });
    check_struct!(lay, dcgmCpuHierarchy_v2 { version, numCpus, cpus } arrays { cpus });
    // The per-CPU structs have no layout lines of their own: their size is the arrays' element size
    // (checked above) and their members are checked through the first array element.
    for (outer, member, offset) in [
        (
            "dcgmCpuHierarchy_v1",
            "cpuId",
            offset_of!(dcgmCpuHierarchy_v1, cpus) + offset_of!(dcgmCpuHierarchyCpu_v1, cpuId),
        ),
        (
            "dcgmCpuHierarchy_v1",
            "ownedCores",
            offset_of!(dcgmCpuHierarchy_v1, cpus) + offset_of!(dcgmCpuHierarchyCpu_v1, ownedCores),
        ),
        (
            "dcgmCpuHierarchy_v2",
            "cpuId",
            offset_of!(dcgmCpuHierarchy_v2, cpus) + offset_of!(dcgmCpuHierarchyCpu_v2, cpuId),
        ),
        (
            "dcgmCpuHierarchy_v2",
            "ownedCores",
            offset_of!(dcgmCpuHierarchy_v2, cpus) + offset_of!(dcgmCpuHierarchyCpu_v2, ownedCores),
        ),
        (
            "dcgmCpuHierarchy_v2",
            "serial",
            offset_of!(dcgmCpuHierarchy_v2, cpus) + offset_of!(dcgmCpuHierarchyCpu_v2, serial),
        ),
    ] {
        lay.expect_num(
            &format!("offsetof {outer}.cpus[0].{member}"),
            offset as i128,
        );
    }
    lay.expect_num(
        "sizeof dcgmCpuHierarchy_v2.cpus[0].serial",
        size_of::<[std::ffi::c_char; DCGM_MAX_STR_LENGTH]>() as i128,
    );
    lay.checked_structs.insert("dcgmCpuHierarchyCpu_v1".into());
    lay.checked_structs.insert("dcgmCpuHierarchyCpu_v2".into());
    check_struct!(lay, dcgm_field_output_format_t { shortName, unit, width }
        arrays { shortName, unit });
    check_struct!(lay, dcgm_field_meta_t {
        fieldId, fieldType, size, tag, scope, nvmlFieldId, entityLevel, valueFormat
    } arrays { tag });
    check_struct!(lay, dcgmFieldGroupInfo_v1 {
        version, numFieldIds, fieldGroupId, fieldGroupName, fieldIds
    } arrays { fieldGroupName, fieldIds });
    check_struct!(lay, dcgmGroupInfo_v3 { version, count, groupName, entityList }
        arrays { groupName, entityList });
    check_struct!(lay, dcgmProfMetricGroupInfo_v2 { majorId, minorId, numFieldIds, fieldIds }
        arrays { fieldIds });
    check_struct!(lay, dcgmProfGetMetricGroups_v3 {
        version, unused, gpuId, numMetricGroups, metricGroups
    } arrays { metricGroups });
    check_struct!(lay, dcgmNvLinkGpuLinkP2PStatus_v1 { entityId, linkStatus } arrays { linkStatus });
    check_struct!(lay, dcgmNvLinkP2PStatus_v1 { version, numGpus, gpus } arrays { gpus });
    check_struct!(lay, dcgmDiagErrorDetail_t { msg, code } arrays { msg });
    check_struct!(
        lay,
        dcgmIncidentInfo_t {
            system,
            health,
            error,
            entityInfo
        }
    );
    check_struct!(lay, dcgmHealthResponse_v5 { version, overallHealth, incidentCount, incidents }
        arrays { incidents });
    check_struct!(lay, dcgmVersionInfo_v2 { version, rawBuildInfoString }
        arrays { rawBuildInfoString });
    check_struct!(
        lay,
        dcgmHostengineHealth_v1 {
            version,
            overallHealth
        }
    );
    // The value union itself: its size is the `value` member's (checked above); record it as covered.
    lay.checked_structs.insert("dcgmFieldValueUnion".into());
    assert_eq!(size_of::<dcgmFieldValueUnion>(), DCGM_MAX_BLOB_LENGTH);

    check_typedefs!(
        lay,
        dcgmReturn_t,
        dcgmHandle_t,
        dcgmGpuGrp_t,
        dcgmFieldGrp_t,
        dcgm_field_entity_group_t,
        dcgm_field_eid_t,
        dcgmOperationMode_t,
        dcgmGroupType_t,
        DcgmLoggingSeverity_t,
        DcgmEntityStatus_t,
        dcgmNvLinkLinkState_t,
        dcgmHealthSystems_t,
        dcgmHealthWatchResults_t,
        dcgmNvLinkGpuP2PStatus_t,
        dcgmFieldValueEntityEnumeration_f,
    );

    check_consts!(
        lay,
        // return codes
        DCGM_ST_OK,
        DCGM_ST_BADPARAM,
        DCGM_ST_GENERIC_ERROR,
        DCGM_ST_MEMORY,
        DCGM_ST_NOT_CONFIGURED,
        DCGM_ST_NOT_SUPPORTED,
        DCGM_ST_INIT_ERROR,
        DCGM_ST_NVML_ERROR,
        DCGM_ST_PENDING,
        DCGM_ST_UNINITIALIZED,
        DCGM_ST_TIMEOUT,
        DCGM_ST_VER_MISMATCH,
        DCGM_ST_UNKNOWN_FIELD,
        DCGM_ST_NO_DATA,
        DCGM_ST_STALE_DATA,
        DCGM_ST_NOT_WATCHED,
        DCGM_ST_NO_PERMISSION,
        DCGM_ST_GPU_IS_LOST,
        DCGM_ST_RESET_REQUIRED,
        DCGM_ST_FUNCTION_NOT_FOUND,
        DCGM_ST_CONNECTION_NOT_VALID,
        DCGM_ST_GPU_NOT_SUPPORTED,
        DCGM_ST_GROUP_INCOMPATIBLE,
        DCGM_ST_MAX_LIMIT,
        DCGM_ST_LIBRARY_NOT_FOUND,
        DCGM_ST_DUPLICATE_KEY,
        DCGM_ST_REQUIRES_ROOT,
        DCGM_ST_INSUFFICIENT_SIZE,
        DCGM_ST_FIELD_UNSUPPORTED_BY_API,
        DCGM_ST_MODULE_NOT_LOADED,
        DCGM_ST_IN_USE,
        DCGM_ST_GROUP_IS_EMPTY,
        DCGM_ST_PROFILING_NOT_SUPPORTED,
        DCGM_ST_PROFILING_LIBRARY_ERROR,
        DCGM_ST_PROFILING_MULTI_PASS,
        DCGM_ST_INSUFFICIENT_DRIVER_VERSION,
        DCGM_ST_INSTANCE_NOT_FOUND,
        DCGM_ST_COMPUTE_INSTANCE_NOT_FOUND,
        DCGM_ST_INSUFFICIENT_RESOURCES,
        DCGM_ST_ALREADY_INITIALIZED,
        DCGM_ST_NVML_NOT_LOADED,
        DCGM_ST_NVML_DRIVER_TIMEOUT,
        DCGM_ST_GPUS_DETACHED,
        // entity groups
        DCGM_FE_NONE,
        DCGM_FE_GPU,
        DCGM_FE_VGPU,
        DCGM_FE_SWITCH,
        DCGM_FE_GPU_I,
        DCGM_FE_GPU_CI,
        DCGM_FE_LINK,
        DCGM_FE_CPU,
        DCGM_FE_CPU_CORE,
        DCGM_FE_CONNECTX,
        DCGM_FE_COUNT,
        // field types, scopes, flags
        DCGM_FT_BINARY,
        DCGM_FT_DOUBLE,
        DCGM_FT_INT64,
        DCGM_FT_STRING,
        DCGM_FT_TIMESTAMP,
        DCGM_FS_GLOBAL,
        DCGM_FS_ENTITY,
        DCGM_FS_DEVICE,
        DCGM_FV_FLAG_LIVE_DATA,
        DCGM_GEGE_FLAG_ONLY_SUPPORTED,
        // blanks
        DCGM_INT8_BLANK,
        DCGM_INT32_BLANK,
        DCGM_INT32_NOT_FOUND,
        DCGM_INT32_NOT_SUPPORTED,
        DCGM_INT32_NOT_PERMISSIONED,
        DCGM_INT64_BLANK,
        DCGM_INT64_NOT_FOUND,
        DCGM_INT64_NOT_SUPPORTED,
        DCGM_INT64_NOT_PERMISSIONED,
        DCGM_FP64_BLANK,
        DCGM_FP64_NOT_FOUND,
        DCGM_FP64_NOT_SUPPORTED,
        DCGM_FP64_NOT_PERMISSIONED,
        DCGM_STR_BLANK,
        DCGM_STR_NOT_FOUND,
        DCGM_STR_NOT_SUPPORTED,
        DCGM_STR_NOT_PERMISSIONED,
        // groups, modes, enums
        DCGM_GROUP_ALL_GPUS,
        DCGM_GROUP_ALL_NVSWITCHES,
        DCGM_GROUP_ALL_INSTANCES,
        DCGM_GROUP_ALL_COMPUTE_INSTANCES,
        DCGM_GROUP_ALL_ENTITIES,
        DCGM_GROUP_NULL,
        DCGM_GROUP_DEFAULT,
        DCGM_GROUP_EMPTY,
        DCGM_GROUP_DEFAULT_NVSWITCHES,
        DCGM_GROUP_DEFAULT_INSTANCES,
        DCGM_GROUP_DEFAULT_COMPUTE_INSTANCES,
        DCGM_GROUP_DEFAULT_EVERYTHING,
        DCGM_OPERATION_MODE_AUTO,
        DCGM_OPERATION_MODE_MANUAL,
        DcgmLoggingSeverityUnspecified,
        DcgmLoggingSeverityNone,
        DcgmLoggingSeverityError,
        DcgmLoggingSeverityWarning,
        DcgmLoggingSeverityInfo,
        DcgmLoggingSeverityDebug,
        DcgmEntityStatusUnknown,
        DcgmEntityStatusOk,
        DcgmEntityStatusUnsupported,
        DcgmEntityStatusInaccessible,
        DcgmEntityStatusLost,
        DcgmEntityStatusFake,
        DcgmEntityStatusDisabled,
        DcgmEntityStatusDetached,
        DcgmModuleIdProfiling,
        DcgmNvLinkLinkStateNotSupported,
        DcgmNvLinkLinkStateDisabled,
        DcgmNvLinkLinkStateDown,
        DcgmNvLinkLinkStateUp,
        DCGM_HEALTH_WATCH_ALL,
        DCGM_HEALTH_RESULT_PASS,
        DCGM_HEALTH_RESULT_WARN,
        DCGM_HEALTH_RESULT_FAIL,
        DCGM_HEALTH_WATCH_MAX_INCIDENTS_V2,
        // limits
        DCGM_MAX_NUM_DEVICES,
        DCGM_MAX_NUM_SWITCHES,
        DCGM_MAX_NUM_CPUS,
        DCGM_MAX_NUM_CPU_CORES,
        DCGM_CPU_CORE_BITMASK_COUNT_V1,
        DCGM_MAX_STR_LENGTH,
        DCGM_MAX_BLOB_LENGTH,
        DCGM_MAX_CLOCKS,
        DCGM_GROUP_MAX_ENTITIES_V1,
        DCGM_GROUP_MAX_ENTITIES_V2,
        DCGM_MAX_NUM_GROUPS,
        DCGM_MAX_NUM_FIELD_GROUPS,
        DCGM_MAX_FIELD_IDS_PER_FIELD_GROUP,
        DCGM_MAX_INSTANCES_PER_GPU,
        DCGM_MAX_COMPUTE_INSTANCES_PER_GPU,
        DCGM_MAX_TOTAL_INSTANCES_PER_GPU,
        DCGM_MAX_HIERARCHY_INFO,
        DCGM_NVLINK_MAX_LINKS_PER_GPU,
        DCGM_NVLINK_MAX_LINKS_PER_GPU_LEGACY3,
        DCGM_NVLINK_MAX_LINKS_PER_NVSWITCH,
        DCGM_MODULE_ID_COUNT_V1,
        DCGM_MODULE_ID_COUNT_V2,
        DCGM_PROF_MAX_NUM_GROUPS_V2,
        DCGM_PROF_MAX_FIELD_IDS_PER_GROUP_V2,
        DCGM_MAX_AGE_USEC_DEFAULT,
        DCGM_HE_PORT_NUMBER,
        DCGM_DEFAULT_SOCKET_PATH,
        DCGM_UNIX_SOCKET_PREFIX,
        DCGM_TCP_SOCKET_PREFIX,
        DCGM_VSOCK_SOCKET_PREFIX,
        // version words
        dcgmFieldValue_version1,
        dcgmFieldValue_version2,
        dcgmConnectV2Params_version1,
        dcgmConnectV2Params_version2,
        dcgmConnectV2Params_version,
        dcgmConnectV3Params_version1,
        dcgmConnectV3Params_version,
        dcgmStartEmbeddedV2Params_version1,
        dcgmStartEmbeddedV2Params_version2,
        dcgmStartEmbeddedV2Params_version3,
        dcgmStartEmbeddedV2Params_version,
        dcgmClockSet_version1,
        dcgmDeviceSupportedClockSets_version1,
        dcgmDeviceThermals_version1,
        dcgmDevicePowerLimits_version1,
        dcgmDeviceIdentifiers_version1,
        dcgmDeviceMemoryUsage_version1,
        dcgmDeviceSettings_version2,
        dcgmDeviceAttributes_version3,
        dcgmDeviceAttributes_version,
        dcgmMigHierarchy_version2,
        dcgmMigHierarchy_version,
        dcgmNvLinkStatus_version4,
        dcgmNvLinkStatus_version5,
        dcgmCpuHierarchyOwnedCores_version1,
        dcgmCpuHierarchy_version1,
        dcgmCpuHierarchy_version2,
        dcgmCpuHierarchy_version,
        dcgmFieldGroupInfo_version1,
        dcgmGroupInfo_version3,
        dcgmProfGetMetricGroups_version3,
        dcgmProfGetMetricGroups_version,
        dcgmVersionInfo_version2,
        dcgmVersionInfo_version,
        dcgmHostengineHealth_version1,
        dcgmHealthResponse_version5,
        dcgmNvLinkP2PStatus_version1,
        dcgmHostengineHealth_version,
    );

    // DCGM_FT_* are char codes: the file also gives the character.
    for (name, v) in [
        ("DCGM_FT_BINARY", DCGM_FT_BINARY),
        ("DCGM_FT_DOUBLE", DCGM_FT_DOUBLE),
        ("DCGM_FT_INT64", DCGM_FT_INT64),
        ("DCGM_FT_STRING", DCGM_FT_STRING),
        ("DCGM_FT_TIMESTAMP", DCGM_FT_TIMESTAMP),
    ] {
        if let Some(c) = lay.get(&format!("constchar {name}")) {
            if c != (v as char).to_string() {
                lay.errors
                    .push(format!("constchar {name}: C '{c}', Rust '{}'", v as char));
            }
        }
    }

    // Completeness: everything ffi.rs declares must be covered above.
    let source = std::fs::read_to_string(FFI_SOURCE).expect("read ffi.rs");
    // Not in the public headers / not C items: the embedded handle comes from the internal
    // dcgm_test_apis.h (dcgm-abi.md §4.5); the rest are Rust-side lists.
    let not_c = ["DCGM_EMBEDDED_HANDLE", "DEFAULT_LIBRARY_NAMES"];
    assert_eq!(
        DCGM_EMBEDDED_HANDLE, 0x7fff_ffff,
        "dcgm-abi.md §2: dcgmStartEmbedded handle"
    );
    for c in declared(&source, "const") {
        if !lay.checked_consts.contains(&c) && !not_c.contains(&c.as_str()) {
            lay.errors.push(format!(
                "ffi.rs declares const {c} but this test does not check it"
            ));
        }
    }
    for kind in ["struct", "union"] {
        for s in declared(&source, kind) {
            if !lay.checked_structs.contains(&s) && s != "Symbols" {
                lay.errors.push(format!(
                    "ffi.rs declares {kind} {s} but this test does not check it"
                ));
            }
        }
    }
    for t in declared(&source, "type") {
        if !lay.checked_types.contains(&t) {
            lay.errors.push(format!(
                "ffi.rs declares type {t} but this test does not check it"
            ));
        }
    }

    assert!(
        lay.errors.is_empty(),
        "ffi.rs disagrees with {LAYOUT}:\n  {}",
        lay.errors.join("\n  ")
    );
}

#[test]
fn version_word_is_size_or_version_shifted() {
    // MAKE_DCGM_VERSION is a bitwise OR of the size and (ver << 24), not an addition.
    assert_eq!(make_dcgm_version(4120, 1), 0x0100_1018);
    assert_eq!(
        dcgmFieldValue_version1 & 0x00ff_ffff,
        size_of::<dcgmFieldValue_v1>() as u32
    );
    assert_eq!(dcgmFieldValue_version1 >> 24, 1);
}
