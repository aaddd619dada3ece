//! One real Kubernetes cluster on loopback: etcd, kube-apiserver,
//! kube-controller-manager and kube-scheduler, built from the Go modules
//! pinned in `tests/control-plane/go.mod` (`bash tests/control-plane/build.sh`),
//! and kwok as the kubelet of one Node (`pods.rs`).
//!
//! Most scenarios create their Pods by hand on `node-1`, which no kubelet
//! runs, and set each Pod's status themselves, so the real EndpointSlice
//! controller writes the Services' slices from exactly the addresses and
//! readiness they choose; the Pods of Deployments and StatefulSets (the
//! upstream conformance suite's) are scheduled onto kwok's Node. Every
//! process is killed when its owner is dropped, and dies with the test
//! process (`PR_SET_PDEATHSIG`) if that is killed first.

use std::fs;
use std::net::{SocketAddr, TcpStream};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use anyhow::{Context, Result, bail, ensure};
use kube::Client;
use kube::config::{KubeConfigOptions, Kubeconfig};
use test_support::free_port;

use crate::pods::{PodNetwork, PodRunner};

/// How long etcd or the API server may take to start on a busy 2-core machine.
const START_LIMIT: Duration = Duration::from_secs(120);
/// The admin's static token (the test's own credential; members never get it).
const ADMIN_TOKEN: &str = "clusterset-dns-test-admin";

/// Where the Go binaries are: `$CONTROL_PLANE_BIN`, else `target/control-plane`.
pub fn bin_dir() -> PathBuf {
    std::env::var_os("CONTROL_PLANE_BIN")
        .map(PathBuf::from)
        .unwrap_or_else(|| Path::new(env!("CARGO_MANIFEST_DIR")).join("target/control-plane"))
}

/// The control plane's binaries that must exist, by name.
pub const BINARIES: [&str; 9] = [
    "coredns",
    "etcd",
    "kube-apiserver",
    "kube-controller-manager",
    "kube-scheduler",
    "kubectl",
    "kwok",
    "kwok-stages",
    "mcs-api-crds",
];

/// A process killed when dropped.
pub struct Process {
    name: String,
    child: Option<Child>,
    log: PathBuf,
}

impl Process {
    /// Starts `bin args...` with its output in `log`.
    pub fn spawn(name: &str, bin: &Path, args: &[String], log: &Path) -> Result<Self> {
        let mut command = Command::new(bin);
        command.args(args);
        Self::spawn_command(name, command, log)
    }

    /// Starts `command` with its output in `log`.
    pub fn spawn_command(name: &str, mut command: Command, log: &Path) -> Result<Self> {
        let out = fs::File::create(log).with_context(|| format!("creating {}", log.display()))?;
        command
            .stdin(Stdio::null())
            .stdout(out.try_clone()?)
            .stderr(out);
        die_with_parent(&mut command);
        let child = command
            .spawn()
            .with_context(|| format!("starting {name}"))?;
        Ok(Self {
            name: name.to_owned(),
            child: Some(child),
            log: log.to_owned(),
        })
    }

    /// Fails with the end of its log when the process has exited.
    pub fn check_alive(&mut self) -> Result<()> {
        let child = self.child.as_mut().context("stopped")?;
        if let Some(status) = child.try_wait()? {
            bail!(
                "{} exited ({status}); its log ends:\n{}",
                self.name,
                log_tail(&self.log, 30)
            );
        }
        Ok(())
    }

    /// Its process id.
    pub fn pid(&self) -> Option<u32> {
        self.child.as_ref().map(Child::id)
    }

    /// Kills it (SIGKILL, as a crash) and reaps it.
    pub fn kill(&mut self) {
        if let Some(mut child) = self.child.take() {
            let _ = child.kill();
            let _ = child.wait();
        }
    }

    /// Stops it with SIGTERM, as an operator would, SIGKILL after 20 s.
    pub fn stop(&mut self) {
        if let Some(pid) = self.pid() {
            let _ = nix::sys::signal::kill(
                nix::unistd::Pid::from_raw(pid as i32),
                nix::sys::signal::Signal::SIGTERM,
            );
            let deadline = Instant::now() + Duration::from_secs(20);
            while Instant::now() < deadline {
                if let Some(child) = self.child.as_mut()
                    && child.try_wait().ok().flatten().is_some()
                {
                    self.child = None;
                    return;
                }
                std::thread::sleep(Duration::from_millis(50));
            }
        }
        self.kill();
    }
}

