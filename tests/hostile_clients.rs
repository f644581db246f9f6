//! What one careless client can do to everyone else's requests on a lane: ask for
//! absurd amounts of a limited resource, or cycle through lane names. Each stays the
//! client's own problem.

mod support;

use std::net::SocketAddr;

use bytes::Bytes;
use support::*;

async fn post(addr: SocketAddr, body: String) -> Answer {
    let url = format!("http://{addr}/v1/chat/completions");
    send(&client(), "POST", &url, &[], Bytes::from(body)).await
}

fn chat(max_tokens: u64) -> String {
    format!(
        r#"{{"messages":[{{"role":"user","content":"hello there"}}],"model":"m","max_tokens":{max_tokens}}}"#
    )
}

/// An OpenAI lane near its token reserve (900 of 30,000 left, back in 2 s): one call
/// asking for `max_tokens` of 10^12 was reserved at all of it, and the gap after it
/// turned the next calls of every client away at once. Reserved now at the lane's
/// mean (no window of 30,000 admits it; the vendor refuses it), it holds nobody.
#[tokio::test]
async fn one_clients_absurd_max_tokens_holds_no_one_elses_calls() {
    let up = upstream(|_| async {
        let near = [
            ("x-ratelimit-limit-tokens", "30000"),
            ("x-ratelimit-remaining-tokens", "900"),
            ("x-ratelimit-reset-tokens", "2s"),
            ("content-type", "application/json"),
        ];
        let usage = r#"{"usage":{"prompt_tokens":10,"completion_tokens":10}}"#;
        respond(200, &near, usage)
    })
    .await;
    let proxy = proxy(up.addr, "preset = \"openai\"\n").await;
    assert_eq!(post(proxy.addr, chat(20)).await.status, 200);
    assert_eq!(post(proxy.addr, chat(1_000_000_000_000)).await.status, 200);
    let calls: Vec<_> = (0..5)
        .map(|_| tokio::spawn(post(proxy.addr, chat(20))))
        .collect();
    for call in calls {
        let answer = call.await.unwrap();
        assert_eq!(answer.status, 200, "{}", answer.text());
    }
    assert_eq!(requests(proxy.admin, "shed").await, 0.0);
}
