//! One WebSocket connection driving one `Session`.
//!
//! The socket is read in one place: a reader future, polled alongside the connection loop in the
//! same task, turns frames into whole messages and feeds them to a small bounded queue. The loop
//! selects over that queue, the engine's events and the session's timer; after every input it
//! executes the session's outputs in order, awaiting each write (the backpressure). When the
//! session doesn't want client input the loop stops taking from the queue, the queue fills, and
//! the reader stops reading the socket.

use std::io;
use std::sync::Arc;
use std::time::{Duration, Instant};

use fastwebsockets::{Frame, OpCode, Payload, Role, WebSocket, WebSocketError, WebSocketRead, WebSocketWrite};
use hyper::upgrade::Upgraded;
use hyper_util::rt::TokioIo;
use speechstream_core::engine::EngineEvent;
use speechstream_core::session::{ClientFrame, Output, Session};
use tokio::io::BufWriter;
use tokio::sync::{mpsc, watch};
use tracing::{debug, info, warn};

use crate::encoding::encode_off_runtime;
use crate::engine_link::{take_events, EngineLink};
use crate::metrics::Transport;
use crate::shared::{sleep_until, stopping, Shared};

type Stream = TokioIo<Upgraded>;

/// Whole client messages the reader may hold ahead of the loop. Each is at most the message
/// limit, so this (plus the one the reader is assembling) bounds a connection's input memory.
const INBOUND_QUEUE: usize = 2;
/// Bytes of frames gathered before they are written; larger frames are written through.
const WRITE_BUFFER: usize = 16 * 1024;
/// How long to wait for the peer's answer to our close frame before dropping the socket.
const CLOSE_LINGER: Duration = Duration::from_secs(2);
/// How long a close frame written at shutdown may take.
const SHUTDOWN_WRITE: Duration = Duration::from_secs(1);

const CLOSE_GOING_AWAY: u16 = 1001;
const CLOSE_PROTOCOL_ERROR: u16 = 1002;
const CLOSE_INVALID_PAYLOAD: u16 = 1007;
const CLOSE_TOO_BIG: u16 = 1009;

/// What the reader hands the connection loop, in socket order.
enum Inbound {
    Text(String),
    Binary(Vec<u8>),
    /// A control frame the WebSocket protocol obliges us to send (a pong, or the echo of the
    /// peer's close frame).
    Reply(OpCode, Vec<u8>),
    /// The peer closed or vanished, or broke the framing; with the close code to send then.
    Ended(Option<u16>),
}

pub(crate) async fn run(ws: WebSocket<Stream>, id: u64, shared: Arc<Shared>, mut stop: watch::Receiver<bool>) {
    // Writes go through a buffer that is flushed once the session's outputs are drained, so an
    // utterance's small JSON frames and audio leave in a few syscalls instead of one each.
    let (read, write) = tokio::io::split(ws.into_inner());
    let (mut read, writer) =
        fastwebsockets::after_handshake_split(read, BufWriter::with_capacity(WRITE_BUFFER, write), Role::Server);
    read.set_auto_pong(true);
    read.set_auto_close(true);
    // fastwebsockets rejects a frame whose length is >= this.
    read.set_max_message_size(shared.max_message_bytes.saturating_add(1));
    let (inbound_tx, mut inbound) = mpsc::channel(INBOUND_QUEUE);
    let reader = read_messages(read, inbound_tx, shared.max_message_bytes);
    tokio::pin!(reader);
    let mut reader_done = false;
    let (link, mut events) = EngineLink::new(shared.clone(), Transport::WebSocket);

    let now = Instant::now();
    info!("websocket session started");
    let mut conn = Connection {
        session: Session::new(now, id, shared.catalog.clone(), shared.options.clone()),
        shared,
        writer,
        link,
        sent_close: false,
        broken: false,
        told_closed: false,
    };
    // Shutdown is the session's to carry out (it finishes the utterance in flight, then closes
    // with 1001); this only tells it when the server starts shutting down.
    let mut shutting_down = *stop.borrow();
    if shutting_down {
        conn.session.begin_shutdown(now, conn.shared.shutdown_grace);
    }
    conn.execute_outputs().await;

    loop {
        if conn.session.is_closed() || conn.told_closed || conn.sent_close {
            break;
        }
        let timer = conn.session.poll_timeout();
        let reading = conn.session.wants_client_input();
        tokio::select! {
            // `events` never ends: this task holds a sender for the sinks it hands out.
            Some(event) = events.recv() => conn.on_engine_events(event, &mut events),
            message = inbound.recv(), if reading => conn.on_inbound(message).await,
            _ = sleep_until(timer), if timer.is_some() => {
                conn.session.handle_timeout(Instant::now());
            }
            _ = &mut reader, if !reader_done => reader_done = true,
            _ = stopping(&mut stop), if !shutting_down => {
                debug!("shutdown: the session finishes what it is generating");
                shutting_down = true;
                conn.session.begin_shutdown(Instant::now(), conn.shared.shutdown_grace);
            }
        }
        if shutting_down && conn.session.is_closed() {
            conn.execute_final_outputs().await;
        } else {
            conn.execute_outputs().await;
        }
    }

    // Give the peer a moment to answer our close frame (or to finish sending its own) so the
    // TCP connection ends cleanly instead of with a reset.
    if conn.sent_close && !conn.broken {
        let linger = tokio::time::sleep(CLOSE_LINGER);
        tokio::pin!(linger);
        loop {
            tokio::select! {
                message = inbound.recv() => match message {
                    Some(Inbound::Ended(_)) | None => break,
                    Some(_) => {}
                },
                _ = &mut reader, if !reader_done => reader_done = true,
                _ = &mut linger => break,
            }
        }
    }
    if conn.link.in_flight() > 0 {
        // Only reachable if the session ended without aborting its request; the dropped event
        // queue still stops the engine at its next send.
        warn!(requests = conn.link.in_flight(), "connection ended with an engine request in flight");
    }
    info!("websocket session ended");
}

