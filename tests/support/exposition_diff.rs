//! Two Prometheus text bodies compared series by series, the way a dashboard or an alert would notice:
//! `# HELP` / `# TYPE` texts, how many blocks a family is written in, which families and series exist,
//! label names and their order, label values, and each value's text. The result is a list of
//! [`Difference`]s, each a small record a deliberate-difference list ([`DifferenceList`], loaded from
//! `tests/fixtures/dcgm-exporter/differences.yaml`) can name.
//!
//! Family order is not compared: dcgm-exporter writes its entity groups in Go map order, which changes
//! from scrape to scrape. Comment lines other than `# HELP` / `# TYPE` are ignored (captures carry
//! their provenance in them).

use std::collections::BTreeMap;
use std::fmt;

/// Which exporter a one-sided difference is on.
#[derive(Clone, Copy, Debug, PartialEq, Eq, serde::Deserialize)]
pub enum Side {
    #[serde(rename = "dcgm-exporter")]
    Exporter,
    #[serde(rename = "dcgm-otel")]
    Otel,
}

impl fmt::Display for Side {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            Side::Exporter => "dcgm-exporter",
            Side::Otel => "dcgm-otel",
        })
    }
}

/// One series: its labels in written order and its value text.
#[derive(Clone, Debug, PartialEq)]
pub struct Sample {
    pub labels: Vec<(String, String)>,
    pub value: String,
}

impl Sample {
    fn key(&self) -> Vec<(String, String)> {
        let mut k = self.labels.clone();
        k.sort();
        k
    }

    pub fn label_text(&self) -> String {
        let inner: Vec<String> = self
            .labels
            .iter()
            .map(|(k, v)| format!("{k}=\"{v}\""))
            .collect();
        format!("{{{}}}", inner.join(","))
    }
}

/// A family: its HELP and TYPE texts (one per block it is written in) and its samples in order.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct Family {
    pub help: Vec<String>,
    pub kind: Vec<String>,
    pub samples: Vec<Sample>,
}

/// A parsed body.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct Body {
    pub families: BTreeMap<String, Family>,
}

/// A line the parser could not read.
#[derive(Debug)]
pub struct ParseError(pub String);

impl fmt::Display for ParseError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.0)
    }
}

/// Split `name{a="x",b="y"} value` (label values may hold escaped quotes and commas).
fn parse_sample(line: &str) -> Option<(String, Sample)> {
    let (series, value) = line.rsplit_once(' ')?;
    let (name, labels) = match series.split_once('{') {
        None => (series.to_string(), Vec::new()),
        Some((name, rest)) => {
            let rest = rest.strip_suffix('}')?;
            let mut labels = Vec::new();
            let mut chars = rest.chars().peekable();
            while chars.peek().is_some() {
                let key: String = chars.by_ref().take_while(|c| *c != '=').collect();
                if chars.next() != Some('"') {
                    return None;
                }
                let mut val = String::new();
                loop {
                    match chars.next()? {
                        '\\' => {
                            val.push('\\');
                            val.push(chars.next()?);
                        }
                        '"' => break,
                        c => val.push(c),
                    }
                }
                labels.push((key, val));
                if chars.peek() == Some(&',') {
                    chars.next();
                }
            }
            (name.to_string(), labels)
        }
    };
    Some((
        name,
        Sample {
            labels,
            value: value.to_string(),
        },
    ))
}

impl Body {
    /// Parse a Prometheus text body. Samples before their family's `# HELP`/`# TYPE` still belong to
    /// the family of their name.
    pub fn parse(text: &str) -> Result<Body, ParseError> {
        let mut body = Body::default();
        for (i, line) in text.lines().enumerate() {
            let line = line.trim_end();
            if line.is_empty() {
                continue;
            }
            if let Some(rest) = line.strip_prefix("# HELP ") {
                let (name, help) = rest.split_once(' ').unwrap_or((rest, ""));
                let fam = body.families.entry(name.to_string()).or_default();
                fam.help.push(help.to_string());
                continue;
            }
            if let Some(rest) = line.strip_prefix("# TYPE ") {
                let (name, kind) = rest.split_once(' ').unwrap_or((rest, ""));
                let fam = body.families.entry(name.to_string()).or_default();
                fam.kind.push(kind.to_string());
                continue;
            }
            if line.starts_with('#') {
                continue;
            }
            let (name, sample) = parse_sample(line)
                .ok_or_else(|| ParseError(format!("line {}: cannot read {line:?}", i + 1)))?;
            body.families.entry(name).or_default().samples.push(sample);
        }
        Ok(body)
    }
}

