//! Encodes a response message within a size limit. Records that do not fit
//! are left out whole and TC is set, so the counts always match the sections
//! (RFC 1035 §4.1, RFC 2181 §9); the OPT record of an EDNS query is kept
//! however little else fits (RFC 6891 §7). A record owned by the question's
//! name has its owner written as a pointer to the question (RFC 1035
//! §4.1.4), however many records come before it: hickory-proto compresses
//! only the first 120 names of a message (Unbound's limit against the cost
//! of compression searches, CVE-2024-8508), which wrote every later owner
//! out in full and held a headless answer over TCP to about 1,500 records
//! instead of 4,000. Pointing at the question costs no search.

use hickory_proto::ProtoError;
use hickory_proto::op::{Edns, Header, Metadata, Query};
use hickory_proto::rr::{Name, Record, RecordData};
use hickory_proto::serialize::binary::{BinEncodable, BinEncoder};

/// The sections of a response to encode.
pub(crate) struct Sections<'a> {
    /// Header flags and RCODE (the extended RCODE bits go into the OPT).
    pub metadata: Metadata,
    /// The question to echo, re-encoded from its parsed form.
    pub query: Option<&'a Query>,
    /// Answer section.
    pub answers: &'a [Record],
    /// Authority section.
    pub authority: &'a [Record],
    /// The OPT record's content, for an EDNS query.
    pub edns: Option<&'a Edns>,
}

/// Byte 2 of the header: the TC flag.
const TC: u8 = 0x02;
/// A compression pointer to the question's name, right after the 12-byte
/// header (RFC 1035 §4.1.1, §4.1.4).
const QUESTION_POINTER: u16 = 0xC000 | 12;

impl Sections<'_> {
    /// Encodes the message into at most `limit` bytes.
    pub(crate) fn encode(&self, limit: u16) -> Result<Vec<u8>, ProtoError> {
        let opt = self.opt()?;
        let mut bytes = Vec::with_capacity(512);
        let mut encoder = BinEncoder::new(&mut bytes);
        let header = Header {
            metadata: self.metadata,
            counts: Default::default(),
        };
        header.emit(&mut encoder)?;
        let question = match self.query {
            Some(query) => Some(emit_question(&mut encoder, query)?),
            None => None,
        };
        // Room for the OPT record is kept back while records are added.
        let room = usize::from(limit).saturating_sub(opt.len());
        encoder.set_max_size(u16::try_from(room).unwrap_or(u16::MAX));
        let asked = self.query.map(Query::name);
        let (answers, mut cut) = emit_whole(&mut encoder, self.answers, asked)?;
        let authorities = if cut {
            0
        } else {
            let (count, authority_cut) = emit_whole(&mut encoder, self.authority, asked)?;
            cut = authority_cut;
            count
        };
        encoder.set_max_size(limit);
        encoder.emit_vec(&opt)?;
        let counts = [
            u16::from(self.query.is_some()),
            answers,
            authorities,
            u16::from(!opt.is_empty()),
        ];
        for (slot, count) in bytes[4..12].chunks_exact_mut(2).zip(counts) {
            slot.copy_from_slice(&count.to_be_bytes());
        }
        if cut {
            bytes[2] |= TC;
        }
        if let Some((at, asked)) = question {
            bytes[at..at + asked.len()].copy_from_slice(&asked);
        }
        Ok(bytes)
    }

    /// The encoded OPT record (empty without EDNS), with the high bits of
    /// the RCODE (RFC 6891 §6.1.3).
    fn opt(&self) -> Result<Vec<u8>, ProtoError> {
        let mut bytes = Vec::new();
        if let Some(edns) = self.edns {
            let mut edns = edns.clone();
            edns.set_rcode_high(self.metadata.response_code.high());
            Record::from(&edns).emit(&mut BinEncoder::new(&mut bytes))?;
        }
        Ok(bytes)
    }
}

/// Emits the question lower-cased, so that the names of records compressed
/// against it, and thus the whole message, do not depend on the case asked
/// (the cache serves one encoding to every case). Returns where it starts and
/// its bytes in the case asked, to write over it once the records are in.
fn emit_question(
    encoder: &mut BinEncoder<'_>,
    query: &Query,
) -> Result<(usize, Vec<u8>), ProtoError> {
    let at = encoder.offset();
    let mut lower = query.clone();
    lower.set_name(query.name().to_lowercase());
    lower.emit(encoder)?;
    let mut asked = Vec::with_capacity(encoder.offset() - at);
    query.emit(&mut BinEncoder::new(&mut asked))?;
    Ok((at, asked))
}

/// Emits the records that fit, in order, the owners that are the question's
/// name as a pointer to it; returns how many and whether some were left out.
fn emit_whole(
    encoder: &mut BinEncoder<'_>,
    records: &[Record],
    asked: Option<&Name>,
) -> Result<(u16, bool), ProtoError> {
    let wire: Vec<Wire<'_>> = records
        .iter()
        .map(|record| Wire {
            record,
            owner_is_question: asked == Some(&record.name),
        })
        .collect();
    match encoder.emit_all(wire.iter()) {
        Ok(count) => Ok((u16::try_from(count).unwrap_or(u16::MAX), false)),
        Err(ProtoError::NotAllRecordsWritten { count, .. }) => {
            // The encoder rolled back to the end of the last whole record;
            // drop the bytes of the one that did not fit.
            encoder.trim();
            Ok((u16::try_from(count).unwrap_or(u16::MAX), true))
        }
        Err(error) => Err(error),
    }
}

/// A record as it goes on the wire.
struct Wire<'a> {
    record: &'a Record,
    /// Its owner is the question's name (compared as names are, ignoring
    /// case; the question is written lower-cased at the pointer's target
    /// first and in the case asked afterwards, the same length).
    owner_is_question: bool,
}

impl BinEncodable for Wire<'_> {
    /// As hickory-proto's `Record::emit` writes a record, with the owner
    /// as [`QUESTION_POINTER`] when it is the question's name.
    fn emit(&self, encoder: &mut BinEncoder<'_>) -> Result<(), ProtoError> {
        let record = self.record;
        if !self.owner_is_question {
            return record.emit(encoder);
        }
        encoder.emit_u16(QUESTION_POINTER)?;
        record.record_type().emit(encoder)?;
        record.dns_class.emit(encoder)?;
        encoder.emit_u32(record.ttl)?;
        let length = encoder.place::<u16>()?;
        if !record.data.is_update() {
            record.data.emit(encoder)?;
        }
        let written = encoder.len_since_place(&length);
        length.replace(encoder, u16::try_from(written).unwrap_or(u16::MAX))?;
        Ok(())
    }
}
