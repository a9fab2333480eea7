//! The simulation flags (`Source` in `--help`): run on a simulated fleet instead of DCGM.

use clap::Args;

/// The simulation flags.
#[derive(Debug, Clone, Args)]
#[command(next_help_heading = "Source")]
pub struct SimulationArgs {
    /// Run on a simulated GPU fleet instead of DCGM: default, dgx-h100-mig, large, hgx-h100,
    /// grace-hopper, or a scenario file.
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
    /// The seed (1 when none is given).
    pub fn seed(&self) -> u64 {
        self.simulate_seed.unwrap_or(1)
    }
}
