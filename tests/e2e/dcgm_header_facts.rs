//! The field catalog and every libdcgm function type checked against what NVIDIA's DCGM 4.6.0 sources
//! say, independently of the exporter's own table (`src/fields/dcgm-fields.tsv`) and of
//! `ffi::fn_types`: `tests/fixtures/dcgm/dcgm-header-facts.txt` was written by
//! `tests/headers/probe.py`, which compiled NVIDIA's headers and ran NVIDIA's own field registration
//! code (`tests/headers/README.md`). The fake libdcgm serves the catalog's metadata and is
//! type-checked against `fn_types` at compile time, so these checks cover it too.
#![allow(clippy::unwrap_used, clippy::expect_used)] // tests fail loudly on purpose

use std::any::type_name;
use std::collections::{BTreeSet, HashMap};

use dcgm_otel::fields::{catalog, EntityLevel, FieldId, ValueType};
use dcgm_otel::source::dcgm::ffi::{dcgmFieldValueEntityEnumeration_f, fn_types};

use super::header_facts::{check_fn, fn_type_names, shorten, Facts};

const FACTS: &str = concat!(
    env!("CARGO_MANIFEST_DIR"),
    "/tests/fixtures/dcgm/dcgm-header-facts.txt"
);
const LAYOUT: &str = concat!(
    env!("CARGO_MANIFEST_DIR"),
    "/tests/fixtures/dcgm/dcgm-abi-layout.txt"
);
const FFI_SOURCE: &str = concat!(env!("CARGO_MANIFEST_DIR"), "/src/source/dcgm/ffi.rs");

/// The DCGM commit both fixture files come from.
const DCGM_4_6_0: &str = "72fa3feaa67d716a75323a8f47c34ff3ee73f824";

/// `DCGM_FI_*` names of dcgm_fields.h / dcgm_fields_internal.hpp that mark the ends of id ranges or
/// count fields; they share an id with a real field but are not fields themselves.
const RANGE_MARKERS: &[&str] = &[
    "DCGM_FI_DEV_FIRST_CONNECTX_FIELD_ID",
    "DCGM_FI_FIRST_VGPU_FIELD_ID",
    "DCGM_FI_MAX_NVSWITCH_FIELDS",
    "DCGM_FI_MAX_VGPU_FIELDS",
    "DCGM_FI_PROF_C2C_THROUGHPUT_FIRST",
    "DCGM_FI_PROF_C2C_THROUGHPUT_LAST",
    "DCGM_FI_PROF_FIRST_ID",
    "DCGM_FI_PROF_LAST_ID",
    "DCGM_FI_PROF_NVLINK_AGG_THROUGHPUT_FIRST",
    "DCGM_FI_PROF_NVLINK_AGG_THROUGHPUT_LAST",
    "DCGM_FI_PROF_NVLINK_THROUGHPUT_LEGACY_FIRST",
    "DCGM_FI_PROF_NVLINK_THROUGHPUT_LEGACY_LAST",
    "DCGM_FI_PROF_NVLINK_THROUGHPUT_PER_LINK_FIRST",
    "DCGM_FI_PROF_NVLINK_THROUGHPUT_PER_LINK_LAST",
    "DCGM_FI_PROF_PCIE_THROUGHPUT_FIRST",
    "DCGM_FI_PROF_PCIE_THROUGHPUT_LAST",
    "DCGM_FI_SYSMON_FIRST_ID",
    "DCGM_FI_SYSMON_LAST_ID",
];

fn facts() -> Facts {
    let text = std::fs::read_to_string(FACTS)
        .unwrap_or_else(|e| panic!("cannot read {FACTS}: {e} (tests/headers/README.md)"));
    let facts = Facts::parse(&text, FACTS);
    assert!(
        facts.meta.len() > 600 && facts.protos.len() > 90,
        "{FACTS} looks truncated"
    );
    facts
}

