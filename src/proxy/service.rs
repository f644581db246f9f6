//! One client request, start to answer: hold a small body so the request can be
//! replayed, wait for a slot (or be shed), pass the connection backoff, forward,
//! classify, apply the upstream's hints, and retry a throttle or a failed connection
//! while attempts, budget and time allow. The upstream's own throttle reaches the
//! client when easeoff cannot absorb it.

use std::sync::Arc;
use std::time::{Duration, SystemTime};

use http::request::Parts;
use http::{HeaderMap, Method, Request, Response, Uri, Version};
use http_body::Body;
use hyper::body::Incoming;
use prometheus::IntGauge;
use tokio::time::Instant;

use super::body::{ProxyBody, Watch, discard, expects_continue, read_error_body, read_up_to};
use super::client::SendError;
use super::headers::strip_hop_by_hop;
use super::reply::{Dialect, Reason, reply};
use crate::connect_backoff::Admission;
use crate::hints::{self, Pushback};
use crate::metrics::{Outcome, RetryReason};
use crate::pacer::Slot;
use crate::retry;
use crate::sigv4::SIGNED_BODY_LIMIT;
use crate::throttle::{Head, Preset, Verdict, is_batch};
use crate::upstream::Upstream;

/// Lets the client finish sending a body its early answer does not need.
fn discard_request(request: Request<ProxyBody>) {
    let (head, body) = request.into_parts();
    discard(body, expects_continue(&head.headers));
}

