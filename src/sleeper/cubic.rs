//! `cubic`: TCP CUBIC (RFC 8312) in the rate domain, as the AWS SDKs' adaptive retry
//! mode uses it, adapted to one precise pacer.
//!
//! A throttle multiplies the rate by `beta` and sets the rate the curve returns to
//! (`w_max`).
//! Between throttles the rate follows `w_max × (1 + c × (t − k)³)`: a concave return
//! to `w_max` that flattens out near it, then convex probing beyond it. `c` is relative
//! (`(1 − beta) / recovery³`), so the return takes `recovery` at any scale and a 5/s
//! table behaves like a 5000/s one. Growth depends on time, not on counted successes,
//! so a lucky run of successes does not push the rate past the capacity faster. After a
//! probe met the capacity, a fleet's member (one that adopted a fleet's interval)
//! takes [`FLEET_RECOVERY`] times as long, and its probe past `w_max` is held to a
//! line at first ([`PROBE_SLOPE`]).
//!
//! Every throttle sets `w_max` halfway between the decrease and the rate in force
//! (CUBIC's fast convergence, taken every time): a throttle comes late, once the
//! upstream's burst is spent, so the rate in force lies above the capacity; and a
//! sidecar whose share shrank gives some of it up, so sidecars sharing one upstream
//! converge instead of one starving. After a raise from 0, whose `w_max`
//! is only an estimate, the rate also doubles every `recovery / 3` until the next
//! throttle. The time comes in as an argument.

use std::time::Duration;

use super::{Settings, Step, from_nanos_f64};

/// A success moves the interval only when the rate grew by at least this fraction:
/// smaller steps change nothing a pacer can show, and each move is a published update.
const MIN_GROWTH: f64 = 0.001;

/// After a raise from 0 the remembered rate is only an estimate (the dispatch rate of
/// the last second, which at start-up counts the time before any demand), so until the
/// next throttle the rate also doubles every `recovery / START_DOUBLINGS`: a start
/// estimated far too low reaches the capacity in seconds, not in a cubic's slow climb.
const START_DOUBLINGS: f64 = 3.0;

/// The fewest requests between the curve's return to the rate of the last throttle and
/// the decrease before it, so probing past it costs at most about one throttle in this
/// many at a low rate.
const PROBE_REQUESTS: f64 = 150.0;

/// How many times `recovery` a fleet's curve takes to return to `w_max` after a cut
/// of one step of `beta` made once it was back at `w_max` (a probe that met the
/// capacity), and so how much more gently it probes past it: one sidecar's next
/// request tells it of a throttle, but a fleet takes a raise at its members' next
/// syncs and drops the raises within the hold after one, so its probe goes on growing
/// for up to half a second after it met the capacity; at half as long again the probe
/// grows less than a third as fast, and meets the capacity less often. Not twice:
/// the second after the cut, a slower return's lowest, would average below 0.95 of
/// the capacity. Any other cut (deeper, to what the fleet got through after a burst
/// ran out, or one on the way back) returns in `recovery`: the capacity may lie well
/// above.
const FLEET_RECOVERY: f64 = 1.5;

/// How steep a fleet member's probe past `w_max` may be at first, as a share of the
/// average slope of a return from one step of `beta` over `recovery` (with `beta`
/// 0.92 and 3 s, 2 % of `w_max` a second); the bound's slope doubles every
/// [`PROBE_DOUBLING`] times `recovery`. A fleet's probe often starts below the
/// capacity (a cut to what got through as a burst ran out), and while the fleet sends
/// less than the capacity the upstream's burst refills: the cube, steepening with the
/// time, is far past the capacity when that burst is spent, and the fleet learns of it
/// a sync later. Held to a straight line at first, the probe is a little past it.
/// Doubling, the bound still finds a capacity that doubled (an on-demand table
/// taking twice its peak, a raised provisioned one) in about 17 s rather than 10.
const PROBE_SLOPE: f64 = 0.75;

/// Every how many times `recovery` the bound on a fleet's probe doubles its slope (see
/// [`PROBE_SLOPE`]).
const PROBE_DOUBLING: f64 = 2.0;

