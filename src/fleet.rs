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
//! per fleet-wide burst, growth at one sidecar's pace) is `learning.rs`'s. The request
//! path only bumps an atomic ([`LaneLink::arrived`]); decisions reach the lane through
//! the callback it gave to `join`, from the sync task. When Redis does not answer two
//! syncs in a row (at most `3 × sync_interval` after the last good one), each lane is
//! told to go on alone from its last allocation, and the task reconnects with gRPC's
//! backoff; nothing on the request path waits for Redis. `easeoff simulate --scenario
//! fleet` runs the same rounds ([`Fleet::sync_in`]) against `memory.rs`, which applies
//! the same rules as the script.

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
use std::sync::atomic::{AtomicBool, AtomicU64, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex, OnceLock, PoisonError};
use std::time::Duration;

use tokio::sync::{Notify, watch};
use tokio::task::JoinHandle;

use crate::clock::{Clock, Instant};
use crate::config::{ConnectBackoffSettings, FleetSettings};
use crate::connect_backoff::{Admission, ConnectBackoff};
use crate::metrics::{FleetLaneMetrics, FleetMetrics, Metrics};
use demand::{Demand, Used};
pub use fault::Fault;
pub use fingerprint::fingerprint;
use learning::{Proposal, Shared};
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
/// The lane label the lanes past `metrics_lanes` share, as in the lanes' own series.
const OTHER_SERIES: &str = "other";
/// No proposal yet (the lane has learned nothing), in [`LaneCell::interval`].
const NONE: u64 = u64::MAX;
/// How many syncs a lane remembers the most members it shared with (a minute at the
/// default 250 ms): going on alone, it takes no more than an equal share of that
/// many, though the others' entries may have expired in a Redis that half-answered.
const PEAK_SYNCS: u32 = 240;
/// How long a lane back from going on alone keeps to an equal share of its recent
/// peak while fewer members are live: the others' entries expired during an outage
/// longer than `member_ttl`, and they come back within one reconnection wait of it.
const REJOIN_HOLD: Duration = Duration::from_secs(4);

/// The fleet rate, per second, a lane that starts cold begins at (see
/// [`LaneLink::start_cold`]): low enough that a fleet of any size starting together
/// does not throttle a small table, and a few doublings from most tables' capacity.
pub const COLD_RATE: f64 = 10.0;
/// How much a cold lane's rate grows at each sync while its member uses its share,
/// as TCP's slow start grows every round trip; less than doubling, so the step that
/// meets the first throttle overshoots the capacity by at most half.
pub const COLD_GROWTH: f64 = 1.5;
/// How far below the fleet's cold rate last read the estimate a cold start's first
/// throttle makes lies: half a step of [`COLD_GROWTH`] (geometrically).
const COLD_STEP_BACK: f64 = 1.224_744_871_391_589; // COLD_GROWTH.sqrt()
/// The share a cold lane paces at until the summary counts its member: below most
/// fleets' equal share, so that its first slot lies out until the share is known, and
/// a spacing (5 s at [`COLD_RATE`]) that keeps a few queued requests within
/// `queue.max_wait`'s default.
const COLD_HOLD_SHARE: f64 = 1.0 / 50.0;

/// What the fleet decided for one lane at a sync.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct Decision {
    /// The fleet-wide interval `I_f`; 0 leaves the lane unpaced.
    pub interval: Duration,
    /// The fleet's epoch for the lane.
    pub epoch: u64,
    /// This member's fraction of the fleet rate, in (0, 1].
    pub share: f64,
    /// Live members sharing the lane, this one included.
    pub members: u32,
    /// The fleet rate, requests per second (`1 / interval`); 0 while unpaced.
    pub rate: f64,
    /// Redis stopped answering: the lane goes on alone from its last allocation
    /// (`interval` is then this member's own and `share` 1) until the fleet returns.
    pub local: bool,
    /// What the lane multiplies its learned intervals by before taking this decision:
    /// `1 / share` when it goes on alone (its interval becomes its own), the share it
    /// had then when it returns to the fleet, 1 otherwise.
    pub rescale: f64,
    /// This member raised in the burst the fleet's interval comes from, and the raise
    /// that landed is not its own: it takes the fleet's as a raise, though the epoch
    /// is the one its own raise reached.
    pub outraised: bool,
    /// The fleet's first raise since it was unpaced: an estimate from one burst, as
    /// a sidecar's own raise from 0 is, so the lane keeps growing from it as from one.
    pub first: bool,
    /// The lane starts cold: the fleet has learned nothing yet, and the interval is
    /// the start's (see [`LaneLink::start_cold`]).
    pub cold: bool,
    /// This member's place in the fleet's schedule, once it has a seat and the lane
    /// has had a raise (see [`Place`]).
    pub place: Option<Place>,
}

/// Where a member's slots fall in the fleet's schedule. The store counts the fleet's
/// progress in slots of the fleet interval (`progress`, moving at the interval in
/// force, so it does not jump when the interval changes); a member at share `s`
/// takes one slot in `1 / s` and puts its own at `phase` of them: when `progress ×
/// s − phase` is whole. Members with equal shares and phases spread over [0, 1)
/// (`seat_phase`) dispatch evenly spread over their spacing, where phases drawn at
/// random bunch.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct Place {
    /// The fraction of its spacing this member's slots lie at.
    pub phase: f64,
    /// The fleet's progress at the answer, in fleet slots.
    pub progress: f64,
}

