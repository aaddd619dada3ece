//! The records held at one DNS name.

use hickory_proto::rr::{Record, RecordType};

/// The records of one name. A node with no records is an empty non-terminal:
/// the name exists (NODATA), it just owns nothing.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct Node {
    records: Vec<Record>,
}

impl Node {
    /// A node holding `records`.
    pub fn new(records: Vec<Record>) -> Self {
        Self { records }
    }

    /// Adds a record.
    pub fn push(&mut self, record: Record) {
        self.records.push(record);
    }

    /// Drops repeated records, keeping the first of each.
    pub fn dedup(&mut self) {
        let mut seen: Vec<Record> = Vec::with_capacity(self.records.len());
        self.records.retain(|r| {
            let new = !seen.contains(r);
            if new {
                seen.push(r.clone());
            }
            new
        });
    }

    /// The records of a type (`ANY` gives all).
    pub fn records(&self, rtype: RecordType) -> impl Iterator<Item = &Record> {
        self.records
            .iter()
            .filter(move |r| rtype == RecordType::ANY || r.record_type() == rtype)
    }

    /// All records.
    pub fn all(&self) -> &[Record] {
        &self.records
    }
}
