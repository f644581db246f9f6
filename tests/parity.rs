//! `easeoff simulate` and the proxy make the same retry and budget decisions: both run
//! one attempt policy, so the same throttle script gives the same retries, budget
//! refusals and connect retries in the simulation (virtual time, modelled upstream)
//! and in the real server (an in-test upstream on loopback).

#![allow(
    clippy::cast_possible_truncation,
    clippy::cast_sign_loss,
    reason = "test figures are small"
)]

mod support;

use std::sync::{Arc, Mutex};
use std::time::{Duration, SystemTime};

use bytes::Bytes;
use easeoff::Config;
use easeoff::clock::Clock;
use easeoff::lane::Route;
use easeoff::metrics::Metrics;
use easeoff::simulate::{self, Answer, Ending};
use easeoff::upstream::Control;
use support::{client, metric, proxy, refusing_port, respond, sample_value, send, throttles_first};

/// What one side decided, as the metrics and the upstream saw it.
#[derive(Debug, PartialEq)]
struct Decisions {
    attempts: usize,
    retries_throttle: f64,
    retries_connect: f64,
    budget_exhausted: f64,
    connect_failures: f64,
}

const SAMPLES: [&str; 4] = [
    "easeoff_retries_total{reason=\"throttle\",upstream=\"up\"}",
    "easeoff_retries_total{reason=\"connect\",upstream=\"up\"}",
    "easeoff_retry_budget_exhausted_total{upstream=\"up\"}",
    "easeoff_connect_failures_total{upstream=\"up\"}",
];

fn decisions(attempts: usize, value: impl Fn(&str) -> f64) -> Decisions {
    Decisions {
        attempts,
        retries_throttle: value(SAMPLES[0]),
        retries_connect: value(SAMPLES[1]),
        budget_exhausted: value(SAMPLES[2]),
        connect_failures: value(SAMPLES[3]),
    }
}

/// Runs `requests` client requests one after the other through simulate's request
/// path against an upstream that always gives `answer` after `latency`; returns the
/// decisions, how each request ended and when each attempt went (virtual time since
/// the start).
fn simulated(
    extra: &str,
    requests: usize,
    answer: Answer,
    latency: Duration,
) -> (Decisions, Vec<Ending>, Vec<Duration>) {
    let text = format!(
        "[[upstream]]\nname = \"up\"\nlisten = \"127.0.0.1:0\"\nurl = \"http://127.0.0.1:9\"\n{extra}\n"
    );
    let mut config = Config::parse(&text, "test.toml", &|_| None).unwrap();
    let settings = config.upstreams.remove(0);
    let metrics = Metrics::new().unwrap();
    let (clock, manual) = Clock::manual(SystemTime::UNIX_EPOCH);
    let control = Control::new(
        settings,
        &metrics,
        None,
        fastrand::Rng::with_seed(1),
        clock.clone(),
    );
    let start = clock.now();
    let sent = Arc::new(Mutex::new(Vec::new()));
    let endings = manual.runtime().unwrap().block_on(async {
        let mut endings = Vec::new();
        for _ in 0..requests {
            let sent = Arc::clone(&sent);
            let route = Route::one(Arc::clone(control.lanes.default_lane()));
            let (ending, _) = simulate::request(&control, &route, latency, |slot, _| {
                sent.lock().unwrap().push(slot.dispatched_at - start);
                answer
            })
            .await;
            endings.push(ending);
        }
        endings
    });
    let text = metrics.render().unwrap();
    let sent = sent.lock().unwrap().clone();
    let value = |sample: &str| sample_value(&text, sample).unwrap();
    (decisions(sent.len(), value), endings, sent)
}

async fn proxied(admin: std::net::SocketAddr, attempts: usize) -> Decisions {
    let mut values = Vec::new();
    for sample in SAMPLES {
        values.push(metric(admin, sample).await);
    }
    decisions(attempts, |sample| {
        values[SAMPLES.iter().position(|s| *s == sample).unwrap()]
    })
}

#[tokio::test]
async fn budget_exhaustion_is_counted_alike_in_simulate_and_the_proxy() {
    let extra = "[upstream.sleeper]\nstrategy = \"off\"\n[upstream.retry]\nbudget_min_per_second = 1\nbudget_ratio = 0.2\nmax_attempts = 5\n";
    let (simulated, endings, _) = tokio::task::spawn_blocking(move || {
        simulated(extra, 100, Answer::Throttle, Duration::from_millis(1))
    })
    .await
    .unwrap();
    assert!(
        endings.iter().all(|e| *e == Ending::Throttled),
        "{endings:?}"
    );

    let up = throttles_first(usize::MAX, || respond(429, &[], "")).await;
    let proxy = proxy(up.addr, extra).await;
    let client = client();
    let url = format!("http://{}/", proxy.addr);
    for _ in 0..100 {
        let answer = send(&client, "GET", &url, &[], Bytes::new()).await;
        assert_eq!(answer.status, 429);
    }
    let proxied = proxied(proxy.admin, up.count()).await;

    // 10 retries from the floor and 20% of 100 requests; every later request ends on
    // one refusal.
    assert_eq!(simulated.retries_throttle, 30.0);
    assert_eq!(simulated.budget_exhausted, 98.0);
    assert_eq!(simulated, proxied);
}