/// How close below `w_max` the rate counts as back at it: the curve is this flat
/// from four fifths of its return on (with `beta` 0.92).
const BACK: f64 = 1e-3;

/// The rate multiplier for a throttle with no success since the last decrease: that
/// decrease did not reach the capacity (the start-up ramp from full speed, a capacity
/// drop), so the rate halves instead of creeping down by `beta` per round trip while
/// the retry budget drains.
const OVERSHOOT: f64 = 0.5;

/// The CUBIC rate controller's state and parameters.
#[derive(Clone, Debug)]
pub struct Cubic {
    beta: f64,
    /// Relative growth per second cubed, for the probe period in force.
    c: f64,
    /// `recovery`: the least time from a decrease back to `w_max`.
    recovery: f64,
    min_rate: f64,
    /// Above this rate the interval would be below the floor: back to 0.
    max_rate: f64,
    /// The member's share of the rate (1 alone, see [`Cubic::share`]).
    share: f64,
    max: Duration,
    /// Requests per second in force; 0 while not pacing.
    rate: f64,
    /// The rate the curve returns to.
    w_max: f64,
    /// Seconds from the last decrease until the curve is back at `w_max`.
    k: f64,
    /// When the last decrease happened.
    since: Duration,
    /// A success arrived since the last decrease.
    succeeded: bool,
    /// The rate set by the last decrease.
    base: f64,
    /// No throttle since the raise from 0: `w_max` is an estimate.
    from_start: bool,
    /// Seconds per doubling while `from_start`.
    doubling: f64,
    /// The interval is a fleet's (it was adopted once): a throttle cuts by `beta`
    /// whether or not this member saw a success since the last decrease.
    shared: bool,
    /// The interval is a fleet's cold start (see [`Cubic::cold`]), which grew by this
    /// factor at its last step.
    cold: Option<f64>,
    interval: Duration,
}

impl Cubic {
    /// A sleeper at interval 0.
    pub fn new(settings: &Settings) -> Cubic {
        let recovery = settings.recovery.as_secs_f64().max(1e-3);
        let floor = settings.floor().as_secs_f64();
        Cubic {
            beta: settings.beta,
            c: (1.0 - settings.beta) / recovery.powi(3),
            recovery,
            min_rate: 1.0 / settings.max_interval.as_secs_f64(),
            max_rate: if floor > 0.0 { 1.0 / floor } else { f64::MAX },
            share: 1.0,
            max: settings.max_interval,
            rate: 0.0,
            w_max: 0.0,
            k: 0.0,
            since: Duration::ZERO,
            succeeded: false,
            base: 0.0,
            from_start: false,
            doubling: recovery / START_DOUBLINGS,
            shared: false,
            cold: None,
            interval: Duration::ZERO,
        }
    }

    /// The current interval.
    pub fn interval(&self) -> Duration {
        self.interval
    }

    /// A throttle at `now`; `start` is the interval a raise from 0 goes to (the
    /// controller's observed spacing / beta), so the remembered rate is the observed one.
    pub fn on_throttle(&mut self, start: Duration, now: Duration) -> Step {
        if self.rate == 0.0 {
            let rate = 1.0 / start.min(self.max).as_secs_f64().max(1e-9);
            self.w_max = rate / self.beta;
            self.decrease_to(rate, false, now);
            self.from_start = true;
            self.doubling = self.recovery / START_DOUBLINGS;
            return Step::Up;
        }
        // A fleet's raises compound while a burst lasts, each member cutting at every
        // throttle of its own and taking the others' cuts: with no success since the
        // last decrease (and within `recovery` of it), a throttle is the same burst,
        // and an estimate's doubling goes on, so a fleet cut far below the capacity is
        // back in seconds.
        let estimating = self.shared && self.same_burst(now);
        let gentle = self.shared && self.back();
        self.from_start = false;
        let w = self.rate;
        if let Some(growth) = self.cold.take() {
            // The start's last step throttled, and the upstream's burst may have hid
            // the one before throttling too (see `fleet.rs`): back two steps at once,
            // and return toward halfway between the rates two steps and one step back.
            let back = w / (growth * growth);
            self.w_max = back * (1.0 + growth) / 2.0;
            self.decrease_to(back, false, now);
            self.from_start = true;
            self.doubling = self.recovery;
            return Step::Up;
        }
        // A throttle comes late: the upstream's burst hides the overshoot until it is
        // spent, so `w` lies above the capacity. Returning to `w` would throttle again
        // on the way up; the curve returns to halfway between the decrease and `w`
        // (CUBIC's fast convergence, taken every time), and probes past it from there.
        self.w_max = w * (1.0 + self.beta) / 2.0;
        // In a fleet a member may see no success of its own between two raises, and
        // halving at each would undershoot the capacity; the fleet's cut of a rate
        // far past it comes from the members' dispatch rates instead.
        let factor = if self.succeeded || self.shared {
            self.beta
        } else {
            OVERSHOOT
        };
        self.decrease_to(w * factor, gentle, now);
        self.from_start = estimating;
        Step::Up
    }

