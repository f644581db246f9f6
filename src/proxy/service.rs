//! One client request, start to answer, as a loop over the attempt policy
//! ([`crate::attempt`]): hold a small body so the request can be replayed, wait for a
//! slot (or be shed), pass the connection backoff, sign, send, classify, apply the
//! upstream's hints, and ask the policy what follows. The upstream's own throttle
//! reaches the client when easeoff cannot absorb it.

use std::borrow::Cow;
use std::sync::Arc;
use std::time::Duration;

use bytes::Bytes;
use http::request::Parts;
use http::{HeaderMap, HeaderValue, Method, Request, Response, StatusCode, Uri, Version};
use http_body::Body;
use hyper::body::Incoming;

use super::ClientIp;
use super::access::{self, Record};
use super::oversized;
use super::reply::{Dialect, Reason, reply};
use super::watch::{Landing, Watch};
use crate::attempt::{self, Next};
use crate::clock::{Clock, Instant};
use crate::cost::{Unit, answer::AnswerCost};
use crate::deadline::after;
use crate::hints::{self, Pushback};
use crate::lane::{Answer, Concerns, Lane, Pass, Route, Settled};
use crate::metrics::{Outcome, ShardedGauge};
use crate::pacer::ShedReason;
use crate::route::{self, Rule, dynamodb};
use crate::shed::sdk_patience;
use crate::sigv4::SIGNED_BODY_LIMIT;
use crate::throttle::{self, Head, Preset, Verdict, is_batch};
use crate::transport::{
    Bound, ConnectCause, ProxyBody, SendError, WatchFrames, discard, expects_continue,
    read_error_body, read_start, read_up_to, strip_hop_by_hop,
};
use crate::upstream::drive::{Arrival, Conclusion, Dispatch, Ended, Turn};
use crate::upstream::{Settle, Upstream};

/// The header that says why a connection failed (`tls: unknown issuer`).
pub const CAUSE_HEADER: &str = "x-easeoff-cause";

/// What a shed client is told, by reason.
fn shed_message(reason: ShedReason) -> &'static str {
    match reason {
        ShedReason::QueueFull => {
            "queue-full: too many requests already wait for this upstream (queue.max_waiting); retry after the time given"
        }
        ShedReason::Deadline => {
            "deadline: this request's slot lies past its deadline (queue.max_wait, or the client's own); retry after the time given"
        }
        ShedReason::Draining => {
            "draining: easeoff is shutting down and has no slot for this request before it stops; retry after the time given"
        }
        ShedReason::Budget => {
            "budget: no slot for this retry within the request's retry time (retry.max_elapsed); retry after the time given"
        }
    }
}

/// Lets the client finish sending a body its early answer does not need.
fn discard_request(request: Request<ProxyBody>) {
    let (head, body) = request.into_parts();
    discard(body, expects_continue(&head.headers));
}

