//! The `-d` / `-s` / `-p` device strings: a parsed selection prints back to a string that parses to
//! the same selection, and selecting it against an inventory never panics.
#![no_main]
use dcgm_otel::config::devices::{self, GpuSlots};
use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    let Ok(text) = std::str::from_utf8(data) else {
        return;
    };
    match devices::parse(text) {
        Ok(sel) => {
            let shown = sel.to_string();
            assert_eq!(
                devices::parse(&shown).as_ref(),
                Ok(&sel),
                "{text:?} shown as {shown:?}"
            );
            let inventory = [
                GpuSlots {
                    gpu: 0,
                    instances: vec![],
                },
                GpuSlots {
                    gpu: 1,
                    instances: vec![0, 1, 7],
                },
                GpuSlots {
                    gpu: 4095,
                    instances: vec![4095],
                },
            ];
            if let Ok(selected) = sel.select(&inventory) {
                assert!(selected
                    .gpus
                    .iter()
                    .all(|g| inventory.iter().any(|s| s.gpu == *g)));
            }
        }
        Err(e) => assert!(!e.to_string().is_empty()),
    }
});
