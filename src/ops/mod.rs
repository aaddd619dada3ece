//! Operations: the Prometheus metrics, the build's identity, and the
//! `/metrics`, `/healthz`, `/readyz` and `/debug/explain` listener.

pub(crate) mod build_info;
pub(crate) mod explain;
pub(crate) mod http;
pub mod metrics;
