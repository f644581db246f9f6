//! easeoff: a sidecar proxy that makes throttled upstreams usable.
//!
//! The modules, their layers and how a request moves through them are in
//! ARCHITECTURE.md, the one module map; `tests/architecture.rs` keeps it true.

pub mod admin;
pub mod attempt;
pub mod cli;
pub mod clock;
pub mod concurrency;
pub mod config;
pub mod connect_backoff;
pub mod controller;
pub mod cost;
pub mod deadline;
pub mod demo;
pub mod fair;
pub mod flag_waker;
pub mod fleet;
pub mod flights;
pub mod hints;
pub mod lane;
pub mod load;
pub mod metrics;
pub mod mock_upstream;
pub mod notice;
pub mod observe;
pub mod pacer;
pub mod plot;
pub mod probe;
pub mod proxy;
pub mod quota;
pub mod retry;
pub mod route;
pub mod server;
pub mod shed;
pub mod signals;
pub mod sigv4;
pub mod simulate;
pub mod sleeper;
mod spelled;
pub mod status;
pub mod tenants;
pub mod throttle;
pub mod train;
pub mod transport;
pub mod trim;
pub mod upstream;
pub mod window;

pub use config::Config;
pub use server::Server;
