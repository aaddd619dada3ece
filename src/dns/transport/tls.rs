//! DNS over TLS (RFC 7858): after the handshake a connection is served like
//! DNS over TCP (§3.3: same two-byte framing), by the TCP accept loop and
//! connection handler, so both share their limits and timeouts.

use std::net::SocketAddr;
use std::path::PathBuf;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use anyhow::Context;
use rustls::ServerConfig;
use tokio::net::{TcpListener, TcpStream};
use tokio_rustls::TlsAcceptor;
use tokio_rustls::server::TlsStream;
use tokio_util::sync::CancellationToken;
use tracing::debug;

use crate::dns::metrics::{DnsMetrics, TlsMetrics};
use crate::dns::transport::certificates::Certificates;
use crate::dns::transport::tcp;
use crate::dns::transport::tcp_limits::TcpLimits;
use crate::dns::tsig::key_file::TsigKey;
use crate::index::Index;
use crate::plumbing::listen::{self, Connections};

/// DNS over TLS as configured (`--tls-listen`, `--tls-cert`, `--tls-key`):
/// off without an address.
#[derive(Clone, Debug, Default)]
pub struct TlsSettings {
    /// Address to answer DNS over TLS on.
    pub listen: Option<SocketAddr>,
    /// PEM certificate chain, server certificate first.
    pub cert: Option<PathBuf>,
    /// PEM private key of `cert`.
    pub key: Option<PathBuf>,
}

/// A bound DNS over TLS listener with its certificate loaded.
pub struct TlsListener {
    listener: TcpListener,
    acceptor: TlsAcceptor,
    certificates: Arc<Certificates>,
}

impl TlsListener {
    /// Loads the certificate and key and binds the address; None when DNS
    /// over TLS is off. An error names the flag or file at fault.
    pub async fn bind(settings: &TlsSettings) -> anyhow::Result<Option<Self>> {
        let Some((listen, certificates, config)) = load(settings)? else {
            return Ok(None);
        };
        let listener = TcpListener::bind(listen).await.with_context(|| {
            format!("cannot listen for DNS over TLS on {listen} (--tls-listen)")
        })?;
        Ok(Some(Self {
            listener,
            acceptor: TlsAcceptor::from(Arc::new(config)),
            certificates,
        }))
    }

    /// The address bound.
    pub fn local_addr(&self) -> std::io::Result<SocketAddr> {
        self.listener.local_addr()
    }

    /// Answers DNS over TLS within `limits` (counted apart from plain TCP),
    /// signed queries checked against `tsig`,
    /// and reloads the certificate when its files change, until `shutdown`;
    /// then lets open connections finish their query.
    pub async fn serve(
        self,
        index: Arc<Index>,
        metrics: Arc<DnsMetrics>,
        limits: TcpLimits,
        tsig: Option<Arc<TsigKey>>,
        shutdown: CancellationToken,
    ) {
        let certificates = self.certificates;
        let reload = certificates.follow(metrics.clone(), shutdown.clone());
        let idle = limits.idle_timeout;
        let shared = Arc::new(tcp::Shared {
            index,
            recorder: Mutex::new(metrics.recorder("tls")),
            metrics: metrics.tcp.clone(),
            connections: Connections::new(limits.caps),
            limits,
            // Zone transfers go over plain TCP only.
            transfers: None,
            tsig,
        });
        let (connections, listener) = (shared.connections.clone(), shared.metrics.listener.clone());
        let acceptor = self.acceptor;
        let stop = shutdown.clone();
        let accept = listen::accept(
            self.listener,
            "tls",
            &connections,
            &listener,
            shutdown.clone(),
            move |stream, peer| {
                let (acceptor, shared) = (acceptor.clone(), shared.clone());
                let (metrics, shutdown) = (metrics.clone(), stop.clone());
                async move {
                    if let Some(stream) =
                        handshake(&acceptor, stream, peer, idle, &metrics.tls, &shutdown).await
                    {
                        tcp::connection(stream, peer, &shared, &shutdown, true).await;
                    }
                }
            },
        );
        tokio::join!(reload, accept);
    }
}

/// Checks the DNS over TLS settings and reads the certificate and key as
/// `serve` would, without binding.
pub fn check(settings: &TlsSettings) -> anyhow::Result<()> {
    load(settings).map(drop)
}

/// The address, certificates and rustls configuration `settings` ask for;
/// None when DNS over TLS is off.
fn load(
    settings: &TlsSettings,
) -> anyhow::Result<Option<(SocketAddr, Arc<Certificates>, ServerConfig)>> {
    let Some(listen) = settings.listen else {
        return Ok(None);
    };
    let (Some(cert), Some(key)) = (&settings.cert, &settings.key) else {
        anyhow::bail!("--tls-listen needs --tls-cert and --tls-key");
    };
    // rustls on ring, as kube's client already uses.
    let provider = Arc::new(rustls::crypto::ring::default_provider());
    let certificates = Arc::new(Certificates::load(cert, key, provider.clone())?);
    // No ALPN: RFC 7858 does not use it, and a client offering one is still served.
    let config = ServerConfig::builder_with_provider(provider)
        .with_safe_default_protocol_versions()
        .context("the TLS provider offers no safe protocol version")?
        .with_no_client_auth()
        .with_cert_resolver(certificates.clone());
    Ok(Some((listen, certificates, config)))
}

/// The TLS handshake, bounded like an idle TCP connection (`idle`) and cut
/// short by `shutdown`; counted, logged only at debug (it is per connection).
async fn handshake(
    acceptor: &TlsAcceptor,
    stream: TcpStream,
    peer: SocketAddr,
    idle: Duration,
    metrics: &TlsMetrics,
    shutdown: &CancellationToken,
) -> Option<TlsStream<TcpStream>> {
    let result = tokio::select! {
        result = tokio::time::timeout(idle, acceptor.accept(stream)) => result,
        () = shutdown.cancelled() => return None,
    };
    match result {
        Ok(Ok(stream)) => {
            metrics.handshakes.inc();
            Some(stream)
        }
        Ok(Err(error)) => {
            metrics.handshake_failures.inc();
            debug!(%error, %peer, "TLS handshake failed");
            None
        }
        Err(_) => {
            metrics.handshake_failures.inc();
            debug!(%peer, "TLS handshake timed out");
            None
        }
    }
}
