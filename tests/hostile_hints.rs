//! An upstream whose headers ask for absurd pauses (finding 6 of the hostile review):
//! the pause is cut to `max_pause`, shown in `/status`, counted, and requests flow
//! again once it is over.

mod support;

use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::{Duration, Instant};

use support::*;

/// Answers the first request with `first`, every later one with 200.
async fn first_then_ok(first: fn() -> http::Response<Body>) -> TestUpstream {
    let answered = Arc::new(AtomicUsize::new(0));
    upstream(move |_| {
        let n = answered.fetch_add(1, Ordering::SeqCst);
        async move { if n == 0 { first() } else { ok() } }
    })
    .await
}

async fn capped(admin: std::net::SocketAddr, header: &str) -> f64 {
    let sample = format!("easeoff_hint_pauses_capped_total{{header=\"{header}\",upstream=\"up\"}}");
    metric(admin, &sample).await
}

#[tokio::test]
async fn a_retry_after_of_decades_pauses_only_max_pause_then_requests_flow() {
    let up = first_then_ok(|| respond(429, &[("retry-after", "999999999")], "")).await;
    // Long enough for /status to be read while the pause lasts, however slow the host.
    let config = "max_pause = \"3s\"\n[upstream.retry]\nmax_attempts = 1\n";
    let proxy = proxy(up.addr, config).await;
    let url = format!("http://{}/", proxy.addr);
    assert_eq!(get(&url).await.status, 429);
    let shown = status(proxy.admin).await;
    assert_eq!(shown["pause_capped"]["header"], "retry-after", "{shown}");
    assert_eq!(shown["pause_capped"]["asked_s"], 999_999_999.0, "{shown}");
    assert!(shown["paused_until"].is_string(), "{shown}");
    assert_eq!(capped(proxy.admin, "retry-after").await, 1.0);
    // Uncapped, the pause would reach past the queue's max_wait (30 s) and this
    // request would be shed; capped, it waits out the 3 s and goes through.
    let next = get(&url).await;
    assert_eq!(next.status, 200, "{}", next.text());
    let arrivals = up.arrivals();
    assert_eq!(arrivals.len(), 2);
    assert!(arrivals[1].at - arrivals[0].at >= Duration::from_millis(2990));
    assert!(status(proxy.admin).await["pause_capped"].is_null());
}

#[tokio::test]
async fn x_amz_retry_after_at_u64_max_is_capped_and_retried_after_max_pause() {
    let up =
        first_then_ok(|| respond(429, &[("x-amz-retry-after", "18446744073709551615")], "")).await;
    let proxy = proxy(up.addr, "max_pause = \"300ms\"\n").await;
    // The retry waits out the capped pause instead of the request being shed.
    let answer = get(&format!("http://{}/", proxy.addr)).await;
    assert_eq!(answer.status, 200, "{}", answer.text());
    assert_eq!(up.count(), 2);
    assert_eq!(capped(proxy.admin, "x-amz-retry-after").await, 1.0);
}

#[tokio::test]
async fn ratelimit_remaining_zero_with_a_huge_reset_pauses_only_max_pause() {
    let up = first_then_ok(|| {
        let exhausted = [
            ("ratelimit-remaining", "0"),
            ("ratelimit-reset", "18446744073709551615"),
        ];
        respond(200, &exhausted, "")
    })
    .await;
    let proxy = proxy(up.addr, "max_pause = \"300ms\"\n").await;
    let url = format!("http://{}/", proxy.addr);
    assert_eq!(get(&url).await.status, 200);
    assert_eq!(get(&url).await.status, 200);
    let arrivals = up.arrivals();
    assert!(arrivals[1].at - arrivals[0].at >= Duration::from_millis(290));
    assert_eq!(capped(proxy.admin, "ratelimit").await, 1.0);
}

#[tokio::test]
async fn ratelimit_remaining_one_with_a_far_reset_spaces_by_max_pause_and_shows_it() {
    let up = upstream(|_| async {
        let one_left = [
            ("ratelimit-remaining", "1"),
            ("ratelimit-reset", "99999999999"),
        ];
        respond(200, &one_left, "")
    })
    .await;
    // Uncapped, the floor spaces requests by the whole window (15 minutes at
    // max_interval): every request after the first is shed. max_pause leaves /status
    // ample time to be read while the floor lasts.
    let proxy = proxy(up.addr, "max_pause = \"3s\"\n").await;
    let url = format!("http://{}/", proxy.addr);
    let sent = Instant::now();
    assert_eq!(get(&url).await.status, 200);
    let shown = status(proxy.admin).await;
    assert_eq!(shown["rate_limit_floor"]["spacing_ms"], 3000.0, "{shown}");
    assert!(shown["rate_limit_floor"]["until"].is_string(), "{shown}");
    assert_eq!(shown["pause_capped"]["header"], "ratelimit", "{shown}");
    assert!(
        shown["paused_until"].is_null(),
        "a floor, not a pause: {shown}"
    );
    let next = get(&url).await;
    assert_eq!(next.status, 200, "{}", next.text());
    // The floor spaces dispatches: the second goes 3 s after the first, which went no
    // earlier than it was sent. (The first arrival also carries the upstream
    // connection's set-up, longer on a loaded host, so it cannot be the reference.)
    let arrivals = up.arrivals();
    assert!(arrivals[1].at - sent >= Duration::from_millis(2990));
    assert_eq!(capped(proxy.admin, "ratelimit").await, 2.0);
    assert_eq!(requests(proxy.admin, "shed").await, 0.0);
}
