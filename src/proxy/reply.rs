//! Answers easeoff makes itself: always with `x-easeoff-reason` and, when it knows
//! one, a `Retry-After`; in the dialect the client understands: a small JSON body by
//! default, the AWS JSON error shape under the aws/dynamodb presets (with codes the
//! SDKs classify: retryable where a retry helps, and `x-amz-retry-after` in
//! milliseconds), a trailers-only gRPC status for gRPC clients.

use std::time::Duration;

use http::{HeaderValue, Response, StatusCode, header};

use crate::pacer::ShedReason;
use crate::throttle::Preset;
use crate::transport::ProxyBody;

/// Why easeoff answered instead of the upstream (header `x-easeoff-reason`).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Reason {
    /// Turned away instead of queued, and why.
    Shed(ShedReason),
    /// No connection (or it broke before an answer), or the connection backoff.
    UpstreamUnavailable,
    /// The upstream answered with a head larger than easeoff reads (over 100 header
    /// lines, or over the read buffer).
    UpstreamHeadTooLarge,
    /// No answer within `request_timeout`.
    Timeout,
    /// The request could not be read.
    BadRequest,
    /// The body is too large to be held for SigV4 signing.
    TooLarge,
    /// The attempt could not be SigV4-signed: no credentials.
    Signing,
    /// A method easeoff does not forward (`CONNECT`: it is not a forward proxy).
    MethodNotAllowed,
}

impl Reason {
    fn as_str(self) -> &'static str {
        match self {
            Reason::Shed(_) => "shed",
            Reason::UpstreamUnavailable => "upstream-unavailable",
            Reason::UpstreamHeadTooLarge => "upstream-head-too-large",
            Reason::Timeout => "timeout",
            Reason::BadRequest => "bad-request",
            Reason::TooLarge => "too-large",
            Reason::Signing => "signing",
            Reason::MethodNotAllowed => "method-not-allowed",
        }
    }

    fn status(self) -> StatusCode {
        match self {
            Reason::Shed(_) => StatusCode::TOO_MANY_REQUESTS,
            Reason::UpstreamUnavailable | Reason::UpstreamHeadTooLarge => StatusCode::BAD_GATEWAY,
            Reason::Timeout => StatusCode::GATEWAY_TIMEOUT,
            Reason::BadRequest => StatusCode::BAD_REQUEST,
            Reason::TooLarge => StatusCode::PAYLOAD_TOO_LARGE,
            Reason::Signing => StatusCode::SERVICE_UNAVAILABLE,
            Reason::MethodNotAllowed => StatusCode::METHOD_NOT_ALLOWED,
        }
    }

    /// The gRPC status a gRPC client gets instead of the HTTP one.
    fn grpc_status(self) -> &'static str {
        match self {
            Reason::Shed(_) => "8",               // RESOURCE_EXHAUSTED
            Reason::UpstreamUnavailable => "14",  // UNAVAILABLE
            Reason::UpstreamHeadTooLarge => "13", // INTERNAL
            Reason::Timeout => "4",               // DEADLINE_EXCEEDED
            Reason::BadRequest => "3",            // INVALID_ARGUMENT
            Reason::TooLarge => "8",              // RESOURCE_EXHAUSTED
            Reason::Signing => "14",              // UNAVAILABLE
            Reason::MethodNotAllowed => "12",     // UNIMPLEMENTED
        }
    }

    /// The status and error code an AWS SDK gets. Throttling and 5xx codes are on
    /// the SDKs' retry lists (botocore's and the JS SDK's `standard` mode); 400 and
    /// 413 are not, since sending the same request again cannot help.
    fn aws(self) -> (StatusCode, &'static str) {
        match self {
            // DynamoDB throttles with 400, and so every SDK reads it as one.
            Reason::Shed(_) => (StatusCode::BAD_REQUEST, "ThrottlingException"),
            Reason::UpstreamUnavailable => (StatusCode::BAD_GATEWAY, "ServiceUnavailable"),
            Reason::UpstreamHeadTooLarge => (StatusCode::BAD_GATEWAY, "InternalFailure"),
            Reason::Timeout => (StatusCode::GATEWAY_TIMEOUT, "RequestTimeout"),
            Reason::BadRequest => (StatusCode::BAD_REQUEST, "ValidationException"),
            Reason::TooLarge => (StatusCode::PAYLOAD_TOO_LARGE, "RequestEntityTooLarge"),
            Reason::Signing => (StatusCode::SERVICE_UNAVAILABLE, "ServiceUnavailable"),
            Reason::MethodNotAllowed => (StatusCode::METHOD_NOT_ALLOWED, "ValidationException"),
        }
    }
}

/// Why a shed came, when the answer is one (header `x-easeoff-shed-reason`).
pub const SHED_REASON_HEADER: &str = "x-easeoff-shed-reason";

/// The header that marks easeoff's own answers.
pub const REASON_HEADER: &str = "x-easeoff-reason";

/// Who is asking, so the answer comes in a form the client acts on.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Dialect {
    pub preset: Preset,
    pub grpc: bool,
}

