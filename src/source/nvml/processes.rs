//! Per-process readings through NVML, next to any GPU source (DCGM, NVML): for every monitored GPU the
//! running compute and graphics processes (`nvmlDeviceGet{Compute,Graphics}RunningProcesses_v3`: pid,
//! used GPU memory, GPU-instance id on MIG) and their utilization since the previous collection
//! (`nvmlDeviceGetProcessUtilization` with the newest sample timestamp of the previous call: the mean
//! of the driver's samples in between, SM / memory / encoder / decoder percent).
//!
//! MPS clients (`nvmlDeviceGetMPSComputeRunningProcesses_v3`) are read too: with MPS, the pods sharing
//! a GPU appear there.
//!
//! A process belongs to the entity it runs on: its GPU, or on a MIG GPU the GPU instance NVML reports
//! (matched by GPU UUID and instance id to the monitored entities, so it works whatever the source's
//! GPU numbering). Processes on entities that are not monitored (`-d`) are left out. Names come from
//! `nvmlSystemGetProcessName`, else `<proc-root>/<pid>/comm`. NVML calls per collection: one
//! `nvmlDeviceGetCount`, then per GPU three process lists and two utilization calls (count, then fetch),
//! plus one name lookup per new pid. NVML gives no per-process utilization on MIG GPUs: those
//! processes have memory but no utilization series.

use std::collections::{BTreeMap, HashMap};
use std::path::Path;
use std::sync::Arc;

use super::client::Nvml;
use super::ffi::{self, nvmlDevice_t};
use crate::snapshot::process::fold_beyond;
use crate::snapshot::{Entity, EntityKind, EntityReading, ProcessReading};
use crate::source::processes::{ProcessOptions, ProcessSource};
use crate::source::SourceError;

/// One NVML device whose processes are read.
#[derive(Debug, Clone)]
struct Device {
    uuid: String,
    handle: nvmlDevice_t,
}

/// NVML's process lists: a process may be in several (memory: the largest it reports).
#[derive(Clone, Copy)]
enum List {
    Compute,
    Graphics,
    /// Clients of the MPS server (shared GPUs with MPS).
    Mps,
}

/// The NVML process collector.
pub struct NvmlProcesses {
    nvml: Arc<Nvml>,
    opts: ProcessOptions,
    devices: Vec<Device>,
    count: Option<u32>,
    /// Newest utilization sample timestamp seen, per GPU UUID.
    last_sample_us: HashMap<String, u64>,
    /// Names of the pids seen in the last collection.
    names: HashMap<u32, Arc<str>>,
    infos: Vec<ffi::nvmlProcessInfo_t>,
    samples: Vec<ffi::nvmlProcessUtilizationSample_t>,
}

impl NvmlProcesses {
    pub fn new(nvml: Arc<Nvml>, opts: ProcessOptions) -> NvmlProcesses {
        NvmlProcesses {
            nvml,
            opts,
            devices: Vec::new(),
            count: None,
            last_sample_us: HashMap::new(),
            names: HashMap::new(),
            infos: Vec::new(),
            samples: Vec::new(),
        }
    }

    fn discover(&mut self, count: u32) {
        let sym = self.nvml.sym();
        self.devices.clear();
        for i in 0..count {
            let Ok(handle) = sym.device_by_index(i) else {
                continue;
            };
            let Ok(uuid) = sym.uuid(handle) else { continue };
            self.devices.push(Device { uuid, handle });
        }
        self.count = Some(count);
    }

    fn name_of(&mut self, pid: u32, seen: &mut HashMap<u32, Arc<str>>) -> Arc<str> {
        if let Some(n) = self.names.get(&pid) {
            seen.insert(pid, n.clone());
            return n.clone();
        }
        let name: Arc<str> = match self.nvml.sym().process_name(pid) {
            Ok(n) if !n.is_empty() => short_name(&n).into(),
            _ => comm(&self.opts.proc_root, pid).unwrap_or_else(|| "unknown".into()),
        };
        seen.insert(pid, name.clone());
        name
    }
}

/// The executable's name from what NVML reports (a path, possibly with arguments).
fn short_name(s: &str) -> &str {
    let first = s.split_whitespace().next().unwrap_or(s);
    first.rsplit('/').next().unwrap_or(first)
}

/// `<root>/<pid>/comm`, trimmed.
fn comm(root: &Path, pid: u32) -> Option<Arc<str>> {
    let text = std::fs::read_to_string(root.join(pid.to_string()).join("comm")).ok()?;
    let t = text.trim();
    (!t.is_empty()).then(|| Arc::from(t))
}

/// Monitored entities by (lower-case GPU UUID, GPU-instance id or `u32::MAX` for the GPU).
fn entity_index(entities: &[EntityReading]) -> HashMap<(String, u32), Arc<Entity>> {
    let mut out = HashMap::new();
    for e in entities {
        let key = match (e.entity.kind, &e.entity.mig) {
            (EntityKind::Gpu, _) => u32::MAX,
            (EntityKind::GpuInstance, Some(m)) => m.gi_id,
            _ => continue,
        };
        let Some(gpu) = &e.entity.gpu else {
            continue;
        };
        out.insert((gpu.uuid.to_ascii_lowercase(), key), e.entity.clone());
    }
    out
}

