//! The fake host engine: connections, groups, field groups, watches and values, in safe Rust.
//!
//! The exported C functions (`lib.rs`) only marshal pointers; every decision is made here. Behaviour
//! follows the documented behaviour of NVIDIA's libdcgm 4.x (per-function semantics, the MIG hierarchy's
//! order, what a lost host engine returns, known pitfalls); where the real engine is vaguer than a test needs, the fake is
//! stricter (see README.md "Deliberate strictness").

use std::collections::{HashMap, HashSet};
use std::sync::{Arc, LazyLock, Mutex, MutexGuard};
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

use dcgm_otel::fields::{catalog, EntityLevel, FieldInfo, ValueType};
use dcgm_otel::snapshot::Entity;
use dcgm_otel::snapshot::{Absent, EntityKind, FieldValue, GpuIdentity, MigIdentity};
use dcgm_otel::source::dcgm::ffi::{self, *};
use dcgm_otel::source::sim::fleet::link_entity_id;
use dcgm_otel::source::sim::switches::port_entity_id;
use dcgm_otel::source::sim::waveforms::Waveforms;
use dcgm_otel::source::sim::{Fleet, Scenario};

use crate::config::{Config, StartupFaults};

/// The one engine of this process.
static ENGINE: LazyLock<Mutex<Engine>> = LazyLock::new(|| Mutex::new(Engine::default()));

/// Lock the engine (a panic while holding it must not wedge later calls).
pub fn engine() -> MutexGuard<'static, Engine> {
    ENGINE.lock().unwrap_or_else(|e| e.into_inner())
}

/// Field-group ids 1..=3 belong to the engine's internal field groups (dcgm-abi.md §6.3).
const FIRST_FIELD_GROUP: usize = 4;
/// Group ids 0 and 1 are the built-in default groups.
const FIRST_GROUP: usize = 2;
/// 64 field groups minus the 3 internal ones.
const MAX_USER_FIELD_GROUPS: usize = ffi::DCGM_MAX_NUM_FIELD_GROUPS - 3;
/// 64 groups minus the 2 built-in ones.
const MAX_USER_GROUPS: usize = ffi::DCGM_MAX_NUM_GROUPS - 2;

/// A (entity group, entity id) pair.
pub type EntityKey = (u32, u32);

/// What a connection is.
#[derive(Debug, Clone, PartialEq)]
pub enum ConnKind {
    Embedded,
    Remote(String),
}

#[derive(Debug)]
struct Group {
    name: String,
    entities: Vec<EntityKey>,
}

#[derive(Debug)]
struct FieldGroup {
    name: String,
    fields: Vec<u16>,
}

#[derive(Debug)]
struct Watch {
    group: usize,
    field_group: usize,
    entities: HashSet<EntityKey>,
    fields: HashSet<u16>,
    freq: Duration,
    /// `maxKeepAge` (0 = no limit) and `maxKeepSamples` (0 = no limit).
    keep_age: Duration,
    keep_samples: usize,
    created: Instant,
    primed: bool,
}

/// The value one (entity, field) read produces.
#[derive(Debug, Clone, PartialEq)]
pub struct Sample {
    pub status: i32,
    /// `DCGM_FT_*` char code.
    pub field_type: u8,
    pub ts_us: i64,
    pub value: Payload,
}

#[derive(Debug, Clone, PartialEq)]
pub enum Payload {
    Int(i64),
    Double(f64),
    Text(String),
}

/// The whole fake engine state.
#[derive(Default)]
pub struct Engine {
    pub cfg: Config,
    initialized: bool,
    fleet: Option<Fleet>,
    /// The scenario's waveforms (a field's square wave), for the latest values and the samples.
    waveforms: Waveforms,
    /// Sampled history: per (entity, field), the simulated µs after which the engine has samples (its
    /// first watch); a restarted engine forgets it.
    history_from: HashMap<(EntityKey, u16), i64>,
    /// Fields read by the polls since the fleet last advanced (they set the next step).
    polled_fields: HashSet<u16>,
    epoch_us: i64,
    /// Live handles (a lost host engine clears them).
    handles: HashMap<usize, ConnKind>,
    next_handle: usize,
    groups: HashMap<usize, Group>,
    next_group: usize,
    field_groups: HashMap<usize, FieldGroup>,
    next_field_group: usize,
    watches: Vec<Watch>,
    connect_attempts: u32,
    down_until: Option<Instant>,
    disconnected_once: bool,
    /// `outage_every_ms`: the window of UNIX time in which the engine was last lost.
    outage_window: Option<u128>,
    polls: u64,
    /// Polling calls begun (the `hang_ms` fault counts these).
    polls_begun: u64,
    hung_once: bool,
    read_since_advance: HashSet<EntityKey>,
    vanished: HashSet<u32>,
    /// `DCGM_FI_BIND_UNBIND_EVENT`: the last event (state, µs timestamp); state 0 at start.
    bind_event: (i64, i64),
    /// Groups with health watches (`dcgmHealthSet`): group → systems.
    health_watches: HashMap<usize, u32>,
    /// Health checks answered so far (the `health_check_error` fault counts these).
    health_checks: u64,
    /// The clock-event bitmask of every GPU at each collection so far (simulated µs, per GPU), the
    /// engine's sampled history of `DCGM_FI_DEV_CLOCKS_EVENT_REASONS`.
    clock_history: Vec<(i64, Vec<(u32, u64)>)>,
    /// `stop_at_collection` reached: the fleet no longer advances (logged once).
    stopped: bool,
    /// `FAKE_DCGM_STARTUP`: when `dcgmInit` ran and the connections made since.
    startup: StartupState,
}

/// One sample of `dcgmGetValuesSince_v2`.
pub struct SinceValue {
    pub key: EntityKey,
    pub field: u16,
    pub ts_us: i64,
    /// `DCGM_FT_*` char code.
    pub field_type: u8,
    pub value: Payload,
}

/// One incident of `dcgmHealthCheck`.
pub struct HealthIncident {
    pub gpu: u32,
    pub system: u32,
    pub result: u32,
    pub code: u32,
    pub message: String,
}

/// A `DCGM_FE_LINK` entity, unpacked.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum LinkRef {
    /// (gpu, 0-based port)
    Gpu(u32, u32),
    /// (switch, 0-based port)
    Switch(u32, u32),
}

/// `DcgmEntityStatus_t`: `DcgmEntityStatusOk`, `DcgmEntityStatusLost`.
const ENTITY_STATUS_OK: u32 = 1;
const ENTITY_STATUS_LOST: u32 = 4;
/// How many collections of clock-event history the engine keeps (68 minutes at `-c 1000`: longer than
/// any counting window, bounded for long soaks).
const CLOCK_HISTORY_COLLECTIONS: usize = 4096;
/// `DCGM_FI_BIND_UNBIND_EVENT`.
const BIND_UNBIND_EVENT: u16 = 6;
/// `DCGM_FI_DEV_XID_ERRORS`.
const XID_ERRORS: u16 = 230;
/// `DCGM_FI_DEV_CLOCKS_EVENT_REASONS`.
const CLOCK_EVENT_REASONS: u16 = 112;

/// Whether every field of a read is global (`DCGM_FE_NONE`): such reads (the bind/unbind watcher's)
/// are not polls — they neither advance the simulated fleet nor count for the poll-numbered faults.
pub fn global_only(fields: &[u16]) -> bool {
    !fields.is_empty()
        && fields.iter().all(|f| {
            catalog()
                .by_id(*f)
                .is_some_and(|i| i.level == EntityLevel::Global)
        })
}

fn now_us() -> i64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map(|d| i64::try_from(d.as_micros()).unwrap_or(i64::MAX))
        .unwrap_or(0)
}

pub fn type_char(t: ValueType) -> u8 {
    match t {
        ValueType::Int64 => ffi::DCGM_FT_INT64,
        ValueType::Double => ffi::DCGM_FT_DOUBLE,
        ValueType::String => ffi::DCGM_FT_STRING,
        ValueType::Binary => ffi::DCGM_FT_BINARY,
    }
}

/// The sentinel DCGM stores for an absent value of type `ft`.
fn sentinel(ft: u8, why: Absent) -> Payload {
    let k = match why {
        Absent::NotFound => 1,
        Absent::NotSupported | Absent::NotApplicable => 2,
        Absent::NotPermissioned => 3,
        _ => 0,
    };
    match ft {
        ffi::DCGM_FT_DOUBLE => Payload::Double(ffi::DCGM_FP64_BLANK + k as f64),
        ffi::DCGM_FT_STRING => Payload::Text(
            [
                ffi::DCGM_STR_BLANK,
                ffi::DCGM_STR_NOT_FOUND,
                ffi::DCGM_STR_NOT_SUPPORTED,
                ffi::DCGM_STR_NOT_PERMISSIONED,
            ][k]
                .to_string(),
        ),
        // A blank blob is one zero byte.
        ffi::DCGM_FT_BINARY => Payload::Text(String::new()),
        _ => Payload::Int(ffi::DCGM_INT64_BLANK + k as i64),
    }
}

/// Profiling (DCP) fields, served by DCGM's profiling module: every `DCGM_FI_PROF_*` id (1001–1096 and
/// the per-link 1532/1533, dcgm-abi.md §6.3).
fn is_profiling(info: &FieldInfo) -> bool {
    info.is_profiling() || info.name.starts_with("DCGM_FI_PROF_")
}

