//! Slow start: a new lane knows nothing of its capacity, so the first request goes
//! alone and each success lets one more go at once (the window doubles every round
//! trip, as TCP's does). It ends at the first throttle (the controller takes over with
//! a few requests in flight, not every client's), at a window of [`OPEN_AT`], or
//! [`LASTS`] after the lane's first request: a sidecar that sat idle before its load
//! came (a fleet's pods ready before their writers start) starts as gently as one
//! whose load came at once. Until the first answer comes, the rest wait for it (at
//! most [`FIRST_ANSWER_WAIT`]): its headers may say the caller is at its limit (an
//! account other traffic already spends), and then first contact costs one refusal,
//! not a wave of them. After it a request waits at most [`MAX_HOLD`] for room, so
//! long-running requests slow the start by that much at worst.

use std::sync::OnceLock;
use std::sync::atomic::{AtomicBool, AtomicU32, Ordering::Relaxed};
use std::time::Duration;

use tokio::sync::Notify;

use crate::clock::{Clock, Instant};

/// A window this wide sends any burst a client pool makes: the start is over.
pub const OPEN_AT: u32 = 64;

/// How long after the lane's first request the start lasts at most.
pub const LASTS: Duration = Duration::from_secs(1);

/// The longest a request waits for room in the window once an answer came.
pub const MAX_HOLD: Duration = Duration::from_millis(20);

/// The longest a request waits for the lane's first answer.
pub const FIRST_ANSWER_WAIT: Duration = Duration::from_secs(1);

/// One lane's start-up window.
#[derive(Debug)]
pub struct SlowStart {
    over: AtomicBool,
    /// An answer came.
    heard: AtomicBool,
    in_flight: AtomicU32,
    window: AtomicU32,
    /// [`LASTS`] after the first request; set by it.
    ends: OnceLock<Instant>,
    room: Notify,
}

impl SlowStart {
    /// A window of one request, for a lane that has seen none yet.
    pub fn new() -> SlowStart {
        SlowStart {
            over: AtomicBool::new(false),
            heard: AtomicBool::new(false),
            in_flight: AtomicU32::new(0),
            window: AtomicU32::new(1),
            ends: OnceLock::new(),
            room: Notify::new(),
        }
    }

    /// Whether the start is over: requests go as the pacer lets them.
    pub fn is_over(&self) -> bool {
        self.over.load(Relaxed)
    }

    /// Waits for room in the window (at most `MAX_HOLD`, or `FIRST_ANSWER_WAIT`
    /// before any answer, and not past `deadline`), then counts the request in
    /// flight; returns how long it waited.
    pub async fn enter(&self, clock: &Clock, deadline: Instant) -> Duration {
        let began = clock.now();
        if began >= *self.ends.get_or_init(|| began + LASTS) {
            self.end();
            return Duration::ZERO;
        }
        let hold = if self.heard.load(Relaxed) {
            MAX_HOLD
        } else {
            FIRST_ANSWER_WAIT
        };
        let until = (began + hold).min(deadline);
        loop {
            let room = self.room.notified();
            tokio::pin!(room);
            room.as_mut().enable();
            if self.is_over() {
                break;
            }
            let flying = self.in_flight.load(Relaxed);
            if flying < self.window.load(Relaxed) {
                if self
                    .in_flight
                    .compare_exchange(flying, flying + 1, Relaxed, Relaxed)
                    .is_ok()
                {
                    break;
                }
                continue;
            }
            if clock.timeout_at(until, room).await.is_none() {
                self.in_flight.fetch_add(1, Relaxed);
                break;
            }
        }
        clock.now().saturating_duration_since(began)
    }

    /// An answer to a request counted in flight: a throttle ends the start, a success
    /// widens the window by one, anything else only frees its place.
    pub fn answered(&self, throttled: bool, succeeded: bool) {
        if self.is_over() {
            return;
        }
        self.heard.store(true, Relaxed);
        if throttled {
            self.end();
            return;
        }
        // Saturating: an answer may come for an attempt that held no place here (a
        // lane the answer named), and the count must never wrap.
        let _ = self
            .in_flight
            .fetch_update(Relaxed, Relaxed, |n| Some(n.saturating_sub(1)));
        if succeeded && self.window.fetch_add(1, Relaxed) + 1 >= OPEN_AT {
            self.end();
            return;
        }
        self.room.notify_waiters();
    }

    /// Ends the start: every waiting request goes on to the pacer.
    pub fn end(&self) {
        self.over.store(true, Relaxed);
        self.room.notify_waiters();
    }
}

