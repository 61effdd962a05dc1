//! The per-connection protocol state machine. OWNER: lead.

use std::sync::Arc;
use std::time::{Duration, Instant};

use crate::engine::{EngineCapabilities, EngineEvent, RequestId, SynthesisRequest};
use crate::parse::Limits;

/// Tunables of a session; defaults are the reference's.
#[derive(Clone, Debug)]
pub struct SessionOptions {
    pub limits: Limits,
    pub idle_timeout: Duration,
    pub config_timeout: Duration,
    /// Most characters buffered for one utterance before `input.done`.
    pub max_buffered_chars: usize,
    /// Most client frames held back while an utterance is generating; past it the
    /// session asks its transport to stop reading (see `wants_client_input`).
    pub max_deferred_frames: usize,
}

/// A frame (or the end) of the client's side of the WebSocket.
#[derive(Clone, Debug, PartialEq)]
pub enum ClientFrame {
    Text(String),
    Binary(Vec<u8>),
    /// The peer closed or vanished, or a write to it failed.
    Closed,
}

#[derive(Clone, Debug, PartialEq)]
pub enum EngineCommand {
    Synthesize {
        id: RequestId,
        request: SynthesisRequest,
    },
    Abort {
        id: RequestId,
    },
}

#[derive(Clone, Debug, PartialEq)]
pub enum Output {
    /// A JSON text frame.
    Text(String),
    /// A binary frame (audio or codec frame).
    Binary(Vec<u8>),
    Engine(EngineCommand),
    /// Send a close frame with this code and end the connection.
    Close(u16),
}

/// An engine event named a request this session does not have in flight: a bug in
/// the caller, not the client's fault.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct UnknownRequest(pub RequestId);

pub struct Session {
    _p: (),
}

impl Session {
    pub fn new(
        now: Instant,
        connection: u64,
        capabilities: Arc<EngineCapabilities>,
        options: Arc<SessionOptions>,
    ) -> Session {
        let _ = (now, connection, capabilities, options);
        todo!()
    }
    pub fn handle_client(&mut self, now: Instant, frame: ClientFrame) {
        let _ = (now, frame);
        todo!()
    }
    pub fn handle_engine(
        &mut self,
        now: Instant,
        event: EngineEvent,
    ) -> Result<(), UnknownRequest> {
        let _ = (now, event);
        todo!()
    }
    pub fn handle_timeout(&mut self, now: Instant) {
        let _ = now;
        todo!()
    }
    pub fn poll_output(&mut self) -> Option<Output> {
        todo!()
    }
    pub fn poll_timeout(&self) -> Option<Instant> {
        todo!()
    }
    pub fn is_closed(&self) -> bool {
        todo!()
    }
    /// False while the session holds as many deferred client frames as it may;
    /// the transport then stops reading the socket until it turns true again.
    pub fn wants_client_input(&self) -> bool {
        todo!()
    }
}
