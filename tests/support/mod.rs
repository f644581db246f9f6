//! Shared by the integration tests: in-test upstreams that record what reaches them,
//! easeoff started in-process on port 0, a client, and readers for /metrics and /status.
#![allow(dead_code)]

pub mod process;
#[allow(unused_imports)]
pub use process::*;

use std::convert::Infallible;
use std::future::Future;
use std::net::SocketAddr;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use bytes::Bytes;
use easeoff::sigv4::SigningEnv;
use easeoff::{Config, Server};
use http::{HeaderMap, Request, Response, StatusCode};
use http_body_util::combinators::BoxBody;
use http_body_util::{BodyExt, Full};
use hyper::body::Incoming;
use hyper::service::service_fn;
use hyper_util::client::legacy::Client;
use hyper_util::client::legacy::connect::HttpConnector;
use hyper_util::rt::{TokioExecutor, TokioIo};
use hyper_util::server::conn::auto;
use tokio::net::TcpListener;

pub type Body = BoxBody<Bytes, Infallible>;

/// One request as the upstream saw it.
#[derive(Clone, Debug)]
pub struct Arrival {
    pub at: Instant,
    pub method: http::Method,
    pub uri: http::Uri,
    pub headers: HeaderMap,
}

/// A scripted upstream on 127.0.0.1:0.
pub struct TestUpstream {
    pub addr: SocketAddr,
    arrivals: Arc<Mutex<Vec<Arrival>>>,
}

impl TestUpstream {
    /// Everything that arrived so far, in arrival order.
    pub fn arrivals(&self) -> Vec<Arrival> {
        self.arrivals.lock().unwrap().clone()
    }

    pub fn count(&self) -> usize {
        self.arrivals.lock().unwrap().len()
    }
}

/// Starts an upstream answering with `handler`; it records every arrival first.
pub async fn upstream<F, Fut>(handler: F) -> TestUpstream
where
    F: Fn(Request<Incoming>) -> Fut + Clone + Send + Sync + 'static,
    Fut: Future<Output = Response<Body>> + Send + 'static,
{
    upstream_at("127.0.0.1:0".parse().unwrap(), handler).await
}

/// An upstream that answers its first `n` requests with `throttle()`, then 200
/// "stored".
pub async fn throttles_first<F>(n: usize, throttle: F) -> TestUpstream
where
    F: Fn() -> Response<Body> + Clone + Send + Sync + 'static,
{
    let answered = Arc::new(std::sync::atomic::AtomicUsize::new(0));
    upstream(move |_| {
        let k = answered.fetch_add(1, std::sync::atomic::Ordering::SeqCst);
        let throttle = throttle.clone();
        async move {
            if k < n {
                throttle()
            } else {
                respond(200, &[], "stored")
            }
        }
    })
    .await
}

/// A port nothing listens on (it was free a moment ago), for a test that binds it later;
/// [`refusing_port`] for one that must stay refused.
pub async fn dead_port() -> SocketAddr {
    let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
    listener.local_addr().unwrap()
}

/// A loopback address that refuses connections for the rest of the test process: its
/// socket is bound, never listening, and never closed, so no listener started later (the
/// server's own, on port 0) can be given its port, as one given back by [`dead_port`]
/// can.
pub fn refusing_port() -> SocketAddr {
    let socket = tokio::net::TcpSocket::new_v4().unwrap();
    socket.bind("127.0.0.1:0".parse().unwrap()).unwrap();
    let addr = socket.local_addr().unwrap();
    // One descriptor per call, freed when the test binary exits.
    std::mem::forget(socket);
    addr
}

/// As [`upstream`], on a given address.
pub async fn upstream_at<F, Fut>(addr: SocketAddr, handler: F) -> TestUpstream
where
    F: Fn(Request<Incoming>) -> Fut + Clone + Send + Sync + 'static,
    Fut: Future<Output = Response<Body>> + Send + 'static,
{
    let listener = TcpListener::bind(addr).await.unwrap();
    let addr = listener.local_addr().unwrap();
    let arrivals: Arc<Mutex<Vec<Arrival>>> = Arc::default();
    let recorded = Arc::clone(&arrivals);
    tokio::spawn(async move {
        loop {
            let Ok((stream, _)) = listener.accept().await else {
                continue;
            };
            let (handler, recorded) = (handler.clone(), Arc::clone(&recorded));
            tokio::spawn(async move {
                let service = service_fn(move |req: Request<Incoming>| {
                    recorded.lock().unwrap().push(Arrival {
                        at: Instant::now(),
                        method: req.method().clone(),
                        uri: req.uri().clone(),
                        headers: req.headers().clone(),
                    });
                    let response = handler(req);
                    async move { Ok::<_, Infallible>(response.await) }
                });
                let _ = auto::Builder::new(TokioExecutor::new())
                    .serve_connection(TokioIo::new(stream), service)
                    .await;
            });
        }
    });
    TestUpstream { addr, arrivals }
}

