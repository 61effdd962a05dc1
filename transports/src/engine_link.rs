//! A session-driving connection's side of the engine, shared by the WebSocket and Wyoming
//! drivers: it carries out the session's engine commands (submit a request with a sink into the
//! connection's event queue, abort one), meters each request from its submission to the end the
//! session reports (`RequestEnded`), and takes the engine's events in batches. It keeps no
//! protocol state: when a request is over is the session's to say.

use std::collections::HashMap;
use std::sync::Arc;

use speechstream_core::engine::{EngineEvent, EngineEventKind, RequestId};
use speechstream_core::session::{EngineCommand, RequestEnd, UnknownRequest};
use tokio::sync::mpsc;
use tracing::{debug, info};

use crate::metrics::{Abort, ErrorKind, Transport, UtteranceMeter};
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

/// The log line of a request whose fields the engine will not honour
/// ([`SynthesisRequest::ignored`](speechstream_core::engine::SynthesisRequest::ignored)), on
/// every transport.
pub(crate) fn log_ignored(id: RequestId, ignored: &[&str]) {
    if !ignored.is_empty() {
        info!(request = %id, ignored = %ignored.join(","), "request fields ignored: the engine cannot honour them");
    }
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
                log_ignored(id, &request.ignored);
                let meter = UtteranceMeter::start(&self.shared.metrics, self.transport, request.stream);
                self.in_flight.insert(id, meter);
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
        let Some(mut meter) = self.in_flight.remove(&id) else { return };
        let metrics = &self.shared.metrics;
        match end {
            RequestEnd::Finished => {
                meter.finished(metrics);
                debug!(request = %id, "utterance finished");
            }
            RequestEnd::Failed(message) => {
                meter.aborted(metrics, Abort::Error);
                metrics.error(ErrorKind::Engine);
                info!(request = %id, message, "utterance failed");
            }
            RequestEnd::Aborted => {
                meter.aborted(metrics, Abort::Cancelled);
                metrics.cancelled(self.transport)
            }
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

#[cfg(test)]
mod tests {
    use std::sync::atomic::AtomicBool;
    use std::sync::Mutex;
    use std::time::Duration;

    use speechstream_core::engine::{Engine, EngineCapabilities, EngineLoad, EventSink, SynthesisRequest};
    use speechstream_core::session::SessionOptions;

    use super::*;
    use crate::metrics::Metrics;
    use crate::sockets::Sockets;

    /// Records what it is asked.
    struct Recorder {
        capabilities: EngineCapabilities,
        calls: Mutex<Vec<String>>,
    }

    impl Engine for Recorder {
        fn capabilities(&self) -> &EngineCapabilities {
            &self.capabilities
        }

        fn submit(&self, id: RequestId, request: SynthesisRequest, _sink: Box<dyn EventSink>) {
            self.calls.lock().unwrap().push(format!("submit {id} {}", request.text));
        }

        fn abort(&self, id: RequestId) {
            self.calls.lock().unwrap().push(format!("abort {id}"));
        }
    }

    fn shared(engine: Arc<Recorder>) -> Arc<Shared> {
        Arc::new(Shared {
            catalog: speechstream_core::catalog::Catalog::new(
                Arc::new(engine.capabilities.clone()),
                Default::default(),
            ),
            engine,
            options: Arc::new(SessionOptions::default()),
            shutdown_grace: Duration::from_secs(1),
            engine_event_queue: 4,
            max_message_bytes: 1 << 20,
            started_unix: 0,
            api_key: None,
            max_connections: None,
            header_timeout: Duration::from_secs(1),
            first_byte_timeout: Duration::from_secs(1),
            body_timeout: Duration::from_secs(1),
            write_timeout: Duration::from_secs(1),
            sockets: Sockets::new(4, 4, None),
            turned_away: Vec::new(),
            turned_away_peer: Vec::new(),
            metrics: Metrics::default(),
            draining: AtomicBool::new(false),
        })
    }

    #[test]
    fn requests_are_metered_until_the_session_says_they_ended() {
        let engine =
            Arc::new(Recorder { capabilities: EngineCapabilities::new("m", 24_000), calls: Mutex::new(Vec::new()) });
        let shared = shared(engine.clone());
        let (mut link, mut events) = EngineLink::new(shared.clone(), Transport::Wyoming);
        let id = |utterance| RequestId { connection: 1, utterance };
        let synthesize = |n| EngineCommand::Synthesize { id: id(n), request: SynthesisRequest::new("Hi.") };
        for n in 0..3 {
            link.execute(synthesize(n));
        }
        assert_eq!(link.in_flight(), 3);
        link.observe(&EngineEvent {
            id: id(0),
            kind: EngineEventKind::Audio { pcm: vec![0; 48_000], sample_rate: 24_000 },
        });
        link.ended(id(0), &RequestEnd::Finished);
        link.ended(id(1), &RequestEnd::Failed("boom".into()));
        link.execute(EngineCommand::Abort { id: id(2) });
        link.ended(id(2), &RequestEnd::Aborted);
        // Not in flight (any more): nothing to count.
        link.ended(id(2), &RequestEnd::Aborted);
        link.ended(id(9), &RequestEnd::Finished);
        assert_eq!(link.in_flight(), 0);
        assert_eq!(engine.calls.lock().unwrap().len(), 4);
        let text = shared.metrics.render(&EngineLoad::default());
        for line in [
            "speechstream_utterances_total{transport=\"wyoming\"} 3",
            "speechstream_audio_bytes_total{transport=\"wyoming\"} 48000",
            "speechstream_cancellations_total{transport=\"wyoming\"} 1",
            "speechstream_errors_total{kind=\"engine\"} 1",
            "speechstream_real_time_factor_count 1",
        ] {
            assert!(text.lines().any(|l| l == line), "{line} in\n{text}");
        }

        // A batch: the first event and those queued behind it, each observed, then handed on.
        link.execute(synthesize(3));
        let sink = ChannelSink::new(link.events_tx.clone());
        for _ in 0..2 {
            let kind = EngineEventKind::Audio { pcm: vec![0; 10], sample_rate: 24_000 };
            assert!(sink.try_send(EngineEvent { id: id(3), kind }).is_ok());
        }
        let mut seen = Vec::new();
        let first = EngineEvent { id: id(3), kind: EngineEventKind::Finished };
        take_events(first, &mut events, &mut link, |event| {
            seen.push(event.kind);
            Ok(())
        });
        assert_eq!(seen.len(), 3);
        let text = shared.metrics.render(&EngineLoad::default());
        assert!(text.lines().any(|l| l == "speechstream_audio_bytes_total{transport=\"wyoming\"} 48020"), "{text}");
    }
}
