//! `easeoff mock-upstream`: a throttling test double. A token bucket answers 200 while
//! it has tokens and a throttle otherwise, in the style of a plain HTTP API (429 +
//! Retry-After), DynamoDB (400 + ProvisionedThroughputExceededException) or gRPC
//! (trailers-only `grpc-status: 8`). Used by `demo`, the tests and docker-compose.

mod bucket;
mod schedule;

use std::convert::Infallible;
use std::net::SocketAddr;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex, PoisonError};
use std::time::{Duration, Instant};

use bytes::Bytes;
use http::{HeaderMap, HeaderValue, Request, Response, StatusCode};
use http_body_util::combinators::BoxBody;
use http_body_util::{BodyExt, Full};
use hyper::body::Incoming;
use hyper::service::service_fn;
use hyper_util::rt::{TokioExecutor, TokioIo};
use hyper_util::server::conn::auto;
use prometheus::{Encoder, Gauge, IntCounterVec, Opts, Registry, TextEncoder};
use tokio::net::TcpListener;

pub use bucket::{AutoScale, Bucket};
pub use schedule::{Schedule, Step, parse_schedule};

/// How throttles look.
#[derive(Clone, Copy, Debug, PartialEq, Eq, clap::ValueEnum)]
pub enum Style {
    /// 429 with Retry-After.
    Http429,
    /// 400 with DynamoDB's ProvisionedThroughputExceededException JSON body.
    Dynamodb,
    /// HTTP 200, trailers-only `grpc-status: 8` (RESOURCE_EXHAUSTED).
    Grpc,
}

/// The mock's settings.
#[derive(Clone, Debug)]
pub struct MockOptions {
    /// Requests per second it accepts.
    pub rate: f64,
    /// Requests it accepts at once after a quiet spell.
    pub burst: u32,
    pub style: Style,
    /// Added before every answer.
    pub latency: Duration,
    pub autoscale: Option<AutoScale>,
    /// Rate changes at set times after start; empty for a fixed rate.
    pub schedule: Schedule,
}

/// Answers counted so far.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct MockCounts {
    pub ok: u64,
    pub throttled: u64,
}

/// A running mock upstream's shared state.
#[derive(Clone)]
pub struct MockUpstream {
    inner: Arc<Inner>,
}

struct Inner {
    options: MockOptions,
    bucket: Mutex<Bucket>,
    ok: AtomicU64,
    throttled: AtomicU64,
    metrics: MockMetrics,
}

struct MockMetrics {
    registry: Registry,
    requests: IntCounterVec,
    rate: Gauge,
}

type MockBody = BoxBody<Bytes, Infallible>;

const DYNAMODB_THROTTLE: &str = r#"{"__type":"com.amazonaws.dynamodb.v20120810#ProvisionedThroughputExceededException","message":"The level of configured provisioned throughput for the table was exceeded. Consider increasing your provisioning level with the UpdateTable API."}"#;

impl MockUpstream {
    /// A mock with a full bucket.
    pub fn new(options: MockOptions) -> Result<MockUpstream, prometheus::Error> {
        let registry = Registry::new();
        let requests = IntCounterVec::new(
            Opts::new(
                "mock_requests_total",
                "Requests answered, by result: ok, throttled.",
            ),
            &["result"],
        )?;
        let rate = Gauge::new(
            "mock_rate",
            "Requests per second the mock currently accepts.",
        )?;
        registry.register(Box::new(requests.clone()))?;
        registry.register(Box::new(rate.clone()))?;
        for result in ["ok", "throttled"] {
            requests.with_label_values(&[result]);
        }
        rate.set(options.rate);
        let bucket = Bucket::new(
            options.rate,
            options.burst,
            options.autoscale,
            Instant::now(),
        )
        .with_schedule(options.schedule.steps());
        Ok(MockUpstream {
            inner: Arc::new(Inner {
                options,
                bucket: Mutex::new(bucket),
                ok: AtomicU64::new(0),
                throttled: AtomicU64::new(0),
                metrics: MockMetrics {
                    registry,
                    requests,
                    rate,
                },
            }),
        })
    }

    /// Answers counted so far.
    pub fn counts(&self) -> MockCounts {
        MockCounts {
            ok: self.inner.ok.load(Ordering::Relaxed),
            throttled: self.inner.throttled.load(Ordering::Relaxed),
        }
    }

    /// The rate it accepts now (it changes with the schedule and auto-scaling).
    pub fn rate(&self) -> f64 {
        let mut bucket = self.lock_bucket();
        bucket.advance(Instant::now());
        bucket.rate()
    }

