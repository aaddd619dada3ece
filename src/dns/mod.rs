//! The DNS side: answers queries from the [`Index`](crate::index::Index) over
//! UDP, TCP and TLS. Knows DNS, knows nothing of Kubernetes. Split by role,
//! as hickory separates its server from its zone handler: `message/` (what
//! to answer and how it is encoded, the UDP fast path), `transport/` (how it
//! travels: sockets, listeners, limits, TLS), `transfer/` (AXFR/IXFR,
//! NOTIFY), `tsig/` (RFC 8945 signatures and their key); `polled.rs` reads
//! the TLS pair and the TSIG key again when their files change.

mod message;
pub(crate) mod metrics;
mod polled;
mod transfer;
mod transport;
mod tsig;

pub use message::answer::{Answer, answer};
pub use message::fast_path::respond as respond_udp;
pub use message::question::COMMON_TYPES;
pub use message::response::{Handled, MAX_UDP_PAYLOAD, Outcome, Problem, Response, handle};
pub use transfer::notify;
pub use transfer::zone::TransferPolicy;
pub use transport::server::DnsServer;
pub use transport::tcp_limits::TcpLimits;
pub use transport::tls::{TlsListener, TlsSettings, check as check_tls};
pub use tsig::key_file::TsigKey;
