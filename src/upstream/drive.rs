//! The attempt driver: one client request's attempts, as the proxy and `easeoff
//! simulate` both run them. Each attempt waits for a slot in each of its lanes (or is
//! shed), passes the connection backoff, and is sent by a [`Dispatch`] (the network,
//! or the modelled upstream); the attempt policy then says what follows, and a retry
//! takes in the lanes the answer made (`Lanes::refresh`).

use std::borrow::Cow;
use std::time::Duration;

use super::{Control, Settle};
use crate::attempt::{self, Attempts, Next};
use crate::clock::Instant;
use crate::connect_backoff::Admission;
use crate::deadline::after;
use crate::lane::{Lane, Pass, Route, Settled};
use crate::pacer::{Shed, ShedReason};
use crate::transport::ConnectCause;

/// What one attempt that got its slots came to, its pass settled: the request's
/// answer; an upstream throttle (its answer, whether it asked not to be retried and
/// whether it was an overload) for the driver to ask the policy about; or another
/// outcome, with the answer it concerns and the words for the client if it gives up.
pub enum Turn<A> {
    Answer(A, Settled),
    Throttled {
        answer: A,
        refused: bool,
        overload: bool,
        /// When the answer must be complete, if its body is read.
        read_by: Instant,
        settled: Settled,
    },
    Outcome(attempt::Outcome, Option<A>, Cow<'static, str>, Settled),
}

/// One client request as the driver takes it: when it arrived, how long an AWS SDK's
/// request may wait for its slot, whether its body can be sent again, and a gRPC
/// client's own deadline.
#[derive(Clone, Copy, Debug)]
pub struct Arrival {
    pub at: Instant,
    pub patience: Option<Duration>,
    pub replayable: bool,
    pub deadline: Option<Duration>,
}

/// Sends attempts: the proxy's network, or `simulate`'s modelled upstream.
pub trait Dispatch {
    /// An upstream's (or easeoff's own) answer.
    type Answer;

    /// Readies the next attempt; `false` when there is nothing to send again (a body
    /// that cannot be replayed).
    fn ready(&mut self) -> bool;

    /// The readied attempt will not go (no slot, or the connection backoff is
    /// closed); `queued` is how long it waited for a slot.
    fn drop_attempt(&mut self, queued: Duration);

    /// Sends the readied attempt holding `pass`, `queued` after it asked for its
    /// slots (`attempt`: how many the request has begun), and settles the pass.
    fn send<'s>(
        &'s mut self,
        pass: Pass,
        queued: Duration,
        attempt: u32,
        route: &'s Route,
    ) -> impl Future<Output = Turn<Self::Answer>> + 's;

    /// Reads a throttle's answer to its end, so that a retry may go (the connection
    /// returns to the pool, and the client gets the answer unchanged if the retry
    /// cannot go after all) by `read_by`: the answer and whether it is held in
    /// memory, or the client's answer if it broke off.
    fn read_throttle(
        &mut self,
        answer: Self::Answer,
        read_by: Instant,
    ) -> impl Future<Output = Result<(Self::Answer, bool), Self::Answer>>;
}

/// How a request's attempts ended.
pub enum Ended<A> {
    /// The request's answer.
    Answer(A),
    /// Nothing could be sent again: the latest throttle kept, if any, goes back.
    Exhausted(Option<A>),
    /// The policy ended the request.
    Concluded(Conclusion<A>),
}

/// A decision that ends a request without an answer of its own: the latest throttle
/// kept for the client, the last attempt's answer, the words for the client and why
/// the last slot was refused, if it was.
pub struct Conclusion<A> {
    pub next: Next,
    pub kept: Option<A>,
    pub answer: Option<A>,
    pub message: Cow<'static, str>,
    pub shed: Option<ShedReason>,
    /// Attempts begun.
    pub attempts: u32,
    /// Why the latest connection failed, when the upstream is unreachable.
    pub cause: Option<ConnectCause>,
}

impl Control {
    /// The attempt policy of one request.
    fn policy(&self, request: &Arrival) -> Attempts {
        let settings = &self.settings;
        let max_wait = settings
            .queue
            .max_wait
            .max(request.patience.unwrap_or_default());
        Attempts::new(
            &settings.retry,
            max_wait,
            request.replayable,
            request.deadline,
        )
        .with_client_retries(settings.preset.is_aws())
    }

