//! Reading a local file that someone else may have prepared: the counters CSV, the web config and the
//! certificate files it names, `--config-file` (paths an administrator gives) and the HPC job files (files
//! a batch scheduler's prolog writes into a directory). Each is opened non-blocking, so a FIFO or a
//! device node never stalls the thread that reads it (the collector, a reload, start-up); only a regular
//! file is read; and at most a stated size, so `/dev/zero` or a runaway file cannot grow memory.
//!
//! Symbolic links: an administrator's own path may be one and is followed ([`Links::Follow`]: Kubernetes
//! mounts every ConfigMap and Secret file through links, and a counters file swapped by a link rename is
//! a documented way to change the counters). A file found in a directory that other programs write is
//! opened without following a link in its last component ([`Links::Refuse`]): a link planted there
//! cannot make the exporter read a file its writer could not.

use std::io::Read;
use std::os::unix::fs::{FileTypeExt, OpenOptionsExt};
use std::path::Path;

use rustix::fs::OFlags;

/// Whether a symbolic link as the file's last path component is followed.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Links {
    Follow,
    Refuse,
}

/// Largest administrator's configuration file read (counters CSV, web config, certificates, config file).
pub const MAX_CONFIG_BYTES: u64 = 1024 * 1024;

/// Why a local file was not read. `Io`'s text is the system's alone, so callers keep their own
/// "cannot read ..." wording.
#[derive(Debug, thiserror::Error)]
pub enum LocalFileError {
    #[error("{0}")]
    Io(std::io::Error),
    #[error("not a regular file (it is a {0}); only regular files are read")]
    NotRegular(&'static str),
    #[error("a symbolic link, which is not followed here")]
    Symlink,
    #[error("larger than {limit} bytes; refused")]
    TooLarge { limit: u64 },
    #[error("not UTF-8 text")]
    NotText,
}

/// What kind of file `t` is, for the error.
fn kind(t: std::fs::FileType) -> &'static str {
    if t.is_dir() {
        "directory"
    } else if t.is_fifo() {
        "FIFO"
    } else if t.is_char_device() {
        "character device"
    } else if t.is_block_device() {
        "block device"
    } else if t.is_socket() {
        "socket"
    } else {
        "special file"
    }
}

/// Read the regular file at `path`, at most `limit` bytes.
pub fn read(path: &Path, limit: u64, links: Links) -> Result<Vec<u8>, LocalFileError> {
    let mut flags = OFlags::NONBLOCK | OFlags::NOCTTY;
    if links == Links::Refuse {
        flags |= OFlags::NOFOLLOW;
    }
    let file = std::fs::OpenOptions::new()
        .read(true)
        // The flags are small positive bit masks; the cast keeps their bits.
        .custom_flags(flags.bits() as i32)
        .open(path)
        .map_err(|e| {
            if links == Links::Refuse
                && e.raw_os_error() == Some(rustix::io::Errno::LOOP.raw_os_error())
            {
                LocalFileError::Symlink
            } else {
                LocalFileError::Io(e)
            }
        })?;
    let meta = file.metadata().map_err(LocalFileError::Io)?;
    if !meta.file_type().is_file() {
        return Err(LocalFileError::NotRegular(kind(meta.file_type())));
    }
    if meta.len() > limit {
        return Err(LocalFileError::TooLarge { limit });
    }
    let mut bytes = Vec::with_capacity(usize::try_from(meta.len()).unwrap_or(0));
    // A file that grows while it is read still stops at the limit (one byte more tells it grew past).
    file.take(limit.saturating_add(1))
        .read_to_end(&mut bytes)
        .map_err(LocalFileError::Io)?;
    if bytes.len() as u64 > limit {
        return Err(LocalFileError::TooLarge { limit });
    }
    Ok(bytes)
}

/// [`read`], as UTF-8 text.
pub fn read_text(path: &Path, limit: u64, links: Links) -> Result<String, LocalFileError> {
    String::from_utf8(read(path, limit, links)?).map_err(|_| LocalFileError::NotText)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn regular_files_within_the_limit_only() {
        let dir = tempfile::tempdir().unwrap();
        let file = dir.path().join("f");
        std::fs::write(&file, b"12345").unwrap();
        assert_eq!(read(&file, 5, Links::Refuse).unwrap(), b"12345");
        assert!(matches!(
            read(&file, 4, Links::Follow),
            Err(LocalFileError::TooLarge { limit: 4 })
        ));
        let link = dir.path().join("l");
        std::os::unix::fs::symlink(&file, &link).unwrap();
        assert_eq!(read(&link, 5, Links::Follow).unwrap(), b"12345");
        assert!(matches!(
            read(&link, 5, Links::Refuse),
            Err(LocalFileError::Symlink)
        ));
        assert!(matches!(
            read(dir.path(), 5, Links::Follow),
            Err(LocalFileError::NotRegular("directory"))
        ));
        // A device that never ends and a FIFO nobody writes: refused at once, nothing read.
        assert!(matches!(
            read(Path::new("/dev/zero"), 5, Links::Follow),
            Err(LocalFileError::NotRegular("character device"))
        ));
        let fifo = dir.path().join("fifo");
        rustix::fs::mknodat(
            rustix::fs::CWD,
            &fifo,
            rustix::fs::FileType::Fifo,
            rustix::fs::Mode::from_raw_mode(0o600),
            0,
        )
        .unwrap();
        assert!(matches!(
            read(&fifo, 5, Links::Follow),
            Err(LocalFileError::NotRegular("FIFO"))
        ));
        std::fs::write(&file, [0xff, 0xfe]).unwrap();
        assert!(matches!(
            read_text(&file, 5, Links::Follow),
            Err(LocalFileError::NotText)
        ));
    }
}
