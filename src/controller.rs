//! What feeds the sleeper: the epoch rule and the pace-mode starting point.
//!
//! A proxy sees throttles in bursts (64 requests in flight come back throttled
//! together), so a result only moves the interval if its request was dispatched in the
//! current epoch, i.e. after the last raise; otherwise one burst would send the
//! interval to its maximum. Pure: the observed dispatch spacing and the random source
//! come in as arguments.

use std::time::Duration;

use crate::sleeper::{Initial, Random, Settings, Sleeper, Step};

/// One upstream's sleeper behind the epoch rule.
#[derive(Debug)]
pub struct Controller<R> {
    sleeper: Sleeper,
    initial: Initial,
    up_multiplier: f64,
    min_interval: Duration,
    max_interval: Duration,
    epoch: u64,
    rng: R,
}

impl<R: Random> Controller<R> {
    /// A controller at interval 0, epoch 0.
    pub fn new(settings: &Settings, rng: R) -> Controller<R> {
        Controller {
            sleeper: Sleeper::new(settings),
            initial: settings.initial_interval,
            up_multiplier: settings.start_multiplier(),
            min_interval: settings.min_interval,
            max_interval: settings.max_interval,
            epoch: 0,
            rng,
        }
    }

    /// The current interval.
    pub fn interval(&self) -> Duration {
        self.sleeper.interval()
    }

    /// Raises so far; a dispatch is stamped with it.
    pub fn epoch(&self) -> u64 {
        self.epoch
    }

    /// A throttled attempt dispatched in `epoch`, answered at `now` (since any fixed
    /// origin). `spacing` is the dispatch spacing observed over the last second, used
    /// by `initial_interval = "auto"`.
    /// Returns `None` when the attempt predates the last raise and was only counted.
    pub fn on_throttle(
        &mut self,
        epoch: u64,
        spacing: Option<Duration>,
        now: Duration,
    ) -> Option<Step> {
        if epoch < self.epoch {
            return None;
        }
        let start = self.start(spacing);
        let step = self.sleeper.on_throttle(start, now, &mut self.rng);
        if step == Step::Up {
            self.epoch += 1;
        }
        Some(step)
    }

    /// An overload answer (529, a 503 that says "overloaded") to an attempt dispatched
    /// in `epoch`: the upstream is busy whoever asks, so it is no quota to learn. The
    /// lane passes only overloads that come often (see `lane/overloads.rs`). It
    /// raises the interval only from 0, as far as a first throttle would; a raised
    /// interval stays where it is. A steady small fraction of overloads therefore moves
    /// the rate at most that far, however long it lasts, under every strategy.
    pub fn on_overload(
        &mut self,
        epoch: u64,
        spacing: Option<Duration>,
        now: Duration,
    ) -> Option<Step> {
        if self.sleeper.interval().is_zero() {
            return self.on_throttle(epoch, spacing, now);
        }
        (epoch >= self.epoch).then_some(Step::Unchanged)
    }

    /// A successful attempt dispatched in `epoch`. A success from before the last
    /// raise says nothing about the new interval, so it is not counted either.
    pub fn on_success(&mut self, epoch: u64, now: Duration) -> Option<Step> {
        if epoch < self.epoch {
            return None;
        }
        Some(self.sleeper.on_success(now, &mut self.rng))
    }

    /// Takes the fleet's `interval` and `epoch` (see `fleet.rs`). A later epoch is a
    /// raise some other member made: the interval and epoch move, so results dispatched
    /// before it no longer count. Within this epoch the fleet's interval is taken too,
    /// lower (a member that grew first) or higher (this member's own raise lost the
    /// compare-and-set to another member's from the same burst: `outraised`, taken as
    /// a raise). Returns whether the interval changed.
    pub fn adopt(
        &mut self,
        interval: Duration,
        epoch: u64,
        outraised: bool,
        now: Duration,
    ) -> bool {
        let before = self.sleeper.interval();
        if outraised {
            self.sleeper.adopt(interval, true, now);
            self.epoch = epoch;
        } else if epoch != self.epoch {
            self.sleeper.adopt(interval, epoch > self.epoch, now);
            self.epoch = epoch;
        } else if interval != before {
            self.sleeper.adopt(interval, false, now);
        }
        self.sleeper.interval() != before
    }

