//! The streaming speech protocol on plain `std::net`: a thread per connection, `tungstenite`'s
//! blocking WebSocket, the synthetic engine. No async runtime anywhere.
//!
//! ```sh
//! cargo run -p speechstream-core --example blocking_server -- 127.0.0.1:8000
//! ```
//!
//! then point any client of the protocol at `ws://127.0.0.1:8000/v1/audio/speech/stream`.
//!
//! Each connection has two threads: a reader that blocks on the socket and forwards what it
//! reads, and the connection's own thread, which owns the `Session`, waits on one channel
//! carrying both the client's frames and the engine's events (with the session's deadline as
//! the wait's timeout), and is the only one that writes to the socket.

use std::io::{self, Read, Write};
use std::net::{Shutdown, TcpListener, TcpStream};
use std::sync::mpsc::{self, RecvTimeoutError, SyncSender};
use std::sync::Arc;
use std::time::{Duration, Instant};

use speechstream_core::engine::{Engine, EngineEvent, EventSink, TrySendError};
use speechstream_core::session::{ClientFrame, EngineCommand, Output, Session, SessionOptions};
use speechstream_core::synthetic::{SyntheticEngine, SyntheticOptions};
use tungstenite::handshake::server::{ErrorResponse, Request, Response};
use tungstenite::protocol::{frame::coding::CloseCode, CloseFrame, Role};
use tungstenite::{http::StatusCode, Message, WebSocket};

const PATH: &str = "/v1/audio/speech/stream";
/// Inputs a connection holds before the engine (or the reader) waits: the backpressure that
/// keeps a slow client from making its engine request buffer without bound.
const QUEUE: usize = 16;
/// How long to wait for the client to answer our close frame.
const CLOSE_LINGER: Duration = Duration::from_secs(2);

/// What the connection thread waits for.
enum Input {
    Client(ClientFrame),
    Ping(Vec<u8>),
    Engine(EngineEvent),
}

fn main() -> io::Result<()> {
    let addr = std::env::args().nth(1).unwrap_or_else(|| "127.0.0.1:8000".to_owned());
    let listener = TcpListener::bind(&addr)?;
    // The tests start this on port 0 and read the port from this line.
    println!("listening on ws://{}{PATH}", listener.local_addr()?);
    io::stdout().flush()?;
    let engine = Arc::new(SyntheticEngine::new(SyntheticOptions::default()));
    for (id, socket) in (1..).zip(listener.incoming()) {
        let Ok(socket) = socket else { continue };
        let engine = engine.clone();
        std::thread::spawn(move || {
            if let Err(e) = serve(id, socket, engine) {
                eprintln!("connection {id}: {e}");
            }
        });
    }
    Ok(())
}

fn serve(id: u64, socket: TcpStream, engine: Arc<SyntheticEngine>) -> io::Result<()> {
    // Small frames (JSON after audio) must not wait for the client's delayed ACK.
    socket.set_nodelay(true)?;
    let reading = ReadSide { socket: socket.try_clone()?, handshaken: false };
    let mut reader = tungstenite::accept_hdr(reading, check_path).map_err(io::Error::other)?;
    reader.get_mut().handshaken = true;
    let mut ws = WebSocket::from_raw_socket(socket.try_clone()?, Role::Server, None);
    let (inputs_tx, inputs) = mpsc::sync_channel(QUEUE);
    let client_tx = inputs_tx.clone();
    std::thread::spawn(move || read_frames(reader, client_tx));

    let capabilities = Arc::new(engine.capabilities().clone());
    let mut session = Session::new(Instant::now(), id, capabilities, Arc::new(SessionOptions::default()));
    let mut peer_gone = false;
    loop {
        while let Some(output) = session.poll_output() {
            let written = match output {
                Output::Text(text) if !peer_gone => ws.write(Message::text(text)),
                Output::Binary(bytes) if !peer_gone => ws.write(Message::binary(bytes)),
                Output::Close(code) if !peer_gone => {
                    ws.close(Some(CloseFrame { code: CloseCode::from(code), reason: "".into() }))
                }
                Output::Text(_) | Output::Binary(_) | Output::Close(_) => Ok(()),
                Output::Engine(EngineCommand::Synthesize { id, request }) => {
                    engine.submit(id, request, Box::new(Events(inputs_tx.clone())));
                    Ok(())
                }
                Output::Engine(EngineCommand::Abort { id }) => {
                    engine.abort(id);
                    Ok(())
                }
                // The request's end: this driver keeps no in-flight bookkeeping.
                Output::RequestEnded { .. } => Ok(()),
                // This connection's own thread may do the encoding: it blocks no one else.
                Output::Encode { id, job } => {
                    let _ = session.handle_encoded(Instant::now(), id, job.run());
                    Ok(())
                }
            };
            if written.and_then(|()| ws.flush()).is_err() {
                // The session aborts what the client can no longer hear; those outputs follow.
                peer_gone = true;
                session.handle_client(Instant::now(), ClientFrame::Closed);
            }
        }
        if session.is_closed() {
            break;
        }
        let input = match session.poll_timeout() {
            Some(deadline) => inputs.recv_timeout(deadline.saturating_duration_since(Instant::now())),
            None => inputs.recv().map_err(|_| RecvTimeoutError::Disconnected),
        };
        let now = Instant::now();
        match input {
            Ok(Input::Client(ClientFrame::Closed)) => {
                // The client closed or vanished: answer its close frame, if it can hear it.
                let _ = ws.close(None).and_then(|()| ws.flush());
                peer_gone = true;
                session.handle_client(now, ClientFrame::Closed);
            }
            Ok(Input::Client(frame)) => session.handle_client(now, frame),
            Ok(Input::Ping(payload)) => drop(ws.send(Message::Pong(payload.into()))),
            // `Err` is an event of a request already aborted: nothing to do.
            Ok(Input::Engine(event)) => drop(session.handle_engine(now, event)),
            Err(RecvTimeoutError::Timeout) => session.handle_timeout(now),
            // This thread holds a sender: unreachable, but ending is the safe answer.
            Err(RecvTimeoutError::Disconnected) => break,
        }
    }
    if !peer_gone {
        // We closed: give the client a moment to answer, so the connection ends cleanly.
        let linger = Instant::now() + CLOSE_LINGER;
        while let Ok(input) = inputs.recv_timeout(linger.saturating_duration_since(Instant::now())) {
            if matches!(input, Input::Client(ClientFrame::Closed)) {
                break;
            }
        }
    }
    // Wakes the reader if it still waits; an error only means the socket is already gone.
    let _ = socket.shutdown(Shutdown::Both);
    Ok(())
}

