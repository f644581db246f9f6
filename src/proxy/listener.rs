//! The accept loop of one listener: HTTP/1.1 and h2c from clients, the connection
//! limit shared by all listeners, and draining its connections when it stops. Around
//! each request: `CONNECT` refused, the upstream body's first frame awaited before the
//! head goes out, the keep-alive timeout announced, the body bounded by
//! `body_idle_timeout`. Each connection's deadlines are `connection.rs`'s.
//!
//! The upstream a listener serves can be swapped by a reload while it runs: each
//! request reads the current one, so keep-alive connections follow the new settings.

use std::convert::Infallible;
use std::pin::Pin;
use std::sync::Arc;
use std::task::Poll;
use std::time::Duration;

use arc_swap::ArcSwap;
use bytes::Bytes;
use http::{HeaderName, HeaderValue, Method, Request, Response, Version};
use http_body::{Body, Frame};
use hyper::body::Incoming;
use hyper::server::conn::http1;
use hyper::service::service_fn;
use hyper_util::rt::{TokioExecutor, TokioIo};
use hyper_util::server::conn::auto;
use tokio::net::{TcpListener, TcpStream};
use tokio::sync::{Semaphore, watch};

use super::ClientIp;
use super::connection::{self, Acceptor, Closed, Limits, ParkIo, Sniffed, Tracker};
use super::idle::IdleBody;
use super::reply::{Dialect, Reason, reply};
use super::service::handle;
use crate::metrics::Outcome;
use crate::pacer::ShedReason;
use crate::transport::ProxyBody;
use crate::upstream::Upstream;

/// How a listener runs.
#[derive(Clone)]
pub struct ListenerContext {
    /// One permit per open client connection (`server.max_connections`), shared by
    /// every listener.
    pub connections: Arc<Semaphore>,
    /// Each connection's deadlines.
    pub limits: Limits,
    /// The longest silence inside a request body from the client, or a response body
    /// from the upstream.
    pub body_idle_timeout: Duration,
    /// How long open connections may take to finish once the listener stops.
    pub grace: Duration,
    /// Turns true when this listener must stop accepting and drain.
    pub stop: watch::Receiver<bool>,
}

/// Announced on HTTP/1 answers with the keep-alive timeout.
const KEEP_ALIVE: HeaderName = HeaderName::from_static("keep-alive");

/// The upstream a listener serves; a reload may replace it.
pub type Current = Arc<ArcSwap<Upstream>>;

/// Accepts connections for the current upstream until told to stop, then lets open
/// connections finish their requests for up to `grace`.
pub async fn serve(listener: TcpListener, current: Current, mut ctx: ListenerContext) {
    let (drain, draining) = watch::channel(false);
    accept(&listener, &current, &mut ctx, &draining).await;
    drop(listener);
    drop(draining);
    let _ = drain.send(true);
    let name = current.load().settings.name.clone();
    tracing::debug!(upstream = %name, open_connections = drain.receiver_count(), "listener draining");
    if tokio::time::timeout(ctx.grace, drain.closed())
        .await
        .is_err()
    {
        tracing::warn!(upstream = %name, grace = ?ctx.grace, "connections still open when the grace ran out");
    }
}

