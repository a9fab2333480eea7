//! The live security settings of :9400 ([`WebSecurity`]: TLS acceptor, basic auth, extra headers) built
//! from `--web-config-file`, the server's own metrics ([`HttpMetrics`]), and the SIGHUP reload: the file
//! is read again; a good file replaces the settings (new TLS certificates apply to new connections, users
//! and headers to new requests), a bad one is logged and counted and the old settings stay.

use std::path::{Path, PathBuf};
use std::sync::Arc;

use arc_swap::ArcSwap;
use hyper::header::{HeaderName, HeaderValue};
use hyper::StatusCode;
use tokio_rustls::TlsAcceptor;

use super::auth::{BasicAuth, Outcome};
use super::tls;
use crate::config::web_config::{self, WebConfig, WebConfigError};
use crate::telemetry::self_metrics::{Metric, SelfMetrics};

/// What one loaded web config enforces.
pub struct WebSecurity {
    pub tls: Option<TlsAcceptor>,
    pub auth: Option<BasicAuth>,
    pub headers: Vec<(HeaderName, HeaderValue)>,
}

impl WebSecurity {
    /// No web config: plain HTTP, no auth, no extra headers.
    pub fn plain() -> WebSecurity {
        WebSecurity {
            tls: None,
            auth: None,
            headers: Vec::new(),
        }
    }

    /// Build from a validated file (reads the certificate and key files).
    pub fn from_config(cfg: &WebConfig) -> Result<WebSecurity, WebConfigError> {
        let fail = |key: Option<String>, message: String| WebConfigError {
            path: cfg.path.display().to_string(),
            key,
            line: None,
            message,
        };
        let tls = match &cfg.tls {
            Some(t) => Some(tls::acceptor(t, &cfg.path)?),
            None => None,
        };
        let auth =
            BasicAuth::new(&cfg.users).map_err(|m| fail(Some("basic_auth_users".into()), m))?;
        let mut headers = Vec::with_capacity(cfg.headers.len());
        for (name, value) in &cfg.headers {
            let key = Some(format!("http_server_config.headers.{name}"));
            let n = HeaderName::from_bytes(name.as_bytes())
                .map_err(|e| fail(key.clone(), e.to_string()))?;
            let v = HeaderValue::from_str(value).map_err(|e| fail(key, e.to_string()))?;
            headers.push((n, v));
        }
        Ok(WebSecurity { tls, auth, headers })
    }

    /// Read, validate and build; log the file's warnings.
    pub fn load(path: &Path) -> Result<WebSecurity, WebConfigError> {
        let cfg = web_config::load(path)?;
        let sec = WebSecurity::from_config(&cfg)?;
        for w in &cfg.warnings {
            tracing::warn!(file = %path.display(), "web config: {w}");
        }
        if cfg.tls.is_some() && cfg.http2 {
            tracing::debug!(file = %path.display(), "web config: http2 is on but only HTTP/1.1 is served");
        }
        tracing::info!(
            file = %path.display(),
            tls = sec.tls.is_some(),
            basic_auth_users = cfg.users.len(),
            headers = sec.headers.len(),
            "web config loaded"
        );
        Ok(sec)
    }
}

/// Status codes counted by their own series; anything else counts as `code="other"`.
const CODES: [u16; 8] = [200, 400, 401, 404, 405, 413, 500, 503];

/// The HTTP server's self-metrics (registered once; updated with atomics, no allocation).
pub struct HttpMetrics {
    requests: Vec<Arc<Metric>>,
    requests_other: Arc<Metric>,
    pub rejected_max_connections: Arc<Metric>,
    pub rejected_max_requests: Arc<Metric>,
    pub tls_handshake_failures: Arc<Metric>,
    auth_missing: Arc<Metric>,
    auth_malformed: Arc<Metric>,
    auth_wrong: Arc<Metric>,
    pub open_connections: Arc<Metric>,
    pub reload_success: Arc<Metric>,
    pub reload_failure: Arc<Metric>,
}