/// A response with a status, headers and a body.
pub fn respond(status: u16, headers: &[(&str, &str)], body: impl Into<Bytes>) -> Response<Body> {
    let mut r = Response::new(Full::new(body.into()).boxed());
    *r.status_mut() = StatusCode::from_u16(status).unwrap();
    for (k, v) in headers {
        r.headers_mut().append(
            http::HeaderName::from_bytes(k.as_bytes()).unwrap(),
            http::HeaderValue::from_str(v).unwrap(),
        );
    }
    r
}

pub fn ok() -> Response<Body> {
    respond(200, &[], "ok")
}

/// easeoff running in this process.
pub struct Proxy {
    pub addr: SocketAddr,
    pub admin: SocketAddr,
    stop: Option<tokio::sync::oneshot::Sender<()>>,
    task: Option<tokio::task::JoinHandle<std::io::Result<()>>>,
}

impl Proxy {
    /// Stops accepting, drains and waits for the server to end.
    pub async fn stop(mut self) -> std::io::Result<()> {
        let _ = self.stop.take().unwrap().send(());
        self.task.take().unwrap().await.unwrap()
    }
}

impl Drop for Proxy {
    fn drop(&mut self) {
        if let Some(stop) = self.stop.take() {
            let _ = stop.send(());
        }
    }
}

/// Starts easeoff with one upstream named "up" pointing at `target`; `extra` is
/// appended to the `[[upstream]]` table (keys, then sub-tables).
pub async fn proxy(target: SocketAddr, extra: &str) -> Proxy {
    proxy_config(&one_upstream(target, extra)).await
}

/// Starts easeoff with one upstream named "up" pointing at `target` and a `[fleet]`
/// whose Redis never answers, so the fleet's metric families are exported too.
pub async fn proxy_with_absent_fleet(target: SocketAddr, extra: &str) -> Proxy {
    let redis = refusing_port();
    proxy_config(&format!(
        "[fleet]\nredis = \"redis://{redis}/0\"\n\n{}",
        one_upstream(target, extra)
    ))
    .await
}

/// The config text of [`proxy`].
fn one_upstream(target: SocketAddr, extra: &str) -> String {
    format!(
        "[server]\nadmin_listen = \"127.0.0.1:0\"\nshutdown_grace = \"5s\"\n\n[[upstream]]\nname = \"up\"\nlisten = \"127.0.0.1:0\"\nurl = \"http://{target}\"\n{extra}\n"
    )
}

/// Starts easeoff with a whole config text.
pub async fn proxy_config(text: &str) -> Proxy {
    proxy_signing(text, SigningEnv::default()).await
}

/// When easeoff dispatched each attempt, as its pacer saw it (an observer's record).
#[derive(Clone, Default)]
pub struct Dispatches(Arc<Mutex<Vec<(tokio::time::Instant, bool)>>>);

impl Dispatches {
    /// The dispatch times of the attempts finished so far, in dispatch order.
    pub fn times(&self) -> Vec<tokio::time::Instant> {
        let mut times: Vec<_> = self.0.lock().unwrap().iter().map(|(at, _)| *at).collect();
        times.sort();
        times
    }

    /// How many of the attempts finished so far the spacing or a pause held.
    pub fn held(&self) -> usize {
        self.0
            .lock()
            .unwrap()
            .iter()
            .filter(|(_, held)| *held)
            .count()
    }

    /// Waits until `n` attempts have finished; their dispatch times, in order.
    pub async fn wait_for(&self, n: usize) -> Vec<tokio::time::Instant> {
        eventually("the attempts to finish", || async {
            self.0.lock().unwrap().len() >= n
        })
        .await;
        self.times()
    }
}

