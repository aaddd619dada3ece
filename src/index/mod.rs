//! The DNS view of the clusterset: one entry per imported service (sharing
//! the engine's `Import`), the zone's fixed names, and a cache of encoded
//! responses per name and type. Updated one service at a time; readers go
//! through a sharded map and never wait for a whole rebuild.

mod entry;
mod names;
mod records;
mod reverse;
mod reverse_answers;
pub mod serial;
mod zone;

use std::net::IpAddr;
use std::sync::atomic::{AtomicBool, AtomicU32, AtomicU64, Ordering};
use std::sync::{Arc, RwLock};

use dashmap::DashMap;
use hickory_proto::rr::rdata::{NS, TXT};
use hickory_proto::rr::{LowerName, Name, RData, Record, RecordType};
use tokio::sync::watch;
use tracing::warn;

pub use entry::{CacheSlot, ServiceEntry};
use entry::{Cached, ResponseCache};
pub use names::{Lookup, Owner, ReverseOwner, ServiceName, dashed};
pub use records::address_type;
use records::{ns_name, records_name, soa_record};
pub use reverse::ReverseZone;

use crate::model::import::Import;
use crate::model::{Hasher, IpFamily, ServiceKey};

/// Version of the MCS DNS schema served at `dns-version.<zone>`.
pub const DNS_SCHEMA_VERSION: &str = "1.0.0";
/// TTL of the `dns-version` TXT record.
pub const DNS_VERSION_TTL: u32 = 28800;
/// Most labels a name can have below the zone (`host.c1.c2.svc.ns.svc`).
const MAX_LABELS: usize = 6;

/// Most cached responses for names not under a service (fixed names and
/// unknown names); the cache starts over when full.
const MAX_OTHER_RESPONSES: usize = 100_000;
/// Most cached responses per service.
const MAX_SERVICE_RESPONSES: usize = 4096;
/// Longest cache key: a 255-byte name, type, class and variant.
const MAX_KEY: usize = 255 + 4 + 2;

/// The zone's names and records.
#[derive(Debug)]
pub struct Index {
    zone: Name,
    apex: LowerName,
    ttl: u32,
    cluster_targeting: bool,
    nameserver_addresses: Vec<IpAddr>,
    services: DashMap<Box<str>, Arc<ServiceEntry>, Hasher>,
    namespaces: DashMap<Box<str>, usize, Hasher>,
    fixed_cache: ResponseCache,
    /// Commits so far: a response computed before the latest commit is not
    /// stored (names outside services) or not served (negative answers).
    generation: AtomicU64,
    /// Updates and commits so far (see [`Self::version`]).
    version: AtomicU64,
    soa: RwLock<Record>,
    synced: AtomicBool,
    serial: AtomicU32,
    serials: watch::Sender<u32>,
    /// Where serials are kept across restarts (embedded mode).
    serial_file: Option<Arc<serial::SerialFile>>,
    reverse: reverse::ReverseMap,
}

impl Index {
    /// An empty index for `zone` (answers SERVFAIL until [`Self::set_synced`]).
    /// `cluster_targeting` makes `<cluster>.<svc>.<ns>.svc.<zone>` answer.
    pub fn new(zone: Name, ttl: u32, cluster_targeting: bool, serial: u32) -> Self {
        let zone = zone.to_lowercase();
        let apex_name = zone.clone();
        Self {
            apex: LowerName::new(&zone),
            zone,
            ttl,
            cluster_targeting,
            nameserver_addresses: Vec::new(),
            services: DashMap::default(),
            namespaces: DashMap::default(),
            fixed_cache: RwLock::default(),
            generation: AtomicU64::new(0),
            version: AtomicU64::new(0),
            soa: RwLock::new(soa_record(&apex_name, ttl, serial)),
            synced: AtomicBool::new(false),
            serial: AtomicU32::new(serial),
            serials: watch::Sender::new(serial),
            serial_file: None,
            reverse: reverse::ReverseMap::default(),
        }
    }

    /// Sets the addresses of `ns.dns.<zone>`, the target of the apex NS
    /// record (none: that name answers NODATA).
    #[must_use]
    pub fn with_nameserver_addresses(mut self, addresses: Vec<IpAddr>) -> Self {
        self.nameserver_addresses = addresses;
        self
    }

