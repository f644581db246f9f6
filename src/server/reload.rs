//! Reloading a running server: plan which listeners and upstreams carry over, prepare
//! everything that can fail (binding, building clients), then commit, which cannot.

use std::net::SocketAddr;
use std::sync::{Arc, PoisonError};

use super::Workers;
use super::{Listening, Live, StartError, State, bind_listener, build, local_addr};
use crate::config::{Config, UpstreamSettings};

/// Why a reload was not applied; the running configuration stays.
#[derive(Debug, thiserror::Error)]
pub enum ReloadError {
    #[error("the server is shutting down")]
    Draining,
    #[error(transparent)]
    Start(#[from] StartError),
}

/// What a reload did, by upstream name.
#[derive(Debug, Default, PartialEq, Eq)]
pub struct Reloaded {
    /// Same settings: learned interval, queue and counters carry on.
    pub kept: Vec<String>,
    /// Changed settings: a fresh sleeper and pacer; counters carry on.
    pub rebuilt: Vec<String>,
    pub added: Vec<String>,
    pub removed: Vec<String>,
    /// `[server]` changed; those settings take effect on restart.
    pub server_changed: bool,
    /// `[fleet]` changed; the running fleet is kept until a restart.
    pub fleet_changed: bool,
}

/// Where one upstream of the new config comes from.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
struct Placement {
    /// The running listener it takes over, if any.
    listener: Option<usize>,
    /// Whether that listener's upstream is kept as it is.
    keep: bool,
}

/// Matches the new upstreams to the running listeners `(configured address, settings
/// of the upstream it serves)`. A listener is taken over by the upstream configured
/// at its address; port 0 means "any port", so there the name must match too.
fn plan(running: &[(SocketAddr, &UpstreamSettings)], new: &[UpstreamSettings]) -> Vec<Placement> {
    let mut taken = vec![false; running.len()];
    new.iter()
        .map(|settings| {
            let found = running.iter().enumerate().position(|(i, (addr, old))| {
                !taken[i]
                    && *addr == settings.listen
                    && (addr.port() != 0 || old.name == settings.name)
            });
            match found {
                Some(i) => {
                    taken[i] = true;
                    Placement {
                        listener: Some(i),
                        keep: *running[i].1 == *settings,
                    }
                }
                None => Placement {
                    listener: None,
                    keep: false,
                },
            }
        })
        .collect()
}

/// A new upstream ready to go live.
struct Prepared {
    placement: Placement,
    /// Freshly bound sockets, when no running listener is taken over.
    sockets: Option<Vec<tokio::net::TcpListener>>,
    bound: SocketAddr,
    upstream: Arc<crate::upstream::Upstream>,
}

/// A running listener: its configured and bound addresses and its upstream.
type Running = (SocketAddr, SocketAddr, Arc<crate::upstream::Upstream>);

impl Live {
    pub(super) async fn reload(&self, config: Config) -> Result<Reloaded, ReloadError> {
        let mut state = self.state.lock().await;
        if state.draining {
            return Err(ReloadError::Draining);
        }
        let running: Vec<_> = state
            .listeners
            .iter()
            .map(|l| (l.configured, l.bound, l.current.load_full()))
            .collect();
        let prepared = self.prepare(&running, &config).await?;
        Ok(self.commit(&mut state, &running, config, prepared))
    }

    /// Everything that can fail, before anything changes: sockets for new listeners
    /// and upstreams for changed settings.
    async fn prepare(
        &self,
        running: &[Running],
        config: &Config,
    ) -> Result<Vec<Prepared>, ReloadError> {
        let placements = plan(
            &running
                .iter()
                .map(|(addr, _, u)| (*addr, &*u.settings))
                .collect::<Vec<_>>(),
            &config.upstreams,
        );
        let mut prepared = Vec::with_capacity(placements.len());
        for (settings, placement) in config.upstreams.iter().zip(placements) {
            let taken = placement.listener.and_then(|i| running.get(i));
            let (sockets, bound) = match taken {
                Some((_, bound, _)) => (None, *bound),
                None => {
                    let what = format!("upstream \"{}\"", settings.name);
                    let copies = self.workers.as_ref().map_or(1, Workers::count);
                    let sockets = bind_listener(settings.listen, &what, copies).await?;
                    let bound = local_addr(&sockets[0], settings.listen);
                    (Some(sockets), bound)
                }
            };
            let upstream = match taken {
                Some((_, _, upstream)) if placement.keep => Arc::clone(upstream),
                _ => {
                    build(
                        settings,
                        bound,
                        &self.metrics,
                        &self.observer,
                        &self.signing,
                        self.fleet.as_ref(),
                    )
                    .await?
                }
            };
            prepared.push(Prepared {
                placement,
                sockets,
                bound,
                upstream,
            });
        }
        Ok(prepared)
    }

