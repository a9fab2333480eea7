//! The inventory: what a source found on the host (GPUs with their identity, MIG GPU instances, NvLinks,
//! NvSwitches with their NvLink ports, CPUs with their cores) in a source-independent shape, and the one
//! place that turns it into the monitored entities in output order (per GPU by index: the GPU when
//! selected, then its selected instances; then the GPU NvLinks; then the NvSwitches, their links, the
//! CPUs and their cores). Every source — libdcgm, the simulated fleet — builds an [`Inventory`] and asks
//! it for its entities, so the order and the `-d`, `-s` and `-p` rules are written once. Which kinds are
//! read at all follows the counter set ([`Wanted`]): a kind is monitored when some metric row is read
//! on it (dcgm-exporter skips an entity group whose watch list has no metric field).

use std::collections::BTreeSet;
use std::sync::Arc;

use super::entity::{CpuIdentity, Entity, EntityKind, GpuIdentity, MigIdentity};
use crate::config::devices::{
    DeviceError, DeviceSelection, GpuSlots, Selected, Selectors, Tree, TreeSelected, CPU_NAMES,
    SWITCH_NAMES,
};
use crate::counters::{CounterSet, MetricKind};

/// One GPU and what hangs off it.
#[derive(Debug, Clone)]
pub struct GpuInfo {
    pub identity: Arc<GpuIdentity>,
    /// MIG GPU instances, by DCGM entity id.
    pub instances: Vec<Arc<MigIdentity>>,
    /// NvLinks that are up: (DCGM link entity id, 1-based link index).
    pub links: Vec<(u32, u32)>,
}

/// Most NvSwitches DCGM reports (`DCGM_MAX_NUM_SWITCHES`).
pub const MAX_SWITCHES: u32 = 12;
/// Most CPUs and CPU cores DCGM reports (`DCGM_MAX_NUM_CPUS`, `DCGM_MAX_NUM_CPU_CORES`).
pub const MAX_CPUS: u32 = 8;
pub const MAX_CPU_CORES: u32 = 1024;

/// One NvSwitch and its NvLink ports that are up.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SwitchInfo {
    /// DCGM switch id (`DCGM_FE_SWITCH` entity id).
    pub id: u32,
    /// Ports that are up: (DCGM link entity id, 0-based port).
    pub links: Vec<(u32, u32)>,
}

/// One CPU and its cores.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct CpuInfo {
    pub identity: Arc<CpuIdentity>,
    /// DCGM core ids (`DCGM_FE_CPU_CORE` entity ids) the CPU owns, ascending.
    pub cores: Vec<u32>,
}

/// Everything the host engine reported.
#[derive(Debug, Clone, Default)]
pub struct Inventory {
    pub gpus: Vec<GpuInfo>,
    pub driver_version: Option<String>,
    pub switches: Vec<SwitchInfo>,
    pub cpus: Vec<CpuInfo>,
}

/// Which entity kinds the counter set reads: a kind is wanted when a metric (non-`label`) row is read on
/// it ([`EntityKind::reads`]).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Wanted {
    pub nvlinks: bool,
    pub switches: bool,
    pub switch_links: bool,
    pub cpus: bool,
    pub cores: bool,
}

impl Wanted {
    pub fn from_counters(counters: &CounterSet) -> Wanted {
        let any = |kind: EntityKind| {
            counters
                .rows
                .iter()
                .any(|c| c.kind != MetricKind::Label && kind.reads(c.field.level))
        };
        Wanted {
            nvlinks: any(EntityKind::NvLink),
            switches: any(EntityKind::NvSwitch),
            switch_links: any(EntityKind::NvSwitchLink),
            cpus: any(EntityKind::Cpu),
            cores: any(EntityKind::CpuCore),
        }
    }

    /// Whether NvLink status must be discovered (GPU or switch links).
    pub fn any_links(&self) -> bool {
        self.nvlinks || self.switch_links
    }

    /// Whether NvSwitches must be discovered.
    pub fn any_switch(&self) -> bool {
        self.switches || self.switch_links
    }

    /// Whether CPUs must be discovered.
    pub fn any_cpu(&self) -> bool {
        self.cpus || self.cores
    }
}

/// What `-d`, `-s` and `-p` select on one inventory, with the kinds the counter set reads.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Selection {
    pub gpus: Selected,
    pub switches: TreeSelected,
    pub cpus: TreeSelected,
    pub wanted: Wanted,
}

impl Inventory {
    /// The shape `-d` selection works on.
    pub fn slots(&self) -> Vec<GpuSlots> {
        self.gpus
            .iter()
            .map(|g| GpuSlots {
                gpu: g.identity.index,
                instances: g.instances.iter().map(|m| m.entity_id).collect(),
            })
            .collect()
    }

    /// The shape `-s` selection works on: switches and their up ports.
    pub fn switch_tree(&self) -> Vec<Tree> {
        self.switches
            .iter()
            .map(|s| Tree {
                id: s.id,
                children: s.links.iter().map(|&(_, port)| port).collect(),
            })
            .collect()
    }

    /// The shape `-p` selection works on: CPUs and their cores.
    pub fn cpu_tree(&self) -> Vec<Tree> {
        self.cpus
            .iter()
            .map(|c| Tree {
                id: c.identity.index,
                children: c.cores.clone(),
            })
            .collect()
    }

    /// Apply the three grammars; a listed id that is absent is an error (start-up).
    pub fn select(&self, by: &Selectors, wanted: Wanted) -> Result<Selection, DeviceError> {
        Ok(Selection {
            gpus: by.devices.select(&self.slots())?,
            switches: if wanted.any_switch() {
                by.switches.select_tree(&self.switch_tree(), SWITCH_NAMES)?
            } else {
                TreeSelected::default()
            },
            cpus: if wanted.any_cpu() {
                by.cpus.select_tree(&self.cpu_tree(), CPU_NAMES)?
            } else {
                TreeSelected::default()
            },
            wanted,
        })
    }

