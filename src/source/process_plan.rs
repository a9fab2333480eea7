//! Per-process readings' own construction (`--collect-processes`): the scenario's processes on a
//! simulated fleet that lists some, else NVML (the source's library when it opened one). Resolved from
//! the flags without side effects; started once the source is.

use std::path::PathBuf;
use std::sync::Arc;

use crate::source::args::SourceArgs;
use crate::source::nvml::client::Nvml;
use crate::source::nvml::processes::NvmlProcesses;
use crate::source::plan::SourcePlan;
use crate::source::processes::{ProcessOptions, ProcessSource};
use crate::source::sim::processes::SimProcesses;
use crate::startup::StartError;

/// Where per-process readings come from, resolved and not started.
pub enum ProcessPlan {
    Simulated(SimProcesses),
    /// Through NVML; `explicit`: asked for with the flag or variable (a missing NVML is then an error,
    /// not a warning).
    Nvml {
        library: Option<PathBuf>,
        options: ProcessOptions,
        explicit: bool,
    },
}

impl ProcessPlan {
    /// `None` when per-process collection is off; it is on by default with `-k` on a real node
    /// (`kubernetes_node`), with `--simulate` only when asked for.
    pub fn resolve(
        args: &SourceArgs,
        source: &SourcePlan,
        kubernetes_node: bool,
    ) -> Result<Option<ProcessPlan>, StartError> {
        if !args.processes_on(kubernetes_node) {
            return Ok(None);
        }
        let options = ProcessOptions {
            max_per_entity: args.max_processes_per_gpu,
            proc_root: args.proc_root.clone(),
        };
        // A scenario that lists processes serves them; without, processes come from NVML.
        if let Some(sim) = source.simulated().filter(|s| !s.processes.is_empty()) {
            let p = SimProcesses::new(sim.fleet(), &sim.processes, options, &sim.name)
                .map_err(StartError::input)?;
            return Ok(Some(ProcessPlan::Simulated(p)));
        }
        Ok(Some(ProcessPlan::Nvml {
            library: args.nvml_library.clone(),
            options,
            explicit: args.collect_processes == Some(true),
        }))
    }

    /// The process source; `nvml`: the library the source opened, shared. A missing NVML stops
    /// start-up only when processes were asked for explicitly.
    pub fn start(
        self,
        nvml: Option<Arc<Nvml>>,
    ) -> Result<Option<Box<dyn ProcessSource>>, StartError> {
        let (library, options, explicit) = match self {
            ProcessPlan::Simulated(p) => return Ok(Some(Box::new(p))),
            ProcessPlan::Nvml {
                library,
                options,
                explicit,
            } => (library, options, explicit),
        };
        let opened = match nvml {
            Some(lib) => Ok(lib),
            None => Nvml::open(library.as_deref()),
        };
        match opened {
            Ok(lib) => {
                tracing::info!(
                    library = lib.path(),
                    max_per_gpu = options.max_per_entity,
                    proc_root = %options.proc_root.display(),
                    "per-process collection on: processes read through NVML every collection"
                );
                Ok(Some(Box::new(NvmlProcesses::new(lib, options))))
            }
            Err(e) if explicit => Err(StartError::environment(format!(
                "--collect-processes needs NVML: {e}; install the NVIDIA driver (libnvidia-ml.so.1) or point --nvml-library at it"
            ))),
            Err(e) => {
                tracing::warn!(error = %e, "per-process series off: NVML is not usable (they are on by default with -k; --collect-processes=false silences this)");
                Ok(None)
            }
        }
    }
}
