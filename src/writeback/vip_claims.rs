//! Race-free clusterset VIPs, settled by the broker's API server.
//!
//! Two objects in the broker namespace make a VIP:
//! - a **claim** per address, a ConfigMap `clusterset-vip-<address>` naming
//!   the service that holds it: creating it is the create-or-fail that makes
//!   an address belong to one service only, whichever clusters allocate for
//!   whichever services at the same moment (the trick of the Kubernetes
//!   ClusterIP allocator, KEP-1880);
//! - the service's **VIP record** (see [`records::build::vip_record`]), listing its
//!   VIPs: created by the first cluster to allocate (`AlreadyExists` for the
//!   others, which then adopt it) and extended with `resourceVersion`
//!   preconditions (`Conflict`: re-read, recompute, retry).
//!
//! A VIP never changes while the record exists; the record and its claims
//! are deleted after the last export is gone.

use std::collections::BTreeMap;
use std::net::IpAddr;
use std::time::Duration;

use k8s_openapi::api::core::v1::ConfigMap;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta;
use kube::api::{ListParams, PostParams};
use kube::{Api, Client};
use tracing::debug;

use super::api::{delete_if_unchanged, is_code};
use crate::k8s::crd::{McsVersion, ServiceImport};
use crate::k8s::records::{self, MANAGER};
use crate::k8s::served_versions::ServedVersion;
use crate::model::{IpFamily, ServiceKey};

/// Label marking VIP claims.
const LABEL_CLAIM: &str = "clusterset-dns.io/vip-claim";
/// Selects the VIP claims.
pub const CLAIM_SELECTOR: &str = "clusterset-dns.io/vip-claim=true";
/// Attempts before giving up for now (the caller retries later).
const ATTEMPTS: u32 = 8;
/// Claims read per request of a sweep (the page size kube-rs watchers list with).
const SWEEP_PAGE: u32 = 500;

/// Why VIPs could not be settled.
#[derive(Debug, thiserror::Error)]
pub enum ClaimError {
    /// The API server failed or refused.
    #[error(transparent)]
    Api(#[from] kube::Error),
    /// Every candidate address of a family is claimed by other services.
    #[error("no free {0} VIP among the candidates")]
    Exhausted(IpFamily),
    /// Other writers kept winning.
    #[error("VIP record or claim kept changing under us ({ATTEMPTS} attempts)")]
    Contended,
}

/// What creating a claim found.
pub enum Taken {
    /// The claim was created: the address is `key`'s now.
    Created,
    /// `key` held it already.
    Held,
    /// Another service holds it (`<namespace>/<name>`).
    ByOther(String),
}

/// VIP claims and records in the broker namespace.
#[derive(Clone)]
pub struct VipClaims {
    /// The version the broker serves its records (ServiceImports) at.
    records: ServedVersion,
    namespace: String,
    claims: Api<ConfigMap>,
}

impl VipClaims {
    /// Claims kept in `namespace` of the broker, whose ServiceImports are
    /// served at `records`.
    pub fn new(broker: Client, records: ServedVersion, namespace: &str) -> Self {
        Self {
            records,
            namespace: namespace.to_owned(),
            claims: Api::namespaced(broker, namespace),
        }
    }

    /// The VIP records' API, at the version the broker serves now.
    fn records(&self) -> (McsVersion, Api<ServiceImport>) {
        let version = self.records.get();
        (version, self.records.api(version, Some(&self.namespace)))
    }

    /// The VIPs of `key`, one per family of `families` (in that order),
    /// claiming the missing ones from `candidates(family)` (best first).
    /// Settled by the API server: every caller, in any cluster, gets the same
    /// answer, and no address goes to two services.
    pub async fn ensure(
        &self,
        key: &ServiceKey,
        families: &[IpFamily],
        candidates: impl Fn(IpFamily) -> Vec<IpAddr>,
    ) -> Result<Vec<IpAddr>, ClaimError> {
        let name = records::vip_record_name(key);
        let mut mine = Vec::new();
        let result = self
            .settle(key, &name, families, &candidates, &mut mine)
            .await;
        // Claims taken here that the record did not keep go back.
        let kept = result.as_ref().map(Vec::as_slice).unwrap_or_default();
        for ip in mine.into_iter().filter(|ip| !kept.contains(ip)) {
            self.unclaim(key, ip).await?;
        }
        result
    }

