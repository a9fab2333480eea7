//! Start-up and shutdown: a parsed command line turned into a running exporter.
//!
//! Start-up is two phases so that bad input never has a side effect:
//! 1. [`Plan::resolve`] takes the sockets systemd passed (`--web-systemd-socket`), then reads and checks
//!    everything the flags name — `--config-file`, listen address,
//!    web config, scenario, counters CSV (and its watch groups), `-r`, OTLP settings and resource
//!    attributes, `-d`/`-s`/`-p` against a simulated fleet — and logs nothing. Any bad input is one line
//!    and exit code 2. Flags and variables given explicitly win over `--config-file`, which wins over the
//!    defaults.
//! 2. [`Plan::start`] binds :9400 first (a port in use fails before anything is read or pushed), then
//!    installs the SIGHUP handler (web config, counters CSV), connects the source, starts the enrichers,
//!    the exporters, the collector thread (which also follows the counters file) and the HTTP server,
//!    and waits for SIGTERM/SIGINT.
//!
//! The wiring is declarative: one `match` over the sources, a list of enrichers, a list of consumers.
//! Every failure is a [`StartError`] carrying its exit code.

use std::net::SocketAddr;
use std::path::PathBuf;
use std::sync::Arc;
use std::time::{Duration, Instant};

use arc_swap::ArcSwap;

use crate::cli::{Cli, Parsed};
use crate::config::config_file::{self, ConfigFile, MetricsSource};
use crate::config::CollectionArgs;
use crate::counters::configmap::{ConfigMapFollower, ConfigMapRef};
use crate::counters::reload::CountersReloader;
use crate::counters::watch_groups;
use crate::counters::{self, CounterSet};
use crate::enrich::containers::ContainerEnricher;
use crate::enrich::exp::ExpStage;
use crate::enrich::hpc::HpcEnricher;
use crate::enrich::kubernetes::simulated::SimulatedCluster;
use crate::enrich::kubernetes::{api::ApiConfig, KubernetesConfig, KubernetesEnricher, PodSource};
use crate::enrich::Enricher;
use crate::export::dump::DumpWriter;
use crate::export::otel::otlp::{OtelExport, OtlpPlan};
use crate::export::otel::sdk::prometheus_bridge::OtelPrometheus;
use crate::export::otel::{naming, OtelContext};
use crate::export::prometheus::Renderer;
use crate::export::SnapshotConsumer;
use crate::pipeline::{self, CollectorStatus, Control, Pipeline};
use crate::server::args::{listen_addresses, PrometheusFormat};
use crate::server::web::{HttpMetrics, WebSecurity};
use crate::server::{self, ServeOptions, ServerState};
use crate::snapshot::{HostInfo, SnapshotStore};
use crate::source::args::SourceKind;
use crate::source::dcgm::{self, DcgmOptions, DcgmSource};
use crate::source::nvml::client::Nvml;
use crate::source::nvml::processes::NvmlProcesses;
use crate::source::nvml::{self, NvmlOptions, NvmlSource};
use crate::source::processes::{ProcessOptions, ProcessSource};
use crate::source::sim::processes::SimProcesses;
use crate::source::sim::{self, Scenario, SimSource};
use crate::source::Source;
use crate::telemetry::self_metrics::SelfMetrics;

/// A start-up failure: the one line to print and the exit code (2: bad input, 1: the environment).
#[derive(Debug)]
pub struct StartError {
    pub code: u8,
    pub message: String,
}

impl StartError {
    /// Bad input: a flag, variable or file the user gave (exit code 2).
    pub fn input(error: impl std::fmt::Display) -> StartError {
        StartError {
            code: 2,
            message: one_line(&error.to_string()),
        }
    }

    /// The environment failed (library missing, host engine down, port taken): exit code 1.
    pub fn environment(error: impl std::fmt::Display) -> StartError {
        StartError {
            code: 1,
            message: one_line(&error.to_string()),
        }
    }

    /// `input` or `environment`, as the error says.
    fn classify(bad_input: bool, error: impl std::fmt::Display) -> StartError {
        if bad_input {
            StartError::input(error)
        } else {
            StartError::environment(error)
        }
    }
}

impl std::fmt::Display for StartError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(&self.message)
    }
}

/// Whitespace runs (newlines included) become one space: every start-up error is one line.
fn one_line(s: &str) -> String {
    s.split_whitespace().collect::<Vec<_>>().join(" ")
}

