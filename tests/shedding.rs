//! Bounded waiting: a request that cannot get a slot in time is answered at once with
//! an accurate Retry-After; rate-limit hints slow the upstream before any 429.

mod support;

use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::{Duration, Instant};

use bytes::Bytes;
use support::*;

const SECOND: Duration = Duration::from_secs(1);

/// The fixed spacing of these tests: long enough that what a test does between two
/// slots (a few requests, each waited for on /status) fits in one on a loaded host.
const SLOT: Duration = Duration::from_secs(4);

/// A fixed spacing of [`SLOT`] and the given queue settings.
fn spaced(queue: &str) -> String {
    format!(
        "[upstream.sleeper]\nstrategy = \"constant\"\ninitial_interval = \"{}s\"\n[upstream.queue]\n{queue}\n",
        SLOT.as_secs()
    )
}

/// Starts a GET and returns once easeoff counts it as waiting.
async fn start_waiting(proxy: &Proxy, waiting_before: u64) -> tokio::task::JoinHandle<Answer> {
    let url = format!("http://{}/", proxy.addr);
    let request = tokio::spawn(async move { get(&url).await });
    let admin = proxy.admin;
    eventually("the request to wait for its slot", || async {
        status(admin).await["waiting"].as_u64().unwrap() > waiting_before
    })
    .await;
    request
}

/// When a request was sent and when its answer was read.
type Exchange = (Instant, Instant);

/// Sends `request` and times the exchange.
async fn timed<F: std::future::Future<Output = Answer>>(request: F) -> (Answer, Exchange) {
    let sent = Instant::now();
    let answer = request.await;
    (answer, (sent, Instant::now()))
}

/// The least and the most a shed's hint may say when its slot lay `ahead` of the
/// first request's dispatch: that dispatch came within the `first` exchange and the
/// shed's decision within the `shed` one, however late a loaded host ran either.
fn hint_range(ahead: Duration, first: Exchange, shed: Exchange) -> (Duration, Duration) {
    (
        ahead.saturating_sub(shed.1 - first.0),
        ahead.saturating_sub(shed.0.saturating_duration_since(first.1)),
    )
}

/// A Retry-After in whole seconds, rounded up as easeoff sends it.
fn whole_seconds(d: Duration) -> u64 {
    (d.as_secs() + u64::from(d.subsec_nanos() > 0)).max(1)
}

/// The Retry-After of a shed, which must lie in `range` (see [`hint_range`]).
fn assert_retry_after(shed: &Answer, (least, most): (Duration, Duration)) {
    let said: u64 = shed.headers["retry-after"]
        .to_str()
        .unwrap()
        .parse()
        .unwrap();
    let (least, most) = (whole_seconds(least), whole_seconds(most));
    assert!(
        (least..=most).contains(&said),
        "Retry-After {said}, not in {least}..={most}"
    );
}

#[tokio::test]
async fn beyond_max_waiting_the_next_request_is_shed_at_once_and_the_rest_complete() {
    let up = upstream(|_| async { ok() }).await;
    let proxy = proxy(up.addr, &spaced("max_waiting = 2")).await;
    let url = format!("http://{}/", proxy.addr);
    // Takes the current slot, so the next one is a SLOT away.
    let (first, first_exchange) = timed(get(&url)).await;
    assert_eq!(first.status, 200);
    let mut waiting = Vec::new();
    for i in 0..2 {
        waiting.push(start_waiting(&proxy, i).await);
    }
    let (shed, shed_exchange) = timed(get(&url)).await;
    assert_eq!(shed.status, 429);
    assert_eq!(shed.headers["x-easeoff-reason"], "shed");
    // At once: before the first of the waiting requests went.
    assert_eq!(up.count(), 1, "the shed came after a waiting request went");
    // Told the slot it would have had, after the two waiting ones.
    assert_retry_after(&shed, hint_range(SLOT * 3, first_exchange, shed_exchange));
    let body: serde_json::Value = serde_json::from_slice(&shed.body).unwrap();
    assert_eq!(body["error"], "shed");
    for request in waiting {
        assert_eq!(request.await.unwrap().status, 200);
    }
    assert_eq!(up.count(), 3);
    let a = proxy.admin;
    assert_eq!(requests(a, "shed").await, 1.0);
    assert_eq!(requests(a, "success").await, 3.0);
}

