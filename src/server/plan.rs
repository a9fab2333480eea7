//! The `:9400` server's own construction: where it listens (`--address`, or the sockets systemd passed
//! with `--web-systemd-socket`), its web config (TLS, basic auth), its limits and `--enable-pprof`.
//! Resolved without side effects; bound first at start (a port in use fails before anything is read
//! or pushed); served until termination.

use std::net::SocketAddr;
use std::path::PathBuf;
use std::sync::Arc;
use std::time::Duration;

use arc_swap::ArcSwap;
use tokio::net::TcpListener;

use crate::server::args::{listen_addresses, PrometheusFormat, ServerArgs};
use crate::server::web::{HttpMetrics, WebSecurity};
use crate::server::{self, Limits, Pprof, ServeOptions, ServerState};
use crate::startup::StartError;
use crate::telemetry::self_metrics::SelfMetrics;

/// Where /metrics is served.
enum Listen {
    /// `--address`: the addresses to try binding, in order.
    Bind(Vec<SocketAddr>),
    /// `--web-systemd-socket`: the listening sockets systemd passed, each served.
    Inherited(Vec<std::net::TcpListener>),
}

/// The sockets systemd passed (`--web-systemd-socket`), claimed before anything opens a file.
pub struct Inherited(Option<Vec<std::net::TcpListener>>);

impl Inherited {
    /// Descriptors from 3 on must be claimed before anything opens a file: call this first.
    pub fn claim(args: &ServerArgs) -> Result<Inherited, StartError> {
        if !args.web_systemd_socket {
            return Ok(Inherited(None));
        }
        server::systemd::listeners_from_env()
            .map(|l| Inherited(Some(l)))
            .map_err(|e| StartError::input(format!("--web-systemd-socket: {e}")))
    }
}

/// The server, resolved and not bound.
pub struct ServerPlan {
    listen: Listen,
    address: String,
    systemd_socket: bool,
    web_config: Option<PathBuf>,
    web_security: WebSecurity,
    limits: Limits,
    health_auth: bool,
    pprof: Pprof,
}

/// The bound server: its listeners and live web settings, ready to serve.
pub struct BoundServer {
    listeners: Vec<TcpListener>,
    /// The web config file (SIGHUP reloads it) and the live settings.
    pub web_config: Option<PathBuf>,
    pub web: Arc<ArcSwap<WebSecurity>>,
    pub http_metrics: Arc<HttpMetrics>,
    limits: Limits,
    health_auth: bool,
    pprof: Pprof,
    systemd_socket: bool,
}

impl ServerPlan {
    pub fn resolve(args: &ServerArgs, inherited: Inherited) -> Result<ServerPlan, StartError> {
        if args.prometheus_format == PrometheusFormat::Otel {
            return Err(StartError::input(
                "--prometheus-format otel: the OpenTelemetry Prometheus bridge is no longer built; /metrics is dcgm-exporter's format (for OTel-style names in Prometheus, push OTLP to a collector with a prometheus exporter)",
            ));
        }
        let listen = match inherited.0 {
            Some(listeners) => Listen::Inherited(listeners),
            None => Listen::Bind(listen_addresses(&args.address).map_err(StartError::input)?),
        };
        let web_config = args.web_config_path().map(PathBuf::from);
        if args.enable_pprof && cfg!(not(feature = "pprof")) {
            return Err(StartError::input("--enable-pprof: this build of dcgm-otel has no CPU profiler (built without the cargo feature pprof)"));
        }
        let web_security = match &web_config {
            Some(path) => WebSecurity::load(path, None).map_err(StartError::input)?,
            None => WebSecurity::plain(),
        };
        let pprof = pprof_mode(args.enable_pprof, web_config.as_deref(), &web_security)?;
        Ok(ServerPlan {
            listen,
            address: args.address.clone(),
            systemd_socket: args.web_systemd_socket,
            web_config,
            web_security,
            limits: args.limits(),
            health_auth: args.web_health_auth,
            pprof,
        })
    }

