//! The DCGM field catalog: every field NVIDIA's DCGM 4.x defines, by name and by id.
//!
//! The catalog is data, not code: `dcgm-fields.tsv` (name, id, type, entity level, notes — one row per
//! name, deprecated aliases included) and `legacy-1x-names.tsv` (dcgm-exporter 1.x lowercase names) are
//! embedded in the binary and indexed once, on first use. Everything that needs to know what a field
//! *is* — the counters CSV parser, the sources, the OTel unit mapping — asks this module.

use std::collections::HashMap;
use std::sync::LazyLock;

pub mod clock_events;
pub mod health;
pub mod p2p;
pub mod xid;

const FIELDS_TSV: &str = include_str!("dcgm-fields.tsv");
const LEGACY_TSV: &str = include_str!("legacy-1x-names.tsv");

/// A DCGM field id (`unsigned short` in the C API).
pub type FieldId = u16;

/// The value type DCGM stores for a field (`DCGM_FT_*`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum ValueType {
    /// `DCGM_FT_INT64` ('i')
    Int64,
    /// `DCGM_FT_DOUBLE` ('d')
    Double,
    /// `DCGM_FT_STRING` ('s')
    String,
    /// `DCGM_FT_BINARY` ('b'): opaque blobs, never rendered as a number
    Binary,
}

impl ValueType {
    fn from_char(c: &str) -> Option<Self> {
        match c {
            "i" => Some(Self::Int64),
            "d" => Some(Self::Double),
            "s" => Some(Self::String),
            "b" => Some(Self::Binary),
            _ => None,
        }
    }
    pub fn is_numeric(self) -> bool {
        matches!(self, Self::Int64 | Self::Double)
    }
}

/// The kind of entity a field is measured on (`DCGM_FE_*` level in the field metadata).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum EntityLevel {
    /// Global (`DCGM_FE_NONE`): driver version and the like.
    Global,
    Gpu,
    GpuInstance,
    ComputeInstance,
    Vgpu,
    Switch,
    Link,
    Cpu,
    CpuCore,
    ConnectX,
}

impl EntityLevel {
    fn parse(s: &str) -> Option<Self> {
        Some(match s {
            "NONE" => Self::Global,
            "GPU" => Self::Gpu,
            "GPU_I" => Self::GpuInstance,
            "GPU_CI" => Self::ComputeInstance,
            "VGPU" => Self::Vgpu,
            "SWITCH" => Self::Switch,
            "LINK" => Self::Link,
            "CPU" => Self::Cpu,
            "CPU_CORE" => Self::CpuCore,
            "CONNECTX" => Self::ConnectX,
            _ => return None,
        })
    }

    /// Whether a field of this level is read on GPU and MIG-instance entities (dcgm-exporter watches
    /// global, GPU, GPU_I, GPU_CI and vGPU level fields for its GPU entity group).
    pub fn applies_to_gpus(self) -> bool {
        matches!(
            self,
            Self::Global | Self::Gpu | Self::GpuInstance | Self::ComputeInstance | Self::Vgpu
        )
    }

    /// Whether DCGM measures a field of this level per MIG GPU instance (its framebuffer, its BAR1,
    /// its profiling activity, the XIDs raised in it: DCGM's `GPU_I`/`GPU_CI` scopes) rather than for
    /// the whole board (power, energy, temperatures, clocks, ECC, PCIe, NvLink: `GPU` scope). On a GPU
    /// in MIG mode the OTLP entity model writes the former on each instance's Resource and the latter
    /// once, on the GPU's.
    pub fn measured_per_gpu_instance(self) -> bool {
        matches!(self, Self::GpuInstance | Self::ComputeInstance)
    }

    /// Whether a field of this level is read on NvLink entities.
    pub fn applies_to_links(self) -> bool {
        matches!(self, Self::Link)
    }
}

/// One DCGM field as the catalog knows it.
#[derive(Debug, Clone, PartialEq)]
pub struct FieldInfo {
    /// The canonical (non-deprecated) `DCGM_FI_*` name.
    pub name: &'static str,
    pub id: FieldId,
    pub value_type: ValueType,
    pub level: EntityLevel,
    /// The unit DCGM declares (`unit=` in the notes), if any: `W`, `C`, `mJ`, `MB/s`, `#`…
    pub unit: Option<&'static str>,
    /// DCGM's one-line description (`desc=` in the notes).
    pub description: &'static str,
}

impl FieldInfo {
    /// Profiling (DCP) fields: ids 1000..1100, served by DCGM's profiling module.
    pub fn is_profiling(&self) -> bool {
        (1000..1100).contains(&self.id)
    }
}

