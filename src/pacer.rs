//! Spacing of one upstream's dispatches: the fast path, the FIFO queue and pauses.
//!
//! `pace` mode: dispatches are spaced at least the current interval apart, first come
//! first served. One release task per upstream owns the queue; the head waiter is
//! released against the interval in force at release, so a raise slows the waiting
//! queue at once. `delay` mode: each request sleeps the interval on its own.
//! Interval 0, no pause and an empty queue is the fast path: a few atomic loads, no
//! lock, allocation or timer. The controller decides the interval; this file only
//! applies it.

mod rate;

use std::sync::Arc;
use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering};
use std::time::Duration;

use tokio::sync::{Notify, mpsc, oneshot};
use tokio::time::Instant;

pub use rate::DispatchRate;

use crate::sleeper::Mode;

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
}

/// One upstream's pacing state, shared by its requests and its release task.
#[derive(Clone)]
pub struct Pacer {
    shared: Arc<Shared>,
    queue: mpsc::UnboundedSender<Waiter>,
}

struct Shared {
    mode: Mode,
    origin: Instant,
    interval_ns: AtomicU64,
    /// Nanoseconds from `origin`; 0 means no pause.
    pause_until_ns: AtomicU64,
    epoch: AtomicU64,
    waiting: AtomicUsize,
    /// Nanoseconds from `origin` of the last dispatch's place in the schedule, or `NEVER`.
    last_dispatch_ns: AtomicU64,
    rate: DispatchRate,
    changed: Notify,
}

/// `last_dispatch_ns` before the first dispatch.
const NEVER: u64 = u64::MAX;

/// tokio's timer fires on millisecond ticks, up to a tick after the deadline. A waiter
/// released that late keeps its scheduled place, so the lateness does not add up over
/// a queue (a 20 ms interval would otherwise run at 21 ms).
const TIMER_TICK: Duration = Duration::from_millis(1);

struct Waiter {
    arrived: Instant,
    grant: oneshot::Sender<Slot>,
}

impl Pacer {
    /// A pacer at interval 0; in pace mode it spawns its release task, which ends
    /// when the last clone of the pacer is dropped.
    pub fn new(mode: Mode) -> Pacer {
        let shared = Arc::new(Shared {
            mode,
            origin: Instant::now(),
            interval_ns: AtomicU64::new(0),
            pause_until_ns: AtomicU64::new(0),
            epoch: AtomicU64::new(0),
            waiting: AtomicUsize::new(0),
            last_dispatch_ns: AtomicU64::new(NEVER),
            rate: DispatchRate::default(),
            changed: Notify::new(),
        });
        let (queue, waiters) = mpsc::unbounded_channel();
        if mode == Mode::Pace {
            tokio::spawn(release(Arc::clone(&shared), waiters));
        }
        Pacer { shared, queue }
    }

    /// Waits for this request's slot. Dropping the future gives up the place in the
    /// queue without using a slot.
    pub async fn acquire(&self) -> Slot {
        let s = &*self.shared;
        let now = Instant::now();
        if s.interval_ns.load(Ordering::Relaxed) == 0
            && s.pause_until_ns.load(Ordering::Relaxed) == 0
            && s.waiting.load(Ordering::Relaxed) == 0
        {
            return s.dispatch(now, now, now);
        }
        let _waiting = WaitingGuard::enter(&s.waiting);
        match s.mode {
            Mode::Delay => {
                let interval = Duration::from_nanos(s.interval_ns.load(Ordering::Relaxed));
                let until = (now + interval).max(s.pause_end(now).unwrap_or(now));
                tokio::time::sleep_until(until).await;
                s.dispatch(Instant::now(), now, until)
            }
            Mode::Pace => {
                let (grant, granted) = oneshot::channel();
                // The release task is gone only while the runtime shuts down.
                if self
                    .queue
                    .send(Waiter {
                        arrived: now,
                        grant,
                    })
                    .is_ok()
                    && let Ok(slot) = granted.await
                {
                    return slot;
                }
                let released = Instant::now();
                s.dispatch(released, now, released)
            }
        }
    }

    /// Applies a new interval from the controller; waiting requests see it at once.
    pub fn set_interval(&self, interval: Duration, epoch: u64) {
        let s = &*self.shared;
        s.interval_ns.store(nanos(interval), Ordering::Relaxed);
        s.epoch.store(epoch, Ordering::Release);
        s.changed.notify_one();
    }

