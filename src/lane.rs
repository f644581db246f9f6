//! Lanes: the units of capacity inside one upstream (a DynamoDB table's writes, a gRPC
//! method, a bucket the upstream names). Each lane has its own controller, pacer,
//! epoch, pause and shed places, so one table's throttling does not slow another's.
//! [`Lanes`] holds an upstream's lanes: `default` always, the rest made on first use,
//! bounded by `max_lanes` (later keys share `overflow`) and dropped when idle.
//!
//! A single-lane upstream reaches its default lane without a lock; other rules take a
//! read lock and one hash lookup per request.

use std::collections::HashMap;
use std::sync::atomic::{AtomicBool, AtomicU8, AtomicU64, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex, MutexGuard, OnceLock, PoisonError, RwLock};
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use bytes::Bytes;
use foldhash::fast::RandomState;

use crate::clock::{Clock, Instant};
use crate::config::UpstreamSettings;
use crate::controller::Controller;
use crate::cost::{self, Unit};
use crate::fleet::{COLD_GROWTH, COLD_RATE, Decision, Fleet, LaneLink};
use crate::hints::{self, Hint, Quota, Reading};
use crate::metrics::{LaneMetrics, Metrics, UpstreamMetrics};
use crate::observe::Goodput;
use crate::pacer::{Limits, ONE, Pacer, Shed, Slot, Would};
use crate::quota::{self, Falls};
use crate::route::{self, Rule};
use crate::shed::Spread;
use crate::sleeper::{Mode, Step};
use crate::throttle::{Preset, Signal, Verdict};

mod overloads;
mod slow_start;
pub use slow_start::SlowStart;

/// A fleet's raise keeps the phase of a member whose spacing is at most this (see
/// [`keeps_phase`]); a member that dispatches less often is shifted at random.
const KEEP_PHASE_UP_TO: Duration = Duration::from_secs(1);

/// Lanes by name. Names come from requests, but `max_lanes` bounds how many a client
/// can make, so a fast seeded hash is safe here.
type LaneMap = HashMap<Box<str>, Arc<Lane>, RandomState>;

/// The last throttle a lane was told of, for `/status`.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct LastThrottle {
    /// What gave it away: a signal (`status`, `body`, ...) or the upstream's own reason
    /// (`TableWriteProvisionedThroughputExceeded`).
    pub reason: String,
    /// The resource the upstream named, if it did (a table or index ARN).
    pub resource: Option<String>,
    /// When it came, in wall-clock time.
    pub at: SystemTime,
}

/// A pause or rate-limit window an upstream header asked for that was cut to
/// `max_pause`, as `/status` shows it while it lasts.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct CappedHint {
    pub header: Hint,
    /// What the header asked for.
    pub asked: Duration,
    /// When the cut-down pause or window ends.
    pub until: Instant,
}

/// What every lane of one upstream shares: the upstream's name, settings, clock and
/// counters, so a lane applies a verdict, a hint or a fleet decision on its own.
struct Common {
    upstream: Box<str>,
    settings: Arc<UpstreamSettings>,
    clock: Clock,
    /// Time zero for the controllers' clocks.
    origin: Instant,
    metrics: Arc<UpstreamMetrics>,
    /// Per header kind: a capped pause was logged (once is enough to find the cause).
    capped_logged: [AtomicBool; Hint::ALL.len()],
}

/// One lane's decision state.
pub struct Lane {
    name: Box<str>,
    common: Arc<Common>,
    /// Spacing, queue and pauses of this lane's dispatches.
    pacer: Pacer,
    controller: Mutex<Controller<fastrand::Rng>>,
    /// Where this lane's shed requests are told to come back.
    spread: Spread,
    /// This lane's series, or the `other` ones it shares.
    metrics: Arc<LaneMetrics>,
    /// Whether `metrics` are this lane's own.
    named: bool,
    /// The latest capped hint; written only when a header asks for too much.
    capped: Mutex<Option<CappedHint>>,
    last_throttle: Mutex<Option<LastThrottle>>,
    /// The header behind the lane's latest pause or floor: its index in [`Hint::ALL`]
    /// plus one, 0 for none. An atomic, since every answer with a quota sets it.
    pause_header: AtomicU8,
    /// The lane's link to the fleet, with `[fleet]`.
    fleet: OnceLock<LaneLink>,
    /// How many requests may go at once before the lane has learned anything.
    start: SlowStart,
    /// In observe mode, what the upstream let through, and the time zero of its clock.
    goodput: Option<(Goodput, Instant)>,
    /// How fast the upstream's rate-limit windows fall per answer.
    falls: Falls,
    /// How often overloads come, which decides whether one moves the interval.
    overloads: overloads::Overloads,
    /// What the lane's requests were reserved at and settled at.
    costs: Costs,
    /// The fleet epoch the lane last took its place in the fleet's schedule in
    /// ([`places`]); `u64::MAX` before the first.
    placed: AtomicU64,
}

impl std::fmt::Debug for Lane {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Lane").field("name", &self.name).finish()
    }
}

impl Lane {
    fn new(
        name: &str,
        common: &Arc<Common>,
        (rng, spread_seed): (fastrand::Rng, u64),
        metrics: Arc<LaneMetrics>,
        named: bool,
        reach: Duration,
    ) -> Lane {
        let settings = &common.settings;
        let clock = &common.clock;
        let limits = Limits {
            max_waiting: settings.queue.max_waiting,
        };
        let controller = Controller::new(&settings.sleeper, rng);
        let pacer = Pacer::with_clock(settings.sleeper.mode, limits, clock.clone());
        // `constant` starts at its interval.
        pacer.set_interval(controller.interval(), controller.epoch());
        metrics.interval.set(controller.interval().as_secs_f64());
        let start = SlowStart::new();
        let observe = settings.sleeper.mode == Mode::Observe;
        // Observe mode never holds a request, slow start's few included.
        if !controller.interval().is_zero() || observe {
            start.end();
        }
        Lane {
            name: name.into(),
            common: Arc::clone(common),
            pacer,
            controller: Mutex::new(controller),
            spread: Spread::new(clock.now(), reach, spread_seed),
            metrics,
            named,
            capped: Mutex::new(None),
            last_throttle: Mutex::new(None),
            pause_header: AtomicU8::new(0),
            fleet: OnceLock::new(),
            start,
            goodput: observe.then(|| (Goodput::default(), clock.now())),
            falls: Falls::default(),
            overloads: overloads::Overloads::default(),
            costs: Costs::default(),
            placed: AtomicU64::new(u64::MAX),
        }
    }

    /// The lane's link to the fleet, with `[fleet]`.
    pub fn fleet(&self) -> Option<&LaneLink> {
        self.fleet.get()
    }

    /// Hands the controller's interval to the pacer and the lane's gauge; returns the
    /// spacing the pacer keeps. With a fleet the controller's interval is the fleet's,
    /// and this member keeps it over its share.
    fn pace(&self, controller: &Controller<fastrand::Rng>) -> Duration {
        self.pace_keeping(controller, false)
    }

