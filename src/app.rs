//! Start-up and shutdown of the binary: the order of the phases, nothing else. The collection itself is
//! the engine's ([`crate::engine::plan`], the same code the library runs); around it the binary adds
//! the :9400 server, SIGHUP and the exporters. Each feature builds itself — a plan
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

use std::time::{Duration, Instant};

use crate::cli::Parsed;
use crate::engine::plan::{EnginePlan, Explicit, Outputs};
use crate::export::plan::{ExportFlags, ExportPlan};
use crate::pipeline::CollectorStatus;
use crate::server::plan::{Inherited, ServerPlan};
use crate::server::ServerState;
use crate::source::plan::SourceNeeds;
use crate::startup::StartContext;
pub use crate::startup::StartError;
use crate::telemetry::self_metrics::SelfMetrics;

/// How long the collector thread gets to finish once the server has stopped.
pub const COLLECTOR_STOP_WAIT: Duration = Duration::from_secs(3);
/// The longest shutdown, from SIGTERM/SIGINT to the process's exit.
pub const SHUTDOWN_LIMIT: Duration = Duration::from_secs(12);

/// Everything start-up needs, resolved and checked, nothing started.
pub struct Plan {
    not_implemented: Vec<String>,
    server: ServerPlan,
    engine: EnginePlan,
    exports: ExportPlan,
}

impl Outputs for ExportPlan {
    fn source_needs(&self) -> SourceNeeds {
        ExportPlan::source_needs(self)
    }
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
        let server = ServerPlan::resolve(&cli.server, inherited)?;
        let explicit = Explicit {
            collectors: collectors_explicit,
            interval: interval_explicit,
            kubernetes: kubernetes_explicit,
            distributions_from_env,
        };
        let (engine, exports) = EnginePlan::resolve(&cli, explicit, &env, |counters, ctx| {
            ExportPlan::resolve(
                &ExportFlags {
                    collection: &cli.collection,
                    otlp: &cli.otlp,
                    dump: &cli.dump,
                },
                counters,
                ctx,
            )
        })?;
        Ok(Plan {
            not_implemented,
            server,
            engine,
            exports,
        })
    }

    /// Start everything and serve until SIGTERM/SIGINT.
    pub fn start(self, started: Instant) -> Result<(), StartError> {
        for flag in &self.not_implemented {
            tracing::warn!(flag = %flag, "dcgm-exporter flag accepted for compatibility but not implemented by dcgm-otel yet; it has no effect");
        }
        let read = self.engine.counters();
        for (line, name) in &read.unsupported_exporter_fields {
            tracing::warn!(origin = %read.origin, line, field = %name, "unknown DCGM_EXP_* metric (dcgm-exporter has DCGM_EXP_XID_ERRORS_COUNT, _TOTAL, DCGM_EXP_CLOCK_EVENTS_COUNT, _TOTAL, DCGM_EXP_GPU_HEALTH_STATUS, DCGM_EXP_P2P_STATUS); row skipped");
        }
        // Before any thread: libdcgm reads its log settings from the process environment.
        self.engine.prepare_process();
        let interval = self.engine.interval();

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
            interval,
            self_metrics: &self_metrics,
        };
        let engine = self.engine.start_counters(&ctx)?;
        self_metrics.build_info();
        // SIGHUP never ends the process: from here on it reloads what is reloadable.
        runtime.spawn(signals::reload_on_sighup(signals::Reloadable {
            web_config: server.web_config.clone(),
            web: server.web.clone(),
            http_metrics: server.http_metrics.clone(),
            pprof: server.pprof(),
            counters: engine.reload_request().map(|r| (r.describe, r.flag)),
            collect_now: engine.waker(),
        }));

        // The source's library first (a missing one is one line, before anything is served), then
        // serving: /health answers while the source connects.
        let engine = engine.open_source(&ctx)?;
        let exports = self.exports.start(engine.store(), &ctx)?;
        let status = CollectorStatus::new(interval);
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

        let collecting = engine.run(exports.consumers, status, &ctx)?;
        let _ = runtime.block_on(serving);
        // A DCGM call that never returns cannot be cancelled: the process exits without the thread.
        if collecting.stop(Some(COLLECTOR_STOP_WAIT)).is_err() {
            tracing::warn!(
                wait_s = COLLECTOR_STOP_WAIT.as_secs(),
                "the collector did not stop in time (a source call that does not return?); exiting without it"
            );
        }
        if let Some(otel) = exports.otel {
            otel.shutdown();
        }
        runtime.shutdown_timeout(Duration::from_secs(1));
        Ok(())
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
