//! `--config-file` / `DCGM_EXPORTER_CONFIG_FILE`: dcgm-exporter 4.8.3's YAML start-up configuration —
//! exactly what 4.8.3 defines (`internal/pkg/appconfig/yaml_config.go`), nothing more:
//!
//! ```yaml
//! version: 1                      # required, must be 1
//! metrics:                        # optional; exactly one of:
//!   file: /etc/dcgm-exporter/custom.csv          #   a counters CSV
//!   fields:                                      #   or the rows inline
//!     - { name: DCGM_FI_DEV_GPU_TEMP, prometheusType: gauge, help: GPU temperature. }
//! collection:                     # optional
//!   interval: 15s                 # Go duration, whole milliseconds (the collect interval)
//!   watchGroups:                  # fields DCGM samples at their own interval
//!     - { name: slow, interval: 5m, fields: ["DCGM_FI_DEV_*_VIOLATION", "DCGM_FI_DEV_ECC_*"] }
//!   distributions: [DCGM_FI_DEV_POWER_USAGE@100ms]  # dcgm-otel's one addition (`--distribution`)
//! ```
//!
//! As in 4.8.3: unknown keys, duplicate keys and several YAML documents are errors, names and patterns
//! are trimmed, inline fields need a name, type and help and may not repeat a name, watch groups need a
//! unique name, a positive interval and at least one pattern. Flags and environment variables given
//! explicitly override the file (flag > variable > file > default); the file is read at start only.
//! Every error names `file:line:column`. A relative `metrics.file` is relative to the working directory,
//! as in dcgm-exporter.

use std::path::{Path, PathBuf};
use std::time::Duration;

use serde::Deserialize;

use super::distributions::{parse_spec, GivenSpec};
use super::duration::parse_go_duration;
use super::yaml_position::{duplicate_key, locate, Step};
use crate::counters::plan::MetricsSource;
use crate::counters::watch_groups::WatchGroupSpec;
use crate::counters::{self, CounterSet, CsvError};
use crate::local_file;

/// A rejected configuration file: `file:line:column: message` (no position when unreadable).
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{}", self.describe())]
pub struct ConfigFileError {
    pub path: String,
    pub position: Option<(usize, usize)>,
    pub message: String,
}

impl ConfigFileError {
    fn describe(&self) -> String {
        match self.position {
            Some((l, c)) => format!("{}:{l}:{c}: {}", self.path, self.message),
            None => format!("{}: {}", self.path, self.message),
        }
    }
}

