//! Where a setting's value comes from, highest first: the flag, the signal's variable, the generic
//! variable; each value remembers its source, so an error names the flag or variable. With the
//! parsers of plain values (milliseconds, `k=v` headers).

use std::time::Duration;

use super::config::{OtlpConfigError, Signal};
use crate::export::otel::naming::percent_decode;

/// One setting's value and where it came from.
pub(super) struct Found {
    pub(super) value: String,
    pub(super) source_name: String,
}

pub(super) fn lookup(
    flag: Option<String>,
    flag_name: &str,
    signal: Signal,
    suffix: &str,
    env: &dyn Fn(&str) -> Option<String>,
) -> Option<Found> {
    if let Some(v) = flag {
        return Some(Found {
            value: v,
            source_name: flag_name.to_string(),
        });
    }
    for name in [
        format!("OTEL_EXPORTER_OTLP_{}_{suffix}", signal.env_part()),
        format!("OTEL_EXPORTER_OTLP_{suffix}"),
    ] {
        if let Some(v) = env(&name).filter(|v| !v.trim().is_empty()) {
            return Some(Found {
                value: v.trim().to_string(),
                source_name: name,
            });
        }
    }
    None
}

/// Whether a variable is set to something.
pub(super) fn set(env: &dyn Fn(&str) -> Option<String>, name: &str) -> Option<String> {
    env(name)
        .map(|v| v.trim().to_string())
        .filter(|v| !v.is_empty())
}

/// A setting with a flag and one variable of its own (no per-signal spelling).
pub(super) fn flag_or_var(
    flag: Option<String>,
    flag_name: &str,
    var: &str,
    env: &dyn Fn(&str) -> Option<String>,
) -> Option<Found> {
    let flag = flag.map(|value| Found {
        value,
        source_name: flag_name.into(),
    });
    flag.or_else(|| {
        env(var).filter(|v| !v.trim().is_empty()).map(|v| Found {
            value: v.trim().to_string(),
            source_name: var.into(),
        })
    })
}

pub(super) fn parse_ms(found: &Found) -> Result<Duration, OtlpConfigError> {
    found
        .value
        .parse::<u64>()
        .ok()
        .filter(|ms| *ms > 0)
        .map(Duration::from_millis)
        .ok_or_else(|| OtlpConfigError {
            source_name: found.source_name.clone(),
            message: format!("'{}' is not a positive number of milliseconds", found.value),
        })
}

/// Parse `k=v,k2=v2` headers.
pub fn parse_headers(
    text: &str,
    source_name: &str,
) -> Result<Vec<(String, String)>, OtlpConfigError> {
    let mut out = Vec::new();
    for (i, entry) in text.split(',').enumerate() {
        if entry.trim().is_empty() {
            continue;
        }
        let err = |message: String| OtlpConfigError {
            source_name: source_name.to_string(),
            message: format!("entry {} '{entry}': {message}", i + 1),
        };
        let (k, v) = entry
            .split_once('=')
            .ok_or_else(|| err("expected key=value".into()))?;
        let k = percent_decode(k.trim()).map_err(err)?.to_ascii_lowercase();
        let v = percent_decode(v.trim()).map_err(err)?;
        if k.is_empty()
            || !k
                .bytes()
                .all(|b| b.is_ascii_alphanumeric() || b"-_.".contains(&b))
        {
            return Err(err(
                "header name must be letters, digits, '-', '_' or '.'".into()
            ));
        }
        if v.bytes().any(|b| b < 0x20 && b != b'\t') {
            return Err(err("header value contains a control character".into()));
        }
        out.push((k, v));
    }
    Ok(out)
}