#[tokio::test]
async fn aws_clients_are_shed_with_a_dynamodb_throttling_exception() {
    let up = upstream(|_| async { respond(200, &[], "{}") }).await;
    let config = format!("preset = \"dynamodb\"\n{}", spaced("max_waiting = 0"));
    let proxy = proxy(up.addr, &config).await;
    let url = format!("http://{}/", proxy.addr);
    let (first, first_exchange) = timed(send(&client(), "POST", &url, &[], "{}")).await;
    assert_eq!(first.status, 200);
    let (shed, shed_exchange) = timed(send(
        &client(),
        "POST",
        &url,
        &[("x-amz-target", "DynamoDB_20120810.PutItem")],
        "{}",
    ))
    .await;
    assert_eq!(shed.status, 400);
    assert_eq!(shed.headers["x-amzn-errortype"], "ThrottlingException");
    assert_eq!(shed.headers["content-type"], "application/x-amz-json-1.0");
    assert_retry_after(&shed, hint_range(SLOT, first_exchange, shed_exchange));
    let body: serde_json::Value = serde_json::from_slice(&shed.body).unwrap();
    assert_eq!(
        body["__type"],
        "com.amazonaws.dynamodb.v20120810#ThrottlingException"
    );
}

#[tokio::test]
async fn an_aws_sdk_request_waits_for_a_slot_its_sdk_would_wait_for_after_a_shed() {
    let up = upstream(|_| async { respond(200, &[], "{}") }).await;
    let config = format!(
        "preset = \"dynamodb\"\n{}",
        spaced("max_waiting = 0\nmax_wait = \"100ms\"")
    );
    let proxy = proxy(up.addr, &config).await;
    let url = format!("http://{}/", proxy.addr);
    let put = [("x-amz-target", "DynamoDB_20120810.PutItem")];
    assert_eq!(send(&client(), "POST", &url, &put, "{}").await.status, 200);
    // The next slot is a SLOT away: past max_wait, and nobody may wait.
    let shed = send(&client(), "POST", &url, &put, "{}").await;
    assert_eq!(shed.headers["x-amzn-errortype"], "ThrottlingException");
    // An SDK's first attempt, shed, would wait up to 13 s over its two retries: it
    // waits for the slot instead.
    let sdk = [put[0], ("amz-sdk-request", "attempt=1; max=3")];
    let held = send(&client(), "POST", &url, &sdk, "{}").await;
    assert_eq!(held.status, 200);
    assert_eq!(up.count(), 2);
}

#[tokio::test]
async fn a_slot_beyond_max_wait_is_shed_at_once() {
    let up = upstream(|_| async { ok() }).await;
    let proxy = proxy(up.addr, &spaced("max_wait = \"6s\"")).await;
    let url = format!("http://{}/", proxy.addr);
    let (answer, first_exchange) = timed(get(&url)).await;
    assert_eq!(answer.status, 200);
    let first = start_waiting(&proxy, 0).await; // its slot is a SLOT away
    let (shed, shed_exchange) = timed(get(&url)).await; // two away: past max_wait
    assert_eq!(shed.status, 429);
    // At once: before the waiting request's slot, not at max_wait or its own slot.
    assert_eq!(
        up.count(),
        1,
        "the shed came after the waiting request went"
    );
    assert_retry_after(&shed, hint_range(SLOT * 2, first_exchange, shed_exchange));
    assert_eq!(first.await.unwrap().status, 200);
}