/// Where the readings come from.
enum SourcePlan {
    Simulated {
        source: Box<SimSource>,
        name: String,
        description: String,
        seed: u64,
    },
    Dcgm(Box<DcgmOptions>),
    /// `--source nvml`.
    Nvml(NvmlOptions),
    /// `--source auto`: DCGM when libdcgm loads and answers, else NVML.
    Auto(Box<DcgmOptions>, NvmlOptions),
}

/// Where per-process readings come from (`--collect-processes`).
enum ProcessPlan {
    Simulated(SimProcesses),
    /// Through NVML; `explicit`: asked for with the flag or variable (a missing NVML is then an error,
    /// not a warning).
    Nvml {
        library: Option<PathBuf>,
        options: ProcessOptions,
        explicit: bool,
    },
}

/// Everything start-up needs, resolved and checked, nothing started.
pub struct Plan {
    cli: Cli,
    not_implemented: Vec<String>,
    interval: Duration,
    listen: Listen,
    web_config: Option<PathBuf>,
    web_security: WebSecurity,
    counters: CounterSet,
    /// Follows the counters file (when the counters came from one) for hot reload.
    reloader: Option<CountersReloader>,
    /// `-m`: the ConfigMap the counters came from, to follow once the self-metrics exist.
    configmap: Option<FollowedConfigMap>,
    source: SourcePlan,
    host: HostInfo,
    otlp: Option<OtlpPlan>,
    processes: Option<ProcessPlan>,
    kubernetes: Option<KubernetesPlan>,
}

/// `-m`: the ConfigMap read at start (its API, name and text) and the watch groups to resolve again.
struct FollowedConfigMap {
    api: ApiConfig,
    r: ConfigMapRef,
    text: String,
    watch_groups: Vec<crate::counters::watch_groups::WatchGroupSpec>,
}

/// Where /metrics is served.
enum Listen {
    /// `--address`: the addresses to try binding, in order.
    Bind(Vec<SocketAddr>),
    /// `--web-systemd-socket`: the listening sockets systemd passed, each served.
    Inherited(Vec<std::net::TcpListener>),
}

/// `-k`: the enricher's settings and where its pod-resources answers come from.
struct KubernetesPlan {
    config: KubernetesConfig,
    /// The scenario's pods on a simulated fleet (no kubelet socket named); else the kubelet.
    simulated: Option<SimulatedCluster>,
}

