//! The container image of the top-level Dockerfile, run by a real OCI
//! runtime (docs/container.md): the OCI archive `tests/image/build.sh` saves,
//! unpacked by `umoci` into a runtime bundle, its `config.json` locked down
//! as a hardened Pod is, and run by `runc`. Shared by `tests/it/image.rs` and
//! the real-control-plane scenario `tests/real_control_plane/image.rs`.

use std::fs;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};

use serde_json::{Value, json};

use crate::daemon::installed;

/// Where `tests/image/build.sh` saves the image, and its reference there.
const ARCHIVE: &str = "target/image/clusterset-dns.oci.tar";
const REFERENCE: &str = "0.1.0";
/// The user and group the image runs as (the Dockerfile's USER).
pub const NONROOT: u32 = 65532;
/// Where the binary is in the image (the Dockerfile's ENTRYPOINT).
pub const ENTRYPOINT: &str = "/usr/local/bin/clusterset-dns";

/// Why the image cannot run here (the test skips, or fails under CI), if so.
pub fn unavailable() -> Option<String> {
    let archive = archive();
    if !archive.is_file() {
        return Some(format!(
            "no image at {} (build it with `bash tests/image/build.sh`)",
            archive.display()
        ));
    }
    for tool in ["runc", "umoci", "tar"] {
        if installed(tool).is_none() {
            return Some(format!(
                "{tool} is not installed (tests/image/build.sh installs it)"
            ));
        }
    }
    if !nix::unistd::geteuid().is_root() {
        return Some("runc and `umoci unpack` need root".into());
    }
    None
}

/// The OCI archive.
fn archive() -> PathBuf {
    crate::repository().join(ARCHIVE)
}

/// Runs `program args` and returns stdout; panics with stderr on failure.
fn run(program: &str, args: &[&str]) -> String {
    let output = Command::new(installed(program).unwrap_or_else(|| program.into()))
        .args(args)
        .output()
        .unwrap_or_else(|e| panic!("cannot run {program}: {e}"));
    assert!(
        output.status.success(),
        "{program} {args:?} failed: {}",
        String::from_utf8_lossy(&output.stderr)
    );
    String::from_utf8_lossy(&output.stdout).into_owned()
}

/// The image unpacked into `dir/bundle` (a runtime bundle: `config.json`
/// and `rootfs`), with its configuration as umoci generated it from the
/// image's (user, entrypoint, command).
pub struct Bundle {
    path: PathBuf,
    pub config: Value,
}

impl Bundle {
    pub fn unpack(dir: &Path) -> Self {
        let layout = dir.join("layout");
        fs::create_dir_all(&layout).expect("a layout folder");
        let dir_arg = layout.display().to_string();
        run(
            "tar",
            &["-xf", &archive().display().to_string(), "-C", &dir_arg],
        );
        let path = dir.join("bundle");
        run(
            "umoci",
            &[
                "unpack",
                "--image",
                &format!("{dir_arg}:{REFERENCE}"),
                &path.display().to_string(),
            ],
        );
        let text = fs::read_to_string(path.join("config.json")).expect("config.json");
        let config = serde_json::from_str(&text).expect("config.json is JSON");
        Self { path, config }
    }

    /// The root filesystem.
    pub fn rootfs(&self) -> PathBuf {
        self.path.join("rootfs")
    }

    /// Locks the configuration down as a hardened Pod is
    /// (config/kubernetes/deployment.yaml: `readOnlyRootFilesystem`, every
    /// capability dropped, no privilege escalation) and drops what runc
    /// cannot apply inside this sandbox (rlimits, cgroup settings).
    pub fn lock_down(&mut self) {
        let process = &mut self.config["process"];
        process["terminal"] = json!(false);
        process["noNewPrivileges"] = json!(true);
        let sets = [
            "bounding",
            "effective",
            "inheritable",
            "permitted",
            "ambient",
        ];
        process["capabilities"] = sets.iter().map(|s| (s.to_string(), json!([]))).collect();
        process.as_object_mut().unwrap().remove("rlimits");
        self.config["root"]["readonly"] = json!(true);
        let linux = self.config["linux"]
            .as_object_mut()
            .expect("a linux section");
        linux.remove("resources");
        linux.remove("cgroupsPath");
    }

    /// Adds a tmpfs at `destination` writable by the image's user only.
    pub fn tmpfs(&mut self, destination: &str) {
        self.mount(json!({
            "destination": destination,
            "type": "tmpfs",
            "source": "tmpfs",
            "options": ["nosuid", "nodev", "noexec", "mode=0700",
                        format!("uid={NONROOT}"), format!("gid={NONROOT}"), "size=1m"],
        }));
    }

