//! What easeoff changes on the way through, and how it answers when the upstream cannot.

mod support;

use std::time::Duration;

use bytes::Bytes;
use support::*;

#[tokio::test]
async fn host_is_rewritten_and_the_base_path_prefixed() {
    let up = upstream(|_| async { ok() }).await;
    let target = up.addr;
    let proxy = proxy_config(&format!(
        "[server]\nadmin_listen = \"127.0.0.1:0\"\n[[upstream]]\nname = \"up\"\nlisten = \"127.0.0.1:0\"\nurl = \"http://{target}/base/\"\n"
    ))
    .await;
    let answer = send(
        &client(),
        "GET",
        &format!("http://{}/items/1?consistent=true", proxy.addr),
        &[],
        Bytes::new(),
    )
    .await;
    assert_eq!(answer.status, 200);
    let seen = &up.arrivals()[0];
    assert_eq!(seen.uri.path(), "/base/items/1");
    assert_eq!(seen.uri.query(), Some("consistent=true"));
    assert_eq!(seen.headers["host"], target.to_string().as_str());
}

#[tokio::test]
async fn preserve_host_sends_the_clients_host() {
    let up = upstream(|_| async { ok() }).await;
    let proxy = proxy(up.addr, "preserve_host = true").await;
    send(
        &client(),
        "GET",
        &format!("http://{}/", proxy.addr),
        &[("host", "api.example.com")],
        Bytes::new(),
    )
    .await;
    assert_eq!(up.arrivals()[0].headers["host"], "api.example.com");
}

#[tokio::test]
async fn hop_by_hop_headers_stay_behind_both_ways() {
    let up = upstream(|_| async {
        respond(
            200,
            &[
                ("x-upstream-private", "1"),
                ("connection", "x-upstream-private"),
                ("x-kept", "yes"),
            ],
            "ok",
        )
    })
    .await;
    let proxy = proxy(up.addr, "").await;
    let answer = send(
        &client(),
        "GET",
        &format!("http://{}/", proxy.addr),
        &[
            ("connection", "x-secret"),
            ("x-secret", "1"),
            ("keep-alive", "timeout=5"),
            ("x-forwarded", "kept"),
        ],
        Bytes::new(),
    )
    .await;
    let seen = &up.arrivals()[0].headers;
    assert!(!seen.contains_key("x-secret"));
    assert!(!seen.contains_key("keep-alive"));
    assert_eq!(seen["x-forwarded"], "kept");
    assert!(!answer.headers.contains_key("x-upstream-private"));
    assert_eq!(answer.headers["x-kept"], "yes");
}

#[tokio::test]
async fn a_hanging_upstream_gets_a_504_after_the_request_timeout() {
    let up = upstream(|_| async {
        std::future::pending::<()>().await;
        ok()
    })
    .await;
    let proxy = proxy(up.addr, "request_timeout = \"200ms\"").await;
    let started = std::time::Instant::now();
    let answer = get(&format!("http://{}/", proxy.addr)).await;
    assert!(started.elapsed() >= Duration::from_millis(200));
    assert_eq!(answer.status, 504);
    assert_eq!(answer.headers["x-easeoff-reason"], "timeout");
    let body: serde_json::Value = serde_json::from_slice(&answer.body).unwrap();
    assert_eq!(body["error"], "timeout");
    assert_eq!(requests(proxy.admin, "timeout").await, 1.0);
}

#[tokio::test]
async fn an_unreachable_upstream_gets_a_502() {
    // A port that was free a moment ago: nothing listens there.
    let dead = {
        let l = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        l.local_addr().unwrap()
    };
    let proxy = proxy(dead, "[upstream.retry]\nmax_attempts = 1").await;
    let answer = get(&format!("http://{}/", proxy.addr)).await;
    assert_eq!(answer.status, 502);
    assert_eq!(answer.headers["x-easeoff-reason"], "upstream-unavailable");
    let a = proxy.admin;
    assert_eq!(
        metric(a, "easeoff_connect_failures_total{upstream=\"up\"}").await,
        1.0
    );
    assert_eq!(requests(a, "error").await, 1.0);
    assert_eq!(
        interval_ms(a).await,
        0.0,
        "connection failures leave the sleeper alone"
    );
}

#[tokio::test]
async fn server_errors_pass_through_and_leave_the_sleeper_alone() {
    let up = upstream(|_| async { respond(500, &[], "boom") }).await;
    let proxy = proxy(up.addr, "").await;
    let answer = get(&format!("http://{}/", proxy.addr)).await;
    assert_eq!(
        (answer.status.as_u16(), answer.text().as_str()),
        (500, "boom")
    );
    assert!(!answer.headers.contains_key("x-easeoff-reason"));
    assert_eq!(interval_ms(proxy.admin).await, 0.0);
    assert_eq!(requests(proxy.admin, "upstream_error").await, 1.0);
    assert_eq!(requests(proxy.admin, "error").await, 0.0);
}

