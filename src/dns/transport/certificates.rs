//! The TLS certificate and key, read from PEM files and read again when they
//! change: cert-manager and kubelet rotate them by replacing the files (or the
//! symlinks to them), so the files' contents are polled rather than watched.
//! New handshakes get the newest good pair; a bad one keeps the old serving.

use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex, RwLock};
use std::time::Duration;

use anyhow::Context;
use rustls::InconsistentKeys;
use rustls::crypto::CryptoProvider;
use rustls::pki_types::pem::PemObject;
use rustls::pki_types::{CertificateDer, PrivateKeyDer};
use rustls::server::{ClientHello, ResolvesServerCert};
use rustls::sign::CertifiedKey;
use tokio_util::sync::CancellationToken;
use tracing::{info, warn};

use crate::dns::metrics::DnsMetrics;

/// How often the files are read to see whether they changed.
const RELOAD_INTERVAL: Duration = Duration::from_secs(2);

/// The certificate files and the pair currently served.
pub(crate) struct Certificates {
    cert_file: PathBuf,
    key_file: PathBuf,
    provider: Arc<CryptoProvider>,
    current: RwLock<Arc<CertifiedKey>>,
    /// The files as loaded, for [`Certificates::follow`] to compare with.
    loaded: Mutex<Option<Contents>>,
}

/// The bytes of both files, to notice a change.
#[derive(Clone, PartialEq, Eq)]
struct Contents {
    cert: Vec<u8>,
    key: Vec<u8>,
}

impl Certificates {
    /// Reads the pair; an error names the file at fault.
    pub(crate) fn load(
        cert_file: &Path,
        key_file: &Path,
        provider: Arc<CryptoProvider>,
    ) -> anyhow::Result<Self> {
        let contents = read(cert_file, key_file)?;
        let current = parse(&contents, cert_file, key_file, &provider)?;
        Ok(Self {
            cert_file: cert_file.to_owned(),
            key_file: key_file.to_owned(),
            provider,
            current: RwLock::new(Arc::new(current)),
            loaded: Mutex::new(Some(contents)),
        })
    }

    /// Reads the files every [`RELOAD_INTERVAL`] until `shutdown`, and serves
    /// a changed pair once it is valid. A changed pair that is not (or files
    /// that cannot be read) is logged once and counted; the previous pair
    /// keeps serving.
    pub(crate) async fn follow(
        self: Arc<Self>,
        metrics: Arc<DnsMetrics>,
        shutdown: CancellationToken,
    ) {
        let mut seen = self.loaded.lock().unwrap_or_else(|e| e.into_inner()).take();
        loop {
            tokio::select! {
                () = tokio::time::sleep(RELOAD_INTERVAL) => {}
                () = shutdown.cancelled() => return,
            }
            let now = read(&self.cert_file, &self.key_file);
            if now.as_ref().ok() == seen.as_ref() {
                continue;
            }
            seen = now.as_ref().ok().cloned();
            match now.and_then(|c| parse(&c, &self.cert_file, &self.key_file, &self.provider)) {
                Ok(pair) => {
                    *self.current.write().unwrap_or_else(|e| e.into_inner()) = Arc::new(pair);
                    metrics.tls.reloaded(true);
                    info!(cert = %self.cert_file.display(), "TLS certificate reloaded");
                }
                Err(error) => {
                    metrics.tls.reloaded(false);
                    warn!(
                        error = format!("{error:#}"),
                        "TLS certificate not reloaded; the previous one keeps serving"
                    );
                }
            }
        }
    }
}

/// Names the files only: the key stays out of logs.
impl std::fmt::Debug for Certificates {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Certificates")
            .field("cert_file", &self.cert_file)
            .field("key_file", &self.key_file)
            .finish_non_exhaustive()
    }
}

impl ResolvesServerCert for Certificates {
    fn resolve(&self, _: ClientHello<'_>) -> Option<Arc<CertifiedKey>> {
        Some(
            self.current
                .read()
                .unwrap_or_else(|e| e.into_inner())
                .clone(),
        )
    }
}

fn read(cert_file: &Path, key_file: &Path) -> anyhow::Result<Contents> {
    let read = |path: &Path, what: &str| {
        std::fs::read(path)
            .with_context(|| format!("cannot read the TLS {what} {}", path.display()))
    };
    Ok(Contents {
        cert: read(cert_file, "certificate")?,
        key: read(key_file, "key")?,
    })
}

/// The pair in `contents`, checked: the certificate parses and the key is its own.
fn parse(
    contents: &Contents,
    cert_file: &Path,
    key_file: &Path,
    provider: &CryptoProvider,
) -> anyhow::Result<CertifiedKey> {
    let chain = CertificateDer::pem_slice_iter(&contents.cert)
        .collect::<Result<Vec<_>, _>>()
        .with_context(|| format!("invalid PEM in the TLS certificate {}", cert_file.display()))?;
    anyhow::ensure!(
        !chain.is_empty(),
        "no certificate in the TLS certificate file {}",
        cert_file.display()
    );
    let key = PrivateKeyDer::from_pem_slice(&contents.key)
        .with_context(|| format!("no private key in the TLS key file {}", key_file.display()))?;
    let key = provider
        .key_provider
        .load_private_key(key)
        .with_context(|| {
            format!(
                "invalid private key in the TLS key file {}",
                key_file.display()
            )
        })?;
    let pair = CertifiedKey::new(chain, key);
    match pair.keys_match() {
        // A key type whose public key rustls cannot derive is taken on trust.
        Ok(()) | Err(rustls::Error::InconsistentKeys(InconsistentKeys::Unknown)) => {}
        Err(rustls::Error::InconsistentKeys(_)) => anyhow::bail!(
            "the TLS key {} does not belong to the certificate {}",
            key_file.display(),
            cert_file.display()
        ),
        Err(error) => {
            anyhow::bail!("invalid TLS certificate {}: {error}", cert_file.display())
        }
    }
    Ok(pair)
}
