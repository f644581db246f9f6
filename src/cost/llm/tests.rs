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

/// Standard base64, padded.
pub(super) fn base64(bytes: &[u8]) -> String {
    const ALPHABET: &[u8; 64] = b"ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/";
    let mut out = String::new();
    for group in bytes.chunks(3) {
        let n = group
            .iter()
            .enumerate()
            .fold(0u32, |n, (i, &b)| n | u32::from(b) << (16 - 8 * i));
        for i in 0..4 {
            if i <= group.len() {
                out.push(char::from(ALPHABET[(n >> (18 - 6 * i) & 63) as usize]));
            } else {
                out.push('=');
            }
        }
    }
    out
}

/// A PNG of `width` × `height` pixels as far as its header goes, `size` bytes long,
/// in base64.
fn png(width: u32, height: u32, size: usize) -> String {
    let mut bytes = vec![0x89, b'P', b'N', b'G', 0x0d, 0x0a, 0x1a, 0x0a, 0, 0, 0, 13];
    bytes.extend_from_slice(b"IHDR");
    bytes.extend_from_slice(&width.to_be_bytes());
    bytes.extend_from_slice(&height.to_be_bytes());
    bytes.resize(size, 0x5a);
    base64(&bytes)
}

fn input(body: &serde_json::Value) -> u64 {
    estimate(body.to_string().as_bytes()).unwrap().input
}

#[test]
fn an_openai_image_costs_its_tiles_not_its_base64() {
    // 700 KB of 1024 × 1024 PNG: 85 + 4 tiles of 170 at high detail, 85 at low. The
    // text around it: "user", "text", the question, "image_url", "high": 43
    // characters, 11 tokens.
    let image = format!("data:image/png;base64,{}", png(1024, 1024, 700_000));
    let chat = |detail: &str| {
        json!({"model": "gpt-4o", "messages": [{"role": "user", "content": [
            {"type": "text", "text": "What is in this image?"},
            {"type": "image_url", "image_url": {"url": image, "detail": detail}},
        ]}]})
    };
    assert_eq!(input(&chat("high")), 11 + 765);
    assert_eq!(input(&chat("auto")), 11 + 765);
    assert_eq!(input(&chat("low")), 11 + 85);
    // 4096 × 8192 fits in 2048 × 4096, then 768 × 1536: 6 tiles (OpenAI's example).
    let tall = format!("data:image/png;base64,{}", png(4096, 8192, 100));
    let body = json!({"messages": [{"role": "user", "content": [
        {"type": "image_url", "image_url": {"url": tall}}]}]});
    assert_eq!(input(&body), 4 + 85 + 6 * 170);
    // A link: its size is not known, so the most the rule gives (2048 × 768: 8 tiles).
    let link = json!({"messages": [{"role": "user", "content": [
        {"type": "image_url", "image_url": {"url": "https://example.com/cat.png"}}]}]});
    assert_eq!(input(&link), 4 + 85 + 8 * 170);
    // Responses: `input_image`, its detail beside it.
    let responses = json!({"model": "gpt-4o", "input": [{"role": "user", "content": [
        {"type": "input_text", "text": "hi"},
        {"type": "input_image", "image_url": image, "detail": "low"}]}]});
    assert_eq!(
        input(&responses),
        ("userinput_texthiinput_imagelow".len() as u64).div_ceil(4) + 85
    );
}

#[test]
fn an_anthropic_image_costs_its_pixels_over_750() {
    let block = |data: &str| {
        json!({"model": "claude", "max_tokens": 1024, "messages": [{"role": "user", "content": [
            {"type": "image", "source": {"type": "base64", "media_type": "image/png", "data": data}},
            {"type": "text", "text": "Describe it."}]}]})
    };
    // "user", "image", "base64", "image/png", "text", "Describe it.": 40 characters.
    let body = block(&png(1000, 750, 500_000));
    assert_eq!(
        estimate(body.to_string().as_bytes()),
        Some(tokens(10 + 1000, 1024))
    );
    // Past 1568 pixels on the long edge it is scaled down; about 1,600 at most.
    assert_eq!(input(&block(&png(4000, 3000, 1000))), 10 + 1600);
    assert_eq!(input(&block(&png(200, 200, 1000))), 10 + 54);
    // Bytes that say no size: the most.
    assert_eq!(input(&block(&"QUFB".repeat(100_000))), 10 + 1600);
}

