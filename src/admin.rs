//! The admin server: `/metrics`, `/healthz`, `/readyz`, `/status`, the status page at
//! `/` (with the [`history`] it charts), and with `server.admin_allow_mutations` the
//! `POST /upstreams/{name}/reset` endpoint; served with a connection limit and
//! deadlines of its own.

pub mod history;

use std::future::Future;
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::{Arc, PoisonError, RwLock};
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use axum::Json;
use axum::Router;
use axum::extract::{Path, State};
use axum::http::{Request, StatusCode, header};
use axum::response::{IntoResponse, Response};
use axum::routing::{get, post};
use hyper::body::Incoming;
use hyper::service::service_fn;
use hyper_util::rt::TokioIo;
use hyper_util::service::TowerToHyperService;
use serde_json::{Map, Value, json};
use tokio::net::TcpListener;
use tokio::sync::watch;

use crate::admin::history::{History, Sample};
use crate::fleet::{Decision, Fleet};
use crate::lane::Lane;
use crate::metrics::{Metrics, Outcome, RetryReason};
use crate::proxy::{Acceptor, Limits, Tracker, connection_builder, drive};
use crate::throttle::Signal;
use crate::upstream::Upstream;

/// The running upstreams in config order; a reload replaces the list.
pub type Upstreams = Arc<RwLock<Vec<Arc<Upstream>>>>;

/// What the admin handlers read.
pub struct AdminState {
    pub metrics: Arc<Metrics>,
    pub upstreams: Upstreams,
    /// False until every listener is bound, and again while draining.
    pub ready: Arc<AtomicBool>,
    /// The last minutes of every upstream, filled by [`sample_history`].
    pub history: History,
    /// The fleet this sidecar belongs to, with `[fleet]`.
    pub fleet: Option<Arc<Fleet>>,
}

impl AdminState {
    /// The upstreams as of now.
    fn upstreams(&self) -> Vec<Arc<Upstream>> {
        self.upstreams
            .read()
            .unwrap_or_else(PoisonError::into_inner)
            .clone()
    }
}

/// The status page: one self-contained file that polls `/status`.
const STATUS_PAGE: &str = include_str!("admin/status.html");

/// The admin routes.
pub fn router(state: Arc<AdminState>, allow_mutations: bool) -> Router {
    let router = Router::new()
        .route("/", get(page))
        .route("/metrics", get(metrics))
        .route("/healthz", get(|| async { "ok\n" }))
        .route("/readyz", get(readyz))
        .route("/status", get(status));
    let router = if allow_mutations {
        router.route("/upstreams/{name}/reset", post(reset))
    } else {
        router.route("/upstreams/{name}/reset", post(reset_disabled))
    };
    router.with_state(state)
}

/// Samples every upstream once a second into the state's history, for the status
/// page's charts; runs until dropped or aborted.
pub async fn sample_history(state: Arc<AdminState>) {
    let mut tick = tokio::time::interval(Duration::from_secs(1));
    tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Skip);
    loop {
        tick.tick().await;
        let samples: Vec<(String, Sample)> = state
            .upstreams()
            .iter()
            .map(|u| {
                // Also where idle lanes forget their throttles and are dropped when
                // nothing scrapes.
                u.refresh_gauges();
                let throttles_total = Signal::ALL
                    .iter()
                    .map(|s| u.metrics.throttle(*s).get())
                    .sum();
                let sample = Sample {
                    interval_ms: u.interval().as_secs_f64() * 1e3,
                    waiting: u.waiting() as u64,
                    throttles_total,
                };
                (u.name().to_string(), sample)
            })
            .collect();
        let now = SystemTime::now()
            .duration_since(UNIX_EPOCH)
            .unwrap_or_default()
            .as_secs_f64();
        state.history.record(now, &samples);
    }
}

/// The page with the current status filled in, so it shows every upstream before its
/// first refresh (and without JavaScript, in the page source).
async fn page(State(state): State<Arc<AdminState>>) -> Response {
    // "</" inside a script element would end it early; JSON allows "<\/" for it.
    let initial = status_json(&state).to_string().replace("</", "<\\/");
    (
        [(header::CONTENT_TYPE, "text/html; charset=utf-8")],
        STATUS_PAGE.replacen("null/*initial status*/", &initial, 1),
    )
        .into_response()
}

