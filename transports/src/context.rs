//! What a connection's request handlers know about it: its socket, whether it was admitted,
//! its id, and where a WebSocket upgrade is left for the connection task.

use std::net::IpAddr;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex, OnceLock};

use fastwebsockets::upgrade::UpgradeFut;
use speechstream_core::engine::RequestId;
use tokio::sync::Notify;

use crate::metrics::Refusal;
use crate::shared::Shared;
use crate::sockets::Admission;

/// What a connection's requests know about it.
pub(crate) struct ConnectionContext {
    pub(crate) id: u64,
    pub(crate) socket: Socket,
    /// Decided at accept (a refusal while draining) or by the first complete request.
    admission: OnceLock<Admission>,
    next_request: AtomicU64,
}

impl ConnectionContext {
    /// A new id for a request on this connection: engine request id and log id at once, apart
    /// from the ids of the WebSocket's utterances on the same connection.
    pub(crate) fn next_request_id(&self) -> RequestId {
        RequestId::http(self.id, self.next_request.fetch_add(1, Ordering::Relaxed))
    }
}

impl ConnectionContext {
    /// `refused`: turned away at accept (while draining), before any request.
    pub(crate) fn new(socket: Socket, refused: Option<Refusal>) -> ConnectionContext {
        let admission = OnceLock::new();
        if let Some(why) = refused {
            let _ = admission.set(Admission::Refused(why));
        }
        ConnectionContext { id: socket.id, socket, admission, next_request: AtomicU64::new(0) }
    }

    /// Whether this connection is served, decided by its first complete request (which takes a
    /// connection slot, or is refused) and the same for every request after it.
    pub(crate) fn admit(&self) -> Admission {
        *self.admission.get_or_init(|| self.socket.admit())
    }

    /// The admission so far: `None` until the first complete request.
    pub(crate) fn admission(&self) -> Option<Admission> {
        self.admission.get().copied()
    }
}

/// Where the request handler leaves a WebSocket upgrade for the connection task to run after
/// hyper has written the 101 response and handed the socket over. Running the WebSocket here,
/// rather than in a task spawned by the handler, keeps one task per connection and lets the
/// server track (and at shutdown, await) every connection through one `JoinSet`.
/// The upgrade keeps its socket marked busy from the handshake on, so it is never closed to make
/// room between the 101 and the session.
pub(crate) type UpgradeSlot = Arc<Mutex<Option<(UpgradeFut, Busy)>>>;

/// One accepted socket in the registry, from its accept until its task ends (or is dropped at
/// shutdown).
pub(crate) struct Socket {
    shared: Arc<Shared>,
    pub(crate) id: u64,
    close: Arc<Notify>,
}

impl Socket {
    /// Register a socket accepted from `peer` under connection id `id`, or say why not.
    pub(crate) fn accept(shared: &Arc<Shared>, id: u64, peer: IpAddr) -> Result<Socket, Refusal> {
        let close = shared.sockets.accept(id, peer.to_canonical(), &shared.metrics)?;
        Ok(Socket { shared: shared.clone(), id, close })
    }

    /// Resolves when the socket is closed to make room for another.
    pub(crate) async fn closed_for_room(&self) {
        self.close.notified().await
    }

    /// Take a slot for this socket's first complete request, or refuse it.
    pub(crate) fn admit(&self) -> Admission {
        let draining = self.shared.draining.load(std::sync::atomic::Ordering::Relaxed);
        self.shared.sockets.admit(self.id, draining, &self.shared.metrics)
    }

    /// Mark a request (or a session) in progress until the guard is dropped: the socket is not
    /// closed to make room meanwhile.
    pub(crate) fn busy(&self) -> Busy {
        self.shared.sockets.set_busy(self.id, true);
        Busy { shared: self.shared.clone(), id: self.id }
    }
}

impl Drop for Socket {
    fn drop(&mut self) {
        self.shared.sockets.release(self.id, &self.shared.metrics);
    }
}

/// A request or session of a socket in progress (see [`Socket::busy`]).
pub(crate) struct Busy {
    shared: Arc<Shared>,
    id: u64,
}

impl Drop for Busy {
    fn drop(&mut self) {
        self.shared.sockets.set_busy(self.id, false);
    }
}
