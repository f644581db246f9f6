//! Log lines for events that can come by the thousand (upstream auth failures, sheds):
//! at most one line per period, saying how many events it stands for. Pure: the caller
//! passes the time, as an offset from its own origin; lock-free, so a hot path can
//! report every event.

use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Duration;

/// One recurring event's log throttle.
#[derive(Debug)]
pub struct Notice {
    period: Duration,
    /// When the last line was written, in nanoseconds from the origin, plus one; 0 never.
    last: AtomicU64,
    /// Events since the last line.
    folded: AtomicU64,
}

impl Notice {
    /// At most one line per `period`.
    pub const fn every(period: Duration) -> Notice {
        Notice {
            period,
            last: AtomicU64::new(0),
            folded: AtomicU64::new(0),
        }
    }

    /// Counts one event at `at`; returns how many events a line should report now
    /// (this one included), or `None` while the period since the last line runs.
    pub fn hit(&self, at: Duration) -> Option<u64> {
        self.folded.fetch_add(1, Ordering::Relaxed);
        let now = u64::try_from(at.as_nanos()).unwrap_or(u64::MAX - 1) + 1;
        let last = self.last.load(Ordering::Relaxed);
        let period = u64::try_from(self.period.as_nanos()).unwrap_or(u64::MAX);
        if last != 0 && now.saturating_sub(last) < period {
            return None;
        }
        // One of the racing callers wins the line; the others' events go in the next.
        self.last
            .compare_exchange(last, now, Ordering::Relaxed, Ordering::Relaxed)
            .ok()?;
        Some(self.folded.swap(0, Ordering::Relaxed))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const MS: Duration = Duration::from_millis(1);

    #[test]
    fn the_first_event_is_told_then_one_line_per_period_counts_the_rest() {
        let n = Notice::every(MS * 1000);
        assert_eq!(n.hit(MS * 5), Some(1));
        for t in 6..1005 {
            assert_eq!(n.hit(MS * t), None, "at {t} ms");
        }
        assert_eq!(n.hit(MS * 1005), Some(1000));
        assert_eq!(n.hit(MS * 1006), None);
        assert_eq!(n.hit(MS * 9000), Some(2));
    }

    #[test]
    fn an_event_at_time_zero_is_told() {
        assert_eq!(Notice::every(MS).hit(Duration::ZERO), Some(1));
    }
}
