//! `serve`: the assembly (`runtime/assembly.rs`) followed, and the DNS
//! server, the DNS over TLS listener, NOTIFY and the operations listener
//! around it.

use std::collections::HashSet;
use std::net::SocketAddr;
use std::sync::Arc;
use std::time::Duration;

use anyhow::Context;
use tokio::net::TcpListener;
use tokio::sync::mpsc;
use tokio::task::JoinHandle;
use tokio_util::sync::CancellationToken;
use tracing::{info, warn};

use crate::cli::{OperationsArgs, ServeArgs};
use crate::dns::{DnsServer, TlsListener, TransferPolicy, TsigKey, notify};
use crate::explain::shared::Published;
use crate::index::Index;
use crate::model::Change;
use crate::ops::build_info;
use crate::ops::http::{self, Health};
use crate::ops::metrics::Metrics;
use crate::plumbing::listen::{Caps, fit_open_files};
use crate::runtime::assembly::{self, Assembly, Source};
use crate::runtime::kubernetes;
use crate::runtime::pipeline::{Pipeline, PipelineSettings, Serving};
use crate::sources::manifests::ManifestSource;
use crate::sources::manifests::watch::spawn_watcher;

/// Longest wait for TCP queries in flight at shutdown.
const SHUTDOWN_GRACE: Duration = Duration::from_secs(5);
/// Name of the manifest directory source in metrics.
const MANIFESTS: &str = "manifests";

/// A server that is answering DNS.
pub struct Running {
    /// The address DNS is answered on (UDP and TCP).
    pub dns_addr: SocketAddr,
    /// The address DNS over TLS is answered on, if `--tls-listen` was given.
    pub tls_addr: Option<SocketAddr>,
    /// The address of `/metrics`, `/healthz` and `/readyz`.
    pub metrics_addr: SocketAddr,
    /// The index being served (`is_synced` tells when the first load is done).
    pub index: Arc<Index>,
    shutdown: CancellationToken,
    task: JoinHandle<anyhow::Result<()>>,
}

impl Running {
    /// Waits until the server fails or is shut down.
    pub async fn wait(&mut self) -> anyhow::Result<()> {
        (&mut self.task).await?
    }

    /// Stops accepting queries, lets TCP queries being answered finish, and
    /// waits at most `grace` for that.
    pub async fn shutdown(mut self, grace: Duration) -> anyhow::Result<()> {
        self.shutdown.cancel();
        match tokio::time::timeout(grace, self.wait()).await {
            Ok(result) => result,
            Err(_) => {
                self.task.abort();
                anyhow::bail!("did not stop within {}s", grace.as_secs())
            }
        }
    }

    /// Stops serving at once.
    pub fn abort(&self) {
        self.task.abort();
    }
}

/// Binds the DNS sockets and the operations listener, then loads the
/// manifest directory (or connects to the Kubernetes API servers) in the
/// background and keeps following it (SERVFAIL until the first sync is done).
pub async fn start(args: ServeArgs) -> anyhow::Result<Running> {
    let Assembly { pipeline, source } = assembly::assemble_serving(&args).await?;
    let index = pipeline.index.clone();
    let nameservers = assembly::nameserver_addresses(&args);
    let metrics = Arc::new(Metrics::new());
    let tls = TlsListener::bind(&assembly::tls_settings(&args.tls)).await?;
    let tls_addr = tls.as_ref().map(TlsListener::local_addr).transpose()?;
    let (mut limits, mut tls_limits) = (
        assembly::tcp_limits(&args.tcp),
        assembly::tcp_limits(&args.tcp),
    );
    let mut ops = operations_settings(&args.operations);
    let mut caps = vec![("tcp", &mut limits.caps), ("operations", &mut ops.caps)];
    if tls.is_some() {
        caps.push(("tls", &mut tls_limits.caps));
    }
    fit_open_files(&mut caps, args.udp_workers as u64);
    let tsig = args.tsig_key.as_deref().map(TsigKey::load).transpose()?;
    let tsig = tsig.map(Arc::new);
    let transfers = TransferPolicy::new(
        args.transfer_allow.clone(),
        tsig.clone(),
        metrics.dns.clone(),
    );
    let dns = DnsServer::bind(
        args.listen,
        args.udp_workers,
        limits,
        index.clone(),
        metrics.dns.clone(),
        transfers,
    )
    .await
    .with_context(|| format!("cannot listen on {}", args.listen))?;
    let dns_addr = dns.local_addr();
    info!(listen = %dns_addr, zone = %args.zone, source = ?args.kubernetes.source, version = build_info::VERSION, revision = build_info::REVISION, ?nameservers, "answering DNS (SERVFAIL until the first sync)");
    let published = Arc::new(Published::default());
    if let Some(listen) = tls_addr {
        info!(%listen, "answering DNS over TLS");
    }
    let health = Arc::new(Health {
        index: index.clone(),
        metrics: metrics.clone(),
        published: published.clone(),
        max_sync_age: Duration::from_secs(args.max_sync_age),
    });
    let (metrics_addr, operations) = operations_listener(args.metrics_listen, health, ops).await?;
    let shutdown = dns.shutdown_token();
    let tls = tls.map(|tls| {
        tls.serve(
            index.clone(),
            metrics.dns.clone(),
            tls_limits,
            tsig.clone(),
            shutdown.clone(),
        )
    });
    let notifier = notify::run(
        index.clone(),
        args.notify.clone(),
        tsig,
        metrics.dns.clone(),
        shutdown.clone(),
    );
    let serving = Serving { metrics, published };
    let mut follow: Task = match source {
        Source::Manifests(manifests) => Box::pin(follow_manifests(
            pipeline,
            manifests,
            serving,
            shutdown.clone(),
        )),
        Source::Kubernetes(source) => Box::pin(kubernetes::follow(
            pipeline,
            source,
            args.kubernetes,
            serving,
            shutdown.clone(),
        )),
    };
    let task = tokio::spawn(async move {
        // DNS ends only on shutdown, the source on shutdown or an error, the
        // operations listener only on an error.
        let mut dns = std::pin::pin!(async {
            let tls = async {
                if let Some(tls) = tls {
                    tls.await;
                }
            };
            tokio::join!(dns.run(), tls).0
        });
        tokio::select! {
            stopped = &mut dns => {
                // Let the source wrap up (the leader Lease is released there).
                let _ = tokio::time::timeout(SHUTDOWN_GRACE, &mut follow).await;
                stopped
            }
            followed = &mut follow => {
                followed?;
                dns.await
            }
            failed = operations => failed,
            never = notifier => match never {},
        }
    });
    Ok(Running {
        dns_addr,
        tls_addr,
        metrics_addr,
        index,
        shutdown,
        task,
    })
}

