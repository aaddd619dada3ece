//! The clusterset read once, read only, for `status`, `explain` and `check`:
//! the assembly `serve` follows (`runtime/assembly.rs`) fed the manifest
//! directory once, or one list of each kind the controller watches (read
//! by the same readers), plus the broker's own records. Nothing is written.

use std::collections::HashSet;
use std::fmt::Debug;
use std::net::IpAddr;

use kube::api::ListParams;
use kube::{Resource, ResourceExt};
use serde::Serialize;
use serde::de::DeserializeOwned;

use crate::engine::Engine;
use crate::index::Index;
use crate::k8s::crd::ServiceImport;
use crate::k8s::records::{self, Role};
use crate::model::Change;
use crate::runtime::assembly::{Assembly, Kubernetes, Source};
use crate::runtime::pipeline::Pipeline;
use crate::sources::kubernetes::readers::{FactSource, FactSources};
use crate::sources::kubernetes::served;
use crate::sources::manifests::ManifestSource;
use crate::writeback::vip_claims::VipClaims;

/// The clusterset as the source shows it now.
pub struct Snapshot {
    /// The engine, fed what the source holds, and the index it fed.
    pub pipeline: Pipeline,
    /// Objects that could not be read, each named.
    pub problems: Vec<String>,
    /// Kubernetes mode: the broker's shared state.
    pub broker: Option<BrokerView>,
}

impl Snapshot {
    /// The engine.
    pub fn engine(&self) -> &Engine {
        self.pipeline.engine()
    }

    /// The index, as `serve` would answer from it.
    pub fn index(&self) -> &Index {
        self.pipeline.index()
    }
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

/// Reads the source of `assembly` once (the VIP state file too, in
/// embedded mode, but never writes it).
pub async fn take(assembly: Assembly) -> anyhow::Result<Snapshot> {
    let mut pipeline = Pipeline::new(assembly.pipeline, None)?;
    match assembly.source {
        Source::Manifests(mut source) => {
            pipeline.apply_initial(source.rescan(&HashSet::new()));
            Ok(Snapshot {
                pipeline,
                problems: problems(&source),
                broker: None,
            })
        }
        Source::Kubernetes(source) => kubernetes(pipeline, source).await,
    }
}

fn problems(source: &ManifestSource) -> Vec<String> {
    source.problems().iter().map(ToString::to_string).collect()
}

/// One list of each fact source, then the broker's VIP claims.
async fn kubernetes(mut pipeline: Pipeline, source: Kubernetes) -> anyhow::Result<Snapshot> {
    let broker_ns = &source.broker_namespace;
    let FactSources {
        namespaces,
        services,
        service_exports,
        endpoint_slices,
        broker_records,
        broker_slices,
    } = source.facts;
    let (mut changes, mut problems) = (Vec::new(), Vec::new());
    let mut facts = (&mut changes, &mut problems);
    read(&list(&services).await?, &services, &mut facts);
    read(&list(&service_exports).await?, &service_exports, &mut facts);
    read(&list(&endpoint_slices).await?, &endpoint_slices, &mut facts);
    let records = list(&broker_records).await?;
    read(&records, &broker_records, &mut facts);
    read(&list(&broker_slices).await?, &broker_slices, &mut facts);
    read(&list(&namespaces).await?, &namespaces, &mut facts);
    pipeline.apply_initial(changes);
    let connection = source.connection;
    let claims = VipClaims::new(connection.broker, connection.mcs.broker_imports, broker_ns)
        .list()
        .await
        .map_err(|e| {
            anyhow::anyhow!("cannot list the VIP claims in the broker namespace {broker_ns}: {e}")
        })?;
    Ok(Snapshot {
        pipeline,
        problems,
        broker: Some(broker_view(&records, claims)),
    })
}

/// Every object of `source`.
async fn list<K>(source: &FactSource<K>) -> anyhow::Result<Vec<K>>
where
    K: Resource + Clone + DeserializeOwned + Debug + 'static,
    K::DynamicType: Default,
{
    let mut params = ListParams::default();
    if let Some(labels) = source.labels {
        params = params.labels(labels);
    }
    Ok(source
        .api
        .api()
        .list(&params)
        .await
        .map_err(|e| {
            let why = served::why(&source.api.resource_name(), &e);
            anyhow::anyhow!("cannot list {}: {why}", source.resource)
        })?
        .items)
}

/// Reads `objects` of `source` into `(changes, problems)`.
fn read<K: Resource<DynamicType: Default>>(
    objects: &[K],
    source: &FactSource<K>,
    (changes, problems): &mut (&mut Vec<Change>, &mut Vec<String>),
) {
    for object in objects {
        match (source.read)(object) {
            Ok(read) => changes.extend(read),
            Err(why) => problems.push(format!(
                "{} {}/{}: {why}",
                K::kind(&Default::default()),
                object.namespace().unwrap_or_default(),
                object.name_any()
            )),
        }
    }
}

fn broker_view(records: &[ServiceImport], claims: Vec<(String, String)>) -> BrokerView {
    let mut view = BrokerView::default();
    for record in records {
        let Some((key, cluster)) = records::read::labelled_service(&record.metadata) else {
            continue;
        };
        let (namespace, name) = (key.namespace().to_string(), key.name().to_string());
        match records::read::role(record) {
            Some(Role::Export) => view.export_records.push(ExportRecordRow {
                namespace,
                name,
                cluster: cluster.as_deref().unwrap_or("?").to_owned(),
            }),
            Some(Role::Import) => view.vip_records.push(VipRecordRow {
                namespace,
                name,
                vips: records::read::record_vips(record),
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
