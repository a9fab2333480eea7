//! Watch groups (dcgm-exporter 4.8.3's `collection.watchGroups` in `--config-file`): fields whose DCGM
//! watch runs at their own interval instead of the collect interval (e.g. slow-moving counters every
//! 5 minutes). A group names its fields with glob patterns over the counter names (Go `path.Match`:
//! `*`, `?`, `[a-z]`, `[^0-9]`, `\` escapes). As in 4.8.3, a field may match one group at most, and a
//! group that matches no configured field is an error; both are checked whenever a counter set is
//! loaded (at start and on every reload). Fields outside every group are watched at the collect
//! interval. Collection itself still runs every collect interval: a slower group only means DCGM
//! samples those fields less often.

use std::collections::BTreeSet;
use std::time::Duration;

use super::CounterSet;
use crate::fields::FieldId;

/// A watch group as configured.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct WatchGroupSpec {
    pub name: String,
    pub interval: Duration,
    pub patterns: Vec<String>,
    /// Where it is written (`file:line:column`), for messages.
    pub origin: String,
}

/// A watch group resolved against a counter set: the field ids it covers.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct WatchGroup {
    pub name: String,
    pub interval: Duration,
    pub fields: BTreeSet<FieldId>,
}

/// A watch group that cannot be applied to the counter set.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{origin}: {message}")]
pub struct WatchGroupError {
    pub origin: String,
    pub message: String,
}

/// An invalid glob pattern (an unclosed `[`, a trailing `\`).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct BadPattern;

/// Go `path.Match` over a name without `/`: `*` any run of characters, `?` one character, `[...]` a
/// class (`^` negates, `a-z` ranges, `\x` escapes), `\x` the character x.
pub fn glob_match(pattern: &str, name: &str) -> Result<bool, BadPattern> {
    let p: Vec<char> = pattern.chars().collect();
    let n: Vec<char> = name.chars().collect();
    // Validate the whole pattern first (Go reports a bad pattern even when a prefix already fails).
    let mut i = 0;
    while i < p.len() {
        i = match p[i] {
            '[' => class_end(&p, i)?,
            '\\' if i + 1 >= p.len() => return Err(BadPattern),
            '\\' => i + 2,
            _ => i + 1,
        };
    }
    Ok(match_from(&p, 0, &n, 0))
}

/// Index just past the class starting at `p[start] == '['`.
fn class_end(p: &[char], start: usize) -> Result<usize, BadPattern> {
    let mut i = start + 1;
    if p.get(i) == Some(&'^') {
        i += 1;
    }
    let mut first = true;
    loop {
        match p.get(i) {
            None => return Err(BadPattern),
            Some(']') if !first => return Ok(i + 1),
            Some('\\') => {
                if i + 1 >= p.len() {
                    return Err(BadPattern);
                }
                i += 2;
            }
            Some(_) => i += 1,
        }
        first = false;
    }
}

fn class_matches(p: &[char], start: usize, c: char) -> bool {
    let mut i = start + 1;
    let negated = p.get(i) == Some(&'^');
    if negated {
        i += 1;
    }
    let mut hit = false;
    let mut first = true;
    while let Some(&x) = p.get(i) {
        if x == ']' && !first {
            break;
        }
        first = false;
        let (lo, next) = if x == '\\' {
            (p.get(i + 1).copied().unwrap_or(x), i + 2)
        } else {
            (x, i + 1)
        };
        if p.get(next) == Some(&'-') && p.get(next + 1).is_some_and(|c| *c != ']') {
            let (hi, after) = if p[next + 1] == '\\' {
                (p.get(next + 2).copied().unwrap_or('\\'), next + 3)
            } else {
                (p[next + 1], next + 2)
            };
            hit |= lo <= c && c <= hi;
            i = after;
        } else {
            hit |= lo == c;
            i = next;
        }
    }
    hit != negated
}

fn match_from(p: &[char], pi: usize, n: &[char], ni: usize) -> bool {
    if pi == p.len() {
        return ni == n.len();
    }
    match p[pi] {
        '*' => (ni..=n.len()).any(|k| match_from(p, pi + 1, n, k)),
        '?' => ni < n.len() && match_from(p, pi + 1, n, ni + 1),
        '[' => {
            let Ok(end) = class_end(p, pi) else {
                return false;
            };
            ni < n.len() && class_matches(p, pi, n[ni]) && match_from(p, end, n, ni + 1)
        }
        '\\' => ni < n.len() && p.get(pi + 1) == Some(&n[ni]) && match_from(p, pi + 2, n, ni + 1),
        c => ni < n.len() && c == n[ni] && match_from(p, pi + 1, n, ni + 1),
    }
}

