//! What build is running: the crate version and the git revision it was
//! built from (set by `build.rs`), for `/metrics` and the start-up log line.

use prometheus::{IntGaugeVec, Opts, Registry};

/// The crate version.
pub(crate) const VERSION: &str = env!("CARGO_PKG_VERSION");
/// The short git revision built, or "unknown" outside a git checkout.
pub(crate) const REVISION: &str = env!("CLUSTERSET_DNS_REVISION");

/// Registers `clusterset_dns_build_info{version,revision} 1`, the usual
/// Prometheus idiom for joining a build's identity onto other series.
pub(crate) fn register(registry: &Registry) {
    let gauge = IntGaugeVec::new(
        Opts::new(
            "clusterset_dns_build_info",
            "Always 1; the labels name the running build.",
        ),
        &["version", "revision"],
    )
    .expect("valid metric options");
    gauge.with_label_values(&[VERSION, REVISION]).set(1);
    registry
        .register(Box::new(gauge))
        .expect("metric names are unique");
}
