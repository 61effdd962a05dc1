//! The accept loop, per-server shared state and graceful shutdown.

use std::future::Future;
use std::io;
use std::net::SocketAddr;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::Arc;
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use speechstream_core::engine::{Engine, OPENAI_MODELS, OPENAI_VOICES};
use speechstream_core::session::SessionOptions;
use speechstream_core::wyoming::{codes, error_event, WyomingOptions};
use tokio::net::{TcpListener, TcpStream};
use tokio::sync::watch;
use tokio::task::JoinSet;
use tracing::{debug, error, info, warn};

use crate::connection;
use crate::context::Admission;
use crate::metrics::{Metrics, Refusal};
use crate::shared::Shared;
use crate::wyoming;

/// How long connections get, past the shutdown grace, to write their close frames before
/// their tasks are dropped.
const CLOSE_MARGIN: Duration = Duration::from_secs(2);
/// Pause after a failed accept (e.g. out of file descriptors) so the loop doesn't spin.
const ACCEPT_BACKOFF: Duration = Duration::from_millis(100);
/// Connections beyond `max_connections` that may be held while they are told "no" with a
/// proper answer (a 503 JSON body, a WebSocket closed with 1013).
const REFUSAL_MARGIN: usize = 64;
/// Descriptors kept back from the default socket cap: the listener, the engine's files, logs.
const RESERVED_DESCRIPTORS: usize = 64;
/// Socket cap when the descriptor limit can't be read.
const FALLBACK_SOCKETS: usize = 1024;

/// Connection ids are unique in the process, not just per server, so servers sharing one
/// engine never hand it two requests with the same `RequestId`.
static NEXT_CONNECTION_ID: AtomicU64 = AtomicU64::new(1);

/// Settings of a server; the protocol's own tunables are in `session`.
#[derive(Clone, Debug)]
pub struct ServerConfig {
    pub session: SessionOptions,
    /// After the shutdown signal, how long a connection may take to finish the utterance in
    /// flight before it is closed with 1001.
    pub shutdown_grace: Duration,
    /// Engine events queued per connection before the engine's producer blocks.
    pub engine_event_queue: usize,
    /// When set, every endpoint but `/health` and `/ready` wants this key (`Authorization:
    /// Bearer`, or the `api_key` query parameter).
    pub api_key: Option<String>,
    /// Connections served at once; past it a connection gets a clear refusal (HTTP 503, or a
    /// WebSocket closed with 1013) rather than a share of an overloaded engine.
    pub max_connections: Option<usize>,
    /// How long a peer may take to send a request's head (and how long an idle keep-alive
    /// connection is kept), so a peer can't hold a connection by trickling bytes.
    pub header_timeout: Duration,
    /// How long a peer may take to send a request's whole body.
    pub body_timeout: Duration,
    /// TCP connections held at once, counting those being refused; past it a new connection
    /// gets a fixed 503 at accept and is closed, so idle floods can't exhaust descriptors.
    /// `None`: `max_connections` plus a small margin, else the descriptor limit less a reserve.
    pub max_sockets: Option<usize>,
    /// How long a write may wait for a peer that has stopped reading before the connection is
    /// dropped (and its engine request aborted).
    pub write_timeout: Duration,
    /// More names of the served model, listed in `GET /v1/models` after the engine's own and
    /// accepted as `model` (HTTP, `session.config`).
    pub extra_models: Vec<String>,
    /// Model names accepted as `model` but not listed. Default: OpenAI's ([`OPENAI_MODELS`]).
    pub model_aliases: Vec<String>,
    /// Other names for the engine's voices, `(alias, voice)`; `voice` may be `default`.
    /// Default: each of OpenAI's voice names ([`OPENAI_VOICES`]) stands for the default voice.
    pub voice_aliases: Vec<(String, String)>,
}

impl Default for ServerConfig {
    fn default() -> Self {
        ServerConfig::new(SessionOptions::default())
    }
}

