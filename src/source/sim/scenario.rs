//! Simulated-fleet scenarios: which GPUs a simulated host has, how they are split into MIG instances and
//! how busy they are. Built-in scenarios are YAML files embedded in the binary (`scenarios/*.yaml`); a user
//! can pass their own file with `--simulate=path/to/scenario.yaml` in the same format. Besides GPUs a
//! scenario may have NvSwitches (`nvswitches`, an HGX baseboard) and CPUs (`cpus`, Grace).

use std::path::Path;
use std::sync::LazyLock;

use serde::Deserialize;

/// A scenario as written in YAML.
#[derive(Debug, Clone, Deserialize, PartialEq)]
#[serde(deny_unknown_fields)]
pub struct Scenario {
    /// One line shown in the start-up log.
    #[serde(default)]
    pub description: String,
    #[serde(default = "default_driver")]
    pub driver_version: String,
    /// Built-in counter set (`large`) or a CSV path used when `-f` is not given explicitly.
    #[serde(default)]
    pub counters: Option<String>,
    pub gpus: Vec<GpuGroup>,
    /// Fields reported blank (N/A) on every entity, by DCGM name.
    #[serde(default)]
    pub blank_fields: Vec<String>,
    /// Fields reported not supported on every entity, by DCGM name.
    #[serde(default)]
    pub unsupported_fields: Vec<String>,
    /// NvSwitches (e.g. an HGX H100 baseboard: 4 switches).
    #[serde(default)]
    pub nvswitches: Vec<SwitchGroup>,
    /// CPUs with DCGM CPU monitoring (NVIDIA Grace).
    #[serde(default)]
    pub cpus: Vec<CpuGroup>,
    /// Processes running on the GPUs (per-process series, `--collect-processes`).
    #[serde(default)]
    pub processes: Vec<SimProcess>,
    /// The simulated cluster: pods holding GPUs and MIG instances (served with `-k`).
    #[serde(default)]
    pub pods: Vec<super::pods::ScenarioPod>,
    /// Incidents: XID errors, clock events, health failures at given collections.
    #[serde(default)]
    pub events: Vec<super::events::ScenarioEvent>,
    /// Fields that follow a known waveform instead of the load model (the last value and every
    /// sample between collections), so a test knows the distribution it must see.
    #[serde(default)]
    pub waveforms: Vec<super::waveforms::ScenarioWaveform>,
}

/// One simulated process: `{pid, name, gpu, gpu_i_id?, memory_mib, sm_utilization, pod?}`.
#[derive(Debug, Clone, Deserialize, PartialEq)]
#[serde(deny_unknown_fields)]
pub struct SimProcess {
    pub pid: u32,
    pub name: String,
    /// GPU index.
    pub gpu: u32,
    /// MIG GPU-instance id (`GPU_I_ID`) on a MIG GPU.
    #[serde(default)]
    pub gpu_i_id: Option<u32>,
    pub memory_mib: u64,
    /// SM utilization in percent.
    #[serde(default)]
    pub sm_utilization: f64,
    #[serde(default)]
    pub memory_utilization: f64,
    #[serde(default)]
    pub encoder_utilization: f64,
    #[serde(default)]
    pub decoder_utilization: f64,
    /// `namespace/pod` of a Kubernetes pod it belongs to.
    #[serde(default)]
    pub pod: Option<String>,
}

/// One or more identical NvSwitches.
#[derive(Debug, Clone, Deserialize, PartialEq)]
#[serde(deny_unknown_fields)]
pub struct SwitchGroup {
    #[serde(default = "one")]
    pub count: u32,
    /// NvLink ports that are up on each switch.
    #[serde(default = "eighteen")]
    pub links: u32,
}

fn eighteen() -> u32 {
    18
}

/// One or more identical CPUs.
#[derive(Debug, Clone, Deserialize, PartialEq)]
#[serde(deny_unknown_fields)]
pub struct CpuGroup {
    #[serde(default = "one")]
    pub count: u32,
    /// Cores per CPU (Grace: 72).
    #[serde(default = "seventy_two")]
    pub cores: u32,
    /// Load pattern: idle, training, inference, mixed.
    #[serde(default)]
    pub load: Load,
}

