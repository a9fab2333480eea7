//! The hand-written NVML binding (`src/source/nvml/ffi.rs`) checked against NVIDIA's `nvml.h` itself,
//! compiled at test time: `tests/headers/probe.py nvml` parses the header, has gcc confirm every
//! canonical prototype and print every struct's layout and every constant, and this test compares
//! every `fn_types` alias, every struct and union ffi.rs declares (size, member offsets, sizes and C
//! types) and every constant with what the header says. The header comes from NVIDIA's
//! `nvidia-nvml-dev` wheel (tests/run-all.sh installs it into `.venv` and exports `NVML_HEADER`);
//! without it, or without gcc or pycparser, the test prints `SKIP:` outside CI and fails in CI. The
//! fake libnvidia-ml is type-checked against `fn_types` at compile time, so this covers it too.
#![allow(clippy::unwrap_used, clippy::expect_used)] // tests fail loudly on purpose

use std::any::type_name;
use std::mem::{offset_of, size_of};
use std::path::{Path, PathBuf};
use std::process::Command;

use dcgm_otel::source::nvml::ffi::*;

use super::header_facts::{check_fn, fn_type_names, shorten, Facts};
use super::support::common::in_ci;

const ROOT: &str = env!("CARGO_MANIFEST_DIR");
const FFI_SOURCE: &str = concat!(env!("CARGO_MANIFEST_DIR"), "/src/source/nvml/ffi.rs");

/// `NVML_HEADER`, else the header of the `nvidia-nvml-dev` wheel in the project's `.venv`.
fn nvml_header() -> Option<PathBuf> {
    if let Some(p) = std::env::var_os("NVML_HEADER") {
        return Some(PathBuf::from(p)).filter(|p| p.is_file());
    }
    let lib = Path::new(ROOT).join(".venv/lib");
    let mut found: Vec<PathBuf> = std::fs::read_dir(&lib)
        .into_iter()
        .flatten()
        .flatten()
        .flat_map(|py| {
            let nvidia = py.path().join("site-packages/nvidia");
            std::fs::read_dir(nvidia)
                .into_iter()
                .flatten()
                .flatten()
                .map(|d| d.path().join("include/nvml.h"))
                .collect::<Vec<_>>()
        })
        .filter(|p| p.is_file())
        .collect();
    found.sort();
    found.pop()
}

/// A Python that can import pycparser: the project's `.venv`, else `python3`.
fn python_with_pycparser() -> Option<PathBuf> {
    let venv = Path::new(ROOT).join(".venv/bin/python");
    [venv, PathBuf::from("python3")].into_iter().find(|py| {
        Command::new(py)
            .args(["-c", "import pycparser"])
            .output()
            .is_ok_and(|o| o.status.success())
    })
}

/// The facts of the installed nvml.h, or `None` (after saying why) when a prerequisite is missing
/// outside CI.
fn live_facts() -> Option<(Facts, PathBuf)> {
    let header = nvml_header();
    let python = python_with_pycparser();
    let gcc = Command::new("gcc").arg("--version").output().is_ok();
    let (Some(header), Some(python), true) = (header, python, gcc) else {
        let why = "nvml.h (set NVML_HEADER or pip install nvidia-nvml-dev into .venv), \
                   Python with pycparser and gcc are needed";
        assert!(!in_ci(), "{why} (tests/run-all.sh installs them)");
        eprintln!("SKIP: {why} (tests/run-all.sh installs them)");
        return None;
    };
    let out = Path::new(env!("CARGO_TARGET_TMPDIR")).join("nvml-header-facts.txt");
    let run = Command::new(&python)
        .arg(Path::new(ROOT).join("tests/headers/probe.py"))
        .args(["nvml", "--header"])
        .arg(&header)
        .arg("--out")
        .arg(&out)
        .output()
        .expect("run tests/headers/probe.py");
    assert!(
        run.status.success(),
        "probe.py nvml {} failed:\n{}{}",
        header.display(),
        String::from_utf8_lossy(&run.stdout),
        String::from_utf8_lossy(&run.stderr)
    );
    let text = std::fs::read_to_string(&out).unwrap();
    let facts = Facts::parse(&text, &out.display().to_string());
    assert!(
        facts.protos.len() > 300,
        "{} looks truncated",
        out.display()
    );
    Some((facts, header))
}

