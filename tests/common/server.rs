//! Running the server: in-process (`serve::start`) or as the real binary.

use std::future::Future;
use std::io::Read;
use std::net::SocketAddr;
use std::path::Path;
use std::process::{Child, Command, Output, Stdio};
use std::sync::mpsc;
use std::time::{Duration, Instant};

use clap::Parser;
use clusterset_dns::cli::{Cli, Command as CliCommand};
use clusterset_dns::runtime::serve::{self, Running};
use hickory_proto::op::ResponseCode;
use hickory_proto::rr::RecordType;

use super::client::{question, udp_raw};
use super::ports::free_port;

/// How long a hot reload may take to show in DNS.
pub const RELOAD_DEADLINE: Duration = Duration::from_secs(2);
/// How long a server may take to start and load.
const START_DEADLINE: Duration = Duration::from_secs(10);
const POLL: Duration = Duration::from_millis(20);

/// Keeps the operations listener (/metrics) off the default fixed port.
const QUIET_METRICS: [&str; 2] = ["--metrics-listen", "127.0.0.1:0"];

/// The binary under test.
pub const BIN: &str = env!("CARGO_BIN_EXE_clusterset-dns");

/// `clusterset-dns <words...>` parsed as the binary would.
pub fn parse_cli(words: &[&str]) -> CliCommand {
    let argv = std::iter::once("clusterset-dns").chain(words.iter().copied());
    Cli::parse_from(argv).command.expect("a subcommand")
}

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

/// An in-process server, stopped when dropped.
pub struct Server {
    /// Where it answers DNS (UDP and TCP).
    pub addr: SocketAddr,
    running: Option<Running>,
}

impl Server {
    /// The running server's handle (index, ...).
    pub fn running(&self) -> &Running {
        self.running.as_ref().expect("running until shut down")
    }

    /// Shuts down gracefully, as on SIGTERM.
    pub async fn shutdown(mut self) {
        let running = self.running.take().expect("running until shut down");
        running
            .shutdown(Duration::from_secs(10))
            .await
            .expect("a clean shutdown");
    }
}

impl Drop for Server {
    fn drop(&mut self) {
        if let Some(running) = &self.running {
            running.abort();
        }
    }
}

/// Starts `serve --manifests dir --listen 127.0.0.1:0 <extra>` in this
/// runtime and waits for the first load.
pub async fn start(dir: &Path, extra: &[&str]) -> Server {
    let server = start_loading(dir, extra).await;
    let deadline = Instant::now() + START_DEADLINE;
    while !server.running().index.is_synced() {
        assert!(
            Instant::now() < deadline,
            "first load not done in {START_DEADLINE:?}"
        );
        tokio::time::sleep(POLL).await;
    }
    server
}

/// Like [`start`], without waiting for the first load.
pub async fn start_loading(dir: &Path, extra: &[&str]) -> Server {
    let dir = dir.display().to_string();
    let mut words = vec!["serve", "--manifests", &dir, "--listen", "127.0.0.1:0"];
    words.extend_from_slice(&QUIET_METRICS);
    words.extend_from_slice(extra);
    let CliCommand::Serve(args) = parse_cli(&words) else {
        panic!("serve arguments expected")
    };
    let running = serve::start(args).await.expect("the server starts");
    Server {
        addr: running.dns_addr,
        running: Some(running),
    }
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

/// Polls `probe` until it returns `expected` (at most [`RELOAD_DEADLINE`]);
/// panics with the last value otherwise.
pub async fn eventually<T, F, Fut>(what: &str, expected: T, probe: F)
where
    T: PartialEq + std::fmt::Debug,
    F: FnMut() -> Fut,
    Fut: Future<Output = T>,
{
    eventually_within(RELOAD_DEADLINE, what, expected, probe).await;
}

/// [`eventually`] with another deadline.
pub async fn eventually_within<T, F, Fut>(limit: Duration, what: &str, expected: T, mut probe: F)
where
    T: PartialEq + std::fmt::Debug,
    F: FnMut() -> Fut,
    Fut: Future<Output = T>,
{
    let start = Instant::now();
    loop {
        let got = probe().await;
        if got == expected {
            return;
        }
        assert!(
            start.elapsed() < limit,
            "{what}: still {got:?} after {limit:?}, expected {expected:?}"
        );
        tokio::time::sleep(POLL).await;
    }
}
