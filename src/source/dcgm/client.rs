//! A safe, typed client over the libdcgm symbol table ([`ffi::Symbols`]).
//!
//! What it adds to the raw 1:1 wrappers: loading by soname with the 3.x fallback, `dcgmReturn_t` codes
//! turned into [`DcgmError`] (with `errorString` text), version words set on every struct, big structs
//! on the heap, and RAII for the things a connection owns: a [`Group`] or [`FieldGroup`] is destroyed
//! when dropped, and the connection itself (embedded host engine or remote link) is closed when the last
//! [`Connection`] clone and the last group are gone. After the host engine is lost,
//! [`Connection::mark_lost`] makes those drops silent (the ids mean nothing any more).
//!
//! No `unsafe` here: everything goes through `ffi`.

use std::collections::BTreeSet;
use std::ffi::{CString, OsStr};
use std::path::Path;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::Duration;

use super::ffi::{self, Pod};
use super::remote::RemoteTarget;
use super::values::Payload;

/// Sonames tried, in order, when no explicit library path is given.
pub const LIBRARY_NAMES: &[&str] = &["libdcgm.so.4", "libdcgm.so.3"];

/// A failed DCGM call.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{call} failed: {message} ({code})")]
pub struct DcgmError {
    /// The C function that failed.
    pub call: &'static str,
    /// The `dcgmReturn_t` code (`DCGM_ST_*`).
    pub code: i32,
    /// `errorString(code)`, or the constant's name when the library does not know the code.
    pub message: String,
}

impl DcgmError {
    /// Whether the host engine (or the link to it) is gone: the caller must reconnect and rebuild.
    pub fn connection_lost(&self) -> bool {
        matches!(
            self.code,
            ffi::DCGM_ST_CONNECTION_NOT_VALID | ffi::DCGM_ST_UNINITIALIZED | ffi::DCGM_ST_TIMEOUT
        )
    }

    /// A made-up error for an input this client refuses before calling the library.
    fn local(call: &'static str, code: i32, message: impl Into<String>) -> Self {
        DcgmError {
            call,
            code,
            message: message.into(),
        }
    }
}

/// Name of a return code for messages when `errorString` has none.
fn code_name(code: i32) -> &'static str {
    match code {
        ffi::DCGM_ST_OK => "DCGM_ST_OK",
        ffi::DCGM_ST_BADPARAM => "DCGM_ST_BADPARAM",
        ffi::DCGM_ST_NOT_SUPPORTED => "DCGM_ST_NOT_SUPPORTED",
        ffi::DCGM_ST_CONNECTION_NOT_VALID => "DCGM_ST_CONNECTION_NOT_VALID",
        ffi::DCGM_ST_VER_MISMATCH => "DCGM_ST_VER_MISMATCH",
        ffi::DCGM_ST_MODULE_NOT_LOADED => "DCGM_ST_MODULE_NOT_LOADED",
        ffi::DCGM_ST_FUNCTION_NOT_FOUND => "DCGM_ST_FUNCTION_NOT_FOUND",
        _ => "unknown DCGM error",
    }
}

/// Why the library could not be used at all.
#[derive(Debug, thiserror::Error)]
pub enum LoadError {
    #[error(transparent)]
    Ffi(#[from] ffi::LoadError),
}

/// A loaded libdcgm, initialised (`dcgmInit`) until [`Library::shutdown`].
pub struct Library {
    syms: Arc<ffi::Symbols>,
    /// `dcgmInit` succeeded and `dcgmShutdown` has not run yet.
    initialised: bool,
    /// DCGM major version (3 or 4), from the soname or the build info.
    major: u32,
    version: Option<String>,
}

impl std::fmt::Debug for Library {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Library")
            .field("path", &self.syms.path())
            .field("version", &self.version)
            .finish()
    }
}

impl Library {
    /// Load libdcgm: `explicit` when given, else [`LIBRARY_NAMES`] through the loader's search path
    /// (`LD_LIBRARY_PATH`, ld.so.cache).
    pub fn open(explicit: Option<&Path>) -> Result<Library, LoadError> {
        let syms = match explicit {
            Some(p) => ffi::Symbols::load(p.as_os_str())?,
            None => {
                let mut last = String::new();
                let mut found = None;
                for name in LIBRARY_NAMES {
                    match ffi::Symbols::load(OsStr::new(name)) {
                        Ok(s) => {
                            found = Some(s);
                            break;
                        }
                        Err(e @ ffi::LoadError::MissingSymbol { .. }) => return Err(e.into()),
                        Err(ffi::LoadError::NotFound { last: l, .. }) => last = l,
                    }
                }
                found.ok_or_else(|| ffi::LoadError::NotFound {
                    tried: LIBRARY_NAMES.join(", "),
                    last,
                })?
            }
        };
        let major = if syms.path().contains(".so.3") { 3 } else { 4 };
        Ok(Library {
            syms: Arc::new(syms),
            initialised: false,
            major,
            version: None,
        })
    }

