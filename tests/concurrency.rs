//! `max_in_flight`: a fixed cap holds what is out, a streamed answer holds its place
//! to its end, and a learned cap finds a server's slots from its refusals without
//! slowing the rate.

mod support;

use std::convert::Infallible;
use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::Duration;

use bytes::Bytes;
use http_body::Frame;
use http_body_util::{BodyExt, StreamBody};
use support::*;
use tokio_stream::wrappers::ReceiverStream;

/// Requests in the upstream now, the most at once, and how many it refused.
#[derive(Clone, Default)]
struct Slots {
    now: Arc<AtomicUsize>,
    most: Arc<AtomicUsize>,
    refused: Arc<AtomicUsize>,
}

impl Slots {
    /// Takes a slot if fewer than `slots` are busy.
    fn enter(&self, slots: usize) -> bool {
        let now = self.now.fetch_add(1, Ordering::SeqCst) + 1;
        if now > slots {
            self.now.fetch_sub(1, Ordering::SeqCst);
            self.refused.fetch_add(1, Ordering::SeqCst);
            return false;
        }
        self.most.fetch_max(now, Ordering::SeqCst);
        true
    }

    fn leave(&self) {
        self.now.fetch_sub(1, Ordering::SeqCst);
    }
}

/// A model server with `slots` slots, each call taking `work`; past them it answers
/// as TGI does (429, "Model is overloaded").
async fn model_server(slots: usize, work: Duration) -> (TestUpstream, Slots) {
    let seen = Slots::default();
    let inside = seen.clone();
    let up = upstream(move |_| {
        let seen = inside.clone();
        async move {
            if !seen.enter(slots) {
                return respond(
                    429,
                    &[("content-type", "application/json")],
                    r#"{"error":"Model is overloaded","error_type":"overloaded"}"#,
                );
            }
            tokio::time::sleep(work).await;
            seen.leave();
            ok()
        }
    })
    .await;
    (up, seen)
}

/// Sends `each` requests from each of `workers` clients at once; returns the statuses.
async fn hammer(url: &str, workers: usize, each: usize) -> Vec<u16> {
    let mut tasks = Vec::new();
    for _ in 0..workers {
        let url = url.to_string();
        tasks.push(tokio::spawn(async move {
            let client = client();
            let mut statuses = Vec::new();
            for _ in 0..each {
                let answer = send(&client, "POST", &url, &[], "{}").await;
                statuses.push(answer.status.as_u16());
            }
            statuses
        }));
    }
    let mut all = Vec::new();
    for task in tasks {
        all.extend(task.await.unwrap());
    }
    all
}