    /// [`Lane::pace`]; `longer_too` as [`Pacer::set_interval_keeping`] takes it.
    fn pace_keeping(&self, controller: &Controller<fastrand::Rng>, longer_too: bool) -> Duration {
        let interval = match self.fleet.get() {
            Some(link) => link.pacing(controller.interval()),
            None => controller.interval(),
        };
        self.pacer
            .set_interval_keeping(interval, controller.epoch(), longer_too);
        if self.named {
            self.metrics.interval.set(interval.as_secs_f64());
        }
        interval
    }

    /// Holds the lane's first requests until the fleet's first answer (see
    /// [`LaneLink::hold_cold`]): the pacer alone paces, at the spacing a member the
    /// summary does not count yet keeps, and its first slot at a random point of it.
    fn hold(&self, link: &LaneLink) {
        let mut controller = self.lock();
        // The sync task records an answer before it hands the lane the decision, which
        // needs this lock: an answer already recorded is the lane's, not the hold's.
        if !link.held() {
            return;
        }
        let spacing = link.pacing(Duration::from_secs_f64(1.0 / COLD_RATE));
        self.pacer
            .set_interval_keeping(spacing, controller.epoch(), true);
        self.pacer.phase_first(controller.unit());
        self.pacer.set_provisional(true);
    }

    /// Tells the fleet of a controller step that moved the interval.
    fn stepped(&self, controller: &Controller<fastrand::Rng>, step: Step) {
        if let Some(link) = self.fleet.get() {
            let epoch = controller.epoch();
            let raised_from = (step == Step::Up).then(|| epoch.saturating_sub(1));
            link.learned(controller.interval(), epoch, raised_from);
        }
    }

    /// Takes what the fleet decided (from the fleet's sync task). Returns the spacing
    /// the pacer keeps.
    fn adopt(&self, decision: &Decision) -> Duration {
        let now = self.since_origin(self.common.clock.now());
        let mut controller = self.lock();
        if decision.rescale != 1.0 {
            controller.rescale(decision.rescale);
        }
        let raised = decision.epoch > controller.epoch() || decision.outraised;
        // A cold start's end (its spacing still provisional), nothing learned yet, or
        // an unpaced fleet: the members dispatched in step.
        let in_step = decision.first
            || self.pacer.is_provisional()
            || controller.epoch() == 0
            || controller.interval().is_zero();
        let keep = keeps_phase(raised, in_step, self.pacer.spacing());
        if decision.cold {
            controller.cold(decision.interval, COLD_GROWTH, now);
        } else {
            controller.adopt(decision.interval, decision.epoch, decision.outraised, now);
        }
        if decision.first {
            controller.estimated();
        }
        let spacing = self.pace_keeping(&controller, keeps_progress(decision.cold, keep, raised));
        if decision.cold {
            self.pacer.phase_first(controller.unit());
        }
        self.pacer.set_provisional(decision.cold);
        let new_epoch = self.placed.load(Ordering::Relaxed) != decision.epoch;
        match decision
            .place
            .filter(|_| places(new_epoch, in_step, spacing))
        {
            Some(place) => {
                self.placed.store(decision.epoch, Ordering::Relaxed);
                let ahead = spacing.mul_f64(place.ahead(decision.share));
                // Members in step had no phases to keep: each takes its first place
                // from now, as a random shift would have spread them.
                self.pacer.place(ahead, !in_step);
            }
            // Out of the step the members dispatched in when the burst came.
            None if raised && !keep && !spacing.is_zero() => {
                self.pacer.stagger(controller.unit() - 0.5);
            }
            None => {}
        }
        spacing
    }

    /// The lane's name: `default`, `orders:write`, `/pkg.Service/Method`, ...
    pub fn name(&self) -> &str {
        &self.name
    }

    /// Whether the lane has its own series on `/metrics`.
    pub fn named(&self) -> bool {
        self.named
    }

    /// The lane's series, or the `other` ones it shares.
    pub fn metrics(&self) -> &LaneMetrics {
        &self.metrics
    }

    /// The current interval, as the pacer applies it.
    pub fn interval(&self) -> Duration {
        self.pacer.interval()
    }

    /// Requests waiting for a slot in this lane.
    pub fn waiting(&self) -> usize {
        self.pacer.waiting()
    }