    /// Where the library was loaded from (path or soname).
    pub fn path(&self) -> &str {
        self.syms.path()
    }

    /// The library's version from its build info, when it reports one.
    pub fn version(&self) -> Option<&str> {
        self.version.as_deref()
    }

    /// The most entities one group may hold on this DCGM major version.
    pub fn group_max_entities(&self) -> usize {
        if self.major >= 4 {
            ffi::DCGM_GROUP_MAX_ENTITIES_V2
        } else {
            ffi::DCGM_GROUP_MAX_ENTITIES_V1
        }
    }

    /// Whether `dcgmConnect_v3` (DCGM ≥ 4.5) is available.
    pub fn has_connect_v3(&self) -> bool {
        self.syms.has("dcgmConnect_v3")
    }

    fn check(&self, call: &'static str, code: i32) -> Result<(), DcgmError> {
        check(&self.syms, call, code)
    }

    /// `dcgmInit()`.
    /// Then reads the library's version (`dcgmVersionInfo`, when present) to know its major version.
    pub fn init(&mut self) -> Result<(), DcgmError> {
        self.check("dcgmInit", self.syms.init())?;
        self.initialised = true;
        let mut info = ffi::dcgmVersionInfo_v2::boxed_zeroed();
        info.version = ffi::dcgmVersionInfo_version2;
        if self.syms.version_info(&mut info) == ffi::DCGM_ST_OK {
            let raw = ffi::chars_to_string(&info.rawBuildInfoString);
            let version = raw
                .split(';')
                .find_map(|kv| kv.strip_prefix("version:").map(str::to_string))
                .unwrap_or(raw);
            if let Some(major) = version
                .split('.')
                .next()
                .and_then(|m| m.trim().parse().ok())
            {
                self.major = major;
            }
            self.version = Some(version);
        }
        Ok(())
    }

    /// `dcgmShutdown()` once, after every connection is closed (also done on drop). Errors are
    /// irrelevant at that point and ignored.
    pub fn shutdown(&mut self) {
        if std::mem::take(&mut self.initialised) {
            let _ = self.syms.shutdown();
        }
    }

    /// Start a host engine inside this process (`dcgmStartEmbedded`, auto operation mode).
    pub fn start_embedded(&self) -> Result<Connection, DcgmError> {
        let mut handle: ffi::dcgmHandle_t = 0;
        self.check(
            "dcgmStartEmbedded",
            self.syms
                .start_embedded(ffi::DCGM_OPERATION_MODE_AUTO, &mut handle),
        )?;
        Ok(Connection::new(self.syms.clone(), handle, true))
    }

    /// Connect to a remote nv-hostengine. `timeout` bounds the connection attempt.
    pub fn connect(
        &self,
        target: &RemoteTarget,
        timeout: Duration,
    ) -> Result<Connection, DcgmError> {
        let timeout_ms = u32::try_from(timeout.as_millis())
            .unwrap_or(u32::MAX)
            .max(1);
        let mut handle: ffi::dcgmHandle_t = 0;
        let uri = match target {
            RemoteTarget::Uri { uri, scheme, .. }
                if self.has_connect_v3() || *scheme == "vsock" =>
            {
                Some(uri.as_str())
            }
            _ => None,
        };
        if let Some(uri) = uri {
            if !self.has_connect_v3() {
                return Err(DcgmError::local(
                    "dcgmConnect_v3",
                    ffi::DCGM_ST_FUNCTION_NOT_FOUND,
                    format!("'{uri}' needs dcgmConnect_v3 (DCGM 4.5 or newer); this libdcgm does not have it"),
                ));
            }
            let c = cstring("dcgmConnect_v3", uri)?;
            let mut params = ffi::dcgmConnectV3Params_v1 {
                version: ffi::dcgmConnectV3Params_version1,
                persistAfterDisconnect: 0,
                timeoutMs: timeout_ms,
            };
            self.check(
                "dcgmConnect_v3",
                self.syms.connect_v3(&c, &mut params, &mut handle),
            )?;
        } else {
            let address = target.v2_address();
            let c = cstring("dcgmConnect_v2", &address)?;
            let mut params = ffi::dcgmConnectV2Params_v2 {
                version: ffi::dcgmConnectV2Params_version2,
                persistAfterDisconnect: 0,
                timeoutMs: timeout_ms,
                addressIsUnixSocket: u32::from(matches!(target, RemoteTarget::Unix { .. })),
            };
            self.check(
                "dcgmConnect_v2",
                self.syms.connect_v2(&c, &mut params, &mut handle),
            )?;
        }
        Ok(Connection::new(self.syms.clone(), handle, false))
    }
}

impl Drop for Library {
    fn drop(&mut self) {
        self.shutdown();
    }
}