macro_rules! fn_type_list {
    ($($f:ident),* $(,)?) => {
        vec![$((stringify!($f), type_name::<fn_types::$f>())),*]
    };
}

/// The type of a member, named by a closure that takes its address (`addr_of!` reads no union field).
fn member_type<S, T>(_: impl FnOnce(&S) -> *const T) -> &'static str {
    type_name::<T>()
}

fn expect_layout(facts: &Facts, errors: &mut Vec<String>, key: String, actual: usize) {
    match facts.layout.get(&key) {
        Some(&want) if want == actual as u64 => {}
        Some(&want) => errors.push(format!("{key}: nvml.h {want}, ffi.rs {actual}")),
        None => errors.push(format!("{key}: not in nvml.h")),
    }
}

/// One struct or union: its size, and each member's offset, size and C type.
macro_rules! check_aggregate {
    ($facts:ident, $errors:ident, $checked:ident, $t:ident { $($m:ident),* $(,)? }) => {{
        // ffi.rs may use another typedef name of the struct (nvmlProcessInfo_t is nvmlProcessInfo_v2_t)
        let rust_name = stringify!($t);
        $checked.push(rust_name);
        let name = $facts.canonical(rust_name).to_string();
        expect_layout(&$facts, &mut $errors, format!("sizeof {name}"), size_of::<$t>());
        $(
            let m = stringify!($m);
            expect_layout(&$facts, &mut $errors, format!("offsetof {name}.{m}"), offset_of!($t, $m));
            let rust = shorten(member_type(|s: &$t| std::ptr::addr_of!(s.$m)));
            match $facts.member_types.get(&format!("{name}.{m}")) {
                Some(c) => {
                    if let Some(why) = $facts.c_vs_rust(c, &rust) {
                        $errors.push(format!("{name}.{m}: {why}"));
                    }
                }
                None => $errors.push(format!("{name}.{m}: no such member in nvml.h")),
            }
        )*
        // every member the header declares is declared in Rust
        let listed = [$(stringify!($m)),*];
        let prefix = format!("{name}.");
        for key in $facts.member_types.keys() {
            if let Some(member) = key.strip_prefix(&prefix) {
                if !listed.contains(&member) {
                    $errors.push(format!("{name}: nvml.h member `{member}` is not declared in ffi.rs"));
                }
            }
        }
    }};
}

macro_rules! check_consts {
    ($facts:ident, $errors:ident, $checked:ident, $($c:ident),* $(,)?) => {{
        $(
            let name = stringify!($c);
            $checked.push(name);
            match $facts.values.get(name) {
                Some(&want) if i128::from(want) == $c as i128 => {}
                Some(&want) => $errors.push(format!("{name}: nvml.h {want}, ffi.rs {}", $c as i128)),
                None => $errors.push(format!("{name}: not an integer constant of nvml.h")),
            }
        )*
    }};
}

