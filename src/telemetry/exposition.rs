//! The Prometheus text format's primitives, shared by the dcgm-exporter renderer and the self-metrics:
//! numbers written the way Prometheus reads them (shortest round-trip digits, integers without a dot,
//! exponents outside the plain range) and label values and help texts escaped.

use std::fmt::Write as _;

/// Write a float the way Prometheus reads it: shortest round-trip digits, integers without a dot.
#[inline]
pub fn write_f64(out: &mut String, v: f64) {
    match whole_f64(v) {
        Some(i) => out.push_str(itoa::Buffer::new().format(i)),
        None => write_f64_slow(out, v),
    }
}

/// `Some(i)` when `v` is a whole number below 2^53 (and not -0): then its shortest round-trip digits are
/// exactly its integer digits, which itoa writes far faster than `{}`. (Non-whole values keep `{}`:
/// ryu, for one, breaks ties between equally short digit strings differently.)
#[inline]
pub fn whole_f64(v: f64) -> Option<i64> {
    const TWO_POW_53: f64 = 9_007_199_254_740_992.0;
    (v.trunc() == v && v.abs() < TWO_POW_53 && !(v == 0.0 && v.is_sign_negative()))
        .then_some(v as i64)
}

/// The reference formatting: `{}` (shortest round-trip digits) in the range Prometheus reads as plain
/// decimals, `{:e}` outside it.
pub fn write_f64_slow(out: &mut String, v: f64) {
    if v.is_nan() {
        out.push_str("NaN");
    } else if v.is_infinite() {
        out.push_str(if v > 0.0 { "+Inf" } else { "-Inf" });
    } else if v != 0.0 && (v.abs() >= 1e21 || v.abs() < 1e-6) {
        let _ = write!(out, "{v:e}");
    } else {
        let _ = write!(out, "{v}");
    }
}

/// Escape a label value for the text format (`\\`, `\"`, `\n`).
#[inline]
pub fn escape_label_value(v: &str, out: &mut String) {
    if !v.contains(['\\', '"', '\n']) {
        out.push_str(v);
        return;
    }
    for c in v.chars() {
        match c {
            '\\' => out.push_str("\\\\"),
            '"' => out.push_str("\\\""),
            '\n' => out.push_str("\\n"),
            c => out.push(c),
        }
    }
}

/// Escape a `# HELP` text (`\\`, `\n`).
pub fn escape_help(v: &str, out: &mut String) {
    for c in v.chars() {
        match c {
            '\\' => out.push_str("\\\\"),
            '\n' => out.push_str("\\n"),
            c => out.push(c),
        }
    }
}

/// Append `name="value"` to a label list, with a comma unless it is the first.
#[inline]
pub fn push_label(out: &mut String, first: &mut bool, name: &str, value: &str) {
    if !*first {
        out.push(',');
    }
    *first = false;
    out.push_str(name);
    out.push_str("=\"");
    escape_label_value(value, out);
    out.push('"');
}

/// The label names of a label list written by [`push_label`] (`a="x",b="y\"z"` → `a`, `b`): what an
/// added label must not repeat (Prometheus rejects a whole scrape with a duplicate label name).
pub fn label_names(labels: &str) -> Vec<&str> {
    let mut names = Vec::new();
    let mut rest = labels;
    while let Some(eq) = rest.find("=\"") {
        names.push(rest[..eq].trim_start_matches(','));
        // Skip the value: up to the first quote not escaped by a backslash.
        let value = &rest[eq + 2..];
        let mut end = None;
        let mut escaped = false;
        for (i, c) in value.char_indices() {
            match c {
                _ if escaped => escaped = false,
                '\\' => escaped = true,
                '"' => {
                    end = Some(i);
                    break;
                }
                _ => {}
            }
        }
        let Some(end) = end else { break };
        rest = &value[end + 1..];
    }
    names
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn label_names_skip_escaped_quotes_in_values() {
        let mut s = String::new();
        let mut first = true;
        push_label(&mut s, &mut first, "gpu", "0");
        push_label(&mut s, &mut first, "modelName", "a \"quoted\",b=\"x\" name");
        push_label(&mut s, &mut first, "Hostname", "h\\");
        assert_eq!(label_names(&s), vec!["gpu", "modelName", "Hostname"]);
        assert!(label_names("").is_empty());
    }

    #[test]
    fn floats_are_prometheus_friendly() {
        let f = |v: f64| {
            let mut s = String::new();
            write_f64(&mut s, v);
            s
        };
        assert_eq!(f(30.982), "30.982");
        assert_eq!(f(42.0), "42");
        assert_eq!(f(0.0), "0");
        assert_eq!(f(1.5e22), "1.5e22");
        assert_eq!(f(2.5e-9), "2.5e-9");
        assert_eq!(f(-0.0), "-0");
        assert_eq!(f(1e-5), "0.00001");
        assert_eq!(f(f64::NAN), "NaN");
        assert_eq!(f(f64::NEG_INFINITY), "-Inf");
        assert_eq!(f(1_152_921_504_606_846_976.0), "1152921504606847000");
    }
}
