//! A simulated-fleet scenario file (`--scenario PATH`): an accepted scenario describes a host of 1 to
//! 64 GPUs, at most 1,024 CPU cores and 12 NvSwitches (what the fleet is then built from); an error
//! names the file.
#![no_main]
use dcgm_otel::source::sim::scenario::Scenario;
use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    let Ok(text) = std::str::from_utf8(data) else {
        return;
    };
    match Scenario::parse(text, "fuzz.yaml") {
        Ok(s) => {
            // What the fleet is built from stays within a host's size (no wrapped sums).
            let gpus: u64 = s.gpus.iter().map(|g| u64::from(g.count)).sum();
            assert!((1..=64).contains(&gpus), "{gpus} GPUs");
            let cores: u64 = s
                .cpus
                .iter()
                .map(|c| u64::from(c.count) * u64::from(c.cores))
                .sum();
            assert!(cores <= 1024, "{cores} cores");
            assert!(s.nvswitches.iter().map(|w| u64::from(w.count)).sum::<u64>() <= 12);
        }
        Err(e) => assert!(e.to_string().contains("fuzz.yaml"), "{e}"),
    }
});