impl Drop for Process {
    fn drop(&mut self) {
        self.kill();
    }
}

/// The child gets SIGKILL when this process dies, however it dies.
pub fn die_with_parent(command: &mut Command) {
    use std::os::unix::process::CommandExt;
    // SAFETY: prctl is async-signal-safe and touches no memory of the parent.
    unsafe {
        command.pre_exec(|| {
            nix::sys::prctl::set_pdeathsig(nix::sys::signal::Signal::SIGKILL)
                .map_err(std::io::Error::from)
        });
    }
}

/// The last `lines` lines of a log file.
pub fn log_tail(path: &Path, lines: usize) -> String {
    let text = fs::read_to_string(path).unwrap_or_default();
    let all: Vec<&str> = text.lines().collect();
    all[all.len().saturating_sub(lines)..].join("\n")
}

/// Runs a command to completion: whether it succeeded, and its stdout
/// (with its stderr after it when it failed).
pub fn output(bin: &Path, args: &[&str]) -> Result<(bool, String)> {
    let output = Command::new(bin)
        .args(args)
        .stdin(Stdio::null())
        .output()
        .with_context(|| format!("running {}", bin.display()))?;
    let mut text = String::from_utf8_lossy(&output.stdout).into_owned();
    if !output.status.success() {
        text.push_str(&String::from_utf8_lossy(&output.stderr));
    }
    Ok((output.status.success(), text))
}

/// Runs a command to completion, failing with its output.
pub fn run(bin: &Path, args: &[&str]) -> Result<String> {
    let (ok, text) = output(bin, args)?;
    ensure!(ok, "{} {} failed:\n{text}", bin.display(), args.join(" "));
    Ok(text)
}

/// The certificates and keys of one control plane, made with openssl.
struct Pki {
    ca: PathBuf,
    serving_cert: PathBuf,
    serving_key: PathBuf,
    sa_key: PathBuf,
    sa_pub: PathBuf,
}

impl Pki {
    fn create(dir: &Path) -> Result<Self> {
        let openssl = Path::new("openssl");
        let p = |name: &str| dir.join(name).display().to_string();
        run(
            openssl,
            &[
                "req",
                "-x509",
                "-newkey",
                "rsa:2048",
                "-nodes",
                "-days",
                "3",
                "-subj",
                "/CN=clusterset-dns-test-ca",
                "-keyout",
                &p("ca.key"),
                "-out",
                &p("ca.crt"),
            ],
        )?;
        fs::write(
            dir.join("serving.ext"),
            "subjectAltName=IP:127.0.0.1,DNS:localhost,DNS:kubernetes.default.svc\n\
             extendedKeyUsage=serverAuth\n",
        )?;
        run(
            openssl,
            &[
                "req",
                "-newkey",
                "rsa:2048",
                "-nodes",
                "-subj",
                "/CN=kube-apiserver",
                "-keyout",
                &p("serving.key"),
                "-out",
                &p("serving.csr"),
            ],
        )?;
        run(
            openssl,
            &[
                "x509",
                "-req",
                "-in",
                &p("serving.csr"),
                "-CA",
                &p("ca.crt"),
                "-CAkey",
                &p("ca.key"),
                "-CAcreateserial",
                "-days",
                "3",
                "-extfile",
                &p("serving.ext"),
                "-out",
                &p("serving.crt"),
            ],
        )?;
        run(openssl, &["genrsa", "-out", &p("sa.key"), "2048"])?;
        run(
            openssl,
            &["rsa", "-in", &p("sa.key"), "-pubout", "-out", &p("sa.pub")],
        )?;
        Ok(Self {
            ca: dir.join("ca.crt"),
            serving_cert: dir.join("serving.crt"),
            serving_key: dir.join("serving.key"),
            sa_key: dir.join("sa.key"),
            sa_pub: dir.join("sa.pub"),
        })
    }
}