    /// A success at `now`: the rate follows the curve.
    pub fn on_success(&mut self, now: Duration) -> Step {
        if self.rate == 0.0 {
            return Step::Unchanged;
        }
        self.succeeded = true;
        let w = self.curve(now);
        if w < self.rate * (1.0 + MIN_GROWTH) {
            return Step::Unchanged;
        }
        if w * self.share >= self.max_rate {
            self.rate = 0.0;
            self.interval = Duration::ZERO;
        } else {
            self.set_rate(w);
        }
        Step::Down
    }

    /// Moves to `interval`. A raise is a throttle seen elsewhere: the rate in force
    /// becomes the one the curve returns to (no more than `1 / beta` above the adopted
    /// one: a fleet-wide cut larger than one step, from a burst far past the capacity,
    /// must not climb straight back into it), and the curve restarts at `now`. Taken
    /// from 0 (a member that joins a paced fleet, or saw none of the burst), the
    /// adopted rate is the fleet's, measured, not an estimate: the curve starts at it
    /// and only probes beyond it, leaving the fleet's growth to the members that
    /// remember the burst, so a joiner neither doubles nor pulls the fleet up. Otherwise
    /// only the rate moves and the curve keeps its origin, so growth stays a function
    /// of the time since the last throttle, whoever saw it.
    pub fn adopt(&mut self, interval: Duration, raised: bool, now: Duration) {
        self.shared = true;
        let cold = self.cold.take();
        let back = self.back();
        if interval.is_zero() {
            self.rate = 0.0;
            self.interval = Duration::ZERO;
            return;
        }
        let rate = 1.0 / interval.min(self.max).as_secs_f64();
        if !raised && cold.is_some() {
            // A cold start cut short (the member goes on alone): the fleet no longer
            // grows it, so the rate grows from here as from an estimate.
            self.w_max = rate;
            self.decrease_to(rate, false, now);
            self.from_start = true;
            self.doubling = self.recovery / START_DOUBLINGS;
            return;
        }
        if !raised {
            self.set_rate(rate);
            return;
        }
        // A raise that ends a cold start takes the fleet back two of the start's steps
        // (see `fleet.rs`): the capacity most likely lies between the raise and one
        // step above it, and the curve returns toward halfway between them (members
        // that grew once more since do not count their own step).
        self.w_max = match cold {
            Some(growth) => rate * (1.0 + growth) / 2.0,
            None => self.rate.clamp(rate, rate / self.beta),
        };
        let estimating = self.same_burst(now);
        // A probe that met the capacity, cut by one step of `beta` or less.
        let gentle = cold.is_none() && back && self.rate * self.beta <= rate * (1.0 + 1e-9);
        self.decrease_to(rate, gentle, now);
        if cold.is_some() {
            // The fleet's rate in force when it throttled may have been above the one
            // it reads (members whose shares were about to shrink): the rate also
            // doubles every `recovery` until the next throttle, a third as fast as
            // after a raise from 0, so an end that cut too deep is back in a few
            // seconds.
            self.from_start = true;
            self.doubling = self.recovery;
        } else {
            // A raise taken with no success since the last decrease is the same
            // burst: an estimate's doubling goes on (see `on_throttle`).
            self.from_start = estimating;
        }
    }

