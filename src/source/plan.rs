//! The source's own construction: which source reads the GPUs (`--simulate`, `--source`, `-r`),
//! resolved from its flags (every check, no side effect) and then started (library opened, host engine
//! connected, rows it cannot serve dropped from the counter set).
//!
//! What the consumers need from the source beyond the counters CSV is declared before the source is
//! resolved, as [`SourceNeeds`]; the plan is built with it and never changed afterwards.

use std::sync::Arc;

use crate::config::CollectionArgs;
use crate::counters::CounterSet;
use crate::snapshot::distribution::DistributionSpec;
use crate::snapshot::HostInfo;
use crate::source::args::{SourceArgs, SourceKind};
use crate::source::dcgm::args::DcgmArgs;
use crate::source::dcgm::{self, DcgmOptions, DcgmSource};
use crate::source::nvml::client::Nvml;
use crate::source::nvml::{self, NvmlOptions, NvmlSource};
use crate::source::sim::args::SimulationArgs;
use crate::source::sim::pods::ScenarioPod;
use crate::source::sim::scenario::SimProcess;
use crate::source::sim::{Fleet, Scenario, SimSource};
use crate::source::Source;
use crate::startup::{ResolveContext, StartContext, StartError};

/// What the consumers need the source to read whatever the counters CSV lists.
#[derive(Debug, Clone, Copy, Default)]
pub struct SourceNeeds {
    /// Every incident (XIDs, clock events, health), one log record each (OTLP log records).
    pub incident_events: bool,
}

/// The flag groups a source is resolved from.
pub struct SourceFlags<'a> {
    pub source: &'a SourceArgs,
    pub dcgm: &'a DcgmArgs,
    pub simulation: &'a SimulationArgs,
    pub collection: &'a CollectionArgs,
}

/// Where the readings come from, resolved and not started.
pub struct SourcePlan {
    kind: Kind,
    /// `--enable-dcgm-log`: DCGM's own log level, passed through before any thread starts.
    dcgm_log: Option<dcgm::log::DcgmLogLevel>,
    /// `--enable-gpu-bind-unbind-watch` was given (said to have no effect on a simulated fleet).
    bind_watch: bool,
    /// The fields sampled between collections (`--distribution`).
    distributions: Arc<[DistributionSpec]>,
}

enum Kind {
    Simulated(Box<Simulated>),
    Dcgm(Box<DcgmOptions>),
    /// `--source nvml`.
    Nvml(NvmlOptions),
    /// `--source auto`: DCGM when libdcgm loads and answers, else NVML.
    Auto(Box<DcgmOptions>, NvmlOptions),
}

/// `--simulate`: the fleet and what the scenario lists besides its GPUs.
pub struct Simulated {
    pub source: SimSource,
    /// The scenario's name (`--simulate`).
    pub name: String,
    pub description: String,
    pub seed: u64,
    /// The scenario's processes (per-process readings) and pods (a simulated Kubernetes node).
    pub processes: Vec<SimProcess>,
    pub pods: Vec<ScenarioPod>,
}

impl Simulated {
    pub fn fleet(&self) -> &Fleet {
        self.source.fleet()
    }
}

/// A started source, the counter set it can serve and the NVML library it opened (per-process
/// readings share it).
pub struct StartedSource {
    pub source: Box<dyn Source>,
    pub counters: Arc<CounterSet>,
    pub nvml: Option<Arc<Nvml>>,
}

impl SourcePlan {
    /// The source `flags` name: the simulated fleet when `scenario` is given, else DCGM and/or NVML.
    pub fn resolve(
        flags: &SourceFlags<'_>,
        scenario: Option<Scenario>,
        counters: &CounterSet,
        ctx: &ResolveContext<'_>,
        needs: SourceNeeds,
    ) -> Result<SourcePlan, StartError> {
        let dcgm = flags.dcgm;
        if dcgm.enable_gpu_bind_unbind_watch && dcgm.gpu_bind_unbind_poll_interval.is_zero() {
            return Err(StartError::input(
                "invalid value '0' for '--gpu-bind-unbind-poll-interval': must be greater than 0 when --enable-gpu-bind-unbind-watch is on; see --help",
            ));
        }
        let kind = match scenario {
            Some(scenario) => Kind::Simulated(Box::new(simulated(flags, scenario, counters, ctx)?)),
            None => real(flags, ctx, needs)?,
        };
        Ok(SourcePlan {
            kind,
            dcgm_log: dcgm.enable_dcgm_log.then_some(dcgm.dcgm_log_level),
            bind_watch: dcgm.enable_gpu_bind_unbind_watch,
            distributions: ctx.distributions.clone(),
        })
    }

