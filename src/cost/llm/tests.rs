use serde_json::json;

use super::*;

fn tokens(input: u64, output: u64) -> Tokens {
    Tokens { input, output }
}

#[test]
fn a_chat_request_is_its_texts_over_four_plus_max_tokens() {
    // "user" (4) + 16 characters of content = 20 → 5 tokens.
    let chat = json!({"model": "gpt-4o", "max_tokens": 100,
        "messages": [{"role": "user", "content": "0123456789abcdef"}]});
    assert_eq!(estimate(chat.to_string().as_bytes()), Some(tokens(5, 100)));
    // Content parts, and the newer field name; rounding up.
    let parts = json!({"model": "o3", "max_completion_tokens": 7,
        "messages": [{"role": "user", "content": [{"type": "text", "text": "abcde"}]}]});
    assert_eq!(estimate(parts.to_string().as_bytes()), Some(tokens(4, 7)));
}

#[test]
fn anthropic_and_responses_requests_count_their_system_and_input() {
    let messages = json!({"model": "claude", "max_tokens": 1024, "system": "12345678",
        "messages": [{"role": "user", "content": "1234"}]});
    assert_eq!(
        estimate(messages.to_string().as_bytes()),
        Some(tokens(4, 1024))
    );
    let responses = json!({"model": "gpt-4o", "input": "x".repeat(400), "max_output_tokens": 50});
    assert_eq!(
        estimate(responses.to_string().as_bytes()),
        Some(tokens(100, 50))
    );
    // Characters, not bytes: "é" is one.
    let accented = json!({"prompt": "éééé"});
    assert_eq!(
        estimate(accented.to_string().as_bytes()),
        Some(tokens(1, 0))
    );
}

#[test]
fn a_body_that_is_not_a_json_object_has_no_estimate() {
    assert_eq!(estimate(b"[1, 2]"), None);
    assert_eq!(estimate(b"{\"messages\": "), None);
    assert_eq!(estimate(b""), None);
}

#[test]
fn usage_is_read_as_each_api_spells_it() {
    let chat =
        br#"{"id":"x","usage":{"prompt_tokens":12,"completion_tokens":30,"total_tokens":42}}"#;
    assert_eq!(usage(chat), Some(tokens(12, 30)));
    let responses = br#"{"usage":{"input_tokens":5,"output_tokens":6,"total_tokens":11}}"#;
    assert_eq!(usage(responses), Some(tokens(5, 6)));
    let anthropic = br#"{"usage":{"input_tokens":5,"cache_creation_input_tokens":100,"cache_read_input_tokens":900,"output_tokens":6}}"#;
    assert_eq!(usage(anthropic), Some(tokens(105, 6)));
    assert_eq!(usage(br#"{"usage":{}}"#), None);
    assert_eq!(usage(br#"{"error":{"type":"rate_limit_error"}}"#), None);
}

#[test]
fn openais_last_streamed_chunk_settles_the_call() {
    let mut stream = StreamUsage::default();
    stream.feed(b"data: {\"choices\":[{\"delta\":{\"content\":\"Hi\"}}],\"usage\":null}\n\n");
    assert_eq!(stream.tokens(), None);
    // Split mid-line, as the network may.
    stream.feed(b"data: {\"choices\":[],\"usage\":{\"prompt_tokens\":9,");
    stream.feed(b"\"completion_tokens\":2}}\n\ndata: [DONE]\n\n");
    assert_eq!(stream.tokens(), Some(tokens(9, 2)));
}

#[test]
fn anthropics_stream_reports_input_first_and_output_as_it_goes() {
    let mut stream = StreamUsage::default();
    stream.feed(b"event: message_start\r\ndata: {\"type\":\"message_start\",\"message\":{\"usage\":{\"input_tokens\":25,\"output_tokens\":1}}}\r\n\r\n");
    assert_eq!(stream.tokens(), Some(tokens(25, 1)));
    stream.feed(b"event: content_block_delta\ndata: {\"type\":\"content_block_delta\",\"delta\":{\"text\":\"usage\"}}\n\n");
    stream.feed(b"event: message_delta\ndata: {\"type\":\"message_delta\",\"usage\":{\"output_tokens\":15}}\n\n");
    assert_eq!(stream.tokens(), Some(tokens(25, 15)));
}

#[test]
fn responses_completed_event_settles_the_call() {
    let mut stream = StreamUsage::default();
    stream.feed(b"event: response.completed\ndata: {\"type\":\"response.completed\",\"response\":{\"usage\":{\"input_tokens\":3,\"output_tokens\":4}}}\n\n");
    assert_eq!(stream.tokens(), Some(tokens(3, 4)));
}

#[test]
fn a_line_longer_than_the_cap_is_skipped_not_held() {
    let mut stream = StreamUsage::default();
    let long = format!(
        "data: {{\"usage\":{{\"prompt_tokens\":1}},\"pad\":\"{}\"}}",
        "x".repeat(MAX_LINE)
    );
    stream.feed(long.as_bytes());
    assert!(
        stream.line.capacity() <= MAX_LINE,
        "held {}",
        stream.line.len()
    );
    stream.feed(b"\ndata: {\"usage\":{\"prompt_tokens\":2,\"completion_tokens\":3}}\n");
    assert_eq!(stream.tokens(), Some(tokens(2, 3)));
}

#[test]
fn the_estimate_reads_fields_in_any_order_and_skips_what_is_not_a_count() {
    // `max_completion_tokens` wins over `max_tokens` wherever each stands; escapes
    // count as the characters they stand for.
    let body = br#"{"max_tokens": 100, "messages": "\u00e9\n", "max_completion_tokens": 7}"#;
    assert_eq!(estimate(body), Some(tokens(1, 7)));
    let body = br#"{"max_tokens": "lots", "tools": [{"n": 1.5, "d": null}], "prompt": "abcd"}"#;
    assert_eq!(estimate(body), Some(tokens(1, 0)));
    assert_eq!(estimate(br#"{"prompt": "a"} x"#), None);
}
