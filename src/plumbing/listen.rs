//! What every TCP listener of the process shares: DNS over TCP (which also
//! carries zone transfers), DNS over TLS and the operations listener. Each
//! caps its open connections in total and per client address, and runs the
//! same accept loop, in which an accept error never ends the listener (nor
//! the process): it is counted, logged at most once per [`LOG_PERIOD`], and
//! followed by a short pause when it says the process is short of
//! descriptors or memory. At start-up the caps are fitted inside the
//! open-file limit ([`fit_open_files`]), so that a flood of connections to
//! one listener meets its cap, not `EMFILE` on every listener.

use std::collections::HashMap;
use std::future::{Future, poll_fn};
use std::io;
use std::net::{IpAddr, SocketAddr};
use std::sync::{Arc, Mutex};
use std::task::{Context, Poll};
use std::time::Duration;

use nix::errno::Errno;
use nix::sys::resource::{Resource, getrlimit, setrlimit};
use prometheus::{IntCounterVec, IntGauge};
use tokio::net::{TcpListener, TcpStream};
use tokio::task::JoinSet;
use tokio_util::sync::CancellationToken;
use tracing::{info, warn};

use crate::plumbing::log_limit::LogLimit;

/// At most one log line per listener per this period about accept errors
/// (the metric counts every one).
pub(crate) const LOG_PERIOD: Duration = Duration::from_secs(10);
/// The first pause after an accept error that says the process lacks
/// descriptors or memory; it doubles while such errors follow each other.
const FIRST_PAUSE: Duration = Duration::from_millis(10);
/// The longest pause.
const LONGEST_PAUSE: Duration = Duration::from_secs(1);
/// Descriptors the process needs besides connections: listeners, the
/// runtime's, watched files, API server connections, a manifest being read.
/// An idle embedded-mode server with two UDP workers has 18 open.
const OWN_FILES: u64 = 64;

/// How many connections a listener keeps open at once.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Caps {
    /// Most open connections in all.
    pub total: usize,
    /// Most open connections from one client address.
    pub per_client: usize,
}

/// Which cap refused a connection (the metric label).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Refused {
    /// [`Caps::total`].
    Total,
    /// [`Caps::per_client`].
    Client,
}

impl Refused {
    /// The metric label.
    pub(crate) fn label(self) -> &'static str {
        match self {
            Self::Total => "total",
            Self::Client => "client",
        }
    }
}

/// Counts open connections against the caps.
#[derive(Debug)]
pub(crate) struct Connections {
    caps: Caps,
    open: Mutex<Open>,
}

#[derive(Debug, Default)]
struct Open {
    total: usize,
    by_client: HashMap<IpAddr, usize>,
}

/// One admitted connection; dropping it frees its place.
#[derive(Debug)]
pub(crate) struct Slot {
    connections: Arc<Connections>,
    client: IpAddr,
}

impl Connections {
    /// No connection open yet.
    pub(crate) fn new(caps: Caps) -> Arc<Self> {
        Arc::new(Self {
            caps,
            open: Mutex::default(),
        })
    }

