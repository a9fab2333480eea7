//! The derived families on :9400 (XID counts, clock events, health, a pod's GPU-seconds): one
//! header per family and a sample per entity and series labels, as dcgm-exporter writes them.

use super::values::{ValueFormatter, ValueStyle};
use super::Renderer;
use crate::export::entity_labels::identity_labels;
use crate::snapshot::{Entity, FieldValue, Placement, Snapshot};
use crate::telemetry::exposition::{escape_help, label_names, push_label};

impl Renderer {
    /// The derived families (per-pod cost counters) after the DCGM families: one `# HELP`/`# TYPE`
    /// each, every sample with its entity's identity labels, then its attributes placed and sorted as
    /// on DCGM series (label-class first, then attribute-class; on a name clash the attribute wins).
    pub(super) fn render_derived(
        &self,
        snap: &Snapshot,
        out: &mut String,
        fmt: &mut ValueFormatter,
    ) -> usize {
        let mut identities: std::collections::HashMap<&Entity, (String, Vec<Box<str>>)> =
            std::collections::HashMap::new();
        let old = self.style.use_old_namespace;
        let hostname = snap.host.hostname.as_deref();
        let mut samples = 0;
        for fam in &snap.derived {
            let info = &*fam.info;
            let mut wrote_header = false;
            for s in &fam.samples {
                let Some(value) = fmt.format(&FieldValue::Double(s.value), ValueStyle::Shortest)
                else {
                    continue;
                };
                if !wrote_header {
                    out.push_str("# HELP ");
                    out.push_str(info.name);
                    out.push(' ');
                    escape_help(&info.help, out);
                    out.push_str("\n# TYPE ");
                    out.push_str(info.name);
                    out.push(' ');
                    out.push_str(info.kind.as_str());
                    out.push('\n');
                    wrote_header = true;
                }
                // The entity's identity labels and their names (made once per entity and render):
                // never a second label of an identity label's name (a pod label `gpu`).
                let (base, identity) = identities.entry(&*s.entity).or_insert_with(|| {
                    let base = identity_labels(&self.style, &s.entity, hostname);
                    let names = label_names(&base).into_iter().map(Box::from).collect();
                    (base, names)
                });
                let base = base.as_str();
                let identity: &[Box<str>] = identity;
                let mut attributes: Vec<(&str, &str)> = s
                    .attributes
                    .iter()
                    .filter(|a| a.key.placement == Placement::Attributes)
                    .map(|a| (a.key.prometheus_name(old), &*a.value))
                    .filter(|(k, _)| !identity.iter().any(|n| &**n == *k))
                    .collect();
                attributes.sort();
                let mut labels: Vec<(&str, &str)> = s
                    .attributes
                    .iter()
                    .filter(|a| a.key.placement == Placement::Labels)
                    .map(|a| (a.key.prometheus_name(old), &*a.value))
                    .chain(s.labels.iter().map(|l| (&*l.prometheus, &*l.value)))
                    .filter(|(k, _)| !attributes.iter().any(|(a, _)| a == k))
                    .filter(|(k, _)| !identity.iter().any(|n| &**n == *k))
                    .collect();
                labels.sort();
                labels.dedup_by(|a, b| a.0 == b.0);
                out.push_str(info.name);
                out.push('{');
                out.push_str(base);
                let mut first = base.is_empty();
                for (k, v) in labels.iter().chain(&attributes) {
                    push_label(out, &mut first, k, v);
                }
                out.push_str("} ");
                out.push_str(value);
                out.push('\n');
                samples += 1;
            }
        }
        samples
    }
}