/// As [`proxy`], also recording when each attempt was dispatched: spacing asserted on
/// these holds however late a loaded host delivers the requests to the upstream.
pub async fn proxy_observed(target: SocketAddr, extra: &str) -> (Proxy, Dispatches) {
    let dispatches = Dispatches::default();
    let record = dispatches.clone();
    let observer: easeoff::upstream::Observer = Arc::new(move |attempt| {
        let seen = (attempt.dispatched_at, attempt.held);
        record.0.lock().unwrap().push(seen);
    });
    let proxy = start(
        &one_upstream(target, extra),
        Some(observer),
        SigningEnv::default(),
    )
    .await;
    (proxy, dispatches)
}

/// As [`proxy_config`], with the credentials and clock SigV4 upstreams sign with.
pub async fn proxy_signing(text: &str, signing: SigningEnv) -> Proxy {
    start(text, None, signing).await
}

async fn start(
    text: &str,
    observer: Option<easeoff::upstream::Observer>,
    signing: SigningEnv,
) -> Proxy {
    let config = Config::parse(text, "test.toml", &|_| None).unwrap_or_else(|e| panic!("{e}"));
    let server = Server::bind_signing(config, observer, signing)
        .await
        .unwrap();
    let addr = server.listen_addr("up").unwrap_or(server.admin_addr());
    let admin = server.admin_addr();
    let (stop, stopped) = tokio::sync::oneshot::channel::<()>();
    let task = tokio::spawn(server.run(async move {
        let _ = stopped.await;
    }));
    Proxy {
        addr,
        admin,
        stop: Some(stop),
        task: Some(task),
    }
}

/// An HTTP/1.1 client with a connection pool.
pub fn client() -> Client<HttpConnector, Full<Bytes>> {
    Client::builder(TokioExecutor::new()).build(HttpConnector::new())
}

/// A complete answer.
pub struct Answer {
    pub status: StatusCode,
    pub headers: HeaderMap,
    pub body: Bytes,
}

impl Answer {
    pub fn text(&self) -> String {
        String::from_utf8_lossy(&self.body).into_owned()
    }
}

/// Sends a request and reads the whole answer (30 s at most: the slowest test waits
/// ten one-second slots).
pub async fn send(
    client: &Client<HttpConnector, Full<Bytes>>,
    method: &str,
    url: &str,
    headers: &[(&str, &str)],
    body: impl Into<Bytes>,
) -> Answer {
    let mut builder = Request::builder().method(method).uri(url);
    for (k, v) in headers {
        builder = builder.header(*k, *v);
    }
    let request = builder.body(Full::new(body.into())).unwrap();
    let response = tokio::time::timeout(Duration::from_secs(30), client.request(request))
        .await
        .expect("no answer within 30 s")
        .expect("request failed");
    let (parts, body) = response.into_parts();
    let body = body.collect().await.unwrap().to_bytes();
    Answer {
        status: parts.status,
        headers: parts.headers,
        body,
    }
}

pub async fn get(url: &str) -> Answer {
    send(&client(), "GET", url, &[], Bytes::new()).await
}

/// The /metrics text.
pub async fn metrics(admin: SocketAddr) -> String {
    get(&format!("http://{admin}/metrics")).await.text()
}

/// The value of one sample, e.g. `easeoff_interval_increases_total{upstream="up"}`.
pub async fn metric(admin: SocketAddr, sample: &str) -> f64 {
    let text = metrics(admin).await;
    sample_value(&text, sample).unwrap_or_else(|| panic!("no sample {sample} in\n{text}"))
}

/// `easeoff_requests_total` of upstream `up` for one outcome.
pub async fn requests(admin: SocketAddr, outcome: &str) -> f64 {
    metric(
        admin,
        &format!("easeoff_requests_total{{outcome=\"{outcome}\",upstream=\"up\"}}"),
    )
    .await
}

/// `easeoff_retries_total` of upstream `up` for one reason.
pub async fn retries(admin: SocketAddr, reason: &str) -> f64 {
    metric(
        admin,
        &format!("easeoff_retries_total{{reason=\"{reason}\",upstream=\"up\"}}"),
    )
    .await
}

/// Finds a sample in exposition text; labels must be written in the order easeoff
/// prints them (alphabetical).
pub fn sample_value(text: &str, sample: &str) -> Option<f64> {
    text.lines().find_map(|line| {
        line.strip_prefix(sample)?
            .strip_prefix(' ')?
            .trim()
            .parse()
            .ok()
    })
}

