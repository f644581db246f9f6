//! DynamoDB's error answers through the dynamodb preset.

mod support;

use std::sync::Arc;

use bytes::Bytes;
use support::*;

const PTEE: &str = r#"{"__type":"com.amazonaws.dynamodb.v20120810#ProvisionedThroughputExceededException","message":"The level of configured provisioned throughput for the table was exceeded."}"#;
const VALIDATION: &str = r#"{"__type":"com.amazon.coral.validate#ValidationException","message":"One or more parameter values were invalid: Missing the key pk in the item"}"#;
/// The dynamodb preset with an exact sleeper, and no retries so the upstream's answer
/// reaches the client as it was.
const PRESET: &str = "preset = \"dynamodb\"\n[upstream.sleeper]\ninitial_interval = \"10ms\"\nrandomization_factor = 0.0\n[upstream.retry]\nmax_attempts = 1\n";

async fn put_item(proxy: &Proxy) -> Answer {
    send(
        &client(),
        "POST",
        &format!("http://{}/", proxy.addr),
        &[
            ("x-amz-target", "DynamoDB_20120810.PutItem"),
            ("content-type", "application/x-amz-json-1.0"),
        ],
        r#"{"TableName":"t","Item":{"pk":{"S":"1"}}}"#,
    )
    .await
}

#[tokio::test]
async fn provisioned_throughput_exceeded_in_the_body_raises_the_interval() {
    let up = upstream(|_| async {
        respond(400, &[("content-type", "application/x-amz-json-1.0")], PTEE)
    })
    .await;
    let proxy = proxy(up.addr, PRESET).await;
    let answer = put_item(&proxy).await;
    assert_eq!(answer.status, 400);
    assert_eq!(
        answer.body,
        PTEE.as_bytes(),
        "the throttle reaches the client unchanged"
    );
    // The table's lane is raised; the upstream's default lane is not.
    assert_eq!(lane_interval_ms(proxy.admin, "t:write").await, Some(10.0));
    assert_eq!(lane_interval_ms(proxy.admin, "default").await, Some(0.0));
    assert_eq!(
        interval_ms(proxy.admin).await,
        10.0,
        "the headline is the paced lane's"
    );
    let a = proxy.admin;
    assert_eq!(
        metric(
            a,
            "easeoff_throttles_total{signal=\"body\",upstream=\"up\"}"
        )
        .await,
        1.0
    );
    assert_eq!(
        metric(
            a,
            "easeoff_upstream_responses_total{code=\"400\",upstream=\"up\"}"
        )
        .await,
        1.0
    );
}

#[tokio::test]
async fn provisioned_throughput_exceeded_in_the_header_raises_the_interval() {
    let up = upstream(|_| async {
        respond(
            400,
            &[(
                "x-amzn-errortype",
                "ProvisionedThroughputExceededException:http://internal.amazon.com/coral/com.amazonaws.dynamodb.v20120810/",
            )],
            "{}",
        )
    })
    .await;
    let proxy = proxy(up.addr, PRESET).await;
    assert_eq!(put_item(&proxy).await.status, 400);
    // The table's lane is raised; the upstream's default lane is not.
    assert_eq!(lane_interval_ms(proxy.admin, "t:write").await, Some(10.0));
    assert_eq!(lane_interval_ms(proxy.admin, "default").await, Some(0.0));
    assert_eq!(
        interval_ms(proxy.admin).await,
        10.0,
        "the headline is the paced lane's"
    );
    assert_eq!(
        metric(
            proxy.admin,
            "easeoff_throttles_total{signal=\"header\",upstream=\"up\"}"
        )
        .await,
        1.0
    );
}

#[tokio::test]
async fn a_validation_exception_passes_through_byte_for_byte_and_does_not_raise() {
    let up = upstream(|_| async {
        respond(
            400,
            &[
                ("content-type", "application/x-amz-json-1.0"),
                (
                    "x-amzn-requestid",
                    "7RVHAQCSG9M6KG3K4RPHD6G4EBVV4KQNSO5AEMVJF66Q9ASUAAJG",
                ),
                ("x-amz-crc32", "2445281406"),
            ],
            VALIDATION,
        )
    })
    .await;
    let proxy = proxy(up.addr, PRESET).await;
    let answer = put_item(&proxy).await;
    assert_eq!(answer.status, 400);
    assert_eq!(answer.body, Bytes::from_static(VALIDATION.as_bytes()));
    assert_eq!(answer.headers["content-type"], "application/x-amz-json-1.0");
    assert_eq!(
        answer.headers["x-amzn-requestid"],
        "7RVHAQCSG9M6KG3K4RPHD6G4EBVV4KQNSO5AEMVJF66Q9ASUAAJG"
    );
    assert_eq!(answer.headers["x-amz-crc32"], "2445281406");
    assert_eq!(
        answer.headers["content-length"],
        VALIDATION.len().to_string().as_str()
    );
    assert_eq!(interval_ms(proxy.admin).await, 0.0);
    let a = proxy.admin;
    assert_eq!(
        metric(a, "easeoff_interval_increases_total{upstream=\"up\"}").await,
        0.0
    );
    // A 4xx the client has to fix: counted as such, not as goodput.
    assert_eq!(requests(a, "client_error").await, 1.0);
    assert_eq!(requests(a, "success").await, 0.0);
}

#[tokio::test]
async fn the_request_reaches_dynamodb_with_its_headers_and_the_upstream_host() {
    let up = Arc::new(upstream(|_| async { respond(200, &[], "{}") }).await);
    let proxy = proxy(up.addr, PRESET).await;
    assert_eq!(put_item(&proxy).await.status, 200);
    let seen = &up.arrivals()[0];
    assert_eq!(seen.method, "POST");
    assert_eq!(seen.headers["x-amz-target"], "DynamoDB_20120810.PutItem");
    assert_eq!(seen.headers["host"], up.addr.to_string().as_str());
}
