//! Container labels without Kubernetes (`--container-labels`, `--container-runtime-socket`), as
//! dcgm-exporter 4.8.3 has them: on a Docker host (or Podman's compatible API), the series of a GPU or
//! MIG instance assigned explicitly to a running container carry `container` (its name, else its short
//! id); OTLP gets `container.name` through the same attribute.
//!
//! Assigned explicitly means a `--gpus` device request naming devices (`device=0,1`, UUIDs), `--gpus
//! all`, or `NVIDIA_VISIBLE_DEVICES` with indexes, UUIDs or `all`; a count (`--gpus 2`) says nothing
//! about which GPU and stays unlabeled. A whole GPU given to a container labels its MIG instances and
//! NvLinks too; several containers on one GPU give one series each. Per-process series
//! (`--collect-processes`) get the container their process runs in, from `/proc/<pid>/cgroup` (under
//! `--proc-root`): Docker's `docker-<id>.scope` or `/docker/<id>`, Podman's `libpod-<id>.scope`.
//!
//! The Docker Engine API is asked (list running containers, inspect each) on a thread of its own, woken
//! once per collection; the enricher reads the last answer, so an absent or slow socket never delays a
//! collection. The runtime is trusted with container names, not with the exporter's memory or time:
//! each call has an overall deadline ([`TIMEOUT`], however the answer trickles in) and a size cap
//! ([`MAX_ANSWER`]), a whole refresh a deadline ([`REFRESH_DEADLINE`]), and answers are decoded into
//! typed structs holding only what is read. A failed refresh is logged once per outage, counted in
//! `dcgm_otel_container_runtime_errors_total`, and keeps the last answer.

use std::collections::HashMap;
use std::io::{Read, Write};
use std::os::unix::net::UnixStream;
use std::path::{Path, PathBuf};
use std::sync::mpsc::{sync_channel, Receiver, SyncSender};
use std::sync::{Arc, LazyLock};
use std::time::{Duration, Instant};

use arc_swap::ArcSwap;
use serde::Deserialize;

use super::Enricher;
use crate::snapshot::attribution::{Attribute, AttributeKey, Placement};
use crate::snapshot::{EntityReading, ProcessReading};
use crate::telemetry::self_metrics::{Metric, SelfMetrics};

/// The longest one API call (connect, request, the whole answer) may take.
pub const TIMEOUT: Duration = Duration::from_secs(2);
/// The longest a whole refresh (the list and every inspect) may take.
pub const REFRESH_DEADLINE: Duration = Duration::from_secs(10);
/// Largest API answer read: a list of a thousand containers is about 1.5 MiB, an inspect a few KiB.
pub const MAX_ANSWER: usize = 4 << 20;

/// `container`, `container.name`.
pub static CONTAINER_NAME: LazyLock<Arc<AttributeKey>> =
    LazyLock::new(|| AttributeKey::new("container", "container.name", Placement::Attributes));

/// `container.id` on OTLP only (dcgm-exporter's series have no container id label).
pub static CONTAINER_ID: LazyLock<Arc<AttributeKey>> =
    LazyLock::new(|| AttributeKey::new("container_id", "container.id", Placement::OtlpOnly));

/// The container flags (`Kubernetes` in `--help`, beside the other attribution flags).
#[derive(Debug, Clone, clap::Args)]
#[command(next_help_heading = "Kubernetes")]
pub struct ContainerArgs {
    /// Without Kubernetes: label the series of GPUs assigned to running containers with `container`,
    /// from the container runtime's Docker-compatible API (--container-runtime-socket).
    #[arg(long = "container-labels", env = "DCGM_EXPORTER_CONTAINER_LABELS", action = clap::ArgAction::SetTrue)]
    pub container_labels: bool,

    /// The runtime's API socket, e.g. /var/run/docker.sock or /run/podman/podman.sock.
    #[arg(
        long = "container-runtime-socket",
        env = "DCGM_CONTAINER_RUNTIME_SOCKET",
        value_name = "PATH"
    )]
    pub container_runtime_socket: Option<PathBuf>,
}

impl ContainerArgs {
    /// The socket when container labels are on; `Err` with the line to print when the socket is
    /// missing.
    pub fn socket(&self) -> Result<Option<&Path>, String> {
        if !self.container_labels {
            return Ok(None);
        }
        match self
            .container_runtime_socket
            .as_deref()
            .filter(|p| !p.as_os_str().is_empty())
        {
            Some(p) => Ok(Some(p)),
            None => Err("--container-labels needs --container-runtime-socket (the Docker or Podman API socket, e.g. /var/run/docker.sock)".into()),
        }
    }
}

