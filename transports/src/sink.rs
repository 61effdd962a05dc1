//! The engine-to-connection event path.

use speechstream_core::engine::{EngineEvent, EventSink, TrySendError};
use tokio::sync::mpsc;

/// Delivers one request's events into its connection's bounded queue.
///
/// `send` uses `blocking_send`: while the queue is full (the connection is busy writing to a
/// slow client) the engine thread waits, which pauses that request and nobody else's. Calling it
/// from inside a tokio runtime thread panics, so engines call sinks from their own threads.
pub(crate) struct ChannelSink {
    events: mpsc::Sender<EngineEvent>,
}

impl ChannelSink {
    pub(crate) fn new(events: mpsc::Sender<EngineEvent>) -> ChannelSink {
        ChannelSink { events }
    }
}

impl EventSink for ChannelSink {
    fn send(&self, event: EngineEvent) -> bool {
        // Err means the connection task is gone: the engine should stop the request.
        self.events.blocking_send(event).is_ok()
    }

    fn try_send(&self, event: EngineEvent) -> Result<(), TrySendError> {
        self.events.try_send(event).map_err(|e| match e {
            mpsc::error::TrySendError::Full(event) => TrySendError::Full(event),
            mpsc::error::TrySendError::Closed(_) => TrySendError::Closed,
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use speechstream_core::engine::{EngineEventKind, RequestId};

    fn event() -> EngineEvent {
        EngineEvent { id: RequestId { connection: 1, utterance: 0 }, kind: EngineEventKind::Finished }
    }

    #[test]
    fn send_reports_a_vanished_consumer() {
        let (tx, rx) = mpsc::channel(1);
        let sink = ChannelSink::new(tx);
        assert!(sink.send(event()));
        drop(rx);
        assert!(!sink.send(event()));
    }

    #[test]
    fn try_send_hands_back_what_does_not_fit() {
        let (tx, mut rx) = mpsc::channel(1);
        let sink = ChannelSink::new(tx);
        assert!(sink.try_send(event()).is_ok());
        let Err(TrySendError::Full(back)) = sink.try_send(event()) else { panic!("expected Full") };
        assert_eq!(back, event());
        assert!(rx.try_recv().is_ok());
        assert!(sink.try_send(back).is_ok());
        drop(rx);
        assert!(matches!(sink.try_send(event()), Err(TrySendError::Closed)));
    }

    #[test]
    fn send_waits_for_room() {
        let (tx, mut rx) = mpsc::channel(1);
        let sink = ChannelSink::new(tx);
        let producer = std::thread::spawn(move || (0..5).all(|_| sink.send(event())));
        for _ in 0..5 {
            assert!(rx.blocking_recv().is_some());
        }
        assert!(producer.join().unwrap_or(false));
    }
}
