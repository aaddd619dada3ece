//! A running server's reconciler, reachable from the operations listener so
//! that `/debug/explain` reads the same engine and index that answer DNS.

use std::sync::{Arc, Mutex, OnceLock, Weak};

use hickory_proto::rr::{Name, RecordType};

use super::{Explanation, explain};
use crate::index::Index;
use crate::runtime::serve::Reconciler;

/// Where the source's task publishes its reconciler once it has one.
/// Weak: the reconciler holds this (through its outputs) and must not keep
/// itself alive.
#[derive(Default)]
pub struct Published(OnceLock<Weak<Mutex<Reconciler>>>);

impl Published {
    /// Publishes `reconciler` (the first one only: a server has one).
    pub fn set(&self, reconciler: &Arc<Mutex<Reconciler>>) {
        let _ = self.0.set(Arc::downgrade(reconciler));
    }

    /// Explains a question from the published reconciler and `index`; None
    /// before the source has built its reconciler, or after it stopped.
    pub fn explain(&self, index: &Index, name: &Name, rtype: RecordType) -> Option<Explanation> {
        let reconciler = self.0.get()?.upgrade()?;
        let reconciler = reconciler.lock().unwrap_or_else(|e| e.into_inner());
        Some(explain(reconciler.engine(), index, name, rtype))
    }
}
