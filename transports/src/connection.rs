//! One accepted TCP connection: HTTP/1.1 requests, then possibly the WebSocket.

use std::net::SocketAddr;
use std::sync::{Arc, Mutex};

use fastwebsockets::upgrade::UpgradeFut;
use hyper::server::conn::http1;
use hyper::service::service_fn;
use hyper_util::rt::{TokioIo, TokioTimer};
use tokio::net::TcpStream;
use tokio::sync::watch;
use tracing::{debug, info_span, Instrument};

use crate::routes;
use crate::server::Shared;
use crate::websocket;

/// Where the request handler leaves a WebSocket upgrade for the connection task to run after
/// hyper has written the 101 response and handed the socket over. Running the WebSocket here,
/// rather than in a task spawned by the handler, keeps one task per connection and lets the
/// server track (and at shutdown, await) every connection through one `JoinSet`.
pub(crate) type UpgradeSlot = Arc<Mutex<Option<UpgradeFut>>>;

pub(crate) async fn serve_connection(
    stream: TcpStream,
    peer: SocketAddr,
    id: u64,
    shared: Arc<Shared>,
    stop: watch::Receiver<bool>,
) {
    let span = info_span!("conn", id, %peer);
    run(stream, id, shared, stop).instrument(span).await
}

async fn run(stream: TcpStream, id: u64, shared: Arc<Shared>, mut stop: watch::Receiver<bool>) {
    let slot: UpgradeSlot = Arc::new(Mutex::new(None));
    let service = {
        let shared = shared.clone();
        let slot = slot.clone();
        service_fn(move |request| {
            let response = routes::route(request, &shared, &slot);
            async move { Ok::<_, std::convert::Infallible>(response) }
        })
    };
    let http = http1::Builder::new()
        // The timer enables hyper's header read timeout, so a peer can't hold a
        // connection open by trickling a request head.
        .timer(TokioTimer::new())
        .serve_connection(TokioIo::new(stream), service)
        .with_upgrades();
    tokio::pin!(http);
    let served = tokio::select! {
        served = http.as_mut() => served,
        _ = stopping(&mut stop) => {
            http.as_mut().graceful_shutdown();
            http.as_mut().await
        }
    };
    if let Err(e) = served {
        debug!(error = %e, "http connection ended with an error");
    }
    let upgrade = slot.lock().unwrap_or_else(|poisoned| poisoned.into_inner()).take();
    if let Some(upgrade) = upgrade {
        match upgrade.await {
            Ok(ws) => websocket::run(ws, id, shared, stop).await,
            Err(e) => debug!(error = %e, "websocket upgrade failed"),
        }
    }
}

/// Resolves once the server starts shutting down (or is gone).
pub(crate) async fn stopping(stop: &mut watch::Receiver<bool>) {
    // The guard `wait_for` returns isn't Send; drop it here rather than hold it in a select.
    let _ = stop.wait_for(|stopping| *stopping).await.is_ok();
}