impl Plan {
    /// Check every input; no log line, no socket, no thread.
    pub fn resolve(parsed: Parsed) -> Result<Plan, StartError> {
        let Parsed {
            cli,
            collectors_explicit,
            interval_explicit,
            kubernetes_explicit,
            not_implemented,
        } = parsed;
        // Passed sockets first: descriptors from 3 on must be claimed before anything opens a file.
        let inherited = if cli.server.web_systemd_socket {
            Some(
                server::systemd::listeners_from_env()
                    .map_err(|e| StartError::input(format!("--web-systemd-socket: {e}")))?,
            )
        } else {
            None
        };
        let env = |k: &str| std::env::var(k).ok();
        // --config-file: below explicit flags and variables, above the defaults.
        let config_file = match &cli.collection.config_file {
            Some(path) => Some(config_file::load(path).map_err(StartError::input)?),
            None => None,
        };
        let interval = match config_file.as_ref().and_then(|c| c.interval) {
            Some(from_file) if !interval_explicit => from_file,
            _ => cli.collection.interval(),
        };
        if cli.dcgm.enable_gpu_bind_unbind_watch && cli.dcgm.gpu_bind_unbind_poll_interval.is_zero()
        {
            return Err(StartError::input(
                "invalid value '0' for '--gpu-bind-unbind-poll-interval': must be greater than 0 when --enable-gpu-bind-unbind-watch is on; see --help",
            ));
        }
        let listen = match inherited {
            Some(listeners) => Listen::Inherited(listeners),
            None => Listen::Bind(listen_addresses(&cli.server.address).map_err(StartError::input)?),
        };
        let web_config = cli.server.web_config_path().map(PathBuf::from);
        cli.containers.socket().map_err(StartError::input)?;
        if cli.server.enable_pprof {
            if cfg!(not(feature = "pprof")) {
                return Err(StartError::input("--enable-pprof: this build of dcgm-otel has no CPU profiler (built without the cargo feature pprof)"));
            }
            if web_config.is_none() {
                return Err(StartError::input("--enable-pprof needs --web-config-file (as in dcgm-exporter): profiles are served behind its TLS and basic auth"));
            }
        }
        let web_security = match &web_config {
            Some(path) => WebSecurity::load(path).map_err(StartError::input)?,
            None => WebSecurity::plain(),
        };
        let scenario = match &cli.simulation.simulate {
            Some(name) => Some(Scenario::load(name).map_err(StartError::input)?),
            None => None,
        };
        let (mut counters, mut counters_file) = load_counters(
            &cli.collection,
            scenario.as_ref(),
            collectors_explicit,
            config_file.as_ref(),
        )?;
        // -m: the ConfigMap's counters win over every other source (as in dcgm-exporter); reading it is
        // the one request start-up checks make, so that a missing one stops the start with one line.
        let configmap_ref = match &cli.collection.configmap_data {
            Some(spec) => ConfigMapRef::parse(spec).map_err(StartError::input)?,
            None => None,
        };
        let watch_group_specs = config_file
            .as_ref()
            .map(|c| c.watch_groups.clone())
            .unwrap_or_default();
        let configmap = match configmap_ref {
            Some(r) => {
                let api = ApiConfig::discover(&env)
                    .map_err(StartError::input)?
                    .ok_or_else(|| {
                        StartError::input(format!(
                            "--configmap-data {}:{} needs the Kubernetes API: no in-cluster service account and no KUBECONFIG",
                            r.namespace, r.name
                        ))
                    })?;
                let (mut set, text) =
                    counters::configmap::load(&api, &r).map_err(StartError::input)?;
                if let Some(c) = &config_file {
                    set.watch_groups =
                        watch_groups::resolve(&c.watch_groups, &set).map_err(StartError::input)?;
                }
                counters = set;
                counters_file = None;
                Some(FollowedConfigMap {
                    api,
                    r,
                    text,
                    watch_groups: watch_group_specs.clone(),
                })
            }
            None => None,
        };
        let reloader = counters_file.map(|path| {
            CountersReloader::new(
                &path,
                config_file
                    .as_ref()
                    .map(|c| c.watch_groups.clone())
                    .unwrap_or_default(),
            )
        });
        // The host label: the host of -r for a remote engine (loopback and unix sockets: the local
        // name), else NODE_NAME, else the kernel's name; with -k the node name always (dcgm-exporter
        // 4.8.3). NODE_NAME is read here, once.
        let node_name = env("NODE_NAME")
            .map(|n| n.trim().to_string())
            .filter(|n| !n.is_empty());
        let remote_host = match (&scenario, &cli.dcgm.remote_hostengine_info) {
            (None, Some(r)) if !cli.kubernetes.kubernetes => dcgm::remote_hostname(r),
            _ => None,
        };
        let hostname = (!cli.collection.no_hostname).then(|| {
            remote_host
                .or_else(|| node_name.clone())
                .unwrap_or_else(|| gethostname::gethostname().to_string_lossy().into_owned())
        });
        let host = HostInfo {
            hostname,
            node_name,
        };
        let scenario_processes = scenario.as_ref().map(|s| s.processes.clone());
        let scenario_pods = scenario.as_ref().map(|s| s.pods.clone());
        let mut source = match scenario {
            Some(scenario) => {
                let seed = cli.simulation.seed();
                let source = SimSource::new(
                    &scenario,
                    seed,
                    Arc::new(counters.clone()),
                    &cli.collection.selectors(),
                    interval,
                )
                .map_err(StartError::input)?;
                SourcePlan::Simulated {
                    source: Box::new(source),
                    name: cli
                        .simulation
                        .simulate
                        .clone()
                        .unwrap_or_else(|| "default".into()),
                    description: scenario.description.clone(),
                    seed,
                }
            }
            None => {
                if let Some(r) = &cli.dcgm.remote_hostengine_info {
                    dcgm::remote::parse(r).map_err(StartError::input)?;
                    if cli.source.source == SourceKind::Nvml {
                        return Err(StartError::input(
                            "--remote-hostengine-info reads a DCGM host engine; it cannot be combined with --source nvml",
                        ));
                    }
                }
                let dcgm_options = Box::new(DcgmOptions::new(
                    &cli.dcgm,
                    interval,
                    cli.collection.selectors(),
                ));
                let nvml_options = NvmlOptions {
                    library: cli.source.nvml_library.clone(),
                    devices: cli.collection.devices.clone(),
                    incident_events: false,
                };
                match cli.source.source {
                    SourceKind::Dcgm => SourcePlan::Dcgm(dcgm_options),
                    SourceKind::Nvml => SourcePlan::Nvml(nvml_options),
                    SourceKind::Auto => SourcePlan::Auto(dcgm_options, nvml_options),
                }
            }
        };
        // On by default with -k on a real node; with --simulate only when asked for.
        let k8s_default = cli.kubernetes.kubernetes && cli.simulation.simulate.is_none();
        let processes = if cli.source.processes_on(k8s_default) {
            let options = ProcessOptions {
                max_per_entity: cli.source.max_processes_per_gpu,
                proc_root: cli.source.proc_root.clone(),
            };
            Some(match (&source, &scenario_processes) {
                // A scenario that lists processes serves them; without, processes come from NVML.
                (SourcePlan::Simulated { source, name, .. }, Some(list)) if !list.is_empty() => {
                    ProcessPlan::Simulated(
                        SimProcesses::new(source.fleet(), list, options, name)
                            .map_err(StartError::input)?,
                    )
                }
                _ => ProcessPlan::Nvml {
                    library: cli.source.nvml_library.clone(),
                    options,
                    explicit: cli.source.collect_processes == Some(true),
                },
            })
        } else {
            None
        };
        // A simulated scenario with pods plays a Kubernetes node by default (what `docker compose up`
        // and a first try should show); `-k=false` turns it off, `-k` is then implied.
        let simulated_cluster = scenario_pods.as_ref().is_some_and(|p| !p.is_empty())
            && cli.simulation.simulate.is_some();
        let kubernetes_on =
            cli.kubernetes.kubernetes || (simulated_cluster && !kubernetes_explicit);
        let kubernetes = if kubernetes_on {
            let config =
                KubernetesConfig::resolve(&cli.kubernetes, interval, host.node_name.clone())
                    .map_err(StartError::input)?;
            // A simulated fleet whose scenario has pods plays the cluster, unless a kubelet socket
            // other than the default is named (the tests' fake kubelet).
            let default_socket = cli.kubernetes.pod_resources_kubelet_socket
                == std::path::Path::new(crate::enrich::kubernetes::podresources::DEFAULT_SOCKET);
            let simulated = match (&source, &scenario_pods) {
                (SourcePlan::Simulated { source, seed, .. }, Some(pods))
                    if default_socket && !pods.is_empty() =>
                {
                    Some(
                        SimulatedCluster::new(pods, source.fleet(), *seed)
                            .map_err(|e| StartError::input(format!("simulated cluster: {e}")))?,
                    )
                }
                _ => None,
            };
            Some(KubernetesPlan { config, simulated })
        } else {
            None
        };
        let otlp = {
            let ctx = otel_context(&cli.collection, &counters, &host);
            if cli.server.prometheus_format == PrometheusFormat::Otel {
                // The bridge reads the same resource attributes: check them now.
                naming::base_and_naming(
                    cli.otlp.otel_attribute_style,
                    cli.otlp.otel_service_name.as_deref(),
                    &ctx,
                    &env,
                )
                .map_err(StartError::input)?;
            }
            OtlpPlan::resolve(&cli.otlp, &ctx, interval, &env)
                .map_err(|e| StartError::classify(e.is_bad_input(), e))?
        };
        // Log records are one per incident: the DCGM and NVML sources read them even without
        // DCGM_EXP_* rows.
        if otlp.as_ref().is_some_and(OtlpPlan::sends_incident_logs) {
            match &mut source {
                SourcePlan::Dcgm(options) => options.incident_events = true,
                SourcePlan::Nvml(options) => options.incident_events = true,
                SourcePlan::Auto(dcgm, nvml) => {
                    dcgm.incident_events = true;
                    nvml.incident_events = true;
                }
                SourcePlan::Simulated { .. } => {}
            }
        }
        Ok(Plan {
            cli,
            not_implemented,
            interval,
            listen,
            web_config,
            web_security,
            counters,
            reloader,
            configmap,
            source,
            host,
            otlp,
            processes,
            kubernetes,
        })
    }

