//! Which of an import's ports a cluster backs. KEP-1645 ("Service Port"): the
//! import's ports are the union of the exports' ports, and a conflicting port
//! keeps the oldest export's definition; a cluster whose Service defines a
//! port differently does not serve the import's port, so its endpoints must
//! never be published under that port (a data plane maps ports by name).

use std::sync::Arc;

use crate::crd::ServicePort;

/// The ports of `import` that `service` defines identically (same name, port
/// and protocol). Shares `service` when it backs all of its own ports.
pub fn backed_ports(
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
pub fn backs(backed: &[ServicePort], port: &ServicePort) -> bool {
    backed.iter().any(|b| same_port(b, port))
}

/// Whether two ports are the same port of a Service (`appProtocol` is a hint only).
fn same_port(a: &ServicePort, b: &ServicePort) -> bool {
    let protocol = |p: &ServicePort| p.protocol.as_deref().unwrap_or("TCP").to_owned();
    a.name == b.name && a.port == b.port && protocol(a) == protocol(b)
}

/// Whether an EndpointSlice port named `name` belongs to one of `ports`
/// (slices name their ports after the Service's; an unnamed port is `""`).
pub fn names_backed_port(ports: &[ServicePort], name: Option<&str>) -> bool {
    let name = name.unwrap_or_default();
    ports
        .iter()
        .any(|p| p.name.as_deref().unwrap_or_default() == name)
}

/// `name:port/PROTOCOL` (or `port/PROTOCOL` unnamed), as `status` and
/// conditions show a port.
pub fn port_text(port: &ServicePort) -> String {
    let protocol = port.protocol.as_deref().unwrap_or("TCP");
    match &port.name {
        Some(name) => format!("{name}:{}/{protocol}", port.port),
        None => format!("{}/{protocol}", port.port),
    }
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
        assert_eq!(port_text(&port(Some("dns"), 53, "UDP")), "dns:53/UDP");
    }
}
