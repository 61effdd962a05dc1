//! What a connection's request handlers know about it: its socket, whether it was admitted,
//! its id, and where a WebSocket upgrade is left for the connection task.

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex, OnceLock};

use fastwebsockets::upgrade::UpgradeFut;
use speechstream_core::engine::RequestId;

use crate::metrics::Refusal;
use crate::sockets::{Busy, Socket};

/// Whether the server took this connection on or only answers it with a refusal.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Admission {
    Admitted,
    /// Answered (one request, then closed): health, readiness, metrics and model lists as
    /// usual, a 503 for speech, a WebSocket closed with 1013.
    Refused(Refusal),
}

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
