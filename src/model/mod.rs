//! The compact, Kubernetes-independent facts the engine reconciles.
//!
//! Sources convert Services, ServiceExports and EndpointSlices into these types
//! (see `k8s::convert`), so the engine and index never hold whole API objects.

pub(crate) mod backoff;
pub(crate) mod conditions;
pub mod derived;
pub(crate) mod import;
pub(crate) mod intern;
pub(crate) mod limits;
pub(crate) mod port;
pub(crate) mod trust;

use std::borrow::Cow;
use std::collections::BTreeMap;
use std::fmt;
use std::net::IpAddr;
use std::sync::{Arc, LazyLock, Mutex};

use serde::{Deserialize, Serialize};
use smallvec::SmallVec;

use crate::model::intern::{Interner, share};
use crate::model::port::ServicePort;

/// FNV-1a of `bytes`: a hash that is the same in every process and release
/// (VIP placement and object names depend on it).
pub fn stable_hash(bytes: impl IntoIterator<Item = u8>) -> u64 {
    bytes.into_iter().fold(0xcbf2_9ce4_8422_2325, |h, b| {
        (h ^ u64::from(b)).wrapping_mul(0x0000_0100_0000_01b3)
    })
}

/// ServiceExport annotation (`"true"`/`"false"`): give the import clusterset VIPs.
pub const ANNOTATION_CLUSTERSET_IP: &str = "clusterset-dns.io/use-clusterset-ip";
/// ServiceExport annotation (`"true"`/`"false"`): EndpointSlices of a ClusterIP
/// service carry pod IPs (else the Service's ClusterIPs).
pub const ANNOTATION_POD_IPS: &str = "clusterset-dns.io/use-pod-ips";

/// Whether `s` is a lower-case DNS label as Kubernetes names are (RFC 1123
/// §2.1): 1 to 63 letters, digits and `-`, not starting or ending with `-`.
pub fn is_dns_label(s: &str) -> bool {
    (1..=63).contains(&s.len())
        && s.bytes()
            .all(|b| b.is_ascii_lowercase() || b.is_ascii_digit() || b == b'-')
        && !s.starts_with('-')
        && !s.ends_with('-')
}

/// True when `name` can be a cluster id: a lower-case RFC 1123 DNS subdomain of at most two labels.
pub fn is_valid_cluster_id(name: &str) -> bool {
    name.split('.').count() <= 2 && name.split('.').all(is_dns_label)
}

/// The hasher of the process's maps and sets: foldhash, several times faster
/// than the standard library's SipHash on the short names and keys they hold,
/// and seeded per process like it.
pub type Hasher = foldhash::fast::RandomState;

/// A few addresses (usually one), kept inline.
pub type Ips = SmallVec<[IpAddr; 1]>;

/// A member cluster's id (an RFC 1123 name; one or two DNS labels).
pub type ClusterId = Arc<str>;

/// The namespace and name that make exports of several clusters one service.
///
/// One pointer to the process-wide copy of the pair ([`ServiceKey::new`]):
/// every fact, store, map and queue entry of a clusterset names a service,
/// millions of keys at 110k services, where two shared strings took four
/// words each (`bench/README.md`). Compared, hashed, ordered and serialized
/// by the names, as the pair was.
#[derive(Clone)]
pub struct ServiceKey(Arc<KeyNames>);

/// What a [`ServiceKey`] points at.
#[derive(Clone, Debug, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize, Deserialize)]
struct KeyNames {
    /// Namespace of the Service and ServiceExport.
    namespace: Arc<str>,
    /// Name of the Service and ServiceExport.
    name: Arc<str>,
}

impl ServiceKey {
    /// The key of service `name` in `namespace`: the process-wide copy, whose
    /// strings are shared too ([`shared_name`]).
    pub fn new(namespace: &str, name: &str) -> Self {
        static KEYS: LazyLock<Mutex<Interner<KeyNames>>> = LazyLock::new(Default::default);
        let mut keys = KEYS.lock().unwrap_or_else(|e| e.into_inner());
        // Found by its names (hashed as `KeyNames` hashes them): a key is
        // built per watch event, and looking it up must not build one.
        let is = |k: &KeyNames| *k.namespace == *namespace && *k.name == *name;
        Self(keys.find(&(namespace, name), is, || {
            Arc::new(KeyNames {
                namespace: shared_name(namespace),
                name: shared_name(name),
            })
        }))
    }

