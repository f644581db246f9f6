//! `linear`: AutoSleeper's linear backoff, +start per throttle up to the maximum;
//! a success resets to 0.

use std::time::Duration;

use super::Step;

/// Linear backoff state.
#[derive(Clone, Debug)]
pub struct Linear {
    max: Duration,
    step: Duration,
    interval: Duration,
}

impl Linear {
    /// A sleeper at interval 0.
    pub fn new(max: Duration) -> Linear {
        Linear {
            max,
            step: Duration::ZERO,
            interval: Duration::ZERO,
        }
    }

    /// The current interval.
    pub fn interval(&self) -> Duration {
        self.interval
    }

    /// Adds one step; the step is the start of the first raise.
    pub fn on_throttle(&mut self, start: Duration) -> Step {
        if self.interval.is_zero() {
            self.step = start;
        }
        self.interval = (self.interval + self.step).min(self.max);
        Step::Up
    }

    /// Moves to `interval`; a move from 0 makes it the step.
    pub fn adopt(&mut self, interval: Duration) {
        if self.interval.is_zero() {
            self.step = interval;
        }
        self.interval = interval.min(self.max);
    }

    /// Multiplies the interval and its step by `factor`.
    pub fn rescale(&mut self, factor: f64) {
        let scaled = |d: Duration| super::from_nanos_f64(d.as_nanos() as f64 * factor);
        self.step = scaled(self.step);
        self.interval = scaled(self.interval).min(self.max);
    }

    /// Back to 0; says whether there was anything to reset.
    pub fn reset(&mut self) -> bool {
        let was = !self.interval.is_zero();
        self.interval = Duration::ZERO;
        was
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn grows_by_one_step_per_throttle_up_to_the_maximum() {
        let mut l = Linear::new(Duration::from_secs(4));
        let waits: Vec<u64> = (0..6)
            .map(|_| {
                l.on_throttle(Duration::from_secs(1));
                l.interval().as_secs()
            })
            .collect();
        assert_eq!(waits, [1, 2, 3, 4, 4, 4]);
        assert!(l.reset());
        l.on_throttle(Duration::from_secs(2));
        assert_eq!(l.interval(), Duration::from_secs(2));
    }
}
