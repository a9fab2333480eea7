//! Which counters are collected, and how they are followed: the counter set's own construction.
//!
//! By precedence: `-m` (a ConfigMap, as in dcgm-exporter); `-f` given explicitly (flag or variable);
//! `--config-file`'s `metrics` (a file or inline fields); a simulated scenario's own set; `-f`'s default
//! path (the built-in defaults when it does not exist). The config file's watch groups are then resolved
//! against the set. Resolving reads and checks everything (reading the ConfigMap is the one request
//! start-up checks make, so that a missing one stops the start with one line); starting follows the
//! file or the ConfigMap for hot reload.

use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::Duration;

use crate::counters::configmap::{self, ConfigMapFollower, ConfigMapRef};
use crate::counters::reload::CountersReloader;
use crate::counters::watch_groups::{self, WatchGroupSpec};
use crate::counters::{self, CounterSet};
use crate::kubernetes_api::ApiConfig;
use crate::start_error::StartError;
use crate::telemetry::self_metrics::SelfMetrics;

/// A simulated scenario's own counter set (`counters:` in its file).
pub enum ScenarioCounters<'a> {
    /// A built-in set, by name, and its text.
    Builtin { name: &'a str, text: &'static str },
    /// A CSV file.
    File(&'a Path),
}

/// Where the counters come from, per `--config-file` (`metrics`: a file or inline fields).
#[derive(Debug, Clone, PartialEq)]
pub enum MetricsSource {
    /// `metrics.file`
    File(PathBuf),
    /// `metrics.fields`, already parsed into a counter set (origin: the config file).
    Fields(CounterSet),
}

/// What `--config-file` says about the counters, as values the wiring takes from the parsed file.
#[derive(Clone, Copy)]
pub struct ConfigFileCounters<'a> {
    pub metrics: Option<&'a MetricsSource>,
    /// `collection.watchGroups`, resolved against the counters once they are known.
    pub watch_groups: &'a [WatchGroupSpec],
}

/// What the counters are resolved from.
pub struct CountersFlags<'a> {
    /// `-f`: the counters CSV's path.
    pub collectors: &'a Path,
    /// `-f` (or its variable) was given explicitly: a missing file is an error, not the built-in set.
    pub collectors_explicit: bool,
    /// `-m`: the ConfigMap's `namespace:name`.
    pub configmap_data: Option<&'a str>,
    pub config_file: Option<ConfigFileCounters<'a>>,
    pub scenario: Option<ScenarioCounters<'a>>,
}

/// The counter set, read and checked, and what follows it once started.
pub struct CountersPlan {
    set: CounterSet,
    follow: Follow,
    watch_groups: Vec<WatchGroupSpec>,
}

enum Follow {
    /// Built in or inline: nothing to follow.
    Nothing,
    File(PathBuf),
    /// `-m`: the ConfigMap read at start (its API, name and text).
    ConfigMap {
        api: ApiConfig,
        r: ConfigMapRef,
        text: String,
    },
}

impl CountersPlan {
    /// `env` looks up an environment variable (`startup::ResolveContext::env`: the Kubernetes API's
    /// configuration for `-m`).
    pub fn resolve(
        flags: &CountersFlags<'_>,
        env: &dyn Fn(&str) -> Option<String>,
    ) -> Result<CountersPlan, StartError> {
        let watch_groups = flags
            .config_file
            .map(|c| c.watch_groups.to_vec())
            .unwrap_or_default();
        let configmap_ref = match flags.configmap_data {
            Some(spec) => ConfigMapRef::parse(spec).map_err(StartError::input)?,
            None => None,
        };
        let (mut set, follow) = match configmap_ref {
            Some(r) => from_configmap(r, env)?,
            None => from_files(flags)?,
        };
        if flags.config_file.is_some() {
            set.watch_groups =
                watch_groups::resolve(&watch_groups, &set).map_err(StartError::input)?;
        }
        Ok(CountersPlan {
            set,
            follow,
            watch_groups,
        })
    }

    /// The counter set as read (before a source drops the rows it cannot serve).
    pub fn set(&self) -> &CounterSet {
        &self.set
    }

    /// The set and, when it came from a file or a ConfigMap, what follows it for hot reload.
    /// `interval` and `self_metrics`: the start-up context's (`startup::StartContext`).
    pub fn start(
        self,
        interval: Duration,
        self_metrics: &Arc<SelfMetrics>,
    ) -> Result<(CounterSet, Option<CountersReloader>), StartError> {
        let reloader = match self.follow {
            Follow::Nothing => None,
            Follow::File(path) => Some(CountersReloader::new(&path, self.watch_groups)),
            Follow::ConfigMap { api, r, text } => {
                let follower = ConfigMapFollower::start(&api, r, text, interval, self_metrics)
                    .map_err(StartError::environment)?;
                Some(CountersReloader::for_configmap(follower, self.watch_groups))
            }
        };
        Ok((self.set, reloader))
    }
}

/// `-m`: the ConfigMap's counters win over every other source.
fn from_configmap(
    r: ConfigMapRef,
    env: &dyn Fn(&str) -> Option<String>,
) -> Result<(CounterSet, Follow), StartError> {
    let api = ApiConfig::discover(env)
        .map_err(StartError::input)?
        .ok_or_else(|| {
            StartError::input(format!(
                "--configmap-data {}:{} needs the Kubernetes API: no in-cluster service account and no KUBECONFIG",
                r.namespace, r.name
            ))
        })?;
    let (set, text) = configmap::load(&api, &r).map_err(StartError::input)?;
    Ok((set, Follow::ConfigMap { api, r, text }))
}

/// `-f`, `--config-file`'s `metrics`, the scenario's set or the default path, by precedence.
fn from_files(flags: &CountersFlags<'_>) -> Result<(CounterSet, Follow), StartError> {
    let from_config = flags.config_file.and_then(|c| c.metrics);
    let own = flags
        .scenario
        .as_ref()
        .filter(|_| !flags.collectors_explicit && from_config.is_none());
    let (loaded, file) = match (flags.collectors_explicit, from_config, own) {
        (false, Some(MetricsSource::File(path)), _) => {
            (counters::load_file(path), Some(path.clone()))
        }
        (false, Some(MetricsSource::Fields(set)), _) => (Ok(set.clone()), None),
        (_, _, Some(ScenarioCounters::Builtin { name, text })) => (
            counters::parse(text, &format!("built-in '{name}' counters")),
            None,
        ),
        (_, _, Some(ScenarioCounters::File(path))) => {
            (counters::load_file(path), Some(path.to_path_buf()))
        }
        _ => {
            let path = flags.collectors;
            let explicit = flags.collectors_explicit;
            let file = (explicit || path.exists()).then(|| path.to_path_buf());
            (counters::load(path, explicit), file)
        }
    };
    let set = loaded.map_err(StartError::input)?;
    Ok((set, file.map_or(Follow::Nothing, Follow::File)))
}