/// The whole catalog, indexed by name (canonical, deprecated alias and 1.x legacy names) and by id.
pub struct Catalog {
    /// Indexed by field id (ids are small and dense: a lookup per value read must cost no hash).
    by_id: Vec<Option<FieldInfo>>,
    /// Number of `Some` entries in `by_id`.
    ids: usize,
    by_name: HashMap<&'static str, FieldId>,
    legacy: HashMap<&'static str, FieldId>,
}

static CATALOG: LazyLock<Catalog> = LazyLock::new(Catalog::load);

/// The catalog built from the embedded tables.
pub fn catalog() -> &'static Catalog {
    &CATALOG
}

fn note_value<'a>(notes: &'a str, key: &str) -> Option<&'a str> {
    notes
        .split("; ")
        .find_map(|part| part.strip_prefix(key))
        .map(str::trim)
}

impl Catalog {
    fn load() -> Self {
        let mut by_id: Vec<Option<FieldInfo>> = Vec::new();
        let mut by_name = HashMap::new();
        for line in FIELDS_TSV.lines().skip(1) {
            let mut cols = line.splitn(5, '\t');
            let (Some(name), Some(id), Some(ty), Some(level)) =
                (cols.next(), cols.next(), cols.next(), cols.next())
            else {
                continue;
            };
            let notes = cols.next().unwrap_or("");
            // Rows typed '-' are markers or names without metadata (not fields one can watch).
            let (Ok(id), Some(value_type), Some(level)) = (
                id.parse::<FieldId>(),
                ValueType::from_char(ty),
                EntityLevel::parse(level),
            ) else {
                continue;
            };
            by_name.insert(name, id);
            let alias = notes.starts_with("deprecated alias of ");
            let slot = usize::from(id);
            if alias && by_id.get(slot).is_some_and(Option::is_some) {
                continue;
            }
            let canonical = if alias {
                notes
                    .trim_start_matches("deprecated alias of ")
                    .split(';')
                    .next()
                    .unwrap_or(name)
            } else {
                name
            };
            if by_id.len() <= slot {
                by_id.resize_with(slot + 1, || None);
            }
            let info = FieldInfo {
                name: canonical,
                id,
                value_type,
                level,
                unit: note_value(notes, "unit=").filter(|u| *u != "#"),
                description: note_value(notes, "desc=").unwrap_or(""),
            };
            if let Some(entry) = by_id.get_mut(slot) {
                *entry = Some(info);
            }
        }
        let mut legacy = HashMap::new();
        for line in LEGACY_TSV.lines() {
            if line.starts_with('#') || line.starts_with("name\t") {
                continue;
            }
            if let Some((name, id)) = line.split_once('\t') {
                if let Ok(id) = id.trim().parse::<FieldId>() {
                    legacy.insert(name, id);
                }
            }
        }
        Catalog {
            ids: by_id.iter().filter(|i| i.is_some()).count(),
            by_id,
            by_name,
            legacy,
        }
    }

    /// Look a field up by any of its names: canonical, deprecated alias, or dcgm-exporter 1.x name.
    pub fn by_name(&self, name: &str) -> Option<&FieldInfo> {
        let id = self.by_name.get(name).or_else(|| self.legacy.get(name))?;
        self.by_id(*id)
    }

    pub fn by_id(&self, id: FieldId) -> Option<&FieldInfo> {
        self.by_id.get(usize::from(id))?.as_ref()
    }

    /// Whether `name` is one of the 1.x lowercase names.
    pub fn is_legacy_name(&self, name: &str) -> bool {
        self.legacy.contains_key(name)
    }

    /// Number of distinct field ids.
    pub fn len(&self) -> usize {
        self.ids
    }

    pub fn is_empty(&self) -> bool {
        self.ids == 0
    }

