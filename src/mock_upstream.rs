//! `easeoff mock-upstream`: a throttling test double. A token bucket answers 200 while
//! it has tokens and a throttle otherwise, in the style of a plain HTTP API (429 +
//! Retry-After), DynamoDB (400 + ProvisionedThroughputExceededException) or gRPC
//! (trailers-only `grpc-status: 8`). Used by `demo`, the tests and docker-compose.
//!
//! In the DynamoDB style, tables and partition keys can have capacity of their own
//! (`capacity`): their throttles name the exhausted table in `ThrottlingReasons`, as
//! DynamoDB does, and a batch may come back with some tables' items unprocessed.

mod bucket;
mod capacity;
mod item_size;
mod schedule;

use std::collections::HashSet;
use std::convert::Infallible;
use std::net::SocketAddr;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex, PoisonError};
use std::time::{Duration, SystemTime};

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
use tokio_rustls::TlsAcceptor;

use crate::clock::Clock;
use crate::route::dynamodb::{self, Access};
use capacity::{Capacity, Demand, Exhausted, Verdict};

pub use bucket::{AutoScale, Bucket};
pub use capacity::{MAX_KEYS, TableRate, parse_table_rate};
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
    /// OpenAI: `x-ratelimit-{limit,remaining,reset}-requests` (a Go duration until the
    /// bucket is full) on every answer; 429 with `retry-after-ms` and `retry-after`
    /// (whole seconds, rounded up); `GET /v1/models` answers an empty model list.
    Openai,
    /// Anthropic: `anthropic-ratelimit-requests-{limit,remaining,reset}` (RFC 3339) on
    /// every answer; 429 `rate_limit_error` with `retry-after`; `GET /v1/models` answers
    /// an empty page.
    Anthropic,
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
    /// DynamoDB style: tables with capacity of their own, apart from `rate`.
    pub table_rates: Vec<TableRate>,
    /// DynamoDB style: requests per second each partition key value of a table accepts.
    pub key_rate: Option<f64>,
    /// DynamoDB style: units per second each partition key value of a table accepts in
    /// writes (DynamoDB's 1,000 WCU a partition), below `key_rate` if that is higher.
    pub partition_wcu: Option<f64>,
    /// The shared and the tables' buckets hold this many seconds of their rate, instead
    /// of `burst` (DynamoDB's burst capacity, up to 300 s).
    pub burst_seconds: Option<f64>,
    /// DynamoDB style: a request takes the capacity units it costs by DynamoDB's
    /// documented rules (`item_size`).
    pub charge_by_size: bool,
    /// Requests whose path starts with one of these are always throttled (a gRPC
    /// method that is out of quota).
    pub throttle_paths: Vec<String>,
    /// Every Nth request is answered 529 `overloaded_error` (Anthropic's overload),
    /// taking no token.
    pub overload_every: Option<u64>,
}

impl MockOptions {
    /// A fixed `rate` with `burst`, answering at once, with no tables, keys or paths of
    /// its own.
    pub fn new(rate: f64, burst: u32, style: Style) -> MockOptions {
        MockOptions {
            rate,
            burst,
            style,
            latency: Duration::ZERO,
            autoscale: None,
            schedule: Schedule::default(),
            table_rates: Vec::new(),
            key_rate: None,
            partition_wcu: None,
            burst_seconds: None,
            charge_by_size: false,
            throttle_paths: Vec::new(),
            overload_every: None,
        }
    }
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
    /// The clock its capacity and its rate-limit headers follow.
    clock: Clock,
    capacity: Mutex<Capacity>,
    ok: AtomicU64,
    throttled: AtomicU64,
    /// Requests seen, for `overload_every`.
    seen: AtomicU64,
    metrics: MockMetrics,
}

struct MockMetrics {
    registry: Registry,
    requests: IntCounterVec,
    tables: IntCounterVec,
    /// Tables counted under their own name; later ones are counted as `other`.
    labelled: Mutex<HashSet<String>>,
    rate: Gauge,
    /// Capacity units taken by the requests let through.
    units: prometheus::Counter,
}