fn check(syms: &ffi::Symbols, call: &'static str, code: i32) -> Result<(), DcgmError> {
    if code == ffi::DCGM_ST_OK {
        return Ok(());
    }
    let message = syms
        .error_string(code)
        .unwrap_or_else(|| code_name(code).to_string());
    Err(DcgmError {
        call,
        code,
        message,
    })
}

fn cstring(call: &'static str, s: &str) -> Result<CString, DcgmError> {
    CString::new(s)
        .map_err(|_| DcgmError::local(call, ffi::DCGM_ST_BADPARAM, "string contains a NUL byte"))
}

/// The handle of one embedded host engine or remote connection.
struct ConnInner {
    syms: Arc<ffi::Symbols>,
    handle: ffi::dcgmHandle_t,
    embedded: bool,
    lost: AtomicBool,
}

impl Drop for ConnInner {
    fn drop(&mut self) {
        // Closing a lost remote connection still frees the client side; errors are irrelevant here.
        let _ = if self.embedded {
            self.syms.stop_embedded(self.handle)
        } else {
            self.syms.disconnect(self.handle)
        };
    }
}

/// An open connection to a host engine. Cheap to clone; closed when the last clone (and the last
/// [`Group`] / [`FieldGroup`] made from it) is dropped.
#[derive(Clone)]
pub struct Connection {
    inner: Arc<ConnInner>,
}

/// An entity as DCGM names it: entity group (`DCGM_FE_*`) and id.
pub type EntityPair = ffi::dcgmGroupEntityPair_t;

/// Device attributes the exporter uses.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct DeviceAttributes {
    pub uuid: String,
    pub model: String,
    pub pci_bus_id: String,
    pub driver_version: String,
    /// Board serial number (empty when DCGM has none).
    pub serial: String,
    /// VBIOS version (empty when DCGM has none).
    pub vbios: String,
}

/// One MIG GPU instance from the hierarchy.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct GpuInstanceInfo {
    /// DCGM `DCGM_FE_GPU_I` entity id.
    pub entity_id: u32,
    /// DCGM GPU id of the parent.
    pub parent_gpu: u32,
    /// NVML GPU-instance id.
    pub gi_id: u32,
}

/// NvLink states (`dcgmNvLinkLinkState_t` per slot) of the GPUs and NvSwitches.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct NvLinkStates {
    pub gpus: Vec<(u32, Vec<u32>)>,
    pub switches: Vec<(u32, Vec<u32>)>,
}

/// One CPU of the CPU hierarchy.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct CpuHierarchyEntry {
    /// DCGM CPU id.
    pub cpu: u32,
    /// DCGM core ids, ascending.
    pub cores: Vec<u32>,
    /// Serial number (v2 only).
    pub serial: Option<String>,
}

/// A DCGM entity group of this connection; destroyed on drop.
pub struct Group {
    conn: Connection,
    id: ffi::dcgmGpuGrp_t,
}

impl Drop for Group {
    fn drop(&mut self) {
        if !self.conn.is_lost() {
            let _ = self.conn.syms().group_destroy(self.conn.handle(), self.id);
        }
    }
}

/// A DCGM field group of this connection; destroyed on drop.
pub struct FieldGroup {
    conn: Connection,
    id: ffi::dcgmFieldGrp_t,
    fields: Vec<u16>,
}

impl FieldGroup {
    pub fn fields(&self) -> &[u16] {
        &self.fields
    }
}

impl Drop for FieldGroup {
    fn drop(&mut self) {
        if !self.conn.is_lost() {
            let _ = self
                .conn
                .syms()
                .field_group_destroy(self.conn.handle(), self.id);
        }
    }
}

/// Reusable output buffer of `dcgmEntitiesGetLatestValues` (4 KiB per value: allocated once, grown
/// when a call needs more, reused every cycle).
#[derive(Default)]
pub struct ValueBuffer {
    values: Vec<ffi::dcgmFieldValue_v2>,
    len: usize,
}

impl ValueBuffer {
    fn prepare(&mut self, n: usize) -> &mut [ffi::dcgmFieldValue_v2] {
        if self.values.len() < n {
            self.values.resize(n, ffi::dcgmFieldValue_v2::zeroed());
        }
        // Reset the headers only: an entry the library leaves untouched reads as "no value".
        for v in &mut self.values[..n] {
            v.version = 0;
            v.status = ffi::DCGM_ST_NO_DATA;
            v.fieldType = 0;
            v.fieldId = 0;
            v.entityGroupId = 0;
            v.entityId = 0;
        }
        self.len = n;
        &mut self.values[..n]
    }

    /// The values of the last call (entries the library filled in).
    pub fn iter(&self) -> impl Iterator<Item = ValueRef<'_>> {
        self.values[..self.len]
            .iter()
            .filter(|v| v.version != 0)
            .map(|raw| ValueRef { raw })
    }

    /// The values of the last call the library filled in, each with its position in the buffer.
    pub fn iter_positions(&self) -> impl Iterator<Item = (usize, ValueRef<'_>)> {
        self.values[..self.len]
            .iter()
            .enumerate()
            .filter(|(_, v)| v.version != 0)
            .map(|(i, raw)| (i, ValueRef { raw }))
    }

    /// Bytes held by the buffer.
    pub fn capacity_bytes(&self) -> usize {
        self.values.len() * std::mem::size_of::<ffi::dcgmFieldValue_v2>()
    }
}

