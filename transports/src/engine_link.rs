//! A session-driving connection's side of the engine, shared by the WebSocket and Wyoming
//! drivers: it carries out the session's engine commands (submit a request with a sink into the
//! connection's event queue, abort one), meters each request from its submission to the end the
//! session reports (`RequestEnded`), and takes the engine's events in batches. It keeps no
//! protocol state: when a request is over is the session's to say.

use std::collections::HashMap;
use std::sync::Arc;
use std::time::Instant;

use speechstream_core::engine::{EngineEvent, EngineEventKind, RequestId};
use speechstream_core::session::{EngineCommand, RequestEnd, UnknownRequest};
use tokio::sync::mpsc;
use tracing::{debug, info};

use crate::metrics::{ErrorKind, Transport, UtteranceMeter};
use crate::shared::Shared;
use crate::sink::ChannelSink;

/// Engine events taken in one go before the outputs are written: events already queued are
/// handled together, so their frames share a flush.
const EVENT_BATCH: usize = 32;

/// One connection's link to the engine.
pub(crate) struct EngineLink {
    shared: Arc<Shared>,
    transport: Transport,
    /// The sending side of the connection's event queue, cloned into each request's sink.
    events_tx: mpsc::Sender<EngineEvent>,
    /// Requests submitted and not yet ended (finished, failed or aborted), each metered.
    in_flight: HashMap<RequestId, UtteranceMeter>,
}

impl EngineLink {
    /// A link for one connection, and the queue its requests' events arrive on (bounded by the
    /// server's `engine_event_queue`; it never ends, since the link holds a sender).
    pub(crate) fn new(shared: Arc<Shared>, transport: Transport) -> (EngineLink, mpsc::Receiver<EngineEvent>) {
        let (events_tx, events) = mpsc::channel(shared.engine_event_queue);
        (EngineLink { shared, transport, events_tx, in_flight: HashMap::new() }, events)
    }

    /// Carry out a session's engine command.
    pub(crate) fn execute(&mut self, command: EngineCommand) {
        match command {
            EngineCommand::Synthesize { id, request } => {
                info!(request = %id, chars = request.text.chars().count(), "utterance submitted");
                self.in_flight.insert(id, UtteranceMeter::start(&self.shared.metrics, self.transport));
                let sink = ChannelSink::new(self.events_tx.clone());
                self.shared.engine.submit(id, request, Box::new(sink));
            }
            EngineCommand::Abort { id } => {
                info!(request = %id, "utterance aborted");
                self.shared.engine.abort(id);
            }
        }
    }

    /// An engine event on its way to the session: its audio is metered.
    pub(crate) fn observe(&mut self, event: &EngineEvent) {
        if let (Some(meter), EngineEventKind::Audio { pcm, sample_rate }) =
            (self.in_flight.get_mut(&event.id), &event.kind)
        {
            meter.audio(&self.shared.metrics, pcm.len(), *sample_rate);
        }
    }

    /// The session says request `id` is over.
    pub(crate) fn ended(&mut self, id: RequestId, end: &RequestEnd) {
        let Some(meter) = self.in_flight.remove(&id) else { return };
        let metrics = &self.shared.metrics;
        match end {
            RequestEnd::Finished => {
                meter.finished(metrics);
                debug!(request = %id, "utterance finished");
            }
            RequestEnd::Failed(message) => {
                metrics.error(ErrorKind::Engine);
                info!(request = %id, message, "utterance failed");
            }
            RequestEnd::Aborted => metrics.cancelled(self.transport),
        }
    }

    /// Requests submitted and not yet ended.
    pub(crate) fn in_flight(&self) -> usize {
        self.in_flight.len()
    }
}

/// `first` and the events already queued behind it (a batch), each observed by `link` and then
/// handed to `handle` (the session's `handle_engine`).
pub(crate) fn take_events(
    first: EngineEvent,
    events: &mut mpsc::Receiver<EngineEvent>,
    link: &mut EngineLink,
    mut handle: impl FnMut(EngineEvent) -> Result<(), UnknownRequest>,
) {
    let mut take = |event: EngineEvent| {
        link.observe(&event);
        // An event that raced with our abort of its request.
        if let Err(stale) = handle(event) {
            debug!(request = %stale.0, "ignoring event for a request no longer in flight");
        }
    };
    take(first);
    for _ in 1..EVENT_BATCH {
        match events.try_recv() {
            Ok(event) => take(event),
            Err(_) => break,
        }
    }
}

/// Resolves at `deadline`; never without one.
pub(crate) async fn sleep_until(deadline: Option<Instant>) {
    match deadline {
        Some(deadline) => tokio::time::sleep_until(deadline.into()).await,
        None => std::future::pending().await,
    }
}
