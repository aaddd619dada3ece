//! The index's answers in the reverse zones: lookups, PTR, SOA and NS
//! records, and their zone transfers (the maps are in `reverse.rs`).

use hickory_proto::rr::rdata::{NS, PTR};
use hickory_proto::rr::{LowerName, Name, RData, Record, RecordType};

use super::Index;
use super::names::{Lookup, ReverseOwner};
use super::records::{ns_name, soa_record, wants};
use super::reverse::ReverseZone;

impl Index {
    /// Resolves a name outside the zone: in a reverse zone, or not served.
    pub(super) fn reverse_lookup(&self, name: &LowerName) -> Lookup {
        match self.reverse.lookup(name) {
            Lookup::NotInZone => Lookup::NotInZone,
            _ if !self.is_synced() => Lookup::NotReady,
            found => found,
        }
    }

    /// The records of `rtype` at an existing reverse-zone name.
    pub(super) fn reverse_records(
        &self,
        owner: &ReverseOwner,
        name: &Name,
        rtype: RecordType,
    ) -> Vec<Record> {
        let mut records = Vec::new();
        match owner {
            ReverseOwner::Apex(zone) => {
                let apex = &self.reverse.zones[*zone].apex;
                if wants(rtype, RecordType::SOA) {
                    records.push(self.soa_at(apex));
                }
                if wants(rtype, RecordType::NS) {
                    let ns = RData::NS(NS(ns_name(&self.zone)));
                    records.push(Record::from_rdata(apex.clone(), self.ttl, ns));
                }
            }
            ReverseOwner::Pointers(targets) if wants(rtype, RecordType::PTR) => {
                records.extend(targets.iter().map(|target| {
                    Record::from_rdata(name.clone(), self.ttl, RData::PTR(PTR(target.clone())))
                }));
            }
            ReverseOwner::Pointers(_) | ReverseOwner::Empty => {}
        }
        records
    }

    /// The SOA of the zone `apex` (this zone or a reverse zone) at the
    /// current serial: one serial for all, the name server and mailbox of
    /// this zone.
    pub fn soa_at(&self, apex: &Name) -> Record {
        if apex == &self.zone {
            return self.soa();
        }
        let serial = self.serial.load(std::sync::atomic::Ordering::Relaxed);
        let mut soa = soa_record(&self.zone, self.ttl, serial);
        soa.name = apex.clone();
        soa
    }

    /// The SOA for a negative answer about `name`: its reverse zone's, else this zone's.
    pub fn soa_for(&self, name: &LowerName) -> Record {
        match self.reverse.zone_of(name) {
            Some(zone) if !self.apex.zone_of(name) => self.soa_at(&self.reverse.zones[zone].apex),
            _ => self.soa(),
        }
    }

    /// The reverse zones served.
    pub fn reverse_zones(&self) -> &[ReverseZone] {
        self.reverse.zones()
    }

    /// Every PTR record of reverse zone `zone`, in address order.
    pub(super) fn reverse_zone_records(&self, zone: usize) -> Vec<Record> {
        let pointers = self
            .reverse
            .pointers
            .read()
            .unwrap_or_else(|e| e.into_inner());
        pointers
            .range(self.reverse.zones[zone].addresses())
            .flat_map(|(ip, targets)| {
                let owner = Name::from(*ip);
                targets.iter().map(move |target| {
                    Record::from_rdata(owner.clone(), self.ttl, RData::PTR(PTR(target.clone())))
                })
            })
            .collect()
    }
}
