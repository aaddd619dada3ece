//! A real secondary: Knot DNS (`knotd`, Debian package `knot`) in the
//! foreground with its configuration and storage in a temporary directory,
//! transferring zones from the server under test; killed when dropped.

use std::net::SocketAddr;
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use hickory_proto::rr::{RData, RecordType};
use tempfile::TempDir;

use super::client::query;
use super::server::free_port;

/// A running `knotd`, secondary of the zones it was started with.
pub struct Knot {
    /// Where it answers DNS.
    pub addr: SocketAddr,
    child: Child,
    dir: TempDir,
}

impl Knot {
    /// The address a Knot started later will listen on (for `--notify`).
    pub fn reserve() -> SocketAddr {
        free_port()
    }

    /// Starts `knotd` on `addr` as secondary of `zones` from `primary`,
    /// accepting NOTIFY from 127.0.0.1.
    pub fn start(addr: SocketAddr, primary: SocketAddr, zones: &[&str]) -> Self {
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
        let log = std::fs::File::create(dir.path().join("knotd.log")).expect("a log file");
        let child = Command::new("knotd")
            .arg("-c")
            .arg(&file)
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(log)
            .spawn()
            .expect("knotd runs (Debian package `knot`; .ci/run installs it)");
        Self { addr, child, dir }
    }

    /// Knot's log so far, for failure messages.
    pub fn log(&self) -> String {
        std::fs::read_to_string(self.dir.path().join("knotd.log")).unwrap_or_default()
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

impl Drop for Knot {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}