fn operations_settings(args: &OperationsArgs) -> http::Settings {
    http::Settings {
        caps: Caps {
            total: args.metrics_max_connections,
            per_client: args.metrics_max_connections_per_client,
        },
        header_timeout: Duration::from_secs(args.metrics_header_timeout),
        idle_timeout: Duration::from_secs(args.metrics_idle_timeout),
        debug_explain: args.debug_explain,
    }
}

/// Binds the operations listener. A failure is fatal, as for DNS: without
/// `/healthz` and `/readyz` the kubelet's probes would kill the server later,
/// for a reason its log no longer shows.
async fn operations_listener(
    listen: SocketAddr,
    health: Arc<Health>,
    settings: http::Settings,
) -> anyhow::Result<(SocketAddr, Task)> {
    let listener = TcpListener::bind(listen).await.with_context(|| {
        format!("cannot serve /metrics, /healthz and /readyz on {listen} (see --metrics-listen)")
    })?;
    let addr = listener.local_addr()?;
    info!(listen = %addr, "serving /metrics, /healthz and /readyz");
    Ok((addr, Box::pin(http::serve(listener, health, settings))))
}

/// A task that runs for the life of the server.
type Task = std::pin::Pin<Box<dyn Future<Output = anyhow::Result<()>> + Send>>;

/// Loads the manifest directory, then applies every rescan the watcher
/// reports until `shutdown`.
async fn follow_manifests(
    settings: PipelineSettings,
    mut source: ManifestSource,
    serving: Serving,
    shutdown: CancellationToken,
) -> anyhow::Result<()> {
    let metrics = serving.metrics.clone();
    let (tx, mut rx) = mpsc::channel::<Vec<Change>>(16);
    let (pipeline, watcher) = tokio::task::spawn_blocking(move || -> anyhow::Result<_> {
        let index = settings.index.clone();
        // Shared (and published for /debug/explain) before the index answers.
        let pipeline = Pipeline::new(settings, Some(serving))?.shared();
        let initial = source.rescan(&HashSet::new());
        pipeline
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .apply_initial(initial);
        info!(services = index.len(), "first sync done");
        Ok((pipeline, spawn_watcher(source, tx)?))
    })
    .await??;
    metrics.source_synced(MANIFESTS, watcher.problems().len());
    loop {
        let batch = tokio::select! {
            () = shutdown.cancelled() => return Ok(()),
            batch = rx.recv() => batch,
        };
        let Some(batch) = batch else { break };
        pipeline
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .apply(batch);
        metrics.source_synced(MANIFESTS, watcher.problems().len());
    }
    warn!("manifest watcher stopped; serving the last state");
    std::future::pending().await
}

/// Serves DNS for the clusterset in the manifest directory until SIGTERM or
/// SIGINT, then shuts down gracefully.
pub async fn serve(args: ServeArgs) -> anyhow::Result<()> {
    let mut running = start(args).await?;
    let mut terminate = tokio::signal::unix::signal(tokio::signal::unix::SignalKind::terminate())?;
    tokio::select! {
        result = running.wait() => return result,
        _ = terminate.recv() => info!("SIGTERM: shutting down"),
        _ = tokio::signal::ctrl_c() => info!("SIGINT: shutting down"),
    }
    running.shutdown(SHUTDOWN_GRACE).await?;
    info!("stopped");
    Ok(())
}
