//! Prometheus metrics, every name prefixed `clusterset_dns_`. The query path
//! counts into per-thread [`DnsRecorder`]s flushed once per batch, so
//! counting costs no shared writes per query.

use std::collections::BTreeMap;
use std::sync::Mutex;
use std::time::{Duration, Instant};

use hickory_proto::op::ResponseCode;
use hickory_proto::rr::RecordType;
use prometheus::core::Collector;
use prometheus::local::{LocalHistogram, LocalIntCounter};
use prometheus::{
    Encoder, GaugeVec, Histogram, HistogramOpts, HistogramVec, IntCounter, IntCounterVec, IntGauge,
    IntGaugeVec, Opts, Registry, TextEncoder, exponential_buckets,
};

use crate::dns::{COMMON_TYPES, Problem};
use crate::engine::Engine;
use crate::model::IpFamily;
use crate::model::conditions::ConflictReason;

/// Response codes counted by name (as `dig` spells them); the rest count as `other`.
const RCODES: [(ResponseCode, &str); 7] = [
    (ResponseCode::NoError, "NOERROR"),
    (ResponseCode::NXDomain, "NXDOMAIN"),
    (ResponseCode::ServFail, "SERVFAIL"),
    (ResponseCode::Refused, "REFUSED"),
    (ResponseCode::FormErr, "FORMERR"),
    (ResponseCode::NotImp, "NOTIMP"),
    (ResponseCode::BADVERS, "BADVERS"),
];

/// Every metric of the process.
pub struct Metrics {
    registry: Registry,
    /// Query-path metrics.
    pub dns: DnsMetrics,
    /// DNS over TLS handshakes and certificate reloads.
    pub tls: TlsMetrics,
    reconciles: IntCounter,
    reconcile_errors: IntCounter,
    reconcile_duration: Histogram,
    imports: IntGaugeVec,
    endpoints: IntGauge,
    vips_allocated: IntGaugeVec,
    vips_free: GaugeVec,
    conflicts: IntGaugeVec,
    problems: IntGauge,
    sync_age: GaugeVec,
    synced_at: Mutex<BTreeMap<String, Instant>>,
    watch_restarts: IntCounterVec,
    watch_errors: IntCounterVec,
    api_writes: IntCounterVec,
    leader: IntGauge,
    transfers: IntCounterVec,
    notifies: IntCounterVec,
    cluster_live: IntGaugeVec,
}

/// Requests, responses and durations of DNS queries.
pub struct DnsMetrics {
    requests: IntCounterVec,
    responses: IntCounterVec,
    duration: HistogramVec,
    malformed: IntCounterVec,
    /// TCP connection counts (RFC 7766 §10 limits).
    pub tcp: TcpMetrics,
}

/// Open, refused and timed-out DNS TCP connections.
#[derive(Clone)]
pub struct TcpMetrics {
    /// Connections open now.
    pub open: IntGauge,
    /// Connections closed at once, by the limit reached (`total`, `client`).
    pub refused: IntCounterVec,
    /// Connections closed because the client did not read a response in time.
    pub write_timeouts: IntCounter,
}

/// Per-thread counters for one protocol; [`DnsRecorder::flush`] publishes them.
pub struct DnsRecorder {
    requests: Vec<LocalIntCounter>,
    responses: Vec<LocalIntCounter>,
    duration: LocalHistogram,
    malformed: Vec<LocalIntCounter>,
}

fn opts(name: &str, help: &str) -> Opts {
    Opts::new(format!("clusterset_dns_{name}"), help)
}

