//! Upstreams that go away, reset connections or break off: clear answers, backoff,
//! and recovery when they come back.

#![allow(
    clippy::cast_possible_truncation,
    clippy::cast_sign_loss,
    reason = "test figures are small"
)]

mod support;

use std::time::{Duration, Instant};

use bytes::Bytes;
use http_body_util::BodyExt;
use support::*;
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpListener;

const SECOND: Duration = Duration::from_secs(1);

#[tokio::test]
async fn a_dead_upstream_is_tried_on_the_backoff_schedule_and_traffic_resumes_when_it_returns() {
    let dead = dead_port().await;
    // Exact waits (no jitter): attempts at 0, 250, 750 and 1,750 ms, then a 2 s wait,
    // windows long enough for a loaded host's probes to land in and read.
    let proxy = proxy(
        dead,
        "[upstream.retry]\nmax_attempts = 1\n[upstream.connect_backoff]\ninitial = \"250ms\"\nmultiplier = 2.0\njitter = 0.0\nmax = \"2s\"\n",
    )
    .await;
    let url = format!("http://{}/", proxy.addr);
    let a = proxy.admin;
    let started = Instant::now();
    // Each attempt as the probe that made it saw it: (probe sent, failure counted).
    let mut attempts: Vec<(Instant, Instant)> = Vec::new();
    let mut turned_away = 0;
    while attempts.len() < 4 {
        assert!(
            started.elapsed() < PATIENCE,
            "only {} connection attempts",
            attempts.len()
        );
        let probe = Instant::now();
        let answer = get(&url).await;
        assert_eq!(answer.status, 502);
        assert_eq!(answer.headers["x-easeoff-reason"], "upstream-unavailable");
        assert!(answer.headers.contains_key("retry-after"));
        let failures = metric(a, "easeoff_connect_failures_total{upstream=\"up\"}").await as usize;
        if failures > attempts.len() {
            attempts.push((probe, Instant::now()));
        } else {
            turned_away += 1;
        }
    }
    assert!(
        turned_away > 0,
        "requests during the backoff were turned away without connecting"
    );
    // An attempt happened within its probe, so two lie at most from the start of the
    // first's probe to the end of the second's apart: however slow a loaded host made
    // the probes, that span holds the whole wait.
    for (i, nominal) in [250, 500, 1000].iter().enumerate() {
        let most = attempts[i + 1].1 - attempts[i].0;
        assert!(
            most >= Duration::from_millis(*nominal),
            "wait {i}: at most {most:?} < {nominal} ms"
        );
    }
    assert!(metric(a, "easeoff_connect_backoff_seconds{upstream=\"up\"}").await > 0.0);

    // The upstream comes back on the same port.
    let _up = upstream_at(dead, |_| async { ok() }).await;
    eventually("traffic to resume", || async {
        get(&url).await.status == 200
    })
    .await;
    assert_eq!(
        metric(a, "easeoff_connect_backoff_seconds{upstream=\"up\"}").await,
        0.0
    );
    // Reset: the next requests go straight through.
    for _ in 0..5 {
        assert_eq!(get(&url).await.status, 200);
    }
}

#[tokio::test]
async fn a_failed_connection_is_retried_when_the_backoff_ends_within_the_budget() {
    let dead = refusing_port();
    let proxy = proxy(
        dead,
        "[upstream.connect_backoff]\ninitial = \"200ms\"\njitter = 0.0\n[upstream.retry]\nmax_attempts = 3\n",
    )
    .await;
    let url = format!("http://{}/", proxy.addr);
    let started = Instant::now();
    let answer = get(&url).await;
    // Attempts at 0, 200 ms and 520 ms, then a 502.
    assert_eq!(answer.status, 502);
    assert!(
        started.elapsed() >= Duration::from_millis(520),
        "{:?}",
        started.elapsed()
    );
    let a = proxy.admin;
    assert_eq!(
        metric(a, "easeoff_connect_failures_total{upstream=\"up\"}").await,
        3.0
    );
    assert_eq!(retries(a, "connect").await, 2.0);
}

/// A raw upstream: reads a request, then writes `answer` and resets the connection.
async fn resets_after(answer: &'static [u8]) -> std::net::SocketAddr {
    let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    tokio::spawn(async move {
        loop {
            let Ok((mut socket, _)) = listener.accept().await else {
                continue;
            };
            tokio::spawn(async move {
                let mut buf = [0u8; 4096];
                let _ = socket.read(&mut buf).await;
                let _ = socket.write_all(answer).await;
                let _ = socket.flush().await;
                // Linger 0: close with a reset rather than an orderly FIN. (Deprecated
                // because a non-zero linger blocks on drop; zero does not.)
                #[allow(deprecated)]
                let _ = socket.set_linger(Some(Duration::ZERO));
                drop(socket);
            });
        }
    });
    addr
}

#[tokio::test]
async fn a_reset_before_any_answer_is_a_502() {
    let addr = resets_after(b"").await;
    let proxy = proxy(addr, "").await;
    let answer = get(&format!("http://{}/", proxy.addr)).await;
    assert_eq!(answer.status, 502);
    assert_eq!(answer.headers["x-easeoff-reason"], "upstream-unavailable");
    assert_eq!(requests(proxy.admin, "error").await, 1.0);
}

#[tokio::test]
async fn a_reset_mid_answer_reaches_the_client_as_an_error_not_a_short_body() {
    let addr = resets_after(b"HTTP/1.1 200 OK\r\ncontent-length: 100000\r\n\r\nonly ten..").await;
    let proxy = proxy(addr, "").await;
    let request = http::Request::get(format!("http://{}/", proxy.addr))
        .body(http_body_util::Full::new(Bytes::new()))
        .unwrap();
    let response = client().request(request).await.unwrap();
    assert_eq!(response.status(), 200);
    let body = tokio::time::timeout(SECOND * 5, response.into_body().collect())
        .await
        .unwrap();
    assert!(body.is_err(), "the client must see the body break off");
}

#[tokio::test]
async fn a_reset_mid_error_body_is_a_502() {
    // A throttle-shaped answer whose body easeoff reads for classification.
    let addr =
        resets_after(b"HTTP/1.1 400 Bad Request\r\ncontent-length: 500\r\n\r\n{\"__type\":").await;
    let proxy = proxy(addr, "preset = \"dynamodb\"").await;
    let answer = get(&format!("http://{}/", proxy.addr)).await;
    assert_eq!(answer.status, 502);
    assert_eq!(answer.headers["x-easeoff-reason"], "upstream-unavailable");
}
