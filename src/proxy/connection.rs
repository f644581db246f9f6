//! One client connection's deadlines and bounds, for the proxy listeners and the admin
//! server alike: its first request head must arrive within `header_read_timeout` of
//! the accept (not of the first byte), a connection with no request open closes after
//! `keepalive_timeout`, HTTP/2 peers are pinged, and a client that cancels too many
//! streams it had started gets a GOAWAY. Also the accept loop's backoff when accepting
//! fails (out of descriptors). What a request does is the service's business.

use std::sync::atomic::{AtomicBool, AtomicU64, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex, PoisonError};
use std::time::Duration;

use hyper_util::rt::{TokioExecutor, TokioTimer};
use hyper_util::server::conn::auto;
use hyper_util::server::graceful::GracefulConnection;
use tokio::net::{TcpListener, TcpStream};
use tokio::sync::{Notify, watch};
use tokio::time::Instant;

/// The deadlines and bounds of one client connection.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Limits {
    /// From the accept to the end of the first request head.
    pub header_read_timeout: Duration,
    /// How long a connection with no request open is kept.
    pub keepalive_timeout: Duration,
    /// HTTP/2: a PING after this much silence; no answer within the same time closes.
    pub http2_keepalive_interval: Duration,
    /// HTTP/2: streams open at once on one connection.
    pub http2_max_concurrent_streams: u32,
    /// HTTP/2: streams a client may cancel after their request began, per
    /// `http2_reset_window`; one more and the connection gets a GOAWAY.
    pub http2_max_resets: u32,
    /// The window `http2_max_resets` counts in.
    pub http2_reset_window: Duration,
}

/// hyper's own rapid-reset bounds (CVE-2023-44487): streams reset before the service
/// saw them, and streams hyper reset for protocol errors. These are hyper's defaults,
/// set here so they do not change under us.
const PENDING_ACCEPT_RESETS: usize = 20;
const LOCAL_ERROR_RESETS: usize = 1024;

/// How long a connection told to close for too many cancelled streams may take to
/// send its GOAWAY and finish what it has open before it is dropped.
const CLOSE_GRACE: Duration = Duration::from_secs(1);

/// A connection builder for HTTP/1.1 and h2c with `limits` applied.
pub fn builder(limits: &Limits) -> auto::Builder<TokioExecutor> {
    let mut builder = auto::Builder::new(TokioExecutor::new());
    // hyper's timer runs from the end of one response to the end of the next head, so
    // it bounds keep-alive idle time and a later head together; the first head is
    // bounded from the accept by `drive`.
    builder
        .http1()
        .timer(TokioTimer::new())
        .header_read_timeout(limits.keepalive_timeout.max(limits.header_read_timeout))
        .keep_alive(true);
    builder
        .http2()
        .timer(TokioTimer::new())
        .keep_alive_interval(limits.http2_keepalive_interval)
        .keep_alive_timeout(limits.http2_keepalive_interval)
        .max_concurrent_streams(limits.http2_max_concurrent_streams)
        .max_pending_accept_reset_streams(PENDING_ACCEPT_RESETS)
        .max_local_error_reset_streams(LOCAL_ERROR_RESETS);
    builder
}

/// What one connection's requests tell its watchdog.
pub struct Tracker {
    accepted: Instant,
    /// Requests the service is working on.
    active: AtomicUsize,
    /// Requests begun since the accept.
    started: AtomicU64,
    /// When the latest request ended, in milliseconds after `accepted`.
    last_end_ms: AtomicU64,
    resets: Mutex<ResetWindow>,
    /// Set once the client cancelled too many streams: no new request starts work.
    refusing: AtomicBool,
    /// Woken when the client cancelled more streams than allowed.
    too_many_resets: Notify,
    max_resets: u32,
    reset_window: Duration,
}

#[derive(Default)]
struct ResetWindow {
    started_ms: u64,
    count: u32,
}

impl Tracker {
    /// A tracker for a connection accepted now.
    pub fn new(limits: &Limits) -> Arc<Tracker> {
        Arc::new(Tracker {
            accepted: Instant::now(),
            active: AtomicUsize::new(0),
            started: AtomicU64::new(0),
            last_end_ms: AtomicU64::new(0),
            resets: Mutex::new(ResetWindow::default()),
            refusing: AtomicBool::new(false),
            too_many_resets: Notify::new(),
            max_resets: limits.http2_max_resets,
            reset_window: limits.http2_reset_window,
        })
    }

    /// Marks a request begun; the guard marks it ended, or cancelled if dropped
    /// before [`RequestGuard::done`].
    pub fn begin(self: &Arc<Tracker>) -> RequestGuard {
        self.active.fetch_add(1, Ordering::Relaxed);
        self.started.fetch_add(1, Ordering::Relaxed);
        RequestGuard {
            tracker: Arc::clone(self),
            done: false,
        }
    }

