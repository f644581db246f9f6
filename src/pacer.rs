//! Spacing of one upstream's dispatches: the fast path, the bounded FIFO queue,
//! deadlines and shedding, pauses and rate-limit floors.
//!
//! `pace` mode: dispatches are spaced the current interval apart, counted from where
//! each release was due (a release the host let go late lets the next follow it by
//! as little as half the spacing, never before its own slot), first come first served. One release task per pacer, spawned with its first waiter, owns the queue; the head waiter is
//! released against the interval in force at release, so a raise slows the waiting
//! queue at once. A request whose slot lies beyond its deadline is answered with
//! [`Shed`] as soon as that is known: on arrival, or when a raise or pause pushes its
//! slot out. `delay` mode: each request sleeps the interval on its own. `observe`
//! mode: every request goes at once, and the slot pace mode would have given it is
//! worked out on a schedule of its own and reported with it.
//! Interval 0, no pause, no floor and an empty queue is the fast path: a few atomic
//! loads, no lock, allocation or timer. The controller decides the interval; this
//! file only applies it.
//!
//! Costs: a lane that paces in units (tokens, capacity units) hands each request's
//! estimated cost in thousandths of a unit ([`ONE`] for a request); the gap after a
//! dispatch is the spacing × its cost, so the interval is per unit and a mix of larger
//! requests is spaced wider at once. When the answer tells the actual cost,
//! [`Pacer::settle`] moves the gap still ahead by the difference.

mod line;
mod precise;

use std::sync::atomic::{AtomicBool, AtomicI64, AtomicU64, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex, MutexGuard, PoisonError};
use std::time::Duration;

use tokio::sync::{Notify, oneshot};

use crate::clock::{Clock, Instant};
pub use crate::cost::ONE;
pub use crate::fair::Ticket;
use crate::sleeper::Mode;
use crate::window::WindowedCount;
use line::Line;
use precise::PreciseSleep;

/// Permission to send one attempt upstream.
#[derive(Clone, Copy, Debug)]
pub struct Slot {
    /// The controller epoch at dispatch (see `controller.rs`).
    pub epoch: u64,
    /// When the attempt was released.
    pub dispatched_at: Instant,
    /// How long the request waited for this slot.
    pub waited: Duration,
    /// Whether the spacing or a pause held the request (its slot lay after its arrival),
    /// rather than only the hand-over through the queue.
    pub held: bool,
    /// The interval in force at release, for traces.
    pub interval: Duration,
    /// In observe mode, what pacing would have done with the request.
    pub would: Option<Would>,
    /// What the request was reserved at, in thousandths of a unit ([`ONE`] a request).
    pub cost: u64,
}

/// What pacing would have done with a request observe mode let go at once.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Would {
    /// Held it this long.
    Wait(Duration),
    /// Shed it: its slot lay past its deadline.
    Shed,
}

/// A request turned away instead of queued.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Shed {
    /// When its slot would have come: a fair `Retry-After`.
    pub retry_after: Duration,
    /// Why it could not wait for that slot.
    pub reason: ShedReason,
}

crate::spelled::spelled! {
    fn as_str;
    /// Why a request was shed; the `reason` label of `easeoff_shed_total`.
    #[derive(Clone, Copy, Debug, PartialEq, Eq)]
    pub enum ShedReason {
        /// `max_waiting` requests already waited.
        QueueFull = "queue-full",
        /// Its slot lay past its deadline (`max_wait`, or the client's own).
        Deadline = "deadline",
        /// Its slot lay past the end of the shutdown drain.
        Draining = "draining",
        /// A retry's slot lay past the request's retry time (`retry.max_elapsed`); set
        /// by the attempt loop, which knows which attempt it was.
        Budget = "budget",
    }
}

/// How many requests may wait at once when the requests past `max_waiting` are
/// patient ones (see [`Pacer::acquire_with`]): their deadlines bound them, this bounds
/// the memory they hold.
pub const PATIENT_WAITING: usize = 1000;

/// Bounds on waiting (config `[upstream.queue]`, `max_pause`).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Limits {
    /// Requests waiting at once; more are shed.
    pub max_waiting: usize,
    /// The longest gap one dispatch leaves after it, whatever it cost (unless one
    /// unit's spacing is longer): no single request holds the lane longer.
    pub max_gap: Duration,
    /// With `Some`, waiters go in fair order between the tenants their tickets name
    /// (`crate::fair`), each tenant with at most this many waiting; with `None`, in
    /// arrival order.
    pub fair: Option<usize>,
}

impl Limits {
    /// `max_waiting` waiters, and no gap longer than a day (the longest
    /// `max_pause`).
    pub const fn waiting(max_waiting: usize) -> Limits {
        Limits {
            max_waiting,
            max_gap: Duration::from_secs(24 * 3600),
            fair: None,
        }
    }
}

/// One upstream's pacing state, shared by its requests and its release task.
#[derive(Clone)]
pub struct Pacer {
    shared: Arc<Shared>,
    _stop: Arc<StopOnDrop>,
}

/// Ends the release task when the last [`Pacer`] handle goes.
struct StopOnDrop(Arc<Shared>);

impl Drop for StopOnDrop {
    fn drop(&mut self) {
        self.0.closed.store(true, Ordering::Relaxed);
        self.0.changed.notify_one();
    }
}

