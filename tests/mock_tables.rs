//! The mock upstream's DynamoDB tables and hot keys: per-table buckets, throttles that
//! name the table in `ThrottlingReasons`, hot partition keys, partial batches and
//! per-table counts on its /metrics.

mod support;

use std::net::SocketAddr;
use std::time::Duration;

use easeoff::mock_upstream::{self, MockOptions, MockUpstream, Style, parse_table_rate};
use easeoff::route::dynamodb::{self, Access, Limit};
use support::*;

/// Rates so low that no token comes back while a test runs, however slow the machine.
const NEVER: &str = "0.0001";

async fn mock(table_rates: &[&str], key_rate: Option<f64>) -> (MockUpstream, SocketAddr) {
    mock_charging(table_rates, key_rate, false).await
}

async fn mock_charging(
    table_rates: &[&str],
    key_rate: Option<f64>,
    charge_by_size: bool,
) -> (MockUpstream, SocketAddr) {
    let options = MockOptions {
        rate: 1000.0,
        burst: 1000,
        style: Style::Dynamodb,
        latency: Duration::ZERO,
        autoscale: None,
        schedule: Default::default(),
        table_rates: table_rates
            .iter()
            .map(|t| parse_table_rate(t).unwrap())
            .collect(),
        key_rate,
        partition_wcu: None,
        burst_seconds: None,
        charge_by_size,
        throttle_paths: Vec::new(),
        overload_every: None,
    };
    mock_upstream::spawn(options, "127.0.0.1:0".parse().unwrap())
        .await
        .unwrap()
}

async fn call(addr: SocketAddr, operation: &str, body: &str) -> Answer {
    send(
        &client(),
        "POST",
        &format!("http://{addr}/"),
        &[
            (
                "x-amz-target",
                format!("DynamoDB_20120810.{operation}").as_str(),
            ),
            ("content-type", "application/x-amz-json-1.0"),
        ],
        body.to_owned(),
    )
    .await
}

