//! Lanes through the real server: one DynamoDB table's or one gRPC method's
//! throttles do not hold back another; an upstream that names its buckets is paced per
//! bucket; an idle lane forgets; many lane keys stay bounded in lanes and series.

mod support;

use std::time::Duration;

use bytes::Bytes;
use support::*;

const PUT: &str = "DynamoDB_20120810.PutItem";

fn throttled_body() -> &'static str {
    r#"{"__type":"com.amazonaws.dynamodb.v20120810#ProvisionedThroughputExceededException","message":"slow down"}"#
}

/// A DynamoDB throttle whose ThrottlingReasons name `reason` on `table` (a table name
/// or `TABLE/index/NAME`).
fn throttling_reason(reason: &str, table: &str) -> String {
    format!(
        r#"{{"__type":"com.amazonaws.dynamodb.v20120810#ProvisionedThroughputExceededException","message":"x","ThrottlingReasons":[{{"reason":"{reason}","resource":"arn:aws:dynamodb:us-east-1:000000000000:table/{table}"}}]}}"#
    )
}

/// An upstream where table `slow` always throttles and every other table succeeds.
async fn two_tables() -> TestUpstream {
    upstream(|req: http::Request<hyper::body::Incoming>| async move {
        use http_body_util::BodyExt;
        let body = req.into_body().collect().await.unwrap().to_bytes();
        if String::from_utf8_lossy(&body).contains("\"slow\"") {
            respond(
                400,
                &[("content-type", "application/x-amz-json-1.0")],
                throttled_body(),
            )
        } else {
            respond(200, &[], "{}")
        }
    })
    .await
}

async fn put(addr: std::net::SocketAddr, table: &str) -> Answer {
    let body = format!(r#"{{"TableName":"{table}","Item":{{"pk":{{"S":"k"}}}}}}"#);
    send(
        &client(),
        "POST",
        &format!("http://{addr}/"),
        &[
            ("x-amz-target", PUT),
            ("content-type", "application/x-amz-json-1.0"),
        ],
        Bytes::from(body),
    )
    .await
}

/// Table `t`'s hot-key lane as `/status` shows it.
async fn hot_lane(admin: std::net::SocketAddr) -> serde_json::Value {
    let lanes = status(admin).await["lanes"].clone();
    lanes
        .as_array()
        .unwrap()
        .iter()
        .find(|l| l["name"].as_str().unwrap().starts_with("t:write:key="))
        .unwrap_or_else(|| panic!("no hot-key lane in {lanes}"))
        .clone()
}

async fn sleeps(admin: std::net::SocketAddr) -> f64 {
    metric(admin, "easeoff_sleeps_total{upstream=\"up\"}").await
}

#[tokio::test]
async fn a_throttled_table_does_not_hold_back_another() {
    let up = two_tables().await;
    let proxy = proxy(
        up.addr,
        "preset = \"dynamodb\"\n[upstream.retry]\nmax_attempts = 1\n",
    )
    .await;
    for _ in 0..3 {
        assert_eq!(put(proxy.addr, "slow").await.status, 400);
    }
    let slow = lane_interval_ms(proxy.admin, "slow:write").await.unwrap();
    assert!(slow > 0.0, "the slow table's lane is paced");
    let held = sleeps(proxy.admin).await;
    for _ in 0..20 {
        assert_eq!(put(proxy.addr, "fast").await.status, 200);
    }
    assert_eq!(sleeps(proxy.admin).await, held, "no fast write waited");
    assert_eq!(lane_interval_ms(proxy.admin, "fast:write").await, Some(0.0));
    assert_eq!(
        lane_interval_ms(proxy.admin, "default").await,
        Some(0.0),
        "default lane untouched"
    );
    assert_eq!(
        interval_ms(proxy.admin).await,
        slow,
        "the headline is the slowest lane's"
    );
    let text = metrics(proxy.admin).await;
    assert!(
        text.contains(
            "easeoff_lane_throttles_total{lane=\"slow:write\",signal=\"body\",upstream=\"up\"} 3"
        ),
        "{text}"
    );
    assert!(text.contains("easeoff_lanes{upstream=\"up\"} 3"), "{text}");
}

#[tokio::test]
async fn a_grpc_method_that_throttles_does_not_slow_another() {
    let up = upstream(|req: http::Request<hyper::body::Incoming>| async move {
        let status = if req.uri().path() == "/pkg.Svc/A" {
            "8"
        } else {
            "0"
        };
        respond(
            200,
            &[
                ("content-type", "application/grpc"),
                ("grpc-status", status),
            ],
            "",
        )
    })
    .await;
    let proxy = proxy(
        up.addr,
        "preset = \"grpc\"\n[upstream.retry]\nmax_attempts = 1\n",
    )
    .await;
    let call = |method: &'static str| {
        let url = format!("http://{}/pkg.Svc/{method}", proxy.addr);
        async move {
            send(
                &client(),
                "POST",
                &url,
                &[("content-type", "application/grpc")],
                Bytes::new(),
            )
            .await
        }
    };
    for _ in 0..3 {
        assert_eq!(call("A").await.headers["grpc-status"], "8");
    }
    assert!(lane_interval_ms(proxy.admin, "/pkg.Svc/A").await.unwrap() > 0.0);
    let held = sleeps(proxy.admin).await;
    for _ in 0..20 {
        assert_eq!(call("B").await.headers["grpc-status"], "0");
    }
    assert_eq!(sleeps(proxy.admin).await, held, "no call to B waited");
}