#[tokio::test]
async fn a_grpc_deadline_shorter_than_the_wait_is_shed_at_once() {
    let up = upstream(|_| async {
        respond(
            200,
            &[("content-type", "application/grpc"), ("grpc-status", "0")],
            "",
        )
    })
    .await;
    let config = format!("preset = \"grpc\"\n{}", spaced(""));
    let proxy = proxy(up.addr, &config).await;
    let call = |timeout: &'static str| {
        let url = format!("http://{}/svc/M", proxy.addr);
        async move {
            send(
                &client(),
                "POST",
                &url,
                &[
                    ("content-type", "application/grpc"),
                    ("grpc-timeout", timeout),
                ],
                Bytes::new(),
            )
            .await
        }
    };
    let (first, first_exchange) = timed(call("5S")).await;
    assert_eq!(first.headers["grpc-status"], "0");
    // The next slot is a SLOT away, past the call's 200 ms.
    let (shed, shed_exchange) = timed(call("200m")).await;
    assert_eq!(shed.status, 200);
    assert_eq!(shed.headers["grpc-status"], "8");
    assert_eq!(shed.headers["x-easeoff-reason"], "shed");
    // At once, not after waiting for the slot (it would then have been forwarded).
    let took = shed_exchange.1 - shed_exchange.0;
    assert!(took < SLOT / 2, "shed after {took:?}");
    let pushback: u64 = shed.headers["grpc-retry-pushback-ms"]
        .to_str()
        .unwrap()
        .parse()
        .unwrap();
    // The wait left to the slot, in whole milliseconds rounded down.
    let (least, most) = hint_range(SLOT, first_exchange, shed_exchange);
    let (least, most) = (least.as_millis().saturating_sub(1), most.as_millis());
    assert!(
        (least..=most).contains(&u128::from(pushback)),
        "pushback {pushback} ms, not in {least}..={most}"
    );
}

#[tokio::test]
async fn a_client_that_leaves_while_waiting_frees_its_slot_and_sends_nothing() {
    let up = upstream(|_| async { ok() }).await;
    let (proxy, dispatches) = proxy_observed(up.addr, &spaced("")).await;
    let url = format!("http://{}/", proxy.addr);
    assert_eq!(get(&url).await.status, 200);
    let leaving = start_waiting(&proxy, 0).await;
    leaving.abort();
    let admin = proxy.admin;
    eventually("the leaving request to stop waiting", || async {
        status(admin).await["waiting"].as_u64().unwrap() == 0
    })
    .await;
    assert_eq!(get(&url).await.status, 200);
    // The next request gets the slot the leaver gave up, a SLOT after the first
    // dispatch (or at once if it came later); a slot not given back would hold it
    // until two SLOTs after. Dispatch times are the pacer's, so a loaded host's late
    // delivery does not count.
    let dispatched = dispatches.wait_for(2).await;
    let gap = dispatched[1] - dispatched[0];
    assert!(gap < SLOT * 3 / 2, "dispatched {gap:?} after the first");
    assert_eq!(
        up.count(),
        2,
        "the request that left never reached the upstream"
    );
}

#[tokio::test]
async fn ratelimit_remaining_zero_pauses_until_the_reset_without_a_429() {
    let answered = Arc::new(AtomicUsize::new(0));
    let up = upstream(move |_| {
        let n = answered.fetch_add(1, Ordering::SeqCst);
        async move {
            if n == 0 {
                respond(
                    200,
                    &[("ratelimit-remaining", "0"), ("ratelimit-reset", "1")],
                    "last one",
                )
            } else {
                ok()
            }
        }
    })
    .await;
    let proxy = proxy(up.addr, "").await;
    let url = format!("http://{}/", proxy.addr);
    assert_eq!(get(&url).await.status, 200);
    assert_eq!(get(&url).await.status, 200);
    let arrivals = up.arrivals();
    assert!(arrivals[1].at - arrivals[0].at >= SECOND);
    let a = proxy.admin;
    assert_eq!(
        metric(
            a,
            "easeoff_throttles_total{signal=\"ratelimit\",upstream=\"up\"}"
        )
        .await,
        1.0
    );
    assert_eq!(
        metric(
            a,
            "easeoff_throttles_total{signal=\"status\",upstream=\"up\"}"
        )
        .await,
        0.0
    );
}

