//! The test toolkit, shared by the end-to-end tests (`tests/e2e/`), the soak (`tests/soak/`) and the
//! measurement benches (`benches/`): each piece of test infrastructure exists once, here.
//!
//! - [`common`]: run the built `dcgm-otel` on a loopback port it binds itself, scrape it, stop it; golden files.
//! - [`fake_lib`]: the fake libdcgm / libnvidia-ml (`tests/fake-lib*`), built on demand, linked under
//!   their real names in a private directory.
//! - [`kubelet`]: the fake kubelet (pod-resources `List` over gRPC on a unix socket).
//! - [`api_server`]: the fake Kubernetes API server (pods, ResourceSlices, ConfigMaps; outages).
//! - [`fault_collector`]: a fake OTLP collector that answers slowly, throttles or hangs on a script,
//!   recording each attempt's timing from its side (the exporter's retries and backoff).
//! - [`hung`]: peers that accept a connection and never answer (a hung kubelet, API server, runtime).
//! - [`otlp`]: the one OTLP receiver (metrics and logs, gRPC and HTTP, TLS) and the one attribute reader.
//! - [`peers`]: outside programs the tests drive (rotel, promtool ...): found, or skipped with a
//!   printed reason outside CI; started and checked the one way.
//! - [`own_process`]: run a test in a child process of its own (process-global state).
//! - [`dcgm_exporter`]: NVIDIA's dcgm-exporter as a peer (its binary, or the captures of its output).
//! - [`exposition_diff`]: two `/metrics` bodies compared series by series; the deliberate-difference list.
#![allow(dead_code, unused_imports, clippy::unwrap_used, clippy::expect_used)]

pub mod api_server;
pub mod common;
pub mod dcgm_exporter;
pub mod exposition_diff;
pub mod fake_lib;
pub mod fault_collector;
pub mod hung;
pub mod kubelet;
pub mod otlp;
pub mod own_process;
pub mod peers;
