//! Which fields are sampled between collections for their distribution: `--distribution FIELD@INTERVAL`
//! (repeatable; `DCGM_OTEL_DISTRIBUTIONS`, comma-separated) or `--config-file`'s
//! `collection.distributions` list, in the same `FIELD@INTERVAL` grammar. One spec is checked on its
//! own when it is read ([`parse_spec`]: a known numeric DCGM field, a Go duration of at least
//! [`MIN_SAMPLE_INTERVAL`]); the list is checked against the collect interval and for repeated fields
//! once both are known ([`resolve`]). Flag or variable given: the file's list is not used.

use std::sync::Arc;
use std::time::Duration;

use super::duration::parse_go_duration;
use crate::fields::{catalog, FieldId};

/// One distributed field: a numeric DCGM field sampled at its own interval.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct DistributionSpec {
    pub field: FieldId,
    /// The DCGM name as given (`DCGM_FI_DEV_POWER_USAGE`, not its newer alias).
    pub name: String,
    /// How often DCGM samples it.
    pub every: Duration,
}

/// The shortest sample interval: DCGM's watches go finer, but below this the per-sample work of a
/// large node would dominate a collection.
pub const MIN_SAMPLE_INTERVAL: Duration = Duration::from_millis(10);

/// One item of `--distribution` / `DCGM_OTEL_DISTRIBUTIONS`: a spec, or nothing for an empty item (an
/// empty variable, as templates often set, means no distribution).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct DistributionItem(pub Option<DistributionSpec>);

/// [`parse_spec`], an empty item being none.
pub fn parse_item(text: &str) -> Result<DistributionItem, String> {
    if text.trim().is_empty() {
        return Ok(DistributionItem(None));
    }
    parse_spec(text).map(|s| DistributionItem(Some(s)))
}

/// One `FIELD@INTERVAL`, e.g. `DCGM_FI_DEV_POWER_USAGE@100ms`.
pub fn parse_spec(text: &str) -> Result<DistributionSpec, String> {
    let text = text.trim();
    let Some((name, every)) = text.split_once('@') else {
        return Err("expected FIELD@INTERVAL, e.g. DCGM_FI_DEV_POWER_USAGE@100ms".into());
    };
    let (name, every) = (name.trim(), every.trim());
    let Some(field) = catalog().by_name(name) else {
        return Err(format!("unknown DCGM field '{name}'"));
    };
    if !field.value_type.is_numeric() {
        return Err(format!(
            "{name} is not a numeric field; only numbers have a distribution"
        ));
    }
    let every = parse_go_duration(every).map_err(|e| format!("interval '{every}': {e}"))?;
    if every < MIN_SAMPLE_INTERVAL {
        return Err(format!(
            "sample interval {every:?} is below the {MIN_SAMPLE_INTERVAL:?} minimum"
        ));
    }
    Ok(DistributionSpec {
        field: field.id,
        name: name.to_string(),
        every,
    })
}

/// A spec and where it was given, for errors (`--distribution`, a file position).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct GivenSpec {
    pub spec: DistributionSpec,
    /// Names the input: `--distribution DCGM_FI_DEV_POWER_USAGE@100ms (value 1)`, `c.yaml:5:7: ...`.
    pub origin: String,
}

/// The specs from the flag (or its variable, `from_env`) when any, else the file's; each shorter than
/// the collect interval, no field twice. Errors name the input and its position.
pub fn resolve(
    flag: &[DistributionItem],
    from_env: bool,
    file: &[GivenSpec],
    collect: Duration,
) -> Result<Arc<[DistributionSpec]>, String> {
    let flag: Vec<&DistributionSpec> = flag.iter().filter_map(|i| i.0.as_ref()).collect();
    let given: Vec<GivenSpec> = if flag.is_empty() {
        file.to_vec()
    } else {
        let input = if from_env {
            "DCGM_OTEL_DISTRIBUTIONS"
        } else {
            "--distribution"
        };
        flag.iter()
            .enumerate()
            .map(|(i, spec)| GivenSpec {
                origin: format!("{input} {}@{:?} (value {})", spec.name, spec.every, i + 1),
                spec: (*spec).clone(),
            })
            .collect()
    };
    for (i, g) in given.iter().enumerate() {
        if g.spec.every >= collect {
            return Err(format!(
                "{}: the sample interval must be shorter than the collect interval ({collect:?})",
                g.origin
            ));
        }
        if let Some(first) = given[..i].iter().find(|f| f.spec.field == g.spec.field) {
            return Err(format!(
                "{}: {} is already sampled by {}; a field has one sample interval",
                g.origin, g.spec.name, first.origin
            ));
        }
    }
    Ok(given.into_iter().map(|g| g.spec).collect())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn specs_parse_and_explain_themselves() {
        let s = parse_spec(" DCGM_FI_DEV_POWER_USAGE@100ms ").unwrap();
        assert_eq!((s.field, s.every), (155, Duration::from_millis(100)));
        for (text, error) in [
            (
                "DCGM_FI_DEV_POWER_USAGE",
                "expected FIELD@INTERVAL, e.g. DCGM_FI_DEV_POWER_USAGE@100ms",
            ),
            ("DCGM_FI_NOPE@1s", "unknown DCGM field 'DCGM_FI_NOPE'"),
            (
                "DCGM_FI_DRIVER_VERSION@1s",
                "DCGM_FI_DRIVER_VERSION is not a numeric field; only numbers have a distribution",
            ),
            (
                "DCGM_FI_DEV_GPU_UTIL@5ms",
                "sample interval 5ms is below the 10ms minimum",
            ),
        ] {
            assert_eq!(parse_spec(text).unwrap_err(), error, "{text}");
        }
    }

    #[test]
    fn the_list_is_checked_against_the_interval_and_itself() {
        let p = |t| parse_item(t).unwrap();
        let collect = Duration::from_secs(1);
        let flag = [
            p("DCGM_FI_DEV_POWER_USAGE@100ms"),
            p("DCGM_FI_DEV_GPU_UTIL@1s"),
        ];
        assert_eq!(
            resolve(&flag, false, &[], collect).unwrap_err(),
            "--distribution DCGM_FI_DEV_GPU_UTIL@1s (value 2): the sample interval must be shorter than the collect interval (1s)"
        );
        let flag = [
            p("DCGM_FI_DEV_POWER_USAGE@100ms"),
            p("DCGM_FI_DEV_POWER_USAGE@200ms"),
        ];
        assert_eq!(
            resolve(&flag, true, &[], collect).unwrap_err(),
            "DCGM_OTEL_DISTRIBUTIONS DCGM_FI_DEV_POWER_USAGE@200ms (value 2): DCGM_FI_DEV_POWER_USAGE is already sampled by DCGM_OTEL_DISTRIBUTIONS DCGM_FI_DEV_POWER_USAGE@100ms (value 1); a field has one sample interval"
        );
        // The flag wins over the file.
        let file = [GivenSpec {
            spec: parse_spec("DCGM_FI_DEV_GPU_UTIL@250ms").unwrap(),
            origin: "c.yaml:4:7".into(),
        }];
        let got = resolve(&flag[..1], false, &file, collect).unwrap();
        assert_eq!(got[0].field, 155);
        let got = resolve(&[], false, &file, collect).unwrap();
        assert_eq!(got[0].field, 203);
        // An empty variable is no item: the file's list stands.
        let got = resolve(&[p("")], true, &file, collect).unwrap();
        assert_eq!(got[0].field, 203);
    }
}