async fn accept(
    listener: &TcpListener,
    current: &Current,
    ctx: &mut ListenerContext,
    draining: &watch::Receiver<bool>,
) {
    let builders = Arc::new(Builders {
        http1: connection::http1_builder(),
        auto: connection::builder(&ctx.limits),
    });
    // Announced so that clients retire a connection before easeoff closes it.
    let keep_alive = HeaderValue::from_str(&format!(
        "timeout={}",
        ctx.limits.keepalive_timeout.as_secs().max(1)
    ))
    .ok();
    let mut acceptor = Acceptor::new("proxy");
    loop {
        // Waiting for a permit before accepting leaves excess clients in the kernel's
        // backlog rather than accepting connections we cannot serve; silent
        // connections give theirs back after `header_read_timeout`.
        let permit = tokio::select! {
            permit = Arc::clone(&ctx.connections).acquire_owned() => match permit {
                Ok(permit) => permit,
                Err(_) => return,
            },
            () = stopped(&mut ctx.stop) => return,
        };
        let stream = tokio::select! {
            stream = acceptor.accept(listener) => stream,
            () = stopped(&mut ctx.stop) => return,
        };
        let limits = ctx.limits;
        let body_idle = ctx.body_idle_timeout;
        let tracker = Tracker::new(&limits);
        // Looked up only where tenants are told apart by address: a system call a
        // connection.
        let peer = current
            .load()
            .lanes
            .tenants()
            .filter(|t| t.by_client_ip())
            .and_then(|_| stream.peer_addr().ok())
            .map(|addr| ClientIp(addr.ip()));
        let service = {
            let tracker = Arc::clone(&tracker);
            let current = Arc::clone(current);
            let keep_alive = keep_alive.clone();
            service_fn(move |mut req: Request<Incoming>| {
                if let Some(peer) = peer {
                    req.extensions_mut().insert(peer);
                }
                let guard = tracker.begin();
                let upstream = current.load_full();
                let keep_alive = keep_alive
                    .as_ref()
                    .filter(|_| matches!(req.version(), Version::HTTP_10 | Version::HTTP_11));
                let keep_alive = keep_alive.cloned();
                async move {
                    let mut first = None;
                    let mut response = if req.method() == Method::CONNECT {
                        refuse_connect(&upstream, &req)
                    } else if guard.is_refusing() {
                        refuse_closing(&upstream)
                    } else {
                        let mut response = handle(&upstream, req, body_idle, guard.bound()).await;
                        first = first_frame(&upstream, &mut response, body_idle).await;
                        response
                    };
                    guard.done();
                    if let Some(keep_alive) = keep_alive {
                        response.headers_mut().insert(KEEP_ALIVE, keep_alive);
                    }
                    Ok::<_, Infallible>(response.map(|body| IdleBody::new(first, body, body_idle)))
                }
            })
        };
        let builders = Arc::clone(&builders);
        let mut draining = draining.clone();
        let current = Arc::clone(current);
        tokio::spawn(async move {
            let (closed, ended) =
                serve_client(stream, service, &builders, &tracker, &limits, &mut draining).await;
            match (closed, ended) {
                (Closed::TooManyResets, _) if tracker.active() > 0 => {
                    dropped_at_goaway(&current, tracker.active());
                }
                (Closed::TooManyResets, _) => {
                    tracing::debug!("client connection closed: too many cancelled streams");
                }
                (_, Err(error)) => tracing::debug!(%error, "client connection ended with an error"),
                _ => {}
            }
            drop(permit);
        });
    }
}

/// A connection closed for too many cancelled streams still had `streams` without an
/// answer when [`RESET_CLOSE_LIMIT`](super::connection::RESET_CLOSE_LIMIT) ran out.
fn dropped_at_goaway(current: &Current, streams: usize) {
    let upstream = current.load();
    upstream
        .metrics
        .goaway_dropped
        .inc_by(u64::try_from(streams).unwrap_or(u64::MAX));
    tracing::warn!(
        upstream = %upstream.name(),
        streams,
        "a client connection closing for too many cancelled streams was dropped with requests still unanswered"
    );
}

/// The connection builders of one listener: HTTP/1.1 alone, and with h2c detection.
struct Builders {
    http1: http1::Builder,
    auto: auto::Builder<TokioExecutor>,
}

type ConnError = Box<dyn std::error::Error + Send + Sync>;

/// Serves one client connection until it ends. HTTP/1 connections (nearly all) are
/// hyper's HTTP/1 connection directly, parked between requests once idle; h2c and
/// anything unclear goes through hyper's protocol detection.
async fn serve_client<S>(
    stream: TcpStream,
    service: S,
    builders: &Builders,
    tracker: &Arc<Tracker>,
    limits: &Limits,
    drain: &mut watch::Receiver<bool>,
) -> (Closed, Result<(), ConnError>)
where
    S: hyper::service::Service<
            Request<Incoming>,
            Response = Response<IdleBody<ProxyBody>>,
            Error = Infallible,
        > + Clone
        + Send
        + 'static,
    S::Future: Send + 'static,
{
    // A silent connection is closed by the first head's deadline, as hyper's would be.
    let first_head = tracker.accepted() + limits.header_read_timeout;
    let sniffed = tokio::select! {
        biased;
        _ = drain.wait_for(|stop| *stop) => return (Closed::Drained, Ok(())),
        sniffed = tokio::time::timeout_at(first_head, connection::sniff(&stream)) => sniffed,
    };
    match sniffed {
        Err(_) => return (Closed::Idle, Ok(())),
        Ok(Sniffed::Gone) => return (Closed::ByPeer, Ok(())),
        Ok(Sniffed::Other) => {
            // hyper runs each HTTP/2 stream as a task of its own, and moves the
            // stream's future several times on the way there: boxed, each move
            // copies a pointer rather than kilobytes.
            let service = service_fn(move |req| Box::pin(service.call(req)));
            // Boxed: the task of every connection would otherwise have room for it.
            let connection = builders
                .auto
                .serve_connection(TokioIo::new(stream), service)
                .into_owned();
            let mut connection = Box::pin(connection);
            return connection::drive(connection.as_mut(), tracker, limits, drain, false).await;
        }
        Ok(Sniffed::Http1) => {}
    }
    // hyper serves an HTTP/1 connection's requests in the task that polls it, where
    // `drive` polls the upstream connections too.
    tracker.bound().activate();
    let mut io = ParkIo::new(stream, Arc::clone(tracker));
    let mut service = service;
    loop {
        // Boxed so a parked connection holds none of it.
        let mut connection = Box::pin(builders.http1.serve_connection(io, service));
        let (closed, ended) =
            connection::drive(connection.as_mut(), tracker, limits, drain, true).await;
        // Parked or ended, the connection reads no answer now: others may use what
        // it drove.
        tracker.bound().release();
        if closed != Closed::Parked || ended.is_err() {
            return (closed, ended.map_err(Into::into));
        }
        let parts = Pin::into_inner(connection).into_parts();
        (io, service) = (parts.io, parts.service);
        if let Some(closed) = io.parked(parts.read_buf, limits, drain).await {
            return (closed, Ok(()));
        }
    }
}

