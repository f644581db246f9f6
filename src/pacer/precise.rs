//! Sleeps that end on time. tokio's timer fires on millisecond ticks, up to a tick
//! and a bit late, so a pacer at 5 ms would be spaced 5–6.5 ms apart and run slow. On
//! Linux a timerfd registered with the reactor wakes it within tens of microseconds.
//! The pacer lets the next release take back at most half a spacing of a late one,
//! so those microseconds, spent by every release, would still jitter it: the timerfd is
//! armed early by about as much as its wake-ups have lately come late, and the last
//! few microseconds are waited out by yielding. tokio's own sleep always runs
//! alongside: it is the fallback where a timerfd cannot be had (other systems) and it
//! is what tokio's paused time (the tests) advances. On a manual clock (`easeoff
//! simulate`) the clock's own sleep is the only timer.
//!
//! A timerfd is a file descriptor, and an upstream may have 100,000 lanes: a pacer
//! holds one only while its queue has waiters (see [`PreciseSleep::idle`]), and at
//! most [`MAX_TIMER_FDS`] are held at once across the process. A lane past that
//! bound waits on tokio's timer alone, a millisecond coarser.

use std::time::Duration;

use crate::clock::{Clock, Instant};

/// The most the timerfd is armed early. A wake-up later than this is a stall of the
/// host, not the timer's habit; the spin after an early wake-up stays this short.
#[cfg_attr(not(target_os = "linux"), allow(dead_code))]
const MAX_LEAD: Duration = Duration::from_micros(300);

/// The most timerfds held at once by all pacers together: far more than the lanes
/// that space requests at once in any deployment we know of, far fewer than a
/// process's descriptor limit.
#[cfg_attr(not(target_os = "linux"), allow(dead_code))]
pub const MAX_TIMER_FDS: usize = 256;

/// The release task's timer; one per pacer, reused for every wait of a busy spell.
pub struct PreciseSleep {
    clock: Clock,
    /// Taken at the first wait of a busy spell, given back by [`PreciseSleep::idle`].
    #[cfg(target_os = "linux")]
    fd: Option<linux::TimerFd>,
    /// How early the timerfd is armed: about how late it has lately woken.
    #[cfg_attr(not(target_os = "linux"), allow(dead_code))]
    lead: Duration,
}

impl PreciseSleep {
    /// A timer on this runtime's reactor, or tokio's timer alone where the system has
    /// no timerfd; on a manual clock, that clock's sleep. With tokio's clock the
    /// runtime must have I/O enabled (tokio panics otherwise); every runtime easeoff
    /// serves on has it.
    pub fn new(clock: Clock) -> PreciseSleep {
        PreciseSleep {
            #[cfg(target_os = "linux")]
            fd: None,
            clock,
            lead: Duration::ZERO,
        }
    }

    /// Gives the timerfd back until the next wait: the pacer has no one to space.
    pub fn idle(&mut self) {
        #[cfg(target_os = "linux")]
        {
            self.fd = None;
        }
    }

    /// Returns at `at` on its clock, or very soon after; never before.
    pub async fn until(&mut self, at: Instant) {
        #[cfg(target_os = "linux")]
        if self.fd.is_none() && self.clock.is_tokio() {
            self.fd = linux::TimerFd::take();
        }
        #[cfg(target_os = "linux")]
        if let Some(fd) = self.fd.as_ref().map(linux::TimerFd::get) {
            let left = at.saturating_duration_since(self.clock.now());
            if left.is_zero() {
                return;
            }
            let early = left.saturating_sub(self.lead);
            if early.is_zero() {
                return self.spin_until(at).await;
            }
            let armed = at.checked_sub(self.lead).unwrap_or(at);
            if linux::arm(fd.get_ref(), early).is_ok() {
                let sleep = tokio::time::sleep_until(at);
                tokio::pin!(sleep);
                loop {
                    tokio::select! {
                        _ = &mut sleep => return,
                        ready = fd.readable() => {
                            let Ok(mut guard) = ready else { break };
                            let fired = linux::expired(guard.get_inner());
                            guard.clear_ready();
                            let now = self.clock.now();
                            // A paused clock can lag the real one the timerfd follows:
                            // then only tokio's sleep may end the wait.
                            if fired && now >= armed {
                                self.lead = next_lead(self.lead, now - armed);
                                return self.spin_until(at).await;
                            }
                        }
                    }
                }
            }
        }
        self.clock.sleep_until(at).await;
    }

