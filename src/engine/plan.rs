//! The engine's phases, shared by the `dcgm-otel` binary ([`crate::app`]) and the library
//! ([`super::Engine`]): resolve everything a collection needs from the flags (no side effect), load the
//! counters, open the source's library, then run the collector thread — and stop it within a deadline.
//!
//! What sits around the engine differs: the binary adds the :9400 server, SIGHUP and the OTLP push
//! (consumers of the published snapshots); the library adds its own consumer ([`super::output`]) from
//! which a caller collects request bytes. The source, the enrichers, the pipeline and the snapshot store
//! are the same code on both paths.

use std::sync::atomic::AtomicBool;
use std::sync::mpsc::{self, Receiver, Sender};
use std::sync::Arc;
use std::time::Duration;

use crate::cli::Cli;
use crate::config::{config_file, distributions};
use crate::counters::plan::{ConfigFileCounters, CountersFlags, CountersPlan};
use crate::counters::reload::CountersReloader;
use crate::counters::CounterSet;
use crate::enrich::kubernetes::plan::SimulatedPods;
use crate::enrich::plan::{EnrichFlags, EnrichPlan};
use crate::export::SnapshotConsumer;
use crate::pipeline::{self, CollectorStatus, Control, Pipeline};
use crate::snapshot::{HostInfo, SnapshotStore};
use crate::source::plan::{host_info, OpenedSource, SourceFlags, SourceNeeds, SourcePlan};
use crate::source::process_plan::ProcessPlan;
use crate::source::sim::Scenario;
use crate::source::Waker;
use crate::startup::{ResolveContext, StartContext, StartError};

/// How the flags were given, beside their values (see [`crate::cli::Parsed`]).
#[derive(Debug, Clone, Copy, Default)]
pub struct Explicit {
    pub collectors: bool,
    pub interval: bool,
    pub kubernetes: bool,
    pub distributions_from_env: bool,
}

/// The collection, resolved and checked, nothing started: counters, source, per-process readings,
/// enrichers, the interval and the host.
pub struct EnginePlan {
    interval: Duration,
    host: HostInfo,
    counters: CountersPlan,
    source: SourcePlan,
    processes: Option<ProcessPlan>,
    enrich: EnrichPlan,
}

/// What resolves the outputs (the binary's exporters, the library's request builders) once the
/// counters are known, and says what they need the source to read.
pub trait Outputs {
    fn source_needs(&self) -> SourceNeeds;
}

