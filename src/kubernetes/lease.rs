//! Leader election on a `coordination.k8s.io/v1` Lease, as client-go's
//! leaderelection does it: the holder renews every third of the lease
//! duration; another replica takes over once a renewal is a full duration
//! late; every write carries the `resourceVersion` it read, so two replicas
//! never both win. Only the leader writes; every replica serves DNS.

use std::time::Duration;

use jiff::Timestamp;
use k8s_openapi::api::coordination::v1::{Lease, LeaseSpec};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::{MicroTime, ObjectMeta};
use kube::api::PostParams;
use kube::{Api, Client};
use tokio::sync::watch;
use tokio_util::sync::CancellationToken;
use tracing::{info, warn};

use super::api::conflict_is_false;
use crate::metrics::Metrics;

/// Name of the Lease in the lease namespace.
pub const LEASE_NAME: &str = "clusterset-dns";

/// One replica's candidacy.
pub struct Candidate {
    api: Api<Lease>,
    identity: String,
    duration: Duration,
}

impl Candidate {
    /// A candidate named `identity` for the Lease in `namespace`.
    pub fn new(client: Client, namespace: &str, identity: String, duration: Duration) -> Self {
        Self {
            api: Api::namespaced(client, namespace),
            identity,
            duration,
        }
    }

    /// Campaigns until `shutdown`, publishing whether this replica leads on
    /// `leading`; gives the Lease up on the way out.
    pub async fn run(
        self,
        leading: watch::Sender<bool>,
        shutdown: CancellationToken,
        metrics: &Metrics,
    ) {
        let mut last_renewal = None::<tokio::time::Instant>;
        loop {
            let held = match self.try_acquire_or_renew().await {
                Ok(held) => held,
                Err(error) => {
                    metrics.api_write("Lease", "error");
                    warn!(error = %error, lease = LEASE_NAME, "cannot read or renew the leader Lease");
                    // Keep leading until the lease would have expired for the others.
                    last_renewal.is_some_and(|at| at.elapsed() < self.duration)
                }
            };
            if held {
                last_renewal = Some(tokio::time::Instant::now());
            } else {
                last_renewal = None;
            }
            if *leading.borrow() != held {
                info!(identity = %self.identity, leading = held, "leadership changed");
                leading.send_replace(held);
            }
            tokio::select! {
                () = shutdown.cancelled() => break,
                () = tokio::time::sleep(self.duration / 3) => {}
            }
        }
        if *leading.borrow() {
            leading.send_replace(false);
            match self.release().await {
                Ok(()) => info!(identity = %self.identity, "released the leader Lease"),
                Err(error) => warn!(error = %error, "cannot release the leader Lease"),
            }
        }
    }

    /// One round: true if this replica holds the Lease afterwards.
    async fn try_acquire_or_renew(&self) -> Result<bool, kube::Error> {
        let now = MicroTime(Timestamp::now());
        let seconds = i32::try_from(self.duration.as_secs()).unwrap_or(i32::MAX);
        let Some(mut lease) = self.api.get_opt(LEASE_NAME).await? else {
            let lease = Lease {
                metadata: ObjectMeta {
                    name: Some(LEASE_NAME.into()),
                    ..ObjectMeta::default()
                },
                spec: Some(LeaseSpec {
                    holder_identity: Some(self.identity.clone()),
                    lease_duration_seconds: Some(seconds),
                    acquire_time: Some(now.clone()),
                    renew_time: Some(now),
                    lease_transitions: Some(0),
                    ..LeaseSpec::default()
                }),
            };
            return conflict_is_false(self.api.create(&PostParams::default(), &lease).await);
        };
        let spec = lease.spec.get_or_insert_default();
        let holder = spec.holder_identity.as_deref().filter(|h| !h.is_empty());
        if holder != Some(self.identity.as_str()) {
            let expires = spec.renew_time.as_ref().and_then(|MicroTime(t)| {
                let lasts = spec.lease_duration_seconds.unwrap_or(seconds);
                t.checked_add(jiff::SignedDuration::from_secs(i64::from(lasts)))
                    .ok()
            });
            if holder.is_some() && expires.is_some_and(|e| e > now.0) {
                return Ok(false);
            }
            spec.holder_identity = Some(self.identity.clone());
            spec.acquire_time = Some(now.clone());
            spec.lease_transitions = Some(spec.lease_transitions.unwrap_or(0) + 1);
        }
        spec.lease_duration_seconds = Some(seconds);
        spec.renew_time = Some(now);
        conflict_is_false(
            self.api
                .replace(LEASE_NAME, &PostParams::default(), &lease)
                .await,
        )
    }

    /// Gives the Lease up so another replica takes over at once.
    async fn release(&self) -> Result<(), kube::Error> {
        let Some(mut lease) = self.api.get_opt(LEASE_NAME).await? else {
            return Ok(());
        };
        let spec = lease.spec.get_or_insert_default();
        if spec.holder_identity.as_deref() != Some(self.identity.as_str()) {
            return Ok(());
        }
        spec.holder_identity = None;
        spec.lease_duration_seconds = Some(1);
        spec.renew_time = Some(MicroTime(Timestamp::now()));
        conflict_is_false(
            self.api
                .replace(LEASE_NAME, &PostParams::default(), &lease)
                .await,
        )
        .map(|_| ())
    }
}

/// This replica's identity: `$POD_NAME` or the host name, plus a random suffix.
pub fn default_identity() -> String {
    let base = std::env::var("POD_NAME")
        .ok()
        .filter(|s| !s.is_empty())
        .or_else(|| nix::unistd::gethostname().ok()?.into_string().ok())
        .unwrap_or_else(|| "clusterset-dns".into());
    let nanos = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| d.subsec_nanos());
    format!("{base}-{:08x}", nanos ^ std::process::id().rotate_left(16))
}