/// Distinct table names `mock_table_requests_total` labels.
const MAX_TABLE_LABELS: usize = 64;

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
        let tables = IntCounterVec::new(
            Opts::new(
                "mock_table_requests_total",
                "DynamoDB style: requests naming each table, by access (read, write, control) and result: ok, throttled, unprocessed (a batch answered with this table's items left over).",
            ),
            &["table", "access", "result"],
        )?;
        registry.register(Box::new(requests.clone()))?;
        registry.register(Box::new(tables.clone()))?;
        registry.register(Box::new(rate.clone()))?;
        let units = prometheus::Counter::new(
            "mock_capacity_units_total",
            "Capacity units the requests let through took (one each, unless --charge-by-size).",
        )?;
        registry.register(Box::new(units.clone()))?;
        for result in ["ok", "throttled"] {
            requests.with_label_values(&[result]);
        }
        rate.set(options.rate);
        let clock = Clock::Tokio;
        let now = clock.now();
        let shared = Bucket::new(options.rate, options.burst, options.autoscale, now)
            .with_schedule(options.schedule.steps());
        let mut capacity = Capacity::new(shared, &options.table_rates, options.key_rate, now);
        capacity.set_partition_wcu(options.partition_wcu);
        if let Some(seconds) = options.burst_seconds {
            capacity.set_burst_seconds(seconds);
        }
        Ok(MockUpstream {
            inner: Arc::new(Inner {
                options,
                clock,
                capacity: Mutex::new(capacity),
                ok: AtomicU64::new(0),
                throttled: AtomicU64::new(0),
                seen: AtomicU64::new(0),
                metrics: MockMetrics {
                    registry,
                    requests,
                    tables,
                    labelled: Mutex::default(),
                    rate,
                    units,
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
        let mut capacity = self.lock_capacity();
        let shared = capacity.shared();
        shared.advance(self.inner.clock.now());
        shared.rate()
    }

    /// Serves connections from `listener` until the task is dropped.
    pub async fn serve(self, listener: TcpListener) {
        self.serve_with(listener, None).await;
    }

    /// Accepts connections on `listener`, over TLS with `tls` when given.
    async fn serve_with(self, listener: TcpListener, tls: Option<TlsAcceptor>) {
        loop {
            let Ok((stream, _)) = listener.accept().await else {
                tokio::time::sleep(Duration::from_millis(50)).await;
                continue;
            };
            let _ = stream.set_nodelay(true);
            let (mock, tls) = (self.clone(), tls.clone());
            tokio::spawn(async move {
                match tls {
                    Some(acceptor) => {
                        if let Ok(stream) = acceptor.accept(stream).await {
                            mock.serve_connection(TokioIo::new(stream)).await;
                        }
                    }
                    None => mock.serve_connection(TokioIo::new(stream)).await,
                }
            });
        }
    }

    /// Serves one connection, HTTP/1.1 or HTTP/2 as the client speaks.
    async fn serve_connection<I>(self, io: I)
    where
        I: hyper::rt::Read + hyper::rt::Write + Unpin + Send + 'static,
    {
        let service = service_fn(move |req| {
            let mock = self.clone();
            async move { Ok::<_, Infallible>(mock.answer(req).await) }
        });
        let _ = auto::Builder::new(TokioExecutor::new())
            .serve_connection(io, service)
            .await;
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
        let arrived = self.inner.clock.now();
        let style = self.inner.options.style;
        let path = req.uri().path();
        if self
            .inner
            .options
            .throttle_paths
            .iter()
            .any(|p| path.starts_with(p.as_str()))
        {
            self.inner.throttled.fetch_add(1, Ordering::Relaxed);
            return throttle(style, Duration::from_secs(1));
        }
        let n = self.inner.seen.fetch_add(1, Ordering::Relaxed) + 1;
        if self
            .inner
            .options
            .overload_every
            .is_some_and(|every| n.is_multiple_of(every))
        {
            self.inner.throttled.fetch_add(1, Ordering::Relaxed);
            let requests = &self.inner.metrics.requests;
            requests.with_label_values(&["throttled"]).inc();
            let body =
                r#"{"type":"error","error":{"type":"overloaded_error","message":"Overloaded"}}"#;
            return text(
                StatusCode::from_u16(529).unwrap_or(StatusCode::SERVICE_UNAVAILABLE),
                "application/json",
                body,
            );
        }
        let target = req
            .headers()
            .get("x-amz-target")
            .and_then(|v| v.to_str().ok())
            .map(str::to_owned);
        // Read the whole request so uploads complete and the connection stays usable.
        let body = req
            .into_body()
            .collect()
            .await
            .map(|b| b.to_bytes())
            .unwrap_or_default();
        let request = match (style, target.as_deref().and_then(dynamodb::operation)) {
            (Style::Dynamodb, Some((operation, access))) => TableRequest {
                operation,
                access,
                tables: dynamodb::tables(operation, &body),
                key: dynamodb::partition_key(operation, &body, None),
            },
            _ => TableRequest::default(),
        };
        let names: Vec<&str> = request.tables.iter().collect();
        let units = if self.inner.options.charge_by_size {
            item_size::units(request.operation, &body)
        } else {
            1.0
        };
        let demand = Demand {
            access: request.access,
            tables: &names,
            key: request.key,
            partial: matches!(request.operation, "BatchWriteItem" | "BatchGetItem"),
            units,
        };
        let verdict = self.lock_capacity().decide(&demand, arrived);
        if verdict == Verdict::Ok {
            self.inner.metrics.units.inc_by(units);
        }
        if !self.inner.options.latency.is_zero() {
            tokio::time::sleep(self.inner.options.latency).await;
        }
        self.count(&request, &verdict);
        let mut answer = match verdict {
            Verdict::Ok => success(style),
            Verdict::Partial { unprocessed } => unprocessed_answer(&request, &body, &unprocessed),
            Verdict::Throttled { wait, reasons } if reasons.is_empty() => throttle(style, wait),
            Verdict::Throttled { reasons, .. } => table_throttle(&reasons),
        };
        if matches!(style, Style::Openai | Style::Anthropic) {
            let level = self.lock_capacity().shared().level(self.inner.clock.now());
            if style == Style::Openai {
                openai_headers(answer.headers_mut(), level);
            } else {
                let wall = self.inner.clock.wall();
                anthropic_headers(answer.headers_mut(), level, wall);
            }
        }
        answer
    }

    fn count(&self, request: &TableRequest<'_>, verdict: &Verdict) {
        let throttled = matches!(verdict, Verdict::Throttled { .. });
        let (result, total) = if throttled {
            ("throttled", &self.inner.throttled)
        } else {
            ("ok", &self.inner.ok)
        };
        total.fetch_add(1, Ordering::Relaxed);
        let m = &self.inner.metrics;
        m.requests.with_label_values(&[result]).inc();
        for table in request.tables.iter() {
            let result = match verdict {
                Verdict::Partial { unprocessed } if unprocessed.iter().any(|t| t == table) => {
                    "unprocessed"
                }
                _ => result,
            };
            let label = {
                let mut labelled = m.labelled.lock().unwrap_or_else(PoisonError::into_inner);
                if labelled.contains(table) {
                    table
                } else if labelled.len() < MAX_TABLE_LABELS {
                    labelled.insert(table.to_owned());
                    table
                } else {
                    "other"
                }
            };
            m.tables
                .with_label_values(&[label, request.access.as_str(), result])
                .inc();
        }
    }

    fn lock_capacity(&self) -> std::sync::MutexGuard<'_, Capacity> {
        self.inner
            .capacity
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
    }
}

/// What a DynamoDB-style request names; empty for other styles and unknown targets.
struct TableRequest<'a> {
    operation: &'a str,
    access: Access,
    tables: dynamodb::Tables<'a>,
    key: Option<u64>,
}

impl Default for TableRequest<'_> {
    fn default() -> Self {
        TableRequest {
            operation: "",
            access: Access::Control,
            tables: dynamodb::Tables::default(),
            key: None,
        }
    }
}