/// `dcgm_field_entity_group_t` of a catalog entity level.
pub fn level_group(level: EntityLevel) -> u32 {
    match level {
        EntityLevel::Global => ffi::DCGM_FE_NONE,
        EntityLevel::Gpu => ffi::DCGM_FE_GPU,
        EntityLevel::GpuInstance => ffi::DCGM_FE_GPU_I,
        EntityLevel::ComputeInstance => ffi::DCGM_FE_GPU_CI,
        EntityLevel::Vgpu => ffi::DCGM_FE_VGPU,
        EntityLevel::Switch => ffi::DCGM_FE_SWITCH,
        EntityLevel::Link => ffi::DCGM_FE_LINK,
        EntityLevel::Cpu => ffi::DCGM_FE_CPU,
        EntityLevel::CpuCore => ffi::DCGM_FE_CPU_CORE,
        EntityLevel::ConnectX => ffi::DCGM_FE_CONNECTX,
    }
}

/// NVML GPU-instance profile id of a profile name (`1g.10gb` → slices 1 → NVML profile 0, …).
fn nvml_profile(slices: u32, name: &str) -> u32 {
    let base = match slices {
        1 => 0,
        2 => 1,
        3 => 2,
        4 => 3,
        7 => 4,
        8 => 5,
        6 => 6,
        _ => 0,
    };
    // "1g.20gb" is the REV1 (double memory) variant of the 1-slice profile on H100.
    if name == "1g.20gb" {
        7
    } else {
        base
    }
}

fn slices_of(profile: &str) -> u32 {
    profile
        .split('g')
        .next()
        .and_then(|s| s.parse().ok())
        .unwrap_or(1)
}

/// One MIG row source: the GPU and the instance.
struct MigRef {
    gpu: Arc<GpuIdentity>,
    mig: Arc<MigIdentity>,
}

// ---------------------------------------------------------------- FAKE_DCGM_STARTUP

/// When `dcgmInit` ran and how many connections succeeded since: what `FAKE_DCGM_STARTUP` measures.
#[derive(Debug, Default)]
struct StartupState {
    init_at: Option<Instant>,
    /// Successful `dcgmConnect*` / `dcgmStartEmbedded*` calls since `dcgmInit`.
    connects: u32,
}

impl StartupState {
    fn begun() -> StartupState {
        StartupState {
            init_at: Some(Instant::now()),
            connects: 0,
        }
    }

    /// Whether less than `d` has passed since `dcgmInit`.
    fn within(&self, d: Option<Duration>) -> bool {
        match (self.init_at, d) {
            (Some(at), Some(d)) => at.elapsed() < d,
            _ => false,
        }
    }
}

impl Engine {
    fn startup_faults(&self) -> &StartupFaults {
        &self.cfg.startup
    }

    /// `hostengine_up_after_ms` / `embedded_fails_ms`: refuse a connection while the engine is not up
    /// yet; otherwise count the connection (it succeeds).
    fn admit_startup(&mut self, embedded: bool) -> Result<(), i32> {
        if embedded
            && self
                .startup
                .within(self.startup_faults().embedded_fails_for)
        {
            return Err(ffi::DCGM_ST_NVML_NOT_LOADED);
        }
        if !embedded
            && self
                .startup
                .within(self.startup_faults().hostengine_up_after)
        {
            return Err(ffi::DCGM_ST_CONNECTION_NOT_VALID);
        }
        self.startup.connects += 1;
        Ok(())
    }

    /// Whether the profiling module is loaded: `FAKE_DCGM_PROFILING`, and `profiling_from_connect`
    /// once that many connections were made.
    fn profiling_loaded(&self) -> bool {
        self.cfg.profiling
            && self
                .startup_faults()
                .profiling_from_connect
                .is_none_or(|n| self.startup.connects >= n)
    }

    /// `gpus_after_ms`: no GPU is listed yet.
    fn gpus_hidden(&self) -> bool {
        self.startup.within(self.startup_faults().gpus_after)
    }
}

impl Engine {
    // ---------------------------------------------------------------- lifecycle

    /// `dcgmInit`: read the environment, build the fleet. Idempotent.
    pub fn init(&mut self) -> Result<(), (i32, String)> {
        if self.initialized {
            return Ok(());
        }
        let cfg = Config::from_env().map_err(|e| (ffi::DCGM_ST_INIT_ERROR, e.0))?;
        let scenario = Scenario::load(&cfg.scenario).map_err(|e| {
            (
                ffi::DCGM_ST_INIT_ERROR,
                format!("FAKE_DCGM_SCENARIO={:?}: {e}", cfg.scenario),
            )
        })?;
        let fleet = Fleet::new(
            &scenario,
            cfg.seed,
            &dcgm_otel::source::sim::node_name(std::env::var("NODE_NAME").ok().as_deref()),
        );
        let waveforms = Waveforms::new(&scenario.waveforms, fleet.gpus().len() as u32);
        *self = Engine {
            cfg,
            initialized: true,
            fleet: Some(fleet),
            waveforms,
            epoch_us: now_us(),
            next_handle: 1,
            next_group: FIRST_GROUP,
            next_field_group: FIRST_FIELD_GROUP,
            bind_event: (0, now_us()),
            startup: StartupState::begun(),
            ..Engine::default()
        };
        self.record_clock_masks();
        Ok(())
    }

    /// `dcgmShutdown`: forget everything (OK when not initialised).
    pub fn shutdown(&mut self) {
        *self = Engine::default();
    }

    pub fn initialized(&self) -> bool {
        self.initialized
    }

    /// Can a new connection / embedded engine be started now? Counts the attempt.
    fn admit_connection(&mut self) -> Result<(), i32> {
        if !self.initialized {
            return Err(ffi::DCGM_ST_UNINITIALIZED);
        }
        self.connect_attempts += 1;
        if self.connect_attempts <= self.cfg.faults.refuse_connect {
            return Err(ffi::DCGM_ST_CONNECTION_NOT_VALID);
        }
        if let Some(until) = self.down_until {
            if Instant::now() < until {
                return Err(ffi::DCGM_ST_CONNECTION_NOT_VALID);
            }
            self.down_until = None;
        }
        Ok(())
    }

    /// `dcgmStartEmbedded*`: the handle is always `DCGM_EMBEDDED_HANDLE`, as in the real library.
    pub fn start_embedded(&mut self, mode: u32) -> Result<usize, i32> {
        if !self.initialized {
            return Err(ffi::DCGM_ST_UNINITIALIZED);
        }
        if mode != ffi::DCGM_OPERATION_MODE_AUTO && mode != ffi::DCGM_OPERATION_MODE_MANUAL {
            return Err(ffi::DCGM_ST_BADPARAM);
        }
        self.admit_connection()?;
        self.admit_startup(true)?;
        self.handles
            .insert(ffi::DCGM_EMBEDDED_HANDLE, ConnKind::Embedded);
        Ok(ffi::DCGM_EMBEDDED_HANDLE)
    }

    /// `dcgmConnect_v2/_v3`.
    pub fn connect(&mut self, address: &str) -> Result<usize, i32> {
        self.admit_connection()?;
        self.admit_startup(false)?;
        let h = self.next_handle;
        self.next_handle += 1;
        self.handles
            .insert(h, ConnKind::Remote(address.to_string()));
        Ok(h)
    }

    /// `dcgmDisconnect` / `dcgmStopEmbedded`: the handle goes away either way; a handle of a lost
    /// engine answers CONNECTION_NOT_VALID.
    pub fn close(&mut self, h: usize, embedded: bool) -> i32 {
        if !self.initialized {
            return ffi::DCGM_ST_UNINITIALIZED;
        }
        match self.handles.get(&h) {
            None => ffi::DCGM_ST_CONNECTION_NOT_VALID,
            Some(ConnKind::Embedded) if !embedded => ffi::DCGM_ST_BADPARAM,
            Some(ConnKind::Remote(_)) if embedded => ffi::DCGM_ST_BADPARAM,
            Some(_) => {
                self.handles.remove(&h);
                // persistAfterDisconnect=0: what the connection created goes with it. The fake has one
                // namespace for all connections, so this only happens when no connection is left.
                if self.handles.is_empty() {
                    self.clear_objects();
                }
                ffi::DCGM_ST_OK
            }
        }
    }

    fn clear_objects(&mut self) {
        self.groups.clear();
        self.field_groups.clear();
        self.watches.clear();
        self.health_watches.clear();
        self.read_since_advance.clear();
    }

    /// Every call that takes a handle starts here.
    pub fn check(&self, h: usize) -> Result<(), i32> {
        if !self.initialized {
            return Err(ffi::DCGM_ST_UNINITIALIZED);
        }
        if self.handles.contains_key(&h) {
            Ok(())
        } else {
            Err(ffi::DCGM_ST_CONNECTION_NOT_VALID)
        }
    }

    /// The host engine goes away: every handle dies, every object is gone, reconnects fail for
    /// `down_ms`.
    fn lose_host_engine(&mut self) {
        self.handles.clear();
        self.clear_objects();
        self.down_until = Some(Instant::now() + self.cfg.faults.down);
        self.disconnected_once = true;
        // A restarted engine starts with an empty cache; `history_survives` models a lost link to
        // an engine that stayed up (another watcher kept the fields sampled).
        if !self.cfg.faults.history_survives {
            self.history_from.clear();
        }
    }

