//! The sleeper: one upstream's interval as a pure function of throttles and successes.
//!
//! Each strategy lives in its own file and takes its randomness as an argument, so the
//! tests can state exact sequences. The epoch rule, the pace-mode starting point and
//! everything about time belong to `controller.rs`; waiting belongs to `pacer.rs`.

mod constant;
mod cubic;
mod decorrelated;
mod exponential;
mod linear;
mod responsive;

use std::time::Duration;

pub use cubic::Cubic;
pub use decorrelated::Decorrelated;
pub use exponential::Exponential;
pub use linear::Linear;
pub use responsive::Responsive;

/// A source of uniform random numbers in `[0, 1)`.
pub trait Random {
    /// The next number in `[0, 1)`.
    fn unit(&mut self) -> f64;
}

impl Random for fastrand::Rng {
    fn unit(&mut self) -> f64 {
        self.f64()
    }
}

crate::spelled::spelled! {
    fn name;
    /// How a sleeper reacts to throttles and successes (config `sleeper.strategy`).
    #[derive(Clone, Copy, Debug, PartialEq, Eq)]
    pub enum Strategy {
        /// AutoSleeper's rule: ×up on throttles, ×down after a run of successes.
        Responsive = "responsive",
        /// CUBIC in the rate domain: ×beta on a throttle, time-based return to the rate of
        /// the last throttle, then probing beyond it.
        Cubic = "cubic",
        /// gRPC connection backoff applied to throttles; a success resets to 0.
        Exponential = "exponential",
        /// Polly/AWS decorrelated jitter; a success resets to 0.
        Decorrelated = "decorrelated",
        /// +initial per throttle; a success resets to 0.
        Linear = "linear",
        /// A fixed interval: a static rate limit.
        Constant = "constant",
        /// Pass-through: the interval stays 0.
        Off = "off",
    }
}

crate::spelled::spelled! {
    fn name;
    /// Where the interval is applied (config `sleeper.mode`).
    #[derive(Clone, Copy, Debug, PartialEq, Eq)]
    pub enum Mode {
        /// Dispatches to the upstream are spaced the interval apart, in order.
        Pace = "pace",
        /// Every request waits the interval on its own (AutoSleeper's per-call sleep).
        Delay = "delay",
        /// Learn and export as `pace`, but never delay or shed: a shadow mode that counts
        /// what pacing would have done (see `observe.rs`).
        Observe = "observe",
    }
}

/// The interval a raise from 0 starts at (config `sleeper.initial_interval`).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Initial {
    /// Pace mode: the observed dispatch spacing times `up_multiplier`.
    Auto,
    /// AutoSleeper's rule: the first throttle sets this; a decrease below it returns to 0.
    Fixed(Duration),
}

/// Validated sleeper settings; `config.rs` fills in the defaults of each strategy.
#[derive(Clone, Debug, PartialEq)]
pub struct Settings {
    pub strategy: Strategy,
    pub mode: Mode,
    pub initial_interval: Initial,
    /// With `Initial::Auto`, a decrease below this returns the interval to 0.
    pub min_interval: Duration,
    pub max_interval: Duration,
    /// Upper bound of the random spread, whatever `randomization_factor` gives.
    pub max_randomization: Duration,
    /// Also the exponential strategy's multiplier.
    pub up_multiplier: f64,
    pub down_multiplier: f64,
    /// Also the exponential strategy's jitter.
    pub randomization_factor: f64,
    /// Successes (counted since the last decrease) that trigger one decrease.
    pub down_threshold: u32,
    /// `cubic`: the rate multiplier on a throttle.
    pub beta: f64,
    /// `cubic`: how long the rate takes to climb back to the rate of the last throttle.
    pub recovery: Duration,
}

