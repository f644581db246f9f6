//! HTTP/1.1 connections to a plain-http upstream, kept per runtime without a shared
//! map: a request takes the newest idle connection of its own runtime, sends, and puts
//! the connection straight back, where it stays busy until its answer has been read.
//! A sweeper closes what is idle past `idle_timeout` or beyond `max_idle`.
//!
//! An HTTP/1 client connection drives the upstream connections it uses in its own
//! task ([`Bound`]): the answer is read, and its body streamed to the client, in one
//! task, with no wake-up of another. It keeps one of them idle for its next request
//! without a look at the runtime's pool, and gives them back when it parks or ends.
//!
//! hyper-util's pool does the same job for every scheme and protocol, and pays for
//! that on each request: a hashed key, a shared map, a checkout raced against a
//! connect. A plain-http upstream needs none of it.

use std::future::Future;
use std::pin::Pin;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex, MutexGuard, PoisonError, Weak};
use std::task::{Context, Poll};
use std::time::Duration;

use http::uri::{PathAndQuery, Uri};
use http::{Request, Response};
use hyper::body::Incoming;
use hyper::client::conn::http1::{Builder, Connection, SendRequest};
use hyper_util::client::legacy::connect::HttpConnector;
use hyper_util::rt::TokioIo;
use tokio::net::TcpStream;
use tower_service::Service;

use super::body::ProxyBody;
use super::cause::{ConnectCause, SendError};
use crate::clock::Instant;
use crate::flag_waker::{FlagWaker, Pass};

/// An upstream connection's own future: it reads and writes while polled.
type Conn = Pin<Box<Connection<TokioIo<TcpStream>, ProxyBody>>>;

/// The connections of one runtime.
struct Pool {
    slot: Mutex<Slot>,
    /// Idle connections the slot keeps.
    cap: usize,
    idle_timeout: Duration,
}

/// What a pool holds, behind its lock.
#[derive(Default)]
struct Slot {
    conns: Vec<Kept>,
    /// Whether a sweeper runs for this slot.
    sweeping: bool,
}

/// A connection in a slot: idle, or still reading its last answer.
struct Kept {
    sender: SendRequest<ProxyBody>,
    /// The connection itself when no task drives it: one a client connection gave
    /// back idle. `None` when it runs as a task of its own.
    conn: Option<Conn>,
    /// When the sweeper first saw it idle; `None` while busy or not yet seen.
    idle_since: Option<Instant>,
}

/// Kept connections to one plain-http upstream.
pub(super) struct Plain {
    pools: Box<[Arc<Pool>]>,
    connector: HttpConnector,
    /// `http://authority`, what the connector dials.
    target: Uri,
    builder: Builder,
    server_name: String,
}

/// How many upstream connections one client connection drives itself; a retry while
/// the last answer is still read needs a second. Beyond these, a connection runs as
/// a task of its own, so a client connection never polls a long list.
const MAX_BOUND: usize = 4;

/// The upstream connections one HTTP/1 client connection drives in its own task:
/// [`Bound::poll`] is polled with the client connection, and a request it serves
/// sends on them first. Inactive (the h2c path) it holds none.
pub struct Bound {
    active: AtomicBool,
    /// The poll of the client connection's task, shared with its own flag.
    pass: Pass,
    /// Polled only when one of them woke the task, or one was bound.
    due: FlagWaker,
    // Locked only by the client connection's own task: never contended.
    driven: Mutex<Vec<Driven>>,
}

/// A connection a client connection drives.
struct Driven {
    /// Where it goes back to.
    pool: Arc<Pool>,
    sender: SendRequest<ProxyBody>,
    conn: Conn,
}

impl Default for Bound {
    fn default() -> Bound {
        let pass = Pass::default();
        Bound {
            active: AtomicBool::new(false),
            due: FlagWaker::within(pass.clone()),
            pass,
            driven: Mutex::default(),
        }
    }
}

impl Bound {
    /// The poll of the client connection's task; see [`Pass`].
    pub fn pass(&self) -> &Pass {
        &self.pass
    }

    /// The flag the bound connections wake.
    pub fn due(&self) -> &FlagWaker {
        &self.due
    }

    /// Lets requests bind connections: call only where [`Bound::poll`] runs in the
    /// task that serves them.
    pub fn activate(&self) {
        self.active.store(true, Ordering::Relaxed);
    }

    fn is_active(&self) -> bool {
        self.active.load(Ordering::Relaxed)
    }

