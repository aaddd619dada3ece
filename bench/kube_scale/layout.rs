//! The clusterset of `bench/gen_clusterset.py` (the one `bench/scale.sh`
//! measures embedded mode on), as API objects: the same names, addresses and
//! endpoint layout, so both modes are measured on the same data.

use std::net::Ipv4Addr;

use serde_json::json;
use test_support::{Doc, cluster_ip, ep, export, headless, namespace, slice};

/// Services are spread over `ns0..ns99`, as gen_clusterset.py does.
pub const NAMESPACES: usize = 100;
/// Endpoints per EndpointSlice (the EndpointSlice controller's default).
const SLICE_MAX: usize = 100;
const POD_BASE: u32 = u32::from_be_bytes([10, 0, 0, 0]);
const SVC_BASE: u32 = u32::from_be_bytes([172, 16, 0, 0]);

/// Sizes of the clusterset.
#[derive(Clone, Copy, Debug, serde::Serialize)]
pub struct Layout {
    /// ClusterSetIP services `svc-<i>.ns<i % 100>`.
    pub services: usize,
    /// Headless services `hl-<h>.ns<h % 100>`.
    pub headless: usize,
    /// Ready endpoints of each headless service in each cluster.
    pub endpoints: usize,
    /// Ready endpoints of each ClusterSetIP service in each cluster
    /// (`CSIP_ENDPOINTS`, default 0 as in gen_clusterset.py): with derived
    /// Services on, their MCS slices are the ones labelled with a derived
    /// Service, so a run can show that label is written.
    pub csip_endpoints: usize,
    pub clusters: usize,
}

impl Layout {
    /// Checks the address blocks fit, as gen_clusterset.py does.
    pub fn new(
        services: usize,
        headless: usize,
        endpoints: usize,
        csip_endpoints: usize,
        clusters: usize,
    ) -> Self {
        let lay = Self {
            services,
            headless,
            endpoints,
            csip_endpoints,
            clusters,
        };
        assert!(
            headless * endpoints + services * csip_endpoints <= lay.pod_block() as usize,
            "HEADLESS x ENDPOINTS + SERVICES x CSIP_ENDPOINTS does not fit 10.0.0.0/8 split in {clusters}"
        );
        assert!(
            csip_endpoints <= SLICE_MAX,
            "CSIP_ENDPOINTS: one slice each, at most {SLICE_MAX}"
        );
        assert!(
            services <= lay.svc_block() as usize,
            "SERVICES does not fit 172.16.0.0/12 split in {clusters}"
        );
        lay
    }

    fn pod_block(&self) -> u32 {
        (1 << 24) / self.clusters as u32
    }

    fn svc_block(&self) -> u32 {
        (1 << 20) / self.clusters as u32
    }

    /// Cluster ids `c1..cC` (`ci` counts from 0).
    pub fn cluster(ci: usize) -> String {
        format!("c{}", ci + 1)
    }

    pub fn csip(i: usize) -> (String, String) {
        (format!("ns{}", i % NAMESPACES), format!("svc-{i}"))
    }

    pub fn hl(h: usize) -> (String, String) {
        (format!("ns{}", h % NAMESPACES), format!("hl-{h}"))
    }

    pub fn cluster_ip(&self, ci: usize, i: usize) -> Ipv4Addr {
        Ipv4Addr::from(SVC_BASE + ci as u32 * self.svc_block() + i as u32)
    }

    pub fn pod_ip(&self, ci: usize, h: usize, j: usize) -> Ipv4Addr {
        Ipv4Addr::from(POD_BASE + ci as u32 * self.pod_block() + (h * self.endpoints + j) as u32)
    }

    /// Endpoint `j` of ClusterSetIP service `i` in cluster `ci`: past the
    /// headless services' endpoints in the cluster's block.
    fn csip_pod_ip(&self, ci: usize, i: usize, j: usize) -> Ipv4Addr {
        let offset = self.headless * self.endpoints + i * self.csip_endpoints + j;
        Ipv4Addr::from(POD_BASE + ci as u32 * self.pod_block() + offset as u32)
    }

    /// Endpoints with an even index have a hostname, the others none.
    pub fn hostname(h: usize, j: usize) -> Option<String> {
        (j % 2 == 0).then(|| format!("hl-{h}-{j}"))
    }

    /// EndpointSlices of each headless service in each cluster.
    pub fn slices_per_headless(&self) -> usize {
        self.endpoints.div_ceil(SLICE_MAX)
    }

    /// EndpointSlice `s` of headless service `h` in cluster `ci`.
    pub fn slice_name(ci: usize, h: usize, s: usize) -> String {
        format!("hl-{h}-{}-{s}", Self::cluster(ci))
    }

    /// Objects of one member cluster, namespaces first.
    pub fn member_objects(&self, ci: usize) -> impl Iterator<Item = Doc> + '_ {
        let namespaces = (0..NAMESPACES).map(|n| namespace(&format!("ns{n}")));
        let services = (0..self.services).flat_map(move |i| {
            let (ns, name) = Self::csip(i);
            let ip = self.cluster_ip(ci, i).to_string();
            let mut docs = vec![
                cluster_ip(&ns, &name, &[&ip]),
                export(&ns, &name).created(&created(ci)),
            ];
            if self.csip_endpoints > 0 {
                let endpoints: Vec<_> = (0..self.csip_endpoints)
                    .map(|j| ep(&self.csip_pod_ip(ci, i, j).to_string()))
                    .collect();
                let ports = json!([{"name": "http", "port": 80, "protocol": "TCP"}]);
                let slice_name = format!("{name}-{}", Self::cluster(ci));
                docs.push(slice(&ns, &slice_name, &name, &endpoints).set("ports", ports));
            }
            docs
        });
        let headless = (0..self.headless).flat_map(move |h| self.headless_objects(ci, h));
        namespaces.chain(services).chain(headless)
    }

    fn headless_objects(&self, ci: usize, h: usize) -> Vec<Doc> {
        let (ns, name) = Self::hl(h);
        let mut docs = vec![
            headless(&ns, &name, &["IPv4"]).ports(&[("http", 8080, "TCP")]),
            export(&ns, &name).created(&created(ci)),
        ];
        for (s, first) in (0..self.endpoints).step_by(SLICE_MAX).enumerate() {
            let endpoints: Vec<_> = (first..self.endpoints.min(first + SLICE_MAX))
                .map(|j| {
                    let e = ep(&self.pod_ip(ci, h, j).to_string());
                    match Self::hostname(h, j) {
                        Some(host) => e.host(&host),
                        None => e,
                    }
                })
                .collect();
            let ports = json!([{"name": "http", "port": 8080, "protocol": "TCP"}]);
            docs.push(
                slice(&ns, &Self::slice_name(ci, h, s), &name, &endpoints).set("ports", ports),
            );
        }
        docs
    }
}

/// Export creation times differ per cluster, a day apart from 2026-01-10,
/// as in gen_clusterset.py (past day 31 they go on into February and later).
fn created(ci: usize) -> String {
    let first: jiff::Timestamp = "2026-01-10T09:00:00Z".parse().expect("a timestamp");
    let at = first + jiff::SignedDuration::from_hours(24 * ci as i64);
    at.to_string()
}
