//! Start-up and shutdown: the order of the phases, nothing else. Each feature builds itself — a plan
//! resolved from its own flags beside its code ([`crate::counters::plan`], [`crate::source::plan`],
//! [`crate::source::process_plan`], [`crate::enrich::plan`], [`crate::export::plan`],
//! [`crate::server::plan`]) and started from that plan.
//!
//! Start-up is two phases so that bad input never has a side effect:
//! 1. [`Plan::resolve`] takes the sockets systemd passed (`--web-systemd-socket`), then reads and checks
//!    everything the flags name — `--config-file`, listen address, web config, scenario, counters CSV
//!    (and its watch groups), OTLP settings and resource attributes, the source, `-d`/`-s`/`-p` against
//!    a simulated fleet, Kubernetes — and logs nothing. Any bad input is one line and exit code 2. Flags
//!    and variables given explicitly win over `--config-file`, which wins over the defaults. What the
//!    exporters need from the source is declared before the source is resolved.
//! 2. [`Plan::start`] binds :9400 first (a port in use fails before anything is read or pushed), then
//!    installs the SIGHUP handler, starts the exporters and serves HTTP — `/health` 200 and `/ready`
//!    503 from here on, so a source that takes its time (a host engine not up yet) is never a
//!    liveness failure — then connects the source (a host engine that does not answer is tried again
//!    by the collector, never a reason to exit), starts the enrichers and the collector thread (which
//!    also follows the counters file), and waits for SIGTERM/SIGINT.
//!
//! Shutdown is bounded: the server gives open connections [`crate::server::SHUTDOWN_GRACE`], the
//! collector [`COLLECTOR_STOP_WAIT`] to finish its cycle (a DCGM call that never returns cannot be
//! cancelled: the process then exits without it), OTLP up to 5 s to deliver; and whatever happens, the
//! process exits [`SHUTDOWN_LIMIT`] after the signal (under systemd's `TimeoutStopSec=15s` and
//! Kubernetes' 30 s grace period).

mod signals;

use std::sync::Arc;
use std::time::{Duration, Instant};

use crate::cli::Parsed;
use crate::config::{config_file, distributions};
use crate::counters::plan::{CountersFlags, CountersPlan};
use crate::enrich::plan::{EnrichFlags, EnrichPlan};
use crate::export::plan::{ExportFlags, ExportPlan};
use crate::pipeline::{self, CollectorStatus, Control, Pipeline};
use crate::server::plan::{Inherited, ServerPlan};
use crate::server::ServerState;
use crate::snapshot::{HostInfo, SnapshotStore};
use crate::source::plan::{host_info, SourceFlags, SourcePlan};
use crate::source::process_plan::ProcessPlan;
use crate::source::sim::Scenario;
pub use crate::startup::StartError;
use crate::startup::{ResolveContext, StartContext};
use crate::telemetry::self_metrics::SelfMetrics;

/// How long the collector thread gets to finish once the server has stopped.
pub const COLLECTOR_STOP_WAIT: Duration = Duration::from_secs(3);
/// The longest shutdown, from SIGTERM/SIGINT to the process's exit.
pub const SHUTDOWN_LIMIT: Duration = Duration::from_secs(12);

/// Everything start-up needs, resolved and checked, nothing started.
pub struct Plan {
    not_implemented: Vec<String>,
    interval: Duration,
    host: HostInfo,
    server: ServerPlan,
    counters: CountersPlan,
    source: SourcePlan,
    processes: Option<ProcessPlan>,
    enrich: EnrichPlan,
    exports: ExportPlan,
}