    /// The controller, briefly; never held across `.await`.
    fn lock(&self) -> MutexGuard<'_, Controller<fastrand::Rng>> {
        // A panic while holding the lock cannot leave the controller half-updated in a
        // way that matters more than stopping the proxy would.
        self.controller
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
    }

    /// Remembers a throttle for `/status`.
    pub(crate) fn throttled(&self, reason: &str, resource: Option<&str>, at: SystemTime) {
        let unix = at.duration_since(UNIX_EPOCH).unwrap_or_default();
        self.metrics.throttled(reason, unix.as_secs_f64());
        *self
            .last_throttle
            .lock()
            .unwrap_or_else(PoisonError::into_inner) = Some(LastThrottle {
            reason: reason.to_string(),
            resource: resource.map(str::to_string),
            at,
        });
    }

    /// The last throttle this lane was told of.
    pub fn last_throttle(&self) -> Option<LastThrottle> {
        self.last_throttle
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .clone()
    }

    /// Counts a success the upstream answered, in observe mode (reading the clock
    /// only then).
    fn count_success(&self) {
        if let Some((goodput, origin)) = &self.goodput {
            goodput.succeeded(nanos_since(*origin, self.common.clock.now()));
        }
    }

    /// Whether a throttle reaches the controller as one: always, except in observe
    /// mode when pacing at the interval learned so far would not have met it (see
    /// [`crate::observe`]).
    fn would_throttle(&self, now: Instant) -> bool {
        self.goodput.as_ref().is_none_or(|(goodput, origin)| {
            goodput.would_throttle(self.pacer.interval(), nanos_since(*origin, now))
        })
    }

    /// Remembers the header behind a pause or floor, for `/status`.
    fn paused_by(&self, header: Hint) {
        self.metrics.paused(header).inc();
        self.pause_header.store(header as u8 + 1, Ordering::Relaxed);
    }

    /// The header behind the lane's latest pause or floor.
    pub fn pause_header(&self) -> Option<Hint> {
        let stored = usize::from(self.pause_header.load(Ordering::Relaxed));
        stored
            .checked_sub(1)
            .and_then(|i| Hint::ALL.get(i).copied())
    }

    /// Dispatches over the last second against the rate the spacing in force allows:
    /// 1 runs at the limit; 0 while unpaced or idle. In `observe` mode it can pass 1.
    pub fn near_limit(&self, now: Instant) -> f64 {
        let spacing = self.pacer.spacing();
        match self.pacer.observed_spacing(now) {
            Some(observed) if !spacing.is_zero() && !observed.is_zero() => {
                spacing.as_secs_f64() / observed.as_secs_f64()
            }
            _ => 0.0,
        }
    }

    /// Whether the lane had a free slot it did not use for `idle` by `now`: nothing
    /// waits, and its last dispatch plus the interval lies `idle` back.
    pub fn idle_for(&self, idle: Duration, now: Instant) -> bool {
        self.pacer.waiting() == 0
            && now.saturating_duration_since(self.pacer.last_active() + self.pacer.interval())
                >= idle
    }

    /// Time since the controllers' time zero.
    fn since_origin(&self, now: Instant) -> Duration {
        now.saturating_duration_since(self.common.origin)
    }

    /// Waits for a slot (or is shed at once, told when to come back; see
    /// [`crate::shed::Spread`]) and counts the wait; `patient`: see
    /// [`crate::pacer::Pacer::acquire_with`]; `cost`: what the request is reserved
    /// at, in thousandths of the lane's unit ([`ONE`] where it counts requests). A
    /// lane that left a slot unused for `idle_decay` first forgets its throttles.
    pub async fn acquire(&self, deadline: Instant, patient: bool, cost: u64) -> Result<Slot, Shed> {
        let clock = &self.common.clock;
        if let Some(link) = self.fleet() {
            link.arrived();
        }
        if !self.pacer.interval().is_zero() {
            self.forget_if_idle(clock.now());
        }
        let started = if self.start.is_over() {
            Duration::ZERO
        } else if self.pacer.interval().is_zero() {
            self.start.enter(clock, deadline).await
        } else {
            self.start.end();
            Duration::ZERO
        };
        let slot = match self.pacer.acquire_costing(deadline, patient, cost).await {
            Ok(slot) if started.is_zero() => slot,
            // Counted as waiting, not as a sleep: the sleeper did not hold it.
            Ok(slot) => Slot {
                waited: slot.waited + started,
                ..slot
            },
            Err(shed) => {
                if let Some(link) = self.fleet() {
                    link.refused();
                }
                let now = clock.now();
                let spacing = self.pacer.spacing();
                return Err(Shed {
                    retry_after: self.spread.retry_after(now, shed.retry_after, spacing),
                    ..shed
                });
            }
        };
        self.metrics.dispatches.inc();
        if self.unit() != Unit::Requests {
            self.metrics.units_reserved.inc_by(self.unit().count(cost));
            self.costs.dispatched(cost);
        }
        let waited = slot.waited.as_secs_f64();
        let upstream = &self.common.metrics;
        upstream.queue_wait.observe(waited);
        if slot.held {
            upstream.sleeps.inc();
            upstream.sleep_seconds.inc_by(waited);
        }
        match slot.would {
            None => {}
            Some(Would::Wait(wait)) => {
                upstream.would_wait.inc();
                upstream.would_wait_seconds.inc_by(wait.as_secs_f64());
            }
            Some(Would::Shed) => upstream.would_shed.inc(),
        }
        Ok(slot)
    }

    /// Takes the interval of a lane that left its slots unused for `idle_decay` to
    /// 0, as a run of successes would: a throttle storm at night does not tax the
    /// morning's traffic.
    pub fn forget_if_idle(&self, now: Instant) {
        let decay = self.common.settings.lanes.idle_decay;
        // A fleet's interval is the fleet's: one idle member does not lower it.
        if decay.is_zero() || self.fleet().is_some() || !self.idle_for(decay, now) {
            return;
        }
        let mut controller = self.lock();
        if controller.forget() {
            tracing::debug!(upstream = %self.common.upstream, lane = self.name(), "idle lane forgot its throttles");
            self.common.metrics.decreases.inc();
            self.publish(&controller);
        }
    }

    /// Feeds a verdict to the lane's controller; `slot` is the lane's slot of the
    /// attempt (its epoch decides whether a throttle raises); `pause` is the
    /// throttle's requested delay and the header that asked for it, which holds the
    /// lane (capped by `max_pause` and `max_interval`). Upstream-level counts of the
    /// verdict are the caller's.
    pub fn record(&self, slot: &Slot, verdict: Option<Verdict>, pause: Option<(Duration, Hint)>) {
        let clock = &self.common.clock;
        match verdict {
            Some(Verdict::Throttle(signal)) => {
                self.metrics.throttle(signal).inc();
                self.throttled(signal.as_str(), None, clock.wall());
                if let Some(link) = self.fleet.get() {
                    link.refused();
                }
                let now = clock.now();
                if let Some((asked, header)) = pause {
                    let delay = self.cap(asked, header, now);
                    self.paused_by(header);
                    if self.pacer.paused_until(now).is_none() {
                        tracing::info!(upstream = %self.common.upstream, lane = self.name(), pause_ms = u64::try_from(delay.as_millis()).unwrap_or(u64::MAX), "paused by the upstream's Retry-After");
                    }
                    self.pacer.pause_until(now + delay);
                }
                if !self.would_throttle(now) {
                    // Observe mode: pacing would not have met this throttle.
                    return self.succeeded(slot);
                }
                if signal == Signal::Overload && !self.overloads.frequent() {
                    // A rare overload: the request's retry backs off; the rate stays.
                    return self.start.answered(false, false);
                }
                let mut spacing = self.pacer.observed_spacing(now);
                if let Some(link) = self.fleet.get() {
                    spacing = spacing.map(|s| link.fleet_spacing(s));
                }
                let mut controller = self.lock();
                let at = self.since_origin(now);
                let step = if signal == Signal::Overload {
                    controller.on_overload(slot.epoch, spacing, at)
                } else {
                    controller.on_throttle(slot.epoch, spacing, at)
                };
                self.apply(&controller, step);
                // After the raise, so the requests it lets go meet the new interval.
                self.start.answered(true, false);
            }
            Some(Verdict::Success) => {
                self.overloads.success();
                self.count_success();
                self.succeeded(slot);
            }
            Some(Verdict::Failure) | None => self.start.answered(false, false),
        }
    }

    /// What the lane paces in.
    pub fn unit(&self) -> Unit {
        self.common.settings.lanes.cost
    }

    /// An answer told what the request of `slot` cost (`actual`, thousandths of the
    /// lane's unit): the schedule moves by the difference from its reservation, and
    /// the estimate's error is counted. OpenAI's limiter counts a request at its
    /// estimate (the prompt's characters over four and all of `max_tokens`) whatever
    /// the answer used, so there an answer only ever adds.
    pub fn settle_cost(&self, slot: &Slot, actual: u64) {
        if self.unit() == Unit::Requests {
            return;
        }
        let charged = if self.common.settings.preset == Preset::OpenAi {
            actual.max(slot.cost)
        } else {
            actual
        };
        self.pacer.settle(slot.cost, charged);
        self.costs.settled(actual);
        self.metrics.units_settled.inc_by(self.unit().count(actual));
        if slot.cost > 0 {
            #[allow(clippy::cast_precision_loss, reason = "a ratio of costs")]
            let ratio = actual as f64 / slot.cost as f64;
            self.metrics.cost_error.observe(ratio);
        }
    }

    /// Settles the cost `answer` reports for this lane's request of `slot`, if it
    /// reports one: a DynamoDB lane (`TABLE:access`) takes its table's share.
    pub fn settle_answer(&self, slot: &Slot, answer: &cost::answer::AnswerCost) {
        let table = match self.unit() {
            Unit::Capacity => self.name().split_once(':').map(|(table, _)| table),
            _ => None,
        };
        if let Some(actual) = answer.cost(table) {
            self.settle_cost(slot, actual);
        }
    }

    /// The lane's units reserved and settled so far, for `/status` (in its units).
    pub fn costs(&self) -> (f64, f64) {
        let (reserved, settled) = self.costs.totals();
        (self.unit().count(reserved), self.unit().count(settled))
    }

    /// Tells the controller of a success.
    fn succeeded(&self, slot: &Slot) {
        self.start.answered(false, true);
        // Successes at interval 0 change nothing: no lock on the fast path.
        if self.pacer.interval().is_zero() {
            self.common.metrics.invocations.inc();
            return;
        }
        let at = self.since_origin(self.common.clock.now());
        let mut controller = self.lock();
        let step = controller.on_success(slot.epoch, at);
        self.apply(&controller, step);
    }

    /// Applies an answer's rate-limit windows as [`quota::decide`] says: go, pace
    /// until the reset, or pause until it (a `ratelimit` throttle). The window counts
    /// as at most `max_pause` long.
    pub fn apply_quota(&self, windows: &Reading<'_>, now: Instant) {
        let metrics = &self.common.metrics;
        let in_flight = u64::try_from(metrics.in_flight.get()).unwrap_or(0);
        let spend = self.common.settings.quota;
        let at = self.since_origin(now);
        let decide = |window: Quota, fall: &quota::Fall| {
            quota::decide(spend, window, in_flight, fall.observe(window, at, 1.0))
        };
        if self.unit() != Unit::Requests {
            return self.apply_unit_quota(windows, now);
        }
        let requests = windows.requests.map(|w| decide(w, &self.falls.requests));
        let tokens = windows.tokens.map(|w| decide(w, &self.falls.tokens));
        let decision = match (requests, tokens) {
            (Some(r), Some(t)) => quota::stricter(r, t),
            (r, t) => r.or(t).unwrap_or(quota::Decision::Go),
        };
        match decision {
            quota::Decision::Go => {
                if self.pacer.floor(now).is_some() {
                    self.pacer.set_floor(Duration::ZERO, now);
                }
            }
            quota::Decision::Pace { spacing, until } => {
                let until = self.cap(until, Hint::RateLimit, now);
                self.paused_by(Hint::RateLimit);
                self.pacer.set_floor(spacing.min(until), now + until);
            }
            quota::Decision::Pause { until } => self.quota_pause(until, now),
        }
    }

    /// [`Lane::apply_quota`] for a lane that paces in units: the token window sets
    /// the spacing per token (so a larger mix is spaced wider at once), the request
    /// window the least gap between any two requests; a spent one of either pauses.
    fn apply_unit_quota(&self, windows: &Reading<'_>, now: Instant) {
        let metrics = &self.common.metrics;
        let in_flight = u64::try_from(metrics.in_flight.get()).unwrap_or(0);
        let spend = self.common.settings.quota;
        let at = self.since_origin(now);
        let mean = self.costs.mean().max(1.0);
        let requests = windows.requests.map(|w| {
            let fall = self.falls.requests.observe(w, at, 1.0);
            quota::decide(spend, w, in_flight, fall)
        });
        // The window's tokens per answer over this lane's per request: how many of
        // the window's tokens one of the lane's costs. OpenAI's window counts what
        // the lane estimates (prompt and `max_tokens`), so at least one: more when
        // others share the window. Anthropic's input or output window counts a share.
        let least = if self.common.settings.preset == Preset::Anthropic {
            0.25
        } else {
            1.0
        };
        let mut share = 1.0;
        #[allow(
            clippy::cast_precision_loss,
            clippy::cast_possible_truncation,
            clippy::cast_sign_loss,
            reason = "token counts"
        )]
        let tokens = windows.tokens.map(|w| {
            let per_answer = self.falls.tokens.observe(w, at, mean);
            share = (per_answer / mean).max(least);
            // What waits counts with what is out: released together, it would land
            // on the window at once, before any answer shows it.
            let out = in_flight as f64 * per_answer + self.pacer.queued_cost() as f64;
            quota::decide(spend, w, out as u64, 1.0)
        });
        let mut paused = false;
        for decision in [requests, tokens].into_iter().flatten() {
            if let quota::Decision::Pause { until } = decision {
                paused = true;
                self.quota_pause(until, now);
            }
        }
        if paused {
            return;
        }
        match tokens {
            Some(quota::Decision::Pace { spacing, until }) => {
                let until = self.cap(until, Hint::RateLimit, now);
                self.paused_by(Hint::RateLimit);
                // Per token of the window; the pacer's unit is a thousand of the lane's.
                #[allow(clippy::cast_precision_loss, reason = "ONE is 1000")]
                let per_unit =
                    Duration::try_from_secs_f64(spacing.as_secs_f64() * share * ONE as f64)
                        .unwrap_or(until);
                self.pacer.set_floor(per_unit.min(until), now + until);
            }
            _ => {
                if self.pacer.floor(now).is_some() {
                    self.pacer.set_floor(Duration::ZERO, now);
                }
            }
        }
        match requests {
            Some(quota::Decision::Pace { spacing, until }) => {
                let until = self.cap(until, Hint::RateLimit, now);
                self.paused_by(Hint::RateLimit);
                self.pacer
                    .set_request_floor(spacing.min(until), now + until);
            }
            _ => self.pacer.set_request_floor(Duration::ZERO, now),
        }
    }

    /// Holds the lane until a spent rate-limit window comes back (`until` from now).
    fn quota_pause(&self, until: Duration, now: Instant) {
        let metrics = &self.common.metrics;
        let until = self.cap(until, Hint::RateLimit, now);
        self.paused_by(Hint::RateLimit);
        metrics.throttle(Signal::RateLimit).inc();
        self.metrics.throttle(Signal::RateLimit).inc();
        if self.pacer.paused_until(now).is_none() {
            tracing::info!(upstream = %self.common.upstream, lane = self.name(), pause_ms = u64::try_from(until.as_millis()).unwrap_or(u64::MAX), "paused until the upstream's rate-limit window resets");
        }
        self.pacer.pause_until(now + until);
    }

    /// Cuts a pause a header asked for to `max_pause` (and `max_interval`); a cut is
    /// counted, remembered for `/status` and logged the first time each header does it.
    fn cap(&self, asked: Duration, header: Hint, now: Instant) -> Duration {
        let settings = &self.common.settings;
        let max = settings.max_pause.min(settings.sleeper.max_interval);
        let (pause, capped) = hints::cap(asked, max);
        if !capped {
            return pause;
        }
        self.common.metrics.hint_capped(header).inc();
        let until = now + pause;
        *self.capped.lock().unwrap_or_else(PoisonError::into_inner) = Some(CappedHint {
            header,
            asked,
            until,
        });
        if !self.common.capped_logged[header as usize].swap(true, Ordering::Relaxed) {
            tracing::warn!(
                upstream = %self.common.upstream,
                header = header.as_str(),
                asked_s = asked.as_secs_f64(),
                max_pause_s = max.as_secs_f64(),
                "the upstream asked for a longer pause than max_pause; capped (logged once per header)"
            );
        }
        pause
    }

    /// The latest capped hint while its pause or window lasts.
    pub fn capped_hint(&self) -> Option<CappedHint> {
        let now = self.common.clock.now();
        let capped = *self.capped.lock().unwrap_or_else(PoisonError::into_inner);
        capped.filter(|c| c.until > now)
    }

    /// The rate-limit floor in force (the least spacing) and when it ends, in
    /// wall-clock time.
    pub fn rate_limit_floor(&self) -> Option<(Duration, SystemTime)> {
        let clock = &self.common.clock;
        let now = clock.now();
        let (spacing, end) = self.pacer.floor(now)?;
        Some((spacing, clock.wall() + (end - now)))
    }

    /// When the lane's pause ends, in wall-clock time.
    pub fn paused_until(&self) -> Option<SystemTime> {
        let clock = &self.common.clock;
        let now = clock.now();
        let end = self.pacer.paused_until(now)?;
        Some(clock.wall() + (end - now))
    }

    /// How much of the lane's pause is left at `now`.
    pub fn pause_left(&self, now: Instant) -> Option<Duration> {
        self.pacer.paused_until(now).map(|end| end - now)
    }

    /// The epoch the lane had at `at`.
    pub fn epoch_at(&self, at: Instant) -> u64 {
        self.pacer.epoch_at(at)
    }

    /// Puts the interval back to 0 and lifts any pause (admin reset).
    pub fn reset(&self) {
        let mut controller = self.lock();
        controller.reset(&self.common.settings.sleeper);
        self.pacer.lift_pause();
        self.publish(&controller);
    }

    fn apply(&self, controller: &Controller<fastrand::Rng>, step: Option<Step>) {
        let Some(step) = step else {
            return;
        };
        let metrics = &self.common.metrics;
        metrics.invocations.inc();
        match step {
            Step::Up => metrics.increases.inc(),
            Step::Down => metrics.decreases.inc(),
            Step::Unchanged => return,
        }
        self.stepped(controller, step);
        self.publish(controller);
    }

    /// Hands the controller's interval to the pacer and gauges. The upstream's
    /// interval gauge, the largest over its lanes, is set at each scrape
    /// (`Control::refresh_gauges`): finding it walks every lane, too much for a step.
    fn publish(&self, controller: &Controller<fastrand::Rng>) {
        let before = self.pacer.interval();
        let interval = self.pace(controller);
        let interval_ms = interval.as_secs_f64() * 1e3;
        let (upstream, name) = (&self.common.upstream, self.name());
        if before.is_zero() && !interval.is_zero() {
            tracing::info!(upstream = %upstream, lane = name, interval_ms, "the upstream throttles; pacing requests");
        } else if !before.is_zero() && interval.is_zero() {
            tracing::info!(upstream = %upstream, lane = name, "throttling over; requests go at once");
        }
        tracing::debug!(upstream = %upstream, lane = name, interval_ms, "interval changed");
    }
}

