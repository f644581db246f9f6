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
fn a_line_longer_than_the_cap_is_not_held() {
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

#[test]
fn a_stream_cut_before_its_end_keeps_the_output_it_showed() {
    let mut stream = StreamUsage::default();
    stream.feed(b"event: message_start\ndata: {\"type\":\"message_start\",\"message\":{\"usage\":{\"input_tokens\":25,\"output_tokens\":1}}}\n\n");
    let text = "x".repeat(200);
    for _ in 0..2 {
        let delta = format!(
            "event: content_block_delta\ndata: {{\"type\":\"content_block_delta\",\"index\":0,\"delta\":{{\"type\":\"text_delta\",\"text\":\"{text}\"}}}}\n\n"
        );
        stream.feed(delta.as_bytes());
    }
    // A tool call's arguments and a thinking block are output too; their names are not.
    stream.feed(b"data: {\"type\":\"content_block_delta\",\"delta\":{\"type\":\"input_json_delta\",\"partial_json\":\"{\\\"a\\\": 1}\"}}\n\n");
    stream.feed(b"data: {\"type\":\"content_block_delta\",\"delta\":{\"type\":\"thinking_delta\",\"thinking\":\"hmm.\"}}\n\n");
    // Cut here: 400 + 8 + 4 characters shown, 103 tokens, not the 1 of message_start.
    assert_eq!(stream.tokens(), Some(tokens(25, 103)));
    // Its end reports what the answer took, which stands.
    stream.feed(b"data: {\"type\":\"message_delta\",\"delta\":{\"stop_reason\":\"end_turn\"},\"usage\":{\"output_tokens\":90}}\n\n");
    assert_eq!(stream.tokens(), Some(tokens(25, 90)));
}

#[test]
fn an_openai_stream_cut_before_its_usage_counts_what_it_showed() {
    // Chat Completions (with `include_usage`, every chunk says `"usage":null`) and
    // Responses: no usage yet, so nothing to settle; the reservation stands.
    let mut chat = StreamUsage::default();
    chat.feed(b"data: {\"choices\":[{\"delta\":{\"content\":\"Hello there\",\"tool_calls\":[{\"function\":{\"name\":\"f\",\"arguments\":\"{}\"}}]}}],\"usage\":null}\n\n");
    assert_eq!(chat.tokens(), None);
    assert_eq!(chat.seen, 13);
    let mut responses = StreamUsage::default();
    responses.feed(b"event: response.output_text.delta\ndata: {\"type\":\"response.output_text.delta\",\"delta\":\"Hello\"}\n\n");
    assert_eq!(responses.seen, 5);
}

#[test]
fn a_final_line_longer_than_the_cap_still_settles() {
    // Responses' `response.completed` repeats the whole answer before its usage.
    let text = "y".repeat(3 * MAX_LINE);
    let completed = format!(
        "event: response.completed\ndata: {{\"type\":\"response.completed\",\"response\":{{\"output\":[{{\"content\":[{{\"text\":\"{text} \\\"usage\\\": {{}}\"}}]}}],\"usage\":{{\"input_tokens\":3,\"output_tokens\":4}},\"user\":null}}}}\n\n"
    );
    let mut stream = StreamUsage::default();
    for chunk in completed.as_bytes().chunks(1000) {
        stream.feed(chunk);
    }
    assert_eq!(stream.tokens(), Some(tokens(3, 4)));
    let held = stream.line.capacity() + stream.tail.capacity();
    assert!(held <= 3 * MAX_LINE, "held {held}");
}
