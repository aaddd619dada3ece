//! Prometheus metrics of the process, every name prefixed `clusterset_dns_`:
//! the pipeline's, the sources' and the writer's here, and the DNS side's
//! own ([`DnsMetrics`]) registered in the same registry.

use std::collections::{BTreeMap, BTreeSet};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use prometheus::{
    Encoder, GaugeVec, Histogram, HistogramOpts, IntCounter, IntCounterVec, IntGauge, IntGaugeVec,
    Registry, TextEncoder,
};

use crate::dns::metrics::DnsMetrics;
use crate::engine::Engine;
use crate::model::IpFamily;
use crate::model::conditions::ConflictReason;
use crate::model::limits::Limit;
use crate::plumbing::listen::ListenerMetrics;
use crate::plumbing::metrics::{buckets, opts, register};

/// Every metric of the process.
pub struct Metrics {
    registry: Registry,
    /// The DNS side's own metrics (queries, TCP, TLS, transfers, NOTIFY).
    pub dns: Arc<DnsMetrics>,
    /// The operations listener's connections.
    pub operations: ListenerMetrics,
    reconciles: IntCounter,
    reconcile_errors: IntCounter,
    reconcile_duration: Histogram,
    imports: IntGaugeVec,
    endpoints: IntGauge,
    vips_allocated: IntGaugeVec,
    vips_free: GaugeVec,
    conflicts: IntGaugeVec,
    limited: IntGaugeVec,
    problems: IntGauge,
    sync_age: GaugeVec,
    synced_at: Mutex<BTreeMap<String, Instant>>,
    watch_restarts: IntCounterVec,
    watch_errors: IntCounterVec,
    objects_ignored: IntCounterVec,
    watch_not_served: IntGaugeVec,
    api_writes: IntCounterVec,
    leader: IntGauge,
    derived_not_pinned: IntGauge,
    cluster_live: IntGaugeVec,
}

