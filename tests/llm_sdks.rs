//! The openai and anthropic Python SDKs through easeoff's `openai` and `anthropic`
//! presets, their own retries off: a 429 and a 529 are absorbed by easeoff, streamed
//! answers arrive whole with their usage, a multipart upload (its model a form
//! field, not JSON) reaches the upstream byte for byte, and a 1.5 MiB prompt, which
//! the SDKs write before `model`, is paced in its model's lane.
//!
//! Needs the e2e venv with openai and anthropic (`.ci/run` installs them): at
//! `$EASEOFF_E2E_VENV`, else `~/.cache/easeoff-e2e`. Without them the test says so and
//! passes, unless `EASEOFF_REQUIRE_LLM_SDKS=1` (set by CI).

mod support;

use std::path::{Path, PathBuf};
use std::process::Command;
use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};

use http_body_util::BodyExt;
use hyper::body::Incoming;
use serde_json::{Value, json};
use support::*;

fn venv() -> Option<PathBuf> {
    let dir = std::env::var_os("EASEOFF_E2E_VENV")
        .map(PathBuf::from)
        .or_else(|| std::env::var_os("HOME").map(|h| Path::new(&h).join(".cache/easeoff-e2e")))?;
    let python = dir.join("bin/python");
    let found = Command::new(&python)
        .args(["-c", "import openai, anthropic"])
        .status()
        .is_ok_and(|s| s.success());
    if found {
        return Some(dir);
    }
    assert!(
        std::env::var_os("EASEOFF_REQUIRE_LLM_SDKS").is_none(),
        "no e2e venv with openai and anthropic at {}",
        dir.display()
    );
    eprintln!(
        "skipped: no e2e venv with openai and anthropic at {}",
        dir.display()
    );
    None
}

/// What the SDKs upload as audio: every byte value, 200 KiB.
fn audio() -> Vec<u8> {
    (0..=255u8).cycle().take(256 * 800).collect()
}

fn sse(events: &[(Option<&str>, Value)]) -> String {
    let mut text = String::new();
    for (event, data) in events {
        if let Some(event) = event {
            text.push_str(&format!("event: {event}\n"));
        }
        text.push_str(&format!("data: {data}\n\n"));
    }
    text
}

fn openai_answer(body: &Value) -> Response {
    let model = body["model"].clone();
    if body["stream"] == true {
        let chunk = |delta: Value, usage: Value| {
            let choices = if delta.is_null() {
                json!([])
            } else {
                json!([{"index": 0, "delta": delta, "finish_reason": null}])
            };
            let chunk = json!({"id": "c1", "object": "chat.completion.chunk", "created": 0,
                "model": model, "choices": choices, "usage": usage});
            (None, chunk)
        };
        let events = [
            chunk(json!({"role": "assistant", "content": "Hel"}), Value::Null),
            chunk(json!({"content": "lo"}), Value::Null),
            chunk(
                Value::Null,
                json!({"prompt_tokens": 3, "completion_tokens": 2, "total_tokens": 5}),
            ),
        ];
        let mut text = sse(&events);
        text.push_str("data: [DONE]\n\n");
        return respond(200, &[("content-type", "text/event-stream")], text);
    }
    let answer = json!({"id": "c1", "object": "chat.completion", "created": 0, "model": model,
        "choices": [{"index": 0, "message": {"role": "assistant", "content": "Hello"},
            "finish_reason": "stop"}],
        "usage": {"prompt_tokens": 3, "completion_tokens": 1, "total_tokens": 4}});
    respond(
        200,
        &[("content-type", "application/json")],
        answer.to_string(),
    )
}

fn anthropic_answer(body: &Value) -> Response {
    let model = body["model"].clone();
    if body["stream"] == true {
        let message = json!({"id": "m1", "type": "message", "role": "assistant",
            "model": model, "content": [], "stop_reason": null, "stop_sequence": null,
            "usage": {"input_tokens": 5, "output_tokens": 1}});
        let text = sse(&[
            (
                Some("message_start"),
                json!({"type": "message_start", "message": message}),
            ),
            (
                Some("content_block_start"),
                json!({"type": "content_block_start", "index": 0,
                    "content_block": {"type": "text", "text": ""}}),
            ),
            (
                Some("content_block_delta"),
                json!({"type": "content_block_delta", "index": 0,
                    "delta": {"type": "text_delta", "text": "Hel"}}),
            ),
            (
                Some("content_block_delta"),
                json!({"type": "content_block_delta", "index": 0,
                    "delta": {"type": "text_delta", "text": "lo"}}),
            ),
            (
                Some("content_block_stop"),
                json!({"type": "content_block_stop", "index": 0}),
            ),
            (
                Some("message_delta"),
                json!({"type": "message_delta",
                    "delta": {"stop_reason": "end_turn", "stop_sequence": null},
                    "usage": {"output_tokens": 2}}),
            ),
            (Some("message_stop"), json!({"type": "message_stop"})),
        ]);
        return respond(200, &[("content-type", "text/event-stream")], text);
    }
    let answer = json!({"id": "m1", "type": "message", "role": "assistant", "model": model,
        "content": [{"type": "text", "text": "Hello"}], "stop_reason": "end_turn",
        "stop_sequence": null, "usage": {"input_tokens": 5, "output_tokens": 2}});
    respond(
        200,
        &[("content-type", "application/json")],
        answer.to_string(),
    )
}