/// One value in a [`ValueBuffer`].
pub struct ValueRef<'a> {
    raw: &'a ffi::dcgmFieldValue_v2,
}

impl<'a> ValueRef<'a> {
    /// A view of one raw value (the decoder's entry point for `fuzz/` and tests).
    pub fn new(raw: &'a ffi::dcgmFieldValue_v2) -> ValueRef<'a> {
        ValueRef { raw }
    }
    pub fn entity_group(&self) -> u32 {
        self.raw.entityGroupId
    }
    pub fn entity_id(&self) -> u32 {
        self.raw.entityId
    }
    pub fn field_id(&self) -> u16 {
        self.raw.fieldId
    }
    pub fn status(&self) -> i32 {
        self.raw.status
    }
    /// When DCGM sampled the value (µs since the epoch).
    pub fn timestamp(&self) -> i64 {
        self.raw.ts
    }
    /// The payload, read as the value's `fieldType` says.
    pub fn payload(&self) -> Payload {
        let t = self.raw.fieldType;
        match u8::try_from(t) {
            Ok(ffi::DCGM_FT_INT64) | Ok(ffi::DCGM_FT_TIMESTAMP) => {
                Payload::Int(self.raw.value.as_i64())
            }
            Ok(ffi::DCGM_FT_DOUBLE) => Payload::Double(self.raw.value.as_f64()),
            Ok(ffi::DCGM_FT_STRING) => Payload::Text(self.raw.value.as_string()),
            Ok(ffi::DCGM_FT_BINARY) => Payload::Binary,
            _ => Payload::Unknown(t),
        }
    }
}

impl Connection {
    fn new(syms: Arc<ffi::Symbols>, handle: ffi::dcgmHandle_t, embedded: bool) -> Self {
        Connection {
            inner: Arc::new(ConnInner {
                syms,
                handle,
                embedded,
                lost: AtomicBool::new(false),
            }),
        }
    }

    fn syms(&self) -> &ffi::Symbols {
        &self.inner.syms
    }

    fn handle(&self) -> ffi::dcgmHandle_t {
        self.inner.handle
    }

    fn check(&self, call: &'static str, code: i32) -> Result<(), DcgmError> {
        let r = check(self.syms(), call, code);
        if let Err(e) = &r {
            if e.connection_lost() {
                self.mark_lost();
            }
        }
        r
    }

    /// The host engine is gone: groups dropped from now on are not destroyed (nothing to destroy).
    pub fn mark_lost(&self) {
        self.inner.lost.store(true, Ordering::Release);
    }

    pub fn is_lost(&self) -> bool {
        self.inner.lost.load(Ordering::Acquire)
    }

    /// Whether this is an embedded host engine (else a remote connection).
    pub fn is_embedded(&self) -> bool {
        self.inner.embedded
    }

    /// DCGM ids of the GPUs DCGM supports (`dcgmGetAllSupportedDevices`).
    pub fn supported_gpus(&self) -> Result<Vec<u32>, DcgmError> {
        let mut ids = [0u32; ffi::DCGM_MAX_NUM_DEVICES];
        let mut count = 0i32;
        self.check(
            "dcgmGetAllSupportedDevices",
            self.syms()
                .get_all_supported_devices(self.handle(), &mut ids, &mut count),
        )?;
        let n = usize::try_from(count).unwrap_or(0).min(ids.len());
        Ok(ids[..n].to_vec())
    }

    /// UUID, model, PCI bus id, driver version, serial and VBIOS of one GPU (`dcgmGetDeviceAttributes`, v3).
    pub fn device_attributes(&self, gpu: u32) -> Result<DeviceAttributes, DcgmError> {
        let mut attr = ffi::dcgmDeviceAttributes_v3::boxed_zeroed();
        attr.version = ffi::dcgmDeviceAttributes_version3;
        self.check(
            "dcgmGetDeviceAttributes",
            self.syms()
                .get_device_attributes(self.handle(), gpu, &mut attr),
        )?;
        let clean = |chars: &[std::ffi::c_char]| {
            let s = ffi::chars_to_string(chars);
            if s.starts_with("<<<") {
                String::new()
            } else {
                s.trim().to_string()
            }
        };
        let id = &attr.identifiers;
        Ok(DeviceAttributes {
            uuid: clean(&id.uuid),
            model: clean(&id.deviceName),
            pci_bus_id: clean(&id.pciBusId),
            driver_version: clean(&id.driverVersion),
            serial: clean(&id.serial),
            vbios: clean(&id.vbios),
        })
    }

