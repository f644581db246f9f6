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
async fn a_retry_after_of_decades_holds_its_request_only_max_pause_then_it_goes() {
    let up = first_then_ok(|| respond(429, &[("retry-after", "999999999")], "")).await;
    // Long enough for /status to be read while the pause lasts, however slow the host.
    let proxy = proxy(up.addr, "max_pause = \"3s\"\n").await;
    let url = format!("http://{}/", proxy.addr);
    let request = tokio::spawn(async move { get(&url).await });
    let admin = proxy.admin;
    eventually("the capped pause on /status", || async move {
        status(admin).await["pause_capped"]["asked_s"] == 999_999_999.0
    })
    .await;
    let shown = status(admin).await;
    assert_eq!(shown["pause_capped"]["header"], "retry-after", "{shown}");
    assert_eq!(capped(admin, "retry-after").await, 1.0);
    // Uncapped, the retry would wait past max_elapsed and the throttle go back;
    // capped, it waits out the 3 s and goes through.
    let answer = request.await.unwrap();
    assert_eq!(answer.status, 200, "{}", answer.text());
    let arrivals = up.arrivals();
    assert_eq!(arrivals.len(), 2);
    assert!(arrivals[1].at - arrivals[0].at >= Duration::from_millis(2990));
    assert!(status(admin).await["pause_capped"].is_null());
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

/// Resets and waits of about 1e20 s, in every dialect's spelling: each request is
/// answered and nothing panics (one such header once made every request's task panic:
/// the spacing spread over the window overflowed before the window was capped).
#[tokio::test]
async fn a_reset_of_1e20_seconds_in_any_dialect_leaves_every_request_answered() {
    const HUGE: &str = "99999999999999999999";
    let dialects: [(&str, &[(&str, &str)]); 7] = [
        (
            "x-ratelimit reset-after",
            &[
                ("x-ratelimit-limit", "5000"),
                ("x-ratelimit-remaining", "1"),
                ("x-ratelimit-reset-after", HUGE),
            ],
        ),
        (
            "x-ratelimit epoch reset",
            &[("x-ratelimit-remaining", "1"), ("x-ratelimit-reset", HUGE)],
        ),
        (
            "ietf",
            &[("ratelimit-remaining", "1"), ("ratelimit-reset", HUGE)],
        ),
        (
            "ietf structured",
            &[("ratelimit", r#""default";r=1;t=999999999999999"#)],
        ),
        (
            "openai",
            &[
                ("x-ratelimit-limit-requests", "5000"),
                ("x-ratelimit-remaining-requests", "1"),
                ("x-ratelimit-reset-requests", "99999999999999999999s"),
                ("x-ratelimit-limit-tokens", "5000"),
                ("x-ratelimit-remaining-tokens", "1"),
                ("x-ratelimit-reset-tokens", "2562047h47m16s"),
            ],
        ),
        (
            "anthropic",
            &[
                ("anthropic-ratelimit-requests-limit", "5000"),
                ("anthropic-ratelimit-requests-remaining", "1"),
                ("anthropic-ratelimit-requests-reset", "9999-12-31T23:59:59Z"),
            ],
        ),
        (
            "x-rate-limit",
            &[
                ("x-rate-limit-remaining", "0"),
                ("x-rate-limit-reset", HUGE),
            ],
        ),
    ];
    for (dialect, headers) in dialects {
        let headers: Vec<(String, String)> = headers
            .iter()
            .map(|(n, v)| (n.to_string(), v.to_string()))
            .collect();
        let up = upstream(move |_| {
            let headers = headers.clone();
            async move {
                let pairs: Vec<(&str, &str)> = headers
                    .iter()
                    .map(|(n, v)| (n.as_str(), v.as_str()))
                    .collect();
                respond(200, &pairs, "")
            }
        })
        .await;
        // A short max_pause: whatever the window asks, the next request waits at most
        // this long (or is shed at once), so every one of them is answered promptly.
        let config = "max_pause = \"200ms\"\n[upstream.retry]\nmax_attempts = 1\n";
        let proxy = proxy(up.addr, config).await;
        let url = format!("http://{}/", proxy.addr);
        for _ in 0..3 {
            let answer = get(&url).await;
            assert!(
                matches!(answer.status.as_u16(), 200 | 429 | 503),
                "{dialect}: {} {}",
                answer.status,
                answer.text()
            );
        }
        assert_eq!(requests(proxy.admin, "error").await, 0.0, "{dialect}");
    }
}

/// A throttle asking for a wait of 1e20 s in each wait header: answered, not dropped.
#[tokio::test]
async fn a_wait_of_1e20_seconds_on_a_throttle_is_answered() {
    for (name, value) in [
        ("retry-after", "99999999999999999999"),
        ("retry-after-ms", "99999999999999999999"),
        ("x-amz-retry-after", "99999999999999999999"),
        ("grpc-retry-pushback-ms", "99999999999999999999"),
    ] {
        let up = upstream(move |_| async move { respond(429, &[(name, value)], "") }).await;
        let config = "max_pause = \"200ms\"\n[upstream.retry]\nmax_attempts = 1\n";
        let proxy = proxy(up.addr, config).await;
        let url = format!("http://{}/", proxy.addr);
        for _ in 0..2 {
            let answer = get(&url).await;
            assert!(
                matches!(answer.status.as_u16(), 429 | 503),
                "{name}: {}",
                answer.status
            );
        }
    }
}