impl Plan {
    /// Check every input; no log line, no socket, no thread.
    pub fn resolve(parsed: Parsed) -> Result<Plan, StartError> {
        let Parsed {
            cli,
            collectors_explicit,
            interval_explicit,
            kubernetes_explicit,
            distributions_from_env,
            not_implemented,
        } = parsed;
        // Passed sockets first: descriptors from 3 on must be claimed before anything opens a file.
        let inherited = Inherited::claim(&cli.server)?;
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
        let distributions = distributions::resolve(
            &cli.collection.distributions,
            distributions_from_env,
            config_file
                .as_ref()
                .map_or(&[][..], |c| &c.distributions[..]),
            interval,
        )
        .map_err(StartError::input)?;
        let server = ServerPlan::resolve(&cli.server, inherited)?;
        let scenario = match &cli.simulation.simulate {
            Some(name) => Some(Scenario::load(name).map_err(StartError::input)?),
            None => None,
        };
        let host = host_info(
            &cli.dcgm,
            cli.kubernetes.kubernetes,
            cli.collection.no_hostname,
            scenario.is_some(),
            &env,
        );
        let ctx = ResolveContext {
            interval,
            host: &host,
            env: &env,
            distributions,
        };
        let counters = CountersPlan::resolve(
            &CountersFlags {
                collection: &cli.collection,
                collectors_explicit,
                config_file: config_file.as_ref(),
                scenario: scenario.as_ref().and_then(Scenario::own_counters),
            },
            &ctx,
        )?;
        let exports = ExportPlan::resolve(
            &ExportFlags {
                collection: &cli.collection,
                otlp: &cli.otlp,
                dump: &cli.dump,
            },
            counters.set(),
            &ctx,
        )?;
        let source_flags = SourceFlags {
            source: &cli.source,
            dcgm: &cli.dcgm,
            simulation: &cli.simulation,
            collection: &cli.collection,
        };
        let source = SourcePlan::resolve(
            &source_flags,
            scenario,
            counters.set(),
            &ctx,
            exports.source_needs(),
        )?;
        // Processes are on by default with -k on a real node; with --simulate only when asked for.
        let kubernetes_node = cli.kubernetes.kubernetes && source.simulated().is_none();
        let processes = ProcessPlan::resolve(&cli.source, &source, kubernetes_node)?;
        let enrich = EnrichPlan::resolve(
            &EnrichFlags {
                exp: &cli.exp,
                kubernetes: &cli.kubernetes,
                kubernetes_explicit,
                hpc: &cli.hpc,
                containers: &cli.containers,
                proc_root: &cli.source.proc_root,
            },
            &source,
            &ctx,
        )?;
        Ok(Plan {
            not_implemented,
            interval,
            host,
            server,
            counters,
            source,
            processes,
            enrich,
            exports,
        })
    }