    /// This index, keeping in `file` a ceiling on the serials it serves
    /// (covering the current one now), so that a restart starts above them.
    #[must_use]
    pub fn with_serial_file(mut self, file: Option<Arc<serial::SerialFile>>) -> Self {
        if let Some(file) = &file {
            file.cover(self.serial.load(Ordering::Relaxed));
        }
        self.serial_file = file;
        self
    }

    /// This index, also answering PTR queries in `zones`.
    pub fn with_reverse_zones(mut self, zones: Vec<ReverseZone>) -> Self {
        self.reverse = reverse::ReverseMap::new(zones);
        self
    }

    /// The zone apex.
    pub fn zone(&self) -> &Name {
        &self.zone
    }

    /// Marks the first full sync of the sources done: queries get answers.
    pub fn set_synced(&self) {
        self.synced.store(true, Ordering::Release);
    }

    /// Whether the first full sync is done.
    pub fn is_synced(&self) -> bool {
        self.synced.load(Ordering::Acquire)
    }

    /// Number of services served.
    pub fn len(&self) -> usize {
        self.services.len()
    }

    /// Whether no service is served.
    pub fn is_empty(&self) -> bool {
        self.services.is_empty()
    }

    /// Resolves a (lower-cased) query name.
    pub fn lookup(&self, name: &LowerName) -> Lookup {
        if !self.apex.zone_of(name) {
            return self.reverse_lookup(name);
        }
        if !self.is_synced() {
            return Lookup::NotReady;
        }
        let mut buffer = [&[][..]; MAX_LABELS];
        let Some(labels) = self.relative_labels(name, &mut buffer) else {
            return Lookup::NxDomain;
        };
        let owner = match labels {
            [] => Some(Owner::Apex),
            [b"dns-version"] => Some(Owner::DnsVersion),
            [b"svc"] | [b"dns"] => Some(Owner::Empty),
            [b"ns", b"dns"] => Some(Owner::NameServer),
            [namespace, b"svc"] => std::str::from_utf8(namespace)
                .ok()
                .filter(|ns| self.namespaces.contains_key(*ns))
                .map(|_| Owner::Empty),
            [rest @ .., service, namespace, b"svc"] => {
                self.entry(service, namespace).and_then(|entry| {
                    names::service_name(&entry.import, rest, self.cluster_targeting)
                        .map(|which| Owner::Service(entry, which))
                })
            }
            _ => None,
        };
        owner.map_or(Lookup::NxDomain, Lookup::Found)
    }

    /// The records of `rtype` (`ANY`: all) at an existing name.
    pub fn records(&self, owner: &Owner, name: &Name, rtype: RecordType) -> Vec<Record> {
        let wants = |t: RecordType| records::wants(rtype, t);
        match owner {
            Owner::Apex => {
                let mut records = Vec::new();
                if wants(RecordType::SOA) {
                    records.push(self.soa());
                }
                if wants(RecordType::NS) {
                    records.push(Record::from_rdata(
                        self.zone.clone(),
                        self.ttl,
                        RData::NS(NS(ns_name(&self.zone))),
                    ));
                }
                records
            }
            Owner::DnsVersion if wants(RecordType::TXT) => {
                let txt = TXT::new(vec![DNS_SCHEMA_VERSION.to_owned()]);
                vec![Record::from_rdata(
                    name.clone(),
                    DNS_VERSION_TTL,
                    RData::TXT(txt),
                )]
            }
            Owner::NameServer => self
                .nameserver_addresses
                .iter()
                .filter(|ip| wants(address_type(IpFamily::of(ip))))
                .map(|ip| records::address_record(name, self.ttl, *ip))
                .collect(),
            Owner::DnsVersion | Owner::Empty => Vec::new(),
            Owner::Service(entry, which) => {
                records::service_records(entry, which, name, rtype, self.ttl)
            }
            Owner::Reverse(owner) => self.reverse_records(owner, name, rtype),
        }
    }

    /// Tells of every new serial (each commit), for NOTIFY.
    pub fn serial_changes(&self) -> watch::Receiver<u32> {
        self.serials.subscribe()
    }

    /// The zone's SOA record; its minimum (and TTL) is the negative-caching TTL.
    pub fn soa(&self) -> Record {
        self.soa.read().unwrap_or_else(|e| e.into_inner()).clone()
    }

    /// Changes with every update and commit, after it: a response taken
    /// from [`Self::cached`] after reading a version is current as long as
    /// the version still reads the same (the UDP workers keep copies so).
    pub fn version(&self) -> u64 {
        self.version.load(Ordering::Acquire)
    }