    /// The simulated fleet, when the source is one.
    pub fn simulated(&self) -> Option<&Simulated> {
        match &self.kind {
            Kind::Simulated(s) => Some(s),
            _ => None,
        }
    }

    /// What must happen before any thread starts: libdcgm reads its log settings from the process
    /// environment (`--enable-dcgm-log`).
    pub fn prepare_process(&self) {
        let Some(level) = self.dcgm_log else {
            return;
        };
        match &self.kind {
            Kind::Dcgm(o) | Kind::Auto(o, _) if o.remote.is_none() => {
                let to = dcgm::log::pass_through(level);
                tracing::info!(dcgm_level = level.as_str(), to = %to, "DCGM's own log is passed through (--enable-dcgm-log)");
            }
            Kind::Dcgm(_) | Kind::Auto(..) => tracing::warn!(
                "--enable-dcgm-log has no effect with -r: DCGM's log is nv-hostengine's (its --log-filename and --log-level)"
            ),
            _ => tracing::warn!(
                "--enable-dcgm-log has no effect: DCGM is not used (--simulate or --source nvml)"
            ),
        }
    }

    /// Load what the source reads through (the simulated fleet, libdcgm, NVML): the part of
    /// starting that fails on a missing library, before anything is served. The host engine is
    /// reached by [`OpenedSource::start`].
    pub fn open(
        self,
        mut counters: CounterSet,
        ctx: &StartContext<'_>,
    ) -> Result<OpenedSource, StartError> {
        if !self.distributions.is_empty() && matches!(self.kind, Kind::Nvml(_)) {
            tracing::warn!(
                "--distribution is read through DCGM (or the simulated fleet) only; the NVML source exports no distribution"
            );
        }
        let state = match self.kind {
            Kind::Simulated(mut sim) => {
                sim.source
                    .sample_distributions(self.distributions.clone(), Some(ctx.self_metrics));
                if self.bind_watch {
                    tracing::info!("--enable-gpu-bind-unbind-watch has no effect on the simulated fleet (its GPUs are never rebound)");
                }
                tracing::warn!(
                    scenario = %sim.name,
                    description = %sim.description,
                    seed = sim.seed,
                    "SIMULATED METRICS: no GPU is being read; every value comes from the simulated fleet (--simulate)"
                );
                Loaded::Ready(Box::new(sim.source), None)
            }
            Kind::Dcgm(opts) => Loaded::Dcgm(Box::new(open_dcgm(*opts, &counters)?), None),
            Kind::Nvml(opts) => open_nvml(opts, &mut counters)?,
            Kind::Auto(dcgm_opts, nvml_opts) => match DcgmSource::open(*dcgm_opts, &counters) {
                Ok(s) => Loaded::Dcgm(Box::new(s), Some(nvml_opts)),
                Err(e) if e.is_bad_input() => return Err(StartError::input(e)),
                Err(e) => open_auto_nvml(nvml_opts, &mut counters, &auto_reason(&e))?,
            },
        };
        Ok(OpenedSource { state, counters })
    }
}

/// What [`SourcePlan::open`] loaded.
enum Loaded {
    /// A source that needs nothing more (simulated, NVML) and the NVML library it opened.
    Ready(Box<dyn Source>, Option<Arc<Nvml>>),
    /// libdcgm, not connected yet; with `--source auto`, NVML's options for when DCGM does not answer.
    Dcgm(Box<DcgmSource>, Option<NvmlOptions>),
}

/// The source chosen and the NVML library it opened (shared with the per-process collection).
type Chosen = (Box<dyn Source>, Option<Arc<Nvml>>);