impl HttpMetrics {
    pub fn new(reg: &SelfMetrics) -> HttpMetrics {
        const REQ: &str = "dcgm_otel_http_requests_total";
        const REQ_HELP: &str = "HTTP requests answered on the metrics port, by status code.";
        const REJ: &str = "dcgm_otel_http_rejected_connections_total";
        const REJ_HELP: &str =
            "Connections or requests turned away: over --web-max-connections, over \
                                --web-max-requests, or a failed TLS handshake.";
        const AUTH: &str = "dcgm_otel_http_auth_failures_total";
        const AUTH_HELP: &str =
            "Requests refused by basic auth (401), by reason: missing, malformed, wrong.";
        const RELOAD: &str = "dcgm_otel_web_config_reloads_total";
        const RELOAD_HELP: &str = "Reloads of --web-config-file on SIGHUP, by result.";
        HttpMetrics {
            requests: CODES
                .iter()
                .map(|c| reg.counter(REQ, REQ_HELP, &[("code", &c.to_string())]))
                .collect(),
            requests_other: reg.counter(REQ, REQ_HELP, &[("code", "other")]),
            rejected_max_connections: reg.counter(REJ, REJ_HELP, &[("reason", "max_connections")]),
            rejected_max_requests: reg.counter(REJ, REJ_HELP, &[("reason", "max_requests")]),
            tls_handshake_failures: reg.counter(REJ, REJ_HELP, &[("reason", "tls_handshake")]),
            auth_missing: reg.counter(AUTH, AUTH_HELP, &[("reason", "missing")]),
            auth_malformed: reg.counter(AUTH, AUTH_HELP, &[("reason", "malformed")]),
            auth_wrong: reg.counter(AUTH, AUTH_HELP, &[("reason", "wrong")]),
            open_connections: reg.gauge(
                "dcgm_otel_http_open_connections",
                "Connections open on the metrics port.",
                &[],
            ),
            reload_success: reg.counter(RELOAD, RELOAD_HELP, &[("result", "success")]),
            reload_failure: reg.counter(RELOAD, RELOAD_HELP, &[("result", "failure")]),
        }
    }

    pub fn count_response(&self, status: StatusCode) {
        let code = status.as_u16();
        match CODES.iter().position(|c| *c == code) {
            Some(i) => self.requests[i].inc(),
            None => self.requests_other.inc(),
        }
    }

    pub fn count_auth_failure(&self, outcome: Outcome) {
        match outcome {
            Outcome::Allowed => {}
            Outcome::Missing => self.auth_missing.inc(),
            Outcome::Malformed => self.auth_malformed.inc(),
            Outcome::Denied => self.auth_wrong.inc(),
        }
    }
}

/// Re-read one web config file.
pub fn reload(path: &Path, web: &ArcSwap<WebSecurity>, metrics: &HttpMetrics) -> bool {
    match WebSecurity::load(path) {
        Ok(sec) => {
            web.store(Arc::new(sec));
            metrics.reload_success.inc();
            true
        }
        Err(e) => {
            metrics.reload_failure.inc();
            tracing::error!("{e}; keeping the previous web config");
            false
        }
    }
}

/// Reload the web config on every SIGHUP, until the runtime stops.
pub async fn reload_on_sighup(
    path: PathBuf,
    web: Arc<ArcSwap<WebSecurity>>,
    metrics: Arc<HttpMetrics>,
) {
    use tokio::signal::unix::{signal, SignalKind};
    let mut hup = match signal(SignalKind::hangup()) {
        Ok(s) => s,
        Err(e) => {
            tracing::warn!(error = %e, "cannot listen for SIGHUP; the web config will not be reloaded");
            return;
        }
    };
    while hup.recv().await.is_some() {
        tracing::info!(file = %path.display(), "SIGHUP: reloading the web config");
        reload(&path, &web, &metrics);
    }
}
