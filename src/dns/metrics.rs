//! The DNS side's metrics, every name prefixed `clusterset_dns_`. The query
//! path counts into per-thread [`DnsRecorder`]s flushed once per batch, so
//! counting costs no shared writes per query.

use std::time::Duration;

use hickory_proto::op::ResponseCode;
use hickory_proto::rr::RecordType;
use prometheus::local::{LocalHistogram, LocalIntCounter};
use prometheus::{HistogramOpts, HistogramVec, IntCounter, IntCounterVec, IntGauge, Registry};

use crate::dns::message::question::COMMON_TYPES;
use crate::dns::message::response::Problem;
use crate::plumbing::listen::ListenerMetrics;
use crate::plumbing::metrics::{buckets, opts, register};

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

/// Requests, responses and durations of DNS queries.
pub struct DnsMetrics {
    requests: IntCounterVec,
    responses: IntCounterVec,
    duration: HistogramVec,
    malformed: IntCounterVec,
    /// TCP connection counts (RFC 7766 §10 limits).
    pub tcp: TcpMetrics,
    /// DNS over TLS handshakes and certificate reloads.
    pub tls: TlsMetrics,
    transfers: IntCounterVec,
    notifies: IntCounterVec,
    tsig_reloads: IntCounterVec,
    /// Accept errors of every listener, DNS or not, by listener and class.
    pub accept_errors: IntCounterVec,
}

/// Open, refused and timed-out DNS TCP connections (DNS over TLS included),
/// and accept errors.
#[derive(Clone)]
pub struct TcpMetrics {
    /// What the accept loop counts.
    pub listener: ListenerMetrics,
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

/// Counters of the DNS over TLS listener.
pub struct TlsMetrics {
    /// TLS handshakes completed.
    pub handshakes: IntCounter,
    /// TLS handshakes that failed or timed out.
    pub handshake_failures: IntCounter,
    /// Certificate reloads by result (`loaded`, `rejected`: the old one kept serving).
    reloads: IntCounterVec,
    /// When the certificate served expires (its notAfter), in Unix seconds.
    pub expiry: IntGauge,
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
            // Prometheus's naming for a point in time: `_timestamp_seconds`.
            expiry: register(
                registry,
                IntGauge::with_opts(opts(
                    "tls_certificate_expiry_timestamp_seconds",
                    "When the DNS over TLS certificate in service expires (its notAfter), in seconds since the Unix epoch; set at start-up and on each reload.",
                )),
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
    /// Creates and registers the DNS metrics in `registry`.
    pub fn new(registry: &Registry) -> Self {
        let histogram = |name, help| HistogramOpts::from(opts(name, help)).buckets(buckets());
        let accept_errors = register(
            registry,
            IntCounterVec::new(
                opts(
                    "accept_errors_total",
                    "Failed accepts of a TCP listener (tcp, tls, operations), by class (resources: out of descriptors or memory, followed by a pause; connection: one connection failed before it was accepted; other). None ends the listener.",
                ),
                &["listener", "error"],
            ),
        );
        Self {
            requests: register(
                registry,
                IntCounterVec::new(
                    opts(
                        "dns_requests_total",
                        "DNS requests by protocol and query type.",
                    ),
                    &["proto", "type"],
                ),
            ),
            responses: register(
                registry,
                IntCounterVec::new(
                    opts(
                        "dns_responses_total",
                        "DNS responses by protocol and response code.",
                    ),
                    &["proto", "rcode"],
                ),
            ),
            duration: register(
                registry,
                HistogramVec::new(
                    histogram(
                        "dns_request_duration_seconds",
                        "Time to answer a DNS request.",
                    ),
                    &["proto"],
                ),
            ),
            malformed: register(
                registry,
                IntCounterVec::new(
                    opts(
                        "dns_malformed_requests_total",
                        "Malformed DNS requests by protocol and problem.",
                    ),
                    &["proto", "problem"],
                ),
            ),
            tcp: TcpMetrics {
                listener: ListenerMetrics {
                    open: register(
                        registry,
                        IntGauge::with_opts(opts(
                            "dns_tcp_connections",
                            "Open DNS TCP connections.",
                        )),
                    ),
                    refused: register(
                        registry,
                        IntCounterVec::new(
                            opts(
                                "dns_tcp_refused_total",
                                "DNS TCP connections closed at once, by the limit reached.",
                            ),
                            &["limit"],
                        ),
                    ),
                    accept_errors: accept_errors.clone(),
                },
                write_timeouts: register(
                    registry,
                    IntCounter::with_opts(opts(
                        "dns_tcp_write_timeouts_total",
                        "DNS TCP connections closed because the client did not read in time.",
                    )),
                ),
            },
            tls: TlsMetrics::new(registry),
            transfers: register(
                registry,
                IntCounterVec::new(
                    opts(
                        "zone_transfers_total",
                        "Zone transfer requests by type (AXFR, IXFR) and result (full, current: the SOA alone, refused: address not allowed or, with --tsig-key, not signed; badkey, badsig, badtime: the TSIG check failed (RFC 8945 §5.2); notauth: not a zone apex, servfail: not loaded yet).",
                    ),
                    &["type", "result"],
                ),
            ),
            notifies: register(
                registry,
                IntCounterVec::new(
                    opts(
                        "notifies_total",
                        "NOTIFY messages to secondaries by result (sent, acknowledged, rejected: answered with an error code, malformed: a response that did not decode or match).",
                    ),
                    &["result"],
                ),
            ),
            tsig_reloads: register(
                registry,
                IntCounterVec::new(
                    opts(
                        "tsig_key_reloads_total",
                        "Changed TSIG key files read, by result (loaded; rejected: the previous key stays in use).",
                    ),
                    &["result"],
                ),
            ),
            accept_errors,
        }
    }

    /// Counts a changed TSIG key file that was put in use (`true`) or rejected.
    pub(crate) fn tsig_key_reloaded(&self, loaded: bool) {
        let result = if loaded { "loaded" } else { "rejected" };
        self.tsig_reloads.with_label_values(&[result]).inc();
    }

    /// Counts a zone transfer request.
    pub fn zone_transfer(&self, kind: &str, result: &str) {
        self.transfers.with_label_values(&[kind, result]).inc();
    }

    /// Counts a NOTIFY event.
    pub fn notify(&self, result: &str) {
        self.notifies.with_label_values(&[result]).inc();
    }

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
