//! Table-driven: upstream answers in, verdicts out.

use super::*;
use http::HeaderValue;

fn headers(pairs: &[(&'static str, &'static str)]) -> HeaderMap {
    let mut h = HeaderMap::new();
    for (k, v) in pairs {
        h.append(*k, HeaderValue::from_static(v));
    }
    h
}

fn status(code: u16) -> StatusCode {
    StatusCode::from_u16(code).unwrap()
}

fn default_rules() -> Rules {
    Rules {
        statuses: vec![429, 503],
        ..Rules::default()
    }
}

/// Runs both steps, feeding the body only when asked for.
fn verdict(c: &Classifier, code: u16, h: &[(&'static str, &'static str)], body: &str) -> Verdict {
    let (s, h) = (status(code), headers(h));
    match c.classify_head(s, &h) {
        Head::Decided(v) => v,
        Head::NeedsBody => c.classify_body(s, &h, body.as_bytes()),
    }
}

const PTEE_JSON: &str = r#"{"__type":"com.amazonaws.dynamodb.v20120810#ProvisionedThroughputExceededException","message":"The level of configured provisioned throughput for the table was exceeded."}"#;
const VALIDATION_JSON: &str = r#"{"__type":"com.amazon.coral.validate#ValidationException","message":"1 validation error detected"}"#;

#[test]
fn plain_statuses() {
    let c = Classifier::new(Preset::None, default_rules());
    assert_eq!(verdict(&c, 200, &[], ""), Verdict::Success);
    assert_eq!(verdict(&c, 404, &[], ""), Verdict::Success);
    assert_eq!(verdict(&c, 429, &[], ""), Verdict::Throttle(Signal::Status));
    assert_eq!(verdict(&c, 503, &[], ""), Verdict::Throttle(Signal::Status));
    assert_eq!(verdict(&c, 500, &[], ""), Verdict::Failure);
    assert_eq!(verdict(&c, 502, &[], ""), Verdict::Failure);
}

