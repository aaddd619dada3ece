//! What the test harnesses of clusterset-dns share: the integration tests
//! (`tests/it`), the real-control-plane scenarios (`tests/real_control_plane`)
//! and the Kubernetes-mode benchmarks (`bench/kube_*`). A DNS client, free
//! ports, manifest builders, the server in-process, the Kubernetes-mode
//! clusterset on the `fake-apiserver` crate, the operations endpoint over
//! HTTP, other DNS software (where it is installed, a daemon killed with the
//! test), the CoreDNS server block, the container image under runc and the
//! Grafana dashboard's queries. What only `tests/it` uses is its own
//! `common` module.

pub mod client;
pub mod coredns;
pub mod daemon;
pub mod dashboard;
pub mod kube_clusterset;
pub mod manifests;
pub mod ops_http;
pub mod ports;
pub mod runc;
pub mod server;

pub use client::*;
pub use coredns::*;
pub use daemon::*;
pub use manifests::*;
pub use ops_http::*;
pub use ports::*;
pub use server::*;

use std::path::Path;

/// The repository's root (this crate is `tests/support` in it), which
/// relative paths such as `config/...` and `target/...` start from.
fn repository() -> &'static Path {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .ancestors()
        .nth(2)
        .expect("tests/support is two folders below the root")
}