    /// Bind (or take over the passed sockets) on `runtime`.
    pub fn bind(
        self,
        runtime: &tokio::runtime::Runtime,
        self_metrics: &SelfMetrics,
    ) -> Result<BoundServer, StartError> {
        let listeners = match self.listen {
            Listen::Bind(addresses) => {
                vec![runtime.block_on(server::bind(&addresses)).map_err(|e| {
                    StartError::environment(format!("cannot listen on {}: {e}", self.address))
                })?]
            }
            Listen::Inherited(passed) => {
                let _context = runtime.enter();
                passed
                    .into_iter()
                    .map(|l| {
                        l.set_nonblocking(true)?;
                        TcpListener::from_std(l)
                    })
                    .collect::<std::io::Result<Vec<_>>>()
                    .map_err(|e| {
                        StartError::environment(format!(
                            "--web-systemd-socket: cannot serve on a passed socket: {e}"
                        ))
                    })?
            }
        };
        Ok(BoundServer {
            listeners,
            web_config: self.web_config,
            web: Arc::new(ArcSwap::from_pointee(self.web_security)),
            http_metrics: Arc::new(HttpMetrics::new(self_metrics)),
            limits: self.limits,
            health_auth: self.health_auth,
            pprof: self.pprof,
            systemd_socket: self.systemd_socket,
        })
    }
}

/// What `--enable-pprof` asks of the web config: none given, profiles are open to anyone who reaches
/// the port (as in dcgm-exporter, with a warning at start); a web config given must protect them with
/// TLS or basic auth, else start-up stops (bad input: the file says one thing, the profiles would do
/// another).
fn pprof_mode(
    enabled: bool,
    web_config: Option<&std::path::Path>,
    web: &WebSecurity,
) -> Result<Pprof, StartError> {
    match (enabled, web_config) {
        (false, _) => Ok(Pprof::Off),
        (true, None) => Ok(Pprof::Open),
        (true, Some(_)) if web.protected() => Ok(Pprof::WhenProtected),
        (true, Some(path)) => Err(StartError::input(format!(
            "--enable-pprof: the web config {} has neither tls_server_config nor basic_auth_users, so CPU profiles would be open to anyone who reaches the port; add one of them, or leave out --web-config-file to serve profiles without protection as dcgm-exporter does",
            path.display()
        ))),
    }
}

impl BoundServer {
    /// `--enable-pprof`, and what it asks of the web config (for the SIGHUP reload).
    pub fn pprof(&self) -> Pprof {
        self.pprof
    }

    /// Serve `state` on every listener until `until` completes, then give open connections up to
    /// 5 s to finish. `started`: for the start-up time in the "serving" line.
    pub async fn serve(
        self,
        state: ServerState,
        started: std::time::Instant,
        until: impl std::future::Future<Output = ()>,
    ) {
        let local = self
            .listeners
            .iter()
            .map(|l| l.local_addr().map(|a| a.to_string()).unwrap_or_default())
            .collect::<Vec<_>>()
            .join(" ");
        tracing::info!(address = %local, systemd_socket = self.systemd_socket, startup_ms = started.elapsed().as_millis() as u64, "serving /metrics");
        match self.pprof {
            Pprof::Off => {}
            Pprof::Open => tracing::warn!("CPU profiles at /debug/pprof/profile?seconds=N (--enable-pprof) are served without TLS or basic auth (no --web-config-file, as in dcgm-exporter): anyone who reaches the port can take one"),
            Pprof::WhenProtected => {
                let web = self.web.load();
                if web.auth.is_some() {
                    tracing::info!(protection = web.protection(), "CPU profiles at /debug/pprof/profile?seconds=N (--enable-pprof)");
                } else {
                    tracing::warn!(protection = web.protection(), "CPU profiles at /debug/pprof/profile?seconds=N (--enable-pprof)");
                }
            }
        }
        let (shutdown_tx, shutdown_rx) = tokio::sync::watch::channel(false);
        // One server per socket (several only with socket activation), each with the --web-* caps.
        let servers: Vec<_> = self
            .listeners
            .into_iter()
            .map(|listener| {
                let options = ServeOptions {
                    limits: self.limits,
                    web: self.web.clone(),
                    metrics: self.http_metrics.clone(),
                    health_auth: self.health_auth,
                    pprof: self.pprof,
                };
                tokio::spawn(server::serve_with(
                    listener,
                    state.clone(),
                    options,
                    shutdown_rx.clone(),
                ))
            })
            .collect();
        until.await;
        tracing::info!("shutting down");
        let _ = shutdown_tx.send(true);
        let _ = tokio::time::timeout(Duration::from_secs(5), async {
            for server in servers {
                let _ = server.await;
            }
        })
        .await;
    }
}
