//! ABI truth test for the hand-written NVML binding: every struct, offset and constant of
//! `src/source/nvml/ffi.rs` that crosses the C boundary is checked against the probe compiled from
//! NVIDIA's `nvml.h` (DCGM 4.6.0's `sdk/nvidia/nvml/dcgm_nvml.h`), `tests/fixtures/nvml/nvml-abi-layout.txt`,
//! parsed here at test time. Every line of the file must be checked by this test, and every `#[repr(C)]`
//! struct of ffi.rs must appear in the file.
#![allow(clippy::unwrap_used, clippy::expect_used)] // tests and benches fail loudly on purpose

use std::collections::{BTreeSet, HashMap};
use std::mem::{offset_of, size_of};

use dcgm_otel::source::nvml::ffi::*;

const LAYOUT: &str = concat!(
    env!("CARGO_MANIFEST_DIR"),
    "/tests/fixtures/nvml/nvml-abi-layout.txt"
);
const FFI_SOURCE: &str = concat!(env!("CARGO_MANIFEST_DIR"), "/src/source/nvml/ffi.rs");

fn layout() -> HashMap<String, u64> {
    std::fs::read_to_string(LAYOUT)
        .unwrap()
        .lines()
        .filter(|l| !l.starts_with('#') && !l.trim().is_empty())
        .map(|l| {
            let mut p = l.split_whitespace();
            let (kind, name, v) = (p.next().unwrap(), p.next().unwrap(), p.next().unwrap());
            (format!("{kind} {name}"), v.parse().unwrap())
        })
        .collect()
}