impl ServerConfig {
    pub fn new(session: SessionOptions) -> ServerConfig {
        ServerConfig {
            session,
            shutdown_grace: Duration::from_secs(10),
            engine_event_queue: 16,
            api_key: None,
            max_connections: None,
            header_timeout: Duration::from_secs(30),
            body_timeout: Duration::from_secs(30),
            max_sockets: None,
            write_timeout: Duration::from_secs(30),
            extra_models: Vec::new(),
            model_aliases: OPENAI_MODELS.iter().map(|m| m.to_string()).collect(),
            voice_aliases: OPENAI_VOICES.iter().map(|v| (v.to_string(), "default".to_owned())).collect(),
        }
    }
}

/// The largest message, in bytes, that can still be within the character limits: a char is at
/// most 4 bytes of UTF-8. The core does the exact character counts; this bound only keeps a
/// hostile frame from being buffered whole. The slack lets a message just over a limit reach the
/// core, which answers it with the protocol's error instead of a dropped connection.
fn max_message_bytes(options: &SessionOptions) -> usize {
    let chars = options.limits.max_text_message_chars.max(options.limits.max_config_message_chars);
    chars.saturating_mul(4).saturating_add(64 * 1024)
}

/// Serve HTTP and the streaming WebSocket on `listener` until `shutdown` resolves.
///
/// On shutdown it drains: `/ready` answers 503 and new work is refused (503) while each
/// WebSocket connection finishes the utterance it is generating, for at most
/// `cfg.shutdown_grace`, and is closed with 1001; it stops listening and returns once every
/// connection has ended (or been dropped, a short while past the grace).
pub async fn serve(
    listener: TcpListener,
    engine: Arc<dyn Engine>,
    cfg: ServerConfig,
    shutdown: impl Future<Output = ()>,
) -> io::Result<()> {
    serve_with_wyoming(listener, None, engine, cfg, shutdown).await
}

/// A Wyoming listener (Home Assistant's protocol) served beside HTTP by [`serve_with_wyoming`].
pub struct WyomingListener {
    pub listener: TcpListener,
    pub options: WyomingOptions,
}

