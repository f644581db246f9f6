//! SigV4 re-signing through the real proxy: the client's signature is replaced, and a
//! throttled write retried after more than a signature's validity (5 minutes) carries
//! a new `X-Amz-Date` and a signature that verifies for it. The signer's clock is a
//! manual one the upstream moves six minutes per arrival; nothing waits in real time.
//! A body too large to sign is answered 413, and a client still writing it reads
//! that 413.

mod support;

use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::{Duration, SystemTime, UNIX_EPOCH};
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpStream;

use aws_credential_types::Credentials;
use aws_credential_types::provider::SharedCredentialsProvider;
use aws_sigv4::http_request::{SignableBody, SignableRequest, SigningSettings, sign};
use aws_sigv4::sign::v4;
use aws_smithy_runtime_api::client::identity::Identity;
use easeoff::clock::Clock;
use easeoff::sigv4::SigningEnv;
use support::*;

const BODY: &str = r#"{"TableName":"orders","Item":{"id":{"S":"1"}}}"#;

fn keys() -> Credentials {
    Credentials::new("AKIDEASEOFF", "easeoff-secret", None, None, "test")
}

/// 2026-01-01T00:00:00Z.
const START: Duration = Duration::from_secs(1_767_225_600);
const JUMP: Duration = Duration::from_secs(360);

/// The Authorization header a correct signer makes for what arrived, at `time`, over
/// the headers its `SignedHeaders` names.
fn expected_authorization(arrival: &Arrival, host: &str, time: SystemTime) -> String {
    let h = &arrival.headers;
    let auth = h["authorization"].to_str().unwrap();
    let signed = auth
        .split("SignedHeaders=")
        .nth(1)
        .unwrap()
        .split(',')
        .next()
        .unwrap();
    let headers: Vec<(&str, &str)> = signed
        .split(';')
        .filter(|name| *name != "x-amz-date")
        .map(|name| (name, h[name].to_str().unwrap()))
        .collect();
    let identity: Identity = keys().into();
    let params = v4::SigningParams::builder()
        .identity(&identity)
        .region("us-east-1")
        .name("dynamodb")
        .time(time)
        .settings(SigningSettings::default())
        .build()
        .unwrap()
        .into();
    let uri = format!("http://{host}{}", arrival.uri);
    let request = SignableRequest::new(
        arrival.method.as_str(),
        uri,
        headers.into_iter(),
        SignableBody::Bytes(BODY.as_bytes()),
    )
    .unwrap();
    let (instructions, _) = sign(request, &params).unwrap().into_parts();
    let mut out = http::Request::new(());
    instructions.apply_to_request_http1x(&mut out);
    out.headers()["authorization"].to_str().unwrap().to_string()
}

/// easeoff with one DynamoDB upstream at `target`, signing with [`keys`] at `clock`.
async fn signing_proxy(target: std::net::SocketAddr, clock: Clock) -> Proxy {
    let text = format!(
        "[server]\nadmin_listen = \"127.0.0.1:0\"\n\n[[upstream]]\nname = \"up\"\nlisten = \"127.0.0.1:0\"\nurl = \"http://{target}\"\npreset = \"dynamodb\"\n[upstream.sigv4]\nservice = \"dynamodb\"\nregion = \"us-east-1\"\n"
    );
    let signing = SigningEnv {
        credentials: Some(SharedCredentialsProvider::new(keys())),
        clock: Some(clock),
    };
    proxy_signing(&text, signing).await
}

#[tokio::test]
async fn a_retry_after_the_signatures_validity_is_signed_afresh() {
    // The signer's clock stands at START and moves six minutes on every arrival, so
    // the retry is signed past the first signature's validity.
    let (clock, manual) = Clock::manual(UNIX_EPOCH + START);
    let answered = Arc::new(AtomicUsize::new(0));
    let up = upstream(move |_| {
        manual.advance(JUMP);
        let first = answered.fetch_add(1, Ordering::SeqCst) == 0;
        async move {
            if first {
                respond(
                    400,
                    &[("x-amzn-errortype", "ProvisionedThroughputExceededException")],
                    "",
                )
            } else {
                respond(200, &[], "stored")
            }
        }
    })
    .await;
    let proxy = signing_proxy(up.addr, clock).await;
    let answer = send(
        &client(),
        "POST",
        &format!("http://{}/", proxy.addr),
        &[
            ("content-type", "application/x-amz-json-1.0"),
            ("x-amz-target", "DynamoDB_20120810.PutItem"),
            ("x-amz-date", "20200101T000000Z"),
            (
                "authorization",
                "AWS4-HMAC-SHA256 Credential=wrong/20200101/us-east-1/dynamodb/aws4_request, SignedHeaders=host, Signature=00",
            ),
        ],
        BODY,
    )
    .await;
    assert_eq!(answer.status, 200, "{}", answer.text());

    let arrivals = up.arrivals();
    assert_eq!(arrivals.len(), 2, "the throttled write and its retry");
    let host = up.addr.to_string();
    let dates: Vec<_> = arrivals
        .iter()
        .map(|a| a.headers["x-amz-date"].clone())
        .collect();
    assert_eq!(dates, ["20260101T000000Z", "20260101T000600Z"]);
    for (arrival, time) in arrivals
        .iter()
        .zip([UNIX_EPOCH + START, UNIX_EPOCH + START + JUMP])
    {
        assert_eq!(arrival.headers["host"], host.as_str());
        let auth = arrival.headers["authorization"].to_str().unwrap();
        assert!(
            auth.starts_with(
                "AWS4-HMAC-SHA256 Credential=AKIDEASEOFF/20260101/us-east-1/dynamodb/aws4_request"
            ),
            "{auth}"
        );
        assert_eq!(auth, expected_authorization(arrival, &host, time));
    }
    assert_ne!(
        arrivals[0].headers["authorization"],
        arrivals[1].headers["authorization"]
    );
    proxy.stop().await.unwrap();
}