/// Serves one request for `upstream`; every path ends in a response. A request body
/// held in memory may go silent for at most `body_idle`. `bound` holds the upstream
/// connections the client connection drives.
///
/// hyper moves this future (the service's, around it) on every request, so whatever
/// only a rare path awaits (a body read to classify or keep a throttle, a signature,
/// a retry's sleep) is boxed where it is awaited: the common path pays neither the
/// copying of room it never uses nor an allocation. For the same reason this and the
/// futures it awaits on the common path are not `async fn`s, which hold their
/// arguments twice (as arguments and as locals).
#[inline(always)]
pub fn handle<'a>(
    upstream: &'a Arc<Upstream>,
    req: Request<Incoming>,
    body_idle: Duration,
    bound: &'a Bound,
) -> impl Future<Output = Response<ProxyBody>> + 'a {
    let mode = upstream.settings.access_log;
    let line = access::wants(mode, &upstream.access_seen, req.method(), req.uri());
    let (mut head, body) = req.into_parts();
    async move {
        let record = Record::default();
        // One block rather than an inner async fn: a future nested in this one would be
        // one more copy of the request, and one more move of its room, per request.
        let response = 'served: {
            let clock = upstream.clock();
            let mut ctx = Ctx::new(upstream, &head.headers, clock.now(), &record, bound);
            upstream.deposit(ctx.arrived);
            upstream.client.rewrite(&mut head);
            let (body, template) = match ctx.hold(&mut head, body, body_idle).await {
                Ok(held) => held,
                Err(answer) => break 'served answer,
            };
            let mut route = upstream.lanes.route(&head, body.held());
            if let Some(tenants) = upstream.lanes.tenants() {
                let peer = head.extensions.get::<ClientIp>().map(|c| c.0);
                route.who = Some(tenants.ticket(&head.headers, peer));
            }
            ctx.watch_batch |= route.batch;
            let arrival = Arrival {
                at: ctx.arrived,
                patience: ctx.patience,
                replayable: template.is_some(),
                deadline: ctx.grpc_timeout,
            };
            let mut attempts = Sender {
                ctx: &ctx,
                first: Some(Request::from_parts(head, body)),
                template,
                readied: None,
            };
            match upstream.drive(&mut attempts, &mut route, arrival).await {
                Ended::Answer(response) => response,
                Ended::Exhausted(kept) => ctx.give_up(kept, None),
                Ended::Concluded(ending) => ctx.conclude(ending),
            }
        };
        if let Some(line) = line {
            access::write(&upstream.settings.name, &line, &record, &response);
        }
        response
    }
}

/// One request's attempts as the driver sends them: the request to send first, a
/// template for the ones sent again, the one readied, and when the latest attempt's
/// answer must be complete.
struct Sender<'c, 'a> {
    ctx: &'c Ctx<'a>,
    first: Option<Request<ProxyBody>>,
    template: Option<Template>,
    readied: Option<Request<ProxyBody>>,
}

impl Dispatch for Sender<'_, '_> {
    type Answer = Response<ProxyBody>;

    fn ready(&mut self) -> bool {
        self.readied = self
            .first
            .take()
            .or_else(|| self.template.as_ref().map(Template::request));
        self.readied.is_some()
    }

    fn drop_attempt(&mut self, queued: Duration) {
        if let Some(request) = self.readied.take() {
            discard_request(request);
        }
        self.ctx.record.queued_for(queued);
    }

    #[inline(always)]
    fn send<'s>(
        &'s mut self,
        pass: Pass,
        queued: Duration,
        _attempt: u32,
        route: &'s Route,
    ) -> impl Future<Output = Turn<Response<ProxyBody>>> + 's {
        self.ctx.record.queued_for(queued);
        let request = self
            .readied
            .take()
            .unwrap_or_else(|| Request::new(ProxyBody::full("")));
        self.ctx.attempt(request, pass, route)
    }

    async fn read_throttle(
        &mut self,
        answer: Response<ProxyBody>,
        read_by: Instant,
    ) -> Result<(Response<ProxyBody>, bool), Response<ProxyBody>> {
        let ctx = self.ctx;
        let (parts, body) = answer.into_parts();
        let reading = ctx.clock.timeout_at(read_by, read_error_body_of(body));
        let Some(Some(body)) = Box::pin(reading).await else {
            let message = "the upstream's throttle answer broke off";
            let reason = Reason::UpstreamUnavailable;
            return Err(ctx.local(reason, Outcome::Error, message, None));
        };
        let held = !matches!(body, ProxyBody::Prefixed { .. } | ProxyBody::Stream(_));
        Ok((Response::from_parts(parts, body), held))
    }
}

/// What every step of one request needs.
struct Ctx<'a> {
    upstream: &'a Arc<Upstream>,
    clock: &'a Clock,
    arrived: Instant,
    dialect: Dialect,
    /// A gRPC client's own deadline, which bounds every wait, from arrival.
    grpc_timeout: Option<Duration>,
    /// How long an AWS SDK's request may wait for its slot rather than be shed.
    patience: Option<Duration>,
    watch_batch: bool,
    record: &'a Record,
    /// The upstream connections the client connection drives.
    bound: &'a Bound,
}

