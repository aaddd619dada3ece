//! A real secondary: Knot DNS (`knotd`, Debian package `knot`) in the
//! foreground with its configuration and storage in a temporary directory,
//! transferring zones from the server under test; killed when dropped.

use std::net::SocketAddr;
use std::time::{Duration, Instant};

use hickory_proto::rr::{RData, RecordType};
use tempfile::TempDir;
use test_support::{Daemon, free_port, program, query};

/// How long `knotd` may take to start answering.
const START: Duration = Duration::from_secs(10);

/// A running `knotd`, secondary of the zones it was started with.
pub struct Knot {
    /// Where it answers DNS.
    pub addr: SocketAddr,
    daemon: Daemon,
    _dir: TempDir,
}

impl Knot {
    /// The address a Knot started later will listen on (for `--notify`).
    pub fn reserve() -> SocketAddr {
        free_port()
    }

    /// Starts `knotd` on `addr` as secondary of `zones` from `primary`,
    /// accepting NOTIFY from 127.0.0.1, and waits until it answers.
    pub async fn start(addr: SocketAddr, primary: SocketAddr, zones: &[&str]) -> Self {
        let dir = tempfile::tempdir().expect("a temporary directory");
        let path = dir.path().display();
        let zones: String = zones.iter().map(|z| format!("  - domain: {z}\n")).collect();
        let config = format!(
            "server:\n  rundir: \"{path}\"\n  listen: {}@{}\n  udp-workers: 1\n  tcp-workers: 1\n  background-workers: 1\n\
             database:\n  storage: \"{path}\"\n\
             log:\n  - target: stderr\n    any: info\n\
             remote:\n  - id: primary\n    address: {}@{}\n\
             acl:\n  - id: notify\n    address: 127.0.0.1\n    action: notify\n\
             template:\n  - id: default\n    storage: \"{path}\"\n    zonefile-sync: -1\n    zonefile-load: none\n    journal-content: none\n    master: primary\n    acl: notify\n\
             zone:\n{zones}",
            addr.ip(),
            addr.port(),
            primary.ip(),
            primary.port(),
        );
        let file = dir.path().join("knot.conf");
        std::fs::write(&file, config).expect("knot.conf written");
        let mut daemon = Daemon::spawn("knotd", program("knotd").arg("-c").arg(&file), dir.path());
        daemon.wait_answering(addr, START).await;
        Self {
            addr,
            daemon,
            _dir: dir,
        }
    }

    /// Knot's log so far, for failure messages.
    pub fn log(&self) -> String {
        self.daemon.log()
    }

    /// Waits until Knot serves `zone` at `serial` (at most `limit`).
    pub async fn wait_serial(&self, zone: &str, serial: u32, limit: Duration) -> Duration {
        let started = Instant::now();
        while started.elapsed() < limit {
            let response = query(self.addr, zone, RecordType::SOA).await;
            let served = response.answers.iter().find_map(|r| match &r.data {
                RData::SOA(soa) => Some(soa.serial),
                _ => None,
            });
            if served == Some(serial) {
                return started.elapsed();
            }
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
        panic!(
            "Knot did not serve {zone} at serial {serial} within {limit:?}:\n{}",
            self.log()
        );
    }
}