/// 17 MiB: over the 16 MiB easeoff holds to sign.
const OVER_THE_LIMIT: usize = 17 * 1024 * 1024;

/// Sends a request head, then (unless it waits for 100 Continue) the whole body in
/// 64 KiB writes as an SDK does, and only then reads the answer's head; all within
/// 60 s.
async fn write_then_read(addr: std::net::SocketAddr, framing: &str, chunked: bool) -> String {
    tokio::time::timeout(
        Duration::from_secs(60),
        write_then_read_forever(addr, framing, chunked),
    )
    .await
    .expect("an answer within 60 s")
}

async fn write_then_read_forever(
    addr: std::net::SocketAddr,
    framing: &str,
    chunked: bool,
) -> String {
    let mut stream = TcpStream::connect(addr).await.unwrap();
    let head = format!(
        "POST / HTTP/1.1\r\nhost: {addr}\r\ncontent-type: application/x-amz-json-1.0\r\nx-amz-target: DynamoDB_20120810.BatchWriteItem\r\n{framing}\r\n"
    );
    stream.write_all(head.as_bytes()).await.unwrap();
    if !framing.contains("100-continue") {
        let chunk = vec![b'x'; 64 * 1024];
        for n in 0..OVER_THE_LIMIT / chunk.len() {
            let written = if chunked {
                let mut framed = format!("{:x}\r\n", chunk.len()).into_bytes();
                framed.extend_from_slice(&chunk);
                framed.extend_from_slice(b"\r\n");
                stream.write_all(&framed).await
            } else {
                stream.write_all(&chunk).await
            };
            if let Err(error) = written {
                panic!("writing chunk {n} of the body: {error}");
            }
        }
        if chunked {
            stream.write_all(b"0\r\n\r\n").await.unwrap();
        }
    }
    let mut answer = Vec::new();
    let mut buf = [0u8; 4096];
    while !answer.windows(4).any(|w| w == b"\r\n\r\n") {
        match stream.read(&mut buf).await {
            Ok(0) => panic!(
                "closed before an answer: {:?}",
                String::from_utf8_lossy(&answer)
            ),
            Ok(n) => answer.extend_from_slice(&buf[..n]),
            Err(error) => panic!("reading the answer: {error}"),
        }
    }
    String::from_utf8_lossy(&answer).into_owned()
}

#[tokio::test]
async fn a_client_writing_a_body_too_large_to_sign_reads_the_413() {
    // The upstream must never be reached.
    let up = upstream(|_| async { ok() }).await;
    let proxy = signing_proxy(up.addr, Clock::Tokio).await;
    let cases = [
        (format!("content-length: {OVER_THE_LIMIT}\r\n"), false),
        ("transfer-encoding: chunked\r\n".to_string(), true),
    ];
    for (framing, chunked) in cases {
        let answer = write_then_read(proxy.addr, &framing, chunked).await;
        assert!(answer.starts_with("HTTP/1.1 413 "), "{framing}: {answer}");
        assert!(answer.contains("x-easeoff-reason: "), "{answer}");
    }
    assert!(up.arrivals().is_empty());
}

#[tokio::test]
async fn a_client_waiting_for_100_continue_gets_the_413_instead() {
    let up = upstream(|_| async { ok() }).await;
    let proxy = signing_proxy(up.addr, Clock::Tokio).await;
    let framing = format!("content-length: {OVER_THE_LIMIT}\r\nexpect: 100-continue\r\n");
    let answer = write_then_read(proxy.addr, &framing, false).await;
    assert!(answer.starts_with("HTTP/1.1 413 "), "{answer}");
}
