//! One utilization per GPU in MIG mode. Such a GPU has no series of its own — DCGM reads its MIG
//! instances, and `DCGM_FI_DEV_GPU_UTIL` is not supported on them — so "how busy is this GPU" had no
//! answer (dcgm-exporter#216, #430, #512). This stage derives it each collection from the instances'
//! graphics-engine activity (`DCGM_FI_PROF_GR_ENGINE_ACTIVE`, a ratio of the instance), each weighted by
//! the instance's share of its GPU — its compute slices over the GPU's, the weighting the per-pod cost
//! counters use ([`device_fraction`]) — and summed: `dcgm_otel_mig_gpu_utilization_ratio` on :9400 with
//! the GPU's identity labels, `nvidia.gpu.mig.utilization` on the GPU board's OTLP Resource.
//!
//! Slices no instance holds count as idle. A GPU any of whose read instances lacks the value (profiling
//! unavailable, a blank reading) gets no series rather than a partial sum; with `-d` selecting some of a
//! GPU's instances, the sum is over those.

use std::borrow::Cow;
use std::sync::Arc;

use crate::counters::CounterSet;
use crate::enrich::kubernetes::cost::device_fraction;
use crate::enrich::Enricher;
use crate::snapshot::{
    DerivedFamily, DerivedInfo, DerivedKind, DerivedSample, DerivedSubject, Entity, EntityKind,
    EntityReading, GpuIdentity,
};

/// `DCGM_FI_PROF_GR_ENGINE_ACTIVE`.
const GR_ENGINE_ACTIVE: u16 = 1001;

/// `dcgm_otel_mig_gpu_utilization_ratio`.
pub static MIG_GPU_UTILIZATION: DerivedInfo = DerivedInfo {
    name: "dcgm_otel_mig_gpu_utilization_ratio",
    help: Cow::Borrowed("Utilization of a GPU in MIG mode (0-1): its MIG instances' DCGM_FI_PROF_GR_ENGINE_ACTIVE, each weighted by the instance's share of the GPU (compute slices / GPU slices), summed."),
    unit: "1",
    kind: DerivedKind::Gauge,
    otel_name: "nvidia.gpu.mig.utilization",
    subject: DerivedSubject::Device,
};

/// The roll-up stage (no state: each collection stands alone).
#[derive(Debug, Default)]
pub struct MigRollup;

/// Per GPU in MIG mode, in the order its first instance is read: the weighted sum, or `None` once an
/// instance lacks the value.
fn roll_up(entities: &[EntityReading], row: usize) -> Vec<(Arc<GpuIdentity>, Option<f64>)> {
    let mut gpus: Vec<(Arc<GpuIdentity>, Option<f64>)> = Vec::new();
    for r in entities
        .iter()
        .filter(|r| r.entity.kind == EntityKind::GpuInstance)
    {
        let Some(gpu) = r.entity.gpu.as_ref() else {
            continue;
        };
        let value = r.values.get(row).and_then(|v| v.as_f64());
        let share = value.map(|v| v * device_fraction(&r.entity));
        match gpus.iter_mut().find(|(g, _)| g.index == gpu.index) {
            Some((_, sum)) => *sum = sum.zip(share).map(|(a, b)| a + b),
            None => gpus.push((gpu.clone(), share)),
        }
    }
    gpus
}

impl Enricher for MigRollup {
    fn name(&self) -> &'static str {
        "mig-rollup"
    }

    fn enrich(&mut self, _entities: &mut [EntityReading]) {}

    fn derive(
        &mut self,
        entities: &[EntityReading],
        counters: &CounterSet,
        out: &mut Vec<DerivedFamily>,
    ) {
        let Some(row) = counters
            .rows
            .iter()
            .position(|c| c.field.id == GR_ENGINE_ACTIVE)
        else {
            return;
        };
        let samples: Vec<DerivedSample> = roll_up(entities, row)
            .into_iter()
            .filter_map(|(gpu, sum)| {
                Some(DerivedSample {
                    entity: Arc::new(Entity::gpu(gpu)),
                    attributes: Arc::from([]),
                    labels: Vec::new(),
                    value: sum?.clamp(0.0, 1.0),
                })
            })
            .collect();
        if !samples.is_empty() {
            out.push(DerivedFamily {
                info: Cow::Borrowed(&MIG_GPU_UTILIZATION),
                samples,
            });
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::snapshot::{Absent, Attribution, FieldValue, MigIdentity};

    fn instance(gpu: &Arc<GpuIdentity>, gi: u32, profile: &str, v: FieldValue) -> EntityReading {
        let mig = Arc::new(MigIdentity {
            entity_id: gpu.index * 8 + gi,
            gi_id: gi,
            profile: profile.into(),
            uuid: format!("MIG-{gi}"),
        });
        EntityReading {
            entity: Arc::new(Entity::instance(gpu.clone(), mig)),
            values: vec![FieldValue::Double(0.0), v].into(),
            attribution: Arc::new(Attribution::default()),
        }
    }

    #[test]
    fn weighted_by_slices_and_left_out_when_an_instance_has_no_value() {
        let a = Arc::new(GpuIdentity::bare(1));
        let b = Arc::new(GpuIdentity::bare(2));
        let readings = vec![
            EntityReading {
                entity: Arc::new(Entity::gpu(Arc::new(GpuIdentity::bare(0)))),
                values: vec![FieldValue::Double(0.0), FieldValue::Double(0.9)].into(),
                attribution: Arc::new(Attribution::default()),
            },
            instance(&a, 1, "3g.40gb", FieldValue::Double(0.5)),
            instance(&a, 3, "2g.20gb", FieldValue::Double(0.7)),
            instance(&b, 1, "4g.40gb", FieldValue::Double(0.5)),
            instance(&a, 7, "1g.10gb", FieldValue::Double(1.0)),
            instance(&b, 2, "3g.40gb", FieldValue::Absent(Absent::Blank)),
        ];
        let sums = roll_up(&readings, 1);
        assert_eq!(sums.len(), 2, "the whole GPU 0 is not in MIG mode");
        assert_eq!(sums[0].0.index, 1);
        let expected = 3.0 / 7.0 * 0.5 + 2.0 / 7.0 * 0.7 + 1.0 / 7.0 * 1.0;
        assert!((sums[0].1.unwrap_or(-1.0) - expected).abs() < 1e-12);
        assert_eq!(sums[1].1, None, "an instance without a value: no series");
    }
}