/// A source whose library is loaded; [`OpenedSource::start`] connects it.
pub struct OpenedSource {
    state: Loaded,
    counters: CounterSet,
}

impl OpenedSource {
    /// Reach the host engine once (DCGM). A host engine that does not answer is no error: the
    /// collections try again (with `--source auto`, NVML is read instead when it loads). Rows the
    /// source cannot serve (DCP without the profiling module) leave the counters here, before any
    /// exporter reads them. `Err` only for bad input (`-d` naming absent devices).
    pub fn start(self, ctx: &StartContext<'_>) -> Result<StartedSource, StartError> {
        let OpenedSource {
            state,
            mut counters,
        } = self;
        let (source, nvml): Chosen = match state {
            Loaded::Ready(source, nvml) => (source, nvml),
            Loaded::Dcgm(mut s, auto) => {
                let full = counters.clone();
                s.connect_first(&mut counters)
                    .map_err(|e| StartError::classify(e.is_bad_input(), e))?;
                s.count_in(ctx.self_metrics);
                match auto {
                    Some(nvml_opts) if !s.connected() => {
                        counters = full;
                        start_auto_fallback(s, nvml_opts, &mut counters)?
                    }
                    Some(_) => {
                        tracing::info!("--source auto: DCGM answers; reading GPUs through DCGM");
                        let nvml = s.nvml();
                        (s, nvml)
                    }
                    None => {
                        let nvml = s.nvml();
                        (s, nvml)
                    }
                }
            }
        };
        counters.rows.shrink_to_fit();
        Ok(StartedSource {
            source,
            counters: Arc::new(counters),
            nvml,
        })
    }
}

/// `--simulate`: the scenario's fleet over the counter set.
fn simulated(
    flags: &SourceFlags<'_>,
    scenario: Scenario,
    counters: &CounterSet,
    ctx: &ResolveContext<'_>,
) -> Result<Simulated, StartError> {
    let seed = flags.simulation.seed();
    let node = crate::source::sim::node_name(ctx.host.node_name.as_deref());
    let source = SimSource::new(
        &scenario,
        seed,
        &node,
        Arc::new(counters.clone()),
        &flags.collection.selectors(),
        ctx.interval,
    )
    .map_err(StartError::input)?;
    Ok(Simulated {
        source,
        name: flags
            .simulation
            .simulate
            .clone()
            .unwrap_or_else(|| "default".into()),
        description: scenario.description,
        seed,
        processes: scenario.processes,
        pods: scenario.pods,
    })
}

/// DCGM, NVML or either (`--source`), with what the consumers need.
fn real(
    flags: &SourceFlags<'_>,
    ctx: &ResolveContext<'_>,
    needs: SourceNeeds,
) -> Result<Kind, StartError> {
    if let Some(r) = &flags.dcgm.remote_hostengine_info {
        dcgm::remote::parse(r).map_err(StartError::input)?;
        if flags.source.source == SourceKind::Nvml {
            return Err(StartError::input(
                "--remote-hostengine-info reads a DCGM host engine; it cannot be combined with --source nvml",
            ));
        }
    }
    let mut dcgm_options = Box::new(DcgmOptions::new(
        flags.dcgm,
        ctx.interval,
        flags.collection.selectors(),
        needs.incident_events,
    ));
    dcgm_options.distributions = ctx.distributions.clone();
    dcgm_options.nvml_library = flags.source.nvml_library.clone();
    let nvml_options = NvmlOptions {
        library: flags.source.nvml_library.clone(),
        devices: flags.collection.devices.clone(),
        incident_events: needs.incident_events,
    };
    Ok(match flags.source.source {
        SourceKind::Dcgm => Kind::Dcgm(dcgm_options),
        SourceKind::Nvml => Kind::Nvml(nvml_options),
        SourceKind::Auto => Kind::Auto(dcgm_options, nvml_options),
    })
}

fn open_dcgm(opts: DcgmOptions, counters: &CounterSet) -> Result<DcgmSource, StartError> {
    DcgmSource::open(opts, counters).map_err(|e| StartError::classify(e.is_bad_input(), e))
}