    /// A cached encoded response to `question` (the wire question section:
    /// a name without compression pointers, any case, then type and class),
    /// if one was stored. `variant` tells versions of the same response
    /// apart (0: complete; else a size it was cut to). The name is read from
    /// the wire, not decoded: this is the UDP fast path's one index lookup.
    pub fn cached(&self, question: &[u8], variant: u16) -> Option<Arc<[u8]>> {
        if !self.is_synced() {
            return None;
        }
        let mut buffer = [0u8; MAX_KEY];
        let key = cache_key(question, variant, &mut buffer)?;
        let read = |cache: &ResponseCache| {
            let cache = cache.read().unwrap_or_else(|e| e.into_inner());
            let cached = cache.get(key)?;
            let current = || self.generation.load(Ordering::Acquire);
            if cached.generation.is_some_and(|g| g != current()) {
                return None;
            }
            Some(cached.bytes.clone())
        };
        match self.service_of_wire(&question[..question.len() - 4]) {
            Some(entry) => read(&entry.cache),
            None => read(&self.fixed_cache),
        }
    }

    /// Where a response about `name` computed from now on may be stored.
    pub fn cache_slot(&self, name: &Name) -> CacheSlot {
        CacheSlot {
            // The generation first: a commit after it voids the slot.
            generation: self.generation.load(Ordering::Acquire),
            entry: self.service_of(name),
        }
    }

    /// Keeps an authoritative encoded response (records, NODATA or NXDOMAIN:
    /// `negative`, with the SOA) to reuse for the same question, in the
    /// `slot` taken before it was computed. It is served until the name's
    /// service changes (names under a service) or the next commit (all other
    /// names, and negative answers, whose SOA serial a commit changes), and
    /// never after, even if that change came while it was computed. A cache
    /// that reaches its bound starts over, so floods of unknown names cannot
    /// grow it without limit.
    pub fn store(
        &self,
        slot: &CacheSlot,
        question: &[u8],
        variant: u16,
        response: Arc<[u8]>,
        negative: bool,
    ) {
        let mut buffer = [0u8; MAX_KEY];
        let Some(key) = cache_key(question, variant, &mut buffer) else {
            return;
        };
        let (cache, bound) = match &slot.entry {
            Some(entry) => (&entry.cache, MAX_SERVICE_RESPONSES),
            None => (&self.fixed_cache, MAX_OTHER_RESPONSES),
        };
        let mut cache = cache.write().unwrap_or_else(|e| e.into_inner());
        // Checked under the lock that `commit` clears the other names under.
        if slot.entry.is_none() && slot.generation != self.generation.load(Ordering::Acquire) {
            return;
        }
        if cache.len() >= bound {
            cache.clear();
        }
        let cached = Cached {
            generation: (negative && slot.entry.is_some()).then_some(slot.generation),
            bytes: response,
        };
        cache.insert(key.into(), cached);
    }

    /// Replaces a service's import (None: the service is gone).
    pub fn update(&self, key: &ServiceKey, import: Option<Arc<Import>>) {
        self.replace(key, import);
        self.version.fetch_add(1, Ordering::AcqRel);
    }

    fn replace(&self, key: &ServiceKey, import: Option<Arc<Import>>) {
        let map_key = format!("{}.{}", key.name(), key.namespace())
            .to_ascii_lowercase()
            .into_boxed_str();
        let namespace: Box<str> = key.namespace().to_ascii_lowercase().into();
        let service = records_name(&self.zone, &format!("{map_key}.svc"));
        let Some(import) = import else {
            if let Some((_, old)) = self.services.remove(&map_key) {
                self.count_namespace(namespace, -1);
                if let Some(service) = &service {
                    self.reverse.update(service, Some(&old.import), None);
                }
            }
            return;
        };
        let Some(service) = service else {
            warn!(service = %key, "name or namespace is not a valid DNS label; not served");
            return;
        };
        let entry = Arc::new(ServiceEntry {
            import: import.clone(),
            cache: RwLock::default(),
        });
        let old = self.services.insert(map_key, entry);
        if old.is_none() {
            self.count_namespace(namespace, 1);
        }
        let old = old.as_ref().map(|e| &*e.import);
        self.reverse.update(&service, old, Some(&import));
    }

