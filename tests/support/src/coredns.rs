//! The CoreDNS server block this project ships for clusters'
//! Corefiles, as tests run it.

use std::fs;
use std::net::SocketAddr;

use crate::repository;

/// The block of `config/kubernetes/coredns-stanza.txt`, comments left
/// out, on `port` of 127.0.0.1, with its `forward . <service-ip>` line
/// replaced by `forward`.
pub fn stanza(port: u16, forward: &str) -> String {
    stanza_at(SocketAddr::from(([127, 0, 0, 1], port)), forward)
}

/// [`stanza`] on `at`.
pub fn stanza_at(at: SocketAddr, forward: &str) -> String {
    let path = repository().join("config/kubernetes/coredns-stanza.txt");
    let text = fs::read_to_string(&path).expect("the stanza file");
    let block: String = text
        .lines()
        .filter(|line| !line.starts_with('#'))
        .map(|line| format!("{line}\n"))
        .collect();
    let (head, line) = ("clusterset.local:53 {\n", "    forward . <service-ip>\n");
    for expected in [head, line] {
        assert!(
            block.contains(expected),
            "{} has no line {expected:?}: {block}",
            path.display()
        );
    }
    block
        .replace(
            head,
            &format!("clusterset.local:{} {{\n    bind {}\n", at.port(), at.ip()),
        )
        .replace(line, forward)
}