    // ---------------------------------------------------------------- inventory

    fn fleet(&self) -> Option<&Fleet> {
        self.fleet.as_ref()
    }

    /// Visible GPUs (at most DCGM_MAX_NUM_DEVICES, vanished ones removed).
    pub fn gpus(&self) -> Vec<Arc<GpuIdentity>> {
        if self.gpus_hidden() {
            return Vec::new();
        }
        self.fleet()
            .map(|f| {
                f.gpus()
                    .iter()
                    .filter(|g| !self.vanished.contains(&g.identity.index))
                    .take(ffi::DCGM_MAX_NUM_DEVICES)
                    .map(|g| g.identity.clone())
                    .collect()
            })
            .unwrap_or_default()
    }

    fn gpu(&self, index: u32) -> Option<(Arc<GpuIdentity>, u32, usize)> {
        if self.gpus_hidden() {
            return None;
        }
        let f = self.fleet()?;
        f.gpus()
            .iter()
            .filter(|g| !self.vanished.contains(&g.identity.index))
            .take(ffi::DCGM_MAX_NUM_DEVICES)
            .find(|g| g.identity.index == index)
            .map(|g| (g.identity.clone(), g.nvlinks, g.instances.len()))
    }

    fn migs(&self) -> Vec<MigRef> {
        let visible: HashSet<u32> = self.gpus().iter().map(|g| g.index).collect();
        let Some(f) = self.fleet() else {
            return Vec::new();
        };
        f.gpus()
            .iter()
            .filter(|g| visible.contains(&g.identity.index))
            .flat_map(|g| {
                g.instances.iter().map(|m| MigRef {
                    gpu: g.identity.clone(),
                    mig: m.clone(),
                })
            })
            .collect()
    }

    fn mig(&self, entity_id: u32) -> Option<MigRef> {
        self.migs()
            .into_iter()
            .find(|m| m.mig.entity_id == entity_id)
    }

    /// Every entity of one group (for default groups, `dcgmGetEntityGroupEntities` and special ids).
    fn entities_of(&self, group: u32) -> Vec<EntityKey> {
        let Some(f) = self.fleet() else {
            return Vec::new();
        };
        match group {
            ffi::DCGM_FE_GPU => self.gpus().iter().map(|g| (group, g.index)).collect(),
            // One compute instance per GPU instance, with the same entity id (see mig_hierarchy).
            ffi::DCGM_FE_GPU_I | ffi::DCGM_FE_GPU_CI => self
                .migs()
                .iter()
                .map(|m| (group, m.mig.entity_id))
                .collect(),
            ffi::DCGM_FE_SWITCH => f
                .switches()
                .iter()
                .take(ffi::DCGM_MAX_NUM_SWITCHES)
                .map(|s| (group, s.id))
                .collect(),
            ffi::DCGM_FE_CPU => f
                .cpus()
                .iter()
                .take(ffi::DCGM_MAX_NUM_CPUS)
                .map(|c| (group, c.identity.index))
                .collect(),
            ffi::DCGM_FE_CPU_CORE => f
                .cpus()
                .iter()
                .take(ffi::DCGM_MAX_NUM_CPUS)
                .flat_map(|c| c.cores.iter().map(|core| (group, *core)))
                .collect(),
            _ => Vec::new(),
        }
    }

    /// Does the entity exist right now?
    fn entity_exists(&self, key: EntityKey) -> bool {
        let (group, id) = key;
        match group {
            ffi::DCGM_FE_GPU => self.gpu(id).is_some(),
            ffi::DCGM_FE_GPU_I | ffi::DCGM_FE_GPU_CI => self.mig(id).is_some(),
            ffi::DCGM_FE_LINK => self.link(id).is_some(),
            ffi::DCGM_FE_SWITCH | ffi::DCGM_FE_CPU | ffi::DCGM_FE_CPU_CORE => {
                self.entities_of(group).contains(&key)
            }
            _ => false,
        }
    }

    /// Unpack a `dcgm_link_t.raw` (parent group in byte 0, port in bytes 1-2, parent id in byte 3).
    fn link(&self, raw: u32) -> Option<LinkRef> {
        let parent = raw & 0xff;
        let port = (raw >> 8) & 0xffff;
        let id = raw >> 24;
        match parent {
            ffi::DCGM_FE_GPU => {
                let (_, nvlinks, _) = self.gpu(id)?;
                (port < nvlinks).then_some(LinkRef::Gpu(id, port))
            }
            ffi::DCGM_FE_SWITCH => {
                let s = self.fleet()?.switches().iter().find(|s| s.id == id)?;
                (port < s.ports).then_some(LinkRef::Switch(id, port))
            }
            _ => None,
        }
    }

    /// Per NvSwitch: (switch id, link states), 256 slots; its ports `0..ports` are Up.
    pub fn switch_link_states(&self) -> Vec<(u32, Vec<u32>)> {
        let Some(f) = self.fleet() else {
            return Vec::new();
        };
        f.switches()
            .iter()
            .take(ffi::DCGM_MAX_NUM_SWITCHES)
            .map(|s| {
                let states = (0..ffi::DCGM_NVLINK_MAX_LINKS_PER_NVSWITCH as u32)
                    .map(|p| {
                        if p < s.ports {
                            ffi::DcgmNvLinkLinkStateUp
                        } else {
                            ffi::DcgmNvLinkLinkStateNotSupported
                        }
                    })
                    .collect();
                (s.id, states)
            })
            .collect()
    }

    /// `dcgmGetCpuHierarchy` (v1) / `_v2`: (cpu id, owned cores, serial).
    pub fn cpu_hierarchy(&self) -> Vec<(u32, Vec<u32>, String)> {
        let Some(f) = self.fleet() else {
            return Vec::new();
        };
        f.cpus()
            .iter()
            .take(ffi::DCGM_MAX_NUM_CPUS)
            .map(|c| {
                (
                    c.identity.index,
                    c.cores.clone(),
                    c.identity.serial.clone().unwrap_or_default(),
                )
            })
            .collect()
    }

    pub fn device_attributes(&self, gpu: u32) -> Result<Box<dcgmDeviceAttributes_v3>, i32> {
        let (id, _, n_mig) = self.gpu(gpu).ok_or(ffi::DCGM_ST_BADPARAM)?;
        let int = |field: u16| match self.read_raw((ffi::DCGM_FE_GPU, gpu), field) {
            Payload::Int(v) if v < i64::from(u32::MAX) && v >= 0 => v as u32,
            _ => ffi::DCGM_INT32_BLANK as u32,
        };
        let text = |field: u16| match self.read_raw((ffi::DCGM_FE_GPU, gpu), field) {
            Payload::Text(s) => s,
            _ => ffi::DCGM_STR_BLANK.to_string(),
        };
        let mut a = dcgmDeviceAttributes_v3::boxed_zeroed();
        a.version = ffi::dcgmDeviceAttributes_version3;
        a.clockSets.version = ffi::dcgmDeviceSupportedClockSets_version1;
        a.thermalSettings = dcgmDeviceThermals_v1 {
            version: ffi::dcgmDeviceThermals_version1,
            slowdownTemp: ffi::DCGM_INT32_BLANK as u32,
            shutdownTemp: ffi::DCGM_INT32_BLANK as u32,
        };
        let blank = ffi::DCGM_INT32_BLANK as u32;
        a.powerLimits = dcgmDevicePowerLimits_v1 {
            version: ffi::dcgmDevicePowerLimits_version1,
            curPowerLimit: blank,
            defaultPowerLimit: blank,
            enforcedPowerLimit: blank,
            minPowerLimit: blank,
            maxPowerLimit: blank,
        };
        let ids = &mut a.identifiers;
        ids.version = ffi::dcgmDeviceIdentifiers_version1;
        write_chars(&mut ids.brandName, &text(51));
        write_chars(&mut ids.deviceName, &id.model);
        write_chars(&mut ids.pciBusId, &id.pci_bus_id);
        write_chars(&mut ids.serial, &text(53));
        write_chars(&mut ids.uuid, &id.uuid);
        write_chars(&mut ids.vbios, &text(85));
        write_chars(&mut ids.inforomImageVersion, "G520.0200.00.05");
        ids.pciDeviceId = 0x2330_10de;
        ids.pciSubSystemId = 0x16c1_10de;
        write_chars(
            &mut ids.driverVersion,
            self.fleet().map_or("", |f| f.driver_version()),
        );
        ids.virtualizationMode = 0;
        a.memoryUsage = dcgmDeviceMemoryUsage_v1 {
            version: ffi::dcgmDeviceMemoryUsage_version1,
            bar1Total: blank,
            fbTotal: int(250),
            fbUsed: int(252),
            fbFree: int(251),
        };
        a.settings = dcgmDeviceSettings_v2 {
            version: ffi::dcgmDeviceSettings_version2,
            persistenceModeEnabled: 1,
            migModeEnabled: u32::from(n_mig > 0),
            confidentialComputeMode: 0,
        };
        Ok(a)
    }