    /// Ends a batch of updates: a new SOA serial, the clock's unless that
    /// would not increase it (see [`serial::next`]), covered by the serial
    /// file (if any) before anything can serve it.
    pub fn commit(&self) {
        let now = serial::now();
        let last = self
            .serial
            .fetch_update(Ordering::Relaxed, Ordering::Relaxed, |last| {
                let next = serial::next(last, now);
                if let Some(file) = &self.serial_file {
                    file.cover(next);
                }
                Some(next)
            })
            .unwrap_or_else(|last| last);
        let serial = serial::next(last, now);
        *self.soa.write().unwrap_or_else(|e| e.into_inner()) =
            soa_record(&self.zone, self.ttl, serial);
        self.serials.send_replace(serial);
        let mut fixed = self.fixed_cache.write().unwrap_or_else(|e| e.into_inner());
        self.generation.fetch_add(1, Ordering::AcqRel);
        fixed.clear();
        drop(fixed);
        self.version.fetch_add(1, Ordering::AcqRel);
    }

    /// The service entry of `<service>.<namespace>` (labels in any case).
    fn entry(&self, service: &[u8], namespace: &[u8]) -> Option<Arc<ServiceEntry>> {
        let mut key = [0u8; 2 * 63 + 1];
        let len = service.len() + 1 + namespace.len();
        let key = key.get_mut(..len)?;
        key[..service.len()].copy_from_slice(service);
        key[service.len()] = b'.';
        key[service.len() + 1..].copy_from_slice(namespace);
        key.make_ascii_lowercase();
        let key = std::str::from_utf8(key).ok()?;
        self.services.get(key).map(|e| e.clone())
    }

    /// The service a name lies under (`…<svc>.<ns>.svc.<zone>`, any case).
    fn service_of(&self, name: &Name) -> Option<Arc<ServiceEntry>> {
        self.service_under(name.iter().rev())
    }

    /// [`Self::service_of`] a name in wire form (length-prefixed labels up
    /// to the root's empty one, no compression pointers); None for any other
    /// bytes.
    fn service_of_wire(&self, name: &[u8]) -> Option<Arc<ServiceEntry>> {
        // Where each label starts: a name of 255 bytes has at most 127.
        let mut starts = [0u8; 128];
        let (mut count, mut at) = (0, 0);
        loop {
            let len = usize::from(*name.get(at)?);
            if len == 0 {
                break;
            }
            if len & 0xc0 != 0 || count == starts.len() {
                return None;
            }
            starts[count] = u8::try_from(at).ok()?;
            count += 1;
            at += 1 + len;
        }
        if at + 1 != name.len() {
            return None;
        }
        self.service_under(starts[..count].iter().rev().map(|&start| {
            let start = usize::from(start);
            &name[start + 1..start + 1 + usize::from(name[start])]
        }))
    }

    /// The service whose labels `labels` (rightmost first) lie under.
    fn service_under<'a>(
        &self,
        mut labels: impl Iterator<Item = &'a [u8]>,
    ) -> Option<Arc<ServiceEntry>> {
        for zone_label in self.zone.iter().rev() {
            if !labels.next()?.eq_ignore_ascii_case(zone_label) {
                return None;
            }
        }
        if !labels.next()?.eq_ignore_ascii_case(b"svc") {
            return None;
        }
        let namespace = labels.next()?;
        self.entry(labels.next()?, namespace)
    }

    /// The labels of `name` below the zone, leftmost first; None if too many.
    fn relative_labels<'a>(
        &self,
        name: &'a LowerName,
        buffer: &'a mut [&'a [u8]; MAX_LABELS],
    ) -> Option<&'a [&'a [u8]]> {
        let count = usize::from(name.num_labels() - self.apex.num_labels());
        if count > MAX_LABELS {
            return None;
        }
        for (slot, label) in buffer.iter_mut().zip(name.iter().take(count)) {
            *slot = label;
        }
        Some(&buffer[..count])
    }

    fn count_namespace(&self, namespace: Box<str>, delta: isize) {
        let mut count = self.namespaces.entry(namespace.clone()).or_insert(0);
        *count = count.saturating_add_signed(delta);
        let gone = *count == 0;
        drop(count);
        if gone {
            self.namespaces.remove(&namespace);
        }
    }
}