/// Resolve `specs` against a counter set's metric rows (by name, as written in the CSV).
pub fn resolve(
    specs: &[WatchGroupSpec],
    counters: &CounterSet,
) -> Result<Vec<WatchGroup>, WatchGroupError> {
    let err = |spec: &WatchGroupSpec, message: String| WatchGroupError {
        origin: spec.origin.clone(),
        message,
    };
    for spec in specs {
        for pattern in &spec.patterns {
            if glob_match(pattern, "").is_err() {
                return Err(err(
                    spec,
                    format!(
                        "watch group '{}' has an invalid field pattern '{pattern}'",
                        spec.name
                    ),
                ));
            }
        }
    }
    let mut out: Vec<WatchGroup> = specs
        .iter()
        .map(|s| WatchGroup {
            name: s.name.clone(),
            interval: s.interval,
            fields: BTreeSet::new(),
        })
        .collect();
    // Every field is matched by its counter names (label rows included: they are watched too).
    let mut owner: Vec<(FieldId, usize)> = Vec::new();
    let mut rows: Vec<(FieldId, &str)> = counters
        .rows
        .iter()
        .map(|c| (c.field.id, c.name.as_str()))
        .collect();
    rows.sort();
    rows.dedup();
    for (field, name) in rows {
        for (g, spec) in specs.iter().enumerate() {
            let hit = spec
                .patterns
                .iter()
                .any(|p| glob_match(p, name).unwrap_or(false));
            if !hit {
                continue;
            }
            match owner.iter().find(|(f, _)| *f == field) {
                Some(&(_, first)) if first != g => {
                    return Err(err(
                        spec,
                        format!(
                            "field {name} matches watch groups '{}' and '{}'; a field may be in one watch group",
                            specs[first].name, spec.name
                        ),
                    ))
                }
                Some(_) => {}
                None => owner.push((field, g)),
            }
            out[g].fields.insert(field);
        }
    }
    if let Some((spec, _)) = specs.iter().zip(&out).find(|(_, g)| g.fields.is_empty()) {
        return Err(err(
            spec,
            format!(
                "watch group '{}' matches no field of {}",
                spec.name, counters.origin
            ),
        ));
    }
    Ok(out)
}

impl CounterSet {
    /// The watch interval of a field in a watch group; `None`: the collect interval.
    pub fn watch_interval(&self, field: FieldId) -> Option<Duration> {
        self.watch_groups
            .iter()
            .find(|g| g.fields.contains(&field))
            .map(|g| g.interval)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn go_path_match() {
        let m = |p: &str, n: &str| glob_match(p, n).unwrap();
        assert!(m("DCGM_FI_DEV_*", "DCGM_FI_DEV_GPU_TEMP"));
        assert!(m("*_TEMP", "DCGM_FI_DEV_GPU_TEMP"));
        assert!(!m("*_TEMP", "DCGM_FI_DEV_GPU_TEMP_X"));
        assert!(m("DCGM_FI_DEV_?PU_TEMP", "DCGM_FI_DEV_GPU_TEMP"));
        assert!(m("DCGM_FI_DEV_[CG]PU_*", "DCGM_FI_DEV_CPU_TEMP"));
        assert!(!m("DCGM_FI_DEV_[^CG]PU_*", "DCGM_FI_DEV_CPU_TEMP"));
        assert!(m("x[a-c]y", "xby"));
        assert!(m("a\\*b", "a*b"));
        assert!(!m("a\\*b", "axb"));
        assert!(m("exact", "exact"));
        assert!(!m("exact", "exactly"));
        assert_eq!(glob_match("[abc", "a"), Err(BadPattern));
        assert_eq!(glob_match("abc\\", "a"), Err(BadPattern));
        assert_eq!(glob_match("[]", "a"), Err(BadPattern));
    }

    fn spec(name: &str, patterns: &[&str]) -> WatchGroupSpec {
        WatchGroupSpec {
            name: name.into(),
            interval: Duration::from_secs(300),
            patterns: patterns.iter().map(|s| s.to_string()).collect(),
            origin: format!("c.yaml:{}:7", name.len()),
        }
    }

    #[test]
    fn groups_resolve_to_fields_once() {
        let set = super::super::parse(
            "DCGM_FI_DEV_GPU_TEMP, gauge, t\nDCGM_FI_DEV_POWER_USAGE, gauge, p\nDCGM_FI_DEV_ROW_REMAP_FAILURE, gauge, r\n",
            "x.csv",
        )
        .unwrap();
        let groups = resolve(&[spec("slow", &["*_REMAP_*", "*TEMP"])], &set).unwrap();
        assert_eq!(groups[0].fields.len(), 2);
        let e = resolve(&[spec("a", &["*TEMP"]), spec("bb", &["DCGM_*"])], &set).unwrap_err();
        assert_eq!(
            e.to_string(),
            "c.yaml:2:7: field DCGM_FI_DEV_GPU_TEMP matches watch groups 'a' and 'bb'; a field may be in one watch group"
        );
        let e = resolve(&[spec("none", &["NOPE*"])], &set).unwrap_err();
        assert_eq!(
            e.to_string(),
            "c.yaml:4:7: watch group 'none' matches no field of x.csv"
        );
        let e = resolve(&[spec("bad", &["[x"])], &set).unwrap_err();
        assert!(e.message.contains("invalid field pattern '[x'"), "{e}");
    }
}
