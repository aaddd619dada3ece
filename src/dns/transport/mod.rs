//! How messages travel: the UDP socket loop, TCP and TLS listeners with
//! their limits and certificates (the accept loop they share is in
//! `plumbing/listen.rs`).

pub mod certificates;
pub mod server;
pub mod tcp;
pub mod tcp_limits;
pub mod tls;
pub mod udp;
