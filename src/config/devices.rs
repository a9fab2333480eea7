//! Device selection: dcgm-exporter's `-d` / `DCGM_EXPORTER_DEVICES_STR` grammar and semantics.
//!
//! `f` (flex, the default): every GPU, but a GPU with MIG instances is monitored through its instances
//! instead of as a whole. `g` / `i`: all GPUs / all MIG instances. `g:0,1` / `i:0,2-4`: those ids (GPU
//! ids, and for `i` the DCGM GPU_I *entity* ids, not NVML GI ids, as in dcgm-exporter). dcgm-exporter
//! 4.8.3 also accepts combinations such as `g+i` or `g:0,1+i:3`; `f` cannot be combined. Ids that do
//! not exist are a startup error, found by [`DeviceSelection::select`] once the source knows its GPUs.
//!
//! The same grammar selects NvSwitches and their NvLink ports (`-s`) and CPUs and their cores (`-p`),
//! through [`DeviceSelection::select_tree`]: `f` is everything, `g` the switches / CPUs, `i` the ports /
//! cores *of the selected* switches / CPUs (so `-s g+i` is every switch with its links, `-s g` the
//! switches alone, and `-s i` nothing), as dcgm-exporter's device info applies them.

use std::collections::BTreeSet;
use std::fmt;

/// Ids of one kind: all of them, or a listed set.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum IdSet {
    None,
    All,
    Some(BTreeSet<u32>),
}

impl IdSet {
    fn contains(&self, id: u32) -> bool {
        match self {
            IdSet::None => false,
            IdSet::All => true,
            IdSet::Some(ids) => ids.contains(&id),
        }
    }
}

/// A parsed `-d` value.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub enum DeviceSelection {
    #[default]
    Flex,
    Explicit {
        gpus: IdSet,
        instances: IdSet,
    },
}

/// Upper bound of ids one range may expand to (dcgm-exporter caps at DCGM's max core count).
const MAX_IDS: u32 = 4096;

#[derive(Debug, thiserror::Error, PartialEq, Eq)]
pub enum DeviceError {
    #[error("invalid device selection '{input}' at character {position}: {message}")]
    Syntax {
        input: String,
        position: usize,
        message: String,
    },
    #[error("device selection asks for {what} {id}, which does not exist (present: {present})")]
    Absent {
        what: &'static str,
        id: u32,
        present: String,
    },
}

impl fmt::Display for DeviceSelection {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            DeviceSelection::Flex => write!(f, "f"),
            DeviceSelection::Explicit { gpus, instances } => {
                let part = |p: &str, s: &IdSet| match s {
                    IdSet::None => None,
                    IdSet::All => Some(p.to_string()),
                    IdSet::Some(ids) => Some(format!(
                        "{p}:{}",
                        ids.iter().map(u32::to_string).collect::<Vec<_>>().join(",")
                    )),
                };
                let parts: Vec<String> = [part("g", gpus), part("i", instances)]
                    .into_iter()
                    .flatten()
                    .collect();
                write!(f, "{}", parts.join("+"))
            }
        }
    }
}

impl std::str::FromStr for DeviceSelection {
    type Err = DeviceError;
    fn from_str(s: &str) -> Result<Self, DeviceError> {
        parse(s)
    }
}

/// Parse a `-d` value.
pub fn parse(input: &str) -> Result<DeviceSelection, DeviceError> {
    let syntax = |position: usize, message: &str| DeviceError::Syntax {
        input: input.to_string(),
        position,
        message: message.to_string(),
    };
    let trimmed = input.trim();
    if trimmed.is_empty() {
        return Err(syntax(1, "empty; expected f, g, i, g:<ids> or i:<ids>"));
    }
    if trimmed == "f" {
        return Ok(DeviceSelection::Flex);
    }
    let mut gpus = IdSet::None;
    let mut instances = IdSet::None;
    let mut offset = input.len() - input.trim_start().len();
    for part in trimmed.split('+') {
        let pos = offset + 1;
        offset += part.len() + 1;
        let (kind, ids) = match part.split_once(':') {
            Some((k, rest)) => (k, Some(rest)),
            None => (part, None),
        };
        let slot = match kind {
            "g" => &mut gpus,
            "i" => &mut instances,
            "f" => {
                return Err(syntax(
                    pos,
                    "'f' (flex) cannot take ids or be combined with g/i",
                ))
            }
            "" => return Err(syntax(pos, "missing g or i before ':'")),
            _ => return Err(syntax(pos, "expected f, g or i")),
        };
        if *slot != IdSet::None {
            return Err(syntax(pos, "g or i given twice"));
        }
        *slot = match ids {
            None => IdSet::All,
            Some(list) => IdSet::Some(parse_ids(list, pos + kind.len() + 1, &syntax)?),
        };
    }
    Ok(DeviceSelection::Explicit { gpus, instances })
}