fn seventy_two() -> u32 {
    72
}

fn default_driver() -> String {
    "550.144.03".to_string()
}

/// One or more identical GPUs.
#[derive(Debug, Clone, Deserialize, PartialEq)]
#[serde(deny_unknown_fields)]
pub struct GpuGroup {
    /// A key of the model table: H100-SXM5-80GB, A100-SXM4-80GB, A30, L4.
    pub model: String,
    #[serde(default = "one")]
    pub count: u32,
    /// MIG instance profiles, e.g. [3g.40gb, 2g.20gb, 1g.10gb]; empty = MIG off.
    #[serde(default)]
    pub mig: Vec<String>,
    /// Load pattern: idle, training, inference, mixed.
    #[serde(default)]
    pub load: Load,
    /// NVLinks up; default from the model.
    #[serde(default)]
    pub nvlinks: Option<u32>,
    /// Last XID this GPU reports (0 = none).
    #[serde(default)]
    pub xid: i64,
}

fn one() -> u32 {
    1
}

impl GpuGroup {
    /// A known model, and a MIG layout that fits it: at most 7 instances of its profiles, at most
    /// its 7 compute slices.
    fn check(&self) -> Result<(), String> {
        let model = super::models::model(&self.model).ok_or_else(|| {
            format!(
                "unknown GPU model '{}' (known: {})",
                self.model,
                super::models::model_keys().join(", ")
            )
        })?;
        if self.mig.len() > 7 {
            return Err(format!(
                "{} MIG instances on one GPU; at most 7",
                self.mig.len()
            ));
        }
        let mut slices = 0;
        for p in &self.mig {
            let prof = super::models::mig_profile(model, p)
                .ok_or_else(|| format!("MIG profile '{p}' does not exist on {}", self.model))?;
            slices += prof.slices;
        }
        if slices > 7 {
            return Err(format!(
                "MIG layout {:?} needs {slices} compute slices; a GPU has 7",
                self.mig
            ));
        }
        Ok(())
    }
}

#[derive(Debug, Clone, Copy, Deserialize, PartialEq, Eq, Default)]
#[serde(rename_all = "lowercase")]
pub enum Load {
    Idle,
    Training,
    Inference,
    #[default]
    Mixed,
}

/// A scenario that cannot be loaded.
#[derive(Debug, thiserror::Error)]
pub enum ScenarioError {
    #[error("unknown simulation scenario '{0}' (built-in: {names}; or a path to a .yaml file)", names = builtin_names().collect::<Vec<_>>().join(", "))]
    Unknown(String),
    #[error("cannot read scenario file {path}: {error}")]
    Read { path: String, error: std::io::Error },
    #[error("{origin}: {message}")]
    Invalid { origin: String, message: String },
}

const BUILTIN: &[(&str, &str)] = &[
    ("default", include_str!("scenarios/default.yaml")),
    ("dgx-h100-mig", include_str!("scenarios/dgx-h100-mig.yaml")),
    ("large", include_str!("scenarios/large.yaml")),
    ("hgx-h100", include_str!("scenarios/hgx-h100.yaml")),
    ("grace-hopper", include_str!("scenarios/grace-hopper.yaml")),
    ("incidents", include_str!("scenarios/incidents.yaml")),
    ("demo", include_str!("scenarios/demo.yaml")),
];

/// The built-in scenario names, in `--help`'s order.
pub fn builtin_names() -> impl Iterator<Item = &'static str> {
    BUILTIN.iter().map(|(name, _)| *name)
}

/// `csv` with the six `DCGM_EXP_*` rows of the built-in `incidents` counters appended (what turns
/// dcgm-exporter's synthesized families on).
pub fn with_incident_rows(csv: &str) -> String {
    let mut out = String::from(csv);
    if !out.ends_with('\n') {
        out.push('\n');
    }
    for row in include_str!("scenarios/incidents-counters.csv")
        .lines()
        .filter(|l| l.starts_with("DCGM_EXP_"))
    {
        out.push_str(row);
        out.push('\n');
    }
    out
}

