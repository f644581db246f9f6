//! The admin server: `/metrics`, `/healthz`, `/readyz`, `/status`, the status page at
//! `/` (with the [`history`] it charts), and with `server.admin_allow_mutations` the
//! `POST /upstreams/{name}/reset` endpoint; served with a connection limit and
//! deadlines of its own.

pub mod document;
pub mod history;
mod words;

use std::collections::BTreeMap;
use std::future::Future;
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::{Arc, PoisonError, RwLock};
use std::time::{Duration, UNIX_EPOCH};

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
use tokio::net::TcpListener;
use tokio::sync::watch;

use crate::admin::document::{
    CapStatus, CappedStatus, CostStatus, FleetDecision, FleetStatus, FloorStatus, HistoryStatus,
    LaneStatus, ObservedStatus, Status, TenantStatus, ThrottleStatus, UpstreamStatus,
};
use crate::admin::history::{History, Key, Sample};
use crate::clock::Clock;
use crate::concurrency::Why;
use crate::fleet::{Decision, Fleet};
use crate::flights::Flights;
use crate::lane::Lane;
use crate::metrics::{Metrics, Outcome, RetryReason};
use crate::proxy::{Acceptor, Limits, Tracker, connection_builder, drive};
use crate::sleeper::Mode;
use crate::tenants::{Tenant, TenantFigures};
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

/// Samples every upstream, and each of its lanes with series of its own, once a
/// second into the state's history, for the status page's charts; runs until dropped
/// or aborted.
pub async fn sample_history(state: Arc<AdminState>) {
    let mut tick = tokio::time::interval(Duration::from_secs(1));
    tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Skip);
    loop {
        tick.tick().await;
        let mut samples = Vec::new();
        for u in state.upstreams() {
            // Also where idle lanes forget their throttles and are dropped when
            // nothing scrapes.
            u.refresh_gauges();
            samples.extend(samples_of(&u));
        }
        let now = Clock::Tokio
            .wall()
            .duration_since(UNIX_EPOCH)
            .unwrap_or_default()
            .as_secs_f64();
        state.history.record(now, &samples);
    }
}

/// One sample of an upstream (its headline interval) and of each lane with series of
/// its own (so the lanes kept are bounded by `metrics_lanes`).
fn samples_of(u: &Upstream) -> Vec<(Key, Sample)> {
    let throttles_total = Signal::ALL
        .iter()
        .map(|s| u.metrics.throttle(*s).get())
        .sum();
    let mut samples = vec![(
        Key::upstream(u.name()),
        Sample {
            interval_ms: ms(u.lanes.slowest().interval()),
            waiting: u.waiting() as u64,
            throttles_total,
            cap: u.flights().map(|f| (f.cap(), f.out())),
            ..Sample::default()
        },
    )];
    let lanes = u.lanes.all();
    if lanes.len() < 2 {
        return samples;
    }
    let now = u.clock().now();
    for lane in lanes.iter().filter(|l| l.named()) {
        let m = lane.metrics();
        let sample = Sample {
            interval_ms: ms(lane.interval()),
            waiting: lane.waiting() as u64,
            throttles_total: Signal::ALL.iter().map(|s| m.throttles(*s)).sum(),
            dispatches_total: Some(m.dispatches.get()),
            paused: lane.pause_left(now).is_some(),
            cap: None,
        };
        samples.push((Key::lane(u.name(), lane.name()), sample));
    }
    samples
}