    /// Bind-mounts host `source` (a file or folder) read-only at `destination`.
    pub fn bind_read_only(&mut self, source: &Path, destination: &str) {
        self.mount(json!({
            "destination": destination,
            "type": "bind",
            "source": source,
            "options": ["rbind", "ro", "nosuid", "nodev", "noexec"],
        }));
    }

    fn mount(&mut self, mount: Value) {
        self.config["mounts"]
            .as_array_mut()
            .expect("mounts")
            .push(mount);
    }

    /// Shares the host's network namespace (as `hostNetwork: true`).
    pub fn host_network(&mut self) {
        self.config["linux"]["namespaces"]
            .as_array_mut()
            .expect("namespaces")
            .retain(|ns| ns["type"] != "network");
    }

    /// Starts the container (`runc run -d`), its output in `log`.
    pub fn run(&self, id: &str, state: &Path, log: &Path) -> Container {
        fs::write(
            self.path.join("config.json"),
            serde_json::to_vec_pretty(&self.config).unwrap(),
        )
        .expect("config.json written");
        let mut container = Container {
            id: id.to_owned(),
            state: state.to_owned(),
            log: log.to_owned(),
            pid: 0,
        };
        let pid_file = state.with_extension("pid");
        let out = fs::File::create(log).expect("a log file");
        // -d: runc returns once the container runs; its output goes to the
        // log (a pipe would stay open as long as the container).
        let status = container
            .runc()
            .args(["run", "-d", "--pid-file"])
            .arg(&pid_file)
            .arg("--bundle")
            .arg(&self.path)
            .arg(id)
            .stdin(Stdio::null())
            .stdout(out.try_clone().unwrap())
            .stderr(out)
            .status()
            .expect("runc runs");
        assert!(status.success(), "runc run failed: {}", container.log());
        container.pid = fs::read_to_string(&pid_file)
            .expect("runc wrote the pid file")
            .trim()
            .parse()
            .expect("a pid");
        container
    }
}

/// A running container, deleted (killed first) when dropped, also when the
/// test fails.
pub struct Container {
    id: String,
    state: PathBuf,
    log: PathBuf,
    /// Its init process, as the host sees it.
    pub pid: u32,
}

impl Container {
    fn runc(&self) -> Command {
        let mut runc = Command::new(installed("runc").expect("runc"));
        runc.arg("--root").arg(&self.state);
        runc
    }

    /// What it has printed.
    pub fn log(&self) -> String {
        fs::read_to_string(&self.log).unwrap_or_default()
    }

    /// Whether its process still runs.
    pub fn running(&self) -> bool {
        fs::read_to_string(format!("/proc/{}/stat", self.pid))
            .is_ok_and(|stat| !stat.contains(") Z "))
    }

    /// A field of its process's `/proc/<pid>/status`, e.g. `Uid`, with
    /// single spaces: the container's identity as the kernel sees it (the
    /// image has no shell to ask from inside).
    fn status(&self, field: &str) -> String {
        let status = fs::read_to_string(format!("/proc/{}/status", self.pid))
            .expect("the container's process status");
        status
            .lines()
            .find_map(|l| l.strip_prefix(&format!("{field}:")))
            .unwrap_or_else(|| panic!("no {field} in /proc/{}/status", self.pid))
            .split_whitespace()
            .collect::<Vec<_>>()
            .join(" ")
    }

    /// Fails unless it runs as 65532:65532 with no capability and no way
    /// to gain privileges.
    pub fn check_locked_down(&self) -> Result<(), String> {
        let ids = format!("{NONROOT} {NONROOT} {NONROOT} {NONROOT}");
        let mut wrong = Vec::new();
        for (field, expected) in [
            ("Uid", ids.as_str()),
            ("Gid", ids.as_str()),
            ("Groups", ""),
            ("CapInh", "0000000000000000"),
            ("CapPrm", "0000000000000000"),
            ("CapEff", "0000000000000000"),
            ("CapBnd", "0000000000000000"),
            ("CapAmb", "0000000000000000"),
            ("NoNewPrivs", "1"),
        ] {
            let got = self.status(field);
            if got != expected {
                wrong.push(format!("{field}: {got:?}, expected {expected:?}"));
            }
        }
        if wrong.is_empty() {
            Ok(())
        } else {
            Err(wrong.join("; "))
        }
    }
}

impl Drop for Container {
    fn drop(&mut self) {
        let _ = self
            .runc()
            .args(["delete", "--force", &self.id])
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .status();
        if std::thread::panicking() {
            eprintln!("--- the container's output ---\n{}", self.log());
        }
    }
}
