//! Start-up: flags → configuration → source → pipeline thread → HTTP server; orderly shutdown on
//! SIGTERM/SIGINT. Bad input exits with code 2 and one line naming it; other start-up failures exit 1.

use std::process::ExitCode;
use std::sync::Arc;
use std::time::{Duration, Instant};

use anyhow::Context as _;
use clap::parser::ValueSource;

use dcgm_otel::config::{self, counters, Cli, LabelStyle};
use dcgm_otel::export::prometheus::Renderer;
use dcgm_otel::export::self_metrics::SelfMetrics;
use dcgm_otel::export::SnapshotConsumer;
use dcgm_otel::pipeline::{CollectorStatus, Pipeline, SnapshotStore};
use dcgm_otel::server::{self, ServerState};
use dcgm_otel::snapshot::HostInfo;
use dcgm_otel::source::dcgm;
use dcgm_otel::source::sim::{self, SimSource};
use dcgm_otel::source::Source;

/// A start-up failure and the exit code it maps to.
struct Fatal {
    code: u8,
    error: anyhow::Error,
}

fn usage(error: impl Into<anyhow::Error>) -> Fatal {
    Fatal {
        code: 2,
        error: error.into(),
    }
}

fn failure(error: impl Into<anyhow::Error>) -> Fatal {
    Fatal {
        code: 1,
        error: error.into(),
    }
}

fn main() -> ExitCode {
    let started = Instant::now();
    let args: Vec<std::ffi::OsString> = std::env::args_os().collect();
    let (cli, matches) = match config::cli::parse_args(&args) {
        Ok(parsed) => parsed,
        Err(e) => {
            use clap::error::ErrorKind;
            if matches!(e.kind(), ErrorKind::DisplayHelp | ErrorKind::DisplayVersion) {
                let _ = e.print();
                return ExitCode::SUCCESS;
            }
            eprintln!("dcgm-otel: {}", config::cli::describe_error(&e, &args));
            return ExitCode::from(2);
        }
    };
    dcgm_otel::logging::init(cli.log_format, cli.debug);
    for flag in config::cli::not_implemented_given(&matches) {
        tracing::warn!(flag = %flag, "dcgm-exporter flag accepted for compatibility but not implemented by dcgm-otel yet; it has no effect");
    }
    let collectors_explicit = matches
        .value_source("collectors")
        .is_some_and(|s| s != ValueSource::DefaultValue);
    match run(cli, collectors_explicit, started) {
        Ok(()) => ExitCode::SUCCESS,
        Err(f) => {
            eprintln!("dcgm-otel: {:#}", f.error);
            ExitCode::from(f.code)
        }
    }
}

