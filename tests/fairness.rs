//! `[upstream.fairness]`: a higher class overtakes a full queue, weights share a lane
//! by their ratio, and a full queue sheds the tenant furthest over its share.

mod support;

use std::time::Duration;

use bytes::Bytes;
use support::*;

/// A lane held at one request every 40 ms, its callers told apart by `x-tenant`.
const FAIR: &str = r#"
[upstream.sleeper]
strategy = "constant"
initial_interval = "40ms"

[upstream.fairness]
by = "header:x-tenant"
weights = { batch = 3 }
priority = "header:x-priority"
"#;

/// Sends one request as `tenant` (with `priority`, if any) in the background.
fn call(
    url: &str,
    tenant: &'static str,
    priority: Option<&'static str>,
) -> tokio::task::JoinHandle<u16> {
    let url = url.to_string();
    tokio::spawn(async move {
        let mut headers = vec![("x-tenant", tenant)];
        if let Some(p) = priority {
            headers.push(("x-priority", p));
        }
        send(&client(), "GET", &url, &headers, Bytes::new())
            .await
            .status
            .as_u16()
    })
}

/// The tenants in the order the upstream saw them.
fn seen(up: &TestUpstream) -> Vec<String> {
    up.arrivals()
        .iter()
        .map(|a| {
            a.headers
                .get("x-tenant")
                .and_then(|v| v.to_str().ok())
                .unwrap_or("")
                .to_string()
        })
        .collect()
}

async fn waiting(proxy: &Proxy, n: f64) {
    wait_until(
        Duration::from_secs(10),
        &format!("{n} requests wait"),
        || async { metric(proxy.admin, r#"easeoff_queue_waiting{upstream="up"}"#).await >= n },
    )
    .await;
}

#[tokio::test]
async fn a_higher_class_goes_next_past_a_full_queue() {
    let up = upstream(|_| async { ok() }).await;
    let proxy = proxy(up.addr, FAIR).await;
    let url = format!("http://{}/", proxy.addr);
    let batch: Vec<_> = (0..12).map(|_| call(&url, "batch", None)).collect();
    waiting(&proxy, 8.0).await;
    let before = up.count();
    let web = call(&url, "web", Some("1"));
    assert_eq!(web.await.unwrap(), 200);
    let order = seen(&up);
    let at = order.iter().position(|t| t == "web").unwrap();
    // Next, or after the one whose slot was already being timed.
    assert!(
        at <= before + 1,
        "web went {at}th, {before} had gone: {order:?}"
    );
    for b in batch {
        assert_eq!(b.await.unwrap(), 200);
    }
    let status = status(proxy.admin).await;
    let tenants = &status["tenants"];
    let names: Vec<&str> = tenants
        .as_array()
        .unwrap()
        .iter()
        .map(|t| t["name"].as_str().unwrap())
        .collect();
    assert_eq!(names, ["other", "batch", "web"]);
    assert_eq!(tenants[1]["dispatches"], 12);
    assert_eq!(tenants[1]["weight"], 3);
    let text = metrics(proxy.admin).await;
    assert_eq!(
        sample_value(
            &text,
            r#"easeoff_tenant_dispatches_total{tenant="web",upstream="up"}"#
        ),
        Some(1.0)
    );
}

#[tokio::test]
async fn weights_share_a_busy_lane_by_their_ratio() {
    let up = upstream(|_| async { ok() }).await;
    let proxy = proxy(up.addr, FAIR).await;
    let url = format!("http://{}/", proxy.addr);
    // `web` queues first, then `batch`: in arrival order web would go first.
    let mut calls: Vec<_> = (0..8).map(|_| call(&url, "web", None)).collect();
    waiting(&proxy, 6.0).await;
    calls.extend((0..8).map(|_| call(&url, "batch", None)));
    waiting(&proxy, 14.0).await;
    let from = up.count();
    for c in calls {
        assert_eq!(c.await.unwrap(), 200);
    }
    let order = seen(&up);
    // Once both wait, batch (weight 3) goes three times for web's once.
    let next: Vec<&str> = order[from..from + 8].iter().map(String::as_str).collect();
    let batch = next.iter().filter(|t| **t == "batch").count();
    assert!((5..=7).contains(&batch), "{next:?}");
}

#[tokio::test]
async fn a_full_queue_sheds_the_tenant_furthest_over_its_share() {
    let up = upstream(|_| async { ok() }).await;
    let extra = format!("{FAIR}\n[upstream.queue]\nmax_waiting = 4\n");
    let proxy = proxy(up.addr, &extra).await;
    let url = format!("http://{}/", proxy.addr);
    let batch: Vec<_> = (0..5).map(|_| call(&url, "batch", None)).collect();
    waiting(&proxy, 4.0).await;
    // The queue is full of batch: web takes the place of batch's last.
    let web = call(&url, "web", None);
    assert_eq!(web.await.unwrap(), 200);
    let mut statuses = Vec::new();
    for b in batch {
        statuses.push(b.await.unwrap());
    }
    assert_eq!(
        statuses.iter().filter(|s| **s != 200).count(),
        1,
        "{statuses:?}"
    );
    let text = metrics(proxy.admin).await;
    assert_eq!(
        sample_value(
            &text,
            r#"easeoff_tenant_shed_total{tenant="batch",upstream="up"}"#
        ),
        Some(1.0)
    );
    assert_eq!(
        sample_value(
            &text,
            r#"easeoff_tenant_shed_total{tenant="web",upstream="up"}"#
        ),
        Some(0.0)
    );
}

#[tokio::test]
async fn each_lane_shows_its_own_tenants() {
    let up = upstream(|_| async { ok() }).await;
    let extra =
        "[upstream.lanes]\nby = [\"path:1\"]\n\n[upstream.fairness]\nby = \"header:x-tenant\"\n";
    let proxy = proxy(up.addr, extra).await;
    for (path, tenant) in [("a", "web"), ("a", "web"), ("b", "batch")] {
        let url = format!("http://{}/{path}", proxy.addr);
        let answer = send(
            &client(),
            "GET",
            &url,
            &[("x-tenant", tenant)],
            Bytes::new(),
        )
        .await;
        assert_eq!(answer.status, 200);
    }
    let status = status(proxy.admin).await;
    let lanes = status["lanes"].as_array().unwrap();
    let tenants_of = |name: &str| -> Vec<(String, u64)> {
        let lane = (lanes.iter().find(|l| l["name"] == name))
            .unwrap_or_else(|| panic!("no lane {name} in {lanes:?}"));
        lane["tenants"]
            .as_array()
            .unwrap()
            .iter()
            .map(|t| {
                (
                    t["name"].as_str().unwrap().to_string(),
                    t["dispatches"].as_u64().unwrap(),
                )
            })
            .collect()
    };
    assert_eq!(tenants_of("/a"), [("web".to_string(), 2)]);
    assert_eq!(tenants_of("/b"), [("batch".to_string(), 1)]);
    assert_eq!(tenants_of("default"), []);
}
