//! easeoff absorbs throttles: retries after the upstream's hints, within attempts,
//! budget and time; what it cannot absorb reaches the client unchanged.

mod support;

use std::time::Duration;

use bytes::Bytes;
use support::*;

const SECOND: Duration = Duration::from_secs(1);

async fn put(proxy: &Proxy, body: &'static str) -> Answer {
    send(
        &client(),
        "POST",
        &format!("http://{}/items", proxy.addr),
        &[("content-type", "application/json")],
        body,
    )
    .await
}

#[tokio::test]
async fn a_throttled_write_is_retried_once_retry_after_has_passed() {
    let up = throttles_first(1, || respond(429, &[("retry-after", "1")], "slow down")).await;
    let proxy = proxy(up.addr, "").await;
    let answer = put(&proxy, r#"{"id":1}"#).await;
    assert_eq!(
        (answer.status.as_u16(), answer.text().as_str()),
        (200, "stored")
    );
    let arrivals = up.arrivals();
    assert_eq!(arrivals.len(), 2);
    let gap = arrivals[1].at - arrivals[0].at;
    assert!(
        gap >= SECOND,
        "the retry went out {gap:?} after the throttle"
    );
    let a = proxy.admin;
    assert_eq!(retries(a, "throttle").await, 1.0);
    assert_eq!(requests(a, "success").await, 1.0);
    assert_eq!(requests(a, "throttled").await, 0.0);
}

#[tokio::test]
async fn no_dispatch_goes_out_before_an_http_date_retry_after() {
    let up = throttles_first(1, || {
        let at = std::time::SystemTime::now() + Duration::from_secs(2);
        respond(429, &[("retry-after", &httpdate::fmt_http_date(at))], "")
    })
    .await;
    let proxy = proxy(up.addr, "").await;
    assert_eq!(put(&proxy, "{}").await.status, 200);
    let arrivals = up.arrivals();
    // The date has whole seconds, so "2 s from now" is more than 1 s away.
    assert!(arrivals[1].at - arrivals[0].at >= SECOND);
}

#[tokio::test]
async fn the_retried_request_carries_the_same_body_and_headers() {
    let up = throttles_first(1, || respond(429, &[], "")).await;
    let proxy = proxy(up.addr, "").await;
    let answer = send(
        &client(),
        "POST",
        &format!("http://{}/items?x=1", proxy.addr),
        &[("x-request-id", "abc")],
        "payload",
    )
    .await;
    assert_eq!(answer.status, 200);
    let arrivals = up.arrivals();
    for a in &arrivals {
        assert_eq!(a.method, "POST");
        assert_eq!(a.uri.path_and_query().unwrap().as_str(), "/items?x=1");
        assert_eq!(a.headers["x-request-id"], "abc");
        assert_eq!(a.headers["content-length"], "7");
    }
}

#[tokio::test]
async fn the_last_throttle_reaches_the_client_unchanged_after_max_attempts() {
    let up = throttles_first(usize::MAX, || {
        respond(429, &[("x-upstream", "yes")], "quota exceeded")
    })
    .await;
    let proxy = proxy(up.addr, "[upstream.sleeper]\nstrategy = \"off\"\n").await;
    let answer = put(&proxy, "{}").await;
    assert_eq!(answer.status, 429);
    assert_eq!(answer.text(), "quota exceeded");
    assert_eq!(answer.headers["x-upstream"], "yes");
    assert!(!answer.headers.contains_key("x-easeoff-reason"));
    assert_eq!(up.count(), 5, "max_attempts = 5 by default");
    let a = proxy.admin;
    assert_eq!(retries(a, "throttle").await, 4.0);
    assert_eq!(requests(a, "throttled").await, 1.0);
}

#[tokio::test]
async fn retries_stay_within_the_budget_when_everything_is_throttled() {
    let up = throttles_first(usize::MAX, || respond(429, &[], "")).await;
    // One retry a second as the floor (10 per 10 s window), 20% of requests on top.
    let proxy = proxy(
        up.addr,
        "[upstream.sleeper]\nstrategy = \"off\"\n[upstream.retry]\nbudget_min_per_second = 1\nbudget_ratio = 0.2\nmax_attempts = 5\n",
    )
    .await;
    let client = client();
    let url = format!("http://{}/", proxy.addr);
    for _ in 0..100 {
        assert_eq!(
            send(&client, "GET", &url, &[], Bytes::new()).await.status,
            429
        );
    }
    let a = proxy.admin;
    let retries = metric(
        a,
        "easeoff_retries_total{reason=\"throttle\",upstream=\"up\"}",
    )
    .await;
    // 10 from the floor + 20% of 100 requests = 30, where 400 were wanted. The first
    // two requests get all four of theirs; every later one ends on one refusal.
    assert_eq!(retries, 30.0);
    assert_eq!(up.count(), 130);
    assert_eq!(
        metric(a, "easeoff_retry_budget_exhausted_total{upstream=\"up\"}").await,
        98.0
    );
}

#[tokio::test]
async fn server_errors_are_not_retried() {
    let up = throttles_first(usize::MAX, || respond(500, &[], "boom")).await;
    let proxy = proxy(up.addr, "").await;
    assert_eq!(put(&proxy, "{}").await.status, 500);
    assert_eq!(up.count(), 1);
}

#[tokio::test]
async fn a_negative_grpc_pushback_is_not_retried() {
    let up = throttles_first(usize::MAX, || {
        respond(
            200,
            &[
                ("content-type", "application/grpc"),
                ("grpc-status", "8"),
                ("grpc-retry-pushback-ms", "-1"),
            ],
            "",
        )
    })
    .await;
    let proxy = proxy(up.addr, "preset = \"grpc\"").await;
    let answer = send(
        &client(),
        "POST",
        &format!("http://{}/svc/M", proxy.addr),
        &[("content-type", "application/grpc")],
        Bytes::from_static(&[0, 0, 0, 0, 0]),
    )
    .await;
    assert_eq!(answer.headers["grpc-status"], "8");
    assert_eq!(up.count(), 1);
}

#[tokio::test]
async fn max_elapsed_bounds_how_long_retries_may_take() {
    // Each throttle asks for a 30 s pause; the request may take 10 s in all.
    let max_elapsed = SECOND * 10;
    let up = throttles_first(usize::MAX, || {
        respond(429, &[("retry-after", "30")], "later")
    })
    .await;
    let proxy = proxy(up.addr, "[upstream.retry]\nmax_elapsed = \"10s\"\n").await;
    let started = std::time::Instant::now();
    let answer = put(&proxy, "{}").await;
    assert_eq!(
        (answer.status.as_u16(), answer.text().as_str()),
        (429, "later")
    );
    // At once: not after waiting out the budget (10 s) or the pause (30 s).
    assert!(
        started.elapsed() < max_elapsed / 2,
        "gave up after {:?}",
        started.elapsed()
    );
    assert_eq!(up.count(), 1);
}

#[tokio::test]
async fn a_batch_write_with_unprocessed_items_raises_the_interval_and_passes_through() {
    const PARTIAL: &str =
        r#"{"UnprocessedItems":{"orders":[{"PutRequest":{"Item":{"pk":{"S":"7"}}}}]}}"#;
    let up = upstream(|_| async {
        respond(
            200,
            &[("content-type", "application/x-amz-json-1.0")],
            PARTIAL,
        )
    })
    .await;
    let proxy = proxy(
        up.addr,
        "preset = \"dynamodb\"\n[upstream.sleeper]\ninitial_interval = \"10ms\"\nrandomization_factor = 0.0\n",
    )
    .await;
    let answer = send(
        &client(),
        "POST",
        &format!("http://{}/", proxy.addr),
        &[("x-amz-target", "DynamoDB_20120810.BatchWriteItem")],
        r#"{"RequestItems":{}}"#,
    )
    .await;
    assert_eq!(answer.status, 200);
    assert_eq!(
        answer.text(),
        PARTIAL,
        "the answer reaches the client unchanged"
    );
    assert_eq!(up.count(), 1, "a partial throttle is not retried");
    let a = proxy.admin;
    eventually("the partial throttle to be recorded", || async {
        metric(
            a,
            "easeoff_throttles_total{signal=\"partial\",upstream=\"up\"}",
        )
        .await
            == 1.0
    })
    .await;
    assert_eq!(interval_ms(a).await, 10.0);
    assert_eq!(requests(a, "success").await, 1.0);
}

#[tokio::test]
async fn a_complete_batch_write_is_a_success() {
    let up = upstream(|_| async { respond(200, &[], r#"{"UnprocessedItems":{}}"#) }).await;
    let proxy = proxy(up.addr, "preset = \"dynamodb\"").await;
    let answer = send(
        &client(),
        "POST",
        &format!("http://{}/", proxy.addr),
        &[("x-amz-target", "DynamoDB_20120810.BatchWriteItem")],
        "{}",
    )
    .await;
    assert_eq!(answer.status, 200);
    let a = proxy.admin;
    eventually("the success to be recorded", || async {
        metric(a, "easeoff_sleeper_invocations_total{upstream=\"up\"}").await == 1.0
    })
    .await;
    assert_eq!(
        metric(
            a,
            "easeoff_throttles_total{signal=\"partial\",upstream=\"up\"}"
        )
        .await,
        0.0
    );
}

#[tokio::test]
async fn a_body_sent_in_chunks_is_replayed_whole() {
    let bodies = std::sync::Arc::new(std::sync::Mutex::new(Vec::new()));
    let seen = bodies.clone();
    let up = upstream(move |req| {
        let seen = seen.clone();
        async move {
            use http_body_util::BodyExt;
            let body = req.into_body().collect().await.unwrap().to_bytes();
            let mut seen = seen.lock().unwrap();
            seen.push(body);
            if seen.len() == 1 {
                respond(429, &[], "")
            } else {
                respond(200, &[], "stored")
            }
        }
    })
    .await;
    let proxy = proxy(up.addr, "").await;
    // Three chunks, which reach easeoff as three frames.
    let request = "POST /items HTTP/1.1\r\nHost: x\r\nTransfer-Encoding: chunked\r\n\
                   Connection: close\r\n\r\n3\r\nabc\r\n3\r\ndef\r\n1\r\ng\r\n0\r\n\r\n";
    let answer = raw_exchange(proxy.addr, request, 10 * SECOND).await;
    assert!(answer.starts_with("HTTP/1.1 200"), "{answer}");
    assert_eq!(*bodies.lock().unwrap(), ["abcdefg", "abcdefg"]);
}
