//! HTTP below the request path: the pooled client to an upstream, the bodies that
//! cross in both directions, and hop-by-hop headers. It knows nothing of pacing,
//! retries or verdicts; `upstream`, `sigv4` and `proxy` build on it.

mod body;
mod cause;
mod client;
mod headers;
mod plain;
mod verifier;

pub use body::{
    ProxyBody, WatchFrames, discard, expects_continue, read_error_body, read_start, read_up_to,
};
pub use cause::{ConnectCause, SendError};
pub use client::{ClientError, UpstreamClient, set_worker, worker_count};
pub use headers::strip_hop_by_hop;
pub use plain::Bound;