struct Connection {
    shared: Arc<Shared>,
    session: Session,
    writer: WebSocketWrite<BufWriter<tokio::io::WriteHalf<Stream>>>,
    /// Submits and aborts the session's engine requests, and meters them until they end.
    link: EngineLink,
    /// We wrote a close frame: nothing more may be written.
    sent_close: bool,
    /// A write failed: the socket is unusable.
    broken: bool,
    /// The session was told the peer is gone; its remaining frames are not written.
    told_closed: bool,
}

impl Connection {
    /// An engine event and those already queued behind it, to the session.
    fn on_engine_events(&mut self, first: EngineEvent, events: &mut mpsc::Receiver<EngineEvent>) {
        take_events(first, events, &mut self.link, |event| self.session.handle_engine(Instant::now(), event));
    }

    async fn on_inbound(&mut self, message: Option<Inbound>) {
        let now = Instant::now();
        match message {
            Some(Inbound::Text(text)) => self.session.handle_client(now, ClientFrame::Text(text)),
            Some(Inbound::Binary(bytes)) => self.session.handle_client(now, ClientFrame::Binary(bytes)),
            Some(Inbound::Reply(opcode, payload)) => {
                let is_close = opcode == OpCode::Close;
                let frame = if is_close {
                    Frame::close_raw(Payload::Owned(payload))
                } else {
                    Frame::pong(Payload::Owned(payload))
                };
                self.write(frame).await;
                if is_close {
                    // The peer closed and our echo completes the close handshake.
                    self.sent_close = true;
                    self.tell_closed();
                }
            }
            Some(Inbound::Ended(code)) => {
                if let (Some(code), false) = (code, self.sent_close) {
                    self.write(Frame::close(code, b"")).await;
                    self.sent_close = true;
                }
                self.tell_closed();
            }
            // The reader ended without a word; it always says `Ended`, but be sure.
            None => self.tell_closed(),
        }
    }

    /// Execute everything the session has queued, in order.
    async fn execute_outputs(&mut self) {
        loop {
            self.execute_queued().await;
            let was_broken = self.broken;
            self.flush().await;
            // A failed flush told the session the peer is gone, which queued the abort of the
            // request in flight: that must still reach the engine.
            if self.broken == was_broken {
                break;
            }
        }
    }

    async fn execute_queued(&mut self) {
        while let Some(output) = self.session.poll_output() {
            match output {
                Output::Text(text) => {
                    if self.frames_allowed() {
                        self.write(Frame::text(Payload::Owned(text.into_bytes()))).await;
                    }
                }
                Output::Binary(bytes) => {
                    if self.frames_allowed() {
                        self.write(Frame::binary(Payload::Owned(bytes))).await;
                    }
                }
                Output::Engine(command) => self.link.execute(command),
                Output::RequestEnded { id, end } => self.link.ended(id, &end),
                Output::Encode { id, job } => {
                    let encoded = encode_off_runtime(job).await;
                    if let Err(stale) = self.session.handle_encoded(Instant::now(), id, encoded) {
                        debug!(request = %stale.0, "encoded file for an utterance that has ended");
                    }
                }
                Output::Close(code) => {
                    if self.frames_allowed() {
                        let reason: &[u8] = if code == CLOSE_GOING_AWAY { b"server shutting down" } else { b"" };
                        self.write(Frame::close(code, reason)).await;
                    }
                    self.sent_close = true;
                }
            }
        }
    }

    async fn flush(&mut self) {
        if self.broken {
            return;
        }
        if let Err(e) = self.writer.flush().await {
            debug!(error = %e, "write to client failed");
            self.broken = true;
            self.tell_closed();
        }
    }

    fn frames_allowed(&self) -> bool {
        !self.told_closed && !self.sent_close && !self.broken
    }

