//! Device-ID matching: which pod holds which GPU or MIG instance, from one pod-resources `List` reply.
//!
//! Only NVIDIA resources are considered: `nvidia.com/gpu`, any `nvidia.com/mig-*` and the extra names of
//! `--nvidia-resource-names`. Kubelet device ids come in these forms (dcgm-exporter notes §4.2):
//!
//! | device id | meaning | matches |
//! |---|---|---|
//! | `GPU-<uuid>` | a whole GPU (NVIDIA device plugin) | the GPU, with `--kubernetes-gpu-id-type uid` (default) |
//! | `nvidia<N>` | a whole GPU by index | the GPU, with `--kubernetes-gpu-id-type device-name` |
//! | `MIG-<uuid>` | a MIG instance | the instance whose MIG UUID it is, in any mode |
//! | `MIG-GPU-<uuid>/<gi>/<ci>` | a MIG instance (drivers before R470) | that GPU's instance `GPU_I_ID=<gi>` |
//! | `<id>::<n>` | replica `n` of a time-sliced / MPS-shared device | as `<id>` |
//! | `nvidia<N>/gi<M>[/vgpu<K>]` | GKE MIG instance | GPU N's instance `GPU_I_ID=M`, in any mode |
//! | `nvidia<N>/vgpu<K>` | GKE shared GPU | as `nvidia<N>` (so GKE needs `device-name`) |
//!
//! As in dcgm-exporter, the id type only decides how *whole* GPUs are matched; MIG ids always match.
//! A device held by several pods (time slicing, MPS, shared replicas) is attributed to **all** of them
//! ([`Mapping::pods_for`]: OTLP's holders, the per-pod cost counters, `--kubernetes-virtual-gpus`), and
//! one of them is its **holder** ([`Mapping::holder_for`]), the pod dcgm-exporter 4.5.3-4.8.2 labels the
//! device's one series with (`toDeviceToPod`: every device id of the kubelet's reply, in the reply's
//! order of pods, containers, devices and ids, overwrites the device's entry, so the last one wins; a
//! DRA claim's pod wins over device-plugin ones, as dcgm-exporter's DRA pass relabels after them).
//! A whole-GPU allocation also attributes that GPU's NvLink series; a MIG-partitioned GPU's links and
//! whole-GPU series stay unattributed (they are shared by all its instances).

use std::cell::OnceCell;
use std::collections::HashMap;
use std::sync::Arc;

use super::checkpoint::UidIndex;
use super::podresources::{ContainerResources, ListPodResourcesResponse, PodResources};
use crate::snapshot::attribution::{self, Attribute};
use crate::snapshot::{Entity, EntityKind};

/// How whole GPUs are named in kubelet device ids (`--kubernetes-gpu-id-type`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, clap::ValueEnum)]
pub enum GpuIdType {
    /// `GPU-<uuid>` (NVIDIA device plugin).
    #[value(name = "uid")]
    Uid,
    /// `nvidia<N>` (GKE's device plugin).
    #[value(name = "device-name")]
    DeviceName,
}

/// Which resources count as NVIDIA devices and how whole GPUs are named.
#[derive(Debug, Clone)]
pub struct MatchRules {
    /// Extra resource names from `--nvidia-resource-names`.
    pub extra_resource_names: Vec<String>,
    pub id_type: GpuIdType,
}

impl MatchRules {
    /// `nvidia.com/gpu`, `nvidia.com/mig-*`, or one of the extra names.
    pub fn is_nvidia_resource(&self, resource: &str) -> bool {
        resource == "nvidia.com/gpu"
            || resource.starts_with("nvidia.com/mig-")
            || self.extra_resource_names.iter().any(|n| n == resource)
    }
}

/// What one kubelet device id designates.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub enum DeviceKey {
    /// `GPU-<uuid>`, lower-cased.
    GpuUuid(String),
    /// `nvidia<N>`.
    GpuIndex(u32),
    /// `MIG-<uuid>`, lower-cased.
    MigUuid(String),
    /// GPU index and GPU-instance id (GKE `nvidiaN/giM`).
    Instance { gpu: u32, gi: u32 },
    /// Parent GPU UUID (lower-cased) and GPU-instance id (`MIG-GPU-<uuid>/<gi>/<ci>`).
    InstanceOfGpu { gpu_uuid: String, gi: u32 },
}

