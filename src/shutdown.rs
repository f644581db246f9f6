//! The process's stop signals as one future.
//!
//! Handlers are installed by [`Signals::install`], before the proxy binds anything, so
//! a SIGTERM that arrives right after start-up still drains instead of killing.

use tokio::signal::unix::{Signal, SignalKind, signal};

/// SIGTERM and SIGINT, caught from the moment of installation.
pub struct Signals {
    term: Signal,
    int: Signal,
}

impl Signals {
    /// Installs the handlers.
    pub fn install() -> std::io::Result<Signals> {
        Ok(Signals {
            term: signal(SignalKind::terminate())?,
            int: signal(SignalKind::interrupt())?,
        })
    }

    /// Completes on the next SIGTERM or SIGINT; says which.
    pub async fn recv(&mut self) -> &'static str {
        tokio::select! {
            _ = self.term.recv() => "SIGTERM",
            _ = self.int.recv() => "SIGINT",
        }
    }
}
