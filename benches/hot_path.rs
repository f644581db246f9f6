//! The request path's own work, per call: classifying an answer, the pacer's fast
//! path, one sleeper step, and the head work every forwarded request pays (the copy
//! kept for a replay, the rewrite of target, Host and hop-by-hop headers, the
//! rate-limit look-up on the answer), and what a lane that paces in units pays to
//! cost a request before it goes. `cargo bench --bench hot_path`.

use std::future::Future;
use std::hint::black_box;
use std::pin::pin;
use std::task::{Context, Poll, Waker};
use std::time::Duration;

use criterion::{Criterion, criterion_group, criterion_main};
use easeoff::Config;
use easeoff::controller::Controller;
use easeoff::cost::{self, Unit};
use easeoff::hints;
use easeoff::pacer::{Limits, Pacer};
use easeoff::proxy::{UpstreamClient, strip_hop_by_hop};
use easeoff::sleeper::{Mode, Settings, Strategy};
use easeoff::throttle::{Classifier, Head, Preset, Rules};
use http::{HeaderMap, HeaderValue, Request, StatusCode};
use tokio::time::Instant;

fn headers(pairs: &[(&'static str, &'static str)]) -> HeaderMap {
    let mut h = HeaderMap::new();
    for (name, value) in pairs {
        h.append(*name, HeaderValue::from_static(value));
    }
    h
}

/// What nginx sends with a small 200.
fn ok_answer() -> HeaderMap {
    headers(&[
        ("server", "nginx"),
        ("date", "Sun, 06 Nov 1994 08:49:37 GMT"),
        ("content-type", "text/plain"),
        ("content-length", "2"),
        ("connection", "keep-alive"),
    ])
}

fn classification(c: &mut Criterion) {
    let mut g = c.benchmark_group("classify");
    let plain = Classifier::new(Preset::None, Rules::default());
    let dynamodb = Classifier::new(Preset::DynamoDb, Rules::default());
    let grpc = Classifier::new(Preset::Grpc, Rules::default());
    let ok = ok_answer();
    g.bench_function("200", |b| {
        b.iter(|| plain.classify_head(black_box(StatusCode::OK), black_box(&ok)))
    });
    let throttled = headers(&[("retry-after", "2"), ("content-length", "0")]);
    g.bench_function("429", |b| {
        b.iter(|| plain.classify_head(black_box(StatusCode::TOO_MANY_REQUESTS), &throttled))
    });
    let error = headers(&[
        ("content-type", "application/x-amz-json-1.0"),
        ("content-length", "120"),
        ("x-amzn-requestid", "ABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789"),
    ]);
    let body = br#"{"__type":"com.amazonaws.dynamodb.v20120810#ProvisionedThroughputExceededException","message":"The level of configured provisioned throughput for the table was exceeded."}"#;
    g.bench_function("dynamodb_400_with_body", |b| {
        b.iter(|| {
            let head = dynamodb.classify_head(StatusCode::BAD_REQUEST, black_box(&error));
            assert!(matches!(head, Head::NeedsBody));
            dynamodb.classify_body(StatusCode::BAD_REQUEST, &error, black_box(body))
        })
    });
    let trailers_only = headers(&[
        ("content-type", "application/grpc"),
        ("grpc-status", "8"),
        ("grpc-message", "quota exhausted"),
    ]);
    g.bench_function("grpc_status_8", |b| {
        b.iter(|| grpc.classify_head(StatusCode::OK, black_box(&trailers_only)))
    });
    g.finish();
}

/// Polls a future that must complete at once (the pacer's paths without waiting).
fn now_or_never<F: Future>(future: F) -> F::Output {
    let mut future = pin!(future);
    match future
        .as_mut()
        .poll(&mut Context::from_waker(Waker::noop()))
    {
        Poll::Ready(output) => output,
        Poll::Pending => panic!("the pacer made a request wait"),
    }
}

fn pacer(c: &mut Criterion) {
    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .expect("a runtime for the release task");
    let _entered = runtime.enter();
    let mut g = c.benchmark_group("pacer");
    let deadline = Instant::now() + Duration::from_secs(3600);
    let limits = Limits::waiting(1000);
    let fast = Pacer::new(Mode::Pace, limits);
    g.bench_function("acquire_interval_0", |b| {
        b.iter(|| now_or_never(fast.acquire(black_box(deadline))))
    });
    // 1 ns: the slot is always free by the next call, so this is the paced path
    // (queue lock, schedule arithmetic) without a wait.
    let paced = Pacer::new(Mode::Pace, limits);
    paced.set_interval(Duration::from_nanos(1), 0);
    g.bench_function("acquire_interval_1ns", |b| {
        b.iter(|| now_or_never(paced.acquire(black_box(deadline))))
    });
    g.finish();
}

