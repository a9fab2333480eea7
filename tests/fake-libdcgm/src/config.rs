//! The fake's environment interface (see README.md): which scenario it serves, whether the profiling
//! module is "loaded", and which faults to inject. Read once per `dcgmInit`.

use std::time::Duration;

/// Everything the environment configures.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct Config {
    /// `FAKE_DCGM_SCENARIO`: built-in name or YAML path.
    pub scenario: String,
    /// `FAKE_DCGM_SEED`.
    pub seed: u64,
    /// `FAKE_DCGM_PROFILING=on|off`.
    pub profiling: bool,
    /// `FAKE_DCGM_FAULTS`.
    pub faults: Faults,
    /// `FAKE_DCGM_STARTUP`.
    pub startup: StartupFaults,
}

/// `FAKE_DCGM_FAULTS`: a comma-separated list of `key=value`.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct Faults {
    /// `disconnect_after_polls=N`: after the N-th successful latest-values call the host engine goes
    /// away (once).
    pub disconnect_after_polls: Option<u64>,
    /// `down_ms=M`: how long connect / start attempts fail after that disconnect (or each outage of
    /// `outage_every_ms`).
    pub down: Duration,
    /// `outage_every_ms=N`: a host engine that goes away again and again: in the first `down_ms` of
    /// every N ms of UNIX time it is lost (at the first poll in that window, as with
    /// `disconnect_after_polls`) and refuses connections until the window ends.
    pub outage_every: Option<Duration>,
    /// `refuse_connect=N`: the first N connect / start attempts fail.
    pub refuse_connect: u32,
    /// `slow_ms=N`: every latest-values call sleeps this long.
    pub slow: Duration,
    /// `hang_ms=M@N`: the N-th polling latest-values call (live reads not counted) blocks M ms before
    /// it answers, once: a host engine that stops answering instead of failing.
    pub hang: Option<(Duration, u64)>,
    /// `vanish_gpu=IDX@N` (repeatable): GPU IDX disappears after the N-th latest-values call.
    pub vanish: Vec<(u32, u64)>,
    /// `blank_field=ID` (repeatable): the field is always blank.
    pub blank_fields: Vec<u16>,
    /// `unbind_gpu=IDX@N` (repeatable): GPU IDX is unbound from the driver after the N-th poll (hidden,
    /// identity kept) and the bind/unbind event is recorded.
    pub unbind: Vec<(u32, u64)>,
    /// `bind_gpu=IDX@N` (repeatable): GPU IDX is bound again after the N-th poll.
    pub bind: Vec<(u32, u64)>,
    /// `health_check_error=N`: the N-th `dcgmHealthCheck` fails (DCGM_ST_GENERIC_ERROR), once.
    pub health_check_error: Option<u64>,
    /// `p2p_unsupported=1`: `dcgmGetNvLinkP2PStatus` answers DCGM_ST_NOT_SUPPORTED.
    pub p2p_unsupported: bool,
    /// `history_survives=1`: a disconnect loses the link to an engine that stays up, which keeps the
    /// sampled history (default: the engine restarts and its history is gone).
    pub history_survives: bool,
    /// `stop_at_collection=N`: the simulated fleet stops at its N-th collection (1 = the first poll):
    /// later poll cycles read that collection's values again, so exporters that poll a different
    /// number of times (one per scrape, one per interval) end up reading the same values.
    pub stop_at_collection: Option<u64>,
}

/// A bad environment value: one line naming the variable, the item and why.
#[derive(Debug, PartialEq)]
pub struct ConfigError(pub String);

impl std::fmt::Display for ConfigError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(&self.0)
    }
}

impl Config {
    /// Read the `FAKE_DCGM_*` variables.
    pub fn from_env() -> Result<Config, ConfigError> {
        let var = |k: &str| std::env::var(k).ok().filter(|v| !v.trim().is_empty());
        let mut cfg = Config::from_values(
            var("FAKE_DCGM_SCENARIO").as_deref(),
            var("FAKE_DCGM_SEED").as_deref(),
            var("FAKE_DCGM_PROFILING").as_deref(),
            var("FAKE_DCGM_FAULTS").as_deref(),
        )?;
        cfg.startup = StartupFaults::parse(var("FAKE_DCGM_STARTUP").as_deref().unwrap_or(""))?;
        Ok(cfg)
    }

    pub fn from_values(
        scenario: Option<&str>,
        seed: Option<&str>,
        profiling: Option<&str>,
        faults: Option<&str>,
    ) -> Result<Config, ConfigError> {
        let seed = match seed {
            None => 1,
            Some(s) => s.trim().parse().map_err(|_| {
                ConfigError(format!("FAKE_DCGM_SEED={s:?}: not an unsigned integer"))
            })?,
        };
        let profiling = match profiling.map(str::trim) {
            None | Some("on") => true,
            Some("off") => false,
            Some(other) => {
                return Err(ConfigError(format!(
                    "FAKE_DCGM_PROFILING={other:?}: expected on or off"
                )))
            }
        };
        Ok(Config {
            scenario: scenario.unwrap_or("default").trim().to_string(),
            seed,
            profiling,
            faults: Faults::parse(faults.unwrap_or(""))?,
            startup: StartupFaults::default(),
        })
    }
}