impl Settings {
    /// AutoSleeper's defaults, in pace mode with the automatic start.
    pub fn seed_defaults() -> Settings {
        Settings {
            strategy: Strategy::Responsive,
            mode: Mode::Pace,
            initial_interval: Initial::Auto,
            min_interval: Duration::from_millis(1),
            max_interval: Duration::from_secs(15 * 60),
            max_randomization: Duration::from_secs(120),
            up_multiplier: 1.5,
            down_multiplier: 0.9,
            randomization_factor: 0.3,
            down_threshold: 10,
            beta: 0.92,
            recovery: Duration::from_secs(3),
        }
    }

    /// What the observed dispatch spacing is multiplied by for a raise from 0 with
    /// `initial_interval = "auto"`: `cubic` starts at beta × the observed rate.
    pub fn start_multiplier(&self) -> f64 {
        match self.strategy {
            Strategy::Cubic => 1.0 / self.beta,
            _ => self.up_multiplier,
        }
    }

    /// Below this a decrease returns the interval to 0.
    pub fn floor(&self) -> Duration {
        match self.initial_interval {
            Initial::Auto => self.min_interval,
            Initial::Fixed(d) => d,
        }
    }
}

/// What one throttle or success did to the interval.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Step {
    Unchanged,
    Up,
    Down,
}

/// One upstream's interval state under one strategy.
#[derive(Clone, Debug)]
pub enum Sleeper {
    Responsive(Responsive),
    Cubic(Cubic),
    Exponential(Exponential),
    Decorrelated(Decorrelated),
    Linear(Linear),
    Constant(Duration),
    Off,
}

impl Sleeper {
    /// A sleeper at interval 0 (or at its fixed interval for `constant`).
    pub fn new(settings: &Settings) -> Sleeper {
        match settings.strategy {
            Strategy::Responsive => Sleeper::Responsive(Responsive::new(settings)),
            Strategy::Cubic => Sleeper::Cubic(Cubic::new(settings)),
            Strategy::Exponential => Sleeper::Exponential(Exponential::new(
                settings.up_multiplier,
                settings.randomization_factor,
                settings.max_interval,
            )),
            Strategy::Decorrelated => {
                Sleeper::Decorrelated(Decorrelated::new(settings.max_interval))
            }
            Strategy::Linear => Sleeper::Linear(Linear::new(settings.max_interval)),
            Strategy::Constant => Sleeper::Constant(constant::interval(settings)),
            Strategy::Off => Sleeper::Off,
        }
    }

    /// The current interval.
    pub fn interval(&self) -> Duration {
        match self {
            Sleeper::Responsive(s) => s.interval(),
            Sleeper::Cubic(s) => s.interval(),
            Sleeper::Exponential(s) => s.interval(),
            Sleeper::Decorrelated(s) => s.interval(),
            Sleeper::Linear(s) => s.interval(),
            Sleeper::Constant(d) => *d,
            Sleeper::Off => Duration::ZERO,
        }
    }

    /// A throttle at `now` (since any fixed origin); `start` is the interval a raise
    /// from 0 goes to.
    pub fn on_throttle(&mut self, start: Duration, now: Duration, rng: &mut dyn Random) -> Step {
        match self {
            Sleeper::Responsive(s) => s.on_throttle(start, rng),
            Sleeper::Cubic(s) => s.on_throttle(start, now),
            Sleeper::Exponential(s) => {
                s.next(start, rng);
                Step::Up
            }
            Sleeper::Decorrelated(s) => s.on_throttle(start, rng),
            Sleeper::Linear(s) => s.on_throttle(start),
            Sleeper::Constant(_) | Sleeper::Off => Step::Unchanged,
        }
    }

    /// A success at `now` (since the same origin as the throttles').
    pub fn on_success(&mut self, now: Duration, rng: &mut dyn Random) -> Step {
        match self {
            Sleeper::Responsive(s) => s.on_success(rng),
            Sleeper::Cubic(s) => s.on_success(now),
            Sleeper::Exponential(s) => reset_step(s.reset()),
            Sleeper::Decorrelated(s) => reset_step(s.reset()),
            Sleeper::Linear(s) => reset_step(s.reset()),
            Sleeper::Constant(_) | Sleeper::Off => Step::Unchanged,
        }
    }
}

