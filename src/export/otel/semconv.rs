//! Semantic-convention metric names for DCGM data (`--otel-metric-names semconv|both`), as one data
//! table: DCGM field (or derived family) → convention name, instrument kind, UCUM unit, scale and
//! attributes. The OTLP request builder reads the table ([`Plan`] resolves it against a counters CSV);
//! no name, unit or factor lives in code. The Prometheus side never reads it.
//!
//! The names, kinds, units and attributes follow OpenTelemetry semantic conventions
//! [`SEMCONV_VERSION`] (`model/hardware`: `gpu` and the generic `hw.energy`, `hw.power`,
//! `hw.temperature`, `hw.errors`, `hw.status`; stability: development).
//!
//! Rules the table follows:
//! - One DCGM source per series: `hw.errors{error.type=corrected|uncorrected}` counts the lifetime
//!   aggregate ECC counters (`*_AGG_TOTAL`); the volatile ones (`*_VOL_TOTAL`, reset at each driver
//!   load) keep their DCGM names, so no error is counted twice.
//! - A value is the raw one (after the inputs are combined) times or divided by the row's [`Scale`]:
//!   `%` → ratio (÷100), MiB → By (×1,048,576), mJ → J (÷1000).
//! - Several rows may give the same metric and attributes (fallbacks: memory limit from
//!   `DCGM_FI_DEV_FB_TOTAL`, else used + free + reserved, else used + free): per series the first row
//!   whose inputs are all present wins.
//! - In `semconv` mode a counters row whose field is the first input of a row here is sent under the
//!   convention name only; every other row keeps its DCGM (CSV) name — the prefix rule: `hw.*` names
//!   follow the conventions, `DCGM_*` (the CSV's names) are DCGM's fields with DCGM's units.

use std::collections::HashMap;

use clap::ValueEnum;

use crate::counters::{CounterSet, MetricKind};
use crate::fields::FieldId;

/// The semantic-conventions release the table follows.
pub const SEMCONV_VERSION: &str = "1.44.0";

/// The schema URL of [`SEMCONV_VERSION`], on every ResourceMetrics, ScopeMetrics and log request
/// whose attribute names follow the conventions.
pub fn schema_url() -> String {
    SCHEMA_URL.to_string()
}

/// `https://opentelemetry.io/schemas/` and [`SEMCONV_VERSION`] (a test keeps them together).
pub const SCHEMA_URL: &str = "https://opentelemetry.io/schemas/1.44.0";

/// Which metric names OTLP requests carry.
#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum)]
pub enum MetricNames {
    /// One instrument per counters row, named after the DCGM field (today's request).
    Dcgm,
    /// Semantic-convention names where a convention exists; DCGM names for the other fields.
    Semconv,
    /// Both sets in one request.
    Both,
}

impl MetricNames {
    /// Whether the DCGM-named instruments of mapped fields are sent.
    pub fn dcgm(self) -> bool {
        self != MetricNames::Semconv
    }
    /// Whether the semantic-convention metrics are sent.
    pub fn semconv(self) -> bool {
        self != MetricNames::Dcgm
    }
}

/// The OTel instrument a row becomes.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Instrument {
    /// A Gauge.
    Gauge,
    /// A non-monotonic cumulative Sum (always cumulative, as an SDK UpDownCounter).
    UpDownCounter,
    /// A monotonic Sum (cumulative or delta per `--otlp-temporality`).
    Counter,
}

impl Instrument {
    pub fn as_str(self) -> &'static str {
        match self {
            Instrument::Gauge => "gauge",
            Instrument::UpDownCounter => "updowncounter",
            Instrument::Counter => "counter",
        }
    }
}

