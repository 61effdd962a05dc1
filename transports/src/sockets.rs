//! Every socket a server holds, what each one holds, and which may be closed to make room.
//!
//! A socket is taken on at accept against the socket budget (`--max-sockets`) alone. It takes
//! a connection slot (`--max-connections`) only with its first complete request: an HTTP
//! request head (the WebSocket handshake included) or a Wyoming event's header. A socket is
//! *spare* while no request of it is in progress and it runs no WebSocket or Wyoming session:
//! silent, trickling a head, idle between keep-alive requests, or refused and lingering.
//!
//! Spare sockets never keep anyone out: when the budget is full, a new socket has the oldest
//! spare one closed (those holding no slot first, then idle keep-alive connections); when the
//! slots are full, a new request has the oldest idle keep-alive connection closed and takes
//! its slot, as nginx reuses its idle keep-alive connections. Only sockets in the middle of a
//! request, or running a session, are never closed to make room. So no number of silent or
//! trickling sockets keeps a new client or an operator's probe (`/health`, `/ready`,
//! `/metrics`) from being answered.
//!
//! The registry only counts and chooses; the handles a connection task holds on it
//! ([`Socket`](crate::context::Socket), [`Busy`](crate::context::Busy)) are in `context`.

use std::collections::{BTreeSet, HashMap};
use std::net::IpAddr;
use std::sync::{Arc, Mutex, MutexGuard};

use tokio::sync::Notify;
use tracing::debug;

use crate::metrics::{Closed, Metrics, Refusal};

/// Whether the server took a connection on or only answers it with a refusal.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Admission {
    Admitted,
    /// Answered (one request, then closed): health, readiness, metrics and model lists as
    /// usual, a 503 for speech, a WebSocket closed with 1013.
    Refused(Refusal),
}

/// Sockets that may be closing to make room at once: at it the server stops accepting (new
/// connections wait in the listen backlog) until one has closed, so descriptors stay within
/// the budget's reserve even in a flood that outruns the closing sockets' tasks.
const MAX_CLOSING: usize = 32;

/// The registry of one server's sockets, and its limits.
pub(crate) struct Sockets {
    registry: Mutex<Registry>,
    /// Sockets held at once (those closing included).
    pub(crate) max_sockets: usize,
    /// Connection slots: requests and sessions served at once.
    pub(crate) max_slots: usize,
    /// Sockets held at once from one address.
    max_per_peer: Option<usize>,
    /// Signalled when a closing socket has let go.
    room: Notify,
}

#[derive(Default)]
struct Registry {
    entries: HashMap<u64, Entry>,
    /// Spare sockets holding no slot, by id: the oldest first.
    spare: BTreeSet<u64>,
    /// Spare sockets holding a slot (idle keep-alive connections), by id.
    idle: BTreeSet<u64>,
    per_peer: HashMap<IpAddr, usize>,
    slots: usize,
    /// Sockets told to close whose tasks have not ended yet.
    closing: usize,
}

struct Entry {
    peer: IpAddr,
    slot: bool,
    /// Requests in progress, plus one while a session runs.
    busy: usize,
    /// Told to close to make room.
    closing: bool,
    close: Arc<Notify>,
}

impl Registry {
    /// File the socket under the right set for what it is now.
    fn file(&mut self, id: u64) {
        self.spare.remove(&id);
        self.idle.remove(&id);
        let Some(entry) = self.entries.get(&id) else { return };
        if entry.busy == 0 && !entry.closing {
            if entry.slot {
                self.idle.insert(id);
            } else {
                self.spare.insert(id);
            }
        }
    }

    /// Tell a spare socket to close; its slot, if any, is free at once.
    fn close(&mut self, id: u64, metrics: &Metrics) {
        let Some(entry) = self.entries.get_mut(&id) else { return };
        entry.closing = true;
        entry.close.notify_one();
        if std::mem::take(&mut entry.slot) {
            self.slots -= 1;
            metrics.connection_closed();
        }
        self.closing += 1;
        self.file(id);
        metrics.socket_closed(Closed::Evicted);
    }
}

impl Sockets {
    pub(crate) fn new(max_sockets: usize, max_slots: usize, max_per_peer: Option<usize>) -> Sockets {
        Sockets { registry: Mutex::new(Registry::default()), max_sockets, max_slots, max_per_peer, room: Notify::new() }
    }

