//! The engine as a library: the collection the `dcgm-otel` binary runs — source, enrichers, the
//! collector thread, the snapshots — with the OTLP requests it would push handed to the caller as bytes
//! instead. For programs that send them themselves: the OpenTelemetry Collector receiver
//! (`collector/receiver/dcgmreceiver`, through the C ABI of `capi/`).
//!
//! ```no_run
//! use std::time::Duration;
//! use dcgm_otel::engine::{Engine, EngineOptions};
//!
//! let options = EngineOptions::from_args(["--simulate", "-c", "1000"])?;
//! let engine = Engine::start(options)?;
//! let collected = engine.collect(Duration::from_secs(2))?;
//! // collected.metrics: an ExportMetricsServiceRequest; collected.logs: an ExportLogsServiceRequest
//! engine.stop(Duration::from_secs(5))?;
//! # Ok::<(), Box<dyn std::error::Error>>(())
//! ```
//!
//! - [`EngineOptions::from_args`]: the binary's flags ([`options`] says which are refused and why).
//! - [`Engine::start`]: resolves and checks everything (a bad option is an error, nothing started),
//!   loads the source's library, reaches the source once (bounded by DCGM's connect timeout; a source
//!   that does not answer is retried by the collector, as in the binary), starts collecting every
//!   collect interval.
//! - [`Engine::collect`]: waits at most its `wait` for the next collection and returns its requests
//!   ([`Collected`]) and whether the engine is ready ([`Engine::ready`]). It never calls the source: a
//!   hung DCGM call delays nothing but its own collection.
//! - [`Engine::reload`]: re-read the counters file before the next collection (the binary's SIGHUP).
//! - [`Engine::stop`]: stop collecting, within a deadline: a source call that never returns (a hung
//!   libdcgm call cannot be cancelled) leaves its thread behind rather than blocking the caller.
//!
//! The binary runs the same phases ([`plan`]): [`crate::app`] resolves its outputs (:9400, OTLP push)
//! beside the engine's plan and hands its consumers to the same collector thread; its OTLP push and
//! [`Engine::collect`] build requests with the same [`crate::export::otel::otlp::OtlpFormat`] and
//! request builder. The engine installs no signal handler and sets no environment variable.

pub mod options;
pub mod output;
pub mod plan;

use std::sync::{Arc, Mutex};
use std::time::{Duration, SystemTime};

pub use options::{EngineOptions, OptionsError};
pub use output::Collected;

use crate::export::otel::otlp::{self, OtlpFormat};
use crate::export::otel::OtelContext;
use crate::lock::LockExt;
use crate::pipeline::CollectorStatus;
use crate::source::plan::SourceNeeds;
use crate::source::Waker;
use crate::startup::{StartContext, StartError};
use crate::telemetry::self_metrics::SelfMetrics;
use plan::{Collecting, EnginePlan, Explicit, Outputs, ReloadRequest};

/// Why the engine could not do what it was asked.
#[derive(Debug, thiserror::Error)]
pub enum EngineError {
    /// An option, or a file or variable it names, is wrong: fix the configuration.
    #[error("{0}")]
    Input(String),
    /// The environment failed (a library missing, a thread that could not start): may pass.
    #[error("{0}")]
    Environment(String),
    /// The collector thread has ended (a bug: it panicked); the engine must be stopped.
    #[error("the engine's collector thread has ended; stop and start the engine again")]
    CollectorEnded,
    /// [`Engine::reload`] without counters from a file.
    #[error("nothing to reload: the counters did not come from a file or ConfigMap")]
    NothingToReload,
    /// [`Engine::stop`] gave up waiting; see [`plan::StopTimedOut`].
    #[error(transparent)]
    StopTimedOut(#[from] plan::StopTimedOut),
}

impl EngineError {
    /// Bad configuration (as opposed to a failing environment).
    pub fn is_input(&self) -> bool {
        matches!(self, EngineError::Input(_))
    }
}

impl From<StartError> for EngineError {
    fn from(e: StartError) -> EngineError {
        if e.code == 2 {
            EngineError::Input(e.message)
        } else {
            EngineError::Environment(e.message)
        }
    }
}

impl From<OptionsError> for EngineError {
    fn from(e: OptionsError) -> EngineError {
        EngineError::Input(e.0)
    }
}

/// The request format, resolved beside the engine's plan.
struct LibraryOutputs {
    format: OtlpFormat,
    temporality: opentelemetry_sdk::metrics::Temporality,
    logs: bool,
}

impl Outputs for LibraryOutputs {
    fn source_needs(&self) -> SourceNeeds {
        SourceNeeds {
            incident_events: self.logs,
        }
    }
}

/// A running engine. Every method takes `&self` and may be called from any thread; [`Engine::collect`]
/// calls are served one at a time.
pub struct Engine {
    collecting: Mutex<Option<Collecting>>,
    status: Arc<CollectorStatus>,
    outbox: Arc<output::Outbox>,
    collector: Mutex<output::Collector>,
    reload: Option<ReloadRequest>,
    waker: Waker,
    #[cfg(debug_assertions)]
    test_panic: test_hooks::PanicTrigger,
}

impl Engine {
    /// Resolve `options`, load the source, start collecting.
    pub fn start(options: EngineOptions) -> Result<Engine, EngineError> {
        let parsed = options.parsed;
        crate::telemetry::logging::init(&parsed.cli.logging);
        let env = |k: &str| std::env::var(k).ok();
        let explicit = Explicit {
            collectors: parsed.collectors_explicit,
            interval: parsed.interval_explicit,
            kubernetes: parsed.kubernetes_explicit,
            distributions_from_env: false,
        };
        let cli = &parsed.cli;
        let (plan, outputs) = EnginePlan::resolve(cli, explicit, &env, |counters, ctx| {
            let otel = OtelContext {
                counters,
                labels: cli.collection.label_style(),
                hostname: ctx.host.hostname.as_deref(),
                node_name: ctx.host.node_name.as_deref(),
            };
            let input = |e: otlp::OtelError| StartError::input(e);
            Ok(LibraryOutputs {
                format: OtlpFormat::resolve(&cli.otlp, &otel, ctx.env).map_err(input)?,
                temporality: otlp::temporality(&cli.otlp).map_err(input)?,
                logs: cli.otlp.otlp_logs,
            })
        })?;
        Self::run(plan, outputs)
    }