fn number(s: &str) -> Option<u32> {
    if s.is_empty() || !s.bytes().all(|b| b.is_ascii_digit()) {
        return None;
    }
    s.parse().ok()
}

/// Parse one kubelet device id; `None` for forms this exporter does not know.
pub fn parse_device_id(id: &str) -> Option<DeviceKey> {
    let id = id.trim();
    // `<id>::<n>`: a shared replica of `<id>`.
    let id = match id.rsplit_once("::") {
        Some((base, n)) if number(n).is_some() => base,
        _ => id,
    };
    if let Some(rest) = id.strip_prefix("MIG-") {
        if let Some(old) = rest.strip_prefix("GPU-") {
            // MIG-GPU-<uuid>/<gi>/<ci>
            let mut parts = old.split('/');
            let uuid = parts.next()?;
            let gi = number(parts.next()?)?;
            return Some(DeviceKey::InstanceOfGpu {
                gpu_uuid: format!("gpu-{}", uuid.to_ascii_lowercase()),
                gi,
            });
        }
        if rest.is_empty() || rest.contains('/') {
            return None;
        }
        return Some(DeviceKey::MigUuid(id.to_ascii_lowercase()));
    }
    if id.starts_with("GPU-") {
        return (!id.contains('/')).then(|| DeviceKey::GpuUuid(id.to_ascii_lowercase()));
    }
    if let Some(rest) = id.strip_prefix("nvidia") {
        let mut parts = rest.split('/');
        let gpu = number(parts.next()?)?;
        let second = parts.next();
        let third = parts.next();
        if parts.next().is_some() {
            return None;
        }
        let vgpu = |p: &str| p.strip_prefix("vgpu").and_then(number).is_some();
        return match (second, third) {
            (None, None) => Some(DeviceKey::GpuIndex(gpu)),
            (Some(s), None) if vgpu(s) => Some(DeviceKey::GpuIndex(gpu)),
            (Some(s), t) if t.is_none_or(vgpu) => {
                let gi = number(s.strip_prefix("gi")?)?;
                Some(DeviceKey::Instance { gpu, gi })
            }
            _ => None,
        };
    }
    None
}

/// The pod UID of one listed container: that of any of its NVIDIA allocations in the checkpoint.
fn container_uid(uids: &UidIndex, c: &ContainerResources, rules: &MatchRules) -> Option<String> {
    c.devices
        .iter()
        .filter(|d| rules.is_nvidia_resource(&d.resource_name))
        .flat_map(|d| d.device_ids.iter().map(move |id| (d, id)))
        .find_map(|(d, id)| uids.uid(&d.resource_name, id, &c.name))
        .map(str::to_string)
}

/// A Kubernetes pod (and container) that was allocated a device.
#[derive(Debug, Clone, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct PodRef {
    pub namespace: String,
    pub name: String,
    pub container: String,
    /// Empty when not known (pod-resources v1 carries none).
    pub uid: String,
    /// The shared replica (`vgpu` label) with `--kubernetes-virtual-gpus`; empty otherwise.
    pub vgpu: String,
    /// More attributes of this allocation: pod labels, DRA claim (`dra_*`).
    pub extra: Arc<[Attribute]>,
}

impl PodRef {
    /// A pod without UID, replica or extra attributes.
    pub fn new(namespace: &str, name: &str, container: &str) -> PodRef {
        PodRef {
            namespace: namespace.to_string(),
            name: name.to_string(),
            container: container.to_string(),
            uid: String::new(),
            vgpu: String::new(),
            extra: Arc::from(Vec::new()),
        }
    }

    /// The pod as attributes: `container`, `namespace`, `pod` and, when known, `pod_uid`, `vgpu`,
    /// then the extra ones (pod labels, `dra_*`).
    pub fn attributes(&self) -> Vec<Attribute> {
        let mut out = vec![
            Attribute::new(&attribution::CONTAINER, self.container.as_str()),
            Attribute::new(&attribution::NAMESPACE, self.namespace.as_str()),
            Attribute::new(&attribution::POD, self.name.as_str()),
        ];
        if !self.uid.is_empty() {
            out.push(Attribute::new(&attribution::POD_UID, self.uid.as_str()));
        }
        if !self.vgpu.is_empty() {
            out.push(Attribute::new(&super::labels::VGPU, self.vgpu.as_str()));
        }
        out.extend(self.extra.iter().cloned());
        out
    }
}

