//! Conversion of OpenTelemetry API attribute values into OTLP protobuf `KeyValue`s, shared by the
//! direct request builder, its per-process points and the incident log records; the Resource of an entity.

use opentelemetry::{KeyValue, Value};
use opentelemetry_proto::tonic::common::v1::{any_value, AnyValue, KeyValue as PKeyValue};
use opentelemetry_proto::tonic::resource::v1::Resource;

/// An entity's Resource: the host attributes `base` (those the identity does not name again) and then
/// the entity's identity attributes.
pub fn entity_resource(base: &[PKeyValue], identity: &[&KeyValue]) -> Resource {
    let mut attributes: Vec<PKeyValue> = base
        .iter()
        .filter(|b| !identity.iter().any(|kv| kv.key.as_str() == b.key))
        .cloned()
        .collect();
    attributes.extend(identity.iter().map(|kv| pkv(kv)));
    Resource {
        attributes,
        dropped_attributes_count: 0,
        entity_refs: Vec::new(),
    }
}

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
