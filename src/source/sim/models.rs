//! The simulated GPU models and their MIG profiles: static facts (names, memory, power range, clocks,
//! NvLinks, VBIOS, MIG placement, and the limits each board reports: [`GpuSpecs`]) the fleet model and
//! the scenario checker read. Data, not behaviour.
//!
//! The limits and traits are those real boards report, read from `nvidia-smi -q` of each model ("Power
//! Readings", "Temperature", "Max Clocks", "BAR1", "PCI"; PCI device ids as the PCI id registry lists
//! them): an H100 SXM5 80GB board (its export variant H800, the same board and
//! firmware limits, driver 525), an A100-SXM4 (driver 535) and an L4; the A30's power limit is its
//! datasheet TDP. A limit not known for a model is `None`, and the simulator leaves the field absent
//! rather than inventing it.

/// Static facts about a GPU model.
#[derive(Debug)]
pub struct GpuModel {
    pub key: &'static str,
    pub name: &'static str,
    pub fb_mib: i64,
    pub fb_reserved_mib: i64,
    pub idle_w: f64,
    pub max_w: f64,
    pub sm_idle_mhz: i64,
    pub sm_max_mhz: i64,
    pub mem_mhz: i64,
    pub nvlinks: u32,
    pub vbios: &'static str,
    pub profiles: &'static [MigProfile],
    /// Whether the board has a memory temperature sensor (HBM boards do; the L4's GDDR6 reads N/A).
    pub memory_sensor: bool,
    pub specs: GpuSpecs,
    pub traits: GpuTraits,
}

/// What the chip and board are (PCI device id, CUDA compute capability, PCIe link, BAR1, video clocks,
/// GPM); `None` where not known for the model.
#[derive(Debug)]
pub struct GpuTraits {
    /// PCI device id (vendor 0x10DE).
    pub pci_device: Option<u16>,
    /// CUDA compute capability (major, minor).
    pub compute_capability: (u32, u32),
    /// PCIe generation of the link (x16 on every model here).
    pub pcie_gen: Option<u32>,
    /// BAR1 aperture in MiB.
    pub bar1_mib: Option<i64>,
    /// Video engine clock idle and maximum, MHz.
    pub video_mhz: Option<(i64, i64)>,
    /// GPU performance monitoring (Hopper and newer).
    pub gpm: bool,
}

/// Limits a board reports (DCGM's power-limit, temperature-threshold and max-clock fields); `None`
/// where not known for the model (the field is then absent).
#[derive(Debug)]
pub struct GpuSpecs {
    /// Default power limit in W, which is also the maximum and, unchanged, the current and enforced one.
    pub power_limit_w: Option<f64>,
    /// The lowest power limit that can be set, in W.
    pub power_min_w: Option<f64>,
    /// GPU temperatures in °C: slowdown, shutdown, maximum operating.
    pub slowdown_c: Option<i64>,
    pub shutdown_c: Option<i64>,
    pub max_operating_c: Option<i64>,
    /// Memory maximum operating temperature in °C.
    pub memory_max_operating_c: Option<i64>,
}

/// A MIG GPU-instance profile.
#[derive(Debug)]
pub struct MigProfile {
    pub name: &'static str,
    pub slices: u32,
    pub mem_mib: i64,
    /// NVML GPU-instance ids this profile can be placed at, in placement order.
    pub gi_ids: &'static [u32],
}

const H100_PROFILES: &[MigProfile] = &[
    MigProfile {
        name: "1g.10gb",
        slices: 1,
        mem_mib: 9856,
        gi_ids: &[7, 8, 9, 10, 11, 12, 13],
    },
    MigProfile {
        name: "1g.20gb",
        slices: 1,
        mem_mib: 19968,
        gi_ids: &[9, 10, 11, 12],
    },
    MigProfile {
        name: "2g.20gb",
        slices: 2,
        mem_mib: 19968,
        gi_ids: &[3, 4, 5],
    },
    MigProfile {
        name: "3g.40gb",
        slices: 3,
        mem_mib: 40192,
        gi_ids: &[1, 2],
    },
    MigProfile {
        name: "4g.40gb",
        slices: 4,
        mem_mib: 40192,
        gi_ids: &[1],
    },
    MigProfile {
        name: "7g.80gb",
        slices: 7,
        mem_mib: 80384,
        gi_ids: &[0],
    },
];