/// A lane's reserved and settled costs (thousandths), and the mean reservation per
/// request as a moving average; atomics, as every dispatch adds to them.
#[derive(Debug, Default)]
struct Costs {
    reserved: AtomicU64,
    settled: AtomicU64,
    /// f64 bits; 0 before the first dispatch.
    mean: AtomicU64,
}

impl Costs {
    fn dispatched(&self, cost: u64) {
        self.reserved.fetch_add(cost, Ordering::Relaxed);
        #[allow(clippy::cast_precision_loss, reason = "a cost")]
        let cost = cost as f64;
        let mean = f64::from_bits(self.mean.load(Ordering::Relaxed));
        let next = if mean > 0.0 {
            0.9 * mean + 0.1 * cost
        } else {
            cost
        };
        self.mean.store(next.to_bits(), Ordering::Relaxed);
    }

    fn settled(&self, cost: u64) {
        self.settled.fetch_add(cost, Ordering::Relaxed);
    }

    /// The mean reservation per request (thousandths); 0 before any.
    fn mean(&self) -> f64 {
        f64::from_bits(self.mean.load(Ordering::Relaxed))
    }

    fn totals(&self) -> (u64, u64) {
        (
            self.reserved.load(Ordering::Relaxed),
            self.settled.load(Ordering::Relaxed),
        )
    }
}

