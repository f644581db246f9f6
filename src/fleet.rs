//! The fleet: sidecars that share each lane's learned state through Redis.
//!
//! With `[fleet]`, a lane's controller interval means the fleet-wide interval `I_f`
//! (seconds between dispatches of the whole fleet for that lane). Each member paces at
//! `I_f / share`, where `share` is its max-min fair share of the fleet rate `1 / I_f`
//! given what the members' demands claim (`share.rs`; a claim is bounded by the
//! member's recent dispatches, `demand::claim`); a fleet interval of 0 leaves every
//! member unpaced. One member alone has share 1: exactly a sidecar on its own.
//!
//! One task per process syncs the lanes that [`Fleet::join`]ed, once per
//! `sync_interval`, in one pipelined round trip (`store.rs`): those that carry demand,
//! have something new to report, or would otherwise let their entry reach half the
//! member TTL (`due.rs`); idle lanes skip rounds. The merge rule (one raise
//! per fleet-wide burst, growth at one sidecar's pace) is `learning.rs`'s; what a
//! lane proposes and what it decides from an answer are `decide.rs`'s, pure. The request
//! path only bumps an atomic ([`LaneLink::arrived`]); decisions reach the lane through
//! the callback it gave to `join`, from the sync task. When Redis does not answer two
//! syncs in a row (at most `3 × sync_interval` after the last good one), each lane is
//! told to go on alone from its last allocation, and the task reconnects with gRPC's
//! backoff; nothing on the request path waits for Redis. `easeoff simulate --scenario
//! fleet` runs the same rounds ([`Fleet::sync_in`]) against `memory.rs`, which applies
//! the same rules as the script.

mod decide;
mod demand;
mod due;
mod fault;
mod fingerprint;
pub mod learning;
pub mod memory;
pub mod share;
mod store;
mod summary;

use std::collections::HashMap;
use std::sync::atomic::{AtomicBool, AtomicU32, AtomicU64, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex, OnceLock, PoisonError};
use std::time::Duration;

use tokio::sync::{Notify, watch};
use tokio::task::JoinHandle;

use crate::clock::{Clock, Instant};
use crate::config::{ConnectBackoffSettings, FleetSettings};
use crate::connect_backoff::{Admission, ConnectBackoff};
use crate::flights::Flights;
use crate::metrics::{FleetLaneMetrics, FleetMetrics, Metrics};
use decide::{Answered, HURRY, HURRY_SYNCS, LaneState, Learned, Sent};
pub use decide::{COLD_GROWTH, COLD_RATE, Decision, Place, decide, seat_phase, unpaced_share};
use demand::{Capped, Demand, Used};
pub use fault::Fault;
pub use fingerprint::fingerprint;
pub use memory::Memory;
use store::{Answer, Report, Store, Timings};

/// Syncs that fail in a row before the lanes go on alone.
const FAILURES_TO_LOCAL: u32 = 2;
/// The longest wait between reconnection attempts (before gRPC's ±20 % jitter): not
/// gRPC's 120 s, so a member is back in the fleet within 5 s of Redis returning (at
/// most 2.4 s to the next attempt, then one connect and one sync).
const MAX_RECONNECT_WAIT: Duration = Duration::from_secs(2);
/// A raise within this many sync intervals of the last one belongs to the same
/// fleet-wide burst: the others take a raise at their next sync, one interval later at
/// most, and the throttles their old rate caused take a round trip more to come back.
const HOLD_SYNCS: u32 = 2;
/// A lane's hash outlives its last sync by this many member TTLs.
const KEY_TTL_MEMBER_TTLS: u32 = 12;
/// The fewest lanes a join looks for gone ones among.
const PRUNE_AT_LEAST: usize = 64;
/// No proposal yet (the lane has learned nothing), in [`LaneCell::interval`].
const NONE: u64 = u64::MAX;

/// The weight of one sync's count in a shared cap's want (`LaneSync::want`): the
/// count out and waiting at one instant is noisy, and each change of the parts
/// moves requests between members.
const WANT_WEIGHT: f64 = 0.25;

/// One process's membership in the fleet; owns the sync task.
pub struct Fleet {
    inner: Arc<Inner>,
    stop: watch::Sender<bool>,
    task: Mutex<Option<JoinHandle<()>>>,
}

/// What the sync task and the links share.
struct Inner {
    settings: FleetSettings,
    member: String,
    lanes: Mutex<Vec<Arc<LaneCell>>>,
    /// How many `lanes` may hold before a join takes the gone ones out (twice the
    /// live ones at the last time, so each join pays for it once).
    prune_at: AtomicUsize,
    metrics: FleetMetrics,
    connected: AtomicBool,
    /// Whether a round is expected to answer soon: from the start and while connected,
    /// not from a failed connect or the lanes going on alone until a round answers
    /// again. A lane that starts cold is held for its first answer only while it holds.
    answering: AtomicBool,
    /// Why the lanes run on their own, while they do.
    fault: Mutex<Option<Fault>>,
    /// Each upstream's settings fingerprint, by name, for the lanes that join later.
    fingerprints: Mutex<HashMap<String, String>>,
    /// A lane raised: the sync task reports it before its next tick.
    raised: Arc<Notify>,
    /// Ticks left at the hurried pace (`decide::hurries`), the most any lane has.
    hurried: AtomicU32,
    /// When the last tick that sampled every lane came, in nanoseconds on the sync
    /// task's timeline ([`Trigger::Tick`]).
    full_at: AtomicU64,
}

/// One lane's link to the fleet: the counters the lane writes and the sync task reads.
struct LaneCell {
    upstream: String,
    lane: String,
    key: String,
    /// This member's settings fingerprint for the lane, empty if none was given.
    fingerprint: String,
    /// Where the lane's refresh age lies (`due::spread`).
    spread: f64,
    arrivals: AtomicU64,
    /// Attempts shed or throttled since the last sync.
    refused: AtomicU64,
    /// Attempts answered as got through since the last sync.
    through: AtomicU64,
    /// The fleet's [`Inner::raised`].
    raised: Arc<Notify>,
    waiting: AtomicUsize,
    /// The controller's interval in microseconds, [`NONE`] before the first report.
    interval: AtomicU64,
    epoch: AtomicU64,
    /// The earliest epoch raised from since the last sync, [`NONE`] if none.
    raised_from: AtomicU64,
    gone: AtomicBool,
    /// The share of the last decision, as `f64` bits; 1 until the first.
    share: AtomicU64,
    on_sync: Box<dyn Fn(&Decision) + Send + Sync>,
    /// Reads the lane's queue at each sync, if the lane gave a way to.
    queue: OnceLock<Box<dyn Fn() -> usize + Send + Sync>>,
    /// The shortest interval a cold start grows to, if the lane starts cold.
    cold: OnceLock<Duration>,
    /// The learned concurrency cap the fleet shares through this key, if any.
    flights: OnceLock<Arc<Flights>>,
    /// The lane's own gauges, or those the lanes past `metrics_lanes` share.
    metrics: FleetLaneMetrics,
    /// The sync task's own state for the lane; only that task locks it.
    sync: Mutex<LaneSync>,
}

#[derive(Default)]
struct LaneSync {
    demand: Demand,
    used: Used,
    /// What the decision rules keep of the lane (`decide.rs`).
    state: LaneState,
    /// Why this lane alone could not sync (its key), while it cannot.
    fault: Option<Fault>,
    /// Whether a live member of the lane runs other settings (its fingerprint differs).
    differs: bool,
    /// What the last answered sync wrote for the lane (`None` before the first).
    reported: Option<due::Entry>,
    /// Time since the lane's last answered sync.
    since: Duration,
    /// When the lane's summary that last counted this member was written
    /// (`Answer::counted_in`).
    counted_in: u64,
    /// What the shared cap's requests want out (those out and those waiting),
    /// averaged over the syncs (`demand::Capped::want`); `None` before the first.
    want: Option<f64>,
    /// When its counts were last sampled, on the sync task's timeline; `None` before
    /// the first sample.
    sampled: Option<Duration>,
    /// Ticks left at the hurried pace (`decide::hurries`).
    hurry: u32,
}

impl LaneSync {
    /// Held for a first answer ([`LaneLink::hold_cold`]): it has a decision, but no
    /// round has answered for it yet.
    fn held(&self) -> bool {
        self.reported.is_none() && self.state.last.is_some()
    }
}

/// A lane's membership; dropping it takes the lane out of the fleet.
pub struct LaneLink {
    cell: Arc<LaneCell>,
}

impl LaneLink {
    /// Shares the lane's learned cap with the fleet: the members' caps add up to
    /// the fleet's, which each member takes its part of by what it wants out
    /// (`adopt_cap`). A fixed cap is its own.
    pub fn share_cap(&self, flights: Arc<Flights>) {
        if flights.learns() {
            let _ = self.cell.flights.set(flights);
        }
    }

    /// A request arrived for the lane (its demand); one relaxed atomic add.
    #[inline]
    pub fn arrived(&self) {
        self.cell.arrivals.fetch_add(1, Ordering::Relaxed);
    }

    /// An attempt of the lane was shed or throttled: it left the queue without
    /// getting through, so it does not count in the dispatch rate the fleet reads.
    pub fn refused(&self) {
        self.cell.refused.fetch_add(1, Ordering::Relaxed);
    }

    /// An attempt of the lane got through (its answer was a success); one relaxed
    /// atomic add.
    #[inline]
    pub fn got_through(&self) {
        self.cell.through.fetch_add(1, Ordering::Relaxed);
    }

    /// What the lane counted since its last sync: refused, and got through.
    #[cfg(test)]
    pub(crate) fn counts(&self) -> (u64, u64) {
        (
            self.cell.refused.load(Ordering::Relaxed),
            self.cell.through.load(Ordering::Relaxed),
        )
    }

