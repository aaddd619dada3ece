//! The question section as received. Its name is read byte by byte before
//! anything else: the only question of a query has no earlier name for a
//! compression pointer to point to (RFC 1035 §4.1.4), so a pointer there is
//! a malformed query, not something to follow (it would land on header bytes).

use hickory_proto::rr::RecordType;

/// Offset of the question (right after the 12-byte header).
pub(crate) const START: usize = 12;
/// Longest name on the wire (RFC 1035 §3.1).
const MAX_NAME: usize = 255;

/// What is wrong with the question's name.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Bad {
    /// A compression pointer or a label type other than a plain label.
    Pointer,
    /// Longer than 255 bytes, or cut short by the end of the packet.
    Length,
}

/// The offset just past the question's type and class in `packet`.
pub(crate) fn end(packet: &[u8]) -> Result<usize, Bad> {
    let mut at = START;
    loop {
        let len = usize::from(*packet.get(at).ok_or(Bad::Length)?);
        if len & 0xc0 != 0 {
            return Err(Bad::Pointer);
        }
        at += 1 + len;
        if at - START > MAX_NAME {
            return Err(Bad::Length);
        }
        if len == 0 {
            break;
        }
    }
    let end = at + 4;
    if end > packet.len() {
        return Err(Bad::Length);
    }
    Ok(end)
}

/// The query types clients use: their responses are cached, and metrics
/// count them by name (the rest as `other`).
pub const COMMON_TYPES: [RecordType; 7] = [
    RecordType::A,
    RecordType::AAAA,
    RecordType::SRV,
    RecordType::TXT,
    RecordType::SOA,
    RecordType::NS,
    RecordType::ANY,
];

#[cfg(test)]
mod tests {
    use super::*;

    fn packet(question: &[u8]) -> Vec<u8> {
        [&[0u8; START][..], question].concat()
    }

    #[test]
    fn plain_names_pointers_and_cut_names() {
        assert_eq!(end(&packet(b"\x03web\x00\x00\x01\x00\x01")), Ok(START + 9));
        assert_eq!(end(&packet(b"\x00\x00\x01\x00\x01")), Ok(START + 5));
        assert_eq!(
            end(&packet(b"\x03web\xc0\x02\x00\x01\x00\x01")),
            Err(Bad::Pointer)
        );
        assert_eq!(
            end(&packet(b"\x40web\x00\x00\x01\x00\x01")),
            Err(Bad::Pointer)
        );
        assert_eq!(end(&packet(b"\x03web\x00\x00\x01\x00")), Err(Bad::Length));
        assert_eq!(end(&packet(b"\x03we")), Err(Bad::Length));
        let long: Vec<u8> = (0..5)
            .flat_map(|_| [&[60u8][..], &[b'a'; 60]].concat())
            .collect();
        assert_eq!(
            end(&packet(&[&long[..], b"\x00\x00\x01\x00\x01"].concat())),
            Err(Bad::Length)
        );
    }
}