/// The replica part of a shared device id (`GPU-x::3` → `3`, GKE `nvidia0/vgpu2` → `2`), as
/// dcgm-exporter's `vgpu` label takes it.
pub fn vgpu_of(id: &str) -> Option<&str> {
    if let Some((_, r)) = id.split_once("/vgpu") {
        return Some(r);
    }
    id.rsplit_once("::").map(|(_, r)| r)
}

/// Pod UID and labels by namespace and name.
pub type MetadataFn<'a> = &'a dyn Fn(&str, &str) -> Option<Arc<super::labels::PodMeta>>;
/// The label attributes of a pod's labels.
pub type LabelsFn<'a> = &'a dyn Fn(&super::labels::PodMeta) -> Vec<Attribute>;
/// A DRA claim's (driver, pool, device) as a device key and `dra_*` attributes.
pub type DraFn<'a> = &'a dyn Fn(&str, &str, &str) -> Option<(DeviceKey, Vec<Attribute>)>;

/// What joins a `List` reply besides device ids: pod UIDs and labels, shared replicas, DRA claims.
#[derive(Default)]
pub struct MappingExtras<'a> {
    /// The kubelet's device checkpoint (pod UIDs, fallback when the API does not know the pod).
    pub uids: Option<&'a UidIndex>,
    /// Pod UID and labels from the API server (or the simulated cluster), by namespace and name.
    pub metadata: Option<MetadataFn<'a>>,
    /// `--kubernetes-enable-pod-uid`.
    pub pod_uid: bool,
    /// `--kubernetes-enable-pod-labels`: the label attributes of a pod's labels.
    pub pod_labels: Option<LabelsFn<'a>>,
    /// `--kubernetes-virtual-gpus`: add the `vgpu` label.
    pub virtual_gpus: bool,
    /// `--kubernetes-enable-dra`: resolve a claim's (driver, pool, device) to a device key and its
    /// attributes.
    pub dra: Option<DraFn<'a>>,
}

/// One container of a `List` reply, with what joins it: the devices it holds, each with its
/// [`PodRef`].
struct Holder<'r> {
    pod: &'r PodResources,
    container: &'r ContainerResources,
    meta: Option<&'r super::labels::PodMeta>,
    labels: &'r Arc<[Attribute]>,
    rules: &'r MatchRules,
    extras: &'r MappingExtras<'r>,
    /// The container's [`PodRef`], made at its first device.
    pod_ref: OnceCell<PodRef>,
}

impl Holder<'_> {
    /// The devices the container holds: its device-plugin ids (the unknown ones into `unknown_ids`,
    /// at most 16), then its DRA claims' devices.
    fn devices(&self, unknown_ids: &mut Vec<String>) -> Vec<(DeviceKey, PodRef, Source)> {
        let mut found: Vec<(DeviceKey, PodRef, Source)> = Vec::new();
        for dev in self
            .container
            .devices
            .iter()
            .filter(|d| self.rules.is_nvidia_resource(&d.resource_name))
        {
            for id in &dev.device_ids {
                let Some(key) = parse_device_id(id) else {
                    if unknown_ids.len() < 16 && !unknown_ids.contains(id) {
                        unknown_ids.push(id.clone());
                    }
                    continue;
                };
                let mut p = self.pod_ref();
                if self.extras.virtual_gpus {
                    p.vgpu = vgpu_of(id.trim()).unwrap_or_default().to_string();
                }
                found.push((key, p, Source::DevicePlugin));
            }
        }
        if let Some(resolve) = self.extras.dra {
            for dr in &self.container.dynamic_resources {
                for cr in &dr.claim_resources {
                    let Some((key, mut attrs)) =
                        resolve(&cr.driver_name, &cr.pool_name, &cr.device_name)
                    else {
                        continue;
                    };
                    let mut p = self.pod_ref();
                    let mut extra: Vec<Attribute> = p.extra.to_vec();
                    extra.push(Attribute::new(
                        &super::labels::DRA_CLAIM_NAME,
                        dr.claim_name.as_str(),
                    ));
                    extra.push(Attribute::new(
                        &super::labels::DRA_CLAIM_NAMESPACE,
                        dr.claim_namespace.as_str(),
                    ));
                    extra.append(&mut attrs);
                    p.extra = Arc::from(extra);
                    found.push((key, p, Source::Dra));
                }
            }
        }
        found
    }

    /// The container's [`PodRef`]: its pod's UID (when asked for: the API's, else the kubelet
    /// checkpoint's) and label attributes.
    fn pod_ref(&self) -> PodRef {
        self.pod_ref
            .get_or_init(|| {
                let api_uid = self.meta.map(|m| m.uid.clone()).filter(|u| !u.is_empty());
                let uid = if self.extras.pod_uid {
                    api_uid
                        .or_else(|| {
                            self.extras
                                .uids
                                .and_then(|u| container_uid(u, self.container, self.rules))
                        })
                        .unwrap_or_default()
                } else {
                    String::new()
                };
                PodRef {
                    namespace: self.pod.namespace.clone(),
                    name: self.pod.name.clone(),
                    container: self.container.name.clone(),
                    uid,
                    vgpu: String::new(),
                    extra: self.labels.clone(),
                }
            })
            .clone()
    }
}

