//! A test CA made with `openssl` and the server certificates it issues,
//! mounted as the kubelet mounts a Secret (DNS over TLS tests).

use std::path::{Path, PathBuf};
use std::process::Stdio;

use rustls::pki_types::CertificateDer;
use rustls::pki_types::pem::PemObject;
use tempfile::TempDir;

/// The name the server certificate is issued for.
pub const SERVER_NAME: &str = "dns.test";

/// `openssl req` arguments making a new P-256 key, unencrypted, into the
/// file named next.
const NEW_KEY: [&str; 6] = [
    "-newkey",
    "ec",
    "-pkeyopt",
    "ec_paramgen_curve:prime256v1",
    "-nodes",
    "-keyout",
];

/// A test CA and the server certificates it issues, mounted the way the
/// kubelet mounts a Secret: `tls.crt` and `tls.key` are symlinks through
/// `..data`, a symlink to the current generation that is swapped atomically.
pub struct Pki {
    dir: TempDir,
    generations: u32,
}

impl Default for Pki {
    fn default() -> Self {
        Self::new()
    }
}

impl Pki {
    /// A new CA in a temporary folder, with no server certificate yet.
    pub fn new() -> Self {
        let dir = TempDir::new().expect("temp dir");
        openssl(
            dir.path(),
            &[
                &["req", "-x509"][..],
                &NEW_KEY,
                &[
                    "ca.key",
                    "-out",
                    "ca.crt",
                    "-days",
                    "2",
                    "-subj",
                    "/CN=clusterset-dns test CA",
                ],
            ]
            .concat(),
        );
        std::fs::write(
            dir.path().join("server.ext"),
            format!("subjectAltName=DNS:{SERVER_NAME}\nbasicConstraints=CA:FALSE\nextendedKeyUsage=serverAuth\n"),
        )
        .expect("extensions written");
        let live = dir.path().join("live");
        std::fs::create_dir(&live).expect("mount dir");
        for file in ["tls.crt", "tls.key"] {
            std::os::unix::fs::symlink(Path::new("..data").join(file), live.join(file))
                .expect("file symlink");
        }
        Self {
            dir,
            generations: 0,
        }
    }

    /// The folder holding the CA, the generations and the mounted files.
    pub fn path(&self) -> &Path {
        self.dir.path()
    }

    /// The CA certificate (PEM).
    pub fn ca(&self) -> PathBuf {
        self.dir.path().join("ca.crt")
    }

    /// The mounted certificate, `live/tls.crt`.
    pub fn cert(&self) -> PathBuf {
        self.dir.path().join("live/tls.crt")
    }

    /// The mounted key, `live/tls.key`.
    pub fn key(&self) -> PathBuf {
        self.dir.path().join("live/tls.key")
    }

    /// The server flags serving these files on an ephemeral port.
    pub fn flags(&self) -> Vec<String> {
        self.flags_on("127.0.0.1:0")
    }

    /// The server flags serving these files on `listen`.
    pub fn flags_on(&self, listen: &str) -> Vec<String> {
        vec![
            "--tls-listen".into(),
            listen.into(),
            "--tls-cert".into(),
            self.cert().display().to_string(),
            "--tls-key".into(),
            self.key().display().to_string(),
        ]
    }

    /// Issues a certificate for [`SERVER_NAME`] with subject `/CN=cn` and
    /// `serial`, valid for a day, swaps it in atomically, and returns it (DER).
    pub fn issue(&mut self, cn: &str, serial: u32) -> CertificateDer<'static> {
        self.issue_for(cn, serial, 1)
    }

    /// [`Pki::issue`], valid for `days` days from now.
    pub fn issue_for(&mut self, cn: &str, serial: u32, days: u32) -> CertificateDer<'static> {
        self.generations += 1;
        let generation = format!("gen{}", self.generations);
        let dir = self.dir.path().join(&generation);
        std::fs::create_dir(&dir).expect("generation dir");
        let (key, csr, crt) = (
            format!("{generation}/tls.key"),
            format!("{generation}/tls.csr"),
            format!("{generation}/tls.crt"),
        );
        let subject = format!("/CN={cn}");
        openssl(
            self.dir.path(),
            &[
                &["req"][..],
                &NEW_KEY,
                &[&key, "-out", &csr, "-subj", &subject],
            ]
            .concat(),
        );
        let (serial, days) = (serial.to_string(), days.to_string());
        openssl(
            self.dir.path(),
            &[
                "x509",
                "-req",
                "-in",
                &csr,
                "-CA",
                "ca.crt",
                "-CAkey",
                "ca.key",
                "-set_serial",
                &serial,
                "-days",
                &days,
                "-extfile",
                "server.ext",
                "-out",
                &crt,
            ],
        );
        self.swap_in(&generation);
        CertificateDer::from_pem_file(dir.join("tls.crt")).expect("issued certificate")
    }

    /// Makes a generation of files that are not a certificate and key and swaps it in.
    pub fn issue_garbage(&mut self) {
        self.generations += 1;
        let generation = format!("gen{}", self.generations);
        let dir = self.dir.path().join(&generation);
        std::fs::create_dir(&dir).expect("generation dir");
        std::fs::write(dir.join("tls.crt"), "not a certificate\n").expect("written");
        std::fs::write(dir.join("tls.key"), "not a key\n").expect("written");
        self.swap_in(&generation);
    }

    /// Points `..data` at `generation` in one rename, as the kubelet does.
    fn swap_in(&self, generation: &str) {
        let live = self.dir.path().join("live");
        let next = live.join("..data_tmp");
        std::os::unix::fs::symlink(Path::new("..").join(generation), &next).expect("symlink");
        std::fs::rename(&next, live.join("..data")).expect("atomic swap");
    }
}

/// Runs `openssl args` in `dir`; panics with its stderr when it fails.
pub fn openssl(dir: &Path, args: &[&str]) {
    let output = std::process::Command::new("openssl")
        .args(args)
        .current_dir(dir)
        .stdin(Stdio::null())
        .output()
        .expect("openssl runs (Debian package openssl)");
    assert!(
        output.status.success(),
        "openssl {args:?}: {}",
        String::from_utf8_lossy(&output.stderr)
    );
}