/// Serves one request for `upstream`; every path ends in a response.
pub async fn handle(upstream: Arc<Upstream>, req: Request<Incoming>) -> Response<ProxyBody> {
    let arrived = Instant::now();
    let settings = &*upstream.settings;
    let dialect = Dialect {
        preset: settings.preset,
        grpc: is_grpc(req.headers()),
    };
    let ctx = Ctx {
        upstream: &upstream,
        dialect,
        // A gRPC client's own deadline bounds every wait.
        grpc_deadline: dialect
            .grpc
            .then(|| hints::grpc_timeout(req.headers()))
            .flatten()
            .map(|t| arrived + t),
        watch_batch: settings.preset.is_aws() && is_batch(req.headers()),
    };
    upstream.budget.deposit(upstream.clock(arrived));

    let (mut head, body) = req.into_parts();
    upstream.client.rewrite(&mut head);
    if let Some(signer) = &upstream.signer
        && let Err(error) = signer.strip(&mut head.headers)
    {
        discard(ProxyBody::Stream(body), expects_continue(&head.headers));
        return ctx.local(Reason::BadRequest, Outcome::Error, &error.to_string(), None);
    }
    let retry = &settings.retry;
    // A body is held to be replayed, or to be hashed for its signature.
    let signed_body = upstream.signer.as_ref().is_some_and(|s| s.needs_body());
    let hold = if signed_body {
        SIGNED_BODY_LIMIT.max(retry.max_body_bytes)
    } else {
        retry.max_body_bytes
    };
    let body = if retry.max_attempts > 1 || signed_body {
        match read_up_to(body, hold).await {
            Ok(body) => body,
            Err(error) => {
                let message = format!("cannot read the request body: {error}");
                return ctx.local(Reason::BadRequest, Outcome::Error, &message, None);
            }
        }
    } else {
        ProxyBody::Stream(body)
    };
    if signed_body && body.replay().is_none() {
        let message = format!(
            "the request body is larger than {hold} bytes, the most easeoff holds to sign it"
        );
        discard(body, expects_continue(&head.headers));
        return ctx.local(Reason::TooLarge, Outcome::Error, &message, None);
    }
    // A copy to replay, when retries are on and the body is in memory and small enough
    // (one held only for signing is sent once, as a streamed one would be).
    let replayable = retry.max_attempts > 1
        && body
            .size_hint()
            .exact()
            .is_some_and(|n| n <= retry.max_body_bytes);
    let template = body
        .replay()
        .filter(|_| replayable)
        .map(|copy| Template::of(&head, copy));
    let mut first = Some(Request::from_parts(head, body));
    let mut attempts = 0u32;
    // The latest throttle, kept for the client in case the next attempt cannot go.
    let mut kept: Option<Response<ProxyBody>> = None;

    loop {
        attempts += 1;
        let request = match first.take() {
            Some(request) => request,
            None => match &template {
                Some(template) => template.request(),
                None => return ctx.give_up(kept, None),
            },
        };
        let now = Instant::now();
        let mut deadline = ctx.limit(now + settings.queue.max_wait);
        if attempts > 1 {
            deadline = deadline.min(arrived + retry.max_elapsed);
        }
        let slot = match upstream.acquire(deadline).await {
            Ok(slot) => slot,
            Err(shed) => {
                if kept.is_some() {
                    return ctx.give_up(kept, None);
                }
                discard_request(request);
                let message = "too many requests waiting for this upstream; retry later";
                return ctx.local(Reason::Shed, Outcome::Shed, message, Some(shed.retry_after));
            }
        };
        if let Admission::Closed(wait) = upstream.admit(slot.dispatched_at) {
            discard_request(request);
            let message = "the upstream cannot be reached; connection backoff in force";
            return ctx.local(
                Reason::UpstreamUnavailable,
                Outcome::Error,
                message,
                Some(wait),
            );
        }

        // Signed at dispatch: a retry minutes later needs a signature of its own.
        let mut request = request;
        if let Some(signer) = &upstream.signer
            && let Err(error) = signer.sign(&mut request).await
        {
            upstream.metrics.signing_failures.inc();
            upstream.record(&slot, None, None);
            return ctx.local(Reason::Signing, Outcome::Error, &error.to_string(), None);
        }
        let sent = {
            let _in_flight = InFlight::enter(&upstream.metrics.in_flight);
            upstream.client.send(request).await
        };
        upstream
            .metrics
            .upstream_duration
            .observe(slot.dispatched_at.elapsed().as_secs_f64());
        let response = match sent {
            Ok(response) => response,
            Err(SendError::Connect(error)) => {
                upstream.record(&slot, None, None);
                let now = Instant::now();
                upstream.connect_failed(now);
                let wait = upstream.connect_backoff_remaining(now);
                let before = ctx.limit(arrived + retry.max_elapsed);
                let may = retry::allowed(
                    retry,
                    attempts,
                    template.is_some(),
                    false,
                    arrived.elapsed(),
                );
                if may.is_ok() && now + wait <= before && ctx.withdraw(now) {
                    upstream.metrics.retry(RetryReason::Connect).inc();
                    tokio::time::sleep(wait).await;
                    continue;
                }
                let message = format!("cannot connect to the upstream: {error}");
                return ctx.local(
                    Reason::UpstreamUnavailable,
                    Outcome::Error,
                    &message,
                    Some(wait),
                );
            }
            Err(error) => {
                upstream.record(&slot, None, None);
                let (reason, outcome) = match error {
                    SendError::Timeout(_) => (Reason::Timeout, Outcome::Timeout),
                    // It connected, whatever broke afterwards.
                    _ => {
                        upstream.connected();
                        (Reason::UpstreamUnavailable, Outcome::Error)
                    }
                };
                return ctx.local(reason, outcome, &error.to_string(), None);
            }
        };
        upstream.connected();
        upstream.metrics.response(response.status().as_u16());
        let (mut parts, body) = response.into_parts();
        strip_hop_by_hop(&mut parts.headers);
        if let Some(quota) = hints::quota(&parts.headers) {
            upstream.apply_quota(quota, Instant::now());
        }

        let deadline = slot.dispatched_at + upstream.client.request_timeout();
        let (verdict, body) = match upstream
            .classifier
            .classify_head(parts.status, &parts.headers)
        {
            Head::Decided(verdict) => (verdict, ProxyBody::Stream(body)),
            Head::NeedsBody => match tokio::time::timeout_at(deadline, read_error_body(body)).await
            {
                Ok(Ok((body, Some(bytes)))) => (
                    upstream
                        .classifier
                        .classify_body(parts.status, &parts.headers, &bytes),
                    body,
                ),
                Ok(Ok((body, None))) => (Verdict::Success, body),
                Ok(Err(error)) => {
                    upstream.record(&slot, None, None);
                    let message = format!("the upstream's answer broke off: {error}");
                    return ctx.local(Reason::UpstreamUnavailable, Outcome::Error, &message, None);
                }
                Err(_) => {
                    upstream.record(&slot, None, None);
                    let message = format!(
                        "no complete answer within {:?}",
                        upstream.client.request_timeout()
                    );
                    return ctx.local(Reason::Timeout, Outcome::Timeout, &message, None);
                }
            },
        };

        let Verdict::Throttle(_) = verdict else {
            let body = ctx.watch(&slot, verdict, &parts.headers, body);
            let outcome = if verdict == Verdict::Success {
                Outcome::Success
            } else {
                Outcome::Error
            };
            upstream.metrics.request(outcome).inc();
            return Response::from_parts(parts, body);
        };
        let pushback = hints::retry_after(&parts.headers, SystemTime::now());
        let pause = match pushback {
            Some(Pushback::Delay(d)) => Some(d),
            _ => None,
        };
        upstream.record(&slot, Some(verdict), pause);
        let refused = pushback == Some(Pushback::Refuse);
        let may = retry::allowed(
            retry,
            attempts,
            template.is_some(),
            refused,
            arrived.elapsed(),
        );
        if may.is_err() {
            return ctx.give_up(None, Some(Response::from_parts(parts, body)));
        }
        // Read what is left of the answer: the connection goes back to the pool, and
        // the client gets it unchanged if the retry cannot go.
        let body = match tokio::time::timeout_at(deadline, read_error_body_of(body)).await {
            Ok(Some(body)) => body,
            Ok(None) | Err(_) => {
                let message = "the upstream's throttle answer broke off";
                return ctx.local(Reason::UpstreamUnavailable, Outcome::Error, message, None);
            }
        };
        let answer = Response::from_parts(parts, body);
        let body_kept = !matches!(
            answer.body(),
            ProxyBody::Prefixed { .. } | ProxyBody::Stream(_)
        );
        if !body_kept || !ctx.withdraw(Instant::now()) {
            return ctx.give_up(None, Some(answer));
        }
        upstream.metrics.retry(RetryReason::Throttle).inc();
        kept = Some(answer);
    }
}