/// What differs between dcgm-exporter's body and dcgm-otel's.
#[derive(Clone, Debug, PartialEq)]
pub enum Difference {
    /// A family (with its samples) only one exporter writes.
    FamilyOnly { side: Side, family: String },
    /// The `# HELP` texts differ.
    Help {
        family: String,
        exporter: String,
        otel: String,
    },
    /// The `# TYPE`s differ.
    Type {
        family: String,
        exporter: String,
        otel: String,
    },
    /// The family is written in a different number of `# HELP`/`# TYPE` blocks.
    FamilyBlocks {
        family: String,
        exporter: usize,
        otel: usize,
    },
    /// A series (label set) only one exporter writes, or writes more often.
    SeriesOnly {
        side: Side,
        family: String,
        sample: Sample,
    },
    /// The same label set written in another order.
    LabelOrder {
        family: String,
        exporter: Sample,
        otel: Sample,
    },
    /// The same series with another value.
    Value {
        family: String,
        exporter: Sample,
        otel: Sample,
    },
    /// The same value written differently (e.g. `1.5` and `1.500000`).
    ValueFormat {
        family: String,
        exporter: Sample,
        otel: Sample,
    },
}

impl Difference {
    pub fn kind(&self) -> &'static str {
        match self {
            Difference::FamilyOnly { .. } => "family_only",
            Difference::Help { .. } => "help",
            Difference::Type { .. } => "type",
            Difference::FamilyBlocks { .. } => "family_blocks",
            Difference::SeriesOnly { .. } => "series_only",
            Difference::LabelOrder { .. } => "label_order",
            Difference::Value { .. } => "value",
            Difference::ValueFormat { .. } => "value_format",
        }
    }

    pub fn family(&self) -> &str {
        match self {
            Difference::FamilyOnly { family, .. }
            | Difference::Help { family, .. }
            | Difference::Type { family, .. }
            | Difference::FamilyBlocks { family, .. }
            | Difference::SeriesOnly { family, .. }
            | Difference::LabelOrder { family, .. }
            | Difference::Value { family, .. }
            | Difference::ValueFormat { family, .. } => family,
        }
    }

    pub fn side(&self) -> Option<Side> {
        match self {
            Difference::FamilyOnly { side, .. } | Difference::SeriesOnly { side, .. } => {
                Some(*side)
            }
            _ => None,
        }
    }

    /// The series' labels a difference is about (dcgm-otel's where both have one).
    pub fn labels(&self) -> &[(String, String)] {
        match self {
            Difference::SeriesOnly { sample, .. } => &sample.labels,
            Difference::LabelOrder { otel, .. }
            | Difference::Value { otel, .. }
            | Difference::ValueFormat { otel, .. } => &otel.labels,
            _ => &[],
        }
    }
}

impl fmt::Display for Difference {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Difference::FamilyOnly { side, family } => write!(f, "family only in {side}: {family}"),
            Difference::Help {
                family,
                exporter,
                otel,
            } => write!(
                f,
                "HELP of {family}: dcgm-exporter {exporter:?}, dcgm-otel {otel:?}"
            ),
            Difference::Type {
                family,
                exporter,
                otel,
            } => write!(
                f,
                "TYPE of {family}: dcgm-exporter {exporter}, dcgm-otel {otel}"
            ),
            Difference::FamilyBlocks {
                family,
                exporter,
                otel,
            } => write!(
                f,
                "{family} written in {exporter} HELP/TYPE block(s) by dcgm-exporter, {otel} by dcgm-otel"
            ),
            Difference::SeriesOnly {
                side,
                family,
                sample,
            } => write!(
                f,
                "series only in {side}: {family}{} {}",
                sample.label_text(),
                sample.value
            ),
            Difference::LabelOrder {
                family,
                exporter,
                otel,
            } => write!(
                f,
                "label order of {family}: dcgm-exporter {}, dcgm-otel {}",
                exporter.label_text(),
                otel.label_text()
            ),
            Difference::Value {
                family,
                exporter,
                otel,
            } => write!(
                f,
                "value of {family}{}: dcgm-exporter {}, dcgm-otel {}",
                otel.label_text(),
                exporter.value,
                otel.value
            ),
            Difference::ValueFormat {
                family,
                exporter,
                otel,
            } => write!(
                f,
                "value text of {family}{}: dcgm-exporter {:?}, dcgm-otel {:?}",
                otel.label_text(),
                exporter.value,
                otel.value
            ),
        }
    }
}

fn same_number(a: &str, b: &str) -> bool {
    match (a.parse::<f64>(), b.parse::<f64>()) {
        (Ok(x), Ok(y)) => x == y || (x.is_nan() && y.is_nan()),
        _ => false,
    }
}