    /// Namespace of the Service and ServiceExport.
    pub fn namespace(&self) -> &Arc<str> {
        &self.0.namespace
    }

    /// Name of the Service and ServiceExport.
    pub fn name(&self) -> &Arc<str> {
        &self.0.name
    }
}

impl PartialEq for ServiceKey {
    fn eq(&self, other: &Self) -> bool {
        Arc::ptr_eq(&self.0, &other.0) || self.0 == other.0
    }
}

impl Eq for ServiceKey {}

impl std::hash::Hash for ServiceKey {
    fn hash<H: std::hash::Hasher>(&self, state: &mut H) {
        self.0.hash(state);
    }
}

impl PartialOrd for ServiceKey {
    fn partial_cmp(&self, other: &Self) -> Option<std::cmp::Ordering> {
        Some(self.cmp(other))
    }
}

impl Ord for ServiceKey {
    fn cmp(&self, other: &Self) -> std::cmp::Ordering {
        self.0.cmp(&other.0)
    }
}

impl fmt::Debug for ServiceKey {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("ServiceKey")
            .field("namespace", self.namespace())
            .field("name", self.name())
            .finish()
    }
}

impl Serialize for ServiceKey {
    fn serialize<S: serde::Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
        self.0.serialize(serializer)
    }
}

impl<'de> Deserialize<'de> for ServiceKey {
    fn deserialize<D: serde::Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        let names = KeyNames::deserialize(deserializer)?;
        Ok(Self::new(&names.namespace, &names.name))
    }
}

/// The process-wide copy of a namespace, a service's name or a cluster id:
/// every key, fact and store naming it holds the same one.
pub fn shared_name(s: &str) -> Arc<str> {
    static NAMES: LazyLock<Mutex<Interner<str>>> = LazyLock::new(Default::default);
    let mut names = NAMES.lock().unwrap_or_else(|e| e.into_inner());
    names.get(s, || s.into())
}

impl fmt::Display for ServiceKey {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}/{}", self.namespace(), self.name())
    }
}

/// An IP family, named as Kubernetes names it (`IPv4`, `IPv6`).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize, Deserialize)]
pub enum IpFamily {
    /// IPv4 (A records).
    IPv4,
    /// IPv6 (AAAA records).
    IPv6,
}

impl IpFamily {
    /// The family of an address.
    pub fn of(ip: &IpAddr) -> Self {
        match ip {
            IpAddr::V4(_) => IpFamily::IPv4,
            IpAddr::V6(_) => IpFamily::IPv6,
        }
    }

    /// Parses `IPv4` / `IPv6` (the spellings of `spec.ipFamilies`).
    pub fn parse(s: &str) -> Option<Self> {
        match s {
            "IPv4" => Some(IpFamily::IPv4),
            "IPv6" => Some(IpFamily::IPv6),
            _ => None,
        }
    }

    /// The Kubernetes spelling.
    pub fn as_str(self) -> &'static str {
        match self {
            IpFamily::IPv4 => "IPv4",
            IpFamily::IPv6 => "IPv6",
        }
    }
}

impl fmt::Display for IpFamily {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

/// How a Service is reached, which decides the import type.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Serialize, Deserialize)]
pub enum ServiceKind {
    /// ClusterIP, NodePort or LoadBalancer: imported as `ClusterSetIP`.
    ClusterIp,
    /// `clusterIP: None`: imported as `Headless`.
    Headless,
    /// ExternalName: cannot be exported.
    ExternalName,
}

/// The ServiceImport type.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Serialize, Deserialize)]
pub enum ImportType {
    /// Reached through clusterset VIPs.
    ClusterSetIP,
    /// Reached through the ready endpoints' own addresses.
    Headless,
}

impl ImportType {
    /// How a Service of `kind` is imported (KEP-1645: ClusterIP, NodePort and
    /// LoadBalancer as ClusterSetIP, `clusterIP: None` as Headless;
    /// ExternalName cannot be exported, and counts as ClusterSetIP only in a
    /// type conflict's message).
    pub fn of(kind: ServiceKind) -> Self {
        match kind {
            ServiceKind::Headless => ImportType::Headless,
            ServiceKind::ClusterIp | ServiceKind::ExternalName => ImportType::ClusterSetIP,
        }
    }