/// What a row reads from an entity.
#[derive(Debug, Clone, Copy, PartialEq)]
pub enum Input {
    /// One DCGM field (any of its names; aliases share the field id).
    Field(&'static str),
    /// The sum of DCGM fields, all present.
    Sum(&'static [&'static str]),
    /// A field over the sum of fields (all present, the sum above zero).
    Ratio(&'static str, &'static [&'static str]),
    /// A derived family (`Snapshot::derived`, keyed by family name): the sum of the entity's samples.
    DerivedSum(&'static str),
    /// A derived family of DCGM health results (0 pass, 10 warn, 20 fail): the worst of the entity's
    /// samples as `hw.state` — 1 on the current state's series, 0 on the others ([`HW_STATES`]).
    DerivedHealth(&'static str),
}

impl Input {
    /// The DCGM fields read, the first one being the field the row stands for.
    pub fn fields(&self) -> Vec<&'static str> {
        match *self {
            Input::Field(f) => vec![f],
            Input::Sum(fs) => fs.to_vec(),
            Input::Ratio(n, d) => std::iter::once(n).chain(d.iter().copied()).collect(),
            Input::DerivedSum(_) | Input::DerivedHealth(_) => Vec::new(),
        }
    }

    /// The derived family read, if any.
    pub fn derived(&self) -> Option<&'static str> {
        match *self {
            Input::DerivedSum(f) | Input::DerivedHealth(f) => Some(f),
            _ => None,
        }
    }

    /// How the docs/otlp.md table writes the input.
    pub fn describe(&self) -> String {
        match *self {
            Input::Field(f) => format!("`{f}`"),
            Input::Sum(fs) => fs
                .iter()
                .map(|f| format!("`{f}`"))
                .collect::<Vec<_>>()
                .join(" + "),
            Input::Ratio(n, d) => {
                let den = d
                    .iter()
                    .map(|f| format!("`{f}`"))
                    .collect::<Vec<_>>()
                    .join(" + ");
                if d.len() > 1 {
                    format!("`{n}` / ({den})")
                } else {
                    format!("`{n}` / {den}")
                }
            }
            Input::DerivedSum(f) => format!("`{f}` (sum per entity)"),
            Input::DerivedHealth(f) => format!("`{f}` (worst per entity)"),
        }
    }
}

/// `hw.state` values a health result maps to: (state, lowest DCGM health result of that state).
pub const HW_STATES: &[(&str, f64)] = &[("ok", 0.0), ("degraded", 10.0), ("failed", 20.0)];

/// The `hw.state` of a DCGM health result (0 pass → ok, 10 warn → degraded, 20 fail → failed).
pub fn hw_state(result: f64) -> &'static str {
    HW_STATES
        .iter()
        .rev()
        .find(|(_, at)| result >= *at)
        .map_or("ok", |(s, _)| s)
}

/// A unit conversion: a factor or a divisor (a divisor keeps `mJ / 1000` exact where `× 0.001` would
/// round differently).
#[derive(Debug, Clone, Copy, PartialEq)]
pub enum Scale {
    Times(f64),
    Per(f64),
}

impl Scale {
    pub fn apply(self, v: f64) -> f64 {
        match self {
            Scale::Times(k) => v * k,
            Scale::Per(k) => v / k,
        }
    }

    /// Whether integers stay integers.
    pub fn keeps_integers(self) -> bool {
        matches!(self, Scale::Times(k) if k.fract() == 0.0)
    }

    /// How the docs/otlp.md table writes it.
    pub fn describe(self) -> String {
        match self {
            Scale::Times(k) => format!("×{k}"),
            Scale::Per(k) => format!("÷{k}"),
        }
    }
}

/// One row of the table.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Mapping {
    pub input: Input,
    pub name: &'static str,
    pub instrument: Instrument,
    /// UCUM unit.
    pub unit: &'static str,
    /// From DCGM's unit to `unit`.
    pub scale: Scale,
    /// Data-point attributes of the row's series.
    pub attributes: &'static [(&'static str, &'static str)],
    pub description: &'static str,
}