const A100_PROFILES: &[MigProfile] = &[
    MigProfile {
        name: "1g.10gb",
        slices: 1,
        mem_mib: 9728,
        gi_ids: &[7, 8, 9, 10, 11, 12, 13],
    },
    MigProfile {
        name: "2g.20gb",
        slices: 2,
        mem_mib: 19968,
        gi_ids: &[3, 4, 5],
    },
    MigProfile {
        name: "3g.40gb",
        slices: 3,
        mem_mib: 40192,
        gi_ids: &[1, 2],
    },
    MigProfile {
        name: "7g.80gb",
        slices: 7,
        mem_mib: 80384,
        gi_ids: &[0],
    },
];

const A30_PROFILES: &[MigProfile] = &[
    MigProfile {
        name: "1g.6gb",
        slices: 1,
        mem_mib: 5836,
        gi_ids: &[3, 4, 5, 6],
    },
    MigProfile {
        name: "2g.12gb",
        slices: 2,
        mem_mib: 11968,
        gi_ids: &[1, 2],
    },
    MigProfile {
        name: "4g.24gb",
        slices: 4,
        mem_mib: 24064,
        gi_ids: &[0],
    },
];

const GH200_PROFILES: &[MigProfile] = &[
    MigProfile {
        name: "1g.12gb",
        slices: 1,
        mem_mib: 11776,
        gi_ids: &[7, 8, 9, 10, 11, 12, 13],
    },
    MigProfile {
        name: "2g.24gb",
        slices: 2,
        mem_mib: 23808,
        gi_ids: &[3, 4, 5],
    },
    MigProfile {
        name: "3g.48gb",
        slices: 3,
        mem_mib: 47872,
        gi_ids: &[1, 2],
    },
    MigProfile {
        name: "7g.96gb",
        slices: 7,
        mem_mib: 96256,
        gi_ids: &[0],
    },
];

/// No known limit.
const UNKNOWN_LIMITS: GpuSpecs = GpuSpecs {
    power_limit_w: None,
    power_min_w: None,
    slowdown_c: None,
    shutdown_c: None,
    max_operating_c: None,
    memory_max_operating_c: None,
};

