//! What each watched kind means to the engine: the fact sources of
//! Kubernetes mode (which objects, and the reader of each), the same for the
//! controller's watches and for the read-only snapshot of `status` and
//! `explain` (ARCHITECTURE.md, "The flow").

use std::sync::Arc;

use k8s_openapi::api::core::v1::{Namespace, Service};
use k8s_openapi::api::discovery::v1::EndpointSlice;
use kube::{Api, ResourceExt};

use super::client::Connection;
use super::facts::Reader;
use super::served::Place;
use crate::k8s::convert;
use crate::k8s::crd::LABEL_SERVICE_NAME;
use crate::k8s::crd::{ServiceExport, ServiceImport};
use crate::k8s::records::read::source_cluster;
use crate::k8s::records::{self, Role};
use crate::model::{Change, ClusterId, ExportAge, Object};

/// One kind whose objects are facts for the engine: where they are, which
/// of them count, and what each means.
pub struct FactSource<K> {
    /// Its name in logs and metrics (`services`, `broker/serviceimports`).
    pub resource: &'static str,
    /// Where its objects are.
    pub api: Place<K>,
    /// The label selector of the objects that count; None: all.
    pub labels: Option<&'static str>,
    /// What one object means.
    pub read: Reader<K>,
}

/// Every kind whose objects are facts for the engine. Whoever reads them
/// (the watches of `serve`, the snapshot's lists) takes this apart field by
/// field, so no reader can leave one out.
pub struct FactSources {
    /// The local cluster's namespaces (KEP-1645 "Namespace sameness").
    pub namespaces: FactSource<Namespace>,
    /// The local cluster's Services.
    pub services: FactSource<Service>,
    /// The local cluster's ServiceExports.
    pub service_exports: FactSource<ServiceExport>,
    /// The local cluster's EndpointSlices of services.
    pub endpoint_slices: FactSource<EndpointSlice>,
    /// The broker's export and VIP records.
    pub broker_records: FactSource<ServiceImport>,
    /// The broker's EndpointSlices of every cluster.
    pub broker_slices: FactSource<EndpointSlice>,
}

impl FactSources {
    /// The fact sources of `connection`, the broker's shared state in `broker_namespace`.
    pub fn new(connection: &Connection, broker_namespace: &str) -> Self {
        let (local, broker) = (&connection.local, &connection.broker);
        let (me, mcs) = (&connection.cluster, &connection.mcs);
        Self {
            namespaces: FactSource {
                resource: "namespaces",
                api: Place::fixed(Api::all(local.clone())),
                labels: None,
                read: namespaces(),
            },
            services: FactSource {
                resource: "services",
                api: Place::fixed(Api::all(local.clone())),
                labels: None,
                read: services(me.clone()),
            },
            service_exports: FactSource {
                resource: "serviceexports",
                api: Place::mcs(mcs.local_exports.clone(), None),
                labels: None,
                read: service_exports(me.clone()),
            },
            endpoint_slices: FactSource {
                resource: "endpointslices",
                api: Place::fixed(Api::all(local.clone())),
                labels: Some(LABEL_SERVICE_NAME),
                read: endpoint_slices(me.clone()),
            },
            broker_records: FactSource {
                resource: "broker/serviceimports",
                api: Place::mcs(mcs.broker_imports.clone(), Some(broker_namespace)),
                labels: None,
                read: broker_records(me.clone()),
            },
            broker_slices: FactSource {
                resource: "broker/endpointslices",
                api: Place::fixed(Api::namespaced(broker.clone(), broker_namespace)),
                labels: None,
                read: broker_slices(me.clone()),
            },
        }
    }
}

/// The local cluster's namespaces: one present unless it is being deleted.
pub(crate) fn namespaces() -> Reader<Namespace> {
    Box::new(|ns| {
        let present = ns.metadata.deletion_timestamp.is_none();
        Ok(present
            .then(|| Change::Namespace(ns.name_any().into(), true))
            .into_iter()
            .collect())
    })
}

/// The local cluster's Services.
pub(crate) fn services(me: ClusterId) -> Reader<Service> {
    Box::new(move |svc| {
        let (key, object) = convert::service(svc).map_err(|e| e.to_string())?;
        Ok(vec![Change::Upsert(me.clone(), key, object)])
    })
}

/// The local cluster's ServiceExports.
pub(crate) fn service_exports(me: ClusterId) -> Reader<ServiceExport> {
    Box::new(move |export| {
        let observed = ExportAge { created: 0, seq: 0 };
        let (key, object) = convert::service_export(export, observed).map_err(|e| e.to_string())?;
        Ok(vec![Change::Upsert(me.clone(), key, object)])
    })
}

/// The local cluster's own EndpointSlices (not those it imported).
pub(crate) fn endpoint_slices(me: ClusterId) -> Reader<EndpointSlice> {
    Box::new(move |slice| {
        if convert::is_imported_slice(slice) {
            return Ok(Vec::new());
        }
        let (key, object) = convert::endpoint_slice(slice).map_err(|e| e.to_string())?;
        Ok(vec![Change::Upsert(me.clone(), key, object)])
    })
}

/// The broker's export records (other clusters' exports and Services) and
/// VIP records.
pub(crate) fn broker_records(me: ClusterId) -> Reader<ServiceImport> {
    Box::new(move |record| match records::read::role(record) {
        Some(Role::Export) => {
            let (key, from, export, service) =
                records::read::read_export_record(record).map_err(|e| e.to_string())?;
            if from == me {
                return Ok(Vec::new());
            }
            Ok(vec![
                Change::Upsert(from.clone(), key.clone(), Object::Export(Arc::new(export))),
                Change::Upsert(from, key, Object::Service(Arc::new(service))),
            ])
        }
        Some(Role::Import) => {
            let Some((key, _)) = records::read::labelled_service(&record.metadata) else {
                return Err(format!(
                    "VIP record {} has no service labels",
                    record.name_any()
                ));
            };
            Ok(vec![Change::Vips(key, records::read::record_vips(record))])
        }
        None => Ok(Vec::new()),
    })
}

/// The broker's EndpointSlices of the other clusters.
pub(crate) fn broker_slices(me: ClusterId) -> Reader<EndpointSlice> {
    Box::new(move |slice| {
        if source_cluster(slice) == Some(&*me) {
            return Ok(Vec::new());
        }
        let (key, from, info) = records::read::read_slice(slice).map_err(|e| e.to_string())?;
        Ok(vec![Change::Upsert(
            from,
            key,
            Object::Slice(slice.name_any().into(), info),
        )])
    })
}
