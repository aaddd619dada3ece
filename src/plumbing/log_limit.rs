//! Rate limits for log lines a remote sender can cause (a malformed or
//! hostile packet must not write one line each; metrics count them).

use std::sync::LazyLock;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, Instant};

/// When the process's log limits started counting.
static EPOCH: LazyLock<Instant> = LazyLock::new(Instant::now);

/// Allows one line per period; the rest are dropped.
pub(crate) struct LogLimit {
    period: Duration,
    /// Milliseconds since [`EPOCH`] from which the next line is allowed, + 1
    /// (0: no line yet).
    next: AtomicU64,
}

impl LogLimit {
    /// A limit of one line per `period`.
    pub(crate) const fn new(period: Duration) -> Self {
        Self {
            period,
            next: AtomicU64::new(0),
        }
    }

    /// Whether a line may be written now (at most one caller per period gets true).
    pub(crate) fn allow(&self) -> bool {
        let now = u64::try_from(EPOCH.elapsed().as_millis()).unwrap_or(u64::MAX);
        let next = self.next.load(Ordering::Relaxed);
        if next != 0 && now + 1 < next {
            return false;
        }
        let period = u64::try_from(self.period.as_millis()).unwrap_or(u64::MAX);
        self.next
            .compare_exchange(
                next,
                now.saturating_add(period) + 1,
                Ordering::Relaxed,
                Ordering::Relaxed,
            )
            .is_ok()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// One caller per period gets a line, however many ask (a period far
    /// longer than the loop can take, even on a busy machine); once a period
    /// is over, one more does.
    #[test]
    fn one_line_per_period() {
        let hourly = LogLimit::new(Duration::from_secs(3600));
        let allowed = (0..1000).filter(|_| hourly.allow()).count();
        assert_eq!(allowed, 1);

        let short = LogLimit::new(Duration::from_millis(20));
        assert!(short.allow());
        let deadline = Instant::now() + Duration::from_secs(30);
        while !short.allow() {
            assert!(Instant::now() < deadline, "allowed again after the period");
            std::thread::sleep(Duration::from_millis(5));
        }
    }
}
