//! A DCGM value as the library hands it back (`dcgmFieldValue_v2` bytes: any status, field type, blank
//! sentinel, a string without its NUL), decoded for every counter kind. Properties: a value is a
//! number only with status OK and never a blank sentinel (nor NaN/inf); text only for label rows.
#![no_main]
use dcgm_otel::counters::MetricKind;
use dcgm_otel::snapshot::FieldValue;
use dcgm_otel::source::dcgm::client::ValueRef;
use dcgm_otel::source::dcgm::ffi::{self, dcgmFieldValue_v2};
use dcgm_otel::source::dcgm::values::{convert, Payload};
use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    let raw = dcgmFieldValue_v2::from_bytes(data);
    let value = ValueRef::new(&raw);
    let payload = value.payload();
    if let Payload::Text(s) = &payload {
        assert!(
            s.len() <= 3 * ffi::DCGM_MAX_STR_LENGTH,
            "a string stops at 256 bytes"
        );
    }
    for kind in [MetricKind::Gauge, MetricKind::Counter, MetricKind::Label] {
        match convert(value.status(), payload.clone(), kind) {
            FieldValue::Int(v) => {
                assert_eq!(value.status(), ffi::DCGM_ST_OK);
                assert!(kind != MetricKind::Label);
                assert!(
                    !(ffi::DCGM_INT32_BLANK..=ffi::DCGM_INT32_BLANK + 3).contains(&v),
                    "{v}"
                );
                assert!(v < ffi::DCGM_INT64_BLANK, "{v}");
            }
            FieldValue::Double(v) => {
                assert_eq!(value.status(), ffi::DCGM_ST_OK);
                assert!(kind != MetricKind::Label);
                assert!(v.is_finite() && v < ffi::DCGM_FP64_BLANK, "{v}");
            }
            FieldValue::Text(_) => {
                assert_eq!(value.status(), ffi::DCGM_ST_OK);
                assert_eq!(kind, MetricKind::Label);
            }
            _ => {}
        }
    }
});
