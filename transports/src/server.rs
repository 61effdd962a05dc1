//! The accept loop, per-server shared state and graceful shutdown.

use std::future::Future;
use std::io;
use std::net::SocketAddr;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::Arc;
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use speechstream_core::catalog::{Catalog, Naming};
use speechstream_core::engine::Engine;
use speechstream_core::session::SessionOptions;
use speechstream_core::wyoming::{codes, error_event, WyomingOptions};
use tokio::net::{TcpListener, TcpStream};
use tokio::sync::watch;
use tokio::task::JoinSet;
use tracing::{debug, error, info, warn};

use crate::agent;
use crate::connection;
use crate::context::Socket;
use crate::metrics::{Metrics, Refusal};
use crate::shared::{sleep_until, Shared};
use crate::sockets::Sockets;
use crate::wyoming;

/// How long connections get, past the shutdown grace, to write their close frames before
/// their tasks are dropped.
const CLOSE_MARGIN: Duration = Duration::from_secs(2);
/// Pause after a failed accept (e.g. out of file descriptors) so the loop doesn't spin.
const ACCEPT_BACKOFF: Duration = Duration::from_millis(100);
/// Sockets of the budget that connections holding a slot can never take (the default socket
/// budget past `max_connections`, and the default `max_connections` short of the budget): new
/// sockets being answered, probes, refusals.
const REFUSAL_MARGIN: usize = 64;
/// The listen backlog where the kernel's `somaxconn` cannot be read.
const FALLBACK_BACKLOG: u32 = 4096;
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
    /// WebSocket closed with 1013) rather than a share of an overloaded engine. A connection
    /// takes its slot with its first complete request (an HTTP request head, a WebSocket
    /// handshake, a Wyoming event), so silent sockets hold none; when they are all taken, the
    /// oldest idle keep-alive connection is closed to give its slot to a new request. `None`:
    /// the socket budget less a margin kept for probes and refusals.
    pub max_connections: Option<usize>,
    /// Connections (sockets, answered or not) held at once from one address; past it a new one
    /// gets a fixed 429 at accept and is closed. `None`: no per-address limit (the default; a
    /// proxy in front makes every client one address).
    pub max_connections_per_ip: Option<usize>,
    /// How long a peer may take to send a request's head (and how long an idle keep-alive
    /// connection is kept), so a peer can't hold a connection by trickling bytes.
    pub header_timeout: Duration,
    /// How long a new connection may stay silent before it is closed (at most
    /// `header_timeout`); a silent socket holds no connection slot meanwhile.
    pub first_byte_timeout: Duration,
    /// How long a peer may take to send a request's whole body.
    pub body_timeout: Duration,
    /// TCP connections held at once, counting those being refused and those not yet heard
    /// from. When it is full, a new connection has the oldest *spare* one closed (silent,
    /// trickling a request head, idle between keep-alive requests); only when every one is in
    /// the middle of a request or runs a session does it get a fixed 503 at accept. So floods
    /// of idle connections neither exhaust descriptors nor keep others out. `None`:
    /// `max_connections` plus a small margin, else the descriptor limit less a reserve.
    pub max_sockets: Option<usize>,
    /// How long a write may wait for a peer that has stopped reading before the connection is
    /// dropped (and its engine request aborted).
    pub write_timeout: Duration,
    /// More names of the served model, listed in `GET /v1/models` after the engine's own and
    /// accepted as `model` (HTTP, `session.config`).
    pub extra_models: Vec<String>,
    /// The server's names for the engine's voices and models besides the engine's own:
    /// model names accepted as `model` but not listed, and voice aliases `(alias, voice)`
    /// (`voice` may be `default`). Default: OpenAI's ([`Naming::openai`]).
    pub naming: Naming,
    /// Refuse what the engine cannot honour (style `instructions`) with a 400 or an error
    /// frame instead of ignoring it and saying so (`X-Ignored-Fields`, a log line); the
    /// default is to ignore ([`Catalog::with_strict`]).
    pub strict: bool,
    /// Export upstream vLLM-Omni's speech streaming metrics (`vllm_omni:audio_ttfp_s`, ...) in
    /// `/metrics` beside ours, labelled with the served model's name (`--vllm-omni-compat`).
    pub vllm_omni_metrics: bool,
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
            max_connections_per_ip: None,
            header_timeout: Duration::from_secs(30),
            first_byte_timeout: Duration::from_secs(5),
            body_timeout: Duration::from_secs(30),
            max_sockets: None,
            write_timeout: Duration::from_secs(30),
            extra_models: Vec::new(),
            naming: Naming::openai(),
            strict: false,
            vllm_omni_metrics: false,
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
    serve_listeners(Listeners { http: listener, wyoming, agent: None }, engine, cfg, shutdown).await
}

