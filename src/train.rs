//! `easeoff train`: runs the request path the way production does, for a
//! profile-guided build (the Dockerfile's): HTTP/1.1 and h2c clients, pass-through,
//! the dynamodb preset's lanes, gRPC, throttles and retries, against in-process mocks.
//! The build optimises the code this run makes hot, so every path a user takes is in
//! it; a path left out is compiled as cold: smaller, and no faster than without a
//! profile (BENCHMARKS.md).

use std::io::Write;
use std::net::SocketAddr;
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};

use bytes::Bytes;
use http::{Method, Request};
use http_body_util::{BodyExt, Full};
use hyper_util::client::legacy::Client;
use hyper_util::client::legacy::connect::HttpConnector;
use hyper_util::rt::TokioExecutor;

use crate::config::Config;
use crate::demo::DemoError;
use crate::mock_upstream::{self, MockOptions, Style};
use crate::server::Server;

const PUT_ITEM: &str =
    r#"{"TableName":"train","Item":{"pk":{"S":"writer"},"payload":{"S":"easeoff"}}}"#;

/// One kind of traffic: who sends what, to which upstream, over which protocol.
struct Phase {
    name: &'static str,
    upstream: &'static str,
    h2: bool,
    method: Method,
    headers: &'static [(&'static str, &'static str)],
    body: &'static [u8],
    /// This phase's share of the requests, in tenths.
    tenths: u64,
}

const DYNAMODB_HEADERS: &[(&str, &str)] = &[
    ("x-amz-target", "DynamoDB_20120810.PutItem"),
    ("content-type", "application/x-amz-json-1.0"),
];
const GRPC_HEADERS: &[(&str, &str)] = &[("content-type", "application/grpc"), ("te", "trailers")];
/// A gRPC message frame: uncompressed, 5 bytes long.
const GRPC_FRAME: &[u8] = &[0, 0, 0, 0, 5, b'h', b'e', b'l', b'l', b'o'];

const PHASES: &[Phase] = &[
    Phase {
        name: "pass-through GET, HTTP/1.1",
        upstream: "plain",
        h2: false,
        method: Method::GET,
        headers: &[],
        body: b"",
        tenths: 3,
    },
    Phase {
        name: "pass-through GET, h2c",
        upstream: "plain",
        h2: true,
        method: Method::GET,
        headers: &[],
        body: b"",
        tenths: 2,
    },
    Phase {
        name: "dynamodb PutItem, HTTP/1.1",
        upstream: "dynamodb",
        h2: false,
        method: Method::POST,
        headers: DYNAMODB_HEADERS,
        body: PUT_ITEM.as_bytes(),
        tenths: 3,
    },
    Phase {
        name: "dynamodb PutItem, throttled",
        upstream: "throttled",
        h2: false,
        method: Method::POST,
        headers: DYNAMODB_HEADERS,
        body: PUT_ITEM.as_bytes(),
        tenths: 1,
    },
    Phase {
        name: "gRPC, h2c",
        upstream: "grpc",
        h2: true,
        method: Method::POST,
        headers: GRPC_HEADERS,
        body: GRPC_FRAME,
        tenths: 1,
    },
];

/// Runs every phase, `requests` in all, with `clients` concurrent senders each;
/// prints one line per phase.
pub async fn run(requests: u64, clients: usize, out: &mut dyn Write) -> Result<(), DemoError> {
    let mut config = String::from("[server]\nadmin_listen = \"127.0.0.1:0\"\n");
    // Held to the end: a mock stops when its handle is dropped.
    let mut mocks = Vec::new();
    for (name, preset, style, rate) in [
        ("plain", "", Style::Http429, 1e9),
        ("dynamodb", "dynamodb", Style::Dynamodb, 1e9),
        ("throttled", "dynamodb", Style::Dynamodb, 2000.0),
        ("grpc", "grpc", Style::Grpc, 1e9),
    ] {
        let options = MockOptions::new(rate, (rate / 10.0).min(1e6) as u32, style);
        let (mock, addr) = mock_upstream::spawn(options, SocketAddr::from(([127, 0, 0, 1], 0)))
            .await
            .map_err(DemoError::Mock)?;
        mocks.push(mock);
        config.push_str(&format!(
            "[[upstream]]\nname = \"{name}\"\nlisten = \"127.0.0.1:0\"\nurl = \"http://{addr}\"\n"
        ));
        if !preset.is_empty() {
            config.push_str(&format!("preset = \"{preset}\"\n"));
        }
    }
    let server = Server::bind_with(Config::parse(&config, "train.toml", &|_| None)?, None).await?;
    let mut targets = Vec::new();
    for phase in PHASES {
        let upstream = server
            .upstream(phase.upstream)
            .ok_or_else(|| DemoError::Run(std::io::Error::other("training upstream missing")))?;
        targets.push(upstream.listen);
    }
    let (stop, stopped) = tokio::sync::oneshot::channel::<()>();
    let proxy = tokio::spawn(server.run(async move {
        let _ = stopped.await;
    }));
    let mut failed = None;
    for (phase, target) in PHASES.iter().zip(targets) {
        let total = requests * phase.tenths / 10;
        let ok = send(phase, target, total, clients).await;
        let _ = writeln!(out, "{}: {ok} of {total} answered 2xx", phase.name);
        // Only the throttled upstream may pass a throttle on; anything else failing
        // means the profile would miss the path it was meant to cover.
        if ok < total && phase.upstream != "throttled" {
            failed.get_or_insert(format!("{}: {} of {total} failed", phase.name, total - ok));
        }
    }
    let _ = stop.send(());
    proxy
        .await
        .map_err(|e| DemoError::Run(std::io::Error::other(e)))?
        .map_err(DemoError::Run)?;
    match failed {
        Some(failed) => Err(DemoError::Run(std::io::Error::other(failed))),
        None => Ok(()),
    }
}

/// Sends `total` requests of `phase` to `target` from `clients` closed-loop senders;
/// returns how many were answered 2xx.
async fn send(phase: &'static Phase, target: SocketAddr, total: u64, clients: usize) -> u64 {
    let client: Client<HttpConnector, Full<Bytes>> = Client::builder(TokioExecutor::new())
        .http2_only(phase.h2)
        .build(HttpConnector::new());
    let claimed = Arc::new(AtomicU64::new(0));
    let ok = Arc::new(AtomicU64::new(0));
    let mut senders = tokio::task::JoinSet::new();
    for _ in 0..clients.max(1) {
        let (client, claimed, ok) = (client.clone(), Arc::clone(&claimed), Arc::clone(&ok));
        senders.spawn(async move {
            let uri = format!("http://{target}/");
            while claimed.fetch_add(1, Ordering::Relaxed) < total {
                let mut request = Request::builder().method(phase.method.clone()).uri(&uri);
                for (name, value) in phase.headers {
                    request = request.header(*name, *value);
                }
                let Ok(request) = request.body(Full::new(Bytes::from_static(phase.body))) else {
                    return;
                };
                let Ok(response) = client.request(request).await else {
                    continue;
                };
                let success = response.status().is_success();
                if response.into_body().collect().await.is_ok() && success {
                    ok.fetch_add(1, Ordering::Relaxed);
                }
            }
        });
    }
    while senders.join_next().await.is_some() {}
    ok.load(Ordering::Relaxed)
}
