//! The apply loop: what every batch of changes from a source goes through.

use std::collections::HashSet;
use std::path::PathBuf;
use std::sync::{Arc, Mutex};
use std::time::Instant;

use tracing::warn;

use crate::cli::ClustersetArgs;
use crate::engine::{Engine, EngineReader, Note};
use crate::explain::shared::Published;
use crate::index::Index;
use crate::model::Change;
use crate::ops::metrics::Metrics;
use crate::runtime::vip_state;
use crate::sources::manifests::ManifestSource;

/// Where reconciled results go while serving.
pub struct Outputs {
    /// The DNS view.
    pub index: Arc<Index>,
    /// Metrics to keep current.
    pub metrics: Arc<Metrics>,
    /// Where the reconciler is published for `/debug/explain`.
    pub published: Arc<Published>,
}

/// The one apply loop both sources feed: changes go through the engine into
/// the index (one service at a time), and the VIP state file is kept current.
pub struct Pipeline {
    engine: Engine,
    outputs: Option<Outputs>,
    state_file: Option<PathBuf>,
}

impl Pipeline {
    /// An engine set up from `args`, with the VIPs saved in the state file
    /// restored. With `outputs` (serving), results reach the index and the
    /// metrics and VIP allocations are saved; without (status), nothing is written.
    pub fn new(args: &ClustersetArgs, outputs: Option<Outputs>) -> anyhow::Result<Self> {
        let mut engine = Engine::new(args.engine_settings());
        let path = args.state_file();
        let skipped = engine.vips_mut().restore(vip_state::load(&path)?);
        for (key, ip) in skipped {
            warn!(service = %key, %ip, file = %path.display(), "saved VIP is outside the pools or taken twice; dropped");
        }
        Ok(Self {
            engine,
            state_file: outputs.as_ref().map(|_| path),
            outputs,
        })
    }

    /// A reconciler for Kubernetes mode: VIPs come from the broker, nothing is saved locally.
    pub fn in_cluster(settings: crate::engine::EngineSettings, outputs: Outputs) -> Self {
        Self {
            engine: Engine::new(settings),
            outputs: Some(outputs),
            state_file: None,
        }
    }

    /// Applies one batch of changes (a completed sync of the source).
    pub fn apply(&mut self, changes: Vec<Change>) {
        let started = Instant::now();
        let updates = self.engine.apply(changes);
        if let Some(out) = &self.outputs {
            for (key, import) in &updates {
                out.index.update(key, import.clone());
            }
            if !updates.is_empty() {
                out.index.commit();
            }
        }
        let saved = self.persist();
        let mut complete = saved;
        for note in self.engine.take_notes() {
            complete &= !matches!(note, Note::PoolExhausted { .. });
            warn!("{note}");
        }
        if let Some(out) = &self.outputs {
            out.metrics
                .reconciled(&self.engine, started.elapsed(), complete);
        }
    }

    /// Applies the first full state of the sources: saved VIPs no import
    /// claimed are released, and the index starts answering.
    pub fn apply_initial(&mut self, changes: Vec<Change>) {
        self.apply(changes);
        self.engine.release_unclaimed_vips();
        self.persist();
        if let Some(out) = &self.outputs {
            out.index.commit();
            out.index.set_synced();
        }
    }

    /// Shares the reconciler between the source's task and the writers,
    /// and publishes it for `/debug/explain`.
    pub fn shared(self) -> Arc<Mutex<Self>> {
        let published = self.outputs.as_ref().map(|o| o.published.clone());
        let shared = Arc::new(Mutex::new(self));
        if let Some(published) = published {
            let reader: Arc<dyn EngineReader> = shared.clone();
            published.set(Arc::downgrade(&reader));
        }
        shared
    }

    /// The engine, for reading results.
    pub fn engine(&self) -> &Engine {
        &self.engine
    }

    /// Saves VIP allocations if they changed; false if that failed.
    fn persist(&mut self) -> bool {
        let Some(path) = &self.state_file else {
            return true;
        };
        if !self.engine.vips_mut().take_dirty() {
            return true;
        }
        match vip_state::save(path, &self.engine.vips_mut().allocations()) {
            Ok(()) => true,
            Err(error) => {
                warn!(
                    error = format!("{error:#}"),
                    "VIPs will not survive a restart"
                );
                false
            }
        }
    }
}

impl EngineReader for Mutex<Pipeline> {
    fn read(&self, read: &mut dyn FnMut(&Engine)) {
        read(self.lock().unwrap_or_else(|e| e.into_inner()).engine());
    }
}

/// The manifest directory reconciled once by a pipeline that writes nothing
/// (`status`, `check`, `explain`), with the source that read it.
pub fn load_manifests(clusterset: &ClustersetArgs) -> anyhow::Result<(Pipeline, ManifestSource)> {
    let manifests = &clusterset.manifests;
    anyhow::ensure!(
        manifests.is_dir(),
        "manifest directory {} does not exist (see --manifests)",
        manifests.display()
    );
    let mut pipeline = Pipeline::new(clusterset, None)?;
    let mut source = ManifestSource::new(manifests);
    pipeline.apply_initial(source.rescan(&HashSet::new()));
    Ok((pipeline, source))
}
