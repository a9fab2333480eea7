//! Signals once start-up is done: SIGHUP reloads what is reloadable (the web config, the counters
//! file) and never ends the process; SIGTERM/SIGINT end it.

use std::path::PathBuf;
use std::sync::Arc;

use arc_swap::ArcSwap;

use crate::server;
use crate::server::web::{HttpMetrics, WebSecurity};

/// What SIGHUP reloads.
pub struct Reloadable {
    pub web_config: Option<PathBuf>,
    pub web: Arc<ArcSwap<WebSecurity>>,
    pub http_metrics: Arc<HttpMetrics>,
    /// `--enable-pprof`: whether a reload can switch profiles off or on.
    pub pprof: server::Pprof,
    /// The counters file and the flag that asks the collector to re-read it.
    pub counters: Option<(String, Arc<std::sync::atomic::AtomicBool>)>,
    /// Asks the collector for a collection now (it applies the reload before it).
    pub collect_now: crate::source::Waker,
}

/// On every SIGHUP (logrotate, config tools, a user), reload what can be reloaded and keep serving.
pub async fn reload_on_sighup(what: Reloadable) {
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
            server::web::reload(path, &what.web, &what.http_metrics, what.pprof);
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

/// Until SIGTERM or SIGINT.
pub async fn wait_for_termination() {
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
