//! A port of a ServiceImport, and which of an import's ports a cluster backs. KEP-1645 ("Service Port"): the
//! import's ports are the union of the exports' ports, and a conflicting port
//! keeps the oldest export's definition; a cluster whose Service defines a
//! port differently does not serve the import's port, so its endpoints must
//! never be published under that port (a data plane maps ports by name).

use serde::{Deserialize, Serialize};

/// A port of a ServiceImport (`ServicePort` without target/node ports).
#[derive(Clone, Debug, Default, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct ServicePort {
    /// Port name; must be unique within the import when there are several.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub name: Option<String>,
    /// `TCP`, `UDP` or `SCTP`; defaults to `TCP`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub protocol: Option<String>,
    /// Application protocol hint, as on a Service port.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub app_protocol: Option<String>,
    /// The port number.
    pub port: i32,
}

impl std::fmt::Display for ServicePort {
    /// `name:port/PROTOCOL` (`port/PROTOCOL` unnamed), as `status` and `explain` print it.
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let proto = self.protocol.as_deref().unwrap_or("TCP");
        match &self.name {
            Some(name) => write!(f, "{name}:{}/{proto}", self.port),
            None => write!(f, "{}/{proto}", self.port),
        }
    }
}

use std::sync::Arc;

/// The ports of `import` that `service` defines identically (same name, port
/// and protocol). Shares `service` when it backs all of its own ports.
pub(crate) fn backed_ports(
    import: &Arc<[ServicePort]>,
    service: &Arc<[ServicePort]>,
) -> Arc<[ServicePort]> {
    let backed = |p: &&ServicePort| backs(import, p);
    // Nearly always the import's ports are this very list: nothing to compare.
    if Arc::ptr_eq(import, service) || service.iter().all(|p| backed(&p)) {
        return service.clone();
    }
    service.iter().filter(backed).cloned().collect()
}

/// Whether a cluster whose backed ports are `backed` serves the import's `port`.
pub(crate) fn backs(backed: &[ServicePort], port: &ServicePort) -> bool {
    backed.iter().any(|b| same_port(b, port))
}

/// Whether two ports are the same port of a Service (`appProtocol` is a hint only).
fn same_port(a: &ServicePort, b: &ServicePort) -> bool {
    let protocol = |p: &ServicePort| p.protocol.as_deref().unwrap_or("TCP").to_owned();
    a.name == b.name && a.port == b.port && protocol(a) == protocol(b)
}

/// Whether an EndpointSlice port named `name` belongs to one of `ports`
/// (slices name their ports after the Service's; an unnamed port is `""`).
pub(crate) fn names_backed_port(ports: &[ServicePort], name: Option<&str>) -> bool {
    let name = name.unwrap_or_default();
    ports
        .iter()
        .any(|p| p.name.as_deref().unwrap_or_default() == name)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn port(name: Option<&str>, port: i32, protocol: &str) -> ServicePort {
        ServicePort {
            name: name.map(Into::into),
            protocol: Some(protocol.into()),
            app_protocol: None,
            port,
        }
    }

    /// KEP-1645 "Service Port", upstream StrictPortConflict: east (oldest)
    /// defines `tcp` as 42, west as 4242; the import keeps 42, so west backs
    /// no port of the import, and a new port west adds is west's alone.
    #[test]
    fn a_port_defined_differently_is_not_backed() {
        let import: Arc<[ServicePort]> = Arc::new([
            port(Some("tcp"), 42, "TCP"),
            port(Some("tcp2"), 4343, "TCP"),
        ]);
        let west: Arc<[ServicePort]> = Arc::new([port(Some("tcp"), 4242, "TCP")]);
        assert!(backed_ports(&import, &west).is_empty());
        let west: Arc<[ServicePort]> = Arc::new([
            port(Some("tcp"), 4242, "TCP"),
            port(Some("tcp2"), 4343, "TCP"),
        ]);
        assert_eq!(
            backed_ports(&import, &west)[..],
            [port(Some("tcp2"), 4343, "TCP")]
        );
        let udp: Arc<[ServicePort]> = Arc::new([port(Some("tcp"), 42, "UDP")]);
        assert!(backed_ports(&import, &udp).is_empty());
    }

    #[test]
    fn a_cluster_backing_all_its_ports_shares_its_list() {
        let east: Arc<[ServicePort]> = Arc::new([port(Some("tcp"), 42, "TCP")]);
        let import: Arc<[ServicePort]> = Arc::new([
            port(Some("tcp"), 42, "TCP"),
            port(Some("tcp2"), 4242, "TCP"),
        ]);
        assert!(Arc::ptr_eq(&backed_ports(&import, &east), &east));
        assert!(Arc::ptr_eq(&backed_ports(&east, &east), &east));
    }

    #[test]
    fn slice_ports_match_by_name_unnamed_as_empty() {
        let ports = [port(None, 53, "UDP")];
        assert!(names_backed_port(&ports, Some("")));
        assert!(names_backed_port(&ports, None));
        assert!(!names_backed_port(&ports, Some("dns")));
        assert_eq!(port(Some("dns"), 53, "UDP").to_string(), "dns:53/UDP");
    }
}
