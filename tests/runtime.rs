//! `[server] runtime = "per-core"`: the same behaviour with one runtime per CPU, the
//! pacer and the controller shared by every runtime.

mod support;

use std::net::SocketAddr;
use std::time::{Duration, Instant};

use bytes::Bytes;
use support::*;

fn per_core(target: SocketAddr, extra: &str) -> String {
    format!(
        "[server]\nadmin_listen = \"127.0.0.1:0\"\nshutdown_grace = \"5s\"\nruntime = \"per-core\"\n\n[[upstream]]\nname = \"up\"\nlisten = \"127.0.0.1:0\"\nurl = \"http://{target}\"\n{extra}\n"
    )
}

/// `n` requests at once, each on a connection of its own (so the kernel spreads
/// them over the runtimes' sockets); their statuses.
async fn at_once(url: &str, n: usize) -> Vec<u16> {
    let mut requests = Vec::new();
    for _ in 0..n {
        let url = url.to_string();
        requests.push(tokio::spawn(async move {
            send(&client(), "GET", &url, &[], Bytes::new())
                .await
                .status
                .as_u16()
        }));
    }
    let mut statuses = Vec::new();
    for r in requests {
        statuses.push(r.await.unwrap());
    }
    statuses
}

#[tokio::test]
async fn per_core_runtimes_forward_and_absorb_throttles() {
    let up = throttles_first(3, || respond(429, &[], "")).await;
    let proxy = proxy_config(&per_core(up.addr, "")).await;
    let url = format!("http://{}/", proxy.addr);
    assert_eq!(at_once(&url, 16).await, vec![200; 16]);
    assert_eq!(up.count(), 16 + 3);
    assert!(
        metric(
            proxy.admin,
            "easeoff_interval_increases_total{upstream=\"up\"}"
        )
        .await
            >= 1.0
    );
    assert_eq!(requests(proxy.admin, "success").await, 16.0);
    proxy.stop().await.unwrap();
}

#[tokio::test]
async fn per_core_runtimes_share_one_pacer() {
    let up = upstream(|_| async { ok() }).await;
    let extra = "[upstream.sleeper]\nstrategy = \"constant\"\ninitial_interval = \"50ms\"\n";
    let proxy = proxy_config(&per_core(up.addr, extra)).await;
    let url = format!("http://{}/", proxy.addr);
    let sent = Instant::now();
    assert_eq!(at_once(&url, 8).await, vec![200; 8]);
    let arrivals = up.arrivals();
    assert_eq!(arrivals.len(), 8);
    // One schedule for all runtimes: eight dispatches span seven intervals, the first
    // no earlier than the requests were sent. (An arrival also carries its attempt's
    // connection set-up, longer on a loaded host, so the span is counted from the
    // sending, which no delay can move later; a pacer per runtime would fit the eight
    // into about four intervals.)
    let span = arrivals[7].at - sent;
    assert!(
        span >= Duration::from_millis(330),
        "8 dispatches took {span:?}"
    );
    proxy.stop().await.unwrap();
}
