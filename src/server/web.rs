//! The live security settings of :9400 ([`WebSecurity`]: TLS acceptor, basic auth, extra headers) built
//! from `--web-config-file`, the server's own metrics ([`HttpMetrics`]), and the SIGHUP reload: the file
//! is read again; a good file replaces the settings (new TLS certificates apply to new connections, users
//! and headers to new requests; the same users keep their credential cache), a bad one is logged and
//! counted and the old settings stay. A reload that leaves neither TLS nor basic auth switches
//! `--enable-pprof`'s profiles off, and says so.

use std::path::Path;
use std::sync::Arc;

use arc_swap::ArcSwap;
use hyper::header::{HeaderName, HeaderValue};
use hyper::StatusCode;
use tokio_rustls::TlsAcceptor;

use super::auth::{BasicAuth, Outcome};
use super::tls;
use crate::config::web_config::{self, WebConfig, WebConfigError};
use crate::telemetry::self_metrics::{Metric, SelfMetrics};

/// `--enable-pprof`, and what it asks of the live web config.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Pprof {
    Off,
    /// No web config (as dcgm-exporter allows): profiles for anyone who reaches the port.
    Open,
    /// A web config is given: profiles only while it has TLS or basic auth (a reload can switch them
    /// off and on).
    WhenProtected,
}

/// What one loaded web config enforces.
pub struct WebSecurity {
    pub tls: Option<TlsAcceptor>,
    /// Shared with the next config when a reload keeps the same users (and so their cache).
    pub auth: Option<Arc<BasicAuth>>,
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

    /// Whether a client must do more than reach the port: TLS or basic auth is on.
    pub fn protected(&self) -> bool {
        self.tls.is_some() || self.auth.is_some()
    }

    /// What protects the port, in words for log lines.
    pub fn protection(&self) -> &'static str {
        match (self.tls.is_some(), self.auth.is_some()) {
            (true, true) => "TLS and basic auth",
            (true, false) => "TLS (no basic auth: anyone who can connect may fetch it)",
            (false, true) => "basic auth (no TLS: credentials and data in clear text)",
            (false, false) => "nothing: no TLS, no basic auth",
        }
    }

    /// Build from a validated file (reads the certificate and key files). `previous`: the settings this
    /// replaces, whose basic-auth checker (and its cache) is kept when the users are the same.
    pub fn from_config(
        cfg: &WebConfig,
        previous: Option<&WebSecurity>,
    ) -> Result<WebSecurity, WebConfigError> {
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
        let kept = previous
            .and_then(|p| p.auth.as_ref())
            .filter(|a| a.same_users(&cfg.users));
        let auth = match kept {
            Some(a) => Some(a.clone()),
            None => BasicAuth::new(&cfg.users)
                .map_err(|m| fail(Some("basic_auth_users".into()), m))?
                .map(Arc::new),
        };
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
    pub fn load(
        path: &Path,
        previous: Option<&WebSecurity>,
    ) -> Result<WebSecurity, WebConfigError> {
        let cfg = web_config::load(path)?;
        let sec = WebSecurity::from_config(&cfg, previous)?;
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
const CODES: [u16; 9] = [200, 400, 401, 404, 405, 413, 429, 500, 503];

/// The HTTP server's self-metrics (registered once; updated with atomics, no allocation).
pub struct HttpMetrics {
    requests: Vec<Arc<Metric>>,
    requests_other: Arc<Metric>,
    pub rejected_max_connections: Arc<Metric>,
    pub rejected_max_client_connections: Arc<Metric>,
    pub rejected_max_requests: Arc<Metric>,
    pub rejected_max_probes: Arc<Metric>,
    pub rejected_auth_busy: Arc<Metric>,
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
            "Connections or requests turned away: over --web-max-connections or \
                                --web-max-client-connections, over --web-max-requests or the probes' own \
                                budget, basic auth's bcrypt slots busy (429), or a failed TLS handshake.";
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
            rejected_max_client_connections: reg.counter(
                REJ,
                REJ_HELP,
                &[("reason", "max_client_connections")],
            ),
            rejected_max_requests: reg.counter(REJ, REJ_HELP, &[("reason", "max_requests")]),
            rejected_max_probes: reg.counter(REJ, REJ_HELP, &[("reason", "max_probes")]),
            rejected_auth_busy: reg.counter(REJ, REJ_HELP, &[("reason", "auth_busy")]),
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
            Outcome::Busy => self.rejected_auth_busy.inc(),
        }
    }
}

/// Re-read one web config file. With `pprof` [`Pprof::WhenProtected`], a reload that takes TLS and
/// basic auth away switches CPU profiles off (and one that brings either back, on), saying so.
pub fn reload(
    path: &Path,
    web: &ArcSwap<WebSecurity>,
    metrics: &HttpMetrics,
    pprof: Pprof,
) -> bool {
    let previous = web.load_full();
    match WebSecurity::load(path, Some(&previous)) {
        Ok(sec) => {
            if pprof == Pprof::WhenProtected && previous.protected() != sec.protected() {
                if sec.protected() {
                    tracing::warn!(file = %path.display(), protection = sec.protection(), "CPU profiles (--enable-pprof) served again: the reloaded web config has TLS or basic auth");
                } else {
                    tracing::warn!(file = %path.display(), "CPU profiles (--enable-pprof) switched off: the reloaded web config has neither TLS nor basic auth (/debug/pprof/ answers 404 until a reload brings one back)");
                }
            }
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