static MODELS: &[GpuModel] = &[
    GpuModel {
        key: "H100-SXM5-80GB",
        name: "NVIDIA H100 80GB HBM3",
        fb_mib: 81559,
        fb_reserved_mib: 541,
        idle_w: 72.0,
        max_w: 700.0,
        sm_idle_mhz: 345,
        sm_max_mhz: 1980,
        mem_mhz: 2619,
        nvlinks: 18,
        vbios: "96.00.99.00.01",
        profiles: H100_PROFILES,
        memory_sensor: true,
        traits: GpuTraits {
            pci_device: Some(0x2330),
            compute_capability: (9, 0),
            pcie_gen: Some(5),
            bar1_mib: Some(131_072),
            video_mhz: Some((765, 1545)),
            gpm: true,
        },
        specs: GpuSpecs {
            power_limit_w: Some(700.0),
            power_min_w: Some(200.0),
            slowdown_c: Some(89),
            shutdown_c: Some(92),
            max_operating_c: Some(87),
            memory_max_operating_c: Some(95),
        },
    },
    GpuModel {
        key: "A100-SXM4-80GB",
        name: "NVIDIA A100-SXM4-80GB",
        fb_mib: 81920,
        fb_reserved_mib: 611,
        idle_w: 62.0,
        max_w: 400.0,
        sm_idle_mhz: 210,
        sm_max_mhz: 1410,
        mem_mhz: 1593,
        nvlinks: 12,
        vbios: "92.00.45.00.05",
        profiles: A100_PROFILES,
        memory_sensor: true,
        traits: GpuTraits {
            pci_device: Some(0x20B2),
            compute_capability: (8, 0),
            pcie_gen: Some(4),
            bar1_mib: None,
            video_mhz: Some((585, 1290)),
            gpm: false,
        },
        specs: GpuSpecs {
            power_limit_w: Some(400.0),
            power_min_w: Some(100.0),
            slowdown_c: Some(89),
            shutdown_c: Some(92),
            max_operating_c: Some(85),
            memory_max_operating_c: Some(95),
        },
    },
    GpuModel {
        key: "A30",
        name: "NVIDIA A30",
        fb_mib: 24576,
        fb_reserved_mib: 382,
        idle_w: 31.0,
        max_w: 165.0,
        sm_idle_mhz: 210,
        sm_max_mhz: 1440,
        mem_mhz: 1215,
        nvlinks: 4,
        vbios: "92.00.66.00.02",
        profiles: A30_PROFILES,
        memory_sensor: true,
        traits: GpuTraits {
            pci_device: Some(0x20B7),
            compute_capability: (8, 0),
            pcie_gen: Some(4),
            bar1_mib: None,
            video_mhz: None,
            gpm: false,
        },
        specs: GpuSpecs {
            power_limit_w: Some(165.0),
            ..UNKNOWN_LIMITS
        },
    },
    GpuModel {
        key: "GH200-96GB",
        name: "NVIDIA GH200 480GB",
        fb_mib: 97871,
        fb_reserved_mib: 587,
        idle_w: 90.0,
        max_w: 900.0,
        sm_idle_mhz: 345,
        sm_max_mhz: 1980,
        mem_mhz: 2619,
        nvlinks: 18,
        vbios: "96.00.74.00.1C",
        profiles: GH200_PROFILES,
        memory_sensor: true,
        traits: GpuTraits {
            pci_device: None,
            compute_capability: (9, 0),
            pcie_gen: None,
            bar1_mib: None,
            video_mhz: None,
            gpm: true,
        },
        // The module's power budget is shared with the Grace CPU: no GPU board limit to state.
        specs: UNKNOWN_LIMITS,
    },
    GpuModel {
        key: "L4",
        name: "NVIDIA L4",
        fb_mib: 23034,
        fb_reserved_mib: 313,
        idle_w: 16.0,
        max_w: 72.0,
        sm_idle_mhz: 210,
        sm_max_mhz: 2040,
        mem_mhz: 6251,
        nvlinks: 0,
        vbios: "95.04.29.00.06",
        profiles: &[],
        memory_sensor: false,
        traits: GpuTraits {
            pci_device: Some(0x27B8),
            compute_capability: (8, 9),
            pcie_gen: Some(4),
            bar1_mib: None,
            video_mhz: None,
            gpm: false,
        },
        // Its driver reports temperature thresholds only as margins (T.Limit), not as temperatures.
        specs: GpuSpecs {
            power_limit_w: Some(72.0),
            power_min_w: Some(40.0),
            ..UNKNOWN_LIMITS
        },
    },
];

pub fn model(key: &str) -> Option<&'static GpuModel> {
    MODELS.iter().find(|m| m.key == key)
}

pub fn model_keys() -> Vec<&'static str> {
    MODELS.iter().map(|m| m.key).collect()
}

/// The most MIG compute slices the model has (`None`: no MIG).
pub fn mig_slices(model: &GpuModel) -> Option<u32> {
    model.profiles.iter().map(|p| p.slices).max()
}

pub fn mig_profile(model: &'static GpuModel, name: &str) -> Option<&'static MigProfile> {
    model.profiles.iter().find(|p| p.name == name)
}

/// The NVML GPU-instance ids (`GPU_I_ID`) a MIG layout gets, in layout order: each instance takes the
/// first id of its profile not yet taken (an unknown profile gets none).
pub fn gi_ids(model: &'static GpuModel, profiles: &[String]) -> Vec<u32> {
    let mut used: Vec<u32> = Vec::new();
    for (n, name) in profiles.iter().enumerate() {
        let Some(p) = mig_profile(model, name) else {
            continue;
        };
        let id = p
            .gi_ids
            .iter()
            .copied()
            .find(|g| !used.contains(g))
            .unwrap_or(100 + n as u32);
        used.push(id);
    }
    used
}
