//! Requests out at once (`max_in_flight`): one upstream's concurrency cap, fixed or
//! learned ([`crate::concurrency::Learner`]).
//!
//! A request takes a [`Flight`] before its rate slot and holds it until its answer has
//! passed (a streamed body to its end); dropping the flight lands it. Waiting for a
//! flight is first come, first served (tokio's semaphore is fair), bounded by the
//! request's deadline and `max_waiting`, and shed with a `Retry-After` like a paced
//! request. A cut takes permits back as flights land (`debt`), so a cap never
//! drops a request already out.

use std::sync::atomic::{AtomicU8, AtomicU32, AtomicU64, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex, MutexGuard, OnceLock, PoisonError};
use std::time::Duration;

use tokio::sync::Semaphore;

use crate::clock::{Clock, Instant};
use crate::concurrency::{CapSetting, Learner, Move, Why};
use crate::pacer::{Shed, ShedReason};

/// The most a learned cap grows to: far past any server's slots, and a bound on
/// what a runaway learner can send at once.
pub const LEARN_MOST: u32 = 1024;

/// What the cap's owner is told when it moves.
pub type OnMove = Box<dyn Fn(u32, Why) + Send + Sync>;

/// One upstream's concurrency cap and the requests out under it.
pub struct Flights {
    clock: Clock,
    permits: Semaphore,
    cap: AtomicU32,
    /// Permits still to take back as flights land, after a cut.
    debt: AtomicU32,
    out: AtomicU32,
    waiting: AtomicUsize,
    max_waiting: usize,
    /// Nanoseconds of the recent latency (for a shed's `Retry-After`); 0 before any.
    latency_ns: AtomicU64,
    learner: Option<Mutex<Learner>>,
    /// The learner's epoch, kept beside it so that a request takes off without
    /// locking it.
    epoch: AtomicU64,
    on_move: Option<OnMove>,
    /// The end of the shutdown drain, once it began: no request waits past it.
    drain_by: OnceLock<Instant>,
    /// The latest move's why, as one more than its place in [`Why::ALL`]; 0 before any.
    last_move: AtomicU8,
    /// Moves so far, by their place in [`Why::ALL`].
    moves: [AtomicU64; Why::ALL.len()],
}

impl std::fmt::Debug for Flights {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Flights")
            .field("cap", &self.cap())
            .field("out", &self.out())
            .finish()
    }
}

/// One request out under a cap; dropping it lands it.
#[derive(Debug)]
pub struct Flight {
    flights: Arc<Flights>,
    /// Requests out when it took off, itself included.
    out: u32,
    /// The learner's epoch then.
    epoch: u64,
    /// The cap then.
    cap: u32,
}

/// What an answer tells a learned cap.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Told {
    /// A success, answered in this long.
    Success(Duration),
    /// A refusal the cap takes (see [`crate::concurrency::feeds_cap`]).
    Refused,
}

impl Flights {
    /// A cap as `setting` asks (`None` for [`CapSetting::Off`]); at most `max_waiting`
    /// requests wait for a flight. `on_move` hears every move of a learned cap.
    pub fn new(
        setting: CapSetting,
        max_waiting: usize,
        clock: Clock,
        on_move: Option<OnMove>,
    ) -> Option<Arc<Flights>> {
        let (cap, learner) = match setting {
            CapSetting::Off => return None,
            CapSetting::Fixed(n) => (n.max(1), None),
            CapSetting::Learn => {
                let learner = Learner::new(LEARN_MOST);
                (learner.cap(), Some(Mutex::new(learner)))
            }
        };
        Some(Arc::new(Flights {
            clock,
            permits: Semaphore::new(cap as usize),
            cap: AtomicU32::new(cap),
            debt: AtomicU32::new(0),
            out: AtomicU32::new(0),
            waiting: AtomicUsize::new(0),
            max_waiting,
            latency_ns: AtomicU64::new(0),
            learner,
            epoch: AtomicU64::new(0),
            on_move,
            drain_by: OnceLock::new(),
            last_move: AtomicU8::new(0),
            moves: Default::default(),
        }))
    }

    /// The cap in force.
    pub fn cap(&self) -> u32 {
        self.cap.load(Ordering::Relaxed)
    }

    /// Requests out now.
    pub fn out(&self) -> u32 {
        self.out.load(Ordering::Relaxed)
    }