/// The `DCGM_FE_*` enumerator a catalog level stands for (no wildcard: a new level needs a line).
fn level_name(level: EntityLevel) -> &'static str {
    match level {
        EntityLevel::Global => "DCGM_FE_NONE",
        EntityLevel::Gpu => "DCGM_FE_GPU",
        EntityLevel::GpuInstance => "DCGM_FE_GPU_I",
        EntityLevel::ComputeInstance => "DCGM_FE_GPU_CI",
        EntityLevel::Vgpu => "DCGM_FE_VGPU",
        EntityLevel::Switch => "DCGM_FE_SWITCH",
        EntityLevel::Link => "DCGM_FE_LINK",
        EntityLevel::Cpu => "DCGM_FE_CPU",
        EntityLevel::CpuCore => "DCGM_FE_CPU_CORE",
        EntityLevel::ConnectX => "DCGM_FE_CONNECTX",
    }
}

/// The `DCGM_FT_*` macro a catalog value type stands for.
fn type_name_of(t: ValueType) -> &'static str {
    match t {
        ValueType::Int64 => "DCGM_FT_INT64",
        ValueType::Double => "DCGM_FT_DOUBLE",
        ValueType::String => "DCGM_FT_STRING",
        ValueType::Binary => "DCGM_FT_BINARY",
    }
}

#[test]
fn facts_come_from_the_same_dcgm_as_the_layout_file() {
    let facts = facts();
    let layout = std::fs::read_to_string(LAYOUT).unwrap();
    let first = layout.lines().next().unwrap_or("");
    assert!(first.contains(DCGM_4_6_0), "{LAYOUT}: {first}");
    assert!(
        facts.header.iter().any(|l| l.contains(DCGM_4_6_0)),
        "{FACTS} does not name DCGM commit {DCGM_4_6_0} in its first lines"
    );
}

/// Every field the catalog knows has the id, the value type and the entity level NVIDIA's field
/// table registers for it; every field NVIDIA registers is in the catalog; every name the catalog
/// accepts is NVIDIA's name for that id.
#[test]
fn catalog_matches_dcgm_4_6_field_table() {
    let facts = facts();
    let cat = catalog();
    let mut errors: Vec<String> = Vec::new();

    // Ids: the catalog's and the registered ones are the same set, with the same type and level.
    let mut catalog_ids = BTreeSet::new();
    for id in 0..=FieldId::MAX {
        let Some(info) = cat.by_id(id) else { continue };
        catalog_ids.insert(id);
        let Some(meta) = facts.meta.get(&id) else {
            errors.push(format!(
                "{} ({id}): no field {id} is registered in dcgm_fields.cpp",
                info.name
            ));
            continue;
        };
        let want_type = facts.chars[type_name_of(info.value_type)];
        if meta.type_char != want_type {
            errors.push(format!(
                "{} ({id}): type '{}' in DCGM, catalog says '{want_type}' ({})",
                info.name,
                meta.type_char,
                type_name_of(info.value_type)
            ));
        }
        let want_level = facts.values[level_name(info.level)];
        if meta.level != want_level {
            errors.push(format!(
                "{} ({id}): entity level {} in DCGM, catalog says {} ({want_level})",
                info.name,
                meta.level,
                level_name(info.level)
            ));
        }
    }
    for id in facts.meta.keys() {
        if !catalog_ids.contains(id) {
            errors.push(format!(
                "field {id} is registered in dcgm_fields.cpp but missing from the catalog"
            ));
        }
    }

    // Names: NVIDIA's name → id (public and internal headers).
    let header_names: HashMap<&str, i64> = facts
        .values
        .iter()
        .chain(&facts.internal)
        .filter(|(n, _)| n.starts_with("DCGM_FI_"))
        .map(|(n, v)| (n.as_str(), *v))
        .collect();
    let mut renamed_later = Vec::new();
    for (name, id) in cat.names() {
        match header_names.get(name) {
            Some(&want) if want == i64::from(id) => {}
            Some(&want) => errors.push(format!(
                "{name}: DCGM defines it as {want}, the catalog as {id}"
            )),
            // A name from a later DCGM (4.6.1 renamed some fields, keeping the old names as
            // aliases): accepted only as a second name of an id 4.6.0 registers and names.
            None => {
                let has_4_6_0_name = cat.names().any(|(other, other_id)| {
                    other_id == id && header_names.get(other) == Some(&i64::from(id))
                });
                if facts.meta.contains_key(&id) && has_4_6_0_name {
                    renamed_later.push(name);
                } else {
                    errors.push(format!(
                        "{name} ({id}): not a DCGM 4.6.0 name, and id {id} has no 4.6.0 name in the catalog"
                    ));
                }
            }
        }
        if RANGE_MARKERS.contains(&name) {
            errors.push(format!("{name} is a range marker, not a field"));
        }
    }
    // Every NVIDIA name of a registered field resolves (range markers excepted: they are named
    // in the header files).
    for marker in RANGE_MARKERS {
        if !header_names.contains_key(marker) {
            errors.push(format!(
                "{marker} is listed as a range marker but DCGM has no such name"
            ));
        }
    }
    for (name, id) in &header_names {
        let Ok(id16) = FieldId::try_from(*id) else {
            continue;
        };
        if !facts.meta.contains_key(&id16) || RANGE_MARKERS.contains(name) {
            continue;
        }
        match cat.by_name(name) {
            Some(info) if info.id == id16 => {}
            Some(info) => errors.push(format!(
                "{name}: DCGM id {id}, the catalog resolves it to {}",
                info.id
            )),
            None => errors.push(format!(
                "{name} ({id}): a registered DCGM field the catalog does not know by this name"
            )),
        }
    }
    assert!(
        errors.is_empty(),
        "the field catalog disagrees with NVIDIA's DCGM 4.6.0 ({FACTS}), {} difference(s):\n  {}",
        errors.len(),
        errors.join("\n  ")
    );
    assert!(
        renamed_later.len() < 60,
        "{} catalog names are not DCGM 4.6.0 names: {renamed_later:?}",
        renamed_later.len()
    );
}

