//! The simulated cluster: pod-resources answers and pod metadata made from a scenario's `pods:` and
//! the simulated fleet's identities, for `-k` on `--simulate` without a kubelet socket. Each `List`
//! is one collection: a pod with `from_collection`/`until_collection` appears and leaves on those
//! collections. Device ids are what the NVIDIA device plugin reports: `GPU-<uuid>` for a whole GPU
//! (`GPU-<uuid>::<n>` for the n-th pod sharing it), `MIG-<uuid>` under `nvidia.com/mig-<profile>`.
//! Pod UIDs are derived from the seed and the pod's name; labels are the scenario's.

use std::collections::HashMap;
use std::sync::Arc;

use super::labels::PodMeta;
use super::podresources::{
    ContainerDevices, ContainerResources, ListPodResourcesResponse, PodResources,
};
use crate::source::sim::pods::ScenarioPod;
use crate::source::sim::Fleet;

struct SimPod {
    pod: ScenarioPod,
    /// (resource name, device id) per device.
    devices: Vec<(String, String)>,
}

/// A scenario's pods, served as the kubelet and the API server would.
pub struct SimulatedCluster {
    pods: Vec<SimPod>,
    meta: HashMap<(String, String), Arc<PodMeta>>,
    collection: u64,
}

impl SimulatedCluster {
    /// Resolve the pods' devices on the fleet; a GPU-instance id the GPU does not have is an error.
    pub fn new(pods: &[ScenarioPod], fleet: &Fleet, seed: u64) -> Result<SimulatedCluster, String> {
        let gpus = fleet.gpus();
        // How many pods list each whole GPU: shared ones get replica ids.
        let mut sharers: HashMap<u32, u32> = HashMap::new();
        for p in pods {
            for d in p.devices.iter().filter(|d| d.gpu_i_id.is_none()) {
                *sharers.entry(d.gpu).or_default() += 1;
            }
        }
        let mut replica: HashMap<u32, u32> = HashMap::new();
        let mut out = Vec::with_capacity(pods.len());
        let mut meta = HashMap::new();
        for p in pods {
            let mut devices = Vec::new();
            for d in &p.devices {
                let gpu = gpus
                    .iter()
                    .find(|g| g.identity.index == d.gpu)
                    .ok_or_else(|| format!("pod {}/{}: no GPU {}", p.namespace, p.pod, d.gpu))?;
                match d.gpu_i_id {
                    None => {
                        let id = if sharers.get(&d.gpu).copied().unwrap_or(0) > 1 {
                            let n = replica.entry(d.gpu).or_default();
                            let id = format!("{}::{}", gpu.identity.uuid, n);
                            *n += 1;
                            id
                        } else {
                            gpu.identity.uuid.clone()
                        };
                        devices.push(("nvidia.com/gpu".to_string(), id));
                    }
                    Some(gi) => {
                        let m = gpu.instances.iter().find(|m| m.gi_id == gi).ok_or_else(|| {
                            let have: Vec<String> =
                                gpu.instances.iter().map(|m| m.gi_id.to_string()).collect();
                            format!(
                                "pod {}/{}: GPU {} has no MIG instance with GPU_I_ID {gi} (it has: {})",
                                p.namespace,
                                p.pod,
                                d.gpu,
                                if have.is_empty() { "none".into() } else { have.join(", ") }
                            )
                        })?;
                        devices.push((format!("nvidia.com/mig-{}", m.profile), m.uuid.clone()));
                    }
                }
            }
            meta.insert(
                (p.namespace.clone(), p.pod.clone()),
                Arc::new(PodMeta {
                    uid: pod_uid(seed, &p.namespace, &p.pod),
                    labels: p.labels.clone(),
                }),
            );
            out.push(SimPod {
                pod: p.clone(),
                devices,
            });
        }
        Ok(SimulatedCluster {
            pods: out,
            meta,
            collection: 0,
        })
    }

    pub fn pods(&self) -> usize {
        self.pods.len()
    }

    /// The next collection's `List` answer.
    pub fn list(&mut self) -> ListPodResourcesResponse {
        self.collection += 1;
        let n = self.collection;
        ListPodResourcesResponse {
            pod_resources: self
                .pods
                .iter()
                .filter(|p| p.pod.active_at(n))
                .map(|p| PodResources {
                    name: p.pod.pod.clone(),
                    namespace: p.pod.namespace.clone(),
                    containers: vec![ContainerResources {
                        name: p.pod.container.clone(),
                        devices: p
                            .devices
                            .iter()
                            .map(|(resource, id)| ContainerDevices {
                                resource_name: resource.clone(),
                                device_ids: vec![id.clone()],
                                topology: None,
                            })
                            .collect(),
                        dynamic_resources: Vec::new(),
                    }],
                })
                .collect(),
        }
    }

    /// What the API server would say about a pod.
    pub fn metadata(&self, namespace: &str, name: &str) -> Option<Arc<PodMeta>> {
        self.meta
            .get(&(namespace.to_string(), name.to_string()))
            .cloned()
    }
}

/// A stable UUID-shaped pod UID from the seed and the pod's name (FNV-1a).
fn pod_uid(seed: u64, namespace: &str, name: &str) -> String {
    let mut h: u64 = 0xcbf2_9ce4_8422_2325 ^ seed;
    let mut g: u64 = 0x8422_2325_cbf2_9ce4 ^ seed.rotate_left(17);
    for b in namespace.bytes().chain([b'/']).chain(name.bytes()) {
        h = (h ^ u64::from(b)).wrapping_mul(0x0100_0000_01b3);
        g = (g ^ u64::from(b))
            .wrapping_mul(0x0000_0100_0000_01b3)
            .rotate_left(5);
    }
    format!(
        "{:08x}-{:04x}-4{:03x}-8{:03x}-{:012x}",
        h >> 32,
        (h >> 16) & 0xffff,
        h & 0xfff,
        (g >> 52) & 0xfff,
        g & 0xffff_ffff_ffff
    )
}
