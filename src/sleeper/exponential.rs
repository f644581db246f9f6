//! The gRPC connection-backoff algorithm (doc/connection-backoff.md): the first wait is
//! the initial backoff, each later one the previous un-jittered backoff × multiplier,
//! capped at the maximum, then spread by ±jitter. Serves as the `exponential` strategy
//! and as the connection backoff of `proxy/`.

use std::time::Duration;

use super::{Random, from_nanos_f64, randomize};

/// Exponential backoff with jitter; reset to 0 by a success.
#[derive(Clone, Debug)]
pub struct Exponential {
    multiplier: f64,
    jitter: f64,
    max: Duration,
    /// The un-jittered backoff the next step multiplies, as gRPC's `current_backoff`.
    backoff: Duration,
    interval: Duration,
}

impl Exponential {
    /// A backoff at 0 (the gRPC defaults are 1.6, 0.2 and 120 s).
    pub fn new(multiplier: f64, jitter: f64, max: Duration) -> Exponential {
        Exponential {
            multiplier,
            jitter,
            max,
            backoff: Duration::ZERO,
            interval: Duration::ZERO,
        }
    }

    /// The current wait.
    pub fn interval(&self) -> Duration {
        self.interval
    }

    /// Steps to the next wait and returns it: `initial` at first, unjittered like
    /// gRPC's first deadline; then min(backoff × multiplier, max) ± jitter.
    pub fn next(&mut self, initial: Duration, rng: &mut dyn Random) -> Duration {
        if self.backoff.is_zero() {
            self.backoff = initial.min(self.max);
            self.interval = self.backoff;
        } else {
            let grown = from_nanos_f64(self.backoff.as_nanos() as f64 * self.multiplier);
            self.backoff = grown.min(self.max);
            let spread = randomize(
                self.backoff.as_nanos() as f64,
                self.jitter,
                f64::INFINITY,
                rng,
            );
            self.interval = from_nanos_f64(spread);
        }
        self.interval
    }

    /// Moves to `interval`; the next step grows from it.
    pub fn adopt(&mut self, interval: Duration) {
        self.interval = interval.min(self.max);
        self.backoff = self.interval;
    }

    /// Back to 0; says whether there was anything to reset.
    pub fn reset(&mut self) -> bool {
        let was = !self.interval.is_zero();
        self.backoff = Duration::ZERO;
        self.interval = Duration::ZERO;
        was
    }
}

#[cfg(test)]
mod tests {
    use super::super::testing::Script;
    use super::*;

    const SECOND: Duration = Duration::from_secs(1);

    fn grpc_default() -> Exponential {
        Exponential::new(1.6, 0.2, Duration::from_secs(120))
    }

    #[test]
    fn without_jitter_the_sequence_is_the_grpc_one() {
        let mut b = grpc_default();
        let mid = &mut Script::new(&[0.5]);
        let waits: Vec<u128> = (0..13).map(|_| b.next(SECOND, mid).as_millis()).collect();
        assert_eq!(
            waits,
            [
                1000, 1600, 2560, 4096, 6553, 10485, 16777, 26843, 42949, 68719, 109951, 120000,
                120000
            ]
        );
    }

    #[test]
    fn jitter_spreads_each_step_by_twenty_percent_of_the_unjittered_backoff() {
        let mut low = grpc_default();
        let mut high = grpc_default();
        let (zero, one) = (&mut Script::new(&[0.0]), &mut Script::new(&[1.0]));
        assert_eq!(low.next(SECOND, zero), SECOND);
        assert_eq!(high.next(SECOND, one), SECOND);
        assert_eq!(low.next(SECOND, zero), Duration::from_millis(1280));
        assert_eq!(high.next(SECOND, one), Duration::from_millis(1920));
        // The next step grows the un-jittered 1.6 s, not the jittered value.
        assert_eq!(low.next(SECOND, zero), Duration::from_millis(2048));
        assert_eq!(high.next(SECOND, one), Duration::from_millis(3072));
    }

    #[test]
    fn random_steps_stay_within_twenty_percent_of_the_nominal_sequence() {
        let mut b = grpc_default();
        let mut rng = fastrand::Rng::with_seed(42);
        let mut nominal = 1.0f64;
        assert_eq!(b.next(SECOND, &mut rng), SECOND);
        for _ in 0..30 {
            nominal = (nominal * 1.6).min(120.0);
            let wait = b.next(SECOND, &mut rng).as_secs_f64();
            assert!(
                wait >= nominal * 0.8 - 1e-6 && wait <= nominal * 1.2 + 1e-6,
                "{wait} vs {nominal}"
            );
        }
    }

    #[test]
    fn reset_starts_over_at_the_initial_backoff() {
        let mut b = grpc_default();
        let mid = &mut Script::new(&[0.5]);
        b.next(SECOND, mid);
        b.next(SECOND, mid);
        assert!(b.reset());
        assert!(!b.reset());
        assert_eq!(b.interval(), Duration::ZERO);
        assert_eq!(b.next(SECOND, mid), SECOND);
    }
}
