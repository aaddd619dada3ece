//! UDP and TCP listeners on one port: UDP on our own worker threads
//! (see `udp`), TCP through hickory-server.

use std::net::{SocketAddr, UdpSocket};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use hickory_proto::op::{Header, HeaderCounts};
use hickory_server::Server;
use hickory_server::net::runtime::Time;
use hickory_server::server::{Request, RequestHandler, ResponseHandler, ResponseInfo};
use socket2::{Domain, Protocol, Socket, Type};
use tokio::net::TcpListener;
use tracing::debug;

use super::response::Response;
use super::udp::UdpWorkers;
use crate::index::Index;
use crate::metrics::{DnsRecorder, Metrics};

/// UDP socket buffer size asked for.
const SOCKET_BUFFER: usize = 4 << 20;
/// Idle time after which a TCP connection is closed.
const TCP_IDLE: Duration = Duration::from_secs(10);

/// Answers TCP queries from the index.
struct TcpHandler {
    index: Arc<Index>,
    recorder: Mutex<DnsRecorder>,
}

#[async_trait::async_trait]
impl RequestHandler for TcpHandler {
    async fn handle_request<R: ResponseHandler, T: Time>(
        &self,
        request: &Request,
        mut response: R,
    ) -> ResponseInfo {
        let started = Instant::now();
        let built = Response::new(&self.index, request);
        {
            let mut recorder = self.recorder.lock().unwrap_or_else(|e| e.into_inner());
            let rtype = request.queries.queries().first().map(|q| q.query_type());
            recorder.record(rtype, built.answer().code, started.elapsed());
            recorder.flush();
        }
        let message = built.message(&request.queries, true);
        let header = Header {
            metadata: *message.metadata(),
            counts: HeaderCounts::default(),
        };
        response
            .send_response(message)
            .await
            .unwrap_or_else(|error| {
                debug!(%error, "failed to send a TCP response");
                header.into()
            })
    }
}

/// A running DNS server: UDP workers and the TCP listener.
pub struct DnsServer {
    tcp: Server<TcpHandler>,
    _udp: UdpWorkers,
    local: SocketAddr,
}

impl DnsServer {
    /// Binds `udp_workers` UDP sockets (`SO_REUSEPORT`) and a TCP listener on
    /// `listen` (port 0: one ephemeral port for all) and starts answering.
    pub async fn bind(
        listen: SocketAddr,
        udp_workers: usize,
        index: Arc<Index>,
        metrics: Arc<Metrics>,
    ) -> std::io::Result<Self> {
        let (udp, tcp) = bind_all(listen, udp_workers.max(1))?;
        let local = udp[0].local_addr()?;
        let mut server = Server::new(TcpHandler {
            index: index.clone(),
            recorder: Mutex::new(metrics.dns.recorder("tcp")),
        });
        server.register_listener(TcpListener::from_std(tcp)?, TCP_IDLE, 65535);
        Ok(Self {
            tcp: server,
            _udp: UdpWorkers::start(udp, index, metrics)?,
            local,
        })
    }

    /// The address both transports are bound to.
    pub fn local_addr(&self) -> SocketAddr {
        self.local
    }

    /// Serves until the TCP listener fails; dropping the future stops everything.
    pub async fn run(mut self) -> anyhow::Result<()> {
        self.tcp.block_until_done().await?;
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
