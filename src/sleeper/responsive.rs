//! `responsive`: AutoSleeper ("Responsive exponential backoff"), exactly:
//! the first throttle sets the start interval, later ones multiply by `up_multiplier`;
//! every `down_threshold` successes since the last decrease multiply by
//! `down_multiplier`; successes at interval 0 do not count; a decrease below the floor
//! returns to 0; every new value is randomized and capped at `max_interval`.

use std::time::Duration;

use super::{Random, Settings, Step, from_nanos_f64, randomize};

/// The AutoSleeper's state and parameters.
#[derive(Clone, Debug)]
pub struct Responsive {
    floor: Duration,
    /// The member's share of the interval's rate (1 alone, see [`Responsive::share`]).
    share: f64,
    max: Duration,
    max_randomization: Duration,
    up: f64,
    down: f64,
    factor: f64,
    threshold: u32,
    interval: Duration,
    successes: u32,
}

impl Responsive {
    /// A sleeper at interval 0.
    pub fn new(settings: &Settings) -> Responsive {
        Responsive {
            floor: settings.floor(),
            share: 1.0,
            max: settings.max_interval,
            max_randomization: settings.max_randomization,
            up: settings.up_multiplier,
            down: settings.down_multiplier,
            factor: settings.randomization_factor,
            threshold: settings.down_threshold.max(1),
            interval: Duration::ZERO,
            successes: 0,
        }
    }

    /// The current interval.
    pub fn interval(&self) -> Duration {
        self.interval
    }

    /// AutoSleeper's `goUp`. Like AutoSleeper, it leaves the success count alone.
    pub fn on_throttle(&mut self, start: Duration, rng: &mut dyn Random) -> Step {
        self.interval = if self.interval.is_zero() {
            start.min(self.max)
        } else {
            let next = self.spread(self.interval.as_nanos() as f64 * self.up, rng);
            from_nanos_f64(next).min(self.max)
        };
        Step::Up
    }

    /// The interval is a fleet's, of which this member sends `share`: the floor
    /// bounds the member's own interval (the fleet's over `share`).
    pub fn share(&mut self, share: f64) {
        if let Some(share) = super::member_share(share) {
            self.share = share;
        }
    }

    /// Moves to `interval`, keeping the success count.
    pub fn adopt(&mut self, interval: Duration) {
        self.interval = interval.min(self.max);
    }

    /// AutoSleeper's `SleepOnSuccess` bookkeeping and `goDown`.
    pub fn on_success(&mut self, rng: &mut dyn Random) -> Step {
        if self.interval.is_zero() {
            return Step::Unchanged;
        }
        self.successes += 1;
        if self.successes < self.threshold {
            return Step::Unchanged;
        }
        self.successes = 0;
        let next = self.spread(self.interval.as_nanos() as f64 * self.down, rng);
        self.interval = if next < self.floor.as_nanos() as f64 * self.share {
            Duration::ZERO
        } else {
            // AutoSleeper does not cap decreases; with a large randomization factor one
            // could land above the maximum, which the contract forbids.
            from_nanos_f64(next).min(self.max)
        };
        Step::Down
    }

    /// Back to 0, as enough successes would bring it.
    pub fn rest(&mut self) {
        self.interval = Duration::ZERO;
        self.successes = 0;
    }

    fn spread(&self, value: f64, rng: &mut dyn Random) -> f64 {
        randomize(
            value,
            self.factor,
            self.max_randomization.as_nanos() as f64,
            rng,
        )
    }
}

#[cfg(test)]
mod tests {
    use super::super::testing::Script;
    use super::super::{Initial, Settings};
    use super::*;

    /// The configuration of AutoSleeper's graph.
    fn graph_settings() -> Settings {
        Settings {
            initial_interval: Initial::Fixed(Duration::from_millis(1)),
            max_interval: Duration::from_secs(15 * 60),
            max_randomization: Duration::from_secs(120),
            up_multiplier: 1.5,
            down_multiplier: 0.6,
            randomization_factor: 0.0,
            down_threshold: 5,
            ..Settings::seed_defaults()
        }
    }

    fn ns(n: u64) -> Duration {
        Duration::from_nanos(n)
    }

    #[test]
    fn throttles_grow_the_interval_as_in_the_seeds_graph() {
        let mut s = Responsive::new(&graph_settings());
        let rng = &mut Script::new(&[0.5]);
        let start = Duration::from_millis(1);
        let mut seen = Vec::new();
        for _ in 0..15 {
            assert_eq!(s.on_throttle(start, rng), Step::Up);
            seen.push(s.interval());
        }
        assert_eq!(
            &seen[..8],
            &[
                ns(1_000_000),
                ns(1_500_000),
                ns(2_250_000),
                ns(3_375_000),
                ns(5_062_500),
                ns(7_593_750),
                ns(11_390_625),
                ns(17_085_937),
            ]
        );
        // "Initially, requests were failing till it reached 291.9 ms": 1 ms × 1.5^14.
        assert_eq!(seen[14].as_micros(), 291_929);
    }

    #[test]
    fn every_fifth_success_multiplies_by_the_down_multiplier() {
        let mut s = Responsive::new(&graph_settings());
        let rng = &mut Script::new(&[0.5]);
        for _ in 0..3 {
            s.on_throttle(Duration::from_millis(1), rng);
        }
        assert_eq!(s.interval(), ns(2_250_000));
        for _ in 0..4 {
            assert_eq!(s.on_success(rng), Step::Unchanged);
        }
        assert_eq!(s.on_success(rng), Step::Down);
        assert_eq!(s.interval(), ns(1_350_000));
        for _ in 0..4 {
            assert_eq!(s.on_success(rng), Step::Unchanged);
        }
        // 1.35 ms × 0.6 = 0.81 ms is below the 1 ms initial interval: back to 0.
        assert_eq!(s.on_success(rng), Step::Down);
        assert_eq!(s.interval(), Duration::ZERO);
    }