    /// `dcgmGetGpuInstanceHierarchy`: per MIG GPU, one GI row followed by its CI row(s) (§3.4). The
    /// fake gives every GPU instance exactly one compute instance, whose entity id equals the GI's.
    pub fn mig_hierarchy(&self) -> Result<Box<dcgmMigHierarchy_v2>, i32> {
        let mut h = dcgmMigHierarchy_v2::boxed_zeroed();
        h.version = ffi::dcgmMigHierarchy_version2;
        let mut n = 0usize;
        for m in self.migs() {
            if n + 2 > ffi::DCGM_MAX_HIERARCHY_INFO {
                return Err(ffi::DCGM_ST_INSUFFICIENT_SIZE);
            }
            let slices = slices_of(&m.mig.profile);
            let mut info = dcgmMigEntityInfo_t {
                gpuUuid: [0; 128],
                nvmlGpuIndex: m.gpu.index,
                nvmlInstanceId: m.mig.gi_id,
                nvmlComputeInstanceId: u32::MAX,
                nvmlMigProfileId: nvml_profile(slices, &m.mig.profile),
                nvmlProfileSlices: slices,
            };
            write_chars(&mut info.gpuUuid, &m.gpu.uuid);
            h.entityList[n] = dcgmMigHierarchyInfo_v2 {
                entity: dcgmGroupEntityPair_t {
                    entityGroupId: ffi::DCGM_FE_GPU_I,
                    entityId: m.mig.entity_id,
                },
                parent: dcgmGroupEntityPair_t {
                    entityGroupId: ffi::DCGM_FE_GPU,
                    entityId: m.gpu.index,
                },
                info,
            };
            info.nvmlComputeInstanceId = 0;
            h.entityList[n + 1] = dcgmMigHierarchyInfo_v2 {
                entity: dcgmGroupEntityPair_t {
                    entityGroupId: ffi::DCGM_FE_GPU_CI,
                    entityId: m.mig.entity_id,
                },
                parent: dcgmGroupEntityPair_t {
                    entityGroupId: ffi::DCGM_FE_GPU_I,
                    entityId: m.mig.entity_id,
                },
                info,
            };
            n += 2;
        }
        h.count = n as u32;
        Ok(h)
    }

    /// Per visible GPU: (gpu id, link states), `max_links` slots (18 for v4, 36 for v5).
    pub fn nvlink_states(&self, max_links: usize) -> Vec<(u32, Vec<u32>)> {
        self.gpus()
            .iter()
            .map(|g| {
                let n = self.gpu(g.index).map_or(0, |x| x.1) as usize;
                let states = (0..max_links)
                    .map(|i| {
                        if i < n {
                            ffi::DcgmNvLinkLinkStateUp
                        } else {
                            ffi::DcgmNvLinkLinkStateNotSupported
                        }
                    })
                    .collect();
                (g.index, states)
            })
            .collect()
    }

    /// `dcgmGetEntityGroupEntities`.
    pub fn group_entities(&self, group: u32) -> Result<Vec<u32>, i32> {
        match group {
            ffi::DCGM_FE_GPU | ffi::DCGM_FE_GPU_I | ffi::DCGM_FE_GPU_CI => {
                Ok(self.entities_of(group).into_iter().map(|e| e.1).collect())
            }
            ffi::DCGM_FE_SWITCH | ffi::DCGM_FE_CPU | ffi::DCGM_FE_CPU_CORE => {
                Ok(self.entities_of(group).into_iter().map(|e| e.1).collect())
            }
            ffi::DCGM_FE_CONNECTX | ffi::DCGM_FE_VGPU => Ok(Vec::new()),
            ffi::DCGM_FE_LINK | ffi::DCGM_FE_NONE => Err(ffi::DCGM_ST_NOT_SUPPORTED),
            _ => Err(ffi::DCGM_ST_BADPARAM),
        }
    }

    /// `dcgmProfGetSupportedMetricGroups` for one GPU.
    pub fn metric_groups(&self, gpu: u32) -> Result<Box<dcgmProfGetMetricGroups_v3>, i32> {
        if !self.profiling_loaded() {
            return Err(ffi::DCGM_ST_MODULE_NOT_LOADED);
        }
        if self.gpu(gpu).is_none() {
            return Err(ffi::DCGM_ST_BADPARAM);
        }
        let mut ids: Vec<u16> = (0..=u16::MAX)
            .filter(|id| catalog().by_id(*id).is_some_and(is_profiling))
            .collect();
        ids.sort_unstable();
        let mut g = dcgmProfGetMetricGroups_v3::boxed_zeroed();
        g.version = ffi::dcgmProfGetMetricGroups_version3;
        g.gpuId = gpu;
        let chunks = ids.chunks(ffi::DCGM_PROF_MAX_FIELD_IDS_PER_GROUP_V2);
        for (i, chunk) in chunks.take(ffi::DCGM_PROF_MAX_NUM_GROUPS_V2).enumerate() {
            let mg = &mut g.metricGroups[i];
            mg.majorId = i as u16;
            mg.minorId = 0;
            mg.numFieldIds = chunk.len() as u32;
            mg.fieldIds[..chunk.len()].copy_from_slice(chunk);
            g.numMetricGroups = i as u32 + 1;
        }
        Ok(g)
    }

    // ---------------------------------------------------------------- groups and watches

    pub fn group_create(&mut self, group_type: u32, name: &str) -> Result<usize, i32> {
        if name.is_empty() {
            return Err(ffi::DCGM_ST_BADPARAM);
        }
        if self.groups.len() >= MAX_USER_GROUPS {
            return Err(ffi::DCGM_ST_MAX_LIMIT);
        }
        let entities = match group_type {
            ffi::DCGM_GROUP_EMPTY => Vec::new(),
            ffi::DCGM_GROUP_DEFAULT => self.entities_of(ffi::DCGM_FE_GPU),
            ffi::DCGM_GROUP_DEFAULT_NVSWITCHES => self.entities_of(ffi::DCGM_FE_SWITCH),
            ffi::DCGM_GROUP_DEFAULT_INSTANCES => self.entities_of(ffi::DCGM_FE_GPU_I),
            ffi::DCGM_GROUP_DEFAULT_COMPUTE_INSTANCES => self.entities_of(ffi::DCGM_FE_GPU_CI),
            ffi::DCGM_GROUP_DEFAULT_EVERYTHING => {
                let mut v = self.entities_of(ffi::DCGM_FE_GPU);
                v.extend(self.entities_of(ffi::DCGM_FE_GPU_I));
                v.extend(self.entities_of(ffi::DCGM_FE_GPU_CI));
                v
            }
            _ => return Err(ffi::DCGM_ST_BADPARAM),
        };
        let id = self.next_group;
        self.next_group += 1;
        self.groups.insert(
            id,
            Group {
                name: name.to_string(),
                entities,
            },
        );
        Ok(id)
    }

    pub fn group_add_entity(&mut self, group: usize, key: EntityKey) -> Result<(), i32> {
        if !self.entity_exists(key) {
            return Err(ffi::DCGM_ST_BADPARAM);
        }
        let g = self
            .groups
            .get_mut(&group)
            .ok_or(ffi::DCGM_ST_NOT_CONFIGURED)?;
        if !g.entities.contains(&key) {
            g.entities.push(key);
        }
        Ok(())
    }

    pub fn group_destroy(&mut self, group: usize) -> Result<(), i32> {
        self.health_watches.remove(&group);
        self.groups
            .remove(&group)
            .map(|_| ())
            .ok_or(ffi::DCGM_ST_NOT_CONFIGURED)
    }

    /// `dcgmGroupGetInfo`: the group's name and members (the built-in groups by their DCGM names).
    pub fn group_info(&self, group: usize) -> Result<(String, Vec<EntityKey>), i32> {
        let members = self.group_members(group)?;
        let name = self
            .groups
            .get(&group)
            .map_or_else(|| "DCGM_ALL_SUPPORTED_GPUS".to_string(), |g| g.name.clone());
        Ok((name, members))
    }

    /// `dcgmHealthGet`: the systems `dcgmHealthSet` gave the group (none yet: 0).
    pub fn health_get(&self, group: usize) -> Result<u32, i32> {
        self.group_members(group)?;
        Ok(self.health_watches.get(&group).copied().unwrap_or(0))
    }

    /// `dcgmGetGpuStatus`: `DcgmEntityStatusOk` for a visible GPU, `DcgmEntityStatusLost` for one
    /// that vanished or was unbound; unknown ids are a bad parameter.
    pub fn gpu_status(&self, gpu: u32) -> Result<u32, i32> {
        if self.gpu(gpu).is_some() {
            Ok(ENTITY_STATUS_OK)
        } else if self.vanished.contains(&gpu) {
            Ok(ENTITY_STATUS_LOST)
        } else {
            Err(ffi::DCGM_ST_BADPARAM)
        }
    }

    pub fn field_group_create(&mut self, fields: &[u16], name: &str) -> Result<usize, i32> {
        if fields.is_empty()
            || fields.len() >= ffi::DCGM_MAX_FIELD_IDS_PER_FIELD_GROUP
            || name.is_empty()
            || name.len() >= ffi::DCGM_MAX_STR_LENGTH
        {
            return Err(ffi::DCGM_ST_BADPARAM);
        }
        if fields.iter().any(|f| catalog().by_id(*f).is_none()) {
            return Err(ffi::DCGM_ST_BADPARAM);
        }
        if self.field_groups.values().any(|fg| fg.name == name) {
            return Err(ffi::DCGM_ST_DUPLICATE_KEY);
        }
        if self.field_groups.len() >= MAX_USER_FIELD_GROUPS {
            return Err(ffi::DCGM_ST_MAX_LIMIT);
        }
        let id = self.next_field_group;
        self.next_field_group += 1;
        self.field_groups.insert(
            id,
            FieldGroup {
                name: name.to_string(),
                fields: fields.to_vec(),
            },
        );
        Ok(id)
    }

