//! The helpers every metric of the process is made with: one name prefix,
//! one set of duration buckets, one way to register.

use prometheus::core::Collector;
use prometheus::{Opts, Registry, exponential_buckets};

/// Options of a metric named `clusterset_dns_<name>`.
pub(crate) fn opts(name: &str, help: &str) -> Opts {
    Opts::new(format!("clusterset_dns_{name}"), help)
}

/// The buckets of every duration histogram: 1 µs to about 0.3 s.
pub(crate) fn buckets() -> Vec<f64> {
    exponential_buckets(1e-6, 4.0, 10).expect("valid buckets")
}

/// Registers a new metric (names are fixed and unique: failure is a bug).
pub(crate) fn register<T: Collector + Clone + 'static>(
    registry: &Registry,
    metric: prometheus::Result<T>,
) -> T {
    let metric = metric.expect("valid metric options");
    registry
        .register(Box::new(metric.clone()))
        .expect("metric names are unique");
    metric
}