async fn put(addr: SocketAddr, table: &str, pk: &str) -> Answer {
    let body =
        format!(r#"{{"TableName":"{table}","Item":{{"pk":{{"S":"{pk}"}},"n":{{"N":"1"}}}}}}"#);
    call(addr, "PutItem", &body).await
}

/// (reason, table) of each ThrottlingReasons entry.
fn reasons(answer: &Answer) -> Vec<(String, Option<String>)> {
    dynamodb::throttling_reasons(&answer.body)
        .into_iter()
        .map(|r| (r.reason, r.table))
        .collect()
}

#[tokio::test]
async fn charging_by_size_a_large_item_takes_its_units() {
    // 20 units a second, a burst of 2: a 4 KiB item takes the burst and leaves 2
    // owed, so a small write right after it is throttled; counted one a request, it
    // would pass.
    let item = |pk: &str, size: usize| {
        let value = "v".repeat(size);
        format!(r#"{{"TableName":"t","Item":{{"pk":{{"S":"{pk}"}},"v":{{"S":"{value}"}}}}}}"#)
    };
    for (by_size, second) in [(true, 400), (false, 200)] {
        let (_mock, addr) = mock_charging(&["t=20"], None, by_size).await;
        assert_eq!(call(addr, "PutItem", &item("a", 4000)).await.status, 200);
        assert_eq!(call(addr, "PutItem", &item("b", 1)).await.status, second);
    }
}

#[tokio::test]
async fn two_tables_with_different_rates_throttle_independently() {
    let (mock, addr) = mock(&[&format!("slow={NEVER}"), "fast=1000"], None).await;
    assert_eq!(put(addr, "slow", "a").await.status, 200);
    for _ in 0..3 {
        let answer = put(addr, "slow", "a").await;
        assert_eq!(answer.status, 400);
        assert!(
            answer.body.starts_with(b"{\"__type\":"),
            "{}",
            answer.text()
        );
        let body: serde_json::Value = serde_json::from_slice(&answer.body).unwrap();
        assert_eq!(
            body["__type"],
            "com.amazonaws.dynamodb.v20120810#ProvisionedThroughputExceededException"
        );
        assert!(body["message"].is_string());
        assert_eq!(
            body["ThrottlingReasons"][0]["resource"],
            "arn:aws:dynamodb:us-east-1:000000000000:table/slow"
        );
        assert_eq!(
            reasons(&answer),
            [(
                "TableWriteProvisionedThroughputExceeded".to_owned(),
                Some("slow".to_owned())
            )]
        );
    }
    for _ in 0..20 {
        assert_eq!(put(addr, "fast", "a").await.status, 200);
    }
    // Reads of slow have their own bucket, and throttle as reads.
    let get = r#"{"TableName":"slow","Key":{"pk":{"S":"a"}}}"#;
    assert_eq!(call(addr, "GetItem", get).await.status, 200);
    let answer = call(addr, "GetItem", get).await;
    let parsed = dynamodb::throttling_reasons(&answer.body);
    assert_eq!(parsed[0].access, Some(Access::Read));
    assert_eq!(parsed[0].limit, Some(Limit::ProvisionedThroughputExceeded));
    let counts = mock.counts();
    assert_eq!((counts.ok, counts.throttled), (22, 4));
}

#[tokio::test]
async fn a_hot_key_throttles_while_other_keys_pass() {
    let (_mock, addr) = mock(&["t=1000"], Some(NEVER.parse().unwrap())).await;
    assert_eq!(put(addr, "t", "hot").await.status, 200);
    let answer = put(addr, "t", "hot").await;
    assert_eq!(answer.status, 400);
    assert_eq!(
        reasons(&answer),
        [(
            "TableWriteKeyRangeThroughputExceeded".to_owned(),
            Some("t".to_owned())
        )]
    );
    for key in 0..20 {
        assert_eq!(put(addr, "t", &format!("cold{key}")).await.status, 200);
    }
    assert_eq!(put(addr, "t", "hot").await.status, 400);
}

#[tokio::test]
async fn a_batch_hands_back_only_the_throttled_tables_items() {
    let (_mock, addr) = mock(&[&format!("slow={NEVER}")], None).await;
    assert_eq!(put(addr, "slow", "a").await.status, 200);
    let slow_items = r#"[{"PutRequest":{"Item":{"pk":{"S":"s"}}}}]"#;
    let batch = format!(
        r#"{{"RequestItems":{{"fast":[{{"PutRequest":{{"Item":{{"pk":{{"S":"f"}}}}}}}}],"slow":{slow_items}}}}}"#
    );
    let answer = call(addr, "BatchWriteItem", &batch).await;
    assert_eq!(answer.status, 200);
    let body: serde_json::Value = serde_json::from_slice(&answer.body).unwrap();
    let want: serde_json::Value = serde_json::from_str(&format!(
        r#"{{"UnprocessedItems":{{"slow":{slow_items}}}}}"#
    ))
    .unwrap();
    assert_eq!(body, want);
    let names: Vec<String> = dynamodb::unprocessed_tables(&answer.body)
        .iter()
        .map(str::to_owned)
        .collect();
    assert_eq!(names, ["slow"]);
    // Only the throttled table: the whole call is throttled, as DynamoDB does.
    let only_slow = format!(r#"{{"RequestItems":{{"slow":{slow_items}}}}}"#);
    assert_eq!(call(addr, "BatchWriteItem", &only_slow).await.status, 400);
}

#[tokio::test]
async fn per_table_counts_are_on_the_mocks_metrics() {
    let (mock, addr) = mock(&[&format!("slow={NEVER}")], None).await;
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let admin = listener.local_addr().unwrap();
    tokio::spawn(mock.serve_admin(listener));
    for _ in 0..3 {
        put(addr, "slow", "a").await;
    }
    put(addr, "other", "a").await;
    let get = r#"{"TableName":"other","Key":{"pk":{"S":"a"}}}"#;
    call(addr, "GetItem", get).await;
    let sample = |table: &str, access: &str, result: &str| {
        format!(
            "mock_table_requests_total{{access=\"{access}\",result=\"{result}\",table=\"{table}\"}}"
        )
    };
    assert_eq!(metric(admin, &sample("slow", "write", "ok")).await, 1.0);
    assert_eq!(
        metric(admin, &sample("slow", "write", "throttled")).await,
        2.0
    );
    assert_eq!(metric(admin, &sample("other", "write", "ok")).await, 1.0);
    assert_eq!(metric(admin, &sample("other", "read", "ok")).await, 1.0);
    assert_eq!(
        metric(admin, "mock_requests_total{result=\"throttled\"}").await,
        2.0
    );
}
