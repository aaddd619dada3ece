//! How messages travel: the UDP socket loop, TCP and TLS listeners with
//! their limits and certificates (the accept loop they share is in
//! `plumbing/listen.rs`).

pub(super) mod certificates;
pub(super) mod server;
pub(super) mod tcp;
pub(super) mod tcp_limits;
pub(super) mod tls;
pub(super) mod udp;