    /// Waits out the last stretch before `at`, at most [`MAX_LEAD`], by yielding:
    /// shorter than any timer. Bounded by the real clock, so a paused one (which only
    /// moves while every task waits) ends it in its own sleep instead.
    #[cfg(target_os = "linux")]
    async fn spin_until(&self, at: Instant) {
        let give_up = std::time::Instant::now() + MAX_LEAD;
        while self.clock.now() < at {
            if std::time::Instant::now() >= give_up {
                return self.clock.sleep_until(at).await;
            }
            tokio::task::yield_now().await;
        }
    }
}

/// The lead after a wake-up `late` past the time the timerfd was armed for: an
/// average that follows the timer's habit over the last few dozen wake-ups. A
/// lateness past [`MAX_LEAD`] counts as `MAX_LEAD`, so a stall of the host does not
/// make it spin.
#[cfg_attr(not(target_os = "linux"), allow(dead_code))]
fn next_lead(lead: Duration, late: Duration) -> Duration {
    let late = late.min(MAX_LEAD);
    (lead * 15 + late) / 16
}

#[cfg(target_os = "linux")]
mod linux {
    use std::os::fd::OwnedFd;
    use std::sync::atomic::{AtomicUsize, Ordering};
    use std::time::Duration;

    use rustix::time::{
        Itimerspec, TimerfdClockId, TimerfdFlags, TimerfdTimerFlags, Timespec, timerfd_create,
        timerfd_settime,
    };
    use tokio::io::Interest;
    use tokio::io::unix::AsyncFd;

    /// Timerfds held now, by every pacer.
    static HELD: AtomicUsize = AtomicUsize::new(0);

    /// A timerfd counted against [`super::MAX_TIMER_FDS`] for as long as it lives.
    pub struct TimerFd(AsyncFd<OwnedFd>);

    impl TimerFd {
        /// A timerfd, unless [`super::MAX_TIMER_FDS`] are held or the system has none.
        pub fn take() -> Option<TimerFd> {
            let held = HELD.fetch_add(1, Ordering::Relaxed);
            match (held < super::MAX_TIMER_FDS).then(timer_fd).flatten() {
                Some(fd) => Some(TimerFd(fd)),
                None => {
                    HELD.fetch_sub(1, Ordering::Relaxed);
                    None
                }
            }
        }

        /// The descriptor in the reactor.
        pub fn get(&self) -> &AsyncFd<OwnedFd> {
            &self.0
        }
    }

    impl Drop for TimerFd {
        fn drop(&mut self) {
            HELD.fetch_sub(1, Ordering::Relaxed);
        }
    }

    /// Timerfds held now, for tests.
    #[cfg(test)]
    pub fn held() -> usize {
        HELD.load(Ordering::Relaxed)
    }

    /// A non-blocking monotonic timerfd in the reactor (`Instant` is monotonic too).
    // Registering a raw descriptor is unsafe; allowed here only (Cargo.toml denies it).
    #[allow(unsafe_code)]
    fn timer_fd() -> Option<AsyncFd<OwnedFd>> {
        let fd = timerfd_create(
            TimerfdClockId::Monotonic,
            TimerfdFlags::NONBLOCK | TimerfdFlags::CLOEXEC,
        )
        .ok()?;
        // SAFETY: the AsyncFd owns the OwnedFd, so the descriptor stays open and the
        // same for the AsyncFd's whole life.
        match unsafe { AsyncFd::register_with_interest(fd, Interest::READABLE) } {
            Ok(fd) => Some(fd),
            Err(e) => {
                tracing::debug!(error = %e, "no timerfd for pacing: millisecond timer only");
                None
            }
        }
    }