    /// Too many sockets are closing to make room: accept nothing until [`room`](Self::room).
    pub(crate) fn congested(&self) -> bool {
        self.lock().closing >= MAX_CLOSING
    }

    /// Resolves once a closing socket has let go (maybe spuriously: check
    /// [`congested`](Self::congested) again).
    pub(crate) async fn room(&self) {
        self.room.notified().await
    }

    fn lock(&self) -> MutexGuard<'_, Registry> {
        self.registry.lock().unwrap_or_else(|poisoned| poisoned.into_inner())
    }

    /// Take on a socket accepted from `peer`, closing the oldest spare one when the budget is
    /// full; `Err` when it must be turned away (the budget is full of busy sockets, or its
    /// address holds its share). On `Ok`, the socket's task ends when the `Notify` fires.
    pub(crate) fn accept(&self, id: u64, peer: IpAddr, metrics: &Metrics) -> Result<Arc<Notify>, Refusal> {
        let mut r = self.lock();
        if self.max_per_peer.is_some_and(|max| r.per_peer.get(&peer).copied().unwrap_or(0) >= max) {
            return Err(Refusal::Peer);
        }
        if r.entries.len() >= self.max_sockets {
            let victim = r.spare.first().or_else(|| r.idle.first()).copied();
            match victim {
                Some(victim) if r.closing < MAX_CLOSING => {
                    debug!(socket = victim, "budget full: closing the oldest spare socket");
                    r.close(victim, metrics);
                }
                _ => return Err(Refusal::Sockets),
            }
        }
        let close = Arc::new(Notify::new());
        r.entries.insert(id, Entry { peer, slot: false, busy: 0, closing: false, close: close.clone() });
        *r.per_peer.entry(peer).or_default() += 1;
        r.file(id);
        metrics.sockets_open.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
        Ok(close)
    }

    /// The first complete request's decision: a slot (closing the oldest idle keep-alive
    /// connection when they are all taken) or a refusal.
    pub(crate) fn admit(&self, id: u64, draining: bool, metrics: &Metrics) -> Admission {
        let mut r = self.lock();
        if draining {
            return Admission::Refused(Refusal::Draining);
        }
        if r.entries.get(&id).is_none_or(|entry| entry.closing) {
            // Being closed already: nothing will be served.
            return Admission::Refused(Refusal::Capacity);
        }
        if r.slots >= self.max_slots {
            match r.idle.first().copied() {
                Some(victim) => {
                    debug!(socket = victim, "slots full: closing the oldest idle keep-alive connection");
                    r.close(victim, metrics);
                }
                None => return Admission::Refused(Refusal::Capacity),
            }
        }
        r.slots += 1;
        metrics.connection_opened();
        if let Some(entry) = r.entries.get_mut(&id) {
            entry.slot = true;
        }
        r.file(id);
        Admission::Admitted
    }

    pub(crate) fn set_busy(&self, id: u64, busy: bool) {
        let mut r = self.lock();
        if let Some(entry) = r.entries.get_mut(&id) {
            if busy {
                entry.busy += 1;
            } else {
                entry.busy = entry.busy.saturating_sub(1);
            }
        }
        r.file(id);
    }

    pub(crate) fn release(&self, id: u64, metrics: &Metrics) {
        let mut r = self.lock();
        let Some(entry) = r.entries.remove(&id) else { return };
        if entry.slot {
            r.slots -= 1;
            metrics.connection_closed();
        }
        if entry.closing {
            r.closing -= 1;
            self.room.notify_one();
        }
        if let Some(count) = r.per_peer.get_mut(&entry.peer) {
            *count -= 1;
            if *count == 0 {
                r.per_peer.remove(&entry.peer);
            }
        }
        r.spare.remove(&id);
        r.idle.remove(&id);
        metrics.sockets_open.fetch_sub(1, std::sync::atomic::Ordering::Relaxed);
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::net::Ipv4Addr;

    const A: IpAddr = IpAddr::V4(Ipv4Addr::new(10, 0, 0, 1));
    const B: IpAddr = IpAddr::V4(Ipv4Addr::new(10, 0, 0, 2));

    fn open(metrics: &Metrics) -> u64 {
        metrics.sockets_open.load(std::sync::atomic::Ordering::Relaxed)
    }

    #[test]
    fn a_full_budget_closes_the_oldest_spare_socket_not_a_busy_one() {
        let (sockets, metrics) = (Sockets::new(3, 3, None), Metrics::default());
        let first = sockets.accept(1, A, &metrics).unwrap();
        sockets.accept(2, A, &metrics).unwrap();
        let third = sockets.accept(3, A, &metrics).unwrap();
        // 1 is in a request: 2 is the oldest spare one.
        sockets.set_busy(1, true);
        sockets.accept(4, A, &metrics).unwrap();
        assert_eq!(open(&metrics), 4, "counted until its task lets go");
        sockets.release(2, &metrics);
        // Busy sockets and those holding slots go last: 3 before 4's idle slot.
        assert_eq!(sockets.admit(4, false, &metrics), Admission::Admitted);
        sockets.accept(5, A, &metrics).unwrap();
        sockets.release(3, &metrics);
        let notified = |n: &Arc<Notify>| {
            let fut = n.notified();
            tokio::pin!(fut);
            fut.as_mut().enable()
        };
        assert!(!notified(&first));
        assert!(notified(&third));
        // With 5 busy, 4 (idle, with its slot) is the only spare one left; then none.
        sockets.set_busy(5, true);
        sockets.accept(6, A, &metrics).unwrap();
        assert_eq!(metrics.connections_open.load(std::sync::atomic::Ordering::Relaxed), 0);
        sockets.release(4, &metrics);
        sockets.set_busy(6, true);
        assert_eq!(sockets.accept(7, A, &metrics).err(), Some(Refusal::Sockets));
        for id in [1, 5, 6] {
            sockets.release(id, &metrics);
        }
        assert_eq!(open(&metrics), 0);
    }

    #[test]
    fn full_slots_take_an_idle_connections_slot_but_never_a_busy_one() {
        let (sockets, metrics) = (Sockets::new(10, 2, None), Metrics::default());
        for id in 1..=4 {
            sockets.accept(id, A, &metrics).unwrap();
        }
        sockets.set_busy(1, true);
        assert_eq!(sockets.admit(1, false, &metrics), Admission::Admitted);
        assert_eq!(sockets.admit(2, false, &metrics), Admission::Admitted);
        // 2 is idle: 3 takes its slot.
        assert_eq!(sockets.admit(3, false, &metrics), Admission::Admitted);
        sockets.set_busy(3, true);
        assert_eq!(sockets.admit(4, false, &metrics), Admission::Refused(Refusal::Capacity));
        assert_eq!(sockets.admit(2, false, &metrics), Admission::Refused(Refusal::Capacity), "2 is closing");
        assert_eq!(sockets.admit(4, true, &metrics), Admission::Refused(Refusal::Draining));
        assert_eq!(metrics.connections_open.load(std::sync::atomic::Ordering::Relaxed), 2);
        for id in 1..=4 {
            sockets.release(id, &metrics);
        }
        assert_eq!(metrics.connections_open.load(std::sync::atomic::Ordering::Relaxed), 0);
        assert_eq!(open(&metrics), 0);
    }

    #[test]
    fn one_address_holds_at_most_its_share() {
        let (sockets, metrics) = (Sockets::new(10, 10, Some(2)), Metrics::default());
        sockets.accept(1, A, &metrics).unwrap();
        sockets.accept(2, A, &metrics).unwrap();
        assert_eq!(sockets.accept(3, A, &metrics).err(), Some(Refusal::Peer));
        sockets.accept(4, B, &metrics).unwrap();
        sockets.release(1, &metrics);
        sockets.accept(5, A, &metrics).unwrap();
    }

    #[test]
    fn closing_sockets_are_bounded() {
        let (sockets, metrics) = (Sockets::new(1, 1, None), Metrics::default());
        sockets.accept(0, A, &metrics).unwrap();
        for id in 1..=MAX_CLOSING as u64 {
            sockets.accept(id, A, &metrics).unwrap();
        }
        assert_eq!(sockets.accept(1000, A, &metrics).err(), Some(Refusal::Sockets));
        sockets.release(0, &metrics);
        sockets.accept(1001, A, &metrics).unwrap();
    }
}