    /// Start everything and serve until SIGTERM/SIGINT.
    pub fn start(self, started: Instant) -> Result<(), StartError> {
        let Plan {
            cli,
            not_implemented,
            interval,
            listen,
            web_config,
            web_security,
            mut counters,
            mut reloader,
            configmap,
            source,
            host,
            otlp,
            processes,
            kubernetes,
        } = self;
        let k = &cli.kubernetes;
        let needs_k: Vec<&str> = [
            (
                k.kubernetes_enable_pod_labels,
                "--kubernetes-enable-pod-labels",
            ),
            (k.kubernetes_virtual_gpus, "--kubernetes-virtual-gpus"),
            (k.kubernetes_enable_dra, "--kubernetes-enable-dra"),
            (k.kubernetes_enable_pod_uid, "--kubernetes-enable-pod-uid"),
        ]
        .into_iter()
        .filter_map(|(on, name)| on.then_some(name))
        .collect();
        // Kubernetes is on with -k, and by itself under --simulate with a scenario that has pods.
        if kubernetes.is_none() && !needs_k.is_empty() {
            tracing::warn!(flags = %needs_k.join(" "), "these Kubernetes flags have no effect without -k/--kubernetes");
        }
        for flag in &not_implemented {
            tracing::warn!(flag = %flag, "dcgm-exporter flag accepted for compatibility but not implemented by dcgm-otel yet; it has no effect");
        }
        for (line, name) in &counters.unsupported_exporter_fields {
            tracing::warn!(origin = %counters.origin, line, field = %name, "unknown DCGM_EXP_* metric (dcgm-exporter has DCGM_EXP_XID_ERRORS_COUNT, _TOTAL, DCGM_EXP_CLOCK_EVENTS_COUNT, _TOTAL, DCGM_EXP_GPU_HEALTH_STATUS, DCGM_EXP_P2P_STATUS); row skipped");
        }

        // Before any thread: libdcgm reads its log settings from the process environment.
        if cli.dcgm.enable_dcgm_log {
            match &source {
                SourcePlan::Dcgm(o) | SourcePlan::Auto(o, _) if o.remote.is_none() => {
                    let dcgm_level = cli.dcgm.dcgm_log_level;
                    let to = dcgm::log::pass_through(dcgm_level);
                    tracing::info!(dcgm_level = dcgm_level.as_str(), to = %to, "DCGM's own log is passed through (--enable-dcgm-log)");
                }
                SourcePlan::Dcgm(_) | SourcePlan::Auto(..) => tracing::warn!(
                    "--enable-dcgm-log has no effect with -r: DCGM's log is nv-hostengine's (its --log-filename and --log-level)"
                ),
                _ => tracing::warn!("--enable-dcgm-log has no effect: DCGM is not used (--simulate or --source nvml)"),
            }
        }

        // :9400 first: a port in use stops start-up before a source is read or anything is pushed.
        let runtime = tokio::runtime::Builder::new_multi_thread()
            .worker_threads(2)
            .enable_all()
            .thread_name("dcgm-otel-rt")
            .build()
            .map_err(|e| StartError::environment(format!("cannot start the async runtime: {e}")))?;
        let listeners = match listen {
            Listen::Bind(addresses) => {
                vec![runtime.block_on(server::bind(&addresses)).map_err(|e| {
                    StartError::environment(format!("cannot listen on {}: {e}", cli.server.address))
                })?]
            }
            Listen::Inherited(passed) => {
                let _context = runtime.enter();
                passed
                    .into_iter()
                    .map(|l| {
                        l.set_nonblocking(true)?;
                        tokio::net::TcpListener::from_std(l)
                    })
                    .collect::<std::io::Result<Vec<_>>>()
                    .map_err(|e| {
                        StartError::environment(format!(
                            "--web-systemd-socket: cannot serve on a passed socket: {e}"
                        ))
                    })?
            }
        };
        let self_metrics = SelfMetrics::new();
        if let Some(c) = configmap {
            let follower = ConfigMapFollower::start(&c.api, c.r, c.text, interval, &self_metrics)
                .map_err(StartError::environment)?;
            reloader = Some(CountersReloader::for_configmap(follower, c.watch_groups));
        }
        self_metrics
            .gauge(
                "dcgm_otel_build_info",
                "Build of the running exporter; always 1.",
                &[
                    ("version", env!("CARGO_PKG_VERSION")),
                    ("commit", env!("DCGM_OTEL_GIT_COMMIT")),
                ],
            )
            .set(1.0);
        let web = Arc::new(ArcSwap::from_pointee(web_security));
        let http_metrics = Arc::new(HttpMetrics::new(&self_metrics));
        // The collector's control channel: SIGHUP and the source may ask it for an early collection.
        let (control_tx, control_rx) = std::sync::mpsc::channel::<Control>();
        // SIGHUP never ends the process: from here on it reloads what is reloadable.
        runtime.spawn(reload_on_sighup(Reloadable {
            web_config,
            web: web.clone(),
            http_metrics: http_metrics.clone(),
            counters: reloader.as_ref().map(|r| (r.describe(), r.request_flag())),
            collect_now: pipeline::waker(&control_tx),
        }));

        // ---- source ---------------------------------------------------------------------------
        let mut nvml_library: Option<Arc<Nvml>> = None;
        let source: Box<dyn Source> = match source {
            SourcePlan::Simulated {
                source,
                name,
                description,
                seed,
            } => {
                if cli.dcgm.enable_gpu_bind_unbind_watch {
                    tracing::info!("--enable-gpu-bind-unbind-watch has no effect on the simulated fleet (its GPUs are never rebound)");
                }
                tracing::warn!(
                    scenario = %name,
                    description = %description,
                    seed,
                    "SIMULATED METRICS: no GPU is being read; every value comes from the simulated fleet (--simulate)"
                );
                source
            }
            SourcePlan::Dcgm(opts) => {
                // Rows DCGM cannot serve (DCP without the profiling module) leave the counter set
                // here, before any exporter is built.
                let mut s = DcgmSource::connect(*opts, &mut counters)
                    .map_err(|e| StartError::classify(e.is_bad_input(), e))?;
                s.count_incident_errors(&self_metrics);
                Box::new(s)
            }
            SourcePlan::Nvml(opts) => {
                let s = NvmlSource::open(opts, &mut counters)
                    .map_err(|e| StartError::classify(e.is_bad_input(), e))?;
                nvml_library = Some(s.library());
                Box::new(s)
            }
            SourcePlan::Auto(dcgm_opts, nvml_opts) => {
                match DcgmSource::connect(*dcgm_opts, &mut counters) {
                    Ok(mut s) => {
                        s.count_incident_errors(&self_metrics);
                        tracing::info!("--source auto: DCGM answers; reading GPUs through DCGM");
                        Box::new(s)
                    }
                    Err(e) if e.is_bad_input() => return Err(StartError::input(e)),
                    Err(dcgm_error) => match NvmlSource::open(nvml_opts, &mut counters) {
                        Ok(s) => {
                            tracing::warn!(dcgm = %auto_reason(&dcgm_error), "--source auto: DCGM is not usable here; reading GPUs through NVML (fields only DCGM has stay absent)");
                            nvml_library = Some(s.library());
                            Box::new(s)
                        }
                        Err(e) if e.is_bad_input() => return Err(StartError::input(e)),
                        Err(nvml_error) => {
                            return Err(StartError::environment(format!(
                                "--source auto: neither DCGM nor NVML is usable: DCGM: {}; NVML: {}; install the NVIDIA driver (it brings libnvidia-ml.so.1) and, for all fields, DCGM 4.x (datacenter-gpu-manager-4-core), or run with --simulate",
                                auto_reason(&dcgm_error),
                                nvml_reason(&nvml_error)
                            )))
                        }
                    },
                }
            }
        };
        let process_source: Option<Box<dyn ProcessSource>> = match processes {
            None => None,
            Some(ProcessPlan::Simulated(p)) => Some(Box::new(p)),
            Some(ProcessPlan::Nvml {
                library,
                options,
                explicit,
            }) => {
                let opened = match nvml_library.clone() {
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
                        Some(Box::new(NvmlProcesses::new(lib, options)))
                    }
                    Err(e) if explicit => {
                        return Err(StartError::environment(format!(
                            "--collect-processes needs NVML: {e}; install the NVIDIA driver (libnvidia-ml.so.1) or point --nvml-library at it"
                        )))
                    }
                    Err(e) => {
                        tracing::warn!(error = %e, "per-process series off: NVML is not usable (they are on by default with -k; --collect-processes=false silences this)");
                        None
                    }
                }
            }
        };
        counters.rows.shrink_to_fit();
        let counters = Arc::new(counters);
        tracing::info!(
            origin = %counters.origin,
            rows = counters.len(),
            interval_ms = interval.as_millis() as u64,
            source = source.name(),
            "configuration loaded"
        );