    /// Apply the three grammars at run time (after a reconnect or a topology change): ids that are no
    /// longer present are skipped, and returned.
    pub fn select_present(&self, by: &Selectors, wanted: Wanted) -> (Selection, Vec<String>) {
        let (gpus, mut missing) = select_present(&by.devices, &self.slots());
        let mut tree = |wanted: bool, sel: &DeviceSelection, tree: Vec<Tree>, names| {
            if !wanted {
                return TreeSelected::default();
            }
            let (s, m) = sel.select_tree_present(&tree, names);
            missing.extend(m);
            s
        };
        let switches = tree(
            wanted.any_switch(),
            &by.switches,
            self.switch_tree(),
            SWITCH_NAMES,
        );
        let cpus = tree(wanted.any_cpu(), &by.cpus, self.cpu_tree(), CPU_NAMES);
        (
            Selection {
                gpus,
                switches,
                cpus,
                wanted,
            },
            missing,
        )
    }

    /// The monitored entities in output order: per GPU (by index) the GPU itself when selected and its
    /// selected instances; then, when the counters read links, the NvLinks of the GPUs `-d` covers;
    /// then the selected NvSwitches, their selected ports, the selected CPUs and their selected cores
    /// (each kind only when the counters read it).
    pub fn entities(&self, sel: &Selection) -> Vec<Arc<Entity>> {
        let mut out = Vec::new();
        for g in &self.gpus {
            if sel.gpus.gpus.contains(&g.identity.index) {
                out.push(Arc::new(Entity::gpu(g.identity.clone())));
            }
            for m in &g.instances {
                if sel.gpus.instances.contains(&m.entity_id) {
                    out.push(Arc::new(Entity::instance(g.identity.clone(), m.clone())));
                }
            }
        }
        if sel.wanted.nvlinks {
            for g in &self.gpus {
                if !sel.gpus.link_gpus.contains(&g.identity.index) {
                    continue;
                }
                for &(entity_id, index) in &g.links {
                    out.push(Arc::new(Entity::nvlink(
                        g.identity.clone(),
                        entity_id,
                        index,
                    )));
                }
            }
        }
        if sel.wanted.switches {
            for s in &self.switches {
                if sel.switches.majors.contains(&s.id) {
                    out.push(Arc::new(Entity::nvswitch(s.id)));
                }
            }
        }
        if sel.wanted.switch_links {
            for s in &self.switches {
                for &(entity_id, port) in &s.links {
                    if sel.switches.minors.contains(&(s.id, port)) {
                        out.push(Arc::new(Entity::nvswitch_link(s.id, entity_id, port)));
                    }
                }
            }
        }
        if sel.wanted.cpus {
            for c in &self.cpus {
                if sel.cpus.majors.contains(&c.identity.index) {
                    out.push(Arc::new(Entity::cpu(c.identity.clone())));
                }
            }
        }
        if sel.wanted.cores {
            for c in &self.cpus {
                for &core in &c.cores {
                    if sel.cpus.minors.contains(&(c.identity.index, core)) {
                        out.push(Arc::new(Entity::cpu_core(c.identity.clone(), core)));
                    }
                }
            }
        }
        out
    }
}

/// Apply `-d` at run time (after a reconnect): ids that are no longer present are skipped, not an
/// error. Returns the selection and the ids that were asked for but are absent.
pub fn select_present(sel: &DeviceSelection, inv: &[GpuSlots]) -> (Selected, Vec<String>) {
    let mut padded = inv.to_vec();
    let mut phantom_gpus = BTreeSet::new();
    let mut phantom_instances = BTreeSet::new();
    let mut missing = Vec::new();
    // Each round adds one absent id as a phantom; bounded by the number of ids a selection can name.
    for _ in 0..=8192 {
        match sel.select(&padded) {
            Ok(mut s) => {
                s.gpus.retain(|g| !phantom_gpus.contains(g));
                s.instances.retain(|i| !phantom_instances.contains(i));
                s.link_gpus.retain(|g| !phantom_gpus.contains(g));
                return (s, missing);
            }
            Err(DeviceError::Absent { what, id, .. }) => {
                missing.push(format!("{what} {id}"));
                if what == "GPU" {
                    phantom_gpus.insert(id);
                    padded.push(GpuSlots {
                        gpu: id,
                        instances: vec![],
                    });
                } else {
                    phantom_instances.insert(id);
                    let holder = u32::MAX - phantom_instances.len() as u32;
                    phantom_gpus.insert(holder);
                    padded.push(GpuSlots {
                        gpu: holder,
                        instances: vec![id],
                    });
                }
            }
            Err(DeviceError::Syntax { .. }) => break,
        }
    }
    (Selected::default(), missing)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::config::devices;

    #[test]
    fn run_time_selection_skips_what_vanished() {
        let inv = vec![GpuSlots {
            gpu: 1,
            instances: vec![8, 9],
        }];
        let (s, missing) = select_present(&devices::parse("g:0,1+i:7,8").unwrap(), &inv);
        assert_eq!(s.gpus, [1].into());
        assert_eq!(s.instances, [8].into());
        assert_eq!(missing, ["GPU 0", "GPU instance (DCGM entity id) 7"]);
        let (s, missing) = select_present(&DeviceSelection::Flex, &inv);
        assert!(s.gpus.is_empty() && missing.is_empty());
        assert_eq!(s.instances, [8, 9].into());
    }
}