    /// Takes a fleet's cold-start `interval` (epoch 0, nothing learned yet), which
    /// grew by `growth` at its last step (see [`Sleeper::cold`]).
    pub fn cold(&mut self, interval: Duration, growth: f64, now: Duration) {
        self.sleeper.cold(interval, growth, now);
    }

    /// The interval is a fleet's, of which this member sends `share` (see
    /// [`Sleeper::share`]).
    pub fn share(&mut self, share: f64) {
        self.sleeper.share(share);
    }

    /// The interval just adopted is the fleet's first raise: an estimate from one
    /// burst, as a raise from 0 is (see [`Sleeper::estimated`]).
    pub fn estimated(&mut self) {
        self.sleeper.estimated();
    }

    /// A number in `[0, 1)` from the controller's random source.
    pub fn unit(&mut self) -> f64 {
        self.rng.unit()
    }

    /// Multiplies every interval the sleeper holds or remembers by `factor`: a fleet
    /// member's interval turns from the fleet's into its own (`1 / share`) and back.
    pub fn rescale(&mut self, factor: f64) {
        self.sleeper.rescale(factor);
    }

    /// Forgets throttles long past: the interval goes to 0, where an unbroken run of
    /// successes would take it. Memory a strategy keeps besides the interval (cubic's
    /// rate at the last throttle) stays as a prior; `constant` keeps its interval.
    /// Returns whether the interval changed.
    pub fn forget(&mut self) -> bool {
        let before = self.sleeper.interval();
        self.sleeper.rest();
        self.sleeper.interval() != before
    }

    /// Puts the interval back to 0 (admin reset); later dispatches start a new epoch.
    pub fn reset(&mut self, settings: &Settings) {
        self.sleeper = Sleeper::new(settings);
        self.epoch += 1;
    }

