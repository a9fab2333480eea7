//! The counters CSV (`-f`): any text either parses into rows with valid metric names or fails with a
//! message naming the file and a position inside it.
#![no_main]
use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    let Ok(text) = std::str::from_utf8(data) else {
        return;
    };
    match dcgm_otel::counters::parse(text, "fuzz.csv") {
        Ok(set) => {
            for row in &set.rows {
                let mut chars = row.name.chars();
                let first = chars.next().expect("a metric name is never empty");
                assert!(
                    first.is_ascii_alphabetic() || first == '_' || first == ':',
                    "{row:?}"
                );
                assert!(
                    chars.all(|c| c.is_ascii_alphanumeric() || c == '_' || c == ':'),
                    "{row:?}"
                );
                assert!(
                    row.line >= 1 && row.line <= text.lines().count().max(1),
                    "{row:?}"
                );
            }
        }
        Err(e) => {
            assert!(e.to_string().starts_with("fuzz.csv"), "{e}");
            assert!(e.line <= text.split('\n').count() + 1, "{e:?}");
        }
    }
});
