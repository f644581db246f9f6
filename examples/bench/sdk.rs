//! The SDK baselines as closed-loop writers hitting the mock directly: botocore's
//! `standard` retries, and `adaptive` = standard + the CUBIC client rate limiter. The
//! writers share one retry quota and one limiter, as the threads of one SDK client do.

use std::net::SocketAddr;
use std::sync::atomic::Ordering;
use std::sync::{Arc, Mutex, PoisonError};
use std::time::Instant as StdInstant;

use bytes::Bytes;
use easeoff::load::Tally;
use http::{Method, Request};
use http_body_util::{BodyExt, Full};
use hyper_util::client::legacy::Client;
use hyper_util::client::legacy::connect::HttpConnector;
use hyper_util::rt::TokioExecutor;
use tokio::time::{Duration, Instant};

use crate::adaptive::Limiter;
use crate::standard::{MAX_ATTEMPTS, Outcome, RetryQuota, backoff, classify};

const PUT_ITEM: &str =
    r#"{"TableName":"bench","Item":{"pk":{"S":"writer"},"payload":{"S":"easeoff"}}}"#;

/// Which retry mode.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Mode {
    Standard,
    Adaptive,
}

struct Shared {
    quota: Mutex<RetryQuota>,
    limiter: Option<Mutex<Limiter>>,
    epoch: StdInstant,
}

impl Shared {
    fn now(&self) -> f64 {
        self.epoch.elapsed().as_secs_f64()
    }
}

fn lock<T>(m: &Mutex<T>) -> std::sync::MutexGuard<'_, T> {
    m.lock().unwrap_or_else(PoisonError::into_inner)
}

/// Runs `clients` writers against `target` until `deadline`; requests still running
/// then are abandoned and not counted.
pub async fn write(
    target: SocketAddr,
    clients: usize,
    deadline: Instant,
    mode: Mode,
    tally: Arc<Tally>,
    seed: u64,
) {
    let client: Client<HttpConnector, Full<Bytes>> =
        Client::builder(TokioExecutor::new()).build(HttpConnector::new());
    let epoch = StdInstant::now();
    let shared = Arc::new(Shared {
        quota: Mutex::new(RetryQuota::default()),
        limiter: (mode == Mode::Adaptive).then(|| Mutex::new(Limiter::new(0.0))),
        epoch,
    });
    let mut writers = tokio::task::JoinSet::new();
    for i in 0..clients.max(1) {
        let (client, tally, shared) = (client.clone(), Arc::clone(&tally), Arc::clone(&shared));
        let mut rng = fastrand::Rng::with_seed(seed.wrapping_add(i as u64));
        writers.spawn(async move {
            let uri = format!("http://{target}/");
            while Instant::now() < deadline {
                let call = call(&client, &uri, &shared, &mut rng);
                match tokio::time::timeout_at(deadline, call).await {
                    Ok(true) => tally.ok.fetch_add(1, Ordering::Relaxed),
                    Ok(false) => tally.errors.fetch_add(1, Ordering::Relaxed),
                    Err(_) => return,
                };
            }
        });
    }
    while writers.join_next().await.is_some() {}
}

/// One API call with its retries; true if it succeeded in the end.
async fn call(
    client: &Client<HttpConnector, Full<Bytes>>,
    uri: &str,
    shared: &Shared,
    rng: &mut fastrand::Rng,
) -> bool {
    let mut attempt = 1;
    loop {
        if let Some(limiter) = &shared.limiter {
            loop {
                let verdict = lock(limiter).before_send(shared.now());
                match verdict {
                    Ok(()) => break,
                    Err(wait) => tokio::time::sleep(Duration::from_secs_f64(wait)).await,
                }
            }
        }
        let outcome = attempt_once(client, uri).await;
        if let Some(limiter) = &shared.limiter {
            lock(limiter).on_response(outcome == Outcome::Throttle, shared.now());
        }
        match outcome {
            Outcome::Success => {
                lock(&shared.quota).release(attempt > 1);
                return true;
            }
            Outcome::Fatal => return false,
            Outcome::Throttle | Outcome::Transient => {
                if attempt >= MAX_ATTEMPTS || !lock(&shared.quota).acquire() {
                    return false;
                }
                tokio::time::sleep(backoff(attempt, rng.f64())).await;
                attempt += 1;
            }
        }
    }
}

async fn attempt_once(client: &Client<HttpConnector, Full<Bytes>>, uri: &str) -> Outcome {
    let request = Request::builder()
        .method(Method::POST)
        .uri(uri)
        .header("x-amz-target", "DynamoDB_20120810.PutItem")
        .header("content-type", "application/x-amz-json-1.0")
        .body(Full::new(Bytes::from_static(PUT_ITEM.as_bytes())));
    let Ok(request) = request else {
        return Outcome::Fatal;
    };
    let Ok(response) = client.request(request).await else {
        return classify(None, b"");
    };
    let status = response.status().as_u16();
    match response.into_body().collect().await {
        Ok(body) => classify(Some(status), &body.to_bytes()),
        Err(_) => classify(None, b""),
    }
}