/// [`serve`], and Wyoming text to speech on a second listener: the same engine, connection
/// limits, shutdown and metrics (its utterances under `transport="wyoming"`).
pub async fn serve_with_wyoming(
    listener: TcpListener,
    wyoming: Option<WyomingListener>,
    engine: Arc<dyn Engine>,
    cfg: ServerConfig,
    shutdown: impl Future<Output = ()>,
) -> io::Result<()> {
    let wyoming = wyoming.map(|w| (w.listener, Arc::new(w.options)));
    let mut capabilities = engine.capabilities().clone();
    for model in cfg.extra_models {
        if !capabilities.models.contains(&model) {
            capabilities.models.push(model);
        }
    }
    capabilities.voice_aliases = cfg.voice_aliases;
    capabilities.model_aliases = cfg.model_aliases;
    let shared = Arc::new(Shared {
        capabilities: Arc::new(capabilities),
        engine,
        max_message_bytes: max_message_bytes(&cfg.session),
        options: Arc::new(cfg.session),
        shutdown_grace: cfg.shutdown_grace,
        engine_event_queue: cfg.engine_event_queue.max(1),
        started_unix: SystemTime::now().duration_since(UNIX_EPOCH).map(|d| d.as_secs()).unwrap_or(0),
        api_key: cfg.api_key.filter(|key| !key.is_empty()),
        max_connections: cfg.max_connections,
        header_timeout: cfg.header_timeout,
        body_timeout: cfg.body_timeout,
        write_timeout: cfg.write_timeout,
        max_sockets: socket_cap(cfg.max_sockets, cfg.max_connections),
        turned_away: turned_away_response(),
        metrics: Metrics::default(),
        draining: AtomicBool::new(false),
    });
    let (stop_tx, stop_rx) = watch::channel(false);
    let mut connections = JoinSet::new();
    // Connections only told "no" (at capacity, or draining); not waited for at shutdown.
    let mut refusals = JoinSet::new();
    let mut drain_deadline = None;
    info!(addr = %listener.local_addr()?, "listening");
    if let Some((listener, _)) = &wyoming {
        info!(addr = %listener.local_addr()?, "wyoming listening");
    }
    tokio::pin!(shutdown);
    // While draining the listener stays open, so load balancers can see `/ready` turn 503 and
    // new work is answered with a refusal they can retry elsewhere, until the connections in
    // flight have finished (or the grace is over).
    loop {
        if drain_deadline.is_some() && connections.is_empty() {
            break;
        }
        tokio::select! {
            _ = &mut shutdown, if drain_deadline.is_none() => {
                info!(
                    connections = connections.len(),
                    grace = ?shared.shutdown_grace,
                    "shutting down: draining, new work is refused"
                );
                shared.draining.store(true, Ordering::Relaxed);
                let _ = stop_tx.send(true);
                drain_deadline = Some(tokio::time::Instant::now() + shared.shutdown_grace + CLOSE_MARGIN);
            }
            accepted = listener.accept() => match accepted {
                Ok((stream, peer)) => {
                    let draining = drain_deadline.is_some();
                    admit(Door::Http, stream, peer, &shared, draining, &stop_rx, &mut connections, &mut refusals);
                }
                Err(e) => {
                    warn!(error = %e, "accept failed");
                    tokio::time::sleep(ACCEPT_BACKOFF).await;
                }
            },
            accepted = accept(wyoming.as_ref().map(|(listener, _)| listener)), if wyoming.is_some() => match accepted {
                Ok((stream, peer)) => {
                    let options = wyoming.as_ref().map(|(_, options)| options.clone()).unwrap_or_default();
                    let draining = drain_deadline.is_some();
                    admit(Door::Wyoming(options), stream, peer, &shared, draining, &stop_rx, &mut connections, &mut refusals);
                }
                Err(e) => {
                    warn!(error = %e, "wyoming accept failed");
                    tokio::time::sleep(ACCEPT_BACKOFF).await;
                }
            },
            Some(joined) = connections.join_next(), if !connections.is_empty() => report_join(joined),
            Some(joined) = refusals.join_next(), if !refusals.is_empty() => report_join(joined),
            _ = sleep_until(drain_deadline), if drain_deadline.is_some() => {
                warn!(connections = connections.len(), "connections still open after the grace; dropping them");
                connections.shutdown().await;
                break;
            }
        }
    }
    drop(listener);
    drop(wyoming);
    refusals.shutdown().await;
    info!("shut down");
    Ok(())
}

/// Which protocol a listener speaks.
enum Door {
    Http,
    Wyoming(Arc<WyomingOptions>),
}

async fn accept(listener: Option<&TcpListener>) -> io::Result<(TcpStream, SocketAddr)> {
    match listener {
        Some(listener) => listener.accept().await,
        None => std::future::pending().await,
    }
}

/// Take an accepted connection on, or tell it no: past `max_sockets` at once, with a fixed answer;
/// while draining or past `max_connections`, in a task that answers clearly.
#[allow(clippy::too_many_arguments)]
fn admit(
    door: Door,
    stream: TcpStream,
    peer: SocketAddr,
    shared: &Arc<Shared>,
    draining: bool,
    stop_rx: &watch::Receiver<bool>,
    connections: &mut JoinSet<()>,
    refusals: &mut JoinSet<()>,
) {
    if shared.metrics.sockets_open.load(Ordering::Relaxed) >= shared.max_sockets as u64 {
        shared.metrics.refused(Refusal::Sockets);
        // Nothing is read and no task is spawned: the answer fits in the empty send buffer, and
        // dropping the stream closes it.
        let _ = match door {
            Door::Http => stream.try_write(&shared.turned_away),
            Door::Wyoming(_) => {
                stream.try_write(&error_event(codes::BUSY, "server has too many open connections; retry later"))
            }
        };
        return;
    }
    // Without it a small JSON frame after audio can wait for the peer's delayed ACK.
    if let Err(e) = stream.set_nodelay(true) {
        debug!(error = %e, "set TCP_NODELAY failed");
    }
    let id = NEXT_CONNECTION_ID.fetch_add(1, Ordering::Relaxed);
    let open = shared.metrics.connections_open.load(Ordering::Relaxed);
    let admission = if draining {
        Admission::Refused(Refusal::Draining)
    } else if shared.max_connections.is_some_and(|max| open >= max as u64) {
        Admission::Refused(Refusal::Capacity)
    } else {
        Admission::Admitted
    };
    let socket = connection::SocketCount::held(shared);
    let (shared, stop) = (shared.clone(), stop_rx.clone());
    let set = match admission {
        Admission::Admitted => {
            shared.metrics.connection_opened();
            connections
        }
        Admission::Refused(why) => {
            shared.metrics.refused(why);
            refusals
        }
    };
    match door {
        Door::Http => set.spawn(connection::serve_connection(stream, peer, id, admission, shared, stop, socket)),
        Door::Wyoming(options) => {
            set.spawn(wyoming::serve_connection(stream, peer, id, admission, shared, options, stop, socket))
        }
    };
}