    fn millis_since_accept(&self) -> u64 {
        u64::try_from(self.accepted.elapsed().as_millis()).unwrap_or(u64::MAX)
    }

    /// Counts a request the client gave up on after its work began (an HTTP/2
    /// RST_STREAM, or an HTTP/1 client hanging up).
    fn cancelled(&self) {
        let now = self.millis_since_accept();
        let window = u64::try_from(self.reset_window.as_millis()).unwrap_or(u64::MAX);
        let exceeded = {
            let mut resets = self.resets.lock().unwrap_or_else(PoisonError::into_inner);
            if now.saturating_sub(resets.started_ms) >= window {
                *resets = ResetWindow {
                    started_ms: now,
                    count: 0,
                };
            }
            resets.count += 1;
            resets.count > self.max_resets
        };
        if exceeded && !self.refusing.swap(true, Ordering::Relaxed) {
            self.too_many_resets.notify_one();
        }
    }

    /// Whether the connection is closing for too many cancelled streams: requests
    /// that arrive before the client sees the GOAWAY must not start upstream work.
    pub fn is_refusing(&self) -> bool {
        self.refusing.load(Ordering::Relaxed)
    }

    /// When the connection must close for want of a request, or `None` while a
    /// request is open.
    fn idle_deadline(&self, limits: &Limits) -> Option<Instant> {
        if self.active.load(Ordering::Relaxed) > 0 {
            return None;
        }
        if self.started.load(Ordering::Relaxed) == 0 {
            return Some(self.accepted + limits.header_read_timeout);
        }
        let ended = Duration::from_millis(self.last_end_ms.load(Ordering::Relaxed));
        Some(self.accepted + ended + limits.keepalive_timeout)
    }
}

/// One request in progress on a tracked connection.
pub struct RequestGuard {
    tracker: Arc<Tracker>,
    done: bool,
}

impl RequestGuard {
    /// See [`Tracker::is_refusing`].
    pub fn is_refusing(&self) -> bool {
        self.tracker.is_refusing()
    }

    /// The request got its answer.
    pub fn done(mut self) {
        self.done = true;
    }
}

impl Drop for RequestGuard {
    fn drop(&mut self) {
        let tracker = &self.tracker;
        tracker
            .last_end_ms
            .store(tracker.millis_since_accept(), Ordering::Relaxed);
        tracker.active.fetch_sub(1, Ordering::Relaxed);
        if !self.done {
            tracker.cancelled();
        }
    }
}

/// Why a connection ended before its client closed it.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Closed {
    /// The client closed it, or it failed.
    ByPeer,
    /// No first request head within `header_read_timeout`, or idle past
    /// `keepalive_timeout`.
    Idle,
    /// The client cancelled more streams than `http2_max_resets` allows.
    TooManyResets,
    /// The listener is draining.
    Drained,
}

/// Runs `conn` under `limits` until it ends: closes it gracefully (HTTP/2: GOAWAY)
/// when it idles past its deadline, when its client cancels too many streams, or when
/// `drain` turns true; drops it if it has not finished within a second of a reset
/// close. A connection without a first request head by its deadline is dropped.
pub async fn drive<C>(
    conn: C,
    tracker: &Tracker,
    limits: &Limits,
    mut drain: watch::Receiver<bool>,
) -> (Closed, Result<(), C::Error>)
where
    C: GracefulConnection,
{
    tokio::pin!(conn);
    // Never asleep longer than the keep-alive timeout: a request may begin and end in
    // between and move the deadline earlier.
    let first = tracker.accepted + limits.header_read_timeout.min(limits.keepalive_timeout);
    let watchdog = tokio::time::sleep_until(first);
    tokio::pin!(watchdog);
    // Pinned once, so a busy connection does not re-register them on every poll.
    let resets = tracker.too_many_resets.notified();
    tokio::pin!(resets);
    let drained = drain.wait_for(|stop| *stop);
    tokio::pin!(drained);
    let mut closing: Option<Closed> = None;
    loop {
        tokio::select! {
            biased;
            ended = &mut conn => return (closing.unwrap_or(Closed::ByPeer), ended),
            _ = &mut drained, if closing.is_none() => {
                closing = Some(Closed::Drained);
                conn.as_mut().graceful_shutdown();
            }
            () = &mut resets, if closing.is_none() => {
                closing = Some(Closed::TooManyResets);
                conn.as_mut().graceful_shutdown();
                watchdog.as_mut().reset(Instant::now() + CLOSE_GRACE);
            }
            () = &mut watchdog => match closing {
                Some(Closed::Drained | Closed::Idle) => watchdog.as_mut().reset(far_future()),
                Some(reason) => return (reason, Ok(())),
                None => {
                    let now = Instant::now();
                    let next = now + limits.keepalive_timeout;
                    match tracker.idle_deadline(limits) {
                        // No request head yet: nothing to finish.
                        Some(at) if at <= now && tracker.started.load(Ordering::Relaxed) == 0 => {
                            return (Closed::Idle, Ok(()));
                        }
                        // An answer may still be streaming (a download, a gRPC
                        // stream): it finishes, bounded by `body_idle_timeout`.
                        Some(at) if at <= now => {
                            closing = Some(Closed::Idle);
                            conn.as_mut().graceful_shutdown();
                            watchdog.as_mut().reset(far_future());
                        }
                        Some(at) => watchdog.as_mut().reset(at.min(next)),
                        // A request is open: look again once it could have become idle.
                        None => watchdog.as_mut().reset(next),
                    }
                }
            },
        }
    }
}