/// One cluster's etcd, API server and controller manager.
pub struct ControlPlane {
    /// The cluster's name (its id in the clusterset).
    pub name: String,
    /// Its folder: data, certificates, kubeconfigs, logs.
    pub dir: PathBuf,
    /// The API server's address.
    pub api: SocketAddr,
    /// The CA that signed the API server's certificate.
    pub ca: PathBuf,
    etcd_port: u16,
    etcd: Process,
    apiserver: Process,
    controllers: Process,
    pods: Option<PodRunner>,
    apiserver_args: Vec<String>,
}

impl ControlPlane {
    /// Starts etcd, the API server (with `service_cidrs`), the controller
    /// manager, and what runs Pods on `network`, and waits until the API
    /// server is ready and kwok's Node takes Pods.
    pub async fn start(
        name: &str,
        root: &Path,
        service_cidrs: &str,
        network: &PodNetwork,
    ) -> Result<Self> {
        let dir = root.join(name);
        fs::create_dir_all(&dir)?;
        let bins = bin_dir();
        let pki = Pki::create(&dir)?;
        let etcd_port = free_port().port();
        let peer_port = free_port().port();
        let etcd_url = format!("http://127.0.0.1:{etcd_port}");
        let peer_url = format!("http://127.0.0.1:{peer_port}");
        let etcd = Process::spawn(
            &format!("{name} etcd"),
            &bins.join("etcd"),
            &[
                format!("--name={name}"),
                format!("--data-dir={}", dir.join("etcd").display()),
                format!("--listen-client-urls={etcd_url}"),
                format!("--advertise-client-urls={etcd_url}"),
                format!("--listen-peer-urls={peer_url}"),
                format!("--initial-advertise-peer-urls={peer_url}"),
                format!("--initial-cluster={name}={peer_url}"),
                "--log-level=warn".into(),
                // Small: the tests write little, and 2 GiB of default quota
                // is reserved address space only.
                "--quota-backend-bytes=536870912".into(),
            ],
            &dir.join("etcd.log"),
        )?;
        let mut plane_etcd = etcd;
        wait_for(START_LIMIT, || {
            plane_etcd.check_alive()?;
            Ok(etcd_health(etcd_port))
        })
        .await
        .with_context(|| format!("{name}: etcd did not become healthy"))?;

        fs::write(
            dir.join("tokens.csv"),
            format!("{ADMIN_TOKEN},admin,admin-uid,system:masters\n"),
        )?;
        let api_port = free_port().port();
        let apiserver_args = vec![
            format!("--etcd-servers={etcd_url}"),
            "--bind-address=127.0.0.1".into(),
            "--advertise-address=127.0.0.1".into(),
            // The `kubernetes` Service's endpoints may not be loopback, and
            // no Pod here reaches the API server through it.
            "--endpoint-reconciler-type=none".into(),
            // kwok's Node is reached at its InternalIP, 127.0.0.1, for exec.
            "--kubelet-preferred-address-types=InternalIP".into(),
            format!("--secure-port={api_port}"),
            format!("--tls-cert-file={}", pki.serving_cert.display()),
            format!("--tls-private-key-file={}", pki.serving_key.display()),
            format!("--client-ca-file={}", pki.ca.display()),
            format!("--token-auth-file={}", dir.join("tokens.csv").display()),
            format!("--service-account-issuer=https://{name}.clusterset-dns.test"),
            format!("--service-account-key-file={}", pki.sa_pub.display()),
            format!(
                "--service-account-signing-key-file={}",
                pki.sa_key.display()
            ),
            "--authorization-mode=Node,RBAC".into(),
            // The default admission plugins, ValidatingAdmissionPolicy among
            // them, plus NodeRestriction as clusters enable it.
            "--enable-admission-plugins=NodeRestriction".into(),
            format!("--service-cluster-ip-range={service_cidrs}"),
            format!("--cert-dir={}", dir.join("apiserver-certs").display()),
            "--profiling=false".into(),
            "--v=1".into(),
        ];
        let apiserver = Process::spawn(
            &format!("{name} kube-apiserver"),
            &bins.join("kube-apiserver"),
            &apiserver_args,
            &dir.join("kube-apiserver.log"),
        )?;
        let api: SocketAddr = ([127, 0, 0, 1], api_port).into();
        write_kubeconfig(
            &dir.join("admin.kubeconfig"),
            api,
            &pki.ca,
            "admin",
            ADMIN_TOKEN,
        )?;
        let controllers = Process::spawn(
            &format!("{name} kube-controller-manager"),
            &bins.join("kube-controller-manager"),
            &[
                format!("--kubeconfig={}", dir.join("admin.kubeconfig").display()),
                // Only the controllers whose work the tests depend on; each
                // with its own ServiceAccount credentials, as in a cluster.
                // service-cidr-controller makes an added ServiceCIDR Ready
                // (and deletable), which pinning a derived Service to the
                // VIPs needs (KEP-1880); the policy status controller
                // type-checks the admission policies (`security.rs`).
                "--controllers=garbagecollector,namespace,endpointslice,\
                 endpointslicemirroring,serviceaccount,serviceaccount-token,\
                 deployment,replicaset,statefulset,service-cidr-controller,\
                 validatingadmissionpolicy-status-controller"
                    .into(),
                "--use-service-account-credentials=true".into(),
                format!(
                    "--service-account-private-key-file={}",
                    pki.sa_key.display()
                ),
                format!("--root-ca-file={}", pki.ca.display()),
                "--leader-elect=false".into(),
                "--bind-address=127.0.0.1".into(),
                format!("--secure-port={}", free_port().port()),
                format!("--cert-dir={}", dir.join("kcm-certs").display()),
                "--v=1".into(),
            ],
            &dir.join("kube-controller-manager.log"),
        )?;
        let mut plane = Self {
            name: name.to_owned(),
            dir,
            api,
            ca: pki.ca,
            etcd_port,
            etcd: plane_etcd,
            apiserver,
            controllers,
            pods: None,
            apiserver_args,
        };
        plane.wait_ready().await?;
        plane.pods = Some(
            PodRunner::start(
                &plane.admin().await?,
                &plane.admin_kubeconfig(),
                &plane.dir,
                network,
                (&pki.serving_cert, &pki.serving_key),
            )
            .await
            .with_context(|| format!("{name}: the Pod runner did not start"))?,
        );
        Ok(plane)
    }

