//! Socket activation (`--web-systemd-socket`): the listening sockets that systemd, or
//! `systemd-socket-activate`, passed to this process, taken as sd_listen_fds(3) describes them —
//! `LISTEN_PID` names this process and `LISTEN_FDS` counts descriptors from 3 on. Each must be an open,
//! listening TCP stream socket; anything else is one [`ActivationError`] line at start-up (exit 2).
//!
//! This is the one module outside the FFI bindings with `unsafe`: taking ownership of an inherited
//! descriptor number has no safe form in std (`OwnedFd::from_raw_fd`). The checks before it (the
//! protocol's variables, then `/proc/self/fd` showing an open socket) are what make that sound.
#![allow(unsafe_code)]

use std::net::TcpListener;
use std::os::fd::{FromRawFd, OwnedFd, RawFd};
use std::path::Path;

/// The first descriptor passed (`SD_LISTEN_FDS_START`).
pub const LISTEN_FDS_START: RawFd = 3;
/// More passed sockets than this is taken for a broken environment, not a configuration.
pub const MAX_LISTEN_FDS: u32 = 64;

/// Why the passed sockets cannot be used. Displayed after `--web-systemd-socket: `.
#[derive(Debug, thiserror::Error, PartialEq, Eq)]
pub enum ActivationError {
    #[error("no socket was passed (LISTEN_PID and LISTEN_FDS are not set): start dcgm-otel from a socket unit such as dcgm-otel.socket, or drop the flag")]
    NotActivated,
    #[error("LISTEN_PID '{0}' is not a process id")]
    BadPid(String),
    #[error("LISTEN_PID is {passed_to} but this process is {own}: the sockets were passed to another process")]
    OtherProcess { passed_to: u32, own: u32 },
    #[error("LISTEN_FDS '{0}' is not a count of descriptors in 1..={MAX_LISTEN_FDS}")]
    BadCount(String),
    #[error("descriptor {fd} (LISTEN_FDS={count}) is not open")]
    NotOpen { fd: RawFd, count: u32 },
    #[error("descriptor {fd} (LISTEN_FDS={count}) is not a socket but {target}")]
    NotSocket {
        fd: RawFd,
        count: u32,
        target: String,
    },
    #[error("descriptor {fd} (LISTEN_FDS={count}) is {what}; dcgm-otel serves HTTP on a listening TCP socket (ListenStream=9400 in the .socket unit)")]
    NotTcpListener {
        fd: RawFd,
        count: u32,
        what: &'static str,
    },
    #[error("descriptor {fd} (LISTEN_FDS={count}): {message}")]
    Io {
        fd: RawFd,
        count: u32,
        message: String,
    },
}

/// The descriptors the environment says were passed to process `own_pid`: `LISTEN_FDS_START..` and
/// their count.
pub fn passed_descriptors(
    listen_pid: Option<&str>,
    listen_fds: Option<&str>,
    own_pid: u32,
) -> Result<(std::ops::Range<RawFd>, u32), ActivationError> {
    if listen_pid.is_none() && listen_fds.is_none() {
        return Err(ActivationError::NotActivated);
    }
    let pid_text = listen_pid.unwrap_or("");
    let passed_to: u32 = pid_text
        .trim()
        .parse()
        .map_err(|_| ActivationError::BadPid(pid_text.to_string()))?;
    if passed_to != own_pid {
        return Err(ActivationError::OtherProcess {
            passed_to,
            own: own_pid,
        });
    }
    let count_text = listen_fds.unwrap_or("");
    let count: u32 = count_text
        .trim()
        .parse()
        .ok()
        .filter(|n| (1..=MAX_LISTEN_FDS).contains(n))
        .ok_or_else(|| ActivationError::BadCount(count_text.to_string()))?;
    // MAX_LISTEN_FDS keeps the sum far from RawFd's range.
    let end = LISTEN_FDS_START + count as RawFd;
    Ok((LISTEN_FDS_START..end, count))
}