const MIB: f64 = 1_048_576.0;
const FB_TOTAL_PARTS: &[&str] = &[
    "DCGM_FI_DEV_FB_USED",
    "DCGM_FI_DEV_FB_FREE",
    "DCGM_FI_DEV_FB_RESERVED",
];
const FB_USED_FREE: &[&str] = &["DCGM_FI_DEV_FB_USED", "DCGM_FI_DEV_FB_FREE"];

const UTILIZATION: &str = "Fraction of time the GPU task was busy.";
const MEMORY_LIMIT: &str = "Size of the GPU memory.";
const MEMORY_UTILIZATION: &str = "Fraction of GPU memory used.";
const TEMPERATURE: &str = "Temperature of the sensor.";
const IO: &str = "Bytes moved over the GPU's interconnect.";
const ERRORS: &str = "Errors the GPU encountered.";

/// The table. Order matters only among rows of one metric and attributes (first present wins).
pub const MAPPINGS: &[Mapping] = &[
    Mapping {
        input: Input::Field("DCGM_FI_DEV_GPU_UTIL"),
        name: "hw.gpu.utilization",
        instrument: Instrument::Gauge,
        unit: "1",
        scale: Scale::Per(100.0),
        attributes: &[("hw.gpu.task", "general")],
        description: UTILIZATION,
    },
    Mapping {
        input: Input::Field("DCGM_FI_DEV_ENC_UTIL"),
        name: "hw.gpu.utilization",
        instrument: Instrument::Gauge,
        unit: "1",
        scale: Scale::Per(100.0),
        attributes: &[("hw.gpu.task", "encoder")],
        description: UTILIZATION,
    },
    Mapping {
        input: Input::Field("DCGM_FI_DEV_DEC_UTIL"),
        name: "hw.gpu.utilization",
        instrument: Instrument::Gauge,
        unit: "1",
        scale: Scale::Per(100.0),
        attributes: &[("hw.gpu.task", "decoder")],
        description: UTILIZATION,
    },
    Mapping {
        input: Input::Field("DCGM_FI_DEV_FB_USED"),
        name: "hw.gpu.memory.usage",
        instrument: Instrument::UpDownCounter,
        unit: "By",
        scale: Scale::Times(MIB),
        attributes: &[],
        description: "GPU memory used.",
    },
    Mapping {
        input: Input::Field("DCGM_FI_DEV_FB_TOTAL"),
        name: "hw.gpu.memory.limit",
        instrument: Instrument::UpDownCounter,
        unit: "By",
        scale: Scale::Times(MIB),
        attributes: &[],
        description: MEMORY_LIMIT,
    },
    Mapping {
        input: Input::Sum(FB_TOTAL_PARTS),
        name: "hw.gpu.memory.limit",
        instrument: Instrument::UpDownCounter,
        unit: "By",
        scale: Scale::Times(MIB),
        attributes: &[],
        description: MEMORY_LIMIT,
    },
    Mapping {
        input: Input::Sum(FB_USED_FREE),
        name: "hw.gpu.memory.limit",
        instrument: Instrument::UpDownCounter,
        unit: "By",
        scale: Scale::Times(MIB),
        attributes: &[],
        description: MEMORY_LIMIT,
    },
    Mapping {
        input: Input::Ratio("DCGM_FI_DEV_FB_USED", &["DCGM_FI_DEV_FB_TOTAL"]),
        name: "hw.gpu.memory.utilization",
        instrument: Instrument::Gauge,
        unit: "1",
        scale: Scale::Times(1.0),
        attributes: &[],
        description: MEMORY_UTILIZATION,
    },
    Mapping {
        input: Input::Ratio("DCGM_FI_DEV_FB_USED", FB_TOTAL_PARTS),
        name: "hw.gpu.memory.utilization",
        instrument: Instrument::Gauge,
        unit: "1",
        scale: Scale::Times(1.0),
        attributes: &[],
        description: MEMORY_UTILIZATION,
    },
    Mapping {
        input: Input::Ratio("DCGM_FI_DEV_FB_USED", FB_USED_FREE),
        name: "hw.gpu.memory.utilization",
        instrument: Instrument::Gauge,
        unit: "1",
        scale: Scale::Times(1.0),
        attributes: &[],
        description: MEMORY_UTILIZATION,
    },
    Mapping {
        input: Input::Field("DCGM_FI_DEV_POWER_USAGE"),
        name: "hw.power",
        instrument: Instrument::Gauge,
        unit: "W",
        scale: Scale::Times(1.0),
        attributes: &[],
        description: "Power drawn by the GPU board.",
    },
    Mapping {
        input: Input::Field("DCGM_FI_DEV_TOTAL_ENERGY_CONSUMPTION"),
        name: "hw.energy",
        instrument: Instrument::Counter,
        unit: "J",
        scale: Scale::Per(1000.0),
        attributes: &[],
        description: "Energy consumed by the GPU since the driver loaded.",
    },
    Mapping {
        input: Input::Field("DCGM_FI_DEV_GPU_TEMP"),
        name: "hw.temperature",
        instrument: Instrument::Gauge,
        unit: "Cel",
        scale: Scale::Times(1.0),
        attributes: &[("hw.sensor_location", "gpu")],
        description: TEMPERATURE,
    },
    Mapping {
        input: Input::Field("DCGM_FI_DEV_MEMORY_TEMP"),
        name: "hw.temperature",
        instrument: Instrument::Gauge,
        unit: "Cel",
        scale: Scale::Times(1.0),
        attributes: &[("hw.sensor_location", "memory")],
        description: TEMPERATURE,
    },
    Mapping {
        input: Input::Field("DCGM_FI_DEV_NVLINK_TX_BYTES_TOTAL"),
        name: "hw.gpu.io",
        instrument: Instrument::Counter,
        unit: "By",
        scale: Scale::Times(1.0),
        attributes: &[
            ("network.io.direction", "transmit"),
            ("nvidia.gpu.io.interconnect", "nvlink"),
        ],
        description: IO,
    },
    Mapping {
        input: Input::Field("DCGM_FI_DEV_NVLINK_RX_BYTES_TOTAL"),
        name: "hw.gpu.io",
        instrument: Instrument::Counter,
        unit: "By",
        scale: Scale::Times(1.0),
        attributes: &[
            ("network.io.direction", "receive"),
            ("nvidia.gpu.io.interconnect", "nvlink"),
        ],
        description: IO,
    },
    Mapping {
        input: Input::Field("DCGM_FI_PROF_PCIE_TX_BYTES_TOTAL"),
        name: "hw.gpu.io",
        instrument: Instrument::Counter,
        unit: "By",
        scale: Scale::Times(1.0),
        attributes: &[
            ("network.io.direction", "transmit"),
            ("nvidia.gpu.io.interconnect", "pcie"),
        ],
        description: IO,
    },
    Mapping {
        input: Input::Field("DCGM_FI_PROF_PCIE_RX_BYTES_TOTAL"),
        name: "hw.gpu.io",
        instrument: Instrument::Counter,
        unit: "By",
        scale: Scale::Times(1.0),
        attributes: &[
            ("network.io.direction", "receive"),
            ("nvidia.gpu.io.interconnect", "pcie"),
        ],
        description: IO,
    },
    Mapping {
        input: Input::Field("DCGM_FI_DEV_ECC_SBE_AGG_TOTAL"),
        name: "hw.errors",
        instrument: Instrument::Counter,
        unit: "{error}",
        scale: Scale::Times(1.0),
        attributes: &[("error.type", "corrected")],
        description: ERRORS,
    },
    Mapping {
        input: Input::Field("DCGM_FI_DEV_ECC_DBE_AGG_TOTAL"),
        name: "hw.errors",
        instrument: Instrument::Counter,
        unit: "{error}",
        scale: Scale::Times(1.0),
        attributes: &[("error.type", "uncorrected")],
        description: ERRORS,
    },
    Mapping {
        input: Input::Field("DCGM_FI_DEV_PCIE_REPLAY_COUNTER"),
        name: "hw.errors",
        instrument: Instrument::Counter,
        unit: "{error}",
        scale: Scale::Times(1.0),
        attributes: &[("error.type", "pcie_replay")],
        description: ERRORS,
    },
    Mapping {
        input: Input::DerivedSum("DCGM_EXP_XID_ERRORS_TOTAL"),
        name: "hw.errors",
        instrument: Instrument::Counter,
        unit: "{error}",
        scale: Scale::Times(1.0),
        attributes: &[("error.type", "xid")],
        description: ERRORS,
    },
    Mapping {
        input: Input::DerivedHealth("DCGM_EXP_GPU_HEALTH_STATUS"),
        name: "hw.status",
        instrument: Instrument::UpDownCounter,
        unit: "1",
        scale: Scale::Times(1.0),
        attributes: &[],
        description: "Operational status of the GPU: 1 for its current hw.state, 0 for the others.",
    },
];

