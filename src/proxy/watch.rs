//! Watches a streamed answer whose verdict lies in its body or trailers (a DynamoDB
//! batch answer's Unprocessed* map, a gRPC answer's `grpc-status`) and records the
//! verdict once they have passed; and one whose body says what the request cost
//! (`usage`, `ConsumedCapacity`), settling its lanes' reservations at its end.

use std::sync::Arc;

use bytes::Bytes;
use http_body::Frame;

use crate::cost::answer::AnswerCost;
use crate::flights::Flight;
use crate::hints::Reading;
use crate::lane::{Answer, Concerns, Deferred};
use crate::route::dynamodb::unprocessed_tables;
use crate::throttle::{Signal, UnprocessedScan, Verdict};
use crate::transport::WatchFrames;
use crate::upstream::{Settle, Upstream};

/// What a watched body looks for, and where it reports.
pub struct Watch {
    upstream: Arc<Upstream>,
    /// Taken when the verdict is recorded.
    pass: Option<Deferred>,
    /// What the answer's head said (rate-limit windows), settled with the verdict.
    reading: Option<Reading>,
    /// A DynamoDB batch answer: non-empty Unprocessed* is a partial throttle.
    scan: Option<UnprocessedScan>,
    /// A gRPC answer: `grpc-status` in the trailers decides.
    grpc: bool,
    verdict: Verdict,
    /// The start of a batch answer that spans several tables' lanes, to tell which
    /// tables were left unprocessed; `None` past `KEPT_MAX` (then every lane is told).
    kept: Option<Vec<u8>>,
    /// Reads what the request cost, for lanes that pace in units.
    cost: Option<AnswerCost>,
    /// The pass whose cost is settled at the end, its verdict already recorded.
    bill: Option<Deferred>,
}

/// Holds a capped request's flights (`max_in_flight`) until its answer's body has
/// passed or broken off, beside what else watches the body.
#[derive(Debug)]
pub struct Landing {
    _flights: Vec<Flight>,
    inner: Option<Box<dyn WatchFrames>>,
}

impl Landing {
    /// Holds `flights` for the body's life; `inner` watches it as before.
    pub fn new(flights: Vec<Flight>, inner: Option<Box<dyn WatchFrames>>) -> Box<Landing> {
        Box::new(Landing {
            _flights: flights,
            inner,
        })
    }
}

impl WatchFrames for Landing {
    fn see(&mut self, frame: &Frame<Bytes>) {
        if let Some(inner) = &mut self.inner {
            inner.see(frame);
        }
    }

    fn finish(&mut self) {
        if let Some(inner) = &mut self.inner {
            inner.finish();
        }
    }
}

/// The most of a batch answer kept to judge its tables one by one.
const KEPT_MAX: usize = 1 << 20;

impl Watch {
    /// Watches a DynamoDB batch answer, whose head said `reading`.
    pub fn batch(upstream: Arc<Upstream>, pass: Deferred, reading: Option<Reading>) -> Box<Watch> {
        let scan = Some(UnprocessedScan::default());
        Box::new(Watch::new(upstream, pass, reading, scan, false))
    }

    /// Watches a gRPC answer's trailers; its head said `reading`.
    pub fn grpc(upstream: Arc<Upstream>, pass: Deferred, reading: Option<Reading>) -> Box<Watch> {
        Box::new(Watch::new(upstream, pass, reading, None, true))
    }

    /// Watches an answer only for what its request cost, to settle it in `bill` (a
    /// pass whose verdict is recorded).
    pub fn cost(upstream: Arc<Upstream>, cost: AnswerCost, bill: Deferred) -> Box<Watch> {
        Box::new(Watch {
            upstream,
            pass: None,
            reading: None,
            scan: None,
            grpc: false,
            kept: None,
            verdict: Verdict::Success,
            cost: Some(cost),
            bill: Some(bill),
        })
    }

    /// Also reads the answer for what its request cost.
    pub fn with_cost(mut self: Box<Watch>, cost: Option<AnswerCost>) -> Box<Watch> {
        self.cost = cost;
        self
    }

    fn new(
        upstream: Arc<Upstream>,
        pass: Deferred,
        reading: Option<Reading>,
        scan: Option<UnprocessedScan>,
        grpc: bool,
    ) -> Watch {
        let kept = (scan.is_some() && pass.pass().is_many()).then(Vec::new);
        Watch {
            upstream,
            pass: Some(pass),
            reading,
            scan,
            grpc,
            kept,
            verdict: Verdict::Success,
            cost: None,
            bill: None,
        }
    }

    fn record(&mut self) {
        let cost = self.cost.take();
        if let (Some(cost), Some(bill)) = (&cost, self.bill.take()) {
            let _settled = self.upstream.settle(bill.into_pass(), Settle::Cost(cost));
        }
        let Some(pass) = self.pass.take() else {
            return;
        };
        let tables;
        let unprocessed;
        let lanes = match (&self.kept, self.verdict) {
            (Some(kept), Verdict::Throttle(Signal::Partial)) => {
                tables = unprocessed_tables(kept);
                unprocessed = |table: &str| tables.contains(table);
                Concerns::ByTable(&unprocessed)
            }
            _ => Concerns::Held,
        };
        let answer = Answer {
            verdict: self.verdict,
            reading: self.reading.as_ref(),
            lanes,
            // A throttled batch used none of what it was reserved at; it stays reserved.
            cost: cost.as_ref().filter(|_| self.verdict == Verdict::Success),
        };
        let _settled = self
            .upstream
            .settle(pass.into_pass(), Settle::Answer(&answer));
    }
}

impl WatchFrames for Watch {
    fn see(&mut self, frame: &Frame<Bytes>) {
        if let (Some(cost), Some(data)) = (&mut self.cost, frame.data_ref()) {
            cost.feed(data);
        }
        if let (Some(scan), Some(data)) = (&mut self.scan, frame.data_ref()) {
            if scan.feed(data) {
                self.verdict = Verdict::Throttle(Signal::Partial);
            }
            if let Some(kept) = &mut self.kept {
                if kept.len() + data.len() > KEPT_MAX {
                    self.kept = None;
                } else {
                    kept.extend_from_slice(data);
                }
            }
        }
        if self.grpc
            && let Some(trailers) = frame.trailers_ref()
            && trailers.get("grpc-status").is_some_and(|s| s == "8")
        {
            self.verdict = Verdict::Throttle(Signal::Grpc);
        }
    }

    fn finish(&mut self) {
        self.record();
    }
}

impl std::fmt::Debug for Watch {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Watch")
            .field("verdict", &self.verdict)
            .finish()
    }
}

impl Drop for Watch {
    /// A client that leaves mid-body still gets what was seen counted.
    fn drop(&mut self) {
        self.record();
    }
}
