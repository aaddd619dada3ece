//! Connections made from inside a network namespace, as a process on that
//! node would make them: a thread of its own enters the namespace
//! (`setns`), so every socket it opens lives there, and is dropped after
//! (a thread of tokio's pools must never be moved).

use std::fs::File;
use std::io::Read;
use std::net::{SocketAddr, TcpStream, UdpSocket};
use std::path::PathBuf;
use std::time::Duration;

use anyhow::{Context, Result};

/// TCP or UDP.
#[derive(Clone, Copy, Debug, PartialEq)]
pub enum Proto {
    /// A connection: the listener's line, then its close.
    Tcp,
    /// One datagram in, the listener's line back as one datagram.
    Udp,
}

/// How long a TCP connect or read, or one UDP wait for the answer, may take.
const WAIT: Duration = Duration::from_secs(2);
/// Datagrams sent per UDP dial before it counts as unanswered: a listener
/// that forks per peer (socat) drops one now and then.
const UDP_TRIES: usize = 3;

/// Dials `target` `count` times, one after another, from inside the
/// namespace at `netns` (`/run/netns/NAME`); each dial's answer (its first
/// line, trimmed), or `None` when nothing answered.
pub async fn dial(
    netns: PathBuf,
    target: SocketAddr,
    proto: Proto,
    count: usize,
) -> Result<Vec<Option<String>>> {
    let (tx, rx) = tokio::sync::oneshot::channel();
    std::thread::spawn(move || {
        let _ = tx.send(dial_here(&netns, target, proto, count));
    });
    rx.await.context("the dialling thread died")?
}

fn dial_here(
    netns: &PathBuf,
    target: SocketAddr,
    proto: Proto,
    count: usize,
) -> Result<Vec<Option<String>>> {
    let file = File::open(netns).with_context(|| format!("opening {}", netns.display()))?;
    nix::sched::setns(file, nix::sched::CloneFlags::CLONE_NEWNET)
        .with_context(|| format!("entering {}", netns.display()))?;
    Ok((0..count)
        .map(|_| match proto {
            Proto::Tcp => tcp(target),
            Proto::Udp => (0..UDP_TRIES).find_map(|_| udp(target)),
        })
        .collect())
}

fn tcp(target: SocketAddr) -> Option<String> {
    let mut stream = TcpStream::connect_timeout(&target, WAIT).ok()?;
    stream.set_read_timeout(Some(WAIT)).ok()?;
    let mut text = String::new();
    stream.read_to_string(&mut text).ok()?;
    first_line(&text)
}

fn udp(target: SocketAddr) -> Option<String> {
    let local: SocketAddr = if target.is_ipv4() {
        ([0, 0, 0, 0], 0).into()
    } else {
        (std::net::Ipv6Addr::UNSPECIFIED, 0).into()
    };
    let socket = UdpSocket::bind(local).ok()?;
    socket.connect(target).ok()?;
    socket.set_read_timeout(Some(WAIT / 2)).ok()?;
    socket.send(b"hello\n").ok()?;
    let mut buffer = [0u8; 512];
    let n = socket.recv(&mut buffer).ok()?;
    first_line(&String::from_utf8_lossy(&buffer[..n]))
}

fn first_line(text: &str) -> Option<String> {
    text.lines()
        .next()
        .map(str::trim)
        .filter(|l| !l.is_empty())
        .map(str::to_owned)
}