impl Default for SlowStart {
    fn default() -> SlowStart {
        SlowStart::new()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Whether `f` is still pending after one poll.
    async fn pending<F: std::future::Future + Unpin>(f: &mut F) -> bool {
        tokio::time::timeout(Duration::ZERO, f).await.is_err()
    }

    fn far() -> Instant {
        Instant::now() + Duration::from_secs(3600)
    }

    #[tokio::test(start_paused = true)]
    async fn the_first_request_goes_alone_and_each_success_lets_one_more_go() {
        let s = SlowStart::new();
        assert_eq!(s.enter(&Clock::Tokio, far()).await, Duration::ZERO);
        // The second waits: the window is one.
        let second = s.enter(&Clock::Tokio, far());
        tokio::pin!(second);
        assert!(pending(&mut second).await);
        tokio::time::advance(Duration::from_millis(2)).await;
        s.answered(false, true);
        assert_eq!(second.await, Duration::from_millis(2));
        // Window 2, one in flight: a third goes at once, a fourth waits.
        assert_eq!(s.enter(&Clock::Tokio, far()).await, Duration::ZERO);
        let fourth = s.enter(&Clock::Tokio, far());
        tokio::pin!(fourth);
        assert!(pending(&mut fourth).await);
        assert!(!s.is_over());
    }

    #[tokio::test(start_paused = true)]
    async fn a_throttle_ends_the_start_and_lets_every_waiter_go() {
        let s = SlowStart::new();
        s.enter(&Clock::Tokio, far()).await;
        let waiter = s.enter(&Clock::Tokio, far());
        tokio::pin!(waiter);
        assert!(pending(&mut waiter).await);
        s.answered(true, false);
        assert!(s.is_over());
        assert_eq!(waiter.await, Duration::ZERO);
    }

    #[tokio::test(start_paused = true)]
    async fn a_request_waits_for_the_first_answer_then_at_most_max_hold_or_its_deadline() {
        let s = SlowStart::new();
        s.enter(&Clock::Tokio, far()).await; // never answered: a long-running request
        let soon = Instant::now() + Duration::from_millis(5);
        assert_eq!(s.enter(&Clock::Tokio, soon).await, Duration::from_millis(5));
        // Before any answer, the first one is waited for, up to FIRST_ANSWER_WAIT.
        let s = SlowStart::new();
        s.enter(&Clock::Tokio, far()).await;
        let waiter = s.enter(&Clock::Tokio, far());
        tokio::pin!(waiter);
        tokio::time::advance(MAX_HOLD * 2).await;
        assert!(
            pending(&mut waiter).await,
            "waits past MAX_HOLD for the first answer"
        );
        tokio::time::advance(FIRST_ANSWER_WAIT - MAX_HOLD * 2).await;
        assert_eq!(waiter.await, FIRST_ANSWER_WAIT);
        // Once one came (a failure frees its place), a long-running request holds the
        // next for MAX_HOLD at most.
        let s = SlowStart::new();
        s.enter(&Clock::Tokio, far()).await;
        s.answered(false, false);
        s.enter(&Clock::Tokio, far()).await;
        assert_eq!(s.enter(&Clock::Tokio, far()).await, MAX_HOLD);
        assert!(!s.is_over());
    }

    #[tokio::test(start_paused = true)]
    async fn the_start_ends_at_a_wide_window_or_after_it_lasted() {
        let s = SlowStart::new();
        for _ in 1..OPEN_AT {
            s.enter(&Clock::Tokio, far()).await;
            s.answered(false, true);
        }
        assert!(s.is_over());

        let s = SlowStart::new();
        s.enter(&Clock::Tokio, far()).await;
        tokio::time::advance(LASTS).await;
        assert_eq!(s.enter(&Clock::Tokio, far()).await, Duration::ZERO);
        assert!(s.is_over());
    }

    #[tokio::test(start_paused = true)]
    async fn an_idle_lane_starts_gently_when_its_first_request_comes() {
        let s = SlowStart::new();
        tokio::time::advance(LASTS * 5).await;
        assert_eq!(s.enter(&Clock::Tokio, far()).await, Duration::ZERO);
        let second = s.enter(&Clock::Tokio, far());
        tokio::pin!(second);
        assert!(pending(&mut second).await);
        assert!(!s.is_over());
    }

    #[tokio::test(start_paused = true)]
    async fn a_failure_frees_its_place_without_widening_the_window() {
        let s = SlowStart::new();
        s.enter(&Clock::Tokio, far()).await;
        s.answered(false, false);
        s.enter(&Clock::Tokio, far()).await;
        let third = s.enter(&Clock::Tokio, far());
        tokio::pin!(third);
        assert!(pending(&mut third).await);
    }
}