async fn metrics(State(state): State<Arc<AdminState>>) -> Response {
    for upstream in state.upstreams() {
        upstream.refresh_gauges();
    }
    match state.metrics.render() {
        Ok(text) => (
            [(
                header::CONTENT_TYPE,
                "text/plain; version=0.0.4; charset=utf-8",
            )],
            text,
        )
            .into_response(),
        Err(error) => {
            tracing::error!(%error, "cannot render metrics");
            (
                StatusCode::INTERNAL_SERVER_ERROR,
                format!("cannot render metrics: {error}\n"),
            )
                .into_response()
        }
    }
}

async fn readyz(State(state): State<Arc<AdminState>>) -> (StatusCode, &'static str) {
    if state.ready.load(Ordering::Relaxed) {
        (StatusCode::OK, "ready\n")
    } else {
        (StatusCode::SERVICE_UNAVAILABLE, "not ready\n")
    }
}

async fn status(State(state): State<Arc<AdminState>>) -> Json<Value> {
    Json(status_json(&state))
}

/// Every upstream as `/status` lists it, with its history and effective config.
fn status_json(state: &AdminState) -> Value {
    let upstreams: Vec<Value> = state
        .upstreams()
        .iter()
        .map(|u| {
            u.refresh_gauges();
            let mut entry = describe(u);
            entry["history"] = state.history.to_json(u.name());
            entry["config"] = json!(shown_config(&u.settings));
            entry
        })
        .collect();
    let mut status = json!({ "version": env!("CARGO_PKG_VERSION"), "upstreams": upstreams });
    if let Some(fleet) = &state.fleet {
        status["fleet"] = json!({ "connected": fleet.is_connected(), "member": fleet.member() });
        status["fleet"]["why_alone"] = json!(fleet.fault());
        status["fleet"]["settings_differ"] = json!(fleet.settings_differ());
    }
    status
}

async fn reset(State(state): State<Arc<AdminState>>, Path(name): Path<String>) -> Response {
    match state.upstreams().iter().find(|u| u.name() == name) {
        Some(upstream) => {
            upstream.reset();
            tracing::info!(upstream = %name, "interval reset by the admin endpoint");
            Json(describe(upstream)).into_response()
        }
        None => (
            StatusCode::NOT_FOUND,
            format!("no upstream named \"{name}\"\n"),
        )
            .into_response(),
    }
}

async fn reset_disabled() -> (StatusCode, &'static str) {
    (
        StatusCode::FORBIDDEN,
        "resetting an upstream is turned off; set admin_allow_mutations = true under [server] in the config to allow it\n",
    )
}

fn describe(u: &Upstream) -> Value {
    let m = &u.metrics;
    let s = &u.settings;
    let by = |pairs: Vec<(&str, u64)>| -> Value {
        Value::Object(
            pairs
                .into_iter()
                .map(|(k, v)| (k.to_string(), json!(v)))
                .collect::<Map<_, _>>(),
        )
    };
    json!({
        "name": s.name,
        "listen": u.listen.to_string(),
        "url": s.url.origin(),
        "preset": s.preset.name(),
        "strategy": s.sleeper.strategy.name(),
        "mode": s.sleeper.mode.name(),
        "interval_ms": u.interval().as_secs_f64() * 1e3,
        "paused_until": u.paused_until().map(httpdate::fmt_http_date),
        "pause_capped": u.capped_hint().map(|c| json!({
            "header": c.header.as_str(),
            "asked_s": c.asked.as_secs_f64(),
        })),
        "rate_limit_floor": u.rate_limit_floor().map(|(spacing, until)| json!({
            "spacing_ms": spacing.as_secs_f64() * 1e3,
            "until": httpdate::fmt_http_date(until),
        })),
        "waiting": u.waiting(),
        "in_flight": m.in_flight.get(),
        "requests": by(Outcome::ALL.iter().map(|o| (o.as_str(), m.request(*o).get())).collect()),
        "throttles": by(Signal::ALL.iter().map(|s| (s.as_str(), m.throttle(*s).get())).collect()),
        "interval_increases": m.increases.get(),
        "interval_decreases": m.decreases.get(),
        "sleeper_invocations": m.invocations.get(),
        "sleeps": m.sleeps.get(),
        "sleep_seconds": m.sleep_seconds.get(),
        "retries": by(RetryReason::ALL.iter().map(|r| (r.as_str(), m.retry(*r).get())).collect()),
        "retry_budget_exhausted": m.budget_exhausted.get(),
        "connect_failures": m.connect_failures.get(),
        "lanes": lanes(u),
        "fleet": fleet_view(u.lanes.default_lane()),
    })
}