    /// Where a raise from 0 goes: the fixed initial interval, or in pace mode the
    /// observed spacing × the start multiplier, never below `min_interval`.
    fn start(&self, spacing: Option<Duration>) -> Duration {
        match self.initial {
            Initial::Fixed(d) => d,
            Initial::Auto => spacing
                .map(|s| {
                    // `mul_f64` panics past `Duration::MAX`; the clamp below caps it anyway.
                    Duration::try_from_secs_f64(self.up_multiplier * s.as_secs_f64())
                        .unwrap_or(Duration::MAX)
                })
                .unwrap_or(self.min_interval)
                .clamp(self.min_interval, self.max_interval),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::sleeper::testing::Script;

    fn fixed(ms: u64) -> Settings {
        Settings {
            initial_interval: Initial::Fixed(Duration::from_millis(ms)),
            randomization_factor: 0.0,
            ..Settings::seed_defaults()
        }
    }

    /// 40 000 answers 10 ms apart, every 40th an overload (or, `as_throttle`, a
    /// throttle), under `settings` and the draws `rng`; the highest interval seen and
    /// the last.
    fn steady(settings: &Settings, rng: Script, as_throttle: bool) -> (Duration, Duration) {
        let mut c = Controller::new(settings, rng);
        let spacing = Some(Duration::from_millis(10));
        let mut highest = Duration::ZERO;
        for call in 0..40_000u64 {
            let now = Duration::from_millis(10 * call);
            let epoch = c.epoch();
            match (call % 40 == 39, as_throttle) {
                (false, _) => c.on_success(epoch, now),
                (true, false) => c.on_overload(epoch, spacing, now),
                (true, true) => c.on_throttle(epoch, spacing, now),
            };
            highest = highest.max(c.interval());
        }
        (highest, c.interval())
    }

    #[test]
    fn a_steady_small_fraction_of_overloads_moves_no_strategy_beyond_its_first_step() {
        use crate::sleeper::Strategy;
        // The first raise from 10 ms spacing: ×1.5 (cubic: ÷0.9), spread by at most
        // the randomization factor, and decorrelated jitter's up-to-3× draw.
        let bound = Duration::from_millis(45);
        // A fixed but uneven draw: every spread lands somewhere in its range.
        let draws: Vec<f64> = (0..97).map(|i| f64::from(i * 37 % 97) / 97.0).collect();
        for strategy in [
            Strategy::Responsive,
            Strategy::Cubic,
            Strategy::Exponential,
            Strategy::Decorrelated,
            Strategy::Linear,
        ] {
            let settings = Settings {
                strategy,
                ..Settings::seed_defaults()
            };
            let (highest, last) = steady(&settings, Script::new(&draws), false);
            assert!(highest <= bound, "{strategy:?}: {highest:?}");
            assert!(last <= bound, "{strategy:?}: {last:?}");
        }
        // As throttles, the same answers walk responsive's interval far beyond it.
        let (highest, _) = steady(&Settings::seed_defaults(), Script::new(&[0.9]), true);
        assert!(highest > bound * 2, "{highest:?}");
    }

    #[test]
    fn an_overload_at_a_raised_interval_changes_nothing_and_an_old_one_is_not_counted() {
        let mut c = Controller::new(&fixed(10), Script::new(&[0.5]));
        assert_eq!(c.on_overload(0, None, Duration::ZERO), Some(Step::Up));
        assert_eq!(c.interval(), Duration::from_millis(10));
        assert_eq!(
            c.on_overload(1, None, Duration::ZERO),
            Some(Step::Unchanged)
        );
        assert_eq!(c.on_overload(0, None, Duration::ZERO), None);
        assert_eq!(c.interval(), Duration::from_millis(10));
    }

    #[test]
    fn forgetting_takes_the_interval_to_zero() {
        let mut c = Controller::new(&fixed(10), Script::new(&[0.5]));
        for epoch in 0..20 {
            c.on_throttle(epoch, None, Duration::ZERO);
        }
        assert!(c.interval() > Duration::from_secs(1));
        assert!(c.forget());
        assert_eq!(c.interval(), Duration::ZERO);
        assert!(!c.forget(), "nothing left to forget");
    }

    #[test]
    fn cubic_forgets_its_interval_but_keeps_its_prior() {
        let settings = Settings {
            strategy: crate::sleeper::Strategy::Cubic,
            ..Settings::seed_defaults()
        };
        let mut c = Controller::new(&settings, Script::new(&[0.5]));
        c.on_throttle(0, Some(Duration::from_millis(10)), Duration::ZERO);
        assert!(!c.interval().is_zero());
        assert!(c.forget());
        assert_eq!(c.interval(), Duration::ZERO);
    }

    #[test]
    fn constant_has_nothing_to_forget() {
        let settings = Settings {
            strategy: crate::sleeper::Strategy::Constant,
            initial_interval: Initial::Fixed(Duration::from_millis(50)),
            ..Settings::seed_defaults()
        };
        let mut c = Controller::new(&settings, Script::new(&[0.5]));
        assert!(!c.forget());
        assert_eq!(c.interval(), Duration::from_millis(50));
    }

    #[test]
    fn a_burst_of_throttles_from_one_epoch_raises_once() {
        let mut c = Controller::new(&fixed(10), Script::new(&[0.5]));
        let steps: Vec<_> = (0..64)
            .map(|_| c.on_throttle(0, None, Duration::ZERO))
            .collect();
        assert_eq!(steps[0], Some(Step::Up));
        assert!(steps[1..].iter().all(Option::is_none));
        assert_eq!(c.interval(), Duration::from_millis(10));
        assert_eq!(c.epoch(), 1);
    }

    #[test]
    fn throttles_dispatched_after_each_raise_raise_each_time() {
        let mut c = Controller::new(&fixed(10), Script::new(&[0.5]));
        for expected in [10_000, 15_000, 22_500, 33_750] {
            let epoch = c.epoch();
            assert_eq!(c.on_throttle(epoch, None, Duration::ZERO), Some(Step::Up));
            assert_eq!(c.interval(), Duration::from_micros(expected));
        }
    }

    #[test]
    fn successes_from_before_the_last_raise_are_not_counted() {
        let mut c = Controller::new(&fixed(10), Script::new(&[0.5]));
        c.on_throttle(0, None, Duration::ZERO);
        c.on_throttle(1, None, Duration::ZERO);
        for epoch in [0, 1] {
            for _ in 0..30 {
                assert_eq!(c.on_success(epoch, Duration::ZERO), None);
            }
        }
        assert_eq!(c.interval(), Duration::from_millis(15));
        for _ in 0..9 {
            assert_eq!(c.on_success(2, Duration::ZERO), Some(Step::Unchanged));
        }
        assert_eq!(c.on_success(2, Duration::ZERO), Some(Step::Down));
        assert_eq!(c.interval(), Duration::from_micros(13_500));
    }

    #[test]
    fn auto_start_is_the_observed_spacing_times_up_multiplier() {
        let mut c = Controller::new(&Settings::seed_defaults(), Script::new(&[0.5]));
        // 50 dispatches a second: 20 ms apart, so the first raise goes to 30 ms.
        c.on_throttle(0, Some(Duration::from_millis(20)), Duration::ZERO);
        assert_eq!(c.interval(), Duration::from_millis(30));
    }

    #[test]
    fn auto_start_never_goes_below_min_interval_or_above_max() {
        let mut c = Controller::new(&Settings::seed_defaults(), Script::new(&[0.5]));
        c.on_throttle(0, Some(Duration::from_micros(100)), Duration::ZERO);
        assert_eq!(c.interval(), Duration::from_millis(1));

        let settings = Settings {
            max_interval: Duration::from_secs(1),
            ..Settings::seed_defaults()
        };
        let mut c = Controller::new(&settings, Script::new(&[0.5]));
        c.on_throttle(0, Some(Duration::from_secs(5)), Duration::ZERO);
        assert_eq!(c.interval(), Duration::from_secs(1));
    }

    #[test]
    fn in_auto_mode_a_decrease_below_min_interval_returns_to_zero() {
        let settings = Settings {
            randomization_factor: 0.0,
            down_threshold: 1,
            down_multiplier: 0.5,
            min_interval: Duration::from_millis(4),
            ..Settings::seed_defaults()
        };
        let mut c = Controller::new(&settings, Script::new(&[0.5]));
        c.on_throttle(0, Some(Duration::from_millis(10)), Duration::ZERO); // 15 ms
        c.on_success(1, Duration::ZERO); // 7.5 ms
        assert_eq!(c.interval(), Duration::from_micros(7500));
        c.on_success(1, Duration::ZERO); // 3.75 ms < 4 ms
        assert_eq!(c.interval(), Duration::ZERO);
    }

    #[test]
    fn adopting_a_later_epoch_moves_the_interval_and_drops_older_results() {
        let mut c = Controller::new(&fixed(10), Script::new(&[0.5]));
        c.on_throttle(0, None, Duration::ZERO);
        assert!(c.adopt(Duration::from_millis(40), 4, false, Duration::ZERO));
        assert_eq!((c.interval(), c.epoch()), (Duration::from_millis(40), 4));
        assert_eq!(c.on_throttle(3, None, Duration::ZERO), None);
        assert_eq!(c.on_throttle(4, None, Duration::ZERO), Some(Step::Up));
        assert_eq!(c.interval(), Duration::from_millis(60));
    }

    #[test]
    fn within_an_epoch_the_fleet_interval_is_adopted_either_way() {
        let mut c = Controller::new(&fixed(10), Script::new(&[0.5]));
        c.on_throttle(0, None, Duration::ZERO);
        assert!(c.adopt(Duration::from_millis(12), 1, false, Duration::ZERO));
        assert_eq!(c.interval(), Duration::from_millis(12));
        assert!(c.adopt(Duration::from_millis(8), 1, false, Duration::ZERO));
        assert_eq!((c.interval(), c.epoch()), (Duration::from_millis(8), 1));
        assert!(!c.adopt(Duration::from_millis(8), 1, false, Duration::ZERO));
    }

    #[test]
    fn a_raise_that_outraised_this_members_own_restarts_its_curve_there() {
        // 100/s learned; this member raised to 90/s (epoch 2), another member's raise
        // to 50/s landed for the same burst, in the same epoch number.
        let mut c = cubic_at_100();
        c.on_success(1, Duration::from_secs(1));
        c.on_throttle(1, None, Duration::from_secs(1));
        assert_eq!(c.epoch(), 2);
        let mut lost = cubic_at_100();
        lost.on_success(1, Duration::from_secs(1));
        lost.on_throttle(1, None, Duration::from_secs(1));
        // Taken as a step within the epoch, its curve climbs back to its own rate in
        // its recovery; taken as the raise it is, to at most 50/s / beta.
        c.adopt(Duration::from_millis(20), 2, false, Duration::from_secs(1));
        lost.adopt(Duration::from_millis(20), 2, true, Duration::from_secs(1));
        assert_eq!(
            (lost.interval(), lost.epoch()),
            (Duration::from_millis(20), 2)
        );
        c.on_success(2, Duration::from_secs(3));
        lost.on_success(2, Duration::from_secs(3));
        let rate = |c: &Controller<Script>| 1.0 / c.interval().as_secs_f64();
        assert!(rate(&c) > 90.0, "{}", rate(&c));
        assert!(rate(&lost) <= 50.0 / 0.9 + 1e-6, "{}", rate(&lost));
    }

    /// `cubic` with beta 0.9 and a 2 s recovery, raised from 0 to 100/s (9 ms
    /// observed, / beta).
    fn cubic_at_100() -> Controller<Script> {
        let settings = Settings {
            strategy: crate::sleeper::Strategy::Cubic,
            beta: 0.9,
            recovery: Duration::from_secs(2),
            ..Settings::seed_defaults()
        };
        let mut c = Controller::new(&settings, Script::new(&[0.5]));
        c.on_throttle(0, Some(Duration::from_millis(9)), Duration::ZERO);
        assert_eq!(c.interval(), Duration::from_millis(10));
        c
    }

    #[test]
    fn cubic_rescaled_keeps_its_curve_in_the_new_units() {
        // 100/s, then a quarter of it: the curve returns to 25/s, not 100/s. (A
        // success first: a raise with none since the last decrease is the same burst,
        // which doubles on.)
        let mut c = cubic_at_100();
        c.on_success(1, Duration::ZERO);
        c.adopt(Duration::from_nanos(11_111_111), 2, false, Duration::ZERO);
        c.rescale(4.0);
        assert_eq!(c.interval(), Duration::from_nanos(44_444_444));
        c.on_success(2, Duration::from_secs(2));
        let rate = 1.0 / c.interval().as_secs_f64();
        assert!((rate - 25.0).abs() < 0.1, "{rate}");
    }

    #[test]
    fn cubic_takes_an_adopted_raise_as_a_throttle_and_climbs_back_in_recovery() {
        // 100/s learned here, then another member's raise to 90/s at t = 10 s.
        let mut c = cubic_at_100();
        c.adopt(
            Duration::from_nanos(11_111_111),
            2,
            false,
            Duration::from_secs(10),
        );
        assert_eq!(c.interval(), Duration::from_nanos(11_111_111));
        // Back at the rate in force before the raise (100/s) after `recovery`.
        c.on_success(2, Duration::from_secs(12));
        let rate = 1.0 / c.interval().as_secs_f64();
        assert!((rate - 100.0).abs() < 0.1, "{rate}");
    }

    /// A fleet's first raise, adopted from 0 at 50/s: taken as the estimate it is, the
    /// rate doubles every `recovery / 3` as after a raise from 0 of the member's own;
    /// taken as a measured rate (a joiner's), the curve only probes slowly past it.
    #[test]
    fn a_fleets_first_raise_marked_an_estimate_grows_as_a_raise_from_zero() {
        let settings = Settings {
            strategy: crate::sleeper::Strategy::Cubic,
            recovery: Duration::from_secs(2),
            ..Settings::seed_defaults()
        };
        let rate = |c: &Controller<Script>| 1.0 / c.interval().as_secs_f64();
        let mut estimate = Controller::new(&settings, Script::new(&[0.5]));
        let mut measured = Controller::new(&settings, Script::new(&[0.5]));
        for c in [&mut estimate, &mut measured] {
            assert!(c.adopt(Duration::from_millis(20), 1, false, Duration::ZERO));
        }
        estimate.estimated();
        for c in [&mut estimate, &mut measured] {
            c.on_success(1, Duration::from_secs(2));
        }
        // Three doublings in 2 s; the cubic alone stays near 50/s.
        assert!((rate(&estimate) - 400.0).abs() < 1.0, "{}", rate(&estimate));
        assert!(rate(&measured) < 55.0, "{}", rate(&measured));
        // The next throttle ends the doubling, as after a raise from 0.
        estimate.on_throttle(1, None, Duration::from_secs(2));
        let cut = rate(&estimate);
        estimate.on_success(2, Duration::from_secs(3));
        assert!(
            rate(&estimate) < cut * 1.2,
            "{} after {cut}",
            rate(&estimate)
        );
    }

    #[test]
    fn reset_returns_to_zero_and_starts_a_new_epoch() {
        let settings = fixed(10);
        let mut c = Controller::new(&settings, Script::new(&[0.5]));
        c.on_throttle(0, None, Duration::ZERO);
        c.reset(&settings);
        assert_eq!(c.interval(), Duration::ZERO);
        assert_eq!(c.on_throttle(1, None, Duration::ZERO), None);
        assert_eq!(c.on_throttle(2, None, Duration::ZERO), Some(Step::Up));
    }
}