    /// Drives the bound connections, if something woke them, and says whether it did;
    /// those idle beyond the first go back to their pool.
    pub fn poll(&self, cx: &Context<'_>) -> bool {
        let Some(waker) = self.due.waker_for(cx) else {
            return false;
        };
        let mut cx = Context::from_waker(waker);
        let mut driven = lock(&self.driven);
        if driven.is_empty() {
            return false;
        }
        driven.retain_mut(|d| match d.conn.as_mut().poll(&mut cx) {
            Poll::Pending => true,
            Poll::Ready(Ok(())) => false,
            Poll::Ready(Err(error)) => {
                tracing::debug!(%error, "upstream connection ended");
                false
            }
        });
        // One connection, the usual case, stays whatever it is doing.
        let mut idle = 0;
        let mut i = 0;
        while driven.len() > 1 && i < driven.len() {
            if driven[i].sender.is_ready() {
                idle += 1;
                if idle > 1 {
                    let d = driven.swap_remove(i);
                    d.pool.keep(d.sender, Some(d.conn));
                    continue;
                }
            }
            i += 1;
        }
        true
    }

    /// Gives every connection back: idle ones to their pool, undriven, for any client
    /// connection to take; busy ones to tasks of their own, to finish their answer.
    pub fn release(&self) {
        let driven = std::mem::take(&mut *lock(&self.driven));
        for d in driven {
            if d.sender.is_ready() {
                d.pool.keep(d.sender, Some(d.conn));
            } else {
                spawn_conn(d.conn);
                d.pool.keep(d.sender, None);
            }
        }
    }

    /// Drives `conn` from now on, if there is room; hands both back otherwise.
    fn bind(
        &self,
        pool: &Arc<Pool>,
        sender: SendRequest<ProxyBody>,
        conn: Conn,
    ) -> Result<(), (SendRequest<ProxyBody>, Conn)> {
        let mut driven = lock(&self.driven);
        if driven.len() >= MAX_BOUND {
            return Err((sender, conn));
        }
        driven.push(Driven {
            pool: Arc::clone(pool),
            sender,
            conn,
        });
        // Its first poll registers it; the request is already waiting in it.
        self.due.rearm();
        Ok(())
    }
}

impl Drop for Bound {
    fn drop(&mut self) {
        self.release();
    }
}

impl Plain {
    /// Kept connections for `slots` runtimes, at most `cap` idle in each.
    pub(super) fn new(
        connector: HttpConnector,
        target: Uri,
        slots: usize,
        cap: usize,
        idle_timeout: Duration,
        server_name: String,
    ) -> Plain {
        Plain {
            pools: (0..slots)
                .map(|_| {
                    Arc::new(Pool {
                        slot: Mutex::default(),
                        cap,
                        idle_timeout,
                    })
                })
                .collect(),
            connector,
            target,
            builder: Builder::new(),
            server_name,
        }
    }

    /// Sends `req` on an idle connection `bound` drives, else on an idle connection of
    /// runtime `slot`, else on a new one. A request that a kept connection closed
    /// under before writing it goes on a fresh one.
    ///
    /// Not an `async fn`: that would hold the request twice in its state (its
    /// argument and a local), and the state is moved on every request.
    #[inline(always)]
    pub(super) fn send<'a>(
        &'a self,
        slot: usize,
        bound: Option<&'a Bound>,
        mut req: Request<ProxyBody>,
    ) -> impl Future<Output = Result<Response<Incoming>, SendError>> + 'a {
        let pool = self.pools.get(slot).unwrap_or(&self.pools[0]);
        origin_form(req.uri_mut());
        // With `max_idle = 0` nothing is kept, not even by a client connection.
        let bound = bound.filter(|b| b.is_active() && pool.cap > 0);
        async move {
            if let Some(bound) = bound {
                let sent = {
                    let mut driven = lock(&bound.driven);
                    match driven
                        .iter_mut()
                        .find(|d| Arc::ptr_eq(&d.pool, pool) && d.sender.is_ready())
                    {
                        Some(d) => Ok(d.sender.try_send_request(req)),
                        None => Err(req),
                    }
                };
                match sent {
                    Ok(answer) => match answer.await {
                        Ok(response) => return Ok(response),
                        Err(mut error) => match error.take_message() {
                            Some(unsent) => req = unsent,
                            None => return Err(SendError::Failed(error.into_error().into())),
                        },
                    },
                    Err(unsent) => req = unsent,
                }
            }
            let mut kept = take_idle(&mut lock(&pool.slot));
            loop {
                let reused = kept.is_some();
                let (mut sender, conn) = match kept.take() {
                    Some(kept) => kept,
                    None => {
                        let (sender, conn) = self.connect().await?;
                        (sender, Some(conn))
                    }
                };
                let answer = sender.try_send_request(req);
                match (conn, bound) {
                    (Some(conn), Some(bound)) => {
                        if let Err((sender, conn)) = bound.bind(pool, sender, conn) {
                            spawn_conn(conn);
                            pool.keep(sender, None);
                        }
                    }
                    (Some(conn), None) => {
                        spawn_conn(conn);
                        // With `max_idle = 0` nothing is kept: hyper closes the
                        // connection once its answer is done.
                        if pool.cap > 0 {
                            pool.keep(sender, None);
                        }
                    }
                    (None, _) => {
                        if pool.cap > 0 {
                            pool.keep(sender, None);
                        }
                    }
                }
                match answer.await {
                    Ok(response) => return Ok(response),
                    Err(mut error) => match error.take_message() {
                        Some(unsent) if reused => req = unsent,
                        _ => return Err(SendError::Failed(error.into_error().into())),
                    },
                }
            }
        }
    }

    async fn connect(&self) -> Result<(SendRequest<ProxyBody>, Conn), SendError> {
        let io = self
            .connector
            .clone()
            .call(self.target.clone())
            .await
            .map_err(|e| SendError::Connect(ConnectCause::of(&e, &self.server_name)))?;
        let (sender, conn) = self
            .builder
            .handshake(io)
            .await
            .map_err(|e| SendError::Failed(e.into()))?;
        Ok((sender, Box::pin(conn)))
    }
}