/// easeoff's own answer; `retry_after` is sent rounded up to whole seconds.
pub fn reply(
    reason: Reason,
    dialect: Dialect,
    upstream: &str,
    message: &str,
    retry_after: Option<Duration>,
) -> Response<ProxyBody> {
    let mut response = if dialect.grpc {
        grpc_reply(reason, message, retry_after)
    } else if dialect.preset.is_aws() {
        aws_reply(reason, message)
    } else {
        let body = serde_json::json!({
            "error": reason.as_str(),
            "message": message,
            "upstream": upstream,
        });
        let mut body = body;
        if let Reason::Shed(why) = reason {
            body["reason"] = why.as_str().into();
        }
        let mut r = Response::new(ProxyBody::full(format!("{body}\n")));
        *r.status_mut() = reason.status();
        r.headers_mut().insert(
            header::CONTENT_TYPE,
            HeaderValue::from_static("application/json"),
        );
        r
    };
    let h = response.headers_mut();
    h.insert(REASON_HEADER, HeaderValue::from_static(reason.as_str()));
    if let Reason::Shed(why) = reason {
        h.insert(SHED_REASON_HEADER, HeaderValue::from_static(why.as_str()));
    }
    if let Some(after) = retry_after {
        if dialect.preset.is_aws() && !dialect.grpc {
            // The AWS SDKs read this one (milliseconds); first, because the JS SDK
            // takes whichever of the two comes first.
            h.insert("x-amz-retry-after", HeaderValue::from(whole_millis(after)));
        }
        h.insert(header::RETRY_AFTER, HeaderValue::from(whole_seconds(after)));
    }
    response
}

/// The AWS JSON error shape (`__type`, `message`, `x-amzn-ErrorType`), which every
/// AWS SDK parses into a named error.
fn aws_reply(reason: Reason, message: &str) -> Response<ProxyBody> {
    let (status, code) = reason.aws();
    let body = serde_json::json!({
        "__type": format!("com.amazonaws.dynamodb.v20120810#{code}"),
        "message": message,
    });
    let mut r = Response::new(ProxyBody::full(body.to_string()));
    *r.status_mut() = status;
    let h = r.headers_mut();
    h.insert(
        header::CONTENT_TYPE,
        HeaderValue::from_static("application/x-amz-json-1.0"),
    );
    h.insert("x-amzn-errortype", HeaderValue::from_static(code));
    r
}

fn grpc_reply(reason: Reason, message: &str, retry_after: Option<Duration>) -> Response<ProxyBody> {
    let mut r = Response::new(ProxyBody::full(""));
    let h = r.headers_mut();
    h.insert(
        header::CONTENT_TYPE,
        HeaderValue::from_static("application/grpc"),
    );
    h.insert(
        "grpc-status",
        HeaderValue::from_static(reason.grpc_status()),
    );
    if let Ok(v) = HeaderValue::from_str(&percent_encode(message)) {
        h.insert("grpc-message", v);
    }
    if let Some(after) = retry_after.filter(|_| matches!(reason, Reason::Shed(_))) {
        let millis = u64::try_from(after.as_millis()).unwrap_or(u64::MAX);
        h.insert("grpc-retry-pushback-ms", HeaderValue::from(millis));
    }
    r
}

/// Retry-After is whole seconds: round up, and never say 0 for a real wait.
fn whole_seconds(d: Duration) -> u64 {
    (d.as_secs() + u64::from(d.subsec_nanos() > 0)).max(1)
}

/// Milliseconds, rounded up so a client never comes back before the time given.
fn whole_millis(d: Duration) -> u64 {
    let millis = u64::try_from(d.as_millis()).unwrap_or(u64::MAX);
    millis.saturating_add(u64::from(!d.subsec_nanos().is_multiple_of(1_000_000)))
}