/// The `demo` counters: the default counters CSV with DCGM's cumulative PCIe byte counters (for the
/// semantic-convention `hw.gpu.io`) and the six `DCGM_EXP_*` rows (made once, so the two files stay the
/// only copies).
static DEMO_COUNTERS: LazyLock<String> = LazyLock::new(|| {
    with_incident_rows(&format!(
        "{}\n# PCIe traffic, cumulative (DCGM's profiling module).\n\
         DCGM_FI_PROF_PCIE_TX_BYTES_TOTAL, counter, PCIe bytes sent since the GPU started.\n\
         DCGM_FI_PROF_PCIE_RX_BYTES_TOTAL, counter, PCIe bytes received since the GPU started.\n\
         # The six exporter-synthesized families (the `demo` scenario's incidents).\n",
        include_str!("../../counters/default-counters.csv")
    ))
});

/// Counters CSV of built-in counter sets named by scenarios.
pub fn builtin_counters(name: &str) -> Option<&'static str> {
    match name {
        "large" => Some(include_str!("scenarios/large-counters.csv")),
        "hgx-h100" => Some(include_str!("scenarios/hgx-h100-counters.csv")),
        "grace-hopper" => Some(include_str!("scenarios/grace-hopper-counters.csv")),
        "incidents" => Some(include_str!("scenarios/incidents-counters.csv")),
        "demo" => Some(DEMO_COUNTERS.as_str()),
        _ => None,
    }
}

