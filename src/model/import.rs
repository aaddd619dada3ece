//! What the engine decides for one service: the aggregated import (what DNS
//! serves and the member's ServiceImport holds) and each export's conditions.

use std::net::IpAddr;
use std::sync::Arc;

use serde::Serialize;

use super::conditions::{Condition, ConflictReason, READY, VALID, reason};
use super::port::ServicePort;
use super::{ClusterId, Endpoint, Exported, ImportType, IpFamily, Ips, ServiceSpec, SliceInfo};

/// One exporting cluster's part of an import.
#[derive(Clone, Debug, PartialEq, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct ImportCluster {
    /// The cluster id.
    pub cluster: ClusterId,
    /// Its Service's cluster IPs in the import's families.
    pub cluster_ips: Ips,
    /// Its ready endpoints in the import's families, one per address.
    pub endpoints: Endpoints,
    /// The import's ports it backs: those its Service defines with the same
    /// name, port and protocol (see [`super::port`]). Its endpoints are
    /// published under these ports only.
    pub ports: Arc<[ServicePort]>,
}

/// A cluster's endpoints in an import: usually its one EndpointSlice as is
/// (shared, not copied), else the ready endpoints of its slices, filtered.
#[derive(Clone, Debug)]
pub enum Endpoints {
    /// Every endpoint of this slice qualifies.
    Shared(Arc<SliceInfo>),
    /// The endpoints that qualify, copied out of several slices.
    Picked(Vec<Endpoint>),
}

impl std::ops::Deref for Endpoints {
    type Target = [Endpoint];

    fn deref(&self) -> &[Endpoint] {
        match self {
            Endpoints::Shared(slice) => &slice.endpoints,
            Endpoints::Picked(endpoints) => endpoints,
        }
    }
}

impl PartialEq for Endpoints {
    fn eq(&self, other: &Self) -> bool {
        **self == **other
    }
}

impl Serialize for Endpoints {
    fn serialize<S: serde::Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        s.collect_seq(self.iter())
    }
}

/// The aggregated ServiceImport.
#[derive(Clone, Debug, PartialEq, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct Import {
    /// `ClusterSetIP` or `Headless`, from the oldest export.
    #[serde(rename = "type")]
    pub type_: ImportType,
    /// Union of the exported ports (the oldest export's own list, shared,
    /// when the others add none).
    pub ports: Arc<[ServicePort]>,
    /// Intersected families of the exports (clusterset-wide).
    pub ip_families: Vec<IpFamily>,
    /// `ip_families` less what the local cluster does not support; DNS serves these.
    pub local_families: Vec<IpFamily>,
    /// Whether the import has clusterset VIPs (from the oldest export).
    pub clusterset_ip: bool,
    /// VIPs ordered like `ip_families` (ClusterSetIP with `clusterset_ip` only;
    /// set by the engine).
    pub vips: Ips,
    /// What the service name resolves to for a ClusterSetIP import, in the
    /// local families: the VIPs, or without VIPs the exporting clusters'
    /// ClusterIPs, local cluster first (set by the engine).
    pub addresses: Ips,
    /// The oldest export's Service: its session affinity (and config),
    /// internal traffic policy and traffic distribution are the import's.
    #[serde(flatten)]
    pub service: Arc<ServiceSpec>,
    /// The oldest export's exported labels and annotations.
    #[serde(flatten)]
    pub exported: Arc<Exported>,
    /// Clusters taking part, oldest export first.
    pub clusters: Vec<ImportCluster>,
    /// With `trafficDistribution: PreferClose`, the local cluster's place in
    /// `clusters` while it has ready endpoints in the served families: a
    /// headless service name then answers with its endpoints only (set by
    /// the engine; see `docs/dns.md`, "Locality").
    #[serde(skip_serializing_if = "Option::is_none")]
    pub close: Option<usize>,
    /// The import's `Ready` condition (shared while it is the usual `True`).
    pub ready: Arc<Condition>,
}

impl Import {
    /// Whether the local cluster serves addresses of `ip`'s family for this
    /// import (the intersected families it supports).
    pub fn serves(&self, ip: &IpAddr) -> bool {
        self.local_families.contains(&IpFamily::of(ip))
    }

    /// The VIPs the local cluster serves: those of `local_families`.
    pub fn local_vips(&self) -> impl Iterator<Item = IpAddr> + '_ {
        self.vips.iter().copied().filter(|ip| self.serves(ip))
    }
}

/// The conditions of one cluster's export.
#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct ExportStatus {
    /// The exporting cluster.
    pub cluster: ClusterId,
    /// `Valid`, `Ready`, and `Conflict` when the export is valid. Shared:
    /// nearly every export has the same conditions as every other, and there
    /// are hundreds of thousands of exports at scale.
    pub conditions: Arc<[Condition]>,
    /// The reasons of the `Conflict` condition, when it is true.
    #[serde(skip)]
    pub conflicts: Box<[ConflictReason]>,
}

impl ExportStatus {
    /// The status of an export the engine leaves out of its service for a
    /// rule of trust or a limit (ARCHITECTURE.md, "Trust between clusters"):
    /// `Valid=False` with `why`, and `Ready=False` (`Failed`).
    pub fn refused(cluster: ClusterId, why: &'static str, message: String) -> Self {
        Self {
            cluster,
            conditions: Arc::new([
                Condition::new(VALID, false, why, message.clone()),
                Condition::new(READY, false, reason::FAILED, message),
            ]),
            conflicts: Box::default(),
        }
    }

    /// The condition of a type.
    pub fn condition(&self, type_: &str) -> Option<&Condition> {
        self.conditions.iter().find(|c| c.type_ == type_)
    }
}

/// The outcome for one service.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct Aggregate {
    /// The import, while at least one valid export remains.
    pub import: Option<Arc<Import>>,
    /// Conditions of every cluster's export, by cluster id.
    pub exports: Vec<ExportStatus>,
}