/// grpc-message is percent-encoded (gRPC over HTTP/2 spec).
fn percent_encode(message: &str) -> String {
    let mut out = String::with_capacity(message.len());
    for b in message.bytes() {
        if (0x20..=0x7e).contains(&b) && b != b'%' {
            out.push(b as char);
        } else {
            out.push_str(&format!("%{b:02X}"));
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;
    use http_body_util::BodyExt;

    const PLAIN: Dialect = Dialect {
        preset: Preset::None,
        grpc: false,
    };

    async fn json(r: Response<ProxyBody>) -> serde_json::Value {
        let body = r.into_body().collect().await.unwrap().to_bytes();
        serde_json::from_slice(&body).unwrap()
    }

    #[tokio::test]
    async fn json_replies_carry_the_reason_and_retry_after() {
        let r = reply(
            Reason::Timeout,
            PLAIN,
            "orders",
            "no answer within 60s",
            Some(Duration::from_millis(1500)),
        );
        assert_eq!(r.status(), StatusCode::GATEWAY_TIMEOUT);
        assert_eq!(r.headers()[REASON_HEADER], "timeout");
        assert_eq!(r.headers()["retry-after"], "2");
        let v = json(r).await;
        assert_eq!(v["error"], "timeout");
        assert_eq!(v["upstream"], "orders");
    }

    #[tokio::test]
    async fn shedding_speaks_dynamodb_to_aws_clients() {
        let dialect = Dialect {
            preset: Preset::DynamoDb,
            grpc: false,
        };
        let r = reply(
            Reason::Shed(ShedReason::QueueFull),
            dialect,
            "t",
            "too many requests waiting",
            Some(Duration::from_secs(3)),
        );
        assert_eq!(r.status(), StatusCode::BAD_REQUEST);
        assert_eq!(r.headers()["x-amzn-errortype"], "ThrottlingException");
        assert_eq!(r.headers()["retry-after"], "3");
        assert_eq!(r.headers()[REASON_HEADER], "shed");
        let v = json(r).await;
        assert_eq!(
            v["__type"],
            "com.amazonaws.dynamodb.v20120810#ThrottlingException"
        );
        // Other answers stay generic for AWS clients: 5xx is retried by every SDK.
        let r = reply(Reason::UpstreamUnavailable, dialect, "t", "down", None);
        assert_eq!(r.status(), StatusCode::BAD_GATEWAY);
    }

    #[tokio::test]
    async fn aws_clients_get_named_errors_retryable_only_where_a_retry_helps() {
        let dialect = Dialect {
            preset: Preset::Aws,
            grpc: false,
        };
        for (reason, status, code) in [
            (Reason::UpstreamUnavailable, 502, "ServiceUnavailable"),
            (Reason::UpstreamHeadTooLarge, 502, "InternalFailure"),
            (Reason::Signing, 503, "ServiceUnavailable"),
            (Reason::Timeout, 504, "RequestTimeout"),
            (Reason::TooLarge, 413, "RequestEntityTooLarge"),
            (Reason::BadRequest, 400, "ValidationException"),
            (
                Reason::Shed(ShedReason::Deadline),
                400,
                "ThrottlingException",
            ),
        ] {
            let r = reply(reason, dialect, "t", "what happened", None);
            assert_eq!(r.status().as_u16(), status, "{reason:?}");
            assert_eq!(r.headers()["x-amzn-errortype"], code);
            assert_eq!(r.headers()["content-type"], "application/x-amz-json-1.0");
            assert_eq!(r.headers()[REASON_HEADER], reason.as_str());
            let v = json(r).await;
            assert_eq!(
                v["__type"],
                format!("com.amazonaws.dynamodb.v20120810#{code}")
            );
            assert_eq!(v["message"], "what happened");
        }
    }

    #[test]
    fn aws_clients_are_told_when_to_come_back_in_milliseconds() {
        let dialect = Dialect {
            preset: Preset::DynamoDb,
            grpc: false,
        };
        let shed = Reason::Shed(ShedReason::QueueFull);
        let after = Some(Duration::from_micros(1_234_500));
        let r = reply(shed, dialect, "t", "busy", after);
        assert_eq!(r.headers()["x-amz-retry-after"], "1235");
        let names: Vec<_> = r.headers().keys().map(|k| k.as_str()).collect();
        let (ms, s) = (
            names.iter().position(|n| *n == "x-amz-retry-after"),
            names.iter().position(|n| *n == "retry-after"),
        );
        assert!(ms < s, "x-amz-retry-after before retry-after: {names:?}");
        assert_eq!(r.headers()["retry-after"], "2");
        assert_eq!(r.headers()[SHED_REASON_HEADER], "queue-full");
        // Other clients get whole seconds only.
        let r = reply(shed, PLAIN, "t", "busy", after);
        assert!(!r.headers().contains_key("x-amz-retry-after"));
        assert_eq!(r.headers()["retry-after"], "2");
    }

    #[tokio::test]
    async fn a_shed_names_its_reason_in_header_and_body() {
        for why in ShedReason::ALL {
            let r = reply(Reason::Shed(why), PLAIN, "t", "busy", None);
            assert_eq!(r.status(), StatusCode::TOO_MANY_REQUESTS);
            assert_eq!(r.headers()[SHED_REASON_HEADER], why.as_str());
            let v = json(r).await;
            assert_eq!(v["error"], "shed");
            assert_eq!(v["reason"], why.as_str());
        }
    }

    #[test]
    fn grpc_clients_get_a_grpc_status() {
        let grpc = Dialect {
            preset: Preset::Grpc,
            grpc: true,
        };
        let r = reply(
            Reason::UpstreamUnavailable,
            grpc,
            "svc",
            "connection refused: 100%",
            None,
        );
        assert_eq!(r.status(), StatusCode::OK);
        assert_eq!(r.headers()["grpc-status"], "14");
        assert_eq!(r.headers()["grpc-message"], "connection refused: 100%25");
        assert_eq!(r.headers()[REASON_HEADER], "upstream-unavailable");
        let r = reply(
            Reason::Shed(ShedReason::Deadline),
            grpc,
            "svc",
            "busy",
            Some(Duration::from_millis(250)),
        );
        assert_eq!(r.headers()["grpc-status"], "8");
        assert_eq!(r.headers()["grpc-retry-pushback-ms"], "250");
    }
}
