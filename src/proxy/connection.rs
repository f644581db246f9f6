//! One client connection's deadlines and bounds, for the proxy listeners and the admin
//! server alike: its first request head must arrive within `header_read_timeout` of
//! the accept (not of the first byte), a connection with no request open closes after
//! `keepalive_timeout`, HTTP/2 peers are pinged, and a client that cancels too many
//! streams it had started gets a GOAWAY. Also the accept loop's backoff when accepting
//! fails (out of descriptors). What a request does is the service's business.

use std::future::Future;
use std::pin::Pin;
use std::sync::atomic::{AtomicBool, AtomicU64, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex, PoisonError};
use std::task::{Context, Poll};
use std::time::Duration;

use bytes::Bytes;
use hyper::server::conn::http1;
use hyper_util::rt::{TokioExecutor, TokioIo, TokioTimer};
use hyper_util::server::conn::auto;
use hyper_util::server::graceful::GracefulConnection;
use tokio::net::{TcpListener, TcpStream};
use tokio::sync::{Notify, watch};

use crate::clock::Instant;
use crate::flag_waker::FlagWaker;
use crate::transport::Bound;

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
/// send its GOAWAY and its last answers once it has no request open.
const CLOSE_GRACE: Duration = Duration::from_secs(1);

/// The longest such a connection waits for the requests it had taken (its GOAWAY
/// promised them answers; their own deadlines usually end them much sooner) before
/// it is dropped with them.
pub const RESET_CLOSE_LIMIT: Duration = Duration::from_secs(60);

/// How long an HTTP/1 connection idles before it gives back hyper's read and write
/// buffers and the room for a request in flight (about 25 KiB): ten thousand clients
/// that keep a connection open between rare requests then cost little more than their
/// sockets. A connection busier than this never pays for rebuilding them.
pub const PARK_AFTER: Duration = Duration::from_millis(50);