impl ProcessSource for NvmlProcesses {
    fn name(&self) -> &'static str {
        "nvml"
    }

    fn poll(&mut self, entities: &[EntityReading]) -> Result<Vec<ProcessReading>, SourceError> {
        let count = self
            .nvml
            .check("nvmlDeviceGetCount_v2", self.nvml.sym().device_count())
            .map_err(|e| SourceError::Unavailable(e.to_string()))?;
        if self.count != Some(count) {
            self.discover(count);
        }
        let index = entity_index(entities);
        let mut out = Vec::new();
        let mut seen_names: HashMap<u32, Arc<str>> = HashMap::new();
        let devices = self.devices.clone();
        let mut lost = false;
        for d in &devices {
            let uuid = d.uuid.to_ascii_lowercase();
            if !index.keys().any(|(u, _)| *u == uuid) {
                continue;
            }
            // pid → (memory, gpu instance)
            let mut procs: BTreeMap<u32, (Option<u64>, u32)> = BTreeMap::new();
            let sym = self.nvml.sym();
            for list in [List::Compute, List::Graphics, List::Mps] {
                let r = match list {
                    List::Compute => sym.compute_processes(d.handle, &mut self.infos),
                    List::Graphics => sym.graphics_processes(d.handle, &mut self.infos),
                    List::Mps => sym.mps_processes(d.handle, &mut self.infos),
                };
                match r {
                    Ok(()) => {}
                    Err(ffi::NVML_ERROR_GPU_IS_LOST) => {
                        lost = true;
                        continue;
                    }
                    Err(_) => continue,
                }
                for p in &self.infos {
                    // NVML_VALUE_NOT_AVAILABLE (-1) when the driver cannot tell (WDDM).
                    let mem = (p.usedGpuMemory != u64::MAX).then_some(p.usedGpuMemory);
                    let slot = procs.entry(p.pid).or_insert((None, p.gpuInstanceId));
                    slot.0 = match (slot.0, mem) {
                        (Some(a), Some(b)) => Some(a.max(b)),
                        (a, b) => a.or(b),
                    };
                }
            }
            if procs.is_empty() {
                continue;
            }
            // Utilization since the previous collection: the mean of the samples per pid.
            let since = self.last_sample_us.get(&d.uuid).copied().unwrap_or(0);
            let mut util: HashMap<u32, [f64; 5]> = HashMap::new();
            let util_ok = sym
                .process_utilization(d.handle, since, &mut self.samples)
                .is_ok();
            if util_ok {
                let mut newest = since;
                for s in &self.samples {
                    newest = newest.max(s.timeStamp);
                    let u = util.entry(s.pid).or_insert([0.0; 5]);
                    u[0] += f64::from(s.smUtil);
                    u[1] += f64::from(s.memUtil);
                    u[2] += f64::from(s.encUtil);
                    u[3] += f64::from(s.decUtil);
                    u[4] += 1.0;
                }
                self.last_sample_us.insert(d.uuid.clone(), newest);
            }
            for (pid, (mem, gi)) in procs {
                let key = if gi == ffi::NVML_NO_INSTANCE {
                    u32::MAX
                } else {
                    gi
                };
                let Some(entity) = index.get(&(uuid.clone(), key)) else {
                    continue;
                };
                let name = self.name_of(pid, &mut seen_names);
                let mut r = ProcessReading::new(entity.clone(), pid, name);
                r.memory_bytes = mem;
                if util_ok {
                    // No sample for a running process: it was idle over the interval.
                    let u = util.get(&pid).filter(|u| u[4] > 0.0).map_or([0.0; 4], |u| {
                        [u[0] / u[4], u[1] / u[4], u[2] / u[4], u[3] / u[4]]
                    });
                    r.sm_util = Some(u[0]);
                    r.mem_util = Some(u[1]);
                    r.enc_util = Some(u[2]);
                    r.dec_util = Some(u[3]);
                }
                out.push(r);
            }
        }
        if lost {
            // A lost GPU is found again (or not) by the next discovery.
            self.count = None;
        }
        self.names = seen_names;
        Ok(fold_beyond(out, self.opts.max_per_entity))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn executable_names() {
        assert_eq!(short_name("/usr/bin/python3 train.py"), "python3");
        assert_eq!(short_name("python3"), "python3");
        let dir = tempfile::tempdir().unwrap();
        std::fs::create_dir_all(dir.path().join("42")).unwrap();
        std::fs::write(dir.path().join("42/comm"), "trainer\n").unwrap();
        assert_eq!(comm(dir.path(), 42).as_deref(), Some("trainer"));
        assert_eq!(comm(dir.path(), 43), None);
    }
}