    async fn settle(
        &self,
        key: &ServiceKey,
        name: &str,
        families: &[IpFamily],
        candidates: &impl Fn(IpFamily) -> Vec<IpAddr>,
        mine: &mut Vec<IpAddr>,
    ) -> Result<Vec<IpAddr>, ClaimError> {
        for attempt in 0..ATTEMPTS {
            if attempt > 0 {
                tokio::time::sleep(Duration::from_millis(5 << attempt.min(6))).await;
            }
            let (version, api) = self.records();
            let record = api.get_opt(name).await?;
            let mut vips = record
                .as_ref()
                .map(records::read::record_vips)
                .unwrap_or_default();
            let missing: Vec<IpFamily> = families
                .iter()
                .copied()
                .filter(|f| !vips.iter().any(|ip| IpFamily::of(ip) == *f))
                .collect();
            if missing.is_empty() {
                return Ok(vips);
            }
            for family in missing {
                let ip = self.claim(key, family, candidates(family), mine).await?;
                vips.push(ip);
            }
            let mut wanted = records::build::vip_record(version, key, &vips);
            let written = match record {
                None => api.create(&PostParams::default(), &wanted).await,
                Some(current) => {
                    wanted.metadata.resource_version = current.metadata.resource_version;
                    api.replace(name, &PostParams::default(), &wanted).await
                }
            };
            match written {
                Ok(_) => return Ok(vips),
                Err(e) if is_code(&e, 409) => {
                    debug!(service = %key, "another cluster wrote the VIP record first; re-reading");
                }
                Err(e) => return Err(e.into()),
            }
        }
        Err(ClaimError::Contended)
    }

    /// Claims the first free candidate for `key`: a claim another service
    /// holds is skipped, one `key` holds already is reused.
    async fn claim(
        &self,
        key: &ServiceKey,
        family: IpFamily,
        candidates: Vec<IpAddr>,
        mine: &mut Vec<IpAddr>,
    ) -> Result<IpAddr, ClaimError> {
        for ip in candidates {
            match self.take(key, ip).await? {
                Taken::Created => {
                    mine.push(ip);
                    return Ok(ip);
                }
                Taken::Held => return Ok(ip),
                Taken::ByOther(holder) => {
                    debug!(service = %key, %ip, %holder, "address claimed already; trying the next");
                }
            }
        }
        Err(ClaimError::Exhausted(family))
    }

    /// Writes the claim of `ip` for `key` again where it went missing while
    /// the VIP record listing it stands (the broker lost it, or an operator
    /// deleted it): without it another service could claim the address.
    /// [`Taken::Held`]: it was there after all (the watch of claims had not
    /// shown it yet).
    pub async fn restore(&self, key: &ServiceKey, ip: IpAddr) -> Result<Taken, ClaimError> {
        self.take(key, ip).await
    }

    /// Creates the claim of `ip` for `key`, or says who holds it. A claim
    /// that exists on create and is gone on the read that follows (deleted
    /// in between, as when the broker is being emptied) is tried again:
    /// read as "held by another" it would move the VIP to the next address.
    async fn take(&self, key: &ServiceKey, ip: IpAddr) -> Result<Taken, ClaimError> {
        for _ in 0..ATTEMPTS {
            match self
                .claims
                .create(&PostParams::default(), &claim(key, ip))
                .await
            {
                Ok(_) => return Ok(Taken::Created),
                Err(e) if is_code(&e, 409) => {
                    let Some(holder) = self.claims.get_opt(&claim_name(ip)).await? else {
                        continue;
                    };
                    return Ok(match claim_holder(&holder) {
                        Some(h) if h == key.to_string() => Taken::Held,
                        h => Taken::ByOther(h.unwrap_or_default()),
                    });
                }
                Err(e) => return Err(e.into()),
            }
        }
        Err(ClaimError::Contended)
    }

    /// Every claim: (address, the `<namespace>/<name>` holding it), read only.
    pub async fn list(&self) -> Result<Vec<(String, String)>, kube::Error> {
        let claims = self
            .claims
            .list(&ListParams::default().labels(CLAIM_SELECTOR))
            .await?;
        Ok(claims
            .items
            .iter()
            .map(|claim| {
                let field = |f: &str| {
                    claim
                        .data
                        .as_ref()
                        .and_then(|d| d.get(f))
                        .cloned()
                        .unwrap_or_default()
                };
                (field("address"), claim_holder(claim).unwrap_or_default())
            })
            .collect())
    }

    /// Deletes the VIP record of `key` and the claims it held (after the last export went).
    pub async fn release(&self, key: &ServiceKey) -> Result<(), kube::Error> {
        let name = records::vip_record_name(key);
        let (_, api) = self.records();
        let Some(record) = api.get_opt(&name).await? else {
            return Ok(());
        };
        match api
            .delete(&name, &delete_if_unchanged(&record.metadata))
            .await
        {
            Ok(_) => {}
            Err(e) if is_code(&e, 404) || is_code(&e, 409) => return Ok(()),
            Err(e) => return Err(e),
        }
        for ip in records::read::record_vips(&record) {
            self.unclaim(key, ip).await?;
        }
        Ok(())
    }