    async fn write(&mut self, frame: Frame<'_>) {
        if self.broken || self.sent_close {
            return;
        }
        if let Err(e) = self.writer.write_frame(frame).await {
            debug!(error = %e, "write to client failed");
            self.broken = true;
            self.tell_closed();
        }
    }

    /// Tell the session the peer is gone (once). The caller then executes its outputs, which
    /// carry the aborts of whatever was in flight; its frames are no longer written.
    fn tell_closed(&mut self) {
        if !self.told_closed {
            self.told_closed = true;
            self.session.handle_client(Instant::now(), ClientFrame::Closed);
        }
    }

    /// The last outputs of a session the server's shutdown closed: bounded in time, so a peer
    /// that stopped reading can't hold the shutdown up; what is left is carried out without
    /// writing (the aborts still reach the engine).
    async fn execute_final_outputs(&mut self) {
        if tokio::time::timeout(SHUTDOWN_WRITE, self.execute_outputs()).await.is_err() {
            debug!("final frames at shutdown timed out");
            self.broken = true;
            self.execute_outputs().await;
        }
    }
}

/// Read whole messages off the socket into `queue` until the peer leaves.
///
/// Fragments are collected here rather than by fastwebsockets' `FragmentCollectorRead`, which
/// checks each frame against the size limit but not the message they add up to.
async fn read_messages(
    mut ws: WebSocketRead<tokio::io::ReadHalf<Stream>>,
    queue: mpsc::Sender<Inbound>,
    max_message_bytes: usize,
) {
    let mut partial: Option<(OpCode, Vec<u8>)> = None;
    let replies = queue.clone();
    let mut send_reply = move |frame: Frame<'_>| {
        let replies = replies.clone();
        let reply = Inbound::Reply(frame.opcode, frame.payload.to_vec());
        async move { replies.send(reply).await.map_err(|_| io::Error::from(io::ErrorKind::BrokenPipe)) }
    };
    let end = loop {
        let mut frame = match ws.read_frame(&mut send_reply).await {
            Ok(frame) => frame,
            Err(e) => break close_code_for(&e),
        };
        // RFC 6455 §5.1: a server must close the connection on an unmasked client frame.
        if !is_masked(&mut frame) {
            break Some(CLOSE_PROTOCOL_ERROR);
        }
        let fin = frame.fin;
        let message = match frame.opcode {
            OpCode::Text | OpCode::Binary if partial.is_some() => break Some(CLOSE_PROTOCOL_ERROR),
            OpCode::Text | OpCode::Binary if fin => (frame.opcode, Vec::from(frame.payload)),
            OpCode::Text | OpCode::Binary => {
                partial = Some((frame.opcode, Vec::from(frame.payload)));
                continue;
            }
            OpCode::Continuation => {
                let Some((_, collected)) = partial.as_mut() else {
                    break Some(CLOSE_PROTOCOL_ERROR);
                };
                if collected.len().saturating_add(frame.payload.len()) > max_message_bytes {
                    break Some(CLOSE_TOO_BIG);
                }
                collected.extend_from_slice(&frame.payload);
                if !fin {
                    continue;
                }
                match partial.take() {
                    Some(message) => message,
                    None => continue,
                }
            }
            // The echo went out as a reply.
            OpCode::Close => break None,
            // Pings were answered as replies; pongs need nothing.
            OpCode::Ping | OpCode::Pong => continue,
        };
        let inbound = match message {
            (OpCode::Text, bytes) => match String::from_utf8(bytes) {
                Ok(text) => Inbound::Text(text),
                Err(_) => break Some(CLOSE_INVALID_PAYLOAD),
            },
            (_, bytes) => Inbound::Binary(bytes),
        };
        if queue.send(inbound).await.is_err() {
            return;
        }
    };
    let _ = queue.send(Inbound::Ended(end)).await;
}

/// Whether a received frame came masked; fastwebsockets keeps the key but only shows it in the
/// header it would write for the frame.
fn is_masked(frame: &mut Frame<'_>) -> bool {
    let mut head = [0; 16];
    frame.fmt_head(&mut head);
    head[1] & 0x80 != 0
}

/// The close code owed to a peer whose framing failed; `None` when the peer just went away.
fn close_code_for(error: &WebSocketError) -> Option<u16> {
    match error {
        WebSocketError::FrameTooLarge => Some(CLOSE_TOO_BIG),
        WebSocketError::InvalidUTF8 => Some(CLOSE_INVALID_PAYLOAD),
        WebSocketError::UnexpectedEOF
        | WebSocketError::IoError(_)
        | WebSocketError::ConnectionClosed
        | WebSocketError::SendError(_) => None,
        // fastwebsockets already queued its own 1002 for a bad close code.
        WebSocketError::InvalidCloseCode => None,
        _ => Some(CLOSE_PROTOCOL_ERROR),
    }
}