    /// Requests waiting for a flight.
    pub fn waiting(&self) -> usize {
        self.waiting.load(Ordering::Relaxed)
    }

    /// Whether the cap is learned.
    pub fn learns(&self) -> bool {
        self.learner.is_some()
    }

    /// The learned cap's ceiling (the most out known to pass), if it has one.
    pub fn ceiling(&self) -> Option<u32> {
        self.learner.as_ref().and_then(|l| lock(l).ceiling())
    }

    /// Why the cap last moved; `None` before its first move (and always for a fixed cap).
    pub fn last_move(&self) -> Option<Why> {
        let place = usize::from(self.last_move.load(Ordering::Relaxed)).checked_sub(1)?;
        Why::ALL.get(place).copied()
    }

    /// How many times the cap moved for `why` so far.
    pub fn moves(&self, why: Why) -> u64 {
        self.moves[why as usize].load(Ordering::Relaxed)
    }

    /// Waits for a flight until `deadline`; a request that cannot wait (the queue is
    /// full, or its deadline came) is shed, told to come back when a flight is
    /// likely free.
    pub async fn take(self: &Arc<Self>, deadline: Instant) -> Result<Flight, Shed> {
        let (deadline, late) = match self.drain_by.get() {
            Some(by) if *by < deadline => (*by, ShedReason::Draining),
            _ => (deadline, ShedReason::Deadline),
        };
        let permit = match self.permits.try_acquire() {
            Ok(permit) => permit,
            Err(_) => {
                if self.waiting.load(Ordering::Relaxed) >= self.max_waiting {
                    return Err(self.shed(ShedReason::QueueFull));
                }
                self.waiting.fetch_add(1, Ordering::Relaxed);
                let _waiting = Waiting(&self.waiting);
                match self
                    .clock
                    .timeout_at(deadline, self.permits.acquire())
                    .await
                {
                    Some(Ok(permit)) => permit,
                    // The semaphore is never closed; a timeout is the deadline.
                    Some(Err(_)) | None => return Err(self.shed(late)),
                }
            }
        };
        // Given back by hand when the flight lands, or kept to pay a cut's debt.
        permit.forget();
        let out = self.out.fetch_add(1, Ordering::Relaxed).saturating_add(1);
        let cap = self.cap();
        let epoch = self.epoch.load(Ordering::Relaxed);
        Ok(Flight {
            flights: Arc::clone(self),
            out,
            epoch,
            cap,
        })
    }

    /// From now on no request waits for a flight past `by` (the shutdown drain).
    pub fn drain(&self, by: Instant) {
        let _ = self.drain_by.set(by);
    }

    /// A shed while flights are all out: come back in about one answer's time.
    fn shed(&self, reason: ShedReason) -> Shed {
        let latency = self.latency_ns.load(Ordering::Relaxed);
        let retry_after = if latency == 0 {
            Duration::from_secs(1)
        } else {
            Duration::from_nanos(latency).max(Duration::from_millis(10))
        };
        Shed {
            retry_after,
            reason,
        }
    }

    /// Time since `at` on the cap's clock (an answer's latency).
    pub fn since(&self, at: Instant) -> Duration {
        self.clock.now().saturating_duration_since(at)
    }

    /// Tells a learned cap how `flight` went; returns what moved.
    pub fn told(&self, flight: &Flight, told: Told) -> Move {
        let Some(learner) = &self.learner else {
            return Move::Hold;
        };
        let mut learner = lock(learner);
        let moved = match told {
            Told::Success(latency) => {
                let moved = learner.success(flight.out, flight.cap, flight.epoch, latency);
                let (recent, _) = learner.latency();
                self.latency_ns
                    .store(nanos(Duration::from_secs_f64(recent)), Ordering::Relaxed);
                moved
            }
            Told::Refused => learner.refused(flight.out, flight.epoch),
        };
        self.epoch.store(learner.epoch(), Ordering::Relaxed);
        let why = match moved {
            Move::Hold => return moved,
            Move::Grow => Why::Grew,
            Move::Cut(why) => why,
        };
        let cap = learner.cap();
        drop(learner);
        self.resize(cap);
        self.moved(cap, why);
        moved
    }

