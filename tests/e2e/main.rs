//! The end-to-end and integration tests, one test binary (one link of the crate instead of one per
//! file), a module per area. What each module proves: its own `//!` comment. The shared infrastructure
//! (running the exporter, the fake libraries, the OTLP receiver, outside peers) is `tests/support/`.
//! Tests that need a process of their own (the fake libdcgm loaded in-process) re-run themselves in one
//! (`support::own_process`). The fault-matrix soak is its own binary (`tests/soak/`): its verdict
//! reads the whole process.
#![allow(clippy::unwrap_used, clippy::expect_used)] // tests fail loudly on purpose

#[path = "../support/mod.rs"]
mod support;

mod abi_layout;
mod config_file_e2e;
mod configmap_e2e;
mod containers_e2e;
mod dcgm_e2e;
mod dcgm_exporter_diff;
mod dcgm_header_facts;
mod distributions_e2e;
mod docs_e2e;
mod engine_e2e;
mod entities_e2e;
mod fake_libdcgm_abi;
mod fake_libdcgm_entities_abi;
mod gpu_operator_e2e;
mod header_facts;
mod hostile_clients;
mod hostile_files;
mod incident_logs;
mod incident_logs_e2e;
mod incidents_e2e;
mod kubernetes_e2e;
mod mig_rollup_e2e;
mod never_blind_e2e;
mod nvml_abi_layout;
mod nvml_e2e;
mod nvml_header_facts;
mod open_attribution;
mod otlp_e2e;
mod otlp_faults_e2e;
mod pod_cost;
mod prometheus_e2e;
mod reload_e2e;
mod rules_recorded;
mod simulated_e2e;
mod startup_errors;
mod systemd_e2e;
mod troubleshooting_e2e;
mod web_security;
