//! The forwarding data path: accept client connections, pace, send upstream, answer.
//!
//! `listener.rs` accepts and drains connections, `connection.rs` gives each its
//! deadlines, `idle.rs` bounds a silent body, `service.rs` runs one request,
//! `client.rs` talks to the upstream, `body.rs` and `headers.rs` carry bodies and
//! headers across, and `reply.rs` makes easeoff's own answers. Decisions (is it a
//! throttle, how long to wait) come from the pure modules through `upstream.rs`.

mod body;
mod client;
mod connection;
mod headers;
mod idle;
mod listener;
mod reply;
mod service;

pub use body::ProxyBody;
pub use client::{ClientError, SendError, UpstreamClient, set_worker, worker_count};
pub use connection::{
    Acceptor, Closed, Limits, RequestGuard, Tracker, builder as connection_builder, drive,
};
pub use headers::strip_hop_by_hop;
pub use listener::{Current, ListenerContext, serve};
pub use reply::{Dialect, REASON_HEADER, Reason, reply};
