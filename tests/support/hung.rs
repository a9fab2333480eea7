//! Peers that accept a connection and never answer — a kubelet, a Kubernetes API server or a container
//! runtime that hangs instead of failing: the listener accepts, holds every connection open, reads
//! nothing and writes nothing until it is dropped. Unlike a socket that is absent or refuses (an error
//! at once), only the exporter's own deadlines end such a call.

use std::net::TcpListener;
use std::os::unix::net::UnixListener;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::Arc;
use std::time::Duration;

/// A hung peer; stops accepting and closes what it holds on drop.
pub struct Hung {
    /// The TCP port (127.0.0.1) of [`Hung::tcp`].
    pub port: u16,
    path: Option<PathBuf>,
    accepted: Arc<AtomicU64>,
    stop: Arc<AtomicBool>,
}

impl Hung {
    /// A hung peer on the unix socket `path`.
    pub fn unix(path: &Path) -> Hung {
        let listener = UnixListener::bind(path).unwrap();
        listener.set_nonblocking(true).unwrap();
        let hung = Hung::new(0, Some(path.to_path_buf()));
        hung.hold(move || listener.accept().map(|(c, _)| Box::new(c) as Box<dyn Send>));
        hung
    }

    /// A hung peer on 127.0.0.1, on a port of its own ([`Hung::port`]).
    pub fn tcp() -> Hung {
        let listener = TcpListener::bind("127.0.0.1:0").unwrap();
        listener.set_nonblocking(true).unwrap();
        let hung = Hung::new(listener.local_addr().unwrap().port(), None);
        hung.hold(move || listener.accept().map(|(c, _)| Box::new(c) as Box<dyn Send>));
        hung
    }

    fn new(port: u16, path: Option<PathBuf>) -> Hung {
        Hung {
            port,
            path,
            accepted: Arc::new(AtomicU64::new(0)),
            stop: Arc::new(AtomicBool::new(false)),
        }
    }

    /// Accept with `accept` until dropped, keeping every connection.
    fn hold(&self, accept: impl Fn() -> std::io::Result<Box<dyn Send>> + Send + 'static) {
        let (accepted, stop) = (self.accepted.clone(), self.stop.clone());
        std::thread::spawn(move || {
            let mut held = Vec::new();
            while !stop.load(Ordering::Acquire) {
                match accept() {
                    Ok(conn) => {
                        held.push(conn);
                        accepted.fetch_add(1, Ordering::AcqRel);
                    }
                    Err(_) => std::thread::sleep(Duration::from_millis(10)),
                }
            }
        });
    }

    /// Connections accepted so far.
    pub fn accepted(&self) -> u64 {
        self.accepted.load(Ordering::Acquire)
    }
}

impl Drop for Hung {
    fn drop(&mut self) {
        self.stop.store(true, Ordering::Release);
        if let Some(p) = &self.path {
            let _ = std::fs::remove_file(p);
        }
    }
}
