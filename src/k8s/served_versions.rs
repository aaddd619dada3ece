//! Which version of an MCS kind each API server serves, found by discovery
//! (`/apis/multicluster.x-k8s.io/<version>`): `v1beta1` where served (mcs-api
//! v0.5 stores it), else `v1alpha1` (the releases before). Shared by the
//! watches and writers of that kind there, and found again when a request
//! answers 404: a CRD upgraded or downgraded moves every one of them.

use std::sync::{Arc, Mutex};

use kube::core::DynamicResourceScope;
use kube::{Api, Client, Resource};
use tracing::info;

use super::crd::McsVersion;

/// The version one API server serves one MCS kind at, as last discovered.
#[derive(Clone)]
pub struct ServedVersion {
    client: Client,
    plural: &'static str,
    current: Arc<Mutex<McsVersion>>,
}

impl ServedVersion {
    /// Discovers the version `client`'s API server serves `plural` at. Where
    /// neither is served (no CRD yet), [`McsVersion::default`]: its requests
    /// answer 404 until a CRD serves one, which [`Self::rediscover`] finds.
    pub async fn discover(client: Client, plural: &'static str) -> Self {
        let version = served(&client, plural).await.unwrap_or_default();
        Self {
            client,
            plural,
            current: Arc::new(Mutex::new(version)),
        }
    }

    /// The version to read and write at now.
    pub fn get(&self) -> McsVersion {
        *self.current.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// Discovers again (after a 404); whether the version moved.
    pub async fn rediscover(&self) -> bool {
        let Some(found) = served(&self.client, self.plural).await else {
            return false;
        };
        let mut current = self.current.lock().unwrap_or_else(|e| e.into_inner());
        let moved = *current != found;
        if moved {
            info!(
                resource = self.plural,
                from = current.name(),
                to = found.name(),
                "the API server serves the kind at another version now"
            );
            *current = found;
        }
        moved
    }

    /// The kind's API at `version`, in `namespace` or every namespace.
    pub fn api<K>(&self, version: McsVersion, namespace: Option<&str>) -> Api<K>
    where
        K: Resource<DynamicType = McsVersion, Scope = DynamicResourceScope>,
    {
        match namespace {
            Some(ns) => Api::namespaced_with(self.client.clone(), ns, &version),
            None => Api::all_with(self.client.clone(), &version),
        }
    }

    /// `serviceexports.multicluster.x-k8s.io/v1beta1`, at the current version.
    pub fn resource_name(&self) -> String {
        let version = self.get();
        format!("{}.{}", self.plural, version.api_version())
    }
}

/// The preferred version the API server lists `plural` under, if any.
async fn served(client: &Client, plural: &str) -> Option<McsVersion> {
    for version in [McsVersion::V1beta1, McsVersion::V1alpha1] {
        let listed = client
            .list_api_group_resources(&version.api_version())
            .await
            .is_ok_and(|list| list.resources.iter().any(|r| r.name == plural));
        if listed {
            return Some(version);
        }
    }
    None
}

/// The MCS kinds Kubernetes mode reads and writes, each at the version its
/// API server serves.
#[derive(Clone)]
pub struct McsVersions {
    /// The local cluster's ServiceExports.
    pub local_exports: ServedVersion,
    /// The local cluster's ServiceImports.
    pub local_imports: ServedVersion,
    /// The broker's ServiceImports (export and VIP records).
    pub broker_imports: ServedVersion,
}

impl McsVersions {
    /// Discovers each on `local` and `broker`.
    pub async fn discover(local: &Client, broker: &Client) -> Self {
        let (local_exports, local_imports, broker_imports) = tokio::join!(
            ServedVersion::discover(local.clone(), "serviceexports"),
            ServedVersion::discover(local.clone(), "serviceimports"),
            ServedVersion::discover(broker.clone(), "serviceimports"),
        );
        Self {
            local_exports,
            local_imports,
            broker_imports,
        }
    }
}
