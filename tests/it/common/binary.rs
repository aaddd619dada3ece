//! Running the real binary: to completion, or serving DNS.

use std::io::Read;
use std::net::SocketAddr;
use std::path::Path;
use std::process::{Child, Command, Output, Stdio};
use std::sync::mpsc;
use std::time::{Duration, Instant};

use hickory_proto::op::ResponseCode;
use hickory_proto::rr::RecordType;
use test_support::{POLL, QUIET_METRICS, START_DEADLINE, free_port, question, udp_raw};

/// The binary under test.
pub const BIN: &str = env!("CARGO_BIN_EXE_clusterset-dns");

/// The crate root (where `config/demo` is).
pub const CRATE_ROOT: &str = env!("CARGO_MANIFEST_DIR");

/// Runs the binary from the crate root to completion (at most 10 s) with
/// `RUST_LOG` set to `rust_log` (None: removed), capturing its output.
pub fn run_binary_with(args: &[&str], rust_log: Option<&str>) -> Output {
    let mut command = Command::new(BIN);
    command
        .args(args)
        .current_dir(CRATE_ROOT)
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped());
    match rust_log {
        Some(level) => command.env("RUST_LOG", level),
        None => command.env_remove("RUST_LOG"),
    };
    let child = command.spawn().expect("the binary runs");
    let (tx, rx) = mpsc::channel();
    std::thread::spawn(move || tx.send(child.wait_with_output()));
    rx.recv_timeout(Duration::from_secs(10))
        .expect("the binary exits within 10 s")
        .expect("output collected")
}

/// [`run_binary_with`] at log level `warn`.
pub fn run_binary(args: &[&str]) -> Output {
    run_binary_with(args, Some("warn"))
}

/// The real binary serving DNS, killed when dropped.
pub struct Binary {
    /// Where it answers DNS (UDP and TCP).
    pub addr: SocketAddr,
    child: Child,
}

impl Binary {
    /// Its process id.
    pub fn pid(&self) -> u32 {
        self.child.id()
    }

    /// Waits up to `limit` for the process to exit on its own.
    pub fn wait_exit(&mut self, limit: Duration) -> Option<std::process::ExitStatus> {
        let deadline = Instant::now() + limit;
        while Instant::now() < deadline {
            if let Some(status) = self.child.try_wait().expect("child status") {
                return Some(status);
            }
            std::thread::sleep(POLL);
        }
        None
    }
}

impl Drop for Binary {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// Runs `clusterset-dns serve --manifests dir --listen <free port> <extra>`
/// and waits until it answers (anything but SERVFAIL).
pub async fn spawn_binary(dir: &Path, extra: &[&str]) -> Binary {
    spawn_binary_on(free_port(), dir, extra)
        .await
        .unwrap_or_else(|stderr| panic!("the binary exited: {stderr}"))
}

/// Runs `clusterset-dns serve --manifests dir --listen addr <extra>` and
/// waits until it answers (anything but SERVFAIL); its stderr when it
/// exited instead (`cannot listen on ...` when the port is taken).
pub async fn spawn_binary_on(
    addr: SocketAddr,
    dir: &Path,
    extra: &[&str],
) -> Result<Binary, String> {
    let child = Command::new(BIN)
        .arg("serve")
        .arg("--manifests")
        .arg(dir)
        .arg("--listen")
        .arg(addr.to_string())
        .args(QUIET_METRICS)
        .args(extra)
        .env("RUST_LOG", "error")
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(Stdio::piped())
        .spawn()
        .expect("the binary runs");
    let mut binary = Binary { addr, child };
    wait_answering(&mut binary).await?;
    Ok(binary)
}

/// Polls until the binary answers a query with something else than
/// SERVFAIL; its stderr when it exited instead.
async fn wait_answering(binary: &mut Binary) -> Result<(), String> {
    let probe = question("clusterset.local.", RecordType::SOA)
        .to_vec()
        .expect("probe encodes");
    let deadline = Instant::now() + START_DEADLINE;
    while Instant::now() < deadline {
        if binary.child.try_wait().expect("child status").is_some() {
            let mut stderr = String::new();
            if let Some(mut pipe) = binary.child.stderr.take() {
                let _ = pipe.read_to_string(&mut stderr);
            }
            return Err(stderr);
        }
        if let Some(reply) = udp_raw(binary.addr, &probe, Duration::from_millis(100)).await {
            let code = ResponseCode::from_low(reply[3] & 0x0f);
            if code != ResponseCode::ServFail {
                return Ok(());
            }
        }
        tokio::time::sleep(POLL).await;
    }
    panic!("the binary did not answer within {START_DEADLINE:?}");
}