    /// A place for a new connection from `client`, unless a cap is reached.
    pub(crate) fn admit(self: &Arc<Self>, client: IpAddr) -> Result<Slot, Refused> {
        let mut open = self.lock();
        if open.total >= self.caps.total {
            return Err(Refused::Total);
        }
        let count = open.by_client.entry(client).or_insert(0);
        if *count >= self.caps.per_client {
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

/// What one listener counts.
#[derive(Clone)]
pub struct ListenerMetrics {
    /// Connections open now.
    pub open: IntGauge,
    /// Connections closed at once, by the cap reached (`total`, `client`).
    pub refused: IntCounterVec,
    /// Accept errors by listener and class (see [`AcceptError`]).
    pub accept_errors: IntCounterVec,
}

/// What an accept error says.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum AcceptError {
    /// The process or the system is out of descriptors or memory (`EMFILE`,
    /// `ENFILE`, `ENOBUFS`, `ENOMEM`): the loop pauses before trying again.
    Resources,
    /// One connection failed before it was accepted (accept(2) on Linux
    /// passes a pending network error on; retrying is the answer).
    Connection,
    /// Anything else; treated like [`Self::Resources`].
    Other,
}

impl AcceptError {
    /// The class of `error`.
    pub(crate) fn of(error: &io::Error) -> Self {
        let errno = error.raw_os_error().map(Errno::from_raw);
        match errno {
            Some(Errno::EMFILE | Errno::ENFILE | Errno::ENOBUFS | Errno::ENOMEM) => {
                return Self::Resources;
            }
            Some(
                Errno::ECONNABORTED
                | Errno::ECONNRESET
                | Errno::EINTR
                | Errno::EPROTO
                | Errno::ENETDOWN
                | Errno::ENOPROTOOPT
                | Errno::EHOSTDOWN
                | Errno::ENONET
                | Errno::EHOSTUNREACH
                | Errno::EOPNOTSUPP
                | Errno::ENETUNREACH
                | Errno::EPERM
                | Errno::ETIMEDOUT,
            ) => return Self::Connection,
            _ => {}
        }
        match error.kind() {
            io::ErrorKind::ConnectionAborted
            | io::ErrorKind::ConnectionReset
            | io::ErrorKind::Interrupted => Self::Connection,
            _ => Self::Other,
        }
    }

    /// The metric label.
    pub(crate) fn label(self) -> &'static str {
        match self {
            Self::Resources => "resources",
            Self::Connection => "connection",
            Self::Other => "other",
        }
    }
}

/// Where connections come from: a [`TcpListener`], or in tests one that
/// fails on demand.
pub(crate) trait Incoming: Send + 'static {
    /// The next connection, as [`TcpListener::poll_accept`].
    fn poll_accept(&self, cx: &mut Context<'_>) -> Poll<io::Result<(TcpStream, SocketAddr)>>;
}

impl Incoming for TcpListener {
    fn poll_accept(&self, cx: &mut Context<'_>) -> Poll<io::Result<(TcpStream, SocketAddr)>> {
        TcpListener::poll_accept(self, cx)
    }
}

/// The accept loop of listener `name` (the log's and the metric's label): a
/// connection within the caps of `connections` gets the task `open` makes
/// for it; one over a cap is closed at once and counted. An accept error is
/// counted and logged (at most once per [`LOG_PERIOD`]); one that says the
/// process lacks descriptors or memory is followed by a pause, 10 ms
/// doubling up to 1 s while they follow each other, so the loop neither
/// spins nor gives up. On `shutdown` it stops accepting and waits for the
/// connections' tasks.
pub(crate) async fn accept<T>(
    incoming: impl Incoming,
    name: &'static str,
    connections: &Arc<Connections>,
    metrics: &ListenerMetrics,
    shutdown: CancellationToken,
    mut open: impl FnMut(TcpStream, SocketAddr) -> T,
) where
    T: Future<Output = ()> + Send + 'static,
{
    let mut tasks = JoinSet::new();
    let log = LogLimit::new(LOG_PERIOD);
    let (mut pause, mut unlogged) = (FIRST_PAUSE, 0u64);
    loop {
        let accepted = tokio::select! {
            accepted = poll_fn(|cx| incoming.poll_accept(cx)) => accepted,
            () = shutdown.cancelled() => break,
        };
        match accepted {
            Ok((stream, peer)) => {
                pause = FIRST_PAUSE;
                match connections.admit(peer.ip()) {
                    Ok(slot) => {
                        let (task, gauge) = (open(stream, peer), metrics.open.clone());
                        tasks.spawn(async move {
                            gauge.inc();
                            task.await;
                            gauge.dec();
                            drop(slot);
                        });
                    }
                    Err(cap) => metrics.refused.with_label_values(&[cap.label()]).inc(),
                }
            }
            Err(error) => {
                let class = AcceptError::of(&error);
                metrics
                    .accept_errors
                    .with_label_values(&[name, class.label()])
                    .inc();
                unlogged += 1;
                let wait = (class != AcceptError::Connection).then_some(pause);
                if log.allow() {
                    warn!(listener = name, %error, errors = unlogged, pause = ?wait.unwrap_or_default(),
                          "accept failed; going on (counted in clusterset_dns_accept_errors_total, logged at most every 10 s)");
                    unlogged = 0;
                }
                if let Some(wait) = wait {
                    tokio::select! {
                        () = tokio::time::sleep(wait) => {}
                        () = shutdown.cancelled() => break,
                    }
                    pause = (pause * 2).min(LONGEST_PAUSE);
                }
            }
        }
        while tasks.try_join_next().is_some() {}
    }
    drop(incoming);
    while tasks.join_next().await.is_some() {}
}

/// The open-file limit before and after [`fit_open_files`].
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) struct OpenFiles {
    /// The soft limit the process started with.
    pub soft_before: u64,
    /// The soft limit now (the hard one, when raising it worked).
    pub limit: u64,
    /// Descriptors left for connections.
    pub budget: u64,
}