    /// Waits until the API server answers `/readyz` and the default
    /// ServiceAccount exists (the controllers are at work).
    async fn wait_ready(&mut self) -> Result<()> {
        let client = self.admin().await?;
        let name = self.name.clone();
        let deadline = Instant::now() + START_LIMIT;
        loop {
            self.apiserver.check_alive()?;
            self.controllers.check_alive()?;
            let ready = client
                .request_text(http::Request::get("/readyz").body(Vec::new())?)
                .await
                .is_ok();
            let sa: kube::Api<k8s_openapi::api::core::v1::ServiceAccount> =
                kube::Api::namespaced(client.clone(), "default");
            if ready && sa.get_opt("default").await.ok().flatten().is_some() {
                return Ok(());
            }
            ensure!(
                Instant::now() < deadline,
                "{name}: the API server was not ready within {START_LIMIT:?}; its log ends:\n{}",
                log_tail(&self.dir.join("kube-apiserver.log"), 30)
            );
            tokio::time::sleep(Duration::from_millis(250)).await;
        }
    }

    /// A client with the admin's credentials (for the test's own actions).
    pub async fn admin(&self) -> Result<Client> {
        client_from(&self.dir.join("admin.kubeconfig")).await
    }

    /// The admin kubeconfig (for kubectl).
    pub fn admin_kubeconfig(&self) -> PathBuf {
        self.dir.join("admin.kubeconfig")
    }