    pub fn field_group_destroy(&mut self, id: usize) -> Result<(), i32> {
        // Destroying a field group does not unwatch (dcgm-abi.md §6.3).
        self.field_groups
            .remove(&id)
            .map(|_| ())
            .ok_or(ffi::DCGM_ST_NO_DATA)
    }

    fn group_members(&self, group: usize) -> Result<Vec<EntityKey>, i32> {
        let all = |groups: &[u32]| {
            groups
                .iter()
                .flat_map(|g| self.entities_of(*g))
                .collect::<Vec<_>>()
        };
        match group {
            ffi::DCGM_GROUP_ALL_GPUS => Ok(all(&[ffi::DCGM_FE_GPU])),
            ffi::DCGM_GROUP_ALL_INSTANCES => Ok(all(&[ffi::DCGM_FE_GPU_I])),
            ffi::DCGM_GROUP_ALL_COMPUTE_INSTANCES => Ok(all(&[ffi::DCGM_FE_GPU_CI])),
            ffi::DCGM_GROUP_ALL_NVSWITCHES => Ok(all(&[ffi::DCGM_FE_SWITCH])),
            ffi::DCGM_GROUP_ALL_ENTITIES => Ok(all(&[
                ffi::DCGM_FE_GPU,
                ffi::DCGM_FE_GPU_I,
                ffi::DCGM_FE_GPU_CI,
            ])),
            _ => self
                .groups
                .get(&group)
                .map(|g| g.entities.clone())
                .ok_or(ffi::DCGM_ST_NOT_CONFIGURED),
        }
    }

    #[cfg(test)]
    pub fn watch(&mut self, group: usize, field_group: usize, freq_us: i64) -> Result<(), i32> {
        self.watch_keeping(group, field_group, freq_us, 0.0, 0)
    }

    /// `dcgmWatchFields` with its history limits (`max_keep_age` s, `max_keep_samples`; 0 = none).
    pub fn watch_keeping(
        &mut self,
        group: usize,
        field_group: usize,
        freq_us: i64,
        max_keep_age: f64,
        max_keep_samples: i32,
    ) -> Result<(), i32> {
        if group == 0 || freq_us <= 0 {
            return Err(ffi::DCGM_ST_BADPARAM);
        }
        let entities = self.group_members(group)?;
        let fg = self
            .field_groups
            .get(&field_group)
            .ok_or(ffi::DCGM_ST_NOT_CONFIGURED)?;
        if !self.profiling_loaded()
            && fg
                .fields
                .iter()
                .any(|f| catalog().by_id(*f).is_some_and(is_profiling))
        {
            // The whole field group stays unwatched (§6.3).
            return Err(ffi::DCGM_ST_MODULE_NOT_LOADED);
        }
        let fields: HashSet<u16> = fg.fields.iter().copied().collect();
        let now = self.sim_us();
        for key in &entities {
            for f in &fields {
                self.history_from.entry((*key, *f)).or_insert(now);
            }
        }
        self.watches
            .retain(|w| !(w.group == group && w.field_group == field_group));
        self.watches.push(Watch {
            group,
            field_group,
            entities: entities.into_iter().collect(),
            fields,
            keep_age: Duration::try_from_secs_f64(max_keep_age).unwrap_or_default(),
            keep_samples: usize::try_from(max_keep_samples).unwrap_or(0),
            freq: Duration::from_micros(freq_us.unsigned_abs()),
            created: Instant::now(),
            primed: false,
        });
        Ok(())
    }

    pub fn unwatch(&mut self, group: usize, field_group: usize) -> Result<(), i32> {
        if group == 0 {
            return Err(ffi::DCGM_ST_BADPARAM);
        }
        self.watches
            .retain(|w| !(w.group == group && w.field_group == field_group));
        Ok(())
    }

    /// `dcgmUpdateAllFields`: every watch has a sample from now on.
    pub fn update_all(&mut self) {
        for w in &mut self.watches {
            w.primed = true;
        }
    }

    // ---------------------------------------------------------------- values

    pub fn slow(&self) -> Duration {
        self.cfg.faults.slow
    }

    /// A polling latest-values call begins: how long it must block first (`slow_ms`, plus `hang_ms`
    /// once, on the call it names).
    pub fn delay_for_poll(&mut self) -> Duration {
        self.polls_begun += 1;
        let mut delay = self.cfg.faults.slow;
        if let Some((hang, at)) = self.cfg.faults.hang {
            if !self.hung_once && self.polls_begun == at {
                self.hung_once = true;
                delay += hang;
                crate::calllog::line(&format!("hang begins ms={}", hang.as_millis()));
            }
        }
        delay
    }

    /// Before a latest-values call: start a new simulated cycle (advance the fleet by the watch
    /// interval) when an entity is read again.
    pub fn begin_read(&mut self, entities: &[EntityKey], fields: &[u16]) {
        if entities.iter().any(|e| self.read_since_advance.contains(e)) {
            if self.at_stop() {
                if !self.stopped {
                    self.stopped = true;
                    let n = self.fleet().map_or(0, Fleet::collection);
                    crate::calllog::line(&format!("fleet stopped at collection {n}"));
                }
            } else {
                let step = self.step();
                if let Some(f) = self.fleet.as_mut() {
                    f.advance(step.as_secs_f64());
                }
                self.record_clock_masks();
            }
            self.read_since_advance.clear();
            self.polled_fields.clear();
        }
        self.read_since_advance.extend(entities.iter().copied());
        self.polled_fields.extend(fields.iter().copied());
    }

    /// Whether the fleet is at the collection `stop_at_collection` names (the first poll's is 1).
    fn at_stop(&self) -> bool {
        match (self.cfg.faults.stop_at_collection, self.fleet()) {
            (Some(n), Some(f)) => f.collection() >= n,
            _ => false,
        }
    }

    /// Keep the clock-event bitmask of every GPU at the collection just reached (the history
    /// `dcgmGetValuesSince_v2` serves).
    fn record_clock_masks(&mut self) {
        let Some(f) = self.fleet() else {
            return;
        };
        let masks = f
            .gpus()
            .iter()
            .map(|g| (g.identity.index, f.clock_mask(g.identity.index)))
            .collect();
        let at = self.sim_us();
        if self.clock_history.len() >= CLOCK_HISTORY_COLLECTIONS {
            self.clock_history.remove(0);
        }
        self.clock_history.push((at, masks));
    }

    /// One poll cycle of simulated time: the polling interval of the fields polled, each field's
    /// slowest watch (a field also watched faster, to be read through `dcgmGetValuesSince_v2`, is
    /// still polled at its regular interval); without polled fields the fastest watch, else 1 s.
    fn step(&self) -> Duration {
        let slowest = |f: &u16| {
            self.watches
                .iter()
                .filter(|w| w.fields.contains(f))
                .map(|w| w.freq)
                .max()
        };
        self.polled_fields
            .iter()
            .filter_map(slowest)
            .min()
            .or_else(|| self.watches.iter().map(|w| w.freq).min())
            .unwrap_or(Duration::from_secs(1))
    }

    /// Simulated time now, in µs.
    fn sim_us(&self) -> i64 {
        self.fleet().map_or(0, |f| (f.time() * 1e6).round() as i64)
    }

    /// After a successful latest-values call: count it and fire the faults due.
    pub fn end_read(&mut self) {
        self.polls += 1;
        let polls = self.polls;
        let due: Vec<u32> = self
            .cfg
            .faults
            .vanish
            .iter()
            .filter(|(_, after)| *after == polls)
            .map(|(idx, _)| *idx)
            .collect();
        for idx in due {
            self.vanished.insert(idx);
            if let Some(f) = self.fleet.as_mut() {
                f.remove_gpu(idx);
            }
        }
        // Unbinding hides a GPU (its identity is kept, it may come back); binding shows it again.
        // Either way the engine re-initialises and records the event, at once completed (state 2).
        let unbinds: Vec<u32> = self
            .cfg
            .faults
            .unbind
            .iter()
            .filter(|(_, after)| *after == polls)
            .map(|(idx, _)| *idx)
            .collect();
        let binds: Vec<u32> = self
            .cfg
            .faults
            .bind
            .iter()
            .filter(|(_, after)| *after == polls)
            .map(|(idx, _)| *idx)
            .collect();
        for idx in &unbinds {
            self.vanished.insert(*idx);
        }
        for idx in &binds {
            self.vanished.remove(idx);
        }
        if !unbinds.is_empty() || !binds.is_empty() {
            self.bind_event = (2, now_us().max(self.bind_event.1 + 1));
            crate::calllog::line(&format!(
                "bind event unbound={} bound={}",
                unbinds
                    .iter()
                    .map(u32::to_string)
                    .collect::<Vec<_>>()
                    .join(","),
                binds
                    .iter()
                    .map(u32::to_string)
                    .collect::<Vec<_>>()
                    .join(",")
            ));
        }
        if !self.disconnected_once && self.cfg.faults.disconnect_after_polls == Some(polls) {
            self.lose_host_engine();
        }
        if let Some(every) = self.cfg.faults.outage_every {
            // Windows of UNIX time: [k·every, k·every + down_ms), the engine lost once per window.
            let every_ms = every.as_millis().max(1);
            let now_ms = SystemTime::now()
                .duration_since(UNIX_EPOCH)
                .map_or(0, |d| d.as_millis());
            let (window, into) = (now_ms / every_ms, now_ms % every_ms);
            let down_ms = self.cfg.faults.down.as_millis();
            if into < down_ms && self.outage_window != Some(window) {
                crate::calllog::line("host engine outage begins");
                self.lose_host_engine();
                self.outage_window = Some(window);
                let left = u64::try_from(down_ms - into).unwrap_or(u64::MAX);
                self.down_until = Some(Instant::now() + Duration::from_millis(left));
            }
        }
    }