    /// Requests waiting in the lane's queue now.
    pub fn waiting(&self, n: usize) {
        self.cell.waiting.store(n, Ordering::Relaxed);
    }

    /// The latest decision for this lane, if any.
    pub fn last(&self) -> Option<Decision> {
        lock(&self.cell.sync).state.last
    }

    /// Starts the lane cold: while the fleet has learned nothing for it, the member
    /// paces at its share of [`COLD_RATE`] instead of going unpaced, its first request
    /// at a random point of its first spacing, and the rate grows by [`COLD_GROWTH`]
    /// at each sync in which its demand met its allotment, until the first throttle
    /// (the fleet goes back two steps, see `decide::proposal`) or until
    /// the interval would fall below `floor` (the lane goes unpaced). Members that
    /// start together therefore reach the capacity together from below, in a few
    /// syncs, instead of each sending unpaced into a throttle storm.
    pub fn start_cold(&self, floor: Duration) {
        let _ = self.cell.cold.set(floor);
    }

    /// Holds a cold lane's requests until its first sync answers, as a member the
    /// summary does not count yet holds them (its share of [`COLD_RATE`] is
    /// `COLD_HOLD_SHARE`, 1/50): unpaced until then, sidecars whose applications start
    /// together would each send at full speed for up to a `sync_interval`, and the
    /// fleet's first throttles would come from that burst, far below the capacity.
    /// Returns whether it holds; the caller then paces the lane's pacer alone at
    /// [`LaneLink::pacing`] of the start's interval, leaving its controller at 0 (the
    /// answer may be a warm fleet's, which a joiner takes from 0). Call it only while
    /// [`Fleet::expects_answer`], so that an answer comes; if Redis fails first, the
    /// lane is let go, unpaced, as it was before it joined.
    pub fn hold_cold(&self) -> bool {
        let c = &self.cell;
        if c.cold.get().is_none() {
            return false;
        }
        // Held while the share is stored, so an answer's share cannot come between.
        let mut sync = lock(&c.sync);
        let Some(held) = decide::hold_cold(&mut sync.state) else {
            return false;
        };
        c.share.store(held.share.to_bits(), Ordering::Relaxed);
        true
    }

    /// Whether the lane is held for its first answer ([`LaneLink::hold_cold`]): no
    /// round has answered for it yet (its decision may be on its way to the lane), and
    /// it was not let go.
    pub fn held(&self) -> bool {
        lock(&self.cell.sync).held()
    }

    /// Lets the lane go unpaced if it is still held for its first answer.
    pub fn let_go(&self) {
        unhold(&self.cell);
    }

    /// Lets the sync task read the queue itself, instead of [`LaneLink::waiting`].
    pub fn sample_queue(&self, probe: Box<dyn Fn() -> usize + Send + Sync>) {
        let _ = self.cell.queue.set(probe);
    }

    /// The spacing this member keeps for a fleet `interval`: `interval / share`, with
    /// the share of the latest decision (1 before the first).
    pub fn pacing(&self, interval: Duration) -> Duration {
        let share = f64::from_bits(self.cell.share.load(Ordering::Relaxed));
        if share >= 1.0 || interval.is_zero() {
            return interval;
        }
        Duration::try_from_secs_f64(interval.as_secs_f64() / share).unwrap_or(Duration::MAX)
    }

    /// The fleet's dispatch spacing for this member's observed `spacing`: times its
    /// share of the latest decision, the inverse of [`LaneLink::pacing`].
    pub fn fleet_spacing(&self, spacing: Duration) -> Duration {
        let share = f64::from_bits(self.cell.share.load(Ordering::Relaxed));
        if share >= 1.0 {
            return spacing;
        }
        spacing.mul_f64(share.max(0.0))
    }

    /// After a controller step: the interval it is at and its epoch, and for a raise,
    /// the epoch it raised from (which wakes the sync task to send it at once).
    pub fn learned(&self, interval: Duration, epoch: u64, raised_from: Option<u64>) {
        let c = &self.cell;
        c.epoch.store(epoch, Ordering::Relaxed);
        let micros = u64::try_from(interval.as_micros()).unwrap_or(NONE - 1);
        c.interval.store(micros.min(NONE - 1), Ordering::Relaxed);
        if let Some(from) = raised_from {
            c.raised_from.fetch_min(from, Ordering::Relaxed);
            c.raised.notify_one();
        }
    }
}

impl Drop for LaneLink {
    fn drop(&mut self) {
        self.cell.gone.store(true, Ordering::Relaxed);
        // Now, not at the next sync: the lanes that take this one's place among the
        // named publish theirs at once, and while Redis is down no sync comes.
        self.cell.metrics.withdraw();
    }
}

impl Fleet {
    /// Starts the sync task on the current tokio runtime. Redis need not be up: the
    /// lanes run on their own until it answers.
    pub fn start(settings: FleetSettings, metrics: &Metrics, clock: Clock) -> Fleet {
        let inner = Arc::new(Inner {
            member: member_id(),
            settings,
            lanes: Mutex::new(Vec::new()),
            prune_at: AtomicUsize::new(PRUNE_AT_LEAST),
            metrics: metrics.fleet(),
            connected: AtomicBool::new(false),
            answering: AtomicBool::new(true),
            fault: Mutex::new(None),
            fingerprints: Mutex::default(),
            raised: Arc::new(Notify::new()),
            hurried: AtomicU32::new(0),
            full_at: AtomicU64::new(0),
        });
        let (stop, stopped) = watch::channel(false);
        let task = tokio::spawn(run(Arc::clone(&inner), clock, stopped));
        Fleet {
            inner,
            stop,
            task: Mutex::new(Some(task)),
        }
    }

    /// A member whose syncs the caller drives with [`Fleet::sync_in`], against a
    /// [`Memory`] store instead of Redis: no task, no connection. The simulator's
    /// members, which share what they learn exactly as sidecars do.
    pub fn driven(settings: FleetSettings, metrics: &Metrics, member: String) -> Fleet {
        let inner = Arc::new(Inner {
            member,
            settings,
            lanes: Mutex::new(Vec::new()),
            prune_at: AtomicUsize::new(PRUNE_AT_LEAST),
            metrics: metrics.fleet(),
            connected: AtomicBool::new(true),
            answering: AtomicBool::new(true),
            fault: Mutex::new(None),
            fingerprints: Mutex::default(),
            raised: Arc::new(Notify::new()),
            hurried: AtomicU32::new(0),
            full_at: AtomicU64::new(0),
        });
        inner.metrics.connected.set(1);
        let (stop, _) = watch::channel(false);
        Fleet {
            inner,
            stop,
            task: Mutex::new(None),
        }
    }

    /// One sync of the lanes that are due against `memory`, whose clock reads `now`; `elapsed`
    /// since this member's last sync (`None`: a round between ticks, of the lanes that
    /// raised since, see [`Fleet::raised`]). What a sync with Redis does, without the wait.
    pub fn sync_in(&self, memory: &mut Memory, now: Duration, elapsed: Option<Duration>) {
        let inner = &self.inner;
        let lanes = live_lanes(inner);
        let trigger = elapsed.map_or(Trigger::Raises, |elapsed| inner.tick(now, elapsed));
        let round = prepare(&lanes, trigger, &inner.settings, usize::MAX);
        if round.lanes.is_empty() && !round.ticked {
            return;
        }
        let times = timings(&inner.settings, inner.tick_period());
        let answers = memory.sync(&inner.member, &round.reports, now, times);
        // The memory answers every lane, so this cannot fail.
        let _ = conclude(inner, round, Ok(answers.into_iter().map(Ok).collect()));
    }

    /// The time from one tick to the next now: a `sync_interval`, and a fifth of it
    /// (`decide::HURRY`) while a lane hurries (`decide::hurries`).
    pub fn tick_period(&self) -> Duration {
        self.inner.tick_period()
    }

    /// Completes when a lane raised since the last call: a throttle's raise goes to
    /// the fleet at once, not at the next tick, so the others take it up to a
    /// `sync_interval` sooner and the burst that caused it is shorter.
    pub async fn raised(&self) {
        self.inner.raised.notified().await;
    }

    /// This member's id in Redis: host, process id and a random part.
    pub fn member(&self) -> &str {
        &self.inner.member
    }

    /// Whether the last syncs reached Redis (the lanes share); `false` while they run
    /// on their own.
    pub fn is_connected(&self) -> bool {
        self.inner.connected.load(Ordering::Relaxed)
    }

    /// Whether the sync task expects an answer soon: from the start and while connected,
    /// not while Redis fails. A lane held for its first answer is let go when this
    /// stops holding.
    pub fn expects_answer(&self) -> bool {
        self.inner.answering.load(Ordering::Relaxed)
    }

