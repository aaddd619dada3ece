//! Running the server in-process (`serve::start`), and waiting for what it
//! shows. The real binary is run by the tests themselves: only they know
//! where Cargo built it.

use std::future::Future;
use std::net::SocketAddr;
use std::path::Path;
use std::time::{Duration, Instant};

use clap::Parser;
use clusterset_dns::cli::{Cli, Command as CliCommand};
use clusterset_dns::runtime::serve::{self, Running};

/// How long a hot reload may take to show in DNS.
const RELOAD_DEADLINE: Duration = Duration::from_secs(2);
/// How long a server (in-process or the binary) may take to start and load.
pub const START_DEADLINE: Duration = Duration::from_secs(10);
/// How often a wait polls.
pub const POLL: Duration = Duration::from_millis(20);

/// Keeps the operations listener (/metrics) off the default fixed port.
pub const QUIET_METRICS: [&str; 2] = ["--metrics-listen", "127.0.0.1:0"];

/// `clusterset-dns <words...>` parsed as the binary would.
pub fn parse_cli(words: &[&str]) -> CliCommand {
    let argv = std::iter::once("clusterset-dns").chain(words.iter().copied());
    Cli::parse_from(argv).command.expect("a subcommand")
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
