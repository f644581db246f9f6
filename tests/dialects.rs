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
    wait_until(Duration::from_secs(5), "the last access line", || async {
        accessed("secondary")
    })
    .await;
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