/// Whether a member that takes a fleet's raise (`raised`) at `spacing` keeps its
/// phase: its next slot stretched with the spacing, not counted afresh from its last
/// dispatch nor shifted at random. In a paced fleet the members' phases are spread
/// already, and both of those bunched them: a gap counted afresh leaves a hole of the
/// raise's size in the fleet's schedule at every raise, and a random shift draws the
/// phases again, clumped as random phases are (32 members held a sawtooth of 94 to
/// 104/s, its lowest seconds at 0.89 to 0.92 of the capacity in real runs; with
/// phases kept, 0.94 to 0.96). Members that were `in_step` (a cold start's end, an unpaced fleet's first
/// raise) take their places in the fleet's schedule instead ([`places`]; shifted at
/// random without one). So do members that dispatch less often than
/// [`KEEP_PHASE_UP_TO`]: in `easeoff simulate`, 128 members at 1.65 s spacings kept
/// their first random phases' clumps, at 0.73 and 0.80 of the capacity in two seeds
/// of four (measured, not derived: 64 members at 0.64 s gained from kept phases).
fn keeps_phase(raised: bool, in_step: bool, spacing: Duration) -> bool {
    raised && !in_step && !spacing.is_zero() && spacing <= KEEP_PHASE_UP_TO
}

/// Whether a fleet decision's new spacing stretches only what is left of the gap
/// (`Pacer::set_interval_keeping`'s `longer_too`) rather than counting a longer one
/// from the last dispatch: for a `cold` start (its spacing moves with the share as the
/// fleet is counted, not with a throttle), for a raise that keeps the member's phase
/// (`keep`, [`keeps_phase`]), and for a decision that is no raise, where only the
/// member's share moved. Counted from the last dispatch, a share that fell moved the
/// member's next slot later by the whole difference: at a cold start's end, members
/// placed on a share read from a summary a sync old moved their slots about 2 s later
/// at the next sync, and 1,000 members on 100/s in `easeoff simulate` sent 57/s for a
/// second (seed 1).
fn keeps_progress(cold: bool, keep: bool, raised: bool) -> bool {
    cold || keep || !raised
}

/// Whether a member takes its place in the fleet's schedule (`fleet::Place`) at a
/// decision of an epoch it was not placed in yet (`new_epoch`): where a raise would
/// otherwise shift it at random (members `in_step`, and those that dispatch less
/// often than [`KEEP_PHASE_UP_TO`]), its own raise included.
/// Random phases bunch, and a raise drew them again: placed, members with equal
/// shares dispatch evenly spread over their spacing (in `easeoff simulate`, 256
/// members on 100/s went from 0.79 to 0.81 of the capacity to a median of 0.978,
/// their dispatches per tenth of a second from 1 to 22 to 8 to 12). Members that
/// keep their phase at a raise keep it: placing them too gained nothing.
fn places(new_epoch: bool, in_step: bool, spacing: Duration) -> bool {
    new_epoch && !spacing.is_zero() && (in_step || spacing > KEEP_PHASE_UP_TO)
}

fn nanos_since(origin: Instant, now: Instant) -> u64 {
    u64::try_from(now.saturating_duration_since(origin).as_nanos()).unwrap_or(u64::MAX)
}

/// The slots one attempt holds: one per lane it takes, the first inline. It ends in
/// one settling call that takes it whole ([`Pass::settle`], through
/// `Control::settle`), which yields the [`Settled`] the request path must return.
#[must_use = "an attempt's pass is settled, or its lanes never hear how it went"]
#[derive(Debug)]
pub struct Pass {
    first: (Arc<Lane>, Slot),
    more: Vec<(Arc<Lane>, Slot)>,
}