struct Shared {
    clock: Clock,
    mode: Mode,
    limits: Limits,
    origin: Instant,
    interval_ns: AtomicU64,
    /// Nanoseconds from `origin`; 0 means no pause.
    pause_until_ns: AtomicU64,
    /// A minimum spacing from a rate-limit quota, and until when; 0 means none.
    floor_ns: AtomicU64,
    floor_until_ns: AtomicU64,
    /// The least gap between two dispatches whatever they cost (a request window
    /// beside a token window), and until when; 0 means none.
    request_floor_ns: AtomicU64,
    request_floor_until_ns: AtomicU64,
    /// The cost after the last dispatch still to be spaced: its reservation, moved by
    /// the settling of answers since (thousandths; may go below 0).
    gap_cost: AtomicI64,
    /// The costs of the requests waiting, summed (thousandths).
    queued_cost: AtomicU64,
    epoch: AtomicU64,
    /// Nanoseconds from `origin` of the last change of `epoch`.
    epoch_since_ns: AtomicU64,
    waiting: AtomicUsize,
    /// Nanoseconds from `origin` of the last dispatch, or `NEVER`.
    last_dispatch_ns: AtomicU64,
    /// Dispatches over the last second.
    rate: WindowedCount,
    /// Their costs (thousandths), for the spacing per unit.
    units: WindowedCount,
    /// Waiters behind the one the release task is working on.
    queue: Mutex<Line<Waiter>>,
    /// Something changed for the release task: a new waiter, interval, pause or floor.
    changed: Notify,
    /// Set when the last `Pacer` handle is dropped, to end the release task.
    closed: AtomicBool,
    /// The release task was spawned (at the first waiter).
    releasing: AtomicBool,
    /// Nanoseconds from `origin` by which every request must be dispatched (shutdown
    /// drain); 0 means none.
    drain_by_ns: AtomicU64,
    /// The spacing is provisional ([`Pacer::set_provisional`]).
    provisional: AtomicBool,
    /// Observe mode: nanoseconds from `origin` of the next slot pacing would give.
    shadow_next_ns: AtomicU64,
}

/// `last_dispatch_ns` before the first dispatch.
const NEVER: u64 = u64::MAX;

/// What the times kept in nanoseconds count from, before the pacer was made (about
/// 68 minutes, a whole number of seconds so that the rate window's buckets keep their
/// bounds): [`Pacer::phase_first`] places a first slot as if the last dispatch
/// had gone up to a spacing before now, which may lie before the pacer was made.
const LEAD_NS: u64 = 4_096_000_000_000;

struct Waiter {
    arrived: Instant,
    deadline: Instant,
    cost: u64,
    /// Who it waits for, in a fair queue.
    ticket: Option<Ticket>,
    grant: oneshot::Sender<Result<Slot, Shed>>,
}

impl Pacer {
    /// A pacer at interval 0 on tokio's clock; see [`Pacer::with_clock`].
    pub fn new(mode: Mode, limits: Limits) -> Pacer {
        Pacer::with_clock(mode, limits, Clock::Tokio)
    }

    /// A pacer at interval 0 on `clock`; in pace mode its first waiter spawns its
    /// release task (on that waiter's runtime), which ends when the last clone of the
    /// pacer is dropped.
    pub fn with_clock(mode: Mode, limits: Limits, clock: Clock) -> Pacer {
        let shared = Arc::new(Shared {
            origin: clock.now(),
            clock,
            mode,
            limits,
            interval_ns: AtomicU64::new(0),
            pause_until_ns: AtomicU64::new(0),
            floor_ns: AtomicU64::new(0),
            floor_until_ns: AtomicU64::new(0),
            request_floor_ns: AtomicU64::new(0),
            request_floor_until_ns: AtomicU64::new(0),
            gap_cost: AtomicI64::new(ONE as i64),
            queued_cost: AtomicU64::new(0),
            epoch: AtomicU64::new(0),
            epoch_since_ns: AtomicU64::new(0),
            waiting: AtomicUsize::new(0),
            last_dispatch_ns: AtomicU64::new(NEVER),
            rate: WindowedCount::new(Duration::from_secs(1)),
            units: WindowedCount::new(Duration::from_secs(1)),
            queue: Mutex::new(Line::new(limits.fair)),
            changed: Notify::new(),
            closed: AtomicBool::new(false),
            releasing: AtomicBool::new(false),
            provisional: AtomicBool::new(false),
            drain_by_ns: AtomicU64::new(0),
            shadow_next_ns: AtomicU64::new(0),
        });
        Pacer {
            _stop: Arc::new(StopOnDrop(Arc::clone(&shared))),
            shared,
        }
    }

