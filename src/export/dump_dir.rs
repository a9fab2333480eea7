//! The `--dump-directory` as an open handle, so that the exporter (often root) can never be made to write
//! over, read or remove a file through a link someone else planted.
//!
//! - A missing directory is created with mode 0700. An existing one is used only when it is a directory
//!   itself (not a symbolic link), owned by the effective user and not writable by group or others:
//!   anyone else who can write in it could plant links or files there. The checks are made on the
//!   opened directory, and every later operation goes through that handle (`openat`, `renameat`,
//!   `unlinkat`, `fstatat` on it), never through the path again, so the directory cannot be swapped
//!   after the check.
//! - A file is made exclusively (`O_CREAT|O_EXCL|O_NOFOLLOW`, mode 0600) under a random temporary name,
//!   written, then renamed to its final name (a rename replaces a link, it never follows one).
//! - The sweep removes only names this module writes ([`is_own_name`]), and only regular files the
//!   effective user owns.

use std::io::Write;
use std::os::fd::OwnedFd;
use std::os::unix::fs::DirBuilderExt;
use std::path::Path;
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use rustix::fs::{AtFlags, FileType, Mode, OFlags};
use rustix::io::Errno;

/// The opened, checked dump directory.
pub struct DumpDir {
    fd: OwnedFd,
    euid: u32,
}

/// Mode bits that let the group or others change a directory's entries.
const SHARED_WRITE: u32 = 0o022;

impl DumpDir {
    /// Create (0700) or open and check the directory at `path`. The error is the reason, for one line.
    pub fn open(path: &Path) -> Result<DumpDir, String> {
        std::fs::DirBuilder::new()
            .recursive(true)
            .mode(0o700)
            .create(path)
            .map_err(|e| format!("cannot create it: {e}"))?;
        let flags = OFlags::RDONLY | OFlags::DIRECTORY | OFlags::NOFOLLOW | OFlags::CLOEXEC;
        let fd = rustix::fs::open(path, flags, Mode::empty()).map_err(|e| {
            let link = std::fs::symlink_metadata(path).is_ok_and(|m| m.file_type().is_symlink());
            match e {
                // O_NOFOLLOW with O_DIRECTORY answers ENOTDIR for a link (ELOOP on some systems).
                Errno::LOOP | Errno::NOTDIR if link => "it is a symbolic link; refused (give the directory it points to, if that is yours)".to_string(),
                Errno::NOTDIR => "not a directory".to_string(),
                e => format!("cannot open it: {}", std::io::Error::from(e)),
            }
        })?;
        let stat = rustix::fs::fstat(&fd).map_err(|e| format!("cannot stat it: {e}"))?;
        let euid = rustix::process::geteuid().as_raw();
        let owner = stat.st_uid;
        if owner != euid {
            return Err(format!(
                "owned by uid {owner}, not by this process's user (uid {euid}); refused: its owner could plant links or files in it"
            ));
        }
        let mode = stat.st_mode & 0o7777;
        if mode & SHARED_WRITE != 0 {
            return Err(format!(
                "writable by group or others (mode {mode:04o}); refused: they could plant links or files in it (chmod go-w, or give another directory)"
            ));
        }
        Ok(DumpDir { fd, euid })
    }

    /// Write `bytes` as `name`: a new 0600 file under a random temporary name, then renamed.
    pub fn put(&self, name: &str, bytes: &[u8]) -> std::io::Result<()> {
        let tmp = temporary_name()?;
        let written = self
            .create(&tmp)
            .and_then(|mut file| file.write_all(bytes))
            .and_then(|()| Ok(rustix::fs::renameat(&self.fd, &tmp, &self.fd, name)?));
        if written.is_err() {
            let _ = rustix::fs::unlinkat(&self.fd, &tmp, AtFlags::empty());
        }
        written
    }

    /// Whether files can be made here: one temporary file made and removed.
    pub fn probe(&self) -> std::io::Result<()> {
        let tmp = temporary_name()?;
        drop(self.create(&tmp)?);
        Ok(rustix::fs::unlinkat(&self.fd, &tmp, AtFlags::empty())?)
    }

    fn create(&self, name: &str) -> std::io::Result<std::fs::File> {
        let flags =
            OFlags::WRONLY | OFlags::CREATE | OFlags::EXCL | OFlags::NOFOLLOW | OFlags::CLOEXEC;
        let fd = rustix::fs::openat(&self.fd, name, flags, Mode::from_raw_mode(0o600))?;
        Ok(std::fs::File::from(fd))
    }