/// OpenAI's request-bucket headers: `(left, size, full again in)`, the reset as Go
/// writes a duration (`250ms`, `1.5s`, `1m30s`).
fn openai_headers(headers: &mut HeaderMap, (left, size, full_in): (u64, u64, Duration)) {
    let ms = full_in.as_millis();
    let reset = if ms >= 60_000 {
        format!("{}m{}s", ms / 60_000, (ms % 60_000) as f64 / 1000.0)
    } else if ms >= 1000 {
        format!("{}s", ms as f64 / 1000.0)
    } else {
        format!("{ms}ms")
    };
    headers.insert("x-ratelimit-limit-requests", HeaderValue::from(size));
    headers.insert("x-ratelimit-remaining-requests", HeaderValue::from(left));
    if let Ok(reset) = HeaderValue::from_str(&reset) {
        headers.insert("x-ratelimit-reset-requests", reset);
    }
}

/// Anthropic's request-bucket headers: `(left, size, full again in)`, the reset as an
/// RFC 3339 time from `now`.
fn anthropic_headers(
    headers: &mut HeaderMap,
    (left, size, full_in): (u64, u64, Duration),
    now: SystemTime,
) {
    let at = time::OffsetDateTime::from(now + full_in);
    let format = time::format_description::well_known::Rfc3339;
    headers.insert(
        "anthropic-ratelimit-requests-limit",
        HeaderValue::from(size),
    );
    headers.insert(
        "anthropic-ratelimit-requests-remaining",
        HeaderValue::from(left),
    );
    if let Some(reset) = at
        .format(&format)
        .ok()
        .and_then(|r| HeaderValue::from_str(&r).ok())
    {
        headers.insert("anthropic-ratelimit-requests-reset", reset);
    }
}

