//! Lanes: the units of capacity inside one upstream (a DynamoDB table's writes, a gRPC
//! method, a bucket the upstream names). Each lane has its own controller, pacer,
//! epoch, pause and shed places, so one table's throttling does not slow another's.
//! A [`Lane`] holds that state and applies to it what the rules (`lane/rules.rs`,
//! pure) decide an answer, a hint, a cost or a fleet decision does; [`Lanes`] stores
//! and bounds an upstream's lanes; an attempt holds a [`Pass`], settled in one call.

use std::sync::atomic::{AtomicBool, AtomicU8, AtomicU64, Ordering};
use std::sync::{Arc, Mutex, MutexGuard, OnceLock, PoisonError};
use std::time::{Duration, UNIX_EPOCH};

use crate::clock::{Clock, Instant};
use crate::concurrency::Why;
use crate::config::UpstreamSettings;
use crate::controller::Controller;
use crate::cost::answer::AnswerCost;
use crate::cost::{ONE, Unit};
use crate::fleet::{COLD_GROWTH, COLD_RATE, Decision, LaneLink};
use crate::flights::{Flight, Flights, OnMove};
use crate::hints::Hint;
use crate::metrics::{LaneMetrics, UpstreamMetrics};
use crate::observe::Goodput;
use crate::pacer::{Limits, Pacer, Shed, Slot, Ticket, Would};
use crate::quota::Falls;
use crate::route::Key;
use crate::shed::Spread;
use crate::sleeper::{Mode, Step};
use crate::tenants::{Tenant, TenantCount, TenantFigures, Tenants};
use crate::throttle::{Signal, Verdict};

mod costs;
mod lanes;
mod overloads;
mod pass;
mod pushback;
mod routed;
pub mod rules;
mod slow_start;
mod status;
mod windows;

pub use lanes::Lanes;
pub use pass::{Answer, Concerns, Deferred, Pass, Settled, Told};
pub use routed::{HotKey, Route};
pub use slow_start::SlowStart;
pub use status::{CappedHint, LastThrottle};

use costs::Costs;
use pushback::{LatestAsk, Pushed};
use rules::{Placement, Reaction};

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
    /// With `[upstream.fairness]`: who requests wait as.
    tenants: Option<Arc<Tenants>>,
}

/// One lane's decision state.
pub struct Lane {
    key: Key,
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
    /// Boxed, as most lanes are never throttled.
    last_throttle: Mutex<Option<Box<LastThrottle>>>,
    /// The header behind the lane's latest pause or floor: its index in [`Hint::ALL`]
    /// plus one, 0 for none. An atomic, since every answer with a quota sets it.
    pause_header: AtomicU8,
    /// The lane's link to the fleet, with `[fleet]`.
    fleet: OnceLock<LaneLink>,
    /// How many requests may go at once before the lane has learned anything.
    start: SlowStart,
    /// In observe mode, what the upstream let through, and the time zero of its clock;
    /// boxed, as few upstreams observe.
    goodput: Option<Box<(Goodput, Instant)>>,
    /// How fast the upstream's rate-limit windows fall per answer.
    falls: Falls,
    /// How often overloads come, which decides whether one moves the interval.
    overloads: overloads::Overloads,
    /// What the lane's requests were reserved at and settled at.
    costs: Costs,
    /// When the request went (nanoseconds since the lanes' time zero) whose answer
    /// set or lifted the floors in force; 0 before any.
    floors_from: AtomicU64,
    /// The largest limit the lane's token window has stated, in thousandths of the
    /// lane's unit; 0 before any.
    window_limit: AtomicU64,
    /// The fleet epoch the lane last took its place in the fleet's schedule in
    /// ([`rules::places`]); `u64::MAX` before the first.
    placed: AtomicU64,
    /// The latest pause a refusal asked for.
    asked: LatestAsk,
    /// `[upstream.lanes] max_in_flight`: this lane's requests out at once, when capped.
    flights: Option<Arc<Flights>>,
    /// With `[upstream.fairness]`: this lane's part of each tenant's requests, by index.
    tenant_counts: Option<Box<[TenantCount]>>,
}

impl std::fmt::Debug for Lane {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Lane").field("name", &self.name()).finish()
    }
}