/// Which GPUs a container was given.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Devices {
    All,
    /// Indexes, `GPU-` or `MIG-` UUIDs.
    Listed(Vec<String>),
}

/// A running container with GPUs assigned explicitly.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Claim {
    pub container: String,
    /// The container's full id (OTLP `container.id`; empty when the runtime gave none).
    pub id: String,
    pub devices: Devices,
}

/// A container's inspect answer (`GET /containers/{id}/json`), as far as it is read.
#[derive(Debug, Clone, Default, Deserialize)]
#[serde(default)]
pub struct Inspect {
    #[serde(rename = "Id")]
    pub id: Option<String>,
    #[serde(rename = "Name")]
    pub name: Option<String>,
    #[serde(rename = "HostConfig")]
    pub host_config: Option<HostConfig>,
    #[serde(rename = "Config")]
    pub config: Option<ContainerConfig>,
}

/// `HostConfig`: the device requests (`--gpus`).
#[derive(Debug, Clone, Default, Deserialize)]
#[serde(default)]
pub struct HostConfig {
    #[serde(rename = "DeviceRequests")]
    pub device_requests: Option<Vec<DeviceRequest>>,
}

/// One device request.
#[derive(Debug, Clone, Default, Deserialize)]
#[serde(default)]
pub struct DeviceRequest {
    #[serde(rename = "Driver")]
    pub driver: Option<String>,
    #[serde(rename = "Count")]
    pub count: Option<i64>,
    #[serde(rename = "DeviceIDs")]
    pub device_ids: Option<Vec<String>>,
    #[serde(rename = "Capabilities")]
    pub capabilities: Option<Vec<Vec<String>>>,
}

/// `Config`: the environment.
#[derive(Debug, Clone, Default, Deserialize)]
#[serde(default)]
pub struct ContainerConfig {
    #[serde(rename = "Env")]
    pub env: Option<Vec<String>>,
}

/// One running container of a list answer (`GET /containers/json`).
#[derive(Debug, Clone, Default, Deserialize)]
#[serde(default)]
struct Listed {
    #[serde(rename = "Id")]
    id: Option<String>,
    #[serde(rename = "Names")]
    names: Option<Vec<String>>,
}

/// The claim in a container's inspect answer, if it has one.
pub fn claim(inspect: &Inspect) -> Option<Claim> {
    let name = inspect
        .name
        .as_deref()
        .unwrap_or("")
        .trim_start_matches('/');
    let id = inspect.id.as_deref().unwrap_or("");
    let container = if name.is_empty() {
        id.chars().take(12).collect()
    } else {
        name.to_string()
    };
    if container.is_empty() {
        return None;
    }
    let requests = inspect
        .host_config
        .as_ref()
        .and_then(|h| h.device_requests.as_deref());
    let env = inspect.config.as_ref().and_then(|c| c.env.as_deref());
    let devices = requests
        .and_then(requested)
        .or_else(|| env.and_then(visible_devices))?;
    Some(Claim {
        container,
        id: id.to_string(),
        devices,
    })
}

/// `--gpus`: a device request for GPUs naming devices, or asking for all (count -1).
fn requested(requests: &[DeviceRequest]) -> Option<Devices> {
    let mut listed = Vec::new();
    for r in requests {
        let nvidia = r.driver.as_deref() == Some("nvidia")
            || r.capabilities
                .iter()
                .flatten()
                .any(|caps| caps.iter().any(|c| c == "gpu"));
        if !nvidia {
            continue;
        }
        let ids: Vec<String> = r
            .device_ids
            .iter()
            .flatten()
            .flat_map(|s| s.split(','))
            .map(|s| s.trim().to_string())
            .filter(|s| !s.is_empty())
            .collect();
        if !ids.is_empty() {
            listed.extend(ids);
        } else if r.count == Some(-1) {
            return Some(Devices::All);
        }
    }
    (!listed.is_empty()).then_some(Devices::Listed(listed))
}

/// `NVIDIA_VISIBLE_DEVICES=all|0,1|GPU-...` in the container's environment.
fn visible_devices(env: &[String]) -> Option<Devices> {
    let value = env
        .iter()
        .find_map(|kv| kv.strip_prefix("NVIDIA_VISIBLE_DEVICES="))?
        .trim();
    match value {
        "all" => Some(Devices::All),
        "" | "none" | "void" => None,
        list => {
            let ids: Vec<String> = list
                .split(',')
                .map(|s| s.trim().to_string())
                .filter(|s| !s.is_empty())
                .collect();
            (!ids.is_empty()).then_some(Devices::Listed(ids))
        }
    }
}

