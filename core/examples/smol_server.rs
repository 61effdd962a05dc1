//! The same session on a second async runtime: `smol`, with `async-tungstenite` over smol's
//! sockets. The core needs nothing from tokio (nor from smol): it is fed inputs and drained.
//!
//! ```sh
//! cargo run -p speechstream-core --example smol_server -- 127.0.0.1:8000
//! ```
//!
//! then point any client of the protocol at `ws://127.0.0.1:8000/v1/audio/speech/stream`.
//!
//! One task per connection. It waits for whichever comes first of a client message, an engine
//! event and the session's deadline, feeds it to the session, and carries out the outputs,
//! awaiting each write (a slow client slows its own engine request and nobody else's).

use std::sync::Arc;
use std::time::{Duration, Instant};

use async_tungstenite::tungstenite::handshake::server::{ErrorResponse, Request, Response};
use async_tungstenite::tungstenite::protocol::{frame::coding::CloseCode, CloseFrame};
use async_tungstenite::tungstenite::{http::StatusCode, Message};
use async_tungstenite::WebSocketStream;
use smol::channel::{self, Receiver, Sender};
use smol::future;
use smol::net::{TcpListener, TcpStream};
use smol::stream::StreamExt;
use smol::Timer;
use speechstream_core::engine::{Engine, EngineEvent, EventSink, TrySendError};
use speechstream_core::session::{ClientFrame, EngineCommand, Output, Session, SessionOptions};
use speechstream_core::synthetic::{SyntheticEngine, SyntheticOptions};

const PATH: &str = "/v1/audio/speech/stream";
/// Engine events a connection holds before the engine waits: the backpressure.
const EVENT_QUEUE: usize = 16;
/// How long to wait for the client to answer our close frame.
const CLOSE_LINGER: Duration = Duration::from_secs(2);

/// What the connection task was woken by.
enum Input {
    Client(ClientFrame),
    Engine(EngineEvent),
    Deadline,
}

fn main() -> std::io::Result<()> {
    let addr = std::env::args().nth(1).unwrap_or_else(|| "127.0.0.1:8000".to_owned());
    smol::block_on(async {
        let listener = TcpListener::bind(addr.as_str()).await?;
        // The tests start this on port 0 and read the port from this line.
        println!("listening on ws://{}{PATH}", listener.local_addr()?);
        let engine = Arc::new(SyntheticEngine::new(SyntheticOptions::default()));
        for id in 1.. {
            let Ok((socket, _)) = listener.accept().await else { continue };
            let engine = engine.clone();
            smol::spawn(async move {
                if let Err(e) = serve(id, socket, engine).await {
                    eprintln!("connection {id}: {e}");
                }
            })
            .detach();
        }
        Ok(())
    })
}

