//! The `--otel-metric-names dcgm` request, byte for byte: the test fleet's snapshot (fixed clock) in
//! both attribute styles and both resource modes against `tests/golden/otlp/*.pb`, captured before
//! semantic-convention names existed, and decoded against the `.txt` beside each (the same requests
//! as prost's `{:#?}` dump, so that a change to them can be read in review). `UPDATE_GOLDEN=1`
//! rewrites both (review the `.txt` diff: it must be empty unless the DCGM-named request is meant to
//! change); under CI (a non-empty `CI`) it is refused, as for the `.prom` goldens.

use std::time::{Duration, UNIX_EPOCH};

use prost::Message;

use super::*;
use crate::config::LabelStyle;
use crate::export::otel::naming::{OtelAttributeStyle, OtelResourceMode};
use crate::export::otel::test_fleet::{counters as test_counters, snapshot};

fn golden_path(style: &str, mode: &str) -> std::path::PathBuf {
    std::path::Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("tests/golden/otlp")
        .join(format!("dcgm-names-{style}-{mode}.pb"))
}

/// Whether this is a CI run (any non-empty `CI`): goldens are compared there, never rewritten.
fn in_ci() -> bool {
    std::env::var_os("CI").is_some_and(|v| !v.is_empty())
}

/// The requests of [`request_bytes`] (length-prefixed), decoded and dumped as text: one section per
/// request, prost's pretty `Debug` of the `ExportMetricsServiceRequest`.
fn readable(bytes: &[u8]) -> String {
    let mut out = String::new();
    let mut rest = bytes;
    let mut n = 0;
    while rest.len() >= 4 {
        let len = u32::from_be_bytes([rest[0], rest[1], rest[2], rest[3]]) as usize;
        let request = ExportMetricsServiceRequest::decode(&rest[4..4 + len]).unwrap();
        n += 1;
        out.push_str(&format!("# request {n} ({len} bytes)\n{request:#?}\n"));
        rest = &rest[4 + len..];
    }
    out
}

/// The encoded request of two exports (energy 5000 then 7000) of the test fleet.
fn request_bytes(style: OtelAttributeStyle, mode: OtelResourceMode) -> Vec<u8> {
    let counters = test_counters();
    // As start-up builds it for `--otel-metric-names dcgm` (the default).
    let names = MetricNames::Dcgm;
    let naming =
        Naming::new(style, LabelStyle::default(), &counters).with_hw_attributes(names.semconv());
    let split = naming.resource_split(mode);
    let base = vec![
        KeyValue::new("service.name", "golden"),
        KeyValue::new("host.name", "node-a"),
    ];
    let mut b = DirectBuilder::new(
        naming,
        split,
        &base,
        counters.clone(),
        Temporality::Cumulative,
        UNIX_EPOCH + Duration::from_secs(1_700_000_000),
    )
    .with_metric_names(names);
    // The scope version follows the crate version; the golden does not.
    b.scope.version = "golden".into();
    let mut out = Vec::new();
    for (seq, energy) in [(1u64, 5000i64), (2, 7000)] {
        let mut snap = snapshot(counters.clone(), seq, energy);
        snap.taken_at = UNIX_EPOCH + Duration::from_secs(1_700_000_010 + seq);
        let body = b.build_encoded(&snap).body;
        out.extend((body.len() as u32).to_be_bytes());
        out.extend(body);
    }
    out
}

#[test]
fn dcgm_named_requests_are_byte_identical_to_the_golden() {
    for (style, s) in [
        (OtelAttributeStyle::Otel, "otel"),
        (OtelAttributeStyle::Dcgm, "dcgm"),
    ] {
        for (mode, m) in [
            (OtelResourceMode::PerEntity, "per-entity"),
            (OtelResourceMode::Host, "host"),
        ] {
            let got = request_bytes(style, mode);
            let path = golden_path(s, m);
            let text_path = path.with_extension("txt");
            if std::env::var_os("UPDATE_GOLDEN").is_some() {
                assert!(
                    !in_ci(),
                    "UPDATE_GOLDEN is set in CI: golden files are compared there, never rewritten"
                );
                std::fs::write(&path, &got).unwrap();
                std::fs::write(&text_path, readable(&got)).unwrap();
                continue;
            }
            let want = std::fs::read(&path).unwrap();
            // The readable rendering first: a difference there names the field that changed.
            let want_text = std::fs::read_to_string(&text_path).unwrap_or_else(|e| {
                panic!("{}: {e} (UPDATE_GOLDEN=1 writes it)", text_path.display())
            });
            assert_eq!(
                readable(&want),
                want_text,
                "{} is not the rendering of {}",
                text_path.display(),
                path.display()
            );
            let got_text = readable(&got);
            if got_text != want_text {
                let diff: Vec<String> = want_text
                    .lines()
                    .zip(got_text.lines())
                    .enumerate()
                    .filter(|(_, (a, b))| a != b)
                    .take(8)
                    .map(|(i, (a, b))| format!("line {}:\n  golden: {a}\n  actual: {b}", i + 1))
                    .collect();
                panic!(
                    "{s} {m}: the request differs from {}:\n{}",
                    text_path.display(),
                    diff.join("\n")
                );
            }
            if got != want {
                // Decode both for a readable difference.
                let first = |b: &[u8]| {
                    let n = u32::from_be_bytes([b[0], b[1], b[2], b[3]]) as usize;
                    ExportMetricsServiceRequest::decode(&b[4..4 + n]).unwrap()
                };
                assert_eq!(first(&got), first(&want), "{s} {m}");
                panic!("{s} {m}: request bytes differ from {}", path.display());
            }
        }
    }
}
