//! A simulated-fleet scenario file (`--scenario PATH`): a parse never panics and an error names the file.
#![no_main]
use dcgm_otel::source::sim::scenario::Scenario;
use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    let Ok(text) = std::str::from_utf8(data) else {
        return;
    };
    if let Err(e) = Scenario::parse(text, "fuzz.yaml") {
        assert!(e.to_string().contains("fuzz.yaml"), "{e}");
    }
});