impl Place {
    /// How far ahead of now, in spacings (in [0, 1)), the member's next place in the
    /// schedule lies at `share`.
    pub fn ahead(&self, share: f64) -> f64 {
        let ahead = (self.phase - self.progress * share).rem_euclid(1.0);
        if ahead.is_finite() { ahead } else { 0.0 }
    }
}

impl Decision {
    /// A decision to pace at `share` of the fleet `interval` shared by `members`, in
    /// `epoch`, and nothing else: its rate is the interval's, and no flag is set.
    pub fn new(interval: Duration, epoch: u64, share: f64, members: u32) -> Decision {
        Decision {
            interval,
            epoch,
            share,
            members,
            rate: if interval.is_zero() {
                0.0
            } else {
                1.0 / interval.as_secs_f64()
            },
            local: false,
            rescale: 1.0,
            outraised: false,
            first: false,
            cold: false,
            place: None,
        }
    }

    /// The spacing this member's pacer keeps: `interval / share`.
    pub fn member_interval(&self) -> Duration {
        if self.interval.is_zero() {
            return Duration::ZERO;
        }
        Duration::try_from_secs_f64(self.interval.as_secs_f64() / self.share)
            .unwrap_or(Duration::MAX)
    }
}

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
    metrics: FleetLaneMetrics,
    /// Whether the lane has series of its own (else it shares [`OTHER_SERIES`]'s).
    named: bool,
    /// The sync task's own state for the lane; only that task locks it.
    sync: Mutex<LaneSync>,
}

#[derive(Default)]
struct LaneSync {
    demand: Demand,
    used: Used,
    last: Option<Decision>,
    /// While on its own, the lane's interval is this member's; proposals are scaled
    /// back to the fleet's by the share it last had.
    scale: Option<f64>,
    /// The most members of the last [`PEAK_SYNCS`] decisions, and how many syncs ago.
    peak_members: u32,
    peak_age: u32,
    /// Syncs left in which the lane, back from going on alone, takes no more than an
    /// equal share of `peak_members` while fewer are live ([`REJOIN_HOLD`]).
    rejoining: u32,
    /// Why this lane alone could not sync (its key), while it cannot.
    fault: Option<Fault>,
    /// Whether a live member of the lane runs other settings (its fingerprint differs).
    differs: bool,
    /// The other live members' recent dispatch rates, summed, at the last answer.
    others_used: f64,
    /// What the last answered sync wrote for the lane (`None` before the first).
    reported: Option<due::Entry>,
    /// Time since the lane's last answered sync.
    since: Duration,
    /// When the lane's summary that last counted this member was written
    /// (`Answer::counted_in`).
    counted_in: u64,
    /// The fleet's interval as the last cold decision read it, before its own step.
    cold_read: Duration,
    /// The cold start is over without a throttle (it grew past its shortest
    /// interval, or the fleet went unpaced): the lane does not start cold again.
    warm: bool,
    /// The seat the store gave this member in the lane (`Answer::seat`).
    seat: Option<u64>,
}

impl LaneSync {
    /// Held for a first answer ([`LaneLink::hold_cold`]): it has a decision, but no
    /// round has answered for it yet.
    fn held(&self) -> bool {
        self.reported.is_none() && self.last.is_some()
    }
}

/// A lane's membership; dropping it takes the lane out of the fleet.
pub struct LaneLink {
    cell: Arc<LaneCell>,
}

impl LaneLink {
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

    /// Requests waiting in the lane's queue now.
    pub fn waiting(&self, n: usize) {
        self.cell.waiting.store(n, Ordering::Relaxed);
    }

    /// The latest decision for this lane, if any.
    pub fn last(&self) -> Option<Decision> {
        lock(&self.cell.sync).last
    }

    /// Starts the lane cold: while the fleet has learned nothing for it, the member
    /// paces at its share of [`COLD_RATE`] instead of going unpaced, its first request
    /// at a random point of its first spacing, and the rate grows by [`COLD_GROWTH`]
    /// at each sync in which its demand met its allotment, until the first throttle
    /// (the fleet goes back two steps, see `proposal`) or until
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
        let cold = Duration::from_secs_f64(1.0 / COLD_RATE);
        let held = Decision {
            cold: true,
            ..Decision::new(cold, 0, COLD_HOLD_SHARE, 1)
        };
        let mut sync = lock(&c.sync);
        if sync.last.is_some() {
            return false;
        }
        sync.last = Some(held);
        sync.cold_read = cold;
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
            metrics: metrics.fleet(),
            connected: AtomicBool::new(false),
            answering: AtomicBool::new(true),
            fault: Mutex::new(None),
            fingerprints: Mutex::default(),
            raised: Arc::new(Notify::new()),
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
            metrics: metrics.fleet(),
            connected: AtomicBool::new(true),
            answering: AtomicBool::new(true),
            fault: Mutex::new(None),
            fingerprints: Mutex::default(),
            raised: Arc::new(Notify::new()),
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
        let when = elapsed.map_or((Duration::ZERO, true), |e| (e, false));
        let round = prepare(&lanes, when, &inner.settings, usize::MAX);
        if round.lanes.is_empty() && when.1 {
            return;
        }
        let answers = memory.sync(&inner.member, &round.reports, now, timings(&inner.settings));
        // The memory answers every lane, so this cannot fail.
        let _ = conclude(inner, round, Ok(answers.into_iter().map(Ok).collect()));
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
            metrics: self
                .inner
                .metrics
                .lane(upstream, if named { lane } else { OTHER_SERIES }),
            named,
            sync: Mutex::new(LaneSync::default()),
        });
        lock(&self.inner.lanes).push(Arc::clone(&cell));
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
    let mut last_round = clock.now();
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
        let result = sync_round(&inner, &mut store, &lanes, (elapsed, false), room).await;
        let took = clock.now().saturating_duration_since(started);
        metrics.sync.observe(took.as_secs_f64());
        let most = due::spare(lanes.len(), settings.sync_interval, settings.member_ttl);
        room = due::room(room, took, settings.sync_interval, most);
        standing.settle(&inner, &mut store, &lanes, result, clock.now());
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
        let _ = sync_round(inner, store, &lanes, (Duration::ZERO, true), room).await;
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
/// registry and their gauges withdrawn (their entries expire after `member_ttl`).
fn live_lanes(inner: &Inner) -> Vec<Arc<LaneCell>> {
    let mut lanes = lock(&inner.lanes);
    lanes.retain(|lane| {
        let gone = lane.gone.load(Ordering::Relaxed);
        if gone && lane.named {
            inner.metrics.remove_lane(&lane.upstream, &lane.lane);
        }
        !gone
    });
    lanes.clone()
}