impl Sleeper {
    /// Takes `interval` decided elsewhere (the fleet) without losing what the strategy
    /// remembers; `raised` says it comes from a raise (a throttle another member saw),
    /// which `cubic` treats as a throttle of its own at `now`.
    pub fn adopt(&mut self, interval: Duration, raised: bool, now: Duration) {
        match self {
            Sleeper::Responsive(s) => s.adopt(interval),
            Sleeper::Cubic(s) => s.adopt(interval, raised, now),
            Sleeper::Exponential(s) => s.adopt(interval),
            Sleeper::Decorrelated(s) => s.adopt(interval),
            Sleeper::Linear(s) => s.adopt(interval),
            Sleeper::Constant(_) | Sleeper::Off => {}
        }
    }

    /// Takes a fleet's cold-start `interval`, which grew by `growth` at its last step:
    /// `cubic` takes a throttle of its own back by that step at once, and a raise
    /// that ends the start as the throttle it is; the other strategies adopt it.
    pub fn cold(&mut self, interval: Duration, growth: f64, now: Duration) {
        match self {
            Sleeper::Cubic(s) => s.cold(interval, growth),
            other => other.adopt(interval, false, now),
        }
    }

    /// The interval is a fleet's, of which this member sends `share` (its own is the
    /// fleet's over `share`): the floor below which an interval returns to 0 bounds
    /// the member's own. The other strategies have no floor.
    pub fn share(&mut self, share: f64) {
        match self {
            Sleeper::Cubic(s) => s.share(share),
            Sleeper::Responsive(s) => s.share(share),
            _ => {}
        }
    }

    /// The interval just adopted is an estimate from one burst (a fleet's first raise),
    /// as a raise from 0 is: `cubic` keeps growing from it as after its own raise from
    /// 0; the other strategies step alike either way.
    pub fn estimated(&mut self) {
        if let Sleeper::Cubic(s) = self {
            s.estimated();
        }
    }

    /// Multiplies every interval the strategy holds or remembers by `factor` (rates
    /// by its inverse): the same learning in other units, as when a fleet member's
    /// interval turns from the fleet's into its own and back.
    pub fn rescale(&mut self, factor: f64) {
        let scaled = |d: Duration| from_nanos_f64(d.as_nanos() as f64 * factor);
        match self {
            Sleeper::Responsive(s) => s.adopt(scaled(s.interval())),
            Sleeper::Cubic(s) => s.rescale(factor),
            Sleeper::Exponential(s) => s.adopt(scaled(s.interval())),
            Sleeper::Decorrelated(s) => s.rescale(factor),
            Sleeper::Linear(s) => s.rescale(factor),
            Sleeper::Constant(_) | Sleeper::Off => {}
        }
    }

    /// Back to interval 0 after a long rest, keeping what a strategy remembers besides
    /// its interval (cubic's rate at the last throttle) as a prior; `constant` keeps
    /// its interval.
    pub fn rest(&mut self) {
        match self {
            Sleeper::Responsive(s) => s.rest(),
            Sleeper::Cubic(s) => s.rest(),
            Sleeper::Exponential(s) => {
                s.reset();
            }
            Sleeper::Decorrelated(s) => {
                s.reset();
            }
            Sleeper::Linear(s) => {
                s.reset();
            }
            Sleeper::Constant(_) | Sleeper::Off => {}
        }
    }
}

fn reset_step(was_nonzero: bool) -> Step {
    if was_nonzero {
        Step::Down
    } else {
        Step::Unchanged
    }
}

/// `value` spread uniformly over ±min(factor × value, max_spread): AutoSleeper's
/// `getNextRandomInterval`.
pub fn randomize(value: f64, factor: f64, max_spread: f64, rng: &mut dyn Random) -> f64 {
    if factor == 0.0 {
        return value;
    }
    let delta = (factor * value).min(max_spread);
    value - delta + 2.0 * delta * rng.unit()
}