impl EnginePlan {
    /// Check every input the collection reads: `--config-file`, interval, distributions, scenario,
    /// counters, source, per-process readings, enrichers. `outputs` resolves the outputs against the
    /// counters as read (before the source is resolved: the source reads what they need). No log line,
    /// no thread, no socket.
    pub fn resolve<X: Outputs>(
        cli: &Cli,
        explicit: Explicit,
        env: &dyn Fn(&str) -> Option<String>,
        outputs: impl FnOnce(&CounterSet, &ResolveContext<'_>) -> Result<X, StartError>,
    ) -> Result<(EnginePlan, X), StartError> {
        // --config-file: below explicit flags and variables, above the defaults.
        let config_file = match &cli.collection.config_file {
            Some(path) => Some(config_file::load(path).map_err(StartError::input)?),
            None => None,
        };
        let interval = match config_file.as_ref().and_then(|c| c.interval) {
            Some(from_file) if !explicit.interval => from_file,
            _ => cli.collection.interval(),
        };
        let distributions = distributions::resolve(
            &cli.collection.distributions,
            explicit.distributions_from_env,
            config_file
                .as_ref()
                .map_or(&[][..], |c| &c.distributions[..]),
            interval,
        )
        .map_err(StartError::input)?;
        let scenario = match &cli.simulation.simulate {
            Some(name) => Some(Scenario::load(name).map_err(StartError::input)?),
            None => None,
        };
        let host = host_info(
            &cli.dcgm,
            cli.kubernetes.kubernetes,
            cli.collection.no_hostname,
            scenario.is_some(),
            env,
        );
        let ctx = ResolveContext {
            interval,
            host: &host,
            env,
            distributions,
        };
        let counters = CountersPlan::resolve(
            &CountersFlags {
                collectors: &cli.collection.collectors,
                collectors_explicit: explicit.collectors,
                configmap_data: cli.collection.configmap_data.as_deref(),
                config_file: config_file.as_ref().map(|c| ConfigFileCounters {
                    metrics: c.metrics.as_ref(),
                    watch_groups: &c.watch_groups,
                }),
                scenario: scenario.as_ref().and_then(Scenario::own_counters),
            },
            ctx.env,
        )?;
        let outputs = outputs(counters.set(), &ctx)?;
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
            outputs.source_needs(),
        )?;
        // Processes are on by default with -k on a real node; with --simulate only when asked for.
        let kubernetes_node = cli.kubernetes.kubernetes && source.simulated().is_none();
        let processes = ProcessPlan::resolve(&cli.source, &source, kubernetes_node)?;
        // The Kubernetes enricher gets the source's answer as a value (enrich/ does not know the
        // source's plan).
        let simulated_pods = source.simulated().map(|s| SimulatedPods {
            pods: &s.pods,
            fleet: s.fleet(),
            seed: s.seed,
        });
        let enrich = EnrichPlan::resolve(
            &EnrichFlags {
                exp: &cli.exp,
                kubernetes: &cli.kubernetes,
                kubernetes_explicit: explicit.kubernetes,
                hpc: &cli.hpc,
                containers: &cli.containers,
                proc_root: &cli.source.proc_root,
            },
            simulated_pods,
            &ctx,
        )?;
        let plan = EnginePlan {
            interval,
            host,
            counters,
            source,
            processes,
            enrich,
        };
        Ok((plan, outputs))
    }

    /// The collect interval.
    pub fn interval(&self) -> Duration {
        self.interval
    }

    /// The counters as read (what the outputs were resolved against).
    pub fn counters(&self) -> &CounterSet {
        self.counters.set()
    }

    /// What must happen before any thread starts: libdcgm reads its log settings from the process
    /// environment (`--enable-dcgm-log`; the library refuses that flag).
    pub fn prepare_process(&self) {
        self.source.prepare_process();
    }

    /// Start following the counters (file, ConfigMap): the first step of starting. Nothing is read
    /// from the source yet.
    pub fn start_counters(self, ctx: &StartContext<'_>) -> Result<CountersStarted, StartError> {
        let (counters, reloader) = self.counters.start(ctx.interval, ctx.self_metrics)?;
        let (control_tx, control_rx) = mpsc::channel::<Control>();
        Ok(CountersStarted {
            interval: self.interval,
            host: self.host,
            counters,
            reloader,
            source: self.source,
            processes: self.processes,
            enrich: self.enrich,
            control_tx,
            control_rx,
        })
    }
}

/// How to ask the collector for a counters reload: what is followed and the flag the collector reads
/// before its next collection.
pub struct ReloadRequest {
    pub describe: String,
    pub flag: Arc<AtomicBool>,
}

/// The counters are loaded and followed; the source is not opened yet.
pub struct CountersStarted {
    interval: Duration,
    host: HostInfo,
    counters: CounterSet,
    reloader: Option<CountersReloader>,
    source: SourcePlan,
    processes: Option<ProcessPlan>,
    enrich: EnrichPlan,
    control_tx: Sender<Control>,
    control_rx: Receiver<Control>,
}

impl CountersStarted {
    /// What a reload request sets (`None` when the counters did not come from a file or ConfigMap).
    pub fn reload_request(&self) -> Option<ReloadRequest> {
        self.reloader.as_ref().map(|r| ReloadRequest {
            describe: r.describe(),
            flag: r.request_flag(),
        })
    }

    /// A [`Waker`] that asks the collector for a collection now.
    pub fn waker(&self) -> Waker {
        pipeline::waker(&self.control_tx)
    }