/// The samples of one family, compared as multisets of label sets (pairs taken in written order).
fn compare_samples(family: &str, exp: &[Sample], otel: &[Sample], out: &mut Vec<Difference>) {
    // Per label set, dcgm-otel's samples (indices) not paired yet, first written first.
    let mut unpaired: BTreeMap<Vec<(String, String)>, std::collections::VecDeque<usize>> =
        BTreeMap::new();
    for (i, s) in otel.iter().enumerate() {
        unpaired.entry(s.key()).or_default().push_back(i);
    }
    let mut paired = vec![false; otel.len()];
    for e in exp {
        let Some(i) = unpaired.get_mut(&e.key()).and_then(|q| q.pop_front()) else {
            out.push(Difference::SeriesOnly {
                side: Side::Exporter,
                family: family.to_string(),
                sample: e.clone(),
            });
            continue;
        };
        paired[i] = true;
        let (exporter, otel) = (e.clone(), otel[i].clone());
        if exporter.labels != otel.labels {
            out.push(Difference::LabelOrder {
                family: family.to_string(),
                exporter: exporter.clone(),
                otel: otel.clone(),
            });
        }
        if exporter.value != otel.value {
            let same = same_number(&exporter.value, &otel.value);
            let family = family.to_string();
            out.push(if same {
                Difference::ValueFormat {
                    family,
                    exporter,
                    otel,
                }
            } else {
                Difference::Value {
                    family,
                    exporter,
                    otel,
                }
            });
        }
    }
    for (s, _) in otel.iter().zip(&paired).filter(|(_, p)| !**p) {
        out.push(Difference::SeriesOnly {
            side: Side::Otel,
            family: family.to_string(),
            sample: s.clone(),
        });
    }
}

/// Every difference between dcgm-exporter's body and dcgm-otel's.
pub fn compare(exporter: &Body, otel: &Body) -> Vec<Difference> {
    let mut out = Vec::new();
    for (name, e) in &exporter.families {
        let Some(o) = otel.families.get(name) else {
            out.push(Difference::FamilyOnly {
                side: Side::Exporter,
                family: name.clone(),
            });
            continue;
        };
        let first = |v: &[String]| v.first().cloned().unwrap_or_default();
        if first(&e.help) != first(&o.help) {
            out.push(Difference::Help {
                family: name.clone(),
                exporter: first(&e.help),
                otel: first(&o.help),
            });
        }
        if first(&e.kind) != first(&o.kind) {
            out.push(Difference::Type {
                family: name.clone(),
                exporter: first(&e.kind),
                otel: first(&o.kind),
            });
        }
        if e.help.len() != o.help.len() {
            out.push(Difference::FamilyBlocks {
                family: name.clone(),
                exporter: e.help.len(),
                otel: o.help.len(),
            });
        }
        compare_samples(name, &e.samples, &o.samples, &mut out);
    }
    for name in otel.families.keys() {
        if !exporter.families.contains_key(name) {
            out.push(Difference::FamilyOnly {
                side: Side::Otel,
                family: name.clone(),
            });
        }
    }
    out
}

/// `*` matches any run of characters (including none); everything else literally.
pub fn glob(pattern: &str, text: &str) -> bool {
    let Some((head, rest)) = pattern.split_once('*') else {
        return pattern == text;
    };
    let Some(mut text) = text.strip_prefix(head) else {
        return false;
    };
    if rest.is_empty() {
        return true;
    }
    loop {
        if glob(rest, text) {
            return true;
        }
        let mut chars = text.chars();
        if chars.next().is_none() {
            return false;
        }
        text = chars.as_str();
    }
}

/// What a list entry covers: every condition given must hold.
#[derive(Clone, Debug, Default, serde::Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Match {
    /// The [`Difference::kind`].
    pub kind: String,
    /// Glob on the family name.
    #[serde(default)]
    pub family: Option<String>,
    /// The side of a one-sided difference.
    #[serde(default)]
    pub side: Option<Side>,
    /// Labels the series must carry, with a glob on each value.
    #[serde(default)]
    pub labels: BTreeMap<String, String>,
    /// A glob on dcgm-exporter's side of a HELP/TYPE difference.
    #[serde(default)]
    pub exporter: Option<String>,
    /// A glob on dcgm-otel's side of a HELP/TYPE difference.
    #[serde(default)]
    pub otel: Option<String>,
}

impl Match {
    pub fn covers(&self, d: &Difference) -> bool {
        if self.kind != d.kind() {
            return false;
        }
        if self.family.as_deref().is_some_and(|f| !glob(f, d.family())) {
            return false;
        }
        if self.side.is_some() && self.side != d.side() {
            return false;
        }
        let labels = d.labels();
        let has = |k: &String, pat: &String| labels.iter().any(|(n, v)| n == k && glob(pat, v));
        if !self.labels.iter().all(|(k, pat)| has(k, pat)) {
            return false;
        }
        let (exp, otel) = match d {
            Difference::Help { exporter, otel, .. } | Difference::Type { exporter, otel, .. } => {
                (Some(exporter.as_str()), Some(otel.as_str()))
            }
            _ => (None, None),
        };
        let side_ok = |pat: &Option<String>, text: Option<&str>| match (pat, text) {
            (None, _) => true,
            (Some(p), Some(t)) => glob(p, t),
            (Some(_), None) => false,
        };
        side_ok(&self.exporter, exp) && side_ok(&self.otel, otel)
    }
}

