//! Open connections per client address (`--web-max-client-connections`): one client that opens
//! connections and leaves them idle (each lives until `--web-read-timeout`, and is opened again) would
//! otherwise take every one of `--web-max-connections` and lock out Prometheus and the kubelet's
//! probes. A client is its IP address (an IPv4-mapped IPv6 address counts as the IPv4 one). The map
//! holds only addresses with a connection open, so it never outgrows `--web-max-connections`.

use std::collections::HashMap;
use std::net::IpAddr;
use std::sync::{Arc, Mutex};

use crate::lock::LockExt;

/// The count of open connections per client address.
pub struct ClientConnections {
    max: usize,
    open: Mutex<HashMap<IpAddr, usize>>,
}

/// One open connection of a client; its count goes down when this is dropped.
pub struct ClientSlot {
    owner: Arc<ClientConnections>,
    ip: IpAddr,
}

impl ClientConnections {
    pub fn new(max: usize) -> Arc<ClientConnections> {
        Arc::new(ClientConnections {
            max: max.max(1),
            open: Mutex::new(HashMap::new()),
        })
    }

    /// A slot for one more connection of `ip`, or `None` when it has `max` open already.
    pub fn try_open(self: &Arc<Self>, ip: IpAddr) -> Option<ClientSlot> {
        let ip = ip.to_canonical();
        let mut open = self.open.lock_unpoisoned();
        let count = open.entry(ip).or_insert(0);
        if *count >= self.max {
            return None;
        }
        *count += 1;
        Some(ClientSlot {
            owner: self.clone(),
            ip,
        })
    }

    /// Connections open by `ip` now.
    pub fn open_by(&self, ip: IpAddr) -> usize {
        let open = self.open.lock_unpoisoned();
        open.get(&ip.to_canonical()).copied().unwrap_or(0)
    }
}

impl Drop for ClientSlot {
    fn drop(&mut self) {
        let mut open = self.owner.open.lock_unpoisoned();
        if let Some(count) = open.get_mut(&self.ip) {
            *count = count.saturating_sub(1);
            if *count == 0 {
                open.remove(&self.ip);
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn each_client_has_its_own_cap() {
        let clients = ClientConnections::new(2);
        let a: IpAddr = "10.0.0.1".parse().unwrap();
        let mapped: IpAddr = "::ffff:10.0.0.1".parse().unwrap();
        let b: IpAddr = "10.0.0.2".parse().unwrap();
        let first = clients.try_open(a).unwrap();
        let second = clients.try_open(mapped).unwrap();
        assert!(clients.try_open(a).is_none());
        let other = clients.try_open(b).unwrap();
        drop(first);
        assert_eq!(clients.open_by(a), 1);
        let again = clients.try_open(a).unwrap();
        drop((second, again, other));
        assert_eq!(clients.open_by(a), 0);
        assert!(clients.open.lock_unpoisoned().is_empty());
    }
}
