//! Lanes that pace in what requests cost: a request is reserved at its estimate
//! before it goes and settled from what the answer says it cost, a streamed answer
//! included, without holding the answer or a body past what easeoff holds.

mod support;

use std::net::SocketAddr;

use bytes::Bytes;
use support::*;

/// Each lane's estimate-ratio histogram, which `units` reads.
const HISTOGRAMS: &str = "[upstream.lanes]\nmetrics_histograms = true\n";

/// A lane's reserved and settled units and its estimate-ratio count.
async fn units(admin: SocketAddr, lane: &str) -> (f64, f64, f64) {
    let text = metrics(admin).await;
    let get = |name: &str| {
        sample_value(&text, &format!("{name}{{lane=\"{lane}\",upstream=\"up\"}}")).unwrap_or(0.0)
    };
    (
        get("easeoff_lane_cost_reserved_units_total"),
        get("easeoff_lane_cost_settled_units_total"),
        get("easeoff_lane_cost_estimate_ratio_count"),
    )
}

async fn post(addr: SocketAddr, path: &str, headers: &[(&str, &str)], body: String) -> Answer {
    let url = format!("http://{addr}{path}");
    send(&client(), "POST", &url, headers, Bytes::from(body)).await
}

const STREAM: &str = "data: {\"choices\":[{\"delta\":{\"content\":\"hello\"}}]}\n\n\
    data: {\"choices\":[],\"usage\":{\"prompt_tokens\":500,\"completion_tokens\":100}}\n\n\
    data: [DONE]\n\n";

#[tokio::test]
async fn a_streamed_answers_usage_settles_what_the_request_was_reserved_at() {
    let up = upstream(|_| async { respond(200, &[("content-type", "text/event-stream")], STREAM) })
        .await;
    let proxy = proxy(up.addr, &format!("preset = \"anthropic\"\n{HISTOGRAMS}")).await;
    // 40 characters of prompt (`user` and the text): 10 tokens, and 50 of answer.
    let body = r#"{"model":"m","max_tokens":50,"stream":true,"messages":[{"role":"user","content":"012345678901234567890123456789012345"}]}"#;
    let answer = post(proxy.addr, "/v1/messages", &[], body.into()).await;
    assert_eq!(answer.status, 200);
    assert_eq!(
        answer.text(),
        STREAM,
        "the stream reaches the client as it was"
    );
    eventually("the usage settled", || async {
        units(proxy.admin, "m").await == (60.0, 600.0, 1.0)
    })
    .await;
}

/// An Anthropic stream that ends after its text, before `message_delta` says what it
/// took (a dropped connection, a client gone).
fn cut_stream() -> String {
    let text = "x".repeat(400);
    format!(
        "event: message_start\ndata: {{\"type\":\"message_start\",\"message\":{{\"usage\":{{\"input_tokens\":500,\"output_tokens\":1}}}}}}\n\n\
         event: content_block_delta\ndata: {{\"type\":\"content_block_delta\",\"index\":0,\"delta\":{{\"type\":\"text_delta\",\"text\":\"{text}\"}}}}\n\n"
    )
}

#[tokio::test]
async fn a_stream_cut_before_its_end_settles_the_output_it_showed() {
    let up = upstream(|_| async {
        respond(200, &[("content-type", "text/event-stream")], cut_stream())
    })
    .await;
    let proxy = proxy(up.addr, &format!("preset = \"anthropic\"\n{HISTOGRAMS}")).await;
    let body = r#"{"model":"m","max_tokens":50,"stream":true,"messages":[{"role":"user","content":"012345678901234567890123456789012345"}]}"#;
    let answer = post(proxy.addr, "/v1/messages", &[], body.into()).await;
    assert_eq!(answer.text(), cut_stream());
    // 500 in, and 400 characters out: 100 tokens, not the 1 of `message_start`.
    eventually("the shown output settled", || async {
        units(proxy.admin, "m").await == (60.0, 600.0, 1.0)
    })
    .await;
}