    /// Waits for this request's slot, or sheds it when the slot lies past `deadline`
    /// or `max_waiting` requests already wait. Dropping the future gives up the place
    /// in the queue without using a slot.
    pub fn acquire(&self, deadline: Instant) -> impl Future<Output = Result<Slot, Shed>> + '_ {
        self.acquire_with(deadline, false)
    }

    /// [`Pacer::acquire`]; a `patient` request is kept waiting though `max_waiting`
    /// already wait (up to [`PATIENT_WAITING`]), so only its deadline sheds it.
    pub fn acquire_with(
        &self,
        deadline: Instant,
        patient: bool,
    ) -> impl Future<Output = Result<Slot, Shed>> + '_ {
        self.acquire_costing(deadline, patient, ONE, None)
    }

    /// [`Pacer::acquire_with`] for a request reserved at `cost` (thousandths of a
    /// unit): the next dispatch goes the spacing × the cost after it. In a fair
    /// pacer, `who` places it among the waiting tenants (none: the tenant 0 of
    /// weight 1 in class 0); elsewhere it is not looked at.
    pub async fn acquire_costing(
        &self,
        deadline: Instant,
        patient: bool,
        cost: u64,
        who: Option<Ticket>,
    ) -> Result<Slot, Shed> {
        let s = &*self.shared;
        let now = s.clock.now();
        if s.interval_ns.load(Ordering::Relaxed) == 0
            && s.pause_until_ns.load(Ordering::Relaxed) == 0
            && s.floor_until_ns.load(Ordering::Relaxed) == 0
            && s.request_floor_until_ns.load(Ordering::Relaxed) == 0
            && s.waiting.load(Ordering::Relaxed) == 0
        {
            return Ok(s.dispatch(now, now, now, cost));
        }
        let deadline_in = deadline;
        let deadline = s.limit(deadline);
        match s.mode {
            Mode::Observe => Ok(s.shadow(now, deadline, cost)),
            Mode::Delay => {
                let _waiting = s.enter(patient)?;
                let until = now + s.gap(now, cost);
                let until = until.max(s.pause_end(now).unwrap_or(now));
                if until > deadline {
                    return Err(Shed {
                        retry_after: until - now,
                        reason: s.late(deadline_in),
                    });
                }
                s.clock.sleep_until(until).await;
                Ok(s.dispatch(s.clock.now(), now, until, cost))
            }
            Mode::Pace => {
                let (grant, granted) = oneshot::channel();
                let _waiting = {
                    let mut queue = s.lock_queue();
                    // Nobody ahead and the slot already free: go now. Under the lock,
                    // so two arrivals cannot both take the same slot.
                    if s.waiting.load(Ordering::Relaxed) == 0 {
                        let at = s.release_at(now);
                        if at <= now {
                            return Ok(s.dispatch(now, now, at, cost));
                        }
                    }
                    let (waiting, ahead, ahead_cost) = match queue.fair_mut() {
                        None => {
                            let waiting = s.enter(patient)?;
                            // Its slot if nothing changes: after everyone already waiting.
                            let ahead = s.waiting.load(Ordering::Relaxed).saturating_sub(1);
                            (waiting, ahead, s.queued_cost.load(Ordering::Relaxed))
                        }
                        Some(fair) => {
                            let who = who.unwrap_or(Ticket::ANYONE);
                            let place = fair
                                .place(who, deadline_in)
                                .map_err(|_| s.full(now, s.limits.fair.unwrap_or(0)))?;
                            (
                                s.enter_fair(fair, place.key, patient)?,
                                place.ahead,
                                place.ahead_cost,
                            )
                        }
                    };
                    let expected = s.release_at(now) + s.gaps(now, ahead, ahead_cost);
                    if expected > deadline && !s.lenient() {
                        return Err(Shed {
                            retry_after: expected.saturating_duration_since(now),
                            reason: s.late(deadline_in),
                        });
                    }
                    queue.push(Waiter {
                        arrived: now,
                        deadline: deadline_in,
                        cost,
                        ticket: who,
                        grant,
                    });
                    s.queued_cost.fetch_add(cost, Ordering::Relaxed);
                    waiting
                };
                // The release task comes with the first waiter: most of a wave of
                // new lane names never wait, and a task is a third of a lane's memory.
                if !s.releasing.swap(true, Ordering::Relaxed) {
                    tokio::spawn(release(Arc::clone(&self.shared)));
                }
                s.changed.notify_one();
                match granted.await {
                    Ok(result) => result,
                    // The release task only goes away with the runtime.
                    Err(_) => Err(Shed {
                        retry_after: Duration::from_secs(1),
                        reason: ShedReason::Draining,
                    }),
                }
            }
        }
    }

    /// Marks the spacing provisional, or no longer: a fleet's cold start (see
    /// `fleet.rs`), whose rate grows by half a sync until the first throttle, so a
    /// slot computed from it lies far later than the request will go. While set, no
    /// waiter is shed for a slot expected past its deadline: each is shed when its
    /// deadline comes (`max_waiting` and a drain still shed at once).
    pub fn set_provisional(&self, provisional: bool) {
        if self.shared.provisional.swap(provisional, Ordering::Relaxed) != provisional {
            self.shared.changed.notify_one();
        }
    }

    /// Whether the spacing is provisional (a fleet's cold start).
    pub fn is_provisional(&self) -> bool {
        self.shared.provisional.load(Ordering::Relaxed)
    }

    /// Applies a new interval from the controller; waiting requests see it at once.
    pub fn set_interval(&self, interval: Duration, epoch: u64) {
        self.set_interval_keeping(interval, epoch, false);
    }

    /// [`Pacer::set_interval`]; with `longer_too`, a longer interval also stretches
    /// only what is left of the gap (a share that is not yet known, not a throttle).
    pub fn set_interval_keeping(&self, interval: Duration, epoch: u64, longer_too: bool) {
        let s = &*self.shared;
        let new = nanos(interval);
        let old = s.interval_ns.swap(new, Ordering::Relaxed);
        if (new < old || longer_too) && new > 0 && old > 0 {
            s.keep_progress(old, new);
        }
        if s.epoch.load(Ordering::Relaxed) != epoch {
            s.epoch_since_ns
                .store(s.ns(s.clock.now()), Ordering::Relaxed);
        }
        s.epoch.store(epoch, Ordering::Release);
        s.changed.notify_one();
    }

    /// Moves the next slot by `shift` × the spacing, `shift` in [-0.5, 0.5] (counted
    /// from now at the latest, so repeated calls before a dispatch do not add up):
    /// fleet members that take a raise together would otherwise keep the phase of the
    /// burst that caused it, and dispatch in step, a burst at each slot however low
    /// their rate. Some go earlier and some later, so the fleet's rate stays. A slot
    /// still ahead that the shift would put before now goes twice as far after now
    /// instead: at one dispatch every few seconds, every member whose slot was less
    /// than half a spacing away would otherwise go at once (a quarter of 1,000 members
    /// in one instant at each raise, whose throttles raised again).
    #[allow(
        clippy::cast_possible_truncation,
        clippy::cast_sign_loss,
        reason = "float to integer `as` saturates, and the value is clamped at 0 first"
    )]
    pub fn stagger(&self, shift: f64) {
        let s = &*self.shared;
        let now = s.ns(s.clock.now());
        let spacing = nanos(s.spacing(s.clock.now())) as f64;
        let shift = shift.clamp(-0.5, 0.5) * spacing;
        let _ = s
            .last_dispatch_ns
            .fetch_update(Ordering::Relaxed, Ordering::Relaxed, |last| {
                let from = last.min(now) as f64 + shift;
                // A slot still ahead moved to before now goes as far after now,
                // twice: the slots moved to within half a spacing before now are
                // spread over the spacing after it.
                let due = from + spacing;
                let now = now as f64;
                let from = if due < now && last as f64 + spacing >= now {
                    now + 2.0 * (now - due) - spacing
                } else {
                    from
                };
                (last != NEVER).then_some(from.max(0.0) as u64)
            });
        s.changed.notify_one();
    }

    /// Moves the next slot onto the schedule whose next point lies `ahead` of now,
    /// one every spacing: a fleet's members, each placed by the fleet's progress
    /// (`fleet::Place`), dispatch evenly spread. To the point `nearest` its slot (a
    /// member placed again keeps dispatching once a spacing on average: the first
    /// point from now lies half a spacing away on average, and 1,000 members placed
    /// so at every raise throttled 13 %), or to the first from now (members in
    /// step). Never to a point past.
    #[allow(
        clippy::cast_possible_truncation,
        clippy::cast_sign_loss,
        clippy::cast_precision_loss,
        reason = "float to integer `as` saturates, and the values are at least 0"
    )]
    pub fn place(&self, ahead: Duration, nearest: bool) {
        let s = &*self.shared;
        let now = s.clock.now();
        let gap = nanos(s.gap(now, ONE)) as f64;
        if gap <= 0.0 {
            return;
        }
        let now_ns = s.ns(now) as f64;
        let point = now_ns + nanos(ahead) as f64;
        let _ = s
            .last_dispatch_ns
            .fetch_update(Ordering::Relaxed, Ordering::Relaxed, |last| {
                let due = if last == NEVER || !nearest {
                    now_ns
                } else {
                    (last as f64 + gap).max(now_ns)
                };
                let slot = on_schedule(due, now_ns, point, gap);
                Some((slot - gap).max(0.0) as u64)
            });
        s.changed.notify_one();
    }

    /// Before the first dispatch, puts the first slot `phase` (in [0, 1]) of the
    /// spacing from now, as if the last dispatch had gone a spacing before that:
    /// members of a fleet that start together at a low rate would otherwise all send
    /// their first request at once. Does nothing once a request went.
    #[allow(
        clippy::cast_possible_truncation,
        clippy::cast_sign_loss,
        reason = "float to integer `as` saturates, and the value is at least 0"
    )]
    pub fn phase_first(&self, phase: f64) {
        let s = &*self.shared;
        let now = s.clock.now();
        let gap = nanos(s.gap(now, ONE)) as f64;
        let back = ((1.0 - phase.clamp(0.0, 1.0)) * gap) as u64;
        let _ = s.last_dispatch_ns.compare_exchange(
            NEVER,
            s.ns(now).saturating_sub(back),
            Ordering::Relaxed,
            Ordering::Relaxed,
        );
        s.changed.notify_one();
    }

    /// Holds every dispatch until `until` (a server's Retry-After); a later pause wins.
    pub fn pause_until(&self, until: Instant) {
        let s = &*self.shared;
        s.pause_until_ns
            .fetch_max(s.ns(until).max(1), Ordering::Relaxed);
        s.changed.notify_one();
    }

    /// From now on no request waits past `by` (the shutdown drain): waiters and new
    /// arrivals whose slots lie later are shed at once.
    pub fn drain(&self, by: Instant) {
        let s = &*self.shared;
        s.drain_by_ns.store(s.ns(by).max(1), Ordering::Relaxed);
        s.changed.notify_one();
    }

    /// Ends any pause at once.
    pub fn lift_pause(&self) {
        self.shared.pause_until_ns.store(0, Ordering::Relaxed);
        self.shared.changed.notify_one();
    }

    /// Keeps dispatches at least `spacing` apart until `until` (a rate-limit quota
    /// spread over its window); replaces any earlier floor.
    pub fn set_floor(&self, spacing: Duration, until: Instant) {
        let s = &*self.shared;
        s.floor_ns.store(nanos(spacing), Ordering::Relaxed);
        s.floor_until_ns
            .store(s.ns(until).max(1), Ordering::Relaxed);
        s.changed.notify_one();
    }

    /// Keeps dispatches at least `spacing` apart whatever they cost until `until` (a
    /// request window beside the token window a lane paces in); replaces any earlier
    /// one. A zero `spacing` lifts it.
    pub fn set_request_floor(&self, spacing: Duration, until: Instant) {
        let s = &*self.shared;
        let until = if spacing.is_zero() {
            0
        } else {
            s.ns(until).max(1)
        };
        s.request_floor_ns.store(nanos(spacing), Ordering::Relaxed);
        s.request_floor_until_ns.store(until, Ordering::Relaxed);
        s.changed.notify_one();
    }

    /// An answer told what a request really cost: the gap still ahead grows (or
    /// shrinks) by `actual - reserved` units at the spacing. The schedule is never
    /// pulled in before now: a gap already passed is simply over.
    pub fn settle(&self, reserved: u64, actual: u64) {
        let s = &*self.shared;
        let delta = i64::try_from(actual)
            .unwrap_or(i64::MAX)
            .saturating_sub(i64::try_from(reserved).unwrap_or(i64::MAX));
        if delta == 0 {
            return;
        }
        s.gap_cost.fetch_add(delta, Ordering::Relaxed);
        s.changed.notify_one();
    }

    /// The controller epoch dispatches are stamped with now.
    pub fn epoch(&self) -> u64 {
        self.shared.epoch.load(Ordering::Acquire)
    }

    /// The epoch a dispatch at `at` was in, for an attempt that held no slot here (a
    /// lane made or named after it went): the current one, or an earlier one if the
    /// epoch has moved since, so one burst of such attempts raises once.
    pub fn epoch_at(&self, at: Instant) -> u64 {
        let s = &*self.shared;
        let epoch = s.epoch.load(Ordering::Acquire);
        if s.ns(at) < s.epoch_since_ns.load(Ordering::Relaxed) {
            epoch.saturating_sub(1)
        } else {
            epoch
        }
    }

    /// The interval in force (the controller's, without floors).
    pub fn interval(&self) -> Duration {
        Duration::from_nanos(self.shared.interval_ns.load(Ordering::Relaxed))
    }

    /// When the current pause ends, if one is in force.
    pub fn paused_until(&self, now: Instant) -> Option<Instant> {
        self.shared.pause_end(now)
    }

    /// The spacing in force now: the interval, or a larger rate-limit floor.
    pub fn spacing(&self) -> Duration {
        let s = &*self.shared;
        s.spacing(s.clock.now())
    }

    /// The rate-limit floor in force, and when it ends.
    pub fn floor(&self, now: Instant) -> Option<(Duration, Instant)> {
        let s = &*self.shared;
        let until = s.floor_until_ns.load(Ordering::Relaxed);
        (until > s.ns(now)).then(|| {
            (
                Duration::from_nanos(s.floor_ns.load(Ordering::Relaxed)),
                s.at(until),
            )
        })
    }

    /// The least gap between two dispatches whatever they cost, while one is in force.
    pub fn request_floor(&self, now: Instant) -> Duration {
        self.shared.request_floor(now)
    }

    /// What the requests waiting for a slot cost together (thousandths of a unit).
    pub fn queued_cost(&self) -> u64 {
        self.shared.queued_cost.load(Ordering::Relaxed)
    }

    /// Requests waiting for a slot.
    pub fn waiting(&self) -> usize {
        self.shared.waiting.load(Ordering::Relaxed)
    }

    /// When the last dispatch went, or when the pacer was made.
    pub fn last_active(&self) -> Instant {
        let s = &*self.shared;
        match s.last_dispatch_ns.load(Ordering::Relaxed) {
            NEVER => s.origin,
            ns => s.at(ns),
        }
    }

    /// Mean dispatch spacing over the last second (for the automatic start), per
    /// unit of cost.
    pub fn observed_spacing(&self, now: Instant) -> Option<Duration> {
        let s = &*self.shared;
        let now = s.ns(now);
        let per_dispatch = s.rate.spacing(now)?;
        let (dispatches, _) = s.rate.count(now);
        let (cost, _) = s.units.count(now);
        if cost == dispatches.saturating_mul(ONE) || cost == 0 {
            return Some(per_dispatch);
        }
        Some(scale(per_dispatch, dispatches.saturating_mul(ONE), cost))
    }
}