/// The cache key of a response: `question` with its name lower-cased (type
/// and class kept), then `variant`, in `buffer`.
fn cache_key<'b>(question: &[u8], variant: u16, buffer: &'b mut [u8; MAX_KEY]) -> Option<&'b [u8]> {
    let name_end = question.len().checked_sub(4)?;
    let key = buffer.get_mut(..question.len() + 2)?;
    key[..question.len()].copy_from_slice(question);
    key[..name_end].make_ascii_lowercase();
    key[question.len()..].copy_from_slice(&variant.to_be_bytes());
    Some(key)
}

#[cfg(test)]
pub(crate) mod tests {
    use std::str::FromStr;

    use hickory_proto::serialize::binary::BinEncodable;

    use super::*;
    use crate::engine::aggregate::tests::{export, service, slice};
    use crate::engine::{Engine, EngineSettings};
    use crate::model::{Change, Object, ServiceKind};

    /// An index over `web.shop` (ClusterSetIP, port http) and `db.shop`
    /// (headless; `db-0` and a dashed-IP pod in cluster `east`, one pod in
    /// cluster `eu.west`, a two-label id).
    pub(crate) fn demo_index(cluster_targeting: bool) -> Index {
        let index = Index::new(
            Name::from_str("clusterset.local.").unwrap(),
            5,
            cluster_targeting,
            1,
        );
        let mut engine = Engine::new(EngineSettings::default());
        let web = ServiceKey::new("shop", "web");
        let db = ServiceKey::new("shop", "db");
        let mut headless = service(&[], &[("pg", 5432)]);
        Arc::make_mut(&mut headless.spec).kind = ServiceKind::Headless;
        Arc::make_mut(&mut headless.spec).ip_families = vec![crate::model::IpFamily::IPv4];
        let upsert = |cluster: &str, key: &ServiceKey, object| {
            Change::Upsert(cluster.into(), key.clone(), object)
        };
        let changes = vec![
            upsert(
                "east",
                &web,
                Object::Service(Arc::new(service(&["10.0.0.1"], &[("http", 80)]))),
            ),
            upsert("east", &web, Object::Export(export(1).into())),
            upsert("east", &db, Object::Service(Arc::new(headless.clone()))),
            upsert("east", &db, Object::Export(export(1).into())),
            upsert(
                "east",
                &db,
                Object::Slice(
                    "s".into(),
                    slice(&[("10.1.0.1", Some("db-0"), true), ("10.1.0.2", None, true)]),
                ),
            ),
            upsert("eu.west", &db, Object::Service(Arc::new(headless))),
            upsert("eu.west", &db, Object::Export(export(2).into())),
            upsert(
                "eu.west",
                &db,
                Object::Slice("s".into(), slice(&[("10.2.0.1", Some("db-0"), true)])),
            ),
        ];
        for (key, import) in engine.apply(changes) {
            index.update(&key, import);
        }
        index.commit();
        index.set_synced();
        index
    }

    fn find(index: &Index, name: &str) -> Option<Owner> {
        match index.lookup(&LowerName::from_str(name).unwrap()) {
            Lookup::Found(owner) => Some(owner),
            Lookup::NxDomain => None,
            other => panic!("{name}: {other:?}"),
        }
    }

    fn which(index: &Index, name: &str) -> Option<ServiceName> {
        match find(index, name)? {
            Owner::Service(_, which) => Some(which),
            other => panic!("{name}: not a service name: {other:?}"),
        }
    }

    #[test]
    fn fixed_names_and_empty_non_terminals() {
        let index = demo_index(false);
        assert!(matches!(
            find(&index, "clusterset.local."),
            Some(Owner::Apex)
        ));
        assert!(matches!(
            find(&index, "DNS-Version.clusterset.local."),
            Some(Owner::DnsVersion)
        ));
        assert!(matches!(
            find(&index, "svc.clusterset.local."),
            Some(Owner::Empty)
        ));
        assert!(matches!(
            find(&index, "shop.svc.clusterset.local."),
            Some(Owner::Empty)
        ));
        assert!(matches!(
            find(&index, "dns.clusterset.local."),
            Some(Owner::Empty)
        ));
        assert!(matches!(
            find(&index, "ns.dns.clusterset.local."),
            Some(Owner::NameServer)
        ));
        assert!(find(&index, "other.svc.clusterset.local.").is_none());
        assert!(find(&index, "x.clusterset.local.").is_none());
        assert!(matches!(
            index.lookup(&LowerName::from_str("example.org.").unwrap()),
            Lookup::NotInZone
        ));
    }