impl Faults {
    pub fn parse(list: &str) -> Result<Faults, ConfigError> {
        let mut f = Faults::default();
        for (pos, item) in list.split(',').enumerate() {
            let item = item.trim();
            if item.is_empty() {
                continue;
            }
            let bad = |why: &str| {
                ConfigError(format!("FAKE_DCGM_FAULTS item {} {item:?}: {why}", pos + 1))
            };
            let (key, value) = item
                .split_once('=')
                .ok_or_else(|| bad("expected key=value"))?;
            let num = |v: &str| {
                v.trim()
                    .parse::<u64>()
                    .map_err(|_| bad("not an unsigned integer"))
            };
            match key.trim() {
                "disconnect_after_polls" => f.disconnect_after_polls = Some(num(value)?),
                "down_ms" => f.down = Duration::from_millis(num(value)?),
                "outage_every_ms" => match num(value)? {
                    0 => return Err(bad("must be at least 1")),
                    ms if Duration::from_millis(ms) <= f.down => {
                        return Err(bad("must be longer than down_ms (given before it)"))
                    }
                    ms => f.outage_every = Some(Duration::from_millis(ms)),
                },
                "refuse_connect" => {
                    f.refuse_connect = u32::try_from(num(value)?).map_err(|_| bad("too large"))?
                }
                "slow_ms" => f.slow = Duration::from_millis(num(value)?),
                "hang_ms" => {
                    let (ms, at) = value.split_once('@').ok_or_else(|| bad("expected MS@N"))?;
                    f.hang = Some((Duration::from_millis(num(ms)?), num(at)?));
                }
                "vanish_gpu" => {
                    let (idx, after) =
                        value.split_once('@').ok_or_else(|| bad("expected IDX@N"))?;
                    let idx = u32::try_from(num(idx)?).map_err(|_| bad("GPU index too large"))?;
                    f.vanish.push((idx, num(after)?));
                }
                "health_check_error" => f.health_check_error = Some(num(value)?),
                "p2p_unsupported" => f.p2p_unsupported = num(value)? != 0,
                "history_survives" => f.history_survives = num(value)? != 0,
                "stop_at_collection" => match num(value)? {
                    0 => return Err(bad("must be at least 1")),
                    n => f.stop_at_collection = Some(n),
                },
                "blank_field" => {
                    let id = u16::try_from(num(value)?).map_err(|_| bad("field id too large"))?;
                    f.blank_fields.push(id);
                }
                "unbind_gpu" | "bind_gpu" => {
                    let (idx, after) =
                        value.split_once('@').ok_or_else(|| bad("expected IDX@N"))?;
                    let idx = u32::try_from(num(idx)?).map_err(|_| bad("GPU index too large"))?;
                    let list = if key.trim() == "unbind_gpu" {
                        &mut f.unbind
                    } else {
                        &mut f.bind
                    };
                    list.push((idx, num(after)?));
                }
                _ => {
                    return Err(bad(
                        "unknown fault (known: disconnect_after_polls, down_ms, outage_every_ms, \
                         refuse_connect, slow_ms, hang_ms, vanish_gpu, blank_field, unbind_gpu, bind_gpu, \
                         health_check_error, p2p_unsupported, history_survives, stop_at_collection)",
                    ))
                }
            }
        }
        Ok(f)
    }
}

// ---------------------------------------------------------------- FAKE_DCGM_STARTUP

/// `FAKE_DCGM_STARTUP`: a host engine that is not ready when the exporter starts (a comma-separated
/// list of `key=value`, like `FAKE_DCGM_FAULTS`). Times count from `dcgmInit`.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct StartupFaults {
    /// `hostengine_up_after_ms=N`: `dcgmConnect_v2/_v3` fail with `DCGM_ST_CONNECTION_NOT_VALID` until
    /// N ms after `dcgmInit` (a standalone nv-hostengine that comes up after the exporter).
    pub hostengine_up_after: Option<Duration>,
    /// `embedded_fails_ms=N`: `dcgmStartEmbedded*` fail with `DCGM_ST_NVML_NOT_LOADED` until N ms after
    /// `dcgmInit` (the driver is not loaded yet).
    pub embedded_fails_for: Option<Duration>,
    /// `profiling_from_connect=N`: the profiling module is loaded only from the N-th successful
    /// connection / embedded start on (counted from `dcgmInit`); before it, profiling behaves as with
    /// `FAKE_DCGM_PROFILING=off`.
    pub profiling_from_connect: Option<u32>,
    /// `gpus_after_ms=N`: the host engine lists no GPU (nor MIG instance or GPU link) until N ms after
    /// `dcgmInit` (a huge N: never).
    pub gpus_after: Option<Duration>,
}

