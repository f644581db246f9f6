//! The admin server (SPEC §4): `/metrics`, `/healthz`, `/readyz`, `/status`, and with
//! `server.admin_allow_mutations` the `POST /upstreams/{name}/reset` endpoint.

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, PoisonError, RwLock};

use axum::Json;
use axum::Router;
use axum::extract::{Path, State};
use axum::http::{StatusCode, header};
use axum::response::{IntoResponse, Response};
use axum::routing::{get, post};
use serde_json::{Map, Value, json};

use crate::metrics::{Metrics, Outcome, RetryReason};
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

/// The admin routes.
pub fn router(state: Arc<AdminState>, allow_mutations: bool) -> Router {
    let router = Router::new()
        .route("/metrics", get(metrics))
        .route("/healthz", get(|| async { "ok\n" }))
        .route("/readyz", get(readyz))
        .route("/status", get(status));
    let router = if allow_mutations {
        router.route("/upstreams/{name}/reset", post(reset))
    } else {
        router
    };
    router.with_state(state)
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
    let upstreams: Vec<Value> = state.upstreams().iter().map(|u| describe(u)).collect();
    Json(json!({ "upstreams": upstreams }))
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
        "url": s.url.to_string(),
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
        "waiting": u.pacer.waiting(),
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
    })
}