#[tokio::test]
async fn connect_retries_follow_the_backoff_alike_in_simulate_and_the_proxy() {
    let extra = "[upstream.connect_backoff]\ninitial = \"200ms\"\njitter = 0.0\n[upstream.retry]\nmax_attempts = 3\n";
    let (simulated, endings, sent) = tokio::task::spawn_blocking(move || {
        // A refused connection fails at once.
        simulated(extra, 1, Answer::Unreachable, Duration::ZERO)
    })
    .await
    .unwrap();
    assert_eq!(endings, [Ending::Unreachable]);
    // The probes go when the backoff (200 ms, then 320 ms) ends.
    let ms = Duration::from_millis;
    assert_eq!(sent, [ms(0), ms(200), ms(520)]);

    let proxy = proxy(refusing_port(), extra).await;
    let answer = support::get(&format!("http://{}/", proxy.addr)).await;
    assert_eq!(answer.status, 502);
    let failures = metric(proxy.admin, SAMPLES[3]).await as usize;
    let proxied = proxied(proxy.admin, failures).await;

    assert_eq!(simulated.retries_connect, 2.0);
    assert_eq!(simulated, proxied);
}

#[tokio::test]
async fn an_aws_clients_failed_connection_goes_back_at_once_alike_in_simulate_and_the_proxy() {
    // An AWS SDK retries on its own, so easeoff does not retry its connect failures.
    let extra = "preset = \"aws\"\n[upstream.connect_backoff]\ninitial = \"200ms\"\njitter = 0.0\n[upstream.retry]\nmax_attempts = 3\n";
    let (simulated, endings, sent) = tokio::task::spawn_blocking(move || {
        simulated(extra, 1, Answer::Unreachable, Duration::ZERO)
    })
    .await
    .unwrap();
    assert_eq!(endings, [Ending::Unreachable]);
    assert_eq!(sent, [Duration::ZERO]);

    let proxy = proxy(refusing_port(), extra).await;
    let answer = support::get(&format!("http://{}/", proxy.addr)).await;
    assert!(answer.status.is_server_error(), "{}", answer.status);
    let failures = metric(proxy.admin, SAMPLES[3]).await as usize;
    let proxied = proxied(proxy.admin, failures).await;

    assert_eq!(simulated.retries_connect, 0.0);
    assert_eq!(simulated.connect_failures, 1.0);
    assert_eq!(simulated, proxied);
}

/// Lane `b`'s and `default`'s dispatches.
const LANE_SAMPLES: [&str; 2] = [
    "easeoff_lane_dispatches_total{lane=\"b\",upstream=\"up\"}",
    "easeoff_lane_dispatches_total{lane=\"default\",upstream=\"up\"}",
];

#[tokio::test]
async fn a_retry_waits_in_the_lane_the_answer_named_alike_in_simulate_and_the_proxy() {
    // Requests are keyed by method; the throttle names the bucket `b`, which the retry
    // takes in (`Lanes::refresh`).
    let extra = "[upstream.sleeper]\nstrategy = \"off\"\n[upstream.lanes]\nby = [\"method\"]\nfrom_response = \"x-bucket\"\n";
    let simulated = tokio::task::spawn_blocking(move || {
        let text = format!(
            "[[upstream]]\nname = \"up\"\nlisten = \"127.0.0.1:0\"\nurl = \"http://127.0.0.1:9\"\n{extra}\n"
        );
        let mut config = Config::parse(&text, "test.toml", &|_| None).unwrap();
        let metrics = Metrics::new().unwrap();
        let (clock, manual) = Clock::manual(SystemTime::UNIX_EPOCH);
        let control = Control::new(
            config.upstreams.remove(0),
            &metrics,
            None,
            fastrand::Rng::with_seed(1),
            clock,
        );
        let (head, ()) = http::Request::get("/").body(()).unwrap().into_parts();
        let route = control.lanes.route(&head, None);
        let mut answers = 0;
        let (ending, _) = manual.runtime().unwrap().block_on(simulate::request(
            &control,
            &route,
            Duration::from_millis(1),
            |_, _| {
                answers += 1;
                if answers > 1 {
                    return Answer::Success;
                }
                // What the proxy learns from the answer's `x-bucket: b`.
                control.lanes.learn("GET", "b");
                Answer::Throttle
            },
        ));
        assert_eq!(ending, Ending::Success);
        let text = metrics.render().unwrap();
        LANE_SAMPLES.map(|s| sample_value(&text, s).unwrap())
    })
    .await
    .unwrap();

    let up = throttles_first(1, || respond(429, &[("x-bucket", "b")], "")).await;
    let proxy = proxy(up.addr, extra).await;
    let answer = support::get(&format!("http://{}/", proxy.addr)).await;
    assert_eq!(answer.status, 200);
    let mut proxied = [0.0; 2];
    for (value, sample) in proxied.iter_mut().zip(LANE_SAMPLES) {
        *value = metric(proxy.admin, sample).await;
    }

    assert_eq!(simulated, [1.0, 1.0]);
    assert_eq!(simulated, proxied);
}
