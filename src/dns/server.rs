//! UDP and TCP listeners on one port, served by hickory-server.

use std::net::SocketAddr;
use std::sync::Arc;
use std::time::Duration;

use hickory_proto::op::{Edns, Header, HeaderCounts, Metadata, OpCode, ResponseCode};
use hickory_proto::rr::Record;
use hickory_server::Server;
use hickory_server::net::runtime::Time;
use hickory_server::server::{Request, RequestHandler, ResponseHandler, ResponseInfo};
use hickory_server::zone_handler::{MessageResponse, MessageResponseBuilder};
use tokio::net::{TcpListener, UdpSocket};
use tracing::debug;

use super::answer::answer;
use crate::index::Index;

/// Largest UDP response advertised and sent (the DNS flag day 2020 size).
pub const MAX_UDP_PAYLOAD: u16 = 1232;

/// Idle time after which a TCP connection is closed.
const TCP_IDLE: Duration = Duration::from_secs(10);

/// Answers queries from the index.
struct Handler {
    index: Arc<Index>,
}

#[async_trait::async_trait]
impl RequestHandler for Handler {
    async fn handle_request<R: ResponseHandler, T: Time>(
        &self,
        request: &Request,
        mut response: R,
    ) -> ResponseInfo {
        let edns = request.edns.as_ref().map(|asked| {
            let mut edns = Edns::new();
            edns.set_max_payload(asked.max_payload().clamp(512, MAX_UDP_PAYLOAD));
            edns
        });
        let builder = MessageResponseBuilder::new(&request.queries, edns.as_ref());
        let mut metadata = Metadata::response_from_request(&request.metadata);
        let bad_version = request.edns.as_ref().is_some_and(|e| e.version() > 0);
        let query = match request.queries.queries() {
            [query] if !bad_version && request.metadata.op_code == OpCode::Query => query,
            _ => {
                let code = if bad_version {
                    ResponseCode::BADVERS
                } else if request.metadata.op_code != OpCode::Query {
                    ResponseCode::NotImp
                } else {
                    ResponseCode::FormErr
                };
                return send(&mut response, builder.error_msg(&request.metadata, code)).await;
            }
        };
        let result = answer(
            &self.index,
            query.name(),
            query.query_type(),
            query.query_class(),
        );
        metadata.response_code = result.code;
        metadata.authoritative = result.authoritative;
        let message = builder.build(metadata, &result.answers, &result.authority, [], []);
        send(&mut response, message).await
    }
}

/// Sends a response; a failed send (client gone) is only logged.
async fn send<'a, R: ResponseHandler>(
    response: &mut R,
    message: MessageResponse<
        '_,
        'a,
        impl Iterator<Item = &'a Record> + Send + 'a,
        impl Iterator<Item = &'a Record> + Send + 'a,
        impl Iterator<Item = &'a Record> + Send + 'a,
        impl Iterator<Item = &'a Record> + Send + 'a,
    >,
) -> ResponseInfo {
    let header = Header {
        metadata: *message.metadata(),
        counts: HeaderCounts::default(),
    };
    response
        .send_response(message)
        .await
        .unwrap_or_else(|error| {
            debug!(%error, "failed to send a response");
            header.into()
        })
}

/// A running DNS server.
pub struct DnsServer {
    server: Server<Handler>,
    local: SocketAddr,
}

impl DnsServer {
    /// Binds UDP and TCP on `listen` (port 0: an ephemeral port, the same for
    /// both) and starts answering from `index`.
    pub async fn bind(listen: SocketAddr, index: Arc<Index>) -> std::io::Result<Self> {
        let (udp, tcp) = bind_pair(listen).await?;
        let local = udp.local_addr()?;
        let mut server = Server::new(Handler { index });
        server.register_socket(udp);
        server.register_listener(tcp, TCP_IDLE, 65535);
        Ok(Self { server, local })
    }

    /// The address both sockets are bound to.
    pub fn local_addr(&self) -> SocketAddr {
        self.local
    }

    /// Serves until the sockets fail.
    pub async fn run(mut self) -> anyhow::Result<()> {
        self.server.block_until_done().await?;
        Ok(())
    }
}

/// Binds a UDP socket and a TCP listener on the same port.
async fn bind_pair(listen: SocketAddr) -> std::io::Result<(UdpSocket, TcpListener)> {
    if listen.port() != 0 {
        return Ok((
            UdpSocket::bind(listen).await?,
            TcpListener::bind(listen).await?,
        ));
    }
    // Ephemeral: take the UDP port, then try to get the same TCP port.
    let mut last_error = None;
    for _ in 0..20 {
        let udp = UdpSocket::bind(listen).await?;
        match TcpListener::bind(udp.local_addr()?).await {
            Ok(tcp) => return Ok((udp, tcp)),
            Err(e) => last_error = Some(e),
        }
    }
    Err(last_error.expect("at least one attempt"))
}