impl Metrics {
    /// Creates and registers every metric.
    pub fn new() -> Self {
        let registry = Registry::new();
        crate::ops::build_info::register(&registry);
        let buckets = exponential_buckets(1e-6, 4.0, 10).expect("valid buckets");
        let histogram = |name, help| HistogramOpts::from(opts(name, help)).buckets(buckets.clone());
        let dns = DnsMetrics {
            requests: register(
                &registry,
                IntCounterVec::new(
                    opts(
                        "dns_requests_total",
                        "DNS requests by protocol and query type.",
                    ),
                    &["proto", "type"],
                ),
            ),
            responses: register(
                &registry,
                IntCounterVec::new(
                    opts(
                        "dns_responses_total",
                        "DNS responses by protocol and response code.",
                    ),
                    &["proto", "rcode"],
                ),
            ),
            duration: register(
                &registry,
                HistogramVec::new(
                    histogram(
                        "dns_request_duration_seconds",
                        "Time to answer a DNS request.",
                    ),
                    &["proto"],
                ),
            ),
            malformed: register(
                &registry,
                IntCounterVec::new(
                    opts(
                        "dns_malformed_requests_total",
                        "Malformed DNS requests by protocol and problem.",
                    ),
                    &["proto", "problem"],
                ),
            ),
            tcp: TcpMetrics {
                open: register(
                    &registry,
                    IntGauge::with_opts(opts("dns_tcp_connections", "Open DNS TCP connections.")),
                ),
                refused: register(
                    &registry,
                    IntCounterVec::new(
                        opts(
                            "dns_tcp_refused_total",
                            "DNS TCP connections closed at once, by the limit reached.",
                        ),
                        &["limit"],
                    ),
                ),
                write_timeouts: register(
                    &registry,
                    IntCounter::with_opts(opts(
                        "dns_tcp_write_timeouts_total",
                        "DNS TCP connections closed because the client did not read in time.",
                    )),
                ),
            },
        };
        Self {
            dns,
            tls: TlsMetrics::new(&registry),
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
            transfers: register(
                &registry,
                IntCounterVec::new(
                    opts(
                        "zone_transfers_total",
                        "Zone transfer requests by type (AXFR, IXFR) and result (full, current: the SOA alone, refused: address not allowed, notauth: not a zone apex, servfail: not loaded yet).",
                    ),
                    &["type", "result"],
                ),
            ),
            notifies: register(
                &registry,
                IntCounterVec::new(
                    opts(
                        "notifies_total",
                        "NOTIFY messages to secondaries by result (sent, acknowledged, rejected: answered with an error code, malformed: a response that did not decode or match).",
                    ),
                    &["result"],
                ),
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

    /// Counts a zone transfer request.
    pub fn zone_transfer(&self, kind: &str, result: &str) {
        self.transfers.with_label_values(&[kind, result]).inc();
    }

    /// Counts a NOTIFY event.
    pub fn notify(&self, result: &str) {
        self.notifies.with_label_values(&[result]).inc();
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
        for reason in ALL_REASONS {
            let count = stats.conflicts.get(&reason).copied().unwrap_or(0);
            self.conflicts
                .with_label_values(&[reason.to_string()])
                .set(gauge(count));
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

    /// Counts a failed watch request.
    pub fn watch_failed(&self, source: &str, resource: &str) {
        self.watch_errors
            .with_label_values(&[source, resource])
            .inc();
    }

    /// Counts a write to an API server.
    pub fn api_write(&self, kind: &str, result: &str) {
        self.api_writes.with_label_values(&[kind, result]).inc();
    }

    /// Records whether this replica leads.
    pub fn set_leader(&self, leading: bool) {
        self.leader.set(i64::from(leading));
    }

    /// Records whether another cluster's heartbeat is current.
    pub fn set_cluster_live(&self, cluster: &str, live: bool) {
        self.cluster_live
            .with_label_values(&[cluster])
            .set(i64::from(live));
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

const ALL_REASONS: [ConflictReason; 10] = [
    ConflictReason::PortConflict,
    ConflictReason::TypeConflict,
    ConflictReason::SessionAffinityConflict,
    ConflictReason::SessionAffinityConfigConflict,
    ConflictReason::LabelsConflict,
    ConflictReason::AnnotationsConflict,
    ConflictReason::InternalTrafficPolicyConflict,
    ConflictReason::TrafficDistributionConflict,
    ConflictReason::IPFamilyConflict,
    ConflictReason::ClusterSetIPConflict,
];

fn gauge(n: usize) -> i64 {
    i64::try_from(n).unwrap_or(i64::MAX)
}

/// Registers a new metric (names are fixed and unique: failure is a bug).
fn register<T: Collector + Clone + 'static>(
    registry: &Registry,
    metric: prometheus::Result<T>,
) -> T {
    let metric = metric.expect("valid metric options");
    registry
        .register(Box::new(metric.clone()))
        .expect("metric names are unique");
    metric
}

/// Counters of the DNS over TLS listener.
pub struct TlsMetrics {
    /// TLS handshakes completed.
    pub handshakes: IntCounter,
    /// TLS handshakes that failed or timed out.
    pub handshake_failures: IntCounter,
    /// Certificate reloads by result (`loaded`, `rejected`: the old one kept serving).
    reloads: IntCounterVec,
}

impl TlsMetrics {
    fn new(registry: &Registry) -> Self {
        Self {
            handshakes: register(
                registry,
                IntCounter::with_opts(opts(
                    "tls_handshakes_total",
                    "DNS over TLS handshakes completed.",
                )),
            ),
            handshake_failures: register(
                registry,
                IntCounter::with_opts(opts(
                    "tls_handshake_failures_total",
                    "DNS over TLS handshakes that failed or timed out.",
                )),
            ),
            reloads: register(
                registry,
                IntCounterVec::new(
                    opts(
                        "tls_certificate_reloads_total",
                        "Changed TLS certificate files read, by result (loaded; rejected: the previous certificate keeps serving).",
                    ),
                    &["result"],
                ),
            ),
        }
    }

    /// Counts a changed certificate that was put in service (`true`) or rejected.
    pub fn reloaded(&self, loaded: bool) {
        let result = if loaded { "loaded" } else { "rejected" };
        self.reloads.with_label_values(&[result]).inc();
    }
}

impl DnsMetrics {
    /// Counters for one thread answering `proto` (`udp`, `tcp`).
    pub fn recorder(&self, proto: &str) -> DnsRecorder {
        let requests = label_values(&COMMON_TYPES)
            .map(|t| {
                self.requests
                    .with_label_values(&[proto, t.as_str()])
                    .local()
            })
            .collect();
        let responses = label_values(&RCODES.map(|(_, name)| name))
            .map(|c| {
                self.responses
                    .with_label_values(&[proto, c.as_str()])
                    .local()
            })
            .collect();
        DnsRecorder {
            requests,
            responses,
            duration: self.duration.with_label_values(&[proto]).local(),
            malformed: Problem::ALL
                .map(|p| {
                    self.malformed
                        .with_label_values(&[proto, p.as_str()])
                        .local()
                })
                .into(),
        }
    }
}

/// The label of each listed value, then `other`.
fn label_values<T: ToString>(known: &[T]) -> impl Iterator<Item = String> + '_ {
    known
        .iter()
        .map(ToString::to_string)
        .chain(std::iter::once("other".to_owned()))
}

impl DnsRecorder {
    /// Counts one request (`rtype` None: no question could be read).
    pub fn record(&mut self, rtype: Option<RecordType>, rcode: ResponseCode, took: Duration) {
        let t = rtype
            .and_then(|t| COMMON_TYPES.iter().position(|q| *q == t))
            .unwrap_or(COMMON_TYPES.len());
        let c = RCODES
            .iter()
            .position(|(r, _)| *r == rcode)
            .unwrap_or(RCODES.len());
        self.requests[t].inc();
        self.responses[c].inc();
        self.duration.observe(took.as_secs_f64());
    }

    /// Counts a malformed request, if it was one.
    pub fn problem(&mut self, problem: Option<Problem>) {
        if let Some(i) = problem.and_then(|p| Problem::ALL.iter().position(|q| *q == p)) {
            self.malformed[i].inc();
        }
    }

    /// Publishes what was counted since the last flush.
    pub fn flush(&self) {
        self.requests
            .iter()
            .chain(&self.responses)
            .chain(&self.malformed)
            .for_each(LocalIntCounter::flush);
        self.duration.flush();
    }
}