    /// The rate in force is an estimate from one burst (a fleet's first raise, taken
    /// from 0 or after this member's own raise from 0): as after a raise from 0, it
    /// also doubles every `recovery / 3` until the next throttle, so a fleet whose first
    /// cut went far below the capacity is back at it in seconds.
    pub fn estimated(&mut self) {
        if self.rate > 0.0 {
            self.from_start = true;
            self.doubling = self.recovery / START_DOUBLINGS;
            self.w_max = self.w_max.max(self.rate);
        }
    }

    /// Takes a fleet's cold-start `interval`, which grew by `growth` at its last step
    /// (see `fleet.rs`): the fleet, not the curve, grows it; a throttle of this
    /// member's own takes the rate back by that step at once.
    pub fn cold(&mut self, interval: Duration, growth: f64) {
        self.shared = true;
        self.from_start = false;
        self.cold = Some(growth.max(1.0));
        self.w_max = 0.0;
        self.set_rate(1.0 / interval.min(self.max).as_secs_f64().max(1e-9));
    }

    /// Multiplies the interval by `factor`, and so every remembered rate by its
    /// inverse; the curve's shape and origin stay.
    pub fn rescale(&mut self, factor: f64) {
        if self.rate == 0.0 || factor.is_nan() || factor <= 0.0 {
            return;
        }
        self.w_max /= factor;
        self.base /= factor;
        self.set_rate(self.rate / factor);
    }

    /// The rate is a fleet's, of which this member sends `share`: the floor bounds the
    /// member's own interval, so the fleet's rate returns to 0 only at `1 / share`
    /// times the floor's (16 members on a table of 3,000 writes a second, at about
    /// 190 each, stay paced).
    pub fn share(&mut self, share: f64) {
        if let Some(share) = super::member_share(share) {
            self.share = share;
        }
    }

    /// Back to 0 (not pacing); the rate of the last throttle stays as a prior.
    pub fn rest(&mut self) {
        self.rate = 0.0;
        self.interval = Duration::ZERO;
    }

    /// Whether a throttle or raise at `now` belongs to the burst of an estimate (the
    /// fast doubling after a raise from 0 or a fleet's first raise, not the slower one
    /// after a cold start's end, whose rate went through): no success since the last
    /// decrease, within `recovery` of it.
    fn same_burst(&self, now: Duration) -> bool {
        self.from_start
            && self.doubling < self.recovery
            && !self.succeeded
            && now.saturating_sub(self.since).as_secs_f64() < self.recovery
    }

    /// Whether the curve is back at `w_max` (see [`BACK`]), not on its way there nor
    /// growing an estimate.
    fn back(&self) -> bool {
        !self.from_start && self.rate > 0.0 && self.rate >= self.w_max * (1.0 - BACK)
    }

    /// The curve's rate at `now`.
    fn curve(&self, now: Duration) -> f64 {
        let t = now.saturating_sub(self.since).as_secs_f64();
        let cubic = self.w_max * (1.0 + self.c * (t - self.k).powi(3));
        if self.from_start {
            cubic.max(self.base * (t / self.doubling).exp2())
        } else if self.shared && t > self.k {
            cubic.min(self.w_max * (1.0 + self.probe_bound(t - self.k)))
        } else {
            cubic
        }
    }

    /// The most a fleet member's probe may have grown past `w_max`, as a share of it,
    /// `past` seconds after the curve was back at it (see [`PROBE_SLOPE`]): a slope
    /// that doubles every `doubling` seconds, integrated.
    fn probe_bound(&self, past: f64) -> f64 {
        let slope = PROBE_SLOPE * (1.0 - self.beta) / self.recovery;
        let doubling = PROBE_DOUBLING * self.recovery;
        slope * doubling / std::f64::consts::LN_2 * ((past / doubling).exp2() - 1.0)
    }