    fn run(plan: EnginePlan, outputs: LibraryOutputs) -> Result<Engine, EngineError> {
        let interval = plan.interval();
        let self_metrics = SelfMetrics::new();
        let ctx = StartContext {
            interval,
            self_metrics: &self_metrics,
        };
        let started = plan.start_counters(&ctx)?;
        let reload = started.reload_request();
        let waker = started.waker();
        let opened = started.open_source(&ctx)?;
        let builder = outputs
            .format
            .metrics_builder(outputs.temporality, SystemTime::now());
        let collector = output::Collector::new(builder, opened.store().clone());
        let outbox = output::Outbox::new(outputs.logs.then(|| outputs.format.records_builder()));
        let status = CollectorStatus::new(interval);
        let consumers: Vec<Arc<dyn crate::export::SnapshotConsumer>> = vec![outbox.clone()];
        let collecting = opened.run(consumers, status.clone(), &ctx)?;
        Ok(Engine {
            collecting: Mutex::new(Some(collecting)),
            status,
            outbox,
            collector: Mutex::new(collector),
            reload,
            waker,
            #[cfg(debug_assertions)]
            test_panic: test_hooks::PanicTrigger::from_env(),
        })
    }

    /// Wait at most `wait` for the next collection; its requests, or empty ones when none came.
    pub fn collect(&self, wait: Duration) -> Result<Collected, EngineError> {
        #[cfg(debug_assertions)]
        self.test_panic.collect();
        if self
            .collecting
            .lock_unpoisoned()
            .as_ref()
            .is_none_or(Collecting::ended)
        {
            return Err(EngineError::CollectorEnded);
        }
        let mut collector = self.collector.lock_unpoisoned();
        Ok(self.outbox.collect(&mut collector, wait))
    }

    /// `Ok(())` while the last collection succeeded and is fresh, else why not (what the binary's
    /// `/ready` answers).
    pub fn ready(&self) -> Result<(), String> {
        self.status.ready()
    }

    /// Re-read the counters file (or ConfigMap) before the next collection, which comes at once.
    pub fn reload(&self) -> Result<(), EngineError> {
        let request = self.reload.as_ref().ok_or(EngineError::NothingToReload)?;
        tracing::info!(from = %request.describe, "reload asked: re-reading the counters before the next collection");
        request
            .flag
            .store(true, std::sync::atomic::Ordering::Release);
        self.waker.wake();
        Ok(())
    }

    /// Stop collecting; wait at most `deadline` for the collector (and the source's shutdown) to end.
    /// A second call does nothing.
    pub fn stop(&self, deadline: Duration) -> Result<(), EngineError> {
        let collecting = self.collecting.lock_unpoisoned().take();
        match collecting {
            Some(c) => c.stop(Some(deadline)).map_err(EngineError::from),
            None => Ok(()),
        }
    }
}

impl Drop for Engine {
    fn drop(&mut self) {
        let _ = self.stop(Duration::from_secs(5));
    }
}

/// A deliberate panic for the tests of the C ABI and the collector receiver (a panic must become an
/// error, never a crash). Compiled into debug builds only: a release build, the one shipped, has no
/// trigger, whatever its configuration or environment.
#[cfg(debug_assertions)]
mod test_hooks {
    use std::sync::atomic::{AtomicU64, Ordering};

    /// `DCGM_OTEL_TEST_PANIC=collect@N`: the N-th [`super::Engine::collect`] call panics.
    pub struct PanicTrigger {
        at: Option<u64>,
        calls: AtomicU64,
    }

    impl PanicTrigger {
        pub fn from_env() -> PanicTrigger {
            let at = std::env::var("DCGM_OTEL_TEST_PANIC")
                .ok()
                .and_then(|v| v.strip_prefix("collect@")?.parse().ok());
            PanicTrigger {
                at,
                calls: AtomicU64::new(0),
            }
        }

        #[allow(clippy::panic)]
        pub fn collect(&self) {
            let n = self.calls.fetch_add(1, Ordering::AcqRel) + 1;
            if self.at == Some(n) {
                panic!("deliberate panic in collect call {n} (DCGM_OTEL_TEST_PANIC)");
            }
        }
    }
}
