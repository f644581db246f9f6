//! Starting, reloading and stopping: bind every listener and the admin server, serve
//! until the shutdown future completes, apply reloads in between, then drain within
//! `shutdown_grace`.
//!
//! A listener is identified by its configured address, so a reload that keeps an
//! address keeps the socket: clients see no refused connection. The upstream behind a
//! listener is swapped per request (see `proxy/listener.rs`); an upstream whose
//! settings did not change is kept whole, with its learned interval and queue.

mod reload;
mod workers;

use std::future::Future;
use std::net::SocketAddr;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, PoisonError, RwLock, Weak};
use std::time::Duration;

use arc_swap::ArcSwap;
use tokio::net::TcpListener;
use tokio::sync::{Mutex, Semaphore, watch};
use tokio::task::JoinHandle;

use crate::admin::{self, AdminLimits, AdminState, Upstreams};
use crate::clock::Clock;
use crate::config::{Config, RuntimeShape, ServerSettings, UpstreamSettings};
use crate::fleet::Fleet;
use crate::metrics::Metrics;
use crate::proxy::{self, ClientError, Current, Limits, ListenerContext};
use crate::sigv4::{CredentialsError, SigningEnv};
use crate::upstream::{Observer, Upstream};

pub use reload::{ReloadError, Reloaded};
use workers::{Workers, bind_reuseport};

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
    #[error("upstream \"{upstream}\": [upstream.sigv4]: {source}")]
    Credentials {
        upstream: String,
        source: CredentialsError,
    },
    #[error("cannot set up metrics: {0}")]
    Metrics(#[from] prometheus::Error),
    #[error("cannot start the per-core runtimes: {0}")]
    Workers(std::io::Error),
}

/// A proxy with every socket bound, ready to run.
pub struct Server {
    live: Arc<Live>,
    admin: TcpListener,
    admin_addr: SocketAddr,
}

/// Reloads a running server; cheap to clone.
#[derive(Clone)]
pub struct Handle {
    live: Arc<Live>,
}

/// What the running server, its reloads and its admin endpoints share.
struct Live {
    metrics: Arc<Metrics>,
    observer: Option<Observer>,
    signing: SigningEnv,
    /// One permit per open client connection, over every listener.
    connections: Arc<Semaphore>,
    ready: Arc<AtomicBool>,
    /// The upstreams in config order, as the admin endpoints list them.
    upstreams: Upstreams,
    /// Reloads and the shutdown take turns here.
    state: Mutex<State>,
    /// The per-core runtimes the accept loops run on; `None`: the caller's runtime.
    workers: Option<Workers>,
    /// The fleet this sidecar belongs to, with `[fleet]`; kept over reloads.
    fleet: Option<Arc<Fleet>>,
}

struct State {
    config: Config,
    listeners: Vec<Listening>,
    /// Listeners a reload closed, finishing their open connections; and upstreams a
    /// reload replaced, possibly still holding waiting requests. The shutdown drains
    /// both.
    retired: Vec<JoinHandle<()>>,
    replaced: Vec<Weak<Upstream>>,
    /// Set once `run` has started the accept loops; reloads before that only bind.
    started: bool,
    draining: bool,
}