#[tokio::test]
async fn an_upstream_that_names_its_bucket_is_paced_per_bucket() {
    // GitHub-style: /search counts against `search`, everything else against `core`;
    // `search` has run out.
    let up = upstream(|req: http::Request<hyper::body::Incoming>| async move {
        if req.uri().path().starts_with("/search") {
            respond(
                429,
                &[("x-ratelimit-resource", "search"), ("retry-after", "0")],
                "",
            )
        } else {
            respond(200, &[("x-ratelimit-resource", "core")], "ok")
        }
    })
    .await;
    let proxy = proxy(
        up.addr,
        "[upstream.retry]\nmax_attempts = 1\n[upstream.lanes]\nfrom_response = \"x-ratelimit-resource\"\n",
    )
    .await;
    let base = format!("http://{}", proxy.addr);
    for _ in 0..3 {
        assert_eq!(get(&format!("{base}/search/code?q=x")).await.status, 429);
    }
    assert!(lane_interval_ms(proxy.admin, "search").await.unwrap() > 0.0);
    let held = sleeps(proxy.admin).await;
    for _ in 0..10 {
        assert_eq!(get(&format!("{base}/repos/a/b")).await.status, 200);
    }
    assert_eq!(
        sleeps(proxy.admin).await,
        held,
        "core requests did not wait"
    );
    assert_eq!(lane_interval_ms(proxy.admin, "core").await, Some(0.0));
    assert_eq!(lane_interval_ms(proxy.admin, "default").await, Some(0.0));
    let shown = status(proxy.admin).await;
    let search = shown["lanes"]
        .as_array()
        .unwrap()
        .iter()
        .find(|l| l["name"] == "search")
        .unwrap()
        .clone();
    assert_eq!(search["last_throttle"]["reason"], "status", "{search}");
}

