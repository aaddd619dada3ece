//! Checks the options of a query's OPT record (RFC 6891 §6.1.2) on the raw
//! bytes: hickory-proto drops options that do not tile the RDATA exactly
//! (e.g. a cut COOKIE) and logs a line, which the default log directives
//! silence; such queries are counted instead.

/// Whether the OPT record starting at `at` in `packet` (right after the
/// question, no answer or authority records) has options cut short or
/// running past its RDATA. False when there is no such OPT record.
pub(crate) fn options_cut(packet: &[u8], at: usize) -> bool {
    let plain = packet.get(6..10) == Some(&[0; 4]);
    let Some(fixed) = packet.get(at..at + 11) else {
        return false;
    };
    // Root owner name, type OPT (41).
    if !plain || fixed[..3] != [0, 0, 41] {
        return false;
    }
    let length = usize::from(u16::from_be_bytes([fixed[9], fixed[10]]));
    let Some(mut options) = packet.get(at + 11..at + 11 + length) else {
        return false;
    };
    while !options.is_empty() {
        let Some(length) = options.get(2..4) else {
            return true;
        };
        let length = usize::from(u16::from_be_bytes([length[0], length[1]]));
        let Some(rest) = options.get(4 + length..) else {
            return true;
        };
        options = rest;
    }
    false
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A header with one question and one additional record, the question
    /// `.`/A, then an OPT record with `rdata`.
    fn query(rdata: &[u8]) -> (Vec<u8>, usize) {
        let mut packet = vec![0, 1, 0, 0, 0, 1, 0, 0, 0, 0, 0, 1, 0, 0, 1, 0, 1];
        let at = packet.len();
        packet.extend_from_slice(&[0, 0, 41, 0x04, 0xd0, 0, 0, 0, 0]);
        packet.extend_from_slice(&u16::try_from(rdata.len()).unwrap().to_be_bytes());
        packet.extend_from_slice(rdata);
        (packet, at)
    }

    #[test]
    fn whole_options_pass_and_cut_ones_are_found() {
        let cookie = [0, 10, 0, 8, 1, 2, 3, 4, 5, 6, 7, 8];
        let (packet, at) = query(&cookie);
        assert!(!options_cut(&packet, at));
        let (packet, at) = query(&[]);
        assert!(!options_cut(&packet, at));
        let (packet, at) = query(&cookie[..9]);
        assert!(options_cut(&packet, at), "COOKIE cut to 5 of 8 bytes");
        let (packet, at) = query(&cookie[..3]);
        assert!(options_cut(&packet, at), "cut in the option header");
        assert!(!options_cut(&packet, at + 1), "no OPT record there");
    }
}
