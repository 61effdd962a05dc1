//! One Wyoming TCP connection (Home Assistant's protocol) driving one `WyomingSession`.
//!
//! The same shape as the WebSocket side: one task, a select over the socket, the engine's events,
//! the session's timer and the shutdown signal; after every input the session's outputs are carried
//! out in order, each write awaited (the backpressure: a slow reader slows its own engine request).
//! The socket is read whenever the connection is not draining, because streamed text arrives
//! while audio is made; the session bounds what it holds. A peer that stops reading is cut off by
//! the write timeout, which tells the session it is gone, which aborts its request.

use std::net::SocketAddr;
use std::sync::Arc;
use std::time::Instant;

use speechstream_core::engine::EngineEvent;
use speechstream_core::wyoming::{codes, error_event, Output, WyomingOptions, WyomingSession};
use tokio::io::{AsyncReadExt, AsyncWriteExt, BufWriter, ReadHalf, WriteHalf};
use tokio::net::TcpStream;
use tokio::sync::{mpsc, watch};
use tracing::{debug, info, info_span, warn, Instrument};

use crate::connection::first_byte;
use crate::context::Socket;
use crate::engine_link::{take_events, EngineLink};
use crate::metrics::{ErrorKind, Refusal, Transport};
use crate::shared::{sleep_until, stopping, Shared};
use crate::sockets::Admission;
use crate::write_timeout::WriteTimeout;

type Stream = WriteTimeout<TcpStream>;

/// Bytes read from the socket at a time.
const READ_CHUNK: usize = 16 * 1024;
/// Bytes of events gathered before they are written; larger ones are written through.
const WRITE_BUFFER: usize = 16 * 1024;
/// How long, after our last event, the peer's remaining bytes are read and discarded.
const CLOSE_LINGER: std::time::Duration = std::time::Duration::from_secs(2);
/// At most this much of them.
const LINGER_BYTES: usize = 1 << 20;

/// Serve one accepted socket until it ends, is closed to make room for another, or (silent)
/// passes the first-byte deadline. `refused`: turned away at accept (while draining).
pub(crate) async fn serve_connection(
    stream: TcpStream,
    peer: SocketAddr,
    socket: Socket,
    refused: Option<Refusal>,
    shared: Arc<Shared>,
    options: Arc<WyomingOptions>,
    stop: watch::Receiver<bool>,
) {
    let span = info_span!("wyoming", id = socket.id, %peer);
    async {
        tokio::select! {
            _ = serve(stream, &socket, refused, shared, options, stop) => {}
            _ = socket.closed_for_room() => debug!("closed to make room for another connection"),
        }
    }
    .instrument(span)
    .await;
}

async fn serve(
    mut stream: TcpStream,
    socket: &Socket,
    refused: Option<Refusal>,
    shared: Arc<Shared>,
    options: Arc<WyomingOptions>,
    mut stop: watch::Receiver<bool>,
) {
    // Until its first event's header line has arrived the socket holds no slot and may be
    // closed to make room; then it takes a slot (or is refused) and is busy until it ends.
    let first = match refused {
        Some(_) => Vec::new(),
        None => {
            if !first_byte(&stream, shared.first_byte_timeout, &shared, Some(&mut stop)).await {
                return;
            }
            match first_header(&mut stream, &shared, options.frame.max_header_bytes).await {
                Some(bytes) => bytes,
                None => return,
            }
        }
    };
    let _busy = socket.busy();
    let mut stream = WriteTimeout::new(stream, shared.write_timeout);
    match refused.map_or_else(|| socket.admit(), Admission::Refused) {
        Admission::Admitted => run(stream, socket.id, shared, options, stop, first).await,
        Admission::Refused(why) => {
            let text = match shared.max_connections {
                Some(max) => format!("server at capacity ({max} connections); retry later"),
                None => "server unavailable; retry later".to_owned(),
            };
            debug!(reason = ?why, "refusing wyoming connection");
            let _ = stream.write_all(&error_event(codes::BUSY, &text)).await;
            let _ = stream.shutdown().await;
        }
    }
}

/// Read until the first event's header line is in (or `max` bytes without one, which the
/// session then refuses), within the header deadline: `None` when the peer leaves or runs out
/// of time first.
async fn first_header(stream: &mut TcpStream, shared: &Shared, max: usize) -> Option<Vec<u8>> {
    let mut bytes = Vec::new();
    let read = async {
        let mut chunk = [0u8; 4096];
        while !bytes.contains(&b'\n') && bytes.len() < max {
            match stream.read(&mut chunk).await {
                Ok(0) => return false,
                Ok(n) => bytes.extend_from_slice(&chunk[..n]),
                Err(e) => {
                    debug!(error = %e, "read from client failed");
                    return false;
                }
            }
        }
        true
    };
    match tokio::time::timeout(shared.header_timeout, read).await {
        Ok(true) => Some(bytes),
        Ok(false) => None,
        Err(_) => {
            debug!("no complete event header within the header deadline");
            None
        }
    }
}