    // ---------------------------------------------------------------- incidents

    fn ts_of(&self, time_s: f64) -> i64 {
        self.epoch_us + (time_s * 1e6) as i64
    }

    /// `dcgmGetValuesSince_v2`: the XID samples (one per occurrence, on the GPU or on the MIG instance
    /// it hit) and the clock-event bitmask sample of the current collection (GPUs only) of the
    /// group's entities, for the watched fields of the field group, newer than or at `since`; and the
    /// cursor for the next call (past the newest sample returned).
    pub fn values_since(
        &self,
        group: usize,
        field_group: usize,
        since: i64,
    ) -> Result<(Vec<SinceValue>, i64), i32> {
        let members = self.group_members(group)?;
        let fg = self
            .field_groups
            .get(&field_group)
            .ok_or(ffi::DCGM_ST_BADPARAM)?;
        let Some(watch) = self
            .watches
            .iter()
            .find(|w| w.group == group && w.field_group == field_group)
        else {
            return Err(ffi::DCGM_ST_NOT_WATCHED);
        };
        let Some(fleet) = self.fleet() else {
            return Ok((Vec::new(), since));
        };
        let mut out = Vec::new();
        for key in &members {
            if !self.entity_exists(*key) {
                continue;
            }
            for field in &fg.fields {
                match (*field, key.0) {
                    (XID_ERRORS, ffi::DCGM_FE_GPU) => {
                        for x in fleet
                            .xid_log()
                            .iter()
                            .filter(|x| x.gpu == key.1 && x.gpu_i_id.is_none())
                        {
                            out.push(SinceValue {
                                key: *key,
                                field: *field,
                                ts_us: self.ts_of(x.time_s),
                                field_type: ffi::DCGM_FT_INT64,
                                value: Payload::Int(i64::from(x.code)),
                            });
                        }
                    }
                    (XID_ERRORS, ffi::DCGM_FE_GPU_I) => {
                        let Some(m) = self.mig(key.1) else {
                            continue;
                        };
                        for x in fleet
                            .xid_log()
                            .iter()
                            .filter(|x| x.gpu == m.gpu.index && x.gpu_i_id == Some(m.mig.gi_id))
                        {
                            out.push(SinceValue {
                                key: *key,
                                field: *field,
                                ts_us: self.ts_of(x.time_s),
                                field_type: ffi::DCGM_FT_INT64,
                                value: Payload::Int(i64::from(x.code)),
                            });
                        }
                    }
                    (CLOCK_EVENT_REASONS, ffi::DCGM_FE_GPU) => {
                        self.clock_samples(*key, watch, &mut out);
                    }
                    (XID_ERRORS | CLOCK_EVENT_REASONS, _) => {}
                    _ => self.sampled(*key, *field, watch, since, &mut out),
                }
            }
        }
        out.retain(|v| v.ts_us >= since);
        out.sort_by_key(|v| (v.key, v.field, v.ts_us));
        let next = out
            .iter()
            .map(|v| v.ts_us + 1)
            .max()
            .unwrap_or(since)
            .max(since);
        Ok((out, next))
    }

    /// The samples of a sampled numeric field on one entity, as a host engine sampling it at the
    /// watch's frequency holds them: at every multiple of the frequency (simulated time) after the
    /// engine's history of it began (its first watch on this engine) and up to now, within the
    /// watch's `maxKeepAge` and `maxKeepSamples`, those at or after `since`. The value is the
    /// scenario's waveform at the sample's time when one sets the field, else the fleet's current
    /// value (the fleet keeps no history); `blank_field` samples are blank sentinels.
    /// The clock-event bitmask samples of a GPU: one per collection since the field's first watch on
    /// this engine, within the watch's `maxKeepAge` / `maxKeepSamples`.
    fn clock_samples(&self, key: EntityKey, watch: &Watch, out: &mut Vec<SinceValue>) {
        let Some(&from) = self.history_from.get(&(key, CLOCK_EVENT_REASONS)) else {
            return;
        };
        let now = self.sim_us();
        let oldest = if watch.keep_age.is_zero() {
            i64::MIN
        } else {
            now - i64::try_from(watch.keep_age.as_micros()).unwrap_or(i64::MAX)
        };
        let kept: Vec<(i64, u64)> = self
            .clock_history
            .iter()
            .filter(|(at, _)| *at >= from && *at >= oldest)
            .filter_map(|(at, masks)| {
                masks
                    .iter()
                    .find(|(gpu, _)| *gpu == key.1)
                    .map(|(_, mask)| (*at, *mask))
            })
            .collect();
        let skip = match watch.keep_samples {
            0 => 0,
            n => kept.len().saturating_sub(n),
        };
        for (at, mask) in kept.into_iter().skip(skip) {
            out.push(SinceValue {
                key,
                field: CLOCK_EVENT_REASONS,
                ts_us: self.epoch_us + at,
                field_type: ffi::DCGM_FT_INT64,
                value: Payload::Int(mask as i64),
            });
        }
    }

    fn sampled(
        &self,
        key: EntityKey,
        field: u16,
        watch: &Watch,
        since: i64,
        out: &mut Vec<SinceValue>,
    ) {
        let Some(info) = catalog().by_id(field) else {
            return;
        };
        if !matches!(info.value_type, ValueType::Int64 | ValueType::Double) {
            return;
        }
        let ft = type_char(info.value_type);
        let Some(&from) = self.history_from.get(&(key, field)) else {
            return;
        };
        let every = i64::try_from(watch.freq.as_micros())
            .unwrap_or(i64::MAX)
            .max(1);
        let now = self.sim_us();
        let mut lo = from.saturating_add(1).max(since - self.epoch_us);
        if !watch.keep_age.is_zero() {
            lo = lo.max(now - i64::try_from(watch.keep_age.as_micros()).unwrap_or(i64::MAX));
        }
        let mut first = lo.div_euclid(every) + i64::from(lo.rem_euclid(every) != 0);
        let last = now.div_euclid(every);
        if watch.keep_samples > 0 {
            first = first.max(last - watch.keep_samples as i64 + 1);
        }
        let wave_entity = self.wave_entity(key);
        let current = self.coerce(ft, self.read_raw(key, field));
        for k in first..=last {
            let t = k * every;
            let value = if self.cfg.faults.blank_fields.contains(&field) {
                sentinel(ft, Absent::Blank)
            } else {
                match wave_entity
                    .as_ref()
                    .and_then(|e| self.waveforms.value(e, field, t))
                {
                    Some(FieldValue::Int(i)) => self.coerce(ft, Payload::Int(i)),
                    Some(FieldValue::Double(d)) => self.coerce(ft, Payload::Double(d)),
                    _ => current.clone(),
                }
            };
            out.push(SinceValue {
                key,
                field,
                ts_us: self.epoch_us + t,
                field_type: ft,
                value,
            });
        }
    }

    /// The GPU whose waveforms apply to an entity (a MIG instance: its GPU's).
    fn wave_entity(&self, (group, id): EntityKey) -> Option<Entity> {
        let gpu = match group {
            ffi::DCGM_FE_GPU => self.gpu(id)?.0,
            ffi::DCGM_FE_GPU_I | ffi::DCGM_FE_GPU_CI => self.mig(id)?.gpu,
            _ => return None,
        };
        Some(Entity::gpu(gpu))
    }

    /// `dcgmHealthSet`.
    pub fn health_set(&mut self, group: usize, systems: u32) -> Result<(), i32> {
        self.group_members(group)?;
        self.health_watches.insert(group, systems);
        Ok(())
    }

    /// `dcgmHealthCheck`: the scenario's active health incidents of the group's GPUs (only the watched
    /// systems); `DCGM_ST_NOT_CONFIGURED` without `dcgmHealthSet`; the `health_check_error=N` fault.
    pub fn health_check(&mut self, group: usize) -> Result<Vec<HealthIncident>, i32> {
        let members = self.group_members(group)?;
        let systems = *self
            .health_watches
            .get(&group)
            .ok_or(ffi::DCGM_ST_NOT_CONFIGURED)?;
        self.health_checks += 1;
        if self.cfg.faults.health_check_error == Some(self.health_checks) {
            return Err(ffi::DCGM_ST_GENERIC_ERROR);
        }
        let Some(fleet) = self.fleet() else {
            return Ok(Vec::new());
        };
        let mut out = Vec::new();
        for (g, id) in members {
            if g != ffi::DCGM_FE_GPU || self.gpu(id).is_none() {
                continue;
            }
            for h in fleet.health(id) {
                if h.watch & systems != 0 {
                    out.push(HealthIncident {
                        gpu: id,
                        system: h.watch,
                        result: h.result.value(),
                        code: h.code,
                        message: h.message,
                    });
                }
            }
        }
        Ok(out)
    }