fn run(cli: Cli, collectors_explicit: bool, started: Instant) -> Result<(), Fatal> {
    let interval = config::collect_interval(&cli);
    let listen = config::listen_addresses(&cli.address).map_err(usage)?;
    // Web config (TLS, basic auth): a bad file stops start-up here, with exit code 2.
    let web_config_file = cli
        .web_config_file
        .clone()
        .filter(|p| !p.as_os_str().is_empty());
    let web_security = match &web_config_file {
        Some(path) => server::web::WebSecurity::load(path).map_err(usage)?,
        None => server::web::WebSecurity::plain(),
    };

    // ---- counters and source ---------------------------------------------------------------------
    let scenario = match &cli.simulate {
        Some(name) => Some(sim::Scenario::load(name).map_err(usage)?),
        None => None,
    };
    let mut counter_set = match scenario.as_ref().and_then(|s| s.counters.clone()) {
        Some(name) if !collectors_explicit => match sim::scenario::builtin_counters(&name) {
            Some(text) => {
                counters::parse(text, &format!("built-in '{name}' counters")).map_err(usage)?
            }
            None => counters::load_file(std::path::Path::new(&name)).map_err(usage)?,
        },
        _ => config::load_counters(&cli, collectors_explicit).map_err(usage)?,
    };
    for (line, name) in &counter_set.unsupported_exporter_fields {
        tracing::warn!(origin = %counter_set.origin, line, field = %name, "DCGM_EXP_* metrics are not yet supported by dcgm-otel; row skipped");
    }
    // Remote host engine: the host part of -r, like dcgm-exporter 4.8.3 (loopback/unix → local name);
    // with -k the node name wins, as there.
    let remote_host = match (&cli.simulate, &cli.remote_hostengine_info) {
        (None, Some(r)) if !cli.kubernetes => dcgm::remote_hostname(r),
        _ => None,
    };
    let hostname = (!cli.no_hostname).then(|| remote_host.unwrap_or_else(config::local_hostname));
    let source: Box<dyn Source>;
    if let Some(scenario) = &scenario {
        let seed = cli.simulate_seed.unwrap_or(1);
        tracing::warn!(
            scenario = cli.simulate.as_deref().unwrap_or("default"),
            description = %scenario.description,
            seed,
            "SIMULATED METRICS: no GPU is being read; every value comes from the simulated fleet (--simulate)"
        );
        let counters_arc = Arc::new(counter_set.clone());
        source = Box::new(
            SimSource::new(scenario, seed, counters_arc, &cli.devices, interval).map_err(usage)?,
        );
    } else {
        // Rows DCGM cannot serve (DCP without the profiling module) leave the counter set here, before
        // any exporter is built. Missing libdcgm / host engine: exit 1; bad -r or -d: exit 2.
        let opts = dcgm::DcgmOptions::from_cli(&cli);
        let dcgm_source = dcgm::DcgmSource::connect(opts, &mut counter_set).map_err(|e| {
            if e.is_bad_input() {
                usage(e)
            } else {
                failure(e)
            }
        })?;
        source = Box::new(dcgm_source);
    }
    counter_set.rows.shrink_to_fit();
    let counters = Arc::new(counter_set);
    tracing::info!(
        origin = %counters.origin,
        rows = counters.len(),
        interval_ms = interval.as_millis() as u64,
        source = source.name(),
        "configuration loaded"
    );

    // ---- exporters -------------------------------------------------------------------------------
    let self_metrics = SelfMetrics::new();
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
    let style = LabelStyle::from_cli(&cli);
    let renderer = Arc::new(Renderer::new(
        style,
        (!cli.no_self_metrics).then(|| self_metrics.clone()),
    ));
    let consumers: Vec<Arc<dyn SnapshotConsumer>> = match cli.prometheus_format {
        config::cli::PrometheusFormat::Dcgm => vec![renderer.clone()],
        // --prometheus-format otel: the OTel Prometheus bridge publishes into the same body cell.
        config::cli::PrometheusFormat::Otel => {
            let node_name = std::env::var("NODE_NAME").ok().filter(|n| !n.is_empty());
            let inputs = dcgm_otel::export::otel::OtelInputs {
                cli: &cli,
                counters: &counters,
                store: SnapshotStore::new(),
                self_metrics: self_metrics.clone(),
                collect_interval: interval,
                hostname: hostname.as_deref(),
                node_name: node_name.as_deref(),
            };
            let bridge = dcgm_otel::export::otel::prometheus_bridge(&inputs, renderer.body())
                .map_err(|e| {
                    if e.is_bad_input() {
                        usage(e)
                    } else {
                        failure(e)
                    }
                })?;
            vec![bridge as Arc<dyn SnapshotConsumer>]
        }
    };
    let status = CollectorStatus::new(interval);
    let store = SnapshotStore::new();

    // ---- enrichers: Kubernetes pods (-k), HPC jobs (--hpc-job-mapping-dir) -----------------------
    let mut enrichers: Vec<Box<dyn dcgm_otel::enrich::Enricher>> = Vec::new();
    if cli.kubernetes {
        use dcgm_otel::enrich::kubernetes as k8s;
        let k8s_config = k8s::KubernetesConfig {
            socket: cli.pod_resources_kubelet_socket.clone(),
            rules: k8s::MatchRules {
                extra_resource_names: cli
                    .nvidia_resource_names
                    .iter()
                    .map(|n| n.trim().to_string())
                    .filter(|n| !n.is_empty())
                    .collect(),
                id_type: cli.kubernetes_gpu_id_type,
            },
            pod_uid_checkpoint: cli
                .kubernetes_enable_pod_uid
                .then(|| cli.kubelet_device_checkpoint.clone()),
            deadline: k8s::KubernetesConfig::deadline_for(interval),
        };
        let enricher = k8s::KubernetesEnricher::new(k8s_config, &self_metrics)
            .context("cannot start the kubelet client runtime")
            .map_err(failure)?;
        enrichers.push(Box::new(enricher));
    }
    if let Some(dir) = cli
        .hpc_job_mapping_dir
        .as_ref()
        .filter(|d| !d.as_os_str().is_empty())
    {
        enrichers.push(Box::new(dcgm_otel::enrich::hpc::HpcEnricher::new(
            dir.clone(),
            &self_metrics,
        )));
    }

    // ---- OTLP push (issue 4): off unless --otlp or an endpoint is configured ----------------------
    let otel = dcgm_otel::export::otel::start(dcgm_otel::export::otel::OtelInputs {
        cli: &cli,
        counters: &counters,
        store: store.clone(),
        self_metrics: self_metrics.clone(),
        collect_interval: interval,
        hostname: hostname.as_deref(),
        node_name: std::env::var("NODE_NAME")
            .ok()
            .filter(|n| !n.is_empty())
            .as_deref(),
    })
    .map_err(|e| {
        if e.is_bad_input() {
            usage(e)
        } else {
            failure(e)
        }
    })?;

    // ---- collector thread --------------------------------------------------------------------------
    let pipeline = Pipeline {
        source,
        enrichers,
        consumers,
        counters,
        host: Arc::new(HostInfo {
            hostname,
            node_name: std::env::var("NODE_NAME").ok().filter(|n| !n.is_empty()),
        }),
        interval,
        store,
        status: status.clone(),
        self_metrics: self_metrics.clone(),
    };
    let (stop_tx, stop_rx) = std::sync::mpsc::channel::<()>();
    let collector = std::thread::Builder::new()
        .name("collector".into())
        .spawn(move || pipeline.run(stop_rx))
        .context("cannot start the collector thread")
        .map_err(failure)?;

    // ---- HTTP server ------------------------------------------------------------------------------
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .thread_name("dcgm-otel-rt")
        .build()
        .context("cannot start the async runtime")
        .map_err(failure)?;
    let state = ServerState {
        body: renderer.body(),
        status: status.clone(),
    };
    let web = Arc::new(arc_swap::ArcSwap::from_pointee(web_security));
    let http_metrics = Arc::new(server::web::HttpMetrics::new(&self_metrics));
    let serve_opts = server::ServeOptions {
        limits: server::Limits {
            read_timeout: cli.web_read_timeout,
            write_timeout: cli.web_write_timeout,
            max_connections: cli.web_max_connections as usize,
            max_requests: cli.web_max_requests as usize,
        },
        web: web.clone(),
        metrics: http_metrics.clone(),
        health_auth: cli.web_health_auth,
    };
    let result = runtime.block_on(async move {
        let listener = server::bind(&listen)
            .await
            .with_context(|| format!("cannot listen on {}", cli.address))
            .map_err(failure)?;
        let local = listener.local_addr().map(|a| a.to_string()).unwrap_or_default();
        tracing::info!(address = %local, startup_ms = started.elapsed().as_millis() as u64, "serving /metrics");
        let (shutdown_tx, shutdown_rx) = tokio::sync::watch::channel(false);
        if let Some(path) = web_config_file {
            tokio::spawn(server::web::reload_on_sighup(path, web, http_metrics));
        }
        let server = tokio::spawn(server::serve_with(listener, state, serve_opts, shutdown_rx));
        wait_for_signal().await;
        tracing::info!("shutting down");
        let _ = shutdown_tx.send(true);
        let _ = tokio::time::timeout(Duration::from_secs(5), server).await;
        Ok::<(), Fatal>(())
    });
    drop(stop_tx);
    let _ = collector.join();
    if let Some(otel) = otel {
        otel.shutdown();
    }
    runtime.shutdown_timeout(Duration::from_secs(1));
    result
}

async fn wait_for_signal() {
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