/// Where an allocation was read: a device-plugin device id, or a DRA claim.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
enum Source {
    DevicePlugin,
    /// dcgm-exporter relabels DRA-held devices after the device-plugin pass: a claim wins.
    Dra,
}

/// The precedence of one allocation for the holder of its device: the later wins.
type Rank = (Source, usize);

/// Pods by device, built from one `List` reply. Every pod list is sorted and free of duplicates.
#[derive(Debug, Default, Clone)]
pub struct Mapping {
    by_gpu_uuid: HashMap<String, Vec<PodRef>>,
    by_gpu_index: HashMap<u32, Vec<PodRef>>,
    by_mig_uuid: HashMap<String, Vec<PodRef>>,
    by_instance: HashMap<(u32, u32), Vec<PodRef>>,
    by_instance_of_gpu: HashMap<(String, u32), Vec<PodRef>>,
    /// Per device key, the allocation of highest rank (the last in the reply's order).
    last: HashMap<DeviceKey, (Rank, PodRef)>,
    /// Pods holding at least one NVIDIA device.
    pub pods: usize,
    /// NVIDIA device ids in the reply whose form is unknown (ignored).
    pub unknown_ids: Vec<String>,
}

impl Mapping {
    /// Index a `List` reply. Pod UIDs are not part of pod-resources v1: `PodRef::uid` is filled from
    /// `uids` (the kubelet's device checkpoint) when given and it knows the allocation, else left empty.
    pub fn build(
        reply: &ListPodResourcesResponse,
        rules: &MatchRules,
        uids: Option<&UidIndex>,
    ) -> Mapping {
        let extras = MappingExtras {
            uids,
            pod_uid: uids.is_some(),
            ..MappingExtras::default()
        };
        Mapping::build_with(reply, rules, &extras)
    }

    /// [`Mapping::build`] with everything else that joins the reply (see [`MappingExtras`]).
    pub fn build_with(
        reply: &ListPodResourcesResponse,
        rules: &MatchRules,
        extras: &MappingExtras,
    ) -> Mapping {
        let mut m = Mapping::default();
        let no_extra: Arc<[Attribute]> = Arc::from(Vec::new());
        // The position of each allocation in the reply (pods, containers, devices, ids in order).
        let mut seq = 0;
        for pod in &reply.pod_resources {
            let mut holds_any = false;
            let meta = extras.metadata.and_then(|f| f(&pod.namespace, &pod.name));
            let labels: Arc<[Attribute]> = match (&meta, extras.pod_labels) {
                (Some(meta), Some(f)) => Arc::from(f(meta)),
                _ => no_extra.clone(),
            };
            for c in &pod.containers {
                let holder = Holder {
                    pod,
                    container: c,
                    meta: meta.as_deref(),
                    labels: &labels,
                    rules,
                    extras,
                    pod_ref: OnceCell::new(),
                };
                for (key, p, source) in holder.devices(&mut m.unknown_ids) {
                    holds_any = true;
                    let rank = (source, seq);
                    seq += 1;
                    if m.last.get(&key).is_none_or(|(r, _)| *r < rank) {
                        m.last.insert(key.clone(), (rank, p.clone()));
                    }
                    m.insert(key, p);
                }
            }
            if holds_any {
                m.pods += 1;
            }
        }
        fn tidy<K>(map: &mut HashMap<K, Vec<PodRef>>) {
            for v in map.values_mut() {
                v.sort();
                v.dedup();
            }
        }
        tidy(&mut m.by_gpu_uuid);
        tidy(&mut m.by_gpu_index);
        tidy(&mut m.by_mig_uuid);
        tidy(&mut m.by_instance);
        tidy(&mut m.by_instance_of_gpu);
        m
    }

