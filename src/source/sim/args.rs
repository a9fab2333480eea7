//! The simulation flags (`Source` in `--help`): run on a simulated fleet instead of DCGM.

use clap::Args;

/// The simulation flags.
#[derive(Debug, Clone, Args)]
#[command(next_help_heading = "Source")]
pub struct SimulationArgs {
    /// Run on a simulated GPU fleet instead of DCGM: default, dgx-h100-mig, large, hgx-h100,
    /// grace-hopper, incidents, demo, or a scenario file (true = default, false = off).
    #[arg(long = "simulate", env = "DCGM_OTEL_SIMULATE", value_name = "SCENARIO", num_args = 0..=1,
          require_equals = true, default_missing_value = "default")]
    pub simulate: Option<String>,

    /// Seed of the simulated fleet (same seed, same values).
    #[arg(
        long = "simulate-seed",
        env = "DCGM_OTEL_SIMULATE_SEED",
        value_name = "N"
    )]
    pub simulate_seed: Option<u64>,
}

impl SimulationArgs {
    /// Read `true`/`false` (also `1`/`0`, any case; `DCGM_OTEL_SIMULATE=true` in a container
    /// environment) as a switch: on with the default scenario, or off.
    pub fn normalize(&mut self) {
        let switch = self
            .simulate
            .as_deref()
            .map(|v| v.trim().to_ascii_lowercase());
        match switch.as_deref() {
            Some("true" | "1") => self.simulate = Some("default".into()),
            Some("false" | "0") => self.simulate = None,
            _ => {}
        }
    }

    /// The seed (1 when none is given).
    pub fn seed(&self) -> u64 {
        self.simulate_seed.unwrap_or(1)
    }
}