impl Scenario {
    /// The scenario's own counters (`counters:`): a built-in set by name, else a file.
    pub fn own_counters(&self) -> Option<crate::counters::plan::ScenarioCounters<'_>> {
        use crate::counters::plan::ScenarioCounters;
        let name = self.counters.as_deref()?;
        Some(match builtin_counters(name) {
            Some(text) => ScenarioCounters::Builtin { name, text },
            None => ScenarioCounters::File(std::path::Path::new(name)),
        })
    }

    /// Load a built-in scenario by name, or a YAML file by path.
    pub fn load(name_or_path: &str) -> Result<Scenario, ScenarioError> {
        if let Some((name, text)) = BUILTIN.iter().find(|(n, _)| *n == name_or_path) {
            return Scenario::parse(text, &format!("built-in scenario '{name}'"));
        }
        let path = Path::new(name_or_path);
        let looks_like_file =
            name_or_path.ends_with(".yaml") || name_or_path.ends_with(".yml") || path.exists();
        if !looks_like_file {
            return Err(ScenarioError::Unknown(name_or_path.to_string()));
        }
        let text = std::fs::read_to_string(path).map_err(|error| ScenarioError::Read {
            path: name_or_path.to_string(),
            error,
        })?;
        Scenario::parse(&text, name_or_path)
    }

    /// Parse scenario YAML; `origin` names it in errors (with line and column).
    pub fn parse(text: &str, origin: &str) -> Result<Scenario, ScenarioError> {
        let invalid = |message: String| ScenarioError::Invalid {
            origin: origin.to_string(),
            message,
        };
        let scenario: Scenario = serde_norway::from_str(text).map_err(|e| {
            let pos = e
                .location()
                .map(|l| format!("line {} column {}: ", l.line(), l.column()))
                .unwrap_or_default();
            invalid(format!("{pos}{e}"))
        })?;
        scenario.check().map_err(invalid)?;
        Ok(scenario)
    }

    /// What the YAML's shape does not say: the host's size and each part against the others (the
    /// first problem, in the file's order of sections).
    fn check(&self) -> Result<(), String> {
        let total = self.gpu_count()?;
        for g in &self.gpus {
            g.check()?;
        }
        self.check_processes(total)?;
        self.check_switches()?;
        self.check_cpus()?;
        for name in self.blank_fields.iter().chain(&self.unsupported_fields) {
            if crate::fields::catalog().by_name(name).is_none() {
                return Err(format!("unknown DCGM field '{name}'"));
            }
        }
        self.check_pods(total)?;
        self.sim_events()?;
        for w in &self.waveforms {
            w.check(total)?;
        }
        Ok(())
    }

    /// The number of GPUs: 1 to 64.
    fn gpu_count(&self) -> Result<u32, String> {
        if self.gpus.is_empty() {
            return Err("no gpus".into());
        }
        // Sums in u64: counts near u32::MAX must not wrap into a small, accepted total.
        let total: u64 = self.gpus.iter().map(|g| u64::from(g.count)).sum();
        if total == 0 || total > 64 {
            return Err(format!("{total} GPUs; a host has 1 to 64"));
        }
        Ok(total as u32)
    }

    /// Each process: its pid once, on a GPU of the scenario, percentages, a `namespace/pod` pod.
    fn check_processes(&self, total: u32) -> Result<(), String> {
        let mut pids = std::collections::HashSet::new();
        for p in &self.processes {
            if !pids.insert(p.pid) {
                return Err(format!("process pid {} listed twice", p.pid));
            }
            if p.gpu >= total {
                return Err(format!(
                    "process {} on GPU {}; the scenario has GPUs 0 to {}",
                    p.pid,
                    p.gpu,
                    total - 1
                ));
            }
            for (what, v) in [
                ("sm_utilization", p.sm_utilization),
                ("memory_utilization", p.memory_utilization),
                ("encoder_utilization", p.encoder_utilization),
                ("decoder_utilization", p.decoder_utilization),
            ] {
                if !(0.0..=100.0).contains(&v) {
                    return Err(format!(
                        "process {}: {what} {v} is not a percentage (0 to 100)",
                        p.pid
                    ));
                }
            }
            if let Some(pod) = &p.pod {
                if pod
                    .split_once('/')
                    .is_none_or(|(ns, name)| ns.is_empty() || name.is_empty() || name.contains('/'))
                {
                    return Err(format!(
                        "process {}: pod '{pod}' is not namespace/pod",
                        p.pid
                    ));
                }
            }
        }
        Ok(())
    }

    /// NvSwitches within what DCGM reports, their ports within what the simulator models.
    fn check_switches(&self) -> Result<(), String> {
        let switches: u64 = self.nvswitches.iter().map(|s| u64::from(s.count)).sum();
        if switches > u64::from(crate::snapshot::inventory::MAX_SWITCHES) {
            return Err(format!(
                "{switches} NvSwitches; DCGM reports at most {}",
                crate::snapshot::inventory::MAX_SWITCHES
            ));
        }
        if let Some(s) = self.nvswitches.iter().find(|s| s.links > 64) {
            return Err(format!(
                "{} NvLink ports on an NvSwitch; the simulator models at most 64",
                s.links
            ));
        }
        Ok(())
    }

    /// CPUs and cores within what DCGM reports, each CPU with a core.
    fn check_cpus(&self) -> Result<(), String> {
        let cpus: u64 = self.cpus.iter().map(|c| u64::from(c.count)).sum();
        let cores: u64 = self
            .cpus
            .iter()
            .map(|c| u64::from(c.count) * u64::from(c.cores))
            .sum();
        if cpus > u64::from(crate::snapshot::inventory::MAX_CPUS)
            || cores > u64::from(crate::snapshot::inventory::MAX_CPU_CORES)
            || self.cpus.iter().any(|c| c.cores == 0)
        {
            return Err(format!(
                "{cpus} CPUs with {cores} cores; DCGM reports at most {} CPUs and {} cores, each CPU with at least one",
                crate::snapshot::inventory::MAX_CPUS,
                crate::snapshot::inventory::MAX_CPU_CORES
            ));
        }
        Ok(())
    }

    /// Each pod well formed, holding GPUs of the scenario.
    fn check_pods(&self, total: u32) -> Result<(), String> {
        for pod in &self.pods {
            pod.check()?;
            if let Some(d) = pod.devices.iter().find(|d| d.gpu >= total) {
                return Err(format!(
                    "pod {}/{} holds GPU {}; the scenario has GPUs 0 to {}",
                    pod.namespace,
                    pod.pod,
                    d.gpu,
                    total - 1
                ));
            }
        }
        Ok(())
    }

    /// The checked `events:` (GPUs are numbered in file order, as the fleet numbers them).
    pub fn sim_events(&self) -> Result<super::events::SimEvents, String> {
        let mut layouts = Vec::new();
        for g in &self.gpus {
            for _ in 0..g.count {
                layouts.push(
                    super::models::model(&g.model)
                        .map(|m| super::models::gi_ids(m, &g.mig))
                        .unwrap_or_default(),
                );
            }
        }
        super::events::SimEvents::check(&self.events, layouts.len() as u32, |gpu| {
            layouts.get(gpu as usize).cloned().unwrap_or_default()
        })
    }
}

