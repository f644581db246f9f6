//! The access log: one structured line per request (or one in N) with what happened
//! to it: upstream, method, path without the query, status, outcome, attempts, queue
//! wait, upstream time and easeoff's reason. Off by default; when off, a request
//! costs one comparison here. The request path fills in a [`Record`] as it goes.

use std::sync::atomic::{AtomicU8, AtomicU32, AtomicU64, Ordering};
use std::time::Duration;

use http::{Method, Response, Uri};

use super::reply::REASON_HEADER;
use crate::config::AccessLog;
use crate::metrics::Outcome;

/// What one request went through, filled in by the request path. Atomics rather than
/// cells only so the request's future stays `Send`; nothing else shares it, so each
/// update is a plain load and store, not a locked read-modify-write.
#[derive(Default)]
pub struct Record {
    attempts: AtomicU32,
    queued_ns: AtomicU64,
    upstream_ns: AtomicU64,
    /// The outcome's index in [`Outcome::ALL`], plus one; 0 until counted.
    outcome: AtomicU8,
}

impl Record {
    /// Adds an attempt's wait for a slot.
    pub fn queued_for(&self, wait: Duration) {
        add(&self.queued_ns, nanos(wait));
    }

    /// Adds an attempt sent upstream that took `took` to its answer head.
    pub fn sent(&self, took: Duration) {
        let attempts = self.attempts.load(Ordering::Relaxed);
        self.attempts
            .store(attempts.saturating_add(1), Ordering::Relaxed);
        add(&self.upstream_ns, nanos(took));
    }

    /// Notes the request's final outcome.
    pub fn counted(&self, outcome: Outcome) {
        // Declaration order is `Outcome::ALL`'s order, as the metric labels rely on.
        self.outcome.store(outcome as u8 + 1, Ordering::Relaxed);
    }

    fn outcome(&self) -> &'static str {
        let index = usize::from(self.outcome.load(Ordering::Relaxed));
        index
            .checked_sub(1)
            .and_then(|i| Outcome::ALL.get(i))
            .map_or("", |o| o.as_str())
    }
}

/// `cell += n` for a cell only one task writes.
fn add(cell: &AtomicU64, n: u64) {
    cell.store(
        cell.load(Ordering::Relaxed).saturating_add(n),
        Ordering::Relaxed,
    );
}

fn nanos(d: Duration) -> u64 {
    u64::try_from(d.as_nanos()).unwrap_or(u64::MAX)
}

/// The request line kept for the log, when this request gets one.
pub struct Line {
    method: Method,
    uri: Uri,
}

/// Whether this request gets a line; `seen` counts the upstream's requests for sampling.
pub fn wants(mode: AccessLog, seen: &AtomicU64, method: &Method, uri: &Uri) -> Option<Line> {
    let yes = match mode {
        AccessLog::Off => return None,
        AccessLog::Full => true,
        AccessLog::Sample(n) => seen.fetch_add(1, Ordering::Relaxed).is_multiple_of(n.get()),
    };
    yes.then(|| Line {
        method: method.clone(),
        uri: uri.clone(),
    })
}

/// Writes the line of a finished request.
pub fn write<B>(upstream: &str, line: &Line, record: &Record, response: &Response<B>) {
    let reason = response
        .headers()
        .get(REASON_HEADER)
        .and_then(|v| v.to_str().ok())
        .unwrap_or("");
    tracing::info!(
        target: "easeoff::access",
        %upstream,
        method = %line.method,
        path = %line.uri.path(),
        status = response.status().as_u16(),
        outcome = %record.outcome(),
        attempts = record.attempts.load(Ordering::Relaxed),
        queue_wait_ms = millis(record.queued_ns.load(Ordering::Relaxed)),
        upstream_ms = millis(record.upstream_ns.load(Ordering::Relaxed)),
        %reason,
        "request"
    );
}

/// Milliseconds to the microsecond.
fn millis(nanos: u64) -> f64 {
    (nanos / 1000) as f64 / 1e3
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_outcome_is_recorded_under_its_own_name() {
        for outcome in Outcome::ALL {
            let record = Record::default();
            record.counted(outcome);
            assert_eq!(record.outcome(), outcome.as_str());
        }
        assert_eq!(Record::default().outcome(), "");
    }

    #[test]
    fn attempts_and_times_add_up() {
        let record = Record::default();
        record.queued_for(Duration::from_millis(2));
        record.queued_for(Duration::from_millis(3));
        record.sent(Duration::from_millis(7));
        record.sent(Duration::from_millis(1));
        assert_eq!(record.attempts.load(Ordering::Relaxed), 2);
        assert_eq!(record.queued_ns.load(Ordering::Relaxed), 5_000_000);
        assert_eq!(record.upstream_ns.load(Ordering::Relaxed), 8_000_000);
    }
}
