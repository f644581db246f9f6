//! The one source of time for the request path: monotonic now, wall now, sleep until.
//!
//! [`Clock::Tokio`] is the running proxy's: tokio's clock and timer, so tests that pause
//! tokio's time (`start_paused`) move it too. [`Clock::Manual`] is virtual time for
//! `easeoff simulate` and for tests that drive the request path without a network: it
//! moves only when told, and [`ManualClock::runtime`] builds a current-thread runtime
//! that moves it to the next wake-up whenever every task waits. Decision code never
//! reads a clock; the shell reads this one and passes instants and durations in.

use std::collections::BTreeMap;
use std::future::Future;
use std::pin::Pin;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex, MutexGuard, PoisonError};
use std::task::{Context, Poll, Waker};
use std::time::{Duration, SystemTime};

/// The one monotonic time type: tokio's, so that tests with paused time move it, and a
/// [`ManualClock`]'s instants are of the same type as the proxy's. Every instant in
/// decision state is one, read from a [`Clock`].
pub use tokio::time::Instant;

/// Where time comes from. Cloning is cheap; reading [`Clock::Tokio`] is one branch and
/// the system's monotonic clock, so the hot path pays nothing for the choice.
#[derive(Clone, Debug, Default)]
pub enum Clock {
    /// tokio's clock and timer (the real one, or tokio's paused time in tests).
    #[default]
    Tokio,
    /// Virtual time that moves only when told.
    Manual(Arc<ManualClock>),
}

impl Clock {
    /// A new manual clock whose wall time starts at `wall`.
    pub fn manual(wall: SystemTime) -> (Clock, Arc<ManualClock>) {
        let manual = Arc::new(ManualClock::new(wall));
        (Clock::Manual(Arc::clone(&manual)), manual)
    }

    /// The monotonic now.
    #[inline]
    pub fn now(&self) -> Instant {
        match self {
            Clock::Tokio => Instant::now(),
            Clock::Manual(clock) => clock.now(),
        }
    }

    /// The wall-clock now (HTTP dates, signatures).
    pub fn wall(&self) -> SystemTime {
        match self {
            Clock::Tokio => SystemTime::now(),
            Clock::Manual(clock) => clock.wall(),
        }
    }

    /// Returns at `at` or later.
    pub async fn sleep_until(&self, at: Instant) {
        match self {
            Clock::Tokio => tokio::time::sleep_until(at).await,
            Clock::Manual(clock) => clock.sleep_until(at).await,
        }
    }

    /// Returns after `duration` or later.
    pub async fn sleep(&self, duration: Duration) {
        self.sleep_until(self.now() + duration).await;
    }

    /// `future`'s output, or `None` if `at` comes first.
    pub async fn timeout_at<F: Future>(&self, at: Instant, future: F) -> Option<F::Output> {
        match self {
            Clock::Tokio => tokio::time::timeout_at(at, future).await.ok(),
            Clock::Manual(clock) => {
                tokio::select! {
                    output = future => Some(output),
                    () = clock.sleep_until(at) => None,
                }
            }
        }
    }

    /// Whether this is tokio's clock, the one the timerfd and tokio's timer follow.
    pub fn is_tokio(&self) -> bool {
        matches!(self, Clock::Tokio)
    }

    /// Ticks every `period` on this clock, the first at once.
    pub fn interval(&self, period: Duration) -> Interval {
        Interval {
            clock: self.clone(),
            period,
            next: self.now(),
        }
    }
}

/// Ticks on a [`Clock`], as tokio's `interval` with `MissedTickBehavior::Delay` does on
/// its own: on time, the ticks keep to their schedule; a tick taken late moves the
/// ones after it, so ticks never come in a burst to catch up.
#[derive(Debug)]
pub struct Interval {
    clock: Clock,
    period: Duration,
    next: Instant,
}

impl Interval {
    /// How late a tick may be and still keep the schedule (tokio's own tolerance).
    const LATE: Duration = Duration::from_millis(5);

    /// Returns at the next tick.
    pub async fn tick(&mut self) {
        self.clock.sleep_until(self.next).await;
        let now = self.clock.now();
        let from = if now > self.next + Self::LATE {
            now
        } else {
            self.next
        };
        // The config bounds a period; a far tick rather than a panic if one is not.
        self.next = from.checked_add(self.period).unwrap_or(from + YEAR);
    }

    /// Ticks every `period` from now on: the next tick comes one `period` from now
    /// at the latest.
    pub fn set_period(&mut self, period: Duration) {
        self.period = period;
        if let Some(sooner) = self.clock.now().checked_add(period) {
            self.next = self.next.min(sooner);
        }
    }
}