    /// Why the lanes run on their own, while they do: what Redis did, in words.
    pub fn fault(&self) -> Option<&'static str> {
        lock(&self.inner.fault).map(Fault::meaning)
    }

    /// Gives the fingerprint of `upstream`'s settings (`fingerprint`) to its lanes
    /// that join from now on: each writes it with its entry, and a lane whose live
    /// members' fingerprints differ is warned of.
    pub fn fingerprint(&self, upstream: &str, fingerprint: String) {
        lock(&self.inner.fingerprints).insert(upstream.to_string(), fingerprint);
    }

    /// Whether any lane has a live member that runs other settings for it.
    pub fn settings_differ(&self) -> bool {
        lock(&self.inner.lanes)
            .iter()
            .any(|lane| lock(&lane.sync).differs)
    }

    /// Whether these are the settings the fleet runs with (a reload keeps the fleet).
    pub fn runs(&self, settings: &FleetSettings) -> bool {
        self.inner.settings == *settings
    }

    /// Registers a lane; `on_sync` is called by the sync task after each sync with what
    /// the fleet decided for this lane, never on the request path. A lane that is not
    /// `named` (past `metrics_lanes`) shares the series labelled `other`.
    pub fn join(
        &self,
        upstream: &str,
        lane: &str,
        named: bool,
        on_sync: Box<dyn Fn(&Decision) + Send + Sync>,
    ) -> LaneLink {
        let key = format!(
            "easeoff:{{{}:{upstream}:{lane}}}:state",
            self.inner.settings.group
        );
        let metrics = if named {
            self.inner.metrics.lane(upstream, lane)
        } else {
            self.inner.metrics.other_lanes(upstream)
        };
        self.enroll(upstream, lane, key, metrics, on_sync)
    }

    /// Shares `flights`, an upstream's learned cap (`max_in_flight = "learn"` on the
    /// upstream), with the fleet under a key of its own; count the upstream's
    /// requests with [`LaneLink::arrived`], so that the member syncs while busy.
    pub fn share_upstream_cap(&self, upstream: &str, flights: Arc<Flights>) -> LaneLink {
        let key = format!(
            "easeoff:{{{}:{upstream}}}:in_flight",
            self.inner.settings.group
        );
        let metrics = self.inner.metrics.unlisted(upstream);
        let link = self.enroll(upstream, "", key, metrics, Box::new(|_| {}));
        link.share_cap(flights);
        link
    }

    /// Registers a cell under `key`, its gauges `metrics`.
    fn enroll(
        &self,
        upstream: &str,
        lane: &str,
        key: String,
        metrics: FleetLaneMetrics,
        on_sync: Box<dyn Fn(&Decision) + Send + Sync>,
    ) -> LaneLink {
        let cell = Arc::new(LaneCell {
            upstream: upstream.to_string(),
            lane: lane.to_string(),
            spread: due::spread(&key),
            key,
            fingerprint: lock(&self.inner.fingerprints)
                .get(upstream)
                .cloned()
                .unwrap_or_default(),
            arrivals: AtomicU64::new(0),
            refused: AtomicU64::new(0),
            through: AtomicU64::new(0),
            raised: Arc::clone(&self.inner.raised),
            waiting: AtomicUsize::new(0),
            interval: AtomicU64::new(NONE),
            epoch: AtomicU64::new(0),
            raised_from: AtomicU64::new(NONE),
            gone: AtomicBool::new(false),
            share: AtomicU64::new(1f64.to_bits()),
            on_sync,
            queue: OnceLock::new(),
            cold: OnceLock::new(),
            flights: OnceLock::new(),
            metrics,
            sync: Mutex::new(LaneSync::default()),
        });
        let mut lanes = lock(&self.inner.lanes);
        // Rounds take out the lanes gone since the last; while Redis is down none
        // comes, and a client cycling lane names would grow the registry for good.
        let prune_at = &self.inner.prune_at;
        if lanes.len() >= prune_at.load(Ordering::Relaxed) {
            prune(&mut lanes);
            prune_at.store((2 * lanes.len()).max(PRUNE_AT_LEAST), Ordering::Relaxed);
        }
        lanes.push(Arc::clone(&cell));
        LaneLink { cell }
    }

    /// Leaves the fleet now (SIGTERM): stops syncing and deletes this member's
    /// entries, waiting at most one `sync_interval` for Redis.
    pub async fn leave(&self) {
        let _ = self.stop.send(true);
        let task = lock(&self.task).take();
        if let Some(task) = task {
            let _ = task.await;
        }
    }
}

impl Drop for Fleet {
    fn drop(&mut self) {
        if let Some(task) = lock(&self.task).take() {
            task.abort();
        }
    }
}

impl Inner {
    /// The tick at `at` on the sync task's timeline, `elapsed` after the last: a
    /// minor one, which samples only the hurried lanes, while lanes hurry and a sync
    /// interval has not gone by since the last full one, which samples them all (a
    /// cold start grows by a step a sync, and must not take one a minor tick).
    fn tick(&self, at: Duration, elapsed: Duration) -> Trigger {
        let sync = self.settings.sync_interval;
        let full_at = Duration::from_nanos(self.full_at.load(Ordering::Relaxed));
        let minor = self.hurrying() && at.saturating_sub(full_at) + sync / (2 * HURRY) < sync;
        if !minor {
            let nanos = u64::try_from(at.as_nanos()).unwrap_or(u64::MAX);
            self.full_at.store(nanos, Ordering::Relaxed);
        }
        let _ = self
            .hurried
            .fetch_update(Ordering::Relaxed, Ordering::Relaxed, |n| n.checked_sub(1));
        Trigger::Tick { elapsed, at, minor }
    }

    /// Whether a lane hurries its syncs.
    fn hurrying(&self) -> bool {
        self.hurried.load(Ordering::Relaxed) > 0
    }

    /// See [`Fleet::tick_period`].
    fn tick_period(&self) -> Duration {
        let sync = self.settings.sync_interval;
        if self.hurrying() { sync / HURRY } else { sync }
    }
}

fn lock<T>(m: &Mutex<T>) -> std::sync::MutexGuard<'_, T> {
    m.lock().unwrap_or_else(PoisonError::into_inner)
}

/// The host (the pod's name in Kubernetes), the process id and a random part, so a
/// restarted process never takes over its predecessor's entries.
fn member_id() -> String {
    let host = std::env::var("HOSTNAME")
        .ok()
        .or_else(|| std::fs::read_to_string("/proc/sys/kernel/hostname").ok())
        .map(|h| h.trim().to_string())
        .filter(|h| !h.is_empty())
        .unwrap_or_else(|| "easeoff".to_string());
    format!("{host}-{}-{:08x}", std::process::id(), fastrand::u32(..))
}

/// The sync task: one round trip per `sync_interval` while connected; reconnection
/// with gRPC's backoff while not. Its ticks, backoff and round-trip times are on
/// `clock`; only the round trips' own deadlines are tokio's, like any socket's.
async fn run(inner: Arc<Inner>, clock: Clock, mut stopped: watch::Receiver<bool>) {
    let settings = &inner.settings;
    let metrics = &inner.metrics;
    let mut store = match Store::new(settings) {
        Ok(store) => store,
        Err(error) => {
            // `check` refuses such URLs and CA files; a config built in code, or a file
            // removed since, may still get here.
            tracing::error!(redis = %settings.redis, %error, "fleet: unusable redis url or ca_file; lanes run on their own");
            stop_answering(&inner, &live_lanes(&inner));
            return;
        }
    };
    let mut standing = Standing {
        backoff: ConnectBackoff::new(&reconnect_backoff(settings.sync_interval)),
        rng: fastrand::Rng::new(),
        connected: false,
        failures: 0,
    };
    let mut tick = clock.interval(settings.sync_interval);
    let mut room = usize::MAX;
    let origin = clock.now();
    let mut last_round = origin;
    // One round between two ticks at most: a lane whose every attempt is throttled
    // raises once per round trip of its own, and Redis must not see a call for each.
    let mut between = true;
    metrics.connected.set(0);
    loop {
        let raises_only = tokio::select! {
            () = tick.tick() => {
                between = true;
                false
            }
            () = inner.raised.notified(), if between => true,
            _ = stopped.changed() => break,
        };
        if raises_only {
            if standing.synced() && raise_round(&inner, &mut store, room).await {
                between = false;
            }
            tick.set_period(inner.tick_period());
            continue;
        }
        if !store.is_connected() {
            if let Admission::Closed(_) = standing.backoff.admit(clock.now()) {
                continue;
            }
            let timeout = settings.sync_interval.max(Duration::from_millis(500));
            if let Err(error) = store.connect(timeout).await {
                metrics.sync_errors.inc();
                standing.backoff.on_failure(clock.now(), &mut standing.rng);
                let fault = Fault::of(&error);
                metrics.redis_error(fault.as_str());
                if !standing.connected {
                    // Before the first sync, or while alone: say why once.
                    alone(&inner, fault, &error.to_string());
                    stop_answering(&inner, &live_lanes(&inner));
                }
                continue;
            }
            standing.backoff.on_success();
        }
        let now = clock.now();
        let elapsed = now.saturating_duration_since(last_round);
        last_round = now;
        let lanes = live_lanes(&inner);
        let started = clock.now();
        let trigger = inner.tick(now.saturating_duration_since(origin), elapsed);
        let result = sync_round(&inner, &mut store, &lanes, trigger, room).await;
        let took = clock.now().saturating_duration_since(started);
        metrics.sync.observe(took.as_secs_f64());
        let most = due::spare(lanes.len(), settings.sync_interval, settings.member_ttl);
        room = due::room(room, took, settings.sync_interval, most);
        if result.is_err() {
            // Failures count by the round: at the hurried pace a Redis that stops
            // answering would send the lanes alone within a fraction of the usual wait.
            inner.hurried.store(0, Ordering::Relaxed);
        }
        standing.settle(&inner, &mut store, &lanes, result, clock.now());
        tick.set_period(inner.tick_period());
    }
    leave(&inner, &mut store).await;
}

/// The sync task's standing with Redis: whether it is synced with the fleet, how many
/// rounds in a row failed, and the pacing of its reconnects.
struct Standing {
    backoff: ConnectBackoff,
    rng: fastrand::Rng,
    connected: bool,
    failures: u32,
}

impl Standing {
    /// Whether the last round answered: while Redis fails to answer, the ticks alone
    /// wait for it (going on alone within three ticks).
    fn synced(&self) -> bool {
        self.connected && self.failures == 0
    }