/// The field id of a DCGM field name of the table (`None`: not in the catalog, a table bug a test
/// catches).
fn field_id(name: &str) -> Option<FieldId> {
    crate::fields::catalog().by_name(name).map(|f| f.id)
}

/// Field ids whose counters rows the table replaces in `semconv` mode (each row's first field).
pub fn replaced_fields() -> Vec<FieldId> {
    MAPPINGS
        .iter()
        .filter_map(|m| m.input.fields().first().and_then(|f| field_id(f)))
        .collect()
}

/// Derived families the table replaces in `semconv` mode.
pub fn replaced_families() -> Vec<&'static str> {
    MAPPINGS.iter().filter_map(|m| m.input.derived()).collect()
}

/// How one row reads a snapshot, resolved against a counter set.
#[derive(Debug, Clone, PartialEq)]
pub enum Source {
    /// Counters-row indices of the fields (the first row of each field id).
    Rows(Vec<usize>),
    /// A derived family by name.
    Derived(&'static str),
}

/// A row resolved against one counter set: `None` source when a field is not collected.
#[derive(Debug, Clone)]
pub struct Resolved {
    pub mapping: &'static Mapping,
    /// Index of the row in [`MAPPINGS`].
    pub index: usize,
    pub source: Source,
}

/// One metric of the semantic-convention set: its rows, in table order.
#[derive(Debug, Clone)]
pub struct MetricPlan {
    pub name: &'static str,
    pub instrument: Instrument,
    pub unit: &'static str,
    pub description: &'static str,
    pub rows: Vec<Resolved>,
}

/// The table resolved against a counter set: the metrics whose inputs can be present, in table order.
#[derive(Debug, Clone, Default)]
pub struct Plan {
    pub metrics: Vec<MetricPlan>,
}

impl Plan {
    pub fn new(counters: &CounterSet) -> Plan {
        let mut first_row: HashMap<FieldId, usize> = HashMap::new();
        for (i, row) in counters.rows.iter().enumerate() {
            if row.kind != MetricKind::Label {
                first_row.entry(row.field.id).or_insert(i);
            }
        }
        let mut metrics: Vec<MetricPlan> = Vec::new();
        for (index, m) in MAPPINGS.iter().enumerate() {
            let source = match m.input.derived() {
                Some(family) => Source::Derived(family),
                None => {
                    let rows: Option<Vec<usize>> = m
                        .input
                        .fields()
                        .iter()
                        .map(|f| field_id(f).and_then(|id| first_row.get(&id).copied()))
                        .collect();
                    match rows {
                        Some(rows) => Source::Rows(rows),
                        None => continue,
                    }
                }
            };
            let resolved = Resolved {
                mapping: m,
                index,
                source,
            };
            match metrics.iter_mut().find(|p| p.name == m.name) {
                Some(p) => p.rows.push(resolved),
                None => metrics.push(MetricPlan {
                    name: m.name,
                    instrument: m.instrument,
                    unit: m.unit,
                    description: m.description,
                    rows: vec![resolved],
                }),
            }
        }
        Plan { metrics }
    }
}

/// A row's value from an entity's field values (raw, before the scale): `None` when an input is
/// absent, not numeric, or a ratio's denominator is not above zero. `ints`: whether every input was an
/// integer.
pub fn combine(
    input: &Input,
    rows: &[usize],
    values: &crate::snapshot::EntityValues,
) -> Option<(f64, bool)> {
    use crate::snapshot::FieldValue;
    let mut ints = true;
    let mut read = |r: &usize| -> Option<f64> {
        let v = values.get(*r)?;
        if !matches!(v, FieldValue::Int(_)) {
            ints = false;
        }
        v.as_f64()
    };
    match input {
        Input::Field(_) | Input::Sum(_) => {
            let mut sum = 0.0;
            for r in rows {
                sum += read(r)?;
            }
            Some((sum, ints))
        }
        Input::Ratio(..) => {
            let (num, den) = rows.split_first()?;
            let n = read(num)?;
            let mut d = 0.0;
            for r in den {
                d += read(r)?;
            }
            (d > 0.0).then_some((n / d, false))
        }
        Input::DerivedSum(_) | Input::DerivedHealth(_) => None,
    }
}

/// The mapping table of docs/otlp.md (one line per row), the form a test compares with that page.
pub fn markdown_rows() -> Vec<String> {
    MAPPINGS
        .iter()
        .map(|m| {
            let mut attrs: Vec<String> = m
                .attributes
                .iter()
                .map(|(k, v)| format!("`{k}={v}`"))
                .collect();
            if matches!(m.input, Input::DerivedHealth(_)) {
                attrs.push("`hw.state`=ok/degraded/failed".to_string());
            }
            let attrs = if attrs.is_empty() {
                "–".to_string()
            } else {
                attrs.join(", ")
            };
            format!(
                "| {} | `{}` | {} | `{}` | {} | {} |",
                m.input.describe(),
                m.name,
                m.instrument.as_str(),
                m.unit,
                m.scale.describe(),
                attrs
            )
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_field_of_the_table_is_in_the_catalog() {
        for m in MAPPINGS {
            for f in m.input.fields() {
                assert!(field_id(f).is_some(), "{f} ({})", m.name);
            }
        }
    }

    #[test]
    fn the_schema_url_names_the_version_followed() {
        assert_eq!(
            SCHEMA_URL,
            format!("https://opentelemetry.io/schemas/{SEMCONV_VERSION}")
        );
    }

    #[test]
    fn health_results_map_to_hw_states() {
        assert_eq!(hw_state(0.0), "ok");
        assert_eq!(hw_state(10.0), "degraded");
        assert_eq!(hw_state(20.0), "failed");
        assert_eq!(hw_state(15.0), "degraded");
    }

    /// The docs/otlp.md table lists every row of [`MAPPINGS`], in order, and nothing else.
    #[test]
    fn readme_table_equals_the_data_table() {
        let readme = std::fs::read_to_string(
            std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("docs/otlp.md"),
        )
        .unwrap();
        let start = readme
            .find("<!-- semconv-table:start -->")
            .expect("docs/otlp.md has the semconv table markers");
        let end = readme.find("<!-- semconv-table:end -->").unwrap();
        let rows: Vec<&str> = readme[start..end]
            .lines()
            .filter(|l| l.starts_with("| ") && !l.starts_with("| DCGM"))
            .filter(|l| !l.starts_with("|---"))
            .collect();
        let want = markdown_rows();
        assert_eq!(
            rows,
            want.iter().map(String::as_str).collect::<Vec<_>>(),
            "docs/otlp.md's semconv table differs from semconv::MAPPINGS; the rows should be:\n{}",
            want.join("\n")
        );
    }
}
