//! The TLS certificate and key, read from PEM files and read again when they
//! change (`dns/polled.rs`). New handshakes get the newest good pair; a bad
//! one keeps the old serving. The served certificate's expiry time is a
//! metric, so that an alert fires before a rotation that never came.

use std::path::Path;
use std::sync::Arc;

use anyhow::Context;
use rustls::InconsistentKeys;
use rustls::crypto::CryptoProvider;
use rustls::pki_types::pem::PemObject;
use rustls::pki_types::{CertificateDer, PrivateKeyDer};
use rustls::server::{ClientHello, ResolvesServerCert};
use rustls::sign::CertifiedKey;
use tokio_util::sync::CancellationToken;
use tracing::{info, warn};
use x509_cert::der::Decode;

use crate::dns::metrics::DnsMetrics;
use crate::dns::polled::Polled;

/// The certificate files and the pair currently served.
pub(crate) struct Certificates {
    polled: Polled<Pair>,
}

/// A checked pair and when its certificate expires.
struct Pair {
    key: Arc<CertifiedKey>,
    /// The server certificate's notAfter (RFC 5280 §4.1.2.5), Unix seconds.
    not_after: i64,
}

impl Certificates {
    /// Reads the pair; an error names the file at fault.
    pub(crate) fn load(
        cert_file: &Path,
        key_file: &Path,
        provider: Arc<CryptoProvider>,
    ) -> anyhow::Result<Self> {
        let files = vec![
            (cert_file.to_owned(), "TLS certificate"),
            (key_file.to_owned(), "TLS key"),
        ];
        let (cert_path, key_path) = (cert_file.to_owned(), key_file.to_owned());
        let polled = Polled::load(files, move |contents| {
            parse(contents, &cert_path, &key_path, &provider)
        })?;
        Ok(Self { polled })
    }

    /// Publishes the expiry of the pair in service, then reads the files
    /// every few seconds until `shutdown` and serves a changed pair once it
    /// is valid. A changed pair that is not (or files that cannot be read)
    /// is logged once and counted; the previous pair keeps serving.
    pub(crate) async fn follow(&self, metrics: Arc<DnsMetrics>, shutdown: CancellationToken) {
        metrics.tls.expiry.set(self.polled.current().not_after);
        let cert = self.polled.file().display().to_string();
        self.polled
            .follow(shutdown, |changed| match changed {
                Ok(pair) => {
                    metrics.tls.reloaded(true);
                    metrics.tls.expiry.set(pair.not_after);
                    info!(%cert, "TLS certificate reloaded");
                }
                Err(error) => {
                    metrics.tls.reloaded(false);
                    warn!(
                        error = format!("{error:#}"),
                        "TLS certificate not reloaded; the previous one keeps serving"
                    );
                }
            })
            .await;
    }
}

/// Names the files only: the key stays out of logs.
impl std::fmt::Debug for Certificates {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Certificates")
            .field("cert_file", &self.polled.file())
            .finish_non_exhaustive()
    }
}

impl ResolvesServerCert for Certificates {
    fn resolve(&self, _: ClientHello<'_>) -> Option<Arc<CertifiedKey>> {
        Some(self.polled.current().key.clone())
    }
}

/// The pair in `contents` (the certificate file's bytes, then the key
/// file's), checked: the certificate parses and the key is its own.
fn parse(
    contents: &[Vec<u8>],
    cert_file: &Path,
    key_file: &Path,
    provider: &CryptoProvider,
) -> anyhow::Result<Pair> {
    let [cert, key] = contents else {
        unreachable!("two files are read")
    };
    let chain = CertificateDer::pem_slice_iter(cert)
        .collect::<Result<Vec<_>, _>>()
        .with_context(|| format!("invalid PEM in the TLS certificate {}", cert_file.display()))?;
    anyhow::ensure!(
        !chain.is_empty(),
        "no certificate in the TLS certificate file {}",
        cert_file.display()
    );
    let not_after = not_after(&chain[0], cert_file)?;
    let key = PrivateKeyDer::from_pem_slice(key)
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
    Ok(Pair {
        key: Arc::new(pair),
        not_after,
    })
}

/// When `certificate` expires (its notAfter, RFC 5280 §4.1.2.5), in Unix seconds.
fn not_after(certificate: &CertificateDer<'_>, cert_file: &Path) -> anyhow::Result<i64> {
    let parsed = x509_cert::Certificate::from_der(certificate).with_context(|| {
        format!(
            "the first certificate in {} is not a valid X.509 certificate",
            cert_file.display()
        )
    })?;
    let not_after = parsed.tbs_certificate.validity.not_after.to_unix_duration();
    Ok(i64::try_from(not_after.as_secs()).unwrap_or(i64::MAX))
}