/// Label the entities a claim covers: one series per container holding the entity.
pub fn apply(claims: &[Claim], entities: &mut [EntityReading]) {
    for e in entities {
        let Some(gpu) = &e.entity.gpu else {
            continue;
        };
        let index = gpu.index.to_string();
        let holders: Vec<Vec<Attribute>> = claims
            .iter()
            .filter(|c| match &c.devices {
                Devices::All => true,
                Devices::Listed(ids) => ids.iter().any(|id| {
                    *id == index
                        || *id == gpu.uuid
                        || e.entity.mig.as_ref().is_some_and(|m| *id == m.uuid)
                }),
            })
            .map(|c| {
                let mut holder = vec![Attribute::new(&CONTAINER_NAME, c.container.as_str())];
                if !c.id.is_empty() {
                    holder.push(Attribute::new(&CONTAINER_ID, c.id.as_str()));
                }
                holder
            })
            .collect();
        std::sync::Arc::make_mut(&mut e.attribution).split(&holders);
    }
}

/// A failed API call.
#[derive(Debug, thiserror::Error)]
pub enum ApiError {
    #[error("{0}")]
    Io(#[from] std::io::Error),
    #[error("{path}: HTTP status {status}")]
    Status { path: String, status: String },
    #[error("{path}: {message}")]
    Answer { path: String, message: String },
    #[error("{path}: no complete answer within {limit:?} (cut off)")]
    Deadline { path: String, limit: Duration },
    #[error("{path}: answer larger than {MAX_ANSWER} bytes (cut off)")]
    TooLarge { path: String },
}

/// The raw answer to `GET path`, read until the runtime closes the connection, by `deadline`, at most
/// [`MAX_ANSWER`] bytes.
fn read_answer(socket: &Path, path: &str, deadline: Instant) -> Result<Vec<u8>, ApiError> {
    let left = |now: Instant| {
        deadline
            .checked_duration_since(now)
            .filter(|d| !d.is_zero())
    };
    let cut = || ApiError::Deadline {
        path: path.to_string(),
        limit: TIMEOUT,
    };
    let mut s = UnixStream::connect(socket)?;
    s.set_write_timeout(Some(left(Instant::now()).ok_or_else(cut)?))?;
    s.write_all(format!("GET {path} HTTP/1.0\r\nHost: docker\r\n\r\n").as_bytes())?;
    let mut raw = Vec::new();
    let mut buf = [0u8; 16 * 1024];
    loop {
        // The read timeout is what is left of the call's deadline, however the bytes trickle in.
        s.set_read_timeout(Some(left(Instant::now()).ok_or_else(cut)?))?;
        let n = match s.read(&mut buf) {
            Ok(0) => return Ok(raw),
            Ok(n) => n,
            Err(e) if e.kind() == std::io::ErrorKind::Interrupted => continue,
            Err(e)
                if matches!(
                    e.kind(),
                    std::io::ErrorKind::WouldBlock | std::io::ErrorKind::TimedOut
                ) =>
            {
                return Err(cut())
            }
            Err(e) => return Err(e.into()),
        };
        if raw.len() + n > MAX_ANSWER {
            return Err(ApiError::TooLarge {
                path: path.to_string(),
            });
        }
        raw.extend_from_slice(&buf[..n]);
    }
}

/// `GET path` on the API socket (HTTP/1.0: one request per connection, no chunked answer), within
/// [`TIMEOUT`] and the refresh's `deadline`, decoded as a `T`.
fn get<T: serde::de::DeserializeOwned>(
    socket: &Path,
    path: &str,
    deadline: Instant,
) -> Result<T, ApiError> {
    let raw = read_answer(socket, path, deadline.min(Instant::now() + TIMEOUT))?;
    let answer = |message: &str| ApiError::Answer {
        path: path.to_string(),
        message: message.to_string(),
    };
    let split = raw
        .windows(4)
        .position(|w| w == b"\r\n\r\n")
        .ok_or_else(|| answer("no HTTP header end"))?;
    let head = String::from_utf8_lossy(&raw[..split]);
    let status = head
        .lines()
        .next()
        .and_then(|l| l.split_whitespace().nth(1))
        .unwrap_or("");
    if status != "200" {
        return Err(ApiError::Status {
            path: path.to_string(),
            status: status.to_string(),
        });
    }
    serde_json::from_slice(&raw[split + 4..]).map_err(|e| answer(&format!("not JSON: {e}")))
}

/// What the runtime said at the last refresh.
#[derive(Debug, Default)]
pub struct Known {
    /// The running containers with GPUs assigned explicitly.
    pub claims: Vec<Claim>,
    /// Every running container's name (short id when unnamed), by full id.
    pub names: HashMap<String, String>,
}

/// Ask the runtime for the running containers and their claims, within [`REFRESH_DEADLINE`].
pub fn known(socket: &Path) -> Result<Known, ApiError> {
    let deadline = Instant::now() + REFRESH_DEADLINE;
    let list: Vec<Listed> = get(socket, "/containers/json", deadline)?;
    let mut names = HashMap::new();
    for c in &list {
        let Some(id) = c.id.as_deref() else { continue };
        let name = c
            .names
            .as_ref()
            .and_then(|n| n.first())
            .map(|n| n.trim_start_matches('/').to_string())
            .filter(|n| !n.is_empty())
            .unwrap_or_else(|| id.chars().take(12).collect());
        names.insert(id.to_string(), name);
    }
    Ok(Known {
        claims: claims(socket, &list, deadline)?,
        names,
    })
}

/// The claims of the containers in a list answer, from their inspect answers.
fn claims(socket: &Path, list: &[Listed], deadline: Instant) -> Result<Vec<Claim>, ApiError> {
    let mut out = Vec::new();
    for c in list {
        let Some(id) = c.id.as_deref().filter(|id| {
            !id.is_empty()
                && id
                    .bytes()
                    .all(|b| b.is_ascii_alphanumeric() || b == b'_' || b == b'-')
        }) else {
            continue;
        };
        match get::<Inspect>(socket, &format!("/containers/{id}/json"), deadline) {
            Ok(inspect) => out.extend(claim(&inspect)),
            // Gone between the list and the inspect.
            Err(ApiError::Status { status, .. }) if status == "404" => {}
            Err(e) => return Err(e),
        }
    }
    Ok(out)
}

/// The container id in a `/proc/<pid>/cgroup` text: the first path segment that is, or ends in,
/// `docker-<64 hex>.scope`, `libpod-<64 hex>.scope` or a bare 64-hex id (cgroupfs driver).
pub fn container_id(cgroup: &str) -> Option<&str> {
    let hex64 = |s: &str| s.len() == 64 && s.bytes().all(|b| b.is_ascii_hexdigit());
    cgroup
        .lines()
        .filter_map(|l| l.splitn(3, ':').nth(2))
        .flat_map(|path| path.split('/'))
        .find_map(|seg| {
            let id = seg
                .strip_suffix(".scope")
                .and_then(|s| {
                    s.strip_prefix("docker-")
                        .or_else(|| s.strip_prefix("libpod-"))
                })
                .unwrap_or(seg);
            hex64(id).then_some(id)
        })
}

/// Give each process the name of the container its cgroup names, when the runtime knows it.
pub fn apply_processes(
    names: &HashMap<String, String>,
    proc_root: &Path,
    processes: &mut [ProcessReading],
) {
    if names.is_empty() {
        return;
    }
    for p in processes {
        let Some(pid) = p.pid else { continue };
        let Ok(text) = std::fs::read_to_string(proc_root.join(pid.to_string()).join("cgroup"))
        else {
            continue;
        };
        let Some(id) = container_id(&text) else {
            continue;
        };
        if let Some(name) = names.get(id) {
            Arc::make_mut(&mut p.attribution).add(&[
                Attribute::new(&CONTAINER_NAME, name.as_str()),
                Attribute::new(&CONTAINER_ID, id),
            ]);
        }
    }
}

/// The enricher: wakes the refresher, applies its last answer.
pub struct ContainerEnricher {
    known: Arc<ArcSwap<Known>>,
    wake: SyncSender<()>,
    proc_root: PathBuf,
}

impl ContainerEnricher {
    pub fn new(
        socket: PathBuf,
        proc_root: PathBuf,
        registry: &SelfMetrics,
    ) -> std::io::Result<ContainerEnricher> {
        let known = Arc::new(ArcSwap::from_pointee(Known::default()));
        let errors = registry.counter(
            "dcgm_otel_container_runtime_errors_total",
            "Refreshes of the container list that failed (--container-runtime-socket): absent, slow or wrong answers.",
            &[],
        );
        let (wake, woken) = sync_channel(1);
        let shared = known.clone();
        tracing::info!(socket = %socket.display(), "container labels on: GPUs assigned to running containers get a container label");
        std::thread::Builder::new()
            .name("containers".into())
            .spawn(move || refresh(socket, shared, errors, woken))?;
        Ok(ContainerEnricher {
            known,
            wake,
            proc_root,
        })
    }
}

fn refresh(socket: PathBuf, known: Arc<ArcSwap<Known>>, errors: Arc<Metric>, woken: Receiver<()>) {
    let mut failing = false;
    while woken.recv().is_ok() {
        match self::known(&socket) {
            Ok(found) => {
                if failing {
                    tracing::info!(socket = %socket.display(), "container runtime answers again");
                    failing = false;
                }
                known.store(Arc::new(found));
            }
            Err(e) => {
                errors.inc();
                if !failing {
                    tracing::warn!(socket = %socket.display(), error = %e, "container runtime API failed; container labels stay as last known until it answers");
                    failing = true;
                }
            }
        }
    }
}

impl Enricher for ContainerEnricher {
    fn name(&self) -> &'static str {
        "containers"
    }