#[tokio::test]
async fn with_quota_smooth_a_window_is_spread_over_its_reset() {
    // 4 requests left in the next 2 s: at most one every 500 ms. (With the default
    // `quota = "use"`, 4 left with one in flight go at once.)
    let up = upstream(|_| async {
        respond(
            200,
            &[("x-ratelimit-remaining", "4"), ("x-ratelimit-reset", "2")],
            "ok",
        )
    })
    .await;
    let (proxy, dispatches) = proxy_observed(up.addr, "quota = \"smooth\"").await;
    let url = format!("http://{}/", proxy.addr);
    for _ in 0..3 {
        assert_eq!(get(&url).await.status, 200);
    }
    assert_eq!(up.count(), 3);
    // Measured at dispatch, where easeoff keeps the spacing: upstream arrival times
    // also carry however late a loaded host delivered each request.
    // No dispatch before its slot, 500 ms apart; none less than half of it after the
    // one before (a late release's successor).
    let dispatched = dispatches.wait_for(3).await;
    for (i, at) in dispatched.iter().enumerate() {
        let slot = Duration::from_millis(500) * u32::try_from(i).unwrap();
        let since = *at - dispatched[0];
        assert!(
            since + Duration::from_millis(1) >= slot,
            "dispatch {i} after {since:?}"
        );
    }
    for pair in dispatched.windows(2) {
        let gap = pair[1] - pair[0];
        assert!(gap >= Duration::from_millis(250), "gap {gap:?}");
    }
}

#[tokio::test]
async fn the_ietf_ratelimit_field_is_understood_too() {
    let answered = Arc::new(AtomicUsize::new(0));
    let up = upstream(move |_| {
        let n = answered.fetch_add(1, Ordering::SeqCst);
        async move {
            if n == 0 {
                respond(200, &[("ratelimit", "\"default\";r=0;t=1")], "")
            } else {
                ok()
            }
        }
    })
    .await;
    let proxy = proxy(up.addr, "").await;
    let url = format!("http://{}/", proxy.addr);
    get(&url).await;
    get(&url).await;
    let arrivals = up.arrivals();
    assert!(arrivals[1].at - arrivals[0].at >= SECOND);
}

#[tokio::test]
async fn a_shed_names_its_reason_in_the_answer_and_the_metric() {
    let up = upstream(|_| async { ok() }).await;
    let queued = proxy(up.addr, &spaced("max_waiting = 1\nmax_wait = \"6s\"")).await;
    let url = format!("http://{}/", queued.addr);
    assert_eq!(get(&url).await.status, 200);
    let first = start_waiting(&queued, 0).await; // its slot is a SLOT away
    let full = get(&url).await;
    assert_eq!(full.headers["x-easeoff-shed-reason"], "queue-full");
    let body: serde_json::Value = serde_json::from_slice(&full.body).unwrap();
    assert_eq!(body["reason"], "queue-full");
    assert!(body["message"].as_str().unwrap().contains("max_waiting"));
    assert_eq!(first.await.unwrap().status, 200);

    // Nobody waits, but the next slot is a SLOT away, past a 1 ms max_wait.
    let proxy = proxy(up.addr, &spaced("max_wait = \"1ms\"")).await;
    let url = format!("http://{}/", proxy.addr);
    assert_eq!(get(&url).await.status, 200);
    let late = get(&url).await;
    assert_eq!(late.status, 429);
    assert_eq!(late.headers["x-easeoff-shed-reason"], "deadline");
    let body: serde_json::Value = serde_json::from_slice(&late.body).unwrap();
    assert_eq!(body["reason"], "deadline");
    let a = proxy.admin;
    assert_eq!(
        metric(a, "easeoff_shed_total{reason=\"deadline\",upstream=\"up\"}").await,
        1.0
    );
    assert_eq!(
        metric(
            a,
            "easeoff_shed_total{reason=\"queue-full\",upstream=\"up\"}"
        )
        .await,
        0.0
    );
}
