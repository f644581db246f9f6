//! HTTP/1.1 connections to a plain-http upstream, kept per runtime without a shared
//! map: a request takes the newest idle connection of its own runtime, sends, and puts
//! the connection straight back, where it stays busy until its answer has been read.
//! A sweeper closes what is idle past `idle_timeout` or beyond `max_idle`.
//!
//! hyper-util's pool does the same job for every scheme and protocol, and pays for
//! that on each request: a hashed key, a shared map, a checkout raced against a
//! connect. A plain-http upstream needs none of it.

use std::sync::{Arc, Mutex, MutexGuard, PoisonError, Weak};
use std::time::Duration;

use http::uri::{PathAndQuery, Uri};
use http::{Request, Response};
use hyper::body::Incoming;
use hyper::client::conn::http1::{Builder, SendRequest};
use hyper_util::client::legacy::connect::HttpConnector;
use tokio::time::Instant;
use tower_service::Service;

use super::body::ProxyBody;
use super::cause::ConnectCause;
use super::client::SendError;

/// The connections of one runtime.
#[derive(Default)]
struct Slot {
    conns: Vec<Kept>,
    /// Whether a sweeper runs for this slot.
    sweeping: bool,
}

/// A connection in a slot: idle, or still reading its last answer.
struct Kept {
    sender: SendRequest<ProxyBody>,
    /// When the sweeper first saw it idle; `None` while busy or not yet seen.
    idle_since: Option<Instant>,
}

/// Kept connections to one plain-http upstream.
pub(super) struct Plain {
    slots: Box<[Arc<Mutex<Slot>>]>,
    connector: HttpConnector,
    /// `http://authority`, what the connector dials.
    target: Uri,
    builder: Builder,
    /// Idle connections a slot keeps.
    cap: usize,
    idle_timeout: Duration,
    server_name: String,
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
            slots: (0..slots).map(|_| Arc::default()).collect(),
            connector,
            target,
            builder: Builder::new(),
            cap,
            idle_timeout,
            server_name,
        }
    }

    /// Sends `req` on an idle connection of runtime `slot`, or a new one. A request
    /// that a kept connection closed under before writing it goes on a fresh one.
    pub(super) async fn send(
        &self,
        slot: usize,
        mut req: Request<ProxyBody>,
    ) -> Result<Response<Incoming>, SendError> {
        let slot = self.slots.get(slot).unwrap_or(&self.slots[0]);
        origin_form(req.uri_mut());
        let mut kept = take_idle(&mut lock(slot));
        loop {
            let reused = kept.is_some();
            let mut sender = match kept.take() {
                Some(sender) => sender,
                None => self.connect().await?,
            };
            let answer = sender.try_send_request(req);
            // With `max_idle = 0` nothing is kept: hyper closes the connection once
            // its answer is done.
            if self.cap > 0 {
                self.put_back(slot, sender);
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

    async fn connect(&self) -> Result<SendRequest<ProxyBody>, SendError> {
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
        tokio::spawn(async move {
            if let Err(error) = conn.await {
                tracing::debug!(%error, "upstream connection ended");
            }
        });
        Ok(sender)
    }

    /// Keeps `sender` in `slot` and makes sure a sweeper looks after the slot.
    fn put_back(&self, slot: &Arc<Mutex<Slot>>, sender: SendRequest<ProxyBody>) {
        let mut kept = lock(slot);
        kept.conns.push(Kept {
            sender,
            idle_since: None,
        });
        if !kept.sweeping {
            kept.sweeping = true;
            let every = (self.idle_timeout / 2).clamp(Duration::from_millis(10), SWEEP_MAX);
            tokio::spawn(sweep(
                Arc::downgrade(slot),
                every,
                self.cap,
                self.idle_timeout,
            ));
        }
    }
}

/// The longest between two sweeps: how late a connection beyond `max_idle` is closed.
const SWEEP_MAX: Duration = Duration::from_secs(1);

/// The newest idle connection, dropping closed ones on the way.
fn take_idle(slot: &mut Slot) -> Option<SendRequest<ProxyBody>> {
    let mut i = slot.conns.len();
    while i > 0 {
        i -= 1;
        let sender = &slot.conns[i].sender;
        if sender.is_closed() {
            slot.conns.swap_remove(i);
        } else if sender.is_ready() {
            return Some(slot.conns.swap_remove(i).sender);
        }
    }
    None
}

/// Closes what has been idle `idle_timeout` and the idle beyond `cap` (the longest
/// idle first), every `every`, until the slot is empty or gone.
async fn sweep(slot: Weak<Mutex<Slot>>, every: Duration, cap: usize, idle_timeout: Duration) {
    loop {
        tokio::time::sleep(every).await;
        let Some(slot) = slot.upgrade() else {
            return;
        };
        let mut kept = lock(&slot);
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

fn lock(slot: &Mutex<Slot>) -> MutexGuard<'_, Slot> {
    // A slot holds no invariant a panic could break half-way.
    slot.lock().unwrap_or_else(PoisonError::into_inner)
}

/// An HTTP/1.1 request line carries the path alone.
fn origin_form(uri: &mut Uri) {
    let path = uri
        .path_and_query()
        .cloned()
        .unwrap_or_else(|| PathAndQuery::from_static("/"));
    *uri = Uri::from(path);
}
