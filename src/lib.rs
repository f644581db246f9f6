//! easeoff: a sidecar proxy that paces requests to throttled upstreams.

pub mod config;
pub mod controller;
pub mod hints;
pub mod pacer;
pub mod sleeper;
pub mod throttle;
