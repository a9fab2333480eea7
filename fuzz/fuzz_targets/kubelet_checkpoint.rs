//! The kubelet device-manager checkpoint JSON (pod UIDs by allocation): a parse never panics, an error
//! names the file, and every indexed allocation can be looked up.
#![no_main]
use dcgm_otel::enrich::kubernetes::checkpoint::UidIndex;
use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    let Ok(text) = std::str::from_utf8(data) else {
        return;
    };
    match UidIndex::parse(text, "kubelet_internal_checkpoint") {
        Ok(index) => {
            let _ = index.uid("nvidia.com/gpu", "GPU-0", "main");
            assert_eq!(index.is_empty(), index.len() == 0);
        }
        Err(e) => assert!(e.to_string().contains("kubelet_internal_checkpoint"), "{e}"),
    }
});