    /// Starts a learned cap that has learned nothing yet over: at `known`, as if
    /// learned there (`Learner::known`), or small and growing (`Learner::new`).
    pub fn start(&self, known: Option<u32>) {
        let Some(learner) = &self.learner else {
            return;
        };
        let mut learner = lock(learner);
        if !learner.is_fresh() {
            return;
        }
        *learner = match known {
            Some(limit) => Learner::known(LEARN_MOST, limit),
            None => Learner::new(LEARN_MOST),
        };
        self.epoch.store(learner.epoch(), Ordering::Relaxed);
        let cap = learner.cap();
        drop(learner);
        self.resize(cap);
    }

    /// Takes a fleet member's part `share` of the fleet's learned cap `fleet`, at its
    /// place `phase` among the members (`Learner::adopt`).
    pub fn adopt(&self, share: f64, fleet: f64, phase: f64) {
        let filled = self.wanted() >= f64::from(self.cap());
        let Some(learner) = &self.learner else {
            return;
        };
        let mut learner = lock(learner);
        learner.adopt(share, fleet, phase, filled);
        self.epoch.store(learner.epoch(), Ordering::Relaxed);
        let cap = learner.cap();
        drop(learner);
        if cap != self.cap() {
            self.resize(cap);
            self.moved(cap, Why::Fleet);
        }
    }

    /// What a fleet member tells the fleet of its learned cap: the cap unrounded, and
    /// the requests it would have out (those out and those waiting); `None` for a
    /// fixed cap.
    pub fn capped(&self) -> Option<(f64, f64)> {
        let limit = lock(self.learner.as_ref()?).limit();
        Some((limit, self.wanted()))
    }

    /// The requests this cap's clients would have out: those out and those waiting.
    fn wanted(&self) -> f64 {
        f64::from(self.out()) + self.waiting() as f64
    }

    /// Remembers why the cap moved to `cap` and tells its owner.
    fn moved(&self, cap: u32, why: Why) {
        self.last_move.store(why as u8 + 1, Ordering::Relaxed);
        self.moves[why as usize].fetch_add(1, Ordering::Relaxed);
        if let Some(on_move) = &self.on_move {
            on_move(cap, why);
        }
    }

    /// Moves the cap to `cap`: more permits at once, or fewer as flights land.
    fn resize(&self, cap: u32) {
        let old = self.cap.swap(cap, Ordering::Relaxed);
        if cap > old {
            let mut more = cap - old;
            // A debt still owed is forgiven first.
            let _ = self
                .debt
                .fetch_update(Ordering::Relaxed, Ordering::Relaxed, |debt| {
                    let paid = debt.min(more);
                    Some(debt - paid)
                })
                .map(|debt| more -= debt.min(more));
            self.permits.add_permits(more as usize);
        } else if cap < old {
            let fewer = old - cap;
            let taken = u32::try_from(self.permits.forget_permits(fewer as usize)).unwrap_or(0);
            self.debt
                .fetch_add(fewer - taken.min(fewer), Ordering::Relaxed);
        }
    }

    /// A flight landed: its permit goes back, or pays a cut's debt.
    fn land(&self) {
        self.out.fetch_sub(1, Ordering::Relaxed);
        let paid = self
            .debt
            .fetch_update(Ordering::Relaxed, Ordering::Relaxed, |debt| {
                debt.checked_sub(1)
            })
            .is_ok();
        if !paid {
            self.permits.add_permits(1);
        }
    }
}

impl Flight {
    /// Requests out when it took off, itself included.
    pub fn out(&self) -> u32 {
        self.out
    }

    /// The cap it flies under.
    pub fn flights(&self) -> &Flights {
        &self.flights
    }
}

impl Drop for Flight {
    fn drop(&mut self) {
        self.flights.land();
    }
}

/// Counts a request as waiting for as long as it lives.
struct Waiting<'a>(&'a AtomicUsize);

impl Drop for Waiting<'_> {
    fn drop(&mut self) {
        self.0.fetch_sub(1, Ordering::Relaxed);
    }
}

fn lock(learner: &Mutex<Learner>) -> MutexGuard<'_, Learner> {
    // A panic while holding the lock cannot leave the learner worse than stopping.
    learner.lock().unwrap_or_else(PoisonError::into_inner)
}

fn nanos(d: Duration) -> u64 {
    u64::try_from(d.as_nanos()).unwrap_or(u64::MAX)
}

#[cfg(test)]
mod tests;
