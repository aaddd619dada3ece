//! Ports for the servers and daemons the tests start on 127.0.0.1.
//!
//! A port chosen by binding port 0 is an ephemeral port: the kernel hands
//! the same range (`net.ipv4.ip_local_port_range`) to every outgoing
//! connection and every other `bind(0)`, so between choosing it and the
//! daemon's bind another test's client may take it, and a client's closed
//! TCP connection keeps its port (TIME_WAIT) for 60 s without the
//! `SO_REUSEADDR` that would let a listener share it. unbound, given such
//! a port, exits ("can't bind socket: Address already in use"). Ports here
//! come from below that range, which the kernel never hands out itself,
//! each port once per test process, and free for UDP and TCP when chosen.

use std::net::{SocketAddr, TcpListener, UdpSocket};
use std::sync::atomic::{AtomicU32, Ordering};

/// The lowest port handed out; below it are well-known services' ports.
const FIRST: u16 = 20_000;
/// Where the next search starts, counted from [`FIRST`]; starts at an
/// offset of the process id so test processes running at once keep apart.
static NEXT: AtomicU32 = AtomicU32::new(u32::MAX);

/// A port on 127.0.0.1 free for both UDP and TCP, not an ephemeral one,
/// and not handed out before by this process.
pub fn free_port() -> SocketAddr {
    let span = u32::from(ephemeral_start().saturating_sub(FIRST)).max(1);
    let _ = NEXT.compare_exchange(
        u32::MAX,
        std::process::id().wrapping_mul(7919) % span,
        Ordering::Relaxed,
        Ordering::Relaxed,
    );
    for _ in 0..span {
        let offset = NEXT.fetch_add(1, Ordering::Relaxed) % span;
        let addr = SocketAddr::from(([127, 0, 0, 1], FIRST + offset as u16));
        let udp = UdpSocket::bind(addr);
        if udp.is_ok() && TcpListener::bind(addr).is_ok() {
            return addr;
        }
    }
    panic!("no port free for UDP and TCP on 127.0.0.1 in {FIRST}..+{span}");
}

/// The first ephemeral port (`net.ipv4.ip_local_port_range`; Linux's
/// default 32768 when it cannot be read).
fn ephemeral_start() -> u16 {
    std::fs::read_to_string("/proc/sys/net/ipv4/ip_local_port_range")
        .ok()
        .and_then(|range| range.split_whitespace().next()?.parse().ok())
        .unwrap_or(32_768)
}