/// Raises the soft open-file limit to the hard one, then lowers the caps of
/// `listeners` (named for the log), scaled alike, until their totals fit in
/// the limit less the process's own files (`other_files` more, such as the
/// UDP sockets): so a flood meets a cap, never `EMFILE`. Logs what was set.
pub(crate) fn fit_open_files(listeners: &mut [(&str, &mut Caps)], other_files: u64) -> OpenFiles {
    let Ok((soft, hard)) = getrlimit(Resource::RLIMIT_NOFILE) else {
        return OpenFiles {
            soft_before: u64::MAX,
            limit: u64::MAX,
            budget: u64::MAX,
        };
    };
    let limit = raise_soft_limit(soft, hard);
    let budget = budget(limit, other_files);
    let asked: Vec<Caps> = listeners.iter().map(|(_, caps)| **caps).collect();
    let fitted = fit(&asked, budget);
    let describe = |caps: &[Caps]| {
        listeners
            .iter()
            .zip(caps)
            .map(|((name, _), c)| format!("{name} {}/{}", c.total, c.per_client))
            .collect::<Vec<_>>()
            .join(", ")
    };
    if fitted == asked {
        info!(soft_before = soft, limit, caps = %describe(&fitted),
              "open-file limit set; connection caps (total/per client) fit in it");
    } else {
        warn!(soft_before = soft, limit, asked = %describe(&asked), caps = %describe(&fitted),
              "connection caps (total/per client) lowered to fit the open-file limit; raise its hard limit (ulimit -Hn, LimitNOFILE) for more");
    }
    for ((_, caps), fitted) in listeners.iter_mut().zip(fitted) {
        **caps = fitted;
    }
    OpenFiles {
        soft_before: soft,
        limit,
        budget,
    }
}

/// The soft limit after trying to raise it to `hard` (when the hard limit
/// is unlimited, to the kernel's most, `fs.nr_open`).
fn raise_soft_limit(soft: u64, hard: u64) -> u64 {
    if soft >= hard {
        return soft;
    }
    if setrlimit(Resource::RLIMIT_NOFILE, hard, hard).is_ok() {
        return hard;
    }
    let most = std::fs::read_to_string("/proc/sys/fs/nr_open")
        .ok()
        .and_then(|s| s.trim().parse::<u64>().ok())
        .unwrap_or(1 << 20)
        .min(hard);
    if most > soft && setrlimit(Resource::RLIMIT_NOFILE, most, hard).is_ok() {
        return most;
    }
    soft
}

/// Descriptors left for connections under `limit`: all but the process's
/// own, which never take more than half.
fn budget(limit: u64, other_files: u64) -> u64 {
    let own = OWN_FILES.saturating_add(other_files).min(limit / 2);
    limit - own
}

