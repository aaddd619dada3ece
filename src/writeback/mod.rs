//! Kubernetes mode, leader only: writes what the engine decided back to the
//! API servers (ServiceImports, EndpointSlices, ServiceExport status, VIP
//! claims on the broker), and keeps the leader Lease and the cluster's
//! heartbeat.

pub(crate) mod api;
pub(crate) mod caches;
pub(crate) mod derived;
pub(crate) mod heartbeat;
pub mod lease;
pub(crate) mod observed;
pub(crate) mod plan;
pub(crate) mod queue;
pub(crate) mod seen;
pub(crate) mod slices;
pub(crate) mod version;
pub mod vip_claims;
pub(crate) mod writer;