impl<'a> Ctx<'a> {
    fn new(
        upstream: &'a Arc<Upstream>,
        headers: &HeaderMap,
        arrived: Instant,
        record: &'a Record,
        bound: &'a Bound,
    ) -> Ctx<'a> {
        let settings = &*upstream.settings;
        let dialect = Dialect {
            preset: settings.preset,
            grpc: is_grpc(headers),
        };
        Ctx {
            upstream,
            clock: upstream.clock(),
            arrived,
            dialect,
            grpc_timeout: dialect.grpc.then(|| hints::grpc_timeout(headers)).flatten(),
            patience: settings
                .preset
                .is_aws()
                .then(|| sdk_patience(headers))
                .flatten(),
            // The DynamoDB rule tells a batch as it routes (`Route::batch`).
            watch_batch: settings.preset.is_aws()
                && *upstream.lanes.rule() != Rule::DynamoDb
                && is_batch(headers),
            record,
            bound,
        }
    }

    /// Strips the client's signature and holds the body as far as replay or signing
    /// needs; returns the body to send first and, when it can be sent again, a template
    /// for retries. An error is the client's answer.
    async fn hold(
        &self,
        head: &mut Parts,
        body: Incoming,
        idle: Duration,
    ) -> Result<(ProxyBody, Option<Template>), Response<ProxyBody>> {
        let upstream = self.upstream;
        if let Some(signer) = &upstream.signer
            && let Err(error) = signer.strip(&mut head.headers)
        {
            discard(ProxyBody::Stream(body), expects_continue(&head.headers));
            return Err(self.local(Reason::BadRequest, Outcome::Error, &error.to_string(), None));
        }
        let retry = &upstream.settings.retry;
        // A body is held to be replayed, or to be hashed for its signature.
        let signed_body = upstream.signer.as_ref().is_some_and(|s| s.needs_body());
        let hold = if signed_body {
            SIGNED_BODY_LIMIT.max(retry.max_body_bytes)
        } else {
            retry.max_body_bytes
        };
        // A lane rule that reads the body (DynamoDB's TableName, a model) needs its
        // start, however long the body is.
        let routed =
            upstream.lanes.rule().reads_body() || upstream.settings.lanes.cost != Unit::Requests;
        // A body to sign past `hold` is refused below, unread.
        let read = if routed && !signed_body {
            let scan = upstream
                .lanes
                .rule()
                .scan(upstream.settings.lanes.max_scan_bytes);
            read_start(body, hold, scan, Some(idle)).await
        } else if retry.max_attempts > 1 || signed_body {
            read_up_to(body, hold, Some(idle)).await
        } else {
            Ok(ProxyBody::Stream(body))
        };
        let body = read.map_err(|error| {
            let message = format!("cannot read the request body: {error}");
            self.local(Reason::BadRequest, Outcome::Error, &message, None)
        })?;
        if signed_body && body.replay().is_none() {
            let message = format!(
                "the request body is larger than {hold} bytes, the most easeoff holds to sign it"
            );
            discard(body, expects_continue(&head.headers));
            return Err(self.local(Reason::TooLarge, Outcome::Error, &message, None));
        }
        // A copy to replay, when retries are on and the body is in memory and small
        // enough (one held only for signing is sent once, as a streamed one would be).
        let replayable = retry.max_attempts > 1
            && body
                .size_hint()
                .exact()
                .is_some_and(|n| n <= retry.max_body_bytes);
        let template = body
            .replay()
            .filter(|_| replayable)
            .map(|copy| Template::of(head, copy));
        Ok((body, template))
    }

    /// One attempt that has its slots: the signature, the send. Not an `async fn`:
    /// that would hold the request twice in its state (its argument and a local), and
    /// the state is moved on every request.
    #[inline(always)]
    fn attempt<'b>(
        &'b self,
        mut request: Request<ProxyBody>,
        pass: Pass,
        route: &'b Route,
    ) -> impl Future<Output = Turn<Response<ProxyBody>>> + 'b {
        let upstream = self.upstream;
        async move {
            let slot = *pass.slot();
            // Signed at dispatch: a retry minutes later needs a signature of its own.
            if let Some(signer) = &upstream.signer
                && let Err(error) = Box::pin(signer.sign(&mut request)).await
            {
                upstream.metrics.signing_failures.inc();
                let settled = upstream.settle(pass, Settle::NoAnswer);
                let message = error.to_string();
                let answer = self.local(Reason::Signing, Outcome::Error, &message, None);
                return Turn::Answer(answer, settled);
            }
            let sent = {
                let _in_flight = InFlight::enter(&upstream.metrics.in_flight);
                upstream.client.send(request, Some(self.bound)).await
            };
            let took = self
                .clock
                .now()
                .saturating_duration_since(slot.dispatched_at);
            upstream
                .metrics
                .upstream_duration
                .observe(took.as_secs_f64());
            self.record.sent(took);
            match sent {
                Ok(response) => {
                    let read_by = after(slot.dispatched_at, upstream.client.request_timeout());
                    self.answered(response, pass, read_by, route).await
                }
                Err(SendError::Connect(cause)) => {
                    let settled = upstream.settle(pass, Settle::NoConnection(&cause));
                    let wait = settled.backoff();
                    let message = format!("cannot connect to the upstream: {cause}");
                    if cause.is_lasting() {
                        // A certificate or protocol mismatch fails the same way at once:
                        // the client hears why now, and the backoff spares the upstream.
                        let reason = Reason::UpstreamUnavailable;
                        let answer = self.local(reason, Outcome::Error, &message, Some(wait));
                        return Turn::Answer(with_cause(answer, &cause), settled);
                    }
                    let outcome = attempt::Outcome::ConnectFailed { wait };
                    Turn::Outcome(outcome, None, Cow::Owned(message), settled)
                }
                Err(error) => {
                    let settled = upstream.settle(pass, Settle::NoAnswer);
                    let (reason, outcome) = match error {
                        SendError::Timeout(_) => (Reason::Timeout, Outcome::Timeout),
                        _ if error.head_too_large() => {
                            upstream.reached(None, false);
                            oversized::warn(
                                &upstream.settings.name,
                                &error,
                                upstream.clock().now(),
                            );
                            (Reason::UpstreamHeadTooLarge, Outcome::Error)
                        }
                        // It connected, whatever broke afterwards.
                        _ => {
                            upstream.reached(None, false);
                            (Reason::UpstreamUnavailable, Outcome::Error)
                        }
                    };
                    let answer = self.local(reason, outcome, &error.to_string(), None);
                    Turn::Answer(answer, settled)
                }
            }
        }
    }

    /// The upstream answered: hints, classification, and the pass settled with the
    /// whole answer. An answer that names its bucket (`from_response`) is judged in
    /// that bucket's lane.
    async fn answered(
        &self,
        response: Response<Incoming>,
        pass: Pass,
        deadline: Instant,
        route: &Route,
    ) -> Turn<Response<ProxyBody>> {
        let upstream = self.upstream;
        let status = response.status().as_u16();
        let (mut parts, body) = response.into_parts();
        strip_hop_by_hop(&mut parts.headers);
        // The lanes the attempt held are told nothing when the answer names another.
        let pass = match self.named_lane(route, &parts.headers) {
            Some(lane) => {
                let mut pass = pass;
                let flights = pass.take_flights();
                pass.for_lane(lane).with_flights(flights)
            }
            None => pass,
        };
        let (verdict, body, bytes) = match self.classify(&parts, body, deadline).await {
            Ok(classified) => classified,
            Err(answer) => {
                upstream.reached(Some(status), false);
                let settled = upstream.settle(pass, Settle::NoAnswer);
                return Turn::Answer(answer, settled);
            }
        };
        // A rate limit answered with 403 (GitHub's) is no refusal of the credentials;
        // only a 401 or 403 asks (seven header look-ups are no cost for every answer).
        let limited = matches!(status, 401 | 403)
            && (matches!(verdict, Verdict::Throttle(_)) || throttle::rate_limited(&parts.headers));
        upstream.reached(Some(status), limited);
        // Read after the classification, so that the reading is not held across it.
        let reading = hints::stated(&parts.headers, self.clock.wall());
        let Verdict::Throttle(signal) = verdict else {
            let answer = Answer {
                reading: reading.as_ref(),
                ..Answer::of(verdict)
            };
            let (body, settled) = self.watch(pass, &answer, route.settles, &parts.headers, body);
            let outcome = Outcome::of_status(parts.status.as_u16());
            self.count(outcome);
            return Turn::Answer(Response::from_parts(parts, body), settled);
        };
        let routed = bytes
            .as_deref()
            .map(|bytes| self.throttled_lanes(bytes, route))
            .unwrap_or_default();
        let named: Vec<_> = routed
            .iter()
            .map(|(lane, r)| (Arc::clone(lane), r.reason.as_str(), r.resource.as_str()))
            .collect();
        let lanes = if named.is_empty() {
            Concerns::Held
        } else {
            Concerns::Named(&named)
        };
        let answer = Answer {
            verdict,
            reading: reading.as_ref(),
            lanes,
            cost: None,
        };
        let settled = upstream.settle(pass, Settle::Answer(&answer));
        Turn::Throttled {
            answer: Response::from_parts(parts, body),
            refused: matches!(reading.and_then(|r| r.wait), Some((Pushback::Refuse, _))),
            overload: signal == throttle::Signal::Overload,
            read_by: deadline,
            settled,
        }
    }

    /// The verdict on an answer, reading a small error body when the head alone does
    /// not decide (the body read is returned too); an error is the client's answer
    /// (the attempt got none).
    async fn classify(
        &self,
        parts: &http::response::Parts,
        body: Incoming,
        deadline: Instant,
    ) -> Result<(Verdict, ProxyBody, Option<Bytes>), Response<ProxyBody>> {
        let upstream = self.upstream;
        let (status, headers): (StatusCode, &HeaderMap) = (parts.status, &parts.headers);
        match upstream.classifier.classify_head(status, headers) {
            Head::Decided(verdict) => return Ok((verdict, ProxyBody::Stream(body), None)),
            Head::NeedsBody => {}
        }
        let reading = self.clock.timeout_at(deadline, read_error_body(body));
        match Box::pin(reading).await {
            Some(Ok((body, Some(bytes)))) => Ok((
                upstream.classifier.classify_body(status, headers, &bytes),
                body,
                Some(bytes),
            )),
            Some(Ok((body, None))) => Ok((Verdict::Success, body, None)),
            Some(Err(error)) => {
                let message = format!("the upstream's answer broke off: {error}");
                let reason = Reason::UpstreamUnavailable;
                Err(self.local(reason, Outcome::Error, &message, None))
            }
            None => {
                let message = format!(
                    "no complete answer within {:?}",
                    upstream.client.request_timeout()
                );
                Err(self.local(Reason::Timeout, Outcome::Timeout, &message, None))
            }
        }
    }

    /// Hands the client the upstream's throttle: `fresh` if given, else the one kept.
    fn give_up(
        &self,
        kept: Option<Response<ProxyBody>>,
        fresh: Option<Response<ProxyBody>>,
    ) -> Response<ProxyBody> {
        let answer = fresh.or(kept).unwrap_or_else(|| {
            reply(
                Reason::Shed(ShedReason::Budget),
                self.dialect,
                &self.upstream.settings.name,
                "throttled",
                None,
            )
        });
        self.count(Outcome::Throttled);
        answer
    }

    /// The answer for a decision that ends the request: the throttle given back, a
    /// shed, or the upstream unreachable.
    fn conclude(&self, ending: Conclusion<Response<ProxyBody>>) -> Response<ProxyBody> {
        let attempts = ending.attempts;
        match ending.next {
            Next::Shed { retry_after } => {
                let mut why = ending.shed.unwrap_or(ShedReason::Deadline);
                // A retry's deadline is the retry time, not the queue's.
                if why == ShedReason::Deadline && attempts > 1 {
                    why = ShedReason::Budget;
                }
                self.shed(why, Some(retry_after))
            }
            Next::Unreachable { retry_after, .. } => {
                let (reason, outcome) = (Reason::UpstreamUnavailable, Outcome::Error);
                let answer = self.local(reason, outcome, &ending.message, Some(retry_after));
                match &ending.cause {
                    Some(cause) => with_cause(answer, cause),
                    None => answer,
                }
            }
            Next::Retry { .. } | Next::GiveBack(_) | Next::ReadThrottle => {
                self.give_up(ending.kept, ending.answer)
            }
        }
    }

    /// A shed answer, counted by its reason.
    fn shed(&self, why: ShedReason, retry_after: Option<Duration>) -> Response<ProxyBody> {
        self.upstream.metrics.shed(why).inc();
        self.local(
            Reason::Shed(why),
            Outcome::Shed,
            shed_message(why),
            retry_after,
        )
    }

    /// Counts the request's final outcome.
    fn count(&self, outcome: Outcome) {
        self.upstream.metrics.request(outcome).inc();
        self.record.counted(outcome);
    }

    /// easeoff's own answer, counted.
    fn local(
        &self,
        reason: Reason,
        outcome: Outcome,
        message: &str,
        retry_after: Option<Duration>,
    ) -> Response<ProxyBody> {
        tracing::debug!(upstream = %&self.upstream.settings.name, ?reason, message, "local answer");
        self.count(outcome);
        reply(
            reason,
            self.dialect,
            &self.upstream.settings.name,
            message,
            retry_after,
        )
    }

    /// The lane of the bucket the answer names (`from_response`), learned for the
    /// request's key.
    fn named_lane(&self, route: &Route, headers: &HeaderMap) -> Option<Arc<Lane>> {
        let header = self.upstream.settings.lanes.from_response.as_ref()?;
        let bucket = route::named_bucket(headers, header)?;
        let lanes = &self.upstream.lanes;
        if let Some(key) = &route.key {
            lanes.learn(key, bucket);
        }
        Some(lanes.get(bucket))
    }

    /// The lanes a DynamoDB throttle names in its `ThrottlingReasons`: an index's
    /// reason raises its base table's lane of the same access; a hot partition raises
    /// the request's hot-key lane (made now if new).
    fn throttled_lanes(&self, body: &[u8], route: &Route) -> Vec<(Arc<Lane>, dynamodb::Reason)> {
        let lanes = &self.upstream.lanes;
        if *lanes.rule() != Rule::DynamoDb {
            return Vec::new();
        }
        let requested = route
            .first
            .name()
            .rsplit_once(':')
            .map(|(_, access)| access);
        dynamodb::throttling_reasons(body)
            .into_iter()
            .filter_map(|reason| {
                let table = reason.table.as_deref()?;
                let suffix = match reason.access {
                    Some(access) if access != dynamodb::Access::Control => access.as_str(),
                    _ => requested.unwrap_or("write"),
                };
                let hot = reason.limit == Some(dynamodb::Limit::KeyRangeThroughputExceeded);
                let name = match route.hot_lane().filter(|_| hot) {
                    Some(hot) => hot,
                    None => route::lane_name(table, suffix),
                };
                Some((lanes.get(&name), reason))
            })
            .collect()
    }

    /// Settles `answer` now, or wraps `body` so it is settled once the parts that
    /// decide it have passed: a batch answer's Unprocessed* map, a gRPC answer's
    /// trailers; an answer that says what the request cost (`settles`) is read for it.
    fn watch(
        &self,
        pass: Pass,
        answer: &Answer<'_>,
        settles: bool,
        headers: &HeaderMap,
        body: ProxyBody,
    ) -> (ProxyBody, Settled) {
        let verdict = answer.verdict;
        let unit = pass.lane().unit();
        let cost = (verdict == Verdict::Success && settles && unit != Unit::Requests)
            .then(|| AnswerCost::new(unit, is_event_stream(headers)));
        let upstream = self.upstream;
        let ProxyBody::Stream(inner) = body else {
            let mut cost = cost;
            if let (Some(cost), Some(held)) = (&mut cost, body.held()) {
                cost.feed(held);
            }
            let answer = Answer {
                cost: cost.as_ref().filter(|_| body.held().is_some()),
                ..*answer
            };
            return (body, upstream.settle(pass, Settle::Answer(&answer)));
        };
        let batch = verdict == Verdict::Success && self.watch_batch;
        let grpc = verdict == Verdict::Success
            && self.dialect.preset == Preset::Grpc
            && !headers.contains_key("grpc-status");
        if !batch && !grpc {
            let bill = cost.as_ref().map(|_| pass.bill());
            let mut settled = upstream.settle(pass, Settle::Answer(answer));
            // A capped request that streams is out until its body has passed (a
            // stream's last event): the server's slot is busy until then. One whose
            // small body the server wrote with its head freed the slot already; held
            // to the body's end it would count the client's reading as the server's.
            let flights = if streams(headers) {
                settled.take_flights()
            } else {
                Vec::new()
            };
            let watch = match (cost, bill) {
                (Some(cost), Some(bill)) => Some(Watch::cost(Arc::clone(upstream), cost, bill)),
                _ => None,
            };
            return match watch {
                _ if !flights.is_empty() => {
                    let watch = Landing::new(flights, watch.map(|w| w as Box<dyn WatchFrames>));
                    (ProxyBody::Watched { inner, watch }, settled)
                }
                None => (ProxyBody::Stream(inner), settled),
                Some(watch) => (ProxyBody::Watched { inner, watch }, settled),
            };
        }
        let upstream = Arc::clone(upstream);
        let (pass, settled) = pass.defer();
        let watch = if batch {
            Watch::batch(upstream, pass, answer.reading.copied())
        } else {
            Watch::grpc(upstream, pass, answer.reading.copied())
        };
        let watch = watch.with_cost(cost);
        (ProxyBody::Watched { inner, watch }, settled)
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

/// Whether an answer is a stream of server-sent events.
/// Whether an answer's body comes over time: an event stream, or a body of unknown or
/// more than 64 KiB length.
fn streams(headers: &HeaderMap) -> bool {
    const SMALL: u64 = 64 << 10;
    is_event_stream(headers)
        || headers
            .get(http::header::CONTENT_LENGTH)
            .and_then(|v| v.to_str().ok())
            .and_then(|v| v.parse::<u64>().ok())
            .is_none_or(|len| len > SMALL)
}

fn is_event_stream(headers: &HeaderMap) -> bool {
    headers
        .get(http::header::CONTENT_TYPE)
        .is_some_and(|v| v.as_bytes().starts_with(b"text/event-stream"))
}

fn is_grpc(headers: &HeaderMap) -> bool {
    headers
        .get(http::header::CONTENT_TYPE)
        .is_some_and(|v| v.as_bytes().starts_with(b"application/grpc"))
}

/// Names why no connection could be made, beside the reason every local answer has.
fn with_cause(mut answer: Response<ProxyBody>, cause: &ConnectCause) -> Response<ProxyBody> {
    if let Ok(value) = HeaderValue::try_from(cause.to_string()) {
        answer.headers_mut().insert(CAUSE_HEADER, value);
    }
    answer
}

/// Counts an attempt in flight until dropped, also when the client goes away mid-way.
struct InFlight<'a>(&'a ShardedGauge);

impl<'a> InFlight<'a> {
    fn enter(gauge: &'a ShardedGauge) -> Self {
        gauge.inc();
        InFlight(gauge)
    }
}

impl Drop for InFlight<'_> {
    fn drop(&mut self) {
        self.0.dec();
    }
}