#[tokio::test]
async fn an_idle_lane_forgets_its_throttles() {
    let up = two_tables().await;
    let proxy = proxy(
        up.addr,
        "preset = \"dynamodb\"\n[upstream.retry]\nmax_attempts = 1\n[upstream.lanes]\nidle_decay = \"300ms\"\n",
    )
    .await;
    for _ in 0..5 {
        assert_eq!(put(proxy.addr, "slow").await.status, 400);
    }
    // Counted, not read off the interval: 300 ms idle may pass before /status answers
    // on a loaded host, and the lane has then forgotten already.
    let changes = |which: &'static str| {
        let sample = format!("easeoff_interval_{which}_total{{upstream=\"up\"}}");
        async move { metric(proxy.admin, &sample).await }
    };
    assert!(changes("increases").await > 0.0, "the slow lane was raised");
    wait_until(Duration::from_secs(30), "the slow lane forgets", || async {
        lane_interval_ms(proxy.admin, "slow:write").await == Some(0.0)
    })
    .await;
    // Only throttles came: the one step down is the forgetting.
    assert!(changes("decreases").await > 0.0, "forgetting is counted");
    let held = sleeps(proxy.admin).await;
    assert_eq!(put(proxy.addr, "slow").await.status, 400);
    assert_eq!(sleeps(proxy.admin).await, held, "dispatched at once");
}

#[tokio::test]
async fn ten_thousand_tenants_stay_within_max_lanes_and_metrics_lanes() {
    let up = upstream(|_| async { ok() }).await;
    let proxy = proxy(
        up.addr,
        "[upstream.retry]\nmax_attempts = 1\n[upstream.lanes]\nby = [\"header:x-tenant\"]\n",
    )
    .await;
    let rss = || {
        std::fs::read_to_string("/proc/self/status")
            .ok()
            .and_then(|s| {
                s.lines()
                    .find(|l| l.starts_with("VmRSS:"))
                    .and_then(|l| l.split_whitespace().nth(1)?.parse::<u64>().ok())
            })
            .unwrap_or(0)
    };
    let before = rss();
    let client = client();
    let url = format!("http://{}/", proxy.addr);
    let mut tasks = tokio::task::JoinSet::new();
    for worker in 0..16 {
        let (client, url) = (client.clone(), url.clone());
        tasks.spawn(async move {
            for i in (worker..10_000).step_by(16) {
                let tenant = format!("tenant-{i}");
                let answer =
                    send(&client, "GET", &url, &[("x-tenant", &tenant)], Bytes::new()).await;
                assert_eq!(answer.status, 200);
            }
        });
    }
    while let Some(done) = tasks.join_next().await {
        done.unwrap();
    }
    let text = metrics(proxy.admin).await;
    let lanes = sample_value(&text, "easeoff_lanes{upstream=\"up\"}").unwrap();
    assert!(lanes <= 256.0, "lanes {lanes} > max_lanes");
    let series = text
        .lines()
        .filter(|l| l.starts_with("easeoff_lane_dispatches_total{"))
        .count();
    assert_eq!(series, 32 + 1, "metrics_lanes by name and `other`");
    let dispatched: f64 = text
        .lines()
        .filter(|l| l.starts_with("easeoff_lane_dispatches_total{"))
        .filter_map(|l| l.rsplit(' ').next()?.parse::<f64>().ok())
        .sum();
    assert_eq!(dispatched, 10_000.0, "every dispatch counted once");
    println!(
        "10,000 tenants: {lanes} lanes, {series} lane series, RSS of the test process {} KiB -> {} KiB",
        before,
        rss()
    );
}

async fn call(addr: std::net::SocketAddr, target: &str, body: &str) -> Answer {
    send(
        &client(),
        "POST",
        &format!("http://{addr}/"),
        &[
            ("x-amz-target", target),
            ("content-type", "application/x-amz-json-1.0"),
        ],
        Bytes::from(body.to_string()),
    )
    .await
}

