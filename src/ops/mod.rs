//! Operations: the Prometheus metrics, the build's identity, and the
//! `/metrics`, `/healthz`, `/readyz` and `/debug/explain` listener.

pub mod build_info;
pub mod explain;
pub mod http;
pub mod metrics;