    /// Fires once, `after` from now. Re-arming also resets the expiry count, so a
    /// stale expiry of an earlier wait does not end this one.
    pub fn arm(fd: &OwnedFd, after: Duration) -> rustix::io::Result<()> {
        let spec = Itimerspec {
            it_interval: Timespec {
                tv_sec: 0,
                tv_nsec: 0,
            },
            it_value: Timespec {
                tv_sec: i64::try_from(after.as_secs()).unwrap_or(i64::MAX),
                tv_nsec: i64::from(after.subsec_nanos()),
            },
        };
        timerfd_settime(fd, TimerfdTimerFlags::empty(), &spec).map(|_| ())
    }

    /// Whether the timer fired since it was last armed (consumes the expiry).
    pub fn expired(fd: &OwnedFd) -> bool {
        let mut count = [0u8; 8];
        matches!(rustix::io::read(fd, &mut count), Ok(8))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const US: Duration = Duration::from_micros(1);

    #[test]
    fn the_lead_follows_how_late_the_timer_wakes() {
        let mut lead = Duration::ZERO;
        for _ in 0..200 {
            lead = next_lead(lead, 60 * US);
        }
        assert!(lead > 59 * US && lead <= 60 * US, "{lead:?}");
        // A wake-up 16 µs less late than the lead moves it a sixteenth of that.
        assert_eq!(next_lead(64 * US, 48 * US), 63 * US);
    }

    #[test]
    fn a_stalled_wake_up_counts_only_up_to_the_most_lead() {
        let mut lead = Duration::ZERO;
        for _ in 0..200 {
            lead = next_lead(lead, Duration::from_millis(50));
        }
        assert!(lead <= MAX_LEAD, "{lead:?}");
        assert_eq!(next_lead(MAX_LEAD, Duration::from_secs(1)), MAX_LEAD);
    }

    // How soon after the deadline it wakes is a matter for the pacing benchmark
    // (`bench/pacing.sh`); a test can only hold it to never waking early.
    #[tokio::test(flavor = "current_thread")]
    async fn a_sleep_never_ends_before_its_deadline() {
        let mut timer = PreciseSleep::new(Clock::Tokio);
        for i in 0..20 {
            let at = Instant::now() + Duration::from_micros(300 + 100 * i);
            timer.until(at).await;
            assert!(Instant::now() >= at);
        }
    }

    #[cfg(target_os = "linux")]
    #[tokio::test(flavor = "current_thread")]
    async fn a_timerfd_is_held_only_between_a_wait_and_idle() {
        let mut timer = PreciseSleep::new(Clock::Tokio);
        assert!(
            timer.fd.is_none(),
            "a pacer nobody waits on holds no descriptor"
        );
        timer.until(Instant::now() + Duration::from_millis(1)).await;
        assert!(timer.fd.is_some());
        timer.until(Instant::now() + Duration::from_millis(1)).await;
        timer.idle();
        assert!(timer.fd.is_none());
    }

    #[cfg(target_os = "linux")]
    #[tokio::test(flavor = "current_thread")]
    async fn no_more_than_the_bound_of_timerfds_are_held() {
        let mut held = Vec::new();
        while let Some(fd) = linux::TimerFd::take() {
            held.push(fd);
            assert!(held.len() <= MAX_TIMER_FDS, "{} timerfds", held.len());
        }
        assert!(linux::held() <= MAX_TIMER_FDS);
        // Past the bound a wait still ends on time, on tokio's timer.
        let mut timer = PreciseSleep::new(Clock::Tokio);
        let at = Instant::now() + Duration::from_millis(2);
        timer.until(at).await;
        assert!(Instant::now() >= at);
        drop(held);
        assert!(linux::TimerFd::take().is_some());
    }

    #[tokio::test(start_paused = true)]
    async fn paused_time_advances_through_the_sleep() {
        let mut timer = PreciseSleep::new(Clock::Tokio);
        let start = Instant::now();
        timer.until(start + Duration::from_secs(3600)).await;
        assert_eq!(Instant::now() - start, Duration::from_secs(3600));
    }
}
