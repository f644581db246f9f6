use std::time::{Duration, SystemTime, UNIX_EPOCH};

use aws_credential_types::Credentials as Keys;
use http::{HeaderValue, Uri};

use super::*;

/// AWS's SigV4 test suite keys (`get-vanilla`).
fn suite_keys() -> SharedCredentialsProvider {
    SharedCredentialsProvider::new(Keys::new(
        "AKIDEXAMPLE",
        "wJalrXUtnFEMI/K7MDENG+bPxRfiCYEXAMPLEKEY",
        None,
        None,
        "test",
    ))
}

fn signer(service: &str, clock: Clock) -> Signer {
    let settings = SigV4Settings {
        service: service.into(),
        region: "us-east-1".into(),
    };
    let credentials = Credentials::from_provider(suite_keys()).unwrap();
    Signer::new(&settings, credentials, clock)
}

/// 2015-08-30T12:36:00Z, the suite's time.
fn suite_time() -> SystemTime {
    UNIX_EPOCH + Duration::from_secs(1_440_938_160)
}

/// A clock that stands at the suite's time until moved.
fn suite_clock() -> Clock {
    Clock::manual(suite_time()).0
}

fn request(body: &'static str) -> Request<ProxyBody> {
    Request::builder()
        .method("GET")
        .uri("http://example.amazonaws.com/")
        .header("host", "example.amazonaws.com")
        .body(ProxyBody::full(body))
        .unwrap()
}

#[tokio::test]
async fn signs_aws_get_vanilla_exactly() {
    let signer = signer("service", suite_clock());
    let mut req = request("");
    signer.sign(&mut req).await.unwrap();
    assert_eq!(req.headers()["x-amz-date"], "20150830T123600Z");
    assert_eq!(
        req.headers()["authorization"],
        "AWS4-HMAC-SHA256 Credential=AKIDEXAMPLE/20150830/us-east-1/service/aws4_request, \
         SignedHeaders=host;x-amz-date, \
         Signature=5fa00fa31553b73ebf1942676e86291e8372ff2a2260956d9b8aae1d763fbf31"
    );
}

#[tokio::test]
async fn a_path_alone_signs_as_its_host_header_says_and_without_one_is_refused() {
    // A plain-http upstream's requests carry the path alone.
    let signer = signer("service", suite_clock());
    let mut absolute = request("");
    let mut path_alone = request("");
    *path_alone.uri_mut() = Uri::from_static("/");
    signer.sign(&mut absolute).await.unwrap();
    signer.sign(&mut path_alone).await.unwrap();
    assert_eq!(
        path_alone.headers()["authorization"],
        absolute.headers()["authorization"]
    );

    let mut no_host = request("");
    *no_host.uri_mut() = Uri::from_static("/");
    no_host.headers_mut().remove("host");
    let refused = signer.sign(&mut no_host).await.unwrap_err();
    assert_eq!(
        refused.to_string(),
        "cannot sign the request: the request has no Host header of plain text to sign"
    );
}

#[tokio::test]
async fn every_signing_reads_the_clock_afresh() {
    // The second call is six minutes later: past a signature's five-minute validity.
    let (clock, manual) = Clock::manual(suite_time());
    let signer = signer("service", clock);
    let (mut first, mut second) = (request(""), request(""));
    signer.sign(&mut first).await.unwrap();
    manual.advance(Duration::from_secs(360));
    signer.sign(&mut second).await.unwrap();
    assert_eq!(first.headers()["x-amz-date"], "20150830T123600Z");
    assert_eq!(second.headers()["x-amz-date"], "20150830T124200Z");
    assert_ne!(
        first.headers()["authorization"],
        second.headers()["authorization"]
    );
}

#[test]
fn the_clients_signature_goes() {
    let signer = signer("dynamodb", suite_clock());
    let mut headers = HeaderMap::new();
    for name in CLIENT_SIGNATURE {
        headers.insert(name, HeaderValue::from_static("from-the-client"));
    }
    headers.insert(
        "x-amz-target",
        HeaderValue::from_static("DynamoDB_20120810.PutItem"),
    );
    signer.strip(&mut headers).unwrap();
    assert_eq!(headers.len(), 1);
    assert!(headers.contains_key("x-amz-target"));
}

