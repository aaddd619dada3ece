//! UDP and TCP listeners on one port: UDP on our own worker threads (see
//! `udp`), TCP on tokio tasks (see `tcp`).

use std::net::{SocketAddr, UdpSocket};
use std::sync::{Arc, Mutex};

use socket2::{Domain, Protocol, Socket, Type};
use tokio::net::TcpListener;
use tokio_util::sync::CancellationToken;

use crate::dns::metrics::DnsMetrics;
use crate::dns::transfer::zone::TransferPolicy;
use crate::dns::transport::tcp;
use crate::dns::transport::tcp_limits::TcpLimits;
use crate::dns::transport::udp::UdpWorkers;
use crate::index::Index;
use crate::plumbing::listen::Connections;

/// UDP socket buffer size asked for.
const SOCKET_BUFFER: usize = 4 << 20;

/// A running DNS server: UDP workers and the TCP listener.
pub struct DnsServer {
    udp: UdpWorkers,
    tcp: TcpListener,
    index: Arc<Index>,
    metrics: Arc<DnsMetrics>,
    tcp_limits: TcpLimits,
    transfers: Arc<TransferPolicy>,
    shutdown: CancellationToken,
    local: SocketAddr,
}

impl DnsServer {
    /// Binds `udp_workers` UDP sockets (`SO_REUSEPORT`) and a TCP listener on
    /// `listen` (port 0: one ephemeral port for all) and starts answering UDP.
    /// TCP connections are held to `tcp_limits` (fitted to the open-file
    /// limit by the caller: see `listen::fit_open_files`).
    /// Zone transfers (TCP only) follow `transfers`, and its TSIG key
    /// checks signed queries on both transports.
    pub async fn bind(
        listen: SocketAddr,
        udp_workers: usize,
        tcp_limits: TcpLimits,
        index: Arc<Index>,
        metrics: Arc<DnsMetrics>,
        transfers: TransferPolicy,
    ) -> std::io::Result<Self> {
        let (udp, tcp) = bind_all(listen, udp_workers.max(1))?;
        let local = udp[0].local_addr()?;
        Ok(Self {
            udp: UdpWorkers::start(
                udp,
                index.clone(),
                metrics.clone(),
                transfers.tsig().cloned(),
            )?,
            tcp: TcpListener::from_std(tcp)?,
            index,
            metrics,
            tcp_limits,
            transfers: Arc::new(transfers),
            shutdown: CancellationToken::new(),
            local,
        })
    }

    /// The address both transports are bound to.
    pub fn local_addr(&self) -> SocketAddr {
        self.local
    }

    /// Cancelling this token stops the server: no new connections or
    /// datagrams, TCP queries being answered are finished.
    pub fn shutdown_token(&self) -> CancellationToken {
        self.shutdown.clone()
    }

    /// Serves TCP (UDP runs on its own threads) and reloads the TSIG key
    /// when its file changes, until shut down.
    pub async fn run(self) -> anyhow::Result<()> {
        let tsig = self.transfers.tsig().cloned();
        let reload = async {
            if let Some(key) = &tsig {
                key.follow(self.metrics.clone(), self.shutdown.clone())
                    .await;
            }
        };
        let shared = Arc::new(tcp::Shared {
            index: self.index,
            recorder: Mutex::new(self.metrics.recorder("tcp")),
            metrics: self.metrics.tcp.clone(),
            connections: Connections::new(self.tcp_limits.caps),
            limits: self.tcp_limits,
            transfers: Some(self.transfers),
            tsig: tsig.clone(),
        });
        tokio::join!(tcp::serve(self.tcp, shared, self.shutdown.clone()), reload);
        drop(self.udp);
        Ok(())
    }
}

/// UDP sockets and a TCP listener on the same port.
fn bind_all(
    listen: SocketAddr,
    udp_workers: usize,
) -> std::io::Result<(Vec<UdpSocket>, std::net::TcpListener)> {
    let mut last_error = None;
    // With port 0 the TCP port may be taken already: try other ephemeral ports.
    for _ in 0..20 {
        let first = udp_socket(listen)?;
        let addr = first.local_addr()?;
        let tcp = match tcp_listener(addr) {
            Ok(tcp) => tcp,
            Err(e) if listen.port() == 0 => {
                last_error = Some(e);
                continue;
            }
            Err(e) => return Err(e),
        };
        let mut sockets = vec![first];
        for _ in 1..udp_workers {
            sockets.push(udp_socket(addr)?);
        }
        return Ok((sockets, tcp));
    }
    Err(last_error.expect("at least one attempt"))
}

fn udp_socket(addr: SocketAddr) -> std::io::Result<UdpSocket> {
    let socket = Socket::new(Domain::for_address(addr), Type::DGRAM, Some(Protocol::UDP))?;
    socket.set_reuse_port(true)?;
    // Room for bursts; the kernel caps this at net.core.[rw]mem_max.
    socket.set_recv_buffer_size(SOCKET_BUFFER)?;
    socket.set_send_buffer_size(SOCKET_BUFFER)?;
    socket.bind(&addr.into())?;
    Ok(socket.into())
}

fn tcp_listener(addr: SocketAddr) -> std::io::Result<std::net::TcpListener> {
    let socket = Socket::new(Domain::for_address(addr), Type::STREAM, Some(Protocol::TCP))?;
    socket.set_reuse_address(true)?;
    socket.set_nonblocking(true)?;
    socket.bind(&addr.into())?;
    socket.listen(1024)?;
    Ok(socket.into())
}
