//! How :9400 writes a value: as dcgm-exporter writes the field's DCGM type (Go's `%f` for doubles,
//! the shortest form otherwise), from a formatter kept on the stack for a render: no allocation per
//! sample; absent, NaN and infinite values write nothing.

use crate::snapshot::FieldValue;
use crate::telemetry::exposition::{whole_f64, write_f64_slow};

/// How a family's values are written.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(super) enum ValueStyle {
    /// Integers as integers, other numbers in shortest round-trip form (DCGM int64 fields, as Go's
    /// `%d` writes them; the derived families).
    Shortest,
    /// Six decimals, as dcgm-exporter writes DCGM double fields (Go's `%f`: `596.753000`).
    SixDecimals,
}

impl ValueStyle {
    pub(super) fn of(t: crate::fields::ValueType) -> ValueStyle {
        match t {
            crate::fields::ValueType::Double => ValueStyle::SixDecimals,
            _ => ValueStyle::Shortest,
        }
    }
}

/// Formats one sample value without allocating.
#[derive(Default)]
pub(super) struct ValueFormatter {
    int: itoa::Buffer,
    slow: String,
}

impl ValueFormatter {
    /// The value's text, or `None` for values that are never written (text, absent, NaN, ±Inf).
    pub(super) fn format<'a>(&'a mut self, v: &FieldValue, style: ValueStyle) -> Option<&'a str> {
        match (v, style) {
            (FieldValue::Int(n), ValueStyle::Shortest) => Some(self.int.format(*n)),
            (FieldValue::Double(d), ValueStyle::Shortest) if d.is_finite() => {
                Some(match whole_f64(*d) {
                    Some(i) => self.int.format(i),
                    None => {
                        self.slow.clear();
                        write_f64_slow(&mut self.slow, *d);
                        &self.slow
                    }
                })
            }
            (FieldValue::Int(n), ValueStyle::SixDecimals) => {
                self.slow.clear();
                self.slow.push_str(self.int.format(*n));
                self.slow.push_str(".000000");
                Some(&self.slow)
            }
            (FieldValue::Double(d), ValueStyle::SixDecimals) if d.is_finite() => {
                use std::fmt::Write as _;
                self.slow.clear();
                // Correctly rounded to six decimals, ties to even: what Go's `%f` writes.
                let _ = write!(self.slow, "{d:.6}");
                Some(&self.slow)
            }
            _ => None,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// DCGM double fields are written as dcgm-exporter writes them (Go's `%f`), ties to even
    /// included; the expected texts are Go 1.26's `fmt.Sprintf("%f", v)` of each value.
    #[test]
    fn double_fields_have_six_decimals_like_go() {
        let mut f = ValueFormatter::default();
        for (v, go) in [
            (0.0078125, "0.007812"),
            (0.0234375, "0.023438"),
            (0.5, "0.500000"),
            (2.5e-7, "0.000000"),
            (0.0000005, "0.000000"),
            (123.4567895, "123.456789"),
            (596.753, "596.753000"),
            (1e21, "1000000000000000000000.000000"),
            (5e-324, "0.000000"),
            (0.1234565, "0.123456"),
            (9.9999995, "9.999999"),
            (-371.113, "-371.113000"),
        ] {
            assert_eq!(
                f.format(&FieldValue::Double(v), ValueStyle::SixDecimals),
                Some(go),
                "{v}"
            );
        }
        assert_eq!(
            f.format(&FieldValue::Int(250), ValueStyle::SixDecimals),
            Some("250.000000")
        );
        assert_eq!(
            f.format(&FieldValue::Double(f64::NAN), ValueStyle::SixDecimals),
            None
        );
        assert_eq!(
            f.format(&FieldValue::Int(7), ValueStyle::Shortest),
            Some("7")
        );
    }

    /// The fast path (itoa for whole numbers) writes exactly what the reference `{}` / `{:e}` formatting writes.
    #[test]
    fn fast_float_paths_match_the_reference() {
        let check = |v: f64| {
            let (mut fast, mut slow) = (String::new(), String::new());
            crate::telemetry::exposition::write_f64(&mut fast, v);
            write_f64_slow(&mut slow, v);
            assert_eq!(fast, slow, "bits {:#x}", v.to_bits());
            let mut f = ValueFormatter::default();
            assert_eq!(
                f.format(&FieldValue::Double(v), ValueStyle::Shortest)
                    .unwrap_or("NaN/Inf"),
                if v.is_finite() {
                    slow.as_str()
                } else {
                    "NaN/Inf"
                }
            );
        };
        let mut x: u64 = 0x9e37_79b9_7f4a_7c15;
        let mut next = || {
            x ^= x << 13;
            x ^= x >> 7;
            x ^= x << 17;
            x
        };
        for _ in 0..200_000 {
            let r = next();
            // any bit pattern
            check(f64::from_bits(r));
            // values around the switch points and the sim's rounded decimals
            let m = (r >> 11) as f64 / (1u64 << 53) as f64;
            let e = (r % 48) as i32 - 24;
            check(m * 10f64.powi(e));
            check(-(m * 10f64.powi(e)));
            check(((m * 1e6).round()) / 1e6);
            check(((m * 1e9).round()) / 1e3);
            check((r % 100_000_000) as f64 / 1000.0);
        }
        for v in [
            1e-5,
            9.999_999_999e-6,
            1e-6,
            0.1,
            0.3,
            2f64.powi(52) - 0.5,
            2f64.powi(53),
            2f64.powi(53) - 1.0,
            1e16,
            1e21,
            1e22,
            123.456,
            f64::MIN_POSITIVE,
            f64::MAX,
            5e-324,
        ] {
            check(v);
            check(-v);
        }
    }
}
