//! dcgm-exporter's label templates for its NvSwitch, NvSwitch-link, CPU and CPU-core entity groups
//! (`render_metrics.go`), written before the host label:
//!
//! - NvSwitch: `nvswitch="nvswitch<id>"`
//! - NvSwitch NvLink: `nvlink="<port>",nvswitch="nvswitch<id>"` (its host label is always `hostname`)
//! - CPU: `cpu="<id>"`, and with the 4.8.3 label set (`--hostname-label hostname`) `cpu_serial` when
//!   DCGM knows the serial
//! - CPU core: `cpucore="<core id>",cpu="<cpu id>"`
//!
//! One deliberate difference: dcgm-exporter 4.x writes `nvswitch="nvswitch0"` on the series of *every*
//! switch (it prints the monitoring info's parent id, which is 0 for a switch entity), so the series of
//! a multi-switch node collide — 4.8.2 serves duplicate series and 4.8.3's renderer fails the whole
//! scrape. dcgm-otel writes each switch's own id, spelled as on the switch's link series
//! (`nvswitch<id>`), so switch and link series of one switch join on `nvswitch`.

use crate::config::HostnameLabel;
use crate::snapshot::{Entity, EntityKind};
use crate::telemetry::exposition::push_label;

/// Push the identity labels of a non-GPU entity (NvSwitch, its links, CPU, its cores).
pub fn push_identity(out: &mut String, first: &mut bool, e: &Entity, host: HostnameLabel) {
    match e.kind {
        EntityKind::NvSwitch => {
            push_label(out, first, "nvswitch", &switch_name(e));
        }
        EntityKind::NvSwitchLink => {
            let port = e.link.unwrap_or(e.entity_id).to_string();
            push_label(out, first, "nvlink", &port);
            push_label(out, first, "nvswitch", &switch_name(e));
        }
        EntityKind::Cpu => {
            let cpu = e.cpu.as_ref().map_or(e.entity_id, |c| c.index);
            push_label(out, first, "cpu", &cpu.to_string());
            // 4.8.3 adds the serial (from dcgmGetCpuHierarchy_v2) to CPU series, not to core series.
            if host == HostnameLabel::LowerHostname {
                if let Some(serial) = e
                    .cpu
                    .as_ref()
                    .and_then(|c| c.serial.as_deref())
                    .filter(|s| !s.is_empty())
                {
                    push_label(out, first, "cpu_serial", serial);
                }
            }
        }
        EntityKind::CpuCore => {
            push_label(out, first, "cpucore", &e.entity_id.to_string());
            let cpu = e.cpu.as_ref().map_or(0, |c| c.index);
            push_label(out, first, "cpu", &cpu.to_string());
        }
        // GPU-side entities have their own template in the renderer.
        EntityKind::Gpu | EntityKind::GpuInstance | EntityKind::NvLink => {}
    }
}

/// `nvswitch<id>`.
pub fn switch_name(e: &Entity) -> String {
    format!("nvswitch{}", e.nvswitch.unwrap_or(e.entity_id))
}
