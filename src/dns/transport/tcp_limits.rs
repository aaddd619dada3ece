//! Bounds on DNS over TCP (RFC 7766 §6.2.3, §10): how many connections are
//! open in total and per client address (counted by `listen`), how many
//! responses may wait for a client that does not read, and how long a
//! connection may idle or stall.

use std::time::Duration;

use crate::plumbing::listen::Caps;

/// The TCP limits of a server.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct TcpLimits {
    /// Most open connections, in total and from one client address.
    pub caps: Caps,
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
            caps: Caps {
                total: 1024,
                per_client: 32,
            },
            max_pending: 16,
            idle_timeout: Duration::from_secs(10),
            write_timeout: Duration::from_secs(10),
        }
    }
}
