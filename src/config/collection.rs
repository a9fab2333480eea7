//! The collection flags (`Metrics` in `--help`): which counters, how often, which devices, and how the
//! host and the labels are spelled — the settings every source and exporter share, resolved once here
//! (the collect interval as a [`Duration`], the [`LabelStyle`]) and handed down as typed values.

use std::path::PathBuf;
use std::time::Duration;

use clap::{ArgAction, Args, ValueEnum};

use super::devices::{self, DeviceSelection, Selectors};
use super::distributions::DistributionItem;
use crate::counters::DEFAULT_COLLECTORS;

/// Spelling of the host label: dcgm-exporter up to 4.8.2 wrote `Hostname`, 4.8.3 writes `hostname`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum)]
pub enum HostnameLabel {
    #[value(name = "Hostname")]
    Hostname,
    #[value(name = "hostname")]
    LowerHostname,
}

impl HostnameLabel {
    pub fn as_str(self) -> &'static str {
        match self {
            HostnameLabel::Hostname => "Hostname",
            HostnameLabel::LowerHostname => "hostname",
        }
    }
}

/// The `Metrics` flags.
#[derive(Debug, Clone, Args)]
#[command(next_help_heading = "Metrics")]
pub struct CollectionArgs {
    /// Counters CSV: which DCGM fields to export. When the default path does not exist, the built-in
    /// default counters are used.
    #[arg(short = 'f', long = "collectors", env = "DCGM_EXPORTER_COLLECTORS", value_name = "PATH",
          default_value = DEFAULT_COLLECTORS)]
    pub collectors: PathBuf,

    /// Counters CSV from the `metrics` key of a ConfigMap, NAMESPACE:NAME (or none), read through the
    /// Kubernetes API (in-cluster or KUBECONFIG) and followed: an update reloads it. Wins over -f.
    #[arg(
        short = 'm',
        long = "configmap-data",
        env = "DCGM_EXPORTER_CONFIGMAP_DATA",
        value_name = "NAMESPACE:NAME"
    )]
    pub configmap_data: Option<String>,

    /// dcgm-exporter 4.8.3 YAML configuration: metrics file or inline fields, collect interval, watch
    /// groups. Flags and variables given explicitly override it.
    #[arg(
        long = "config-file",
        env = "DCGM_EXPORTER_CONFIG_FILE",
        value_name = "PATH"
    )]
    pub config_file: Option<PathBuf>,

    /// Collect interval in milliseconds (also DCGM's watch update frequency).
    #[arg(short = 'c', long = "collect-interval", env = "DCGM_EXPORTER_INTERVAL", value_name = "MS",
          default_value_t = 30000, value_parser = clap::value_parser!(u64).range(100..=3_600_000))]
    pub collect_interval: u64,

    /// GPUs and MIG instances to monitor: f (flex), g, i, g:0,1, i:0,2-4, g:0+i:3.
    #[arg(short = 'd', long = "devices", env = "DCGM_EXPORTER_DEVICES_STR", value_name = "SELECTION",
          default_value = "f", value_parser = parse_devices)]
    pub devices: DeviceSelection,

    /// NvSwitches and their NvLinks to monitor: f (all), g (switches), g:0,1, g+i (switches and all
    /// their links), g:0+i:0-17; i names NvLink ports of the selected switches.
    #[arg(short = 's', long = "switch-devices", env = "DCGM_EXPORTER_OTHER_DEVICES_STR",
          value_name = "SELECTION", default_value = "f", value_parser = parse_devices)]
    pub switch_devices: DeviceSelection,

    /// CPUs and their cores to monitor: f (all), g (CPUs), g:0, g+i (CPUs and all their cores),
    /// g:0+i:0-71; i names cores of the selected CPUs.
    #[arg(short = 'p', long = "cpu-devices", env = "DCGM_EXPORTER_CPU_DEVICES_STR",
          value_name = "SELECTION", default_value = "f", value_parser = parse_devices)]
    pub cpu_devices: DeviceSelection,

    /// Use dcgm-exporter 1.x label names (uuid, pod_name, pod_namespace, container_name).
    #[arg(short = 'o', long = "use-old-namespace", env = "DCGM_EXPORTER_USE_OLD_NAMESPACE",
          action = ArgAction::SetTrue)]
    pub use_old_namespace: bool,

    /// Collapse whitespace in the model name and replace spaces with '-' (alias -rbmn).
    #[arg(long = "replace-blanks-in-model-name", env = "DCGM_EXPORTER_REPLACE_BLANKS_IN_MODEL_NAME",
          action = ArgAction::SetTrue)]
    pub replace_blanks_in_model_name: bool,

    /// Do not add the host label to series.
    #[arg(short = 'n', long = "no-hostname", env = "DCGM_EXPORTER_NO_HOSTNAME", action = ArgAction::SetTrue)]
    pub no_hostname: bool,

    /// Name of the host label: Hostname (dcgm-exporter <= 4.8.2, the default) or hostname (4.8.3).
    #[arg(
        long = "hostname-label",
        env = "DCGM_OTEL_HOSTNAME_LABEL",
        value_enum,
        default_value = "Hostname"
    )]
    pub hostname_label: HostnameLabel,

    /// Sample FIELD every INTERVAL between collections and export its distribution per entity (interval
    /// max, min and quantiles on :9400, an exponential histogram over OTLP), e.g.
    /// DCGM_FI_DEV_POWER_USAGE@100ms. Repeatable; the variable takes a comma-separated list.
    #[arg(long = "distribution", env = "DCGM_OTEL_DISTRIBUTIONS", value_name = "FIELD@INTERVAL",
          value_delimiter = ',', action = ArgAction::Append, value_parser = super::distributions::parse_item)]
    pub distributions: Vec<DistributionItem>,

    /// Leave out the exporter's own dcgm_otel_* metrics.
    #[arg(long = "no-self-metrics", env = "DCGM_OTEL_NO_SELF_METRICS", action = ArgAction::SetTrue)]
    pub no_self_metrics: bool,
}

impl CollectionArgs {
    /// The collect interval.
    pub fn interval(&self) -> Duration {
        Duration::from_millis(self.collect_interval)
    }

    /// `-d`, `-s` and `-p` together.
    pub fn selectors(&self) -> Selectors {
        Selectors {
            devices: self.devices.clone(),
            switches: self.switch_devices.clone(),
            cpus: self.cpu_devices.clone(),
        }
    }

    pub fn label_style(&self) -> LabelStyle {
        LabelStyle {
            use_old_namespace: self.use_old_namespace,
            replace_blanks_in_model_name: self.replace_blanks_in_model_name,
            hostname_label: self.hostname_label,
        }
    }
}

fn parse_devices(s: &str) -> Result<DeviceSelection, String> {
    devices::parse(s).map_err(|e| e.to_string())
}

/// Labels and identity choices shared by all exporters.
#[derive(Debug, Clone)]
pub struct LabelStyle {
    pub use_old_namespace: bool,
    pub replace_blanks_in_model_name: bool,
    pub hostname_label: HostnameLabel,
}

impl Default for LabelStyle {
    fn default() -> Self {
        LabelStyle {
            use_old_namespace: false,
            replace_blanks_in_model_name: false,
            hostname_label: HostnameLabel::Hostname,
        }
    }
}

impl LabelStyle {
    /// The model name as it is written in labels.
    pub fn model_name(&self, model: &str) -> String {
        if self.replace_blanks_in_model_name {
            model.split_whitespace().collect::<Vec<_>>().join("-")
        } else {
            model.to_string()
        }
    }
}
