//! Attribution as data: who uses an entity (a Kubernetes pod, an HPC job, a team...), written by the
//! enrichers as attributes, read by every exporter without knowing which enricher wrote them.
//!
//! An [`Attribute`] is a value under an [`AttributeKey`], and the key says how each exporter spells it
//! (the Prometheus label name, its dcgm-exporter 1.x spelling under `-o`, the OpenTelemetry attribute
//! key) and where dcgm-exporter puts it among the labels ([`Placement`]). An entity's [`Attribution`]
//! is a list of attribute sets, one per party using it: a device shared by three pods has three sets.
//! An enricher either adds attributes to every set ([`Attribution::add`]), splits the entity into
//! alternatives that each get their own series ([`Attribution::split`]: the cross product with the sets
//! already there; HPC jobs, `--kubernetes-virtual-gpus`), or records parties that share the device while
//! :9400 writes it once, under one of them ([`Attribution::share`]: dcgm-exporter's default for a GPU
//! several pods share, one series labelled with the pod it chose). Every set is a holder for OTLP and the
//! per-pod families ([`Attribution::sets`]); :9400 writes one series per set of
//! [`Attribution::exposition_sets`], so one measurement is never written twice there. Within a set each
//! key appears once, the last write winning; sets keep insertion order and the exporters sort by the name
//! they write.

use std::borrow::Cow;
use std::sync::{Arc, LazyLock};

/// Where dcgm-exporter writes an attribute among a series' labels: after the entity's identity come
/// the `label`-type fields together with the [`Placement::Labels`] attributes (pod labels) sorted by
/// name, then the [`Placement::Attributes`] (pod, namespace, container, hpc_job, ...) sorted by name.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum Placement {
    Labels,
    Attributes,
    /// Written on OTLP only, never as a :9400 label (dcgm-exporter has no such label, and its series
    /// must keep their label sets): a container's id beside its name.
    OtlpOnly,
}

/// The name of an attribute, per exporter.
#[derive(Debug, Clone, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct AttributeKey {
    /// Prometheus label name, as dcgm-exporter writes it (`pod`, `hpc_job`): also the OTLP attribute
    /// key with `--otel-attribute-style dcgm`.
    pub prometheus: Cow<'static, str>,
    /// The label name under `-o/--use-old-namespace` (dcgm-exporter 1.x: `pod_name`), when different.
    pub prometheus_v1: Option<Cow<'static, str>>,
    /// OpenTelemetry attribute key (semantic conventions: `k8s.pod.name`).
    pub otel: Cow<'static, str>,
    pub placement: Placement,
}

impl AttributeKey {
    /// A key spelled the same way everywhere but in OTel.
    pub fn new(
        prometheus: impl Into<Cow<'static, str>>,
        otel: impl Into<Cow<'static, str>>,
        placement: Placement,
    ) -> Arc<AttributeKey> {
        Arc::new(AttributeKey {
            prometheus: prometheus.into(),
            prometheus_v1: None,
            otel: otel.into(),
            placement,
        })
    }

    /// The Prometheus label name (`old_namespace`: the dcgm-exporter 1.x spelling).
    pub fn prometheus_name(&self, old_namespace: bool) -> &str {
        match (&self.prometheus_v1, old_namespace) {
            (Some(v1), true) => v1,
            _ => &self.prometheus,
        }
    }
}

fn well_known(
    prometheus: &'static str,
    prometheus_v1: Option<&'static str>,
    otel: &'static str,
) -> Arc<AttributeKey> {
    Arc::new(AttributeKey {
        prometheus: Cow::Borrowed(prometheus),
        prometheus_v1: prometheus_v1.map(Cow::Borrowed),
        otel: Cow::Borrowed(otel),
        placement: Placement::Attributes,
    })
}

/// `pod` (`pod_name` with `-o`), `k8s.pod.name`.
pub static POD: LazyLock<Arc<AttributeKey>> =
    LazyLock::new(|| well_known("pod", Some("pod_name"), "k8s.pod.name"));
/// `namespace` (`pod_namespace` with `-o`), `k8s.namespace.name`.
pub static NAMESPACE: LazyLock<Arc<AttributeKey>> =
    LazyLock::new(|| well_known("namespace", Some("pod_namespace"), "k8s.namespace.name"));
/// `container` (`container_name` with `-o`), `k8s.container.name`.
pub static CONTAINER: LazyLock<Arc<AttributeKey>> =
    LazyLock::new(|| well_known("container", Some("container_name"), "k8s.container.name"));
/// `pod_uid`, `k8s.pod.uid`.
pub static POD_UID: LazyLock<Arc<AttributeKey>> =
    LazyLock::new(|| well_known("pod_uid", None, "k8s.pod.uid"));
/// `hpc_job`, `hpc.job.id`.
pub static HPC_JOB: LazyLock<Arc<AttributeKey>> =
    LazyLock::new(|| well_known("hpc_job", None, "hpc.job.id"));