    /// Takes a tick's round's result: a success joins the fleet; the third failure in
    /// a row drops the connection and puts the lanes on their own.
    fn settle(
        &mut self,
        inner: &Inner,
        store: &mut Store,
        lanes: &[Arc<LaneCell>],
        result: Result<(), (Fault, String)>,
        now: Instant,
    ) {
        let metrics = &inner.metrics;
        match result {
            Ok(()) => {
                self.failures = 0;
                if !self.connected {
                    self.connected = true;
                    inner.connected.store(true, Ordering::Relaxed);
                    inner.answering.store(true, Ordering::Relaxed);
                    metrics.connected.set(1);
                    *lock(&inner.fault) = None;
                    tracing::info!(redis = %inner.settings.redis, member = %inner.member, "fleet: connected; lanes share what they learn");
                }
            }
            Err((fault, error)) => {
                metrics.sync_errors.inc();
                metrics.redis_error(fault.as_str());
                self.failures += 1;
                if self.failures >= FAILURES_TO_LOCAL {
                    store.disconnect();
                    self.backoff.on_failure(now, &mut self.rng);
                    if self.connected {
                        self.connected = false;
                        inner.connected.store(false, Ordering::Relaxed);
                        metrics.connected.set(0);
                        go_local(lanes);
                    }
                    stop_answering(inner, lanes);
                    alone(inner, fault, &error);
                }
            }
        }
    }
}

/// Sends the raised lanes' raises between two ticks; false when there was none (it
/// went with the tick's round already), so the next raise may still go before the tick.
async fn raise_round(inner: &Inner, store: &mut Store, room: usize) -> bool {
    let lanes = live_lanes(inner);
    let raised = lanes
        .iter()
        .any(|lane| lane.raised_from.load(Ordering::Relaxed) != NONE);
    if raised {
        // A failed round keeps the raises for the tick's round, which counts the failure.
        let _ = sync_round(inner, store, &lanes, Trigger::Raises, room).await;
    }
    raised
}

/// Takes this member's entries out of Redis on shutdown, so the others' shares grow at
/// their next sync rather than after `member_ttl`.
async fn leave(inner: &Inner, store: &mut Store) {
    let settings = &inner.settings;
    let keys: Vec<String> = lock(&inner.lanes).iter().map(|l| l.key.clone()).collect();
    if store.is_connected() {
        let left = tokio::time::timeout(settings.sync_interval, store.leave(&inner.member, &keys));
        let error = match left.await {
            Ok(Ok(())) => None,
            Ok(Err(e)) => Some(e.to_string()),
            Err(_) => Some("timed out".to_string()),
        };
        if let Some(error) = error {
            tracing::warn!(%error, "fleet: could not leave at once; this member's entries expire after member_ttl");
        }
    }
    inner.connected.store(false, Ordering::Relaxed);
    inner.metrics.connected.set(0);
}

/// gRPC's backoff between attempts to reach Redis, from one `sync_interval` up to
/// [`MAX_RECONNECT_WAIT`].
fn reconnect_backoff(sync_interval: Duration) -> ConnectBackoffSettings {
    ConnectBackoffSettings {
        initial: sync_interval,
        max: MAX_RECONNECT_WAIT,
        min_connect_timeout: sync_interval * 4,
        ..ConnectBackoffSettings::default()
    }
}

/// The lanes still linked; the ones whose link was dropped are taken out of the
/// registry (their entries expire after `member_ttl`).
fn live_lanes(inner: &Inner) -> Vec<Arc<LaneCell>> {
    let mut lanes = lock(&inner.lanes);
    prune(&mut lanes);
    lanes.clone()
}

/// Takes the lanes whose link was dropped out of `lanes`, and gives back the room a
/// wave of lanes left.
fn prune(lanes: &mut Vec<Arc<LaneCell>>) {
    let before = lanes.len();
    lanes.retain(|lane| !lane.gone.load(Ordering::Relaxed));
    // A cell (and through its callbacks, the dropped lane's own block) is freed now,
    // possibly after the trim that followed the lane's drop: it asks for another.
    crate::trim::dropped(before - lanes.len());
    if lanes.capacity() > 4 * lanes.len().max(PRUNE_AT_LEAST) {
        lanes.shrink_to_fit();
    }
}

/// One round trip for every lane that is due (`due.rs`), within `sync_interval`;
/// then each of those lanes' decision.
async fn sync_round(
    inner: &Inner,
    store: &mut Store,
    lanes: &[Arc<LaneCell>],
    trigger: Trigger,
    room: usize,
) -> Result<(), (Fault, String)> {
    let settings = &inner.settings;
    let round = prepare(lanes, trigger, settings, room);
    if round.lanes.is_empty() && !round.ticked {
        return Ok(());
    }
    let answers = tokio::time::timeout(
        settings.sync_interval,
        store.sync(
            &inner.member,
            &round.reports,
            timings(settings, inner.tick_period()),
        ),
    )
    .await;
    let answers = match answers {
        Ok(Ok(answers)) => Ok(answers),
        Ok(Err(e)) => Err((Fault::of(&e), e.to_string())),
        Err(_) => Err((Fault::Timeout, "timed out".to_string())),
    };
    conclude(inner, round, answers)
}

/// No answer is coming soon (Redis failed before the first answer, or while alone):
/// lanes held for theirs go unpaced, and lanes that join go unheld, until one comes.
fn stop_answering(inner: &Inner, lanes: &[Arc<LaneCell>]) {
    inner.answering.store(false, Ordering::Relaxed);
    for lane in lanes {
        unhold(lane);
    }
}

/// The lanes run on their own because of `fault`: one log line when the cause changes.
fn alone(inner: &Inner, fault: Fault, error: &str) {
    let mut current = lock(&inner.fault);
    if *current == Some(fault) {
        return;
    }
    *current = Some(fault);
    tracing::warn!(
        redis = %inner.settings.redis,
        cause = fault.as_str(),
        %error,
        "fleet: {}; lanes go on alone from their last allocation",
        fault.meaning()
    );
}

/// What sets a round off.
#[derive(Clone, Copy, Debug)]
enum Trigger {
    /// A tick at `at` on the sync task's timeline, `elapsed` after the last tick's
    /// round: every lane's counts are sampled, only the hurried lanes' if `minor`
    /// ([`Inner::tick`]). A lane's counts are over the time since it was last
    /// sampled; `elapsed` for its first.
    Tick {
        elapsed: Duration,
        at: Duration,
        minor: bool,
    },
    /// Raises between ticks: only the lanes that raised report, and nothing is sampled.
    Raises,
}

/// What one sync sends for the lanes that are due, and what it keeps to read the
/// answers; each vector in the order of `lanes`.
struct Round<'a> {
    lanes: Vec<&'a Arc<LaneCell>>,
    reports: Vec<Report<'a>>,
    /// Per lane, what its entry says once this sync is answered.
    entries: Vec<due::Entry>,
    /// Per lane, what the decision rules read of what it sent.
    sent: Vec<Sent>,
    /// Per lane, the earliest epoch raised from since the last sync ([`NONE`] if none).
    raised: Vec<u64>,
    /// A full tick's round, not one of raises between ticks nor a minor tick: it
    /// counts as a sync for the holds counted in syncs.
    ticked: bool,
}

/// The times a sync passes to the store: a lane's summary is refreshed once a sync
/// interval while its members' entries change, so what one member reports reaches
/// the others within two syncs; once a tick (`period`, [`Fleet::tick_period`]) while
/// this member's lanes hurry (`decide::hurries`).
fn timings(settings: &FleetSettings, period: Duration) -> Timings {
    let ttl = settings.member_ttl;
    Timings {
        member_ttl: ttl,
        key_ttl: ttl * KEY_TTL_MEMBER_TTLS,
        hold: settings.sync_interval * HOLD_SYNCS,
        refresh: period,
    }
}

/// Samples every lane's demand, `elapsed` after the last tick's round, and what the
/// lanes that are due (`due.rs`) report: every urgent one, and as many new, returning
/// or refreshing ones as `due::spare` leaves room for; the others skip the round.
/// Between ticks (`Trigger::Raises`), only the lanes that raised report, and nothing
/// is sampled.
fn prepare<'a>(
    lanes: &'a [Arc<LaneCell>],
    trigger: Trigger,
    settings: &FleetSettings,
    room: usize,
) -> Round<'a> {
    let mut round = Round {
        lanes: Vec::new(),
        reports: Vec::new(),
        entries: Vec::new(),
        sent: Vec::new(),
        raised: Vec::new(),
        ticked: matches!(trigger, Trigger::Tick { minor: false, .. }),
    };
    let Trigger::Tick { elapsed, at, minor } = trigger else {
        for lane in lanes {
            round.add_raise(lane);
        }
        return round;
    };
    let mut spare = due::spare(lanes.len(), settings.sync_interval, settings.member_ttl).min(room);
    for lane in lanes {
        let mut sync = lock(&lane.sync);
        if minor && sync.hurry == 0 {
            continue;
        }
        sync.hurry = sync.hurry.saturating_sub(1);
        let elapsed = sync
            .sampled
            .map_or(elapsed, |sampled| at.saturating_sub(sampled));
        sync.sampled = Some(at);
        let arrivals = lane.arrivals.swap(0, Ordering::Relaxed);
        let waiting = match lane.queue.get() {
            Some(probe) => probe(),
            None => lane.waiting.load(Ordering::Relaxed),
        };
        let demand = sync.demand.update(arrivals, waiting, elapsed);
        let warm = sync.state.last.is_some_and(|last| !last.cold);
        let demand = demand::floored(demand, sync.demand.floor(), warm);
        let refused = lane.refused.swap(0, Ordering::Relaxed);
        let answered = demand::Answered {
            through: lane.through.swap(0, Ordering::Relaxed),
            refused,
        };
        let used = sync.used.update(arrivals, answered, waiting, elapsed);
        let used = demand::queued(used, waiting, sync.state.allotted());
        let (through, tried) = (sync.used.through(), sync.used.tried());
        sync.since = sync.since.saturating_add(elapsed);
        let micros = lane.interval.load(Ordering::Relaxed);
        let epoch = lane.epoch.load(Ordering::Relaxed);
        let from = lane.raised_from.load(Ordering::Relaxed);
        let capped = lane
            .flights
            .get()
            .and_then(|f| f.capped())
            .map(|(cap, want)| {
                let want = sync.want.map_or(want, |w| w + WANT_WEIGHT * (want - w));
                sync.want = Some(want);
                Capped::used(cap, want)
            });
        let entry = due::Entry {
            demand,
            used,
            through,
            tried,
            proposal: (micros != NONE).then_some((micros, epoch)),
            capped,
        };
        let state = due::Lane {
            reported: sync.reported,
            now: entry,
            busy: arrivals > 0 || waiting > 0,
            raised: from != NONE,
            rejoining: sync.state.returning() || sync.fault.is_some(),
            since: sync.since,
            spread: lane.spread,
        };
        if !due::urgent(&state) {
            if spare == 0 || !due::due(&state, settings.sync_interval, settings.member_ttl) {
                continue;
            }
            spare -= 1;
        }
        round.add(lane, &sync, entry, demand);
    }
    round
}

