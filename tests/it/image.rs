//! The container image of the top-level Dockerfile (docs/container.md), run
//! by a real OCI runtime: `runc` over the image unpacked by `umoci`, as
//! locked down as a hardened Pod: a read-only root filesystem, user and group
//! 65532, no capabilities at all, no new privileges, a network namespace of
//! its own, only a tmpfs writable (where the state file goes). The image's
//! default command (the embedded demo) must answer DNS there.
//!
//! Needs `bash tests/image/build.sh` first (the OCI archive in
//! `target/image`), root, `runc` and `umoci`; without them the test skips,
//! and fails when `CI` is set.

use std::fs;
use std::net::SocketAddr;
use std::path::PathBuf;
use std::time::{Duration, Instant};

use hickory_proto::rr::RecordType::{A, SOA};
use serde_json::json;
use test_support::runc::{self, Bundle, ENTRYPOINT, NONROOT};

use crate::common::*;

/// Where the image's default command keeps its VIP state.
const STATE_DIR: &str = "/var/lib/clusterset-dns";
/// Where the default command listens, inside the container's network namespace.
const DNS: &str = "127.0.0.1:5300";
const OPS: &str = "127.0.0.1:9153";

/// Runs `work` on a thread of its own inside the network namespace of
/// process `pid`, on a runtime of its own (sockets belong to the namespace
/// of the thread that opens them).
fn in_netns<T: Send + 'static>(pid: u32, work: impl AsyncFnOnce() -> T + Send + 'static) -> T {
    let netns = fs::File::open(format!("/proc/{pid}/ns/net")).expect("the container's netns");
    std::thread::spawn(move || {
        nix::sched::setns(netns, nix::sched::CloneFlags::CLONE_NEWNET)
            .expect("setns into the container's network namespace");
        tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()
            .expect("a runtime")
            .block_on(work())
    })
    .join()
    .unwrap_or_else(|panic| std::panic::resume_unwind(panic))
}

#[test]
fn the_image_serves_the_demo_under_runc_locked_down() {
    if let Some(reason) = runc::unavailable() {
        return skip(&reason);
    }
    let dir = tempfile::tempdir().expect("a temporary directory");
    let mut bundle = Bundle::unpack(dir.path());
    // The image's own settings, as umoci carried them over.
    let user = &bundle.config["process"]["user"];
    assert_eq!(
        (&user["uid"], &user["gid"]),
        (&json!(NONROOT), &json!(NONROOT)),
        "the image runs as 65532:65532: {user}"
    );
    let args = bundle.config["process"]["args"].clone();
    assert_eq!(args[0], ENTRYPOINT, "ENTRYPOINT: {args}");
    assert!(
        args.as_array()
            .unwrap()
            .windows(2)
            .any(|w| w[0] == "--manifests" && w[1] == "/etc/clusterset-dns/demo"),
        "the default command serves the embedded demo: {args}"
    );
    for absent in [
        "bin/sh",
        "usr/bin/apt-get",
        "usr/bin/dpkg",
        "lib",
        "etc/passwd",
    ] {
        assert!(
            !bundle.rootfs().join(absent).exists(),
            "the image has no {absent} (no shell, package manager or libc)"
        );
    }
    bundle.lock_down();
    // The only writable place: the state file's folder.
    bundle.tmpfs(STATE_DIR);
    let container = bundle.run(
        &format!("clusterset-dns-image-{}", std::process::id()),
        &dir.path().join("runc"),
        &dir.path().join("container.log"),
    );
    let pid = container.pid;
    if let Err(wrong) = container.check_locked_down() {
        panic!("the container's process: {wrong}");
    }
    let host_netns = fs::read_link("/proc/self/ns/net").unwrap();
    assert_ne!(
        fs::read_link(format!("/proc/{pid}/ns/net")).unwrap(),
        host_netns,
        "a network namespace of its own"
    );

    // Its root filesystem is mounted read-only (mountinfo: mount point, options).
    let mountinfo = fs::read_to_string(format!("/proc/{pid}/mountinfo")).unwrap();
    let root = mountinfo
        .lines()
        .map(|l| l.split(' ').collect::<Vec<_>>())
        .find(|f| f[4] == "/")
        .expect("a root mount");
    assert!(
        root[5].split(',').any(|o| o == "ro"),
        "a read-only root: {root:?}"
    );

    let dns: SocketAddr = DNS.parse().unwrap();
    let ops: SocketAddr = OPS.parse().unwrap();
    let (web, db, ready) = in_netns(pid, async move || {
        let deadline = Instant::now() + Duration::from_secs(30);
        loop {
            // Answered NOERROR: listening, and past the first sync (before
            // it every answer is SERVFAIL; the RCODE is the header's
            // fourth byte's low bits, RFC 1035 §4.1.1).
            let probe = question("clusterset.local.", SOA).to_vec().unwrap();
            let answer = udp_raw(dns, &probe, Duration::from_millis(200)).await;
            if answer.is_some_and(|r| r.len() > 3 && r[3] & 0x0f == 0) {
                break;
            }
            let stat = fs::read_to_string(format!("/proc/{pid}/stat")).unwrap_or_default();
            assert!(
                !stat.is_empty() && !stat.contains(") Z "),
                "the container exited before answering DNS on {dns}"
            );
            assert!(
                Instant::now() < deadline,
                "the container did not answer DNS (NOERROR) on {dns} within 30 s"
            );
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
        let web = resolve(dns, &svc("web.shop"), A).await;
        let db = resolve(dns, &svc("db.shop"), A).await;
        let ready = get(ops, "/readyz").await;
        (web, db, ready)
    });
    assert!(is_vip(&web), "web.shop: one VIP in 243.0.0.0/8: {web:?}");
    // The demo's ready endpoints of db in east and west (config/demo).
    assert_eq!(
        db,
        ips(["10.1.1.10", "10.1.1.11", "10.2.1.10", "10.2.1.11"])
    );
    assert_eq!(ready.0, 200, "/readyz: {}", ready.1);

    // The VIP state went to the one writable place, on a read-only root.
    let state = PathBuf::from(format!("/proc/{pid}/root{STATE_DIR}/vips.json"));
    let saved = fs::read_to_string(&state).expect("the state file in the tmpfs");
    let Outcome::Ips(web_ips) = &web else {
        unreachable!()
    };
    let vip = web_ips.iter().next().unwrap().to_string();
    assert!(saved.contains(&vip), "{vip} kept in {saved}");
    // And as a user asks it: the host's `dig`, in the container's network
    // namespace (where a port mapping would carry it).
    let dig = std::process::Command::new("nsenter")
        .arg(format!("--net=/proc/{pid}/ns/net"))
        .args(["dig", "+short", "-p", "5300", "@127.0.0.1"])
        .arg(svc("web.shop"))
        .output()
        .expect("nsenter runs dig (util-linux, bind9-dnsutils)");
    assert_eq!(
        String::from_utf8_lossy(&dig.stdout).trim(),
        vip,
        "dig: {}",
        String::from_utf8_lossy(&dig.stderr)
    );
    let log = container.log();
    assert!(
        !log.contains("will not survive") && !log.contains("Read-only file system"),
        "no failed write: {log}"
    );
}
