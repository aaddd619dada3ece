//! One imported service as the index keeps it: the import and the encoded
//! responses computed from it (ARCHITECTURE.md, "A response cache in the
//! index"), and where a response being computed may be stored.

use std::collections::HashMap;
use std::sync::{Arc, RwLock};

use crate::model::Hasher;
use crate::model::import::Import;

/// Encoded responses by question (name lower-cased, type and class as asked).
pub(super) type ResponseCache = RwLock<HashMap<Box<[u8]>, Cached, Hasher>>;

/// A cached response.
#[derive(Debug)]
pub(super) struct Cached {
    /// For a response that carries the SOA (a negative answer), the commit
    /// generation it was computed in: its serial is void after the next one.
    pub(super) generation: Option<u64>,
    pub(super) bytes: Arc<[u8]>,
}
/// One imported service as DNS sees it.
#[derive(Debug)]
pub struct ServiceEntry {
    /// The import (shared with the engine).
    pub import: Arc<Import>,
    pub(super) cache: ResponseCache,
}

/// Where a response may be cached: taken before the response is computed
/// (see [`Index::cache_slot`]), so that an update in between can only make
/// the stored response unreachable, never serve it for the new state.
#[derive(Clone, Debug)]
pub struct CacheSlot {
    /// The entry of the service the name lies under, as it was then; None:
    /// the cache of all other names.
    pub(super) entry: Option<Arc<ServiceEntry>>,
    /// The commit generation then (the SOA serial changes with each).
    pub(super) generation: u64,
}
