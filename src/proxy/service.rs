//! One client request: wait for a slot, forward, classify, record, answer.

use std::time::SystemTime;

use http::{Request, Response};
use hyper::body::Incoming;
use prometheus::IntGauge;

use super::body::{ResponseBody, SmallBody, read_small};
use super::client::SendError;
use super::headers::strip_hop_by_hop;
use super::reply::{Reason, reply};
use crate::hints;
use crate::metrics::Outcome;
use crate::throttle::{Head, Verdict};
use crate::upstream::Upstream;

/// Serves one request for `upstream`; every path ends in a response.
pub async fn handle(upstream: &Upstream, mut req: Request<Incoming>) -> Response<ResponseBody> {
    let grpc = is_grpc(&req);
    upstream.client.rewrite(&mut req);
    let slot = upstream.acquire().await;

    let in_flight = InFlight::enter(&upstream.metrics.in_flight);
    let sent = upstream.client.send(req).await;
    drop(in_flight);
    let deadline = slot.dispatched_at + upstream.client.request_timeout();
    upstream
        .metrics
        .upstream_duration
        .observe(slot.dispatched_at.elapsed().as_secs_f64());

    let response = match sent {
        Ok(response) => response,
        Err(error) => {
            upstream.record(&slot, None, None);
            return failed(upstream, &error, grpc);
        }
    };
    upstream.metrics.response(response.status().as_u16());
    let (mut parts, body) = response.into_parts();
    strip_hop_by_hop(&mut parts.headers);

    let (verdict, body) = match upstream
        .classifier
        .classify_head(parts.status, &parts.headers)
    {
        Head::Decided(verdict) => (verdict, ResponseBody::Upstream(body)),
        Head::NeedsBody => match tokio::time::timeout_at(deadline, read_small(body)).await {
            Ok(Ok(SmallBody::Complete(body, bytes))) => (
                upstream
                    .classifier
                    .classify_body(parts.status, &parts.headers, &bytes),
                body,
            ),
            Ok(Ok(SmallBody::TooLarge(body))) => (Verdict::Success, body),
            Ok(Err(error)) => {
                upstream.record(&slot, None, None);
                let error = format!("the upstream's response broke off: {error}");
                return local(
                    upstream,
                    Reason::UpstreamUnavailable,
                    Outcome::Error,
                    &error,
                    grpc,
                );
            }
            Err(_) => {
                upstream.record(&slot, None, None);
                let error = format!(
                    "no complete response within {:?}",
                    upstream.client.request_timeout()
                );
                return local(upstream, Reason::Timeout, Outcome::Timeout, &error, grpc);
            }
        },
    };
    let retry_after = match verdict {
        Verdict::Throttle(_) => hints::retry_after(&parts.headers, SystemTime::now()),
        _ => None,
    };
    upstream.record(&slot, Some(verdict), retry_after);
    let outcome = match verdict {
        Verdict::Success => Outcome::Success,
        Verdict::Throttle(_) => Outcome::Throttled,
        Verdict::Failure => Outcome::Error,
    };
    upstream.metrics.request(outcome).inc();
    tracing::debug!(upstream = %upstream.name(), status = parts.status.as_u16(), ?verdict, "forwarded");
    Response::from_parts(parts, body)
}

/// The answer when an attempt got no response.
fn failed(upstream: &Upstream, error: &SendError, grpc: bool) -> Response<ResponseBody> {
    tracing::debug!(upstream = %upstream.name(), %error, "attempt failed");
    match error {
        SendError::Timeout(_) => local(
            upstream,
            Reason::Timeout,
            Outcome::Timeout,
            &error.to_string(),
            grpc,
        ),
        SendError::Connect(_) => {
            upstream.metrics.connect_failures.inc();
            local(
                upstream,
                Reason::UpstreamUnavailable,
                Outcome::Error,
                &error.to_string(),
                grpc,
            )
        }
        SendError::Failed(_) => local(
            upstream,
            Reason::UpstreamUnavailable,
            Outcome::Error,
            &error.to_string(),
            grpc,
        ),
    }
}

fn local(
    upstream: &Upstream,
    reason: Reason,
    outcome: Outcome,
    message: &str,
    grpc: bool,
) -> Response<ResponseBody> {
    upstream.metrics.request(outcome).inc();
    reply(reason, upstream.name(), message, None, grpc)
}

fn is_grpc<B>(req: &Request<B>) -> bool {
    req.headers()
        .get(http::header::CONTENT_TYPE)
        .is_some_and(|v| v.as_bytes().starts_with(b"application/grpc"))
}

/// Counts an attempt in flight until dropped, also when the client goes away mid-way.
struct InFlight<'a>(&'a IntGauge);

impl<'a> InFlight<'a> {
    fn enter(gauge: &'a IntGauge) -> Self {
        gauge.inc();
        InFlight(gauge)
    }
}

impl Drop for InFlight<'_> {
    fn drop(&mut self) {
        self.0.dec();
    }
}