        // ---- enrichers --------------------------------------------------------------------------
        let mut enrichers: Vec<Box<dyn Enricher>> = Vec::new();
        // First, so the DCGM_EXP_* families follow the DCGM ones as in dcgm-exporter; it counts the
        // incidents and writes the families the counters CSV lists (none: it writes nothing).
        enrichers.push(Box::new(ExpStage::new(&cli.exp, &self_metrics)));
        if let Some(k) = kubernetes {
            let env = |k: &str| std::env::var(k).ok();
            let api = match (&k.simulated, k.config.pod_labels.is_some() || k.config.pod_uid || k.config.dra) {
                (None, true) => ApiConfig::discover(&env).unwrap_or_else(|e| {
                    tracing::warn!(error = %e, "Kubernetes API configuration unusable; no pod labels or DRA attribution");
                    None
                }),
                _ => None,
            };
            let source = match k.simulated {
                Some(c) => PodSource::Simulated(Box::new(c)),
                None => PodSource::Kubelet,
            };
            let k8s =
                KubernetesEnricher::with_source(k.config, source, api.as_ref(), &self_metrics)
                    .map_err(|e| {
                        StartError::environment(format!(
                            "cannot start the kubelet client runtime: {e}"
                        ))
                    })?
                    .with_proc_root(cli.source.proc_root.clone());
            enrichers.push(Box::new(k8s));
        }
        if let Some(dir) = cli.hpc.dir() {
            enrichers.push(Box::new(HpcEnricher::new(dir.to_path_buf(), &self_metrics)));
        }
        if let Ok(Some(socket)) = cli.containers.socket() {
            if cli.kubernetes.kubernetes {
                tracing::warn!("--container-labels is ignored with -k/--kubernetes: pods and containers come from the kubelet");
            } else {
                let containers = ContainerEnricher::new(
                    socket.to_path_buf(),
                    cli.source.proc_root.clone(),
                    &self_metrics,
                )
                .map_err(|e| {
                    StartError::environment(format!(
                        "cannot start the container-runtime thread: {e}"
                    ))
                })?;
                enrichers.push(Box::new(containers));
            }
        }