impl Pass {
    /// A pass of one slot.
    pub fn one(lane: Arc<Lane>, slot: Slot) -> Pass {
        Pass {
            first: (lane, slot),
            more: Vec::new(),
        }
    }

    /// Adds the slot of a further lane.
    pub fn add(&mut self, lane: Arc<Lane>, slot: Slot) {
        self.more.push((lane, slot));
    }

    /// The first lane taken.
    pub fn lane(&self) -> &Arc<Lane> {
        &self.first.0
    }

    /// The slot of the first lane taken (the one the request is timed by).
    pub fn slot(&self) -> &Slot {
        &self.first.1
    }

    /// Every lane taken, with its slot.
    pub fn iter(&self) -> impl Iterator<Item = (&Arc<Lane>, &Slot)> {
        std::iter::once((&self.first.0, &self.first.1)).chain(self.more.iter().map(|(l, s)| (l, s)))
    }

    /// Whether the pass spans more than one lane.
    pub fn is_many(&self) -> bool {
        !self.more.is_empty()
    }

    /// The slot this pass holds in `lane`, if it holds one.
    pub fn slot_in(&self, lane: &Lane) -> Option<&Slot> {
        self.iter()
            .find(|(held, _)| std::ptr::eq(held.as_ref(), lane))
            .map(|(_, slot)| slot)
    }

    /// A pass for `lane` standing in for this one when the answer named a lane the
    /// attempt did not hold (the upstream's own bucket, a hot key's lane made after
    /// it went): it counts as dispatched in the epoch that lane had when it went.
    pub fn for_lane(&self, lane: Arc<Lane>) -> Pass {
        if let Some(slot) = self.slot_in(&lane) {
            let slot = *slot;
            return Pass::one(lane, slot);
        }
        let slot = Slot {
            epoch: lane.epoch_at(self.slot().dispatched_at),
            ..*self.slot()
        };
        Pass::one(lane, slot)
    }

    /// Ends the attempt: `settle` tells the lanes how it went.
    pub fn settle(self, settle: impl FnOnce(&Pass)) -> Settled {
        settle(&self);
        Settled {
            backoff: Duration::ZERO,
        }
    }

    /// Hands the pass to what settles it later (a watched body); the request path is
    /// done with it.
    pub fn defer(self) -> (Deferred, Settled) {
        let settled = Settled {
            backoff: Duration::ZERO,
        };
        (Deferred(self), settled)
    }
}

/// Proof that an attempt's [`Pass`] was settled, or handed to what settles it: the
/// request path's steps that hold a pass return one, so a path that drops a pass
/// unsettled does not compile.
#[must_use]
#[derive(Debug)]
pub struct Settled {
    backoff: Duration,
}

impl Settled {
    /// How long the connection backoff turns requests away after an attempt that
    /// could not connect; zero otherwise.
    pub fn backoff(&self) -> Duration {
        self.backoff
    }

    /// The same proof, with the backoff the attempt's failure started.
    pub(crate) fn with_backoff(self, backoff: Duration) -> Settled {
        Settled { backoff }
    }
}

/// A pass handed on to be settled later (when a watched body ends).
#[derive(Debug)]
pub struct Deferred(Pass);

impl Deferred {
    /// The pass, to settle now.
    pub fn into_pass(self) -> Pass {
        self.0
    }

    /// The pass, to look at before it is settled.
    pub fn pass(&self) -> &Pass {
        &self.0
    }
}

/// The lanes one request takes a slot in, in order, and the key the upstream's named
/// bucket is learned by (`from_response`).
#[derive(Clone, Debug)]
pub struct Route {
    /// The first lane, which times the request.
    pub first: Arc<Lane>,
    /// Further lanes (a batch naming several tables, a hot key's lane).
    pub more: Vec<Arc<Lane>>,
    /// The request key, when the upstream may name its bucket.
    pub key: Option<Box<str>>,
    /// A single-item DynamoDB request's key, whose hot-key lane ([`Route::hot_lane`])
    /// it takes once a throttle named a hot partition.
    pub hot: Option<HotKey>,
    /// A DynamoDB batch, whose answer may be a partial throttle.
    pub batch: bool,
    /// What the request is reserved at in `first` (thousandths of its lanes' unit).
    pub cost: u64,
    /// What it is reserved at in each of `more`, where that differs (a batch's other
    /// tables); a lane past the end takes `cost`.
    pub more_costs: Vec<u64>,
    /// Whether the answer can say what the request cost ([`cost::settles`]).
    pub settles: bool,
}

/// Where a single-item DynamoDB request's partition key is: read and hashed only when
/// a hot-key lane is asked for, which nearly no request needs.
#[derive(Clone, Debug)]
pub struct HotKey {
    /// The request body, as held for replay.
    pub body: Bytes,
    /// `Key` or `Item`.
    pub field: &'static str,
}

impl Route {
    /// Only `lane`.
    pub fn one(lane: Arc<Lane>) -> Route {
        Route {
            first: lane,
            more: Vec::new(),
            key: None,
            hot: None,
            batch: false,
            cost: ONE,
            more_costs: Vec::new(),
            settles: false,
        }
    }

    /// What the request is reserved at in `more[i]`.
    pub fn cost_in_more(&self, i: usize) -> u64 {
        self.more_costs.get(i).copied().unwrap_or(self.cost)
    }

    /// The name of the hot-key lane the request would take: named only when asked,
    /// as nearly every request never needs it.
    pub fn hot_lane(&self) -> Option<String> {
        let hot = self.hot.as_ref()?;
        let key = route::dynamodb::partition_key_in(hot.field, &hot.body, None)?;
        let (table, suffix) = self.first.name().rsplit_once(':')?;
        Some(route::hot_key_name(table, suffix, key))
    }
}

/// One upstream's lanes.
pub struct Lanes {
    rule: Rule,
    default: Arc<Lane>,
    /// Every lane but `default`, by name.
    others: RwLock<LaneMap>,
    /// Request key → the bucket the upstream named for it (`from_response`).
    learned: RwLock<HashMap<Box<str>, Box<str>, RandomState>>,
    /// Hot-key lanes alive; requests look for theirs only while there are some.
    hot: AtomicUsize,
    /// Lanes with their own series, `default` included.
    named: AtomicUsize,
    /// The series lanes past `metrics_lanes` share.
    other_metrics: Arc<LaneMetrics>,
    common: Arc<Common>,
    settings: Arc<UpstreamSettings>,
    clock: Clock,
    metrics: Metrics,
    rng: Mutex<fastrand::Rng>,
    reach: Duration,
    /// The shutdown drain's deadline, once it began.
    drain_by: Mutex<Option<Instant>>,
    /// The fleet every lane joins, once the upstream joined it.
    fleet: OnceLock<Arc<Fleet>>,
}

