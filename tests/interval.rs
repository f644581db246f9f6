//! The sleeper seen through the real proxy: bursts, sequences and pacing.

#![allow(
    clippy::cast_possible_truncation,
    clippy::cast_sign_loss,
    reason = "test figures are small"
)]

mod support;

use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::Duration;

use bytes::Bytes;
use support::*;
use tokio::sync::Barrier;

const SECOND: Duration = Duration::from_secs(1);

/// A responsive sleeper with exact numbers (no randomization), and no retries so every
/// answer reaches the client as the upstream gave it.
fn sleeper(initial: &str, up: f64, down: f64, threshold: u32) -> String {
    format!(
        "[upstream.sleeper]\nstrategy = \"responsive\"\ninitial_interval = \"{initial}\"\nup_multiplier = {up}\ndown_multiplier = {down}\ndown_threshold = {threshold}\nrandomization_factor = 0.0\n{NO_RETRY}"
    )
}

const NO_RETRY: &str = "[upstream.retry]\nmax_attempts = 1\n";

#[tokio::test]
async fn sixty_four_requests_throttled_together_raise_the_interval_once() {
    let barrier = Arc::new(Barrier::new(64));
    let up = upstream(move |_| {
        let barrier = Arc::clone(&barrier);
        async move {
            // Answer only when all 64 are in flight, so they come back as one burst.
            barrier.wait().await;
            respond(429, &[], "slow down")
        }
    })
    .await;
    let proxy = proxy(up.addr, &sleeper("100ms", 1.5, 0.9, 10)).await;
    let client = client();
    let url = format!("http://{}/", proxy.addr);
    let clients: Vec<_> = (0..64)
        .map(|_| {
            let (client, url) = (client.clone(), url.clone());
            tokio::spawn(async move { send(&client, "GET", &url, &[], Bytes::new()).await.status })
        })
        .collect();
    for r in clients {
        assert_eq!(r.await.unwrap(), 429);
    }
    assert_eq!(up.count(), 64);
    let a = proxy.admin;
    assert_eq!(
        metric(
            a,
            "easeoff_throttles_total{signal=\"status\",upstream=\"up\"}"
        )
        .await,
        64.0
    );
    assert_eq!(
        metric(a, "easeoff_interval_increases_total{upstream=\"up\"}").await,
        1.0
    );
    assert_eq!(
        metric(a, "easeoff_upstream_interval_seconds{upstream=\"up\"}").await,
        0.1
    );
    assert_eq!(requests(a, "throttled").await, 64.0);
}

#[tokio::test]
async fn sequential_throttles_raise_the_interval_each_time() {
    let up = upstream(|_| async { respond(429, &[], "") }).await;
    let proxy = proxy(up.addr, &sleeper("10ms", 1.5, 0.9, 10)).await;
    let client = client();
    let url = format!("http://{}/", proxy.addr);
    let mut seen = Vec::new();
    for _ in 0..5 {
        assert_eq!(
            send(&client, "GET", &url, &[], Bytes::new()).await.status,
            429
        );
        seen.push(interval_ms(proxy.admin).await);
    }
    assert_eq!(seen, [10.0, 15.0, 22.5, 33.75, 50.625]);
    assert_eq!(
        metric(
            proxy.admin,
            "easeoff_interval_increases_total{upstream=\"up\"}"
        )
        .await,
        5.0
    );
}

#[tokio::test]
async fn runs_of_successes_lower_the_interval_step_by_step_to_zero() {
    // Four throttles, then successes.
    let answered = Arc::new(AtomicUsize::new(0));
    let up = upstream(move |_| {
        let n = answered.fetch_add(1, Ordering::SeqCst);
        async move { if n < 4 { respond(429, &[], "") } else { ok() } }
    })
    .await;
    let proxy = proxy(up.addr, &sleeper("10ms", 2.0, 0.5, 2)).await;
    let client = client();
    let url = format!("http://{}/", proxy.addr);
    for _ in 0..4 {
        send(&client, "GET", &url, &[], Bytes::new()).await;
    }
    assert_eq!(interval_ms(proxy.admin).await, 80.0);
    let mut steps = Vec::new();
    for _ in 0..4 {
        for _ in 0..2 {
            assert_eq!(
                send(&client, "GET", &url, &[], Bytes::new()).await.status,
                200
            );
        }
        steps.push(interval_ms(proxy.admin).await);
    }
    // 80 → 40 → 20 → 10 → 5, which is below the 10 ms initial interval: 0.
    assert_eq!(steps, [40.0, 20.0, 10.0, 0.0]);
    let a = proxy.admin;
    assert_eq!(
        metric(a, "easeoff_interval_decreases_total{upstream=\"up\"}").await,
        4.0
    );
    // Successes at interval 0 change nothing.
    for _ in 0..5 {
        send(&client, "GET", &url, &[], Bytes::new()).await;
    }
    assert_eq!(
        metric(a, "easeoff_interval_decreases_total{upstream=\"up\"}").await,
        4.0
    );
    assert_eq!(
        metric(a, "easeoff_sleeper_invocations_total{upstream=\"up\"}").await,
        17.0
    );
}