#[tokio::test]
async fn a_fixed_cap_never_lets_more_out() {
    let (up, seen) = model_server(100, Duration::from_millis(20)).await;
    let proxy = proxy(up.addr, "max_in_flight = 3").await;
    let statuses = hammer(&format!("http://{}/v1/chat/completions", proxy.addr), 12, 4).await;
    assert!(statuses.iter().all(|s| *s == 200), "{statuses:?}");
    assert_eq!(seen.most.load(Ordering::SeqCst), 3);
    let text = metrics(proxy.admin).await;
    assert_eq!(
        sample_value(&text, r#"easeoff_in_flight_cap{upstream="up"}"#),
        Some(3.0)
    );
}

#[tokio::test]
async fn a_streamed_answer_holds_its_place_until_its_end() {
    let (release, released) = tokio::sync::mpsc::channel::<()>(1);
    let released = Arc::new(tokio::sync::Mutex::new(released));
    let up = upstream(move |_| {
        let released = Arc::clone(&released);
        async move {
            let (tx, rx) = tokio::sync::mpsc::channel::<Result<Frame<Bytes>, Infallible>>(4);
            tokio::spawn(async move {
                let _ = tx
                    .send(Ok(Frame::data(Bytes::from_static(b"data: 1\n\n"))))
                    .await;
                // The body ends when the test says so.
                let _ = released.lock().await.recv().await;
                let _ = tx
                    .send(Ok(Frame::data(Bytes::from_static(b"data: 2\n\n"))))
                    .await;
            });
            let mut r = respond(200, &[("content-type", "text/event-stream")], "");
            *r.body_mut() = StreamBody::new(ReceiverStream::new(rx)).boxed();
            r
        }
    })
    .await;
    let proxy = proxy(up.addr, "max_in_flight = 1").await;
    let url = format!("http://{}/stream", proxy.addr);
    let first = tokio::spawn({
        let url = url.clone();
        async move { send(&client(), "GET", &url, &[], Bytes::new()).await }
    });
    wait_until(
        Duration::from_secs(10),
        "the first request reaches the upstream",
        || async { up.count() == 1 },
    )
    .await;
    let second = tokio::spawn({
        let url = url.clone();
        async move { send(&client(), "GET", &url, &[], Bytes::new()).await }
    });
    // The second waits for the first's body to end, not for its head.
    wait_until(
        Duration::from_secs(10),
        "the second request waits for a flight",
        || async { metric(proxy.admin, r#"easeoff_queue_waiting{upstream="up"}"#).await == 1.0 },
    )
    .await;
    assert_eq!(
        up.count(),
        1,
        "the second went while the first's body streamed"
    );
    release.send(()).await.unwrap();
    assert_eq!(first.await.unwrap().text(), "data: 1\n\ndata: 2\n\n");
    wait_until(
        Duration::from_secs(10),
        "the second reaches the upstream",
        || async { up.count() == 2 },
    )
    .await;
    release.send(()).await.unwrap();
    assert_eq!(second.await.unwrap().status, 200);
}

#[tokio::test]
async fn a_learned_cap_finds_the_slots_and_leaves_the_rate_alone() {
    let (up, seen) = model_server(4, Duration::from_millis(40)).await;
    let proxy = proxy(up.addr, "preset = \"model-server\"").await;
    let url = format!("http://{}/v1/chat/completions", proxy.addr);
    let statuses = hammer(&url, 16, 10).await;
    assert!(statuses.iter().all(|s| *s == 200), "{statuses:?}");
    let text = metrics(proxy.admin).await;
    let cap = sample_value(&text, r#"easeoff_in_flight_cap{upstream="up"}"#).unwrap();
    assert!(
        (3.0..=5.0).contains(&cap),
        "the cap is {cap}, the server has 4 slots"
    );
    // 160 calls on 4 slots from 16 clients: without the cap most attempts would be
    // refused; with it, the slow start's overshoot and a probe or two.
    let refused = seen.refused.load(Ordering::SeqCst);
    assert!(refused <= 12, "{refused} attempts refused");
    assert_eq!(
        sample_value(
            &text,
            r#"easeoff_throttles_total{signal="busy",upstream="up"}"#
        ),
        Some(refused as f64)
    );
    assert_eq!(
        interval_ms(proxy.admin).await,
        0.0,
        "a full server moved the rate"
    );
}

#[tokio::test]
async fn a_lane_cap_holds_each_lane_on_its_own() {
    let seen = Slots::default();
    let inside = seen.clone();
    // Per model, as Ollama's OLLAMA_NUM_PARALLEL is: one at a time for each.
    let per_model: Arc<std::sync::Mutex<std::collections::HashMap<String, usize>>> = Arc::default();
    let models = Arc::clone(&per_model);
    let up = upstream(move |req| {
        let (seen, models) = (inside.clone(), Arc::clone(&models));
        async move {
            let model = req.headers()["x-model"].to_str().unwrap().to_string();
            let busy = {
                let mut models = models.lock().unwrap();
                let n = models.entry(model.clone()).or_default();
                *n += 1;
                *n > 1
            };
            seen.enter(100);
            tokio::time::sleep(Duration::from_millis(20)).await;
            seen.leave();
            *models.lock().unwrap().get_mut(&model).unwrap() -= 1;
            if busy {
                respond(503, &[], "server busy")
            } else {
                ok()
            }
        }
    })
    .await;
    let proxy = proxy(
        up.addr,
        "[upstream.lanes]\nby = [\"header:x-model\"]\nmax_in_flight = 1",
    )
    .await;
    let url = format!("http://{}/api/chat", proxy.addr);
    let mut tasks = Vec::new();
    for i in 0..8 {
        let url = url.clone();
        let model = if i % 2 == 0 { "a" } else { "b" };
        tasks.push(tokio::spawn(async move {
            let client = client();
            let mut statuses = Vec::new();
            for _ in 0..5 {
                statuses.push(
                    send(&client, "POST", &url, &[("x-model", model)], "{}")
                        .await
                        .status,
                );
            }
            statuses
        }));
    }
    for task in tasks {
        assert!(task.await.unwrap().iter().all(|s| *s == 200));
    }
    // Both models ran at once, never two of one.
    assert_eq!(seen.most.load(Ordering::SeqCst), 2);
    assert_eq!(up.count(), 40);
}