/// Take the sockets passed to this process, in descriptor order. Call once, at start-up, before
/// anything else could claim descriptor numbers from 3 on.
pub fn listeners_from_env() -> Result<Vec<TcpListener>, ActivationError> {
    let pid = std::env::var("LISTEN_PID").ok();
    let fds = std::env::var("LISTEN_FDS").ok();
    let (range, count) = passed_descriptors(pid.as_deref(), fds.as_deref(), std::process::id())?;
    range.map(|fd| adopt(fd, count)).collect()
}

/// Check that `fd` is an open socket (through `/proc/self/fd`, which needs no ownership), take it, and
/// check that it is a listening TCP stream socket.
fn adopt(fd: RawFd, count: u32) -> Result<TcpListener, ActivationError> {
    let link = Path::new("/proc/self/fd").join(fd.to_string());
    let target = match std::fs::read_link(&link) {
        Ok(t) => t.to_string_lossy().into_owned(),
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => {
            return Err(ActivationError::NotOpen { fd, count })
        }
        Err(e) => {
            return Err(ActivationError::Io {
                fd,
                count,
                message: format!("cannot inspect {}: {e}", link.display()),
            })
        }
    };
    if !target.starts_with("socket:") {
        return Err(ActivationError::NotSocket { fd, count, target });
    }
    // SAFETY: LISTEN_PID names this process, so by the socket-activation protocol descriptors
    // 3..3+LISTEN_FDS were open when it was executed and are handed to it to own; `passed_descriptors`
    // yields each number once and start-up calls this once, before it opens anything itself, and
    // /proc/self/fd just showed this one open as a socket. The OwnedFd is therefore the only owner of
    // an open descriptor, as `from_raw_fd` requires.
    let owned = unsafe { OwnedFd::from_raw_fd(fd) };
    let socket = socket2::Socket::from(owned);
    let io = |e: std::io::Error| ActivationError::Io {
        fd,
        count,
        message: e.to_string(),
    };
    let not_tcp = |what| ActivationError::NotTcpListener { fd, count, what };
    let domain = socket.domain().map_err(io)?;
    if domain != socket2::Domain::IPV4 && domain != socket2::Domain::IPV6 {
        return Err(not_tcp(if domain == socket2::Domain::UNIX {
            "a unix socket"
        } else {
            "not an IP socket"
        }));
    }
    if socket.r#type().map_err(io)? != socket2::Type::STREAM {
        return Err(not_tcp("not a stream socket (ListenDatagram?)"));
    }
    if !socket.is_listener().map_err(io)? {
        return Err(not_tcp("a TCP socket that is not listening (Accept=yes?)"));
    }
    socket.set_cloexec(true).map_err(io)?;
    Ok(TcpListener::from(socket))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn environment_of_the_protocol() {
        assert_eq!(passed_descriptors(Some("42"), Some("1"), 42), Ok((3..4, 1)));
        assert_eq!(passed_descriptors(Some("42"), Some("2"), 42), Ok((3..5, 2)));
        assert_eq!(
            passed_descriptors(None, None, 42),
            Err(ActivationError::NotActivated)
        );
        assert_eq!(
            passed_descriptors(Some("41"), Some("1"), 42),
            Err(ActivationError::OtherProcess {
                passed_to: 41,
                own: 42
            })
        );
        assert_eq!(
            passed_descriptors(None, Some("1"), 42),
            Err(ActivationError::BadPid(String::new()))
        );
        assert_eq!(
            passed_descriptors(Some("x"), Some("1"), 42),
            Err(ActivationError::BadPid("x".into()))
        );
        for bad in ["0", "-1", "65", "two", ""] {
            assert_eq!(
                passed_descriptors(Some("42"), Some(bad), 42),
                Err(ActivationError::BadCount(bad.into())),
                "{bad}"
            );
        }
        assert_eq!(
            passed_descriptors(Some("42"), None, 42),
            Err(ActivationError::BadCount(String::new()))
        );
    }
}