impl StartupFaults {
    pub fn parse(list: &str) -> Result<StartupFaults, ConfigError> {
        let mut f = StartupFaults::default();
        for (pos, item) in list.split(',').enumerate() {
            let item = item.trim();
            if item.is_empty() {
                continue;
            }
            let bad = |why: &str| {
                ConfigError(format!(
                    "FAKE_DCGM_STARTUP item {} {item:?}: {why}",
                    pos + 1
                ))
            };
            let (key, value) = item
                .split_once('=')
                .ok_or_else(|| bad("expected key=value"))?;
            let num = value
                .trim()
                .parse::<u64>()
                .map_err(|_| bad("not an unsigned integer"))?;
            match key.trim() {
                "hostengine_up_after_ms" => {
                    f.hostengine_up_after = Some(Duration::from_millis(num))
                }
                "embedded_fails_ms" => f.embedded_fails_for = Some(Duration::from_millis(num)),
                "profiling_from_connect" => {
                    f.profiling_from_connect =
                        Some(u32::try_from(num).map_err(|_| bad("too large"))?)
                }
                "gpus_after_ms" => f.gpus_after = Some(Duration::from_millis(num)),
                _ => {
                    return Err(bad(
                        "unknown item (known: hostengine_up_after_ms, embedded_fails_ms, \
                         profiling_from_connect, gpus_after_ms)",
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
    fn defaults() {
        let c = Config::from_values(None, None, None, None).unwrap();
        assert_eq!(c.scenario, "default");
        assert_eq!(c.seed, 1);
        assert!(c.profiling);
        assert_eq!(c.faults, Faults::default());
    }

    #[test]
    fn every_fault() {
        let f = Faults::parse(
            "disconnect_after_polls=3, down_ms=500,refuse_connect=2,slow_ms=10,vanish_gpu=1@4,\
             vanish_gpu=0@9,blank_field=150,blank_field=155",
        )
        .unwrap();
        assert_eq!(f.disconnect_after_polls, Some(3));
        assert_eq!(f.down, Duration::from_millis(500));
        assert_eq!(f.refuse_connect, 2);
        assert_eq!(f.slow, Duration::from_millis(10));
        assert_eq!(f.vanish, vec![(1, 4), (0, 9)]);
        assert_eq!(f.blank_fields, vec![150, 155]);
        let f = Faults::parse("down_ms=10000,outage_every_ms=60000").unwrap();
        assert_eq!(f.outage_every, Some(Duration::from_millis(60000)));
        assert!(Faults::parse("outage_every_ms=0").is_err());
        assert!(Faults::parse("down_ms=5000,outage_every_ms=5000").is_err());
        let f = Faults::parse("unbind_gpu=1@3,bind_gpu=1@6").unwrap();
        assert_eq!((f.unbind, f.bind), (vec![(1, 3)], vec![(1, 6)]));
        let f = Faults::parse("health_check_error=2,p2p_unsupported=1").unwrap();
        assert_eq!((f.health_check_error, f.p2p_unsupported), (Some(2), true));
        let f = Faults::parse("stop_at_collection=31").unwrap();
        assert_eq!(f.stop_at_collection, Some(31));
        assert!(Faults::parse("stop_at_collection=0").is_err());
    }

    #[test]
    fn bad_values_name_the_item() {
        let e = Faults::parse("slow_ms=5,vanish_gpu=1").unwrap_err();
        assert_eq!(
            e.0,
            "FAKE_DCGM_FAULTS item 2 \"vanish_gpu=1\": expected IDX@N"
        );
        let e = Config::from_values(None, None, Some("maybe"), None).unwrap_err();
        assert!(e.0.starts_with("FAKE_DCGM_PROFILING=\"maybe\""));
    }

    #[test]
    fn startup_items() {
        let f = StartupFaults::parse(
            "hostengine_up_after_ms=20000, embedded_fails_ms=500,profiling_from_connect=2,gpus_after_ms=9",
        )
        .unwrap();
        assert_eq!(f.hostengine_up_after, Some(Duration::from_secs(20)));
        assert_eq!(f.embedded_fails_for, Some(Duration::from_millis(500)));
        assert_eq!(f.profiling_from_connect, Some(2));
        assert_eq!(f.gpus_after, Some(Duration::from_millis(9)));
        assert_eq!(StartupFaults::parse("").unwrap(), StartupFaults::default());
        let e = StartupFaults::parse("gpus_after_ms=x").unwrap_err();
        assert_eq!(
            e.0,
            "FAKE_DCGM_STARTUP item 1 \"gpus_after_ms=x\": not an unsigned integer"
        );
        assert!(StartupFaults::parse("late=1").is_err());
    }
}
