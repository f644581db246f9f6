//! The accept loop of one upstream's listener: HTTP/1.1 and h2c from clients, the
//! connection limit shared by all listeners, and graceful draining.

use std::convert::Infallible;
use std::sync::Arc;
use std::time::Duration;

use hyper::service::service_fn;
use hyper_util::rt::{TokioExecutor, TokioIo, TokioTimer};
use hyper_util::server::conn::auto;
use hyper_util::server::graceful::GracefulShutdown;
use tokio::net::TcpListener;
use tokio::sync::{Semaphore, watch};

use super::service::handle;
use crate::upstream::Upstream;

/// What every listener shares.
#[derive(Clone)]
pub struct ListenerContext {
    /// One permit per open client connection (`server.max_connections`).
    pub connections: Arc<Semaphore>,
    pub header_read_timeout: Duration,
    /// Drains watched connections on shutdown.
    pub graceful: Arc<GracefulShutdown>,
    /// Turns true when the listeners must stop accepting.
    pub stop: watch::Receiver<bool>,
}

/// Accepts connections for `upstream` until told to stop.
pub async fn serve(listener: TcpListener, upstream: Arc<Upstream>, mut ctx: ListenerContext) {
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
                    tracing::warn!(upstream = %upstream.name(), %error, "accept failed");
                    tokio::time::sleep(Duration::from_millis(50)).await;
                    continue;
                }
            },
            () = stopped(&mut ctx.stop) => return,
        };
        let _ = stream.set_nodelay(true);
        let service_upstream = Arc::clone(&upstream);
        let service = service_fn(move |req| {
            let upstream = Arc::clone(&service_upstream);
            async move { Ok::<_, Infallible>(handle(upstream, req).await) }
        });
        let builder = Arc::clone(&builder);
        let watcher = ctx.graceful.watcher();
        let name = upstream.settings.name.clone();
        tokio::spawn(async move {
            let connection = builder
                .serve_connection(TokioIo::new(stream), service)
                .into_owned();
            if let Err(error) = watcher.watch(connection).await {
                tracing::debug!(upstream = %name, %peer, %error, "client connection ended with an error");
            }
            drop(permit);
        });
    }
}

/// Completes once the stop flag is set (or its sender is gone).
async fn stopped(stop: &mut watch::Receiver<bool>) {
    let _ = stop.wait_for(|stop| *stop).await;
}