    /// The ServiceImport `spec.type` spelling.
    pub fn as_str(self) -> &'static str {
        match self {
            ImportType::ClusterSetIP => "ClusterSetIP",
            ImportType::Headless => "Headless",
        }
    }
}

/// Orders exports: older first. `created` is the ServiceExport's
/// `creationTimestamp` (or when the source first saw it), `seq` the order in
/// which the source first saw it, for exports created in the same second.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Serialize, Deserialize)]
pub struct ExportAge {
    /// Seconds since the Unix epoch.
    pub created: i64,
    /// Order of first sight within the source.
    pub seq: u64,
}

/// What a cluster's ServiceExport says.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct ExportInfo {
    /// Age used for oldest-wins conflict resolution.
    pub age: ExportAge,
    /// The exported labels and annotations (shared: nearly all are the same).
    pub exported: Arc<Exported>,
    /// Whether the import gets clusterset VIPs (the export's
    /// `clusterset-dns.io/use-clusterset-ip` annotation; unset: the global default).
    pub clusterset_ip: Option<bool>,
    /// Whether EndpointSlices of a ClusterIP service carry pod IPs rather than
    /// the Service's ClusterIPs (`clusterset-dns.io/use-pod-ips`; unset: the global default).
    pub pod_ips: Option<bool>,
}

/// The labels and annotations a ServiceExport gives its import.
#[derive(Clone, Debug, Default, PartialEq, Eq, Hash, Serialize, Deserialize)]
pub struct Exported {
    /// `spec.exportedLabels`.
    pub labels: BTreeMap<String, String>,
    /// `spec.exportedAnnotations`.
    pub annotations: BTreeMap<String, String>,
}

impl Exported {
    /// The process-wide shared copy of these labels and annotations.
    pub fn shared(self) -> Arc<Exported> {
        static EXPORTED: LazyLock<Mutex<Interner<Exported>>> = LazyLock::new(Default::default);
        share(&EXPORTED, self)
    }
}

/// What a cluster's Service says, reduced to what an import needs: its own
/// ClusterIPs, and the rest, which is shared with every Service that says the
/// same (see [`ServiceSpec::shared`]). Derefs to the [`ServiceSpec`].
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ServiceInfo {
    /// `spec.clusterIPs` (empty for headless).
    pub cluster_ips: Ips,
    /// Everything else.
    pub spec: Arc<ServiceSpec>,
}

impl std::ops::Deref for ServiceInfo {
    type Target = ServiceSpec;

    fn deref(&self) -> &ServiceSpec {
        &self.spec
    }
}

/// The part of a Service most Services share: kind, ports, families, settings.
/// (Serialized: the settings an import takes from its oldest export.)
#[derive(Clone, Debug, PartialEq, Eq, Hash, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct ServiceSpec {
    /// ClusterIP-like, headless or ExternalName.
    #[serde(skip)]
    pub kind: ServiceKind,
    /// Ports with `protocol` defaulted to `TCP`.
    #[serde(skip)]
    pub ports: Arc<[ServicePort]>,
    /// `spec.ipFamilies` (derived from `clusterIPs` when absent; `IPv4` when both are).
    #[serde(skip)]
    pub ip_families: Vec<IpFamily>,
    /// `spec.sessionAffinity`, defaulted to `None`.
    pub session_affinity: Setting,
    /// `spec.sessionAffinityConfig`.
    pub session_affinity_config: Option<SessionAffinityConfig>,
    /// `spec.internalTrafficPolicy`, defaulted to `Cluster`.
    pub internal_traffic_policy: Setting,
    /// `spec.trafficDistribution`.
    pub traffic_distribution: Option<String>,
}

