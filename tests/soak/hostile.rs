//! The soak's hostile clients (issue 35), from loopback addresses of their own (127.0.0.2-5 and
//! 127.0.0.6; the scrapers and probes use 127.0.0.1): hit-and-run wrong passwords (send a request with a
//! wrong password, hang up without reading the answer) and an idle-connection flood (64 connections from
//! one address that never send a byte, each reopened when the exporter closes it). The verdict requires
//! the authenticated scrapes and the probes beside them to stay 200.

use std::io::Write;
use std::net::{SocketAddr, TcpStream};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::Arc;
use std::thread::JoinHandle;
use std::time::Duration;

/// Hit-and-run clients, each sending this many wrong passwords a second.
pub const WRONG_CLIENTS: u8 = 4;
pub const WRONG_PER_S: u64 = 5;
/// Idle connections held open from one address (twice the exporter's per-client cap).
pub const IDLE: usize = 64;

/// What the hostile clients did.
#[derive(Default)]
pub struct HostileStats {
    pub wrong_sent: AtomicU64,
    pub idle_opened: AtomicU64,
}

pub struct Hostile {
    stop: Arc<AtomicBool>,
    threads: Vec<JoinHandle<()>>,
    pub stats: Arc<HostileStats>,
}

/// A connection to the exporter from `source`.
pub fn connect_from(source: [u8; 4], port: u16) -> std::io::Result<TcpStream> {
    let s = socket2::Socket::new(socket2::Domain::IPV4, socket2::Type::STREAM, None)?;
    s.bind(&SocketAddr::from((source, 0)).into())?;
    s.connect_timeout(
        &SocketAddr::from(([127, 0, 0, 1], port)).into(),
        Duration::from_secs(2),
    )?;
    Ok(s.into())
}

impl Hostile {
    pub fn start(port: u16) -> Hostile {
        let stop = Arc::new(AtomicBool::new(false));
        let stats = Arc::new(HostileStats::default());
        let mut threads = Vec::new();
        for c in 0..WRONG_CLIENTS {
            let (stop, stats) = (stop.clone(), stats.clone());
            threads.push(std::thread::spawn(move || {
                let mut i = 0u64;
                while !stop.load(Ordering::Relaxed) {
                    if let Ok(mut s) = connect_from([127, 0, 0, 2 + c], port) {
                        let wrong = base64::Engine::encode(
                            &base64::engine::general_purpose::STANDARD,
                            format!("soak:wrong-{c}-{i}"),
                        );
                        let _ = write!(
                            s,
                            "GET /metrics HTTP/1.1\r\nHost: hostile\r\nAuthorization: Basic {wrong}\r\n\r\n"
                        );
                        stats.wrong_sent.fetch_add(1, Ordering::Relaxed);
                        // Long enough for the exporter to take the request up, then gone.
                        std::thread::sleep(Duration::from_millis(20));
                    }
                    i += 1;
                    std::thread::sleep(Duration::from_millis(1000 / WRONG_PER_S));
                }
            }));
        }
        {
            let (stop, stats) = (stop.clone(), stats.clone());
            threads.push(std::thread::spawn(move || {
                let mut idle: Vec<Option<TcpStream>> = (0..IDLE).map(|_| None).collect();
                while !stop.load(Ordering::Relaxed) {
                    for slot in &mut idle {
                        // A connection the exporter closed (or refused) reads EOF: open it again.
                        let closed = slot.as_ref().is_none_or(|c| {
                            let _ = c.set_nonblocking(true);
                            let mut b = [0u8; 1];
                            !matches!(std::io::Read::read(&mut &*c, &mut b),
                                Err(e) if e.kind() == std::io::ErrorKind::WouldBlock)
                        });
                        if closed {
                            *slot = connect_from([127, 0, 0, 6], port).ok();
                            if slot.is_some() {
                                stats.idle_opened.fetch_add(1, Ordering::Relaxed);
                            }
                        }
                    }
                    std::thread::sleep(Duration::from_secs(1));
                }
            }));
        }
        Hostile {
            stop,
            threads,
            stats,
        }
    }

    pub fn stop(self) -> Arc<HostileStats> {
        self.stop.store(true, Ordering::Relaxed);
        for t in self.threads {
            let _ = t.join();
        }
        self.stats
    }
}