#[tokio::test]
async fn a_batch_is_judged_per_table_from_its_unprocessed_items() {
    let up = upstream(|_| async {
        respond(
            200,
            &[],
            r#"{"UnprocessedItems":{"slow":[{"PutRequest":{"Item":{"pk":{"S":"1"}}}}]}}"#,
        )
    })
    .await;
    let proxy = proxy(
        up.addr,
        "preset = \"dynamodb\"\n[upstream.retry]\nmax_attempts = 1\n",
    )
    .await;
    let body = r#"{"RequestItems":{"slow":[{"PutRequest":{"Item":{"pk":{"S":"1"}}}}],"fast":[{"PutRequest":{"Item":{"pk":{"S":"2"}}}}]}}"#;
    assert_eq!(
        call(proxy.addr, "DynamoDB_20120810.BatchWriteItem", body)
            .await
            .status,
        200
    );
    wait_until(
        Duration::from_secs(10),
        "the slow lane is raised",
        || async {
            lane_interval_ms(proxy.admin, "slow:write")
                .await
                .is_some_and(|ms| ms > 0.0)
        },
    )
    .await;
    assert_eq!(lane_interval_ms(proxy.admin, "fast:write").await, Some(0.0));
}

#[tokio::test]
async fn throttling_reasons_route_the_raise_to_the_named_table_and_hot_key() {
    let up = upstream(|req: http::Request<hyper::body::Incoming>| async move {
        use http_body_util::BodyExt;
        let body = String::from_utf8_lossy(&req.into_body().collect().await.unwrap().to_bytes())
            .into_owned();
        let throttle = |reason: &str, table: &str| {
            respond(
                400,
                &[("content-type", "application/x-amz-json-1.0")],
                throttling_reason(reason, table),
            )
        };
        if body.contains("TransactItems") {
            // The index of table b is what ran out; the transaction also names a.
            throttle("IndexWriteProvisionedThroughputExceeded", "b/index/by-date")
        } else if body.contains("\"hot\"") {
            throttle("TableWriteKeyRangeThroughputExceeded", "t")
        } else {
            respond(200, &[], "{}")
        }
    })
    .await;
    let proxy = proxy(
        up.addr,
        "preset = \"dynamodb\"\n[upstream.retry]\nmax_attempts = 1\n",
    )
    .await;
    let transact = r#"{"TransactItems":[{"Put":{"TableName":"a","Item":{"pk":{"S":"1"}}}},{"Put":{"TableName":"b","Item":{"pk":{"S":"1"}}}}]}"#;
    let answer = call(proxy.addr, "DynamoDB_20120810.TransactWriteItems", transact).await;
    assert_eq!(answer.status, 400);
    assert!(lane_interval_ms(proxy.admin, "b:write").await.unwrap() > 0.0);
    assert_eq!(lane_interval_ms(proxy.admin, "a:write").await, Some(0.0));
    let shown = status(proxy.admin).await;
    let b = shown["lanes"]
        .as_array()
        .unwrap()
        .iter()
        .find(|l| l["name"] == "b:write")
        .unwrap()
        .clone();
    assert_eq!(
        b["last_throttle"]["reason"],
        "IndexWriteProvisionedThroughputExceeded"
    );
    assert_eq!(
        b["last_throttle"]["resource"],
        "arn:aws:dynamodb:us-east-1:000000000000:table/b/index/by-date"
    );
    assert_eq!(
        b["last_throttle"]["words"],
        "DynamoDB throttled writes of an index \
         (arn:aws:dynamodb:us-east-1:000000000000:table/b/index/by-date): \
         above its provisioned capacity (IndexWriteProvisionedThroughputExceeded)"
    );
    let reasons = metrics(proxy.admin).await;
    assert!(
        reasons.contains(
            "easeoff_lane_last_throttle_timestamp_seconds{lane=\"b:write\",\
             reason=\"IndexWriteProvisionedThroughputExceeded\",upstream=\"up\"}"
        ),
        "{reasons}"
    );

    // A hot partition: only its own lane is raised, and other keys of the table
    // go at once.
    let hot = r#"{"TableName":"t","Item":{"pk":{"S":"hot"}}}"#;
    assert_eq!(
        call(proxy.addr, "DynamoDB_20120810.PutItem", hot)
            .await
            .status,
        400
    );
    let hot_lane = hot_lane(proxy.admin).await;
    assert!(
        hot_lane["interval_ms"].as_f64().unwrap() > 0.0,
        "{hot_lane}"
    );
    assert_eq!(lane_interval_ms(proxy.admin, "t:write").await, Some(0.0));
    let held = sleeps(proxy.admin).await;
    for i in 0..10 {
        let other = format!(r#"{{"TableName":"t","Item":{{"pk":{{"S":"k{i}"}}}}}}"#);
        assert_eq!(
            call(proxy.addr, "DynamoDB_20120810.PutItem", &other)
                .await
                .status,
            200
        );
    }
    assert_eq!(sleeps(proxy.admin).await, held, "other keys did not wait");
}

#[tokio::test]
async fn a_retry_after_a_hot_key_throttle_waits_in_the_hot_key_lane() {
    let up = upstream(|req: http::Request<hyper::body::Incoming>| async move {
        use http_body_util::BodyExt;
        let body = String::from_utf8_lossy(&req.into_body().collect().await.unwrap().to_bytes())
            .into_owned();
        if body.contains("\"hot\"") {
            respond(
                400,
                &[("content-type", "application/x-amz-json-1.0")],
                throttling_reason("TableWriteKeyRangeThroughputExceeded", "t"),
            )
        } else {
            respond(200, &[], "{}")
        }
    })
    .await;
    let proxy = proxy(
        up.addr,
        "preset = \"dynamodb\"\n[upstream.retry]\nmax_attempts = 3\n",
    )
    .await;
    let hot = r#"{"TableName":"t","Item":{"pk":{"S":"hot"}}}"#;
    let answer = call(proxy.addr, "DynamoDB_20120810.PutItem", hot).await;
    assert_eq!(answer.status, 400);
    let hot_lane = hot_lane(proxy.admin).await;
    // The first attempt made the lane; both retries took a slot in it, so each
    // throttle came from a dispatch the lane paced (one raise per attempt, not a
    // raise for every attempt of every request that went before the lane existed).
    assert_eq!(hot_lane["dispatches"], 2, "{hot_lane}");
    assert_eq!(hot_lane["throttles"]["body"], 3, "{hot_lane}");
}

/// An OpenAI-like upstream: 429 for model `slow`, else 200 with the body's length.
async fn two_models() -> TestUpstream {
    upstream(|req: http::Request<hyper::body::Incoming>| async move {
        use http_body_util::BodyExt;
        let body = req.into_body().collect().await.unwrap().to_bytes();
        if String::from_utf8_lossy(&body).contains(r#""model":"slow""#) {
            respond(429, &[("retry-after-ms", "1")], "{}")
        } else {
            respond(200, &[], body.len().to_string())
        }
    })
    .await
}

async fn chat(addr: std::net::SocketAddr, body: String) -> Answer {
    let url = format!("http://{addr}/v1/chat/completions");
    let headers = [("content-type", "application/json")];
    send(&client(), "POST", &url, &headers, Bytes::from(body)).await
}

#[tokio::test]
async fn one_models_throttles_do_not_slow_another() {
    let up = two_models().await;
    let config = "preset = \"openai\"\n[upstream.retry]\nmax_attempts = 1\n";
    let proxy = proxy(up.addr, config).await;
    for _ in 0..3 {
        let answer = chat(proxy.addr, r#"{"model":"slow","messages":[]}"#.into()).await;
        assert_eq!(answer.status, 429);
    }
    assert!(lane_interval_ms(proxy.admin, "slow").await.unwrap() > 0.0);
    let held = sleeps(proxy.admin).await;
    for _ in 0..20 {
        let answer = chat(proxy.addr, r#"{"messages":[],"model":"fast"}"#.into()).await;
        assert_eq!(answer.status, 200);
    }
    assert_eq!(
        sleeps(proxy.admin).await,
        held,
        "no call to the fast model waited"
    );
    assert_eq!(lane_interval_ms(proxy.admin, "fast").await, Some(0.0));
}

#[tokio::test]
async fn a_body_past_what_easeoff_holds_is_sent_whole_in_the_lane_its_fields_name() {
    let up = two_models().await;
    let config = "preset = \"openai\"\n[upstream.retry]\nmax_body_bytes = 1024\n";
    let proxy = proxy(up.addr, config).await;
    let prompt = "x".repeat(100_000);
    let body = format!(r#"{{"model":"big","messages":[{{"role":"user","content":"{prompt}"}}]}}"#);
    let answer = chat(proxy.addr, body.clone()).await;
    assert_eq!(answer.status, 200);
    assert_eq!(
        answer.text(),
        body.len().to_string(),
        "the upstream got it whole"
    );
    assert_eq!(
        lane_interval_ms(proxy.admin, "big").await,
        Some(0.0),
        "its lane"
    );
    // The model named after the held part: read on for it, its lane all the same.
    let late = format!(r#"{{"messages":[{{"role":"user","content":"{prompt}"}}],"model":"late"}}"#);
    let answer = chat(proxy.addr, late.clone()).await;
    assert_eq!(answer.text(), late.len().to_string());
    assert_eq!(named_lanes(proxy.admin).await, ["big", "late"]);
    // Past `max_scan_bytes`: `default`, still sent whole.
    let config = format!("{config}[upstream.lanes]\nmax_scan_bytes = \"4KiB\"\n");
    let capped = support::proxy(up.addr, &config).await;
    let answer = chat(capped.addr, late.clone()).await;
    assert_eq!(answer.text(), late.len().to_string());
    assert!(named_lanes(capped.admin).await.is_empty());
}

/// The lanes of upstream "up" other than `default`, from `/status`: a lane is made by
/// the first request it places.
async fn named_lanes(admin: std::net::SocketAddr) -> Vec<String> {
    let shown = status(admin).await;
    let mut lanes: Vec<String> = (shown["lanes"].as_array().unwrap().iter())
        .map(|l| l["name"].as_str().unwrap().to_string())
        .filter(|name| name != "default")
        .collect();
    lanes.sort();
    lanes
}

/// openai-python writes `messages` first and `model` after it; anthropic-python
/// `max_tokens`, `messages`, then `model`. A 1.5 MiB prompt, past the 1 MiB easeoff
/// holds to replay, is still paced in its model's lane (issue 49, item 4).
#[tokio::test]
async fn a_long_prompt_in_the_sdks_field_order_is_paced_in_its_models_lane() {
    let up = two_models().await;
    let prompt = "x".repeat(3 << 19);
    for (preset, path, body) in [
        (
            "openai",
            "/v1/chat/completions",
            format!(
                r#"{{"messages":[{{"role":"user","content":"{prompt}"}}],"model":"gpt-4o","max_completion_tokens":10,"stream":false}}"#
            ),
        ),
        (
            "anthropic",
            "/v1/messages",
            format!(
                r#"{{"max_tokens":10,"messages":[{{"role":"user","content":"{prompt}"}}],"model":"claude-sonnet","stream":false}}"#
            ),
        ),
    ] {
        let proxy = proxy(up.addr, &format!("preset = \"{preset}\"\n")).await;
        let url = format!("http://{}{path}", proxy.addr);
        let headers = [("content-type", "application/json")];
        let answer = send(&client(), "POST", &url, &headers, Bytes::from(body.clone())).await;
        assert_eq!(answer.status, 200);
        assert_eq!(
            answer.text(),
            body.len().to_string(),
            "the upstream got it whole"
        );
        let model = if preset == "openai" {
            "gpt-4o"
        } else {
            "claude-sonnet"
        };
        assert_eq!(named_lanes(proxy.admin).await, [model], "{preset}");
    }
}

/// What the mock answers a call that asks for answer `k` (header `x-answer`): throttles
/// given away by five signals with pauses set by four headers, and successes that
/// settle their cost.
fn answer_number(k: usize) -> http::Response<Body> {
    let json = [("content-type", "application/json")];
    match k {
        0 => respond(429, &[("retry-after-ms", "1")], "{}"),
        1 => respond(429, &[("x-ms-retry-after-ms", "1")], "{}"),
        2 => respond(503, &json, r#"{"error":{"message":"overloaded"}}"#),
        3 => respond(
            200,
            &[
                ("x-ratelimit-limit-requests", "100"),
                ("x-ratelimit-remaining-requests", "0"),
                ("x-ratelimit-reset-requests", "5ms"),
            ],
            r#"{"usage":{"prompt_tokens":3,"completion_tokens":4,"total_tokens":7}}"#,
        ),
        4 => respond(
            200,
            &[("x-upstream-says", "throttled"), ("retry-after-ms", "1")],
            "{}",
        ),
        5 => respond(400, &json, r#"{"error":{"code":"slow_down_please"}}"#),
        _ => respond(
            200,
            &json,
            r#"{"usage":{"prompt_tokens":3,"completion_tokens":4,"total_tokens":7}}"#,
        ),
    }
}

/// Series on `/metrics` per `lane` label value, over every lane family.
fn series_per_lane(text: &str) -> std::collections::BTreeMap<String, usize> {
    let mut per_lane = std::collections::BTreeMap::new();
    for line in text.lines().filter(|l| l.starts_with("easeoff_lane_")) {
        if let Some(rest) = line.split("lane=\"").nth(1) {
            let lane = rest.split('"').next().unwrap_or_default().to_string();
            *per_lane.entry(lane).or_insert(0) += 1;
        }
    }
    per_lane
}

/// 40 models (OpenAI, paced in tokens), each throttled by five signals and paused by
/// four headers: at most 16 series a lane, the 32 named and the `other` the rest share
/// (before: 34 to 39 a lane, a histogram and every signal and header zero-valued).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn forty_models_export_at_most_sixteen_series_a_lane() {
    let up = upstream(|req: http::Request<hyper::body::Incoming>| async move {
        let k = req.headers()["x-answer"].to_str().unwrap().parse().unwrap();
        answer_number(k)
    })
    .await;
    let config = "preset = \"openai\"\n[upstream.retry]\nmax_attempts = 1\n[upstream.lanes]\ncost = \"tokens\"\n[upstream.throttle]\nbody_codes = [\"slow_down_please\"]\nheaders = { \"x-upstream-says\" = [\"throttled\"] }\n";
    let proxy = proxy(up.addr, config).await;
    let url = format!("http://{}/v1/chat/completions", proxy.addr);
    let mut calls = tokio::task::JoinSet::new();
    for model in 0..40 {
        let url = url.clone();
        calls.spawn(async move {
            let client = client();
            let body = format!(r#"{{"model":"m{model}","messages":[],"max_tokens":5}}"#);
            for k in 0..7 {
                let k = k.to_string();
                let headers = [("content-type", "application/json"), ("x-answer", &k)];
                send(&client, "POST", &url, &headers, Bytes::from(body.clone())).await;
            }
        });
    }
    while let Some(done) = calls.join_next().await {
        done.unwrap();
    }
    let text = metrics(proxy.admin).await;
    let per_lane = series_per_lane(&text);
    assert_eq!(
        per_lane.len(),
        32 + 1,
        "metrics_lanes by name and `other`: {per_lane:?}"
    );
    // Which 32 models are named is first come, first named: any named one will do.
    let named = per_lane.keys().find(|l| l.starts_with('m')).unwrap();
    let signals = text
        .lines()
        .filter(|l| {
            l.starts_with("easeoff_lane_throttles_total{")
                && l.contains(&format!("lane=\"{named}\""))
        })
        .count();
    assert!(
        signals >= 3,
        "lane {named}'s throttles by several signals:\n{text}"
    );
    for (lane, series) in &per_lane {
        assert!(*series <= 16, "lane {lane}: {series} series\n{text}");
    }
    println!("series per lane: {per_lane:?}");
}
