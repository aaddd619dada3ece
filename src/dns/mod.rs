//! The DNS side: answers queries from the [`Index`](crate::index::Index) over
//! UDP, TCP and TLS. Knows DNS, knows nothing of Kubernetes.

mod answer;
mod certificates;
mod encode;
pub mod listen;
mod log_limit;
pub mod metrics;
pub mod notify;
mod opt_check;
mod question;
mod recent;
mod response;
mod rotate;
mod server;
mod tcp;
mod tcp_limits;
mod tls;
mod transfer;
mod udp;

pub use answer::{Answer, answer};
pub use listen::{Caps, fit_open_files};
pub use response::{Handled, MAX_UDP_PAYLOAD, Outcome, Problem, Response, handle};
pub use server::DnsServer;
pub use tcp_limits::TcpLimits;
pub use tls::{TlsListener, TlsSettings, check as check_tls};
pub use transfer::TransferPolicy;
pub use udp::respond as respond_udp;

use hickory_proto::rr::RecordType;

/// The query types clients use: their responses are cached, and metrics
/// count them by name (the rest as `other`).
pub const COMMON_TYPES: [RecordType; 7] = [
    RecordType::A,
    RecordType::AAAA,
    RecordType::SRV,
    RecordType::TXT,
    RecordType::SOA,
    RecordType::NS,
    RecordType::ANY,
];