impl Shared {
    fn ns(&self, t: Instant) -> u64 {
        nanos(t.saturating_duration_since(self.origin)).saturating_add(LEAD_NS)
    }

    fn at(&self, ns: u64) -> Instant {
        self.origin + Duration::from_nanos(ns.saturating_sub(LEAD_NS))
    }

    /// Why a slot past `deadline` (as the request gave it) is shed: the drain, when
    /// it ends first, or the request's own deadline.
    fn late(&self, deadline: Instant) -> ShedReason {
        match self.drain_by_ns.load(Ordering::Relaxed) {
            0 => ShedReason::Deadline,
            by if self.at(by) < deadline => ShedReason::Draining,
            _ => ShedReason::Deadline,
        }
    }

    /// Whether waiters are shed only when their deadlines come, not for slots
    /// expected past them: the spacing is provisional and no drain is under way.
    fn lenient(&self) -> bool {
        self.provisional.load(Ordering::Relaxed) && self.drain_by_ns.load(Ordering::Relaxed) == 0
    }

    /// A waiter's deadline, brought forward to the drain deadline if one is set.
    fn limit(&self, deadline: Instant) -> Instant {
        match self.drain_by_ns.load(Ordering::Relaxed) {
            0 => deadline,
            by => deadline.min(self.at(by)),
        }
    }

