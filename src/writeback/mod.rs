//! Kubernetes mode, leader only: writes what the engine decided back to the
//! API servers (ServiceImports, EndpointSlices, ServiceExport status, VIP
//! claims on the broker), and keeps the leader Lease and the cluster's
//! heartbeat.

pub mod api;
pub mod heartbeat;
pub mod lease;
pub mod observed;
pub mod queue;
pub mod seen;
pub mod slices;
pub mod version;
pub mod vip_claims;
pub mod writer;