    /// Deletes claims older than `grace` that no VIP record keeps (left by a
    /// writer that stopped between claiming an address and writing the
    /// record); `kept` tells whether the VIP record of a service (in a
    /// namespace) lists an address. Returns how many went.
    pub async fn sweep(
        &self,
        kept: impl Fn(&str, &ServiceKey, IpAddr) -> bool,
        grace: Duration,
    ) -> Result<usize, kube::Error> {
        let now = jiff::Timestamp::now();
        let grace = jiff::SignedDuration::try_from(grace).unwrap_or_default();
        let mut swept = 0;
        // Page by page: at clusterset size the whole list of claims is
        // hundreds of megabytes once read, the largest allocation of a member.
        let mut params = ListParams::default()
            .labels(CLAIM_SELECTOR)
            .limit(SWEEP_PAGE);
        loop {
            let page = self.claims.list(&params).await?;
            for claim in &page.items {
                let old_enough = claim.metadata.creation_timestamp.as_ref();
                let old_enough = old_enough.is_some_and(|t| now.duration_since(t.0) >= grace);
                let data = claim.data.as_ref();
                let held = |field: &str| data.and_then(|d| d.get(field));
                let (Some(service), Some(Ok(ip))) = (
                    held("service").and_then(|s| s.split_once('/')),
                    held("address").map(|a| a.parse::<IpAddr>()),
                ) else {
                    continue;
                };
                let key = ServiceKey::new(service.0, service.1);
                let namespace = claim.metadata.namespace.as_deref().unwrap_or_default();
                if old_enough && !kept(namespace, &key, ip) {
                    self.unclaim(&key, ip).await?;
                    debug!(service = %key, %ip, "swept a claim no VIP record keeps");
                    swept += 1;
                }
            }
            match page.metadata.continue_.filter(|c| !c.is_empty()) {
                Some(token) => params = params.continue_token(&token),
                None => break,
            }
        }
        Ok(swept)
    }

    /// Deletes the claim of `ip` if `key` holds it.
    async fn unclaim(&self, key: &ServiceKey, ip: IpAddr) -> Result<(), kube::Error> {
        let name = claim_name(ip);
        let Some(claim) = self.claims.get_opt(&name).await? else {
            return Ok(());
        };
        if claim_holder(&claim) != Some(key.to_string()) {
            return Ok(());
        }
        match self
            .claims
            .delete(&name, &delete_if_unchanged(&claim.metadata))
            .await
        {
            Err(e) if !is_code(&e, 404) && !is_code(&e, 409) => Err(e),
            _ => Ok(()),
        }
    }
}

/// The name of the claim on an address: `clusterset-vip-243-0-0-1`,
/// `clusterset-vip-fd00-c5e7-0-0-0-0-0-1`.
pub fn claim_name(ip: IpAddr) -> String {
    let address = match ip {
        IpAddr::V4(v4) => v4.to_string().replace('.', "-"),
        IpAddr::V6(v6) => v6
            .segments()
            .iter()
            .map(|s| format!("{s:x}"))
            .collect::<Vec<_>>()
            .join("-"),
    };
    format!("clusterset-vip-{address}")
}

/// The claim `key` holds on `ip`.
pub(crate) fn claim(key: &ServiceKey, ip: IpAddr) -> ConfigMap {
    ConfigMap {
        metadata: ObjectMeta {
            name: Some(claim_name(ip)),
            labels: Some(BTreeMap::from([
                (LABEL_CLAIM.to_owned(), "true".to_owned()),
                (records::LABEL_MANAGED_BY.to_owned(), MANAGER.to_owned()),
            ])),
            ..ObjectMeta::default()
        },
        data: Some(BTreeMap::from([
            ("address".to_owned(), ip.to_string()),
            ("service".to_owned(), key.to_string()),
        ])),
        ..ConfigMap::default()
    }
}

fn claim_holder(claim: &ConfigMap) -> Option<String> {
    claim.data.as_ref()?.get("service").cloned()
}

/// The service holding a claim.
pub fn claim_service(claim: &ConfigMap) -> Option<ServiceKey> {
    let holder = claim.data.as_ref()?.get("service")?;
    let (namespace, name) = holder.split_once('/')?;
    Some(ServiceKey::new(namespace, name))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn claim_names_are_valid_object_names() {
        assert_eq!(
            claim_name("243.0.0.1".parse().unwrap()),
            "clusterset-vip-243-0-0-1"
        );
        assert_eq!(
            claim_name("fd00:c5e7::1".parse().unwrap()),
            "clusterset-vip-fd00-c5e7-0-0-0-0-0-1"
        );
    }
}