#[test]
fn chunk_signed_uploads_are_refused_and_s3_unsigned_chunks_kept() {
    let s3 = signer("s3", suite_clock());
    let mut headers = HeaderMap::new();
    headers.insert(CONTENT_SHA256, HeaderValue::from_static(STREAMING_UNSIGNED));
    s3.strip(&mut headers).unwrap();
    assert_eq!(headers[CONTENT_SHA256], STREAMING_UNSIGNED);

    headers.insert(
        CONTENT_SHA256,
        HeaderValue::from_static("STREAMING-AWS4-HMAC-SHA256-PAYLOAD"),
    );
    assert!(s3.strip(&mut headers).is_err());
    let dynamodb = signer("dynamodb", suite_clock());
    headers.insert(CONTENT_SHA256, HeaderValue::from_static(STREAMING_UNSIGNED));
    assert!(dynamodb.strip(&mut headers).is_err());
}

#[tokio::test]
async fn s3_sends_the_payload_hash_and_others_hash_without_a_header() {
    let s3 = signer("s3", suite_clock());
    let mut req = request("hello");
    s3.sign(&mut req).await.unwrap();
    assert_eq!(
        req.headers()[CONTENT_SHA256],
        // sha256("hello")
        "2cf24dba5fb0a30e26e83b2ac5b9e29e1b161e5c1fa7425e73043362938b9824"
    );
    let dynamodb = signer("dynamodb", suite_clock());
    let mut req = request("hello");
    dynamodb.sign(&mut req).await.unwrap();
    assert!(!req.headers().contains_key(CONTENT_SHA256));
    assert!(dynamodb.needs_body() && !s3.needs_body());
}

#[tokio::test]
async fn a_session_token_is_sent() {
    let settings = SigV4Settings {
        service: "dynamodb".into(),
        region: "eu-west-1".into(),
    };
    let keys = Keys::new("AKID", "SECRET", Some("TOKEN".into()), None, "test");
    let credentials = Credentials::from_provider(SharedCredentialsProvider::new(keys)).unwrap();
    let signer = Signer::new(&settings, credentials, suite_clock());
    let mut req = request("{}");
    signer.sign(&mut req).await.unwrap();
    assert_eq!(req.headers()["x-amz-security-token"], "TOKEN");
    let auth = req.headers()["authorization"].to_str().unwrap();
    assert!(
        auth.contains("/20150830/eu-west-1/dynamodb/aws4_request"),
        "{auth}"
    );
}

/// The names in an attempt's `SignedHeaders=`.
fn signed_headers(req: &Request<ProxyBody>) -> Vec<String> {
    let auth = req.headers()["authorization"].to_str().unwrap();
    let list = auth
        .split("SignedHeaders=")
        .nth(1)
        .and_then(|rest| rest.split(',').next())
        .unwrap();
    list.split(';').map(str::to_string).collect()
}

#[tokio::test]
async fn headers_the_sdk_signers_leave_out_are_not_signed() {
    for service in ["dynamodb", "s3"] {
        let signer = signer(service, suite_clock());
        let mut req = request("{}");
        let sent = [
            ("expect", "100-continue"),
            ("user-agent", "aws-sdk-js/3.1164.0"),
            (
                "x-amzn-trace-id",
                "Root=1-5759e988-bd862e3fe1be46a994272793",
            ),
            ("transfer-encoding", "chunked"),
            ("connection", "keep-alive"),
            ("cache-control", "no-cache"),
            ("referer", "http://example.com/"),
            ("proxy-authorization", "Basic e30="),
            ("sec-fetch-mode", "cors"),
            ("content-type", "application/x-amz-json-1.0"),
            ("x-amz-target", "DynamoDB_20120810.PutItem"),
        ];
        for (name, value) in sent {
            req.headers_mut()
                .insert(name, HeaderValue::from_static(value));
        }
        signer.sign(&mut req).await.unwrap();
        let signed = signed_headers(&req);
        let mut want = vec!["content-type", "host", "x-amz-date", "x-amz-target"];
        if service == "s3" {
            want.insert(2, "x-amz-content-sha256");
        }
        assert_eq!(signed, want, "{service}");
        // Unsigned, but still sent.
        assert_eq!(req.headers()["expect"], "100-continue");
    }
}

#[tokio::test]
async fn botocores_and_aws_sigv4s_exclusions_are_all_covered() {
    let botocore = [
        "expect",
        "transfer-encoding",
        "user-agent",
        "x-amzn-trace-id",
    ];
    let aws_sigv4 = SigningSettings::default().excluded_headers.unwrap();
    for name in botocore
        .iter()
        .copied()
        .chain(aws_sigv4.iter().map(|n| n.as_ref()))
    {
        assert!(UNSIGNED_HEADERS.contains(&name), "{name}");
    }
}
