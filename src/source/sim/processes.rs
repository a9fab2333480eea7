//! The simulated process source: the scenario's `processes:` list, served on the simulated fleet's
//! entities exactly as written (memory in MiB, utilization in percent), with the `pod:` it names as
//! `namespace`/`pod` attribution — so `--simulate --collect-processes` shows per-process and per-pod
//! series without a GPU or a kubelet. Checked at start: every process must run on a GPU or MIG instance
//! of the scenario (`gpu_i_id` is required on a MIG GPU and must be one of its instances).

use std::sync::Arc;

use super::fleet::Fleet;
use super::scenario::{ScenarioError, SimProcess};
use crate::snapshot::attribution::{self, Attribute, Attribution};
use crate::snapshot::process::fold_beyond;
use crate::snapshot::{EntityKind, EntityReading, ProcessReading};
use crate::source::processes::{ProcessOptions, ProcessSource};
use crate::source::SourceError;

/// The scenario's processes.
pub struct SimProcesses {
    list: Vec<(SimProcess, Arc<Attribution>)>,
    opts: ProcessOptions,
}

impl SimProcesses {
    /// Check the processes against the fleet; `origin` names the scenario in errors.
    pub fn new(
        fleet: &Fleet,
        processes: &[SimProcess],
        opts: ProcessOptions,
        origin: &str,
    ) -> Result<SimProcesses, ScenarioError> {
        let invalid = |message: String| ScenarioError::Invalid {
            origin: origin.to_string(),
            message,
        };
        let mut list = Vec::new();
        for p in processes {
            let Some(gpu) = fleet.gpus().iter().find(|g| g.identity.index == p.gpu) else {
                return Err(invalid(format!(
                    "process {} on GPU {}: no such GPU",
                    p.pid, p.gpu
                )));
            };
            match (p.gpu_i_id, gpu.instances.is_empty()) {
                (None, false) => {
                    return Err(invalid(format!(
                        "process {} on GPU {}: the GPU is split into MIG instances; give gpu_i_id (one of {:?})",
                        p.pid,
                        p.gpu,
                        gpu.instances.iter().map(|m| m.gi_id).collect::<Vec<_>>()
                    )))
                }
                (Some(gi), _) if !gpu.instances.iter().any(|m| m.gi_id == gi) => {
                    return Err(invalid(format!(
                        "process {} on GPU {}: no MIG instance with GPU_I_ID {gi}",
                        p.pid, p.gpu
                    )))
                }
                _ => {}
            }
            let mut attr = Attribution::default();
            if let Some((ns, pod)) = p.pod.as_deref().and_then(|s| s.split_once('/')) {
                attr.add(&[
                    Attribute::new(&attribution::NAMESPACE, ns),
                    Attribute::new(&attribution::POD, pod),
                ]);
            }
            list.push((p.clone(), Arc::new(attr)));
        }
        Ok(SimProcesses { list, opts })
    }
}

impl ProcessSource for SimProcesses {
    fn name(&self) -> &'static str {
        "simulated"
    }

    fn poll(&mut self, entities: &[EntityReading]) -> Result<Vec<ProcessReading>, SourceError> {
        let mut out = Vec::new();
        for (p, attr) in &self.list {
            let entity = entities.iter().find(|e| {
                e.entity.gpu_index() == Some(p.gpu)
                    && match (e.entity.kind, &e.entity.mig, p.gpu_i_id) {
                        (EntityKind::Gpu, _, None) => true,
                        (EntityKind::GpuInstance, Some(m), Some(gi)) => m.gi_id == gi,
                        _ => false,
                    }
            });
            let Some(entity) = entity else { continue };
            let mut r = ProcessReading::new(entity.entity.clone(), p.pid, p.name.as_str());
            r.memory_bytes = Some(p.memory_mib << 20);
            r.sm_util = Some(p.sm_utilization);
            r.mem_util = Some(p.memory_utilization);
            r.enc_util = Some(p.encoder_utilization);
            r.dec_util = Some(p.decoder_utilization);
            r.attribution = attr.clone();
            out.push(r);
        }
        Ok(fold_beyond(out, self.opts.max_per_entity))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::source::sim::Scenario;

    fn check(yaml: &str) -> Result<SimProcesses, String> {
        let scenario = Scenario::parse(yaml, "s.yaml").map_err(|e| e.to_string())?;
        let fleet = Fleet::new(&scenario, 1, "node-a");
        SimProcesses::new(
            &fleet,
            &scenario.processes,
            ProcessOptions::default(),
            "s.yaml",
        )
        .map_err(|e| e.to_string())
    }

    const GPUS: &str = "gpus:\n  - { model: H100-SXM5-80GB }\n  - { model: H100-SXM5-80GB, mig: [3g.40gb, 1g.10gb] }\nprocesses:\n";

    #[test]
    fn processes_must_run_on_a_gpu_or_instance_of_the_scenario() {
        assert!(check(&format!("{GPUS}  - {{ pid: 1, name: a, gpu: 0, memory_mib: 1, pod: \"ns/p\" }}\n  - {{ pid: 2, name: b, gpu: 1, gpu_i_id: 7, memory_mib: 1 }}\n")).is_ok());
        let err = |y: &str| check(&format!("{GPUS}{y}")).err().unwrap_or_default();
        assert_eq!(
            err("  - { pid: 1, name: a, gpu: 2, memory_mib: 1 }\n"),
            "s.yaml: process 1 on GPU 2; the scenario has GPUs 0 to 1"
        );
        assert_eq!(
            err("  - { pid: 1, name: a, gpu: 1, memory_mib: 1 }\n"),
            "s.yaml: process 1 on GPU 1: the GPU is split into MIG instances; give gpu_i_id (one of [1, 7])"
        );
        assert_eq!(
            err("  - { pid: 1, name: a, gpu: 1, gpu_i_id: 3, memory_mib: 1 }\n"),
            "s.yaml: process 1 on GPU 1: no MIG instance with GPU_I_ID 3"
        );
        assert_eq!(
            err("  - { pid: 1, name: a, gpu: 0, memory_mib: 1, sm_utilization: 120 }\n"),
            "s.yaml: process 1: sm_utilization 120 is not a percentage (0 to 100)"
        );
        assert_eq!(
            err("  - { pid: 1, name: a, gpu: 0, memory_mib: 1, pod: nopod }\n"),
            "s.yaml: process 1: pod 'nopod' is not namespace/pod"
        );
        assert_eq!(
            err("  - { pid: 1, name: a, gpu: 0, memory_mib: 1 }\n  - { pid: 1, name: b, gpu: 0, memory_mib: 1 }\n"),
            "s.yaml: process pid 1 listed twice"
        );
        assert!(
            err("  - { pid: 1, name: a, gpu: 0, memory_mib: 1, colour: red }\n")
                .contains("unknown field `colour`")
        );
    }
}
