//! `mode = "observe"` (a shadow mode): easeoff learns, classifies, reads hints and
//! exports as in `pace`, but never delays or sheds. What pacing would have done is
//! counted instead (see the pacer's observe branch).
//!
//! The one thing that cannot be "as in pace" is the controller's input: unpaced, the
//! upstream keeps throttling whatever interval was learned, and a controller told of
//! every throttle would climb to `max_interval`. So a throttle is judged against what
//! the upstream let through: over the last second it took the requests it answered
//! with success, and pacing at the learned interval would have been throttled only if
//! that interval is shorter than their spacing (less a margin for noise). A throttle that pacing would not have
//! met reaches the controller as a success, which is what it would have seen. Pure:
//! times are nanoseconds from any origin.

use std::time::Duration;

use crate::window::WindowedCount;

/// A throttle counts while the interval is below this share of the successes'
/// spacing. One second of successes is a noisy measure (about ±10 % at 100 a
/// second), and raising on every dip of it holds the interval above what pacing
/// learns; 0.9 brings the two within about 6 % on the modelled upstream, for the
/// cubic and responsive sleepers alike (`tests/observe.rs`, `bench/control.sh`).
const MARGIN: f64 = 0.9;

/// The successes of one lane over the last second, against which observe mode judges
/// its throttles.
#[derive(Debug)]
pub struct Goodput {
    successes: WindowedCount,
}

impl Default for Goodput {
    fn default() -> Self {
        Goodput {
            successes: WindowedCount::new(Duration::from_secs(1)),
        }
    }
}

impl Goodput {
    /// Counts one success the upstream answered.
    pub fn succeeded(&self, now_ns: u64) {
        self.successes.add(now_ns);
    }

    /// Whether pacing at `interval` would have met this throttle: the interval is
    /// shorter than (nine tenths of) the spacing of the successes over the last
    /// second, so pacing would send more than the upstream took; or nothing succeeded.
    pub fn would_throttle(&self, interval: Duration, now_ns: u64) -> bool {
        self.successes
            .spacing(now_ns)
            .is_none_or(|spacing| interval < spacing.mul_f64(MARGIN))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const MS: u64 = 1_000_000;

    #[test]
    fn a_throttle_counts_while_the_interval_is_shorter_than_the_successes_spacing() {
        let g = Goodput::default();
        assert!(
            g.would_throttle(Duration::from_secs(1), 0),
            "no success yet"
        );
        // 50 successes over the second: one every 20 ms.
        for i in 0..50 {
            g.succeeded(1000 * MS + i * 20 * MS);
        }
        let now = 1990 * MS;
        assert!(g.would_throttle(Duration::ZERO, now));
        assert!(g.would_throttle(Duration::from_millis(15), now));
        assert!(
            !g.would_throttle(Duration::from_millis(19), now),
            "within the margin"
        );
        assert!(!g.would_throttle(Duration::from_millis(25), now));
    }
}