fn parse_ids(
    list: &str,
    start: usize,
    syntax: &dyn Fn(usize, &str) -> DeviceError,
) -> Result<BTreeSet<u32>, DeviceError> {
    let mut ids = BTreeSet::new();
    let mut pos = start;
    if list.is_empty() {
        return Err(syntax(pos, "expected ids after ':'"));
    }
    for token in list.split(',') {
        let num = |s: &str, at: usize| -> Result<u32, DeviceError> {
            if s.is_empty() || !s.bytes().all(|b| b.is_ascii_digit()) {
                return Err(syntax(at, "expected a number or a range n-m"));
            }
            s.parse::<u32>().map_err(|_| syntax(at, "number too large"))
        };
        match token.split_once('-') {
            None => {
                ids.insert(num(token, pos)?);
            }
            Some((a, b)) => {
                let lo = num(a, pos)?;
                let hi = num(b, pos + a.len() + 1)?;
                if lo > hi {
                    return Err(syntax(pos, "range start is greater than its end"));
                }
                if hi - lo >= MAX_IDS {
                    return Err(syntax(pos, "range too large"));
                }
                ids.extend(lo..=hi);
            }
        }
        if ids.len() as u32 > MAX_IDS {
            return Err(syntax(pos, "too many ids"));
        }
        pos += token.len() + 1;
    }
    Ok(ids)
}

/// A GPU as device selection sees it: its id and the DCGM entity ids of its MIG instances.
#[derive(Debug, Clone)]
pub struct GpuSlots {
    pub gpu: u32,
    pub instances: Vec<u32>,
}

/// What to monitor.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Selected {
    pub gpus: BTreeSet<u32>,
    pub instances: BTreeSet<u32>,
    /// GPUs whose NvLinks are monitored: every GPU with `f`, else the GPUs `g` selects (dcgm-exporter
    /// reads a GPU's links when the flex rule or the GPU list covers the GPU).
    pub link_gpus: BTreeSet<u32>,
}

/// The three selection flags: `-d` (GPUs, MIG instances), `-s` (NvSwitches, their NvLinks), `-p`
/// (CPUs, their cores).
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Selectors {
    pub devices: DeviceSelection,
    pub switches: DeviceSelection,
    pub cpus: DeviceSelection,
}

/// A top-level entity of `-s` / `-p` (an NvSwitch, a CPU) with its sub-entities (its NvLink ports, its
/// cores).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Tree {
    pub id: u32,
    pub children: Vec<u32>,
}

/// How `-s` / `-p` name their entities in messages.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct TreeNames {
    pub major: &'static str,
    pub minor: &'static str,
}

/// `-s`: NvSwitches and their NvLink ports.
pub const SWITCH_NAMES: TreeNames = TreeNames {
    major: "NvSwitch",
    minor: "NvSwitch NvLink",
};

/// `-p`: CPUs and their cores.
pub const CPU_NAMES: TreeNames = TreeNames {
    major: "CPU",
    minor: "CPU core",
};

/// What `-s` / `-p` select: top-level ids and (top-level id, sub-entity id) pairs.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct TreeSelected {
    pub majors: BTreeSet<u32>,
    pub minors: BTreeSet<(u32, u32)>,
}

fn id_list(ids: impl IntoIterator<Item = u32>) -> String {
    let ids: BTreeSet<u32> = ids.into_iter().collect();
    if ids.is_empty() {
        "none".into()
    } else {
        ids.iter().map(u32::to_string).collect::<Vec<_>>().join(",")
    }
}

