//! Vendors' rate-limit answers through the real server: a throttle that shares its
//! status with an error (GitHub's 403) is told apart by what it says.

mod support;

use std::net::SocketAddr;
use std::time::{Duration, SystemTime};

use support::process::*;
use support::*;

/// Config text with one upstream per case, 403 and 429 listed as throttles.
fn config(cases: &[(&str, SocketAddr)]) -> String {
    let mut text = "[server]\nadmin_listen = \"127.0.0.1:0\"\n".to_string();
    for (name, target) in cases {
        text.push_str(&format!(
            "\n[[upstream]]\nname = \"{name}\"\nlisten = \"127.0.0.1:0\"\nurl = \"http://{target}\"\naccess_log = \"full\"\n[upstream.throttle]\nstatuses = [403, 429]\n"
        ));
    }
    text
}

fn epoch_in(seconds: u64) -> String {
    let now = SystemTime::now()
        .duration_since(SystemTime::UNIX_EPOCH)
        .unwrap();
    (now.as_secs() + seconds).to_string()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_permission_403_goes_back_at_once_and_a_rate_limit_403_is_retried_without_an_auth_warning()
 {
    let denied = upstream(|_| async {
        let body = r#"{"message":"Resource not accessible by integration"}"#;
        respond(403, &[("x-ratelimit-remaining", "4999")], body)
    })
    .await;
    let limited = throttles_first(1, || {
        let reset = epoch_in(1);
        let headers = [
            ("x-ratelimit-remaining", "0"),
            ("x-ratelimit-reset", reset.as_str()),
        ];
        respond(403, &headers, r#"{"message":"API rate limit exceeded"}"#)
    })
    .await;
    let secondary = throttles_first(1, || {
        respond(
            403,
            &[],
            r#"{"message":"You have exceeded a secondary rate limit."}"#,
        )
    })
    .await;
    let path = config_file(&config(&[
        ("denied", denied.addr),
        ("limited", limited.addr),
        ("secondary", secondary.addr),
    ]));
    let process = Process::start(&path);
    assert_eq!(get(&process.url("denied")).await.status, 403);
    assert_eq!(denied.count(), 1, "a permission 403 is not retried");
    assert_eq!(get(&process.url("limited")).await.status, 200);
    assert_eq!(limited.count(), 2, "a rate-limit 403 is retried");
    assert_eq!(get(&process.url("secondary")).await.status, 200);
    assert_eq!(secondary.count(), 2, "a secondary-limit 403 is retried");

    let warned = |name: &str| {
        let log = process.log.lock().unwrap();
        log.iter()
            .filter(|l| {
                l["upstream"] == name
                    && l["message"]
                        .as_str()
                        .is_some_and(|m| m.contains("unauthorised"))
            })
            .count()
    };
    // Lines come in order: once the last request's access line is read, every warning
    // before it is too.
    let accessed = |name: &str| {
        let log = process.log.lock().unwrap();
        log.iter()
            .any(|l| l["target"] == "easeoff::access" && l["upstream"] == name)
    };
    eventually("the last access line", || async { accessed("secondary") }).await;
    assert_eq!(warned("denied"), 1);
    assert_eq!(warned("limited"), 0);
    assert_eq!(warned("secondary"), 0);
}

#[tokio::test]
async fn an_overload_is_retried_after_a_backoff() {
    let overloaded =
        r#"{"type":"error","error":{"type":"overloaded_error","message":"Overloaded"}}"#;
    let up = throttles_first(2, move || respond(529, &[], overloaded)).await;
    let proxy = proxy(up.addr, "[upstream.throttle]\nstatuses = [429, 529]").await;
    assert_eq!(
        get(&format!("http://{}/v1/messages", proxy.addr))
            .await
            .status,
        200
    );
    let arrivals = up.arrivals();
    assert_eq!(arrivals.len(), 3);
    let gaps = [
        arrivals[1].at - arrivals[0].at,
        arrivals[2].at - arrivals[1].at,
    ];
    assert!(gaps[0] >= Duration::from_millis(500), "{gaps:?}");
    assert!(gaps[1] >= Duration::from_millis(1000), "{gaps:?}");
    let signal = r#"easeoff_throttles_total{signal="overload",upstream="up"}"#;
    assert_eq!(metric(proxy.admin, signal).await, 2.0);
}

/// A GitHub-style upstream whose every answer states `remaining` and a reset `reset_in`
/// seconds from now (an epoch); the first answer differs where `first` says so.
async fn github(first: (&'static str, i64), then: (&'static str, i64)) -> TestUpstream {
    let answered = std::sync::Arc::new(std::sync::atomic::AtomicUsize::new(0));
    upstream(move |_| {
        let n = answered.fetch_add(1, std::sync::atomic::Ordering::SeqCst);
        let (remaining, reset_in) = if n == 0 { first } else { then };
        async move {
            let now = SystemTime::now()
                .duration_since(SystemTime::UNIX_EPOCH)
                .unwrap();
            let reset = (now.as_secs() as i64 + reset_in).to_string();
            let headers = [
                ("x-ratelimit-limit", "5000"),
                ("x-ratelimit-remaining", remaining),
                ("x-ratelimit-reset", reset.as_str()),
                ("x-ratelimit-resource", "core"),
            ];
            respond(200, &headers, "{}")
        }
    })
    .await
}

#[tokio::test]
async fn github_a_reset_now_or_past_never_pauses_and_a_spent_window_waits_for_its_reset() {
    for reset_in in [0, -5] {
        let up = github(("0", reset_in), ("4999", 3600)).await;
        let (proxy, dispatches) = proxy_observed(up.addr, "preset = \"github\"").await;
        let url = format!("http://{}/repos/a/b", proxy.addr);
        for _ in 0..3 {
            assert_eq!(get(&url).await.status, 200);
        }
        // No pause: the pacer held none of the three (measured where easeoff decides,
        // not by the clock, which a loaded host slows).
        dispatches.wait_for(3).await;
        assert_eq!(dispatches.held(), 0, "reset {reset_in}: a request was held");
        assert_eq!(
            metric(
                proxy.admin,
                "easeoff_hint_pauses_capped_total{header=\"ratelimit\",upstream=\"up\"}"
            )
            .await,
            0.0
        );
    }
    // Spent, resetting in 2 s: the next request waits for the reset (the epoch has
    // whole seconds, so 1 to 2 s).
    let up = github(("0", 2), ("4999", 3600)).await;
    let proxy = proxy(up.addr, "preset = \"github\"").await;
    let url = format!("http://{}/repos/a/b", proxy.addr);
    assert_eq!(get(&url).await.status, 200);
    let arrivals = || up.arrivals();
    assert_eq!(get(&url).await.status, 200);
    let gap = arrivals()[1].at - arrivals()[0].at;
    assert!(gap >= Duration::from_millis(950), "{gap:?}");
}

#[tokio::test]
async fn github_a_nearly_spent_window_spreads_what_is_left() {
    // 50 left, reset in 60 s: 1.2 s apart. The first answer names the lane (`core`),
    // where the spacing applies from the second request on.
    let up = github(("50", 60), ("50", 60)).await;
    let (proxy, dispatches) = proxy_observed(up.addr, "preset = \"github\"").await;
    let url = format!("http://{}/repos/a/b", proxy.addr);
    for _ in 0..4 {
        assert_eq!(get(&url).await.status, 200);
    }
    let dispatched = dispatches.wait_for(4).await;
    let gaps: Vec<_> = dispatched.windows(2).map(|p| p[1] - p[0]).collect();
    for gap in &gaps[1..] {
        assert!(*gap >= Duration::from_millis(1150), "gaps {gaps:?}");
    }
}
