//! Configuration shared by every feature: the collection flags ([`collection`]: counters file, interval,
//! devices, label spelling), dcgm-exporter's device-selection grammar ([`devices`]), Go durations and
//! Go `flag` syntax ([`duration`], [`flags`]), the sampled fields' specs ([`distributions`]), the node's
//! host label and name ([`host`]), the exporter-toolkit web config file ([`web_config`]) and
//! dcgm-exporter 4.8.3's YAML configuration file ([`config_file`], positions by [`yaml_position`]); how
//! every local file others may have prepared is read is [`crate::local_file`]'s (below config/: the
//! counters CSV is read with it too).
//! Each feature's own flags live beside it (`source::dcgm::DcgmArgs`, `enrich::kubernetes::KubernetesArgs`,
//! `export::otel::otlp::OtlpArgs`, ...) and are gathered into one command line by `crate::cli`. Nothing
//! here knows the sources, enrichers or exporters that use it.

pub mod collection;
pub mod config_file;
pub mod devices;
pub mod distributions;
pub mod duration;
pub mod flags;
pub mod host;
pub mod web_config;
pub mod yaml_position;

pub use collection::{CollectionArgs, HostnameLabel, LabelStyle};