impl DeviceSelection {
    /// Decide what to monitor on this inventory; listed ids that are absent are an error.
    pub fn select(&self, inventory: &[GpuSlots]) -> Result<Selected, DeviceError> {
        let mut out = Selected::default();
        match self {
            DeviceSelection::Flex => {
                for g in inventory {
                    if g.instances.is_empty() {
                        out.gpus.insert(g.gpu);
                    } else {
                        out.instances.extend(g.instances.iter().copied());
                    }
                    out.link_gpus.insert(g.gpu);
                }
            }
            DeviceSelection::Explicit { gpus, instances } => {
                let all_gpus: BTreeSet<u32> = inventory.iter().map(|g| g.gpu).collect();
                let all_inst: BTreeSet<u32> = inventory
                    .iter()
                    .flat_map(|g| g.instances.iter().copied())
                    .collect();
                let check = |set: &IdSet, present: &BTreeSet<u32>, what: &'static str| {
                    if let IdSet::Some(ids) = set {
                        if let Some(id) = ids.iter().find(|id| !present.contains(id)) {
                            return Err(DeviceError::Absent {
                                what,
                                id: *id,
                                present: if present.is_empty() {
                                    "none".into()
                                } else {
                                    present
                                        .iter()
                                        .map(u32::to_string)
                                        .collect::<Vec<_>>()
                                        .join(",")
                                },
                            });
                        }
                    }
                    Ok(())
                };
                check(gpus, &all_gpus, "GPU")?;
                check(instances, &all_inst, "GPU instance (DCGM entity id)")?;
                out.gpus = all_gpus.into_iter().filter(|g| gpus.contains(*g)).collect();
                out.link_gpus = out.gpus.clone();
                out.instances = all_inst
                    .into_iter()
                    .filter(|i| instances.contains(*i))
                    .collect();
            }
        }
        Ok(out)
    }
}

impl DeviceSelection {
    /// Decide which switches and ports (`-s`) or CPUs and cores (`-p`) to monitor; listed ids that are
    /// absent are an error (a sub-entity id must belong to a selected top-level entity).
    pub fn select_tree(
        &self,
        tree: &[Tree],
        names: TreeNames,
    ) -> Result<TreeSelected, DeviceError> {
        let (selected, missing) = self.tree_select(tree);
        match missing.first() {
            None => Ok(selected),
            Some(&(major, id)) => Err(DeviceError::Absent {
                what: if major { names.major } else { names.minor },
                id,
                present: if major {
                    id_list(tree.iter().map(|t| t.id))
                } else {
                    id_list(
                        tree.iter()
                            .filter(|t| selected.majors.contains(&t.id))
                            .flat_map(|t| t.children.iter().copied()),
                    )
                },
            }),
        }
    }

    /// [`DeviceSelection::select_tree`] at run time (after a reconnect or a bind event): absent ids
    /// are skipped, and named in the returned list.
    pub fn select_tree_present(
        &self,
        tree: &[Tree],
        names: TreeNames,
    ) -> (TreeSelected, Vec<String>) {
        let (selected, missing) = self.tree_select(tree);
        let missing = missing
            .into_iter()
            .map(|(major, id)| format!("{} {id}", if major { names.major } else { names.minor }))
            .collect();
        (selected, missing)
    }