    /// Cuts to `rate` at `now`; `gentle` after a fleet's probe met the capacity (see
    /// [`FLEET_RECOVERY`]).
    fn decrease_to(&mut self, rate: f64, gentle: bool, now: Duration) {
        self.set_rate(rate.max(self.min_rate));
        self.base = self.rate;
        // Signed: if `max_interval` held the rate above `w_max`, the curve starts in
        // its convex half.
        // At a low rate a probe every `recovery` would be a large share of the
        // requests (at 20/s, one in 60): the curve returns to `w_max` over at least
        // `PROBE_REQUESTS` requests instead.
        let recovery = if gentle {
            self.recovery * FLEET_RECOVERY
        } else {
            self.recovery
        };
        let period = recovery.max(PROBE_REQUESTS / self.w_max.max(f64::MIN_POSITIVE));
        self.c = (1.0 - self.beta) / period.powi(3);
        self.k = ((self.w_max - self.rate) / (self.c * self.w_max)).cbrt();
        self.since = now;
        self.succeeded = false;
    }

    fn set_rate(&mut self, rate: f64) {
        self.rate = rate;
        self.interval = from_nanos_f64(1e9 / rate).min(self.max);
    }
}

#[cfg(test)]
mod tests {
    use super::super::{Initial, Settings, Strategy};
    use super::*;

    /// beta 0.9 and recovery 2 s: c = 0.1 / 8 = 0.0125 per s³.
    fn settings() -> Settings {
        Settings {
            strategy: Strategy::Cubic,
            beta: 0.9,
            recovery: Duration::from_secs(2),
            ..Settings::seed_defaults()
        }
    }

    fn secs(s: f64) -> Duration {
        Duration::from_secs_f64(s)
    }

    fn rate(c: &Cubic) -> f64 {
        (1e9 / c.interval().as_nanos() as f64 * 1e3).round() / 1e3
    }

    #[test]
    fn the_first_throttle_goes_to_start_and_remembers_the_observed_rate() {
        let mut c = Cubic::new(&settings());
        assert_eq!(c.on_success(secs(1.0)), Step::Unchanged);
        // Observed 100/s: the controller's start is 10 ms / 0.9.
        assert_eq!(
            c.on_throttle(Duration::from_nanos(11_111_111), secs(1.0)),
            Step::Up
        );
        assert_eq!(c.interval(), Duration::from_nanos(11_111_111));
        assert!((c.w_max - 100.0).abs() < 1e-4);
        assert!((c.k - 2.0).abs() < 1e-4);
    }

    #[test]
    fn after_a_raise_from_zero_the_rate_also_doubles_until_the_next_throttle() {
        let mut c = Cubic::new(&settings());
        // A start estimated at 10/s: 9/s, doubling every 2/3 s.
        c.on_throttle(Duration::from_nanos(111_111_111), secs(0.0));
        let mut seen = Vec::new();
        for t in [0.5, 1.0, 2.0, 3.0] {
            c.on_success(secs(t));
            seen.push(rate(&c));
        }
        assert_eq!(seen, [15.136, 25.456, 72.0, 203.647]);
        // The next throttle ends it: plain CUBIC from there.
        c.on_success(secs(3.0));
        c.on_throttle(Duration::ZERO, secs(3.0));
        c.on_success(secs(4.0));
        // Back toward 203.647 × 0.95 = 193.465 from 183.282, reached after 1.615 s.
        assert_eq!(rate(&c), 192.903);
    }

    #[test]
    fn the_rate_returns_to_w_max_in_recovery_then_probes_beyond_it() {
        let mut c = Cubic::new(&settings());
        c.on_throttle(Duration::from_nanos(11_111_111), secs(0.0));
        c.from_start = false;
        let mut seen = Vec::new();
        for t in [0.5, 1.0, 1.5, 2.0, 2.5, 3.0, 4.0] {
            c.on_success(secs(t));
            seen.push(rate(&c));
        }
        // 100 × (1 + 0.0125 × (t − 2)³): concave up to 100 at 2 s, flat around it,
        // then convex.
        assert_eq!(seen, [95.781, 98.75, 99.844, 100.0, 100.156, 101.25, 110.0]);
    }