/// Only the protocol's path is a WebSocket here.
// The signature is tungstenite's handshake callback's.
#[allow(clippy::result_large_err)]
fn check_path(request: &Request, response: Response) -> Result<Response, ErrorResponse> {
    if request.uri().path() == PATH {
        return Ok(response);
    }
    let mut refusal = ErrorResponse::new(Some("not found".to_owned()));
    *refusal.status_mut() = StatusCode::NOT_FOUND;
    Err(refusal)
}

/// Whole messages from the client, until it leaves. tungstenite gathers fragments, unmasks and
/// checks UTF-8; pings and the client's close are passed on for the connection thread to answer.
fn read_frames(mut reader: WebSocket<ReadSide>, inputs: SyncSender<Input>) {
    loop {
        let input = match reader.read() {
            Ok(Message::Text(text)) => Input::Client(ClientFrame::Text(text.to_string())),
            Ok(Message::Binary(bytes)) => Input::Client(ClientFrame::Binary(bytes.to_vec())),
            Ok(Message::Ping(payload)) => Input::Ping(payload.to_vec()),
            Ok(Message::Pong(_) | Message::Frame(_)) => continue,
            Ok(Message::Close(_)) | Err(_) => break,
        };
        if inputs.send(input).is_err() {
            return;
        }
    }
    let _ = inputs.send(Input::Client(ClientFrame::Closed));
}

/// The reader's view of the socket. tungstenite answers pings and closes as it reads; after the
/// handshake those writes are dropped here, so that only the connection thread writes to the
/// socket (two writers could interleave the bytes of their frames).
struct ReadSide {
    socket: TcpStream,
    handshaken: bool,
}

impl Read for ReadSide {
    fn read(&mut self, buf: &mut [u8]) -> io::Result<usize> {
        self.socket.read(buf)
    }
}

impl Write for ReadSide {
    fn write(&mut self, buf: &[u8]) -> io::Result<usize> {
        if self.handshaken {
            Ok(buf.len())
        } else {
            self.socket.write(buf)
        }
    }

    fn flush(&mut self) -> io::Result<()> {
        self.socket.flush()
    }
}

/// A request's events, into its connection's queue. `send` waits while the queue is full (the
/// engine thread pauses; nobody else does); `try_send` never waits, for engines that deliver
/// from the connection's own thread, inside `submit`.
struct Events(SyncSender<Input>);

impl EventSink for Events {
    fn send(&self, event: EngineEvent) -> bool {
        self.0.send(Input::Engine(event)).is_ok()
    }

    fn try_send(&self, event: EngineEvent) -> Result<(), TrySendError> {
        match self.0.try_send(Input::Engine(event)) {
            Ok(()) => Ok(()),
            Err(mpsc::TrySendError::Full(Input::Engine(event))) => Err(TrySendError::Full(event)),
            Err(_) => Err(TrySendError::Closed),
        }
    }
}