    fn lock_queue(&self) -> MutexGuard<'_, Line<Waiter>> {
        // Waiters are only pushed and popped under the lock; a panic elsewhere cannot
        // leave the deque inconsistent.
        self.queue.lock().unwrap_or_else(PoisonError::into_inner)
    }

    /// Counts a new waiter, or sheds it when `max_waiting` (for a patient one
    /// [`PATIENT_WAITING`], if more) already wait.
    fn enter(&self, patient: bool) -> Result<WaitingGuard<'_>, Shed> {
        let bound = if patient {
            self.limits.max_waiting.max(PATIENT_WAITING)
        } else {
            self.limits.max_waiting
        };
        if self.waiting.load(Ordering::Relaxed) >= bound {
            return Err(self.full(self.clock.now(), bound));
        }
        self.waiting.fetch_add(1, Ordering::Relaxed);
        Ok(WaitingGuard(&self.waiting))
    }

    /// [`Shared::enter`] in a fair queue, for a newcomer whose place would be `key`:
    /// when the queue is full, the waiter that would go last (in the lowest class,
    /// of the tenant furthest over its share) is shed instead, if it stands behind
    /// the newcomer.
    fn enter_fair(
        &self,
        fair: &mut crate::fair::FairQueue<Waiter>,
        key: crate::fair::Key,
        patient: bool,
    ) -> Result<WaitingGuard<'_>, Shed> {
        match self.enter(patient) {
            Err(shed) if fair.last_key().is_some_and(|last| last > key) => {
                if let Some((last, cost)) = fair.pop_last() {
                    self.queued_cost.fetch_sub(cost, Ordering::Relaxed);
                    let _ = last.grant.send(Err(shed));
                }
                // The one shed leaves the count when its request hears of it.
                self.waiting.fetch_add(1, Ordering::Relaxed);
                Ok(WaitingGuard(&self.waiting))
            }
            entered => entered,
        }
    }

    /// The shed of a newcomer when `bound` requests already wait: told to come back
    /// when they will have gone.
    fn full(&self, now: Instant, bound: usize) -> Shed {
        let wait = self
            .release_at(now)
            .saturating_duration_since(now)
            .saturating_add(self.spacing(now).saturating_mul(count(bound)));
        Shed {
            retry_after: wait,
            reason: ShedReason::QueueFull,
        }
    }

    /// Releases a request of `cost` that arrived at `arrived` and was due at `scheduled`.
    fn dispatch(&self, now: Instant, arrived: Instant, scheduled: Instant, cost: u64) -> Slot {
        let ns = self.ns(now);
        self.gap_cost
            .store(i64::try_from(cost).unwrap_or(i64::MAX), Ordering::Relaxed);
        self.last_dispatch_ns.store(
            self.ns(now - self.late_credit(now, arrived.max(scheduled), cost)),
            Ordering::Relaxed,
        );
        self.rate.add(ns);
        self.units.add_many(ns, cost);
        Slot {
            epoch: self.epoch.load(Ordering::Acquire),
            dispatched_at: now,
            waited: now - arrived,
            held: scheduled > arrived,
            interval: Duration::from_nanos(self.interval_ns.load(Ordering::Relaxed)),
            would: None,
            cost,
        }
    }

    /// A shorter interval (`old` to `new` nanoseconds) shortens what is left of the
    /// gap after the last dispatch in proportion (a longer one, asked to, stretches
    /// it alike), instead of counting the new gap
    /// from that dispatch: with the new gap counted from it, every pacer whose last
    /// dispatch lies further back than the new gap would dispatch at once, and a fleet
    /// whose members grow together (or see their shares move) would send a burst of
    /// a fraction of its members at one instant, however low each one's rate.
    fn keep_progress(&self, old: u64, new: u64) {
        let now = self.ns(self.clock.now());
        let cost = u64::try_from(self.gap_cost.load(Ordering::Relaxed)).unwrap_or(0);
        let max_gap = self.limits.max_gap;
        let gap = |interval: u64| {
            let spacing = Duration::from_nanos(interval);
            nanos(scale(spacing, cost, ONE).min(spacing.max(max_gap)))
        };
        let _ = self
            .last_dispatch_ns
            .fetch_update(Ordering::Relaxed, Ordering::Relaxed, |last| {
                let due = last.checked_add(gap(old)).filter(|due| *due > now)?;
                let left = u128::from(due - now) * u128::from(new) / u128::from(old);
                let left = u64::try_from(left).unwrap_or(u64::MAX);
                Some(now.saturating_add(left).saturating_sub(gap(new)))
            });
    }

    /// How much of a late release's lateness (`now` past `due`: its slot, or its
    /// arrival if that came later) the next slot gets back: up to half the gap after it.
    /// On a busy host the release task runs up to milliseconds after its slot, and
    /// counting the next slot from the actual release lost that time for good (5 % of
    /// the rate at 10 ms with two runnable tasks per core). The next slot never comes
    /// before where the schedule put it, so an upstream's bucket that takes the
    /// schedule takes these dispatches too; and never less than half the gap after
    /// this release. A request that came after its slot gets nothing back for the
    /// time nobody waited.
    fn late_credit(&self, now: Instant, due: Instant, cost: u64) -> Duration {
        let late = now.saturating_duration_since(due);
        if late.is_zero() {
            return late;
        }
        late.min(self.gap(now, cost) / 2)
    }

    /// Observe mode: lets the request go now and says what pacing would have done,
    /// on a schedule of its own (slots the spacing apart, after any pause; a shed
    /// request takes no slot).
    fn shadow(&self, now: Instant, deadline: Instant, cost: u64) -> Slot {
        let now_ns = self.ns(now);
        let from = now_ns.max(self.pause_end(now).map_or(0, |end| self.ns(end)));
        let spacing = nanos(self.gap(now, cost));
        let mut next = self.shadow_next_ns.load(Ordering::Relaxed);
        let would = loop {
            let at = from.max(next);
            if at > self.ns(deadline) {
                break Would::Shed;
            }
            match self.shadow_next_ns.compare_exchange_weak(
                next,
                at.saturating_add(spacing),
                Ordering::Relaxed,
                Ordering::Relaxed,
            ) {
                Ok(_) => break Would::Wait(Duration::from_nanos(at - now_ns)),
                Err(seen) => next = seen,
            }
        };
        Slot {
            would: (would != Would::Wait(Duration::ZERO)).then_some(would),
            ..self.dispatch(now, now, now, cost)
        }
    }

    /// The spacing in force: the interval, or a larger rate-limit floor.
    fn spacing(&self, now: Instant) -> Duration {
        let interval = self.interval_ns.load(Ordering::Relaxed);
        let until = self.floor_until_ns.load(Ordering::Relaxed);
        if until == 0 {
            return Duration::from_nanos(interval);
        }
        if until <= self.ns(now) {
            let _ = self.floor_until_ns.compare_exchange(
                until,
                0,
                Ordering::Relaxed,
                Ordering::Relaxed,
            );
            return Duration::from_nanos(interval);
        }
        Duration::from_nanos(interval.max(self.floor_ns.load(Ordering::Relaxed)))
    }

    /// The gap after a dispatch of `cost`: the spacing × the cost, at least the
    /// request floor; past one unit's spacing, at most `max_gap`.
    fn gap(&self, now: Instant, cost: u64) -> Duration {
        let spacing = self.spacing(now);
        let spaced = scale(spacing, cost, ONE).min(spacing.max(self.limits.max_gap));
        spaced.max(self.request_floor(now))
    }

    /// The gaps of `count` waiting requests that cost `cost` together.
    fn gaps(&self, now: Instant, n: usize, cost: u64) -> Duration {
        let spacing = self.spacing(now);
        let most = spacing.max(self.limits.max_gap).saturating_mul(count(n));
        let spaced = scale(spacing, cost, ONE).min(most);
        spaced.max(self.request_floor(now).saturating_mul(count(n)))
    }

    /// The request floor in force; clears an expired one.
    fn request_floor(&self, now: Instant) -> Duration {
        let until = self.request_floor_until_ns.load(Ordering::Relaxed);
        if until == 0 {
            return Duration::ZERO;
        }
        if until <= self.ns(now) {
            let _ = self.request_floor_until_ns.compare_exchange(
                until,
                0,
                Ordering::Relaxed,
                Ordering::Relaxed,
            );
            return Duration::ZERO;
        }
        Duration::from_nanos(self.request_floor_ns.load(Ordering::Relaxed))
    }

    /// The end of the pause in force; clears an expired one.
    fn pause_end(&self, now: Instant) -> Option<Instant> {
        let until = self.pause_until_ns.load(Ordering::Relaxed);
        if until == 0 {
            return None;
        }
        if until <= self.ns(now) {
            let _ = self.pause_until_ns.compare_exchange(
                until,
                0,
                Ordering::Relaxed,
                Ordering::Relaxed,
            );
            return None;
        }
        Some(self.at(until))
    }

    /// When the head of the queue may go: its place in the schedule.
    fn release_at(&self, now: Instant) -> Instant {
        let last = self.last_dispatch_ns.load(Ordering::Relaxed);
        // A pacer that never dispatched has had a free slot since it was made.
        let spaced = if last == NEVER {
            self.origin
        } else {
            // Settling may have taken the gap below 0: it is over, no credit.
            let cost = u64::try_from(self.gap_cost.load(Ordering::Relaxed)).unwrap_or(0);
            self.at(last.saturating_add(nanos(self.gap(now, cost))))
        };
        match self.pause_end(now) {
            Some(end) => spaced.max(end),
            None => spaced,
        }
    }

    /// Sheds the queued waiters whose expected slots now lie past their deadlines, or
    /// while the spacing is provisional, whose deadlines came; `head_at` is the slot of
    /// the waiter being released (of `head_cost`), and the queue follows it. Returns,
    /// while the spacing is provisional, the earliest deadline left in the queue: the
    /// release task wakes then to shed its waiter.
    fn shed_late(&self, head_at: Instant, head_cost: u64, now: Instant) -> Option<Instant> {
        let lenient = self.lenient();
        let mut earliest: Option<Instant> = None;
        let mut queue = self.lock_queue();
        let mut expected = head_at + self.gap(now, head_cost);
        queue.sweep(|waiter| {
            if waiter.grant.is_closed() {
                self.queued_cost.fetch_sub(waiter.cost, Ordering::Relaxed);
                return None;
            }
            let limit = self.limit(waiter.deadline);
            if overdue(expected, limit, now, lenient) {
                self.queued_cost.fetch_sub(waiter.cost, Ordering::Relaxed);
                let retry_after = expected.saturating_duration_since(now);
                let reason = self.late(waiter.deadline);
                let _ = waiter.grant.send(Err(Shed {
                    retry_after,
                    reason,
                }));
                None
            } else {
                expected += self.gap(now, waiter.cost);
                if lenient {
                    earliest = Some(earliest.map_or(limit, |e| e.min(limit)));
                }
                Some(waiter)
            }
        });
        earliest
    }
}

