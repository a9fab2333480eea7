//! Go duration strings (`10s`, `500ms`, `1m30s`, `1.5h`) as dcgm-exporter's flags take them
//! (`--web-read-timeout`, `--web-write-timeout`). Same units as Go's `time.ParseDuration`: ns, us (µs),
//! ms, s, m, h; a bare `0` is zero. Negative durations are refused: every flag using this is a timeout.

use std::time::Duration;

/// Parse a Go duration string.
pub fn parse_go_duration(input: &str) -> Result<Duration, String> {
    let s = input.trim();
    if s == "0" {
        return Ok(Duration::ZERO);
    }
    if s.is_empty() {
        return Err("empty duration (expected e.g. 10s, 500ms, 1m)".to_string());
    }
    if s.starts_with('-') {
        return Err(format!("'{input}': a timeout cannot be negative"));
    }
    let s = s.strip_prefix('+').unwrap_or(s);
    let mut rest = s;
    let mut total_ns: f64 = 0.0;
    while !rest.is_empty() {
        let num_len = rest
            .find(|c: char| !(c.is_ascii_digit() || c == '.'))
            .unwrap_or(rest.len());
        if num_len == 0 {
            return Err(format!("'{input}': expected a number before '{rest}'"));
        }
        let number: f64 = rest[..num_len]
            .parse()
            .map_err(|_| format!("'{input}': '{}' is not a number", &rest[..num_len]))?;
        rest = &rest[num_len..];
        let unit_len = rest
            .find(|c: char| c.is_ascii_digit() || c == '.')
            .unwrap_or(rest.len());
        let unit = &rest[..unit_len];
        rest = &rest[unit_len..];
        let scale: f64 = match unit {
            "ns" => 1.0,
            "us" | "µs" | "μs" => 1e3,
            "ms" => 1e6,
            "s" => 1e9,
            "m" => 60e9,
            "h" => 3600e9,
            "" => return Err(format!("'{input}': missing unit (ns, us, ms, s, m, h)")),
            other => {
                return Err(format!(
                    "'{input}': unknown unit '{other}' (ns, us, ms, s, m, h)"
                ))
            }
        };
        total_ns += number * scale;
    }
    if !total_ns.is_finite() || total_ns > u64::MAX as f64 {
        return Err(format!("'{input}': duration too large"));
    }
    Ok(Duration::from_nanos(total_ns.round() as u64))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn go_forms() {
        assert_eq!(parse_go_duration("10s").unwrap(), Duration::from_secs(10));
        assert_eq!(
            parse_go_duration("500ms").unwrap(),
            Duration::from_millis(500)
        );
        assert_eq!(parse_go_duration("1m").unwrap(), Duration::from_secs(60));
        assert_eq!(parse_go_duration("1m30s").unwrap(), Duration::from_secs(90));
        assert_eq!(
            parse_go_duration("1.5h").unwrap(),
            Duration::from_secs(5400)
        );
        assert_eq!(
            parse_go_duration("250us").unwrap(),
            Duration::from_micros(250)
        );
        assert_eq!(parse_go_duration("0").unwrap(), Duration::ZERO);
    }

    #[test]
    fn bad_forms() {
        for bad in ["", "10", "s", "10x", "-1s", "1..5s", "1s2"] {
            assert!(parse_go_duration(bad).is_err(), "{bad}");
        }
    }
}
