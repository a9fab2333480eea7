//! Turning one DCGM field value into a [`FieldValue`]: the per-value status, the blank sentinels and the
//! type a counter row expects.
//!
//! A value is a number only when DCGM says OK *and* the payload is not one of the blank sentinels
//! (`DCGM_INT32_BLANK`.. and `DCGM_INT64_BLANK`.. for integers — 64-bit fields can carry narrowed 32-bit
//! sentinels —, `2^47`.. for doubles, `<<<...>>>` for strings). Everything else becomes
//! [`FieldValue::Absent`] with the reason, never a number.

use super::ffi;
use crate::counters::MetricKind;
use crate::snapshot::{Absent, FieldValue};

/// A decoded payload, as the field type says it should be read.
#[derive(Debug, Clone, PartialEq)]
pub enum Payload {
    Int(i64),
    Double(f64),
    /// A string up to its terminating NUL (lossy UTF-8).
    Text(String),
    /// `DCGM_FT_BINARY`: never rendered.
    Binary,
    /// A field type this binding does not know.
    Unknown(u16),
}

/// The reason a non-OK per-value status gives.
pub fn absent_for_status(status: i32) -> Absent {
    match status {
        ffi::DCGM_ST_NOT_SUPPORTED
        | ffi::DCGM_ST_FIELD_UNSUPPORTED_BY_API
        | ffi::DCGM_ST_PROFILING_NOT_SUPPORTED => Absent::NotSupported,
        ffi::DCGM_ST_NO_DATA
        | ffi::DCGM_ST_STALE_DATA
        | ffi::DCGM_ST_NOT_WATCHED
        | ffi::DCGM_ST_PENDING => Absent::Blank,
        ffi::DCGM_ST_NO_PERMISSION | ffi::DCGM_ST_REQUIRES_ROOT => Absent::NotPermissioned,
        ffi::DCGM_ST_UNKNOWN_FIELD
        | ffi::DCGM_ST_INSTANCE_NOT_FOUND
        | ffi::DCGM_ST_COMPUTE_INSTANCE_NOT_FOUND => Absent::NotFound,
        _ => Absent::Error,
    }
}

/// Why an integer value is a blank sentinel (`None`: a real value).
pub fn int_sentinel(v: i64) -> Option<Absent> {
    let i32_blank = ffi::DCGM_INT32_BLANK;
    let reason = |offset: i64| match offset {
        0 => Absent::Blank,
        1 => Absent::NotFound,
        2 => Absent::NotSupported,
        3 => Absent::NotPermissioned,
        _ => Absent::Blank,
    };
    if (i32_blank..=i32_blank + 3).contains(&v) {
        return Some(reason(v - i32_blank));
    }
    if v >= ffi::DCGM_INT64_BLANK {
        return Some(reason(v - ffi::DCGM_INT64_BLANK));
    }
    None
}

/// One sampled value as a number (a sub-interval distribution's sample): status OK, an integer or
/// double type, and not a blank sentinel; anything else is `None` and never folded in.
pub fn sample_number(v: &ffi::dcgmFieldValue_v1) -> Option<f64> {
    if v.status != ffi::DCGM_ST_OK {
        return None;
    }
    match u8::try_from(v.fieldType) {
        Ok(ffi::DCGM_FT_INT64) | Ok(ffi::DCGM_FT_TIMESTAMP) => {
            let x = v.value.as_i64();
            int_sentinel(x).is_none().then_some(x as f64)
        }
        Ok(ffi::DCGM_FT_DOUBLE) => {
            let x = v.value.as_f64();
            double_sentinel(x).is_none().then_some(x)
        }
        _ => None,
    }
}

fn double_sentinel(v: f64) -> Option<Absent> {
    if v.is_nan() {
        return Some(Absent::Error);
    }
    if v >= ffi::DCGM_FP64_BLANK {
        let offset = v - ffi::DCGM_FP64_BLANK;
        return Some(if offset == 1.0 {
            Absent::NotFound
        } else if offset == 2.0 {
            Absent::NotSupported
        } else if offset == 3.0 {
            Absent::NotPermissioned
        } else {
            Absent::Blank
        });
    }
    if v.is_infinite() {
        return Some(Absent::Error);
    }
    None
}

fn text_sentinel(s: &str) -> Option<Absent> {
    if !(s.starts_with("<<<") && s.contains(">>>")) {
        return None;
    }
    Some(match s {
        "<<<NOT_FOUND>>>" => Absent::NotFound,
        "<<<NOT_SUPPORTED>>>" => Absent::NotSupported,
        "<<<NOT_PERM>>>" | "<<<NOT_PERMISSIONED>>>" => Absent::NotPermissioned,
        _ => Absent::Blank,
    })
}

