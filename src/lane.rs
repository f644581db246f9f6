//! Lanes: the units of capacity inside one upstream (a DynamoDB table's writes, a gRPC
//! method, a bucket the upstream names). Each lane has its own controller, pacer,
//! epoch, pause and shed places, so one table's throttling does not slow another's.
//! [`Lanes`] holds an upstream's lanes: `default` always, the rest made on first use,
//! bounded by `max_lanes` (later keys share `overflow`) and dropped when idle.
//!
//! A single-lane upstream reaches its default lane without a lock; other rules take a
//! read lock and one hash lookup per request.

use std::collections::HashMap;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex, MutexGuard, OnceLock, PoisonError, RwLock};
use std::time::{Duration, SystemTime};

use bytes::Bytes;
use foldhash::fast::RandomState;
use tokio::time::Instant;

use crate::clock::Clock;
use crate::config::UpstreamSettings;
use crate::controller::Controller;
use crate::fleet::{Decision, Fleet, LaneLink};
use crate::metrics::{LaneMetrics, Metrics};
use crate::pacer::{Limits, Pacer, Slot};
use crate::route::{self, Rule};
use crate::shed::Spread;
use crate::sleeper::Step;
use crate::upstream::CappedHint;

mod slow_start;
pub use slow_start::SlowStart;

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

/// One lane's decision state.
pub struct Lane {
    name: Box<str>,
    /// Spacing, queue and pauses of this lane's dispatches.
    pub pacer: Pacer,
    controller: Mutex<Controller<fastrand::Rng>>,
    /// Where this lane's shed requests are told to come back.
    pub(crate) spread: Spread,
    /// This lane's series, or the `other` ones it shares.
    pub metrics: Arc<LaneMetrics>,
    /// Whether `metrics` are this lane's own.
    named: bool,
    /// The latest capped hint; written only when a header asks for too much.
    pub(crate) capped: Mutex<Option<CappedHint>>,
    last_throttle: Mutex<Option<LastThrottle>>,
    /// The lane's link to the fleet, with `[fleet]`.
    fleet: OnceLock<LaneLink>,
    /// How many requests may go at once before the lane has learned anything.
    pub(crate) start: SlowStart,
}

impl std::fmt::Debug for Lane {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Lane").field("name", &self.name).finish()
    }
}

impl Lane {
    fn new(
        name: &str,
        settings: &UpstreamSettings,
        clock: &Clock,
        (rng, spread_seed): (fastrand::Rng, u64),
        metrics: Arc<LaneMetrics>,
        named: bool,
        reach: Duration,
    ) -> Lane {
        let limits = Limits {
            max_waiting: settings.queue.max_waiting,
        };
        let controller = Controller::new(&settings.sleeper, rng);
        let pacer = Pacer::with_clock(settings.sleeper.mode, limits, clock.clone());
        // `constant` starts at its interval.
        pacer.set_interval(controller.interval(), controller.epoch());
        metrics.interval.set(controller.interval().as_secs_f64());
        let start = SlowStart::new(clock.now());
        if !controller.interval().is_zero() {
            start.end();
        }
        Lane {
            name: name.into(),
            pacer,
            controller: Mutex::new(controller),
            spread: Spread::new(clock.now(), reach, spread_seed),
            metrics,
            named,
            capped: Mutex::new(None),
            last_throttle: Mutex::new(None),
            fleet: OnceLock::new(),
            start,
        }
    }

    /// The lane's link to the fleet, with `[fleet]`.
    pub fn fleet(&self) -> Option<&LaneLink> {
        self.fleet.get()
    }

    /// Hands the controller's interval to the pacer and the lane's gauge; returns the
    /// spacing the pacer keeps. With a fleet the controller's interval is the fleet's,
    /// and this member keeps it over its share.
    pub(crate) fn pace(&self, controller: &Controller<fastrand::Rng>) -> Duration {
        let interval = match self.fleet.get() {
            Some(link) => link.pacing(controller.interval()),
            None => controller.interval(),
        };
        self.pacer.set_interval(interval, controller.epoch());
        if self.named {
            self.metrics.interval.set(interval.as_secs_f64());
        }
        interval
    }

    /// Tells the fleet of a controller step that moved the interval.
    pub(crate) fn stepped(&self, controller: &Controller<fastrand::Rng>, step: Step) {
        if let Some(link) = self.fleet.get() {
            let epoch = controller.epoch();
            let raised_from = (step == Step::Up).then(|| epoch.saturating_sub(1));
            link.learned(controller.interval(), epoch, raised_from);
        }
    }

    /// Takes what the fleet decided (from the fleet's sync task); `now` is on the
    /// controller's clock. Returns the spacing the pacer keeps.
    fn adopt(&self, decision: &Decision, now: Duration) -> Duration {
        let mut controller = self.lock();
        if decision.rescale != 1.0 {
            controller.rescale(decision.rescale);
        }
        controller.adopt(decision.interval, decision.epoch, now);
        self.pace(&controller)
    }

    /// The lane's name: `default`, `orders:write`, `/pkg.Service/Method`, ...
    pub fn name(&self) -> &str {
        &self.name
    }

    /// Whether the lane has its own series on `/metrics`.
    pub fn named(&self) -> bool {
        self.named
    }

    /// The current interval, as the pacer applies it.
    pub fn interval(&self) -> Duration {
        self.pacer.interval()
    }

