//! The process's signals: SIGTERM and SIGINT stop it, SIGHUP reloads the config,
//! SIGUSR1 and SIGUSR2 are ignored (their default action would kill the process).
//!
//! Handlers are installed by [`Signals::install`], before the proxy binds anything, so
//! a SIGTERM that arrives right after start-up still drains instead of killing.

use tokio::signal::unix::{Signal, SignalKind, signal};

/// What a signal asks for.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Request {
    /// SIGTERM or SIGINT (named): drain and exit.
    Stop(&'static str),
    /// SIGHUP: read the config file again.
    Reload,
}

/// SIGTERM, SIGINT and SIGHUP, caught from the moment of installation.
pub struct Signals {
    term: Signal,
    int: Signal,
    hup: Signal,
    usr1: Signal,
    usr2: Signal,
}

impl Signals {
    /// Installs the handlers.
    pub fn install() -> std::io::Result<Signals> {
        Ok(Signals {
            term: signal(SignalKind::terminate())?,
            int: signal(SignalKind::interrupt())?,
            hup: signal(SignalKind::hangup())?,
            usr1: signal(SignalKind::user_defined1())?,
            usr2: signal(SignalKind::user_defined2())?,
        })
    }

    /// Completes on the next signal that asks for something.
    pub async fn recv(&mut self) -> Request {
        loop {
            tokio::select! {
                _ = self.term.recv() => return Request::Stop("SIGTERM"),
                _ = self.int.recv() => return Request::Stop("SIGINT"),
                _ = self.hup.recv() => return Request::Reload,
                _ = self.usr1.recv() => tracing::debug!(signal = "SIGUSR1", "ignored"),
                _ = self.usr2.recv() => tracing::debug!(signal = "SIGUSR2", "ignored"),
            }
        }
    }

    /// Completes on the next SIGTERM or SIGINT, ignoring SIGHUP.
    pub async fn stop(&mut self) -> &'static str {
        loop {
            if let Request::Stop(name) = self.recv().await {
                return name;
            }
        }
    }
}