    /// Remove this module's files (by name, [`is_own_name`]) that are regular files of the effective
    /// user last modified more than `keep` ago. Returns the removals that failed.
    pub fn sweep(&self, keep: Duration) -> Vec<(String, std::io::Error)> {
        let mut failed = Vec::new();
        let entries = match rustix::fs::Dir::read_from(&self.fd) {
            Ok(d) => d,
            Err(e) => {
                failed.push((".".to_string(), e.into()));
                return failed;
            }
        };
        let now = SystemTime::now()
            .duration_since(UNIX_EPOCH)
            .map_or(0, |d| d.as_secs());
        let older_than = i64::try_from(now.saturating_sub(keep.as_secs())).unwrap_or(i64::MAX);
        for entry in entries.flatten() {
            let Ok(name) = entry.file_name().to_str() else {
                continue;
            };
            if !is_own_name(name) {
                continue;
            }
            let Ok(stat) = rustix::fs::statat(&self.fd, name, AtFlags::SYMLINK_NOFOLLOW) else {
                continue;
            };
            let regular = FileType::from_raw_mode(stat.st_mode) == FileType::RegularFile;
            #[allow(clippy::useless_conversion)] // c_long on 64-bit targets, i64 on others
            let modified = i64::from(stat.st_mtime);
            if regular && stat.st_uid == self.euid && modified < older_than {
                if let Err(e) = rustix::fs::unlinkat(&self.fd, name, AtFlags::empty()) {
                    failed.push((name.to_string(), e.into()));
                }
            }
        }
        failed
    }
}

/// Prefix and suffix of the temporary names.
const TMP_PREFIX: &str = ".dcgm-otel-";
const TMP_SUFFIX: &str = ".tmp";

/// `.dcgm-otel-<16 random hex digits>.tmp`: not guessable, so not plantable in advance.
fn temporary_name() -> std::io::Result<String> {
    let mut random = [0u8; 8];
    ring::rand::SecureRandom::fill(&ring::rand::SystemRandom::new(), &mut random)
        .map_err(|_| std::io::Error::other("no random bytes for a temporary name"))?;
    let hex: String = random.iter().map(|b| format!("{b:02x}")).collect();
    Ok(format!("{TMP_PREFIX}{hex}{TMP_SUFFIX}"))
}

/// Whether `name` is one this module writes: `metrics-YYYYMMDD-HHMMSS-<seq>.prom[.gz]`,
/// `inventory-YYYYMMDD-HHMMSS-<seq>.json[.gz]`, or a temporary name left by an interrupted write.
pub fn is_own_name(name: &str) -> bool {
    let digits = |s: &str, n: Option<usize>| {
        !s.is_empty() && n.is_none_or(|n| s.len() == n) && s.bytes().all(|b| b.is_ascii_digit())
    };
    let stamped = |rest: &str| {
        let mut parts = rest.splitn(3, '-');
        matches!(
            (parts.next(), parts.next(), parts.next()),
            (Some(d), Some(t), Some(seq)) if digits(d, Some(8)) && digits(t, Some(6)) && digits(seq, None)
        )
    };
    let body = |name: &str, ext: &str| {
        let base = name.strip_suffix(".gz").unwrap_or(name);
        base.strip_suffix(ext).is_some_and(stamped)
    };
    if let Some(rest) = name.strip_prefix("metrics-") {
        return body(rest, ".prom");
    }
    if let Some(rest) = name.strip_prefix("inventory-") {
        return body(rest, ".json");
    }
    name.strip_prefix(TMP_PREFIX)
        .and_then(|r| r.strip_suffix(TMP_SUFFIX))
        .is_some_and(|hex| hex.len() == 16 && hex.bytes().all(|b| b.is_ascii_hexdigit()))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn own_names_only() {
        for ok in [
            "metrics-20240229-123456-7.prom.gz",
            "metrics-20240229-123456-7.prom",
            "inventory-20240229-123456-12.json",
            "inventory-20240229-123456-12.json.gz",
            ".dcgm-otel-0123456789abcdef.tmp",
        ] {
            assert!(is_own_name(ok), "{ok}");
        }
        for other in [
            "notes.txt",
            "metrics.csv",
            "metrics-x.prom",
            "metrics-2024-1-1.prom",
            "metrics-20240229-123456-.prom",
            "metrics-20240229-123456-7.prom.tmp",
            ".metrics-20240229-123456-7.prom.tmp",
            "inventory-20240229-123456-7.prom",
            ".dcgm-otel-write-test",
            ".dcgm-otel-xyz.tmp",
        ] {
            assert!(!is_own_name(other), "{other}");
        }
    }

    #[test]
    fn temporary_names_differ() {
        let a = temporary_name().unwrap();
        assert!(is_own_name(&a), "{a}");
        assert_ne!(a, temporary_name().unwrap());
    }
}
