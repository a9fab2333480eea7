//! Hot reload of the counters CSV: deciding *when* the file the counters came from must be read again,
//! and reading it. The collector thread asks [`CountersReloader::due`] before every collection; the
//! answer is a freshly parsed [`CounterSet`] (with the watch groups resolved against it) or the error
//! that keeps the running set.
//!
//! Change detection polls the file's identity — device, inode, size and modification time of what the
//! path resolves to, symlinks followed — once per collection, instead of an inotify watch (the `notify`
//! crate and its dependencies). New fields can only show up in the next collection anyway, so polling
//! at collection time reacts exactly as fast as an event would, costs one `stat` per collection, needs
//! no thread, and sees every way a file gets replaced: an in-place write, a rename over it, and the
//! Kubernetes ConfigMap volume's swap of its `..data` symlink (the mounted `name.csv -> ..data/name.csv`
//! then resolves to a new inode), on any file system (inotify misses changes on NFS and FUSE mounts).
//!
//! SIGHUP asks for a reload whether the file changed or not. Reloads are at least 2 s apart (as
//! dcgm-exporter rate-limits them; a request inside that window is postponed, not dropped), and a
//! file modified less than 200 ms ago is left to settle until the next collection (dcgm-exporter's
//! debounce), so a writer that is not atomic is not read half-written. A file that fails to load is
//! reported once per version (its identity is remembered): the old set stays until a good one arrives.
//!
//! With `-m` the counters come from a ConfigMap instead of a file ([`super::configmap`]): a changed
//! `metrics` text seen by its watch is a change here, with the same rate limit (no settling: an API
//! object is never half-written).

use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant, SystemTime};

use super::configmap::ConfigMapFollower;
use super::watch_groups::{self, WatchGroupSpec};
use super::{load_file, parse, CounterSet};

/// Minimum time between two reloads.
pub const MIN_RELOAD_GAP: Duration = Duration::from_secs(2);
/// A file modified more recently than this is left to settle.
pub const SETTLE: Duration = Duration::from_millis(200);

/// What identifies one version of the file.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
struct Identity {
    dev: u64,
    ino: u64,
    len: u64,
    mtime: Option<SystemTime>,
}

fn identity(path: &Path) -> Option<Identity> {
    use std::os::unix::fs::MetadataExt;
    let m = std::fs::metadata(path).ok()?;
    Some(Identity {
        dev: m.dev(),
        ino: m.ino(),
        len: m.len(),
        mtime: m.modified().ok(),
    })
}

/// Why a reload was done.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Trigger {
    /// The file changed.
    FileChanged,
    /// The ConfigMap (`-m`) changed.
    ConfigMapChanged,
    /// SIGHUP.
    Signal,
}

/// Where the counters come from.
#[derive(Debug)]
enum Followed {
    File {
        path: PathBuf,
        identity: Option<Identity>,
    },
    ConfigMap {
        follower: ConfigMapFollower,
        /// A changed text waiting for the rate limit.
        pending: Option<String>,
    },
}

/// Watches the counters file (or `-m`'s ConfigMap) for the collector.
#[derive(Debug)]
pub struct CountersReloader {
    followed: Followed,
    watch_groups: Vec<WatchGroupSpec>,
    requested: Arc<AtomicBool>,
    last_reload: Option<Instant>,
}

impl CountersReloader {
    /// Follow `path` (the file the running counters came from); `watch_groups` are re-resolved against
    /// every new set.
    pub fn new(path: &Path, watch_groups: Vec<WatchGroupSpec>) -> CountersReloader {
        CountersReloader {
            followed: Followed::File {
                path: path.to_path_buf(),
                identity: identity(path),
            },
            watch_groups,
            requested: Arc::new(AtomicBool::new(false)),
            last_reload: None,
        }
    }

    /// Follow `-m`'s ConfigMap.
    pub fn for_configmap(
        follower: ConfigMapFollower,
        watch_groups: Vec<WatchGroupSpec>,
    ) -> CountersReloader {
        CountersReloader {
            followed: Followed::ConfigMap {
                follower,
                pending: None,
            },
            watch_groups,
            requested: Arc::new(AtomicBool::new(false)),
            last_reload: None,
        }
    }