/// A connection builder for HTTP/1.1 and h2c with `limits` applied.
pub fn builder(limits: &Limits) -> auto::Builder<TokioExecutor> {
    let mut builder = auto::Builder::new(TokioExecutor::new());
    // `drive` bounds every head: the first from the accept, a later one with the
    // keep-alive time. hyper's own head timer would cost a boxed sleep per request.
    builder
        .http1()
        .timer(TokioTimer::new())
        .header_read_timeout(None)
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
    /// Set while an idle HTTP/1 connection is being parked: its socket must stay open.
    parking: AtomicBool,
    /// The upstream connections this connection drives (HTTP/1 only).
    bound: Bound,
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
            parking: AtomicBool::new(false),
            bound: Bound::default(),
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

    /// The upstream connections this connection drives.
    pub fn bound(&self) -> &Bound {
        &self.bound
    }

    /// When the connection was accepted.
    pub fn accepted(&self) -> Instant {
        self.accepted
    }

    /// Requests the service is working on that have no answer yet.
    pub fn active(&self) -> usize {
        self.active.load(Ordering::Relaxed)
    }

    /// For a connection closing for too many cancelled streams since `since`: when to
    /// look again, or `None` to drop it now (its last answer had `CLOSE_GRACE` to go
    /// out, or [`RESET_CLOSE_LIMIT`] ran out).
    fn closing_step(&self, since: Instant, now: Instant) -> Option<Instant> {
        if now >= since + RESET_CLOSE_LIMIT {
            return None;
        }
        if self.active() > 0 {
            return Some(now + CLOSE_GRACE);
        }
        let ended = Duration::from_millis(self.last_end_ms.load(Ordering::Relaxed));
        let flushed = (self.accepted + ended + CLOSE_GRACE).max(since + CLOSE_GRACE);
        (flushed > now).then_some(flushed)
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

impl Tracker {
    /// When an idle connection may give back hyper's buffers, or `None` while a
    /// request is open or before the first one.
    fn park_at(&self) -> Option<Instant> {
        if self.active.load(Ordering::Relaxed) > 0 || self.started.load(Ordering::Relaxed) == 0 {
            return None;
        }
        let ended = Duration::from_millis(self.last_end_ms.load(Ordering::Relaxed));
        Some(self.accepted + ended + PARK_AFTER)
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

    /// See [`Tracker::bound`].
    pub fn bound(&self) -> &Bound {
        &self.tracker.bound
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
    /// Idle, and handed back without its HTTP/1 state to wait for the next request.
    Parked,
}

/// Runs `conn` under `limits` until it ends: closes it gracefully (HTTP/2: GOAWAY)
/// when it idles past its deadline, when its client cancels too many streams, or when
/// `drain` turns true; drops it if it has not finished within a second of a reset
/// close. A connection without a first request head by its deadline is dropped. With
/// `park`, an HTTP/1 connection idle for `PARK_AFTER` ends as [`Closed::Parked`] with
/// its socket open (see `ParkIo`).
pub async fn drive<C>(
    mut conn: Pin<&mut C>,
    tracker: &Tracker,
    limits: &Limits,
    drain: &mut watch::Receiver<bool>,
    park: bool,
) -> (Closed, Result<(), C::Error>)
where
    C: GracefulConnection,
{
    // See `idle_step` for why it never sleeps past the keep-alive timeout.
    let first = tracker.accepted + limits.header_read_timeout.min(limits.keepalive_timeout);
    // Parked again only after a request of its own: a head that arrives in pieces
    // after an idle time is read by one connection, not one per piece.
    let begun = tracker.started.load(Ordering::Relaxed);
    let may_park = || park && tracker.started.load(Ordering::Relaxed) > begun;
    let mut watchdog = std::pin::pin!(tokio::time::sleep_until(first));
    // Pinned once, so a busy connection does not re-register them on every poll.
    let mut resets = std::pin::pin!(tracker.too_many_resets.notified());
    let mut drained = std::pin::pin!(drain.wait_for(|stop| *stop));
    let sides = FlagWaker::default();
    // The connection itself, polled only when something woke it: the task is woken
    // for its upstream connections' reads too.
    let serving = FlagWaker::within(tracker.bound.pass().clone());
    let mut closing: Option<Closed> = None;
    let mut refused_at = Instant::now();
    // Whether the watchdog fires by the time an idle connection should park.
    let mut armed = false;
    loop {
        let event = std::future::poll_fn(|cx| {
            if let Poll::Ready(ended) = poll_served(conn.as_mut(), &serving, &tracker.bound, cx) {
                return Poll::Ready(Event::Ended(ended));
            }
            // A request just ended: the watchdog comes back when it is time to park.
            if !armed
                && closing.is_none()
                && may_park()
                && let Some(at) = tracker.park_at()
            {
                watchdog.as_mut().reset(at);
                armed = true;
                sides.rearm();
            }
            poll_sides(
                &sides,
                cx,
                closing.is_none(),
                drained.as_mut(),
                resets.as_mut(),
                watchdog.as_mut(),
            )
        })
        .await;
        // Whatever happened, the next pass looks at every signal again.
        sides.rearm();
        serving.rearm();
        match event {
            Event::Ended(ended) => return (closing.unwrap_or(Closed::ByPeer), ended),
            Event::Drained => {
                closing = Some(Closed::Drained);
                conn.as_mut().graceful_shutdown();
            }
            Event::TooManyResets => {
                closing = Some(Closed::TooManyResets);
                // The GOAWAY covers every stream open: they get their answers first.
                conn.as_mut().graceful_shutdown();
                refused_at = Instant::now();
                watchdog.as_mut().reset(refused_at + CLOSE_GRACE);
            }
            Event::Watchdog => match closing {
                Some(Closed::Drained | Closed::Idle | Closed::Parked) => {
                    watchdog.as_mut().reset(far_future());
                }
                Some(Closed::TooManyResets) => {
                    match tracker.closing_step(refused_at, Instant::now()) {
                        Some(at) => watchdog.as_mut().reset(at),
                        None => return (Closed::TooManyResets, Ok(())),
                    }
                }
                Some(reason) => return (reason, Ok(())),
                None => {
                    let step = idle_step(tracker, limits, may_park(), begun);
                    let state = (&mut armed, &mut closing);
                    if let Some(closed) =
                        on_idle(step, conn.as_mut(), tracker, state, watchdog.as_mut())
                    {
                        return (closed, Ok(()));
                    }
                }
            },
        }
    }
}

/// Carries out an idle connection's watchdog step: `Some` when the connection is
/// dropped at once; else it waits on (`armed` when the wait ends in a park) or closes
/// gracefully, to park or for good (`closing`).
fn on_idle<C: GracefulConnection>(
    step: Idle,
    conn: Pin<&mut C>,
    tracker: &Tracker,
    (armed, closing): (&mut bool, &mut Option<Closed>),
    watchdog: Pin<&mut tokio::time::Sleep>,
) -> Option<Closed> {
    match step {
        Idle::Drop => return Some(Closed::Idle),
        Idle::Wait { at, park } => {
            *armed = park;
            watchdog.reset(at);
        }
        step => {
            *armed = false;
            let parked = matches!(step, Idle::Park);
            if parked {
                tracker.parking.store(true, Ordering::Relaxed);
            }
            *closing = Some(if parked { Closed::Parked } else { Closed::Idle });
            conn.graceful_shutdown();
            watchdog.reset(far_future());
        }
    }
    None
}

/// Polls `conn` and the upstream connections `bound` drives, each only when something
/// woke it. An upstream connection's answer wakes the request waiting for it: the
/// connection goes again in the same poll.
fn poll_served<C: Future>(
    mut conn: Pin<&mut C>,
    serving: &FlagWaker,
    bound: &Bound,
    task: &Context<'_>,
) -> Poll<C::Output> {
    let ended = bound.pass().run(task, &[serving, bound.due()], || {
        let mut polled = false;
        if let Some(waker) = serving.waker_for(task) {
            polled = true;
            if let Poll::Ready(ended) = conn.as_mut().poll(&mut Context::from_waker(waker)) {
                return Err(ended);
            }
        }
        Ok(bound.poll(task) | polled)
    });
    ended.map_or(Poll::Pending, Poll::Ready)
}

/// The deadline, the reset signal and the drain flag (the last two only while
/// `open`), looked at only when one of them woke the task: the connection wakes it
/// for every read and answer.
fn poll_sides<E, D: Future, R: Future>(
    sides: &FlagWaker,
    cx: &Context<'_>,
    open: bool,
    drained: Pin<&mut D>,
    resets: Pin<&mut R>,
    watchdog: Pin<&mut tokio::time::Sleep>,
) -> Poll<Event<E>> {
    let Some(waker) = sides.waker_for(cx) else {
        return Poll::Pending;
    };
    let mut side = Context::from_waker(waker);
    if open {
        if drained.poll(&mut side).is_ready() {
            return Poll::Ready(Event::Drained);
        }
        if resets.poll(&mut side).is_ready() {
            return Poll::Ready(Event::TooManyResets);
        }
    }
    match watchdog.poll(&mut side) {
        Poll::Ready(()) => Poll::Ready(Event::Watchdog),
        Poll::Pending => Poll::Pending,
    }
}

/// What the watchdog finds on a connection that is not closing yet.
enum Idle {
    /// Idle past `PARK_AFTER` and not past its deadline: park it (hyper closes an idle
    /// connection at once; the socket stays).
    Park,
    /// No request head by the deadline: nothing to finish, drop it.
    Drop,
    /// Idle past its deadline after requests: close it gracefully, so an answer still
    /// streaming (a download, a gRPC stream) finishes, bounded by `body_idle_timeout`.
    Close,
    /// Look again at `at`; `park` when that is the time to park.
    Wait { at: Instant, park: bool },
}

/// What to do with an open connection when its watchdog fires; never sleeps past the
/// keep-alive timeout, so a request that begins and ends in between is seen. `begun`
/// is how many requests the connection had started when this hyper connection took
/// it over: one that has started none since has nothing to finish.
fn idle_step(tracker: &Tracker, limits: &Limits, may_park: bool, begun: u64) -> Idle {
    let now = Instant::now();
    let next = now + limits.keepalive_timeout;
    let park_at = tracker.park_at().filter(|_| may_park);
    let idle_at = tracker.idle_deadline(limits);
    if park_at.is_some_and(|at| at <= now) && idle_at.is_some_and(|at| now < at) {
        return Idle::Park;
    }
    match idle_at {
        // A parked connection woken by a head that never completes is one of these:
        // hyper, reading that head, would let a graceful close wait for it.
        Some(at) if at <= now && tracker.started.load(Ordering::Relaxed) == begun => Idle::Drop,
        Some(at) if at <= now => Idle::Close,
        Some(at) => Idle::Wait {
            at: park_at.map_or(at, |park| park.min(at)).min(next),
            park: park_at.is_some(),
        },
        // A request is open: look again once it could have become idle.
        None => Idle::Wait {
            at: next,
            park: false,
        },
    }
}

/// What woke a connection's `drive`.
enum Event<E> {
    Ended(Result<(), E>),
    Drained,
    TooManyResets,
    Watchdog,
}

/// A client socket as hyper sees it: the bytes a parked connection had already read
/// come first, and hyper's shutdown at the end of a parked connection leaves the
/// socket open.
pub struct ParkIo {
    io: TokioIo<TcpStream>,
    prefix: Bytes,
    tracker: Arc<Tracker>,
}

impl ParkIo {
    /// `stream`, parked through `tracker`'s flag.
    pub fn new(stream: TcpStream, tracker: Arc<Tracker>) -> ParkIo {
        ParkIo {
            io: TokioIo::new(stream),
            prefix: Bytes::new(),
            tracker,
        }
    }

    /// Waits without hyper's state until the client sends more, with `unread` (what
    /// hyper had read of it already) to come first. `None` to serve it, or why the
    /// connection closes instead: idle past `keepalive_timeout`, or draining.
    pub async fn parked(
        &mut self,
        unread: Bytes,
        limits: &Limits,
        drain: &mut watch::Receiver<bool>,
    ) -> Option<Closed> {
        let tracker = &self.tracker;
        tracker.parking.store(false, Ordering::Relaxed);
        // A copy: `unread` is a view of hyper's whole read buffer.
        self.prefix = if unread.is_empty() {
            Bytes::new()
        } else {
            Bytes::copy_from_slice(&unread)
        };
        // Even empty, the view keeps that whole buffer (8 KiB or more) alive: let it go
        // now, not when the wait below ends.
        drop(unread);
        let deadline = tracker.idle_deadline(limits)?;
        tokio::select! {
            biased;
            _ = drain.wait_for(|stop| *stop) => Some(Closed::Drained),
            ready = self.io.inner().readable() => ready.err().map(|_| Closed::ByPeer),
            () = tokio::time::sleep_until(deadline) => Some(Closed::Idle),
        }
    }
}

impl hyper::rt::Read for ParkIo {
    fn poll_read(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        mut buf: hyper::rt::ReadBufCursor<'_>,
    ) -> Poll<std::io::Result<()>> {
        let this = self.get_mut();
        if this.prefix.is_empty() {
            return Pin::new(&mut this.io).poll_read(cx, buf);
        }
        let n = this.prefix.len().min(buf.remaining());
        buf.put_slice(&this.prefix.split_to(n));
        Poll::Ready(Ok(()))
    }
}

impl hyper::rt::Write for ParkIo {
    fn poll_write(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &[u8],
    ) -> Poll<std::io::Result<usize>> {
        Pin::new(&mut self.get_mut().io).poll_write(cx, buf)
    }

    fn poll_flush(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<std::io::Result<()>> {
        Pin::new(&mut self.get_mut().io).poll_flush(cx)
    }

    fn poll_shutdown(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<std::io::Result<()>> {
        let this = self.get_mut();
        if this.tracker.parking.load(Ordering::Relaxed) {
            return Poll::Ready(Ok(()));
        }
        Pin::new(&mut this.io).poll_shutdown(cx)
    }

    fn is_write_vectored(&self) -> bool {
        self.io.is_write_vectored()
    }

    fn poll_write_vectored(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        bufs: &[std::io::IoSlice<'_>],
    ) -> Poll<std::io::Result<usize>> {
        Pin::new(&mut self.get_mut().io).poll_write_vectored(cx, bufs)
    }
}

/// What a new connection speaks, from its first bytes, read without taking them.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Sniffed {
    /// HTTP/1: hyper's HTTP/1 connection, parked when idle.
    Http1,
    /// The HTTP/2 preface, or too few bytes to tell: hyper's detection decides.
    Other,
    /// Closed before sending anything.
    Gone,
}

/// The HTTP/2 client preface (RFC 9113 §3.4).
const H2_PREFACE: &[u8; 24] = b"PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n";

/// Peeks at the first bytes of `stream` once some have arrived.
pub async fn sniff(stream: &TcpStream) -> Sniffed {
    let mut first = [0u8; 24];
    match stream.peek(&mut first).await {
        Ok(0) | Err(_) => Sniffed::Gone,
        Ok(n) if first[..n] != H2_PREFACE[..n] => Sniffed::Http1,
        Ok(_) => Sniffed::Other,
    }
}

/// An HTTP/1.1 connection builder, the same as [`builder`]'s.
pub fn http1_builder() -> http1::Builder {
    let mut builder = http1::Builder::new();
    builder
        .timer(TokioTimer::new())
        .header_read_timeout(None)
        .keep_alive(true);
    builder
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

    #[tokio::test(start_paused = true)]
    async fn a_connection_closing_for_resets_waits_for_its_open_requests_up_to_the_limit() {
        let tracker = Tracker::new(&LIMITS);
        let since = Instant::now();
        let open = tracker.begin();
        tokio::time::advance(Duration::from_secs(5)).await;
        let now = Instant::now();
        assert_eq!(tracker.closing_step(since, now), Some(now + CLOSE_GRACE));
        // Its answer goes out; the connection has a second more to send it.
        open.done();
        let answered = Instant::now();
        assert_eq!(
            tracker.closing_step(since, answered),
            Some(answered + CLOSE_GRACE)
        );
        tokio::time::advance(CLOSE_GRACE).await;
        assert_eq!(tracker.closing_step(since, Instant::now()), None);
        // A request that never ends is dropped at the limit.
        let _stuck = tracker.begin();
        let at_limit = since + RESET_CLOSE_LIMIT;
        assert!(
            tracker
                .closing_step(since, at_limit - CLOSE_GRACE)
                .is_some()
        );
        assert_eq!(tracker.closing_step(since, at_limit), None);
    }
}