/// `--max-sockets`, or its default.
fn socket_cap(max_sockets: Option<usize>, max_connections: Option<usize>) -> usize {
    match (max_sockets, max_connections) {
        (Some(sockets), _) => sockets,
        (None, Some(connections)) => connections.saturating_add(REFUSAL_MARGIN),
        (None, None) => {
            descriptor_limit().map_or(FALLBACK_SOCKETS, |limit| limit.saturating_sub(RESERVED_DESCRIPTORS)).max(1)
        }
    }
}

/// The process's soft limit on open file descriptors.
#[cfg(unix)]
fn descriptor_limit() -> Option<usize> {
    let mut limit = libc::rlimit { rlim_cur: 0, rlim_max: 0 };
    // SAFETY: getrlimit only writes the struct it is given.
    let ok = unsafe { libc::getrlimit(libc::RLIMIT_NOFILE, &mut limit) } == 0;
    (ok && limit.rlim_cur != libc::RLIM_INFINITY).then(|| usize::try_from(limit.rlim_cur).unwrap_or(usize::MAX))
}

#[cfg(not(unix))]
fn descriptor_limit() -> Option<usize> {
    None
}

fn turned_away_response() -> Vec<u8> {
    let body = speechstream_core::speech_http::error_json(
        "Server has too many open connections; retry later",
        "ServiceUnavailableError",
        None,
        503,
    );
    format!(
        "HTTP/1.1 503 Service Unavailable\r\ncontent-type: application/json\r\ncontent-length: {}\r\nconnection: close\r\n\r\n{body}",
        body.len()
    )
    .into_bytes()
}

async fn sleep_until(deadline: Option<tokio::time::Instant>) {
    match deadline {
        Some(deadline) => tokio::time::sleep_until(deadline).await,
        None => std::future::pending().await,
    }
}

fn report_join(joined: Result<(), tokio::task::JoinError>) {
    if let Err(e) = joined {
        if e.is_panic() {
            error!(error = %e, "connection task panicked");
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use speechstream_core::parse::Limits;

    fn options(text: usize, config: usize) -> SessionOptions {
        SessionOptions {
            limits: Limits { max_text_message_chars: text, max_config_message_chars: config },
            idle_timeout: Duration::from_secs(30),
            config_timeout: Duration::from_secs(10),
            max_buffered_chars: 1 << 20,
            max_deferred_bytes: 8 << 20,
            max_whole_audio_seconds: 600,
        }
    }

    #[test]
    fn socket_cap_defaults_to_a_margin_past_the_connection_limit() {
        assert_eq!(socket_cap(Some(7), Some(100)), 7);
        assert_eq!(socket_cap(None, Some(100)), 100 + REFUSAL_MARGIN);
        assert!(socket_cap(None, None) >= 1);
    }

    #[test]
    fn message_bound_covers_the_larger_limit_in_worst_case_utf8() {
        assert!(max_message_bytes(&options(32, 64)) >= 64 * 4);
        assert!(max_message_bytes(&options(1 << 20, 64)) >= 4 << 20);
        assert_eq!(max_message_bytes(&options(usize::MAX, 1)), usize::MAX);
    }
}