fn success(style: Style) -> Response<MockBody> {
    match style {
        Style::Anthropic => text(
            StatusCode::OK,
            "application/json",
            r#"{"data":[],"has_more":false,"first_id":null,"last_id":null}"#,
        ),
        Style::Openai => text(
            StatusCode::OK,
            "application/json",
            r#"{"object":"list","data":[]}"#,
        ),
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

#[allow(
    clippy::cast_possible_truncation,
    clippy::cast_sign_loss,
    reason = "float to integer `as` saturates, as wanted here"
)]
fn throttle(style: Style, wait: Duration) -> Response<MockBody> {
    match style {
        Style::Anthropic => {
            let body = r#"{"type":"error","error":{"type":"rate_limit_error","message":"Number of requests has exceeded your rate limit"}}"#;
            let mut r = text(StatusCode::TOO_MANY_REQUESTS, "application/json", body);
            r.headers_mut().insert(
                http::header::RETRY_AFTER,
                HeaderValue::from(wait.as_secs() + 1),
            );
            r
        }
        Style::Openai => {
            let body = r#"{"error":{"message":"Rate limit reached for requests","type":"requests","param":null,"code":"rate_limit_exceeded"}}"#;
            let mut r = text(StatusCode::TOO_MANY_REQUESTS, "application/json", body);
            let headers = r.headers_mut();
            let ms = wait.as_secs_f64() * 1e3;
            if let Ok(value) = HeaderValue::from_str(&format!("{ms:.0}")) {
                headers.insert("retry-after-ms", value);
            }
            headers.insert(
                http::header::RETRY_AFTER,
                HeaderValue::from(wait.as_secs() + 1),
            );
            r
        }
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

/// DynamoDB's throttle naming the exhausted tables and keys.
fn table_throttle(reasons: &[Exhausted]) -> Response<MockBody> {
    let key_range = reasons
        .iter()
        .all(|r| r.limit == dynamodb::Limit::KeyRangeThroughputExceeded);
    let message = if key_range {
        "The request rate for a partition key value exceeded the partition's throughput limit."
    } else {
        "The level of configured provisioned throughput for the table was exceeded. Consider increasing your provisioning level with the UpdateTable API."
    };
    let reasons: Vec<serde_json::Value> = reasons
        .iter()
        .map(|r| {
            let kind = if r.access == Access::Read {
                "Read"
            } else {
                "Write"
            };
            serde_json::json!({
                "reason": format!("Table{kind}{}", r.limit.as_str()),
                "resource": format!("arn:aws:dynamodb:us-east-1:000000000000:table/{}", r.table),
            })
        })
        .collect();
    // Written by hand so the fields come in DynamoDB's order, `__type` first.
    let body = format!(
        r#"{{"__type":"com.amazonaws.dynamodb.v20120810#ProvisionedThroughputExceededException","message":{},"ThrottlingReasons":{}}}"#,
        serde_json::Value::from(message),
        serde_json::Value::from(reasons),
    );
    json(StatusCode::BAD_REQUEST, body.to_string().into_bytes())
}

/// A batch's 200 with the throttled tables' requests handed back, as the request
/// wrote them, under `UnprocessedItems` (BatchWriteItem) or `UnprocessedKeys`.
fn unprocessed_answer(
    request: &TableRequest<'_>,
    body: &[u8],
    unprocessed: &[String],
) -> Response<MockBody> {
    let field = if request.operation == "BatchGetItem" {
        "UnprocessedKeys"
    } else {
        "UnprocessedItems"
    };
    let mut out = format!("{{\"{field}\":{{").into_bytes();
    let mut first = true;
    for (table, value) in dynamodb::request_items(body) {
        if !unprocessed
            .iter()
            .any(|t| t == dynamodb::table_name(&table))
        {
            continue;
        }
        if !first {
            out.push(b',');
        }
        first = false;
        out.extend_from_slice(
            serde_json::Value::from(table.as_ref())
                .to_string()
                .as_bytes(),
        );
        out.push(b':');
        out.extend_from_slice(value);
    }
    out.extend_from_slice(b"}}");
    json(StatusCode::OK, out)
}

fn json(status: StatusCode, body: Vec<u8>) -> Response<MockBody> {
    let mut r = Response::new(Full::new(Bytes::from(body)).boxed());
    *r.status_mut() = status;
    r.headers_mut().insert(
        http::header::CONTENT_TYPE,
        HeaderValue::from_static("application/x-amz-json-1.0"),
    );
    r
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

/// As [`spawn`], answering over TLS with the certificate `tls` holds.
pub async fn spawn_tls(
    options: MockOptions,
    addr: SocketAddr,
    tls: Arc<rustls::ServerConfig>,
) -> std::io::Result<(MockUpstream, SocketAddr)> {
    let mock = MockUpstream::new(options).map_err(std::io::Error::other)?;
    let listener = TcpListener::bind(addr).await?;
    let bound = listener.local_addr()?;
    tokio::spawn(
        mock.clone()
            .serve_with(listener, Some(TlsAcceptor::from(tls))),
    );
    Ok((mock, bound))
}
