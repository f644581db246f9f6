//! Closed-loop writers with no retry logic of their own, as the demo, the training run
//! and the tests point at easeoff: each sends a request (a DynamoDB-style PutItem, say),
//! waits for the answer, and sends the next, until a total or a deadline is reached.

use std::net::SocketAddr;
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};

use bytes::Bytes;
use http::{Method, Request};
use http_body_util::{BodyExt, Full};
use hyper_util::client::legacy::Client;
use hyper_util::client::legacy::connect::HttpConnector;
use hyper_util::rt::TokioExecutor;

use crate::clock::{Clock, Instant};

/// The request every writer sends, over and over.
#[derive(Debug)]
pub struct Shot {
    /// The request's method.
    pub method: Method,
    /// Its headers, beside those the client adds.
    pub headers: &'static [(&'static str, &'static str)],
    /// Its body.
    pub body: &'static [u8],
    /// Whether it goes over h2c (prior knowledge) instead of HTTP/1.1.
    pub h2: bool,
}

impl Shot {
    /// A DynamoDB PutItem over HTTP/1.1.
    pub const PUT_ITEM: Shot = Shot {
        method: Method::POST,
        headers: &[
            ("x-amz-target", "DynamoDB_20120810.PutItem"),
            ("content-type", "application/x-amz-json-1.0"),
        ],
        body: br#"{"TableName":"demo","Item":{"pk":{"S":"writer"},"payload":{"S":"easeoff"}}}"#,
        h2: false,
    };
}

/// When the writers stop.
#[derive(Clone, Copy, Debug)]
pub enum Until {
    /// After this many requests in all have been answered.
    Requests(u64),
    /// At this time; a request in flight then is abandoned.
    Deadline(Instant),
}

/// What the writers saw, counted as it happens.
#[derive(Debug, Default)]
pub struct Tally {
    /// 2xx answers.
    pub ok: AtomicU64,
    /// Any other answer, or no answer: what a writer without retries sees as an error.
    pub errors: AtomicU64,
}

impl Tally {
    /// (ok, errors) so far.
    pub fn read(&self) -> (u64, u64) {
        (
            self.ok.load(Ordering::Relaxed),
            self.errors.load(Ordering::Relaxed),
        )
    }
}

/// Runs `clients` writers sending `shot` to `target` until `until`; returns when all
/// are done.
pub async fn write(
    target: SocketAddr,
    shot: &'static Shot,
    clients: usize,
    until: Until,
    tally: Arc<Tally>,
) {
    let client: Client<HttpConnector, Full<Bytes>> = Client::builder(TokioExecutor::new())
        .http2_only(shot.h2)
        .build(HttpConnector::new());
    let claimed = Arc::new(AtomicU64::new(0));
    let mut writers = tokio::task::JoinSet::new();
    for _ in 0..clients.max(1) {
        let (client, tally, claimed) = (client.clone(), Arc::clone(&tally), Arc::clone(&claimed));
        writers.spawn(async move {
            let uri = format!("http://{target}/");
            loop {
                let deadline = match until {
                    Until::Requests(total) => {
                        if claimed.fetch_add(1, Ordering::Relaxed) >= total {
                            return;
                        }
                        None
                    }
                    Until::Deadline(at) if Clock::Tokio.now() >= at => return,
                    Until::Deadline(at) => Some(at),
                };
                let mut request = Request::builder().method(shot.method.clone()).uri(&uri);
                for (name, value) in shot.headers {
                    request = request.header(*name, *value);
                }
                let Ok(request) = request.body(Full::new(Bytes::from_static(shot.body))) else {
                    return;
                };
                let answer = async {
                    let response = client.request(request).await.ok()?;
                    let ok = response.status().is_success();
                    response.into_body().collect().await.ok()?;
                    Some(ok)
                };
                let answered = match deadline {
                    Some(at) => match tokio::time::timeout_at(at, answer).await {
                        Ok(answered) => answered,
                        Err(_) => return,
                    },
                    None => answer.await,
                };
                let counter = if answered == Some(true) {
                    &tally.ok
                } else {
                    &tally.errors
                };
                counter.fetch_add(1, Ordering::Relaxed);
            }
        });
    }
    while writers.join_next().await.is_some() {}
}