fn open_nvml(opts: NvmlOptions, counters: &mut CounterSet) -> Result<Loaded, StartError> {
    let s =
        NvmlSource::open(opts, counters).map_err(|e| StartError::classify(e.is_bad_input(), e))?;
    let nvml = Some(s.library());
    Ok(Loaded::Ready(Box::new(s), nvml))
}

/// `--source auto` without libdcgm: NVML, or one line naming both reasons.
fn open_auto_nvml(
    nvml_opts: NvmlOptions,
    counters: &mut CounterSet,
    dcgm_reason: &str,
) -> Result<Loaded, StartError> {
    match NvmlSource::open(nvml_opts, counters) {
        Ok(s) => {
            warn_auto_nvml(dcgm_reason);
            let nvml = Some(s.library());
            Ok(Loaded::Ready(Box::new(s), nvml))
        }
        Err(e) if e.is_bad_input() => Err(StartError::input(e)),
        Err(nvml_error) => Err(StartError::environment(format!(
            "--source auto: neither DCGM nor NVML is usable: DCGM: {dcgm_reason}; NVML: {}; install the NVIDIA driver (it brings libnvidia-ml.so.1) and, for all fields, DCGM 4.x (datacenter-gpu-manager-4-core), or run with --simulate",
            nvml_reason(&nvml_error)
        ))),
    }
}

fn warn_auto_nvml(dcgm_reason: &str) {
    tracing::warn!(dcgm = %dcgm_reason, "--source auto: DCGM is not usable here; reading GPUs through NVML (fields only DCGM has stay absent)");
}

/// `--source auto` with a libdcgm whose host engine did not answer the first attempt: NVML when it
/// loads, else the DCGM source, which keeps trying (as `--source dcgm` does).
fn start_auto_fallback(
    dcgm: Box<DcgmSource>,
    nvml_opts: NvmlOptions,
    counters: &mut CounterSet,
) -> Result<Chosen, StartError> {
    match NvmlSource::open(nvml_opts, counters) {
        Ok(s) => {
            warn_auto_nvml("libdcgm loaded but the host engine does not answer");
            let nvml = Some(s.library());
            Ok((Box::new(s), nvml))
        }
        Err(e) if e.is_bad_input() => Err(StartError::input(e)),
        Err(e) => {
            tracing::warn!(nvml = %nvml_reason(&e), "--source auto: NVML is not usable either; waiting for the DCGM host engine");
            let nvml = dcgm.nvml();
            Ok((dcgm, nvml))
        }
    }
}

/// Why DCGM was passed over by `--source auto`, in a few words (the library error without its
/// install hints, which the NVML-side message gives).
fn auto_reason(e: &dcgm::StartError) -> String {
    match e {
        dcgm::StartError::Library(l) => l.to_string(),
        e => e.to_string(),
    }
}

/// Why NVML could not be used, without its install hints.
fn nvml_reason(e: &nvml::StartError) -> String {
    match e {
        nvml::StartError::Open(o) => o.to_string(),
        e => e.to_string(),
    }
}

/// The host label: the host of -r for a remote engine (loopback and unix sockets: the local name),
/// else NODE_NAME, else the kernel's name; with -k (`kubernetes`) the node name always (dcgm-exporter
/// 4.8.3); none with `--no-hostname`. NODE_NAME is read here, once.
pub fn host_info(
    dcgm: &DcgmArgs,
    kubernetes: bool,
    no_hostname: bool,
    simulated: bool,
    env: &dyn Fn(&str) -> Option<String>,
) -> HostInfo {
    let node_name = env("NODE_NAME")
        .map(|n| n.trim().to_string())
        .filter(|n| !n.is_empty());
    let remote_host = match &dcgm.remote_hostengine_info {
        Some(r) if !simulated && !kubernetes => dcgm::remote_hostname(r),
        _ => None,
    };
    let hostname = (!no_hostname).then(|| {
        remote_host
            .or_else(|| node_name.clone())
            .unwrap_or_else(|| gethostname::gethostname().to_string_lossy().into_owned())
    });
    HostInfo {
        hostname,
        node_name,
    }
}
