//! AWS error codes, found the way the AWS SDKs find them: the `x-amzn-ErrorType`
//! header, else the JSON body's `code`/`Code`, else its `__type`, else an XML body's
//! `<Code>`; cut at the first `:` and keep what follows the last `#`. The throttling
//! list is the SDKs' (botocore `_THROTTLED_ERROR_CODES`, aws-smithy `THROTTLING_ERRORS`).

use http::HeaderMap;
use serde::Deserialize;

/// The error codes AWS SDKs treat as throttling.
pub const THROTTLING_CODES: [&str; 14] = [
    "Throttling",
    "ThrottlingException",
    "ThrottledException",
    "RequestThrottledException",
    "TooManyRequestsException",
    "ProvisionedThroughputExceededException",
    "TransactionInProgressException",
    "RequestLimitExceeded",
    "BandwidthLimitExceeded",
    "LimitExceededException",
    "RequestThrottled",
    "SlowDown",
    "PriorRequestNotComplete",
    "EC2ThrottledException",
];

/// The header an AWS JSON request names its operation in; a constant, so looking it
/// up does not parse the name on every request.
pub const X_AMZ_TARGET: http::HeaderName = http::HeaderName::from_static("x-amz-target");

/// The header AWS JSON services name an error's code in.
const X_AMZN_ERROR_TYPE: http::HeaderName = http::HeaderName::from_static("x-amzn-errortype");

/// Whether `code` is on the SDKs' throttling list.
pub fn is_throttling(code: &str) -> bool {
    THROTTLING_CODES.contains(&code)
}

/// The code from the `x-amzn-ErrorType` header, if it has one.
pub fn header_code(headers: &HeaderMap) -> Option<&str> {
    headers
        .get(X_AMZN_ERROR_TYPE)
        .and_then(|v| v.to_str().ok())
        .map(sanitize)
}

/// The code from a JSON or XML error body, if it has one.
pub fn body_code(body: &[u8]) -> Option<&str> {
    #[derive(Deserialize)]
    struct JsonError<'a> {
        #[serde(borrow)]
        code: Option<&'a str>,
        #[serde(borrow, rename = "Code")]
        code_upper: Option<&'a str>,
        #[serde(borrow, rename = "__type")]
        kind: Option<&'a str>,
    }
    let trimmed = body.trim_ascii_start();
    if trimmed.first() == Some(&b'{') {
        let parsed: JsonError<'_> = serde_json::from_slice(trimmed).ok()?;
        return parsed
            .code
            .or(parsed.code_upper)
            .or(parsed.kind)
            .map(sanitize);
    }
    if trimmed.first() == Some(&b'<') {
        let text = std::str::from_utf8(trimmed).ok()?;
        let start = text.find("<Code>")? + "<Code>".len();
        let len = text[start..].find("</Code>")?;
        return Some(sanitize(text[start..start + len].trim()));
    }
    None
}

/// `aws.protocoltests#FooError:http://internal.amazon.com/` → `FooError`.
fn sanitize(code: &str) -> &str {
    let code = code.split(':').next().unwrap_or(code);
    code.rsplit('#').next().unwrap_or(code)
}