    /// Puts the prepared listeners and upstreams in place; cannot fail.
    fn commit(
        &self,
        state: &mut State,
        running: &[Running],
        config: Config,
        prepared: Vec<Prepared>,
    ) -> Reloaded {
        let old_names: Vec<String> = running
            .iter()
            .map(|(_, _, u)| u.name().to_string())
            .collect();
        let context = self.context(&state.config.server);
        let mut old: Vec<Option<Listening>> = std::mem::take(&mut state.listeners)
            .into_iter()
            .map(Some)
            .collect();
        let mut listeners = Vec::with_capacity(prepared.len());
        let mut upstreams = Vec::with_capacity(prepared.len());
        let mut done = Reloaded::default();
        for (settings, p) in config.upstreams.iter().zip(prepared) {
            let name = settings.name.clone();
            let reused = p.placement.listener.and_then(|i| old.get_mut(i)?.take());
            let listening = match (reused, p.sockets) {
                (Some(listening), _) => {
                    let previous = listening.current.swap(Arc::clone(&p.upstream));
                    if !Arc::ptr_eq(&previous, &p.upstream) {
                        state.replaced.push(Arc::downgrade(&previous));
                    }
                    listening
                }
                (None, Some(sockets)) => {
                    let mut listening =
                        Listening::new(settings.listen, p.bound, Arc::clone(&p.upstream), sockets);
                    if state.started {
                        listening.start(context.clone(), self.workers.as_ref());
                    }
                    listening
                }
                // `plan` hands each running listener to one upstream at most.
                (None, None) => {
                    tracing::error!(upstream = %name, "reload lost track of a listener");
                    continue;
                }
            };
            if p.placement.keep {
                done.kept.push(name);
            } else if old_names.contains(&name) {
                done.rebuilt.push(name);
            } else {
                done.added.push(name);
            }
            listeners.push(listening);
            upstreams.push(p.upstream);
        }
        for listening in old.into_iter().flatten() {
            state
                .replaced
                .push(Arc::downgrade(&listening.current.load_full()));
            state.retired.extend(listening.close());
        }
        for name in old_names {
            if !config.upstreams.iter().any(|s| s.name == name) {
                self.metrics.remove_upstream(&name);
                done.removed.push(name);
            }
        }
        *self
            .upstreams
            .write()
            .unwrap_or_else(PoisonError::into_inner) = upstreams;
        state.listeners = listeners;
        state.retired.retain(|task| !task.is_finished());
        state.replaced.retain(|u| u.strong_count() > 0);
        done.server_changed = config.server != state.config.server;
        done.fleet_changed = config.fleet != state.config.fleet;
        state.config.upstreams = config.upstreams;
        done
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn settings(text: &str) -> Vec<UpstreamSettings> {
        Config::parse(text, "t.toml", &|_| None)
            .unwrap_or_else(|e| panic!("{e}"))
            .upstreams
    }

    fn upstream(name: &str, listen: &str, extra: &str) -> String {
        format!(
            "[[upstream]]\nname = \"{name}\"\nlisten = \"{listen}\"\nurl = \"http://127.0.0.1:1\"\n{extra}\n"
        )
    }

    fn run(old: &[UpstreamSettings], new: &[UpstreamSettings]) -> Vec<Placement> {
        let running: Vec<_> = old.iter().map(|s| (s.listen, s)).collect();
        plan(&running, new)
    }

    const fn at(listener: usize, keep: bool) -> Placement {
        Placement {
            listener: Some(listener),
            keep,
        }
    }

    const FRESH: Placement = Placement {
        listener: None,
        keep: false,
    };

    #[test]
    fn unchanged_upstreams_are_kept_on_their_listeners() {
        let text = upstream("a", "127.0.0.1:8001", "") + &upstream("b", "127.0.0.1:8002", "");
        let old = settings(&text);
        assert_eq!(run(&old, &old), [at(0, true), at(1, true)]);
    }

    #[test]
    fn a_changed_upstream_is_rebuilt_on_its_listener() {
        let old =
            settings(&(upstream("a", "127.0.0.1:8001", "") + &upstream("b", "127.0.0.1:8002", "")));
        let new = settings(
            &(upstream(
                "a",
                "127.0.0.1:8001",
                "[upstream.sleeper]\nmax_interval = \"1s\"",
            ) + &upstream("b", "127.0.0.1:8002", "")),
        );
        assert_eq!(run(&old, &new), [at(0, false), at(1, true)]);
    }

    #[test]
    fn a_listener_goes_to_whoever_is_configured_at_its_address() {
        let old =
            settings(&(upstream("a", "127.0.0.1:8001", "") + &upstream("b", "127.0.0.1:8002", "")));
        // b moves to a new port; c takes over a's address; a is gone.
        let new =
            settings(&(upstream("b", "127.0.0.1:8003", "") + &upstream("c", "127.0.0.1:8001", "")));
        assert_eq!(run(&old, &new), [FRESH, at(0, false)]);
    }

    #[test]
    fn port_zero_listeners_are_matched_by_name() {
        let old = settings(&(upstream("a", "127.0.0.1:0", "") + &upstream("b", "127.0.0.1:0", "")));
        let new = settings(&(upstream("b", "127.0.0.1:0", "") + &upstream("c", "127.0.0.1:0", "")));
        assert_eq!(run(&old, &new), [at(1, true), FRESH]);
    }
}