/// What every step of one request needs.
struct Ctx<'a> {
    upstream: &'a Arc<Upstream>,
    dialect: Dialect,
    grpc_deadline: Option<Instant>,
    watch_batch: bool,
}

impl Ctx<'_> {
    /// `deadline`, or the gRPC client's own if that comes first.
    fn limit(&self, deadline: Instant) -> Instant {
        self.grpc_deadline.map_or(deadline, |g| deadline.min(g))
    }

    /// Takes a retry from the budget, counting a refusal.
    fn withdraw(&self, now: Instant) -> bool {
        let ok = self.upstream.budget.withdraw(self.upstream.clock(now));
        if !ok {
            self.upstream.metrics.budget_exhausted.inc();
        }
        ok
    }

    /// Hands the client the upstream's throttle: `fresh` if given, else the one kept.
    fn give_up(
        &self,
        kept: Option<Response<ProxyBody>>,
        fresh: Option<Response<ProxyBody>>,
    ) -> Response<ProxyBody> {
        let answer = fresh.or(kept).unwrap_or_else(|| {
            reply(
                Reason::Shed,
                self.dialect,
                self.upstream.name(),
                "throttled",
                None,
            )
        });
        self.upstream.metrics.request(Outcome::Throttled).inc();
        answer
    }

    /// easeoff's own answer, counted.
    fn local(
        &self,
        reason: Reason,
        outcome: Outcome,
        message: &str,
        retry_after: Option<Duration>,
    ) -> Response<ProxyBody> {
        tracing::debug!(upstream = %self.upstream.name(), ?reason, message, "local answer");
        self.upstream.metrics.request(outcome).inc();
        reply(
            reason,
            self.dialect,
            self.upstream.name(),
            message,
            retry_after,
        )
    }

    /// Records `verdict` now, or wraps `body` so it is recorded once the parts that
    /// decide it have passed: a batch answer's Unprocessed* map, a gRPC answer's
    /// trailers.
    fn watch(
        &self,
        slot: &Slot,
        verdict: Verdict,
        headers: &HeaderMap,
        body: ProxyBody,
    ) -> ProxyBody {
        let ProxyBody::Stream(inner) = body else {
            self.upstream.record(slot, Some(verdict), None);
            return body;
        };
        let upstream = Arc::clone(self.upstream);
        let watch = if verdict == Verdict::Success && self.watch_batch {
            Watch::batch(upstream, *slot)
        } else if verdict == Verdict::Success
            && self.dialect.preset == Preset::Grpc
            && !headers.contains_key("grpc-status")
        {
            Watch::grpc(upstream, *slot)
        } else {
            self.upstream.record(slot, Some(verdict), None);
            return ProxyBody::Stream(inner);
        };
        ProxyBody::Watched { inner, watch }
    }
}

/// The parts of a request head needed to send it again.
struct Template {
    method: Method,
    uri: Uri,
    version: Version,
    headers: HeaderMap,
    body: ProxyBody,
}

impl Template {
    fn of(head: &Parts, body: ProxyBody) -> Template {
        Template {
            method: head.method.clone(),
            uri: head.uri.clone(),
            version: head.version,
            headers: head.headers.clone(),
            body,
        }
    }

    fn request(&self) -> Request<ProxyBody> {
        let mut request = Request::new(self.body.replay().unwrap_or_else(|| ProxyBody::full("")));
        *request.method_mut() = self.method.clone();
        *request.uri_mut() = self.uri.clone();
        *request.version_mut() = self.version;
        *request.headers_mut() = self.headers.clone();
        request
    }
}

/// Reads a throttle's body (at most 64 KiB) so it can be kept; `None` if it broke off.
async fn read_error_body_of(body: ProxyBody) -> Option<ProxyBody> {
    match body {
        ProxyBody::Stream(body) => read_error_body(body).await.ok().map(|(body, _)| body),
        held => Some(held),
    }
}

fn is_grpc(headers: &HeaderMap) -> bool {
    headers
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