#[test]
fn structs_offsets_and_constants_match_nvml_h() {
    let facts = layout();
    let mut checked: BTreeSet<String> = BTreeSet::new();
    let mut errors: Vec<String> = Vec::new();
    let mut check = |key: String, actual: u64| {
        match facts.get(&key) {
            Some(&expected) if expected == actual => {}
            Some(&expected) => errors.push(format!("{key}: header {expected}, ffi.rs {actual}")),
            None => errors.push(format!("{key}: not in the layout file")),
        }
        checked.insert(key);
    };
    macro_rules! size {
        ($t:ty, $c:literal) => {
            check(format!("sizeof {}", $c), size_of::<$t>() as u64)
        };
    }
    macro_rules! off {
        ($t:ty, $c:literal, $($f:ident),*) => {
            $( check(format!("offsetof {}.{}", $c, stringify!($f)), offset_of!($t, $f) as u64); )*
        };
    }
    macro_rules! val {
        ($($n:ident),*) => {
            $( check(format!("value {}", stringify!($n)), $n as u64); )*
        };
    }
    size!(nvmlPciInfo_t, "nvmlPciInfo_t");
    off!(
        nvmlPciInfo_t,
        "nvmlPciInfo_t",
        busIdLegacy,
        domain,
        bus,
        device,
        pciDeviceId,
        pciSubSystemId,
        busId
    );
    size!(nvmlUtilization_t, "nvmlUtilization_t");
    off!(nvmlUtilization_t, "nvmlUtilization_t", gpu, memory);
    size!(nvmlMemory_v2_t, "nvmlMemory_v2_t");
    off!(
        nvmlMemory_v2_t,
        "nvmlMemory_v2_t",
        version,
        total,
        reserved,
        free,
        used
    );
    size!(nvmlProcessInfo_t, "nvmlProcessInfo_t");
    off!(
        nvmlProcessInfo_t,
        "nvmlProcessInfo_t",
        pid,
        usedGpuMemory,
        gpuInstanceId,
        computeInstanceId
    );
    size!(
        nvmlProcessUtilizationSample_t,
        "nvmlProcessUtilizationSample_t"
    );
    off!(
        nvmlProcessUtilizationSample_t,
        "nvmlProcessUtilizationSample_t",
        pid,
        timeStamp,
        smUtil,
        memUtil,
        encUtil,
        decUtil
    );
    size!(nvmlValue_t, "nvmlValue_t");
    size!(nvmlFieldValue_t, "nvmlFieldValue_t");
    off!(
        nvmlFieldValue_t,
        "nvmlFieldValue_t",
        fieldId,
        scopeId,
        timestamp,
        latencyUsec,
        valueType,
        nvmlReturn,
        value
    );
    size!(nvmlEventData_t, "nvmlEventData_t");
    off!(
        nvmlEventData_t,
        "nvmlEventData_t",
        device,
        eventType,
        eventData,
        gpuInstanceId,
        computeInstanceId
    );
    size!(nvmlReturn_t, "nvmlReturn_t");
    size!(nvmlDevice_t, "nvmlDevice_t");
    size!(nvmlEventSet_t, "nvmlEventSet_t");
    val!(
        nvmlMemory_v2,
        NVML_DEVICE_UUID_V2_BUFFER_SIZE,
        NVML_DEVICE_NAME_V2_BUFFER_SIZE,
        NVML_SYSTEM_DRIVER_VERSION_BUFFER_SIZE,
        NVML_DEVICE_SERIAL_BUFFER_SIZE,
        NVML_DEVICE_VBIOS_VERSION_BUFFER_SIZE,
        NVML_CLOCK_GRAPHICS,
        NVML_CLOCK_SM,
        NVML_CLOCK_MEM,
        NVML_CLOCK_VIDEO,
        NVML_TEMPERATURE_GPU,
        NVML_PCIE_UTIL_TX_BYTES,
        NVML_PCIE_UTIL_RX_BYTES,
        NVML_DEVICE_MIG_ENABLE,
        NVML_FEATURE_ENABLED,
        nvmlEventTypeXidCriticalError,
        NVML_VALUE_TYPE_DOUBLE,
        NVML_VALUE_TYPE_UNSIGNED_INT,
        NVML_VALUE_TYPE_UNSIGNED_LONG,
        NVML_VALUE_TYPE_UNSIGNED_LONG_LONG,
        NVML_VALUE_TYPE_SIGNED_LONG_LONG,
        NVML_VALUE_TYPE_SIGNED_INT,
        NVML_VALUE_TYPE_UNSIGNED_SHORT,
        NVML_ERROR_NOT_SUPPORTED,
        NVML_ERROR_GPU_IS_LOST,
        NVML_ERROR_INSUFFICIENT_SIZE,
        NVML_ERROR_TIMEOUT,
        NVML_ERROR_NOT_FOUND,
        NVML_ERROR_DRIVER_NOT_LOADED
    );
    // The memory error types and ECC counters the header defines are in the file too (unused by the
    // binding, which reads ECC through field values): account for them.
    for k in [
        "value NVML_MEMORY_ERROR_TYPE_CORRECTED",
        "value NVML_MEMORY_ERROR_TYPE_UNCORRECTED",
        "value NVML_VOLATILE_ECC",
        "value NVML_AGGREGATE_ECC",
    ] {
        checked.insert(k.to_string());
    }
    let unchecked: Vec<&String> = facts.keys().filter(|k| !checked.contains(*k)).collect();
    assert!(
        unchecked.is_empty(),
        "layout facts this test does not check: {unchecked:?}"
    );
    assert!(errors.is_empty(), "ABI mismatches:\n{}", errors.join("\n"));
    // Every #[repr(C)] struct of ffi.rs is covered.
    let src = std::fs::read_to_string(FFI_SOURCE).unwrap();
    for line in src.lines() {
        if let Some(rest) = line
            .strip_prefix("pub struct ")
            .or_else(|| line.strip_prefix("pub union "))
        {
            let name = rest.split([' ', '{']).next().unwrap();
            if name == "Symbols" {
                continue;
            }
            assert!(
                facts.contains_key(&format!("sizeof {name}")),
                "{name} is declared in ffi.rs but not checked against the header"
            );
        }
    }
}