    /// `dcgmGetNvLinkP2PStatus`: per visible GPU, its status towards every GPU id.
    pub fn p2p_status(&self) -> Vec<(u32, Vec<u32>)> {
        let Some(fleet) = self.fleet() else {
            return Vec::new();
        };
        let gpus = self.gpus();
        gpus.iter()
            .map(|a| {
                let row = (0..ffi::DCGM_MAX_NUM_DEVICES as u32)
                    .map(|b| {
                        if gpus.iter().any(|g| g.index == b) && b != a.index {
                            fleet.p2p_status(a.index, b)
                        } else {
                            dcgm_otel::fields::p2p::NOT_SUPPORTED
                        }
                    })
                    .collect();
                (a.index, row)
            })
            .collect()
    }

    /// The wire value of one field on one entity (`live` = DCGM_FV_FLAG_LIVE_DATA: no watch needed).
    pub fn read(&self, key: EntityKey, field: u16, live: bool) -> Sample {
        let ts_us = self.epoch_us + self.fleet().map_or(0, |f| (f.time() * 1e6) as i64);
        let Some(info) = catalog().by_id(field) else {
            return Sample {
                status: ffi::DCGM_ST_UNKNOWN_FIELD,
                field_type: ffi::DCGM_FT_INT64,
                ts_us,
                value: sentinel(ffi::DCGM_FT_INT64, Absent::Blank),
            };
        };
        let ft = type_char(info.value_type);
        let sample = |status, value| Sample {
            status,
            field_type: ft,
            ts_us,
            value,
        };
        let global = info.level == EntityLevel::Global;
        if field == BIND_UNBIND_EVENT && self.watched(key, field) {
            // The event's own time, not the read's: a new timestamp is a new event.
            return Sample {
                status: ffi::DCGM_ST_OK,
                field_type: ft,
                ts_us: self.bind_event.1,
                value: Payload::Int(self.bind_event.0),
            };
        }
        // A global field reads the same through any entity id, as in DCGM (even one that is gone).
        if !global && !self.entity_exists(key) {
            return sample(ffi::DCGM_ST_OK, sentinel(ft, Absent::NotFound));
        }
        if !self.profiling_loaded() && is_profiling(info) {
            return sample(
                ffi::DCGM_ST_NOT_SUPPORTED,
                sentinel(ft, Absent::NotSupported),
            );
        }
        if self.cfg.faults.blank_fields.contains(&field) {
            return sample(ffi::DCGM_ST_OK, sentinel(ft, Absent::Blank));
        }
        if !live {
            let mut watched = self.watches.iter().filter(|w| {
                w.fields.contains(&field)
                    && (w.entities.contains(&key) || (global && !w.entities.is_empty()))
            });
            match watched.clone().next() {
                None => {
                    return sample(ffi::DCGM_ST_NOT_WATCHED, sentinel(ft, Absent::Blank));
                }
                Some(_) => {
                    if !watched.any(|w| w.primed || w.created.elapsed() >= w.freq) {
                        return sample(ffi::DCGM_ST_NO_DATA, sentinel(ft, Absent::Blank));
                    }
                }
            }
        }
        sample(ffi::DCGM_ST_OK, self.coerce(ft, self.read_raw(key, field)))
    }

    /// Whether some watch covers `field` on `key` (a global field: any watch of it).
    fn watched(&self, key: EntityKey, field: u16) -> bool {
        self.watches.iter().any(|w| {
            w.fields.contains(&field) && (w.entities.contains(&key) || !w.entities.is_empty())
        })
    }

    /// Make a payload match the field's DCGM type (as the real cache stores it).
    fn coerce(&self, ft: u8, p: Payload) -> Payload {
        match (ft, p) {
            (ffi::DCGM_FT_INT64, Payload::Double(d)) if d.is_finite() => {
                Payload::Int(d.round() as i64)
            }
            (ffi::DCGM_FT_DOUBLE, Payload::Int(i)) => Payload::Double(i as f64),
            (ffi::DCGM_FT_STRING | ffi::DCGM_FT_BINARY, p @ Payload::Text(_)) => p,
            (ffi::DCGM_FT_INT64, p @ Payload::Int(_))
            | (ffi::DCGM_FT_DOUBLE, p @ Payload::Double(_)) => p,
            (ft, _) => sentinel(ft, Absent::Blank),
        }
    }