/// One bound listener and the upstream it currently serves.
struct Listening {
    configured: SocketAddr,
    bound: SocketAddr,
    current: Current,
    stop: watch::Sender<bool>,
    /// The sockets until `run` starts the accept loops (one per per-core runtime, or
    /// one); then the loops' tasks.
    sockets: Vec<TcpListener>,
    tasks: Vec<JoinHandle<()>>,
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
        Server::bind_signing(config, observer, SigningEnv::default()).await
    }

    /// As [`Server::bind_with`], with the credentials and clock that upstreams with
    /// `[upstream.sigv4]` sign with (tests; the default is the AWS default chain).
    pub async fn bind_signing(
        config: Config,
        observer: Option<Observer>,
        signing: SigningEnv,
    ) -> Result<Server, StartError> {
        let metrics = Arc::new(Metrics::new()?);
        let admin = bind(config.server.admin_listen, "the admin server").await?;
        let admin_addr = local_addr(&admin, config.server.admin_listen);
        let workers = match config.server.runtime {
            RuntimeShape::MultiThread => None,
            RuntimeShape::PerCore => Some(Workers::start().map_err(StartError::Workers)?),
        };
        let copies = workers.as_ref().map_or(1, Workers::count);
        let fleet = config
            .fleet
            .clone()
            .map(|settings| Arc::new(Fleet::start(settings, &metrics, Clock::Tokio)));
        let mut listeners = Vec::with_capacity(config.upstreams.len());
        let mut upstreams = Vec::with_capacity(config.upstreams.len());
        for settings in &config.upstreams {
            let what = format!("upstream \"{}\"", settings.name);
            let sockets = bind_listener(settings.listen, &what, copies).await?;
            let bound = local_addr(&sockets[0], settings.listen);
            let upstream = build(
                settings,
                bound,
                &metrics,
                &observer,
                &signing,
                fleet.as_ref(),
            )
            .await?;
            listeners.push(Listening::new(
                settings.listen,
                bound,
                Arc::clone(&upstream),
                sockets,
            ));
            upstreams.push(upstream);
        }
        let live = Live {
            metrics,
            observer,
            signing,
            connections: Arc::new(Semaphore::new(config.server.max_connections)),
            ready: Arc::new(AtomicBool::new(false)),
            upstreams: Arc::new(RwLock::new(upstreams)),
            state: Mutex::new(State {
                config,
                listeners,
                retired: Vec::new(),
                replaced: Vec::new(),
                started: false,
                draining: false,
            }),
            workers,
            fleet,
        };
        Ok(Server {
            live: Arc::new(live),
            admin,
            admin_addr,
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
        self.live.upstream(name)
    }

    /// A handle that reloads the server while it runs.
    pub fn handle(&self) -> Handle {
        Handle {
            live: Arc::clone(&self.live),
        }
    }

    /// Serves until `shutdown` completes, then reports not-ready, stops accepting and
    /// lets open and waiting requests finish for up to `shutdown_grace`; a request
    /// whose slot lies past that is shed at once.
    pub async fn run(self, shutdown: impl Future<Output = ()>) -> std::io::Result<()> {
        let live = self.live;
        let (allow_mutations, grace, admin_limits) = {
            let mut state = live.state.lock().await;
            let server = state.config.server.clone();
            for listening in &mut state.listeners {
                listening.start(live.context(&server), live.workers.as_ref());
            }
            state.started = true;
            (
                server.admin_allow_mutations,
                server.shutdown_grace,
                admin_limits(&server),
            )
        };
        for upstream in live.all() {
            tracing::info!(
                upstream = %upstream.name(),
                listen = %upstream.listen,
                url = %upstream.settings.url.origin(),
                strategy = upstream.settings.sleeper.strategy.name(),
                "forwarding"
            );
        }
        let state = Arc::new(AdminState {
            metrics: Arc::clone(&live.metrics),
            upstreams: Arc::clone(&live.upstreams),
            ready: Arc::clone(&live.ready),
            history: Default::default(),
            fleet: live.fleet.clone(),
        });
        let sampler = tokio::spawn(admin::sample_history(Arc::clone(&state)));
        let (admin_done, admin_stop) = tokio::sync::oneshot::channel::<()>();
        let app = admin::router(state, allow_mutations);
        let mut admin = tokio::spawn(admin::serve(self.admin, app, admin_limits, async move {
            let _ = admin_stop.await;
        }));
        live.ready.store(true, Ordering::Relaxed);
        tracing::info!(admin = %self.admin_addr, "easeoff ready");

        // The admin server only ends early if its task fails; then the proxy stops too.
        let admin_ended = tokio::select! {
            () = shutdown => None,
            ended = &mut admin => Some(ended),
        };
        live.ready.store(false, Ordering::Relaxed);
        // The others take this member's share at their next sync, not after member_ttl.
        if let Some(fleet) = &live.fleet {
            fleet.leave().await;
        }
        live.drain(grace).await;
        if let Some(workers) = &live.workers {
            workers.stop();
        }
        let ended = match admin_ended {
            Some(ended) => ended,
            None => {
                let _ = admin_done.send(());
                admin.await
            }
        };
        sampler.abort();
        ended.map_err(std::io::Error::other)
    }
}

impl Handle {
    /// Applies a new configuration: unchanged upstreams keep their state, changed ones
    /// are rebuilt, listeners are bound and closed as needed. On any error nothing
    /// changes. Counted in `easeoff_config_reloads_total` either way.
    pub async fn reload(&self, config: Config) -> Result<Reloaded, ReloadError> {
        let result = self.live.reload(config).await;
        self.live.metrics.config_reload(result.is_ok());
        result
    }

    /// Counts a reload that failed before it reached the server (a broken file).
    pub fn reload_failed(&self) {
        self.live.metrics.config_reload(false);
    }
}

impl Live {
    fn context(&self, server: &ServerSettings) -> ListenerContext {
        ListenerContext {
            connections: Arc::clone(&self.connections),
            limits: Limits {
                header_read_timeout: server.header_read_timeout,
                keepalive_timeout: server.keepalive_timeout,
                http2_keepalive_interval: server.http2_keepalive_interval,
                http2_max_concurrent_streams: server.http2_max_concurrent_streams,
                http2_max_resets: server.http2_max_resets,
                http2_reset_window: server.http2_reset_window,
            },
            body_idle_timeout: server.body_idle_timeout,
            grace: server.shutdown_grace,
            // Replaced by each listener's own.
            stop: watch::channel(false).1,
        }
    }

    fn all(&self) -> Vec<Arc<Upstream>> {
        self.upstreams
            .read()
            .unwrap_or_else(PoisonError::into_inner)
            .clone()
    }

    fn upstream(&self, name: &str) -> Option<Arc<Upstream>> {
        self.all().into_iter().find(|u| u.name() == name)
    }

    /// Stops every listener and waits for their connections, the retired ones'
    /// included. Waiting requests are given until shortly before the grace ends, so
    /// the shed answers of those that cannot make it still reach their clients.
    async fn drain(&self, grace: Duration) {
        let mut state = self.state.lock().await;
        state.draining = true;
        let margin = (grace / 10).min(Duration::from_secs(1));
        let within = grace.saturating_sub(margin);
        let replaced = state.replaced.iter().filter_map(Weak::upgrade);
        for upstream in self.all().into_iter().chain(replaced) {
            upstream.drain(within);
        }
        let waiting: usize = self.all().iter().map(|u| u.waiting()).sum();
        tracing::info!(waiting, grace = ?grace, "draining");
        let mut tasks = std::mem::take(&mut state.retired);
        for listening in &mut state.listeners {
            let _ = listening.stop.send(true);
            tasks.append(&mut listening.tasks);
        }
        for task in tasks {
            let _ = task.await;
        }
        tracing::info!("drained");
    }
}

impl Listening {
    fn new(
        configured: SocketAddr,
        bound: SocketAddr,
        upstream: Arc<Upstream>,
        sockets: Vec<TcpListener>,
    ) -> Listening {
        Listening {
            configured,
            bound,
            current: Arc::new(ArcSwap::new(upstream)),
            stop: watch::channel(false).0,
            sockets,
            tasks: Vec::new(),
        }
    }

    /// Starts the accept loops: on the caller's runtime, or one on each per-core
    /// runtime.
    fn start(&mut self, mut context: ListenerContext, workers: Option<&Workers>) {
        context.stop = self.stop.subscribe();
        for (index, socket) in std::mem::take(&mut self.sockets).into_iter().enumerate() {
            let current = Arc::clone(&self.current);
            let context = context.clone();
            let Some(workers) = workers else {
                self.tasks
                    .push(tokio::spawn(proxy::serve(socket, current, context)));
                continue;
            };
            // A socket is registered with the runtime that polls it: hand it over
            // as a plain socket and register it there.
            let socket = match socket.into_std() {
                Ok(socket) => socket,
                Err(error) => {
                    tracing::error!(listen = %self.bound, %error, "cannot hand a listener to its runtime");
                    continue;
                }
            };
            let bound = self.bound;
            self.tasks.push(workers.spawn(index, async move {
                match TcpListener::from_std(socket) {
                    Ok(socket) => proxy::serve(socket, current, context).await,
                    Err(error) => {
                        tracing::error!(listen = %bound, %error, "cannot listen on a per-core runtime");
                    }
                }
            }));
        }
    }

    /// Stops accepting; open connections finish within the grace. Returns the tasks
    /// to wait for.
    fn close(mut self) -> Vec<JoinHandle<()>> {
        let _ = self.stop.send(true);
        std::mem::take(&mut self.tasks)
    }
}

/// The admin server's bounds: few connections, short deadlines, no HTTP/2 resets to
/// speak of.
fn admin_limits(server: &ServerSettings) -> AdminLimits {
    AdminLimits {
        max_connections: server.admin_max_connections,
        connection: Limits {
            header_read_timeout: server.admin_timeout,
            keepalive_timeout: server.admin_timeout,
            http2_keepalive_interval: server.admin_timeout,
            http2_max_concurrent_streams: 16,
            http2_max_resets: 16,
            http2_reset_window: Duration::from_secs(10),
        },
    }
}

/// One upstream's run-time state, its client built from `settings`; with
/// `[upstream.sigv4]`, its signer, whose credentials must be found now.
async fn build(
    settings: &UpstreamSettings,
    bound: SocketAddr,
    metrics: &Metrics,
    observer: &Option<Observer>,
    signing: &SigningEnv,
    fleet: Option<&Arc<Fleet>>,
) -> Result<Arc<Upstream>, StartError> {
    let signer = match &settings.sigv4 {
        Some(sigv4) => {
            Some(
                signing
                    .signer(sigv4)
                    .await
                    .map_err(|source| StartError::Credentials {
                        upstream: settings.name.clone(),
                        source,
                    })?,
            )
        }
        None => None,
    };
    let upstream = Upstream::new(settings.clone(), bound, metrics, observer.clone(), signer)
        .map(Arc::new)
        .map_err(|source| StartError::Client {
            upstream: settings.name.clone(),
            source,
        })?;
    if let Some(fleet) = fleet {
        fleet.fingerprint(&settings.name, crate::fleet::fingerprint(settings));
        upstream.join_fleet(Arc::clone(fleet));
    }
    Ok(upstream)
}

/// A listener's sockets: one, or `copies` sharing the address with `SO_REUSEPORT`.
async fn bind_listener(
    addr: SocketAddr,
    what: &str,
    copies: usize,
) -> Result<Vec<TcpListener>, StartError> {
    if copies <= 1 {
        return Ok(vec![bind(addr, what).await?]);
    }
    bind_reuseport(addr, copies).map_err(|source| StartError::Bind {
        what: what.to_string(),
        addr,
        source,
    })
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