    /// The MIG GPU instances (`dcgmGetGpuInstanceHierarchy`, v2), in hierarchy order.
    pub fn gpu_instances(&self) -> Result<Vec<GpuInstanceInfo>, DcgmError> {
        let mut hier = ffi::dcgmMigHierarchy_v2::boxed_zeroed();
        hier.version = ffi::dcgmMigHierarchy_version2;
        self.check(
            "dcgmGetGpuInstanceHierarchy",
            self.syms()
                .get_gpu_instance_hierarchy(self.handle(), &mut hier),
        )?;
        let n = (hier.count as usize).min(hier.entityList.len());
        Ok(hier.entityList[..n]
            .iter()
            .filter(|row| {
                row.entity.entityGroupId == ffi::DCGM_FE_GPU_I
                    && row.parent.entityGroupId == ffi::DCGM_FE_GPU
            })
            .map(|row| GpuInstanceInfo {
                entity_id: row.entity.entityId,
                parent_gpu: row.parent.entityId,
                gi_id: row.info.nvmlInstanceId,
            })
            .collect())
    }

    /// NvLink states per GPU (`dcgmGetNvLinkLinkStatus`: v5, falling back to v4 on older 4.x).
    /// `DCGM_ST_NOT_SUPPORTED` means no NvLinks (empty list).
    pub fn nvlink_states(&self) -> Result<Vec<(u32, Vec<u32>)>, DcgmError> {
        self.nvlink_status().map(|s| s.gpus)
    }

    /// NvLink states of every GPU and every NvSwitch (`dcgmGetNvLinkLinkStatus`: v5, falling back to
    /// v4 on older 4.x). `DCGM_ST_NOT_SUPPORTED` means no NvLinks (empty lists).
    pub fn nvlink_status(&self) -> Result<NvLinkStates, DcgmError> {
        fn take<const N: usize>(n: u32, list: &[(u32, [u32; N])]) -> Vec<(u32, Vec<u32>)> {
            list.iter()
                .take(n as usize)
                .map(|(id, states)| (*id, states.to_vec()))
                .collect()
        }
        let switches = |n: u32, list: &[ffi::dcgmNvLinkNvSwitchLinkStatus_t]| {
            let pairs: Vec<(u32, [u32; ffi::DCGM_NVLINK_MAX_LINKS_PER_NVSWITCH])> =
                list.iter().map(|s| (s.entityId, s.linkState)).collect();
            take(n, &pairs)
        };
        let mut v5 = ffi::dcgmNvLinkStatus_v5::boxed_zeroed();
        v5.version = ffi::dcgmNvLinkStatus_version5;
        let code = self.syms().get_nvlink_link_status(self.handle(), &mut *v5);
        match code {
            ffi::DCGM_ST_OK => {
                let gpus: Vec<(u32, [u32; ffi::DCGM_NVLINK_MAX_LINKS_PER_GPU])> =
                    v5.gpus.iter().map(|g| (g.entityId, g.linkState)).collect();
                Ok(NvLinkStates {
                    gpus: take(v5.numGpus, &gpus),
                    switches: switches(v5.numNvSwitches, &v5.nvSwitches),
                })
            }
            ffi::DCGM_ST_NOT_SUPPORTED => Ok(NvLinkStates::default()),
            ffi::DCGM_ST_VER_MISMATCH => {
                let mut v4 = ffi::dcgmNvLinkStatus_v4::boxed_zeroed();
                v4.version = ffi::dcgmNvLinkStatus_version4;
                let code = self.syms().get_nvlink_link_status(self.handle(), &mut *v4);
                if code == ffi::DCGM_ST_NOT_SUPPORTED {
                    return Ok(NvLinkStates::default());
                }
                self.check("dcgmGetNvLinkLinkStatus", code)?;
                let gpus: Vec<(u32, [u32; ffi::DCGM_NVLINK_MAX_LINKS_PER_GPU_LEGACY3])> =
                    v4.gpus.iter().map(|g| (g.entityId, g.linkState)).collect();
                Ok(NvLinkStates {
                    gpus: take(v4.numGpus, &gpus),
                    switches: switches(v4.numNvSwitches, &v4.nvSwitches),
                })
            }
            other => self
                .check("dcgmGetNvLinkLinkStatus", other)
                .map(|()| NvLinkStates::default()),
        }
    }

    /// The entities of one entity group (`dcgmGetEntityGroupEntities`, flags 0), e.g. the NvSwitches.
    /// `DCGM_ST_NOT_SUPPORTED` (a group DCGM cannot enumerate here) is an empty list.
    pub fn group_entities(&self, group: u32) -> Result<Vec<u32>, DcgmError> {
        let mut ids = vec![0u32; ffi::DCGM_GROUP_MAX_ENTITIES_V2];
        let mut count: std::ffi::c_int = 0;
        let code =
            self.syms()
                .get_entity_group_entities(self.handle(), group, &mut ids, &mut count, 0);
        if code == ffi::DCGM_ST_NOT_SUPPORTED {
            return Ok(Vec::new());
        }
        self.check("dcgmGetEntityGroupEntities", code)?;
        let n = usize::try_from(count).unwrap_or(0).min(ids.len());
        ids.truncate(n);
        Ok(ids)
    }

