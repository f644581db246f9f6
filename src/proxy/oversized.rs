//! An upstream answer whose head is too large to read. The client gets `502
//! upstream-head-too-large`; the operator gets a warning, at most one line per
//! period however many answers it stands for, since such an upstream usually
//! answers every request that way.

use std::sync::OnceLock;
use std::time::Duration;

use crate::clock::Instant;
use crate::notice::Notice;
use crate::transport::SendError;

/// One warning line per this period, for every upstream together.
const PERIOD: Duration = Duration::from_secs(10);

static NOTICE: Notice = Notice::every(PERIOD);

/// Where [`NOTICE`]'s time is counted from.
static ORIGIN: OnceLock<Instant> = OnceLock::new();

/// Logs, at most once per [`PERIOD`], that `upstream` answered with an oversized head
/// (at `now`, on the upstream's clock).
pub fn warn(upstream: &str, error: &SendError, now: Instant) {
    let origin = *ORIGIN.get_or_init(|| now);
    if let Some(answers) = NOTICE.hit(now.saturating_duration_since(origin)) {
        tracing::warn!(
            upstream,
            answers,
            error = %error,
            "the upstream answered with a head too large to read (more than 100 header lines?); the clients got 502 upstream-head-too-large"
        );
    }
}