/// Every `fn_types` alias (how the exporter calls libdcgm, and, through the fake's compile-time
/// check, how the fake libdcgm exports it) against the prototype in dcgm_agent.h / dcgm_fields.h.
macro_rules! fn_type_list {
    ($($f:ident),* $(,)?) => {
        vec![$((stringify!($f), type_name::<fn_types::$f>())),*]
    };
}

#[test]
fn fn_types_match_dcgm_4_6_prototypes() {
    let facts = facts();
    let listed = fn_type_list!(
        dcgmInit,
        dcgmShutdown,
        dcgmStartEmbedded,
        dcgmStartEmbedded_v2,
        dcgmStopEmbedded,
        dcgmConnect_v2,
        dcgmConnect_v3,
        dcgmDisconnect,
        dcgmGetValuesSince_v2,
        dcgmHealthSet,
        dcgmHealthCheck,
        dcgmGetNvLinkP2PStatus,
        dcgmGetAllDevices,
        dcgmGetAllSupportedDevices,
        dcgmGetDeviceAttributes,
        dcgmGetEntityGroupEntities,
        dcgmGetGpuInstanceHierarchy,
        dcgmGetNvLinkLinkStatus,
        dcgmGetCpuHierarchy,
        dcgmGetCpuHierarchy_v2,
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
        dcgmHostengineIsHealthy,
        dcgmVersionInfo,
        errorString,
        DcgmFieldGetById,
    );
    let mut errors = Vec::new();
    for (name, rust) in &listed {
        check_fn(&facts, name, rust, &mut errors);
    }
    // The callback type dcgmGetValuesSince_v2 takes.
    let callback = shorten(type_name::<dcgmFieldValueEntityEnumeration_f>());
    match facts.typedefs.get("dcgmFieldValueEntityEnumeration_f") {
        Some(c) => errors.extend(
            facts
                .c_vs_rust(c, &callback)
                .map(|why| format!("dcgmFieldValueEntityEnumeration_f: {why}")),
        ),
        None => errors.push("dcgmFieldValueEntityEnumeration_f: not in the facts".into()),
    }
    // Completeness: every alias ffi.rs declares is listed above.
    let source = std::fs::read_to_string(FFI_SOURCE).unwrap();
    let declared = fn_type_names(&source);
    assert!(declared.len() > 30, "fn_types looks empty: {declared:?}");
    for name in &declared {
        if !listed.iter().any(|(n, _)| n == name) {
            errors.push(format!(
                "fn_types::{name} is declared in ffi.rs but not checked by this test"
            ));
        }
    }
    assert!(
        errors.is_empty(),
        "ffi::fn_types disagrees with NVIDIA's DCGM 4.6.0 headers ({FACTS}):\n  {}",
        errors.join("\n  ")
    );
}
