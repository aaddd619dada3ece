//! The apply loop: what every batch of changes from a source goes through.

use std::path::PathBuf;
use std::sync::{Arc, Mutex};
use std::time::Instant;

use tracing::warn;

use crate::engine::{Engine, EngineReader, EngineSettings, Note};
use crate::explain::shared::Published;
use crate::index::Index;
use crate::model::Change;
use crate::ops::metrics::Metrics;
use crate::runtime::vip_state;

/// What the apply loop is built from: one of the two halves of the
/// assembly (`runtime/assembly.rs`), the same for every command.
pub struct PipelineSettings {
    /// The engine's settings, as the mode sets them.
    pub engine: EngineSettings,
    /// The DNS view the engine's imports go to.
    pub index: Arc<Index>,
    /// Embedded mode: the file VIP allocations are restored from and, when
    /// serving, saved to (Kubernetes mode: none, VIPs come from the broker).
    pub state_file: Option<PathBuf>,
}

/// What only a serving pipeline keeps current.
pub struct Serving {
    /// Metrics to keep current.
    pub metrics: Arc<Metrics>,
    /// Where the pipeline's engine is published for `/debug/explain`.
    pub published: Arc<Published>,
}

/// The one apply loop both sources feed: changes go through the engine into
/// the index (one service at a time), and the VIP state file is kept current.
pub struct Pipeline {
    engine: Engine,
    index: Arc<Index>,
    serving: Option<Serving>,
    state_file: Option<PathBuf>,
}

/// Services left out by a cap named in the log per batch.
const LIMITED_LINES: usize = 10;

impl Pipeline {
    /// An engine set up from `settings`, with the VIPs saved in the state
    /// file (if any) restored. With `serving`, metrics are kept and VIP
    /// allocations saved; without (`status`, `explain`, `check`), the index
    /// is fed but nothing is written.
    pub fn new(settings: PipelineSettings, serving: Option<Serving>) -> anyhow::Result<Self> {
        let mut engine = Engine::new(settings.engine);
        if let Some(path) = &settings.state_file {
            let skipped = engine.vips_mut().restore(vip_state::load(path)?);
            for (key, ip) in skipped {
                warn!(service = %key, %ip, file = %path.display(), "saved VIP is outside the pools or taken twice; dropped");
            }
        }
        Ok(Self {
            engine,
            index: settings.index,
            state_file: settings.state_file.filter(|_| serving.is_some()),
            serving,
        })
    }

    /// Applies one batch of changes (a completed sync of the source).
    pub fn apply(&mut self, changes: Vec<Change>) {
        let started = Instant::now();
        let updates = self.engine.apply(changes);
        for (key, import) in &updates {
            self.index.update(key, import.clone());
        }
        if !updates.is_empty() {
            self.index.commit();
        }
        let saved = self.persist();
        let mut complete = saved;
        let mut limited = 0;
        for note in self.engine.take_notes() {
            complete &= !matches!(note, Note::PoolExhausted { .. });
            if matches!(note, Note::Limited { .. }) {
                // A flood leaves out as many services as it sent: a few
                // lines name some, the rest is a count (and the gauge).
                limited += 1;
                if limited > LIMITED_LINES {
                    continue;
                }
            }
            warn!("{note}");
        }
        if limited > LIMITED_LINES {
            let more = limited - LIMITED_LINES;
            warn!(
                more,
                "more services left out by a cap (clusterset_dns_limited counts them)"
            );
        }
        if let Some(serving) = &self.serving {
            serving
                .metrics
                .reconciled(&self.engine, started.elapsed(), complete);
        }
    }

    /// Takes in changes that arrive before the first full state: nothing is
    /// served yet, so nothing is reconciled until [`Pipeline::apply_initial`]
    /// (see [`Engine::load`]).
    pub fn load(&mut self, changes: Vec<Change>) {
        self.engine.load(changes);
    }

    /// Applies the first full state of the sources: saved VIPs no import
    /// claimed are released, and the index starts answering.
    pub fn apply_initial(&mut self, changes: Vec<Change>) {
        self.apply(changes);
        self.engine.release_unclaimed_vips();
        self.persist();
        self.index.commit();
        self.index.set_synced();
    }

    /// Shares the pipeline between the source's task and the writers,
    /// and publishes it for `/debug/explain`.
    pub fn shared(self) -> Arc<Mutex<Self>> {
        let published = self.serving.as_ref().map(|s| s.published.clone());
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

    /// The index the engine feeds.
    pub fn index(&self) -> &Arc<Index> {
        &self.index
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