    #[test]
    fn a_fleet_members_curve_takes_half_as_long_again_after_a_probe_met_the_capacity() {
        let mut c = Cubic::new(&settings());
        c.adopt(Duration::from_millis(10), false, secs(0.0));
        // Another member's raise to 90/s, one step: back to 100/s, the same curve as
        // alone (above) at two thirds of the pace.
        c.adopt(Duration::from_nanos(11_111_111), true, secs(1.0));
        let mut seen = Vec::new();
        for t in [0.75, 1.5, 3.0, 3.75, 4.5, 6.0] {
            c.on_success(secs(1.0 + t));
            seen.push(rate(&c));
        }
        assert_eq!(seen, [95.781, 98.75, 100.0, 100.156, 101.25, 110.0]);
        // A deeper cut, from 110/s to 80/s: back to 88.9/s (one step above it) in
        // `recovery`.
        c.adopt(Duration::from_micros(12_500), true, secs(10.0));
        c.on_success(secs(12.0));
        assert_eq!(rate(&c), 88.889);
        // A cut of one step on the way back (at 95.8/s, a second after the first
        // raise) returns in `recovery` too.
        let mut c = Cubic::new(&settings());
        c.adopt(Duration::from_millis(10), false, secs(0.0));
        c.adopt(Duration::from_nanos(11_111_111), true, secs(1.0));
        c.on_success(secs(2.0));
        c.adopt(
            Duration::from_secs_f64(1.0 / (95.78125 * 0.9)),
            true,
            secs(2.0),
        );
        c.on_success(secs(4.0));
        assert_eq!(rate(&c), 95.781);
    }

    /// Past `w_max` a fleet member's probe is held to a slope of 3.75 % of `w_max` a
    /// second at first (three quarters of 10 % over 2 s), doubling every 4 s.
    #[test]
    fn a_fleet_members_probe_past_w_max_is_held_to_a_slope_that_doubles() {
        let mut c = Cubic::new(&settings());
        c.adopt(Duration::from_millis(10), false, secs(0.0));
        // A raise to 90/s once back at 100/s: w_max 100, back at it after 3 s.
        c.adopt(Duration::from_nanos(11_111_111), true, secs(0.0));
        let mut seen = Vec::new();
        for past in [1.0, 3.0, 4.0, 6.0, 10.0] {
            c.on_success(secs(3.0 + past));
            seen.push(rate(&c));
        }
        // The cube, 100 × (1 + 0.1 × (t / 3)³), to 110 at 3 s past; from there the
        // bound, 100 × (1 + 0.0375 × 4 / ln 2 × (2^(t / 4) − 1)): 121.6 where the
        // cube would be at 123.7, 139.6 for 180, and twice `w_max` 10 s past it.
        assert_eq!(seen, [100.37, 110.0, 121.64, 139.568, 200.776]);
        // A sidecar alone probes along the cube: 470.4 there.
        c.shared = false;
        assert!((c.curve(secs(13.0)) - 100.0 * (1.0 + 100.0 / 27.0)).abs() < 1e-3);
    }

    #[test]
    fn small_growth_is_not_published() {
        let mut c = Cubic::new(&settings());
        c.on_throttle(Duration::from_millis(10), secs(0.0));
        c.from_start = false;
        // w_max 111.1, rate 100: 1 ms later the curve has grown by far less than 0.1%.
        assert_eq!(c.on_success(secs(0.001)), Step::Unchanged);
        assert_eq!(c.interval(), Duration::from_millis(10));
        assert_eq!(c.on_success(secs(0.5)), Step::Down);
    }

    #[test]
    fn a_throttle_multiplies_the_rate_by_beta_and_remembers_it() {
        let mut c = Cubic::new(&settings());
        c.on_throttle(Duration::from_nanos(11_111_111), secs(0.0));
        c.from_start = false;
        c.on_success(secs(4.0)); // 110/s
        assert_eq!(c.on_throttle(Duration::from_secs(1), secs(4.0)), Step::Up);
        assert_eq!(rate(&c), 99.0);
        // The return is to halfway between 99 and 110 (fast convergence).
        assert!((c.w_max - 104.5).abs() < 1e-4);
        assert!((c.k - 1.6148).abs() < 1e-4);
        c.on_success(secs(4.0 + c.k));
        assert_eq!(rate(&c), 104.5);
    }

