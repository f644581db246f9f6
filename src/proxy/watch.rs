//! Watches a streamed answer whose verdict lies in its body or trailers (a DynamoDB
//! batch answer's Unprocessed* map, a gRPC answer's `grpc-status`) and records the
//! verdict once they have passed.

use std::sync::Arc;

use bytes::Bytes;
use http_body::Frame;

use crate::lane::Pass;
use crate::throttle::{Signal, UnprocessedScan, Verdict};
use crate::transport::WatchFrames;
use crate::upstream::Upstream;

/// What a watched body looks for, and where it reports.
pub struct Watch {
    upstream: Arc<Upstream>,
    pass: Pass,
    /// A DynamoDB batch answer: non-empty Unprocessed* is a partial throttle.
    scan: Option<UnprocessedScan>,
    /// A gRPC answer: `grpc-status` in the trailers decides.
    grpc: bool,
    verdict: Verdict,
    reported: bool,
}

impl Watch {
    /// Watches a DynamoDB batch answer.
    pub fn batch(upstream: Arc<Upstream>, pass: Pass) -> Box<Watch> {
        Box::new(Watch::new(
            upstream,
            pass,
            Some(UnprocessedScan::default()),
            false,
        ))
    }

    /// Watches a gRPC answer's trailers.
    pub fn grpc(upstream: Arc<Upstream>, pass: Pass) -> Box<Watch> {
        Box::new(Watch::new(upstream, pass, None, true))
    }

    fn new(
        upstream: Arc<Upstream>,
        pass: Pass,
        scan: Option<UnprocessedScan>,
        grpc: bool,
    ) -> Watch {
        Watch {
            upstream,
            pass,
            scan,
            grpc,
            verdict: Verdict::Success,
            reported: false,
        }
    }

    fn record(&mut self) {
        if !self.reported {
            self.reported = true;
            self.upstream.settle(&self.pass, Some(self.verdict), None);
        }
    }
}

impl WatchFrames for Watch {
    fn see(&mut self, frame: &Frame<Bytes>) {
        if let (Some(scan), Some(data)) = (&mut self.scan, frame.data_ref())
            && scan.feed(data)
        {
            self.verdict = Verdict::Throttle(Signal::Partial);
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