    /// Start everything and serve until SIGTERM/SIGINT.
    pub fn start(self, started: Instant) -> Result<(), StartError> {
        for flag in &self.not_implemented {
            tracing::warn!(flag = %flag, "dcgm-exporter flag accepted for compatibility but not implemented by dcgm-otel yet; it has no effect");
        }
        let read = self.counters.set();
        for (line, name) in &read.unsupported_exporter_fields {
            tracing::warn!(origin = %read.origin, line, field = %name, "unknown DCGM_EXP_* metric (dcgm-exporter has DCGM_EXP_XID_ERRORS_COUNT, _TOTAL, DCGM_EXP_CLOCK_EVENTS_COUNT, _TOTAL, DCGM_EXP_GPU_HEALTH_STATUS, DCGM_EXP_P2P_STATUS); row skipped");
        }
        // Before any thread: libdcgm reads its log settings from the process environment.
        self.source.prepare_process();

        // :9400 first: a port in use stops start-up before a source is read or anything is pushed.
        let runtime = tokio::runtime::Builder::new_multi_thread()
            .worker_threads(2)
            .enable_all()
            .thread_name("dcgm-otel-rt")
            .build()
            .map_err(|e| StartError::environment(format!("cannot start the async runtime: {e}")))?;
        let self_metrics = SelfMetrics::new();
        let server = self.server.bind(&runtime, &self_metrics)?;
        let ctx = StartContext {
            interval: self.interval,
            self_metrics: &self_metrics,
        };
        let (counters, reloader) = self.counters.start(&ctx)?;
        self_metrics.build_info();
        // The collector's control channel: SIGHUP and the source may ask it for an early collection.
        let (control_tx, control_rx) = std::sync::mpsc::channel::<Control>();
        // SIGHUP never ends the process: from here on it reloads what is reloadable.
        runtime.spawn(signals::reload_on_sighup(signals::Reloadable {
            web_config: server.web_config.clone(),
            web: server.web.clone(),
            http_metrics: server.http_metrics.clone(),
            pprof: server.pprof(),
            counters: reloader.as_ref().map(|r| (r.describe(), r.request_flag())),
            collect_now: pipeline::waker(&control_tx),
        }));

        // The source's library first (a missing one is one line, before anything is served), then
        // serving: /health answers while the source connects.
        let opened = self.source.open(counters, &ctx)?;
        let store = SnapshotStore::new();
        let exports = self.exports.start(&store, &ctx)?;
        let status = CollectorStatus::new(self.interval);
        let state = ServerState {
            body: exports.body.clone(),
            status: status.clone(),
        };
        // SIGTERM/SIGINT end serving; from then on the process has SHUTDOWN_LIMIT to exit.
        let terminated = async {
            signals::wait_for_termination().await;
            exit_after(SHUTDOWN_LIMIT);
        };
        let serving = runtime.spawn(server.serve(state, started, terminated));

        let source = opened.start(&ctx)?;
        let processes = match self.processes {
            Some(p) => p.start(source.nvml.clone())?,
            None => None,
        };
        tracing::info!(
            origin = %source.counters.origin,
            rows = source.counters.len(),
            interval_ms = self.interval.as_millis() as u64,
            source = source.source.name(),
            "configuration loaded"
        );
        let enrichers = self.enrich.start(&ctx)?;
        let pipeline = Pipeline {
            source: source.source,
            enrichers,
            consumers: exports.consumers,
            counters: source.counters,
            host: Arc::new(self.host),
            interval: self.interval,
            store,
            status: status.clone(),
            self_metrics: self_metrics.clone(),
            processes,
            reloader,
            waker: Some(pipeline::waker(&control_tx)),
        };
        let (collector_done, collector_stopped) = std::sync::mpsc::sync_channel::<()>(1);
        let collector = std::thread::Builder::new()
            .name("collector".into())
            .spawn(move || {
                pipeline.run(control_rx);
                let _ = collector_done.send(());
            })
            .map_err(|e| {
                StartError::environment(format!("cannot start the collector thread: {e}"))
            })?;
        let _ = runtime.block_on(serving);
        let _ = control_tx.send(Control::Stop);
        drop(control_tx);
        stop_collector(collector, &collector_stopped);
        if let Some(otel) = exports.otel {
            otel.shutdown();
        }
        runtime.shutdown_timeout(Duration::from_secs(1));
        Ok(())
    }
}

/// Wait up to [`COLLECTOR_STOP_WAIT`] for the collector thread (told to stop) to end. A thread stuck in a
/// source call that never returns is left behind: the process exits without it.
fn stop_collector(collector: std::thread::JoinHandle<()>, stopped: &std::sync::mpsc::Receiver<()>) {
    match stopped.recv_timeout(COLLECTOR_STOP_WAIT) {
        Err(std::sync::mpsc::RecvTimeoutError::Timeout) => tracing::warn!(
            wait_s = COLLECTOR_STOP_WAIT.as_secs(),
            "the collector did not stop in time (a source call that does not return?); exiting without it"
        ),
        // Done, or the thread ended without saying so (a panic): it is gone either way.
        _ => {
            let _ = collector.join();
        }
    }
}

/// From now on the process has `limit` to exit: past it, one error line and exit code 1, whatever is
/// still running. Should the exit itself hang (a library's exit handler waiting on a call that never
/// returns), the process aborts 2 s later.
fn exit_after(limit: Duration) {
    let spawned = std::thread::Builder::new()
        .name("shutdown-limit".into())
        .spawn(move || {
            std::thread::sleep(limit);
            tracing::error!(
                limit_s = limit.as_secs(),
                "shutdown did not finish in time; exiting now"
            );
            let _ = std::thread::Builder::new()
                .name("shutdown-abort".into())
                .spawn(|| {
                    std::thread::sleep(Duration::from_secs(2));
                    std::process::abort();
                });
            std::process::exit(1);
        });
    if let Err(e) = spawned {
        tracing::warn!(error = %e, "cannot start the shutdown time limit; shutdown is not bounded");
    }
}