#[tokio::test]
async fn with_a_fixed_interval_dispatches_are_spaced_and_in_arrival_order() {
    let up = upstream(|_| async { ok() }).await;
    let (proxy, dispatches) = proxy_observed(
        up.addr,
        "[upstream.sleeper]\nstrategy = \"constant\"\ninitial_interval = \"50ms\"\n",
    )
    .await;
    let client = client();
    let url = format!("http://{}/", proxy.addr);
    let mut requests = Vec::new();
    for i in 0..10usize {
        let (client, url) = (client.clone(), url.clone());
        requests.push(tokio::spawn(async move {
            send(
                &client,
                "GET",
                &url,
                &[("x-seq", &i.to_string())],
                Bytes::new(),
            )
            .await
            .status
        }));
        // The next request starts only once this one is queued or dispatched, so
        // easeoff sees them in this order.
        eventually("the request to reach easeoff", || async {
            up.count() + status(proxy.admin).await["waiting"].as_u64().unwrap() as usize > i
        })
        .await;
    }
    for r in requests {
        assert_eq!(r.await.unwrap(), 200);
    }
    let arrivals = up.arrivals();
    let order: Vec<String> = arrivals
        .iter()
        .map(|a| a.headers["x-seq"].to_str().unwrap().to_string())
        .collect();
    assert_eq!(order, (0..10).map(|i| i.to_string()).collect::<Vec<_>>());
    // Spacing is the pacer's promise, so it is measured where the pacer keeps it: at
    // dispatch. A loaded host may deliver one request to the upstream late and the next
    // on time, which says nothing about easeoff. Slots stay 50 ms apart: no dispatch
    // comes before its slot (within tokio's millisecond tick), and one after a late
    // release still comes at least half the interval after it.
    let dispatched = dispatches.wait_for(10).await;
    assert_eq!(dispatched.len(), 10);
    for (i, at) in dispatched.iter().enumerate() {
        let slot = Duration::from_millis(50) * u32::try_from(i).unwrap();
        let since = *at - dispatched[0];
        assert!(
            since + Duration::from_millis(1) >= slot,
            "dispatch {i} after {since:?}"
        );
    }
    for pair in dispatched.windows(2) {
        let gap = pair[1] - pair[0];
        assert!(gap >= Duration::from_millis(25), "gap of {gap:?}");
    }
    let span = dispatched[9] - dispatched[0];
    assert!(span >= Duration::from_millis(449), "9 gaps took {span:?}");
    // Every request the spacing held counts as a sleep: 9 of 10 when each arrives
    // within 50 ms of the one before, fewer when a loaded host delays an arrival past
    // its slot (then nothing held it).
    let held = dispatches.held();
    assert!(held <= 9, "{held} held: the first request had a free slot");
    assert_eq!(
        metric(proxy.admin, "easeoff_sleeps_total{upstream=\"up\"}").await,
        held as f64
    );
}

#[tokio::test]
async fn a_retry_after_holds_its_request_and_a_refusal_within_it_the_upstream() {
    // Long enough that /status and /metrics are read while it lasts on a loaded host.
    let pause = 5.0;
    let up = throttles_first(2, || respond(429, &[("retry-after", "5")], "")).await;
    let proxy = proxy(up.addr, NO_RETRY).await;
    let client = client();
    let url = format!("http://{}/", proxy.addr);
    let by_header =
        "easeoff_lane_hint_pauses_total{header=\"retry-after\",lane=\"default\",upstream=\"up\"}";
    assert_eq!(
        send(&client, "GET", &url, &[], Bytes::new()).await.status,
        429
    );
    // One refusal: its Retry-After binds the request it answers (here given back).
    let first = status(proxy.admin).await;
    assert!(first["paused_until"].is_null(), "{first}");
    // Sent within that pause and refused again: now the upstream waits.
    assert_eq!(
        send(&client, "GET", &url, &[], Bytes::new()).await.status,
        429
    );
    let paused = status(proxy.admin).await;
    assert!(paused["paused_until"].is_string(), "{paused}");
    // The pause left, counted down from the Retry-After.
    let left = metric(
        proxy.admin,
        "easeoff_upstream_pause_seconds{upstream=\"up\"}",
    )
    .await;
    assert!(left > 0.0 && left <= pause, "{left} s of pause left");
    assert_eq!(
        metric(proxy.admin, by_header).await,
        1.0,
        "the header behind the pause"
    );
    assert_eq!(
        send(&client, "GET", &url, &[], Bytes::new()).await.status,
        200
    );
    let arrivals = up.arrivals();
    let gap = arrivals[2].at - arrivals[1].at;
    assert!(
        gap >= Duration::from_secs_f64(pause),
        "the third request went out after {gap:?}"
    );
}

#[tokio::test]
async fn an_http_date_retry_after_holds_its_retry() {
    let up = throttles_first(1, || {
        let at = std::time::SystemTime::now() + Duration::from_secs(2);
        respond(503, &[("retry-after", &httpdate::fmt_http_date(at))], "")
    })
    .await;
    let proxy = proxy(up.addr, "").await;
    let client = client();
    let url = format!("http://{}/", proxy.addr);
    assert_eq!(
        send(&client, "GET", &url, &[], Bytes::new()).await.status,
        200
    );
    let arrivals = up.arrivals();
    // An HTTP-date has whole seconds: "2 s from now" lies between 1 and 2 s ahead.
    let gap = arrivals[1].at - arrivals[0].at;
    assert!(gap >= SECOND, "the retry went out after {gap:?}");
}