/// Every lane but `default` (whose state is the upstream's own above): interval,
/// queue, pause, throttles and the last throttle's reason and resource.
fn lanes(u: &Upstream) -> Value {
    let lanes: Vec<Value> = u
        .lanes
        .all()
        .iter()
        .skip(1)
        .map(|lane| {
            let last = lane.last_throttle();
            let throttles: Map<_, _> = Signal::ALL
                .iter()
                .map(|s| {
                    (
                        s.as_str().to_string(),
                        json!(lane.metrics.throttle(*s).get()),
                    )
                })
                .collect();
            json!({
                "name": lane.name(),
                "interval_ms": lane.interval().as_secs_f64() * 1e3,
                "waiting": lane.pacer.waiting(),
                "paused_until": u.paused_until_in(lane).map(httpdate::fmt_http_date),
                "metrics_name": if lane.named() { lane.name() } else { "other" },
                "dispatches": lane.named().then(|| lane.metrics.dispatches.get()),
                "throttles": lane.named().then_some(Value::Object(throttles)),
                "last_throttle": last.map(|t| json!({
                    "reason": t.reason,
                    "resource": t.resource,
                    "at": httpdate::fmt_http_date(t.at),
                })),
                "fleet": fleet_view(lane),
            })
        })
        .collect();
    Value::Array(lanes)
}

/// What the fleet last decided for a lane: members, this sidecar's share, the fleet's
/// rate and interval; null without `[fleet]` or before the first sync.
fn fleet_view(lane: &Lane) -> Value {
    let decision: Option<Decision> = lane.fleet().and_then(|link| link.last());
    json!(decision.map(|d| json!({
        "members": d.members,
        "share": d.share,
        "rate": d.rate,
        "interval_ms": d.interval.as_secs_f64() * 1e3,
        "epoch": d.epoch,
    })))
}

/// How the admin server bounds its clients.
#[derive(Clone, Copy, Debug)]
pub struct AdminLimits {
    /// Connections open at once; one more is closed as soon as it is accepted, so
    /// silent connections cannot use up the process's file descriptors.
    pub max_connections: usize,
    /// Deadlines of each connection.
    pub connection: Limits,
}

/// Serves `app` on `listener` until `shutdown` completes, then lets open requests
/// finish for up to a second.
pub async fn serve(
    listener: TcpListener,
    app: Router,
    limits: AdminLimits,
    shutdown: impl Future<Output = ()>,
) {
    let builder = Arc::new(connection_builder(&limits.connection));
    let open = Arc::new(AtomicUsize::new(0));
    let (drain, draining) = watch::channel(false);
    let mut acceptor = Acceptor::new("admin");
    tokio::pin!(shutdown);
    loop {
        let stream = tokio::select! {
            stream = acceptor.accept(&listener) => stream,
            () = &mut shutdown => break,
        };
        if open.fetch_add(1, Ordering::Relaxed) >= limits.max_connections {
            open.fetch_sub(1, Ordering::Relaxed);
            continue;
        }
        let tracker = Tracker::new(&limits.connection);
        let service = {
            let tracker = Arc::clone(&tracker);
            let app = TowerToHyperService::new(app.clone());
            service_fn(move |req: Request<Incoming>| {
                let guard = tracker.begin();
                let call = hyper::service::Service::call(&app, req);
                async move {
                    let response = call.await;
                    guard.done();
                    response
                }
            })
        };
        let builder = Arc::clone(&builder);
        let open = Arc::clone(&open);
        let draining = draining.clone();
        tokio::spawn(async move {
            let connection = builder
                .serve_connection(TokioIo::new(stream), service)
                .into_owned();
            tokio::pin!(connection);
            let mut draining = draining;
            let limits = &limits.connection;
            let _ = drive(connection, &tracker, limits, &mut draining, false).await;
            open.fetch_sub(1, Ordering::Relaxed);
        });
    }
    drop(listener);
    drop(draining);
    let _ = drain.send(true);
    let _ = tokio::time::timeout(Duration::from_secs(1), drain.closed()).await;
}

/// The upstream's effective config for `/status`: its URL's path can carry a token
/// (a webhook path, a key), so only the scheme, host and port are shown.
fn shown_config(settings: &crate::config::UpstreamSettings) -> String {
    let url = settings.url.to_string();
    let shown = if settings.url.base_path.is_empty() {
        url.clone()
    } else {
        format!("{}/...", settings.url.origin())
    };
    settings
        .to_toml()
        .replace(&format!("url = \"{url}\""), &format!("url = \"{shown}\""))
}