    #[test]
    fn a_throttle_returns_halfway_so_a_late_one_does_not_throttle_again_on_the_way_up() {
        let mut c = Cubic::new(&settings());
        c.on_throttle(Duration::from_nanos(11_111_111), secs(0.0)); // 90/s, w_max 100
        c.on_success(secs(0.0));
        // Throttled again at 90/s: w_max is 90 × (1 + 0.9) / 2 = 85.5, the rate 81,
        // and the next return is to 85.5.
        c.on_throttle(Duration::from_secs(1), secs(0.1));
        assert_eq!(rate(&c), 81.0);
        assert!((c.w_max - 85.5).abs() < 1e-4);
        c.on_success(secs(0.1 + c.k));
        assert_eq!(rate(&c), 85.5);
    }

    #[test]
    fn a_throttle_with_no_success_since_the_last_decrease_halves_the_rate() {
        let mut c = Cubic::new(&settings());
        // Start-up: 1000/s observed, 900/s, then throttled before any success.
        c.on_throttle(Duration::from_nanos(1_111_111), secs(0.0));
        for (t, expected) in [(0.01, 450.0), (0.02, 225.0), (0.03, 112.5)] {
            c.on_throttle(Duration::ZERO, secs(t));
            assert_eq!(rate(&c), expected);
        }
        // A success, then a throttle: back to beta.
        c.on_success(secs(0.03));
        c.on_throttle(Duration::ZERO, secs(0.04));
        assert_eq!(rate(&c), 101.25);
    }

    #[test]
    fn a_fleet_members_throttles_cut_by_beta_even_with_no_success_between() {
        let mut c = Cubic::new(&settings());
        c.on_throttle(Duration::from_nanos(11_111_111), secs(0.0)); // 90/s
        c.on_success(secs(1.0));
        // Another member's raise to 50/s, then this member's own throttles before any
        // success of its own: 45/s and 40.5/s, not 25/s and 12.5/s.
        c.adopt(Duration::from_millis(20), true, secs(1.0));
        assert_eq!(rate(&c), 50.0);
        c.on_throttle(Duration::ZERO, secs(1.5));
        assert_eq!(rate(&c), 45.0);
        c.on_throttle(Duration::ZERO, secs(2.0));
        assert_eq!(rate(&c), 40.5);
    }

    #[test]
    fn max_interval_bounds_the_rate_from_below_and_the_floor_returns_to_zero() {
        let s = Settings {
            max_interval: Duration::from_millis(20),
            min_interval: Duration::from_millis(5),
            initial_interval: Initial::Auto,
            ..settings()
        };
        let mut c = Cubic::new(&s);
        c.on_throttle(Duration::from_millis(18), secs(0.0)); // 55.6/s, w_max 61.7
        c.on_throttle(Duration::ZERO, secs(0.1)); // 27.8/s, held at 50/s
        assert_eq!(c.interval(), Duration::from_millis(20));
        // The curve starts at 50/s and climbs past 200/s (5 ms): back to interval 0.
        assert_eq!(c.on_success(secs(60.0)), Step::Down);
        assert_eq!(c.interval(), Duration::ZERO);
        assert_eq!(c.on_success(secs(61.0)), Step::Unchanged);
        // A throttle from 0 starts afresh.
        assert_eq!(
            c.on_throttle(Duration::from_millis(10), secs(62.0)),
            Step::Up
        );
        assert_eq!(c.interval(), Duration::from_millis(10));
    }

    /// The floor bounds a member's own interval: a fleet's rate past the floor's
    /// stays paced while the member's share of it is below.
    #[test]
    fn a_fleets_rate_returns_to_zero_only_past_the_floor_of_the_members_share() {
        let s = Settings {
            min_interval: Duration::from_millis(5),
            initial_interval: Initial::Auto,
            ..settings()
        };
        let grown = |share: f64| {
            let mut c = Cubic::new(&s);
            c.share(share);
            // 250/s, past the floor's 200/s.
            c.on_throttle(Duration::from_millis(4), secs(0.0));
            c.on_success(secs(1.0));
            c.interval()
        };
        assert_eq!(grown(1.0), Duration::ZERO);
        // A member that sends a quarter of it, 1 in 16 ms or less.
        assert!(grown(0.25) > Duration::ZERO);
        assert!(grown(0.25) < Duration::from_millis(4));
    }

