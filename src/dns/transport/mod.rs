//! How messages travel: the UDP socket loop, TCP and TLS listeners with
//! their limits and certificates, and the accept loop they share.

pub mod certificates;
pub mod listen;
pub mod server;
pub mod tcp;
pub mod tcp_limits;
pub mod tls;
pub mod udp;