    /// A fleet member sending a quarter of the fleet's rate goes to 0 only when its
    /// own interval, four times the fleet's, would be below the floor.
    #[test]
    fn a_fleet_member_returns_to_zero_only_past_the_floor_of_its_share() {
        let rng = &mut Script::new(&[0.5]);
        let mut alone = Responsive::new(&graph_settings());
        let mut member = Responsive::new(&graph_settings());
        member.share(0.25);
        for s in [&mut alone, &mut member] {
            s.adopt(Duration::from_micros(1_350));
            for _ in 0..5 {
                s.on_success(rng);
            }
        }
        // 1.35 ms × 0.6 = 0.81 ms: below the 1 ms floor alone; the member's own
        // interval, 3.24 ms, is not.
        assert_eq!(alone.interval(), Duration::ZERO);
        assert_eq!(member.interval(), ns(810_000));
        for _ in 0..5 {
            member.on_success(rng);
        }
        // 0.486 ms: the member's own interval, 1.944 ms, is still above the floor.
        assert_eq!(member.interval(), ns(486_000));
        for _ in 0..10 {
            member.on_success(rng);
        }
        // 0.2916 ms → 1.1664 ms of its own, then 0.17496 ms → 0.69984 ms: below.
        assert_eq!(member.interval(), Duration::ZERO);
        // A share that makes no sense leaves the last one in force.
        for share in [0.0, -1.0, f64::NAN, f64::INFINITY] {
            member.share(share);
        }
        member.adopt(Duration::from_micros(1_350));
        for _ in 0..5 {
            member.on_success(rng);
        }
        assert_eq!(member.interval(), ns(810_000));
    }

    #[test]
    fn successes_at_interval_zero_do_not_count() {
        let mut s = Responsive::new(&graph_settings());
        let rng = &mut Script::new(&[0.5]);
        for _ in 0..20 {
            assert_eq!(s.on_success(rng), Step::Unchanged);
        }
        s.on_throttle(Duration::from_millis(1), rng);
        s.on_throttle(Duration::from_millis(1), rng);
        // Had the 20 earlier successes counted, the next one would not be the 5th.
        for _ in 0..4 {
            assert_eq!(s.on_success(rng), Step::Unchanged);
        }
        assert_eq!(s.on_success(rng), Step::Down);
    }

    #[test]
    fn throttles_do_not_reset_the_success_count() {
        // AutoSleeper counts successes since the last decrease, throttles or not.
        let mut s = Responsive::new(&graph_settings());
        let rng = &mut Script::new(&[0.5]);
        s.on_throttle(Duration::from_millis(1), rng);
        for _ in 0..3 {
            s.on_success(rng);
        }
        s.on_throttle(Duration::from_millis(1), rng);
        assert_eq!(s.on_success(rng), Step::Unchanged);
        // The 5th success since the start, the 2nd since the last throttle: 1.5 ms × 0.6
        // is below the floor.
        assert_eq!(s.on_success(rng), Step::Down);
        assert_eq!(s.interval(), Duration::ZERO);
    }

    #[test]
    fn the_interval_is_capped_at_the_maximum() {
        let settings = Settings {
            max_interval: Duration::from_millis(10),
            ..graph_settings()
        };
        let mut s = Responsive::new(&settings);
        let rng = &mut Script::new(&[0.5]);
        for _ in 0..20 {
            s.on_throttle(Duration::from_millis(1), rng);
        }
        assert_eq!(s.interval(), Duration::from_millis(10));
        // A start above the maximum is capped too.
        let mut s = Responsive::new(&settings);
        s.on_throttle(Duration::from_secs(1), rng);
        assert_eq!(s.interval(), Duration::from_millis(10));
    }

    #[test]
    fn randomized_steps_stay_within_the_factor_and_the_cap() {
        let settings = Settings {
            initial_interval: Initial::Fixed(Duration::from_millis(100)),
            randomization_factor: 0.3,
            max_randomization: Duration::from_millis(20),
            ..graph_settings()
        };
        let mut low = Responsive::new(&settings);
        let mut high = Responsive::new(&settings);
        let (zero, one) = (&mut Script::new(&[0.0]), &mut Script::new(&[1.0]));
        let start = Duration::from_millis(100);
        // The first raise is the start itself, not randomized.
        low.on_throttle(start, zero);
        high.on_throttle(start, one);
        assert_eq!((low.interval(), high.interval()), (start, start));
        // 100 ms × 1.5 = 150 ms; 0.3 × 150 = 45 ms is capped at 20 ms.
        low.on_throttle(start, zero);
        high.on_throttle(start, one);
        assert_eq!(low.interval(), Duration::from_millis(130));
        assert_eq!(high.interval(), Duration::from_millis(170));
    }

    #[test]
    fn many_random_steps_never_leave_the_bounds() {
        let settings = Settings {
            initial_interval: Initial::Fixed(Duration::from_millis(1)),
            max_interval: Duration::from_secs(2),
            ..Settings::seed_defaults()
        };
        let mut s = Responsive::new(&settings);
        let mut rng = fastrand::Rng::with_seed(7);
        for i in 0..100_000u32 {
            if rng.u32(0..3) == 0 {
                s.on_throttle(Duration::from_millis(1), &mut rng);
            } else {
                s.on_success(&mut rng);
            }
            let v = s.interval();
            assert!(
                v.is_zero() || (v >= Duration::from_millis(1) && v <= settings.max_interval),
                "step {i}: {v:?}"
            );
        }
    }
}