fn far_future() -> Instant {
    Instant::now() + Duration::from_secs(86_400 * 365)
}

/// Accepts connections, backing off when accepting fails (out of file descriptors:
/// 10 ms doubling to 1 s) rather than spinning, with one log line per burst of
/// failures.
#[derive(Debug)]
pub struct Acceptor {
    what: &'static str,
    failures: u64,
    delay: Duration,
}

const FIRST_ACCEPT_BACKOFF: Duration = Duration::from_millis(10);
const MAX_ACCEPT_BACKOFF: Duration = Duration::from_secs(1);

impl Acceptor {
    /// An acceptor whose log lines name the listener `what`.
    pub fn new(what: &'static str) -> Acceptor {
        Acceptor {
            what,
            failures: 0,
            delay: FIRST_ACCEPT_BACKOFF,
        }
    }

    /// The next connection, with `TCP_NODELAY` set.
    pub async fn accept(&mut self, listener: &TcpListener) -> TcpStream {
        loop {
            match listener.accept().await {
                Ok((stream, _)) => {
                    if self.failures > 0 {
                        tracing::info!(
                            listener = self.what,
                            failures = self.failures,
                            "accepting again"
                        );
                        self.failures = 0;
                        self.delay = FIRST_ACCEPT_BACKOFF;
                    }
                    let _ = stream.set_nodelay(true);
                    return stream;
                }
                Err(error) => {
                    if self.failures == 0 {
                        tracing::warn!(listener = self.what, %error, "accept failed; backing off until it works again");
                    }
                    self.failures += 1;
                    tokio::time::sleep(self.delay).await;
                    self.delay = (self.delay * 2).min(MAX_ACCEPT_BACKOFF);
                }
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const LIMITS: Limits = Limits {
        header_read_timeout: Duration::from_secs(30),
        keepalive_timeout: Duration::from_secs(120),
        http2_keepalive_interval: Duration::from_secs(30),
        http2_max_concurrent_streams: 100,
        http2_max_resets: 3,
        http2_reset_window: Duration::from_secs(10),
    };

    #[tokio::test(start_paused = true)]
    async fn the_first_head_is_due_from_the_accept_and_idle_time_from_the_last_answer() {
        let tracker = Tracker::new(&LIMITS);
        let accepted = tracker.accepted;
        assert_eq!(
            tracker.idle_deadline(&LIMITS),
            Some(accepted + LIMITS.header_read_timeout)
        );
        tokio::time::advance(Duration::from_secs(5)).await;
        let guard = tracker.begin();
        assert_eq!(tracker.idle_deadline(&LIMITS), None);
        tokio::time::advance(Duration::from_secs(2)).await;
        guard.done();
        assert_eq!(
            tracker.idle_deadline(&LIMITS),
            Some(accepted + Duration::from_secs(7) + LIMITS.keepalive_timeout)
        );
    }

    #[tokio::test(start_paused = true)]
    async fn cancels_past_the_budget_in_one_window_refuse_and_a_new_window_starts_afresh() {
        let tracker = Tracker::new(&LIMITS);
        for _ in 0..3 {
            drop(tracker.begin());
        }
        assert!(!tracker.is_refusing(), "3 cancels are within a budget of 3");
        tokio::time::advance(LIMITS.http2_reset_window).await;
        for _ in 0..3 {
            drop(tracker.begin());
        }
        assert!(!tracker.is_refusing(), "a new window counts from 0");
        drop(tracker.begin());
        assert!(tracker.is_refusing());
        // Answered requests are not cancels.
        let fresh = Tracker::new(&LIMITS);
        for _ in 0..10 {
            fresh.begin().done();
        }
        assert!(!fresh.is_refusing());
    }
}