/// A loaded, validated configuration file.
#[derive(Debug, Clone, PartialEq)]
pub struct ConfigFile {
    pub path: PathBuf,
    pub metrics: Option<MetricsSource>,
    /// `collection.interval`.
    pub interval: Option<Duration>,
    /// `collection.watchGroups`, resolved against the counters once they are known.
    pub watch_groups: Vec<WatchGroupSpec>,
    /// `collection.distributions` (dcgm-otel's), checked against the interval once it is known.
    pub distributions: Vec<GivenSpec>,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct Raw {
    version: Option<i64>,
    #[serde(default)]
    metrics: Option<RawMetrics>,
    #[serde(default)]
    collection: Option<RawCollection>,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct RawMetrics {
    #[serde(default)]
    file: Option<String>,
    #[serde(default)]
    fields: Option<Vec<RawField>>,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct RawField {
    #[serde(default)]
    name: String,
    #[serde(default, rename = "prometheusType")]
    prometheus_type: String,
    #[serde(default)]
    help: String,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct RawCollection {
    #[serde(default)]
    interval: Option<String>,
    #[serde(default, rename = "watchGroups")]
    watch_groups: Option<Vec<RawWatchGroup>>,
    #[serde(default)]
    distributions: Option<Vec<String>>,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct RawWatchGroup {
    #[serde(default)]
    name: String,
    #[serde(default)]
    interval: String,
    #[serde(default)]
    fields: Vec<String>,
}

/// Shortest and longest collect interval (the same bounds as `-c`).
const MIN_INTERVAL: Duration = Duration::from_millis(100);
const MAX_INTERVAL: Duration = Duration::from_secs(3600);

/// A Go duration as 4.8.3 takes it here: positive and in whole milliseconds.
fn yaml_duration(text: &str) -> Result<Duration, String> {
    let d = parse_go_duration(text)?;
    if d.is_zero() {
        return Err("must be greater than 0".into());
    }
    if d.subsec_nanos() % 1_000_000 != 0 {
        return Err("must be expressed in whole milliseconds or larger".into());
    }
    Ok(d)
}

/// Read and check a configuration file.
pub fn load(path: &Path) -> Result<ConfigFile, ConfigFileError> {
    let shown = path.display().to_string();
    let text = local_file::read_text(
        path,
        local_file::MAX_CONFIG_BYTES,
        local_file::Links::Follow,
    )
    .map_err(|e| ConfigFileError {
        path: shown.clone(),
        position: None,
        message: format!("cannot read the config file: {e}"),
    })?;
    parse(&text, path)
}

/// Check configuration text (`path` names it in errors).
pub fn parse(text: &str, path: &Path) -> Result<ConfigFile, ConfigFileError> {
    let shown = path.display().to_string();
    let at = |steps: &[Step<'_>], message: String| ConfigFileError {
        path: shown.clone(),
        position: Some(locate(text, steps)),
        message,
    };
    let raw: Raw = serde_norway::from_str(text).map_err(|e| yaml_error(&e, text, &shown))?;
    use Step::Key;
    match raw.version {
        Some(1) => {}
        Some(_) => return Err(at(&[Key("version")], "version must be 1".into())),
        None => return Err(at(&[], "version must be 1 (the key is missing)".into())),
    }
    let metrics = match raw.metrics {
        None => None,
        Some(m) => Some(metrics_source(m, text, &shown, &at)?),
    };
    let (interval, watch_groups, distributions) = match raw.collection {
        None => (None, Vec::new(), Vec::new()),
        Some(c) => collection(c, text, &shown, &at)?,
    };
    Ok(ConfigFile {
        path: path.to_path_buf(),
        metrics,
        interval,
        watch_groups,
        distributions,
    })
}

/// A YAML syntax or shape error, its position in front of the message (a repeated key: the key).
fn yaml_error(e: &serde_norway::Error, text: &str, shown: &str) -> ConfigFileError {
    let message = e.to_string();
    // serde_norway appends " at line L column C"; the position goes in front instead.
    let message = match e.location() {
        Some(l) => message
            .strip_suffix(&format!(" at line {} column {}", l.line(), l.column()))
            .unwrap_or(&message)
            .to_string(),
        None => message,
    };
    let mut position = e.location().map(|l| (l.line(), l.column()));
    // "duplicate field `k`" points at the mapping: name the repeated key instead.
    if let (Some(at), Some(k)) = (
        position,
        message
            .strip_prefix("duplicate field `")
            .or_else(|| message.split(": duplicate field `").nth(1))
            .and_then(|r| r.split('`').next()),
    ) {
        position = duplicate_key(text, at, k).or(position);
    }
    ConfigFileError {
        path: shown.to_string(),
        position,
        message: if message.contains("more than one document") {
            "multiple YAML documents are not supported".into()
        } else {
            message
        },
    }
}

/// `metrics`: exactly one of a counters file or inline fields.
fn metrics_source(
    m: RawMetrics,
    text: &str,
    shown: &str,
    at: &dyn Fn(&[Step<'_>], String) -> ConfigFileError,
) -> Result<MetricsSource, ConfigFileError> {
    let file = m.file.as_deref().map(str::trim).filter(|f| !f.is_empty());
    let fields = m.fields.filter(|f| !f.is_empty());
    match (file, fields) {
        (Some(f), None) => Ok(MetricsSource::File(PathBuf::from(f))),
        (None, Some(fields)) => Ok(MetricsSource::Fields(inline_fields(
            &fields, text, shown, at,
        )?)),
        _ => Err(at(
            &[Step::Key("metrics")],
            "metrics must specify exactly one of file or fields".into(),
        )),
    }
}

/// `collection`, checked: the interval, the watch groups and the sampled fields.
type Collection = (Option<Duration>, Vec<WatchGroupSpec>, Vec<GivenSpec>);

/// `collection`: the interval (within -c's range), the watch groups and the sampled fields.
fn collection(
    c: RawCollection,
    text: &str,
    shown: &str,
    at: &dyn Fn(&[Step<'_>], String) -> ConfigFileError,
) -> Result<Collection, ConfigFileError> {
    use Step::Key;
    let mut interval = None;
    if let Some(text_interval) = c.interval.as_deref().filter(|s| !s.trim().is_empty()) {
        let steps = [Key("collection"), Key("interval")];
        let d = yaml_duration(text_interval)
            .map_err(|e| at(&steps, format!("collection.interval: {e}")))?;
        if !(MIN_INTERVAL..=MAX_INTERVAL).contains(&d) {
            return Err(at(
                &steps,
                format!(
                    "collection.interval: {text_interval} is outside 100ms..1h (the range of -c)"
                ),
            ));
        }
        interval = Some(d);
    }
    let mut watch_groups = Vec::new();
    for (i, g) in c.watch_groups.unwrap_or_default().into_iter().enumerate() {
        let group = watch_group(i, g, &watch_groups, text, shown, at)?;
        watch_groups.push(group);
    }
    let mut distributions = Vec::new();
    for (i, spec) in c.distributions.unwrap_or_default().iter().enumerate() {
        let steps = [Key("collection"), Key("distributions"), Step::Index(i)];
        let spec = parse_spec(spec)
            .map_err(|e| at(&steps, format!("collection.distributions[{i}]: {e}")))?;
        let (l, col) = locate(text, &steps);
        distributions.push(GivenSpec {
            origin: format!(
                "{shown}:{l}:{col}: collection.distributions[{i}] {}@{:?}",
                spec.name, spec.every
            ),
            spec,
        });
    }
    Ok((interval, watch_groups, distributions))
}

/// `collection.watchGroups[i]`: a unique name, an interval and at least one field pattern.
fn watch_group(
    i: usize,
    g: RawWatchGroup,
    earlier: &[WatchGroupSpec],
    text: &str,
    shown: &str,
    at: &dyn Fn(&[Step<'_>], String) -> ConfigFileError,
) -> Result<WatchGroupSpec, ConfigFileError> {
    use Step::{Index, Key};
    let item = [Key("collection"), Key("watchGroups"), Index(i)];
    let key = |k| [item[0], item[1], item[2], Key(k)];
    let name = g.name.trim().to_string();
    if name.is_empty() {
        return Err(at(
            &item,
            format!("collection.watchGroups[{i}].name is required"),
        ));
    }
    if earlier.iter().any(|w| w.name == name) {
        return Err(at(
            &key("name"),
            format!("collection.watchGroups[{i}].name '{name}' is duplicated"),
        ));
    }
    let every = yaml_duration(&g.interval).map_err(|e| {
        at(
            &key("interval"),
            format!("collection.watchGroups[{i}].interval: {e}"),
        )
    })?;
    if g.fields.is_empty() {
        return Err(at(
            &item,
            format!("collection.watchGroups[{i}].fields must not be empty"),
        ));
    }
    let mut patterns = Vec::new();
    for (j, f) in g.fields.iter().enumerate() {
        let f = f.trim();
        if f.is_empty() {
            return Err(at(
                &key("fields"),
                format!("collection.watchGroups[{i}].fields[{j}] is required"),
            ));
        }
        patterns.push(f.to_string());
    }
    let (l, c) = locate(text, &item);
    Ok(WatchGroupSpec {
        name,
        interval: every,
        patterns,
        origin: format!("{shown}:{l}:{c}"),
    })
}

/// RFC 4180 quoting of one CSV field.
fn quote(s: &str) -> String {
    format!("\"{}\"", s.replace('"', "\"\""))
}

/// Inline `metrics.fields` as a counter set: each row is checked by the counters CSV parser (the same
/// names, types and rules as a CSV row), its errors placed at the row's keys in the YAML.
fn inline_fields(
    fields: &[RawField],
    text: &str,
    shown: &str,
    at: &dyn Fn(&[Step<'_>], String) -> ConfigFileError,
) -> Result<CounterSet, ConfigFileError> {
    use Step::{Index, Key};
    let mut set = CounterSet {
        origin: shown.to_string(),
        ..CounterSet::default()
    };
    let mut names: Vec<String> = Vec::new();
    for (i, f) in fields.iter().enumerate() {
        let item = [Key("metrics"), Key("fields"), Index(i)];
        let key = |k| [item[0], item[1], item[2], Key(k)];
        let (name, kind, help) = (f.name.trim(), f.prometheus_type.trim(), f.help.trim());
        for (value, k) in [(name, "name"), (kind, "prometheusType"), (help, "help")] {
            if value.is_empty() {
                return Err(at(&item, format!("metrics.fields[{i}].{k} is required")));
            }
        }
        if let Some(first) = names.iter().position(|n| n == name) {
            return Err(at(
                &key("name"),
                format!(
                    "metrics.fields[{i}].name duplicates metrics.fields[{first}].name '{name}'"
                ),
            ));
        }
        names.push(name.to_string());
        // The row as CSV: `"name","type","help"`; the type starts after the name's quotes and comma.
        let type_col = quote(name).chars().count() + 2;
        let row = format!("{},{},{}\n", quote(name), quote(kind), quote(help));
        let (line, _) = locate(text, &item);
        match counters::parse(&row, shown) {
            Ok(one) => {
                for mut c in one.rows {
                    c.line = line;
                    set.rows.push(c);
                }
                for mut r in one.exporter_rows {
                    r.line = line;
                    set.exporter_rows.push(r);
                }
                set.unsupported_exporter_fields.extend(
                    one.unsupported_exporter_fields
                        .into_iter()
                        .map(|(_, n)| (line, n)),
                );
            }
            Err(CsvError {
                column, message, ..
            }) => {
                let k = if column >= type_col {
                    "prometheusType"
                } else {
                    "name"
                };
                return Err(at(&key(k), format!("metrics.fields[{i}]: {message}")));
            }
        }
    }
    Ok(set)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn err(text: &str) -> String {
        parse(text, Path::new("c.yaml")).unwrap_err().to_string()
    }

    #[test]
    fn the_whole_schema() {
        let c = parse(
            "version: 1\nmetrics:\n  fields:\n    - name: DCGM_FI_DEV_GPU_TEMP\n      prometheusType: gauge\n      help: t\n    - { name: DCGM_FI_DRIVER_VERSION, prometheusType: label, help: d }\ncollection:\n  interval: 1500ms\n  watchGroups:\n    - name: slow\n      interval: 5m\n      fields: [\"DCGM_FI_DEV_*\"]\n",
            Path::new("c.yaml"),
        )
        .unwrap();
        let Some(MetricsSource::Fields(set)) = &c.metrics else {
            panic!("{c:?}")
        };
        assert_eq!(set.rows.len(), 2);
        assert_eq!(set.rows[0].line, 4);
        assert_eq!(c.interval, Some(Duration::from_millis(1500)));
        assert_eq!(c.watch_groups[0].origin, "c.yaml:11:5");
        assert_eq!(c.watch_groups[0].interval, Duration::from_secs(300));
        let c = parse("version: 1\nmetrics: {file: x.csv}\n", Path::new("c.yaml")).unwrap();
        assert_eq!(c.metrics, Some(MetricsSource::File("x.csv".into())));
    }

    #[test]
    fn errors_have_line_and_column() {
        assert_eq!(err("version: 2\n"), "c.yaml:1:1: version must be 1");
        assert_eq!(
            err("version: 1\nmetrics:\n  file: a.csv\n  fields: [{name: X, prometheusType: gauge, help: h}]\n"),
            "c.yaml:2:1: metrics must specify exactly one of file or fields"
        );
        assert_eq!(
            err("version: 1\nmetrics:\n  fields:\n    - name: DCGM_FI_DEV_GPU_TEMP\n      prometheusType: gauge\n      help: t\n    - name: DCGM_FI_NOPE\n      prometheusType: gauge\n      help: t\n"),
            "c.yaml:7:7: metrics.fields[1]: unknown DCGM field 'DCGM_FI_NOPE'"
        );
        assert_eq!(
            err("version: 1\nmetrics:\n  fields:\n    - name: DCGM_FI_DEV_GPU_TEMP\n      prometheusType: histogram\n      help: t\n"),
            "c.yaml:5:7: metrics.fields[0]: type 'histogram' is not supported for a DCGM field (a DCGM field is one number: use gauge or counter)"
        );
        assert_eq!(
            err("version: 1\ncollection:\n  interval: 1.5ms5us\n"),
            "c.yaml:3:3: collection.interval: must be expressed in whole milliseconds or larger"
        );
        assert_eq!(
            err("version: 1\ncollection:\n  watchGroups:\n    - name: a\n      interval: 1m\n      fields: [x]\n    - name: a\n      interval: 1m\n      fields: [y]\n"),
            "c.yaml:7:7: collection.watchGroups[1].name 'a' is duplicated"
        );
        assert_eq!(
            err("version: 1\ncolection:\n  interval: 1s\n"),
            "c.yaml:2:1: unknown field `colection`, expected one of `version`, `metrics`, `collection`"
        );
        assert_eq!(
            err("version: 1\nversion: 1\n"),
            "c.yaml:2:1: duplicate field `version`"
        );
        assert_eq!(
            err("version: 1\n---\nversion: 1\n"),
            "c.yaml: multiple YAML documents are not supported"
        );
    }
}