    /// The CPUs and the cores each owns (`dcgmGetCpuHierarchy_v2` with serials, else v1), in DCGM's
    /// order. No CPU monitoring here (not a Grace system, or the library lacks the call) is an empty
    /// list.
    pub fn cpu_hierarchy(&self) -> Result<Vec<CpuHierarchyEntry>, DcgmError> {
        let cores = |mask: &ffi::dcgmCpuHierarchyOwnedCores_v1| -> Vec<u32> {
            let mut out = Vec::new();
            for (word, bits) in mask.bitmask.iter().enumerate() {
                for bit in 0..64u32 {
                    if bits & (1u64 << bit) != 0 {
                        out.push(word as u32 * 64 + bit);
                    }
                }
            }
            out
        };
        let absent = |code: i32| {
            matches!(
                code,
                ffi::DCGM_ST_NOT_SUPPORTED
                    | ffi::DCGM_ST_FUNCTION_NOT_FOUND
                    | ffi::DCGM_ST_MODULE_NOT_LOADED
            )
        };
        let mut v2 = ffi::dcgmCpuHierarchy_v2::boxed_zeroed();
        v2.version = ffi::dcgmCpuHierarchy_version2;
        let code = self.syms().get_cpu_hierarchy_v2(self.handle(), &mut v2);
        if code == ffi::DCGM_ST_OK {
            let n = (v2.numCpus as usize).min(v2.cpus.len());
            return Ok(v2.cpus[..n]
                .iter()
                .map(|c| CpuHierarchyEntry {
                    cpu: c.cpuId,
                    cores: cores(&c.ownedCores),
                    serial: Some(ffi::chars_to_string(&c.serial))
                        .map(|s| s.trim().to_string())
                        .filter(|s| !s.is_empty() && !s.starts_with("<<<")),
                })
                .collect());
        }
        if !absent(code) && code != ffi::DCGM_ST_VER_MISMATCH {
            self.check("dcgmGetCpuHierarchy_v2", code)?;
        }
        let mut v1 = ffi::dcgmCpuHierarchy_v1::boxed_zeroed();
        v1.version = ffi::dcgmCpuHierarchy_version1;
        let code = self.syms().get_cpu_hierarchy(self.handle(), &mut v1);
        if absent(code) {
            return Ok(Vec::new());
        }
        self.check("dcgmGetCpuHierarchy", code)?;
        let n = (v1.numCpus as usize).min(v1.cpus.len());
        Ok(v1.cpus[..n]
            .iter()
            .map(|c| CpuHierarchyEntry {
                cpu: c.cpuId,
                cores: cores(&c.ownedCores),
                serial: None,
            })
            .collect())
    }

    /// Field ids of every profiling metric group the GPU supports (`dcgmProfGetSupportedMetricGroups`).
    pub fn profiling_fields(&self, gpu: u32) -> Result<BTreeSet<u16>, DcgmError> {
        let mut groups = ffi::dcgmProfGetMetricGroups_v3::boxed_zeroed();
        groups.version = ffi::dcgmProfGetMetricGroups_version3;
        groups.gpuId = gpu;
        self.check(
            "dcgmProfGetSupportedMetricGroups",
            self.syms()
                .prof_get_supported_metric_groups(self.handle(), &mut groups),
        )?;
        let n = (groups.numMetricGroups as usize).min(groups.metricGroups.len());
        Ok(groups.metricGroups[..n]
            .iter()
            .flat_map(|g| {
                let k = (g.numFieldIds as usize).min(g.fieldIds.len());
                g.fieldIds[..k].iter().copied()
            })
            .collect())
    }

    /// Create an empty group holding `entities` (`dcgmGroupCreate` + `dcgmGroupAddEntity` each).
    pub fn create_group(&self, name: &str, entities: &[EntityPair]) -> Result<Group, DcgmError> {
        let c = cstring("dcgmGroupCreate", name)?;
        let mut id: ffi::dcgmGpuGrp_t = 0;
        self.check(
            "dcgmGroupCreate",
            self.syms()
                .group_create(self.handle(), ffi::DCGM_GROUP_EMPTY, &c, &mut id),
        )?;
        let group = Group {
            conn: self.clone(),
            id,
        };
        for e in entities {
            self.check(
                "dcgmGroupAddEntity",
                self.syms()
                    .group_add_entity(self.handle(), id, e.entityGroupId, e.entityId),
            )?;
        }
        Ok(group)
    }