/// A fleet member's share of the fleet's rate as a sleeper keeps it, in (0, 1]; `None`
/// for a value that says nothing (0, negative, not finite), which leaves the last.
fn member_share(share: f64) -> Option<f64> {
    (share.is_finite() && share > 0.0).then(|| share.min(1.0))
}

/// `Duration` from float nanoseconds, saturating at the ends.
#[allow(
    clippy::cast_possible_truncation,
    clippy::cast_sign_loss,
    reason = "float to integer `as` saturates, as wanted here"
)]
pub fn from_nanos_f64(ns: f64) -> Duration {
    if ns <= 0.0 {
        Duration::ZERO
    } else if ns >= u64::MAX as f64 {
        Duration::from_nanos(u64::MAX)
    } else {
        Duration::from_nanos(ns as u64)
    }
}

#[cfg(test)]
pub mod testing {
    //! Scripted randomness for exact tests.
    use super::Random;
    use std::collections::VecDeque;

    /// Returns the scripted numbers in turn, then repeats the last one.
    pub struct Script(pub VecDeque<f64>, pub f64);

    impl Script {
        pub fn new(values: &[f64]) -> Script {
            Script(
                values.iter().copied().collect(),
                values.last().copied().unwrap_or(0.5),
            )
        }
    }

    impl Random for Script {
        fn unit(&mut self) -> f64 {
            self.0.pop_front().unwrap_or(self.1)
        }
    }
}

#[cfg(test)]
mod tests {
    use super::testing::Script;
    use super::*;

    #[test]
    fn randomization_is_bounded_by_the_factor_and_by_max_randomization() {
        // factor 0.3 of 100 is 30, below the cap of 50: the spread is 70..130.
        assert_eq!(randomize(100.0, 0.3, 50.0, &mut Script::new(&[0.0])), 70.0);
        assert_eq!(randomize(100.0, 0.3, 50.0, &mut Script::new(&[0.5])), 100.0);
        assert!((randomize(100.0, 0.3, 50.0, &mut Script::new(&[0.999_999])) - 130.0).abs() < 1e-3);
        // factor 0.3 of 1000 is 300, above the cap of 50: the spread is 950..1050.
        assert_eq!(
            randomize(1000.0, 0.3, 50.0, &mut Script::new(&[0.0])),
            950.0
        );
        assert_eq!(
            randomize(1000.0, 0.3, 50.0, &mut Script::new(&[1.0])),
            1050.0
        );
        assert_eq!(
            randomize(1000.0, 0.0, 50.0, &mut Script::new(&[0.0])),
            1000.0
        );
    }

    #[test]
    fn strategy_names_round_trip() {
        for (i, name) in Strategy::NAMES.iter().enumerate() {
            assert_eq!(Strategy::ALL[i].name(), *name);
        }
    }

    #[test]
    fn constant_and_off_ignore_everything() {
        let mut settings = Settings::seed_defaults();
        settings.strategy = Strategy::Constant;
        settings.initial_interval = Initial::Fixed(Duration::from_millis(20));
        let mut s = Sleeper::new(&settings);
        let rng = &mut Script::new(&[0.5]);
        assert_eq!(s.interval(), Duration::from_millis(20));
        assert_eq!(
            s.on_throttle(Duration::from_secs(1), Duration::ZERO, rng),
            Step::Unchanged
        );
        assert_eq!(s.on_success(Duration::ZERO, rng), Step::Unchanged);
        assert_eq!(s.interval(), Duration::from_millis(20));

        settings.strategy = Strategy::Off;
        let mut s = Sleeper::new(&settings);
        assert_eq!(
            s.on_throttle(Duration::from_secs(1), Duration::ZERO, rng),
            Step::Unchanged
        );
        assert_eq!(s.interval(), Duration::ZERO);
    }
}
