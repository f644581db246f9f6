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
use http::{HeaderValue, Method, Request, Response, Version};
use http_body::{Body, Frame};
use hyper::body::Incoming;
use hyper::service::service_fn;
use hyper_util::rt::TokioIo;
use tokio::net::TcpListener;
use tokio::sync::{Semaphore, watch};

use super::connection::{self, Acceptor, Closed, Limits, Tracker};
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
    let builder = Arc::new(connection::builder(&ctx.limits));
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
        let service = {
            let tracker = Arc::clone(&tracker);
            let current = Arc::clone(current);
            let keep_alive = keep_alive.clone();
            service_fn(move |req: Request<Incoming>| {
                let guard = tracker.begin();
                let upstream = current.load_full();
                let keep_alive = keep_alive.clone();
                async move {
                    let version = req.version();
                    let (mut response, first) = if req.method() == Method::CONNECT {
                        (refuse_connect(&upstream, &req), None)
                    } else if guard.is_refusing() {
                        (refuse_closing(&upstream), None)
                    } else {
                        let response = handle(Arc::clone(&upstream), req, body_idle).await;
                        first_frame(&upstream, response, body_idle).await
                    };
                    guard.done();
                    if let Some(keep_alive) = keep_alive
                        && matches!(version, Version::HTTP_10 | Version::HTTP_11)
                    {
                        response.headers_mut().insert(
                            http::header::HeaderName::from_static("keep-alive"),
                            keep_alive,
                        );
                    }
                    Ok::<_, Infallible>(response.map(|body| IdleBody::new(first, body, body_idle)))
                }
            })
        };
        let builder = Arc::clone(&builder);
        let draining = draining.clone();
        tokio::spawn(async move {
            let connection = builder
                .serve_connection(TokioIo::new(stream), service)
                .into_owned();
            let (closed, ended) = connection::drive(connection, &tracker, &limits, draining).await;
            match (closed, ended) {
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
/// within `idle` a 504, instead of an empty reply. Streaming answers (server-sent
/// events, gRPC) go out at once: their first frame may be long in coming.
async fn first_frame(
    upstream: &Upstream,
    response: Response<ProxyBody>,
    idle: Duration,
) -> (Response<ProxyBody>, Option<Frame<Bytes>>) {
    if matches!(response.body(), ProxyBody::Full { .. })
        || response.body().is_end_stream()
        || is_streaming(response.headers())
    {
        return (response, None);
    }
    let (parts, mut body) = response.into_parts();
    // The frame is usually one hop away (the upstream connection's task, on this
    // thread with per-core runtimes): a yield fetches it without arming a timer.
    let mut polled = None;
    for _ in 0..2 {
        let once = std::future::poll_fn(|cx| {
            Poll::Ready(match Pin::new(&mut body).poll_frame(cx) {
                Poll::Ready(frame) => Some(frame),
                Poll::Pending => None,
            })
        });
        if let Some(frame) = once.await {
            polled = Some(Ok(frame));
            break;
        }
        tokio::task::yield_now().await;
    }
    let polled = match polled {
        Some(polled) => polled,
        None => {
            tokio::time::timeout(
                idle,
                std::future::poll_fn(|cx| Pin::new(&mut body).poll_frame(cx)),
            )
            .await
        }
    };
    let (reason, outcome, message) = match polled {
        Ok(Some(Ok(frame))) => return (Response::from_parts(parts, body), Some(frame)),
        Ok(None) => return (Response::from_parts(parts, body), None),
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
    (local(upstream, reason, outcome, &message), None)
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
