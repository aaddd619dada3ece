//! A running server's engine, reachable from the operations listener so that
//! `/debug/explain` reads the same engine and index that answer DNS.

use std::sync::{OnceLock, Weak};

use hickory_proto::rr::{Name, RecordType};

use super::{Explanation, explain};
use crate::engine::EngineReader;
use crate::index::Index;

/// Where the source's task publishes its engine once it has one. Weak: the
/// engine's holder holds this (through its outputs) and must not keep itself
/// alive.
#[derive(Default)]
pub struct Published(OnceLock<Weak<dyn EngineReader>>);

impl Published {
    /// Publishes `reader` (the first one only: a server has one engine).
    pub fn set(&self, reader: Weak<dyn EngineReader>) {
        let _ = self.0.set(reader);
    }

    /// Explains a question from the published engine and `index`; None
    /// before the source has built its engine, or after it stopped.
    pub fn explain(&self, index: &Index, name: &Name, rtype: RecordType) -> Option<Explanation> {
        let reader = self.0.get()?.upgrade()?;
        let mut explanation = None;
        reader.read(&mut |engine| explanation = Some(explain(engine, index, name, rtype)));
        explanation
    }
}