#[cfg(test)]
mod tests {

    /// Every built-in counter set: a real help text on every row (not a placeholder such as "DCGM
    /// field 250.") and capacities typed as gauges (`promtool check metrics` reads both).
    #[test]
    fn builtin_counter_rows_have_real_help_and_capacities_are_gauges() {
        let mut names = vec!["default-counters"];
        names.extend(["large", "hgx-h100", "grace-hopper", "incidents", "demo"]);
        for name in names {
            let text = builtin_counters(name)
                .unwrap_or(include_str!("../../counters/default-counters.csv"));
            let set = crate::counters::parse(text, name).unwrap();
            for row in &set.rows {
                let placeholder = row.help.starts_with("DCGM field ")
                    && row.help.trim_end_matches('.')["DCGM field ".len()..]
                        .chars()
                        .all(|c| c.is_ascii_digit());
                assert!(!placeholder, "{name}: {} has help {:?}", row.name, row.help);
                assert!(
                    row.help.len() > 8,
                    "{name}: {} help {:?}",
                    row.name,
                    row.help
                );
                if matches!(
                    row.field.name,
                    "DCGM_FI_DEV_FB_TOTAL" | "DCGM_FI_DEV_BAR1_TOTAL"
                ) {
                    assert_ne!(
                        row.kind,
                        crate::counters::MetricKind::Counter,
                        "{name}: {} is a capacity",
                        row.name
                    );
                }
            }
        }
    }

    use super::*;

    #[test]
    fn builtins_load() {
        for (name, _) in BUILTIN {
            Scenario::load(name).unwrap();
        }
        assert!(matches!(
            Scenario::load("nope"),
            Err(ScenarioError::Unknown(_))
        ));
    }

    #[test]
    fn counts_near_u32_max_do_not_wrap_into_a_small_fleet() {
        // Found while writing fuzz/ scenario_yaml (its property now checks it): the sums wrapped in a
        // release build and accepted a host of
        // 2^32 + 1 GPUs as one of 1 GPU (then the fleet was built with 4 billion of them).
        let e = Scenario::parse(
            "gpus:\n  - { model: H100-SXM5-80GB, count: 4294967295 }\n  - { model: H100-SXM5-80GB, count: 2 }\n",
            "s.yaml",
        )
        .unwrap_err();
        assert_eq!(e.to_string(), "s.yaml: 4294967297 GPUs; a host has 1 to 64");
        let e = Scenario::parse(
            "gpus: [{ model: H100-SXM5-80GB }]\ncpus: [{ count: 65536, cores: 65536 }]\n",
            "s.yaml",
        )
        .unwrap_err();
        assert!(
            e.to_string().contains("65536 CPUs with 4294967296 cores"),
            "{e}"
        );
    }

    #[test]
    fn errors_name_the_position() {
        let e = Scenario::parse(
            "gpus:\n  - model: H100-SXM5-80GB\n    colour: red\n",
            "s.yaml",
        )
        .unwrap_err();
        assert!(e.to_string().starts_with("s.yaml: line 3 column 5"), "{e}");
        let e = Scenario::parse(
            "gpus:\n  - model: H100-SXM5-80GB\n    mig: [7g.80gb, 1g.10gb]\n",
            "s.yaml",
        )
        .unwrap_err();
        assert!(e.to_string().contains("compute slices"), "{e}");
    }
}