type Response = http::Response<Body>;

/// Bodies past 1 MiB that arrived with `model` after `messages`.
static MODEL_LAST: AtomicUsize = AtomicUsize::new(0);

fn find(body: &[u8], needle: &[u8]) -> Option<usize> {
    body.windows(needle.len()).position(|w| w == needle)
}

/// An upstream speaking both dialects: the first call to model `busy` is refused
/// (429, as OpenAI spells it) and the first Messages call is overloaded (529).
async fn vendor() -> TestUpstream {
    let refused = Arc::new(AtomicUsize::new(0));
    let overloaded = Arc::new(AtomicUsize::new(0));
    upstream(move |req: http::Request<Incoming>| {
        let (refused, overloaded) = (Arc::clone(&refused), Arc::clone(&overloaded));
        async move {
            let path = req.uri().path().to_owned();
            let body = req.into_body().collect().await.unwrap().to_bytes();
            if path == "/v1/audio/transcriptions" {
                let audio = audio();
                let at = body.windows(256).position(|w| w == &audio[..256]);
                let intact = at.is_some_and(|at| body[at..].starts_with(&audio));
                let text = if intact { "intact" } else { "mangled" };
                return respond(200, &[], json!({ "text": text }).to_string());
            }
            let (model, messages) = (find(&body, b"\"model\""), find(&body, b"\"messages\""));
            if model > messages && body.len() > 1 << 20 {
                MODEL_LAST.fetch_add(1, Ordering::SeqCst);
            }
            let body: Value = serde_json::from_slice(&body).unwrap();
            if path == "/v1/chat/completions" {
                if body["model"] == "busy" && refused.fetch_add(1, Ordering::SeqCst) == 0 {
                    let error = json!({"error": {"message": "Rate limit reached",
                        "type": "requests", "code": "rate_limit_exceeded"}});
                    let headers = [
                        ("retry-after-ms", "20"),
                        ("x-ratelimit-remaining-requests", "0"),
                        ("x-ratelimit-reset-requests", "20ms"),
                        ("content-type", "application/json"),
                    ];
                    return respond(429, &headers, error.to_string());
                }
                return openai_answer(&body);
            }
            if overloaded.fetch_add(1, Ordering::SeqCst) == 0 {
                let error =
                    json!({"type": "error", "error": {"type": "overloaded_error", "message": "Overloaded"}});
                return respond(529, &[("content-type", "application/json")], error.to_string());
            }
            anthropic_answer(&body)
        }
    })
    .await
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_openai_and_anthropic_sdks_get_whole_answers_with_their_retries_off() {
    let Some(venv) = venv() else { return };
    let up = vendor().await;
    let openai = proxy(up.addr, "preset = \"openai\"\n").await;
    let anthropic = proxy(up.addr, "preset = \"anthropic\"\n").await;
    let urls = vec![
        format!("http://{}", openai.addr),
        format!("http://{}", anthropic.addr),
    ];
    let report = e2e_script(&venv, "llm_sdks.py", urls).await;
    assert_eq!(
        report,
        json!({
            "chat": {"content": "Hello", "total_tokens": 4},
            "chat_stream": {"content": "Hello", "total_tokens": 5},
            "transcription": "intact",
            "message": {"text": "Hello", "output_tokens": 2},
            "message_stream": {"text": "Hello", "output_tokens": 2},
            "long_chat": "Hello",
            "long_message": "Hello",
        })
    );
    // 7 calls, one refusal and one overload retried by easeoff.
    assert_eq!(up.count(), 9);
    // anthropic-python writes `max_tokens`, `messages`, then `model`; openai-python
    // 1.x wrote `messages` first too, later versions write `model` first.
    assert!(
        MODEL_LAST.load(Ordering::SeqCst) >= 1,
        "no SDK wrote model last"
    );
    let lanes = |shown: Value| -> Vec<String> {
        let lanes = shown["lanes"].as_array().cloned().unwrap_or_default();
        lanes
            .iter()
            .map(|l| l["name"].as_str().unwrap().to_string())
            .collect()
    };
    assert!(lanes(status(openai.admin).await).contains(&"gpt-long".into()));
    assert!(lanes(status(anthropic.admin).await).contains(&"claude-long".into()));
    assert_eq!(retries(openai.admin, "throttle").await, 1.0);
}
