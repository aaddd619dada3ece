//! The DNS side: answers queries from the [`Index`](crate::index::Index) over
//! UDP and TCP. Knows DNS, knows nothing of Kubernetes.

mod answer;
mod response;
mod server;
mod tcp;
mod udp;

pub use answer::{Answer, answer};
pub use response::{Handled, MAX_UDP_PAYLOAD, Outcome, Response, handle};
pub use server::DnsServer;
pub use udp::respond as respond_udp;
