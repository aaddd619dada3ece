//! The zone's SOA serial: derived from the clock so that it never goes
//! backwards across restarts and replicas agree roughly, compared with
//! RFC 1982 serial number arithmetic.

use std::time::{SystemTime, UNIX_EPOCH};

/// Seconds since the Unix epoch as a serial (fits 32 bits until 2106).
pub fn now() -> u32 {
    let secs = SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map(|d| d.as_secs())
        .unwrap_or(0);
    u32::try_from(secs).unwrap_or(u32::MAX)
}

/// The serial after a change at clock `now`: the clock, unless that is not
/// greater than `last` (several changes in one second, or a clock set back),
/// then `last + 1` (RFC 1982 §3.1 addition).
pub fn next(last: u32, now: u32) -> u32 {
    if greater(now, last) {
        now
    } else {
        last.wrapping_add(1)
    }
}

/// `a > b` in RFC 1982 §3.2 arithmetic (undefined pairs compare not greater).
pub fn greater(a: u32, b: u32) -> bool {
    a != b && a.wrapping_sub(b) < 1 << 31
}

#[cfg(test)]
mod tests {
    use super::*;

    /// RFC 1982 §3.2: comparison wraps around 2^32.
    #[test]
    fn rfc1982_comparison_wraps() {
        assert!(greater(2, 1));
        assert!(!greater(1, 2));
        assert!(!greater(5, 5));
        assert!(greater(0, u32::MAX), "0 follows 2^32-1");
        assert!(greater(10, u32::MAX - 10));
        assert!(
            !greater(1 << 31, 0),
            "distance 2^31 is undefined: not greater"
        );
    }

    #[test]
    fn next_follows_the_clock_and_always_increases() {
        assert_eq!(next(100, 200), 200, "the clock when it is ahead");
        assert_eq!(next(200, 200), 201, "two changes in one second");
        assert_eq!(next(300, 200), 301, "a clock set back");
        assert_eq!(next(u32::MAX, u32::MAX), 0, "wraps as RFC 1982 adds");
        assert_eq!(next(u32::MAX, 5), 5, "5 follows 2^32-1 in RFC 1982 order");
    }
}
