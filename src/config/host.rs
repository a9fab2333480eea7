//! The node's facts every series shares: the host label (`--no-hostname` drops it) and the Kubernetes
//! node name (`NODE_NAME`). Settled once at start-up, before any feature is resolved; each snapshot
//! carries them.

/// Facts about the node, the same for every entity.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct HostInfo {
    /// Value of the host label; `None` with `--no-hostname`.
    pub hostname: Option<String>,
    /// `NODE_NAME` when running in Kubernetes.
    pub node_name: Option<String>,
}
