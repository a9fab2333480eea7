//! `--web-config-file` (the Prometheus exporter-toolkit YAML): a parse never panics; an error names the
//! file; an accepted file only holds bcrypt hashes the checker accepts.
#![no_main]
use dcgm_otel::config::web_config;
use libfuzzer_sys::fuzz_target;
use std::path::Path;

fuzz_target!(|data: &[u8]| {
    let Ok(text) = std::str::from_utf8(data) else {
        return;
    };
    match web_config::parse(text, Path::new("web.yml")) {
        Ok(cfg) => {
            for u in &cfg.users {
                assert!(
                    web_config::check_bcrypt_hash(&u.bcrypt_hash).is_ok(),
                    "{}",
                    u.name
                );
            }
        }
        Err(e) => assert!(e.to_string().contains("web.yml"), "{e}"),
    }
});