/// A year: where an [`Interval`] whose period overflows an instant puts its next tick.
const YEAR: Duration = Duration::from_secs(365 * 86_400);

/// Virtual time: starts at the moment it is made and moves only by
/// [`ManualClock::advance`] or [`ManualClock::advance_to_next`]. Sleepers wake in the
/// order of their deadlines, ties in the order they began to sleep, so a run on one
/// thread is reproducible.
#[derive(Debug)]
pub struct ManualClock {
    start: Instant,
    wall_start: SystemTime,
    /// Nanoseconds since `start`; written under `sleepers`' lock.
    elapsed_ns: AtomicU64,
    sleepers: Mutex<Sleepers>,
}

#[derive(Debug, Default)]
struct Sleepers {
    next_id: u64,
    waiting: BTreeMap<(Instant, u64), Waker>,
}

impl ManualClock {
    /// A clock at the system's monotonic now, whose wall time reads `wall`.
    pub fn new(wall: SystemTime) -> ManualClock {
        ManualClock {
            start: Instant::now(),
            wall_start: wall,
            elapsed_ns: AtomicU64::new(0),
            sleepers: Mutex::new(Sleepers::default()),
        }
    }

    /// The virtual monotonic now.
    pub fn now(&self) -> Instant {
        self.start + self.elapsed()
    }

    /// The virtual wall-clock now.
    pub fn wall(&self) -> SystemTime {
        self.wall_start + self.elapsed()
    }

    /// How far the clock has moved since it was made.
    pub fn elapsed(&self) -> Duration {
        Duration::from_nanos(self.elapsed_ns.load(Ordering::Acquire))
    }

    /// Moves time forward by `by` and wakes every sleeper now due.
    pub fn advance(&self, by: Duration) {
        let to = self.now() + by;
        self.advance_to(to);
    }

    /// Moves time to the earliest sleeper's deadline (if later than now) and wakes every
    /// sleeper then due; false when nobody sleeps.
    pub fn advance_to_next(&self) -> bool {
        let next = self.lock().waiting.keys().next().map(|&(at, _)| at);
        match next {
            Some(at) => {
                self.advance_to(at);
                true
            }
            None => false,
        }
    }

    /// A current-thread runtime for virtual time: whenever every task waits, the clock
    /// moves to the next wake-up. It has no I/O driver and no tokio timer, so nothing
    /// in it can wait on real time; the future given to `block_on` should wait only on
    /// this clock or on its tasks.
    pub fn runtime(self: &Arc<Self>) -> std::io::Result<tokio::runtime::Runtime> {
        let clock = Arc::clone(self);
        tokio::runtime::Builder::new_current_thread()
            .on_thread_park(move || {
                clock.advance_to_next();
            })
            .build()
    }

    /// Returns once the clock reads `at` or later.
    pub fn sleep_until(self: &Arc<Self>, at: Instant) -> ManualSleep {
        ManualSleep {
            clock: Arc::clone(self),
            at,
            key: None,
        }
    }

    fn advance_to(&self, to: Instant) {
        let woken = {
            let mut sleepers = self.lock();
            let target = to.saturating_duration_since(self.start);
            self.elapsed_ns.fetch_max(nanos(target), Ordering::AcqRel);
            let now = self.now();
            let later = sleepers.waiting.split_off(&(now, u64::MAX));
            std::mem::replace(&mut sleepers.waiting, later)
        };
        // Woken outside the lock: a waker may run code that sleeps again.
        for waker in woken.into_values() {
            waker.wake();
        }
    }

    fn lock(&self) -> MutexGuard<'_, Sleepers> {
        // A panic while holding it leaves at worst a stale waker, which only wakes a
        // task that then checks the time again.
        self.sleepers.lock().unwrap_or_else(PoisonError::into_inner)
    }
}

/// A sleep on a [`ManualClock`].
#[derive(Debug)]
pub struct ManualSleep {
    clock: Arc<ManualClock>,
    at: Instant,
    key: Option<(Instant, u64)>,
}

impl Future for ManualSleep {
    type Output = ();