    /// Serves connections from `listener` until the task is dropped.
    pub async fn serve(self, listener: TcpListener) {
        loop {
            let Ok((stream, _)) = listener.accept().await else {
                tokio::time::sleep(Duration::from_millis(50)).await;
                continue;
            };
            let _ = stream.set_nodelay(true);
            let mock = self.clone();
            tokio::spawn(async move {
                let service = service_fn(move |req| {
                    let mock = mock.clone();
                    async move { Ok::<_, Infallible>(mock.answer(req).await) }
                });
                let _ = auto::Builder::new(TokioExecutor::new())
                    .serve_connection(TokioIo::new(stream), service)
                    .await;
            });
        }
    }

    /// Serves `/metrics` for the mock itself.
    pub async fn serve_admin(self, listener: TcpListener) -> std::io::Result<()> {
        let app = axum::Router::new().route(
            "/metrics",
            axum::routing::get(move || {
                let mock = self.clone();
                async move { mock.render_metrics() }
            }),
        );
        axum::serve(listener, app).await
    }

    fn render_metrics(&self) -> String {
        let m = &self.inner.metrics;
        m.rate.set(self.rate());
        let mut out = Vec::new();
        match TextEncoder::new().encode(&m.registry.gather(), &mut out) {
            Ok(()) => String::from_utf8_lossy(&out).into_owned(),
            Err(e) => format!("# cannot encode metrics: {e}\n"),
        }
    }

    async fn answer(&self, req: Request<Incoming>) -> Response<MockBody> {
        let arrived = Instant::now();
        // Read the whole request so uploads complete and the connection stays usable.
        let _ = req.into_body().collect().await;
        let verdict = self.lock_bucket().take(arrived);
        if !self.inner.options.latency.is_zero() {
            tokio::time::sleep(self.inner.options.latency).await;
        }
        let result = if verdict.is_ok() { "ok" } else { "throttled" };
        self.inner
            .metrics
            .requests
            .with_label_values(&[result])
            .inc();
        let style = self.inner.options.style;
        match verdict {
            Ok(()) => {
                self.inner.ok.fetch_add(1, Ordering::Relaxed);
                success(style)
            }
            Err(wait) => {
                self.inner.throttled.fetch_add(1, Ordering::Relaxed);
                throttle(style, wait)
            }
        }
    }

    fn lock_bucket(&self) -> std::sync::MutexGuard<'_, Bucket> {
        self.inner
            .bucket
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
    }
}

fn success(style: Style) -> Response<MockBody> {
    match style {
        Style::Http429 => text(StatusCode::OK, "text/plain", "ok\n"),
        Style::Dynamodb => text(StatusCode::OK, "application/x-amz-json-1.0", "{}"),
        Style::Grpc => {
            // One empty message, then grpc-status 0 in the trailers.
            let mut trailers = HeaderMap::new();
            trailers.insert("grpc-status", HeaderValue::from_static("0"));
            let mut r = text(StatusCode::OK, "application/grpc", "");
            *r.body_mut() = Full::new(Bytes::from_static(&[0, 0, 0, 0, 0]))
                .with_trailers(async { Some(Ok(trailers)) })
                .boxed();
            r
        }
    }
}

fn throttle(style: Style, wait: Duration) -> Response<MockBody> {
    match style {
        Style::Http429 => {
            let mut r = text(
                StatusCode::TOO_MANY_REQUESTS,
                "text/plain",
                "rate limit exceeded\n",
            );
            // Retry-After is whole seconds: the time until the next token, rounded to
            // the nearest second. Rounding up would tell every client of a 100/s
            // bucket to stay away a whole second for a token 10 ms off.
            let seconds = wait.as_secs_f64().round() as u64;
            r.headers_mut()
                .insert(http::header::RETRY_AFTER, HeaderValue::from(seconds));
            r
        }
        Style::Dynamodb => text(
            StatusCode::BAD_REQUEST,
            "application/x-amz-json-1.0",
            DYNAMODB_THROTTLE,
        ),
        Style::Grpc => {
            let mut r = text(StatusCode::OK, "application/grpc", "");
            let h = r.headers_mut();
            h.insert("grpc-status", HeaderValue::from_static("8"));
            h.insert(
                "grpc-message",
                HeaderValue::from_static("rate limit exceeded"),
            );
            r
        }
    }
}

fn text(status: StatusCode, content_type: &'static str, body: &'static str) -> Response<MockBody> {
    let mut r = Response::new(Full::new(Bytes::from_static(body.as_bytes())).boxed());
    *r.status_mut() = status;
    r.headers_mut().insert(
        http::header::CONTENT_TYPE,
        HeaderValue::from_static(content_type),
    );
    r
}

/// Binds and serves a mock on `addr`; returns the bound address.
pub async fn spawn(
    options: MockOptions,
    addr: SocketAddr,
) -> std::io::Result<(MockUpstream, SocketAddr)> {
    let mock = MockUpstream::new(options).map_err(std::io::Error::other)?;
    let listener = TcpListener::bind(addr).await?;
    let bound = listener.local_addr()?;
    tokio::spawn(mock.clone().serve(listener));
    Ok((mock, bound))
}
