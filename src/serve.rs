//! `serve`: wires the manifest source, the engine, the index and the DNS server.

use std::collections::HashSet;
use std::net::SocketAddr;
use std::path::PathBuf;
use std::sync::Arc;
use std::time::{SystemTime, UNIX_EPOCH};

use anyhow::Context;
use tokio::sync::mpsc;
use tokio::task::JoinHandle;
use tracing::{info, warn};

use crate::cli::{ClustersetArgs, ServeArgs};
use crate::dns::DnsServer;
use crate::engine::Engine;
use crate::index::Index;
use crate::model::Change;
use crate::source::manifests::ManifestSource;
use crate::source::watch::spawn_watcher;
use crate::vip_state;

/// Feeds changes through the engine into the index and keeps the VIP state file current.
pub struct Reconciler {
    engine: Engine,
    index: Option<Arc<Index>>,
    state_file: Option<PathBuf>,
}

impl Reconciler {
    /// An engine set up from `args`, with the VIPs saved in the state file restored.
    /// `index` receives every import change; `persist` says whether to write the state file.
    pub fn new(
        args: &ClustersetArgs,
        index: Option<Arc<Index>>,
        persist: bool,
    ) -> anyhow::Result<Self> {
        let mut engine = Engine::new(args.engine_settings());
        let path = args.state_file();
        let skipped = engine.vips_mut().restore(vip_state::load(&path)?);
        for (key, ip) in skipped {
            warn!(service = %key, %ip, file = %path.display(), "saved VIP is outside the pools or taken twice; dropped");
        }
        Ok(Self {
            engine,
            index,
            state_file: persist.then_some(path),
        })
    }

    /// Applies one batch of changes.
    pub fn apply(&mut self, changes: Vec<Change>) {
        let updates = self.engine.apply(changes);
        if let Some(index) = &self.index {
            for (key, import) in &updates {
                index.update(key, import.clone());
            }
            if !updates.is_empty() {
                index.commit();
            }
        }
        self.persist();
    }

    /// Applies the first full state of the sources: saved VIPs no import
    /// claimed are released, and the index starts answering.
    pub fn apply_initial(&mut self, changes: Vec<Change>) {
        self.apply(changes);
        self.engine.release_unclaimed_vips();
        self.persist();
        if let Some(index) = &self.index {
            index.commit();
            index.set_synced();
        }
    }

    /// The engine, for reading results.
    pub fn engine(&self) -> &Engine {
        &self.engine
    }

    fn persist(&mut self) {
        let Some(path) = &self.state_file else { return };
        if self.engine.vips_mut().take_dirty()
            && let Err(error) = vip_state::save(path, &self.engine.vips_mut().allocations())
        {
            warn!(
                error = format!("{error:#}"),
                "VIPs will not survive a restart"
            );
        }
    }
}

/// A server that is answering DNS.
pub struct Running {
    /// The address DNS is answered on (UDP and TCP).
    pub dns_addr: SocketAddr,
    /// The index being served (`is_synced` tells when the first load is done).
    pub index: Arc<Index>,
    task: JoinHandle<anyhow::Result<()>>,
}

impl Running {
    /// Waits until the server fails (it does not stop on its own).
    pub async fn wait(self) -> anyhow::Result<()> {
        self.task.await?
    }

    /// Stops serving.
    pub fn abort(&self) {
        self.task.abort();
    }
}

/// Binds the DNS sockets, then loads the manifest directory in the background
/// and keeps following it (SERVFAIL until the first load is done).
pub async fn start(args: ServeArgs) -> anyhow::Result<Running> {
    let manifests = &args.clusterset.manifests;
    anyhow::ensure!(
        manifests.is_dir(),
        "manifest directory {} does not exist (see --manifests)",
        manifests.display()
    );
    let index = Arc::new(Index::new(
        args.zone.clone(),
        args.ttl,
        args.cluster_targeting,
        unix_serial(),
    ));
    let dns = DnsServer::bind(args.listen, args.udp_workers, index.clone())
        .await
        .with_context(|| format!("cannot listen on {}", args.listen))?;
    let dns_addr = dns.local_addr();
    info!(listen = %dns_addr, zone = %args.zone, manifests = %manifests.display(), "answering DNS (SERVFAIL until the first sync)");
    let clusterset = args.clusterset;
    let sync_index = index.clone();
    let reconcile = async move {
        let (tx, mut rx) = mpsc::channel::<Vec<Change>>(16);
        let (mut reconciler, _watcher) =
            tokio::task::spawn_blocking(move || -> anyhow::Result<_> {
                let mut reconciler = Reconciler::new(&clusterset, Some(sync_index.clone()), true)?;
                let mut source = ManifestSource::new(&clusterset.manifests);
                reconciler.apply_initial(source.rescan(&HashSet::new()));
                info!(
                    names = sync_index.len(),
                    services = reconciler.engine().aggregates().len(),
                    "first sync done"
                );
                Ok((reconciler, spawn_watcher(source, tx)?))
            })
            .await??;
        while let Some(batch) = rx.recv().await {
            reconciler.apply(batch);
        }
        warn!("manifest watcher stopped; serving the last state");
        Ok(())
    };
    let task = tokio::spawn(async move {
        tokio::try_join!(dns.run(), reconcile)?;
        Ok(())
    });
    Ok(Running {
        dns_addr,
        index,
        task,
    })
}

/// Serves DNS for the clusterset in the manifest directory until the process ends.
pub async fn serve(args: ServeArgs) -> anyhow::Result<()> {
    start(args).await?.wait().await
}

/// A SOA serial that grows across restarts: seconds since the epoch.
fn unix_serial() -> u32 {
    let secs = SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map(|d| d.as_secs())
        .unwrap_or(0);
    u32::try_from(secs).unwrap_or(u32::MAX)
}
