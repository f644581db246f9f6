//! `runtime = "per-core"`: one current-thread tokio runtime per CPU, each running its
//! own accept loop on its own `SO_REUSEPORT` socket, so a connection is accepted,
//! served and forwarded on one thread (nginx's shape; no work-stealing hand-offs).
//!
//! Shared per-upstream state stays where it was: the pacer's release task and every
//! controller live on the main runtime and are reached through atomics, locks and
//! channels, which work across runtimes. A timer is always created by the task that
//! awaits it, so each runtime drives its own.

use std::future::Future;
use std::net::SocketAddr;
use std::sync::{Mutex, PoisonError};

use tokio::net::{TcpListener, TcpSocket};
use tokio::runtime::Handle;
use tokio::sync::oneshot;
use tokio::task::JoinHandle;

use crate::proxy;

/// The per-core runtimes; they stop when [`Workers::stop`] is called or this is dropped.
pub struct Workers {
    handles: Vec<Handle>,
    stops: Mutex<Vec<oneshot::Sender<()>>>,
}

impl Workers {
    /// Starts one runtime thread per CPU.
    pub fn start() -> std::io::Result<Workers> {
        let count = proxy::worker_count();
        let mut handles = Vec::with_capacity(count);
        let mut stops = Vec::with_capacity(count);
        for index in 0..count {
            let runtime = tokio::runtime::Builder::new_current_thread()
                .enable_all()
                .build()?;
            handles.push(runtime.handle().clone());
            let (stop, stopped) = oneshot::channel::<()>();
            stops.push(stop);
            std::thread::Builder::new()
                .name(format!("easeoff-worker-{index}"))
                .spawn(move || {
                    proxy::set_worker(index);
                    // Dropping the runtime afterwards cancels what is left on it
                    // (idle upstream connections).
                    let _ = runtime.block_on(stopped);
                })?;
        }
        Ok(Workers {
            handles,
            stops: Mutex::new(stops),
        })
    }

    /// How many runtimes there are, i.e. how many sockets each listener needs.
    pub fn count(&self) -> usize {
        self.handles.len()
    }

    /// Runs `task` on runtime `index`.
    pub fn spawn<F>(&self, index: usize, task: F) -> JoinHandle<F::Output>
    where
        F: Future + Send + 'static,
        F::Output: Send + 'static,
    {
        self.handles[index % self.handles.len()].spawn(task)
    }

    /// Ends every runtime thread; tasks still on them are dropped.
    pub fn stop(&self) {
        self.stops
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .clear();
    }
}

impl Drop for Workers {
    fn drop(&mut self) {
        self.stop();
    }
}

/// `copies` sockets listening on `addr` with `SO_REUSEPORT`, so the kernel spreads
/// new connections over them; port 0 picks one port for all.
pub fn bind_reuseport(addr: SocketAddr, copies: usize) -> std::io::Result<Vec<TcpListener>> {
    let mut sockets = Vec::with_capacity(copies);
    let mut at = addr;
    for _ in 0..copies.max(1) {
        let socket = if at.is_ipv4() {
            TcpSocket::new_v4()?
        } else {
            TcpSocket::new_v6()?
        };
        socket.set_reuseaddr(true)?;
        socket.set_reuseport(true)?;
        socket.bind(at)?;
        let listener = socket.listen(1024)?;
        at = listener.local_addr()?;
        sockets.push(listener);
    }
    Ok(sockets)
}
