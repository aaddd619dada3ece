//! What each watched kind means to the engine: the readers of the fact
//! watches, shared by the controller (`super::follow`) and the read-only
//! snapshot of `status` and `explain` (`super::snapshot`).

use std::sync::Arc;

use k8s_openapi::api::core::v1::Service;
use k8s_openapi::api::discovery::v1::EndpointSlice;
use kube::ResourceExt;

use super::facts::Reader;
use crate::k8s::convert;
use crate::k8s::crd::v1alpha1::{ServiceExport, ServiceImport};
use crate::k8s::records::source_cluster;
use crate::k8s::records::{self, Role};
use crate::model::{Change, ClusterId, ExportAge, Object};

/// The local cluster's Services.
pub fn services(me: ClusterId) -> Reader<Service> {
    Box::new(move |svc| {
        let (key, object) = convert::service(svc).map_err(|e| e.to_string())?;
        Ok(vec![Change::Upsert(me.clone(), key, object)])
    })
}

/// The local cluster's ServiceExports.
pub fn service_exports(me: ClusterId) -> Reader<ServiceExport> {
    Box::new(move |export| {
        let observed = ExportAge { created: 0, seq: 0 };
        let (key, object) = convert::service_export(export, observed).map_err(|e| e.to_string())?;
        Ok(vec![Change::Upsert(me.clone(), key, object)])
    })
}

/// The local cluster's own EndpointSlices (not those it imported).
pub fn endpoint_slices(me: ClusterId) -> Reader<EndpointSlice> {
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
pub fn broker_records(me: ClusterId) -> Reader<ServiceImport> {
    Box::new(move |record| match records::role(record) {
        Some(Role::Export) => {
            let (key, from, export, service) =
                records::read_export_record(record).map_err(|e| e.to_string())?;
            if from == me {
                return Ok(Vec::new());
            }
            Ok(vec![
                Change::Upsert(from.clone(), key.clone(), Object::Export(Arc::new(export))),
                Change::Upsert(from, key, Object::Service(Arc::new(service))),
            ])
        }
        Some(Role::Import) => {
            let Some((key, _)) = records::labelled_service(&record.metadata) else {
                return Err(format!(
                    "VIP record {} has no service labels",
                    record.name_any()
                ));
            };
            Ok(vec![Change::Vips(key, records::record_vips(record))])
        }
        None => Ok(Vec::new()),
    })
}

/// The broker's EndpointSlices of the other clusters.
pub fn broker_slices(me: ClusterId) -> Reader<EndpointSlice> {
    Box::new(move |slice| {
        if source_cluster(slice) == Some(&*me) {
            return Ok(Vec::new());
        }
        let (key, from, info) = records::read_slice(slice).map_err(|e| e.to_string())?;
        Ok(vec![Change::Upsert(
            from,
            key,
            Object::Slice(slice.name_any().into(), info),
        )])
    })
}
