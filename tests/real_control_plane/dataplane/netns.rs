//! Network namespaces made with iproute2 (`ip netns`), the pieces the data
//! plane is built of: a namespace per node, per Pod and for the router
//! between clusters, joined by veth pairs. Names of namespaces and of the
//! root namespace's interfaces are global on the host, so they carry the
//! test process's id ([`unique`]): two test binaries never share one.

use std::net::IpAddr;
use std::process::{Command, Stdio};

use anyhow::{Context, Result, ensure};

/// `csd<pid><suffix>`: a name no other test process uses. Kept short: the
/// root namespace's interface names are at most 15 bytes.
pub fn unique(suffix: &str) -> String {
    format!("csd{}{suffix}", std::process::id())
}

/// Runs `ip args...`, failing with its error output.
pub fn ip(args: &[&str]) -> Result<()> {
    let output = Command::new("ip")
        .args(args)
        .stdin(Stdio::null())
        .output()
        .context("running ip (iproute2)")?;
    ensure!(
        output.status.success(),
        "ip {} failed: {}",
        args.join(" "),
        String::from_utf8_lossy(&output.stderr).trim()
    );
    Ok(())
}

/// A network namespace, deleted when dropped (its interfaces with it: a
/// veth pair goes when either end's namespace goes).
pub struct Netns {
    name: String,
}

impl Netns {
    /// Creates `name` with its loopback up and IPv6 duplicate address
    /// detection off (RFC 4862 §5.4: each new address would otherwise be
    /// unusable for about a second, link-local ones included).
    pub fn create(name: String) -> Result<Self> {
        ensure!(
            nix::unistd::geteuid().is_root(),
            "network namespaces need root"
        );
        ip(&["netns", "add", &name])?;
        let netns = Self { name };
        netns.ip(&["link", "set", "lo", "up"])?;
        for key in [
            "net.ipv6.conf.all.accept_dad",
            "net.ipv6.conf.default.accept_dad",
        ] {
            netns.sysctl(key, "0")?;
        }
        Ok(netns)
    }

    /// Its name (for `ip netns exec`, `ip -n`).
    pub fn name(&self) -> &str {
        &self.name
    }

    /// `program` run inside it (`ip netns exec NAME program`: the spawned
    /// process is `program` itself, so killing it kills the program).
    pub fn command(&self, program: impl AsRef<std::ffi::OsStr>) -> Command {
        let mut command = Command::new("ip");
        command.args(["netns", "exec", &self.name]).arg(program);
        command
    }

    /// `ip -n NAME args...`.
    pub fn ip(&self, args: &[&str]) -> Result<()> {
        let mut all = vec!["-n", self.name.as_str()];
        all.extend_from_slice(args);
        ip(&all)
    }

    /// Sets a sysctl of this namespace (the `net.` ones are per namespace).
    pub fn sysctl(&self, key: &str, value: &str) -> Result<()> {
        let output = self
            .command("sysctl")
            .args(["-qw", &format!("{key}={value}")])
            .output()?;
        ensure!(
            output.status.success(),
            "{}: sysctl {key}={value}: {}",
            self.name,
            String::from_utf8_lossy(&output.stderr).trim()
        );
        Ok(())
    }

    /// Makes it a router, both families.
    pub fn forward(&self) -> Result<()> {
        self.sysctl("net.ipv4.ip_forward", "1")?;
        self.sysctl("net.ipv6.conf.all.forwarding", "1")
    }

    /// Adds `address/prefix` to `interface` (IPv6 without duplicate
    /// address detection, RFC 4862 §5.4).
    pub fn address(&self, interface: &str, address: IpAddr, prefix: u8) -> Result<()> {
        let args = address_args(interface, address, prefix);
        self.ip(&args.iter().map(String::as_str).collect::<Vec<_>>())
    }

    /// Adds a route: `to` (`default` or a CIDR) via `gateway`, or straight
    /// out of `interface` when `gateway` is `None`.
    pub fn route(&self, to: &str, gateway: Option<IpAddr>, interface: Option<&str>) -> Result<()> {
        let v6 = gateway.is_some_and(|g| g.is_ipv6()) || to.contains(':');
        let gateway = gateway.map(|g| g.to_string());
        let mut args = vec![if v6 { "-6" } else { "-4" }, "route", "add", to];
        if let Some(gateway) = &gateway {
            args.extend(["via", gateway]);
        }
        if let Some(interface) = interface {
            args.extend(["dev", interface]);
        }
        self.ip(&args)
    }
}

impl Drop for Netns {
    fn drop(&mut self) {
        let _ = ip(&["netns", "del", &self.name]);
    }
}

/// `addr add` arguments (`nodad` for IPv6, see [`Netns::address`]).
fn address_args(interface: &str, address: IpAddr, prefix: u8) -> Vec<String> {
    let mut args: Vec<String> = vec![
        "addr".into(),
        "add".into(),
        format!("{address}/{prefix}"),
        "dev".into(),
        interface.into(),
    ];
    if address.is_ipv6() {
        args.push("nodad".into());
    }
    args
}

/// A veth pair: `near` in namespace `near_ns` (`None`: the root namespace)
/// and `far` in `far_ns`, both up.
pub fn veth(near_ns: Option<&Netns>, near: &str, far_ns: &Netns, far: &str) -> Result<()> {
    let in_near = |args: &[&str]| match near_ns {
        Some(ns) => ns.ip(args),
        None => ip(args),
    };
    in_near(&[
        "link",
        "add",
        near,
        "type",
        "veth",
        "peer",
        "name",
        far,
        "netns",
        far_ns.name(),
    ])?;
    in_near(&["link", "set", near, "up"])?;
    far_ns.ip(&["link", "set", far, "up"])
}

/// Adds an address to an interface of the root namespace (see [`Netns::address`]).
pub fn root_address(interface: &str, address: IpAddr, prefix: u8) -> Result<()> {
    let args = address_args(interface, address, prefix);
    ip(&args.iter().map(String::as_str).collect::<Vec<_>>())
}