/// One round trip for every lane that is due (`due.rs`), within `sync_interval`;
/// then each of those lanes' decision.
async fn sync_round(
    inner: &Inner,
    store: &mut Store,
    lanes: &[Arc<LaneCell>],
    when: (Duration, bool),
    room: usize,
) -> Result<(), (Fault, String)> {
    let settings = &inner.settings;
    let round = prepare(lanes, when, settings, room);
    if round.lanes.is_empty() && when.1 {
        return Ok(());
    }
    let answers = tokio::time::timeout(
        settings.sync_interval,
        store.sync(&inner.member, &round.reports, timings(settings)),
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

/// What one sync sends for the lanes that are due, and what it keeps to read the
/// answers; each vector in the order of `lanes`.
struct Round<'a> {
    lanes: Vec<&'a Arc<LaneCell>>,
    reports: Vec<Report<'a>>,
    /// Per lane, what its entry says once this sync is answered.
    entries: Vec<due::Entry>,
    demands: Vec<f64>,
    /// What each lane's demand asks for, unbounded by its dispatch rate.
    wanted: Vec<f64>,
    /// Per lane, this member's recent dispatch rate.
    used: Vec<f64>,
    /// Per lane, the earliest epoch raised from since the last sync ([`NONE`] if none).
    raised: Vec<u64>,
    /// A tick's round, not one of raises between ticks: it counts as a sync for
    /// the holds counted in syncs.
    ticked: bool,
}

/// The times a sync passes to the store: a lane's summary is refreshed once a sync
/// interval while its members' entries change, so what one member reports reaches
/// the others within two syncs.
fn timings(settings: &FleetSettings) -> Timings {
    let ttl = settings.member_ttl;
    Timings {
        member_ttl: ttl,
        key_ttl: ttl * KEY_TTL_MEMBER_TTLS,
        hold: settings.sync_interval * HOLD_SYNCS,
        refresh: settings.sync_interval,
    }
}

/// Samples every lane's demand, `elapsed` after the last round, and what the lanes
/// that are due (`due.rs`) report: every urgent one, and as many new, returning or refreshing
/// ones as `due::spare` leaves room for; the others skip the round. With
/// `raises_only` (a round between ticks), only the lanes that raised report, and
/// nothing is sampled.
fn prepare<'a>(
    lanes: &'a [Arc<LaneCell>],
    (elapsed, raises_only): (Duration, bool),
    settings: &FleetSettings,
    room: usize,
) -> Round<'a> {
    let mut round = Round {
        lanes: Vec::new(),
        reports: Vec::new(),
        entries: Vec::new(),
        demands: Vec::new(),
        wanted: Vec::new(),
        used: Vec::new(),
        raised: Vec::new(),
        ticked: !raises_only,
    };
    let mut spare = due::spare(lanes.len(), settings.sync_interval, settings.member_ttl).min(room);
    for lane in lanes {
        let mut sync = lock(&lane.sync);
        if raises_only {
            // Between ticks: only the raise goes, with what the lane last reported,
            // and its counts wait for the tick (over a few milliseconds they would
            // read as a spike of demand).
            let micros = lane.interval.load(Ordering::Relaxed);
            let raised = lane.raised_from.load(Ordering::Relaxed) != NONE;
            let Some(last) = sync.reported.filter(|_| raised && micros != NONE) else {
                continue;
            };
            let entry = due::Entry {
                proposal: Some((micros, lane.epoch.load(Ordering::Relaxed))),
                ..last
            };
            round.add(lane, &sync, entry, 0.0);
            continue;
        }
        let arrivals = lane.arrivals.swap(0, Ordering::Relaxed);
        let waiting = match lane.queue.get() {
            Some(probe) => probe(),
            None => lane.waiting.load(Ordering::Relaxed),
        };
        let demand = sync.demand.update(arrivals, waiting, elapsed);
        let warm = sync.last.is_some_and(|last| !last.cold);
        let demand = demand::floored(demand, sync.demand.floor(), warm);
        let refused = lane.refused.swap(0, Ordering::Relaxed);
        let used = sync.used.update(arrivals, refused, waiting, elapsed);
        // The larger of its allotment and an equal share: an allotment alone would
        // hold every share where it is (each member claiming what it has).
        let allotted = sync.last.filter(|last| !last.local).map_or(0.0, |last| {
            (last.share * last.rate).max(last.rate / f64::from(last.members.max(1)))
        });
        let used = demand::queued(used, waiting, allotted);
        sync.since = sync.since.saturating_add(elapsed);
        let micros = lane.interval.load(Ordering::Relaxed);
        let epoch = lane.epoch.load(Ordering::Relaxed);
        let from = lane.raised_from.load(Ordering::Relaxed);
        let entry = due::Entry {
            demand,
            used,
            proposal: (micros != NONE).then_some((micros, epoch)),
        };
        let state = due::Lane {
            reported: sync.reported,
            now: entry,
            busy: arrivals > 0 || waiting > 0,
            raised: from != NONE,
            rejoining: sync.scale.is_some() || sync.rejoining > 0 || sync.fault.is_some(),
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
        let (demand, used) = (entry.demand, entry.used);
        let proposal = entry
            .proposal
            .map(|(micros, epoch)| proposal(sync, micros, epoch, from, used));
        self.reports.push(Report {
            key: &lane.key,
            demand,
            used,
            fingerprint: &lane.fingerprint,
            proposal,
            counted_in: sync.counted_in,
            seat: sync.seat,
        });
        self.lanes.push(lane);
        self.entries.push(entry);
        self.demands.push(demand::claim(demand, used));
        self.wanted.push(wanted);
        self.used.push(used);
        self.raised.push(from);
    }
}