    fn poll(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<()> {
        let this = self.get_mut();
        let mut sleepers = this.clock.lock();
        if this.clock.now() >= this.at {
            if let Some(key) = this.key.take() {
                sleepers.waiting.remove(&key);
            }
            return Poll::Ready(());
        }
        let key = *this.key.get_or_insert_with(|| {
            sleepers.next_id += 1;
            (this.at, sleepers.next_id)
        });
        sleepers.waiting.insert(key, cx.waker().clone());
        Poll::Pending
    }
}

impl Drop for ManualSleep {
    fn drop(&mut self) {
        if let Some(key) = self.key.take() {
            self.clock.lock().waiting.remove(&key);
        }
    }
}

/// A duration in nanoseconds, saturating.
pub(crate) fn nanos(d: Duration) -> u64 {
    u64::try_from(d.as_nanos()).unwrap_or(u64::MAX)
}

#[cfg(test)]
mod tests {
    use super::*;

    const MS: Duration = Duration::from_millis(1);

    #[test]
    fn wall_and_monotonic_time_move_together_and_only_when_told() {
        let wall = SystemTime::UNIX_EPOCH + Duration::from_secs(1_000_000);
        let (clock, manual) = Clock::manual(wall);
        let t0 = clock.now();
        assert_eq!(clock.wall(), wall);
        manual.advance(1500 * MS);
        assert_eq!(clock.now() - t0, 1500 * MS);
        assert_eq!(clock.wall(), wall + 1500 * MS);
    }

    #[test]
    fn the_runtime_jumps_to_each_wake_up_in_deadline_order() {
        let (clock, manual) = Clock::manual(SystemTime::UNIX_EPOCH);
        let runtime = manual.runtime().unwrap();
        let t0 = clock.now();
        let order = Arc::new(Mutex::new(Vec::new()));
        runtime.block_on(async {
            let mut tasks = Vec::new();
            for (i, ms) in [(0, 30u32), (1, 10), (2, 30), (3, 20)] {
                let (clock, order) = (clock.clone(), Arc::clone(&order));
                tasks.push(tokio::spawn(async move {
                    clock.sleep(ms * MS).await;
                    order.lock().unwrap().push((i, clock.now() - t0));
                }));
            }
            for task in tasks {
                task.await.unwrap();
            }
        });
        let order = order.lock().unwrap().clone();
        assert_eq!(
            order,
            [(1, 10 * MS), (3, 20 * MS), (0, 30 * MS), (2, 30 * MS)]
        );
    }

    #[test]
    fn an_interval_keeps_its_schedule_and_a_late_tick_moves_the_next() {
        let (clock, manual) = Clock::manual(SystemTime::UNIX_EPOCH);
        let runtime = manual.runtime().unwrap();
        let t0 = clock.now();
        let ticks = runtime.block_on(async {
            let mut interval = clock.interval(10 * MS);
            let mut ticks = Vec::new();
            for i in 0..5 {
                interval.tick().await;
                ticks.push(clock.now() - t0);
                match i {
                    // A tick 3 ms late keeps the schedule.
                    1 => manual.advance(13 * MS),
                    // One 18 ms late moves it.
                    2 => manual.advance(25 * MS),
                    _ => {}
                }
            }
            ticks
        });
        assert_eq!(ticks, [Duration::ZERO, 10 * MS, 23 * MS, 48 * MS, 58 * MS]);
    }

    #[test]
    fn a_shorter_period_brings_the_next_tick_in_and_a_longer_one_waits_a_tick() {
        let (clock, manual) = Clock::manual(SystemTime::UNIX_EPOCH);
        let runtime = manual.runtime().unwrap();
        let t0 = clock.now();
        let ticks = runtime.block_on(async {
            let mut interval = clock.interval(50 * MS);
            let mut ticks = Vec::new();
            for i in 0..6 {
                interval.tick().await;
                ticks.push(clock.now() - t0);
                match i {
                    // 5 ms after the tick at 50: the next comes 10 ms from then.
                    1 => {
                        manual.advance(5 * MS);
                        interval.set_period(10 * MS);
                    }
                    // Back to 50 at the tick at 75: the one at 85 stands.
                    3 => interval.set_period(50 * MS),
                    _ => {}
                }
            }
            ticks
        });
        assert_eq!(
            ticks,
            [Duration::ZERO, 50 * MS, 65 * MS, 75 * MS, 85 * MS, 135 * MS]
        );
    }

    #[test]
    fn a_dropped_sleep_is_forgotten() {
        let (clock, manual) = Clock::manual(SystemTime::UNIX_EPOCH);
        let runtime = manual.runtime().unwrap();
        let t0 = clock.now();
        runtime.block_on(async {
            tokio::select! {
                _ = clock.sleep(50 * MS) => {}
                _ = clock.sleep(5 * MS) => {}
            }
        });
        assert_eq!(clock.now() - t0, 5 * MS);
        assert!(
            !manual.advance_to_next(),
            "the 50 ms sleep left nothing behind"
        );
    }
}