    /// RFC 1034 §4.2.1: the NS target exists; its A/AAAA records are the
    /// configured addresses, NODATA (no records, not NXDOMAIN) without any.
    #[test]
    fn the_ns_target_answers_its_addresses_or_nodata() {
        let ns = Name::from_str("ns.dns.clusterset.local.").unwrap();
        let owner = find(&demo_index(false), "NS.dns.clusterset.local.").expect("it exists");
        assert!(
            demo_index(false)
                .records(&owner, &ns, RecordType::A)
                .is_empty()
        );
        let addresses = vec!["10.96.0.53".parse().unwrap(), "fd00::53".parse().unwrap()];
        let index = demo_index(false).with_nameserver_addresses(addresses);
        let data = |rtype| -> Vec<String> {
            let records = index.records(&Owner::NameServer, &ns, rtype);
            records.iter().map(|r| r.data.to_string()).collect()
        };
        assert_eq!(data(RecordType::A), ["10.96.0.53"]);
        assert_eq!(data(RecordType::AAAA), ["fd00::53"]);
        assert_eq!(data(RecordType::ANY).len(), 2);
        assert!(data(RecordType::TXT).is_empty());
    }

    #[test]
    fn names_under_services() {
        let index = demo_index(false);
        let q = |n: &str| which(&index, &format!("{n}.shop.svc.clusterset.local."));
        assert_eq!(q("web"), Some(ServiceName::Service));
        assert_eq!(q("_http._tcp.web"), Some(ServiceName::Srv(0)));
        assert_eq!(q("_tcp.web"), Some(ServiceName::Empty));
        assert_eq!(q("_http._udp.web"), None);
        assert_eq!(q("_grpc._tcp.web"), None);
        assert_eq!(q("east.web"), None, "reserved without cluster targeting");
        // RFC 8020, RFC 4592 §2.2.2: a name with per-pod names below exists.
        assert_eq!(q("east.db"), Some(ServiceName::Empty));
        assert_eq!(q("eu.west.db"), Some(ServiceName::Empty));
        assert_eq!(q("west.db"), Some(ServiceName::Empty), "tail of eu.west");
        assert_eq!(q("eu.db"), None, "head of eu.west has nothing below");
        assert_eq!(q("north.db"), None);
        assert_eq!(q("x.west.db"), None);
        let pod = |ip: &str| vec![ip.parse::<std::net::IpAddr>().unwrap()];
        assert_eq!(
            q("db-0.east.db"),
            Some(ServiceName::Pod(0, pod("10.1.0.1")))
        );
        assert_eq!(
            q("10-1-0-2.east.db"),
            Some(ServiceName::Pod(0, pod("10.1.0.2")))
        );
        assert_eq!(
            q("db-0.eu.west.db"),
            Some(ServiceName::Pod(1, pod("10.2.0.1")))
        );
        assert_eq!(q("db-1.east.db"), None);
        assert_eq!(q("db-0.west.db"), None);
        assert_eq!(
            q("db-0.east.web"),
            None,
            "no per-pod names for ClusterSetIP"
        );

        let targeted = demo_index(true);
        let t = |n: &str| which(&targeted, &format!("{n}.shop.svc.clusterset.local."));
        assert_eq!(t("east.web"), Some(ServiceName::Cluster(0)));
        assert_eq!(t("eu.west.db"), Some(ServiceName::Cluster(1)));
        assert_eq!(t("north.web"), None);
        assert_eq!(t("west.db"), Some(ServiceName::Empty));
        assert_eq!(t("west.web"), None);
    }

    /// The fast path's reading of a wire name finds the service the
    /// decoded name lies under, in any case, and nothing for bytes that are
    /// not one whole name.
    #[test]
    fn a_wire_name_lies_under_the_service_its_decoded_name_does() {
        let index = demo_index(false);
        let names = [
            "web.shop.svc.clusterset.local.",
            "WEB.Shop.SVC.ClusterSet.LOCAL.",
            "db-0.east.db.shop.svc.clusterset.local.",
            "a.b.c.d.e.f.g.db.shop.svc.clusterset.local.",
            "shop.svc.clusterset.local.",
            "clusterset.local.",
            "web.shop.svc.example.local.",
            "nope.shop.svc.clusterset.local.",
            "web.shop.pod.clusterset.local.",
            ".",
        ];
        for text in names {
            let name = Name::from_str(text).unwrap();
            let wire = BinEncodable::to_bytes(&name).unwrap();
            let same = match (index.service_of_wire(&wire), index.service_of(&name)) {
                (Some(a), Some(b)) => Arc::ptr_eq(&a, &b),
                (a, b) => a.is_none() && b.is_none(),
            };
            assert!(same, "{text}");
        }
        assert!(
            index
                .service_of(&Name::from_str("web.shop.svc.clusterset.local.").unwrap())
                .is_some()
        );
        let wire = b"\x03web\x04shop\x03svc\x0aclusterset\x05local\x00";
        for bad in [&wire[..wire.len() - 1], &wire[1..], b"\x03web\xc0\x0c", b""] {
            assert!(index.service_of_wire(bad).is_none(), "{bad:?}");
        }
        let mut trailing = wire.to_vec();
        trailing.push(0);
        assert!(
            index.service_of_wire(&trailing).is_none(),
            "a byte after the name"
        );
    }

