//! The fake's environment interface (README.md): which scenario it serves and which faults to inject.
//! Read at every `nvmlInit_v2` that starts the library (reference count 0 → 1).

/// Everything the environment configures.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct Config {
    /// `FAKE_NVML_SCENARIO`: built-in name or YAML path (default: `FAKE_DCGM_SCENARIO`, else
    /// `default`).
    pub scenario: String,
    /// `FAKE_NVML_SEED` (default 1).
    pub seed: u64,
    pub faults: Faults,
}

/// `FAKE_NVML_FAULTS`: a comma-separated list of `key=value`. "Tick" N is the N-th
/// `nvmlDeviceGetCount_v2` call (an exporter makes one per collection and per process poll).
#[derive(Debug, Clone, Default, PartialEq)]
pub struct Faults {
    /// `init=CODE`: `nvmlInit_v2` fails with this NVML code (9: driver not loaded).
    pub init: Option<u32>,
    /// `lost_gpu=IDX@N` (repeatable): from tick N on, GPU IDX (and its MIG devices) answers
    /// `NVML_ERROR_GPU_IS_LOST` to everything but the count.
    pub lost: Vec<(u32, u64)>,
    /// `not_supported=FUNCTION` (repeatable): that function answers `NVML_ERROR_NOT_SUPPORTED`.
    pub not_supported: Vec<String>,
    /// `exit=PID@N` (repeatable): the process is gone from tick N on.
    pub exits: Vec<(u32, u64)>,
    /// `xid=CODE@GPU@N` (repeatable): an XID event on GPU at tick N.
    pub xids: Vec<(u64, u32, u64)>,
}

impl Config {
    pub fn from_env() -> Result<Config, String> {
        let var = |k: &str| std::env::var(k).ok().filter(|v| !v.trim().is_empty());
        let seed = match var("FAKE_NVML_SEED") {
            None => 1,
            Some(s) => s
                .trim()
                .parse()
                .map_err(|_| format!("FAKE_NVML_SEED={s:?}: not an unsigned integer"))?,
        };
        Ok(Config {
            // Both fakes model one node: without its own scenario, NVML sees the fake libdcgm's GPUs.
            scenario: var("FAKE_NVML_SCENARIO")
                .or_else(|| var("FAKE_DCGM_SCENARIO"))
                .unwrap_or_else(|| "default".into()),
            seed,
            faults: Faults::parse(&var("FAKE_NVML_FAULTS").unwrap_or_default())?,
        })
    }
}

impl Faults {
    pub fn parse(list: &str) -> Result<Faults, String> {
        let mut f = Faults::default();
        for (pos, item) in list.split(',').enumerate() {
            let item = item.trim();
            if item.is_empty() {
                continue;
            }
            let bad = |why: &str| format!("FAKE_NVML_FAULTS item {} {item:?}: {why}", pos + 1);
            let (key, value) = item
                .split_once('=')
                .ok_or_else(|| bad("expected key=value"))?;
            let num = |v: &str| {
                v.trim()
                    .parse::<u64>()
                    .map_err(|_| bad("not an unsigned integer"))
            };
            let small = |v: &str| u32::try_from(num(v)?).map_err(|_| bad("too large"));
            let parts: Vec<&str> = value.split('@').collect();
            match (key.trim(), parts.as_slice()) {
                ("init", [code]) => f.init = Some(small(code)?),
                ("lost_gpu", [idx, at]) => f.lost.push((small(idx)?, num(at)?)),
                ("not_supported", [name]) => f.not_supported.push(name.trim().to_string()),
                ("exit", [pid, at]) => f.exits.push((small(pid)?, num(at)?)),
                ("xid", [code, gpu, at]) => f.xids.push((num(code)?, small(gpu)?, num(at)?)),
                _ => {
                    return Err(bad(
                        "unknown fault or form (known: init=CODE, lost_gpu=IDX@N, not_supported=FUNCTION, exit=PID@N, xid=CODE@GPU@N)",
                    ))
                }
            }
        }
        Ok(f)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn faults_parse() {
        let f = Faults::parse(
            "lost_gpu=1@3, not_supported=nvmlDeviceGetPowerUsage,exit=4242@2,xid=79@0@2,init=9",
        )
        .unwrap();
        assert_eq!(f.lost, vec![(1, 3)]);
        assert_eq!(f.not_supported, vec!["nvmlDeviceGetPowerUsage".to_string()]);
        assert_eq!(f.exits, vec![(4242, 2)]);
        assert_eq!(f.xids, vec![(79, 0, 2)]);
        assert_eq!(f.init, Some(9));
        assert!(Faults::parse("lost_gpu=1").is_err());
        assert!(Faults::parse("nope=1").is_err());
    }
}