/// What an attribute says of the party (a pod, an HPC job) that holds a device.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum HolderPart {
    /// Tells the holder apart: the pod's namespace and name, the job.
    Identity,
    /// Describes the holder as a whole: the pod's uid and labels.
    Whole,
    /// Differs within the holder: a container, the device replica it holds, a DRA claim.
    Within,
}

impl AttributeKey {
    /// What this attribute says of its holder ([`HolderPart`]).
    pub fn holder_part(&self) -> HolderPart {
        if *self == **POD || *self == **NAMESPACE || *self == **HPC_JOB {
            HolderPart::Identity
        } else if *self == **POD_UID || self.placement == Placement::Labels {
            HolderPart::Whole
        } else {
            HolderPart::Within
        }
    }
}

/// One attribute: a key and its value.
#[derive(Debug, Clone, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct Attribute {
    pub key: Arc<AttributeKey>,
    pub value: Arc<str>,
}

impl Attribute {
    pub fn new(key: &Arc<AttributeKey>, value: impl Into<Arc<str>>) -> Attribute {
        Attribute {
            key: key.clone(),
            value: value.into(),
        }
    }
}

/// Who uses an entity: one attribute set per party. Empty means not attributed — one series with no
/// attributes at all.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Attribution {
    sets: Vec<Vec<Attribute>>,
    /// Per set: whether it stands for a party that shares the device with the one :9400 writes it
    /// under ([`Attribution::share`]); such a set has no series of its own on :9400.
    co_holder: Vec<bool>,
}

/// The one set of an unattributed entity.
const NO_ATTRIBUTES: &[Attribute] = &[];

impl Attribution {
    pub fn is_empty(&self) -> bool {
        self.sets.is_empty()
    }

    /// The attribute sets, one per party using the entity (OTLP's holders, the per-pod families); a
    /// single empty set when nothing was attributed.
    pub fn sets(&self) -> impl Iterator<Item = &[Attribute]> {
        let none = self.sets.is_empty().then_some(NO_ATTRIBUTES);
        none.into_iter().chain(self.sets.iter().map(Vec::as_slice))
    }

    /// The sets :9400 writes a series for, each with its index in [`Attribution::sets`]: every set but
    /// the co-holders of a shared device ([`Attribution::share`]); a single empty set when nothing was
    /// attributed.
    pub fn exposition_sets(&self) -> impl Iterator<Item = (usize, &[Attribute])> {
        let co_holder = &self.co_holder;
        self.sets()
            .enumerate()
            .filter(move |(i, _)| !co_holder.get(*i).copied().unwrap_or(false))
    }

    /// Number of parties the entity has (at least one).
    pub fn series(&self) -> usize {
        self.sets.len().max(1)
    }

    /// Add attributes to every series of the entity (replacing a value under the same key).
    pub fn add(&mut self, attributes: &[Attribute]) {
        if attributes.is_empty() {
            return;
        }
        if self.sets.is_empty() {
            self.sets.push(Vec::new());
            self.co_holder.push(false);
        }
        for set in &mut self.sets {
            for a in attributes {
                put(set, a.clone());
            }
        }
    }

    /// The entity is used by several parties at once, each written as its own series (several HPC
    /// jobs, pods with `--kubernetes-virtual-gpus`): every set it has so far becomes one set per
    /// alternative. No alternatives: nothing changes.
    pub fn split(&mut self, alternatives: &[Vec<Attribute>]) {
        self.cross(alternatives, None);
    }

    /// The entity is used by several parties at once and measured once (pods time-slicing a GPU): every
    /// set it has so far becomes one set per alternative, as [`Attribution::split`], but :9400 writes
    /// only those of the alternative `holder` (dcgm-exporter's one series per device, labelled with the
    /// holder it chose); the others are co-holders, kept for OTLP and the per-pod families.
    pub fn share(&mut self, alternatives: &[Vec<Attribute>], holder: usize) {
        self.cross(alternatives, Some(holder));
    }

    /// The cross product of the sets with `alternatives`; with `holder`, the sets of the other
    /// alternatives are co-holders.
    fn cross(&mut self, alternatives: &[Vec<Attribute>], holder: Option<usize>) {
        match alternatives {
            [] => {}
            [only] => self.add(only),
            _ => {
                let (existing, marks) = if self.sets.is_empty() {
                    (vec![Vec::new()], vec![false])
                } else {
                    (
                        std::mem::take(&mut self.sets),
                        std::mem::take(&mut self.co_holder),
                    )
                };
                let n = existing.len() * alternatives.len();
                let (mut out, mut out_marks) = (Vec::with_capacity(n), Vec::with_capacity(n));
                for (set, &mark) in existing.iter().zip(&marks) {
                    for (k, alt) in alternatives.iter().enumerate() {
                        let mut s = set.clone();
                        for a in alt {
                            put(&mut s, a.clone());
                        }
                        out.push(s);
                        out_marks.push(mark || holder.is_some_and(|h| h != k));
                    }
                }
                self.sets = out;
                self.co_holder = out_marks;
            }
        }
    }

