//! `decorrelated`: Polly's / the AWS Architecture Blog's decorrelated jitter,
//! `min(max, max(seed, prev × 3 × U(0,1)))`, where the base is the start of the first
//! raise; a success resets to 0.

use std::time::Duration;

use super::{Random, Step, from_nanos_f64};

/// Decorrelated-jitter state.
#[derive(Clone, Debug)]
pub struct Decorrelated {
    max: Duration,
    seed: Duration,
    interval: Duration,
}

impl Decorrelated {
    /// A sleeper at interval 0.
    pub fn new(max: Duration) -> Decorrelated {
        Decorrelated {
            max,
            seed: Duration::ZERO,
            interval: Duration::ZERO,
        }
    }

    /// The current interval.
    pub fn interval(&self) -> Duration {
        self.interval
    }

    /// One step of the formula; from 0, `prev` is the base, as in Polly.
    pub fn on_throttle(&mut self, start: Duration, rng: &mut dyn Random) -> Step {
        if self.interval.is_zero() {
            self.seed = start.min(self.max);
            self.interval = self.seed;
        }
        let drawn = from_nanos_f64(self.interval.as_nanos() as f64 * 3.0 * rng.unit());
        self.interval = drawn.max(self.seed).min(self.max);
        Step::Up
    }

    /// Moves to `interval`; a move from 0 makes it the base.
    pub fn adopt(&mut self, interval: Duration) {
        if self.interval.is_zero() {
            self.seed = interval.min(self.max);
        }
        self.interval = interval.min(self.max);
    }

    /// Multiplies the interval and its base by `factor`.
    pub fn rescale(&mut self, factor: f64) {
        let scaled = |d: Duration| from_nanos_f64(d.as_nanos() as f64 * factor).min(self.max);
        self.seed = scaled(self.seed);
        self.interval = scaled(self.interval);
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
    use super::super::testing::Script;
    use super::*;

    const MS: Duration = Duration::from_millis(1);

    #[test]
    fn the_formula_with_scripted_draws() {
        let mut d = Decorrelated::new(Duration::from_millis(100));
        let rng = &mut Script::new(&[0.5, 0.9, 0.1, 1.0, 1.0, 1.0]);
        d.on_throttle(10 * MS, rng); // max(10, 10 × 3 × 0.5 = 15)
        assert_eq!(d.interval(), 15 * MS);
        d.on_throttle(10 * MS, rng); // 15 × 3 × 0.9 = 40.5
        assert_eq!(d.interval(), Duration::from_micros(40_500));
        d.on_throttle(10 * MS, rng); // 40.5 × 0.3 = 12.15
        assert_eq!(d.interval(), Duration::from_micros(12_150));
        for _ in 0..3 {
            d.on_throttle(10 * MS, rng);
        }
        assert_eq!(d.interval(), 100 * MS);
    }

    #[test]
    fn a_low_draw_never_goes_below_the_seed() {
        let mut d = Decorrelated::new(Duration::from_millis(100));
        let rng = &mut Script::new(&[0.0]);
        d.on_throttle(10 * MS, rng);
        d.on_throttle(10 * MS, rng);
        assert_eq!(d.interval(), 10 * MS);
    }

    #[test]
    fn random_steps_stay_between_seed_and_max() {
        let mut d = Decorrelated::new(Duration::from_millis(400));
        let mut rng = fastrand::Rng::with_seed(3);
        let mut prev = Duration::ZERO;
        for _ in 0..10_000 {
            d.on_throttle(5 * MS, &mut rng);
            let v = d.interval();
            assert!(v >= 5 * MS && v <= Duration::from_millis(400));
            // Each value lies within [seed, 3 × prev] (prev = seed at the start).
            assert!(v <= (prev.max(5 * MS) * 3).max(5 * MS));
            prev = v;
            if rng.u8(..) < 20 {
                d.reset();
                prev = Duration::ZERO;
            }
        }
    }
}
