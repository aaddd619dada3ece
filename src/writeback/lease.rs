//! Leader election on a `coordination.k8s.io/v1` Lease, as client-go's
//! leaderelection does it: the holder renews every sixth of the lease
//! duration; another replica takes over once the record has not changed for a
//! full duration *as it observed it* (on its own monotonic clock, so a holder
//! whose clock is skewed is neither overthrown early nor kept forever); the
//! leader stops leading when it could not renew within the renew deadline,
//! two thirds of the duration, before anyone else may take over. Every write
//! carries the `resourceVersion` it read, so two replicas never both win.
//! Only the leader writes; every replica serves DNS.

use std::time::Duration;

use jiff::Timestamp;
use k8s_openapi::api::coordination::v1::{Lease, LeaseSpec};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::{MicroTime, ObjectMeta};
use kube::api::PostParams;
use kube::{Api, Client};
use tokio::sync::watch;
use tokio::time::Instant;
use tokio_util::sync::CancellationToken;
use tracing::{info, warn};

use super::api::conflict_is_false;
use super::observed::Observed;
use crate::ops::metrics::Metrics;

/// Name of the Lease in the lease namespace.
pub const LEASE_NAME: &str = "clusterset-dns";

/// One replica's candidacy.
pub struct Candidate {
    api: Api<Lease>,
    identity: String,
    duration: Duration,
    /// The Lease as last read or written, and since when (this replica's clock).
    observed: Option<Observed<Option<LeaseSpec>>>,
}

impl Candidate {
    /// A candidate named `identity` for the Lease in `namespace`.
    pub fn new(client: Client, namespace: &str, identity: String, duration: Duration) -> Self {
        Self {
            api: Api::namespaced(client, namespace),
            identity,
            duration,
            observed: None,
        }
    }

    /// How often the Lease is read (and renewed by its holder).
    pub fn retry_period(&self) -> Duration {
        self.duration / 6
    }

    /// How long the leader keeps leading without a successful renewal.
    pub fn renew_deadline(&self) -> Duration {
        self.duration * 2 / 3
    }

    /// Campaigns until `shutdown`, publishing whether this replica leads on
    /// `leading`; gives the Lease up on the way out.
    pub async fn run(
        mut self,
        leading: watch::Sender<bool>,
        shutdown: CancellationToken,
        metrics: &Metrics,
    ) {
        let mut renewed = None::<Instant>;
        loop {
            let deadline = renewed.map(|at| at + self.renew_deadline());
            let limit = deadline.unwrap_or_else(|| Instant::now() + self.renew_deadline());
            let round = tokio::time::timeout_at(limit, self.try_acquire_or_renew()).await;
            let now = Instant::now();
            match round {
                Ok(Ok(true)) => renewed = Some(now),
                Ok(Ok(false)) => renewed = None,
                Ok(Err(error)) => {
                    metrics.api_write("Lease", "error");
                    warn!(error = %error, lease = LEASE_NAME, "cannot read or renew the leader Lease");
                }
                Err(_) => {
                    metrics.api_write("Lease", "error");
                    warn!(
                        lease = LEASE_NAME,
                        "reading or renewing the leader Lease timed out"
                    );
                }
            }
            let deadline = renewed.map(|at| at + self.renew_deadline());
            if deadline.is_some_and(|d| now >= d) {
                renewed = None;
            }
            let held = renewed.is_some();
            if *leading.borrow() != held {
                info!(identity = %self.identity, leading = held, "leadership changed");
                leading.send_replace(held);
            }
            // A leader failing to renew wakes at its deadline to step down on time.
            let next =
                (now + self.retry_period()).min(deadline.unwrap_or(Instant::now() + self.duration));
            tokio::select! {
                () = shutdown.cancelled() => break,
                () = tokio::time::sleep_until(next) => {}
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
    async fn try_acquire_or_renew(&mut self) -> Result<bool, kube::Error> {
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
            return self.write(self.api.create(&PostParams::default(), &lease).await);
        };
        let read_at = Instant::now();
        match &mut self.observed {
            Some(observed) => observed.update(lease.spec.clone(), read_at),
            None => self.observed = Some(Observed::new(lease.spec.clone(), read_at)),
        }
        let unchanged_for = self
            .observed
            .as_ref()
            .map_or(Duration::ZERO, |o| o.unchanged_for(read_at));
        let spec = lease.spec.get_or_insert_default();
        let holder = spec.holder_identity.as_deref().filter(|h| !h.is_empty());
        if holder != Some(self.identity.as_str()) {
            let lasts = spec.lease_duration_seconds.unwrap_or(seconds);
            let lasts = Duration::from_secs(u64::try_from(lasts).unwrap_or(0));
            if holder.is_some() && unchanged_for < lasts {
                return Ok(false);
            }
            spec.holder_identity = Some(self.identity.clone());
            spec.acquire_time = Some(now.clone());
            spec.lease_transitions = Some(spec.lease_transitions.unwrap_or(0) + 1);
        }
        spec.lease_duration_seconds = Some(seconds);
        spec.renew_time = Some(now);
        let written = self
            .api
            .replace(LEASE_NAME, &PostParams::default(), &lease)
            .await;
        self.write(written)
    }

    /// The outcome of writing the Lease; what was written is now the observed record.
    fn write(&mut self, written: Result<Lease, kube::Error>) -> Result<bool, kube::Error> {
        conflict_is_false(written.map(|lease| {
            self.observed = Some(Observed::new(lease.spec, Instant::now()));
        }))
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
