//! The forwarding data path: accept client connections, pace, send upstream, answer.
//!
//! `listener.rs` accepts and drains connections, `connection.rs` gives each its
//! deadlines, `idle.rs` bounds a silent upstream body, `service.rs` runs one request
//! as a loop over the attempt policy (`crate::attempt`), `watch.rs` records verdicts
//! that arrive in a body, and `reply.rs` makes easeoff's own answers. The HTTP client
//! and bodies are `crate::transport`'s; decisions come from the pure modules through
//! `upstream.rs`.

mod access;
mod connection;
mod idle;
mod listener;
mod oversized;
mod reply;
mod service;
mod watch;

pub use crate::transport::{
    ClientError, ProxyBody, SendError, UpstreamClient, set_worker, strip_hop_by_hop, worker_count,
};
pub use connection::{
    Acceptor, Closed, Limits, RequestGuard, Tracker, builder as connection_builder, drive,
};
pub use listener::{Current, ListenerContext, serve};

/// The client connection's address, on a request's extensions where tenants are
/// told apart by it (`[upstream.fairness] by = "client-ip"`).
#[derive(Clone, Copy, Debug)]
pub struct ClientIp(pub std::net::IpAddr);
pub use reply::{Dialect, REASON_HEADER, Reason, reply};
