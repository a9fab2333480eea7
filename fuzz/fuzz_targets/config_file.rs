//! `--config-file` (dcgm-exporter 4.8.3 YAML): a parse never panics and an error names the file.
#![no_main]
use dcgm_otel::config::config_file;
use libfuzzer_sys::fuzz_target;
use std::path::Path;

fuzz_target!(|data: &[u8]| {
    let Ok(text) = std::str::from_utf8(data) else {
        return;
    };
    if let Err(e) = config_file::parse(text, Path::new("config.yaml")) {
        assert!(e.to_string().contains("config.yaml"), "{e}");
    }
});
