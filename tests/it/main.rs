//! Every integration test of clusterset-dns but the real-control-plane
//! scenarios, in one test binary (docs/testing.md, "Layout"): a module per
//! group, named for what it tests, and `common`, the support that only these
//! use; what they share with `tests/real_control_plane` is the `test-support`
//! crate (`tests/support`). One binary links once instead of once per group,
//! and the support is compiled once, with nothing in it left unused.
//! `cargo test --test it GROUP::` runs one group.
//!
//! The groups share this process, so a test changes nothing process-wide
//! (environment, working directory, signal dispositions) and takes no fixed
//! port outside a network namespace of its own; docs/testing.md, "Layout",
//! lists what is per process and why sharing it is safe.

mod common;

mod architecture;
mod cli;
mod cluster_faults;
mod config;
mod coredns_front;
mod crds;
mod dns;
mod docs;
mod explain;
mod explain_matches_server;
mod fuzz_packets;
mod helm_chart;
mod image;
mod kubernetes;
mod kubernetes_manifests;
mod kubernetes_operator;
mod leader_lease;
mod limits;
mod load_spread;
mod locality;
mod manifests;
mod monitoring;
mod ops;
mod ops_limits;
mod pinned;
mod reconcile;
mod reload;
mod resolvers;
mod tcp_limits;
mod tls;
mod transfer;
mod transfer_tsig;
mod trust;
mod version_skew;
mod vips;