/// A Service's `spec.sessionAffinityConfig`, in the same JSON shape: its
/// one setting, the `ClientIP` affinity's timeout. The model's own type, so
/// that `model/` needs no Kubernetes crate (ARCHITECTURE.md, "Folders and
/// what each may use"); `k8s/convert.rs` converts the API's.
#[derive(Clone, Debug, Default, PartialEq, Eq, Hash, Serialize, Deserialize)]
pub struct SessionAffinityConfig {
    /// `clientIP`: settings of `ClientIP` affinity.
    #[serde(rename = "clientIP", default, skip_serializing_if = "Option::is_none")]
    pub client_ip: Option<ClientIpConfig>,
}

/// `sessionAffinityConfig.clientIP`.
#[derive(Clone, Debug, Default, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct ClientIpConfig {
    /// Seconds a client sticks to one endpoint.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub timeout_seconds: Option<i32>,
}

impl ServiceSpec {
    /// The process-wide shared copy of this spec.
    pub fn shared(self) -> Arc<ServiceSpec> {
        static SPECS: LazyLock<Mutex<Interner<ServiceSpec>>> = LazyLock::new(Default::default);
        share(&SPECS, self)
    }
}

/// A Service setting with a few usual values (`None`, `ClientIP`, `Cluster`,
/// `Local`): those are not copied per Service, anything else is kept as given.
pub type Setting = Cow<'static, str>;

/// The [`Setting`] for `value`: one of `usual` when it is one, else a copy.
pub fn setting(value: &str, usual: &[&'static str]) -> Setting {
    match usual.iter().find(|u| **u == value) {
        Some(u) => Cow::Borrowed(u),
        None => Cow::Owned(value.to_owned()),
    }
}

/// Usual `sessionAffinity` values.
pub const SESSION_AFFINITIES: [&str; 2] = ["None", "ClientIP"];
/// Usual `internalTrafficPolicy` values.
pub const TRAFFIC_POLICIES: [&str; 2] = ["Cluster", "Local"];

/// One endpoint of an EndpointSlice.
#[derive(Clone, Debug, PartialEq, Eq, Hash, Serialize, Deserialize)]
pub struct Endpoint {
    /// Its address: the first of `addresses`, the only one Kubernetes gives a meaning to.
    pub address: IpAddr,
    /// `hostname`, used for the per-pod DNS name.
    pub hostname: Option<Box<str>>,
    /// `conditions.ready` (absent counts as ready, as in Kubernetes).
    pub ready: bool,
}

/// The endpoints of one EndpointSlice.
#[derive(Clone, Debug, Default, PartialEq, Eq, Hash, Serialize, Deserialize)]
pub struct SliceInfo {
    /// The endpoints, in slice order.
    pub endpoints: Vec<Endpoint>,
    /// The slice's ports (the endpoints' own ports, i.e. the Service's
    /// target ports), `protocol` defaulted to `TCP`.
    pub ports: Vec<ServicePort>,
}

/// One object a source reports, already tied to its service.
#[derive(Clone, Debug, PartialEq)]
pub enum Object {
    /// A ServiceExport (shared like services).
    Export(Arc<ExportInfo>),
    /// A Service (shared: the source and the engine hold the same one).
    Service(Arc<ServiceInfo>),
    /// An EndpointSlice, by its own name (shared like services).
    Slice(Box<str>, Arc<SliceInfo>),
    /// When the broker first saw the cluster's export (Kubernetes mode:
    /// its export record's first-seen time), in seconds since the Unix
    /// epoch: the export is no older than this (ARCHITECTURE.md, "Trust
    /// between clusters": the oldest export).
    Seen(i64),
    /// The ClusterIPs of the local cluster's derived Service of the
    /// service (Kubernetes mode with `--derived-services`): what its name
    /// answers there (ARCHITECTURE.md, "Derived Services").
    Derived(Ips),
}

/// Which object a [`Change::Delete`] removes.
#[derive(Clone, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum ObjectRef {
    /// The ServiceExport.
    Export,
    /// The Service.
    Service,
    /// An EndpointSlice, by name.
    Slice(Box<str>),
    /// When the broker first saw the export.
    Seen,
    /// The derived Service.
    Derived,
}

impl Object {
    /// The reference that deletes this object.
    pub fn reference(&self) -> ObjectRef {
        match self {
            Object::Export(_) => ObjectRef::Export,
            Object::Service(_) => ObjectRef::Service,
            Object::Slice(name, _) => ObjectRef::Slice(name.clone()),
            Object::Seen(_) => ObjectRef::Seen,
            Object::Derived(_) => ObjectRef::Derived,
        }
    }
}