    /// The selection and the listed ids not found: (is a top-level id, id).
    fn tree_select(&self, tree: &[Tree]) -> (TreeSelected, Vec<(bool, u32)>) {
        let mut out = TreeSelected::default();
        let mut missing = Vec::new();
        match self {
            DeviceSelection::Flex => {
                for t in tree {
                    out.majors.insert(t.id);
                    out.minors.extend(t.children.iter().map(|c| (t.id, *c)));
                }
            }
            DeviceSelection::Explicit { gpus, instances } => {
                for t in tree.iter().filter(|t| gpus.contains(t.id)) {
                    out.majors.insert(t.id);
                    out.minors.extend(
                        t.children
                            .iter()
                            .filter(|c| instances.contains(**c))
                            .map(|c| (t.id, *c)),
                    );
                }
                if let IdSet::Some(ids) = gpus {
                    missing.extend(
                        ids.iter()
                            .filter(|id| !tree.iter().any(|t| t.id == **id))
                            .map(|id| (true, *id)),
                    );
                }
                if let IdSet::Some(ids) = instances {
                    missing.extend(
                        ids.iter()
                            .filter(|id| !out.minors.iter().any(|(_, c)| c == *id))
                            .map(|id| (false, *id)),
                    );
                }
            }
        }
        (out, missing)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn ids(v: &[u32]) -> IdSet {
        IdSet::Some(v.iter().copied().collect())
    }

    #[test]
    fn grammar() {
        assert_eq!(parse("f").unwrap(), DeviceSelection::Flex);
        assert_eq!(
            parse("g").unwrap(),
            DeviceSelection::Explicit {
                gpus: IdSet::All,
                instances: IdSet::None
            }
        );
        assert_eq!(
            parse("i:0,2-4").unwrap(),
            DeviceSelection::Explicit {
                gpus: IdSet::None,
                instances: ids(&[0, 2, 3, 4])
            }
        );
        assert_eq!(
            parse("g:0,1+i:3").unwrap(),
            DeviceSelection::Explicit {
                gpus: ids(&[0, 1]),
                instances: ids(&[3])
            }
        );
        assert_eq!(parse("g:0,1+i:3").unwrap().to_string(), "g:0,1+i:3");
    }

    #[test]
    fn errors_have_positions() {
        let e = parse("g:0,x").unwrap_err();
        assert_eq!(
            e.to_string(),
            "invalid device selection 'g:0,x' at character 5: expected a number or a range n-m"
        );
        assert!(matches!(
            parse("f:0"),
            Err(DeviceError::Syntax { position: 1, .. })
        ));
        assert!(matches!(
            parse("g+g"),
            Err(DeviceError::Syntax { position: 3, .. })
        ));
        assert!(matches!(parse("g:3-1"), Err(DeviceError::Syntax { .. })));
        assert!(matches!(parse("x"), Err(DeviceError::Syntax { .. })));
        assert!(matches!(parse(""), Err(DeviceError::Syntax { .. })));
        assert!(matches!(parse("g:"), Err(DeviceError::Syntax { .. })));
    }

    #[test]
    fn flex_prefers_instances() {
        let inv = vec![
            GpuSlots {
                gpu: 0,
                instances: vec![],
            },
            GpuSlots {
                gpu: 1,
                instances: vec![7, 8],
            },
        ];
        let s = DeviceSelection::Flex.select(&inv).unwrap();
        assert_eq!(s.gpus, [0].into());
        assert_eq!(s.instances, [7, 8].into());
        let s = parse("g").unwrap().select(&inv).unwrap();
        assert_eq!(s.gpus, [0, 1].into());
        assert!(s.instances.is_empty());
        let e = parse("i:9").unwrap().select(&inv).unwrap_err();
        assert!(
            e.to_string().contains("GPU instance (DCGM entity id) 9"),
            "{e}"
        );
    }

    #[test]
    fn trees_select_majors_then_their_minors() {
        let tree = vec![
            Tree {
                id: 0,
                children: vec![0, 1, 2],
            },
            Tree {
                id: 1,
                children: vec![0, 1, 2],
            },
        ];
        let s = DeviceSelection::Flex
            .select_tree(&tree, SWITCH_NAMES)
            .unwrap();
        assert_eq!(s.majors, [0, 1].into());
        assert_eq!(s.minors.len(), 6);
        let s = parse("g")
            .unwrap()
            .select_tree(&tree, SWITCH_NAMES)
            .unwrap();
        assert_eq!(s.majors, [0, 1].into());
        assert!(s.minors.is_empty());
        let s = parse("i")
            .unwrap()
            .select_tree(&tree, SWITCH_NAMES)
            .unwrap();
        assert!(s.majors.is_empty() && s.minors.is_empty());
        let s = parse("g:1+i:0,2")
            .unwrap()
            .select_tree(&tree, SWITCH_NAMES)
            .unwrap();
        assert_eq!(s.majors, [1].into());
        assert_eq!(s.minors, [(1, 0), (1, 2)].into());
        let e = parse("g:3")
            .unwrap()
            .select_tree(&tree, CPU_NAMES)
            .unwrap_err();
        assert_eq!(
            e.to_string(),
            "device selection asks for CPU 3, which does not exist (present: 0,1)"
        );
        let e = parse("g:0+i:7")
            .unwrap()
            .select_tree(&tree, CPU_NAMES)
            .unwrap_err();
        assert_eq!(
            e.to_string(),
            "device selection asks for CPU core 7, which does not exist (present: 0,1,2)"
        );
        let (s, missing) = parse("g:0,5+i:1")
            .unwrap()
            .select_tree_present(&tree, SWITCH_NAMES);
        assert_eq!(s.minors, [(0, 1)].into());
        assert_eq!(missing, ["NvSwitch 5"]);
    }

    proptest::proptest! {
        #[test]
        fn random_strings_never_panic(s in "\\PC{0,40}") { let _ = parse(&s); }
        #[test]
        fn grammar_like_strings_never_panic(s in "[fgi:+,0-9-]{0,30}") { let _ = parse(&s); }
    }
}