#[test]
fn audio_and_files_cost_a_fixed_figure_and_text_documents_their_text() {
    let audio = json!({"messages": [{"role": "user", "content": [
        {"type": "input_audio", "input_audio": {"data": base64(&[7; 300_000]), "format": "wav"}}]}]});
    // "user", "input_audio", "wav": 18 characters.
    assert_eq!(input(&audio), 5 + AUDIO_TOKENS);
    let file = json!({"messages": [{"role": "user", "content": [{"type": "file", "file": {
        "filename": "a.pdf",
        "file_data": format!("data:application/pdf;base64,{}", base64(&[1; 300_000]))}}]}]});
    // "user", "file", "a.pdf": 13 characters.
    assert_eq!(input(&file), 4 + FILE_TOKENS);
    let pdf = json!({"max_tokens": 5, "messages": [{"role": "user", "content": [{"type": "document",
        "source": {"type": "base64", "media_type": "application/pdf", "data": base64(&[1; 300_000])}}]}]});
    // "user", "document", "base64", "application/pdf": 33 characters.
    assert_eq!(input(&pdf), 9 + FILE_TOKENS);
    // A plain-text document is text.
    let text = json!({"messages": [{"role": "user", "content": [{"type": "document",
        "source": {"type": "text", "media_type": "text/plain", "data": "x".repeat(4000)}}]}]});
    assert_eq!(input(&text), (4 + 8 + 4 + 10 + 4000_u64).div_ceil(4));
}

#[test]
fn a_body_held_only_in_part_costs_what_was_read_and_a_bounded_rest() {
    let headers = |length: usize| {
        let mut headers = http::HeaderMap::new();
        headers.insert(http::header::CONTENT_LENGTH, length.into());
        headers
    };
    let held = 1 << 20;
    // Two 1.5 MB images, the body cut in the first: 765 for it, and the rest at the
    // tokens a byte of what came before it (`json!` sorts keys: no text yet), not
    // 3 MB over four (786,432). The second image is for the answer's usage to settle.
    let image = format!("data:image/png;base64,{}", png(1024, 1024, 1_100_000));
    let body = json!({"model": "gpt-4o", "messages": [{"role": "user", "content": [
        {"type": "image_url", "image_url": {"url": image}},
        {"type": "image_url", "image_url": {"url": image}}]}]})
    .to_string();
    let reserved = crate::cost::reserve(
        crate::cost::Unit::Tokens,
        &headers(body.len()),
        Some(&body.as_bytes()[..held]),
        None,
    );
    assert_eq!(reserved, 765);
    // Text before the image: the rest at its tokens a byte; a rest of unknown length
    // as long as what was held.
    let body = format!(
        r#"{{"model":"gpt-4o","messages":[{{"role":"user","content":[{{"type":"text","text":"{}"}},{{"type":"image_url","image_url":{{"url":"{image}"}}}}]}}]}}"#,
        "x".repeat(4000)
    );
    let read = ("usertextimage_url".len() as u64 + 4000).div_ceil(4);
    let rest = (body.len() - held) as u64;
    let cut = &body.as_bytes()[..held];
    assert_eq!(
        estimate_held(cut, Some(body.len() as u64)),
        Some(tokens(read + read * rest / held as u64 + 765, 0))
    );
    assert_eq!(estimate_held(cut, None), Some(tokens(read + read + 765, 0)));
    // 5 MiB of text cut at 1 MiB: what was read, and at most 128,000 for the rest.
    let text =
        json!({"model": "gpt-4o", "messages": [{"role": "user", "content": "x".repeat(5 << 20)}]})
            .to_string();
    let reserved = crate::cost::reserve(
        crate::cost::Unit::Tokens,
        &headers(text.len()),
        Some(&text.as_bytes()[..held]),
        None,
    );
    assert!(
        (262_000..=262_200 + UNREAD_TOKENS).contains(&reserved),
        "{reserved}"
    );
}
