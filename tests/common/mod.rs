//! Shared harness of the integration tests: manifest builders, servers
//! (in-process and the real binary), a DNS client, `status` lookups, other
//! DNS software run beside the server and a test CA for DNS over TLS.
//! Each test crate uses a part of it. The Kubernetes-mode clusterset
//! (`kube_clusterset.rs`, on the `fake-apiserver` crate) is here too but not
//! a module of this one: only the test files that use it include it.
#![allow(dead_code, unused_imports)]

pub mod client;
pub mod coredns;
pub mod daemon;
pub mod manifests;
pub mod ops_http;
pub mod pki;
pub mod ports;
pub mod secondary;
pub mod server;
pub mod status;
pub mod transfer;

pub use client::*;
pub use coredns::*;
pub use daemon::*;
pub use manifests::*;
pub use ops_http::*;
pub use pki::*;
pub use ports::*;
pub use secondary::*;
pub use server::*;
pub use status::*;
pub use transfer::*;
