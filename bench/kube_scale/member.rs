//! One member's clusterset-dns, as the real release binary in its own
//! process (so its memory and CPU are its own), and what `/proc` says of it.
//! Every process started is registered, so the bench's overall time limit can
//! kill them all; dropping a [`MemberProcess`] kills it too (panics included).

use std::fs::File;
use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::sync::Mutex;
use std::time::{Duration, Instant};

use nix::sys::signal::{Signal, kill};
use nix::unistd::Pid;
use test_support::free_port;

/// Namespace of the shared state on the broker.
pub const BROKER_NAMESPACE: &str = "clusterset-broker";
/// Namespace of the leader Lease in each member.
pub const LEASE_NAMESPACE: &str = "clusterset-dns";

/// Pids of the processes running now, for [`kill_all`].
static RUNNING: Mutex<Vec<u32>> = Mutex::new(Vec::new());

/// Kills every process still running (the overall time limit's last resort).
pub fn kill_all() {
    for pid in RUNNING.lock().unwrap().drain(..) {
        let _ = kill(Pid::from_raw(pid as i32), Signal::SIGKILL);
    }
}

fn forget(pid: u32) {
    RUNNING.lock().unwrap().retain(|p| *p != pid);
}

/// Where a member finds its API servers.
pub struct Kubeconfigs {
    pub member: PathBuf,
    pub broker: PathBuf,
}

/// A running `clusterset-dns serve --source kubernetes`.
pub struct MemberProcess {
    pub id: String,
    /// Where it answers DNS.
    pub dns: SocketAddr,
    /// When it was spawned.
    pub started: Instant,
    child: Child,
}

impl MemberProcess {
    /// Spawns the binary for cluster `id`, logging to `log`, with
    /// `--derived-services derived` when that is given.
    pub fn spawn(
        bin: &str,
        id: &str,
        kubeconfigs: &Kubeconfigs,
        log: &Path,
        derived: Option<&str>,
    ) -> Self {
        Self::spawn_under(&[], bin, id, kubeconfigs, log, derived)
    }

    /// Spawns the binary for cluster `id` under `wrapper` (a command and
    /// its arguments, before the binary's; none: the binary itself), which
    /// must exec it so that the pid stays the member's.
    pub fn spawn_under(
        wrapper: &[String],
        bin: &str,
        id: &str,
        kubeconfigs: &Kubeconfigs,
        log: &Path,
        derived: Option<&str>,
    ) -> Self {
        let dns = free_port();
        let log = File::create(log).unwrap_or_else(|e| panic!("{}: {e}", log.display()));
        let mut command = match wrapper.split_first() {
            Some((program, args)) => {
                let mut command = Command::new(program);
                command.args(args).arg(bin);
                command
            }
            None => Command::new(bin),
        };
        let child = command
            .args(["serve", "--source", "kubernetes", "--cluster-id", id])
            .arg("--kubeconfig")
            .arg(&kubeconfigs.member)
            .arg("--broker-kubeconfig")
            .arg(&kubeconfigs.broker)
            .args(["--broker-namespace", BROKER_NAMESPACE])
            .args(["--lease-namespace", LEASE_NAMESPACE])
            .args(["--identity", &format!("{id}-0"), "--ip-families", "IPv4"])
            .args(["--listen", &dns.to_string()])
            .args(["--metrics-listen", "127.0.0.1:0", "--udp-workers", "1"])
            .args(["--log-level", "info"])
            .args(
                derived
                    .map(|mode| ["--derived-services", mode])
                    .into_iter()
                    .flatten(),
            )
            .stdin(Stdio::null())
            .stdout(log.try_clone().expect("log file"))
            .stderr(log)
            .spawn()
            .unwrap_or_else(|e| panic!("{bin}: {e}"));
        RUNNING.lock().unwrap().push(child.id());
        Self {
            id: id.to_owned(),
            dns,
            started: Instant::now(),
            child,
        }
    }

    pub fn pid(&self) -> u32 {
        self.child.id()
    }

    /// What `/proc` says of it now.
    pub fn stats(&self) -> ProcStats {
        ProcStats::of(self.pid()).unwrap_or_else(|| panic!("{} exited", self.id))
    }

    /// SIGTERM, then waits up to `limit` for a graceful exit (killed after).
    /// Whether it exited in time.
    pub fn terminate(mut self, limit: Duration) -> bool {
        let _ = kill(Pid::from_raw(self.pid() as i32), Signal::SIGTERM);
        let deadline = Instant::now() + limit;
        while Instant::now() < deadline {
            if let Ok(Some(_)) = self.child.try_wait() {
                forget(self.pid());
                return true;
            }
            std::thread::sleep(Duration::from_millis(50));
        }
        false
    }
}

impl Drop for MemberProcess {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
        forget(self.child.id());
    }
}

/// Memory and CPU of a process, from `/proc/<pid>/status` and `/proc/<pid>/stat`.
#[derive(Clone, Copy, Debug, Default, serde::Serialize)]
pub struct ProcStats {
    /// VmRSS, MiB.
    pub rss_mib: f64,
    /// VmHWM (peak resident), MiB.
    pub peak_mib: f64,
    /// utime + stime, seconds.
    pub cpu_s: f64,
}

impl ProcStats {
    /// Of process `pid` (`None` once it is gone).
    pub fn of(pid: u32) -> Option<Self> {
        Self::read(&format!("/proc/{pid}"))
    }

    /// Of this process (the fake API servers).
    pub fn own() -> Self {
        Self::read("/proc/self").expect("/proc/self")
    }

    fn read(dir: &str) -> Option<Self> {
        let status = std::fs::read_to_string(format!("{dir}/status")).ok()?;
        let kib = |field: &str| -> f64 {
            status
                .lines()
                .find_map(|l| l.strip_prefix(field))
                .and_then(|v| v.split_whitespace().next()?.parse().ok())
                .unwrap_or(0.0)
        };
        let stat = std::fs::read_to_string(format!("{dir}/stat")).ok()?;
        // Fields after the command name (which may hold spaces) in ")"; utime
        // and stime are fields 14 and 15, in clock ticks (USER_HZ, 100 on Linux).
        let rest = &stat[stat.rfind(')')? + 2..];
        let fields: Vec<&str> = rest.split_whitespace().collect();
        let ticks: f64 = fields[11].parse::<f64>().ok()? + fields[12].parse::<f64>().ok()?;
        Some(Self {
            rss_mib: kib("VmRSS:") / 1024.0,
            peak_mib: kib("VmHWM:") / 1024.0,
            cpu_s: ticks / 100.0,
        })
    }
}