/// The value a counter row of `kind` gets from one DCGM value.
pub fn convert(status: i32, payload: Payload, kind: MetricKind) -> FieldValue {
    if status != ffi::DCGM_ST_OK {
        return FieldValue::Absent(absent_for_status(status));
    }
    let absent = FieldValue::Absent;
    match (payload, kind) {
        (Payload::Int(v), _) => match int_sentinel(v) {
            Some(a) => absent(a),
            None if kind == MetricKind::Label => FieldValue::Text(v.to_string().into()),
            None => FieldValue::Int(v),
        },
        (Payload::Double(v), _) => match double_sentinel(v) {
            Some(a) => absent(a),
            None if kind == MetricKind::Label => FieldValue::Text(v.to_string().into()),
            None => FieldValue::Double(v),
        },
        (Payload::Text(s), MetricKind::Label) => match text_sentinel(&s) {
            Some(a) => absent(a),
            None => FieldValue::Text(s.into()),
        },
        // A text where a number is expected: a sentinel keeps its reason, anything else is an error.
        (Payload::Text(s), _) => absent(text_sentinel(&s).unwrap_or(Absent::Error)),
        (Payload::Binary, _) | (Payload::Unknown(_), _) => absent(Absent::Error),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use MetricKind::{Gauge, Label};

    #[test]
    fn numbers_pass_sentinels_do_not() {
        assert_eq!(convert(0, Payload::Int(42), Gauge), FieldValue::Int(42));
        assert_eq!(
            convert(0, Payload::Double(30.5), Gauge),
            FieldValue::Double(30.5)
        );
        assert_eq!(
            convert(0, Payload::Int(2147483632), Gauge),
            FieldValue::Absent(Absent::Blank)
        );
        assert_eq!(
            convert(0, Payload::Int(2147483634), Gauge),
            FieldValue::Absent(Absent::NotSupported)
        );
        assert_eq!(
            convert(0, Payload::Int(9223372036854775792), Gauge),
            FieldValue::Absent(Absent::Blank)
        );
        assert_eq!(
            convert(0, Payload::Int(9223372036854775795), Gauge),
            FieldValue::Absent(Absent::NotPermissioned)
        );
        assert_eq!(
            convert(0, Payload::Int(2147483631), Gauge),
            FieldValue::Int(2147483631)
        );
        assert_eq!(
            convert(0, Payload::Double(140737488355328.0), Gauge),
            FieldValue::Absent(Absent::Blank)
        );
        assert_eq!(
            convert(0, Payload::Double(140737488355330.0), Gauge),
            FieldValue::Absent(Absent::NotSupported)
        );
        assert_eq!(
            convert(0, Payload::Double(f64::NAN), Gauge),
            FieldValue::Absent(Absent::Error)
        );
    }

    #[test]
    fn status_wins_over_payload() {
        assert_eq!(
            convert(-6, Payload::Int(1), Gauge),
            FieldValue::Absent(Absent::NotSupported)
        );
        assert_eq!(
            convert(-14, Payload::Int(1), Gauge),
            FieldValue::Absent(Absent::Blank)
        );
        assert_eq!(
            convert(-17, Payload::Int(1), Gauge),
            FieldValue::Absent(Absent::NotPermissioned)
        );
        assert_eq!(
            convert(-3, Payload::Int(1), Gauge),
            FieldValue::Absent(Absent::Error)
        );
    }

    #[test]
    fn labels_are_text() {
        assert_eq!(
            convert(0, Payload::Text("550.144.03".into()), Label),
            FieldValue::Text("550.144.03".into())
        );
        assert_eq!(
            convert(0, Payload::Text("<<<NULL>>>".into()), Label),
            FieldValue::Absent(Absent::Blank)
        );
        assert_eq!(
            convert(0, Payload::Text("<<<NOT_SUPPORTED>>>".into()), Label),
            FieldValue::Absent(Absent::NotSupported)
        );
        assert_eq!(
            convert(0, Payload::Int(7), Label),
            FieldValue::Text("7".into())
        );
        assert_eq!(
            convert(0, Payload::Text("12".into()), Gauge),
            FieldValue::Absent(Absent::Error)
        );
        assert_eq!(
            convert(0, Payload::Binary, Gauge),
            FieldValue::Absent(Absent::Error)
        );
    }
}