    fn enrich(&mut self, entities: &mut [EntityReading]) {
        // A refresh already pending or running is enough: never wait for it.
        let _ = self.wake.try_send(());
        apply(&self.known.load().claims, entities);
    }

    fn enrich_processes(&mut self, processes: &mut [ProcessReading]) {
        apply_processes(&self.known.load().names, &self.proc_root, processes);
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::{json, Value};

    #[test]
    fn container_ids_from_cgroups() {
        let id = "0123456789abcdef0123456789abcdef0123456789abcdef0123456789abcdef";
        for text in [
            format!("0::/system.slice/docker-{id}.scope\n"),
            format!("12:memory:/docker/{id}\n0::/\n"),
            format!("0::/machine.slice/libpod-{id}.scope/container\n"),
        ] {
            assert_eq!(container_id(&text), Some(id), "{text}");
        }
        assert_eq!(
            container_id("0::/user.slice/user-1000.slice/session-3.scope\n"),
            None
        );
        assert_eq!(container_id("0::/system.slice/docker-abc.scope\n"), None);
        assert_eq!(container_id(""), None);
    }

    #[test]
    fn claims_from_inspect_answers() {
        let c = |v: Value| claim(&serde_json::from_value(v).unwrap());
        let listed = |ids: &[&str]| Devices::Listed(ids.iter().map(|s| s.to_string()).collect());
        assert_eq!(
            c(
                json!({"Id": "abc", "Name": "/trainer", "HostConfig": {"DeviceRequests": [
                {"Driver": "", "Count": 0, "DeviceIDs": ["0", "GPU-1"], "Capabilities": [["gpu"]]}]}})
            ),
            Some(Claim {
                container: "trainer".into(),
                id: "abc".into(),
                devices: listed(&["0", "GPU-1"])
            })
        );
        assert_eq!(
            c(
                json!({"Id": "0123456789abcdef", "HostConfig": {"DeviceRequests": [
                {"Driver": "nvidia", "Count": -1}]}})
            ),
            Some(Claim {
                container: "0123456789ab".into(),
                id: "0123456789abcdef".into(),
                devices: Devices::All
            })
        );
        // A count names no GPU.
        assert_eq!(
            c(
                json!({"Id": "a", "Name": "/n", "HostConfig": {"DeviceRequests": [
                {"Driver": "", "Count": 2, "Capabilities": [["gpu"]]}]}})
            ),
            None
        );
        assert_eq!(
            c(
                json!({"Id": "a", "Name": "/n", "Config": {"Env": ["PATH=/bin", "NVIDIA_VISIBLE_DEVICES=1, MIG-x"]}})
            ),
            Some(Claim {
                container: "n".into(),
                id: "a".into(),
                devices: listed(&["1", "MIG-x"])
            })
        );
        assert_eq!(
            c(json!({"Id": "a", "Name": "/n", "Config": {"Env": ["NVIDIA_VISIBLE_DEVICES=all"]}})),
            Some(Claim {
                container: "n".into(),
                id: "a".into(),
                devices: Devices::All
            })
        );
        for none in ["none", "void", ""] {
            let env = format!("NVIDIA_VISIBLE_DEVICES={none}");
            assert_eq!(
                c(json!({"Id": "a", "Name": "/n", "Config": {"Env": [env]}})),
                None
            );
        }
        assert_eq!(c(json!({"Id": "a", "Name": "/n"})), None);
    }
}