async fn run(
    stream: Stream,
    id: u64,
    shared: Arc<Shared>,
    options: Arc<WyomingOptions>,
    mut stop: watch::Receiver<bool>,
    first: Vec<u8>,
) {
    let (mut read, write) = tokio::io::split(stream);
    let (link, mut events) = EngineLink::new(shared.clone(), Transport::Wyoming);
    let now = Instant::now();
    info!("wyoming connection started");
    let mut conn = Connection {
        session: WyomingSession::new(now, id, shared.catalog.clone(), options),
        shared,
        writer: BufWriter::with_capacity(WRITE_BUFFER, write),
        link,
        broken: false,
        told_closed: false,
    };
    if !first.is_empty() {
        conn.session.handle_bytes(now, &first);
        conn.execute_outputs().await;
    }
    let mut buffer = vec![0; READ_CHUNK];
    // The peer closed its side: answer what it asked, then end.
    let mut eof = false;
    let mut draining = *stop.borrow();
    let mut drain_deadline = draining.then(|| now + conn.shared.shutdown_grace);
    loop {
        if conn.session.is_closed() {
            break;
        }
        if (draining || eof) && !conn.session.busy() {
            if draining {
                conn.session.handle_shutdown(Instant::now());
            } else {
                conn.tell_closed();
            }
            conn.execute_outputs().await;
            break;
        }
        let timer = conn.session.poll_timeout();
        tokio::select! {
            // `events` never ends: this task holds a sender for the sinks it hands out.
            Some(event) = events.recv() => conn.on_engine_events(event, &mut events),
            read = read_some(&mut read, &mut buffer), if !draining && !eof => match read {
                Ok(0) => eof = true,
                Ok(n) => conn.session.handle_bytes(Instant::now(), &buffer[..n]),
                Err(e) => {
                    debug!(error = %e, "read from client failed");
                    conn.tell_closed();
                }
            },
            _ = sleep_until(timer), if timer.is_some() => conn.session.handle_timeout(Instant::now()),
            _ = stopping(&mut stop), if !draining => {
                debug!("shutdown: finishing what is being spoken");
                draining = true;
                drain_deadline = Some(Instant::now() + conn.shared.shutdown_grace);
            }
            _ = sleep_until(drain_deadline), if drain_deadline.is_some() => {
                debug!("shutdown grace over");
                conn.session.handle_shutdown(Instant::now());
            }
        }
        conn.execute_outputs().await;
    }
    if !conn.broken {
        // Our side is done; read what the peer still sends for a moment, so that the kernel
        // ends the connection with a FIN instead of a reset that could destroy the last events
        // (an error) before the peer has read them.
        if conn.writer.shutdown().await.is_ok() {
            let linger = async {
                let mut left = LINGER_BYTES;
                while left > 0 {
                    match read.read(&mut buffer).await {
                        Ok(0) | Err(_) => break,
                        Ok(n) => left = left.saturating_sub(n),
                    }
                }
            };
            let _ = tokio::time::timeout(CLOSE_LINGER, linger).await;
        }
    }
    if conn.link.in_flight() > 0 {
        warn!(requests = conn.link.in_flight(), "wyoming connection ended with engine requests in flight");
    }
    info!("wyoming connection ended");
}

async fn read_some(read: &mut ReadHalf<Stream>, buffer: &mut [u8]) -> std::io::Result<usize> {
    read.read(buffer).await
}

struct Connection {
    shared: Arc<Shared>,
    session: WyomingSession,
    writer: BufWriter<WriteHalf<Stream>>,
    /// Submits and aborts the session's engine requests, and meters them until they end.
    link: EngineLink,
    /// A write failed: the socket is unusable.
    broken: bool,
    /// The session was told the peer is gone.
    told_closed: bool,
}

impl Connection {
    /// An engine event and those already queued behind it, to the session.
    fn on_engine_events(&mut self, first: EngineEvent, events: &mut mpsc::Receiver<EngineEvent>) {
        take_events(first, events, &mut self.link, |event| self.session.handle_engine(Instant::now(), event));
    }

    /// Carry out everything the session has queued, in order, then flush.
    async fn execute_outputs(&mut self) {
        loop {
            while let Some(output) = self.session.poll_output() {
                match output {
                    Output::Write(bytes) => self.write(&bytes).await,
                    Output::Engine(command) => self.link.execute(command),
                    Output::RequestEnded { id, end } => self.link.ended(id, &end),
                    Output::Dropped(kind) => info!(event = %kind, "dropped an event type this server does not serve"),
                    Output::Close { code, error } => {
                        if codes::CLIENT_FAULTS.contains(&code) {
                            self.shared.metrics.error(ErrorKind::Request);
                        }
                        warn!(code, %error, "closing the wyoming connection");
                    }
                }
            }
            if self.broken {
                return;
            }
            if let Err(e) = self.writer.flush().await {
                debug!(error = %e, "write to client failed");
                self.broken = true;
                // Its outputs (the abort of what is in flight) still have to be carried out.
                self.tell_closed();
                continue;
            }
            return;
        }
    }

    async fn write(&mut self, bytes: &[u8]) {
        if self.broken || self.told_closed {
            return;
        }
        if let Err(e) = self.writer.write_all(bytes).await {
            debug!(error = %e, "write to client failed");
            self.broken = true;
            self.tell_closed();
        }
    }

    /// Tell the session the peer is gone (once); the caller then carries out its outputs.
    fn tell_closed(&mut self) {
        if !self.told_closed {
            self.told_closed = true;
            self.session.handle_closed(Instant::now());
        }
    }
}
