//! Large bodies stream through without being held: each side waits for the other to
//! have seen the first megabyte before sending the rest, which deadlocks (and times
//! out) if easeoff buffered the body. easeoff holds at most `retry.max_body_bytes`
//! (1 MiB) of an upload so it can replay it, so the upload sends 2 MiB before waiting.

#![allow(
    clippy::cast_possible_truncation,
    clippy::cast_sign_loss,
    reason = "test figures are small"
)]

mod support;

use std::convert::Infallible;
use std::time::Duration;

use bytes::Bytes;
use http::Request;
use http_body::Frame;
use http_body_util::{BodyExt, StreamBody};
use hyper_util::client::legacy::Client;
use hyper_util::client::legacy::connect::HttpConnector;
use hyper_util::rt::TokioExecutor;
use support::*;
use tokio::sync::{mpsc, watch};
use tokio_stream::wrappers::ReceiverStream;

const MIB: usize = 1 << 20;
const TOTAL: usize = 10 * MIB;
const CHUNK: usize = 64 * 1024;
const PATIENCE: Duration = Duration::from_secs(10);

type Stream = StreamBody<ReceiverStream<Result<Frame<Bytes>, Infallible>>>;

fn chunk(i: usize) -> Bytes {
    Bytes::from(vec![(i % 251) as u8; CHUNK])
}

#[tokio::test]
async fn a_ten_mebibyte_upload_streams_through() {
    let (progress, mut seen) = watch::channel(0usize);
    let up = upstream(move |req| {
        let progress = progress.clone();
        async move {
            let mut body = req.into_body();
            let (mut total, mut sum) = (0usize, 0u64);
            while let Some(frame) = body.frame().await {
                if let Ok(data) = frame.unwrap().into_data() {
                    total += data.len();
                    sum += data.iter().map(|b| u64::from(*b)).sum::<u64>();
                    let _ = progress.send(total);
                }
            }
            respond(200, &[], format!("{total} {sum}"))
        }
    })
    .await;
    let proxy = proxy(up.addr, "").await;

    let (tx, rx) = mpsc::channel(4);
    let request = Request::post(format!("http://{}/upload", proxy.addr))
        .body(StreamBody::new(ReceiverStream::new(rx)))
        .unwrap();
    let client: Client<HttpConnector, Stream> =
        Client::builder(TokioExecutor::new()).build(HttpConnector::new());
    let response = tokio::spawn(async move { client.request(request).await });

    let mut expected_sum = 0u64;
    for i in 0..TOTAL / CHUNK {
        if i == 2 * MIB / CHUNK {
            tokio::time::timeout(PATIENCE, seen.wait_for(|n| *n >= MIB))
                .await
                .expect("the upstream saw less than 1 MiB of a 2 MiB upload still open: easeoff holds uploads")
                .unwrap();
        }
        let data = chunk(i);
        expected_sum += data.iter().map(|b| u64::from(*b)).sum::<u64>();
        tx.send(Ok(Frame::data(data))).await.unwrap();
    }
    drop(tx);
    let response = response.await.unwrap().unwrap();
    assert_eq!(response.status(), 200);
    let body = response.into_body().collect().await.unwrap().to_bytes();
    assert_eq!(
        String::from_utf8_lossy(&body),
        format!("{TOTAL} {expected_sum}")
    );
}

#[tokio::test]
async fn a_ten_mebibyte_download_streams_through() {
    let (progress, received) = watch::channel(0usize);
    let up = upstream(move |_| {
        let mut received = received.clone();
        async move {
            let (tx, rx) = mpsc::channel(4);
            tokio::spawn(async move {
                for i in 0..TOTAL / CHUNK {
                    if i == MIB / CHUNK {
                        let got =
                            tokio::time::timeout(PATIENCE, received.wait_for(|n| *n >= MIB)).await;
                        if got.is_err() {
                            return; // the client never saw the first MiB: the body ends short
                        }
                    }
                    if tx.send(Ok(Frame::data(chunk(i)))).await.is_err() {
                        return;
                    }
                }
            });
            let mut r = respond(200, &[("content-type", "application/octet-stream")], "");
            *r.body_mut() = StreamBody::new(ReceiverStream::new(rx)).boxed();
            r
        }
    })
    .await;
    let proxy = proxy(up.addr, "").await;
    let request = Request::get(format!("http://{}/download", proxy.addr))
        .body(http_body_util::Full::new(Bytes::new()))
        .unwrap();
    let response = client().request(request).await.unwrap();
    assert_eq!(response.status(), 200);
    let mut body = response.into_body();
    let mut total = 0;
    while let Some(frame) = tokio::time::timeout(PATIENCE * 2, body.frame())
        .await
        .expect("download stalled")
    {
        if let Ok(data) = frame.unwrap().into_data() {
            for (offset, byte) in data.iter().enumerate() {
                assert_eq!(*byte, (((total + offset) / CHUNK) % 251) as u8);
            }
            total += data.len();
            let _ = progress.send(total);
        }
    }
    assert_eq!(
        total, TOTAL,
        "the download ended early: easeoff held the body back"
    );
}

#[tokio::test]
async fn a_body_above_max_body_bytes_streams_and_a_throttle_is_not_retried() {
    let up = upstream(|req| async move {
        let n = req.into_body().collect().await.unwrap().to_bytes().len();
        respond(429, &[], format!("{n}"))
    })
    .await;
    let proxy = proxy(up.addr, "").await;
    let body = Bytes::from(vec![7u8; TOTAL]);
    let answer = send(
        &client(),
        "PUT",
        &format!("http://{}/big", proxy.addr),
        &[],
        body,
    )
    .await;
    assert_eq!(answer.status, 429);
    assert_eq!(answer.text(), TOTAL.to_string());
    assert_eq!(up.count(), 1, "a streamed body cannot be replayed");
    assert_eq!(retries(proxy.admin, "throttle").await, 0.0);
}