impl Lanes {
    /// The lanes of one upstream, `default` made at once with the random source `rng`
    /// and the shed seed given (so a simulation is reproducible); later lanes draw
    /// theirs from a generator seeded from `rng` without drawing from it.
    pub fn new(
        settings: Arc<UpstreamSettings>,
        clock: Clock,
        metrics: &Metrics,
        (rng, spread_seed): (fastrand::Rng, u64),
        reach: Duration,
    ) -> Lanes {
        let later = fastrand::Rng::with_seed(rng.get_seed() ^ 0x9e37_79b9_7f4a_7c15);
        let upstream: Box<str> = settings.name.as_str().into();
        let common = Arc::new(Common {
            metrics: Arc::new(metrics.upstream(&upstream)),
            upstream: upstream.clone(),
            settings: Arc::clone(&settings),
            origin: clock.now(),
            clock: clock.clone(),
            capped_logged: Hint::ALL.map(|_| AtomicBool::new(false)),
        });
        let lanes = &settings.lanes;
        let rule = Rule::of(
            settings.preset,
            lanes.by.as_deref(),
            lanes.from_response.is_some(),
        );
        let default_metrics = Arc::new(metrics.lane(&upstream, route::DEFAULT));
        let default = Arc::new(Lane::new(
            route::DEFAULT,
            &common,
            (rng, spread_seed),
            default_metrics,
            true,
            reach,
        ));
        // `constant` starts at its interval, which the upstream's gauge shows.
        default.publish(&default.lock());
        Lanes {
            rule,
            default,
            others: RwLock::new(LaneMap::default()),
            learned: RwLock::new(HashMap::default()),
            hot: AtomicUsize::new(0),
            named: AtomicUsize::new(1),
            other_metrics: Arc::new(metrics.lane(&upstream, "other")),
            common,
            settings,
            clock,
            metrics: metrics.clone(),
            rng: Mutex::new(later),
            reach,
            drain_by: Mutex::new(None),
            fleet: OnceLock::new(),
        }
    }

    /// Joins the fleet: `default` now, every later lane when it is made.
    pub fn join_fleet(&self, fleet: Arc<Fleet>) {
        if self.fleet.set(fleet).is_ok() {
            self.enlist(&self.default);
        }
    }

    /// The upstream's own counters, which its lanes update.
    pub fn upstream_metrics(&self) -> &Arc<UpstreamMetrics> {
        &self.common.metrics
    }

    /// The controllers' and the retry budget's time zero.
    pub fn origin(&self) -> Instant {
        self.common.origin
    }

    /// Joins `lane` to the fleet, if there is one: the fleet's decisions reach its
    /// controller and pacer; its queue and steps reach the fleet.
    fn enlist(&self, lane: &Arc<Lane>) {
        let Some(fleet) = self.fleet.get() else {
            return;
        };
        let weak = Arc::downgrade(lane);
        let link = fleet.join(
            &self.common.upstream,
            lane.name(),
            lane.named(),
            Box::new(move |decision| {
                if let Some(lane) = weak.upgrade() {
                    lane.adopt(decision);
                }
            }),
        );
        let weak = Arc::downgrade(lane);
        link.sample_queue(Box::new(move || {
            weak.upgrade().map_or(0, |lane| lane.pacer.waiting())
        }));
        {
            // A lane that learns (starts at 0) and paces in requests or capacity units
            // starts cold, and proposes nothing until its start does; a token lane's
            // rate is thousands of units a second, and observe mode never holds a
            // request.
            let controller = lane.lock();
            let sleeper = &self.settings.sleeper;
            if controller.interval().is_zero()
                && sleeper.mode == Mode::Pace
                && self.settings.lanes.cost != Unit::Tokens
            {
                link.start_cold(sleeper.floor());
            } else {
                link.learned(controller.interval(), controller.epoch(), None);
            }
        }
        let _ = lane.fleet.set(link);
        if let Some(link) = lane.fleet.get().filter(|_| fleet.expects_answer())
            && link.hold_cold()
        {
            lane.hold(link);
            // The sync task lets the held lanes go when Redis fails before answering;
            // one held after it looked at this lane is let go here.
            if !fleet.expects_answer() {
                link.let_go();
            }
        }
    }

    /// The rule that places requests.
    pub fn rule(&self) -> &Rule {
        &self.rule
    }

    /// The lane `default`.
    pub fn default_lane(&self) -> &Arc<Lane> {
        &self.default
    }

    /// The lanes a request with `head` (and `body`, as far as it is held) takes.
    pub fn route(&self, head: &http::request::Parts, body: Option<&Bytes>) -> Route {
        let mut route = self.place(head, body);
        let unit = self.settings.lanes.cost;
        if unit != Unit::Requests {
            let body = body.map(|b| &b[..]);
            let by_table = unit == Unit::Capacity && *self.rule() == Rule::DynamoDb;
            route.cost = reserve_in(&route.first, by_table, unit, &head.headers, body);
            route.settles = cost::settles(unit, body);
            if !route.more.is_empty() && by_table {
                route.more_costs = (route.more.iter())
                    .map(|lane| reserve_in(lane, by_table, unit, &head.headers, body))
                    .collect();
            }
        }
        route
    }

    /// The lanes a request takes, before its costs.
    fn place(&self, head: &http::request::Parts, body: Option<&Bytes>) -> Route {
        if self.rule == Rule::Single {
            return Route::one(Arc::clone(&self.default));
        }
        let keys = route::keys(&self.rule, head, body.map(|b| &b[..]));
        let mut room = route::Name::new();
        let Some((first, rest)) = keys.split_first(&mut room) else {
            return Route {
                batch: keys.is_batch(),
                ..Route::one(Arc::clone(&self.default))
            };
        };
        if self.settings.lanes.from_response.is_some() {
            let lane = self
                .learned(first)
                .unwrap_or_else(|| Arc::clone(&self.default));
            return Route {
                key: Some(first.into()),
                ..Route::one(lane)
            };
        }
        let mut route = Route::one(self.get(first));
        route.batch = keys.is_batch();
        route.more = rest.iter().map(|name| self.get(name)).collect();
        if let (Some(field), Some(body)) = (keys.item_field(), body) {
            route.hot = Some(HotKey {
                body: body.clone(),
                field,
            });
            self.refresh(&mut route);
        }
        route
    }

    /// Takes in the lanes answers made since `route` was taken (a hot key's lane, the
    /// bucket the upstream named), so a retry waits in the lane that was throttled.
    pub fn refresh(&self, route: &mut Route) {
        if let Some(key) = route.key.as_deref()
            && Arc::ptr_eq(&route.first, &self.default)
            && let Some(lane) = self.learned(key)
        {
            route.first = lane;
        }
        if route.more.is_empty()
            && self.has_hot_keys()
            && let Some(lane) = route.hot_lane().and_then(|hot| self.find(&hot))
        {
            route.more.push(lane);
        }
    }

    /// Whether any hot-key lane is alive.
    pub fn has_hot_keys(&self) -> bool {
        self.hot.load(Ordering::Relaxed) > 0
    }

    /// The lane named `name`, made if it is new (as `overflow` when `max_lanes` are
    /// alive and idle ones cannot make room).
    pub fn get(&self, name: &str) -> Arc<Lane> {
        if name == route::DEFAULT {
            return Arc::clone(&self.default);
        }
        if let Some(lane) = self.read().get(name) {
            return Arc::clone(lane);
        }
        let mut others = self.write();
        if let Some(lane) = others.get(name) {
            return Arc::clone(lane);
        }
        let max_lanes = self.settings.lanes.max_lanes;
        if !room_for(&others, name, max_lanes) {
            self.sweep(&mut others, self.clock.now());
        }
        let name = if room_for(&others, name, max_lanes) {
            name
        } else if let Some(lane) = others.get(route::OVERFLOW) {
            return Arc::clone(lane);
        } else if max_lanes < 2 {
            return Arc::clone(&self.default);
        } else {
            route::OVERFLOW
        };
        let lane = Arc::new(self.make(name));
        self.enlist(&lane);
        if name.contains(":key=") {
            self.hot.fetch_add(1, Ordering::Relaxed);
        }
        others.insert(name.into(), Arc::clone(&lane));
        lane
    }

