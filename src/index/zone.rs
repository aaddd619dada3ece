//! A whole zone as queries answer it, for zone transfers (RFC 5936 §2.2:
//! the SOA first and last, every other record once in between). Names are
//! enumerated from the services, then resolved by the same lookup and record
//! builders as queries, so a transfer never holds what a query would not get.

use std::collections::HashSet;

use hickory_proto::rr::{LowerName, Name, Record, RecordType};

use super::Index;
use super::entry::ServiceEntry;
use super::names::Lookup;
use super::records::{child, ns_name, records_name};
use super::records::{local_endpoints, pod_name};

/// The record types a name of the zone can hold besides the apex SOA.
const TYPES: [RecordType; 6] = [
    RecordType::NS,
    RecordType::A,
    RecordType::AAAA,
    RecordType::SRV,
    RecordType::TXT,
    RecordType::PTR,
];

/// Attempts at a transfer that no commit interrupts.
const ATTEMPTS: usize = 5;

impl Index {
    /// Every record of the zone at `apex` (this zone or a reverse zone), the
    /// SOA first and last; None if no zone served starts at `apex`. Built
    /// again if a commit came in between, so the records match the serial.
    pub fn zone_records(&self, apex: &LowerName) -> Option<Vec<Record>> {
        let reverse = self
            .reverse
            .zones()
            .iter()
            .position(|z| apex == &LowerName::new(z.apex()));
        if reverse.is_none() && *apex != self.apex {
            return None;
        }
        let apex = Name::from(apex);
        let mut attempts = 0;
        loop {
            let soa = self.soa_at(&apex);
            let mut records = vec![soa.clone()];
            records.extend(self.answered(&apex));
            match reverse {
                None => records.extend(self.main_records()),
                Some(zone) => records.extend(self.reverse_zone_records(zone)),
            }
            records.push(soa.clone());
            attempts += 1;
            if self.soa_at(&apex) == soa || attempts == ATTEMPTS {
                return Some(records);
            }
        }
    }

    /// The records of this zone below the apex.
    fn main_records(&self) -> Vec<Record> {
        let fixed = [child(&self.zone, "dns-version"), ns_name(&self.zone)];
        let services: Vec<Name> = self
            .services
            .iter()
            .flat_map(|entry| self.service_names(entry.key(), entry.value()))
            .collect();
        let mut seen = HashSet::new();
        fixed
            .into_iter()
            .chain(services)
            .filter(|name| seen.insert(name.clone()))
            .flat_map(|name| self.answered(&name))
            .collect()
    }

    /// Every record queries for `name` get (the apex SOA aside).
    fn answered(&self, name: &Name) -> Vec<Record> {
        let Lookup::Found(owner) = self.lookup(&LowerName::new(name)) else {
            return Vec::new();
        };
        TYPES
            .iter()
            .flat_map(|&rtype| self.records(&owner, name, rtype))
            .collect()
    }

    /// The names that may exist under service `key` (`<svc>.<ns>`): the
    /// service, its SRV names, its per-pod names and its cluster names.
    fn service_names(&self, key: &str, entry: &ServiceEntry) -> Vec<Name> {
        let Some(service) = records_name(&self.zone, &format!("{key}.svc")) else {
            return Vec::new();
        };
        let below = |labels: &str| Name::from_ascii(labels).ok()?.append_domain(&service).ok();
        let import = &entry.import;
        let srv = import.ports.iter().filter_map(|port| {
            let protocol = port
                .protocol
                .as_deref()
                .unwrap_or("TCP")
                .to_ascii_lowercase();
            below(&format!("_{}._{protocol}", port.name.as_deref()?))
        });
        let pods = local_endpoints(import, None)
            .filter_map(|(cluster, ip, host)| pod_name(&service, cluster, ip, host));
        let clusters = import
            .clusters
            .iter()
            .filter(|_| self.cluster_targeting)
            .filter_map(|c| below(&c.cluster));
        let mut names = vec![service.clone()];
        names.extend(srv.chain(pods).chain(clusters).map(|n| n.to_lowercase()));
        names
    }
}