impl Pool {
    /// Keeps `sender` (and `conn`, when no task drives it) and makes sure a sweeper
    /// looks after the pool.
    fn keep(self: &Arc<Pool>, sender: SendRequest<ProxyBody>, conn: Option<Conn>) {
        if self.cap == 0 {
            if let Some(conn) = conn {
                spawn_conn(conn);
            }
            return;
        }
        let mut slot = lock(&self.slot);
        slot.conns.push(Kept {
            sender,
            conn,
            idle_since: None,
        });
        if !slot.sweeping
            && let Ok(runtime) = tokio::runtime::Handle::try_current()
        {
            slot.sweeping = true;
            let every = (self.idle_timeout / 2).clamp(Duration::from_millis(10), SWEEP_MAX);
            runtime.spawn(sweep(Arc::downgrade(self), every));
        }
    }
}

/// Runs `conn` as a task of its own until it closes; dropped (closed) where no
/// runtime is left to run it, as when one shuts down.
fn spawn_conn(conn: Conn) {
    if let Ok(runtime) = tokio::runtime::Handle::try_current() {
        runtime.spawn(async move {
            if let Err(error) = conn.await {
                tracing::debug!(%error, "upstream connection ended");
            }
        });
    }
}

/// The longest between two sweeps: how late a connection beyond `max_idle` is closed.
const SWEEP_MAX: Duration = Duration::from_secs(1);

/// The newest idle connection, dropping closed ones on the way.
fn take_idle(slot: &mut Slot) -> Option<(SendRequest<ProxyBody>, Option<Conn>)> {
    let mut i = slot.conns.len();
    while i > 0 {
        i -= 1;
        let sender = &slot.conns[i].sender;
        if sender.is_closed() {
            slot.conns.swap_remove(i);
        } else if sender.is_ready() {
            let kept = slot.conns.swap_remove(i);
            return Some((kept.sender, kept.conn));
        }
    }
    None
}

/// Closes what has been idle `idle_timeout` and the idle beyond `cap` (the longest
/// idle first), every `every`, until the pool is empty or gone.
async fn sweep(pool: Weak<Pool>, every: Duration) {
    loop {
        tokio::time::sleep(every).await;
        let Some(pool) = pool.upgrade() else {
            return;
        };
        let (cap, idle_timeout) = (pool.cap, pool.idle_timeout);
        let mut kept = lock(&pool.slot);
        let now = Instant::now();
        kept.conns.retain_mut(|c| {
            if c.sender.is_closed() {
                return false;
            }
            if !c.sender.is_ready() {
                c.idle_since = None;
                return true;
            }
            let since = *c.idle_since.get_or_insert(now);
            now.duration_since(since) < idle_timeout
        });
        let idle = kept.conns.iter().filter(|c| c.idle_since.is_some()).count();
        if idle > cap {
            // The longest idle go; the newest stay, last, where `take_idle` looks first.
            kept.conns.sort_by_key(|c| c.idle_since);
            let mut excess = idle - cap;
            kept.conns.retain(|c| {
                let close = excess > 0 && c.idle_since.is_some();
                excess -= usize::from(close);
                !close
            });
        }
        if kept.conns.is_empty() {
            kept.sweeping = false;
            return;
        }
    }
}

fn lock<T>(mutex: &Mutex<T>) -> MutexGuard<'_, T> {
    // Neither a slot nor a client connection's list holds an invariant a panic
    // could break half-way.
    mutex.lock().unwrap_or_else(PoisonError::into_inner)
}

/// An HTTP/1.1 request line carries the path alone.
fn origin_form(uri: &mut Uri) {
    if uri.authority().is_none() {
        return;
    }
    let path = uri
        .path_and_query()
        .cloned()
        .unwrap_or_else(|| PathAndQuery::from_static("/"));
    *uri = Uri::from(path);
}