    /// A fleet's cold start: the curve does not grow it; a throttle of the member's
    /// own takes it back by two of the start's steps at once (the upstream's burst hid
    /// the step before), and the curve returns toward halfway between the rates two
    /// steps and one step back, also doubling every `recovery` (2 s here).
    #[test]
    fn a_throttle_in_a_cold_start_goes_back_two_steps_and_returns_halfway() {
        let mut c = Cubic::new(&settings());
        c.cold(Duration::from_millis(10), 1.5);
        assert_eq!(c.on_success(secs(1.0)), Step::Unchanged);
        assert_eq!(rate(&c), 100.0);
        assert_eq!(c.on_throttle(Duration::ZERO, secs(1.0)), Step::Up);
        assert_eq!(rate(&c), 44.444);
        assert!((c.w_max - 500.0 / 9.0).abs() < 1e-9);
        // Two seconds on: the curve is near its top, the doubling at twice the start.
        c.on_success(secs(3.0));
        assert_eq!(rate(&c), 88.889);
        // The next throttle is a plain one.
        c.on_throttle(Duration::ZERO, secs(3.0));
        assert_eq!(rate(&c), 80.0);
    }

    /// A raise that ends a cold start, adopted: the curve returns toward halfway
    /// between the raise and the rate one step above it, doubling every `recovery`;
    /// adopted outside a cold start, no further than `1 / beta` above it.
    #[test]
    fn a_raise_that_ends_a_cold_start_is_adopted_with_the_step_it_took() {
        let mut c = Cubic::new(&settings());
        c.cold(Duration::from_millis(5), 1.5);
        c.adopt(Duration::from_millis(10), true, secs(1.0));
        assert_eq!(rate(&c), 100.0);
        assert!((c.w_max - 125.0).abs() < 1e-9);
        assert!(c.from_start);
        c.on_success(secs(3.0));
        assert_eq!(rate(&c), 200.0);
        let mut warm = Cubic::new(&settings());
        warm.adopt(Duration::from_millis(5), false, secs(0.0));
        warm.adopt(Duration::from_millis(10), true, secs(1.0));
        assert!((warm.w_max - 100.0 / 0.9).abs() < 1e-9);
        assert!(!warm.from_start);
    }

    /// A fleet member's estimate (the fleet's first raise) keeps doubling through the
    /// raises and throttles of the same burst, those that come with no success since
    /// the last decrease; after a success, the next raise is a plain one.
    #[test]
    fn raises_of_the_same_burst_keep_an_estimate_doubling() {
        let burst = |succeeded_first: bool| {
            let mut c = Cubic::new(&settings());
            c.adopt(Duration::from_millis(10), false, secs(0.0));
            c.estimated();
            if succeeded_first {
                c.on_success(secs(0.05));
            }
            // Another member's raise, then this member's own throttle.
            c.adopt(Duration::from_millis(20), true, secs(0.1));
            c.on_throttle(Duration::ZERO, secs(0.1));
            assert_eq!(rate(&c), 45.0);
            // Two doublings (2/3 s each) later.
            c.on_success(secs(0.1 + 4.0 / 3.0));
            rate(&c)
        };
        assert_eq!(burst(false), 180.0);
        assert!(burst(true) < 60.0, "{}", burst(true));
    }

    /// A cold start cut short (the member goes on alone at the rate it had): the
    /// rate grows from there as after a raise from 0, doubling every `recovery / 3`.
    #[test]
    fn a_cold_start_cut_short_grows_on_as_from_an_estimate() {
        let mut c = Cubic::new(&settings());
        c.cold(Duration::from_millis(100), 1.5);
        c.adopt(Duration::from_millis(100), false, secs(1.0));
        assert_eq!(rate(&c), 10.0);
        c.on_success(secs(1.0 + 2.0 / 3.0));
        assert_eq!(rate(&c), 20.0);
    }
}