    /// A holder of the device `key`, in the index of its kind of key.
    fn insert(&mut self, key: DeviceKey, p: PodRef) {
        match key {
            DeviceKey::GpuUuid(u) => self.by_gpu_uuid.entry(u).or_default().push(p),
            DeviceKey::GpuIndex(i) => self.by_gpu_index.entry(i).or_default().push(p),
            DeviceKey::MigUuid(u) => self.by_mig_uuid.entry(u).or_default().push(p),
            DeviceKey::Instance { gpu, gi } => {
                self.by_instance.entry((gpu, gi)).or_default().push(p)
            }
            DeviceKey::InstanceOfGpu { gpu_uuid, gi } => self
                .by_instance_of_gpu
                .entry((gpu_uuid, gi))
                .or_default()
                .push(p),
        }
    }

    /// Every (pod, container) holding a device, in no particular order (duplicates possible).
    pub fn pods(&self) -> impl Iterator<Item = &PodRef> {
        self.by_gpu_uuid
            .values()
            .chain(self.by_gpu_index.values())
            .chain(self.by_mig_uuid.values())
            .chain(self.by_instance.values())
            .chain(self.by_instance_of_gpu.values())
            .flatten()
    }

    /// The device keys an entity answers to: a MIG instance's MIG UUID, GKE index pair and old-driver
    /// parent UUID pair; a GPU's (and its NvLinks') UUID or index, by `id_type`.
    fn keys_of(entity: &Entity, id_type: GpuIdType) -> Vec<DeviceKey> {
        let Some(gpu) = &entity.gpu else {
            return Vec::new();
        };
        match (entity.kind, &entity.mig) {
            (EntityKind::GpuInstance, Some(mig)) => vec![
                DeviceKey::MigUuid(mig.uuid.to_ascii_lowercase()),
                DeviceKey::Instance {
                    gpu: gpu.index,
                    gi: mig.gi_id,
                },
                DeviceKey::InstanceOfGpu {
                    gpu_uuid: gpu.uuid.to_ascii_lowercase(),
                    gi: mig.gi_id,
                },
            ],
            (EntityKind::Gpu | EntityKind::NvLink, _) => vec![match id_type {
                GpuIdType::Uid => DeviceKey::GpuUuid(gpu.uuid.to_ascii_lowercase()),
                GpuIdType::DeviceName => DeviceKey::GpuIndex(gpu.index),
            }],
            _ => Vec::new(),
        }
    }

    /// The one pod dcgm-exporter labels the entity's series with when several hold it: the last
    /// allocation of the device in the reply (a DRA claim before any device-plugin id); `None` when no
    /// pod holds it. Always one of [`Mapping::pods_for`]'s.
    pub fn holder_for(&self, entity: &Entity, id_type: GpuIdType) -> Option<PodRef> {
        Mapping::keys_of(entity, id_type)
            .iter()
            .filter_map(|k| self.last.get(k))
            .max_by_key(|(rank, _)| *rank)
            .map(|(_, p)| p.clone())
    }