async fn serve(id: u64, socket: TcpStream, engine: Arc<SyntheticEngine>) -> std::io::Result<()> {
    // Small frames (JSON after audio) must not wait for the client's delayed ACK.
    socket.set_nodelay(true)?;
    let mut ws = async_tungstenite::accept_hdr_async(socket, check_path).await.map_err(std::io::Error::other)?;
    let (events_tx, events) = channel::bounded(EVENT_QUEUE);
    let capabilities = Arc::new(engine.capabilities().clone());
    let mut session = Session::new(Instant::now(), id, capabilities, Arc::new(SessionOptions::default()));
    let mut peer_gone = false;
    loop {
        while let Some(output) = session.poll_output() {
            let written = match output {
                Output::Text(text) if !peer_gone => ws.send(Message::text(text)).await,
                Output::Binary(bytes) if !peer_gone => ws.send(Message::binary(bytes)).await,
                Output::Close(code) if !peer_gone => {
                    ws.close(Some(CloseFrame { code: CloseCode::from(code), reason: "".into() })).await
                }
                Output::Text(_) | Output::Binary(_) | Output::Close(_) => Ok(()),
                Output::Engine(EngineCommand::Synthesize { id, request }) => {
                    engine.submit(id, request, Box::new(Events(events_tx.clone())));
                    Ok(())
                }
                Output::Engine(EngineCommand::Abort { id }) => {
                    engine.abort(id);
                    Ok(())
                }
                // The request's end: this driver keeps no in-flight bookkeeping.
                Output::RequestEnded { .. } => Ok(()),
                // Encoding is CPU work: off the executor, on smol's blocking pool.
                Output::Encode { id, job } => {
                    let encoded = smol::unblock(move || job.run()).await;
                    let _ = session.handle_encoded(Instant::now(), id, encoded);
                    Ok(())
                }
            };
            if written.is_err() {
                // The session aborts what the client can no longer hear; those outputs follow.
                peer_gone = true;
                session.handle_client(Instant::now(), ClientFrame::Closed);
            }
        }
        if session.is_closed() {
            break;
        }
        let input = next_input(&mut ws, &events, session.poll_timeout()).await;
        let now = Instant::now();
        match input {
            Input::Client(ClientFrame::Closed) => {
                // The client closed or vanished: send tungstenite's answer to its close frame.
                let _ = ws.close(None).await;
                peer_gone = true;
                session.handle_client(now, ClientFrame::Closed);
            }
            Input::Client(frame) => session.handle_client(now, frame),
            // `Err` is an event of a request already aborted: nothing to do.
            Input::Engine(event) => drop(session.handle_engine(now, event)),
            Input::Deadline => session.handle_timeout(now),
        }
    }
    if !peer_gone {
        // We closed: give the client a moment to answer, so the connection ends cleanly.
        let answered = async { while let Some(Ok(_)) = ws.next().await {} };
        let linger = async {
            Timer::after(CLOSE_LINGER).await;
        };
        future::or(answered, linger).await;
    }
    Ok(())
}

/// Whichever comes first: a client message, an engine event, the deadline. `race` picks at
/// random when several are ready, so a flood of either kind cannot starve the other (an
/// `input.cancel` gets through while audio streams). Dropping the losers loses nothing: each
/// keeps its progress in the stream or channel it reads.
async fn next_input(
    ws: &mut WebSocketStream<TcpStream>,
    events: &Receiver<EngineEvent>,
    deadline: Option<Instant>,
) -> Input {
    let client = async {
        loop {
            // tungstenite gathers fragments, unmasks, checks UTF-8 and answers pings itself.
            return match ws.next().await {
                Some(Ok(Message::Text(text))) => Input::Client(ClientFrame::Text(text.to_string())),
                Some(Ok(Message::Binary(bytes))) => Input::Client(ClientFrame::Binary(bytes.to_vec())),
                Some(Ok(Message::Ping(_) | Message::Pong(_) | Message::Frame(_))) => continue,
                Some(Ok(Message::Close(_)) | Err(_)) | None => Input::Client(ClientFrame::Closed),
            };
        }
    };
    let event = async {
        match events.recv().await {
            Ok(event) => Input::Engine(event),
            // This task holds a sender, so the channel never closes.
            Err(_) => future::pending().await,
        }
    };
    let timer = async {
        match deadline {
            Some(deadline) => {
                Timer::at(deadline).await;
                Input::Deadline
            }
            None => future::pending().await,
        }
    };
    future::race(future::race(client, event), timer).await
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

/// A request's events, into its connection's queue. Engines call `send` from their own threads,
/// where waiting for room is the backpressure; it must never run on the executor's threads,
/// which is why the synthetic engine uses `try_send` when it delivers inside `submit`.
struct Events(Sender<EngineEvent>);

impl EventSink for Events {
    fn send(&self, event: EngineEvent) -> bool {
        self.0.send_blocking(event).is_ok()
    }

    fn try_send(&self, event: EngineEvent) -> Result<(), TrySendError> {
        self.0.try_send(event).map_err(|e| match e {
            channel::TrySendError::Full(event) => TrySendError::Full(event),
            channel::TrySendError::Closed(_) => TrySendError::Closed,
        })
    }
}
