//! clusterset-dns: a Multi-Cluster Services (KEP-1645) reconciler and the
//! authoritative DNS server for `clusterset.local`, in one binary.
//!
//! Data flows one way: [`source`] (or [`kubernetes`]) → [`engine`] → [`index`] → [`dns`];
//! in Kubernetes mode the engine's results are also written back.

pub mod build_info;
pub mod cli;
pub mod config_file;
pub mod crd;
pub mod dns;
pub mod engine;
pub mod explain;
pub mod http;
pub mod index;
pub mod intern;
pub mod kubernetes;
pub mod metrics;
pub mod mode_flags;
pub mod model;
pub mod serve;
pub mod source;
pub mod status;
pub mod vip_state;