        // ---- consumers and OTLP ---------------------------------------------------------------
        let shown_self_metrics = (!cli.collection.no_self_metrics).then(|| self_metrics.clone());
        let renderer = Arc::new(Renderer::new(
            cli.collection.label_style(),
            shown_self_metrics.clone(),
        ));
        let mut consumers: Vec<Arc<dyn SnapshotConsumer>> = match cli.server.prometheus_format {
            PrometheusFormat::Dcgm => vec![renderer.clone()],
            PrometheusFormat::Otel => {
                let env = |k: &str| std::env::var(k).ok();
                let ctx = otel_context(&cli.collection, &counters, &host);
                let bridge = OtelPrometheus::from_args(
                    &cli.otlp,
                    &ctx,
                    &env,
                    renderer.body(),
                    shown_self_metrics,
                )
                .map_err(|e| StartError::classify(e.is_bad_input(), e))?;
                vec![Arc::new(bridge)]
            }
        };
        // After the renderer: the dump writes the body it has just rendered.
        if cli.dump.dump_enabled {
            let dump = DumpWriter::start(&cli.dump, renderer.body(), &self_metrics)
                .map_err(StartError::input)?;
            consumers.push(Arc::new(dump));
        }
        let store = SnapshotStore::new();
        let otel: Option<OtelExport> = match otlp {
            Some(plan) => Some(
                plan.start(store.clone(), &self_metrics)
                    .map_err(|e| StartError::classify(e.is_bad_input(), e))?,
            ),
            None => None,
        };
        // Incident log records: every snapshot's incidents, handed over on the collector thread.
        consumers.extend(otel.as_ref().and_then(OtelExport::incident_consumer));

