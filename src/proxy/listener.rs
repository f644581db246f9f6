//! The accept loop of one listener: HTTP/1.1 and h2c from clients, the connection
//! limit shared by all listeners, and draining its connections when it stops.
//!
//! The upstream a listener serves can be swapped by a reload while it runs: each
//! request reads the current one, so keep-alive connections follow the new settings.

use std::convert::Infallible;
use std::sync::Arc;
use std::time::Duration;

use arc_swap::ArcSwap;

use hyper::service::service_fn;
use hyper_util::rt::{TokioExecutor, TokioIo, TokioTimer};
use hyper_util::server::conn::auto;
use hyper_util::server::graceful::GracefulShutdown;
use tokio::net::TcpListener;
use tokio::sync::{Semaphore, watch};

use super::service::handle;
use crate::upstream::Upstream;

/// How a listener runs.
#[derive(Clone)]
pub struct ListenerContext {
    /// One permit per open client connection (`server.max_connections`), shared by
    /// every listener.
    pub connections: Arc<Semaphore>,
    pub header_read_timeout: Duration,
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
    let graceful = GracefulShutdown::new();
    accept(&listener, &current, &mut ctx, &graceful).await;
    drop(listener);
    let name = current.load().settings.name.clone();
    tracing::debug!(upstream = %name, open_connections = graceful.count(), "listener draining");
    if tokio::time::timeout(ctx.grace, graceful.shutdown())
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
    graceful: &GracefulShutdown,
) {
    let mut builder = auto::Builder::new(TokioExecutor::new());
    builder
        .http1()
        .timer(TokioTimer::new())
        .header_read_timeout(ctx.header_read_timeout)
        .keep_alive(true);
    builder.http2().timer(TokioTimer::new());
    let builder = Arc::new(builder);
    loop {
        // Waiting for a permit before accepting leaves excess clients in the kernel's
        // backlog rather than accepting connections we cannot serve.
        let permit = tokio::select! {
            permit = Arc::clone(&ctx.connections).acquire_owned() => match permit {
                Ok(permit) => permit,
                Err(_) => return,
            },
            () = stopped(&mut ctx.stop) => return,
        };
        let (stream, peer) = tokio::select! {
            accepted = listener.accept() => match accepted {
                Ok(accepted) => accepted,
                Err(error) => {
                    // Out of file descriptors and the like: back off briefly rather
                    // than spin.
                    tracing::warn!(upstream = %current.load().name(), %error, "accept failed");
                    tokio::time::sleep(Duration::from_millis(50)).await;
                    continue;
                }
            },
            () = stopped(&mut ctx.stop) => return,
        };
        let _ = stream.set_nodelay(true);
        let current = Arc::clone(current);
        let service = service_fn(move |req| {
            let upstream = current.load_full();
            async move { Ok::<_, Infallible>(handle(upstream, req).await) }
        });
        let builder = Arc::clone(&builder);
        let watcher = graceful.watcher();
        tokio::spawn(async move {
            let connection = builder
                .serve_connection(TokioIo::new(stream), service)
                .into_owned();
            if let Err(error) = watcher.watch(connection).await {
                tracing::debug!(%peer, %error, "client connection ended with an error");
            }
            drop(permit);
        });
    }
}

/// Completes once the stop flag is set (or its sender is gone).
async fn stopped(stop: &mut watch::Receiver<bool>) {
    let _ = stop.wait_for(|stop| *stop).await;
}