    /// Every known name (canonical and aliases), for tests and diagnostics.
    pub fn names(&self) -> impl Iterator<Item = (&'static str, FieldId)> + '_ {
        self.by_name.iter().map(|(n, id)| (*n, *id))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// What NVIDIA's DCGM 4.6.0 sources say (`tests/headers/probe.py` compiled the headers and ran
    /// the field registration of dcgm_fields.cpp): names → ids, and id → (type char, entity level).
    struct Dcgm460 {
        ids: HashMap<&'static str, u16>,
        registered: HashMap<u16, (&'static str, &'static str)>,
        levels: HashMap<&'static str, &'static str>,
    }

    fn dcgm_4_6_0() -> Dcgm460 {
        const FACTS: &str = include_str!("../../tests/fixtures/dcgm/dcgm-header-facts.txt");
        let mut ids = HashMap::new();
        let mut registered = HashMap::new();
        let mut levels = HashMap::new();
        for line in FACTS.lines().filter(|l| !l.starts_with('#')) {
            let cols: Vec<&str> = line.split(' ').collect();
            match cols.as_slice() {
                ["define" | "internal", name, id, ..] if name.starts_with("DCGM_FI_") => {
                    ids.insert(*name, id.parse().unwrap());
                }
                ["meta", id, ty, level, ..] => {
                    registered.insert(id.parse().unwrap(), (*ty, *level));
                }
                ["enumval", name, value] => {
                    if let Some(level) = name.strip_prefix("DCGM_FE_") {
                        levels.insert(*value, level);
                    }
                }
                _ => {}
            }
        }
        Dcgm460 {
            ids,
            registered,
            levels,
        }
    }

    /// Each row of `dcgm-fields.tsv` against NVIDIA's sources rather than against the catalog built
    /// from the same rows: a row NVIDIA names has NVIDIA's id; a typed row has the type and entity
    /// level NVIDIA registers for its id, and resolves in the catalog to them; a row marked `-` is
    /// not a field the catalog serves. (tests/e2e/dcgm_header_facts.rs checks the catalog's API the
    /// same way.)
    #[test]
    fn every_row_of_the_reference_table_is_what_dcgm_4_6_defines() {
        let dcgm = dcgm_4_6_0();
        assert!(dcgm.registered.len() > 600 && dcgm.levels.len() >= 10);
        let cat = catalog();
        let mut errors = Vec::new();
        let mut checked = 0;
        for line in FIELDS_TSV.lines().skip(1) {
            let cols: Vec<&str> = line.split('\t').collect();
            let (name, id, ty, level) = (cols[0], cols[1], cols[2], cols[3]);
            let id: u16 = id.parse().unwrap();
            if let Some(&want) = dcgm.ids.get(name) {
                if want != id {
                    errors.push(format!("{name}: row id {id}, DCGM {want}"));
                }
            } else if ty != "-" && !cols[4].contains("ONLY IN DCGM 4.6.1") {
                errors.push(format!("{name}: typed, but not a DCGM 4.6.0 name"));
            }
            let registered = dcgm.registered.get(&id);
            if ty == "-" {
                // markers, names without metadata, ids only a later DCGM has
                if let Some(info) = cat.by_name(name) {
                    errors.push(format!(
                        "{name}: marked '-' but the catalog serves {info:?}"
                    ));
                }
                continue;
            }
            let Some(&(want_ty, want_level)) = registered else {
                errors.push(format!(
                    "{name}: typed '{ty}' but DCGM registers no field {id}"
                ));
                continue;
            };
            let want_level = dcgm.levels.get(want_level).copied().unwrap_or("?");
            if ty != want_ty || level != want_level {
                errors.push(format!(
                    "{name} ({id}): row {ty} {level}, DCGM {want_ty} {want_level}"
                ));
            }
            match cat.by_name(name) {
                Some(info)
                    if info.id == id
                        && ValueType::from_char(want_ty) == Some(info.value_type)
                        && EntityLevel::parse(want_level) == Some(info.level) => {}
                other => errors.push(format!("{name}: the catalog resolves it to {other:?}")),
            }
            checked += 1;
        }
        assert!(errors.is_empty(), "{}", errors.join("\n"));
        assert!(checked > 900, "only {checked} rows checked");
    }

    #[test]
    fn aliases_resolve_to_the_canonical_field() {
        let cat = catalog();
        let alias = cat.by_name("DCGM_FI_DEV_XID_ERRORS").unwrap();
        assert_eq!(alias.id, 230);
        assert_eq!(alias.name, "DCGM_FI_DEV_XID_ERROR");
        assert_eq!(
            cat.by_name("DCGM_FI_DRIVER_VERSION").unwrap().value_type,
            ValueType::String
        );
        assert_eq!(
            cat.by_name("DCGM_FI_DEV_POWER_USAGE").unwrap().unit,
            Some("W")
        );
    }

    #[test]
    fn legacy_names_resolve() {
        let cat = catalog();
        assert_eq!(cat.by_name("dcgm_sm_clock").unwrap().id, 100);
        assert_eq!(cat.by_name("dcgm_gpu_temp").unwrap().id, 150);
        assert_eq!(
            cat.by_name("dcgm_fi_prof_gr_engine_active").unwrap().id,
            1001
        );
        assert!(cat.by_name("dcgm_no_such_thing").is_none());
    }

    #[test]
    fn levels_and_profiling() {
        let cat = catalog();
        assert!(cat
            .by_name("DCGM_FI_PROF_DRAM_ACTIVE")
            .unwrap()
            .is_profiling());
        assert_eq!(
            cat.by_name("DCGM_FI_DEV_NVLINK_PPCNT_PLR_SYNC_EVENTS")
                .unwrap()
                .level,
            EntityLevel::Link
        );
    }
}