/// A change in one cluster's objects, as sources report it.
#[derive(Clone, Debug, PartialEq)]
pub enum Change {
    /// The object was created or replaced.
    Upsert(ClusterId, ServiceKey, Object),
    /// The object is gone.
    Delete(ClusterId, ServiceKey, ObjectRef),
    /// The clusterset agreed on these VIPs for the service (Kubernetes mode:
    /// read from the broker; empty: none yet, or released).
    Vips(ServiceKey, Vec<IpAddr>),
    /// Whether a cluster's heartbeat is current (Kubernetes mode: its Lease on
    /// the broker). A cluster never reported is live; a dead one keeps its
    /// exports but backs no import (see `engine::liveness`).
    Live(ClusterId, bool),
    /// The local cluster has this namespace (true) or not (Kubernetes mode:
    /// an import is served only where its namespace exists, KEP-1645
    /// "Namespace sameness").
    Namespace(Arc<str>, bool),
}

impl Change {
    /// The one service this change touches (`None`: a cluster's liveness or a
    /// namespace, which touch every service of the cluster or namespace).
    pub fn service(&self) -> Option<&ServiceKey> {
        match self {
            Change::Upsert(_, key, _) | Change::Delete(_, key, _) | Change::Vips(key, _) => {
                Some(key)
            }
            Change::Live(..) | Change::Namespace(..) => None,
        }
    }

    /// The change that undoes this one's fact: the delete of an upserted
    /// object, no VIPs for VIPs, live for a liveness; `None` for a delete.
    pub fn retraction(&self) -> Option<Change> {
        match self {
            Change::Upsert(cluster, key, object) => Some(Change::Delete(
                cluster.clone(),
                key.clone(),
                object.reference(),
            )),
            Change::Vips(key, _) => Some(Change::Vips(key.clone(), Vec::new())),
            Change::Live(cluster, _) => Some(Change::Live(cluster.clone(), true)),
            Change::Namespace(name, true) => Some(Change::Namespace(name.clone(), false)),
            Change::Delete(..) | Change::Namespace(_, false) => None,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::hash::BuildHasher;

    #[test]
    fn keys_share_their_strings() {
        let a = ServiceKey::new("shop", "web");
        let b = ServiceKey::new("shop", "db");
        let c = ServiceKey::new("bank", "web");
        assert!(Arc::ptr_eq(a.namespace(), b.namespace()));
        assert!(Arc::ptr_eq(a.name(), c.name()));
        assert_eq!((&**c.namespace(), &**c.name()), ("bank", "web"));
        assert!(Arc::ptr_eq(&shared_name("east"), &shared_name("east")));
    }

    /// A key is one pointer to the one copy of its pair, and behaves as the
    /// pair: equal, hashed, ordered and serialized by namespace then name.
    #[test]
    fn a_key_is_one_pointer_that_behaves_as_its_names() {
        assert_eq!(std::mem::size_of::<ServiceKey>(), 8);
        assert_eq!(std::mem::size_of::<Option<ServiceKey>>(), 8);
        let a = ServiceKey::new("shop", "web");
        assert!(Arc::ptr_eq(&a.0, &ServiceKey::new("shop", "web").0));
        let hasher = Hasher::default();
        let pair = KeyNames {
            namespace: "shop".into(),
            name: "web".into(),
        };
        assert_eq!(hasher.hash_one(&a), hasher.hash_one(&pair));
        let mut keys = [
            ServiceKey::new("shop", "web"),
            ServiceKey::new("bank", "zeta"),
            ServiceKey::new("shop", "api"),
        ];
        keys.sort();
        let names: Vec<String> = keys.iter().map(ToString::to_string).collect();
        assert_eq!(names, ["bank/zeta", "shop/api", "shop/web"]);
        let json = serde_json::to_string(&a).unwrap();
        assert_eq!(json, r#"{"namespace":"shop","name":"web"}"#);
        let read: ServiceKey = serde_json::from_str(&json).unwrap();
        assert!(Arc::ptr_eq(&read.0, &a.0));
    }
}
