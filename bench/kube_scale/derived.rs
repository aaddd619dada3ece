//! With derived Services on (`DERIVED=clusterset`, issue 47): what each
//! member wrote of them in its own API server, read over HTTP with the label
//! selectors a user would use (paged, so the bench's memory stays flat). The
//! run's other tables say what they cost; this one says they were there, so a
//! run where the members wrote none cannot pass for a cheap one.

use k8s_openapi::api::core::v1::Service;
use k8s_openapi::api::discovery::v1::EndpointSlice;
use kube::api::{Api, ListParams};
use kube::core::ObjectList;

use crate::apis::ApiServers;
use crate::layout::Layout;
use crate::phases::Started;
use crate::report::Table;

/// The derived Services' label (ARCHITECTURE.md, "Derived Services").
const DERIVED_SERVICES: &str = "app.kubernetes.io/managed-by=clusterset-dns.io";
/// The MCS EndpointSlices a member writes.
const MCS_SLICES: &str = "endpointslice.kubernetes.io/managed-by=clusterset-dns.io";
/// Those of them that stock kube-proxy reads for a Service: labelled with its name.
const MCS_SLICES_OF_A_SERVICE: &str =
    "endpointslice.kubernetes.io/managed-by=clusterset-dns.io,kubernetes.io/service-name";
/// A derived Service the API server refused the clusterset VIPs to.
const NOT_PINNED: &str = "clusterset-dns.io/not-pinned";
const PAGE: u32 = 2000;

/// One member's derived Services and slices, as its API server stores them.
#[derive(Debug, serde::Serialize)]
pub struct Derived {
    pub id: String,
    pub services: usize,
    /// Derived Services left with a ClusterIP of the member's own range.
    pub not_pinned: usize,
    /// Derived Services whose name is not `derived-<16 hex>`.
    pub misnamed: usize,
    pub mcs_slices: usize,
    /// MCS slices labelled `kubernetes.io/service-name` of a derived Service.
    pub labelled_slices: usize,
    /// The member's Service writes (create, update, delete) in the start.
    pub service_writes: u64,
}

/// Every object of `api` matching `selector`, page by page, folded by `each`.
async fn each_page<K, F>(api: &Api<K>, selector: &str, mut each: F)
where
    K: Clone + serde::de::DeserializeOwned + std::fmt::Debug,
    F: FnMut(&ObjectList<K>),
{
    let mut params = ListParams::default().labels(selector).limit(PAGE);
    loop {
        let page = api
            .list(&params)
            .await
            .unwrap_or_else(|e| panic!("listing {selector}: {e}"));
        each(&page);
        match page.metadata.continue_.filter(|c| !c.is_empty()) {
            Some(token) => params = params.continue_token(&token),
            None => return,
        }
    }
}

/// Counts them in every running member, prints the table and returns the rows.
pub async fn count(apis: &ApiServers, started: &[Started], run: &str) -> Vec<Derived> {
    let mut rows = Vec::new();
    for (ci, s) in started.iter().enumerate() {
        let client = apis.members[ci].client();
        let mut d = Derived {
            id: Layout::cluster(ci),
            services: 0,
            not_pinned: 0,
            misnamed: 0,
            mcs_slices: 0,
            labelled_slices: 0,
            service_writes: s
                .traffic
                .own
                .writes_by_resource
                .get("services")
                .copied()
                .unwrap_or(0),
        };
        let services: Api<Service> = Api::all(client.clone());
        each_page(&services, DERIVED_SERVICES, |page| {
            for svc in &page.items {
                d.services += 1;
                let annotations = svc.metadata.annotations.as_ref();
                d.not_pinned +=
                    usize::from(annotations.is_some_and(|a| a.contains_key(NOT_PINNED)));
                let name = svc.metadata.name.as_deref().unwrap_or_default();
                let hex = name.strip_prefix("derived-").unwrap_or_default();
                let named = hex.len() == 16 && hex.bytes().all(|b| b.is_ascii_hexdigit());
                d.misnamed += usize::from(!named);
            }
        })
        .await;
        let slices: Api<EndpointSlice> = Api::all(client);
        each_page(&slices, MCS_SLICES, |page| d.mcs_slices += page.items.len()).await;
        each_page(&slices, MCS_SLICES_OF_A_SERVICE, |page| {
            d.labelled_slices += page.items.len()
        })
        .await;
        rows.push(d);
    }
    let mut table = Table::new(
        &format!("Derived Services in each member's API server ({run})"),
        &[
            "member",
            "derived Services",
            "not pinned",
            "misnamed",
            "MCS slices",
            "labelled with a Service",
            "Service writes in the start",
        ],
    );
    for d in &rows {
        table.row(vec![
            d.id.clone(),
            d.services.to_string(),
            d.not_pinned.to_string(),
            d.misnamed.to_string(),
            d.mcs_slices.to_string(),
            d.labelled_slices.to_string(),
            d.service_writes.to_string(),
        ]);
    }
    table.print();
    rows
}
