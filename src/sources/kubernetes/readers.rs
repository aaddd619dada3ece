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
use crate::k8s::crd::{ServiceExport, ServiceImport};
use crate::k8s::records::read::source_cluster;
use crate::k8s::records::{self, Role};
use crate::model::trust::Trust;
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
    /// The fact sources of `connection`, the broker's shared state in
    /// `broker_namespace`; what other clusters wrote there is checked
    /// against `trust`.
    pub fn new(connection: &Connection, broker_namespace: &str, trust: Trust) -> Self {
        let trust = Arc::new(trust);
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
                labels: Some(records::OWN_SLICES_SELECTOR),
                read: endpoint_slices(me.clone()),
            },
            broker_records: FactSource {
                resource: "broker/serviceimports",
                api: Place::mcs(mcs.broker_imports.clone(), Some(broker_namespace)),
                labels: Some(records::BROKER_RECORDS_SELECTOR),
                read: broker_records(me.clone(), trust.clone()),
            },
            broker_slices: FactSource {
                resource: "broker/endpointslices",
                api: Place::fixed(Api::namespaced(broker.clone(), broker_namespace)),
                labels: Some(records::BROKER_SLICES_SELECTOR),
                read: broker_slices(me.clone(), trust),
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

/// The local cluster's Services; a derived Service this controller wrote
/// is no Service of the cluster's but the ClusterIPs its import answers
/// (ARCHITECTURE.md, "Derived Services").
pub(crate) fn services(me: ClusterId) -> Reader<Service> {
    Box::new(move |svc| {
        if let Some((key, ips)) = records::read::derived_service(svc) {
            return Ok(vec![Change::Upsert(me.clone(), key, Object::Derived(ips))]);
        }
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
/// VIP records, each refused whole where it breaks a rule of `trust`.
pub(crate) fn broker_records(me: ClusterId, trust: Arc<Trust>) -> Reader<ServiceImport> {
    Box::new(move |record| {
        let refused =
            |reason: String| format!("ServiceImport {}: refused: {reason}", record.name_any());
        match records::read::role(record) {
            Some(Role::Export) => {
                let (key, from, export, service) =
                    records::read::read_export_record(record).map_err(|e| e.to_string())?;
                // The floor of the export's age, this cluster's own included:
                // every member orders the exports alike (ARCHITECTURE.md,
                // "Trust between clusters": the oldest export).
                let first_seen = records::read::first_seen(record).map_err(|e| e.to_string())?;
                let seen = first_seen.map(|t| {
                    let seen = Object::Seen(t.as_second());
                    Change::Upsert(from.clone(), key.clone(), seen)
                });
                if from == me {
                    return Ok(seen.into_iter().collect());
                }
                trust.export(&from, &key).map_err(refused)?;
                for ip in &service.cluster_ips {
                    trust.address(&from, "ClusterIP", *ip).map_err(refused)?;
                }
                let facts = [
                    Change::Upsert(from.clone(), key.clone(), Object::Export(Arc::new(export))),
                    Change::Upsert(from, key, Object::Service(Arc::new(service))),
                ];
                Ok(facts.into_iter().chain(seen).collect())
            }
            Some(Role::Import) => {
                let Some((key, _)) = records::read::labelled_service(&record.metadata) else {
                    return Err(refused("no service labels".into()));
                };
                trust.namespace(&key).map_err(refused)?;
                let vips = records::read::record_vips(record);
                trust.vips(&vips).map_err(refused)?;
                Ok(vec![Change::Vips(key, vips)])
            }
            None => Ok(Vec::new()),
        }
    })
}

/// The broker's EndpointSlices of the other clusters, each refused whole
/// where it breaks a rule of `trust`.
pub(crate) fn broker_slices(me: ClusterId, trust: Arc<Trust>) -> Reader<EndpointSlice> {
    Box::new(move |slice| {
        if source_cluster(slice) == Some(&*me) {
            return Ok(Vec::new());
        }
        let refused =
            |reason: String| format!("EndpointSlice {}: refused: {reason}", slice.name_any());
        let (key, from, info) = records::read::read_slice(slice).map_err(|e| e.to_string())?;
        trust.export(&from, &key).map_err(refused)?;
        for endpoint in &info.endpoints {
            trust
                .address(&from, "endpoint", endpoint.address)
                .map_err(refused)?;
        }
        Ok(vec![Change::Upsert(
            from,
            key,
            Object::Slice(slice.name_any().into(), info),
        )])
    })
}

#[cfg(test)]
mod tests {
    use std::net::IpAddr;

    use super::*;
    use crate::engine::aggregate::tests::{export, service, slice};
    use crate::k8s::crd::McsVersion;
    use crate::k8s::records::SwitchDefaults;
    use crate::k8s::records::build::{export_record, slice_object, vip_record};
    use crate::model::ServiceKey;
    use crate::model::trust::{Declared, Protected};

    fn trust() -> Arc<Trust> {
        let pools = vec![
            "243.0.0.0/8".parse().unwrap(),
            "fd00:c5e7::/48".parse().unwrap(),
        ];
        let declared = Declared::new(
            [("east".into(), "shop".into())],
            [("east".into(), "10.0.0.0/8".parse().unwrap())],
        );
        Arc::new(Trust::new(
            pools,
            Protected::new(&["clusterset-broker"]),
            declared,
        ))
    }

    fn record(namespace: &str, cluster_ips: &[&str]) -> ServiceImport {
        let key = ServiceKey::new(namespace, "web");
        let service = service(cluster_ips, &[("http", 80)]);
        let defaults = SwitchDefaults {
            clusterset_ip: true,
            pod_ips: false,
        };
        let seen = "2026-12-07T13:00:00Z".parse().unwrap();
        export_record(
            McsVersion::V1beta1,
            &key,
            "east",
            seen,
            &export(1),
            &service,
            defaults,
        )
    }

    fn refusal<T: std::fmt::Debug>(read: Result<T, String>) -> String {
        read.expect_err("refused")
    }

    /// Issue 46 (the class of CVE-2026-66788): one member's broker
    /// credentials cannot point another member's answers at loopback,
    /// link-local, multicast or unspecified addresses, nor at a protected
    /// namespace's names.
    #[test]
    fn export_records_with_unroutable_addresses_or_protected_namespaces_are_refused() {
        let read = broker_records("west".into(), trust());
        assert_eq!(read(&record("shop", &["10.0.0.1"])).unwrap().len(), 3);
        assert_eq!(
            refusal(read(&record("shop", &["127.0.0.1"]))),
            "ServiceImport web.shop.east: refused: ClusterIP 127.0.0.1 is loopback"
        );
        assert!(refusal(read(&record("shop", &["169.254.169.254"]))).ends_with("is link-local"));
        assert_eq!(
            refusal(read(&record("kube-system", &["10.0.0.1"]))),
            "ServiceImport web.kube-system.east: refused: namespace kube-system is protected"
        );
        assert!(refusal(read(&record("clusterset-broker", &["10.0.0.1"]))).contains("protected"));
    }

    /// Issue 46 item 2: a record gives the floor of its export's age (when
    /// the broker first saw it), this cluster's own record too, so that
    /// every member orders the exports alike.
    #[test]
    fn export_records_say_when_the_broker_first_saw_them() {
        let key = ServiceKey::new("shop", "web");
        let seen = Change::Upsert("east".into(), key, Object::Seen(1_796_648_400));
        let own = broker_records("east".into(), trust());
        assert_eq!(
            own(&record("shop", &["10.0.0.1"])).unwrap(),
            std::slice::from_ref(&seen)
        );
        let other = broker_records("west".into(), trust());
        assert_eq!(other(&record("shop", &["10.0.0.1"])).unwrap()[2], seen);
    }

    /// Issue 46: a VIP record rewritten to an address outside the VIP pools
    /// (a "VIP hijack") is refused; inside them it is read.
    #[test]
    fn vip_records_outside_the_pools_are_refused() {
        let read = broker_records("west".into(), trust());
        let key = ServiceKey::new("shop", "web");
        let vips =
            |list: &[&str]| -> Vec<IpAddr> { list.iter().map(|s| s.parse().unwrap()).collect() };
        let good = vip_record(
            McsVersion::V1beta1,
            &key,
            &vips(&["243.0.0.7", "fd00:c5e7::7"]),
        );
        assert_eq!(
            read(&good).unwrap(),
            [Change::Vips(
                key.clone(),
                vips(&["243.0.0.7", "fd00:c5e7::7"])
            )]
        );
        let hijack = vip_record(McsVersion::V1beta1, &key, &vips(&["243.0.0.7", "fd00::66"]));
        assert_eq!(
            refusal(read(&hijack)),
            "ServiceImport web.shop: refused: VIP fd00::66 is outside the VIP pools"
        );
    }

    /// Issue 46: another cluster's EndpointSlice with an unroutable
    /// endpoint, or of a protected namespace, is refused whole.
    #[test]
    fn broker_slices_with_unroutable_endpoints_are_refused() {
        let read = broker_slices("west".into(), trust());
        let key = ServiceKey::new("shop", "web");
        let object = |key: &ServiceKey, ip: &str| {
            let info = slice(&[("10.1.0.1", None, true), (ip, None, true)]);
            slice_object("s".into(), None, key, "east", &info)
        };
        assert_eq!(read(&object(&key, "10.1.0.2")).unwrap().len(), 1);
        assert_eq!(
            refusal(read(&object(&key, "224.0.0.1"))),
            "EndpointSlice s: refused: endpoint 224.0.0.1 is multicast"
        );
        let dns = ServiceKey::new("kube-system", "kube-dns");
        assert!(
            refusal(read(&object(&dns, "10.1.0.2"))).contains("namespace kube-system is protected")
        );
        // This cluster's own slices are not facts at all.
        let own = slice_object(
            "s".into(),
            None,
            &key,
            "west",
            &slice(&[("127.0.0.1", None, true)]),
        );
        assert!(read(&own).unwrap().is_empty());
    }

    /// Issue 46, item 3: a cluster with a declared allow-list and CIDRs
    /// (`--cluster-namespaces`, `--cluster-cidrs`) has its records outside
    /// them refused per record, with the reason.
    #[test]
    fn records_outside_a_clusters_declared_namespaces_or_cidrs_are_refused() {
        let read = broker_records("west".into(), trust());
        assert_eq!(
            refusal(read(&record("payroll", &["10.0.0.1"]))),
            "ServiceImport web.payroll.east: refused: namespace payroll is not among cluster east's namespaces"
        );
        assert_eq!(
            refusal(read(&record("shop", &["192.168.0.1"]))),
            "ServiceImport web.shop.east: refused: ClusterIP 192.168.0.1 is outside cluster east's CIDRs"
        );
        let slices = broker_slices("west".into(), trust());
        let info = slice(&[("10.1.0.1", None, true), ("172.16.0.1", None, true)]);
        let outside = slice_object(
            "s".into(),
            None,
            &ServiceKey::new("shop", "web"),
            "east",
            &info,
        );
        assert_eq!(
            refusal(slices(&outside)),
            "EndpointSlice s: refused: endpoint 172.16.0.1 is outside cluster east's CIDRs"
        );
    }
}
