//! A member's demand for one lane, from what the sync task samples: arrivals since the
//! last sync and the queue. Pure: the elapsed time comes in.
//!
//! Arrivals alone miss demand a pacer holds back (clients that wait for an answer
//! before sending the next request arrive only as fast as they are served), so the
//! queue adds what it would take to empty it within [`DRAIN`]. A member with requests
//! waiting therefore always asks for more than it has, and a member whose load jumps is
//! seen at once: the rate follows a rise in one sync and a fall over [`MEMORY`].

use std::time::Duration;

/// The time the queue term asks for to empty the queue.
pub const DRAIN: Duration = Duration::from_secs(1);
/// How long a fall in the arrival rate takes to show by about two thirds.
pub const MEMORY: Duration = Duration::from_secs(2);

/// One lane's demand estimate.
#[derive(Clone, Debug, Default)]
pub struct Demand {
    /// Arrivals per second, rising at once and falling slowly.
    rate: f64,
}

impl Demand {
    /// The demand in requests per second after `arrivals` in `elapsed` with `waiting`
    /// requests queued now.
    pub fn update(&mut self, arrivals: u64, waiting: usize, elapsed: Duration) -> f64 {
        let secs = elapsed.as_secs_f64();
        if secs > 0.0 {
            let sample = arrivals as f64 / secs;
            let keep = (-secs / MEMORY.as_secs_f64()).exp();
            self.rate = sample.max(self.rate * keep + sample * (1.0 - keep));
        }
        self.rate + waiting as f64 / DRAIN.as_secs_f64()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const SYNC: Duration = Duration::from_millis(250);

    #[test]
    fn a_rise_shows_in_one_sync_and_the_queue_adds_what_empties_it_in_a_second() {
        let mut d = Demand::default();
        assert_eq!(d.update(0, 0, SYNC), 0.0);
        assert_eq!(d.update(25, 0, SYNC), 100.0);
        assert_eq!(d.update(25, 16, SYNC), 116.0);
    }

    #[test]
    fn a_fall_decays_over_the_memory() {
        let mut d = Demand::default();
        d.update(25, 0, SYNC);
        let after_one = d.update(0, 0, SYNC);
        assert!((after_one - 100.0 * (-0.125f64).exp()).abs() < 1e-9);
        let mut last = after_one;
        for _ in 0..40 {
            last = d.update(0, 0, SYNC);
        }
        assert!(last < 1.0, "{last}");
    }

    #[test]
    fn no_time_passed_keeps_the_rate() {
        let mut d = Demand::default();
        d.update(10, 0, SYNC);
        assert_eq!(d.update(99, 2, Duration::ZERO), 42.0);
    }
}
