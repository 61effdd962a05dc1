//! One accepted TCP connection: HTTP/1.1 requests, then possibly the WebSocket.

use std::net::SocketAddr;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use fastwebsockets::{Frame, OpCode};
use hyper::server::conn::http1;
use hyper::service::service_fn;
use hyper_util::rt::{TokioIo, TokioTimer};
use tokio::net::TcpStream;
use tokio::sync::watch;
use tracing::{debug, info_span, Instrument};

use crate::context::{Busy, ConnectionContext, Socket, UpgradeSlot};
use crate::metrics::{Closed, Refusal};
use crate::routes;
use crate::shared::{stopping, Shared};
use crate::sockets::Admission;
use crate::websocket;
use crate::write_timeout::WriteTimeout;

/// How long a refused WebSocket waits for the peer's answer to its close frame.
const REFUSAL_LINGER: Duration = Duration::from_secs(2);
const CLOSE_TRY_AGAIN_LATER: u16 = 1013;

/// Serve one accepted socket until it ends, is closed to make room for another, or (silent)
/// passes the first-byte deadline. `refused`: turned away at accept (while draining).
pub(crate) async fn serve_connection(
    stream: TcpStream,
    peer: SocketAddr,
    socket: Socket,
    refused: Option<Refusal>,
    shared: Arc<Shared>,
    stop: watch::Receiver<bool>,
) {
    let span = info_span!("conn", id = socket.id, %peer);
    let context = Arc::new(ConnectionContext::new(socket, refused));
    async {
        tokio::select! {
            _ = run(stream, context.clone(), shared, stop) => {}
            _ = context.socket.closed_for_room() => debug!("closed to make room for another connection"),
        }
    }
    .instrument(span)
    .await;
}

/// Wait for the peer's first byte, for at most `deadline` (or until the server stops, where
/// `stop` is given): false when the socket is to be closed unanswered.
pub(crate) async fn first_byte(
    stream: &TcpStream,
    deadline: Duration,
    shared: &Shared,
    stop: Option<&mut watch::Receiver<bool>>,
) -> bool {
    let stopping = async {
        match stop {
            Some(stop) => stopping(stop).await,
            None => std::future::pending().await,
        }
    };
    let mut byte = [0u8; 1];
    tokio::select! {
        peeked = tokio::time::timeout(deadline, stream.peek(&mut byte)) => match peeked {
            Ok(Ok(n)) => n > 0,
            Ok(Err(e)) => {
                debug!(error = %e, "read from client failed");
                false
            }
            Err(_) => {
                debug!(?deadline, "nothing received within the first-byte deadline");
                shared.metrics.socket_closed(Closed::FirstByte);
                false
            }
        },
        // Nothing asked yet, so nothing to finish.
        _ = stopping => false,
    }
}

async fn run(stream: TcpStream, context: Arc<ConnectionContext>, shared: Arc<Shared>, mut stop: watch::Receiver<bool>) {
    // A connection refused at accept (the server drains) waits for its request, to answer it
    // with the refusal a balancer retries elsewhere (closed unanswered, it would look like a
    // failed server); one taken before the drain that has asked nothing yet is closed.
    let refused = context.admission().is_some();
    if !first_byte(&stream, shared.first_byte_timeout, &shared, (!refused).then_some(&mut stop)).await {
        return;
    }
    let slot: UpgradeSlot = Arc::new(Mutex::new(None));
    let service = {
        let shared = shared.clone();
        let slot = slot.clone();
        let context = context.clone();
        service_fn(move |request| {
            let response = routes::route(request, shared.clone(), context.clone(), slot.clone());
            async move { Ok::<_, std::convert::Infallible>(response.await) }
        })
    };
    let http = http1::Builder::new()
        // The timer enables hyper's header read timeout, so a peer can't hold a
        // connection open by trickling a request head (or by sending nothing at all).
        .timer(TokioTimer::new())
        .header_read_timeout(shared.header_timeout)
        .serve_connection(TokioIo::new(WriteTimeout::new(stream, shared.write_timeout)), service)
        .with_upgrades();
    // Boxed rather than pinned on the stack, so it can be dropped before the upgrade is awaited.
    let mut http = Box::pin(http);
    let served = tokio::select! {
        served = http.as_mut() => served,
        // A connection refused at accept answers its one request even while the server drains
        // (that answer is the point); the server ends it after the drain if it lingers.
        _ = stopping(&mut stop), if context.admission().is_none() => {
            http.as_mut().graceful_shutdown();
            http.as_mut().await
        }
    };
    if let Err(e) = served {
        debug!(error = %e, "http connection ended with an error");
    }
    // hyper's connection holds the sending side of a pending upgrade. Once it has ended, the
    // upgrade is either handed over already or never will be; dropping the connection turns
    // the latter into an error, where keeping it would leave the upgrade (and this task, and
    // its socket) waiting forever, e.g. when the peer reset before the 101 was written.
    drop(http);
    let upgrade = slot.lock().unwrap_or_else(|poisoned| poisoned.into_inner()).take();
    if let Some((upgrade, busy)) = upgrade {
        match (upgrade.await, context.admission()) {
            (Ok(ws), Some(Admission::Admitted)) => websocket::run(ws, context.id, shared, stop).await,
            (Ok(ws), _) => refuse_websocket(ws, shared.max_connections, busy).await,
            (Err(e), _) => debug!(error = %e, "websocket upgrade failed"),
        }
    }
}

/// Tell a WebSocket client the server is full: close with 1013 (try again later) and a reason,
/// then wait briefly for its close frame.
async fn refuse_websocket(
    mut ws: fastwebsockets::WebSocket<TokioIo<hyper::upgrade::Upgraded>>,
    max: Option<usize>,
    busy: Busy,
) {
    let reason = match max {
        Some(max) => format!("server at capacity ({max} connections); retry later"),
        None => "server at capacity; retry later".to_owned(),
    };
    debug!(%reason, "refusing websocket");
    // The close frame is already ours; the peer's answer needs no echo.
    ws.set_auto_close(false);
    if ws.write_frame(Frame::close(CLOSE_TRY_AGAIN_LATER, reason.as_bytes())).await.is_err() {
        return;
    }
    // Answered: while it lingers, the socket may be closed to make room.
    drop(busy);
    let _ = tokio::time::timeout(REFUSAL_LINGER, async {
        while let Ok(frame) = ws.read_frame().await {
            if frame.opcode == OpCode::Close {
                break;
            }
        }
    })
    .await;
}