        // ---- collector thread and HTTP server ---------------------------------------------------
        let status = CollectorStatus::new(interval);
        let pipeline = Pipeline {
            source,
            enrichers,
            consumers,
            counters,
            host: Arc::new(host),
            interval,
            store,
            status: status.clone(),
            self_metrics: self_metrics.clone(),
            processes: process_source,
            reloader,
            waker: Some(pipeline::waker(&control_tx)),
        };
        let collector = std::thread::Builder::new()
            .name("collector".into())
            .spawn(move || pipeline.run(control_rx))
            .map_err(|e| {
                StartError::environment(format!("cannot start the collector thread: {e}"))
            })?;
        let state = ServerState {
            body: renderer.body(),
            status,
        };
        let local = listeners
            .iter()
            .map(|l| l.local_addr().map(|a| a.to_string()).unwrap_or_default())
            .collect::<Vec<_>>()
            .join(" ");
        tracing::info!(address = %local, systemd_socket = cli.server.web_systemd_socket, startup_ms = started.elapsed().as_millis() as u64, "serving /metrics");
        let (limits, health_auth) = (cli.server.limits(), cli.server.web_health_auth);
        let enable_pprof = cli.server.enable_pprof;
        if enable_pprof {
            tracing::info!("CPU profiles at /debug/pprof/profile?seconds=N (--enable-pprof), behind the web config");
        }
        runtime.block_on(async move {
            let (shutdown_tx, shutdown_rx) = tokio::sync::watch::channel(false);
            // One server per socket (several only with socket activation), each with the --web-* caps.
            let servers: Vec<_> = listeners
                .into_iter()
                .map(|listener| {
                    let options = ServeOptions {
                        limits,
                        web: web.clone(),
                        metrics: http_metrics.clone(),
                        health_auth,
                        pprof: enable_pprof,
                    };
                    tokio::spawn(server::serve_with(
                        listener,
                        state.clone(),
                        options,
                        shutdown_rx.clone(),
                    ))
                })
                .collect();
            wait_for_termination().await;
            tracing::info!("shutting down");
            let _ = shutdown_tx.send(true);
            let _ = tokio::time::timeout(Duration::from_secs(5), async {
                for server in servers {
                    let _ = server.await;
                }
            })
            .await;
        });
        let _ = control_tx.send(Control::Stop);
        drop(control_tx);
        let _ = collector.join();
        if let Some(otel) = otel {
            otel.shutdown();
        }
        runtime.shutdown_timeout(Duration::from_secs(1));
        Ok(())
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

/// The counters and the file they came from (for hot reload; `None`: built in or inline). By
/// precedence: `-f` given explicitly (flag or variable); `--config-file`'s `metrics` (a file or inline
/// fields); a simulated scenario's own set; `-f`'s default path (the built-in defaults when it does not
/// exist). The config file's watch groups are then resolved against the set.
fn load_counters(
    collection: &CollectionArgs,
    scenario: Option<&Scenario>,
    collectors_explicit: bool,
    config: Option<&ConfigFile>,
) -> Result<(CounterSet, Option<PathBuf>), StartError> {
    let from_config = config.and_then(|c| c.metrics.as_ref());
    let own = scenario
        .and_then(|s| s.counters.as_deref())
        .filter(|_| !collectors_explicit && from_config.is_none());
    let (loaded, file) = match (collectors_explicit, from_config, own) {
        (false, Some(MetricsSource::File(path)), _) => {
            (counters::load_file(path), Some(path.clone()))
        }
        (false, Some(MetricsSource::Fields(set)), _) => (Ok(set.clone()), None),
        (_, _, Some(name)) => match sim::scenario::builtin_counters(name) {
            Some(text) => (
                counters::parse(text, &format!("built-in '{name}' counters")),
                None,
            ),
            None => (
                counters::load_file(std::path::Path::new(name)),
                Some(PathBuf::from(name)),
            ),
        },
        _ => {
            let path = &collection.collectors;
            let file = (collectors_explicit || path.exists()).then(|| path.clone());
            (counters::load(path, collectors_explicit), file)
        }
    };
    let mut set = loaded.map_err(StartError::input)?;
    if let Some(c) = config {
        set.watch_groups =
            watch_groups::resolve(&c.watch_groups, &set).map_err(StartError::input)?;
    }
    Ok((set, file))
}

fn otel_context<'a>(
    collection: &CollectionArgs,
    counters: &'a CounterSet,
    host: &'a HostInfo,
) -> OtelContext<'a> {
    OtelContext {
        counters,
        labels: collection.label_style(),
        hostname: host.hostname.as_deref(),
        node_name: host.node_name.as_deref(),
    }
}