#[tokio::test]
async fn a_body_past_what_easeoff_holds_is_sent_whole_and_reserved_by_what_was_read() {
    let up = upstream(|req: http::Request<hyper::body::Incoming>| async move {
        use http_body_util::BodyExt;
        let body = req.into_body().collect().await.unwrap().to_bytes();
        respond(200, &[], format!(r#"{{"received":{}}}"#, body.len()))
    })
    .await;
    let config =
        format!("preset = \"openai\"\n[upstream.retry]\nmax_body_bytes = 1024\n{HISTOGRAMS}");
    let proxy = proxy(up.addr, &config).await;
    let prompt = "x".repeat(100_000);
    let body = format!(r#"{{"model":"big","messages":[{{"role":"user","content":"{prompt}"}}]}}"#);
    let answer = post(proxy.addr, "/v1/chat/completions", &[], body.clone()).await;
    assert_eq!(answer.status, 200);
    assert_eq!(answer.text(), format!(r#"{{"received":{}}}"#, body.len()));
    // Text past what was held: the rest at the tokens a byte of what was read, so
    // about its length over four; the answer told nothing more.
    let (reserved, settled, answers) = units(proxy.admin, "big").await;
    let length = body.len().div_ceil(4) as f64;
    assert!(
        (0.97 * length..=length).contains(&reserved),
        "{reserved} of {length}"
    );
    assert_eq!((settled, answers), (0.0, 0.0));
    // Two images of 1.2 MB each (1024 × 1024 PNGs, as the base64 of their header
    // says): about
    // twice 765 tokens, not 2.4 MB over four.
    let image = format!(
        "data:image/png;base64,iVBORw0KGgoAAAANSUhEUgAABAAAAAQA{}",
        "A".repeat(1_200_000)
    );
    let part = format!(r#"{{"type":"image_url","image_url":{{"url":"{image}"}}}}"#);
    let body =
        format!(r#"{{"model":"seen","messages":[{{"role":"user","content":[{part},{part}]}}]}}"#);
    let answer = post(proxy.addr, "/v1/chat/completions", &[], body).await;
    assert_eq!(answer.status, 200);
    let (reserved, _, _) = units(proxy.admin, "seen").await;
    assert!((765.0..=4000.0).contains(&reserved), "{reserved}");
}

#[tokio::test]
async fn a_dynamodb_write_is_reserved_at_its_items_size_and_settled_from_consumed_capacity() {
    let up = upstream(|_| async {
        respond(
            200,
            &[("content-type", "application/x-amz-json-1.0")],
            r#"{"ConsumedCapacity":{"TableName":"orders","CapacityUnits":9.0}}"#,
        )
    })
    .await;
    let proxy = proxy(up.addr, &format!("preset = \"dynamodb\"\n{HISTOGRAMS}")).await;
    // An item of 8,000 bytes of value and a 2-byte name: 8 write units.
    let value = "v".repeat(8000);
    let body = format!(
        r#"{{"TableName":"orders","ReturnConsumedCapacity":"TOTAL","Item":{{"pk":{{"S":"{value}"}}}}}}"#
    );
    let headers = [
        ("x-amz-target", "DynamoDB_20120810.PutItem"),
        ("content-type", "application/x-amz-json-1.0"),
    ];
    // A write that does not ask for its ConsumedCapacity first: its answer is not
    // read (DynamoDB would not say), so only the second write settles.
    let unasked = body.replace(r#""ReturnConsumedCapacity":"TOTAL","#, "");
    let answer = post(proxy.addr, "/", &headers, unasked).await;
    assert_eq!(answer.status, 200);
    let answer = post(proxy.addr, "/", &headers, body).await;
    assert_eq!(answer.status, 200);
    eventually("the capacity settled", || async {
        units(proxy.admin, "orders:write").await == (16.0, 9.0, 1.0)
    })
    .await;
}