    /// The fleet's value (plus identity strings the fleet does not model), uncoerced.
    fn read_raw(&self, key: EntityKey, field: u16) -> Payload {
        let ft = catalog()
            .by_id(field)
            .map_or(ffi::DCGM_FT_INT64, |i| type_char(i.value_type));
        let (group, id) = key;
        // Identity fields, answered from the inventory.
        match (group, field) {
            (ffi::DCGM_FE_GPU, 50) => {
                if let Some((g, ..)) = self.gpu(id) {
                    return Payload::Text(g.model.clone());
                }
            }
            (ffi::DCGM_FE_GPU, 52) => return Payload::Int(i64::from(id)),
            (ffi::DCGM_FE_GPU, 54) => {
                if let Some((g, ..)) = self.gpu(id) {
                    return Payload::Text(g.uuid.clone());
                }
            }
            (ffi::DCGM_FE_GPU, 57) => {
                if let Some((g, ..)) = self.gpu(id) {
                    return Payload::Text(g.pci_bus_id.clone());
                }
            }
            (ffi::DCGM_FE_GPU_I | ffi::DCGM_FE_GPU_CI, 50) => {
                if let Some(m) = self.mig(id) {
                    return Payload::Text(m.mig.profile.clone());
                }
            }
            (ffi::DCGM_FE_GPU_I | ffi::DCGM_FE_GPU_CI, 54) => {
                if let Some(m) = self.mig(id) {
                    return Payload::Text(m.mig.uuid.clone());
                }
            }
            _ => {}
        }
        let (kind, sim_id) = match group {
            ffi::DCGM_FE_GPU => (EntityKind::Gpu, id),
            ffi::DCGM_FE_GPU_I | ffi::DCGM_FE_GPU_CI => (EntityKind::GpuInstance, id),
            ffi::DCGM_FE_LINK => match self.link(id) {
                Some(LinkRef::Gpu(gpu, port)) => (EntityKind::NvLink, link_entity_id(gpu, port)),
                Some(LinkRef::Switch(sw, port)) => {
                    (EntityKind::NvSwitchLink, port_entity_id(sw, port))
                }
                None if catalog()
                    .by_id(field)
                    .is_some_and(|i| i.level == EntityLevel::Global) =>
                {
                    (EntityKind::NvLink, 0)
                }
                None => return sentinel(ft, Absent::NotFound),
            },
            ffi::DCGM_FE_SWITCH => (EntityKind::NvSwitch, id),
            ffi::DCGM_FE_CPU => (EntityKind::Cpu, id),
            ffi::DCGM_FE_CPU_CORE => (EntityKind::CpuCore, id),
            // Global fields read through any group.
            ffi::DCGM_FE_NONE => (EntityKind::Gpu, id),
            _ => return sentinel(ft, Absent::NotFound),
        };
        let Some(fleet) = self.fleet() else {
            return sentinel(ft, Absent::NotFound);
        };
        let wave = self
            .wave_entity(key)
            .and_then(|e| self.waveforms.value(&e, field, self.sim_us()));
        match wave.unwrap_or_else(|| fleet.value(kind, sim_id, field)) {
            FieldValue::Int(i) => Payload::Int(i),
            FieldValue::Double(d) => Payload::Double(d),
            FieldValue::Text(s) => Payload::Text(s.to_string()),
            FieldValue::Absent(why) => sentinel(ft, why),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn engine_with(faults: &str, profiling: bool) -> Engine {
        let cfg = Config::from_values(
            None,
            None,
            Some(if profiling { "on" } else { "off" }),
            Some(faults),
        )
        .unwrap();
        let fleet = Fleet::new(&Scenario::load("default").unwrap(), 1, "node-a");
        Engine {
            cfg,
            initialized: true,
            fleet: Some(fleet),
            next_handle: 1,
            next_group: FIRST_GROUP,
            next_field_group: FIRST_FIELD_GROUP,
            ..Engine::default()
        }
    }

    #[test]
    fn watched_values_flow_and_counters_grow() {
        let mut e = engine_with("", true);
        let h = e.connect("127.0.0.1:5555").unwrap();
        e.check(h).unwrap();
        let g = e.group_create(ffi::DCGM_GROUP_EMPTY, "g").unwrap();
        assert_eq!(g, 2);
        e.group_add_entity(g, (ffi::DCGM_FE_GPU, 0)).unwrap();
        let fg = e.field_group_create(&[150, 156], "f").unwrap();
        assert_eq!(fg, 4);
        assert_eq!(
            e.read((ffi::DCGM_FE_GPU, 0), 150, false).status,
            ffi::DCGM_ST_NOT_WATCHED
        );
        e.watch(g, fg, 1_000_000).unwrap();
        assert_eq!(
            e.read((ffi::DCGM_FE_GPU, 0), 150, false).status,
            ffi::DCGM_ST_NO_DATA
        );
        e.update_all();
        let key = (ffi::DCGM_FE_GPU, 0);
        e.begin_read(&[key], &[156]);
        let first = e.read(key, 156, false);
        e.end_read();
        e.begin_read(&[key], &[156]);
        let second = e.read(key, 156, false);
        e.end_read();
        match (first.value, second.value) {
            (Payload::Int(a), Payload::Int(b)) => assert!(b > a, "energy {a} -> {b}"),
            other => panic!("{other:?}"),
        }
        assert!(second.ts_us > first.ts_us);
    }

    /// `stop_at_collection=3`: polls past the third collection read it again (no time passes, logged
    /// once); the clock-event samples are one per collection reached, served from the start again to a
    /// caller that asks from 0 at every read (dcgm-exporter), and only the new ones from a cursor.
    #[test]
    fn the_fleet_stops_and_clock_event_samples_are_history() {
        let mut e = engine_with("stop_at_collection=3", true);
        e.record_clock_masks();
        let key = (ffi::DCGM_FE_GPU, 0);
        e.connect("x").unwrap();
        let g = e.group_create(ffi::DCGM_GROUP_EMPTY, "g").unwrap();
        e.group_add_entity(g, key).unwrap();
        let fg = e.field_group_create(&[CLOCK_EVENT_REASONS], "c").unwrap();
        e.watch(g, fg, 1_000_000).unwrap();
        let mut times = Vec::new();
        for _ in 0..6 {
            e.begin_read(&[key], &[155]);
            e.end_read();
            times.push(e.sim_us());
        }
        assert_eq!(
            times,
            vec![0, 1_000_000, 2_000_000, 2_000_000, 2_000_000, 2_000_000]
        );
        assert_eq!(e.fleet().map(Fleet::collection), Some(3));
        let (all, cursor) = e.values_since(g, fg, 0).unwrap();
        assert_eq!(all.len(), 3, "one sample per collection");
        assert_eq!(e.values_since(g, fg, 0).unwrap().0.len(), 3);
        assert!(e.values_since(g, fg, cursor).unwrap().0.is_empty());
    }

    /// Power watched at 1 s and at 100 ms: the samples of all history (since 0) after two polls (one
    /// second), and after a third poll, a lost engine, a reconnect and a new watch.
    fn samples_after_reconnect(faults: &str) -> (usize, usize) {
        let mut e = engine_with(faults, true);
        let key = (ffi::DCGM_FE_GPU, 0);
        let watch_all = |e: &mut Engine| {
            let g = e.group_create(ffi::DCGM_GROUP_EMPTY, "g").unwrap();
            e.group_add_entity(g, key).unwrap();
            let n = e.next_field_group;
            let regular = e.field_group_create(&[155], &format!("r{n}")).unwrap();
            let sampled = e.field_group_create(&[155], &format!("s{n}")).unwrap();
            e.watch_keeping(g, regular, 1_000_000, 600.0, 0).unwrap();
            e.watch_keeping(g, sampled, 100_000, 3.0, 31).unwrap();
            (g, sampled)
        };
        e.connect("x").unwrap();
        let (g, fg) = watch_all(&mut e);
        for _ in 0..2 {
            e.begin_read(&[key], &[155]);
            e.end_read();
        }
        let before = e.values_since(g, fg, 0).unwrap().0.len();
        // The third poll moves the engine's time on by a second; then the engine is lost.
        e.begin_read(&[key], &[155]);
        e.end_read();
        assert_eq!(
            e.values_since(g, fg, 0).err(),
            Some(ffi::DCGM_ST_NOT_CONFIGURED)
        );
        e.connect("x").unwrap();
        let (g, fg) = watch_all(&mut e);
        (before, e.values_since(g, fg, 0).unwrap().0.len())
    }

    #[test]
    fn a_restart_loses_the_sampled_history_unless_it_survives() {
        // One poll interval (1 s, the regular watch) of 100 ms samples.
        assert_eq!(samples_after_reconnect("disconnect_after_polls=3"), (10, 0));
        assert_eq!(
            samples_after_reconnect("disconnect_after_polls=3,history_survives=1"),
            (10, 20)
        );
    }

    #[test]
    fn disconnect_fault_kills_handles_and_objects() {
        let mut e = engine_with("disconnect_after_polls=1,down_ms=60000", true);
        let h = e.connect("x").unwrap();
        let g = e.group_create(ffi::DCGM_GROUP_DEFAULT, "g").unwrap();
        e.begin_read(&[], &[]);
        e.end_read();
        assert_eq!(e.check(h), Err(ffi::DCGM_ST_CONNECTION_NOT_VALID));
        assert_eq!(e.connect("x"), Err(ffi::DCGM_ST_CONNECTION_NOT_VALID));
        assert!(!e.groups.contains_key(&g));
    }

    #[test]
    fn repeated_outage_fault_loses_the_engine_in_each_window() {
        // Windows of 1 ms every 2 ms: a poll lands in one within a few tries.
        let mut e = engine_with("outage_every_ms=2,down_ms=1", true);
        let h = e.connect("x").unwrap();
        let mut lost = false;
        for _ in 0..1000 {
            e.begin_read(&[], &[]);
            e.end_read();
            if e.check(h).is_err() {
                lost = true;
                break;
            }
            std::thread::sleep(Duration::from_micros(300));
        }
        assert!(lost, "no outage in 1,000 polls");
        assert_eq!(e.check(h), Err(ffi::DCGM_ST_CONNECTION_NOT_VALID));
    }

    #[test]
    fn profiling_off() {
        let mut e = engine_with("", false);
        assert_eq!(
            e.metric_groups(0).unwrap_err(),
            ffi::DCGM_ST_MODULE_NOT_LOADED
        );
        let g = e.group_create(ffi::DCGM_GROUP_DEFAULT, "g").unwrap();
        let fg = e.field_group_create(&[1001, 1002], "dcp").unwrap();
        assert_eq!(e.watch(g, fg, 1000), Err(ffi::DCGM_ST_MODULE_NOT_LOADED));
        let s = e.read((ffi::DCGM_FE_GPU, 0), 1001, true);
        assert_eq!(s.status, ffi::DCGM_ST_NOT_SUPPORTED);
    }

    #[test]
    fn mig_rows_and_names() {
        let e = engine_with("", true);
        let h = e.mig_hierarchy().unwrap();
        assert_eq!(h.count, 6, "3 GPU instances + 3 compute instances on GPU 1");
        assert_eq!(h.entityList[0].entity.entityGroupId, ffi::DCGM_FE_GPU_I);
        assert_eq!(h.entityList[0].parent.entityId, 1);
        assert_eq!(h.entityList[1].entity.entityGroupId, ffi::DCGM_FE_GPU_CI);
        let gi = h.entityList[0].entity.entityId;
        let name = e.read((ffi::DCGM_FE_GPU_I, gi), 50, true);
        assert_eq!(name.value, Payload::Text("3g.40gb".into()));
    }

    #[test]
    fn vanish_and_blank_faults() {
        let mut e = engine_with("vanish_gpu=0@1,blank_field=150", true);
        let s = e.read((ffi::DCGM_FE_GPU, 1), 150, true);
        assert_eq!(s.value, Payload::Int(ffi::DCGM_INT64_BLANK));
        e.begin_read(&[], &[]);
        e.end_read();
        assert_eq!(e.gpus().len(), 1);
        let s = e.read((ffi::DCGM_FE_GPU, 0), 155, true);
        assert_eq!(s.value, Payload::Double(ffi::DCGM_FP64_NOT_FOUND));
    }

    #[test]
    fn links_unpack_dcgm_link_t() {
        let e = engine_with("", true);
        // H100 default: 18 links; port 3 of GPU 1.
        let raw = ffi::DCGM_FE_GPU | (3 << 8) | (1 << 24);
        assert!(e.entity_exists((ffi::DCGM_FE_LINK, raw)));
        assert!(!e.entity_exists((ffi::DCGM_FE_LINK, ffi::DCGM_FE_GPU | (40 << 8))));
    }

    /// `FAKE_DCGM_STARTUP`: connections refused until the engine is up, profiling from the second
    /// connection, no GPU listed in the first window.
    #[test]
    fn startup_faults() {
        let mut e = engine_with("", true);
        e.cfg.startup = StartupFaults::parse(
            "hostengine_up_after_ms=60000,profiling_from_connect=2,gpus_after_ms=60000",
        )
        .unwrap();
        e.startup = StartupState::begun();
        assert_eq!(e.connect("x"), Err(ffi::DCGM_ST_CONNECTION_NOT_VALID));
        assert!(e.gpus().is_empty());
        assert_eq!(
            e.group_entities(ffi::DCGM_FE_GPU_I).unwrap(),
            Vec::<u32>::new()
        );
        // The embedded engine is not delayed by the remote one's window.
        e.start_embedded(ffi::DCGM_OPERATION_MODE_AUTO).unwrap();
        assert!(!e.profiling_loaded());
        e.start_embedded(ffi::DCGM_OPERATION_MODE_AUTO).unwrap();
        assert!(e.profiling_loaded());
        e.cfg.startup = StartupFaults::parse("embedded_fails_ms=60000").unwrap();
        assert_eq!(
            e.start_embedded(ffi::DCGM_OPERATION_MODE_AUTO),
            Err(ffi::DCGM_ST_NVML_NOT_LOADED)
        );
        assert_eq!(e.gpus().len(), 2);
    }
}
