//! Starting and stopping: bind every listener and the admin server, serve until the
//! shutdown future completes, then drain within `shutdown_grace`.

use std::future::Future;
use std::net::SocketAddr;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};

use hyper_util::server::graceful::GracefulShutdown;
use tokio::net::TcpListener;
use tokio::sync::{Semaphore, watch};
use tokio::task::JoinSet;

use crate::admin::{self, AdminState};
use crate::config::Config;
use crate::metrics::Metrics;
use crate::proxy::{self, ClientError, ListenerContext};
use crate::upstream::{Observer, Upstream};

/// Why the proxy could not start.
#[derive(Debug, thiserror::Error)]
pub enum StartError {
    #[error("cannot listen on {addr} for {what}: {source}")]
    Bind {
        what: String,
        addr: SocketAddr,
        source: std::io::Error,
    },
    #[error("upstream \"{upstream}\": {source}")]
    Client {
        upstream: String,
        source: ClientError,
    },
    #[error("cannot set up metrics: {0}")]
    Metrics(#[from] prometheus::Error),
}

/// A proxy with every socket bound, ready to run.
pub struct Server {
    config: Config,
    metrics: Arc<Metrics>,
    upstreams: Vec<(Arc<Upstream>, TcpListener)>,
    admin: TcpListener,
    admin_addr: SocketAddr,
    ready: Arc<AtomicBool>,
}

impl Server {
    /// Binds the admin address and every upstream's listener.
    pub async fn bind(config: Config) -> Result<Server, StartError> {
        Server::bind_with(config, None).await
    }

    /// As [`Server::bind`], with an observer told of every attempt of every upstream.
    pub async fn bind_with(
        config: Config,
        observer: Option<Observer>,
    ) -> Result<Server, StartError> {
        let metrics = Arc::new(Metrics::new()?);
        let admin = bind(config.server.admin_listen, "the admin server").await?;
        let admin_addr = local_addr(&admin, config.server.admin_listen);
        let mut upstreams = Vec::with_capacity(config.upstreams.len());
        for settings in &config.upstreams {
            let what = format!("upstream \"{}\"", settings.name);
            let listener = bind(settings.listen, &what).await?;
            let listen = local_addr(&listener, settings.listen);
            let upstream = Upstream::new(settings.clone(), listen, &metrics, observer.clone())
                .map_err(|source| StartError::Client {
                    upstream: settings.name.clone(),
                    source,
                })?;
            upstreams.push((Arc::new(upstream), listener));
        }
        Ok(Server {
            config,
            metrics,
            upstreams,
            admin,
            admin_addr,
            ready: Arc::new(AtomicBool::new(false)),
        })
    }

    /// Where the admin server listens.
    pub fn admin_addr(&self) -> SocketAddr {
        self.admin_addr
    }

    /// Where the named upstream's listener listens.
    pub fn listen_addr(&self, upstream: &str) -> Option<SocketAddr> {
        self.upstream(upstream).map(|u| u.listen)
    }

    /// The named upstream's run-time state.
    pub fn upstream(&self, name: &str) -> Option<Arc<Upstream>> {
        self.upstreams
            .iter()
            .find(|(u, _)| u.name() == name)
            .map(|(u, _)| Arc::clone(u))
    }

    /// Serves until `shutdown` completes, then stops accepting, reports not-ready and
    /// lets open requests finish for up to `shutdown_grace`.
    pub async fn run(self, shutdown: impl Future<Output = ()>) -> std::io::Result<()> {
        let server = &self.config.server;
        let graceful = Arc::new(GracefulShutdown::new());
        let (stop, stopped) = watch::channel(false);
        let context = ListenerContext {
            connections: Arc::new(Semaphore::new(server.max_connections)),
            header_read_timeout: server.header_read_timeout,
            graceful: Arc::clone(&graceful),
            stop: stopped,
        };
        let mut listeners = JoinSet::new();
        let mut all = Vec::with_capacity(self.upstreams.len());
        for (upstream, listener) in self.upstreams {
            tracing::info!(
                upstream = %upstream.name(),
                listen = %upstream.listen,
                url = %upstream.settings.url,
                strategy = upstream.settings.sleeper.strategy.name(),
                "forwarding"
            );
            all.push(Arc::clone(&upstream));
            listeners.spawn(proxy::serve(listener, upstream, context.clone()));
        }
        drop(context);

        let state = Arc::new(AdminState {
            metrics: Arc::clone(&self.metrics),
            upstreams: all,
            ready: Arc::clone(&self.ready),
        });
        let (admin_done, admin_stop) = tokio::sync::oneshot::channel::<()>();
        let app = admin::router(state, server.admin_allow_mutations);
        let mut admin = tokio::spawn(
            axum::serve(self.admin, app)
                .with_graceful_shutdown(async move {
                    let _ = admin_stop.await;
                })
                .into_future(),
        );
        self.ready.store(true, Ordering::Relaxed);
        tracing::info!(admin = %self.admin_addr, "easeoff ready");

        // The admin server only ends early if it fails; then the proxy stops too.
        let admin_ended = tokio::select! {
            () = shutdown => None,
            ended = &mut admin => Some(ended),
        };
        self.ready.store(false, Ordering::Relaxed);
        let _ = stop.send(true);
        while listeners.join_next().await.is_some() {}
        tracing::info!(open_connections = graceful.count(), grace = ?server.shutdown_grace, "draining");
        // The accept loops have ended, so this is the last reference.
        match Arc::try_unwrap(graceful) {
            Ok(graceful) => {
                match tokio::time::timeout(server.shutdown_grace, graceful.shutdown()).await {
                    Ok(()) => tracing::info!("drained"),
                    Err(_) => tracing::warn!("shutdown grace expired with connections still open"),
                }
            }
            Err(_) => tracing::warn!("cannot wait for open connections to finish"),
        }
        let ended = match admin_ended {
            Some(ended) => ended,
            None => {
                let _ = admin_done.send(());
                admin.await
            }
        };
        ended.map_err(std::io::Error::other)?
    }
}

async fn bind(addr: SocketAddr, what: &str) -> Result<TcpListener, StartError> {
    TcpListener::bind(addr)
        .await
        .map_err(|source| StartError::Bind {
            what: what.to_string(),
            addr,
            source,
        })
}

fn local_addr(listener: &TcpListener, configured: SocketAddr) -> SocketAddr {
    listener.local_addr().unwrap_or(configured)
}
