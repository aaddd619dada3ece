//! A read-only snapshot of Kubernetes mode for `status` and `explain`: one
//! list of each kind the controller watches, read by the same readers into
//! an engine set up as `serve` sets it up, plus the broker's own records.
//! Nothing is written.

use std::fmt::Debug;
use std::net::IpAddr;

use k8s_openapi::api::core::v1::Service;
use k8s_openapi::api::discovery::v1::EndpointSlice;
use kube::api::ListParams;
use kube::{Api, Resource, ResourceExt};
use serde::Serialize;
use serde::de::DeserializeOwned;

use crate::cli::{ClustersetArgs, KubernetesArgs};
use crate::engine::{Engine, EngineSettings, VipSource};
use crate::k8s::crd::v1alpha1::{ServiceExport, ServiceImport};
use crate::k8s::records::{self, Role};
use crate::model::Change;
use crate::sources::kubernetes::client::{Connection, connect};
use crate::sources::kubernetes::facts::Reader;
use crate::sources::kubernetes::readers;
use crate::writeback::vip_claims::VipClaims;

/// The clusterset as this member's API server and the broker show it now.
pub struct Snapshot {
    /// The engine, fed what the controller's watches would report.
    pub engine: Engine,
    /// Objects that could not be read, each named.
    pub problems: Vec<String>,
    /// The broker's shared state.
    pub broker: BrokerView,
}

/// The broker namespace's records.
#[derive(Debug, Default, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct BrokerView {
    /// One export record per exporting cluster and service.
    pub export_records: Vec<ExportRecordRow>,
    /// One VIP record per service with clusterset VIPs.
    pub vip_records: Vec<VipRecordRow>,
    /// One claim per VIP address.
    pub vip_claims: Vec<ClaimRow>,
}

/// An export record: `cluster` exports `namespace/name`.
#[derive(Debug, Serialize)]
pub struct ExportRecordRow {
    /// Namespace of the service.
    pub namespace: String,
    /// Name of the service.
    pub name: String,
    /// The exporting cluster.
    pub cluster: String,
}

/// A VIP record: the clusterset VIPs of `namespace/name`.
#[derive(Debug, Serialize)]
pub struct VipRecordRow {
    /// Namespace of the service.
    pub namespace: String,
    /// Name of the service.
    pub name: String,
    /// Its VIPs.
    pub vips: Vec<IpAddr>,
}

/// A VIP claim: `address` belongs to `service` (`namespace/name`).
#[derive(Debug, Serialize)]
pub struct ClaimRow {
    /// The claimed address.
    pub address: String,
    /// The holding service.
    pub service: String,
}

/// Reads the local cluster and the broker once.
pub async fn take(args: &KubernetesArgs, clusterset: &ClustersetArgs) -> anyhow::Result<Snapshot> {
    let Connection {
        local,
        broker,
        cluster,
    } = connect(args).await?;
    let broker_ns = &args.broker_namespace;
    let mut engine = Engine::new(EngineSettings {
        vip_source: VipSource::Assigned,
        local_cluster: Some(cluster.clone()),
        ..clusterset.engine_settings()
    });
    let mut changes = Vec::new();
    let mut problems = Vec::new();
    let all = ListParams::default();
    let labelled = ListParams::default().labels(crate::k8s::crd::LABEL_SERVICE_NAME);
    let local_services: Api<Service> = Api::all(local.clone());
    let local_exports: Api<ServiceExport> = Api::all(local.clone());
    let local_slices: Api<EndpointSlice> = Api::all(local);
    let records: Api<ServiceImport> = Api::namespaced(broker.clone(), broker_ns);
    let broker_slices: Api<EndpointSlice> = Api::namespaced(broker.clone(), broker_ns);
    let services = list(&local_services, &all, "services").await?;
    let exports = list(&local_exports, &all, "serviceexports").await?;
    let slices = list(&local_slices, &labelled, "endpointslices").await?;
    let broker_records = list(&records, &all, "broker/serviceimports").await?;
    let remote_slices = list(&broker_slices, &all, "broker/endpointslices").await?;
    read(
        &services,
        &readers::services(cluster.clone()),
        &mut changes,
        &mut problems,
    );
    read(
        &exports,
        &readers::service_exports(cluster.clone()),
        &mut changes,
        &mut problems,
    );
    read(
        &slices,
        &readers::endpoint_slices(cluster.clone()),
        &mut changes,
        &mut problems,
    );
    read(
        &broker_records,
        &readers::broker_records(cluster.clone()),
        &mut changes,
        &mut problems,
    );
    read(
        &remote_slices,
        &readers::broker_slices(cluster),
        &mut changes,
        &mut problems,
    );
    engine.apply(changes);
    let claims = VipClaims::new(broker, broker_ns)
        .list()
        .await
        .map_err(|e| {
            anyhow::anyhow!("cannot list the VIP claims in the broker namespace {broker_ns}: {e}")
        })?;
    Ok(Snapshot {
        engine,
        problems,
        broker: broker_view(&broker_records, claims),
    })
}

async fn list<K>(api: &Api<K>, params: &ListParams, what: &str) -> anyhow::Result<Vec<K>>
where
    K: Resource<DynamicType = ()> + Clone + DeserializeOwned + Debug,
{
    Ok(api
        .list(params)
        .await
        .map_err(|e| anyhow::anyhow!("cannot list {what}: {e}"))?
        .items)
}

fn read<K: Resource<DynamicType = ()>>(
    objects: &[K],
    reader: &Reader<K>,
    changes: &mut Vec<Change>,
    problems: &mut Vec<String>,
) {
    for object in objects {
        match reader(object) {
            Ok(read) => changes.extend(read),
            Err(why) => problems.push(format!(
                "{} {}/{}: {why}",
                K::kind(&()),
                object.namespace().unwrap_or_default(),
                object.name_any()
            )),
        }
    }
}

fn broker_view(records: &[ServiceImport], claims: Vec<(String, String)>) -> BrokerView {
    let mut view = BrokerView::default();
    for record in records {
        let Some((key, cluster)) = records::labelled_service(&record.metadata) else {
            continue;
        };
        let (namespace, name) = (key.namespace.to_string(), key.name.to_string());
        match records::role(record) {
            Some(Role::Export) => view.export_records.push(ExportRecordRow {
                namespace,
                name,
                cluster: cluster.as_deref().unwrap_or("?").to_owned(),
            }),
            Some(Role::Import) => view.vip_records.push(VipRecordRow {
                namespace,
                name,
                vips: records::record_vips(record),
            }),
            None => {}
        }
    }
    view.export_records.sort_by(|a, b| {
        (&a.namespace, &a.name, &a.cluster).cmp(&(&b.namespace, &b.name, &b.cluster))
    });
    view.vip_records
        .sort_by(|a, b| (&a.namespace, &a.name).cmp(&(&b.namespace, &b.name)));
    view.vip_claims = claims
        .into_iter()
        .map(|(address, service)| ClaimRow { address, service })
        .collect();
    view.vip_claims.sort_by(|a, b| a.address.cmp(&b.address));
    view
}
