//! One upstream's lanes: `default` always, the rest made on first use, bounded by
//! `max_lanes` (later keys share `overflow`) and dropped when idle. A single-lane
//! upstream reaches its default lane without a lock; other rules take a read lock and
//! one hash lookup per request.

use std::collections::HashMap;
use std::sync::atomic::{AtomicBool, AtomicU64, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex, OnceLock, PoisonError, RwLock};
use std::time::Duration;

use bytes::Bytes;
use foldhash::fast::RandomState;

use super::{Common, HotKey, Lane, Route};
use crate::clock::{Clock, Instant};
use crate::concurrency::CapSetting;
use crate::config::UpstreamSettings;
use crate::cost::{self, Unit};
use crate::fleet::Fleet;
use crate::hints::Hint;
use crate::metrics::{LaneMetrics, LaneSeries, Metrics, UpstreamMetrics};
use crate::route::{self, Key, Rule};
use crate::sleeper::Mode;
use crate::tenants::Tenants;

/// Lanes by name. Names come from requests, but `max_lanes` bounds how many a client
/// can make, so a fast seeded hash is safe here.
type LaneMap = HashMap<Box<str>, Arc<Lane>, RandomState>;

/// How often a full set of lanes is swept for idle ones when new names keep coming;
/// scrapes drop idle lanes too (`Lanes::drop_idle`).
const SWEEP_EVERY: Duration = Duration::from_secs(1);

/// No sweep yet.
const NEVER: u64 = u64::MAX;

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
    /// Nanoseconds after the lanes' time zero of the last sweep for room; [`NEVER`]
    /// before the first.
    swept_ns: AtomicU64,
    /// Sweeps so far.
    sweeps: AtomicUsize,
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
        let upstream_metrics = Arc::new(metrics.upstream(&upstream));
        let common = Arc::new(Common {
            upstream: upstream.clone(),
            settings: Arc::clone(&settings),
            origin: clock.now(),
            clock: clock.clone(),
            capped_logged: Hint::ALL.map(|_| AtomicBool::new(false)),
            tenants: settings.fairness.as_ref().map(|fair| {
                let upstream_metrics = Arc::clone(&upstream_metrics);
                Arc::new(Tenants::new(
                    fair,
                    &settings.lanes.secret_headers,
                    upstream_metrics,
                ))
            }),
            metrics: upstream_metrics,
        });
        let lanes = &settings.lanes;
        let rule = Rule::of(
            settings.preset,
            lanes.by.as_deref(),
            lanes.from_response.is_some(),
        );
        let series = lane_series(&settings);
        let default_metrics = Arc::new(metrics.lane(&upstream, route::DEFAULT, series));
        let default = Arc::new(Lane::new(
            Key::new(&rule, route::DEFAULT),
            &common,
            (rng, spread_seed),
            (default_metrics, true),
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
            other_metrics: Arc::new(metrics.lane(&upstream, "other", series)),
            common,
            settings,
            clock,
            metrics: metrics.clone(),
            rng: Mutex::new(later),
            reach,
            drain_by: Mutex::new(None),
            fleet: OnceLock::new(),
            swept_ns: AtomicU64::new(NEVER),
            sweeps: AtomicUsize::new(0),
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

    /// The upstream's tenants, with `[upstream.fairness]`.
    pub fn tenants(&self) -> Option<&Arc<Tenants>> {
        self.common.tenants.as_ref()
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
            // rate is thousands of units a second, observe mode never holds a
            // request, and under a learned cap the cap's slow start (4 at once,
            // doubling per round trip) bounds the first wave already.
            let controller = lane.lock();
            let sleeper = &self.settings.sleeper;
            let learned_cap = [
                self.settings.max_in_flight,
                self.settings.lanes.max_in_flight,
            ]
            .contains(&CapSetting::Learn);
            if controller.interval().is_zero()
                && sleeper.mode == Mode::Pace
                && self.settings.lanes.cost != Unit::Tokens
                && !learned_cap
            {
                link.start_cold(sleeper.floor());
            } else {
                link.learned(controller.interval(), controller.epoch(), None);
            }
        }
        if let Some(flights) = &lane.flights {
            link.share_cap(Arc::clone(flights));
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
        let max_lanes = self.settings.lanes.max_lanes;
        let now = self.clock.now();
        let mut sweep = false;
        {
            let others = self.read();
            if let Some(lane) = others.get(name) {
                return Arc::clone(lane);
            }
            // Full: a new name shares `overflow` under the read lock, unless a sweep
            // is due (a client cycling names would otherwise take the write lock and
            // walk every lane for each request).
            if !room_for(&others, name, max_lanes) {
                sweep = self.sweep_due(now);
                if let Some(lane) = others.get(route::OVERFLOW).filter(|_| !sweep) {
                    return Arc::clone(lane);
                }
            }
        }
        let mut others = self.write();
        if let Some(lane) = others.get(name) {
            return Arc::clone(lane);
        }
        if sweep {
            self.sweep(&mut others, now);
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
        if lane.key().is_hot() {
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
            if let Some(flights) = lane.flights() {
                flights.drain(by);
            }
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

    /// Whether a sweep for room may run at `now`: at most once every [`SWEEP_EVERY`]
    /// (the first at once). Claims it when it may.
    fn sweep_due(&self, now: Instant) -> bool {
        let now_ns = u64::try_from(now.saturating_duration_since(self.common.origin).as_nanos())
            .unwrap_or(u64::MAX - 1);
        let every = u64::try_from(SWEEP_EVERY.as_nanos()).unwrap_or(u64::MAX);
        let last = self.swept_ns.load(Ordering::Relaxed);
        (last == NEVER || now_ns.saturating_sub(last) >= every)
            && self
                .swept_ns
                .compare_exchange(last, now_ns, Ordering::Relaxed, Ordering::Relaxed)
                .is_ok()
    }

    /// Sweeps for room so far.
    pub fn sweeps(&self) -> usize {
        self.sweeps.load(Ordering::Relaxed)
    }

    fn sweep(&self, others: &mut LaneMap, now: Instant) {
        self.sweeps.fetch_add(1, Ordering::Relaxed);
        let idle = self.settings.lanes.lane_idle;
        let before = others.len();
        others.retain(|name, lane| {
            let keep = Arc::strong_count(lane) > 1 || !lane.idle_for(idle, now);
            if !keep {
                if lane.named {
                    self.named.fetch_sub(1, Ordering::Relaxed);
                    self.metrics.remove_lane(&self.common.upstream, name);
                }
                if lane.key().is_hot() {
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
            let series = lane_series(&self.settings);
            Arc::new(self.metrics.lane(&self.common.upstream, name, series))
        } else {
            Arc::clone(&self.other_metrics)
        };
        let rng = self
            .rng
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .fork();
        let seed = rng.get_seed() ^ 0x5bd1_e995;
        let key = Key::new(&self.rule, name);
        let lane = Lane::new(key, &self.common, (rng, seed), (metrics, named), self.reach);
        if let Some(by) = *self.drain_by.lock().unwrap_or_else(PoisonError::into_inner) {
            lane.pacer.drain(by);
            if let Some(flights) = lane.flights() {
                flights.drain(by);
            }
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

/// The series the lanes of an upstream with `settings` export besides their own.
fn lane_series(settings: &UpstreamSettings) -> LaneSeries {
    let costs = settings.lanes.cost != Unit::Requests;
    LaneSeries {
        costs,
        histograms: costs && settings.lanes.metrics_histograms,
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
    let table = lane.key().table().filter(|_| by_table);
    cost::reserve(unit, headers, body, table)
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