#[tokio::test]
async fn an_upstream_403_is_a_client_error_not_a_success() {
    let up = upstream(|_| async { respond(403, &[], "bad signature") }).await;
    let proxy = proxy(up.addr, "").await;
    let answer = get(&format!("http://{}/", proxy.addr)).await;
    assert_eq!(answer.status, 403);
    let a = proxy.admin;
    assert_eq!(requests(a, "client_error").await, 1.0);
    assert_eq!(requests(a, "success").await, 0.0);
    let text = metrics(a).await;
    let line = text
        .lines()
        .find(|l| l.starts_with("easeoff_requests_total") && l.contains("client_error"))
        .unwrap();
    eprintln!("{line}");
}

#[tokio::test]
async fn a_large_error_body_streams_through_unclassified() {
    let big = "x".repeat(200 * 1024);
    let body = big.clone();
    let up = upstream(move |_| {
        let body = body.clone();
        async move { respond(400, &[], body) }
    })
    .await;
    let proxy = proxy(up.addr, "preset = \"aws\"").await;
    let answer = get(&format!("http://{}/", proxy.addr)).await;
    assert_eq!(answer.status, 400);
    assert_eq!(answer.body.len(), big.len());
}

#[tokio::test]
async fn grpc_over_h2c_passes_trailers_and_resource_exhausted_raises_the_interval() {
    let mock =
        easeoff::mock_upstream::MockOptions::new(1.0, 1, easeoff::mock_upstream::Style::Grpc);
    let (_mock, addr) = easeoff::mock_upstream::spawn(mock, "127.0.0.1:0".parse().unwrap())
        .await
        .unwrap();
    let proxy = proxy(
        addr,
        "preset = \"grpc\"\n[upstream.sleeper]\ninitial_interval = \"10ms\"\n[upstream.retry]\nmax_attempts = 1\n",
    )
    .await;

    let client: hyper_util::client::legacy::Client<_, http_body_util::Full<Bytes>> =
        hyper_util::client::legacy::Client::builder(hyper_util::rt::TokioExecutor::new())
            .http2_only(true)
            .build(hyper_util::client::legacy::connect::HttpConnector::new());
    let call = || {
        let request = http::Request::post(format!("http://{}/demo.Echo/Say", proxy.addr))
            .header("content-type", "application/grpc")
            .header("te", "trailers")
            .body(http_body_util::Full::new(Bytes::from_static(&[
                0, 0, 0, 0, 0,
            ])))
            .unwrap();
        client.request(request)
    };
    use http_body_util::BodyExt;
    // The first call takes the mock's only token: a message, then grpc-status 0 in trailers.
    let first = call().await.unwrap();
    assert_eq!(first.status(), 200);
    let collected = first.into_body().collect().await.unwrap();
    assert_eq!(collected.trailers().unwrap()["grpc-status"], "0");
    // The second is throttled: trailers-only RESOURCE_EXHAUSTED.
    let second = call().await.unwrap();
    assert_eq!(second.headers()["grpc-status"], "8");
    // The method's own lane is raised; the upstream's default lane is not.
    assert_eq!(
        lane_interval_ms(proxy.admin, "/demo.Echo/Say").await,
        Some(10.0)
    );
    assert_eq!(lane_interval_ms(proxy.admin, "default").await, Some(0.0));
    assert_eq!(
        interval_ms(proxy.admin).await,
        10.0,
        "the headline is the paced lane's"
    );
    assert_eq!(
        metric(
            proxy.admin,
            "easeoff_throttles_total{signal=\"grpc\",upstream=\"up\"}"
        )
        .await,
        1.0
    );
}

#[tokio::test]
async fn grpc_clients_of_a_dead_upstream_get_unavailable() {
    let dead = {
        let l = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        l.local_addr().unwrap()
    };
    let proxy = proxy(
        dead,
        "preset = \"grpc\"\n[upstream.retry]\nmax_attempts = 1",
    )
    .await;
    let answer = send(
        &client(),
        "POST",
        &format!("http://{}/svc/Method", proxy.addr),
        &[("content-type", "application/grpc")],
        Bytes::new(),
    )
    .await;
    assert_eq!(answer.status, 200);
    assert_eq!(answer.headers["grpc-status"], "14");
    assert_eq!(answer.headers["x-easeoff-reason"], "upstream-unavailable");
}