/// easeoff is not a forward proxy: a tunnel would bypass the pacing, and an upstream
/// that accepted one would leave the client with an empty reply.
fn refuse_connect(upstream: &Upstream, req: &Request<Incoming>) -> Response<ProxyBody> {
    let message = format!(
        "easeoff forwards requests to its upstream and is not a forward proxy: {} is not supported",
        req.method()
    );
    let mut response = local(upstream, Reason::MethodNotAllowed, Outcome::Error, &message);
    response.headers_mut().insert(
        http::header::ALLOW,
        HeaderValue::from_static("GET, HEAD, POST, PUT, DELETE, PATCH, OPTIONS"),
    );
    response
}

/// A request on a connection that cancelled too many streams: no upstream work for it.
fn refuse_closing(upstream: &Upstream) -> Response<ProxyBody> {
    let message = "this connection cancelled too many requests and is closing; reconnect";
    local(
        upstream,
        Reason::Shed(ShedReason::Draining),
        Outcome::Shed,
        message,
    )
}

/// easeoff's own answer, counted and logged as the service's are.
fn local(
    upstream: &Upstream,
    reason: Reason,
    outcome: Outcome,
    message: &str,
) -> Response<ProxyBody> {
    tracing::debug!(upstream = %upstream.name(), ?reason, message, "local answer");
    upstream.metrics.request(outcome).inc();
    let dialect = Dialect {
        preset: upstream.settings.preset,
        grpc: false,
    };
    reply(reason, dialect, upstream.name(), message, None)
}

/// Waits for the first frame of an upstream's body before the head goes out, so a body
/// that breaks at once (an invalid chunk size) becomes a 502 and one that does not come
/// within `idle` a 504, instead of an empty reply; `response` becomes that answer.
/// Streaming answers (server-sent events, gRPC) go out at once: their first frame may be
/// long in coming.
async fn first_frame(
    upstream: &Upstream,
    response: &mut Response<ProxyBody>,
    idle: Duration,
) -> Option<Frame<Bytes>> {
    if matches!(response.body(), ProxyBody::Full { .. }) || response.body().is_end_stream() {
        return None;
    }
    // The frame is usually there already, or one hop away (the upstream connection's
    // task, on this thread with per-core runtimes): a yield fetches it without arming a
    // timer.
    let mut polled = poll_once(response.body_mut()).await;
    if polled.is_none() {
        if is_streaming(response.headers()) {
            return None;
        }
        tokio::task::yield_now().await;
        polled = poll_once(response.body_mut()).await;
    }
    let polled = match polled {
        Some(polled) => Ok(polled),
        None => {
            let body = response.body_mut();
            tokio::time::timeout(
                idle,
                std::future::poll_fn(|cx| Pin::new(&mut *body).poll_frame(cx)),
            )
            .await
        }
    };
    let (reason, outcome, message) = match polled {
        Ok(Some(Ok(frame))) => return Some(frame),
        Ok(None) => return None,
        // A streaming answer whose body broke before its first frame: the client gets
        // the error below rather than a head and then nothing.
        Ok(Some(Err(error))) => (
            Reason::UpstreamUnavailable,
            Outcome::Error,
            format!("the upstream's answer broke off: {error}"),
        ),
        Err(_) => (
            Reason::Timeout,
            Outcome::Timeout,
            format!("the upstream sent a head and then no body for {idle:?}"),
        ),
    };
    *response = local(upstream, reason, outcome, &message);
    None
}

/// The body's next frame if it is ready now.
async fn poll_once(body: &mut ProxyBody) -> Option<Option<Result<Frame<Bytes>, hyper::Error>>> {
    std::future::poll_fn(|cx| {
        Poll::Ready(match Pin::new(&mut *body).poll_frame(cx) {
            Poll::Ready(frame) => Some(frame),
            Poll::Pending => None,
        })
    })
    .await
}

fn is_streaming(headers: &http::HeaderMap) -> bool {
    headers.get(http::header::CONTENT_TYPE).is_some_and(|v| {
        let v = v.as_bytes();
        v.starts_with(b"text/event-stream") || v.starts_with(b"application/grpc")
    })
}

/// Completes once the stop flag is set (or its sender is gone).
async fn stopped(stop: &mut watch::Receiver<bool>) {
    let _ = stop.wait_for(|stop| *stop).await;
}