/// The /status entry of upstream "up".
pub async fn status(admin: SocketAddr) -> serde_json::Value {
    let text = get(&format!("http://{admin}/status")).await.text();
    let v: serde_json::Value = serde_json::from_str(&text).unwrap();
    v["upstreams"][0].clone()
}

/// The current interval of upstream "up", in milliseconds.
pub async fn interval_ms(admin: SocketAddr) -> f64 {
    status(admin).await["interval_ms"].as_f64().unwrap()
}

/// The interval of one lane of the first upstream, from `/status`; `None` when the
/// lane is not alive.
pub async fn lane_interval_ms(admin: SocketAddr, lane: &str) -> Option<f64> {
    let shown = status(admin).await;
    shown["lanes"]
        .as_array()?
        .iter()
        .find(|l| l["name"] == lane)
        .and_then(|l| l["interval_ms"].as_f64())
}

/// How long a test waits for what should come at once or soon: long enough that on a
/// loaded 2-core host only a behaviour that never comes runs it out.
pub const PATIENCE: Duration = Duration::from_secs(20);

/// Polls `condition` until it holds; panics with `what` after [`PATIENCE`].
pub async fn eventually<F, Fut>(what: &str, condition: F)
where
    F: FnMut() -> Fut,
    Fut: Future<Output = bool>,
{
    wait_until(PATIENCE, what, condition).await;
}

/// Polls `condition` until it holds; panics with `what` after `timeout`.
pub async fn wait_until<F, Fut>(timeout: Duration, what: &str, mut condition: F)
where
    F: FnMut() -> Fut,
    Fut: Future<Output = bool>,
{
    let deadline = Instant::now() + timeout;
    while !condition().await {
        assert!(
            Instant::now() < deadline,
            "timed out after {timeout:?} waiting for {what}"
        );
        tokio::time::sleep(Duration::from_millis(5)).await;
    }
}

/// Reads from `stream` until the peer closes it (EOF or reset); the time that took,
/// or `None` if it was still open after `limit`. Whatever arrives is returned too.
pub async fn closed_within(
    stream: &mut tokio::net::TcpStream,
    limit: Duration,
) -> Option<(Duration, Vec<u8>)> {
    use tokio::io::AsyncReadExt;
    let started = Instant::now();
    let mut seen = Vec::new();
    let mut buf = [0u8; 16 * 1024];
    loop {
        let left = limit.checked_sub(started.elapsed())?;
        match tokio::time::timeout(left, stream.read(&mut buf)).await {
            Err(_) => return None,
            Ok(Ok(0)) | Ok(Err(_)) => return Some((started.elapsed(), seen)),
            Ok(Ok(n)) => seen.extend_from_slice(&buf[..n]),
        }
    }
}

/// The text of a raw HTTP/1.1 exchange, written on a fresh connection that the proxy
/// must then close.
pub async fn raw_exchange(addr: SocketAddr, request: &str, limit: Duration) -> String {
    raw_exchange_timed(addr, request, limit).await.1
}

/// As [`raw_exchange`], with the time from writing the request to the close.
pub async fn raw_exchange_timed(
    addr: SocketAddr,
    request: &str,
    limit: Duration,
) -> (Duration, String) {
    use tokio::io::AsyncWriteExt;
    let mut stream = tokio::net::TcpStream::connect(addr).await.unwrap();
    stream.write_all(request.as_bytes()).await.unwrap();
    let (after, seen) = closed_within(&mut stream, limit)
        .await
        .unwrap_or_else(|| panic!("{request:?}: connection still open after {limit:?}"));
    (after, String::from_utf8_lossy(&seen).into_owned())
}

/// Runs `tests/e2e/<script>` with the venv's Python and `args`, off the runtime's
/// threads; fails the test on a non-zero exit, with the script's stderr. Its stdout,
/// one JSON document, parsed (and printed).
pub async fn e2e_script(
    venv: &std::path::Path,
    script: &str,
    args: Vec<String>,
) -> serde_json::Value {
    let python = venv.join("bin/python");
    let script = std::path::Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("tests/e2e")
        .join(script);
    let out = tokio::task::spawn_blocking(move || {
        std::process::Command::new(python)
            .arg(script)
            .args(args)
            .output()
            .unwrap()
    })
    .await
    .unwrap();
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let report = serde_json::from_slice(&out.stdout).unwrap();
    println!("{report}");
    report
}