/// What a lane at `micros` and `epoch` proposes, with the earliest epoch it raised
/// from since the last sync (`from`, [`NONE`] if none) and its dispatch rate `used`.
#[allow(
    clippy::cast_possible_truncation,
    clippy::cast_sign_loss,
    reason = "float to integer `as` saturates, as wanted here"
)]
fn proposal(sync: &LaneSync, micros: u64, epoch: u64, from: u64, used: f64) -> Proposal {
    let scale = sync.scale.unwrap_or(1.0);
    let interval = Duration::from_micros((micros as f64 * scale) as u64);
    // The entries read at a raise from an unpaced fleet were written before its load
    // came (a cold start): the floor waits for the next raise, whose entries tell.
    let paced = sync.last.is_some_and(|d| !d.interval.is_zero());
    let cold = sync.last.filter(|d| d.cold);
    Proposal {
        interval: match cold {
            _ if from == NONE => interval,
            // The cold start's last step throttled: back half a step below the
            // fleet's interval this member read, or below what the members'
            // dispatches got through if that was slower. The upstream's burst hides
            // an overshoot for a while (a bucket holding a tenth of a second hides up
            // to 40 % past it for a sync of 250 ms), so the throttle came a little
            // past the capacity, and a whole step back wasted it. The members pace at
            // equal shares of the cold rate, and where many of them send little, what
            // got through is the capacity, the rate only what the busy ones were
            // allotted times the members. Not its own raise: a member a step behind
            // the fleet would take it back further.
            Some(_) => {
                let through = used + sync.others_used;
                let spacing = (through.is_finite() && through > 0.0)
                    .then(|| Duration::try_from_secs_f64(1.0 / through).ok())
                    .flatten();
                spacing
                    .map_or(sync.cold_read, |s| s.max(sync.cold_read))
                    .mul_f64(COLD_STEP_BACK)
            }
            None if paced => learning::cap_raise(interval, used + sync.others_used),
            None => interval,
        },
        epoch,
        raised_from: (from != NONE).then_some(from),
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
    let rejoin = rejoin_syncs(inner.settings.sync_interval);
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
                let proposal = round.reports[i].proposal;
                let demand = (round.demands[i], round.wanted[i]);
                let syncs = (rejoin, round.ticked);
                apply(lane, &answer, (demand, round.used[i], proposal), syncs);
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

/// The syncs [`REJOIN_HOLD`] spans, at least one.
fn rejoin_syncs(sync_interval: Duration) -> u32 {
    let syncs = REJOIN_HOLD.as_nanos() / sync_interval.as_nanos().max(1);
    u32::try_from(syncs).unwrap_or(u32::MAX).max(1)
}

/// Turns one lane's answer into its decision and hands it to the lane; a lane back
/// from going on alone holds its share down for `rejoin` syncs (see [`rejoined`]),
/// counting only the rounds of ticks (`ticked`).
fn apply(
    lane: &LaneCell,
    answer: &Answer,
    ((demand, wanted), used, proposal): ((f64, f64), f64, Option<Proposal>),
    (rejoin, ticked): (u32, bool),
) {
    let mut sync = lock(&lane.sync);
    let cold = cold_interval(lane.cold.get().copied(), &mut sync, answer.shared, wanted);
    let cold_state = cold.map(|interval| Shared { interval, epoch: 0 });
    let Some(shared) = cold_state.or(answer.shared) else {
        return;
    };
    let mut decision = decide(shared, demand, &answer.others);
    decision.cold = !shared.interval.is_zero() && cold.is_some();
    if decision.cold {
        decision.share = cold_share(answer.counted_in, decision.members);
    }
    decision.outraised = proposal.is_some_and(|p| outraised(&p, shared));
    sync.seat = sync.seat.or(answer.seat);
    decision.place = sync
        .seat
        .zip(answer.progress)
        .filter(|_| !decision.cold)
        .map(|(seat, progress)| Place {
            phase: seat_phase(seat),
            progress,
        });
    if decision.interval.is_zero() {
        decision.share = unpaced_share(used, &answer.others_used);
    }
    let differs = fingerprint::differs(&lane.fingerprint, &answer.fingerprints);
    if differs != sync.differs {
        sync.differs = differs;
        settings_changed(lane, differs);
    }
    if let Some(scale) = sync.scale.take() {
        decision.rescale = scale;
        sync.rejoining = rejoin;
    }
    sync.others_used = answer.others_used.iter().filter(|u| u.is_finite()).sum();
    rejoined(&mut sync, &mut decision, ticked);
    // A cold start's end is no estimate: the step before went through.
    decision.first =
        !shared.interval.is_zero() && sync.last.is_some_and(|d| d.interval.is_zero() && !d.local);
    sync.last = Some(decision);
    sync.peak_age += u32::from(ticked);
    if decision.members >= sync.peak_members || sync.peak_age > PEAK_SYNCS {
        sync.peak_members = decision.members;
        sync.peak_age = 0;
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
    lane.epoch.store(shared.epoch, Ordering::Relaxed);
    let micros = u64::try_from(shared.interval.as_micros()).unwrap_or(NONE - 1);
    lane.interval.store(micros, Ordering::Relaxed);
}

/// The fleet interval of a lane that starts cold (`cold` its shortest, if it does;
/// see [`LaneLink::start_cold`]), from the lane's state `shared`: the start's for a
/// lane the fleet holds nothing for, the state's while the fleet starts (epoch 0, an
/// interval), and 0 once the start grew past `cold` (the lane goes unpaced, and the
/// state of 0 it proposes tells the others); `None` once the fleet learned (a raise)
/// or went unpaced. The member proposes the interval it returns, so the fleet goes
/// as fast as its fastest member: it grows the rate when the member's demand
/// (`wanted`, its arrivals and queue, whether or not they went) reached what the
/// last decision allotted it (while the members' demands are met, a faster start
/// would only throttle an unmet burst harder).
fn cold_interval(
    cold: Option<Duration>,
    sync: &mut LaneSync,
    shared: Option<Shared>,
    wanted: f64,
) -> Option<Duration> {
    let floor = cold?;
    let interval = match shared {
        _ if sync.warm => return None,
        None => {
            sync.cold_read = Duration::from_secs_f64(1.0 / COLD_RATE);
            sync.cold_read
        }
        Some(shared) if shared.epoch != 0 => return None,
        Some(shared) if shared.interval.is_zero() => {
            sync.warm = true;
            return None;
        }
        Some(shared) => {
            sync.cold_read = shared.interval;
            match sync.last {
                Some(last) if last.cold && wanted >= last.share * last.rate => {
                    shared.interval.div_f64(COLD_GROWTH)
                }
                _ => shared.interval,
            }
        }
    };
    if interval < floor {
        sync.warm = true;
        return Some(Duration::ZERO);
    }
    Some(interval)
}

/// A cold lane's share of the fleet's cold rate among `members`: an equal one once
/// the summary counts this member (`counted_in` not 0), [`COLD_HOLD_SHARE`] before.
/// While a fleet starts, its members' claims trail their demand by a sync or more (a
/// claim is at most twice what the member dispatched), so max-min shares would give
/// the first members to start several equal shares each, and a fleet starting
/// together sent up to two and a half times its cold rate: its first throttle came
/// at a rate that was not the fleet's, and the start's estimate fell two steps short
/// of the capacity. Before the summary counts the member, nor maybe the others that
/// start with it, each would take a share of one and send at once: it holds its first
/// request (the pacer keeps the first slot's place in the spacing as the share
/// grows).
fn cold_share(counted_in: u64, members: u32) -> f64 {
    if counted_in == 0 {
        COLD_HOLD_SHARE
    } else {
        1.0 / f64::from(members.max(1))
    }
}

/// Whether a member that proposed `proposal` takes `shared` as another member's
/// raise: it raised, and the fleet holds another interval or epoch than its raise.
/// Members raise from the same epoch to the same next one, each at its own interval
/// and on its own curve; one whose raise lost would otherwise keep its own curve and
/// climb from its own cut, and its next step would undo the raise that landed.
fn outraised(proposal: &Proposal, shared: Shared) -> bool {
    proposal.raised_from.is_some()
        && (proposal.interval != shared.interval || proposal.epoch != shared.epoch)
}

/// A lane back from going on alone whose decision counts fewer members than it shared
/// with before: the others may only be slower to reconnect (their entries expired
/// while Redis refused them), so it takes no more than an equal share of the peak,
/// as it did alone, until they are back or its syncs of grace are over (a round
/// between ticks, `!ticked`, is none of them).
fn rejoined(sync: &mut LaneSync, decision: &mut Decision, ticked: bool) {
    if sync.rejoining == 0 {
        return;
    }
    if decision.members >= sync.peak_members {
        sync.rejoining = 0;
        return;
    }
    sync.rejoining -= u32::from(ticked);
    decision.share = decision
        .share
        .min(1.0 / f64::from(sync.peak_members.max(1)));
}

/// One log line when a lane's live members start or stop disagreeing on its settings.
fn settings_changed(lane: &LaneCell, differs: bool) {
    if differs {
        tracing::warn!(upstream = %lane.upstream, lane = %lane.lane, "fleet: another member of this lane runs other upstream settings (a group shared by two configurations?); they share one interval and one rate while pacing differently");
    } else {
        tracing::info!(upstream = %lane.upstream, lane = %lane.lane, "fleet: every member of this lane runs the same upstream settings again");
    }
}

/// The phase of `seat` in the fleet's schedule: its bits reversed behind the binary
/// point (the van der Corput sequence), so that the seats given so far, whatever
/// their number, lie evenly spread over [0, 1): 1 at 1/2, 2 at 1/4, 3 at 3/4, 4 at
/// 1/8, ...
#[allow(
    clippy::cast_precision_loss,
    reason = "a phase needs no more than the 53 bits an f64 keeps"
)]
pub fn seat_phase(seat: u64) -> f64 {
    seat.reverse_bits() as f64 / 2f64.powi(64)
}

/// This member's decision for a lane from the fleet's state and the demands.
pub fn decide(shared: Shared, demand: f64, others: &[f64]) -> Decision {
    let members = others.len() + 1;
    let mut demands = Vec::with_capacity(members);
    demands.push(demand);
    demands.extend_from_slice(others);
    let share = if shared.interval.is_zero() {
        1.0
    } else {
        let rate = 1.0 / shared.interval.as_secs_f64();
        let allocations = share::max_min(&demands, rate);
        // What nobody asked for is spread evenly, so the shares add up to the fleet
        // rate and a member whose demand grows finds room before the next sync.
        let spare = (rate - allocations.iter().sum::<f64>()).max(0.0) / members as f64;
        let mine = (allocations[0] + spare) / rate;
        // A member that asks for (almost) nothing still gets a slot now and then, so
        // its first requests after a quiet spell are not held for a whole sync.
        mine.max(1.0 / (2 * members) as f64).min(1.0)
    };
    Decision::new(
        shared.interval,
        shared.epoch,
        share,
        u32::try_from(members).unwrap_or(u32::MAX),
    )
}

/// This member's part of an unpaced fleet's dispatches: its recent dispatch rate
/// `used` over the fleet's (`others_used` the other live members'), or an equal part
/// while nobody dispatches. Pacing divides the lane's interval by it, so the first
/// throttle's interval (the observed spacing over this share) means the fleet's: each
/// member starts from its own rate, and the fleet from the sum of them, not from one
/// member's rate taken for the fleet's.
pub fn unpaced_share(used: f64, others_used: &[f64]) -> f64 {
    let sane = |x: f64| if x.is_finite() { x.max(0.0) } else { 0.0 };
    let mine = sane(used);
    let all = mine + others_used.iter().map(|u| sane(*u)).sum::<f64>();
    let members = (others_used.len() + 1) as f64;
    if mine > 0.0 && all > 0.0 {
        (mine / all).clamp(1.0 / (2.0 * members), 1.0)
    } else {
        1.0 / members
    }
}

/// Redis stopped answering: each lane goes on alone at its last allocation, but at
/// no more than an equal share of the most members it recently shared with.
fn go_local(lanes: &[Arc<LaneCell>]) {
    for lane in lanes {
        if unhold(lane) {
            continue;
        }
        let last = {
            let mut sync = lock(&lane.sync);
            let Some(mut last) = sync.last else {
                continue;
            };
            last.share = last.share.min(1.0 / f64::from(sync.peak_members.max(1)));
            sync.scale = Some(last.share);
            last
        };
        let alone = Decision {
            local: true,
            rescale: 1.0 / last.share,
            ..Decision::new(last.member_interval(), last.epoch, 1.0, 1)
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
        sync.last = None;
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

    #[test]
    #[allow(
        clippy::cast_possible_truncation,
        clippy::cast_sign_loss,
        reason = "a phase in [0, 1) times 10 is a tenth's index"
    )]
    fn seats_lie_evenly_spread_over_the_schedule_however_many_there_are() {
        assert_eq!(seat_phase(1), 0.5);
        assert_eq!(seat_phase(2), 0.25);
        assert_eq!(seat_phase(3), 0.75);
        assert_eq!(seat_phase(4), 0.125);
        assert_eq!(seat_phase(0), 0.0);
        // Any 100 seats in a row: every tenth of [0, 1) holds 8 to 12 of them.
        for first in [1, 37, 1_000_003] {
            let mut tenths = [0; 10];
            for seat in first..first + 100 {
                let phase = seat_phase(seat);
                assert!((0.0..1.0).contains(&phase));
                tenths[(phase * 10.0) as usize] += 1;
            }
            assert!(
                tenths.iter().all(|n| (8..=12).contains(n)),
                "{first}: {tenths:?}"
            );
        }
    }

    #[test]
    fn a_place_is_where_the_progress_at_the_share_meets_the_phase() {
        let place = |phase, progress| Place { phase, progress };
        // A share of a quarter: one slot in four. At progress 10 (2.5 of its own
        // slots), phase 0.75 is a quarter of a spacing ahead.
        assert_eq!(place(0.75, 10.0).ahead(0.25), 0.25);
        // Phase 0.25 at 2.5: three quarters ahead (the next is at 3.25).
        assert_eq!(place(0.25, 10.0).ahead(0.25), 0.75);
        // At the point itself: 0.
        assert_eq!(place(0.5, 10.0).ahead(0.25), 0.0);
        // Nonsense progress: now.
        assert_eq!(place(0.5, f64::NAN).ahead(0.25), 0.0);
    }

    fn shared(ms: u64) -> Shared {
        Shared {
            interval: Duration::from_millis(ms),
            epoch: 2,
        }
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
        let age = lock(&first.1.cell.sync).peak_age;
        first
            .0
            .sync_in(&mut memory, now + Duration::from_millis(10), None);
        // Not a sync for the holds counted in syncs.
        assert_eq!(lock(&first.1.cell.sync).peak_age, age);
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

    /// What a member's entry says it dispatched leaves out what was shed or
    /// throttled: while the fleet throttles, the entries sum to what got through.
    #[test]
    fn the_others_read_a_members_dispatches_less_what_was_refused() {
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
        members[1].1.waiting(1000);
        now += sync;
        busy.sync_in(&mut memory, now, Some(sync));
        members[0].0.sync_in(&mut memory, now, Some(sync));
        // 25 got through in a quarter second. The third member dispatched nothing
        // with requests waiting: it reports half its allotment of a third of 100/s.
        let others = lock(&members[0].1.cell.sync).others_used;
        assert!((others - (100.0 + 50.0 / 3.0)).abs() < 1e-9, "{others}");
    }

    #[test]
    fn a_raise_that_landed_as_proposed_is_not_taken_as_another_ones() {
        let raise = Proposal {
            interval: Duration::from_millis(20),
            epoch: 2,
            raised_from: Some(1),
        };
        assert!(!outraised(&raise, shared(20)));
        assert!(outraised(&raise, shared(25)));
        let raise_to_3 = Proposal { epoch: 3, ..raise };
        assert!(outraised(&raise_to_3, shared(20)));
        let step = Proposal {
            raised_from: None,
            ..raise
        };
        assert!(!outraised(&step, shared(25)));
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

    /// A lane that starts cold: the start's interval while the fleet holds nothing,
    /// the state's while it starts, 1.5 times the rate at a sync in which the member
    /// used what it was allotted, unpaced past the shortest interval, and nothing
    /// once the fleet raised.
    #[test]
    fn a_cold_lane_starts_at_ten_a_second_and_grows_while_its_share_is_used() {
        let floor = Duration::from_millis(1);
        let ms = Duration::from_millis;
        let cold = |state: Option<Shared>| Shared {
            interval: state.map_or(ms(100), |s| s.interval),
            epoch: 0,
        };
        let mut sync = LaneSync::default();
        assert_eq!(cold_interval(None, &mut sync, None, 5.0), None);
        assert_eq!(
            cold_interval(Some(floor), &mut sync, None, 5.0),
            Some(ms(100))
        );
        // A member that used its allotment (a tenth of 10/s) grows the fleet's 100 ms.
        let mut last = decide(cold(None), 1.0, &[1.0; 9]);
        last.cold = true;
        sync.last = Some(last);
        assert_eq!(last.share * last.rate, 1.0);
        let state = Some(cold(None));
        let grown = cold_interval(Some(floor), &mut sync, state, 1.0);
        assert_eq!(grown, Some(ms(100).div_f64(COLD_GROWTH)));
        assert_eq!(sync.cold_read, ms(100));
        // One that did not keeps it.
        assert_eq!(
            cold_interval(Some(floor), &mut sync, state, 0.5),
            Some(ms(100))
        );
        // Past the shortest interval: unpaced, for good.
        let fast = Some(Shared {
            interval: Duration::from_micros(1_400),
            epoch: 0,
        });
        assert_eq!(
            cold_interval(Some(floor), &mut sync, fast, 9.0),
            Some(ms(0))
        );
        assert_eq!(cold_interval(Some(floor), &mut sync, state, 9.0), None);
        // A raise ends the start; so does a fleet gone unpaced.
        let mut fresh = LaneSync::default();
        assert_eq!(
            cold_interval(Some(floor), &mut fresh, Some(shared(20)), 9.0),
            None
        );
        let unpaced = Some(Shared {
            interval: Duration::ZERO,
            epoch: 0,
        });
        assert_eq!(cold_interval(Some(floor), &mut fresh, unpaced, 9.0), None);
        assert_eq!(cold_interval(Some(floor), &mut fresh, None, 9.0), None);
    }

    /// The throttle that ends a cold start takes the fleet back half a step
    /// (geometrically) below the interval the member last read, or below what the
    /// members' dispatches got through if that was slower; never to its own raise.
    #[test]
    fn the_raise_that_ends_a_cold_start_goes_back_half_a_step_from_the_slower_of_read_and_through()
    {
        let mut sync = LaneSync {
            cold_read: Duration::from_millis(15),
            others_used: 40.0,
            ..LaneSync::default()
        };
        let mut last = decide(shared(10), 0.0, &[0.0; 3]);
        last.cold = true;
        sync.last = Some(last);
        // 50/s got through, slower than the 15 ms read: half a step below it (20 ms
        // × √1.5, 24.5 ms), whatever the member's own raise (11 ms, or 30 ms from a
        // member a step behind).
        let halfway = Duration::from_millis(20).mul_f64(COLD_GROWTH.sqrt());
        assert_eq!(halfway, Duration::from_nanos(24_494_897));
        let raise = proposal(&sync, 11_000, 1, 0, 10.0);
        assert_eq!(raise.interval, halfway);
        assert_eq!(raise.raised_from, Some(0));
        let behind = proposal(&sync, 30_000, 1, 0, 10.0);
        assert_eq!(behind.interval, halfway);
        // 100/s got through, faster than the 15 ms read: half a step below 15 ms.
        let through = proposal(&sync, 30_000, 1, 0, 60.0);
        let read = Duration::from_millis(15).mul_f64(COLD_GROWTH.sqrt());
        assert_eq!(through.interval, read);
        // Nothing counted as got through yet: from the interval read.
        sync.others_used = 0.0;
        assert_eq!(proposal(&sync, 30_000, 1, 0, 0.0).interval, read);
        // Steps are proposed as they are.
        assert_eq!(
            proposal(&sync, 7_000, 0, NONE, 0.0).interval,
            Duration::from_millis(7)
        );
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

    /// The floor a raise takes from the members' dispatch rates applies in a paced
    /// fleet only: an unpaced fleet's entries were written before its load came.
    #[test]
    fn a_raise_is_floored_at_the_fleets_rate_only_once_the_fleet_is_paced() {
        let mut sync = LaneSync {
            others_used: 0.0,
            ..LaneSync::default()
        };
        let unpaced = decide(
            Shared {
                interval: Duration::ZERO,
                epoch: 0,
            },
            0.0,
            &[0.0; 3],
        );
        sync.last = Some(unpaced);
        // 1 ms proposed at 4/s of its own: kept, not floored at 250 ms.
        let raise = proposal(&sync, 1_000, 1, 0, 4.0);
        assert_eq!(raise.interval, Duration::from_millis(1));
        // Paced, with the others' entries saying 96/s: floored at 1/100 s.
        sync.last = Some(decide(shared(1), 0.0, &[0.0; 3]));
        sync.others_used = 96.0;
        let raise = proposal(&sync, 1_000, 3, 2, 4.0);
        assert_eq!(raise.interval, Duration::from_millis(10));
        // No raise, no floor.
        assert_eq!(
            proposal(&sync, 1_000, 3, NONE, 4.0).interval,
            Duration::from_millis(1)
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
        let held = rejoin_syncs(sync);
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

    #[test]
    fn an_unpaced_member_holds_its_part_of_the_fleets_dispatches() {
        assert_eq!(unpaced_share(30.0, &[10.0, 60.0]), 0.3);
        // Before anyone dispatched, or while this member did not: an equal part.
        assert_eq!(unpaced_share(0.0, &[0.0, 0.0, 0.0]), 0.25);
        assert_eq!(unpaced_share(0.0, &[50.0]), 0.5);
        assert_eq!(unpaced_share(7.0, &[]), 1.0);
        // Never less than half an equal part; nonsense counts as nothing.
        assert_eq!(unpaced_share(1.0, &[999.0]), 0.25);
        assert_eq!(unpaced_share(5.0, &[f64::NAN, f64::INFINITY, -4.0]), 1.0);
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
        for _ in 0..3 {
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

    #[test]
    fn a_lone_member_paces_at_the_fleet_interval() {
        let d = decide(shared(10), 500.0, &[]);
        assert_eq!((d.share, d.members, d.rate), (1.0, 1, 100.0));
        assert_eq!(d.member_interval(), Duration::from_millis(10));
    }

    #[test]
    fn equal_demand_splits_the_fleet_rate() {
        let d = decide(shared(10), 500.0, &[500.0, 500.0, 500.0]);
        assert_eq!(d.share, 0.25);
        assert_eq!(d.member_interval(), Duration::from_millis(40));
    }

    #[test]
    fn a_light_member_gets_its_demand_and_a_heavy_one_the_rest() {
        // 100/s: one light member at 10/s, three heavy ones split 90.
        let light = decide(shared(10), 10.0, &[1e9, 1e9, 1e9]);
        assert!((light.share - 0.125).abs() < 1e-12, "{}", light.share);
        let heavy = decide(shared(10), 1e9, &[10.0, 1e9, 1e9]);
        assert!((heavy.share - 0.3).abs() < 1e-12);
    }

    #[test]
    fn capacity_nobody_asked_for_is_spread_evenly() {
        // 100/s, demands 10 and 30: 60 spare, 30 each.
        let d = decide(shared(10), 10.0, &[30.0]);
        assert!((d.share - 0.4).abs() < 1e-12, "{}", d.share);
        let idle = decide(shared(10), 0.0, &[0.0, 0.0, 0.0]);
        assert_eq!(idle.share, 0.25);
    }

    #[test]
    fn an_idle_member_keeps_a_small_share_and_an_unpaced_fleet_paces_nobody() {
        let idle = decide(shared(10), 0.0, &[1e9]);
        assert_eq!(idle.share, 0.25);
        let free = decide(shared(0), 5.0, &[1e9]);
        assert_eq!((free.member_interval(), free.rate), (Duration::ZERO, 0.0));
    }

    /// A member joining a lane where 200 entries claim a demand of 1e9 and dispatch
    /// nothing: dispatching at what each decision gives it, its claim doubles per sync,
    /// and it holds at least half the rate from the 7th sync on.
    #[test]
    fn entries_that_dispatch_nothing_cannot_starve_a_member_that_does() {
        let fakes = vec![demand::claim(1e9, 0.0); 200];
        let mut used = 0.0;
        let mut shares = Vec::new();
        for _ in 0..12 {
            let d = decide(shared(10), demand::claim(1e9, used), &fakes);
            used = d.share * d.rate;
            shares.push(d.share);
        }
        assert_eq!(shares[0], 1.0 / 201.0);
        assert!(shares[..6].iter().all(|s| *s < 0.5), "{shares:?}");
        assert!(shares[6..].iter().all(|s| *s >= 0.5), "{shares:?}");
        assert!(shares[11] > 0.99, "{shares:?}");
    }
}
