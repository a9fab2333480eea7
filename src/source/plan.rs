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

    /// Open the library or connect the host engine. Rows the source cannot serve (DCP without the
    /// profiling module) leave `counters` here, before any exporter is built.
    pub fn start(
        self,
        mut counters: CounterSet,
        ctx: &StartContext<'_>,
    ) -> Result<StartedSource, StartError> {
        let mut nvml = None;
        if !self.distributions.is_empty() && matches!(self.kind, Kind::Nvml(_)) {
            tracing::warn!(
                "--distribution is read through DCGM (or the simulated fleet) only; the NVML source exports no distribution"
            );
        }
        let source: Box<dyn Source> = match self.kind {
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
                Box::new(sim.source)
            }
            Kind::Dcgm(opts) => Box::new(connect_dcgm(*opts, &mut counters, ctx)?),
            Kind::Nvml(opts) => {
                let s = NvmlSource::open(opts, &mut counters)
                    .map_err(|e| StartError::classify(e.is_bad_input(), e))?;
                nvml = Some(s.library());
                Box::new(s)
            }
            Kind::Auto(dcgm_opts, nvml_opts) => {
                let opened = start_auto(*dcgm_opts, nvml_opts, &mut counters, ctx)?;
                nvml = opened.nvml;
                opened.source
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

fn connect_dcgm(
    opts: DcgmOptions,
    counters: &mut CounterSet,
    ctx: &StartContext<'_>,
) -> Result<DcgmSource, StartError> {
    let mut s = DcgmSource::connect(opts, counters)
        .map_err(|e| StartError::classify(e.is_bad_input(), e))?;
    s.count_incident_errors(ctx.self_metrics);
    s.count_distribution_drops(ctx.self_metrics);
    Ok(s)
}

/// A source opened by `--source auto` and the NVML library when it opened one.
struct Opened {
    source: Box<dyn Source>,
    nvml: Option<Arc<Nvml>>,
}

/// `--source auto`: DCGM when it answers, else NVML (and its library); both failing is one line
/// naming both reasons.
fn start_auto(
    dcgm_opts: DcgmOptions,
    nvml_opts: NvmlOptions,
    counters: &mut CounterSet,
    ctx: &StartContext<'_>,
) -> Result<Opened, StartError> {
    let sampled = !dcgm_opts.distributions.is_empty();
    let dcgm_error = match DcgmSource::connect(dcgm_opts, counters) {
        Ok(mut s) => {
            s.count_incident_errors(ctx.self_metrics);
            s.count_distribution_drops(ctx.self_metrics);
            tracing::info!("--source auto: DCGM answers; reading GPUs through DCGM");
            return Ok(Opened {
                source: Box::new(s),
                nvml: None,
            });
        }
        Err(e) if e.is_bad_input() => return Err(StartError::input(e)),
        Err(e) => e,
    };
    match NvmlSource::open(nvml_opts, counters) {
        Ok(s) => {
            tracing::warn!(dcgm = %auto_reason(&dcgm_error), "--source auto: DCGM is not usable here; reading GPUs through NVML (fields only DCGM has stay absent)");
            if sampled {
                tracing::warn!("--distribution is read through DCGM only; the NVML source exports no distribution");
            }
            Ok(Opened {
                nvml: Some(s.library()),
                source: Box::new(s),
            })
        }
        Err(e) if e.is_bad_input() => Err(StartError::input(e)),
        Err(nvml_error) => Err(StartError::environment(format!(
            "--source auto: neither DCGM nor NVML is usable: DCGM: {}; NVML: {}; install the NVIDIA driver (it brings libnvidia-ml.so.1) and, for all fields, DCGM 4.x (datacenter-gpu-manager-4-core), or run with --simulate",
            auto_reason(&dcgm_error),
            nvml_reason(&nvml_error)
        ))),
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
