//! The DNS view of the clusterset: every name the zone owns and its records,
//! updated one service at a time and read lock-free-ish by the DNS server
//! (a sharded map: readers wait only for a writer on the same shard).

mod node;
pub mod records;

use std::collections::HashSet;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicU32, Ordering};

use dashmap::DashMap;
use hickory_proto::rr::rdata::{NS, SOA, TXT};
use hickory_proto::rr::{LowerName, Name, RData, Record, RecordType};

pub use node::Node;
use records::Naming;

use crate::engine::Import;
use crate::model::ServiceKey;

/// Version of the MCS DNS schema served at `dns-version.<zone>`.
pub const DNS_SCHEMA_VERSION: &str = "1.0.0";
/// TTL of the `dns-version` TXT record.
pub const DNS_VERSION_TTL: u32 = 28800;

/// What a query name resolves to.
#[derive(Clone, Debug)]
pub enum Lookup {
    /// Outside the zone.
    NotInZone,
    /// In the zone, but the sources have not synced yet.
    NotReady,
    /// The name exists; its node may have no record of the asked type (NODATA).
    Found(Arc<Node>),
    /// The name does not exist.
    NxDomain,
}

/// The zone's names and records.
#[derive(Debug)]
pub struct Index {
    naming: Naming,
    apex: LowerName,
    nodes: DashMap<LowerName, Arc<Node>>,
    owned: DashMap<ServiceKey, Vec<LowerName>>,
    namespaces: DashMap<Arc<str>, usize>,
    synced: AtomicBool,
    serial: AtomicU32,
}

impl Index {
    /// An index for `zone` with the apex, `dns-version` and `svc` names in place.
    pub fn new(zone: Name, ttl: u32, cluster_targeting: bool, serial: u32) -> Self {
        let zone = zone.to_lowercase();
        let naming = Naming {
            zone: zone.clone(),
            ttl,
            cluster_targeting,
        };
        let index = Self {
            apex: LowerName::new(&zone),
            naming,
            nodes: DashMap::new(),
            owned: DashMap::new(),
            namespaces: DashMap::new(),
            synced: AtomicBool::new(false),
            serial: AtomicU32::new(serial),
        };
        let ns = Record::from_rdata(zone.clone(), ttl, RData::NS(NS(index.ns_name())));
        index.put(&zone, Node::new(vec![index.soa(), ns]));
        let version = child(&zone, "dns-version");
        let txt = TXT::new(vec![DNS_SCHEMA_VERSION.to_owned()]);
        index.put(
            &version,
            Node::new(vec![Record::from_rdata(
                version.clone(),
                DNS_VERSION_TTL,
                RData::TXT(txt),
            )]),
        );
        index.put(&child(&zone, "svc"), Node::default());
        index
    }

    /// The zone apex.
    pub fn zone(&self) -> &Name {
        &self.naming.zone
    }

    /// Marks the first full sync of the sources done: queries get answers.
    pub fn set_synced(&self) {
        self.synced.store(true, Ordering::Release);
    }

    /// Whether the first full sync is done.
    pub fn is_synced(&self) -> bool {
        self.synced.load(Ordering::Acquire)
    }

    /// Resolves a (lower-cased) query name.
    pub fn lookup(&self, name: &LowerName) -> Lookup {
        if !self.apex.zone_of(name) {
            return Lookup::NotInZone;
        }
        if !self.is_synced() {
            return Lookup::NotReady;
        }
        match self.nodes.get(name) {
            Some(node) => Lookup::Found(node.clone()),
            None => Lookup::NxDomain,
        }
    }

    /// The zone's SOA record, with the negative-caching TTL as minimum.
    pub fn soa(&self) -> Record {
        let zone = &self.naming.zone;
        let ttl = self.naming.ttl;
        let soa = SOA::new(
            self.ns_name(),
            child(zone, "hostmaster"),
            self.serial.load(Ordering::Relaxed),
            7200,
            1800,
            86400,
            ttl,
        );
        Record::from_rdata(zone.clone(), ttl, RData::SOA(soa))
    }

    /// Replaces the names of one service with those of its new import (None: gone).
    pub fn update(&self, key: &ServiceKey, import: Option<&Import>) {
        let new: Vec<(Name, Node)> = import
            .map(|i| records::service_nodes(&self.naming, key, i))
            .unwrap_or_default();
        let new_names: Vec<LowerName> = new.iter().map(|(n, _)| LowerName::new(n)).collect();
        let keep: HashSet<&LowerName> = new_names.iter().collect();
        let old = self.owned.remove(key).map(|(_, names)| names);
        for name in old.iter().flatten().filter(|n| !keep.contains(n)) {
            self.nodes.remove(name);
        }
        for (name, node) in new {
            self.put(&name, node);
        }
        self.count_namespace(key, old.is_some(), import.is_some());
        if import.is_some() {
            self.owned.insert(key.clone(), new_names);
        }
    }

    /// Ends a batch of updates: a new SOA serial.
    pub fn commit(&self) {
        self.serial.fetch_add(1, Ordering::Relaxed);
        let ns = self
            .nodes
            .get(&self.apex)
            .map(|n| n.clone())
            .unwrap_or_default();
        let mut apex = Node::new(vec![self.soa()]);
        for record in ns.records(RecordType::NS) {
            apex.push(record.clone());
        }
        self.nodes.insert(self.apex.clone(), Arc::new(apex));
    }

    /// Number of names served (including the fixed ones).
    pub fn len(&self) -> usize {
        self.nodes.len()
    }

    /// Whether no name is served (never: the apex is always there).
    pub fn is_empty(&self) -> bool {
        self.nodes.is_empty()
    }

    fn put(&self, name: &Name, node: Node) {
        self.nodes.insert(LowerName::new(name), Arc::new(node));
    }

    fn ns_name(&self) -> Name {
        child(&self.naming.zone, "ns.dns")
    }

    /// Keeps `<ns>.svc.<zone>` an empty non-terminal while the namespace has an import.
    fn count_namespace(&self, key: &ServiceKey, had: bool, has: bool) {
        let name = LowerName::new(&child(&self.naming.zone, &format!("{}.svc", key.namespace)));
        if has && !had {
            let mut count = self.namespaces.entry(key.namespace.clone()).or_insert(0);
            *count += 1;
            if *count == 1 {
                self.nodes.entry(name).or_default();
            }
        } else if had && !has {
            let gone = self
                .namespaces
                .get_mut(&key.namespace)
                .map(|mut c| {
                    *c -= 1;
                    *c == 0
                })
                .unwrap_or(false);
            if gone {
                self.namespaces.remove(&key.namespace);
                self.nodes.remove(&name);
            }
        }
    }
}

fn child(parent: &Name, labels: &str) -> Name {
    records::child(parent, labels).expect("fixed labels are valid DNS")
}