fn sleeper(c: &mut Criterion) {
    let mut g = c.benchmark_group("sleeper");
    for strategy in [Strategy::Responsive, Strategy::Cubic] {
        let settings = Settings {
            strategy,
            ..Settings::seed_defaults()
        };
        let mut controller = Controller::new(&settings, fastrand::Rng::with_seed(7));
        // cubic's curve depends on the time since the last throttle: let it move.
        let mut now = Duration::ZERO;
        g.bench_function(format!("{}_throttle_then_success", strategy.name()), |b| {
            b.iter(|| {
                now += Duration::from_millis(1);
                let epoch = controller.epoch();
                controller.on_throttle(black_box(epoch), None, now);
                controller.on_success(black_box(controller.epoch()), now)
            })
        });
    }
    let settings = Settings::seed_defaults();
    let mut idle = Controller::new(&settings, fastrand::Rng::with_seed(7));
    g.bench_function("responsive_success_at_0", |b| {
        b.iter(|| idle.on_success(black_box(0), Duration::ZERO))
    });
    g.finish();
}

fn head_work(c: &mut Criterion) {
    let config = Config::parse(
        "[[upstream]]\nname = \"b\"\nlisten = \"127.0.0.1:0\"\nurl = \"http://127.0.0.1:8000\"\n",
        "bench.toml",
        &|_| None,
    )
    .expect("a valid config");
    let client = UpstreamClient::new(&config.upstreams[0]).expect("a client");
    let (template, ()) = Request::builder()
        .method("POST")
        .uri("/items?consistent=true")
        .header("host", "localhost:8080")
        .header("user-agent", "aws-sdk-java/2.25.0")
        .header("content-type", "application/x-amz-json-1.0")
        .header("x-amz-target", "DynamoDB_20120810.PutItem")
        .header("content-length", "120")
        .body(())
        .expect("a valid request")
        .into_parts();
    let mut g = c.benchmark_group("head");
    g.bench_function("replay_copy", |b| {
        b.iter(|| black_box(template.headers.clone()))
    });
    g.bench_function("rewrite_request", |b| {
        b.iter_batched_ref(
            || {
                let mut head = Request::new(()).into_parts().0;
                head.method = template.method.clone();
                head.uri = template.uri.clone();
                head.headers = template.headers.clone();
                head
            },
            |head| client.rewrite(head),
            criterion::BatchSize::SmallInput,
        )
    });
    let ok = ok_answer();
    g.bench_function("strip_answer", |b| {
        b.iter_batched_ref(
            || ok.clone(),
            strip_hop_by_hop,
            criterion::BatchSize::SmallInput,
        )
    });
    let wall = std::time::SystemTime::now();
    g.bench_function("hints_absent", |b| {
        b.iter(|| hints::read(black_box(&ok), wall))
    });
    g.finish();
}

fn costing(c: &mut Criterion) {
    let put = headers(&[
        ("x-amz-target", "DynamoDB_20120810.PutItem"),
        ("content-length", "150"),
    ]);
    let item = br#"{"TableName":"orders","Item":{"pk":{"S":"customer#1234"},"sk":{"S":"order#2026-11-26#0001"},"total":{"N":"129.95"},"paid":{"BOOL":true}}}"#;
    let chat = headers(&[("content-type", "application/json")]);
    let prompt = format!(
        r#"{{"model":"gpt-4o-mini","max_tokens":200,"messages":[{{"role":"user","content":"{}"}}]}}"#,
        "word ".repeat(400)
    );
    let mut g = c.benchmark_group("cost");
    g.bench_function("dynamodb_put_item", |b| {
        b.iter(|| cost::reserve(Unit::Capacity, &put, Some(black_box(item)), None))
    });
    g.bench_function("openai_chat_2kb", |b| {
        b.iter(|| {
            cost::reserve(
                Unit::Tokens,
                &chat,
                Some(black_box(prompt.as_bytes())),
                None,
            )
        })
    });
    g.finish();
}

criterion_group!(benches, classification, pacer, sleeper, head_work, costing);
criterion_main!(benches);