/// The release task: grants slots to waiters in arrival order.
async fn release(shared: Arc<Shared>) {
    let mut timer = PreciseSleep::new(shared.clock.clone());
    loop {
        let next = shared.lock_queue().pop();
        let Some((mut place, mut waiter)) = next else {
            if shared.closed.load(Ordering::Relaxed) {
                return;
            }
            timer.idle();
            shared.changed.notified().await;
            continue;
        };
        // The release time this waiter last slept toward: a pause that has since
        // expired (and been cleared) still held it until then.
        let mut due = waiter.arrived;
        while !waiter.grant.is_closed() {
            let now = shared.clock.now();
            let at = shared.release_at(now);
            if at <= now {
                let scheduled = at.max(due.min(now));
                let slot = shared.dispatch(now, waiter.arrived, scheduled, waiter.cost);
                let _ = waiter.grant.send(Ok(slot));
                break;
            }
            let limit = shared.limit(waiter.deadline);
            // The release time lies ahead (`at > now`), so a limit that came lies
            // behind it too.
            if overdue(at, limit, now, shared.lenient()) {
                let shed = Shed {
                    retry_after: at - now,
                    reason: shared.late(waiter.deadline),
                };
                let _ = waiter.grant.send(Err(shed));
                break;
            }
            let queued = shared.shed_late(at, waiter.cost, now);
            due = at;
            tokio::select! {
                // A provisional spacing sheds a waiter only once its deadline came.
                _ = timer.until(queued.map_or(at, |q| q.min(at)).min(limit)) => {}
                // A new interval, pause or floor: recompute the release time.
                _ = shared.changed.notified() => {}
                // The client went away: its place goes to the next waiter.
                _ = waiter.grant.closed() => {}
            }
            // In a fair queue, one that came since may go before this waiter.
            if let Some(key) = place {
                let (key, next, overtaken) = shared.lock_queue().overtake(key, waiter);
                place = Some(key);
                waiter = next;
                if overtaken {
                    due = waiter.arrived;
                }
            }
        }
        shared.queued_cost.fetch_sub(waiter.cost, Ordering::Relaxed);
    }
}