#[test]
fn ffi_matches_the_installed_nvml_h() {
    let Some((facts, header)) = live_facts() else {
        return;
    };
    let mut errors: Vec<String> = Vec::new();

    // Functions: every fn_types alias, and every alias is listed here.
    let listed = fn_type_list!(
        nvmlInit_v2,
        nvmlShutdown,
        nvmlErrorString,
        nvmlSystemGetDriverVersion,
        nvmlSystemGetProcessName,
        nvmlDeviceGetCount_v2,
        nvmlDeviceGetHandleByIndex_v2,
        nvmlDeviceGetUUID,
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
    );
    for (name, rust) in &listed {
        check_fn(&facts, name, rust, &mut errors);
    }
    let source = std::fs::read_to_string(FFI_SOURCE).unwrap();
    for name in fn_type_names(&source) {
        if !listed.iter().any(|(n, _)| *n == name) {
            errors.push(format!(
                "fn_types::{name} is declared in ffi.rs but not checked by this test"
            ));
        }
    }

    // Structs and unions: layout and member types; every one ffi.rs declares.
    let mut checked: Vec<&str> = Vec::new();
    check_aggregate!(
        facts,
        errors,
        checked,
        nvmlPciInfo_t {
            busIdLegacy,
            domain,
            bus,
            device,
            pciDeviceId,
            pciSubSystemId,
            busId
        }
    );
    check_aggregate!(facts, errors, checked, nvmlUtilization_t { gpu, memory });
    check_aggregate!(
        facts,
        errors,
        checked,
        nvmlMemory_v2_t {
            version,
            total,
            reserved,
            free,
            used
        }
    );
    check_aggregate!(
        facts,
        errors,
        checked,
        nvmlProcessInfo_t {
            pid,
            usedGpuMemory,
            gpuInstanceId,
            computeInstanceId
        }
    );
    check_aggregate!(
        facts,
        errors,
        checked,
        nvmlProcessUtilizationSample_t {
            pid,
            timeStamp,
            smUtil,
            memUtil,
            encUtil,
            decUtil
        }
    );
    check_aggregate!(
        facts,
        errors,
        checked,
        nvmlValue_t {
            dVal,
            siVal,
            uiVal,
            ulVal,
            ullVal,
            sllVal,
            usVal
        }
    );
    check_aggregate!(
        facts,
        errors,
        checked,
        nvmlFieldValue_t {
            fieldId,
            scopeId,
            timestamp,
            latencyUsec,
            valueType,
            nvmlReturn,
            value
        }
    );
    check_aggregate!(
        facts,
        errors,
        checked,
        nvmlEventData_t {
            device,
            eventType,
            eventData,
            gpuInstanceId,
            computeInstanceId
        }
    );
    for line in source.lines() {
        let Some(rest) = line
            .strip_prefix("pub struct ")
            .or_else(|| line.strip_prefix("pub union "))
        else {
            continue;
        };
        let name = rest.split([' ', '{']).next().unwrap();
        if name != "Symbols" && !checked.contains(&name) {
            errors.push(format!(
                "{name} is declared in ffi.rs but not checked by this test"
            ));
        }
    }

    // Constants: every `pub const` of ffi.rs.
    let mut consts: Vec<&str> = Vec::new();
    check_consts!(
        facts,
        errors,
        consts,
        NVML_SUCCESS,
        NVML_ERROR_UNINITIALIZED,
        NVML_ERROR_INVALID_ARGUMENT,
        NVML_ERROR_NOT_SUPPORTED,
        NVML_ERROR_NO_PERMISSION,
        NVML_ERROR_NOT_FOUND,
        NVML_ERROR_INSUFFICIENT_SIZE,
        NVML_ERROR_DRIVER_NOT_LOADED,
        NVML_ERROR_TIMEOUT,
        NVML_ERROR_FUNCTION_NOT_FOUND,
        NVML_ERROR_GPU_IS_LOST,
        NVML_ERROR_NO_DATA,
        NVML_ERROR_UNKNOWN,
        NVML_DEVICE_UUID_V2_BUFFER_SIZE,
        NVML_DEVICE_NAME_V2_BUFFER_SIZE,
        NVML_SYSTEM_DRIVER_VERSION_BUFFER_SIZE,
        NVML_DEVICE_SERIAL_BUFFER_SIZE,
        NVML_DEVICE_VBIOS_VERSION_BUFFER_SIZE,
        NVML_DEVICE_PCI_BUS_ID_BUFFER_SIZE,
        NVML_DEVICE_PCI_BUS_ID_BUFFER_V2_SIZE,
        NVML_CLOCK_GRAPHICS,
        NVML_CLOCK_SM,
        NVML_CLOCK_MEM,
        NVML_CLOCK_VIDEO,
        NVML_TEMPERATURE_GPU,
        NVML_PCIE_UTIL_TX_BYTES,
        NVML_PCIE_UTIL_RX_BYTES,
        NVML_FEATURE_ENABLED,
        NVML_DEVICE_MIG_ENABLE,
        nvmlEventTypeXidCriticalError,
        NVML_VALUE_TYPE_DOUBLE,
        NVML_VALUE_TYPE_UNSIGNED_INT,
        NVML_VALUE_TYPE_UNSIGNED_LONG,
        NVML_VALUE_TYPE_UNSIGNED_LONG_LONG,
        NVML_VALUE_TYPE_SIGNED_LONG_LONG,
        NVML_VALUE_TYPE_SIGNED_INT,
        NVML_VALUE_TYPE_UNSIGNED_SHORT,
        NVML_FI_DEV_ECC_SBE_VOL_TOTAL,
        NVML_FI_DEV_ECC_DBE_VOL_TOTAL,
        NVML_FI_DEV_ECC_SBE_AGG_TOTAL,
        NVML_FI_DEV_ECC_DBE_AGG_TOTAL,
        NVML_FI_DEV_RETIRED_SBE,
        NVML_FI_DEV_RETIRED_DBE,
        NVML_FI_DEV_RETIRED_PENDING,
        NVML_FI_DEV_NVLINK_CRC_FLIT_ERROR_COUNT_TOTAL,
        NVML_FI_DEV_NVLINK_CRC_DATA_ERROR_COUNT_TOTAL,
        NVML_FI_DEV_NVLINK_REPLAY_ERROR_COUNT_TOTAL,
        NVML_FI_DEV_NVLINK_RECOVERY_ERROR_COUNT_TOTAL,
        NVML_FI_DEV_NVLINK_BANDWIDTH_C0_TOTAL,
        NVML_FI_DEV_MEMORY_TEMP,
        NVML_FI_DEV_PCIE_REPLAY_COUNTER,
        NVML_FI_DEV_NVLINK_THROUGHPUT_DATA_TX,
        NVML_FI_DEV_NVLINK_THROUGHPUT_DATA_RX,
        NVML_FI_DEV_REMAPPED_COR,
        NVML_FI_DEV_REMAPPED_UNC,
        NVML_FI_DEV_REMAPPED_PENDING,
        NVML_FI_DEV_REMAPPED_FAILURE,
        NVML_FI_DEV_NVLINK_ERROR_DL_REPLAY,
        NVML_FI_DEV_NVLINK_ERROR_DL_RECOVERY,
        NVML_FI_DEV_NVLINK_ERROR_DL_CRC,
        NVML_NVLINK_MAX_LINKS,
        nvmlMemory_v2,
    );
    for line in source.lines() {
        let Some(rest) = line.strip_prefix("pub const ") else {
            continue;
        };
        let name: String = rest
            .chars()
            .take_while(|c| c.is_alphanumeric() || *c == '_')
            .collect();
        // Not C items: the library names tried in turn; NVML_NO_INSTANCE, the project's name for the
        // 0xFFFFFFFF nvml.h documents in gpuInstanceId outside MIG (checked below).
        let not_c = ["DEFAULT_LIBRARY_NAMES", "NVML_NO_INSTANCE"];
        if !not_c.contains(&name.as_str()) && !consts.contains(&name.as_str()) {
            errors.push(format!(
                "const {name} is declared in ffi.rs but not checked by this test"
            ));
        }
    }

    if facts.values.get("INVALID_GPU_INSTANCE_ID") != Some(&i64::from(NVML_NO_INSTANCE)) {
        errors.push(format!(
            "NVML_NO_INSTANCE {NVML_NO_INSTANCE:#x} is not nvml.h's INVALID_GPU_INSTANCE_ID {:?}",
            facts.values.get("INVALID_GPU_INSTANCE_ID")
        ));
    }

    assert!(
        errors.is_empty(),
        "src/source/nvml/ffi.rs disagrees with {}:\n  {}",
        header.display(),
        errors.join("\n  ")
    );
}