    /// What is followed, for logs: the file's path or the ConfigMap.
    pub fn describe(&self) -> String {
        match &self.followed {
            Followed::File { path, .. } => path.display().to_string(),
            Followed::ConfigMap { follower, .. } => follower.origin(),
        }
    }

    /// The flag SIGHUP sets to ask for a reload.
    pub fn request_flag(&self) -> Arc<AtomicBool> {
        self.requested.clone()
    }

    /// Called before each collection: a newly loaded set when a reload is due (the file or the
    /// ConfigMap changed, or a reload was requested), with its trigger; `None` when nothing is due yet.
    pub fn due(&mut self, now: Instant) -> Option<(Trigger, Result<CounterSet, String>)> {
        let requested = self.requested.load(Ordering::Acquire);
        let too_soon = self
            .last_reload
            .is_some_and(|t| now.duration_since(t) < MIN_RELOAD_GAP);
        let (trigger, text) = match &mut self.followed {
            Followed::File {
                path,
                identity: known,
            } => {
                let current = identity(path);
                let changed = current != *known;
                if (!changed && !requested) || too_soon {
                    return None;
                }
                let settling = current
                    .and_then(|i| i.mtime)
                    .and_then(|m| SystemTime::now().duration_since(m).ok())
                    .is_some_and(|age| age < SETTLE);
                if changed && settling {
                    return None;
                }
                *known = current;
                let trigger = if changed {
                    Trigger::FileChanged
                } else {
                    Trigger::Signal
                };
                (trigger, None)
            }
            Followed::ConfigMap { follower, pending } => {
                if let Some(text) = follower.changed() {
                    *pending = Some(text);
                }
                if (pending.is_none() && !requested) || too_soon {
                    return None;
                }
                match pending.take() {
                    Some(text) => (Trigger::ConfigMapChanged, Some(text)),
                    None => (Trigger::Signal, Some(follower.current().to_string())),
                }
            }
        };
        self.requested.store(false, Ordering::Release);
        self.last_reload = Some(now);
        Some((trigger, self.load(text)))
    }

    fn load(&self, text: Option<String>) -> Result<CounterSet, String> {
        let mut set = match (&self.followed, text) {
            (Followed::ConfigMap { follower, .. }, Some(text)) => parse(&text, &follower.origin()),
            (Followed::ConfigMap { follower, .. }, None) => {
                parse(follower.current(), &follower.origin())
            }
            (Followed::File { path, .. }, _) => load_file(path),
        }
        .map_err(|e| e.to_string())?;
        set.watch_groups =
            watch_groups::resolve(&self.watch_groups, &set).map_err(|e| e.to_string())?;
        Ok(set)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn reloads_on_change_and_request_at_most_every_two_seconds() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("c.csv");
        std::fs::write(&path, "DCGM_FI_DEV_GPU_TEMP, gauge, t\n").unwrap();
        let mut r = CountersReloader::new(&path, Vec::new());
        let t0 = Instant::now();
        assert!(r.due(t0).is_none(), "unchanged");
        r.request_flag().store(true, Ordering::Release);
        let (trigger, set) = r.due(t0).unwrap();
        assert_eq!(trigger, Trigger::Signal);
        assert_eq!(set.unwrap().rows.len(), 1);
        // A change within 2 s waits; so does a file written a moment ago.
        std::fs::write(
            &path,
            "DCGM_FI_DEV_GPU_TEMP, gauge, t\nDCGM_FI_DEV_POWER_USAGE, gauge, p\n",
        )
        .unwrap();
        assert!(r.due(t0 + Duration::from_secs(1)).is_none());
        std::thread::sleep(SETTLE);
        let (trigger, set) = r.due(t0 + MIN_RELOAD_GAP).unwrap();
        assert_eq!(trigger, Trigger::FileChanged);
        assert_eq!(set.unwrap().rows.len(), 2);
        // A bad file is reported once.
        std::fs::write(&path, "DCGM_FI_NOPE, gauge, x\n").unwrap();
        std::thread::sleep(SETTLE);
        let (_, set) = r.due(t0 + MIN_RELOAD_GAP * 2).unwrap();
        assert_eq!(
            set.unwrap_err(),
            format!("{}:1:1: unknown DCGM field 'DCGM_FI_NOPE'", path.display())
        );
        assert!(r.due(t0 + MIN_RELOAD_GAP * 3).is_none());
    }
}