/// The listeners one server answers on.
pub struct Listeners {
    /// HTTP and the streaming WebSocket.
    pub http: TcpListener,
    /// Wyoming text to speech, if served.
    pub wyoming: Option<WyomingListener>,
    /// HAProxy's agent check: each connection gets one line saying how much new work this
    /// replica should get (`up ready 40%`, `drain` while draining, `down #why` once the engine
    /// has failed), then is closed. It holds no connection slot.
    pub agent: Option<TcpListener>,
}

/// [`serve_with_wyoming`], with an agent-check listener too.
pub async fn serve_listeners(
    listeners: Listeners,
    engine: Arc<dyn Engine>,
    cfg: ServerConfig,
    shutdown: impl Future<Output = ()>,
) -> io::Result<()> {
    let Listeners { http: listener, wyoming, agent } = listeners;
    let wyoming = wyoming.map(|w| (w.listener, Arc::new(w.options)));
    let max_sockets = socket_cap(cfg.max_sockets, cfg.max_connections);
    let max_slots = cfg.max_connections.unwrap_or(max_sockets.saturating_sub(REFUSAL_MARGIN).max(1));
    let mut capabilities = engine.capabilities().clone();
    for model in cfg.extra_models {
        if !capabilities.models.contains(&model) {
            capabilities.models.push(model);
        }
    }
    let metrics = match cfg.vllm_omni_metrics {
        // Labelled with the served model's name (`--served-model-name`'s first).
        true => Metrics::default().with_vllm_omni(capabilities.models.first().map_or("", String::as_str)),
        false => Metrics::default(),
    };
    let shared = Arc::new(Shared {
        catalog: Catalog::new(Arc::new(capabilities), cfg.naming).with_strict(cfg.strict),
        engine,
        max_message_bytes: max_message_bytes(&cfg.session),
        options: Arc::new(cfg.session),
        shutdown_grace: cfg.shutdown_grace,
        engine_event_queue: cfg.engine_event_queue.max(1),
        started_unix: SystemTime::now().duration_since(UNIX_EPOCH).map(|d| d.as_secs()).unwrap_or(0),
        api_key: cfg.api_key.filter(|key| !key.is_empty()),
        max_connections: cfg.max_connections,
        header_timeout: cfg.header_timeout,
        first_byte_timeout: cfg.first_byte_timeout.min(cfg.header_timeout),
        body_timeout: cfg.body_timeout,
        write_timeout: cfg.write_timeout,
        sockets: Sockets::new(max_sockets, max_slots, cfg.max_connections_per_ip),
        turned_away: turned_away_response(503, "Service Unavailable", "ServiceUnavailableError", TOO_MANY_SOCKETS),
        turned_away_peer: turned_away_response(429, "Too Many Requests", "RateLimitError", TOO_MANY_FROM_PEER),
        metrics,
        draining: AtomicBool::new(false),
    });
    let shadowed = shared.catalog.shadowed_aliases();
    if !shadowed.is_empty() {
        warn!(
            aliases = %shadowed.join(", "),
            "voice aliases that are also names of voices: clients naming them get those voices, not the alias"
        );
    }
    shared.metrics.sockets_max.store(max_sockets as u64, Ordering::Relaxed);
    info!(
        max_sockets,
        max_connections = max_slots,
        max_connections_per_ip = ?cfg.max_connections_per_ip,
        first_byte_timeout = ?shared.first_byte_timeout,
        descriptor_limit = ?descriptor_limit(),
        "socket budget"
    );
    let (stop_tx, stop_rx) = watch::channel(false);
    let mut connections = JoinSet::new();
    // Connections only told "no" (at capacity, or draining); not waited for at shutdown.
    let mut refusals = JoinSet::new();
    let mut drain_deadline = None;
    info!(addr = %listener.local_addr()?, "listening");
    if let Some((listener, _)) = &wyoming {
        info!(addr = %listener.local_addr()?, "wyoming listening");
    }
    if let Some(listener) = &agent {
        info!(addr = %listener.local_addr()?, "agent-check listening");
    }
    tokio::pin!(shutdown);
    // While draining the listener stays open, so load balancers can see `/ready` turn 503 and
    // new work is answered with a refusal they can retry elsewhere, until the connections in
    // flight have finished (or the grace is over).
    loop {
        if drain_deadline.is_some() && connections.is_empty() {
            break;
        }
        // Too many sockets closing to make room: leave new ones in the backlog a moment.
        let congested = shared.sockets.congested();
        tokio::select! {
            _ = shared.sockets.room(), if congested => {}
            _ = &mut shutdown, if drain_deadline.is_none() => {
                info!(
                    connections = connections.len(),
                    grace = ?shared.shutdown_grace,
                    "shutting down: draining, new work is refused"
                );
                shared.draining.store(true, Ordering::Relaxed);
                let _ = stop_tx.send(true);
                drain_deadline = Some(std::time::Instant::now() + shared.shutdown_grace + CLOSE_MARGIN);
            }
            accepted = listener.accept(), if !congested => match accepted {
                Ok((stream, peer)) => {
                    let draining = drain_deadline.is_some();
                    admit(Door::Http, stream, peer, &shared, draining, &stop_rx, &mut connections, &mut refusals);
                }
                Err(e) => {
                    warn!(error = %e, "accept failed");
                    tokio::time::sleep(ACCEPT_BACKOFF).await;
                }
            },
            accepted = accept(wyoming.as_ref().map(|(listener, _)| listener)), if wyoming.is_some() && !congested => match accepted {
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
            // Answered at once and closed, while draining too (it then says so).
            accepted = accept(agent.as_ref()), if agent.is_some() => match accepted {
                Ok((stream, _)) => agent::answer(stream, &shared),
                Err(e) => {
                    warn!(error = %e, "agent-check accept failed");
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
    drop(agent);
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

/// Take an accepted connection on (making room by closing a spare one when the socket budget is
/// full), or turn it away at once with a fixed answer (no spare socket, or its address's share
/// taken). Whether it is served is decided by its first complete request; while draining it is
/// refused in a task that answers clearly.
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
    let id = NEXT_CONNECTION_ID.fetch_add(1, Ordering::Relaxed);
    let socket = match Socket::accept(shared, id, peer.ip()) {
        Ok(socket) => socket,
        Err(why) => {
            shared.metrics.refused(why);
            debug!(%peer, reason = ?why, "turned away at accept");
            // Nothing is read and no task is spawned: the answer fits in the empty send
            // buffer, and dropping the stream closes it.
            let _ = match (door, why) {
                (Door::Http, Refusal::Peer) => stream.try_write(&shared.turned_away_peer),
                (Door::Http, _) => stream.try_write(&shared.turned_away),
                (Door::Wyoming(_), Refusal::Peer) => {
                    stream.try_write(&error_event(codes::BUSY, &TOO_MANY_FROM_PEER.to_ascii_lowercase()))
                }
                (Door::Wyoming(_), _) => {
                    stream.try_write(&error_event(codes::BUSY, &TOO_MANY_SOCKETS.to_ascii_lowercase()))
                }
            };
            return;
        }
    };
    // Without it a small JSON frame after audio can wait for the peer's delayed ACK.
    if let Err(e) = stream.set_nodelay(true) {
        debug!(error = %e, "set TCP_NODELAY failed");
    }
    let refused = draining.then_some(Refusal::Draining);
    let set = match refused {
        Some(why) => {
            shared.metrics.refused(why);
            refusals
        }
        None => connections,
    };
    let (shared, stop) = (shared.clone(), stop_rx.clone());
    match door {
        Door::Http => set.spawn(connection::serve_connection(stream, peer, socket, refused, shared, stop)),
        Door::Wyoming(options) => {
            set.spawn(wyoming::serve_connection(stream, peer, socket, refused, shared, options, stop))
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
    let limit = nofile_limit()?;
    (limit.rlim_cur != libc::RLIM_INFINITY).then(|| usize::try_from(limit.rlim_cur).unwrap_or(usize::MAX))
}

/// The process's limits on open file descriptors, soft and hard.
#[cfg(unix)]
fn nofile_limit() -> Option<libc::rlimit> {
    let mut limit = libc::rlimit { rlim_cur: 0, rlim_max: 0 };
    // SAFETY: getrlimit only writes the struct it is given.
    (unsafe { libc::getrlimit(libc::RLIMIT_NOFILE, &mut limit) } == 0).then_some(limit)
}

#[cfg(not(unix))]
fn descriptor_limit() -> Option<usize> {
    None
}

const TOO_MANY_SOCKETS: &str = "Server has too many open connections; retry later";
const TOO_MANY_FROM_PEER: &str = "Too many open connections from your address; retry later";

fn turned_away_response(status: u16, reason: &str, kind: &str, message: &str) -> Vec<u8> {
    let body = speechstream_core::speech_http::error_json(message, kind, None, status);
    format!(
        "HTTP/1.1 {status} {reason}\r\ncontent-type: application/json\r\ncontent-length: {}\r\nconnection: close\r\n\r\n{body}",
        body.len()
    )
    .into_bytes()
}

/// Bind a listener on `address` (`host:port`, the host a name or an address) with the
/// kernel's largest listen backlog (`somaxconn`), so a burst of connections waits in the queue
/// instead of being dropped into SYN retransmits (tokio's own `bind` asks for 1024).
pub async fn bind(address: &str) -> io::Result<TcpListener> {
    let backlog = listen_backlog();
    let mut last = None;
    for addr in tokio::net::lookup_host(address).await? {
        let socket = if addr.is_ipv4() { tokio::net::TcpSocket::new_v4()? } else { tokio::net::TcpSocket::new_v6()? };
        // As std's and tokio's `bind` do on Unix: a restarted server can listen again at once.
        #[cfg(unix)]
        socket.set_reuseaddr(true)?;
        match socket.bind(addr).and_then(|()| socket.listen(backlog)) {
            Ok(listener) => {
                debug!(%addr, backlog, "bound");
                return Ok(listener);
            }
            Err(e) => last = Some(e),
        }
    }
    Err(last.unwrap_or_else(|| io::Error::new(io::ErrorKind::InvalidInput, format!("{address}: no address to bind"))))
}

/// The kernel's cap on a listen backlog (Linux: `net.core.somaxconn`).
fn listen_backlog() -> u32 {
    std::fs::read_to_string("/proc/sys/net/core/somaxconn")
        .ok()
        .and_then(|text| text.trim().parse::<u32>().ok())
        .filter(|&n| n > 0)
        .map_or(FALLBACK_BACKLOG, |n| n.min(i32::MAX as u32))
}

/// Raise the soft limit on open descriptors to the hard limit, as Go's runtime does at start,
/// so the default socket budget is what the operator allowed rather than the 1024 a shell or
/// service manager starts with. Returns the limits `(soft, hard)` now in force (`None` where
/// they cannot be read; the soft limit unchanged where raising it fails).
pub fn raise_descriptor_limit() -> Option<(u64, u64)> {
    #[cfg(unix)]
    {
        let mut limit = nofile_limit()?;
        if limit.rlim_cur < limit.rlim_max {
            let raised = libc::rlimit { rlim_cur: limit.rlim_max, rlim_max: limit.rlim_max };
            // SAFETY: setrlimit only reads the struct it is given.
            if unsafe { libc::setrlimit(libc::RLIMIT_NOFILE, &raised) } == 0 {
                limit = raised;
            } else {
                warn!(error = %io::Error::last_os_error(), "cannot raise the descriptor limit");
            }
        }
        // rlim_t is u64 on Linux, not on every Unix.
        #[allow(clippy::unnecessary_cast)]
        Some((limit.rlim_cur as u64, limit.rlim_max as u64))
    }
    #[cfg(not(unix))]
    None
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
            ..SessionOptions::default()
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