impl<'a> Round<'a> {
    /// Adds `lane`'s report of `entry` (its demand and dispatch rate, and the
    /// interval and epoch it learned), with its raise if it has one; `wanted` its
    /// demand whether or not it can use it.
    fn add(&mut self, lane: &'a Arc<LaneCell>, sync: &LaneSync, entry: due::Entry, wanted: f64) {
        let from = lane.raised_from.swap(NONE, Ordering::Relaxed);
        let (demand, used, through, tried) = (entry.demand, entry.used, entry.through, entry.tried);
        let raised_from = (from != NONE).then_some(from);
        let proposal = entry.proposal.map(|(micros, epoch)| {
            let learned = Learned {
                micros,
                epoch,
                raised_from,
            };
            decide::proposal(&sync.state, learned, through, tried, sync.used.dense())
        });
        self.reports.push(Report {
            key: &lane.key,
            demand,
            used,
            through,
            tried,
            fingerprint: &lane.fingerprint,
            proposal,
            counted_in: sync.counted_in,
            seat: sync.state.seat,
            capped: entry.capped,
        });
        self.lanes.push(lane);
        self.entries.push(entry);
        self.sent.push(Sent {
            claim: demand::claim(demand, used),
            wanted,
            through,
            proposal,
        });
        self.raised.push(from);
    }

    /// Between ticks: adds `lane`'s raise, if it raised since the last sync, with
    /// what it last reported; its counts wait for the tick (over a few milliseconds
    /// they would read as a spike of demand).
    fn add_raise(&mut self, lane: &'a Arc<LaneCell>) {
        let sync = lock(&lane.sync);
        let micros = lane.interval.load(Ordering::Relaxed);
        let raised = lane.raised_from.load(Ordering::Relaxed) != NONE;
        let Some(last) = sync.reported.filter(|_| raised && micros != NONE) else {
            return;
        };
        let entry = due::Entry {
            proposal: Some((micros, lane.epoch.load(Ordering::Relaxed))),
            ..last
        };
        self.add(lane, &sync, entry, 0.0);
    }
}

/// Hands each lane its decision from the store's `answers`; a lane without one keeps
/// its raises to report them again at the next sync. A lane whose own key failed
/// (`Fault::one_key`) goes on alone while the others share; the round fails when no
/// lane got an answer and Redis itself is at fault.
fn conclude(
    inner: &Inner,
    round: Round<'_>,
    answers: Result<Vec<redis::RedisResult<Answer>>, (Fault, String)>,
) -> Result<(), (Fault, String)> {
    let lanes = &round.lanes;
    let answers = match answers {
        Ok(answers) if answers.len() == lanes.len() => answers,
        failed => {
            keep_raises(lanes, &round.raised);
            return Err(failed
                .err()
                .unwrap_or((Fault::Other, "answers do not match the lanes".to_string())));
        }
    };
    let mut answered = false;
    let mut failure = None;
    let rejoin = decide::rejoin_syncs(inner.settings.sync_interval);
    for (i, answer) in answers.into_iter().enumerate() {
        let lane = &lanes[i];
        match answer {
            Ok(answer) => {
                answered = true;
                lane_back(inner, lane);
                {
                    let mut sync = lock(&lane.sync);
                    sync.reported = Some(round.entries[i]);
                    sync.since = Duration::ZERO;
                    sync.counted_in = answer.counted_in;
                }
                let answered = Answered {
                    answer: &answer,
                    sent: round.sent[i],
                    cold: lane.cold.get().copied(),
                    rejoin,
                    ticked: round.ticked,
                };
                if apply(lane, &answered) {
                    inner
                        .hurried
                        .fetch_max(HURRY * HURRY_SYNCS, Ordering::Relaxed);
                }
                adopt_cap(lane, &answer, round.entries[i].capped);
            }
            Err(error) => {
                lane.raised_from
                    .fetch_min(round.raised[i], Ordering::Relaxed);
                let fault = Fault::of(&error);
                if fault.one_key() {
                    inner.metrics.redis_error(fault.as_str());
                    lane_alone(inner, lane, fault, &error.to_string());
                } else {
                    failure.get_or_insert((fault, error.to_string()));
                }
            }
        }
    }
    match failure {
        Some(failure) if !answered => Err(failure),
        _ => Ok(()),
    }
}

/// A failed round: every lane reports its raises again at the next sync.
fn keep_raises(lanes: &[&Arc<LaneCell>], raised: &[u64]) {
    for (lane, from) in lanes.iter().zip(raised) {
        lane.raised_from.fetch_min(*from, Ordering::Relaxed);
    }
}

/// One lane's key failed (`fault`): that lane goes on alone, said once per cause.
fn lane_alone(inner: &Inner, lane: &Arc<LaneCell>, fault: Fault, error: &str) {
    let was = lock(&lane.sync).fault.replace(fault);
    if was == Some(fault) {
        return;
    }
    if was.is_none() {
        go_local(std::slice::from_ref(lane));
    }
    tracing::warn!(
        redis = %inner.settings.redis,
        upstream = %lane.upstream,
        lane = %lane.lane,
        key = %lane.key,
        cause = fault.as_str(),
        %error,
        "fleet: {}; this lane goes on alone, the others go on sharing",
        fault.meaning()
    );
}

/// A lane whose key had failed synced again.
fn lane_back(inner: &Inner, lane: &LaneCell) {
    if lock(&lane.sync).fault.take().is_some() {
        tracing::info!(redis = %inner.settings.redis, upstream = %lane.upstream, lane = %lane.lane, "fleet: the lane's key syncs again; it shares with the fleet");
    }
}

/// Turns one lane's answered sync into its decision (`decide::from_answer`) and
/// hands it to the lane; true if the lane hurries its syncs from now
/// (`decide::hurries`).
fn apply(lane: &LaneCell, answered: &Answered<'_>) -> bool {
    let mut sync = lock(&lane.sync);
    let before = sync.state.last;
    let Some(decision) = decide::from_answer(&mut sync.state, answered) else {
        return false;
    };
    let hurries = decide::hurries(before.as_ref(), &decision, sync.used.dense());
    if hurries {
        sync.hurry = HURRY * HURRY_SYNCS;
        tracing::debug!(
            upstream = %lane.upstream,
            lane = %lane.lane,
            "fleet: the fleet's first raise for the lane; syncing faster for a while"
        );
    }
    let differs = fingerprint::differs(&lane.fingerprint, &answered.answer.fingerprints);
    if differs != sync.differs {
        sync.differs = differs;
        settings_changed(lane, differs);
    }
    drop(sync);
    let m = &lane.metrics;
    m.members.set(f64::from(decision.members));
    m.share.set(decision.share);
    m.rate.set(decision.rate);
    lane.share
        .store(decision.share.to_bits(), Ordering::Relaxed);
    (lane.on_sync)(&decision);
    // What the lane proposes next is relative to what it just adopted, even in the
    // same epoch: members whose own raises from one burst lost to another's hold the
    // same epoch number with their own intervals, and one reported again would read
    // as growth and undo the raise that landed.
    lane.epoch.store(decision.epoch, Ordering::Relaxed);
    let micros = u64::try_from(decision.interval.as_micros()).unwrap_or(NONE - 1);
    lane.interval.store(micros, Ordering::Relaxed);
    hurries
}

/// Hands the lane's learned cap its part of the fleet's: the members' caps summed
/// (this member's as it is now, so that a cut since it reported counts), split by
/// what each wants out, as `reported`, and rounded at the member's seat's phase
/// (`Learner::adopt`). A member that no other shares the cap with
/// keeps its own.
fn adopt_cap(lane: &LaneCell, answer: &Answer, reported: Option<Capped>) {
    let (Some(flights), Some(mine)) = (lane.flights.get(), reported) else {
        return;
    };
    // A cap's own key (an upstream's) has no schedule to keep the seat for it.
    let seat = {
        let mut sync = lock(&lane.sync);
        sync.state.seat = sync.state.seat.or(answer.seat);
        sync.state.seat
    };
    let others = answer.others_capped;
    let Some((cap, want)) = flights.capped().filter(|_| others.cap > 0.0) else {
        return;
    };
    let cap = Capped::used(cap, want.max(mine.want)).cap;
    let wants = mine.want + others.want;
    if wants <= 0.0 {
        return;
    }
    let fleet = cap + others.cap;
    flights.adopt(
        fleet * mine.want / wants,
        fleet,
        seat.map_or(0.0, seat_phase),
    );
}

