//! Bounds on DNS over TCP (RFC 7766 §6.2.3, §10): how many connections are
//! open in total and per client address, how many responses may wait for a
//! client that does not read, and how long a connection may idle or stall.

use std::collections::HashMap;
use std::net::IpAddr;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use nix::sys::resource::{Resource, getrlimit, setrlimit};
use tracing::warn;

/// Descriptors the server needs besides TCP connections (sockets, watched
/// files, API connections).
const OTHER_FILES: u64 = 256;

/// The TCP limits of a server.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct TcpLimits {
    /// Most open connections.
    pub max_connections: usize,
    /// Most open connections from one client address.
    pub max_per_client: usize,
    /// Most responses waiting to be written on one connection; the
    /// connection is not read while this many wait.
    pub max_pending: usize,
    /// A connection with no query for this long is closed.
    pub idle_timeout: Duration,
    /// A connection whose client takes no response for this long is closed.
    pub write_timeout: Duration,
}

impl Default for TcpLimits {
    fn default() -> Self {
        Self {
            max_connections: 1024,
            max_per_client: 32,
            max_pending: 16,
            idle_timeout: Duration::from_secs(10),
            write_timeout: Duration::from_secs(10),
        }
    }
}

/// Which limit refused a connection (the metric label).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Refused {
    /// `max_connections`.
    Total,
    /// `max_per_client`.
    Client,
}

impl Refused {
    /// The metric label.
    pub fn label(self) -> &'static str {
        match self {
            Self::Total => "total",
            Self::Client => "client",
        }
    }
}

/// Counts open connections against the limits.
#[derive(Debug)]
pub struct Connections {
    limits: TcpLimits,
    open: Mutex<Open>,
}

#[derive(Debug, Default)]
struct Open {
    total: usize,
    by_client: HashMap<IpAddr, usize>,
}

/// One admitted connection; dropping it frees its place.
#[derive(Debug)]
pub struct Slot {
    connections: Arc<Connections>,
    client: IpAddr,
}

impl Connections {
    /// No connection open yet.
    pub fn new(limits: TcpLimits) -> Arc<Self> {
        Arc::new(Self {
            limits,
            open: Mutex::default(),
        })
    }

    /// The limits counted against.
    pub fn limits(&self) -> &TcpLimits {
        &self.limits
    }

    /// A place for a new connection from `client`, unless a limit is reached.
    pub fn admit(self: &Arc<Self>, client: IpAddr) -> Result<Slot, Refused> {
        let mut open = self.lock();
        if open.total >= self.limits.max_connections {
            return Err(Refused::Total);
        }
        let count = open.by_client.entry(client).or_insert(0);
        if *count >= self.limits.max_per_client {
            return Err(Refused::Client);
        }
        *count += 1;
        open.total += 1;
        Ok(Slot {
            connections: self.clone(),
            client,
        })
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, Open> {
        self.open.lock().unwrap_or_else(|e| e.into_inner())
    }
}

impl Drop for Slot {
    fn drop(&mut self) {
        let mut open = self.connections.lock();
        open.total -= 1;
        if let Some(count) = open.by_client.get_mut(&self.client) {
            *count -= 1;
            if *count == 0 {
                open.by_client.remove(&self.client);
            }
        }
    }
}

/// Raises the soft limit on open files to the hard one, so that
/// `max_connections` connections fit before `accept` fails with EMFILE and
/// shuts every client out; warns when even the hard limit is too low.
pub fn raise_open_file_limit(max_connections: usize) {
    let Ok((soft, hard)) = getrlimit(Resource::RLIMIT_NOFILE) else {
        return;
    };
    let limit = if soft < hard && setrlimit(Resource::RLIMIT_NOFILE, hard, hard).is_ok() {
        hard
    } else {
        soft
    };
    let needed = u64::try_from(max_connections)
        .unwrap_or(u64::MAX)
        .saturating_add(OTHER_FILES);
    if limit < needed {
        warn!(
            limit,
            needed,
            "the open-file limit is below --tcp-max-connections plus the server's own files"
        );
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// RFC 7766 §6.2.3: total and per-client limits; a closed connection
    /// frees its place (and an idle client's entry goes away).
    #[test]
    fn limits_total_and_per_client() {
        let connections = Connections::new(TcpLimits {
            max_connections: 3,
            max_per_client: 2,
            ..TcpLimits::default()
        });
        let a: IpAddr = "192.0.2.1".parse().unwrap();
        let b: IpAddr = "192.0.2.2".parse().unwrap();
        let first = connections.admit(a).unwrap();
        let _second = connections.admit(a).unwrap();
        assert_eq!(connections.admit(a).unwrap_err(), Refused::Client);
        let _third = connections.admit(b).unwrap();
        assert_eq!(connections.admit(b).unwrap_err(), Refused::Total);
        drop(first);
        let _fourth = connections.admit(b).unwrap();
        assert_eq!(connections.admit(a).unwrap_err(), Refused::Total);
        drop((_second, _third, _fourth));
        assert_eq!(connections.lock().total, 0);
        assert!(connections.lock().by_client.is_empty());
    }

    /// The soft open-file limit is raised to the hard one, so that the
    /// connection limit, not EMFILE, decides who is refused.
    #[test]
    fn the_open_file_limit_is_raised() {
        let (_, hard) = getrlimit(Resource::RLIMIT_NOFILE).unwrap();
        setrlimit(Resource::RLIMIT_NOFILE, hard / 2, hard).unwrap();
        raise_open_file_limit(16);
        assert_eq!(getrlimit(Resource::RLIMIT_NOFILE).unwrap(), (hard, hard));
    }
}
