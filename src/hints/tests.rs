//! A row per dialect and form, malformed values included: the headers an answer
//! carries and what the reader makes of them.

use super::*;
use http::HeaderValue;

/// 2026-11-18T11:06:40Z.
const NOW: u64 = 1_795_000_000;

fn now() -> SystemTime {
    SystemTime::UNIX_EPOCH + Duration::from_secs(NOW)
}

fn with(pairs: &[(&'static str, &str)]) -> HeaderMap {
    let mut h = HeaderMap::new();
    for (name, value) in pairs {
        h.append(*name, HeaderValue::from_str(value).unwrap());
    }
    h
}

fn ms(n: u64) -> Duration {
    Duration::from_millis(n)
}

fn secs(n: u64) -> Duration {
    Duration::from_secs(n)
}

/// A window that resets whole.
fn q(remaining: u64, reset: Duration, limit: Option<u64>) -> Option<Quota> {
    Some(Quota {
        remaining,
        reset,
        limit,
        refills: false,
    })
}

/// A bucket that refills continuously.
fn b(remaining: u64, reset: Duration, limit: Option<u64>) -> Option<Quota> {
    q(remaining, reset, limit).map(|q| Quota { refills: true, ..q })
}

fn delay(d: Duration, hint: Hint) -> Option<(Pushback, Hint)> {
    Some((Pushback::Delay(d), hint))
}

struct Row {
    form: &'static str,
    headers: &'static [(&'static str, &'static str)],
    expect: Reading,
}

const NONE: Reading = Reading {
    requests: None,
    tokens: None,
    wait: None,
};

fn rows() -> Vec<Row> {
    vec![
        // IETF draft -11.
        Row {
            form: "ietf -11 one policy",
            headers: &[("ratelimit", r#""default";r=50;t=30"#)],
            expect: Reading {
                requests: q(50, secs(30), None),
                ..NONE
            },
        },
        Row {
            form: "ietf -11 with its policy and partition key",
            headers: &[
                ("ratelimit", r#""day";r=7;t=20;pk=:cHJvamVjdDEyMw==:"#),
                (
                    "ratelimit-policy",
                    r#""hour";q=500;w=3600, "day";q=100;w=86400"#,
                ),
            ],
            expect: Reading {
                requests: q(7, secs(20), Some(100)),
                ..NONE
            },
        },
        Row {
            form: "ietf -11 without t takes the policy's window",
            headers: &[
                ("ratelimit", r#""default";r=5"#),
                ("ratelimit-policy", r#""default";q=10;w=60"#),
            ],
            expect: Reading {
                requests: q(5, secs(60), Some(10)),
                ..NONE
            },
        },
        Row {
            form: "ietf -11 tightest of several",
            headers: &[("ratelimit", r#""burst";r=5;t=1, "daily";r=1000;t=3600"#)],
            expect: Reading {
                requests: q(1000, secs(3600), None),
                ..NONE
            },
        },
        Row {
            form: "ietf -11 spent policy binds",
            headers: &[("ratelimit", r#""a";r=100;t=10, "b";r=0;t=60"#)],
            expect: Reading {
                requests: q(0, secs(60), None),
                ..NONE
            },
        },
        Row {
            form: "ietf -11 negative r (malformed)",
            headers: &[("ratelimit", r#""default";r=-1;t=30"#)],
            expect: NONE,
        },
        Row {
            form: "ietf -11 decimal r (malformed)",
            headers: &[("ratelimit", r#""default";r=1.5;t=30"#)],
            expect: NONE,
        },
        Row {
            form: "ietf not structured (malformed)",
            headers: &[("ratelimit", "nonsense;;")],
            expect: NONE,
        },
        Row {
            form: "ietf earlier dictionary (Honeycomb)",
            headers: &[("ratelimit", "limit=100, remaining=7, reset=20")],
            expect: Reading {
                requests: q(7, secs(20), Some(100)),
                ..NONE
            },
        },
        Row {
            form: "ietf separate fields (envoyproxy/ratelimit)",
            headers: &[
                ("ratelimit-limit", "10"),
                ("ratelimit-remaining", "0"),
                ("ratelimit-reset", "12"),
            ],
            expect: Reading {
                requests: q(0, secs(12), Some(10)),
                ..NONE
            },
        },
        Row {
            form: "ietf separate fields with a policy limit (Envoy Gateway)",
            headers: &[
                ("ratelimit-limit", "3, 3;w=3600"),
                ("ratelimit-remaining", "2"),
                ("ratelimit-reset", "3599"),
            ],
            expect: Reading {
                requests: q(2, secs(3599), Some(3)),
                ..NONE
            },
        },
        Row {
            form: "ietf separate fields, signed remaining (malformed)",
            headers: &[("ratelimit-remaining", "+3"), ("ratelimit-reset", "12")],
            expect: NONE,
        },
        // OpenAI and Azure OpenAI.
        Row {
            form: "openai requests and tokens, Go durations",
            headers: &[
                ("x-ratelimit-limit-requests", "500"),
                ("x-ratelimit-remaining-requests", "499"),
                ("x-ratelimit-reset-requests", "120ms"),
                ("x-ratelimit-limit-tokens", "30000"),
                ("x-ratelimit-remaining-tokens", "29000"),
                ("x-ratelimit-reset-tokens", "1m30.5s"),
            ],
            expect: Reading {
                requests: b(499, ms(120), Some(500)),
                tokens: b(29000, ms(90_500), Some(30000)),
                ..NONE
            },
        },
        Row {
            form: "openai minutes and seconds",
            headers: &[
                ("x-ratelimit-remaining-requests", "0"),
                ("x-ratelimit-reset-requests", "6m0s"),
            ],
            expect: Reading {
                requests: b(0, secs(360), None),
                ..NONE
            },
        },
        Row {
            form: "openai bad duration unit (malformed)",
            headers: &[
                ("x-ratelimit-remaining-requests", "3"),
                ("x-ratelimit-reset-requests", "6 minutes"),
            ],
            expect: NONE,
        },
        Row {
            form: "azure openai remaining without resets",
            headers: &[
                ("x-ratelimit-remaining-requests", "17"),
                ("x-ratelimit-remaining-tokens", "9000"),
            ],
            expect: NONE,
        },
        Row {
            form: "retry-after-ms preferred to retry-after",
            headers: &[("retry-after-ms", "62.5"), ("retry-after", "1")],
            expect: Reading {
                wait: delay(Duration::from_micros(62_500), Hint::RetryAfterMs),
                ..NONE
            },
        },
        Row {
            form: "retry-after-ms malformed falls to retry-after",
            headers: &[("retry-after-ms", "-5"), ("retry-after", "1")],
            expect: Reading {
                wait: delay(secs(1), Hint::RetryAfter),
                ..NONE
            },
        },
        Row {
            form: "x-should-retry false refuses",
            headers: &[("x-should-retry", "false"), ("retry-after", "1")],
            expect: Reading {
                wait: Some((Pushback::Refuse, Hint::ShouldRetry)),
                ..NONE
            },
        },
        Row {
            form: "x-should-retry true changes nothing",
            headers: &[("x-should-retry", "true")],
            expect: NONE,
        },
        // Anthropic.
        Row {
            form: "anthropic requests and the tightest token window",
            headers: &[
                ("anthropic-ratelimit-requests-limit", "50"),
                ("anthropic-ratelimit-requests-remaining", "49"),
                ("anthropic-ratelimit-requests-reset", "2026-11-18T11:06:41Z"),
                ("anthropic-ratelimit-tokens-limit", "100000"),
                ("anthropic-ratelimit-tokens-remaining", "90000"),
                ("anthropic-ratelimit-tokens-reset", "2026-11-18T11:06:46Z"),
                ("anthropic-ratelimit-input-tokens-limit", "80000"),
                ("anthropic-ratelimit-input-tokens-remaining", "80000"),
                (
                    "anthropic-ratelimit-input-tokens-reset",
                    "2026-11-18T11:06:40Z",
                ),
                ("anthropic-ratelimit-output-tokens-limit", "20000"),
                ("anthropic-ratelimit-output-tokens-remaining", "2000"),
                (
                    "anthropic-ratelimit-output-tokens-reset",
                    "2026-11-18T13:07:10+02:00",
                ),
            ],
            expect: Reading {
                requests: b(49, secs(1), Some(50)),
                tokens: b(2000, secs(30), Some(20000)),
                ..NONE
            },
        },
        Row {
            form: "anthropic reset past means reset",
            headers: &[
                ("anthropic-ratelimit-requests-remaining", "0"),
                ("anthropic-ratelimit-requests-reset", "2026-11-18T11:00:00Z"),
            ],
            expect: Reading {
                requests: b(0, Duration::ZERO, None),
                ..NONE
            },
        },
        Row {
            form: "anthropic reset not RFC 3339 (malformed)",
            headers: &[
                ("anthropic-ratelimit-requests-remaining", "0"),
                ("anthropic-ratelimit-requests-reset", "1795000060"),
            ],
            expect: NONE,
        },
        // GitHub, X, Discord.
        Row {
            form: "github epoch reset and resource",
            headers: &[
                ("x-ratelimit-limit", "5000"),
                ("x-ratelimit-remaining", "4999"),
                ("x-ratelimit-reset", "1795003600"),
                ("x-ratelimit-resource", "core"),
            ],
            expect: Reading {
                requests: q(4999, secs(3600), Some(5000)),
                ..NONE
            },
        },
        Row {
            form: "github reset epoch now means go",
            headers: &[
                ("x-ratelimit-remaining", "0"),
                ("x-ratelimit-reset", "1795000000"),
            ],
            expect: Reading {
                requests: q(0, Duration::ZERO, None),
                ..NONE
            },
        },
        Row {
            form: "github reset epoch past means go",
            headers: &[
                ("x-ratelimit-remaining", "0"),
                ("x-ratelimit-reset", "1794999990"),
            ],
            expect: Reading {
                requests: q(0, Duration::ZERO, None),
                ..NONE
            },
        },
        Row {
            form: "x-ratelimit delta reset",
            headers: &[("x-ratelimit-remaining", "60"), ("x-ratelimit-reset", "30")],
            expect: Reading {
                requests: q(60, secs(30), None),
                ..NONE
            },
        },
        Row {
            form: "x-ratelimit reset without remaining",
            headers: &[("x-ratelimit-reset", "30")],
            expect: NONE,
        },
        Row {
            form: "x-ratelimit negative reset (malformed)",
            headers: &[("x-ratelimit-remaining", "1"), ("x-ratelimit-reset", "-30")],
            expect: NONE,
        },
        Row {
            form: "x (twitter) epoch reset",
            headers: &[
                ("x-rate-limit-limit", "900"),
                ("x-rate-limit-remaining", "3"),
                ("x-rate-limit-reset", "1795000900"),
            ],
            expect: Reading {
                requests: q(3, secs(900), Some(900)),
                ..NONE
            },
        },
        Row {
            form: "discord reset-after with decimals, bucket",
            headers: &[
                ("x-ratelimit-limit", "5"),
                ("x-ratelimit-remaining", "0"),
                ("x-ratelimit-reset", "1795000001.250"),
                ("x-ratelimit-reset-after", "1.250"),
                ("x-ratelimit-bucket", "abcd1234"),
                ("retry-after", "1.25"),
            ],
            expect: Reading {
                requests: q(0, ms(1250), Some(5)),
                wait: delay(ms(1250), Hint::RetryAfter),
                ..NONE
            },
        },
        // Shopify.
        Row {
            form: "shopify call limit",
            headers: &[("x-shopify-shop-api-call-limit", "32/40")],
            expect: Reading {
                requests: b(8, secs(16), Some(40)),
                ..NONE
            },
        },
        Row {
            form: "shopify call limit over its size",
            headers: &[("x-shopify-shop-api-call-limit", "41/40")],
            expect: Reading {
                requests: b(0, secs(20), Some(40)),
                ..NONE
            },
        },
        Row {
            form: "shopify zero size (malformed)",
            headers: &[("x-shopify-shop-api-call-limit", "3/0")],
            expect: NONE,
        },
        // Azure Resource Manager.
        Row {
            form: "azure remaining counts say nothing; x-ms-retry-after-ms waits",
            headers: &[
                ("x-ms-ratelimit-remaining-subscription-reads", "11999"),
                ("x-ms-ratelimit-remaining-tenant-reads", "42"),
                ("x-ms-retry-after-ms", "1500"),
            ],
            expect: Reading {
                wait: delay(ms(1500), Hint::MsRetryAfterMs),
                ..NONE
            },
        },
        // Retry-After and the older waits.
        Row {
            form: "retry-after seconds",
            headers: &[("retry-after", " 120 ")],
            expect: Reading {
                wait: delay(secs(120), Hint::RetryAfter),
                ..NONE
            },
        },
        Row {
            form: "retry-after float",
            headers: &[("retry-after", "2.5")],
            expect: Reading {
                wait: delay(ms(2500), Hint::RetryAfter),
                ..NONE
            },
        },
        Row {
            form: "retry-after http date",
            headers: &[("retry-after", "Wed, 18 Nov 2026 11:06:43 GMT")],
            expect: Reading {
                wait: delay(secs(3), Hint::RetryAfter),
                ..NONE
            },
        },
        Row {
            form: "retry-after past date or zero",
            headers: &[("retry-after", "Wed, 18 Nov 2026 11:00:00 GMT")],
            expect: NONE,
        },
        Row {
            form: "retry-after malformed falls to x-amz-retry-after",
            headers: &[("retry-after", "soon"), ("x-amz-retry-after", "1500")],
            expect: Reading {
                wait: delay(ms(1500), Hint::AmzRetryAfter),
                ..NONE
            },
        },
        Row {
            form: "retry-after negative (malformed)",
            headers: &[("retry-after", "-1")],
            expect: NONE,
        },
        Row {
            form: "grpc pushback delays",
            headers: &[("grpc-retry-pushback-ms", "250")],
            expect: Reading {
                wait: delay(ms(250), Hint::GrpcPushback),
                ..NONE
            },
        },
        Row {
            form: "grpc pushback negative refuses",
            headers: &[("grpc-retry-pushback-ms", "-1")],
            expect: Reading {
                wait: Some((Pushback::Refuse, Hint::GrpcPushback)),
                ..NONE
            },
        },
        Row {
            form: "stripe should-retry false refuses",
            headers: &[("stripe-should-retry", "false")],
            expect: Reading {
                wait: Some((Pushback::Refuse, Hint::ShouldRetry)),
                ..NONE
            },
        },
        Row {
            form: "no rate-limit header at all",
            headers: &[("content-type", "text/plain")],
            expect: NONE,
        },
    ]
}

#[test]
fn every_dialect_and_form_reads_as_its_vendor_documents() {
    let mut failed = Vec::new();
    for row in rows() {
        let headers = with(row.headers);
        let got = read(&headers, now());
        if got != row.expect {
            failed.push(format!(
                "{}:\n  got    {got:?}\n  wanted {:?}",
                row.form, row.expect
            ));
        }
    }
    assert!(failed.is_empty(), "{}", failed.join("\n"));
}

#[test]
fn go_durations_strictly() {
    let go = values::go_duration;
    assert_eq!(go("0"), Some(Duration::ZERO));
    assert_eq!(go("0s"), Some(Duration::ZERO));
    assert_eq!(go("12ms"), Some(ms(12)));
    assert_eq!(go("1h2m3.5s"), Some(ms(3_723_500)));
    assert_eq!(go("7µs"), Some(Duration::from_micros(7)));
    assert_eq!(go("1.5"), None);
    assert_eq!(go(""), None);
    assert_eq!(go("s"), None);
    assert_eq!(go("-1s"), None);
    assert_eq!(go("1..5s"), None);
}

#[test]
fn a_reset_is_an_epoch_or_a_delta_by_magnitude() {
    let reset = |v| values::reset(v, now());
    assert_eq!(reset("999999999"), Some(secs(999_999_999)));
    assert_eq!(reset("1795000001"), Some(secs(1)));
    assert_eq!(reset("1795000000"), Some(Duration::ZERO));
    assert_eq!(reset("1000000000"), Some(Duration::ZERO));
    assert_eq!(reset("99999999999999999999999"), Some(secs(u64::MAX - NOW)));
}

#[test]
fn policies_with_huge_numbers_are_compared_without_overflow() {
    // 15 digits: the largest integer a structured field holds.
    let max = "999999999999999";
    let field = format!(r#""a";r={max};t={max}, "b";r=1;t={max}"#);
    let headers = with(&[("ratelimit", field.as_str())]);
    // The policy with less left per second binds; its reset is read as a century.
    assert_eq!(read(&headers, now()).requests, q(1, LONGEST, None));
}

#[test]
fn every_reset_and_wait_is_read_as_at_most_a_century() {
    let huge = "99999999999999999999";
    let reading = read(
        &with(&[
            ("x-ratelimit-remaining", "1"),
            ("x-ratelimit-reset-after", huge),
            ("x-ratelimit-remaining-tokens", "1"),
            ("x-ratelimit-reset-tokens", "2562047h47m16s"),
            ("retry-after", huge),
        ]),
        now(),
    );
    assert_eq!(reading.requests.map(|q| q.reset), Some(LONGEST));
    assert_eq!(reading.tokens.map(|q| q.reset), Some(LONGEST));
    assert_eq!(
        reading.wait,
        Some((Pushback::Delay(LONGEST), Hint::RetryAfter))
    );
}

#[test]
fn grpc_timeouts_in_every_unit() {
    let t = |v| grpc_timeout(&with(&[("grpc-timeout", v)]));
    assert_eq!(t("100m"), Some(ms(100)));
    assert_eq!(t("2S"), Some(secs(2)));
    assert_eq!(t("1H"), Some(secs(3600)));
    assert_eq!(t("5u"), Some(Duration::from_micros(5)));
    assert_eq!(t("123456789S"), None);
    assert_eq!(t("m"), None);
    assert_eq!(t("10x"), None);
}