#[test]
fn dynamodb_throttles_by_header_or_by_body() {
    let c = Classifier::new(Preset::DynamoDb, default_rules());
    let header = [(
        "x-amzn-errortype",
        "ProvisionedThroughputExceededException:http://internal.amazon.com/coral/com.amazonaws.dynamodb.v20120810/",
    )];
    assert_eq!(
        verdict(&c, 400, &header, ""),
        Verdict::Throttle(Signal::Header)
    );
    assert_eq!(
        verdict(&c, 400, &[], PTEE_JSON),
        Verdict::Throttle(Signal::Body)
    );
    assert_eq!(
        verdict(&c, 400, &[], r#"{"code":"ThrottlingException"}"#),
        Verdict::Throttle(Signal::Body)
    );
}

#[test]
fn a_validation_error_is_not_a_throttle() {
    let c = Classifier::new(Preset::DynamoDb, default_rules());
    assert_eq!(verdict(&c, 400, &[], VALIDATION_JSON), Verdict::Success);
    assert_eq!(
        verdict(
            &c,
            400,
            &[("x-amzn-errortype", "ValidationException:http://x/")],
            ""
        ),
        Verdict::Success
    );
}

#[test]
fn the_header_code_wins_over_the_body() {
    // As in the SDKs: with x-amzn-ErrorType present the body's code is not consulted.
    let c = Classifier::new(Preset::Aws, default_rules());
    let h = [("x-amzn-errortype", "ValidationException")];
    assert_eq!(verdict(&c, 400, &h, PTEE_JSON), Verdict::Success);
}

#[test]
fn every_code_on_the_sdk_list_is_a_throttle() {
    let c = Classifier::new(Preset::Aws, Rules::default());
    for code in THROTTLING_CODES {
        let body = format!(r#"{{"__type":"x#{code}","message":"m"}}"#);
        let (s, h) = (status(400), HeaderMap::new());
        assert_eq!(c.classify_head(s, &h), Head::NeedsBody);
        assert_eq!(
            c.classify_body(s, &h, body.as_bytes()),
            Verdict::Throttle(Signal::Body),
            "{code}"
        );
    }
}

#[test]
fn s3_slowdown_in_an_xml_body() {
    let c = Classifier::new(Preset::Aws, Rules::default());
    let body = "<?xml version=\"1.0\" encoding=\"UTF-8\"?>\n<Error><Code>SlowDown</Code><Message>Please reduce your request rate.</Message></Error>";
    assert_eq!(verdict(&c, 503, &[], body), Verdict::Throttle(Signal::Body));
    let other = "<Error><Code>NoSuchKey</Code></Error>";
    assert_eq!(verdict(&c, 404, &[], other), Verdict::Success);
}

#[test]
fn aws_codes_are_only_read_with_an_aws_preset() {
    let c = Classifier::new(Preset::None, default_rules());
    let h = [("x-amzn-errortype", "ThrottlingException")];
    assert_eq!(verdict(&c, 400, &h, PTEE_JSON), Verdict::Success);
    assert_eq!(
        c.classify_head(status(400), &HeaderMap::new()),
        Head::Decided(Verdict::Success)
    );
}

#[test]
fn large_or_successful_bodies_are_never_requested() {
    let c = Classifier::new(Preset::DynamoDb, Rules::default());
    let big = headers(&[("content-length", "1000000")]);
    assert_eq!(
        c.classify_head(status(400), &big),
        Head::Decided(Verdict::Success)
    );
    assert_eq!(
        c.classify_head(status(200), &HeaderMap::new()),
        Head::Decided(Verdict::Success)
    );
}

#[test]
fn grpc_resource_exhausted_in_headers() {
    let c = Classifier::new(Preset::Grpc, default_rules());
    let h = [("content-type", "application/grpc"), ("grpc-status", "8")];
    assert_eq!(verdict(&c, 200, &h, ""), Verdict::Throttle(Signal::Grpc));
    let ok = [("content-type", "application/grpc"), ("grpc-status", "0")];
    assert_eq!(verdict(&c, 200, &ok, ""), Verdict::Success);
    let unavailable = [("grpc-status", "14")];
    assert_eq!(verdict(&c, 200, &unavailable, ""), Verdict::Success);
}

#[test]
fn user_rules_add_statuses_body_codes_and_headers() {
    let rules = Rules {
        statuses: vec![420],
        body_codes: vec!["quota exceeded".into()],
        headers: vec![(HeaderName::from_static("x-throttled"), vec!["yes".into()])],
    };
    let c = Classifier::new(Preset::None, rules);
    assert_eq!(verdict(&c, 420, &[], ""), Verdict::Throttle(Signal::Status));
    assert_eq!(
        verdict(&c, 403, &[], "daily quota exceeded"),
        Verdict::Throttle(Signal::Body)
    );
    assert_eq!(verdict(&c, 403, &[], "forbidden"), Verdict::Success);
    assert_eq!(
        verdict(&c, 200, &[("x-throttled", "yes please")], ""),
        Verdict::Throttle(Signal::Header)
    );
    assert_eq!(
        verdict(&c, 200, &[("x-throttled", "no")], ""),
        Verdict::Success
    );
    // 429 is not in this list.
    assert_eq!(verdict(&c, 429, &[], ""), Verdict::Success);
}

#[test]
fn garbage_bodies_are_not_throttles() {
    let c = Classifier::new(Preset::DynamoDb, Rules::default());
    for body in [
        "",
        "{",
        "not json",
        "<Error><Code>",
        "\u{0}\u{1}",
        r#"{"__type": 5}"#,
    ] {
        assert_eq!(verdict(&c, 400, &[], body), Verdict::Success, "{body:?}");
    }
    assert_eq!(verdict(&c, 500, &[], "{"), Verdict::Failure);
}

#[test]
fn a_shared_403_is_a_throttle_only_when_it_says_rate_limit() {
    let c = Classifier::new(
        Preset::None,
        Rules {
            statuses: vec![403, 429],
            ..Rules::default()
        },
    );
    let permission = r#"{"message":"Resource not accessible by integration","status":"403"}"#;
    let primary = r#"{"message":"API rate limit exceeded for user ID 1."}"#;
    let secondary = r#"{"message":"You have exceeded a secondary Rate Limit. Please wait."}"#;
    let spent = [
        ("x-ratelimit-remaining", "0"),
        ("x-ratelimit-reset", "1795000060"),
    ];
    type Row<'a> = (&'a [(&'static str, &'static str)], &'a str, Verdict);
    let rows: [Row; 7] = [
        (&[], permission, Verdict::Success),
        (
            &[("x-ratelimit-remaining", "4999")],
            permission,
            Verdict::Success,
        ),
        (&spent, permission, Verdict::Throttle(Signal::Status)),
        (
            &[("retry-after", "60")],
            "",
            Verdict::Throttle(Signal::Status),
        ),
        (&[], primary, Verdict::Throttle(Signal::Body)),
        (&[], secondary, Verdict::Throttle(Signal::Body)),
        (&[("content-length", "999999")], "", Verdict::Success),
    ];
    for (h, body, expected) in rows {
        assert_eq!(verdict(&c, 403, h, body), expected, "{h:?} {body}");
    }
    // 429 needs no evidence.
    assert_eq!(verdict(&c, 429, &[], ""), Verdict::Throttle(Signal::Status));
}

#[test]
fn overload_is_its_own_signal() {
    let c = Classifier::new(
        Preset::None,
        Rules {
            statuses: vec![429, 503, 529],
            ..Rules::default()
        },
    );
    let overloaded =
        r#"{"type":"error","error":{"type":"overloaded_error","message":"Overloaded"}}"#;
    let overload = Verdict::Throttle(Signal::Overload);
    assert_eq!(verdict(&c, 529, &[], overloaded), overload);
    assert_eq!(verdict(&c, 529, &[], ""), overload);
    assert_eq!(verdict(&c, 503, &[], overloaded), overload);
    assert_eq!(
        verdict(&c, 503, &[], "The engine is currently Overloaded"),
        overload
    );
    assert_eq!(
        verdict(&c, 503, &[], "down for maintenance"),
        Verdict::Throttle(Signal::Status)
    );
    let large = [("content-length", "999999")];
    assert_eq!(
        verdict(&c, 503, &large, ""),
        Verdict::Throttle(Signal::Status)
    );
    // Not listed: a 529 is a failure like any 5xx.
    let plain = Classifier::new(Preset::None, default_rules());
    assert_eq!(verdict(&plain, 529, &[], overloaded), Verdict::Failure);
}

#[test]
fn a_model_servers_429_and_503_say_its_slots_are_full_and_elsewhere_a_busy_503_does() {
    let busy = Verdict::Throttle(Signal::Busy);
    let model = Classifier::new(
        Preset::ModelServer,
        throttle_defaults_like(Preset::ModelServer),
    );
    let tgi = r#"{"error":"Model is overloaded","error_type":"overloaded"}"#;
    assert_eq!(verdict(&model, 429, &[], tgi), busy);
    assert_eq!(verdict(&model, 503, &[], "anything"), busy);
    assert_eq!(verdict(&model, 500, &[], ""), Verdict::Failure);
    let plain = Classifier::new(Preset::None, throttle_defaults_like(Preset::None));
    let ollama = r#"{"error":"server busy, please try again.  maximum pending requests exceeded"}"#;
    assert_eq!(verdict(&plain, 503, &[], ollama), busy);
    assert_eq!(
        verdict(&plain, 429, &[], tgi),
        Verdict::Throttle(Signal::Status)
    );
}

/// The statuses a preset lists by default (`config::schema::throttle_defaults`).
fn throttle_defaults_like(preset: Preset) -> Rules {
    let statuses = match preset {
        Preset::GitHub => vec![403, 429],
        Preset::Anthropic => vec![429, 503, 529],
        _ => vec![429, 503],
    };
    Rules {
        statuses,
        ..Rules::default()
    }
}
