//! clusterset-dns: a Multi-Cluster Services (KEP-1645) reconciler and the
//! authoritative DNS server for `clusterset.local`, in one binary.
//!
//! Data flows one way (see ARCHITECTURE.md): [`sources`] → [`runtime`] →
//! [`engine`] → [`index`] → [`dns`]; in Kubernetes mode the engine's results
//! are also written back by [`writeback`].
//!
//! The library's surface is what the binary, the tests, the benchmarks and
//! the fuzz targets use; everything else is `pub(crate)`, and
//! `unreachable_pub` makes the compiler say so where a `pub` reaches no one
//! (ARCHITECTURE.md, "Folders and what each may use").

#![warn(unreachable_pub)]

pub mod cli;
pub mod commands;
pub mod dns;
pub mod engine;
pub(crate) mod explain;
pub mod index;
pub mod k8s;
pub mod model;
pub mod ops;
pub(crate) mod plumbing;
pub mod runtime;
pub mod sources;
pub mod writeback;