/// One log line when a lane's live members start or stop disagreeing on its settings.
fn settings_changed(lane: &LaneCell, differs: bool) {
    if differs {
        tracing::warn!(upstream = %lane.upstream, lane = %lane.lane, "fleet: another member of this lane runs other upstream settings (a group shared by two configurations?); they share one interval and one rate while pacing differently");
    } else {
        tracing::info!(upstream = %lane.upstream, lane = %lane.lane, "fleet: every member of this lane runs the same upstream settings again");
    }
}

/// Redis stopped answering: each lane goes on alone at its last allocation, but at
/// no more than an equal share of the most members it recently shared with.
fn go_local(lanes: &[Arc<LaneCell>]) {
    for lane in lanes {
        if unhold(lane) {
            continue;
        }
        let Some(alone) = decide::go_local(&mut lock(&lane.sync).state) else {
            continue;
        };
        lane.metrics.members.set(1.0);
        lane.metrics.share.set(1.0);
        lane.metrics.rate.set(alone.rate);
        lane.share.store(1f64.to_bits(), Ordering::Relaxed);
        (lane.on_sync)(&alone);
        let micros = u64::try_from(alone.interval.as_micros()).unwrap_or(NONE - 1);
        lane.interval.store(micros, Ordering::Relaxed);
    }
}