    /// Stops the API server, runs `during_outage`, moves etcd's revision on
    /// and compacts its history up to it (as the API server does every 5
    /// minutes), then starts the API server again with the same flags: every
    /// watch that comes back asks for a revision that is gone (410 Gone).
    /// Returns the revision compacted to.
    pub async fn restart_apiserver_past_compaction<F: AsyncFnOnce() -> Result<()>>(
        &mut self,
        during_outage: F,
    ) -> Result<i64> {
        self.apiserver.stop();
        during_outage().await?;
        // A key outside /registry: the API server never reads it.
        let put = etcd_post(
            self.etcd_port,
            "/v3/kv/put",
            r#"{"key":"L2NsdXN0ZXJzZXQtZG5zLXRlc3QvYnVtcA==","value":"MQ=="}"#,
        )?;
        let revision: i64 = put["header"]["revision"]
            .as_str()
            .context("etcd's revision")?
            .parse()?;
        etcd_post(
            self.etcd_port,
            "/v3/kv/compaction",
            &format!(r#"{{"revision":"{revision}","physical":true}}"#),
        )?;
        self.apiserver = Process::spawn(
            &format!("{} kube-apiserver", self.name),
            &bin_dir().join("kube-apiserver"),
            &self.apiserver_args,
            &self.dir.join("kube-apiserver-restarted.log"),
        )?;
        self.wait_ready().await?;
        Ok(revision)
    }

    /// Fails when a process of this control plane has exited.
    pub fn check_alive(&mut self) -> Result<()> {
        self.etcd.check_alive()?;
        self.apiserver.check_alive()?;
        self.controllers.check_alive()?;
        self.pods.as_mut().map_or(Ok(()), PodRunner::check_alive)
    }
}

impl Drop for ControlPlane {
    fn drop(&mut self) {
        // Controllers first, etcd last, as a cluster shuts down.
        self.pods = None;
        self.controllers.kill();
        self.apiserver.kill();
        self.etcd.kill();
    }
}

/// Writes a kubeconfig with a bearer token.
pub fn write_kubeconfig(
    path: &Path,
    api: SocketAddr,
    ca: &Path,
    user: &str,
    token: &str,
) -> Result<()> {
    fs::write(
        path,
        format!(
            "apiVersion: v1\nkind: Config\nclusters:\n- name: c\n  cluster:\n    server: https://{api}\n    certificate-authority: {}\nusers:\n- name: {user}\n  user:\n    token: {token}\ncontexts:\n- name: c\n  context:\n    cluster: c\n    user: {user}\ncurrent-context: c\n",
            ca.display()
        ),
    )
    .with_context(|| format!("writing {}", path.display()))
}

/// A kube client from a kubeconfig file.
pub async fn client_from(path: &Path) -> Result<Client> {
    let kubeconfig = Kubeconfig::read_from(path)?;
    let config =
        kube::Config::from_custom_kubeconfig(kubeconfig, &KubeConfigOptions::default()).await?;
    Ok(Client::try_from(config)?)
}

/// Polls `ready` every 100 ms until it is true, at most `limit`.
pub async fn wait_for(limit: Duration, mut ready: impl FnMut() -> Result<bool>) -> Result<()> {
    let deadline = Instant::now() + limit;
    loop {
        if ready()? {
            return Ok(());
        }
        ensure!(Instant::now() < deadline, "not within {limit:?}");
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
}

fn etcd_health(port: u16) -> bool {
    etcd_get(port, "/health")
        .map(|body| body.contains("\"health\":\"true\""))
        .unwrap_or(false)
}

fn etcd_get(port: u16, path: &str) -> Result<String> {
    http_exchange(
        port,
        &format!("GET {path} HTTP/1.0\r\nHost: 127.0.0.1\r\n\r\n"),
    )
}

fn etcd_post(port: u16, path: &str, body: &str) -> Result<serde_json::Value> {
    let response = http_exchange(
        port,
        &format!(
            "POST {path} HTTP/1.0\r\nHost: 127.0.0.1\r\nContent-Type: application/json\r\nContent-Length: {}\r\n\r\n{body}",
            body.len()
        ),
    )?;
    let (head, body) = response
        .split_once("\r\n\r\n")
        .context("an HTTP response")?;
    ensure!(
        head.starts_with("HTTP/1.0 200") || head.starts_with("HTTP/1.1 200"),
        "etcd {path}: {head}\n{body}"
    );
    Ok(serde_json::from_str(body)?)
}

/// One HTTP/1.0 exchange with etcd's plain-HTTP client port.
fn http_exchange(port: u16, request: &str) -> Result<String> {
    use std::io::{Read, Write};
    let mut stream = TcpStream::connect_timeout(
        &SocketAddr::from(([127, 0, 0, 1], port)),
        Duration::from_secs(2),
    )?;
    stream.set_read_timeout(Some(Duration::from_secs(10)))?;
    stream.write_all(request.as_bytes())?;
    let mut response = String::new();
    stream.read_to_string(&mut response)?;
    Ok(response)
}