impl Metrics {
    /// Creates and registers every metric.
    pub fn new() -> Self {
        let registry = Registry::new();
        crate::ops::build_info::register(&registry);
        let histogram = |name, help| HistogramOpts::from(opts(name, help)).buckets(buckets());
        let dns = Arc::new(DnsMetrics::new(&registry));
        Self {
            operations: ListenerMetrics {
                open: register(
                    &registry,
                    IntGauge::with_opts(opts(
                        "operations_connections",
                        "Open connections to the operations listener (/metrics, /healthz, /readyz).",
                    )),
                ),
                refused: register(
                    &registry,
                    IntCounterVec::new(
                        opts(
                            "operations_refused_total",
                            "Connections to the operations listener closed at once, by the limit reached.",
                        ),
                        &["limit"],
                    ),
                ),
                accept_errors: dns.accept_errors.clone(),
            },
            dns,
            reconciles: register(
                &registry,
                IntCounter::with_opts(opts(
                    "reconciles_total",
                    "Batches of source changes reconciled.",
                )),
            ),
            reconcile_errors: register(
                &registry,
                IntCounter::with_opts(opts(
                    "reconcile_errors_total",
                    "Reconciles that could not do everything (VIP pool exhausted, state not saved).",
                )),
            ),
            reconcile_duration: register(
                &registry,
                Histogram::with_opts(histogram(
                    "reconcile_duration_seconds",
                    "Time to reconcile a batch of changes and update DNS.",
                )),
            ),
            imports: register(
                &registry,
                IntGaugeVec::new(opts("imports", "ServiceImports by type."), &["type"]),
            ),
            endpoints: register(
                &registry,
                IntGauge::with_opts(opts("endpoints", "Ready endpoints across all imports.")),
            ),
            vips_allocated: register(
                &registry,
                IntGaugeVec::new(
                    opts("vips_allocated", "Clusterset VIPs given out, by pool."),
                    &["pool"],
                ),
            ),
            vips_free: register(
                &registry,
                GaugeVec::new(
                    opts("vips_free", "Addresses left in each VIP pool."),
                    &["pool"],
                ),
            ),
            conflicts: register(
                &registry,
                IntGaugeVec::new(
                    opts("conflicts", "ServiceExports in conflict, by reason."),
                    &["reason"],
                ),
            ),
            limited: register(
                &registry,
                IntGaugeVec::new(
                    opts(
                        "limited",
                        "Left out by a cap, by its flag: exports past max-exports-per-cluster or max-endpoints-per-cluster, imports without VIPs past max-vips-per-namespace.",
                    ),
                    &["limit"],
                ),
            ),
            problems: register(
                &registry,
                IntGauge::with_opts(opts(
                    "manifest_problems",
                    "Manifest files or documents that could not be used.",
                )),
            ),
            sync_age: register(
                &registry,
                GaugeVec::new(
                    opts(
                        "source_sync_age_seconds",
                        "Seconds since a source last completed a sync.",
                    ),
                    &["source"],
                ),
            ),
            synced_at: Mutex::default(),
            watch_restarts: register(
                &registry,
                IntCounterVec::new(
                    opts(
                        "watch_restarts_total",
                        "Kubernetes watches that had to list again (410 Gone, API server restart), by API server and resource.",
                    ),
                    &["source", "resource"],
                ),
            ),
            watch_errors: register(
                &registry,
                IntCounterVec::new(
                    opts(
                        "watch_errors_total",
                        "Kubernetes watch failures (retried with backoff), by API server and resource.",
                    ),
                    &["source", "resource"],
                ),
            ),
            objects_ignored: register(
                &registry,
                IntCounterVec::new(
                    opts(
                        "watch_objects_ignored_total",
                        "Watched objects ignored, by resource: unreadable, or refused by a rule of trust between clusters (a VIP outside the pools, an unroutable address, a protected namespace); the facts each gave before stay. The log line names the object and the reason.",
                    ),
                    &["resource"],
                ),
            ),
            watch_not_served: register(
                &registry,
                IntGaugeVec::new(
                    opts(
                        "watch_not_served",
                        "1 while a watch's API server answers 404 for its resource (the CRD is missing or does not serve the version read; what was read before is kept, nothing is deleted on its account), else 0; by API server and resource.",
                    ),
                    &["source", "resource"],
                ),
            ),
            api_writes: register(
                &registry,
                IntCounterVec::new(
                    opts(
                        "api_writes_total",
                        "Writes to Kubernetes API servers by kind and result (created, updated, deleted, conflict: retried after a re-read, error: retried with backoff).",
                    ),
                    &["kind", "result"],
                ),
            ),
            leader: register(
                &registry,
                IntGauge::with_opts(opts(
                    "leader",
                    "1 while this replica holds the leader Lease (and writes), else 0.",
                )),
            ),
            derived_not_pinned: register(
                &registry,
                IntGauge::with_opts(opts(
                    "derived_services_not_pinned",
                    "Derived Services the API server refused the clusterset VIPs (--derived-services clusterset): their imports answer a ClusterIP of this cluster instead.",
                )),
            ),
            cluster_live: register(
                &registry,
                IntGaugeVec::new(
                    opts(
                        "cluster_live",
                        "1 while a cluster's heartbeat on the broker is current, 0 once it is older than --cluster-timeout (its endpoints are then left out).",
                    ),
                    &["cluster"],
                ),
            ),
            registry,
        }
    }

    /// Records one reconcile and refreshes the clusterset gauges from the engine.
    pub fn reconciled(&self, engine: &Engine, took: Duration, ok: bool) {
        self.reconciles.inc();
        if !ok {
            self.reconcile_errors.inc();
        }
        self.reconcile_duration.observe(took.as_secs_f64());
        let stats = engine.stats();
        self.imports
            .with_label_values(&["ClusterSetIP"])
            .set(gauge(stats.cluster_set_ip));
        self.imports
            .with_label_values(&["Headless"])
            .set(gauge(stats.headless));
        self.endpoints.set(gauge(stats.endpoints));
        for reason in ConflictReason::ALL {
            let count = stats.conflicts.get(&reason).copied().unwrap_or(0);
            self.conflicts
                .with_label_values(&[reason.to_string()])
                .set(gauge(count));
        }
        for limit in Limit::ALL {
            self.limited
                .with_label_values(&[limit.flag()])
                .set(gauge(engine.limited(limit)));
        }
        for family in [IpFamily::IPv4, IpFamily::IPv6] {
            let pool = engine.vips().pools().pool(family).to_string();
            self.vips_allocated
                .with_label_values(&[&pool])
                .set(gauge(engine.vips().allocated(family)));
            self.vips_free
                .with_label_values(&[&pool])
                .set(engine.vips().free(family) as f64);
        }
    }

    /// Records that a source completed a sync now, with its current problem count.
    pub fn source_synced(&self, source: &str, problems: usize) {
        self.problems.set(gauge(problems));
        self.mark_synced(source);
    }