    /// The controller, briefly; never held across `.await`.
    pub(crate) fn lock(&self) -> MutexGuard<'_, Controller<fastrand::Rng>> {
        // A panic while holding the lock cannot leave the controller half-updated in a
        // way that matters more than stopping the proxy would.
        self.controller
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
    }

    /// Remembers a throttle for `/status`.
    pub(crate) fn throttled(&self, reason: &str, resource: Option<&str>, at: SystemTime) {
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

    /// Whether the lane had a free slot it did not use for `idle` by `now`: nothing
    /// waits, and its last dispatch plus the interval lies `idle` back.
    pub fn idle_for(&self, idle: Duration, now: Instant) -> bool {
        self.pacer.waiting() == 0
            && now.saturating_duration_since(self.pacer.last_active() + self.pacer.interval())
                >= idle
    }
}

/// The slots one attempt holds: one per lane it takes, the first inline.
#[derive(Clone, Debug)]
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
        }
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
    upstream: Box<str>,
    settings: Arc<UpstreamSettings>,
    clock: Clock,
    metrics: Metrics,
    rng: Mutex<fastrand::Rng>,
    reach: Duration,
    /// The shutdown drain's deadline, once it began.
    drain_by: Mutex<Option<Instant>>,
    /// The fleet every lane joins, once the upstream joined it.
    fleet: OnceLock<Enlisted>,
}

/// What a lane needs to join the fleet.
struct Enlisted {
    fleet: Arc<Fleet>,
    /// The controllers' time zero.
    origin: Instant,
    /// The upstream's interval gauge, which shows the default lane.
    interval: prometheus::Gauge,
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
        let lanes = &settings.lanes;
        let rule = Rule::of(
            settings.preset,
            lanes.by.as_deref(),
            lanes.from_response.is_some(),
        );
        let default_metrics = Arc::new(metrics.lane(&upstream, route::DEFAULT));
        let default = Arc::new(Lane::new(
            route::DEFAULT,
            &settings,
            &clock,
            (rng, spread_seed),
            default_metrics,
            true,
            reach,
        ));
        Lanes {
            rule,
            default,
            others: RwLock::new(LaneMap::default()),
            learned: RwLock::new(HashMap::default()),
            hot: AtomicUsize::new(0),
            named: AtomicUsize::new(1),
            other_metrics: Arc::new(metrics.lane(&upstream, "other")),
            upstream,
            settings,
            clock,
            metrics: metrics.clone(),
            rng: Mutex::new(later),
            reach,
            drain_by: Mutex::new(None),
            fleet: OnceLock::new(),
        }
    }

    /// Joins the fleet: `default` now, every later lane when it is made. `origin` is
    /// the controllers' time zero; `interval` the upstream's gauge of `default`.
    pub fn join_fleet(&self, fleet: Arc<Fleet>, origin: Instant, interval: prometheus::Gauge) {
        let enlisted = Enlisted {
            fleet,
            origin,
            interval,
        };
        if self.fleet.set(enlisted).is_ok() {
            self.enlist(&self.default);
        }
    }

    /// Joins `lane` to the fleet, if there is one: the fleet's decisions reach its
    /// controller and pacer; its queue and steps reach the fleet.
    fn enlist(&self, lane: &Arc<Lane>) {
        let Some(enlisted) = self.fleet.get() else {
            return;
        };
        let weak = Arc::downgrade(lane);
        let clock = self.clock.clone();
        let origin = enlisted.origin;
        let gauge = Arc::ptr_eq(lane, &self.default).then(|| enlisted.interval.clone());
        let link = enlisted.fleet.join(
            &self.upstream,
            lane.name(),
            Box::new(move |decision| {
                let Some(lane) = weak.upgrade() else { return };
                let now = clock.now().saturating_duration_since(origin);
                let spacing = lane.adopt(decision, now);
                if let Some(gauge) = &gauge {
                    gauge.set(spacing.as_secs_f64());
                }
            }),
        );
        let weak = Arc::downgrade(lane);
        link.sample_queue(Box::new(move || {
            weak.upgrade().map_or(0, |lane| lane.pacer.waiting())
        }));
        {
            let controller = lane.lock();
            link.learned(controller.interval(), controller.epoch(), None);
        }
        let _ = lane.fleet.set(link);
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
        let mut interval = Duration::ZERO;
        let mut waiting = 0;
        for lane in self.all() {
            if lane.named {
                lane.metrics.waiting.set(lane.pacer.waiting() as i64);
            } else {
                interval = interval.max(lane.interval());
                waiting += lane.pacer.waiting();
            }
        }
        self.other_metrics.interval.set(interval.as_secs_f64());
        self.other_metrics.waiting.set(waiting as i64);
    }

    fn sweep(&self, others: &mut LaneMap, now: Instant) {
        let idle = self.settings.lanes.lane_idle;
        let before = others.len();
        others.retain(|name, lane| {
            let keep = Arc::strong_count(lane) > 1 || !lane.idle_for(idle, now);
            if !keep {
                if lane.named {
                    self.named.fetch_sub(1, Ordering::Relaxed);
                    self.metrics.remove_lane(&self.upstream, name);
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
            Arc::new(self.metrics.lane(&self.upstream, name))
        } else {
            Arc::clone(&self.other_metrics)
        };
        let rng = self
            .rng
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .fork();
        let seed = rng.get_seed() ^ 0x5bd1_e995;
        let lane = Lane::new(
            name,
            &self.settings,
            &self.clock,
            (rng, seed),
            metrics,
            named,
            self.reach,
        );
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