/// The page with the current status filled in, so it shows every upstream before its
/// first refresh (and without JavaScript, in the page source).
async fn page(State(state): State<Arc<AdminState>>) -> Response {
    // "</" inside a script element would end it early; JSON allows "<\/" for it.
    let initial = serde_json::to_string(&status_doc(&state))
        .unwrap_or_else(|_| "null".to_string())
        .replace("</", "<\\/");
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

async fn status(State(state): State<Arc<AdminState>>) -> Json<Status> {
    Json(status_doc(&state))
}

/// Every upstream as `/status` lists it, with its history and effective config.
fn status_doc(state: &AdminState) -> Status {
    let upstreams = state
        .upstreams()
        .iter()
        .map(|u| {
            u.refresh_gauges();
            let mut entry = describe(u, &state.history);
            entry.history = state.history.of(&Key::upstream(u.name()));
            entry.config = shown_config(&u.settings);
            entry
        })
        .collect();
    Status {
        version: env!("CARGO_PKG_VERSION").to_string(),
        upstreams,
        fleet: state.fleet.as_ref().map(|fleet| FleetStatus {
            connected: fleet.is_connected(),
            member: fleet.member().to_string(),
            why_alone: fleet.fault().map(str::to_string),
            settings_differ: fleet.settings_differ(),
        }),
    }
}

async fn reset(State(state): State<Arc<AdminState>>, Path(name): Path<String>) -> Response {
    match state.upstreams().iter().find(|u| u.name() == name) {
        Some(upstream) => {
            upstream.reset();
            tracing::info!(upstream = %name, "interval reset by the admin endpoint");
            Json(describe(upstream, &state.history)).into_response()
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

fn describe(u: &Upstream, history: &History) -> UpstreamStatus {
    let m = &u.metrics;
    let s = &u.settings;
    let slowest = u.lanes.slowest();
    let default = u.lanes.default_lane();
    UpstreamStatus {
        name: s.name.clone(),
        listen: u.listen.to_string(),
        url: s.url.origin(),
        preset: s.preset.name().to_string(),
        strategy: s.sleeper.strategy.name().to_string(),
        mode: s.sleeper.mode.name().to_string(),
        interval_ms: ms(slowest.interval()),
        interval_lane: slowest.name().to_string(),
        paused_until: u.paused_until().map(httpdate::fmt_http_date),
        pause_capped: capped(u, default),
        rate_limit_floor: floor(u, default),
        waiting: u.waiting() as u64,
        in_flight: m.in_flight.get(),
        in_flight_cap: cap_view(u),
        tenants: tenants_view(u),
        requests: by(Outcome::ALL.map(|o| (o.as_str(), m.request(o).get()))),
        throttles: by(Signal::ALL.map(|s| (s.as_str(), m.throttle(s).get()))),
        interval_increases: m.increases.get(),
        interval_decreases: m.decreases.get(),
        sleeper_invocations: m.invocations.get(),
        sleeps: m.sleeps.get(),
        sleep_seconds: m.sleep_seconds.get(),
        retries: by(RetryReason::ALL.map(|r| (r.as_str(), m.retry(r).get()))),
        retry_budget_exhausted: m.budget_exhausted.get(),
        connect_failures: m.connect_failures.get(),
        observed: (s.sleeper.mode == Mode::Observe).then(|| ObservedStatus {
            would_wait: m.would_wait.get(),
            would_wait_seconds: m.would_wait_seconds.get(),
            would_shed: m.would_shed.get(),
        }),
        lanes: lanes(u, history),
        fleet: fleet_view(default),
        history: HistoryStatus::default(),
        config: String::new(),
    }
}

fn ms(d: Duration) -> f64 {
    d.as_secs_f64() * 1e3
}

fn by<const N: usize>(pairs: [(&str, u64); N]) -> BTreeMap<String, u64> {
    pairs.into_iter().map(|(k, v)| (k.to_string(), v)).collect()
}

/// `max_in_flight` as it stands: the cap, what is out and waits under it, and how a
/// learned cap moved; none without a cap.
fn cap_view(u: &Upstream) -> Option<CapStatus> {
    let flights = u.flights()?;
    let setting = u.settings.max_in_flight.to_string();
    Some(cap_status(setting, flights, |w| {
        u.metrics.cap_move(w).get()
    }))
}

/// A lane's own `max_in_flight` (`[upstream.lanes]`), as [`cap_view`]; none without.
fn lane_cap_view(u: &Upstream, lane: &Lane) -> Option<CapStatus> {
    let flights = lane.flights()?;
    let setting = u.settings.lanes.max_in_flight.to_string();
    Some(cap_status(setting, flights, |w| flights.moves(w)))
}

fn cap_status(setting: String, flights: &Flights, moves: impl Fn(Why) -> u64) -> CapStatus {
    CapStatus {
        setting,
        cap: flights.cap(),
        out: flights.out(),
        waiting: flights.waiting() as u64,
        ceiling: flights.ceiling(),
        last_move: flights.last_move().map(|why| why.as_str().to_string()),
        moves: by(Why::ALL.map(|w| (w.as_str(), moves(w)))),
    }
}

/// Each tenant's part over the upstream's lanes, with `[upstream.fairness]`.
fn tenants_view(u: &Upstream) -> Option<Vec<TenantStatus>> {
    let tenants = u.lanes.tenants()?.all();
    let figures: Vec<TenantFigures> = tenants
        .iter()
        .map(|t| TenantFigures {
            dispatches: t.dispatches.get(),
            cost: t.cost.get(),
            wait: Duration::from_secs_f64(t.wait.get().clamp(0.0, 1e12)),
            sheds: t.sheds.get(),
        })
        .collect();
    Some(tenant_rows(&tenants, &figures, true))
}

/// The tenants that sent requests to `lane`, with `[upstream.fairness]`.
fn lane_tenants(u: &Upstream, lane: &Lane) -> Option<Vec<TenantStatus>> {
    let tenants = u.lanes.tenants()?.all();
    let figures = lane.tenant_figures()?;
    Some(tenant_rows(&tenants, &figures, false))
}

/// One row per tenant (`all`), or per tenant with a dispatch or a shed.
#[allow(clippy::cast_precision_loss, reason = "counts far below 2^52")]
fn tenant_rows(tenants: &[Arc<Tenant>], figures: &[TenantFigures], all: bool) -> Vec<TenantStatus> {
    let total: f64 = figures.iter().map(|f| f.cost).sum();
    tenants
        .iter()
        .zip(figures)
        .filter(|(_, f)| all || f.dispatches > 0 || f.sheds > 0)
        .map(|(t, f)| TenantStatus {
            name: t.name.to_string(),
            weight: t.weight,
            dispatches: f.dispatches,
            share: if total > 0.0 { f.cost / total } else { 0.0 },
            mean_wait_ms: if f.dispatches > 0 {
                f.wait.as_secs_f64() * 1e3 / f.dispatches as f64
            } else {
                0.0
            },
            sheds: f.sheds,
        })
        .collect()
}

fn capped(u: &Upstream, lane: &Lane) -> Option<CappedStatus> {
    u.capped_hint_in(lane).map(|c| CappedStatus {
        header: c.header.as_str().to_string(),
        asked_s: c.asked.as_secs_f64(),
    })
}

fn floor(u: &Upstream, lane: &Lane) -> Option<FloorStatus> {
    u.rate_limit_floor_in(lane)
        .map(|(spacing, until)| FloorStatus {
            spacing_ms: ms(spacing),
            until: httpdate::fmt_http_date(until),
            header: lane
                .pause_header()
                .map_or("ratelimit", |h| h.as_str())
                .to_string(),
        })
}

/// Every lane, `default` included, busiest first (by dispatches over the kept
/// minutes, then in all), when the upstream has more than `default`; none otherwise.
fn lanes(u: &Upstream, history: &History) -> Vec<LaneStatus> {
    let all = u.lanes.all();
    if all.len() < 2 {
        return Vec::new();
    }
    let now = u.clock().now();
    let mut lanes: Vec<LaneStatus> = all
        .iter()
        .map(|lane| {
            let paused_until = u.paused_until_in(lane);
            LaneStatus {
                name: lane.name().to_string(),
                interval_ms: ms(lane.interval()),
                waiting: lane.waiting() as u64,
                pause_header: paused_until
                    .and(lane.pause_header())
                    .map(|h| h.as_str().to_string()),
                paused_until: paused_until.map(httpdate::fmt_http_date),
                pause_capped: capped(u, lane),
                rate_limit_floor: floor(u, lane),
                near_limit: lane.near_limit(now),
                metrics_name: if lane.named() { lane.name() } else { "other" }.to_string(),
                cost: (lane.unit() != crate::cost::Unit::Requests).then(|| {
                    let (reserved, settled) = lane.costs();
                    CostStatus {
                        unit: lane.unit().name().to_string(),
                        reserved,
                        settled,
                    }
                }),
                dispatches: lane.named().then(|| lane.metrics().dispatches.get()),
                throttles: lane
                    .named()
                    .then(|| by(Signal::ALL.map(|s| (s.as_str(), lane.metrics().throttles(s))))),
                last_throttle: lane.last_throttle().map(|t| ThrottleStatus {
                    words: words::throttle(&t.reason, t.resource.as_deref()),
                    at: httpdate::fmt_http_date(t.at),
                    reason: t.reason,
                    resource: t.resource,
                }),
                fleet: fleet_view(lane),
                in_flight_cap: lane_cap_view(u, lane),
                history: history.get(&Key::lane(u.name(), lane.name())),
                tenants: lane_tenants(u, lane),
            }
        })
        .collect();
    let recent =
        |l: &LaneStatus| -> u64 { l.history.as_ref().map_or(0, |h| h.dispatches.iter().sum()) };
    lanes.sort_by(|a, b| {
        (recent(b), b.dispatches.unwrap_or(0))
            .cmp(&(recent(a), a.dispatches.unwrap_or(0)))
            .then_with(|| a.name.cmp(&b.name))
    });
    lanes
}

/// What the fleet last decided for a lane: members, this sidecar's share, the fleet's
/// rate and interval; none without `[fleet]` or before the first sync.
fn fleet_view(lane: &Lane) -> Option<FleetDecision> {
    let decision: Decision = lane.fleet().and_then(|link| link.last())?;
    Some(FleetDecision {
        members: decision.members,
        share: decision.share,
        rate: decision.rate,
        interval_ms: ms(decision.interval),
        epoch: decision.epoch,
    })
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
