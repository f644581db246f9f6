//! Answers easeoff makes itself: always with `x-easeoff-reason`, a small JSON body, and
//! for gRPC clients a trailers-only gRPC status, as Envoy's local replies do.

use std::time::Duration;

use http::{HeaderValue, Response, StatusCode, header};

use super::body::ResponseBody;

/// Why easeoff answered instead of the upstream (header `x-easeoff-reason`).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Reason {
    Shed,
    UpstreamUnavailable,
    Timeout,
}

impl Reason {
    fn as_str(self) -> &'static str {
        match self {
            Reason::Shed => "shed",
            Reason::UpstreamUnavailable => "upstream-unavailable",
            Reason::Timeout => "timeout",
        }
    }

    fn status(self) -> StatusCode {
        match self {
            Reason::Shed => StatusCode::TOO_MANY_REQUESTS,
            Reason::UpstreamUnavailable => StatusCode::BAD_GATEWAY,
            Reason::Timeout => StatusCode::GATEWAY_TIMEOUT,
        }
    }

    /// The gRPC status a gRPC client gets instead of the HTTP one.
    fn grpc_status(self) -> &'static str {
        match self {
            Reason::Shed => "8",                 // RESOURCE_EXHAUSTED
            Reason::UpstreamUnavailable => "14", // UNAVAILABLE
            Reason::Timeout => "4",              // DEADLINE_EXCEEDED
        }
    }
}

/// The header that marks easeoff's own answers.
pub const REASON_HEADER: &str = "x-easeoff-reason";

/// easeoff's own answer; `retry_after` is rounded up to whole seconds.
pub fn reply(
    reason: Reason,
    upstream: &str,
    message: &str,
    retry_after: Option<Duration>,
    grpc: bool,
) -> Response<ResponseBody> {
    let mut response = if grpc {
        let mut r = Response::new(ResponseBody::full(""));
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
        r
    } else {
        let body = serde_json::json!({
            "error": reason.as_str(),
            "message": message,
            "upstream": upstream,
        });
        let mut r = Response::new(ResponseBody::full(format!("{body}\n")));
        *r.status_mut() = reason.status();
        r.headers_mut().insert(
            header::CONTENT_TYPE,
            HeaderValue::from_static("application/json"),
        );
        r
    };
    let h = response.headers_mut();
    h.insert(REASON_HEADER, HeaderValue::from_static(reason.as_str()));
    if let Some(after) = retry_after {
        let seconds = after.as_secs() + u64::from(after.subsec_nanos() > 0);
        h.insert(header::RETRY_AFTER, HeaderValue::from(seconds.max(1)));
    }
    response
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

    #[tokio::test]
    async fn json_replies_carry_the_reason_and_retry_after() {
        let r = reply(
            Reason::Timeout,
            "orders",
            "no answer within 60s",
            Some(Duration::from_millis(1500)),
            false,
        );
        assert_eq!(r.status(), StatusCode::GATEWAY_TIMEOUT);
        assert_eq!(r.headers()[REASON_HEADER], "timeout");
        assert_eq!(r.headers()["retry-after"], "2");
        let body = r.into_body().collect().await.unwrap().to_bytes();
        let v: serde_json::Value = serde_json::from_slice(&body).unwrap();
        assert_eq!(v["error"], "timeout");
        assert_eq!(v["upstream"], "orders");
    }

    #[test]
    fn grpc_clients_get_a_grpc_status() {
        let r = reply(
            Reason::UpstreamUnavailable,
            "svc",
            "connection refused: 100%",
            None,
            true,
        );
        assert_eq!(r.status(), StatusCode::OK);
        assert_eq!(r.headers()["grpc-status"], "14");
        assert_eq!(r.headers()["grpc-message"], "connection refused: 100%25");
        assert_eq!(r.headers()[REASON_HEADER], "upstream-unavailable");
    }
}
