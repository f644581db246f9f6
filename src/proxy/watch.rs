//! Watches a streamed answer whose verdict lies in its body or trailers (a DynamoDB
//! batch answer's Unprocessed* map, a gRPC answer's `grpc-status`) and records the
//! verdict once they have passed.

use std::sync::Arc;

use bytes::Bytes;
use http_body::Frame;

use crate::lane::Deferred;
use crate::route::dynamodb::unprocessed_tables;
use crate::throttle::{Signal, UnprocessedScan, Verdict};
use crate::transport::WatchFrames;
use crate::upstream::{Settle, Upstream};

/// What a watched body looks for, and where it reports.
pub struct Watch {
    upstream: Arc<Upstream>,
    /// Taken when the verdict is recorded.
    pass: Option<Deferred>,
    /// A DynamoDB batch answer: non-empty Unprocessed* is a partial throttle.
    scan: Option<UnprocessedScan>,
    /// A gRPC answer: `grpc-status` in the trailers decides.
    grpc: bool,
    verdict: Verdict,
    /// The start of a batch answer that spans several tables' lanes, to tell which
    /// tables were left unprocessed; `None` past `KEPT_MAX` (then every lane is told).
    kept: Option<Vec<u8>>,
}

/// The most of a batch answer kept to judge its tables one by one.
const KEPT_MAX: usize = 1 << 20;

impl Watch {
    /// Watches a DynamoDB batch answer.
    pub fn batch(upstream: Arc<Upstream>, pass: Deferred) -> Box<Watch> {
        Box::new(Watch::new(
            upstream,
            pass,
            Some(UnprocessedScan::default()),
            false,
        ))
    }

    /// Watches a gRPC answer's trailers.
    pub fn grpc(upstream: Arc<Upstream>, pass: Deferred) -> Box<Watch> {
        Box::new(Watch::new(upstream, pass, None, true))
    }

    fn new(
        upstream: Arc<Upstream>,
        pass: Deferred,
        scan: Option<UnprocessedScan>,
        grpc: bool,
    ) -> Watch {
        let kept = (scan.is_some() && pass.pass().is_many()).then(Vec::new);
        Watch {
            upstream,
            pass: Some(pass),
            scan,
            grpc,
            kept,
            verdict: Verdict::Success,
        }
    }

    fn record(&mut self) {
        let Some(pass) = self.pass.take() else {
            return;
        };
        let pass = pass.into_pass();
        let _settled = match (&self.kept, self.verdict) {
            (Some(kept), Verdict::Throttle(Signal::Partial)) => {
                let tables = unprocessed_tables(kept);
                let unprocessed = |table: &str| tables.contains(table);
                self.upstream.settle(pass, Settle::ByTable(&unprocessed))
            }
            _ => self
                .upstream
                .settle(pass, Settle::Answer(Some(self.verdict), None)),
        };
    }
}

impl WatchFrames for Watch {
    fn see(&mut self, frame: &Frame<Bytes>) {
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