/// Whether a waiter whose slot is expected at `expected` must be shed now, given its
/// `limit`: the slot lies past it, or while the spacing is lenient, the limit came.
fn overdue(expected: Instant, limit: Instant, now: Instant, lenient: bool) -> bool {
    if lenient {
        now >= limit
    } else {
        expected > limit
    }
}

/// Counts a request as waiting for as long as it lives.
struct WaitingGuard<'a>(&'a AtomicUsize);

impl Drop for WaitingGuard<'_> {
    fn drop(&mut self) {
        self.0.fetch_sub(1, Ordering::Relaxed);
    }
}

/// A count as a `Duration` multiplier.
fn count(n: usize) -> u32 {
    u32::try_from(n).unwrap_or(u32::MAX)
}

/// `d` × `times` / `per`, without overflow (saturating).
fn scale(d: Duration, times: u64, per: u64) -> Duration {
    if times == per {
        return d;
    }
    let ns = d.as_nanos().saturating_mul(u128::from(times)) / u128::from(per.max(1));
    Duration::from_nanos(u64::try_from(ns).unwrap_or(u64::MAX))
}

/// The point of the schedule `point + k × gap` nearest `due` (ties go later) that
/// is not before `now` (`due` at or after `now`).
fn on_schedule(due: f64, now: f64, point: f64, gap: f64) -> f64 {
    let ahead = (point - due).rem_euclid(gap);
    if ahead > gap / 2.0 && due + ahead - gap >= now {
        due + ahead - gap
    } else {
        due + ahead
    }
}

fn nanos(d: Duration) -> u64 {
    u64::try_from(d.as_nanos()).unwrap_or(u64::MAX)
}

#[cfg(test)]
mod tests;