    /// Forget every attribute under `key` (an enricher replacing what an earlier run wrote).
    pub fn remove(&mut self, key: &AttributeKey) {
        let mut kept: Vec<(Vec<Attribute>, bool)> = Vec::with_capacity(self.sets.len());
        for (mut set, mark) in std::mem::take(&mut self.sets)
            .into_iter()
            .zip(std::mem::take(&mut self.co_holder))
        {
            set.retain(|a| *a.key != *key);
            if set.is_empty() {
                continue;
            }
            // Sets made equal: one set, written when any of them was.
            match kept.iter_mut().find(|(k, _)| *k == set) {
                Some((_, kept_mark)) => *kept_mark &= mark,
                None => kept.push((set, mark)),
            }
        }
        (self.sets, self.co_holder) = kept.into_iter().unzip();
    }
}

/// Insert or replace by key (the Prometheus name identifies a key).
fn put(set: &mut Vec<Attribute>, a: Attribute) {
    match set
        .iter_mut()
        .find(|x| x.key.prometheus == a.key.prometheus)
    {
        Some(slot) => *slot = a,
        None => set.push(a),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn values(attr: &Attribution) -> Vec<Vec<(String, String)>> {
        attr.sets()
            .map(|s| {
                s.iter()
                    .map(|a| (a.key.prometheus.to_string(), a.value.to_string()))
                    .collect()
            })
            .collect()
    }

    #[test]
    fn add_and_split_make_one_series_per_alternative() {
        let mut a = Attribution::default();
        assert_eq!(a.series(), 1);
        assert_eq!(values(&a), vec![Vec::<(String, String)>::new()]);
        a.split(&[
            vec![Attribute::new(&POD, "p1")],
            vec![Attribute::new(&POD, "p2")],
        ]);
        a.split(&[
            vec![Attribute::new(&HPC_JOB, "j1")],
            vec![Attribute::new(&HPC_JOB, "j2")],
        ]);
        let team = AttributeKey::new("team", "team", Placement::Attributes);
        a.add(&[Attribute::new(&team, "x")]);
        assert_eq!(a.series(), 4);
        let v = values(&a);
        assert_eq!(
            v[0],
            [("pod", "p1"), ("hpc_job", "j1"), ("team", "x")]
                .map(|(k, v)| (k.to_string(), v.to_string()))
        );
        assert_eq!(v[3][0].1, "p2");
        assert_eq!(v[3][1].1, "j2");
        // The same key again replaces the value.
        a.add(&[Attribute::new(&team, "y")]);
        assert!(a
            .sets()
            .all(|s| s.iter().filter(|x| x.key.prometheus == "team").count() == 1));
        a.remove(&HPC_JOB);
        assert_eq!(a.series(), 2);
    }

    /// A shared device: every pod is a party (`sets`), :9400 writes the holder's set only; a later
    /// split (HPC jobs) keeps that, per job.
    #[test]
    fn share_writes_the_holder_only_on_9400() {
        let pods = [
            vec![Attribute::new(&POD, "p1")],
            vec![Attribute::new(&POD, "p2")],
            vec![Attribute::new(&POD, "p3")],
        ];
        let mut a = Attribution::default();
        a.share(&pods, 1);
        assert_eq!(a.series(), 3);
        let written = |a: &Attribution| -> Vec<(usize, String)> {
            a.exposition_sets()
                .map(|(i, s)| (i, s.iter().map(|x| x.value.to_string()).collect()))
                .collect()
        };
        assert_eq!(written(&a), vec![(1, "p2".to_string())]);
        a.split(&[
            vec![Attribute::new(&HPC_JOB, "j1")],
            vec![Attribute::new(&HPC_JOB, "j2")],
        ]);
        assert_eq!(a.series(), 6);
        assert_eq!(
            written(&a),
            vec![(2, "p2j1".to_string()), (3, "p2j2".to_string())]
        );
        // Without a share every set is written; nothing attributed: one empty set.
        let mut b = Attribution::default();
        assert_eq!(written(&b), vec![(0, String::new())]);
        b.split(&pods);
        assert_eq!(written(&b).len(), 3);
        // Removing the key that told the pods apart leaves one set, written.
        a.remove(&POD);
        assert_eq!(
            written(&a),
            vec![(0, "j1".to_string()), (1, "j2".to_string())]
        );
    }

    #[test]
    fn old_namespace_spelling() {
        assert_eq!(POD.prometheus_name(true), "pod_name");
        assert_eq!(POD.prometheus_name(false), "pod");
        assert_eq!(HPC_JOB.prometheus_name(true), "hpc_job");
    }
}