/// Lets a lane held for a first answer that never came (`LaneLink::hold_cold`) go
/// unpaced, on its own, as before it joined. Returns whether it was held.
fn unhold(lane: &LaneCell) -> bool {
    {
        let mut sync = lock(&lane.sync);
        if !sync.held() {
            return false;
        }
        sync.state.last = None;
    }
    let alone = Decision {
        local: true,
        ..Decision::new(Duration::ZERO, 0, 1.0, 1)
    };
    lane.share.store(1f64.to_bits(), Ordering::Relaxed);
    (lane.on_sync)(&alone);
    true
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::config::FleetSettings;

    /// Lanes that come and go while no sync runs (Redis down) leave no cell behind
    /// past twice the live ones: joins take the gone ones out.
    #[test]
    fn lanes_gone_between_syncs_leave_the_registry_without_a_sync() {
        let metrics = Metrics::new().unwrap();
        let fleet = Fleet::driven(FleetSettings::default(), &metrics, "m".to_string());
        let kept: Vec<LaneLink> = (0..10)
            .map(|i| fleet.join("up", &format!("kept{i}"), true, Box::new(|_: &Decision| {})))
            .collect();
        let mut most = 0;
        for i in 0..10_000 {
            let lane = format!("t{i}");
            drop(fleet.join("up", &lane, i % 2 == 0, Box::new(|_: &Decision| {})));
            most = most.max(lock(&fleet.inner.lanes).len());
        }
        assert!(
            most <= PRUNE_AT_LEAST + 1,
            "{most} cells for {} live lanes",
            kept.len()
        );
        let text = metrics.render().unwrap();
        let series = text
            .lines()
            .filter(|l| l.starts_with("easeoff_fleet_rate{"))
            .count();
        assert_eq!(
            series,
            kept.len() + 1,
            "the kept lanes and `other`:\n{text}"
        );
    }

    #[test]
    fn reconnection_attempts_never_wait_longer_than_two_and_a_half_seconds() {
        let mut backoff = ConnectBackoff::new(&reconnect_backoff(Duration::from_millis(250)));
        let mut rng = fastrand::Rng::with_seed(3);
        let mut now = Instant::now();
        let mut longest = Duration::ZERO;
        for _ in 0..40 {
            let wait = backoff.on_failure(now, &mut rng).unwrap_or_default();
            longest = longest.max(wait);
            now += wait;
            assert_eq!(backoff.admit(now), Admission::Probe);
        }
        assert!(longest > Duration::from_millis(1500), "{longest:?}");
        assert!(longest <= Duration::from_millis(2400), "{longest:?}");
    }

    /// A member that saw three members a moment ago, then itself alone (the others'
    /// entries expired in a Redis that refused their writes), goes on alone at a
    /// third of the fleet rate, not all of it.
    #[test]
    fn going_alone_takes_no_more_than_an_equal_share_of_the_recent_members() {
        let settings = FleetSettings::default();
        let (sync, ttl) = (settings.sync_interval, settings.member_ttl);
        let (mut memory, members, seen, mut now) = three_sharing(&settings);
        // Only the first syncs now; the others are forgotten after the member TTL.
        while now < ttl * 3 {
            now += sync;
            members[0].0.sync_in(&mut memory, now, Some(sync));
        }
        let alone = lock(&seen).last().copied().unwrap();
        assert_eq!((alone.members, alone.share), (1, 1.0));
        go_local(&live_lanes(&members[0].0.inner));
        let local = lock(&seen).last().copied().unwrap();
        assert!(local.local);
        assert_eq!(local.interval, Duration::from_millis(30), "{local:?}");
    }

    /// Two members of a paced fleet (10 ms, epoch 1) raise from one burst, each to
    /// epoch 2 at its own interval; the first one's raise lands. The second takes it
    /// as a raise and reports it from then on: its own 13 ms, in the same epoch
    /// number, read as growth, would have undone the raise.
    #[test]
    fn a_member_whose_raise_lost_reports_the_raise_that_landed() {
        let settings = FleetSettings::default();
        let sync = settings.sync_interval;
        let (mut memory, members, _, mut now) = three_sharing(&settings);
        members[0].1.learned(Duration::from_millis(20), 2, Some(1));
        members[1].1.learned(Duration::from_millis(13), 2, Some(1));
        now += sync;
        members[0].0.sync_in(&mut memory, now, Some(sync));
        members[1].0.sync_in(&mut memory, now, Some(sync));
        let second = &members[1].1;
        let decision = second.last().unwrap();
        assert_eq!(
            (decision.interval, decision.epoch),
            (Duration::from_millis(20), 2)
        );
        assert!(decision.outraised);
        assert!(!members[0].1.last().unwrap().outraised);
        let cell = &second.cell;
        assert_eq!(cell.interval.load(Ordering::Relaxed), 20_000);
        assert_eq!(cell.epoch.load(Ordering::Relaxed), 2);
        for _ in 0..2 {
            now += sync;
            for (fleet, _) in &members {
                fleet.sync_in(&mut memory, now, Some(sync));
            }
        }
        let fleet = second.last().unwrap();
        assert_eq!(
            (fleet.interval, fleet.epoch),
            (Duration::from_millis(20), 2)
        );
        assert!(!fleet.outraised);
    }

    /// A raise goes to the store between ticks, alone: the member's raise lands and
    /// another member reads it at its next sync, while the lanes that did not raise
    /// wait for the tick and the counts of the one that did are not sampled over the
    /// few milliseconds since the last tick.
    #[tokio::test(start_paused = true)]
    async fn a_raise_goes_between_ticks_without_the_counts() {
        let settings = FleetSettings::default();
        let sync = settings.sync_interval;
        let (mut memory, members, _, now) = three_sharing(&settings);
        let first = &members[0];
        let quiet = first
            .0
            .join("up", "quiet", true, Box::new(|_: &Decision| {}));
        first.0.sync_in(&mut memory, now, Some(sync));
        let reported = lock(&quiet.cell.sync).reported;
        for _ in 0..5 {
            first.1.arrived();
        }
        // No raise: a round between ticks sends nothing.
        first
            .0
            .sync_in(&mut memory, now + Duration::from_millis(5), None);
        assert_eq!(lock(&quiet.cell.sync).reported, reported);
        first.1.learned(Duration::from_millis(20), 2, Some(1));
        let waker = tokio::time::timeout(Duration::from_millis(1), first.0.raised());
        assert!(waker.await.is_ok(), "the raise wakes the sync task");
        let age = lock(&first.1.cell.sync).state.peak_age;
        first
            .0
            .sync_in(&mut memory, now + Duration::from_millis(10), None);
        // Not a sync for the holds counted in syncs.
        assert_eq!(lock(&first.1.cell.sync).state.peak_age, age);
        // The raise landed; the arrivals wait for the tick, the quiet lane did not sync.
        assert_eq!(first.1.cell.arrivals.load(Ordering::Relaxed), 5);
        assert_eq!(first.1.cell.raised_from.load(Ordering::Relaxed), NONE);
        assert_eq!(lock(&quiet.cell.sync).reported, reported);
        members[1]
            .0
            .sync_in(&mut memory, now + Duration::from_millis(20), Some(sync));
        let taken = members[1].1.last().unwrap();
        assert_eq!(
            (taken.interval, taken.epoch),
            (Duration::from_millis(20), 2)
        );
    }

    /// What a member's entry says got through is what its answers said got through,
    /// not what was shed or throttled: while the fleet throttles, the entries sum
    /// to what got through.
    #[test]
    fn the_others_read_what_got_through_of_a_members_attempts() {
        let settings = FleetSettings::default();
        let sync = settings.sync_interval;
        let (mut memory, members, _, mut now) = three_sharing(&settings);
        let (busy, _) = &members[1];
        for _ in 0..100 {
            members[1].1.arrived();
        }
        for _ in 0..75 {
            members[1].1.refused();
        }
        for _ in 0..25 {
            members[1].1.got_through();
        }
        members[1].1.waiting(1000);
        now += sync;
        busy.sync_in(&mut memory, now, Some(sync));
        members[0].0.sync_in(&mut memory, now, Some(sync));
        // 25 got through in a quarter second. The third member dispatched nothing
        // with requests waiting: nothing got through (its claim still reaches its
        // allotment, `demand::queued`).
        let others = lock(&members[0].1.cell.sync).state.others_through;
        assert!((others - 100.0).abs() < 1e-9, "{others}");
    }

    /// The fleet's first raise after it was unpaced is marked as the estimate it is,
    /// for the members that shared the unpaced fleet, once; a member that joins the
    /// paced fleet later takes its interval as measured.
    #[test]
    fn only_the_first_raise_of_an_unpaced_fleet_is_marked_an_estimate() {
        let metrics = Metrics::new().unwrap();
        let settings = FleetSettings::default();
        let sync = settings.sync_interval;
        let mut memory = Memory::new();
        let join = |name: &str| {
            let fleet = Fleet::driven(settings.clone(), &metrics, name.to_string());
            let link = fleet.join("up", "default", true, Box::new(|_: &Decision| {}));
            link.learned(Duration::ZERO, 0, None);
            // Busy, so it syncs every round.
            link.waiting(1);
            (fleet, link)
        };
        let members = [join("a"), join("b")];
        let mut now = Duration::ZERO;
        for _ in 0..2 {
            now += sync;
            for (fleet, _) in &members {
                fleet.sync_in(&mut memory, now, Some(sync));
            }
        }
        assert_eq!(members[1].1.last().unwrap().interval, Duration::ZERO);
        members[0].1.learned(Duration::from_millis(20), 1, Some(0));
        now += sync;
        for (fleet, _) in &members {
            fleet.sync_in(&mut memory, now, Some(sync));
        }
        for (_, link) in &members {
            let first = link.last().unwrap();
            assert_eq!(first.interval, Duration::from_millis(20));
            assert!(first.first, "{first:?}");
        }
        let joiner = join("c");
        now += sync;
        for (fleet, _) in members.iter().chain([&joiner]) {
            fleet.sync_in(&mut memory, now, Some(sync));
        }
        for (_, link) in members.iter().chain([&joiner]) {
            assert!(!link.last().unwrap().first);
        }
    }

    /// Members of one lane that starts cold, each with a request waiting.
    fn cold_members(
        settings: &FleetSettings,
        metrics: &Metrics,
        names: &[&str],
    ) -> Vec<(Fleet, LaneLink)> {
        names
            .iter()
            .map(|name| {
                let fleet = Fleet::driven(settings.clone(), metrics, name.to_string());
                let link = fleet.join("up", "default", true, Box::new(|_: &Decision| {}));
                link.start_cold(Duration::from_millis(1));
                link.waiting(1);
                (fleet, link)
            })
            .collect()
    }

    /// Before the summary counts it, a member of a cold lane holds its first
    /// requests: a share of 1/50 of the start's 10/s, a 5 s spacing. The first
    /// member's sync wrote the summary; the second's, just after, is not in it.
    #[test]
    fn a_cold_member_holds_until_the_summary_counts_it() {
        let metrics = Metrics::new().unwrap();
        let settings = FleetSettings::default();
        let sync = settings.sync_interval;
        let mut memory = Memory::new();
        let members = cold_members(&settings, &metrics, &["a", "b"]);
        let mut now = sync;
        for (fleet, _) in &members {
            fleet.sync_in(&mut memory, now, Some(sync));
            now += Duration::from_millis(1);
        }
        let first = members[1].1.last().unwrap();
        assert!(first.cold, "{first:?}");
        assert_eq!(first.interval, Duration::from_millis(100));
        assert_eq!(first.member_interval(), Duration::from_secs(5));
        // Counted a few syncs on, it takes its half of the start's rate.
        for _ in 0..4 {
            now += sync;
            for (fleet, _) in &members {
                fleet.sync_in(&mut memory, now, Some(sync));
            }
        }
        let counted = members[1].1.last().unwrap();
        assert!(counted.cold, "{counted:?}");
        assert_eq!(counted.members, 2);
        assert!(
            counted.member_interval() < Duration::from_secs(1),
            "{counted:?}"
        );
    }

    /// The fleet's first raise for a lane (here its cold start's end) hurries the
    /// member's ticks to a `HURRY`th of a sync for `HURRY_SYNCS` syncs; a minor tick
    /// samples only the hurried lane, so another lane's cold start grows at full
    /// ticks only, once a sync as ever.
    #[test]
    fn the_fleets_first_raise_hurries_the_lanes_syncs_for_a_while() {
        let metrics = Metrics::new().unwrap();
        let settings = FleetSettings::default();
        let sync = settings.sync_interval;
        let mut memory = Memory::new();
        let fleet = Fleet::driven(settings, &metrics, "a".to_string());
        let links: Vec<LaneLink> = ["hot", "cold"]
            .into_iter()
            .map(|lane| {
                let link = fleet.join("up", lane, true, Box::new(|_: &Decision| {}));
                link.start_cold(Duration::from_millis(1));
                link
            })
            .collect();
        let mut now = Duration::ZERO;
        let tick = |memory: &mut Memory, now: &mut Duration| {
            let period = fleet.tick_period();
            *now += period;
            for link in &links {
                (0..10).for_each(|_| link.arrived());
                (0..10).for_each(|_| link.got_through());
            }
            fleet.sync_in(memory, *now, Some(period));
        };
        for _ in 0..4 {
            tick(&mut memory, &mut now);
        }
        assert_eq!(fleet.tick_period(), sync);
        let hot = links[0].last().unwrap();
        assert!(hot.cold, "{hot:?}");
        links[0].learned(hot.interval * 2, 1, Some(0));
        fleet.sync_in(&mut memory, now + Duration::from_millis(1), None);
        let raised = links[0].last().unwrap();
        assert!(!raised.cold && raised.epoch == 1, "{raised:?}");
        assert_eq!(fleet.tick_period(), sync / HURRY);
        let mut cold = links[1].last().unwrap();
        let mut grew = 0;
        for n in 1..=HURRY * HURRY_SYNCS {
            tick(&mut memory, &mut now);
            let now_cold = links[1].last().unwrap();
            assert!(now_cold.cold, "{now_cold:?}");
            if now_cold.interval != cold.interval {
                assert_eq!(n % HURRY, 0, "the cold lane grew at minor tick {n}");
                grew += 1;
            }
            cold = now_cold;
        }
        assert_eq!(grew, HURRY_SYNCS, "the cold lane grows once a sync");
        assert_eq!(fleet.tick_period(), sync);
    }

    /// Once counted, the members of a cold lane split its rate equally, whatever they
    /// claim: a member that started first and dispatched most gets no more than the
    /// others, which are about to dispatch too.
    #[test]
    fn a_cold_lanes_members_split_its_rate_equally() {
        let metrics = Metrics::new().unwrap();
        let settings = FleetSettings::default();
        let sync = settings.sync_interval;
        let mut memory = Memory::new();
        let members = cold_members(&settings, &metrics, &["a", "b", "c"]);
        let mut now = sync;
        for _ in 0..5 {
            for _ in 0..10 {
                members[0].1.arrived();
            }
            for (fleet, _) in &members {
                fleet.sync_in(&mut memory, now, Some(sync));
                now += Duration::from_millis(1);
            }
            now += sync;
        }
        for (_, link) in &members {
            let decision = link.last().unwrap();
            assert!(decision.cold, "{decision:?}");
            assert_eq!(decision.members, 3);
            assert_eq!(decision.share, 1.0 / 3.0, "{decision:?}");
        }
    }

    /// A cold lane is held from the start, at the spacing of a member the summary
    /// does not count yet, until its first answer; one whose first answer never comes
    /// (Redis failed first) goes unpaced, as it was before it joined. A lane that
    /// does not start cold is not held.
    #[test]
    fn a_cold_lane_is_held_until_its_first_answer_and_released_if_none_comes() {
        let metrics = Metrics::new().unwrap();
        let settings = FleetSettings::default();
        let sync = settings.sync_interval;
        let mut memory = Memory::new();
        let fleet = Fleet::driven(settings.clone(), &metrics, "a".to_string());
        let seen = Arc::new(Mutex::new(Vec::new()));
        let taken = Arc::clone(&seen);
        let link = fleet.join(
            "up",
            "orders",
            true,
            Box::new(move |d: &Decision| lock(&taken).push(*d)),
        );
        let warm = fleet.join("up", "warm", true, Box::new(|_: &Decision| {}));
        assert!(!warm.hold_cold());
        link.start_cold(Duration::from_millis(1));
        assert!(link.hold_cold());
        assert!(!link.hold_cold(), "held once");
        assert!(link.held());
        assert_eq!(
            link.pacing(Duration::from_millis(100)),
            Duration::from_secs(5)
        );
        link.waiting(1);
        fleet.sync_in(&mut memory, sync, Some(sync));
        let first = link.last().unwrap();
        assert!(first.cold, "{first:?}");
        assert!(!link.held(), "a hold after this leaves the answer be");
        assert_eq!(lock(&seen).len(), 1, "the answer reached the lane");

        let other = fleet.join("up", "other", true, Box::new(|_: &Decision| {}));
        other.start_cold(Duration::from_millis(1));
        assert!(other.hold_cold());
        go_local(std::slice::from_ref(&other.cell));
        assert_eq!(other.last(), None);
        assert_eq!(
            other.pacing(Duration::from_millis(100)),
            Duration::from_millis(100)
        );
        // Redis failing after the first answer takes the answered lane on alone, as ever.
        go_local(std::slice::from_ref(&link.cell));
        let alone = *lock(&seen).last().unwrap();
        assert!(
            alone.local && !alone.cold && !alone.interval.is_zero(),
            "{alone:?}"
        );
    }

    /// Three members of one lane in memory, synced until each counts three; the first
    /// member's decisions go to the returned list. Also the memory and its time.
    #[allow(clippy::type_complexity, reason = "a test's tuple")]
    fn three_sharing(
        settings: &FleetSettings,
    ) -> (
        Memory,
        Vec<(Fleet, LaneLink)>,
        Arc<Mutex<Vec<Decision>>>,
        Duration,
    ) {
        let metrics = Metrics::new().unwrap();
        let mut memory = Memory::new();
        let sync = settings.sync_interval;
        let seen = Arc::new(Mutex::new(Vec::<Decision>::new()));
        let members: Vec<(Fleet, LaneLink)> = (0..3)
            .map(|i| {
                let fleet = Fleet::driven(settings.clone(), &metrics, format!("m{i}"));
                let seen = Arc::clone(&seen);
                let cb = Box::new(move |d: &Decision| {
                    if i == 0 {
                        lock(&seen).push(*d);
                    }
                });
                let link = fleet.join("up", "default", true, cb);
                link.waiting(1000);
                (fleet, link)
            })
            .collect();
        members[0].1.learned(Duration::from_millis(10), 1, None);
        let mut now = Duration::ZERO;
        for _ in 0..4 {
            now += sync;
            for (fleet, _) in &members {
                fleet.sync_in(&mut memory, now, Some(sync));
            }
        }
        assert_eq!(lock(&seen).last().map(|d| d.members), Some(3));
        (memory, members, seen, now)
    }

    /// Three members go on alone through an outage longer than the member TTL; the
    /// first back finds the others' entries expired and keeps to a third of the fleet
    /// rate until they are back, or until the hold is over when they are not.
    #[test]
    fn a_member_back_first_from_an_outage_keeps_an_equal_share_of_the_recent_peak() {
        let settings = FleetSettings::default();
        let (sync, ttl) = (settings.sync_interval, settings.member_ttl);
        let (mut memory, members, seen, mut now) = three_sharing(&settings);
        for (fleet, _) in &members {
            go_local(&live_lanes(&fleet.inner));
        }
        now += ttl * 2;
        let last = |seen: &Mutex<Vec<Decision>>| lock(seen).last().copied().unwrap();
        members[0].0.sync_in(&mut memory, now, Some(sync));
        let back = last(&seen);
        assert_eq!(back.members, 1);
        assert!((back.share - 1.0 / 3.0).abs() < 1e-9, "{back:?}");
        // The others come back: the shares are the fleet's own again.
        for _ in 0..2 {
            now += sync;
            for (fleet, _) in &members {
                fleet.sync_in(&mut memory, now, Some(sync));
            }
        }
        assert_eq!(last(&seen).members, 3);
        // An outage the others do not come back from: a third for the hold, then all.
        for (fleet, _) in &members {
            go_local(&live_lanes(&fleet.inner));
        }
        now += ttl * 2;
        let held = decide::rejoin_syncs(sync);
        for _ in 0..held {
            members[0].0.sync_in(&mut memory, now, Some(sync));
            assert!((last(&seen).share - 1.0 / 3.0).abs() < 1e-9);
            now += sync;
        }
        members[0].0.sync_in(&mut memory, now, Some(sync));
        assert_eq!((last(&seen).members, last(&seen).share), (1, 1.0));
    }

    /// One member busy, one idle: the idle one syncs only to refresh its entry (once
    /// per seven to nine rounds with a 5 s TTL and 250 ms rounds), and the busy one
    /// counts it as a member throughout.
    #[test]
    fn an_idle_lane_skips_rounds_but_stays_a_member() {
        let metrics = Metrics::new().unwrap();
        let mut memory = Memory::new();
        let settings = FleetSettings::default();
        let sync = settings.sync_interval;
        let counted = |seen: &Arc<Mutex<Vec<Decision>>>| {
            let seen = Arc::clone(seen);
            Box::new(move |d: &Decision| lock(&seen).push(*d))
        };
        let (busy_seen, idle_seen) = (Arc::default(), Arc::default());
        let busy = Fleet::driven(settings.clone(), &metrics, "busy".to_string());
        let busy_link = busy.join("up", "t", true, counted(&busy_seen));
        busy_link.learned(Duration::from_millis(10), 1, None);
        busy_link.waiting(5);
        let idle = Fleet::driven(settings, &metrics, "idle".to_string());
        let idle_link = idle.join("up", "t", true, counted(&idle_seen));
        let mut now = Duration::ZERO;
        for _ in 0..40 {
            now += sync;
            busy.sync_in(&mut memory, now, Some(sync));
            idle.sync_in(&mut memory, now, Some(sync));
        }
        let rounds: Vec<u32> = lock(&busy_seen).iter().map(|d| d.members).collect();
        assert_eq!(rounds.len(), 40);
        assert!(rounds[1..].iter().all(|m| *m == 2), "{rounds:?}");
        // The first answer, the interval it adopted from it, then every seventh to
        // ninth round, as the lane's refresh age says.
        let every = due::refresh_age(
            FleetSettings::default().member_ttl,
            due::spread(&idle_link.cell.key),
        );
        let period = every.as_millis().div_ceil(sync.as_millis()) as usize - 1;
        assert!((7..=9).contains(&period), "{period}");
        assert_eq!(
            lock(&idle_seen).len(),
            2 + 38 / period,
            "{:?}",
            lock(&idle_seen)
        );
    }

    /// Sixteen unpaced members, 40/s each: the first throttle's observed spacing
    /// (25 ms, this member's own) turns into the fleet's, 1.5625 ms, and pacing turns
    /// it back, so no member takes its own rate for the fleet's.
    #[test]
    fn an_unpaced_members_spacing_is_its_part_of_the_fleets() {
        let metrics = Metrics::new().unwrap();
        let mut memory = Memory::new();
        let settings = FleetSettings::default();
        let sync = settings.sync_interval;
        let members: Vec<(Fleet, LaneLink)> = (0..16)
            .map(|i| {
                let fleet = Fleet::driven(settings.clone(), &metrics, format!("m{i}"));
                let link = fleet.join("up", "default", true, Box::new(|_| {}));
                link.learned(Duration::ZERO, 0, None);
                (fleet, link)
            })
            .collect();
        let mut now = Duration::ZERO;
        // Long enough for what every member got through to have settled at 40/s.
        for _ in 0..40 {
            now += sync;
            for (fleet, link) in &members {
                (0..10).for_each(|_| link.arrived());
                fleet.sync_in(&mut memory, now, Some(sync));
            }
        }
        let link = &members[0].1;
        assert_eq!(
            link.last().map(|d| (d.interval, d.members)),
            Some((Duration::ZERO, 16))
        );
        let fleet = link.fleet_spacing(Duration::from_millis(25));
        assert_eq!(
            fleet,
            Duration::from_micros(1562) + Duration::from_nanos(500)
        );
        assert_eq!(
            link.pacing(Duration::from_millis(2)),
            Duration::from_millis(32)
        );
    }

    /// Two members share an upstream's learned cap: the caps add up to the
    /// fleet's, and each takes its part by what it wants out (out and waiting),
    /// rounded at its seat's phase so that the parts add up to the whole.
    #[tokio::test(start_paused = true)]
    async fn members_split_the_sum_of_their_learned_caps_by_what_they_want_out() {
        use crate::concurrency::CapSetting;
        use crate::flights::Told;
        let metrics = Metrics::new().unwrap();
        let mut memory = Memory::new();
        let settings = FleetSettings::default();
        let sync = settings.sync_interval;
        let far = Instant::now() + Duration::from_secs(3600);
        let mut members = Vec::new();
        let mut held = Vec::new();
        for name in ["a", "b"] {
            let fleet = Fleet::driven(settings.clone(), &metrics, name.to_string());
            let flights = Flights::new(CapSetting::Learn, 100, Clock::Tokio, None).unwrap();
            let link = fleet.share_upstream_cap("up", Arc::clone(&flights));
            // Refused with 4 out: a cap of 3, out of its slow start.
            let mut out = Vec::new();
            for _ in 0..4 {
                out.push(flights.take(far).await.unwrap());
            }
            flights.told(&out[3], Told::Refused);
            out.truncate(3);
            assert_eq!(flights.cap(), 3);
            held.push(out);
            members.push((fleet, link, flights));
        }
        // Member a has 9 more requests waiting: it wants 12 out, b 3.
        let a = Arc::clone(&members[0].2);
        let waiters: Vec<_> = (0..9)
            .map(|_| {
                let a = Arc::clone(&a);
                tokio::spawn(async move {
                    let _flight = a.take(far).await;
                    std::future::pending::<()>().await;
                })
            })
            .collect();
        tokio::task::yield_now().await;
        assert_eq!(a.waiting(), 9);
        let mut now = Duration::ZERO;
        for _ in 0..40 {
            now += sync;
            for (fleet, link, _) in &members {
                link.arrived();
                fleet.sync_in(&mut memory, now, Some(sync));
            }
            tokio::task::yield_now().await;
        }
        // The fleet's 6 split 12 : 3, about 4.8 and 1.2: at seats 1 and 2 (phases
        // 1/2 and 1/4) 5 and 1.
        let caps: Vec<u32> = members.iter().map(|(_, _, f)| f.cap()).collect();
        let limits: Vec<f64> = members
            .iter()
            .map(|(_, _, f)| f.capped().unwrap().0)
            .collect();
        let seats: Vec<_> = members
            .iter()
            .map(|(_, l, _)| lock(&l.cell.sync).state.seat)
            .collect();
        assert_eq!(seats, vec![Some(1), Some(2)]);
        assert!((limits[0] / limits[1] - 4.0).abs() < 1e-9, "{limits:?}");
        // The members took their parts at different syncs: the sum moved a little.
        assert!((limits[0] + limits[1] - 6.0).abs() < 0.25, "{limits:?}");
        assert_eq!(caps, vec![5, 1]);
        // The cap's key is no lane: no fleet series of its own, nor `other`'s.
        let text = metrics.render().unwrap();
        assert!(text.contains("easeoff_fleet_connected"), "{text}");
        assert!(
            !text.contains("lane=\"\"") && !text.contains("lane=\"other\""),
            "{text}"
        );
        for waiter in waiters {
            waiter.abort();
        }
    }
}
