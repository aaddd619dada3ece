//! The DNS side: answers queries from the [`Index`](crate::index::Index) over
//! UDP and TCP. Knows DNS, knows nothing of Kubernetes.

mod answer;
mod server;

pub use answer::{Answer, answer};
pub use server::{DnsServer, MAX_UDP_PAYLOAD};