/// `caps` scaled alike so that their totals fit in `budget` (each keeps at
/// least one connection, and a per-client cap no larger than its total).
fn fit(caps: &[Caps], budget: u64) -> Vec<Caps> {
    let asked: u64 = caps.iter().map(|c| c.total as u64).sum();
    if asked <= budget {
        return caps.to_vec();
    }
    caps.iter()
        .map(|c| {
            let scaled = (c.total as u128 * u128::from(budget) / u128::from(asked)) as usize;
            let total = scaled.max(1);
            Caps {
                total,
                per_client: c.per_client.min(total).max(1),
            }
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use std::sync::atomic::{AtomicUsize, Ordering};

    use prometheus::Opts;

    use super::*;

    /// RFC 7766 §6.2.3: total and per-client caps; a closed connection
    /// frees its place (and an idle client's entry goes away).
    #[test]
    fn caps_total_and_per_client() {
        let connections = Connections::new(Caps {
            total: 3,
            per_client: 2,
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

    #[test]
    fn caps_are_scaled_to_fit_the_budget() {
        let caps = |total, per_client| Caps { total, per_client };
        let asked = [caps(1024, 32), caps(1024, 32), caps(64, 8)];
        assert_eq!(fit(&asked, 10_000), asked, "room enough: unchanged");
        let fitted = fit(&asked, 190);
        assert_eq!(fitted, [caps(92, 32), caps(92, 32), caps(5, 5)]);
        assert!(fitted.iter().map(|c| c.total as u64).sum::<u64>() <= 190);
        assert_eq!(fit(&[caps(10, 4)], 0), [caps(1, 1)], "never below one");
        assert_eq!(budget(256, 2), 190);
        assert_eq!(
            budget(40, 2),
            20,
            "the process's own files take at most half"
        );
    }

    /// The soft open-file limit is raised to the hard one, so that the
    /// caps, not EMFILE, decide who is refused.
    #[test]
    fn the_open_file_limit_is_raised() {
        let (_, hard) = getrlimit(Resource::RLIMIT_NOFILE).unwrap();
        setrlimit(Resource::RLIMIT_NOFILE, hard / 2, hard).unwrap();
        let mut caps = Caps {
            total: 16,
            per_client: 4,
        };
        let files = fit_open_files(&mut [("test", &mut caps)], 0);
        assert_eq!(getrlimit(Resource::RLIMIT_NOFILE).unwrap(), (hard, hard));
        assert_eq!((files.soft_before, files.limit), (hard / 2, hard));
        assert_eq!(caps.total, 16);
    }

    #[test]
    fn accept_errors_are_classified() {
        let of = |errno: Errno| AcceptError::of(&io::Error::from_raw_os_error(errno as i32));
        assert_eq!(of(Errno::EMFILE), AcceptError::Resources);
        assert_eq!(of(Errno::ENFILE), AcceptError::Resources);
        assert_eq!(of(Errno::ECONNABORTED), AcceptError::Connection);
        assert_eq!(of(Errno::EBADF), AcceptError::Other);
    }

    /// A listener whose first `errors` accepts fail with `EMFILE`.
    struct Failing {
        listener: TcpListener,
        errors: AtomicUsize,
    }

    impl Incoming for Failing {
        fn poll_accept(&self, cx: &mut Context<'_>) -> Poll<io::Result<(TcpStream, SocketAddr)>> {
            let left = self.errors.load(Ordering::Relaxed);
            if left > 0 {
                self.errors.store(left - 1, Ordering::Relaxed);
                return Poll::Ready(Err(io::Error::from_raw_os_error(Errno::EMFILE as i32)));
            }
            self.listener.poll_accept(cx)
        }
    }

    /// Accept errors end neither the loop nor the listener: every one is
    /// counted, and the next connection is served.
    #[tokio::test]
    async fn the_accept_loop_outlives_accept_errors() {
        let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
        let addr = listener.local_addr().unwrap();
        let failing = Failing {
            listener,
            errors: AtomicUsize::new(6),
        };
        let metrics = ListenerMetrics {
            open: IntGauge::new("open", "open").unwrap(),
            refused: IntCounterVec::new(Opts::new("refused", "refused"), &["limit"]).unwrap(),
            accept_errors: IntCounterVec::new(
                Opts::new("errors", "errors"),
                &["listener", "error"],
            )
            .unwrap(),
        };
        let connections = Connections::new(Caps {
            total: 4,
            per_client: 4,
        });
        let shutdown = CancellationToken::new();
        let (served, mut seen) = tokio::sync::mpsc::unbounded_channel();
        let looping = tokio::spawn({
            let (metrics, shutdown) = (metrics.clone(), shutdown.clone());
            async move {
                accept(
                    failing,
                    "test",
                    &connections,
                    &metrics,
                    shutdown,
                    move |_, peer| {
                        let served = served.clone();
                        async move { served.send(peer).unwrap() }
                    },
                )
                .await;
            }
        });
        let client = TcpStream::connect(addr).await.unwrap();
        let peer = tokio::time::timeout(Duration::from_secs(60), seen.recv())
            .await
            .expect("served after the errors")
            .unwrap();
        assert_eq!(peer, client.local_addr().unwrap());
        let errors = metrics
            .accept_errors
            .with_label_values(&["test", "resources"]);
        assert_eq!(errors.get(), 6);
        assert!(!looping.is_finished());
        shutdown.cancel();
        looping.await.unwrap();
    }
}
