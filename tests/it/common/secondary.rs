//! A real secondary: Knot DNS (`knotd`, Debian package `knot`) in the
//! foreground with its configuration and storage in a temporary directory,
//! transferring zones from the server under test; killed when dropped.

use std::net::SocketAddr;
use std::time::{Duration, Instant};

use hickory_proto::rr::{RData, RecordType};
use tempfile::TempDir;
use test_support::{
    Clusterset, Daemon, cluster_ip, eventually, free_port, is_vip, program, query, resolve, svc,
};

/// How long `knotd` may take to start answering.
const START: Duration = Duration::from_secs(10);

/// A TSIG key as Knot's `key:` section and `dig -y` name it.
pub struct TsigKeySpec {
    /// The key's name (a domain name).
    pub name: String,
    /// `hmac-sha256`, ...
    pub algorithm: String,
    /// The secret, base64.
    pub secret: String,
}

impl TsigKeySpec {
    /// The key in the syntax of BIND's `tsig-keygen` (clusterset-dns's `--tsig-key` file).
    pub fn bind_syntax(&self) -> String {
        format!(
            "key \"{}\" {{\n\talgorithm {};\n\tsecret \"{}\";\n}};\n",
            self.name, self.algorithm, self.secret
        )
    }

    /// The key as `dig -y` and `kdig -y` take it: `algorithm:name:secret`.
    pub fn dig_y(&self) -> String {
        format!("{}:{}:{}", self.algorithm, self.name, self.secret)
    }
}

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
        Self::start_signed(addr, primary, zones, None).await
    }

    /// [`Knot::start`] with a TSIG key (RFC 8945): its SOA checks and
    /// transfers are signed with it, and only NOTIFYs signed with it are
    /// accepted.
    pub async fn start_signed(
        addr: SocketAddr,
        primary: SocketAddr,
        zones: &[&str],
        key: Option<&TsigKeySpec>,
    ) -> Self {
        let dir = tempfile::tempdir().expect("a temporary directory");
        let path = dir.path().display();
        let zones: String = zones.iter().map(|z| format!("  - domain: {z}\n")).collect();
        let (keys, uses) = match key {
            Some(k) => (
                format!(
                    "key:\n  - id: {}\n    algorithm: {}\n    secret: {}\n",
                    k.name, k.algorithm, k.secret
                ),
                format!("    key: {}\n", k.name),
            ),
            None => (String::new(), String::new()),
        };
        let config = format!(
            "server:\n  rundir: \"{path}\"\n  listen: {}@{}\n  udp-workers: 1\n  tcp-workers: 1\n  background-workers: 1\n\
             database:\n  storage: \"{path}\"\n\
             log:\n  - target: stderr\n    any: info\n\
             {keys}\
             remote:\n  - id: primary\n    address: {}@{}\n{uses}\
             acl:\n  - id: notify\n    address: 127.0.0.1\n    action: notify\n{uses}\
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

    /// Exports a new service (`cart.shop`, east) in `cs` and waits until
    /// `primary` answers its VIP, then until Knot answers as the primary
    /// (RFC 1996: the NOTIFY, then the transfer it triggers; at most 10 s).
    /// Returns the times from the edit to each.
    pub async fn follows_an_edit(
        &self,
        cs: &Clusterset,
        primary: SocketAddr,
    ) -> (Duration, Duration) {
        let edited = Instant::now();
        cs.write(
            "east",
            "cart.yaml",
            &cluster_ip("shop", "cart", &["10.96.0.40"]).exported(),
        );
        let cart = svc("cart.shop");
        eventually("cart on the primary", true, || async {
            is_vip(&resolve(primary, &cart, RecordType::A).await)
        })
        .await;
        let on_primary = edited.elapsed();
        let deadline = Duration::from_secs(10);
        while resolve(self.addr, &cart, RecordType::A).await
            != resolve(primary, &cart, RecordType::A).await
        {
            assert!(
                edited.elapsed() < deadline,
                "Knot did not follow within {deadline:?}:\n{}",
                self.log()
            );
            tokio::time::sleep(Duration::from_millis(10)).await;
        }
        (on_primary, edited.elapsed())
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