    /// Load the source's library (a missing one fails here, before anything is served).
    pub fn open_source(self, ctx: &StartContext<'_>) -> Result<SourceOpened, StartError> {
        let opened = self.source.open(self.counters, ctx)?;
        Ok(SourceOpened {
            interval: self.interval,
            host: self.host,
            reloader: self.reloader,
            opened,
            processes: self.processes,
            enrich: self.enrich,
            control_tx: self.control_tx,
            control_rx: self.control_rx,
            store: SnapshotStore::new(),
        })
    }
}

/// The source's library is loaded; [`SourceOpened::run`] connects it and starts collecting.
pub struct SourceOpened {
    interval: Duration,
    host: HostInfo,
    reloader: Option<CountersReloader>,
    opened: OpenedSource,
    processes: Option<ProcessPlan>,
    enrich: EnrichPlan,
    control_tx: Sender<Control>,
    control_rx: Receiver<Control>,
    store: Arc<SnapshotStore>,
}

impl SourceOpened {
    /// Where the collector publishes its snapshots.
    pub fn store(&self) -> &Arc<SnapshotStore> {
        &self.store
    }

    /// Connect the source, start the enrichers and the collector thread; `consumers` get every
    /// snapshot on the collector thread, in order, after publication.
    pub fn run(
        self,
        consumers: Vec<Arc<dyn SnapshotConsumer>>,
        status: Arc<CollectorStatus>,
        ctx: &StartContext<'_>,
    ) -> Result<Collecting, StartError> {
        let source = self.opened.start(ctx)?;
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
        let enrichers = self.enrich.start(ctx)?;
        let pipeline = Pipeline {
            source: source.source,
            enrichers,
            consumers,
            counters: source.counters,
            host: Arc::new(self.host),
            interval: self.interval,
            store: self.store,
            status,
            self_metrics: ctx.self_metrics.clone(),
            processes,
            reloader: self.reloader,
            waker: Some(pipeline::waker(&self.control_tx)),
        };
        let (done_tx, done_rx) = mpsc::channel::<()>();
        let control_rx = self.control_rx;
        let thread = std::thread::Builder::new()
            .name("collector".into())
            .spawn(move || {
                pipeline.run(control_rx);
                // Dropped also when the collector panics: the receiver sees the channel close.
                drop(done_tx);
            })
            .map_err(|e| {
                StartError::environment(format!("cannot start the collector thread: {e}"))
            })?;
        Ok(Collecting {
            control: self.control_tx,
            thread: Some(thread),
            done: done_rx,
        })
    }
}

/// The running collector thread.
pub struct Collecting {
    control: Sender<Control>,
    thread: Option<std::thread::JoinHandle<()>>,
    done: Receiver<()>,
}

/// The collector did not stop within its deadline: a source call that never returns (a hung libdcgm
/// call cannot be cancelled). Its thread is left to end when the call returns.
#[derive(Debug, thiserror::Error)]
#[error("the collector did not stop within {0:?}: a source call has not returned; its thread is left to end when it does")]
pub struct StopTimedOut(pub Duration);

impl Collecting {
    /// Whether the collector thread has ended (stopped, or ended by a panic).
    pub fn ended(&self) -> bool {
        match self.done.try_recv() {
            Err(mpsc::TryRecvError::Empty) => false,
            Ok(()) | Err(mpsc::TryRecvError::Disconnected) => true,
        }
    }

    /// Ask the collector to finish its collection and stop; wait at most `deadline` (`None`: as long
    /// as it takes). The source is shut down by the collector thread itself.
    pub fn stop(mut self, deadline: Option<Duration>) -> Result<(), StopTimedOut> {
        let _ = self.control.send(Control::Stop);
        let finished = match deadline {
            None => {
                let _ = self.done.recv();
                true
            }
            Some(d) => !matches!(
                self.done.recv_timeout(d),
                Err(mpsc::RecvTimeoutError::Timeout)
            ),
        };
        match (finished, self.thread.take()) {
            (true, Some(thread)) => {
                if thread.join().is_err() {
                    tracing::warn!("the collector thread ended with a panic");
                }
                Ok(())
            }
            (true, None) => Ok(()),
            // Detached: joining would wait for the call that hangs.
            (false, _) => Err(StopTimedOut(deadline.unwrap_or_default())),
        }
    }
}
