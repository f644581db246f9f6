//! Throttle classifier on an arbitrary answer. The input's first byte picks the
//! preset, the next two the status; then `name: value` header lines up to an empty
//! line, and the rest is the body. Classification must never panic, and the
//! partial-throttle scan must not depend on how the body is chunked.

#![no_main]

use easeoff::throttle::{
    Classifier, Head, MAX_ERROR_BODY, Preset, Rules, UnprocessedScan, is_batch,
};
use http::{HeaderMap, HeaderName, HeaderValue, StatusCode};
use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    let [preset, high, low, rest @ ..] = data else {
        return;
    };
    let preset = Preset::ALL[usize::from(*preset) % Preset::ALL.len()];
    let code = 100 + u16::from_be_bytes([*high, *low]) % 900;
    let Ok(status) = StatusCode::from_u16(code) else {
        return;
    };
    let (head, body) = split_head(rest);
    let mut headers = HeaderMap::new();
    for line in head.split(|&b| b == b'\n') {
        let Some(colon) = line.iter().position(|&b| b == b':') else {
            continue;
        };
        let (Ok(name), Ok(value)) = (
            HeaderName::from_bytes(&line[..colon]),
            HeaderValue::from_bytes(line[colon + 1..].trim_ascii()),
        ) else {
            continue;
        };
        headers.append(name, value);
    }
    let rules = Rules {
        statuses: vec![420],
        body_codes: vec!["SlowDown".into(), String::new()],
        headers: vec![(HeaderName::from_static("x-throttled"), vec!["yes".into()])],
    };
    for classifier in [
        Classifier::new(preset, Rules::default()),
        Classifier::new(preset, rules),
    ] {
        if classifier.classify_head(status, &headers) == Head::NeedsBody {
            let body = &body[..body.len().min(MAX_ERROR_BODY)];
            classifier.classify_body(status, &headers, body);
        }
    }
    is_batch(&headers);
    // The partial-throttle scanner sees bodies in whatever chunks arrive: a split
    // anywhere must not change its answer.
    let whole = UnprocessedScan::default().feed(body);
    let mut chunked = UnprocessedScan::default();
    let at = usize::from(*low) % (body.len() + 1);
    chunked.feed(&body[..at]);
    assert_eq!(whole, chunked.feed(&body[at..]), "split at {at}");
});

/// Header lines and body, split at the first empty line.
fn split_head(data: &[u8]) -> (&[u8], &[u8]) {
    match data.windows(2).position(|w| w == b"\n\n") {
        Some(at) => (&data[..at], &data[at + 2..]),
        None => (data, &[]),
    }
}