/// What SIGHUP reloads.
struct Reloadable {
    web_config: Option<PathBuf>,
    web: Arc<ArcSwap<WebSecurity>>,
    http_metrics: Arc<HttpMetrics>,
    /// The counters file and the flag that asks the collector to re-read it.
    counters: Option<(String, Arc<std::sync::atomic::AtomicBool>)>,
    /// Asks the collector for a collection now (it applies the reload before it).
    collect_now: crate::source::Waker,
}

/// On every SIGHUP (logrotate, config tools, a user), reload what can be reloaded and keep serving.
async fn reload_on_sighup(what: Reloadable) {
    use tokio::signal::unix::{signal, SignalKind};
    let mut hup = match signal(SignalKind::hangup()) {
        Ok(s) => s,
        Err(e) => {
            tracing::warn!(error = %e, "cannot listen for SIGHUP; nothing will be reloaded on it");
            return;
        }
    };
    while hup.recv().await.is_some() {
        if let Some(path) = &what.web_config {
            tracing::info!(file = %path.display(), "SIGHUP: reloading the web config");
            server::web::reload(path, &what.web, &what.http_metrics);
        }
        if let Some((from, flag)) = &what.counters {
            tracing::info!(from = %from, "SIGHUP: re-reading the counters CSV before the next collection");
            flag.store(true, std::sync::atomic::Ordering::Release);
            what.collect_now.wake();
        }
        if what.web_config.is_none() && what.counters.is_none() {
            tracing::info!(
                "SIGHUP received: nothing to reload (no --web-config-file, counters not from a file); still serving"
            );
        }
    }
}

async fn wait_for_termination() {
    use tokio::signal::unix::{signal, SignalKind};
    let mut term = match signal(SignalKind::terminate()) {
        Ok(s) => s,
        Err(_) => {
            let _ = tokio::signal::ctrl_c().await;
            return;
        }
    };
    tokio::select! {
        _ = term.recv() => {}
        _ = tokio::signal::ctrl_c() => {}
    }
}
