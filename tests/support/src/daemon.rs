//! Other DNS software run by the tests (resolvers, CoreDNS, Knot): where it
//! is installed, a process that is killed with the test and shows its log
//! when the test fails, waiting until it answers, and skipping when it is
//! missing.

use std::fs;
use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use hickory_proto::rr::RecordType;
use tokio::net::TcpStream;

use crate::client::{question, udp_raw};

/// A process killed (and reaped) when dropped; its output goes to a log
/// file, shown when the test fails.
pub struct Daemon {
    name: &'static str,
    child: Child,
    log: PathBuf,
}

impl Daemon {
    /// Starts `command` with its output in `dir/<name>.log`.
    pub fn spawn(name: &'static str, command: &mut Command, dir: &Path) -> Self {
        let log = dir.join(format!("{name}.log"));
        let file = fs::File::create(&log).expect("a log file");
        let child = command
            .stdin(Stdio::null())
            .stdout(file.try_clone().expect("log file handle"))
            .stderr(file)
            .spawn()
            .unwrap_or_else(|e| panic!("cannot start {name}: {e}"));
        Self { name, child, log }
    }

    /// Whether the process has exited (it is reaped then).
    fn exited(&mut self) -> bool {
        self.child.try_wait().expect("child status").is_some()
    }

    /// What it has logged so far.
    pub fn log(&self) -> String {
        fs::read_to_string(&self.log).unwrap_or_default()
    }

    /// Polls until it answers a DNS query (any answer) over UDP at `addr`
    /// and accepts TCP there, at most `limit`; panics (the log is shown as
    /// it is dropped) when it exits first (a port it cannot bind, a
    /// configuration it rejects) or does not answer in time.
    pub async fn wait_answering(&mut self, addr: SocketAddr, limit: Duration) {
        let probe = question("clusterset.local.", RecordType::SOA)
            .to_vec()
            .expect("probe encodes");
        let deadline = Instant::now() + limit;
        loop {
            assert!(
                !self.exited(),
                "{} exited before answering on {addr} (its log follows)",
                self.name
            );
            if udp_raw(addr, &probe, Duration::from_millis(200))
                .await
                .is_some()
                && TcpStream::connect(addr).await.is_ok()
            {
                return;
            }
            assert!(
                Instant::now() < deadline,
                "{} did not answer on {addr} within {limit:?} (its log follows)",
                self.name
            );
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
    }
}

impl Drop for Daemon {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
        if std::thread::panicking() {
            let log = self.log();
            let tail: Vec<&str> = log.lines().rev().take(30).collect();
            eprintln!("--- last lines of {} ---", self.name);
            for line in tail.iter().rev() {
                eprintln!("{line}");
            }
        }
    }
}

/// Where `program` is installed: PATH, or an sbin directory (daemons live
/// there, and a non-root PATH may lack it).
pub fn installed(program: &str) -> Option<PathBuf> {
    let dirs = std::env::var("PATH").unwrap_or_default();
    dirs.split(':')
        .chain(["/usr/sbin", "/sbin"])
        .map(|dir| Path::new(dir).join(program))
        .find(|path| path.is_file())
}

/// A command running the installed `program`.
pub fn program(name: &str) -> Command {
    Command::new(installed(name).unwrap_or_else(|| name.into()))
}

/// Skips a test of real DNS software with a loud message, unless `CI` is
/// set: then it fails. `reason` says what is missing and how to get it.
pub fn skip(reason: &str) {
    assert!(
        std::env::var_os("CI").is_none(),
        "{reason} (CI is set: tests of real DNS software must run; see .ci/run)"
    );
    eprintln!("\n!!!!! SKIPPED real-software test: {reason} !!!!!\n");
}
