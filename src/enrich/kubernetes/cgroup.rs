//! The pod of a process, from `/proc/<pid>/cgroup`: the kubelet puts every container in a cgroup whose
//! path names the pod's UID and the container's id, in every layout in use:
//!
//! | layout | path |
//! |---|---|
//! | cgroup v1, cgroupfs driver | `/kubepods/burstable/pod<uid>/<container id>` |
//! | cgroup v1/v2, systemd driver | `/kubepods.slice/kubepods-burstable.slice/kubepods-burstable-pod<uid with _>.slice/cri-containerd-<id>.scope` (also `crio-`, `docker-`) |
//!
//! Only the path is read (no runtime socket, no API call). A process outside any pod (host daemons,
//! `nvidia-smi`) has no pod.

use std::path::Path;

/// The pod UID and container id of a process.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct CgroupPod {
    /// With dashes, as the API writes it.
    pub pod_uid: String,
    /// The container runtime's id (64 hex digits), when the path has it.
    pub container_id: Option<String>,
}

/// Largest cgroup file read (a process is in one cgroup per hierarchy: a few hundred bytes).
const MAX_BYTES: u64 = 64 * 1024;

/// Read and parse `<proc_root>/<pid>/cgroup`; `None` when unreadable or not in a pod.
pub fn read(proc_root: &Path, pid: u32) -> Option<CgroupPod> {
    use std::io::Read as _;
    let mut text = String::new();
    std::fs::File::open(proc_root.join(pid.to_string()).join("cgroup"))
        .and_then(|f| f.take(MAX_BYTES).read_to_string(&mut text))
        .ok()?;
    parse(&text)
}

/// The pod of the first line (hierarchy) whose path names one.
pub fn parse(text: &str) -> Option<CgroupPod> {
    text.lines().find_map(|line| {
        let path = line.splitn(3, ':').nth(2)?;
        parse_path(path)
    })
}

fn parse_path(path: &str) -> Option<CgroupPod> {
    let segments: Vec<&str> = path.split('/').filter(|s| !s.is_empty()).collect();
    let (i, uid) = segments
        .iter()
        .enumerate()
        .find_map(|(i, s)| pod_uid(s).map(|u| (i, u)))?;
    let container_id = segments.get(i + 1).and_then(|s| container_id(s));
    Some(CgroupPod {
        pod_uid: uid,
        container_id,
    })
}

/// `pod<uid>` or `kubepods-<class>-pod<uid_with_underscores>.slice`.
fn pod_uid(segment: &str) -> Option<String> {
    let s = segment.strip_suffix(".slice").unwrap_or(segment);
    let at = s.rfind("pod")?;
    let uid = s[at + 3..].replace('_', "-");
    let ok = uid.len() == 36
        && uid.char_indices().all(|(i, c)| {
            if matches!(i, 8 | 13 | 18 | 23) {
                c == '-'
            } else {
                c.is_ascii_hexdigit()
            }
        });
    ok.then(|| uid.to_ascii_lowercase())
}

/// `<id>`, `cri-containerd-<id>.scope`, `crio-<id>.scope`, `docker-<id>.scope`.
fn container_id(segment: &str) -> Option<String> {
    let s = segment.strip_suffix(".scope").unwrap_or(segment);
    let id = s.rsplit('-').next().unwrap_or(s);
    (id.len() == 64 && id.chars().all(|c| c.is_ascii_hexdigit())).then(|| id.to_string())
}

#[cfg(test)]
mod tests {
    use super::*;

    const UID: &str = "0f3c2a1e-5b7d-4c9e-8a6f-123456789abc";
    const CID: &str = "3b1f0c9d2e8a7b6c5d4e3f2a1b0c9d8e7f6a5b4c3d2e1f0a9b8c7d6e5f4a3b2c";

    #[test]
    fn every_layout() {
        let v1 = format!("12:memory:/kubepods/burstable/pod{UID}/{CID}\n11:cpu:/kubepods/burstable/pod{UID}/{CID}\n");
        let systemd = format!(
            "0::/kubepods.slice/kubepods-besteffort.slice/kubepods-besteffort-pod{}.slice/cri-containerd-{CID}.scope\n",
            UID.replace('-', "_")
        );
        let crio = format!(
            "0::/kubepods.slice/kubepods-pod{}.slice/crio-{CID}.scope\n",
            UID.replace('-', "_")
        );
        for text in [v1, systemd, crio] {
            assert_eq!(
                parse(&text),
                Some(CgroupPod {
                    pod_uid: UID.into(),
                    container_id: Some(CID.into())
                }),
                "{text}"
            );
        }
        assert_eq!(
            parse("0::/user.slice/user-1000.slice/session-3.scope\n"),
            None
        );
        assert_eq!(
            parse("0::/system.slice/nvidia-persistenced.service\n"),
            None
        );
        assert_eq!(
            parse(&format!("0::/kubepods/pod{UID}\n")).map(|p| p.container_id),
            Some(None)
        );
        assert_eq!(parse(""), None);
    }
}