    /// The lane `name` if it is alive; never makes one.
    pub fn find(&self, name: &str) -> Option<Arc<Lane>> {
        if name == route::DEFAULT {
            return Some(Arc::clone(&self.default));
        }
        self.read().get(name).cloned()
    }

    /// The bucket learned for a request key, if the upstream has named one.
    pub fn learned(&self, key: &str) -> Option<Arc<Lane>> {
        let bucket = self
            .learned
            .read()
            .unwrap_or_else(PoisonError::into_inner)
            .get(key)
            .cloned()?;
        Some(self.get(&bucket))
    }

    /// Remembers that the upstream counts requests with `key` against `bucket`;
    /// bounded like the lanes.
    pub fn learn(&self, key: &str, bucket: &str) {
        let known = self
            .learned
            .read()
            .unwrap_or_else(PoisonError::into_inner)
            .get(key)
            .is_some_and(|b| &**b == bucket);
        if known {
            return;
        }
        let mut learned = self.learned.write().unwrap_or_else(PoisonError::into_inner);
        if learned.len() >= self.settings.lanes.max_lanes.saturating_mul(4) {
            learned.clear();
        }
        learned.insert(key.into(), bucket.into());
    }

    /// The lane with the largest interval, the slowest pace any request meets (of
    /// equals, the first by name); `default` while none is paced. The upstream's
    /// headline interval is this lane's.
    pub fn slowest(&self) -> Arc<Lane> {
        let others = self.read();
        let mut slowest = &self.default;
        for lane in others.values() {
            let (a, b) = (lane.interval(), slowest.interval());
            if a > b || (a == b && !a.is_zero() && lane.name() < slowest.name()) {
                slowest = lane;
            }
        }
        Arc::clone(slowest)
    }

    /// Every lane alive, `default` first, then by name.
    pub fn all(&self) -> Vec<Arc<Lane>> {
        let mut others: Vec<Arc<Lane>> = self.read().values().cloned().collect();
        others.sort_by(|a, b| a.name().cmp(b.name()));
        let mut all = vec![Arc::clone(&self.default)];
        all.extend(others);
        all
    }

    /// From now on no request waits past `by` (the shutdown drain), in every lane,
    /// lanes made later included.
    pub fn drain(&self, by: Instant) {
        *self.drain_by.lock().unwrap_or_else(PoisonError::into_inner) = Some(by);
        for lane in self.all() {
            lane.pacer.drain(by);
        }
    }

    /// Lanes alive, `default` included.
    pub fn count(&self) -> usize {
        1 + self.read().len()
    }

    /// Drops lanes idle for `lane_idle` that no request holds.
    pub fn drop_idle(&self, now: Instant) {
        crate::trim::if_worth_it();
        let idle = self.settings.lanes.lane_idle;
        let any = self
            .read()
            .values()
            .any(|lane| Arc::strong_count(lane) == 1 && lane.idle_for(idle, now));
        if any {
            self.sweep(&mut self.write(), now);
        }
    }

    /// Sets the `other` gauges: the largest interval and the sum of the waiting of
    /// the lanes without series of their own; and each named lane's waiting.
    pub fn refresh_gauges(&self) {
        let now = self.common.clock.now();
        let mut interval = Duration::ZERO;
        let mut waiting = 0;
        let mut near = 0.0_f64;
        for lane in self.all() {
            if lane.named {
                lane.metrics.waiting.set(lane.pacer.waiting() as i64);
                lane.metrics.near_limit.set(lane.near_limit(now));
            } else {
                interval = interval.max(lane.interval());
                waiting += lane.pacer.waiting();
                near = near.max(lane.near_limit(now));
            }
        }
        self.other_metrics.interval.set(interval.as_secs_f64());
        self.other_metrics.waiting.set(waiting as i64);
        self.other_metrics.near_limit.set(near);
    }

    fn sweep(&self, others: &mut LaneMap, now: Instant) {
        let idle = self.settings.lanes.lane_idle;
        let before = others.len();
        others.retain(|name, lane| {
            let keep = Arc::strong_count(lane) > 1 || !lane.idle_for(idle, now);
            if !keep {
                if lane.named {
                    self.named.fetch_sub(1, Ordering::Relaxed);
                    self.metrics.remove_lane(&self.common.upstream, name);
                }
                if name.contains(":key=") {
                    self.hot.fetch_sub(1, Ordering::Relaxed);
                }
            }
            keep
        });
        crate::trim::dropped(before - others.len());
        // A wave of 100,000 keys leaves a table that size behind; give it back.
        if others.capacity() > 4 * others.len().max(64) {
            others.shrink_to_fit();
        }
    }

    fn make(&self, name: &str) -> Lane {
        let named = self.named.load(Ordering::Relaxed) < self.settings.lanes.metrics_lanes;
        let metrics = if named {
            self.named.fetch_add(1, Ordering::Relaxed);
            Arc::new(self.metrics.lane(&self.common.upstream, name))
        } else {
            Arc::clone(&self.other_metrics)
        };
        let rng = self
            .rng
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .fork();
        let seed = rng.get_seed() ^ 0x5bd1_e995;
        let lane = Lane::new(name, &self.common, (rng, seed), metrics, named, self.reach);
        if let Some(by) = *self.drain_by.lock().unwrap_or_else(PoisonError::into_inner) {
            lane.pacer.drain(by);
        }
        lane
    }

    fn read(&self) -> std::sync::RwLockReadGuard<'_, LaneMap> {
        self.others.read().unwrap_or_else(PoisonError::into_inner)
    }

    fn write(&self) -> std::sync::RwLockWriteGuard<'_, LaneMap> {
        self.others.write().unwrap_or_else(PoisonError::into_inner)
    }
}

/// What a request is reserved at in `lane`: for the table the lane's name starts with
/// (`by_table`, a DynamoDB lane `<table>:<access>`), else for all it touches.
fn reserve_in(
    lane: &Lane,
    by_table: bool,
    unit: Unit,
    headers: &http::HeaderMap,
    body: Option<&[u8]>,
) -> u64 {
    let table = lane.name().split_once(':').filter(|_| by_table);
    cost::reserve(unit, headers, body, table.map(|(table, _)| table))
}

/// Whether lane `name` may be made beside `others` with `max_lanes` in all: `default`
/// counts, and so does `overflow`, for which a place is kept once named lanes fill
/// the rest.
fn room_for(others: &LaneMap, name: &str, max_lanes: usize) -> bool {
    let has_overflow = others.contains_key(route::OVERFLOW);
    let named = others.len() - usize::from(has_overflow);
    if name == route::OVERFLOW {
        return max_lanes >= 2;
    }
    // `default`, the named lanes with this one, and a place for `overflow`.
    named + 3 <= max_lanes
}

#[cfg(test)]
mod tests;