/// One deliberate difference: what differs, why a dcgm-exporter user would accept it, what it covers.
#[derive(Clone, Debug, serde::Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Entry {
    pub id: String,
    pub what: String,
    pub why: String,
    /// Cases it may occur in (none: any).
    #[serde(default)]
    pub cases: Vec<String>,
    #[serde(rename = "match")]
    pub matches: Vec<Match>,
}

impl Entry {
    pub fn covers(&self, case: &str, d: &Difference) -> bool {
        (self.cases.is_empty() || self.cases.iter().any(|c| c == case))
            && self.matches.iter().any(|m| m.covers(d))
    }
}

/// The deliberate-difference list.
#[derive(Clone, Debug, serde::Deserialize)]
#[serde(transparent)]
pub struct DifferenceList(pub Vec<Entry>);

impl DifferenceList {
    pub fn parse(yaml: &str) -> Result<DifferenceList, String> {
        let list: DifferenceList = serde_norway::from_str(yaml).map_err(|e| e.to_string())?;
        let mut ids: Vec<&str> = list.0.iter().map(|e| e.id.as_str()).collect();
        ids.sort_unstable();
        if let Some(w) = ids.windows(2).find(|w| w[0] == w[1]) {
            return Err(format!("entry id {:?} is used twice", w[0]));
        }
        Ok(list)
    }

    /// The entry that covers `d` in `case`, if any.
    pub fn covering(&self, case: &str, d: &Difference) -> Option<&Entry> {
        self.0.iter().find(|e| e.covers(case, d))
    }

    /// The list as the Markdown table docs/metrics.md shows.
    pub fn markdown(&self) -> String {
        let mut out = String::from("| What differs | Why |\n|---|---|\n");
        for e in &self.0 {
            out.push_str(&format!(
                "| {} | {} |\n",
                e.what.replace('|', "\\|"),
                e.why.replace('|', "\\|")
            ));
        }
        out
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn diffs(exp: &str, otel: &str) -> Vec<Difference> {
        compare(&Body::parse(exp).unwrap(), &Body::parse(otel).unwrap())
    }

    #[test]
    fn identical_bodies_in_any_family_order_have_no_difference() {
        let a = "# HELP a A.\n# TYPE a gauge\na{x=\"1\"} 1\n# HELP b B.\n# TYPE b counter\nb 2\n";
        let b = "# HELP b B.\n# TYPE b counter\nb 2\n# capture: comment\n# HELP a A.\n# TYPE a gauge\na{x=\"1\"} 1\n";
        assert_eq!(diffs(a, b), vec![]);
    }

    #[test]
    fn every_kind_is_found() {
        let exp = "# HELP a A.\n# TYPE a gauge\na{x=\"1\",y=\"2\"} 1.500000\na{x=\"2\",y=\"2\"} 3\na{x=\"3\",y=\"2\"} 4\n\
                   # HELP s S.\n# TYPE s gauge\ns 1\n# HELP s S.\n# TYPE s gauge\ns 1\n# HELP e E.\n# TYPE e gauge\ne 1\n";
        let otel = "# HELP a A!\n# TYPE a counter\na{y=\"2\",x=\"1\"} 1.5\na{x=\"2\",y=\"2\"} 5\na{x=\"4\",y=\"2\"} 4\n\
                    # HELP s S.\n# TYPE s gauge\ns 1\ns 1\n# HELP o O.\n# TYPE o gauge\no 1\n";
        let kinds: Vec<&str> = diffs(exp, otel).iter().map(Difference::kind).collect();
        assert_eq!(
            kinds,
            vec![
                "help",
                "type",
                "label_order",
                "value_format",
                "value",
                "series_only",
                "series_only",
                "family_only",
                "family_blocks",
                "family_only"
            ]
        );
    }

    #[test]
    fn escaped_label_values_and_globs() {
        let b = Body::parse("m{a=\"x\\\"y,z\",b=\"\"} 1\n").unwrap();
        let s = &b.families["m"].samples[0];
        assert_eq!(s.labels[0], ("a".into(), "x\\\"y,z".into()));
        assert_eq!(s.labels[1], ("b".into(), String::new()));
        assert!(glob(
            "DCGM_FI_DEV_NVSWITCH_*",
            "DCGM_FI_DEV_NVSWITCH_POWER_VDD"
        ));
        assert!(glob("*_TOTAL", "X_TOTAL"));
        assert!(glob("a*b*c", "aXXbYYc"));
        assert!(!glob("a*b*c", "aXXbYY"));
        assert!(glob("*", ""));
    }
}