    /// Create a field group (`dcgmFieldGroupCreate`; 1..=127 ids, name unique per host engine).
    pub fn create_field_group(&self, name: &str, fields: &[u16]) -> Result<FieldGroup, DcgmError> {
        if fields.is_empty() || fields.len() >= ffi::DCGM_MAX_FIELD_IDS_PER_FIELD_GROUP {
            return Err(DcgmError::local(
                "dcgmFieldGroupCreate",
                ffi::DCGM_ST_BADPARAM,
                format!("a field group holds 1 to 127 fields, not {}", fields.len()),
            ));
        }
        let c = cstring("dcgmFieldGroupCreate", name)?;
        let mut id: ffi::dcgmFieldGrp_t = 0;
        self.check(
            "dcgmFieldGroupCreate",
            self.syms()
                .field_group_create(self.handle(), fields, &c, &mut id),
        )?;
        Ok(FieldGroup {
            conn: self.clone(),
            id,
            fields: fields.to_vec(),
        })
    }

    /// `dcgmWatchFields(group, fieldGroup, every, keepAge, keepSamples)`.
    pub fn watch(
        &self,
        group: &Group,
        fields: &FieldGroup,
        every: Duration,
        max_keep_age: Duration,
        max_keep_samples: i32,
    ) -> Result<(), DcgmError> {
        let freq_us = i64::try_from(every.as_micros()).unwrap_or(i64::MAX);
        self.check(
            "dcgmWatchFields",
            self.syms().watch_fields(
                self.handle(),
                group.id,
                fields.id,
                freq_us,
                max_keep_age.as_secs_f64(),
                max_keep_samples,
            ),
        )
    }

    /// `dcgmWatchFields(DCGM_GROUP_ALL_GPUS, fieldGroup, every, keepAge, 0)`: a watch on every GPU the
    /// engine has, now and later (global fields such as the bind/unbind event).
    pub fn watch_all_gpus(
        &self,
        fields: &FieldGroup,
        every: Duration,
        max_keep_age: Duration,
    ) -> Result<(), DcgmError> {
        let freq_us = i64::try_from(every.as_micros()).unwrap_or(i64::MAX).max(1);
        self.check(
            "dcgmWatchFields",
            self.syms().watch_fields(
                self.handle(),
                ffi::DCGM_GROUP_ALL_GPUS,
                fields.id,
                freq_us,
                max_keep_age.as_secs_f64(),
                0,
            ),
        )
    }

    /// `dcgmUnwatchFields(DCGM_GROUP_ALL_GPUS, fieldGroup)`; a no-op once the connection is lost.
    pub fn unwatch_all_gpus(&self, fields: &FieldGroup) -> Result<(), DcgmError> {
        if self.is_lost() {
            return Ok(());
        }
        self.check(
            "dcgmUnwatchFields",
            self.syms()
                .unwatch_fields(self.handle(), ffi::DCGM_GROUP_ALL_GPUS, fields.id),
        )
    }

    /// `dcgmUnwatchFields(group, fieldGroup)`; a no-op once the connection is lost. Destroying a field
    /// group does not unwatch it, so a session that ends on a live engine unwatches first.
    pub fn unwatch(&self, group: &Group, fields: &FieldGroup) -> Result<(), DcgmError> {
        if self.is_lost() {
            return Ok(());
        }
        self.check(
            "dcgmUnwatchFields",
            self.syms()
                .unwatch_fields(self.handle(), group.id, fields.id),
        )
    }

    /// `dcgmUpdateAllFields(h, 1)`: wait until every watched field has a fresh sample.
    pub fn update_all_fields(&self) -> Result<(), DcgmError> {
        self.check(
            "dcgmUpdateAllFields",
            self.syms().update_all_fields(self.handle(), true),
        )
    }

    /// Latest value of every field in `fields` on every entity in `entities`, in one call
    /// (`dcgmEntitiesGetLatestValues`; ≤ 1024 entities, ≤ 128 fields). `live` reads the driver now
    /// instead of the cache (`DCGM_FV_FLAG_LIVE_DATA`). Results land in `buf`, in no particular order.
    pub fn latest_values(
        &self,
        entities: &[EntityPair],
        fields: &[u16],
        live: bool,
        buf: &mut ValueBuffer,
    ) -> Result<(), DcgmError> {
        if entities.len() > 1024 || fields.len() > ffi::DCGM_MAX_FIELD_IDS_PER_FIELD_GROUP {
            return Err(DcgmError::local(
                "dcgmEntitiesGetLatestValues",
                ffi::DCGM_ST_BADPARAM,
                "at most 1024 entities and 128 fields per call",
            ));
        }
        let out = buf.prepare(entities.len() * fields.len());
        let flags = if live { ffi::DCGM_FV_FLAG_LIVE_DATA } else { 0 };
        let code =
            self.syms()
                .entities_get_latest_values(self.handle(), entities, fields, flags, out);
        if code != ffi::DCGM_ST_OK {
            buf.len = 0;
        }
        self.check("dcgmEntitiesGetLatestValues", code)
    }
}

/// One integer sample handed over by `dcgmGetValuesSince_v2` (XID, clock-event bitmask).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SinceSample {
    pub entity_group: u32,
    pub entity_id: u32,
    pub field_id: u16,
    /// µs since the epoch.
    pub ts: i64,
    /// `None` for a sample with an error status, a blank or a non-integer type.
    pub value: Option<i64>,
}