impl Lane {
    fn new(
        key: Key,
        common: &Arc<Common>,
        (rng, spread_seed): (fastrand::Rng, u64),
        (metrics, named): (Arc<LaneMetrics>, bool),
        reach: Duration,
    ) -> Lane {
        let settings = &common.settings;
        let clock = &common.clock;
        let limits = Limits {
            max_waiting: settings.queue.max_waiting,
            max_gap: settings.max_pause,
            fair: common.tenants.as_ref().map(|t| t.per_tenant()),
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
        let flights = lane_flights(settings, clock, common, key.name());
        Lane {
            key,
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
            goodput: observe.then(|| Box::new((Goodput::default(), clock.now()))),
            falls: Falls::default(),
            overloads: overloads::Overloads::default(),
            costs: Costs::default(),
            window_limit: AtomicU64::new(0),
            floors_from: AtomicU64::new(0),
            placed: AtomicU64::new(u64::MAX),
            asked: LatestAsk::default(),
            flights,
            tenant_counts: common.tenants.as_ref().map(|t| t.counts()),
        }
    }

    /// Waits for the request's place under the lane's `max_in_flight`, when the lane
    /// has one; a shed is told when to come back as the pacer's are.
    pub async fn take_flight(&self, deadline: Instant) -> Option<Result<Flight, Shed>> {
        let flights = self.flights.as_ref()?;
        Some(flights.take(deadline).await.map_err(|shed| {
            let now = self.common.clock.now();
            let retry_after = self
                .spread
                .retry_after(now, shed.retry_after, self.pacer.spacing());
            Shed {
                retry_after,
                ..shed
            }
        }))
    }

    /// The lane's own cap and the requests out under it, when it has one.
    pub fn flights(&self) -> Option<&Flights> {
        self.flights.as_deref()
    }

    /// The lane's link to the fleet, with `[fleet]`.
    pub fn fleet(&self) -> Option<&LaneLink> {
        self.fleet.get()
    }

    /// Hands the controller's interval to the pacer and the lane's gauge; returns the
    /// spacing the pacer keeps. With a fleet the controller's interval is the fleet's,
    /// and this member keeps it over its share. `longer_too`: see
    /// [`Pacer::set_interval_keeping`].
    fn pace(&self, controller: &Controller<fastrand::Rng>, longer_too: bool) -> Duration {
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

    /// Takes what the fleet decided (from the fleet's sync task), as
    /// [`rules::adoption`] and [`rules::placement`] say. Returns the spacing the pacer
    /// keeps.
    fn adopt(&self, decision: &Decision) -> Duration {
        let now = self.since_origin(self.common.clock.now());
        let mut controller = self.lock();
        if decision.rescale != 1.0 {
            controller.rescale(decision.rescale);
        }
        let member = rules::Member {
            epoch: controller.epoch(),
            unpaced: controller.interval().is_zero(),
            provisional: self.pacer.is_provisional(),
            spacing: self.pacer.spacing(),
        };
        let taken = rules::FleetDecision {
            epoch: decision.epoch,
            outraised: decision.outraised,
            first: decision.first,
            cold: decision.cold,
        };
        let adoption = rules::adoption(taken, member);
        controller.share(decision.share);
        if decision.cold {
            controller.cold(decision.interval, COLD_GROWTH, now);
        } else {
            controller.adopt(decision.interval, decision.epoch, decision.outraised, now);
        }
        if decision.first {
            controller.estimated();
        }
        let spacing = self.pace(&controller, adoption.keep_progress);
        if decision.cold {
            self.pacer.phase_first(controller.unit());
        }
        self.pacer.set_provisional(decision.cold);
        let new_epoch = self.placed.load(Ordering::Relaxed) != decision.epoch;
        let ahead = decision.place.map(|place| place.ahead(decision.share));
        match rules::placement(adoption, new_epoch, spacing, ahead) {
            Placement::Place { ahead, nearest } => {
                self.placed.store(decision.epoch, Ordering::Relaxed);
                self.pacer.place(ahead, nearest);
            }
            Placement::Stagger => self.pacer.stagger(controller.unit() - 0.5),
            Placement::Stay => {}
        }
        spacing
    }

    /// What the lane's name says: its name, a DynamoDB lane's table and access.
    pub fn key(&self) -> &Key {
        &self.key
    }

    /// The lane's name: `default`, `orders:write`, `/pkg.Service/Method`, ...
    pub fn name(&self) -> &str {
        self.key.name()
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
    fn throttled(&self, reason: &str, resource: Option<&str>) {
        let at = self.common.clock.wall();
        let unix = at.duration_since(UNIX_EPOCH).unwrap_or_default();
        self.metrics.throttled(reason, unix.as_secs_f64());
        *self
            .last_throttle
            .lock()
            .unwrap_or_else(PoisonError::into_inner) = Some(Box::new(LastThrottle {
            reason: reason.to_string(),
            resource: resource.map(str::to_string),
            at,
        }));
    }

    /// Remembers the header behind a pause or floor, for `/status`.
    fn paused_by(&self, header: Hint) {
        self.metrics.paused(header);
        self.pause_header.store(header as u8 + 1, Ordering::Relaxed);
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

    /// Time since the controllers' time zero, in nanoseconds.
    fn since_origin_nanos(&self, at: Instant) -> u64 {
        nanos_since(self.common.origin, at)
    }

    /// Waits for a slot (or is shed at once, told when to come back; see
    /// [`crate::shed::Spread`]) and counts the wait; `patient`: see
    /// [`crate::pacer::Pacer::acquire_with`]; `cost`: what the request is reserved
    /// at, in thousandths of the lane's unit ([`crate::cost::ONE`] where it counts
    /// requests). A lane that left a slot unused for `idle_decay` first forgets its
    /// throttles. With `[upstream.fairness]`, `who` places the request among the
    /// lane's waiting tenants.
    pub async fn acquire(
        &self,
        deadline: Instant,
        patient: bool,
        cost: u64,
        who: Option<Ticket>,
    ) -> Result<Slot, Shed> {
        let clock = &self.common.clock;
        let cost = self.reserved(cost);
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
        let slot = match self
            .pacer
            .acquire_costing(deadline, patient, cost, who)
            .await
        {
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
                if let Some(tenant) = self.tenant(who) {
                    tenant.sheds.inc();
                }
                if let Some(count) = self.tenant_count(who) {
                    count.shed();
                }
                let spacing = self.pacer.spacing();
                let retry_after = self
                    .spread
                    .retry_after(clock.now(), shed.retry_after, spacing);
                return Err(Shed {
                    retry_after,
                    ..shed
                });
            }
        };
        self.dispatched(&slot, cost);
        if let Some(tenant) = self.tenant(who) {
            tenant.dispatches.inc();
            #[allow(clippy::cast_precision_loss, reason = "a cost in thousandths")]
            tenant.cost.inc_by(cost as f64 / ONE as f64);
            tenant.wait.inc_by(slot.waited.as_secs_f64());
        }
        if let Some(count) = self.tenant_count(who) {
            count.dispatched(cost, slot.waited);
        }
        Ok(slot)
    }

    /// This lane's count of the tenant a request waits as.
    fn tenant_count(&self, who: Option<Ticket>) -> Option<&TenantCount> {
        let id = who.unwrap_or(Ticket::ANYONE).tenant;
        self.tenant_counts.as_ref()?.get(usize::from(id))
    }

    /// With `[upstream.fairness]`: this lane's figures for each tenant, by index.
    pub fn tenant_figures(&self) -> Option<Vec<TenantFigures>> {
        let counts = self.tenant_counts.as_ref()?;
        Some(counts.iter().map(TenantCount::figures).collect())
    }

    /// The tenant a request waits as, with `[upstream.fairness]`.
    fn tenant(&self, who: Option<Ticket>) -> Option<Arc<Tenant>> {
        self.common
            .tenants
            .as_ref()?
            .get(who.unwrap_or(Ticket::ANYONE).tenant)
    }

    /// What a request estimated at `estimate` is reserved at ([`rules::reservation`]).
    fn reserved(&self, estimate: u64) -> u64 {
        let unit = self.unit();
        if unit == Unit::Requests {
            return estimate;
        }
        #[allow(
            clippy::cast_possible_truncation,
            clippy::cast_sign_loss,
            reason = "a mean of bounded costs"
        )]
        let mean = self.costs.mean() as u64;
        rules::reservation(estimate, self.window_limit(), unit.most(), mean)
    }

    /// The limit the lane's token window stated, if one did and the window counts
    /// the lane's whole requests (Anthropic's binding window may count input or
    /// output alone, which one request can pass).
    fn window_limit(&self) -> Option<u64> {
        let whole = self.common.settings.preset.token_window().least_share >= 1.0;
        Some(self.window_limit.load(Ordering::Relaxed)).filter(|l| *l > 0 && whole)
    }

    /// Counts a dispatch and its wait.
    fn dispatched(&self, slot: &Slot, cost: u64) {
        self.metrics.dispatches.inc();
        if self.unit() != Unit::Requests {
            if let Some(costs) = &self.metrics.costs {
                costs.units_reserved.inc_by(self.unit().count(cost));
            }
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

    /// Feeds a verdict to the lane's controller as [`rules::reaction`] says; `slot`
    /// is the lane's slot of the attempt (its epoch decides whether a throttle
    /// raises); `pause` is what a throttle's answer asked for, which holds the lane
    /// or only the request (see [`Lane::throttle_seen`]); `to_cap`: a throttle went
    /// to the upstream's learned `max_in_flight`, so the rate stays, and its pause
    /// holds only its request. Returns the pause the request waits before its retry.
    /// Upstream-level counts of the verdict are the caller's.
    fn record(
        &self,
        slot: &Slot,
        verdict: Option<Verdict>,
        pause: Option<Pushed>,
        to_cap: bool,
    ) -> Option<Duration> {
        let mut hold = None;
        match verdict {
            Some(Verdict::Throttle(signal)) => {
                hold = self.throttle_seen(signal, slot, pause, to_cap);
                if to_cap {
                    self.start.answered(false, false);
                    return hold;
                }
            }
            Some(Verdict::Success) => {
                self.overloads.success();
                self.asked.forget();
                // Counted by the verdict, not the reaction: in observe mode a throttle
                // pacing would not have met is a success to the controller, yet it did
                // not get through (`throttle_seen` counted it refused).
                if let Some(link) = self.fleet() {
                    link.got_through();
                }
                if let Some((goodput, origin)) = self.goodput.as_deref() {
                    goodput.succeeded(nanos_since(*origin, self.common.clock.now()));
                }
            }
            Some(Verdict::Failure) | None => {}
        }
        let would_throttle = || {
            self.goodput.as_deref().is_none_or(|(goodput, origin)| {
                let now = self.common.clock.now();
                goodput.would_throttle(self.pacer.interval(), nanos_since(*origin, now))
            })
        };
        match rules::reaction(verdict, would_throttle, || self.overloads.frequent()) {
            Reaction::Raise(signal) => self.raise(slot, signal),
            Reaction::Lower => self.succeeded(slot),
            Reaction::Hold => self.start.answered(false, false),
        }
        hold
    }

    /// A throttle raises the interval (from the spacing the lane, or the fleet,
    /// dispatched at), and then lets the slow start's waiters meet it.
    fn raise(&self, slot: &Slot, signal: Signal) {
        let now = self.common.clock.now();
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
        self.start.answered(true, false);
    }

    /// What the lane paces in.
    pub fn unit(&self) -> Unit {
        self.common.settings.lanes.cost
    }

    /// Settles what `answer` says the request of `slot` cost in this lane (a DynamoDB
    /// lane takes its table's share), if it says: the schedule moves by what
    /// [`rules::charged`] makes of it against the reservation, and the estimate's
    /// error is counted.
    fn settle_cost(&self, slot: &Slot, answer: &AnswerCost) {
        if self.unit() == Unit::Requests {
            return;
        }
        let table = self.key.table().filter(|_| self.unit() == Unit::Capacity);
        let Some(actual) = answer.cost(table) else {
            return;
        };
        let actual = rules::settlement(actual, self.window_limit(), self.unit().most());
        let window = self.common.settings.preset.token_window();
        let charged = rules::charged(slot.cost, actual, window);
        self.pacer.settle(slot.cost, charged);
        self.costs.charged(charged);
        self.costs.settled(actual);
        let Some(costs) = &self.metrics.costs else {
            return;
        };
        costs.units_settled.inc_by(self.unit().count(actual));
        if let Some(error) = costs.error.as_ref().filter(|_| slot.cost > 0) {
            #[allow(clippy::cast_precision_loss, reason = "a ratio of costs")]
            let ratio = actual as f64 / slot.cost as f64;
            error.observe(ratio);
        }
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
        if let Some(link) = self.fleet.get() {
            let epoch = controller.epoch();
            let raised_from = (step == Step::Up).then(|| epoch.saturating_sub(1));
            link.learned(controller.interval(), epoch, raised_from);
        }
        self.publish(controller);
    }

    /// Hands the controller's interval to the pacer and gauges. The upstream's
    /// interval gauge, the largest over its lanes, is set at each scrape
    /// (`Control::refresh_gauges`): finding it walks every lane, too much for a step.
    fn publish(&self, controller: &Controller<fastrand::Rng>) {
        let before = self.pacer.interval();
        let interval = self.pace(controller, false);
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

/// A lane's cap as `[upstream.lanes] max_in_flight` asks; its moves are logged.
fn lane_flights(
    settings: &UpstreamSettings,
    clock: &Clock,
    common: &Common,
    lane: &str,
) -> Option<Arc<Flights>> {
    let (upstream, lane) = (common.upstream.to_string(), lane.to_string());
    let on_move: OnMove = Box::new(move |cap, why| {
        // Its own cuts: a fleet member's part moves with the others' caps.
        if matches!(why, Why::Refused | Why::Latency) {
            tracing::info!(upstream = %upstream, lane = %lane, cap, why = why.as_str(), "the lane's max_in_flight moved");
        }
    });
    Flights::new(
        settings.lanes.max_in_flight,
        settings.queue.max_waiting,
        clock.clone(),
        Some(on_move),
    )
}

fn nanos_since(origin: Instant, now: Instant) -> u64 {
    u64::try_from(now.saturating_duration_since(origin).as_nanos()).unwrap_or(u64::MAX)
}

#[cfg(test)]
mod tests;
