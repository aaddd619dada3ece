//! The DNS side: answers queries from the [`Index`](crate::index::Index) over
//! UDP and TCP. Knows DNS, knows nothing of Kubernetes.

mod answer;
mod response;
mod server;
mod udp;

pub use answer::{Answer, answer};
pub use response::{MAX_UDP_PAYLOAD, Response};
pub use server::DnsServer;
pub use udp::respond as respond_udp;
