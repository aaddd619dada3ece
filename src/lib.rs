//! clusterset-dns: a Multi-Cluster Services (KEP-1645) reconciler and the
//! authoritative DNS server for `clusterset.local`, in one binary.
//!
//! Data flows one way (see ARCHITECTURE.md): [`sources`] → [`runtime`] →
//! [`engine`] → [`index`] → [`dns`]; in Kubernetes mode the engine's results
//! are also written back by [`writeback`].

pub mod cli;
pub mod commands;
pub mod dns;
pub mod engine;
pub mod explain;
pub mod index;
pub mod k8s;
pub mod model;
pub mod ops;
pub mod plumbing;
pub mod runtime;
pub mod sources;
pub mod writeback;