/// One incident of a health check.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct CheckedIncident {
    pub entity_group: u32,
    pub entity_id: u32,
    /// `DCGM_HEALTH_WATCH_*` bit.
    pub system: u32,
    /// `DCGM_HEALTH_RESULT_*`.
    pub health: u32,
    /// `DCGM_FR_*`.
    pub code: u32,
    pub message: String,
}

impl Connection {
    /// Every sample of `fields` on `group` newer than the cursor `since` (µs since the epoch),
    /// appended to `out` in time order per (entity, field); returns the cursor for the next call.
    pub fn values_since(
        &self,
        group: &Group,
        fields: &FieldGroup,
        since: i64,
        out: &mut Vec<SinceSample>,
    ) -> Result<i64, DcgmError> {
        let mut next = since;
        let code = self.syms().get_values_since(
            self.handle(),
            group.id,
            fields.id,
            since,
            &mut next,
            &mut |entity_group, entity_id, v| {
                let int = matches!(
                    u8::try_from(v.fieldType),
                    Ok(ffi::DCGM_FT_INT64) | Ok(ffi::DCGM_FT_TIMESTAMP)
                );
                let value = (v.status == ffi::DCGM_ST_OK && int)
                    .then(|| v.value.as_i64())
                    .filter(|x| super::values::int_sentinel(*x).is_none());
                out.push(SinceSample {
                    entity_group,
                    entity_id,
                    field_id: v.fieldId,
                    ts: v.ts,
                    value,
                });
            },
        );
        self.check("dcgmGetValuesSince_v2", code)?;
        Ok(next)
    }

    /// Every sample of `fields` on `group` newer than the cursor `since` (µs since the epoch), handed
    /// to `each` per batch: (entity group, entity id, its values in time order — read them with
    /// [`super::values::sample_number`]); returns DCGM's cursor for the next call.
    pub fn values_since_batches(
        &self,
        group: &Group,
        fields: &FieldGroup,
        since: i64,
        each: &mut dyn FnMut(u32, u32, &[ffi::dcgmFieldValue_v1]),
    ) -> Result<i64, DcgmError> {
        let mut next = since;
        let code = self.syms().get_values_since_batches(
            self.handle(),
            group.id,
            fields.id,
            since,
            &mut next,
            each,
        );
        self.check("dcgmGetValuesSince_v2", code)?;
        Ok(next)
    }

    /// `dcgmHealthSet(group, DCGM_HEALTH_WATCH_ALL)`.
    pub fn health_watch_all(&self, group: &Group) -> Result<(), DcgmError> {
        self.check(
            "dcgmHealthSet",
            self.syms()
                .health_set(self.handle(), group.id, ffi::DCGM_HEALTH_WATCH_ALL),
        )
    }

    /// `dcgmHealthCheck(group)` into `response` (1 MiB, reused); the incidents it reports.
    pub fn health_check(
        &self,
        group: &Group,
        response: &mut ffi::dcgmHealthResponse_v5,
    ) -> Result<Vec<CheckedIncident>, DcgmError> {
        response.incidentCount = 0;
        self.check(
            "dcgmHealthCheck",
            self.syms().health_check(self.handle(), group.id, response),
        )?;
        let n = (response.incidentCount as usize).min(response.incidents.len());
        Ok(response.incidents[..n]
            .iter()
            .map(|i| CheckedIncident {
                entity_group: i.entityInfo.entityGroupId,
                entity_id: i.entityInfo.entityId,
                system: i.system,
                health: i.health,
                code: i.error.code,
                message: ffi::chars_to_string(&i.error.msg),
            })
            .collect())
    }

    /// `dcgmGetNvLinkP2PStatus`: per GPU id, its status towards every GPU id (32 slots).
    pub fn p2p_status(&self) -> Result<Vec<(u32, Vec<u32>)>, DcgmError> {
        let mut status = ffi::dcgmNvLinkP2PStatus_v1::boxed_zeroed();
        self.check(
            "dcgmGetNvLinkP2PStatus",
            self.syms()
                .get_nvlink_p2p_status(self.handle(), &mut status),
        )?;
        let n = (status.numGpus as usize).min(status.gpus.len());
        Ok(status.gpus[..n]
            .iter()
            .map(|g| (g.entityId, g.linkStatus.to_vec()))
            .collect())
    }
}

impl EntityPair {
    pub fn new(group: u32, id: u32) -> Self {
        ffi::dcgmGroupEntityPair_t {
            entityGroupId: group,
            entityId: id,
        }
    }
}
