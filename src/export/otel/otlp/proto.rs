//! Conversion of OpenTelemetry API attribute values into OTLP protobuf `KeyValue`s, shared by the
//! direct request builder and its per-process points.

use opentelemetry::{KeyValue, Value};
use opentelemetry_proto::tonic::common::v1::{any_value, AnyValue, KeyValue as PKeyValue};

/// One attribute as protobuf (arrays are sent as their text).
pub fn pkv(kv: &KeyValue) -> PKeyValue {
    let value = match &kv.value {
        Value::Bool(b) => any_value::Value::BoolValue(*b),
        Value::I64(i) => any_value::Value::IntValue(*i),
        Value::F64(f) => any_value::Value::DoubleValue(*f),
        Value::String(s) => any_value::Value::StringValue(s.as_str().to_string()),
        other => any_value::Value::StringValue(other.to_string()),
    };
    PKeyValue {
        key: kv.key.as_str().to_string(),
        value: Some(AnyValue { value: Some(value) }),
        key_strindex: 0,
    }
}