    /// Runs one request's attempts through `dispatch` until it has an answer or the
    /// policy ends it. A request with `patience` waits for its slot as
    /// [`crate::pacer::Pacer::acquire_with`]'s `patient` says.
    pub async fn drive<D: Dispatch>(
        &self,
        dispatch: &mut D,
        route: &mut Route,
        request: Arrival,
    ) -> Ended<D::Answer> {
        let clock = self.clock();
        let mut policy = self.policy(&request);
        let (arrived, patient) = (request.at, request.patience.is_some());
        // The latest throttle, kept for the client in case the next attempt cannot go.
        let mut kept = None;
        loop {
            if !dispatch.ready() {
                return Ended::Exhausted(kept);
            }
            let wait_until = after(arrived, policy.begin(clock.now() - arrived));
            let asked = clock.now();
            let (next, answer, message, shed) =
                match self.acquire_route(route, wait_until, patient).await {
                    Err((shed, lane)) => {
                        dispatch.drop_attempt(clock.now().saturating_duration_since(asked));
                        let next = self.shed(&mut policy, &shed, lane, arrived);
                        (next, None, Cow::Borrowed(""), Some(shed.reason))
                    }
                    Ok(pass) => {
                        let queued = pass.slot().dispatched_at.saturating_duration_since(asked);
                        // Every way on ends the pass: a `Turn` holds the proof.
                        let turn = match self.admit(pass.slot().dispatched_at) {
                            Admission::Closed(wait) => {
                                dispatch.drop_attempt(queued);
                                let settled = self.settle(pass, Settle::Unsent);
                                let outcome = attempt::Outcome::BackoffClosed { wait };
                                Turn::Outcome(outcome, None, self.backoff_message(), settled)
                            }
                            Admission::Open | Admission::Probe => {
                                let attempt = policy.attempts();
                                dispatch.send(pass, queued, attempt, route).await
                            }
                        };
                        match turn {
                            Turn::Answer(answer, _) => return Ended::Answer(answer),
                            Turn::Throttled {
                                answer,
                                refused,
                                overload,
                                read_by,
                                settled,
                            } => {
                                if overload {
                                    policy.overloaded();
                                }
                                policy.asked(settled.hold());
                                let throttled = attempt::Outcome::Throttled { refused };
                                let next = self.decide(&mut policy, throttled, arrived);
                                if next != Next::ReadThrottle {
                                    (next, Some(answer), Cow::Borrowed(""), None)
                                } else {
                                    // Boxed: a rare path, kept out of every
                                    // request's future.
                                    match Box::pin(dispatch.read_throttle(answer, read_by)).await {
                                        Ok((answer, held)) => {
                                            let read = attempt::Outcome::ThrottleRead { held };
                                            let next = self.decide(&mut policy, read, arrived);
                                            (next, Some(answer), Cow::Borrowed(""), None)
                                        }
                                        Err(answer) => return Ended::Answer(answer),
                                    }
                                }
                            }
                            Turn::Outcome(outcome, answer, message, _) => {
                                let next = self.decide(&mut policy, outcome, arrived);
                                (next, answer, message, None)
                            }
                        }
                    }
                };
            let Next::Retry { after, cause } = next else {
                let unreachable = matches!(next, Next::Unreachable { .. });
                return Ended::Concluded(Conclusion {
                    next,
                    kept,
                    answer,
                    message,
                    shed,
                    attempts: policy.attempts(),
                    cause: self.connect_cause().filter(|_| unreachable),
                });
            };
            self.retried(cause);
            self.lanes.refresh(route);
            if answer.is_some() {
                kept = answer;
            }
            if !after.is_zero() {
                Box::pin(clock.sleep(after)).await;
            }
        }
    }

    /// Notes an attempt its lane shed before it went, and asks the policy about it.
    fn shed(&self, policy: &mut Attempts, shed: &Shed, lane: &Lane, arrived: Instant) -> Next {
        self.shed_noticed(lane);
        let outcome = attempt::Outcome::Shed {
            retry_after: shed.retry_after,
        };
        self.decide(policy, outcome, arrived)
    }

    /// Asks the policy about an attempt that got no answer, the retry budget last.
    fn decide(&self, policy: &mut Attempts, outcome: attempt::Outcome, arrived: Instant) -> Next {
        let now = self.clock().now();
        policy.after(outcome, now - arrived, || self.withdraw(now))
    }

    /// Why an attempt cannot go while the connection backoff is closed.
    pub fn backoff_message(&self) -> Cow<'static, str> {
        match self.connect_cause() {
            Some(cause) => Cow::Owned(format!(
                "the upstream cannot be reached ({cause}); connection backoff in force"
            )),
            None => Cow::Borrowed("the upstream cannot be reached; connection backoff in force"),
        }
    }
}