    /// Holds every dispatch until `until` (a server's Retry-After); a later pause wins.
    pub fn pause_until(&self, until: Instant) {
        let s = &*self.shared;
        s.pause_until_ns
            .fetch_max(s.ns(until).max(1), Ordering::Relaxed);
        s.changed.notify_one();
    }

    /// Ends any pause at once.
    pub fn lift_pause(&self) {
        self.shared.pause_until_ns.store(0, Ordering::Relaxed);
        self.shared.changed.notify_one();
    }

    /// The interval in force.
    pub fn interval(&self) -> Duration {
        Duration::from_nanos(self.shared.interval_ns.load(Ordering::Relaxed))
    }

    /// When the current pause ends, if one is in force.
    pub fn paused_until(&self, now: Instant) -> Option<Instant> {
        self.shared.pause_end(now)
    }

    /// Requests waiting for a slot.
    pub fn waiting(&self) -> usize {
        self.shared.waiting.load(Ordering::Relaxed)
    }

    /// Mean dispatch spacing over the last second (for the automatic start).
    pub fn observed_spacing(&self, now: Instant) -> Option<Duration> {
        self.shared.rate.spacing(self.shared.ns(now))
    }
}

impl Shared {
    fn ns(&self, t: Instant) -> u64 {
        nanos(t.saturating_duration_since(self.origin))
    }

    fn at(&self, ns: u64) -> Instant {
        self.origin + Duration::from_nanos(ns)
    }

    /// Releases a request that arrived at `arrived` and was due at `scheduled`.
    fn dispatch(&self, now: Instant, arrived: Instant, scheduled: Instant) -> Slot {
        let place = if arrived <= scheduled {
            scheduled.max(now.checked_sub(TIMER_TICK).unwrap_or(now))
        } else {
            now
        };
        self.last_dispatch_ns
            .store(self.ns(place), Ordering::Relaxed);
        self.rate.record(self.ns(now));
        Slot {
            epoch: self.epoch.load(Ordering::Acquire),
            dispatched_at: now,
            waited: now - arrived,
            held: scheduled > arrived,
            interval: Duration::from_nanos(self.interval_ns.load(Ordering::Relaxed)),
        }
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
        let interval = self.interval_ns.load(Ordering::Relaxed);
        // A pacer that never dispatched has had a free slot since it was made.
        let spaced = if last == NEVER {
            self.origin
        } else {
            self.at(last.saturating_add(interval))
        };
        match self.pause_end(now) {
            Some(end) => spaced.max(end),
            None => spaced,
        }
    }
}

/// The release task: grants slots to waiters in arrival order.
async fn release(shared: Arc<Shared>, mut waiters: mpsc::UnboundedReceiver<Waiter>) {
    while let Some(mut waiter) = waiters.recv().await {
        // The release time this waiter last slept toward: a pause that has since
        // expired (and been cleared) still held it until then.
        let mut due = waiter.arrived;
        while !waiter.grant.is_closed() {
            let now = Instant::now();
            let at = shared.release_at(now);
            if at <= now {
                let scheduled = at.max(due.min(now));
                let _ = waiter
                    .grant
                    .send(shared.dispatch(now, waiter.arrived, scheduled));
                break;
            }
            due = at;
            tokio::select! {
                _ = tokio::time::sleep_until(at) => {}
                // A new interval or pause: recompute the release time.
                _ = shared.changed.notified() => {}
                // The client went away: its place goes to the next waiter.
                _ = waiter.grant.closed() => {}
            }
        }
    }
}

/// Counts a request as waiting for as long as it lives.
struct WaitingGuard<'a>(&'a AtomicUsize);

impl<'a> WaitingGuard<'a> {
    fn enter(count: &'a AtomicUsize) -> Self {
        count.fetch_add(1, Ordering::Relaxed);
        WaitingGuard(count)
    }
}

impl Drop for WaitingGuard<'_> {
    fn drop(&mut self) {
        self.0.fetch_sub(1, Ordering::Relaxed);
    }
}

fn nanos(d: Duration) -> u64 {
    u64::try_from(d.as_nanos()).unwrap_or(u64::MAX)
}

#[cfg(test)]
mod tests;