    /// Records that `source` (a manifest directory, an API server) is in sync now.
    pub fn mark_synced(&self, source: &str) {
        self.synced_at
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .insert(source.to_owned(), Instant::now());
    }

    /// Counts a watch that listed again after its first sync.
    pub fn watch_restarted(&self, source: &str, resource: &str) {
        self.watch_restarts
            .with_label_values(&[source, resource])
            .inc();
    }

    /// Counts a watched object that was ignored (see `watch_objects_ignored_total`).
    pub fn object_ignored(&self, resource: &str) {
        self.objects_ignored.with_label_values(&[resource]).inc();
    }

    /// Counts a failed watch request.
    pub fn watch_failed(&self, source: &str, resource: &str) {
        self.watch_errors
            .with_label_values(&[source, resource])
            .inc();
    }

    /// Records whether `resource`'s API server serves it (see `watch_not_served`).
    pub fn set_not_served(&self, source: &str, resource: &str, not_served: bool) {
        self.watch_not_served
            .with_label_values(&[source, resource])
            .set(i64::from(not_served));
    }

    /// Counts a write to an API server.
    pub fn api_write(&self, kind: &str, result: &str) {
        self.api_writes.with_label_values(&[kind, result]).inc();
    }

    /// Records how many derived Services hold no clusterset VIPs.
    pub fn set_derived_not_pinned(&self, count: usize) {
        self.derived_not_pinned.set(gauge(count));
    }

    /// Records whether this replica leads.
    pub fn set_leader(&self, leading: bool) {
        self.leader.set(i64::from(leading));
    }

    /// Records whether each other cluster's heartbeat is current, and drops
    /// the series of a cluster `shown` before that has no heartbeat any
    /// more (its Lease deleted: the cluster left), so that a cluster once
    /// dead does not stay dead on the dashboard and in the alert for good.
    pub fn set_clusters_live<'a>(
        &self,
        shown: &mut BTreeSet<String>,
        verdicts: impl IntoIterator<Item = (&'a str, bool)>,
    ) {
        let mut now = BTreeSet::new();
        for (cluster, live) in verdicts {
            self.cluster_live
                .with_label_values(&[cluster])
                .set(i64::from(live));
            now.insert(cluster.to_owned());
        }
        for gone in shown.difference(&now) {
            // Absent already is what removing wants.
            let _ = self.cluster_live.remove_label_values(&[gone]);
        }
        *shown = now;
    }

    /// The longest time since any source synced (None before any sync).
    pub fn oldest_sync(&self) -> Option<Duration> {
        let synced = self.synced_at.lock().unwrap_or_else(|e| e.into_inner());
        synced.values().map(Instant::elapsed).max()
    }

    /// Every metric in the Prometheus text format.
    pub fn render(&self) -> String {
        for (source, at) in self
            .synced_at
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .iter()
        {
            self.sync_age
                .with_label_values(&[source])
                .set(at.elapsed().as_secs_f64());
        }
        let mut out = Vec::new();
        TextEncoder::new()
            .encode(&self.registry.gather(), &mut out)
            .expect("text encoding does not fail");
        String::from_utf8(out).expect("the text format is UTF-8")
    }
}

impl Default for Metrics {
    fn default() -> Self {
        Self::new()
    }
}

fn gauge(n: usize) -> i64 {
    i64::try_from(n).unwrap_or(i64::MAX)
}

#[cfg(test)]
mod tests {
    use prometheus::core::Collector;

    use super::*;

    /// The `cluster_live` series of `metrics`, by cluster.
    fn live(metrics: &Metrics) -> BTreeMap<String, i64> {
        let families = metrics.cluster_live.collect();
        families[0]
            .get_metric()
            .iter()
            .map(|m| {
                let cluster = m.get_label()[0].value().to_owned();
                (cluster, m.get_gauge().get_value() as i64)
            })
            .collect()
    }

    #[test]
    fn a_cluster_whose_heartbeat_is_gone_leaves_the_live_gauge() {
        let metrics = Metrics::new();
        let mut shown = BTreeSet::new();
        metrics.set_clusters_live(&mut shown, [("west", false), ("north", true)]);
        let both = BTreeMap::from([("north".to_owned(), 1), ("west".to_owned(), 0)]);
        assert_eq!(live(&metrics), both);
        metrics.set_clusters_live(&mut shown, [("north", true)]);
        assert_eq!(live(&metrics), BTreeMap::from([("north".to_owned(), 1)]));
    }
}
