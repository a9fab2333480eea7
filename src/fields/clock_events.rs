//! Clock-event reasons: the bits of `DCGM_FI_DEV_CLOCKS_EVENT_REASONS` (`DCGM_CLOCKS_EVENT_REASON_*`)
//! and the names dcgm-exporter gives them in its `clock_event` label. The sources split a sample's
//! bitmask into these reasons; the `DCGM_EXP_CLOCK_EVENTS_*` families and the simulator's scenario
//! files (`clock_events: [hw_thermal]`) name them the same way.

/// `DCGM_FI_DEV_CLOCKS_EVENT_REASONS`.
pub const FIELD: u16 = 112;

/// (bit, dcgm-exporter's name), in bit order.
pub const REASONS: [(u64, &str); 9] = [
    (0x1, "gpu_idle"),
    (0x2, "clocks_setting"),
    (0x4, "power_cap"),
    (0x8, "hw_slowdown"),
    (0x10, "sync_boost"),
    (0x20, "sw_thermal"),
    (0x40, "hw_thermal"),
    (0x80, "hw_power_brake"),
    (0x100, "display_clocks"),
];

/// The bit of a reason name.
pub fn bit(name: &str) -> Option<u64> {
    REASONS.iter().find(|(_, n)| *n == name).map(|(b, _)| *b)
}

/// The names of the reasons set in `mask`, in bit order (unknown bits are ignored).
pub fn names(mask: u64) -> impl Iterator<Item = &'static str> {
    REASONS
        .iter()
        .filter(move |(b, _)| mask & b != 0)
        .map(|(_, n)| *n)
}

/// The reasons set in `now` but not in `before` (started), and set in `before` but not in `now` (ended).
pub fn edges(before: u64, now: u64) -> (u64, u64) {
    (now & !before, before & !now)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn splits_a_mask() {
        assert_eq!(
            names(0x41 | 0x1000).collect::<Vec<_>>(),
            ["gpu_idle", "hw_thermal"]
        );
        assert_eq!(bit("display_clocks"), Some(0x100));
        assert_eq!(edges(0x41, 0x44), (0x4, 0x1));
    }
}