    /// The pods attributed to one entity (sorted, no duplicates); empty when none.
    pub fn pods_for(&self, entity: &Entity, id_type: GpuIdType) -> Vec<PodRef> {
        // NvSwitches and CPUs are not allocated to pods.
        let Some(gpu) = &entity.gpu else {
            return Vec::new();
        };
        match (entity.kind, &entity.mig) {
            (EntityKind::GpuInstance, Some(mig)) => {
                let mut out: Vec<PodRef> = Vec::new();
                let mut sources = 0;
                let lists = [
                    self.by_mig_uuid.get(&mig.uuid.to_ascii_lowercase()),
                    self.by_instance.get(&(gpu.index, mig.gi_id)),
                    self.by_instance_of_gpu
                        .get(&(gpu.uuid.to_ascii_lowercase(), mig.gi_id)),
                ];
                for l in lists.into_iter().flatten() {
                    out.extend(l.iter().cloned());
                    sources += 1;
                }
                if sources > 1 {
                    out.sort();
                    out.dedup();
                }
                out
            }
            (EntityKind::GpuInstance, None) => Vec::new(),
            (EntityKind::Gpu | EntityKind::NvLink, _) => {
                let found = match id_type {
                    GpuIdType::Uid => self.by_gpu_uuid.get(&gpu.uuid.to_ascii_lowercase()),
                    GpuIdType::DeviceName => self.by_gpu_index.get(&gpu.index),
                };
                found.cloned().unwrap_or_default()
            }
            _ => Vec::new(),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::super::podresources::{ContainerDevices, PodResources};
    use super::*;
    use crate::snapshot::{GpuIdentity, MigIdentity};

    #[test]
    fn device_id_forms() {
        use DeviceKey::*;
        let p = parse_device_id;
        assert_eq!(p("GPU-AbC-1"), Some(GpuUuid("gpu-abc-1".into())));
        assert_eq!(p("GPU-abc-1::3"), Some(GpuUuid("gpu-abc-1".into())));
        assert_eq!(p("nvidia7"), Some(GpuIndex(7)));
        assert_eq!(p("nvidia0/vgpu3"), Some(GpuIndex(0)));
        assert_eq!(p("nvidia1/gi2"), Some(Instance { gpu: 1, gi: 2 }));
        assert_eq!(p("nvidia1/gi2/vgpu0"), Some(Instance { gpu: 1, gi: 2 }));
        assert_eq!(p("MIG-1234-ab"), Some(MigUuid("mig-1234-ab".into())));
        assert_eq!(p("MIG-1234-ab::2"), Some(MigUuid("mig-1234-ab".into())));
        assert_eq!(
            p("MIG-GPU-5678/3/0"),
            Some(InstanceOfGpu {
                gpu_uuid: "gpu-5678".into(),
                gi: 3
            })
        );
        for bad in [
            "",
            "nvidia",
            "nvidiaX",
            "nvidia1/gi",
            "nvidia1/x2",
            "nvidia1/gi2/x",
            "MIG-",
            "abc",
            "0",
        ] {
            assert_eq!(p(bad), None, "{bad:?}");
        }
    }

    fn gpu(index: u32) -> Arc<GpuIdentity> {
        Arc::new(GpuIdentity {
            index,
            uuid: format!("GPU-{index}{index}"),
            pci_bus_id: String::new(),
            model: "m".into(),
            serial: String::new(),
            vbios: String::new(),
        })
    }

    fn pod(name: &str, resource: &str, ids: &[&str]) -> PodResources {
        PodResources {
            name: name.into(),
            namespace: "ns".into(),
            containers: vec![ContainerResources {
                name: "c".into(),
                devices: vec![ContainerDevices {
                    resource_name: resource.into(),
                    device_ids: ids.iter().map(|s| s.to_string()).collect(),
                    topology: None,
                }],
                dynamic_resources: vec![],
            }],
        }
    }

    fn names(pods: &[PodRef]) -> Vec<&str> {
        pods.iter().map(|p| p.name.as_str()).collect()
    }

    #[test]
    fn entities_get_their_pods() {
        let reply = ListPodResourcesResponse {
            pod_resources: vec![
                pod("whole", "nvidia.com/gpu", &["GPU-00"]),
                pod("shared-b", "nvidia.com/gpu", &["GPU-22::1"]),
                pod("shared-a", "nvidia.com/gpu", &["GPU-22::0"]),
                pod("mig", "nvidia.com/mig-1g.10gb", &["MIG-aa"]),
                pod("gke-mig", "nvidia.com/gpu", &["nvidia1/gi5"]),
                pod("other", "example.com/fpga", &["GPU-33"]),
                pod("extra", "nvidia.com/a100", &["GPU-33"]),
                pod("odd", "nvidia.com/gpu", &["weird"]),
            ],
        };
        let rules = MatchRules {
            extra_resource_names: vec!["nvidia.com/a100".into()],
            id_type: GpuIdType::Uid,
        };
        let m = Mapping::build(&reply, &rules, None);
        assert_eq!(m.pods, 6);
        assert_eq!(m.unknown_ids, vec!["weird".to_string()]);
        let uid = GpuIdType::Uid;
        assert_eq!(names(&m.pods_for(&Entity::gpu(gpu(0)), uid)), ["whole"]);
        assert_eq!(
            names(&m.pods_for(&Entity::nvlink(gpu(0), 0, 1), uid)),
            ["whole"]
        );
        assert_eq!(
            names(&m.pods_for(&Entity::gpu(gpu(2)), uid)),
            ["shared-a", "shared-b"]
        );
        assert_eq!(names(&m.pods_for(&Entity::gpu(gpu(3)), uid)), ["extra"]);
        assert!(m.pods_for(&Entity::gpu(gpu(4)), uid).is_empty());
        // device-name mode does not match GPU- ids
        assert!(m
            .pods_for(&Entity::gpu(gpu(0)), GpuIdType::DeviceName)
            .is_empty());
        let mig = |gi: u32, uuid: &str| {
            Arc::new(MigIdentity {
                entity_id: 8 + gi,
                gi_id: gi,
                profile: "1g.10gb".into(),
                uuid: uuid.into(),
            })
        };
        assert_eq!(
            names(&m.pods_for(&Entity::instance(gpu(1), mig(7, "MIG-AA")), uid)),
            ["mig"]
        );
        assert_eq!(
            names(&m.pods_for(&Entity::instance(gpu(1), mig(5, "MIG-bb")), uid)),
            ["gke-mig"]
        );
        assert!(m
            .pods_for(&Entity::instance(gpu(1), mig(6, "MIG-cc")), uid)
            .is_empty());
        // a MIG GPU's whole-GPU series is not attributed to its instances' pods
        assert!(m.pods_for(&Entity::gpu(gpu(1)), uid).is_empty());
    }

    /// The holder of a shared device is the pod dcgm-exporter 4.5.3-4.8.2 labels its one series with:
    /// the last allocation in the reply's order (pods, containers, devices, ids), whatever the id's form
    /// (`::N` replicas, GKE `/vgpuN`, MIG UUIDs, GKE MIG ids); a DRA claim wins over device-plugin ids.
    #[test]
    fn the_holder_is_the_last_allocation_in_the_reply() {
        let two_containers = PodResources {
            name: "multi".into(),
            namespace: "ns".into(),
            containers: ["first", "second"]
                .iter()
                .map(|c| ContainerResources {
                    name: c.to_string(),
                    devices: vec![ContainerDevices {
                        resource_name: "nvidia.com/gpu".into(),
                        device_ids: vec!["GPU-33::4".into()],
                        topology: None,
                    }],
                    dynamic_resources: vec![],
                })
                .collect(),
        };
        let reply = ListPodResourcesResponse {
            pod_resources: vec![
                // listed first, sorted last: the reply's order decides, not the names
                pod("z-first", "nvidia.com/gpu", &["GPU-22::0"]),
                pod("a-second", "nvidia.com/gpu", &["GPU-22::1"]),
                pod("b-mig", "nvidia.com/mig-1g.10gb", &["MIG-aa::0"]),
                pod("a-gke-mig", "nvidia.com/gpu", &["nvidia1/gi7/vgpu1"]),
                pod(
                    "one-pod-two-ids",
                    "nvidia.com/gpu",
                    &["GPU-44::1", "GPU-55::0"],
                ),
                pod("last-id", "nvidia.com/gpu", &["GPU-55::1", "GPU-44::0"]),
                two_containers,
            ],
        };
        let rules = MatchRules {
            extra_resource_names: vec![],
            id_type: GpuIdType::Uid,
        };
        let m = Mapping::build(&reply, &rules, None);
        let uid = GpuIdType::Uid;
        let holder = |e: &Entity| m.holder_for(e, uid).map(|p| (p.name, p.container));
        let named = |n: &str, c: &str| Some((n.to_string(), c.to_string()));
        assert_eq!(holder(&Entity::gpu(gpu(2))), named("a-second", "c"));
        assert_eq!(
            names(&m.pods_for(&Entity::gpu(gpu(2)), uid)),
            ["a-second", "z-first"]
        );
        assert_eq!(
            holder(&Entity::nvlink(gpu(2), 0, 1)),
            named("a-second", "c")
        );
        assert_eq!(holder(&Entity::gpu(gpu(3))), named("multi", "second"));
        assert_eq!(holder(&Entity::gpu(gpu(4))), named("last-id", "c"));
        assert_eq!(holder(&Entity::gpu(gpu(5))), named("last-id", "c"));
        assert_eq!(holder(&Entity::gpu(gpu(6))), None);
        let mig = |gi: u32, uuid: &str| {
            Arc::new(MigIdentity {
                entity_id: 8 + gi,
                gi_id: gi,
                profile: "1g.10gb".into(),
                uuid: uuid.into(),
            })
        };
        // GPU 1's instance 7 is MIG-aa, held by its UUID and by its GKE id: the GKE pod is later.
        let instance = Entity::instance(gpu(1), mig(7, "MIG-AA"));
        assert_eq!(names(&m.pods_for(&instance, uid)), ["a-gke-mig", "b-mig"]);
        assert_eq!(holder(&instance), named("a-gke-mig", "c"));
        // GKE: nvidiaN/vgpuK ids in device-name mode.
        let gke = ListPodResourcesResponse {
            pod_resources: vec![
                pod("x", "nvidia.com/gpu", &["nvidia0/vgpu0"]),
                pod("w", "nvidia.com/gpu", &["nvidia0/vgpu1"]),
            ],
        };
        let rules = MatchRules {
            extra_resource_names: vec![],
            id_type: GpuIdType::DeviceName,
        };
        let m = Mapping::build(&gke, &rules, None);
        assert_eq!(
            m.holder_for(&Entity::gpu(gpu(0)), GpuIdType::DeviceName)
                .map(|p| p.name),
            Some("w".to_string())
        );
    }

    /// A DRA claim's pod is the holder even when a device-plugin id of the same device comes later.
    #[test]
    fn a_dra_claim_wins_the_holder() {
        use super::super::podresources::{ClaimResource, DynamicResource};
        let mut claimed = pod("claimed", "example.com/none", &[]);
        claimed.containers[0].dynamic_resources = vec![DynamicResource {
            claim_name: "claim".into(),
            claim_namespace: "ns".into(),
            claim_resources: vec![ClaimResource {
                driver_name: "gpu.nvidia.com".into(),
                pool_name: "node".into(),
                device_name: "gpu-0".into(),
            }],
        }];
        let reply = ListPodResourcesResponse {
            pod_resources: vec![claimed, pod("plugin", "nvidia.com/gpu", &["GPU-00::0"])],
        };
        let rules = MatchRules {
            extra_resource_names: vec![],
            id_type: GpuIdType::Uid,
        };
        let dra = |_: &str, _: &str, _: &str| Some((DeviceKey::GpuUuid("gpu-00".into()), vec![]));
        let extras = MappingExtras {
            dra: Some(&dra),
            ..MappingExtras::default()
        };
        let m = Mapping::build_with(&reply, &rules, &extras);
        assert_eq!(
            names(&m.pods_for(&Entity::gpu(gpu(0)), GpuIdType::Uid)),
            ["claimed", "plugin"]
        );
        assert_eq!(
            m.holder_for(&Entity::gpu(gpu(0)), GpuIdType::Uid)
                .map(|p| p.name),
            Some("claimed".to_string())
        );
    }

    #[test]
    fn device_name_mode_matches_nvidia_n() {
        let reply = ListPodResourcesResponse {
            pod_resources: vec![
                pod("a", "nvidia.com/gpu", &["nvidia3"]),
                pod("b", "nvidia.com/gpu", &["nvidia3/vgpu1"]),
            ],
        };
        let rules = MatchRules {
            extra_resource_names: vec![],
            id_type: GpuIdType::DeviceName,
        };
        let m = Mapping::build(&reply, &rules, None);
        assert_eq!(
            names(&m.pods_for(&Entity::gpu(gpu(3)), GpuIdType::DeviceName)),
            ["a", "b"]
        );
        assert!(m.pods_for(&Entity::gpu(gpu(3)), GpuIdType::Uid).is_empty());
    }
}