    #[test]
    fn cached_responses_follow_their_service_and_the_serial() {
        let index = demo_index(false);
        let web = Name::from_str("Web.shop.svc.clusterset.local.").unwrap();
        let question = b"\x03Web\x04shop\x03svc\x0aclusterset\x05local\x00\x00\x01\x00\x01";
        let slot = index.cache_slot(&web);
        index.store(&slot, question, 0, Arc::from(&b"full"[..]), false);
        index.store(&slot, question, 512, Arc::from(&b"cut"[..]), false);
        let lower = b"\x03web\x04shop\x03svc\x0aclusterset\x05local\x00\x00\x01\x00\x01";
        assert_eq!(
            index.cached(lower, 0).as_deref(),
            Some(&b"full"[..]),
            "any case"
        );
        assert_eq!(index.cached(lower, 512).as_deref(), Some(&b"cut"[..]));
        let mut other_type = *lower;
        other_type[question.len() - 3] = 28;
        assert!(
            index.cached(&other_type, 0).is_none(),
            "type is part of the key"
        );
        // A new import for the service drops its responses; a commit drops the others.
        let apex = Name::from_str("clusterset.local.").unwrap();
        let soa_question = b"\x0aclusterset\x05local\x00\x00\x06\x00\x01";
        index.store(
            &index.cache_slot(&apex),
            soa_question,
            0,
            Arc::from(&b"soa"[..]),
            false,
        );
        let web_key = ServiceKey::new("shop", "web");
        let import = index.entry(b"web", b"shop").unwrap().import.clone();
        index.update(&web_key, Some(import));
        assert!(index.cached(lower, 0).is_none());
        assert!(index.cached(soa_question, 0).is_some());
        index.commit();
        assert!(index.cached(soa_question, 0).is_none());
    }

    /// Issue 14, fault 0: a response computed before an update and stored
    /// after it must not be served for the new state.
    #[test]
    fn a_response_computed_before_an_update_is_never_served_after_it() {
        let index = demo_index(false);
        let web = Name::from_str("web.shop.svc.clusterset.local.").unwrap();
        let question = b"\x03web\x04shop\x03svc\x0aclusterset\x05local\x00\x00\x01\x00\x01";
        let slot = index.cache_slot(&web);
        let import = index.entry(b"web", b"shop").unwrap().import.clone();
        index.update(&ServiceKey::new("shop", "web"), Some(import));
        index.store(&slot, question, 0, Arc::from(&b"stale"[..]), false);
        assert!(index.cached(question, 0).is_none(), "stale response served");
        index.store(
            &index.cache_slot(&web),
            question,
            0,
            Arc::from(&b"new"[..]),
            false,
        );
        assert_eq!(index.cached(question, 0).as_deref(), Some(&b"new"[..]));

        // Names outside services: a commit in between voids the slot.
        let ns = Name::from_str("shop.svc.clusterset.local.").unwrap();
        let ns_question = b"\x04shop\x03svc\x0aclusterset\x05local\x00\x00\x01\x00\x01";
        let slot = index.cache_slot(&ns);
        index.commit();
        index.store(&slot, ns_question, 0, Arc::from(&b"stale"[..]), false);
        assert!(
            index.cached(ns_question, 0).is_none(),
            "stale response served"
        );
        index.store(
            &index.cache_slot(&ns),
            ns_question,
            0,
            Arc::from(&b"new"[..]),
            false,
        );
        assert_eq!(index.cached(ns_question, 0).as_deref(), Some(&b"new"[..]));
    }
}
